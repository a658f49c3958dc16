//! Jobs: the list (filters, keyset paging), one job with its timeline, tracking a job, and a kept
//! delivery's raw request.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{ApiContext, ApiError, Caller, Query, Routes};
use crate::expected;
use crate::merge_point;
use crate::providers::Provider;
use crate::store::deliveries::{self, StoredDelivery};
use crate::store::job::{now_ms, Job, JobKey, JobState, TimelineEvent};
use crate::store::jobs::{self, JobFilter, JobPage};
use crate::store::{groups, timeline};

pub const MAX_LABEL: usize = crate::store::job::MAX_LABEL;

pub fn router() -> Routes {
    Routes::new()
        .devices_too("/jobs", get(list).post(track))
        .devices_too("/jobs/{provider}/{job_id}", get(detail))
        .owner("/jobs/{provider}/{job_id}/untrack", post(untrack))
        .devices_too("/jobs/{provider}/{job_id}/poll", post(poll_now))
        .devices_too("/deliveries/{provider}/{delivery_id}", get(delivery))
}

/// Where a job is in the API's paths (`/api/jobs/{provider}/{job_id}/...`), for its description.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct JobPath {
    /// The provider's name, e.g. `replicate`.
    provider: String,
    /// The job's id at its provider (URL-encoded).
    job_id: String,
}

/// The longest search term (`q`): longer than any id, label or group it could find, and the search
/// index's query is made of its parts (SQLite's trigrams, PostgreSQL's pairs in each range of row
/// ids).
pub const MAX_SEARCH_TERM: usize = 512;

#[utoipa::path(
    get, path = "/api/jobs", operation_id = "list_jobs", tag = "jobs",
    summary = "Jobs, newest first, a page at a time",
    params(
        ("state" = Option<String>, Query, description = "Only jobs in this state (`queued`, `running`, `succeeded`, `failed`, `canceled`, `unknown`, ...)"),
        ("provider" = Option<String>, Query, description = "Only this provider's jobs"),
        ("q" = Option<String>, Query, description = "Search: jobs whose id, label or group holds this text, case folded (at most 512 characters)"),
        ("group" = Option<String>, Query, description = "Only the jobs of this group"),
        ("limit" = Option<u32>, Query, description = "At most this many (1 to 500)"),
        ("cursor" = Option<String>, Query, description = "The previous page's `next_cursor`"),
    ),
    responses((status = 200, description = "A page of jobs", body = JobPage), (status = 400, description = "An unknown state or a search term too long", body = super::ErrorBody))
)]
async fn list(State(ctx): State<Arc<ApiContext>>, Query(filter): Query<JobFilter>) -> Result<Json<JobPage>, ApiError> {
    if let Some(state) = filter.state.as_deref().filter(|s| !s.is_empty()) {
        if JobState::parse(state).is_none() {
            return Err(ApiError::BadRequest(format!("unknown state {state:?}")));
        }
    }
    if filter.q.as_deref().is_some_and(|q| q.chars().count() > MAX_SEARCH_TERM) {
        return Err(ApiError::BadRequest(format!("a search term is at most {MAX_SEARCH_TERM} characters")));
    }
    let (mut page, windows) = ctx
        .services
        .store
        .read(move |conn| {
            let page = jobs::list(conn, &filter)?;
            let windows = expected::windows_of(conn, &page.jobs)?;
            Ok((page, windows))
        })
        .await?;
    ctx.services.changes.expected().show(&windows, &mut page.jobs);
    Ok(Json(page))
}

/// `GET /api/jobs/{provider}/{job_id}`: the job and its timeline, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct JobDetail {
    #[serde(flatten)]
    pub job: Job,
    pub timeline: Vec<TimelineEvent>,
}

#[utoipa::path(
    get, path = "/api/jobs/{provider}/{job_id}", operation_id = "get_job", tag = "jobs",
    summary = "One job and its timeline, oldest first",
    params(JobPath),
    responses((status = 200, description = "The job", body = JobDetail), (status = 404, description = "No such job", body = super::ErrorBody))
)]
async fn detail(State(ctx): State<Arc<ApiContext>>, Path((provider, job_id)): Path<(String, String)>) -> Result<Json<JobDetail>, ApiError> {
    let (job, timeline, windows) = ctx
        .services
        .store
        .read(move |conn| {
            let key = JobKey::new(provider, job_id);
            let job = jobs::job(conn, &key)?;
            let windows = expected::windows_of(conn, job.as_slice())?;
            Ok((job, timeline::of_job(conn, &key)?, windows))
        })
        .await?;
    let mut job = job.ok_or_else(|| ApiError::NotFound("no such job".into()))?;
    ctx.services.changes.expected().show(&windows, std::slice::from_mut(&mut job));
    Ok(Json(JobDetail { job, timeline }))
}

/// `POST /api/jobs`: start watching a job (201 created, 200 if it was already tracked).
#[derive(Debug, Clone, Default, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct TrackRequest {
    pub provider: String,
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub label: Option<String>,
    /// Where to poll the job when its id alone does not say (fal's `status_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub status_url: Option<String>,
    /// The group the job belongs to (a sweep, a batch per shard): its end is announced once
    /// for the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub group: Option<String>,
}

/// A track request that passed the checks: trimmed, empties dropped.
#[derive(Debug, Clone, PartialEq)]
struct ValidTrack {
    provider: String,
    job_id: String,
    label: Option<String>,
    status_url: Option<String>,
    group: Option<String>,
}

/// Why a track request was refused: a field that is wrong (400), or a field the caller may not
/// set (403: a hub's device tracks by provider and id only).
#[derive(Debug, Clone, PartialEq, Eq)]
enum TrackRefusal {
    Invalid(String),
    NotYours(&'static str),
}

impl From<TrackRefusal> for ApiError {
    fn from(refusal: TrackRefusal) -> ApiError {
        match refusal {
            TrackRefusal::Invalid(reason) => ApiError::BadRequest(reason),
            TrackRefusal::NotYours(reason) => ApiError::Forbidden(reason),
        }
    }
}

/// What a device is told when it names more than a provider and an id.
pub const DEVICE_TRACKS_BY_ID_ONLY: &str =
    "a device tracks a job by provider and id only: its label, group and status_url are the hub owner's to set";

/// Checks a track request; the error names the field. `provider` is the named provider, when
/// there is one: it says whether a polling URL may be kept for its jobs (its key goes there).
/// A device may name a provider and a job id and nothing else: where a job is polled from, its
/// label and its group are the owner's (contract §7).
fn validate_track(
    request: TrackRequest,
    caller: &Caller,
    provider: Option<&dyn Provider>,
    known: &str,
) -> Result<ValidTrack, TrackRefusal> {
    let invalid = TrackRefusal::Invalid;
    let Some(provider) = provider else {
        return Err(invalid(format!("unknown provider {:?} (known: {known})", request.provider)));
    };
    let job_id = request.job_id.trim().to_owned();
    crate::providers::job_id::is_a_name(&job_id).map_err(|e| invalid(format!("job_id: {e}")))?;
    provider.check_job_id(&job_id).map_err(|e| invalid(format!("job_id: {e}")))?;
    let label = request.label.map(|l| l.trim().to_owned()).filter(|l| !l.is_empty());
    let status_url = request.status_url.map(|u| u.trim().to_owned()).filter(|u| !u.is_empty());
    let group = request.group.as_deref().map(str::trim).filter(|g| !g.is_empty()).map(str::to_owned);
    if matches!(caller, Caller::Device(_)) && (label.is_some() || status_url.is_some() || group.is_some()) {
        return Err(TrackRefusal::NotYours(DEVICE_TRACKS_BY_ID_ONLY));
    }
    if label.as_ref().is_some_and(|l| l.chars().count() > MAX_LABEL) {
        return Err(invalid(format!("label must be at most {MAX_LABEL} characters")));
    }
    if let Some(url) = &status_url {
        if url.len() > 2048 {
            return Err(invalid("status_url must be at most 2048 characters".into()));
        }
        provider.check_poll_url(url).map_err(|e| invalid(format!("status_url: {e}")))?;
    }
    let group = match group {
        Some(group) => Some(groups::valid_name(&group).map_err(|e| invalid(format!("group: {e}")))?.to_owned()),
        None => None,
    };
    Ok(ValidTrack { provider: request.provider, job_id, label, status_url, group })
}

/// The answer to a track request: the job, and with `?first_poll=wait`, what stopped its first
/// poll from asking the provider, if anything did.
#[derive(Debug, Clone, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct TrackAnswer {
    #[serde(flatten)]
    pub job: Job,
    /// Why the first poll could not ask the provider (no API key, a refused key, a paused
    /// provider, an id the provider does not know), with what to do; `None` when it asked, when it
    /// took longer than `FIRST_POLL_WAIT`, or when it was not waited for.
    pub poll_problem: Option<String>,
}

/// How the caller of a track request wants it answered.
#[derive(Debug, Default, Deserialize)]
struct TrackQuery {
    /// `wait`: answer after the job's first poll (at most `FIRST_POLL_WAIT`), with what it found.
    first_poll: Option<String>,
}

/// The longest a track request waits for the job's first poll (`?first_poll=wait`); the poll
/// goes on after it.
pub const FIRST_POLL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

#[utoipa::path(
    post, path = "/api/jobs", operation_id = "track_job", tag = "jobs",
    summary = "Start watching a job",
    description = "The job is polled at once. With `?first_poll=wait` the answer waits up to 5 s for that poll and says in `poll_problem` why it could not ask the provider (no API key, a refused key, a paused provider). A hub's device names a provider and an id only.",
    params(("first_poll" = Option<String>, Query, description = "`wait`: answer after the job's first poll (at most 5 s)")),
    request_body = TrackRequest,
    responses(
        (status = 201, description = "Tracked", body = TrackAnswer),
        (status = 200, description = "It was tracked already", body = TrackAnswer),
        (status = 400, description = "Refused: an unknown provider, an id the provider could not have, ...", body = super::ErrorBody),
        (status = 403, description = "A device named a label, group or status_url", body = super::ErrorBody),
        (status = 429, description = "A device past its share of provider calls", body = super::ErrorBody),
    )
)]
async fn track(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<TrackQuery>,
    body: Result<Json<TrackRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<TrackAnswer>), ApiError> {
    let Json(request) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let wait = match query.first_poll.as_deref() {
        None => false,
        Some("wait") => true,
        Some(other) => return Err(ApiError::BadRequest(format!("first_poll: {other:?} is not `wait`"))),
    };
    let services = &ctx.services;
    let known = services.providers.names().join(", ");
    let provider = services.providers.get(&request.provider);
    let ValidTrack { provider, job_id, label, status_url, group } = validate_track(request, &caller, provider.as_deref(), &known)?;
    // Its first poll calls the provider with the owner's key.
    ctx.device_calls.take(&caller)?;
    let key = JobKey::new(provider, job_id);
    let tracked = key.clone();
    let (created, job) = services
        .store
        .write(move |tx| merge_point::track(tx, &tracked, label.as_deref(), status_url.as_deref(), group.as_deref(), now_ms()))
        .await?;
    let job = job.ok_or_else(|| ApiError::NotFound("the job was not kept".into()))?;
    services.changes.job_changed(job.clone());
    // Ask the provider right away rather than at the next pass.
    let reconciler = services.reconciler.clone();
    let polled_key = key.clone();
    let first_poll = tokio::spawn(async move {
        let polled = reconciler.poll_job(&polled_key).await;
        if let Err(reason) = &polled {
            tracing::debug!(provider = polled_key.provider, job_id = polled_key.id, %reason, "first poll of a tracked job");
        }
        polled
    });
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    if !wait {
        return Ok((status, Json(TrackAnswer { job, poll_problem: None })));
    }
    let poll_problem = match tokio::time::timeout(FIRST_POLL_WAIT, first_poll).await {
        Ok(Ok(Err(reason))) => Some(poll_problem(&key.provider, &reason.to_string())),
        _ => None,
    };
    let read = key.clone();
    let job = services.store.read(move |conn| jobs::job(conn, &read)).await?.unwrap_or(job);
    Ok((status, Json(TrackAnswer { job, poll_problem })))
}

/// What a failed first poll means for the user: why, and what still ends the job.
fn poll_problem(provider: &str, reason: &str) -> String {
    format!("{provider}'s first poll of it failed: {reason}. A webhook still ends it; once that is fixed (Settings, Providers), it is polled at the next pass")
}

#[utoipa::path(
    get, path = "/api/deliveries/{provider}/{delivery_id}", operation_id = "get_delivery", tag = "jobs",
    summary = "A kept delivery's raw request",
    description = "Headers with credentials masked; the body as received (up to the storage cap), shown to a hub's device only while the owner allows it (`devices_may_read_bodies`).",
    params(("provider" = String, Path, description = "The provider's name"), ("delivery_id" = String, Path, description = "The delivery's id, as on the job's timeline")),
    responses((status = 200, description = "The delivery", body = StoredDelivery), (status = 404, description = "Not kept (or never received)", body = super::ErrorBody))
)]
async fn delivery(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
    Path((provider, delivery_id)): Path<(String, String)>,
) -> Result<Json<StoredDelivery>, ApiError> {
    let mut delivery = ctx
        .services
        .store
        .read(move |conn| deliveries::delivery(conn, &provider, &delivery_id))
        .await?
        .ok_or_else(|| ApiError::NotFound("no such delivery".into()))?;
    if !super::may_read_bodies(&ctx, &caller) {
        delivery.body = super::BODY_HIDDEN.to_owned();
    }
    Ok(Json(delivery))
}

/// What "poll now" did: the job as it is after the poll, and why the poll failed when it did.
#[derive(Debug, Clone, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct PollAnswer {
    pub polled: bool,
    /// Why the provider could not be asked, or what it answered instead of a state.
    pub reason: Option<String>,
    pub job: crate::store::job::Job,
}

/// `POST /api/jobs/{provider}/{job_id}/untrack`: stops watching a job and forgets it (`jobs::untrack`);
/// answers the job as it was, 404 for a job that is not tracked. A webhook that comes later for
/// it starts a new job, as for any job not tracked.
#[utoipa::path(
    post, path = "/api/jobs/{provider}/{job_id}/untrack", operation_id = "untrack_job", tag = "jobs",
    summary = "Stop watching a job and forget it",
    description = "Its row, timeline and notifications go; the live stream says `untracked`.",
    params(JobPath),
    responses((status = 200, description = "The job as it was", body = Job), (status = 404, description = "Not tracked", body = super::ErrorBody))
)]
async fn untrack(State(ctx): State<Arc<ApiContext>>, Path((provider, job_id)): Path<(String, String)>) -> Result<Json<Job>, ApiError> {
    let services = &ctx.services;
    let key = JobKey::new(&provider, &job_id);
    let job = services.store.write(move |tx| jobs::untrack(tx, &key)).await?.ok_or_else(|| ApiError::NotFound("no such job".into()))?;
    tracing::info!(provider, job_id, "untracked");
    services.changes.job_untracked(&provider, &job_id);
    Ok(Json(job))
}

/// `POST /api/jobs/{provider}/{job_id}/poll`: asks the provider about one job now (the
/// scheduled pass is not waited for). 404 for a job that is not tracked.
#[utoipa::path(
    post, path = "/api/jobs/{provider}/{job_id}/poll", operation_id = "poll_job", tag = "jobs",
    summary = "Poll a job now",
    params(JobPath),
    responses(
        (status = 200, description = "The job after the poll, or why it could not be polled", body = PollAnswer),
        (status = 404, description = "No such job", body = super::ErrorBody),
        (status = 429, description = "A device past its share of provider calls", body = super::ErrorBody),
    )
)]
async fn poll_now(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
    Path((provider, job_id)): Path<(String, String)>,
) -> Result<Json<PollAnswer>, ApiError> {
    let store = &ctx.services.store;
    let key = JobKey::new(provider, job_id);
    let read = key.clone();
    if store.read(move |conn| jobs::job(conn, &read)).await?.is_none() {
        return Err(ApiError::NotFound("no such job".into()));
    }
    ctx.device_calls.take(&caller)?;
    let result = ctx.services.reconciler.poll_job(&key).await;
    let job = store.read(move |conn| jobs::job(conn, &key)).await?.ok_or_else(|| ApiError::NotFound("no such job".into()))?;
    Ok(Json(PollAnswer { polled: result.is_ok(), reason: result.err().map(|e| e.to_string()), job }))
}

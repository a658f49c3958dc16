//! The `openai` provider: background responses, batches, fine-tuning jobs, videos and agent
//! sessions. Webhooks are Standard Webhooks-signed events
//! (`{"type":"response.completed","created_at":...,"data":{"id":...}}`); those of jobs only
//! announce terminal transitions, those of agent sessions are hints (see `agent_sessions`).
//! Polling picks the endpoint from the id's prefix (`resp_`, `batch_`, `ftjob-`, `video_`; an eval
//! run cannot be polled; any other id is taken for an agent session). OpenAI sends no sequence
//! number: `seq` is the event's or the object's own time, in milliseconds. OpenAI's times are Unix
//! seconds, read whether integer or fractional.

pub mod agent_sessions;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::discovery::{walk_id_cursor, IdCursorPage, Listed, NextCursor};
use super::generic::urlencode_segment;
use super::job_kind;
use super::standard_webhooks;
use super::vocabulary::{Meaning, Table, WhenUnknown};
use super::{
    fetch_json, same_id, send_cancel, CancelError, Discovered, FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext,
    StatusAnswer, VerifyError,
};
use crate::job::{JobEvent, JobState};

pub const NAME: &str = "openai";
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com";
/// OpenAI's SDK reads `whsec_` + base64, and an unprefixed secret as its own bytes.
pub const SECRET_FORMAT: standard_webhooks::SecretFormat = standard_webhooks::SecretFormat::PrefixedBase64OrRaw;

pub struct Openai {
    ctx: ProviderContext,
}

impl Openai {
    pub fn new(ctx: ProviderContext) -> Openai {
        Openai { ctx }
    }

    /// An agent session and all its root turns (two reads, every page of turns), as jobs.
    async fn fetch_session(&self, base: &str, key: &str, asked: &str) -> Result<StatusAnswer, FetchError> {
        let session_id = agent_sessions::session_of(asked);
        let (beta, version) = agent_sessions::BETA;
        let url = format!("{base}/v1/{}/{}", Kind::AgentSession.path(), urlencode_segment(session_id));
        let session: agent_sessions::AgentSession = fetch_json(self.ctx.get(&url).bearer_auth(key).header(beta, version)).await?;
        same_id(session_id, &session.id)?;
        let mut turns = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..agent_sessions::MAX_TURN_PAGES {
            let mut request = self.ctx.get(&format!("{url}/turns")).bearer_auth(key).header(beta, version);
            request = request.query(&[("limit", "100"), ("order", "asc")]);
            if let Some(after) = after.as_deref() {
                request = request.query(&[("after", after)]);
            }
            // As openai-python's `SyncCursorPage`: the next cursor is the last item's `id` (it
            // never reads `last_id`), while `has_more`.
            let page: IdCursorPage<agent_sessions::Turn> = fetch_json(request).await?;
            after = page.data.last().map(|turn| turn.id.clone()).filter(|_| page.has_more);
            turns.extend(page.data);
            if after.is_none() {
                break;
            }
        }
        if after.is_some() {
            return Err(FetchError::Malformed(format!(
                "the session has more than {} pages of turns; they cannot all be read",
                agent_sessions::MAX_TURN_PAGES
            )));
        }
        agent_sessions::session_status_answer(asked, &session, &turns)
    }
}

/// Every webhook `type`, from openai-python's `UnwrapWebhookEvent` union
/// (`types/webhooks/unwrap_webhook_event.py`), with `video.completed` and `video.failed` (sent
/// by the API, not in the union yet). A response's, batch's, fine-tuning job's, eval run's or
/// video's end is its state; an agent session's is a hint that makes the engine read the session
/// at once (see `agent_sessions`).
pub const WEBHOOK_TYPES: Table = Table {
    provider: NAME,
    key: "openai.webhook.type",
    sdk: "`UnwrapWebhookEvent`",
    entries: &[
        ("response.completed", Meaning::State(JobState::Succeeded, None)),
        ("response.failed", Meaning::State(JobState::Failed, None)),
        ("response.incomplete", Meaning::State(JobState::Failed, Some("the response is incomplete"))),
        ("response.cancelled", Meaning::State(JobState::Canceled, None)),
        ("batch.completed", Meaning::State(JobState::Succeeded, None)),
        ("batch.failed", Meaning::State(JobState::Failed, None)),
        ("batch.expired", Meaning::State(JobState::Failed, Some("the batch expired before it completed"))),
        ("batch.cancelled", Meaning::State(JobState::Canceled, None)),
        ("fine_tuning.job.succeeded", Meaning::State(JobState::Succeeded, None)),
        ("fine_tuning.job.failed", Meaning::State(JobState::Failed, None)),
        ("fine_tuning.job.cancelled", Meaning::State(JobState::Canceled, None)),
        ("eval.run.succeeded", Meaning::State(JobState::Succeeded, None)),
        ("eval.run.failed", Meaning::State(JobState::Failed, None)),
        ("eval.run.canceled", Meaning::State(JobState::Canceled, None)),
        ("video.completed", Meaning::State(JobState::Succeeded, None)),
        ("video.failed", Meaning::State(JobState::Failed, None)),
        ("agent.session.created", Meaning::ReadAtOnce(JobState::Queued)),
        ("agent.session.in_progress", Meaning::ReadAtOnce(JobState::Running)),
        ("agent.session.idle", Meaning::ReadAtOnce(JobState::Running)),
        ("agent.session.action_required", Meaning::ReadAtOnce(JobState::Running)),
        ("agent.session.failed", Meaning::ReadAtOnce(JobState::Running)),
        ("agent.environment.ready", Meaning::NotAStatus),
        ("agent.environment.suspended", Meaning::NotAStatus),
        ("agent.environment.expired", Meaning::NotAStatus),
        ("agent.environment.failed", Meaning::NotAStatus),
        ("realtime.call.incoming", Meaning::NotAStatus),
        ("live.call.incoming", Meaning::NotAStatus),
        ("live.transport.connected", Meaning::NotAStatus),
        ("live.transport.incoming", Meaning::NotAStatus),
        ("safety.alert.created", Meaning::NotAStatus),
        ("safety.org_alert.created", Meaning::NotAStatus),
        ("safety.warning_issued", Meaning::NotAStatus),
        ("safety.deactivation_issued", Meaning::NotAStatus),
    ],
    when_unknown: WhenUnknown::Ignored,
};

/// A webhook event type as a state, with the error it implies when the event says no more
/// (`WEBHOOK_TYPES`' `State` entries).
pub fn event_state(kind: &str) -> Option<(JobState, Option<&'static str>)> {
    match WEBHOOK_TYPES.get(kind)? {
        Meaning::State(state, reason) => Some((state, reason)),
        _ => None,
    }
}

/// A response's `status` (`Response.status`); `incomplete` counts as failed, with its reason.
pub const RESPONSE_STATUSES: Table = Table {
    provider: NAME,
    key: "openai.response.status",
    sdk: "`Response.status`",
    entries: &[
        ("queued", Meaning::State(JobState::Queued, None)),
        ("in_progress", Meaning::State(JobState::Running, None)),
        ("completed", Meaning::State(JobState::Succeeded, None)),
        ("failed", Meaning::State(JobState::Failed, None)),
        ("incomplete", Meaning::State(JobState::Failed, Some("incomplete, with its reason"))),
        ("cancelled", Meaning::State(JobState::Canceled, None)),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// A batch's `status` (`Batch.status`).
pub const BATCH_STATUSES: Table = Table {
    provider: NAME,
    key: "openai.batch.status",
    sdk: "`Batch.status`",
    entries: &[
        ("validating", Meaning::State(JobState::Queued, None)),
        ("in_progress", Meaning::State(JobState::Running, None)),
        ("finalizing", Meaning::State(JobState::Running, None)),
        ("cancelling", Meaning::State(JobState::Running, None)),
        ("completed", Meaning::State(JobState::Succeeded, None)),
        ("failed", Meaning::State(JobState::Failed, None)),
        ("expired", Meaning::State(JobState::Failed, Some("not completed within its window"))),
        ("cancelled", Meaning::State(JobState::Canceled, None)),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// A fine-tuning job's `status` (`FineTuningJob.status`).
pub const FINE_TUNING_STATUSES: Table = Table {
    provider: NAME,
    key: "openai.fine_tuning_job.status",
    sdk: "`FineTuningJob.status`",
    entries: &[
        ("validating_files", Meaning::State(JobState::Queued, None)),
        ("queued", Meaning::State(JobState::Queued, None)),
        ("running", Meaning::State(JobState::Running, None)),
        ("succeeded", Meaning::State(JobState::Succeeded, None)),
        ("failed", Meaning::State(JobState::Failed, None)),
        ("cancelled", Meaning::State(JobState::Canceled, None)),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// A video's `status` (`Video.status`).
pub const VIDEO_STATUSES: Table = Table {
    provider: NAME,
    key: "openai.video.status",
    sdk: "`Video.status`",
    entries: &[
        ("queued", Meaning::State(JobState::Queued, None)),
        ("in_progress", Meaning::State(JobState::Running, None)),
        ("completed", Meaning::State(JobState::Succeeded, None)),
        ("failed", Meaning::State(JobState::Failed, None)),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// A status's state from its table, `None` when the table does not have it.
fn table_state(table: &Table, status: &str) -> Option<JobState> {
    match table.get(status)? {
        Meaning::State(state, _) => Some(state),
        _ => None,
    }
}

/// A response's `status` (`incomplete` counts as failed).
pub fn response_state(status: &str) -> Option<JobState> {
    table_state(&RESPONSE_STATUSES, status)
}

/// A batch's `status`.
pub fn batch_state(status: &str) -> Option<JobState> {
    table_state(&BATCH_STATUSES, status)
}

/// A fine-tuning job's `status`.
pub fn fine_tuning_state(status: &str) -> Option<JobState> {
    table_state(&FINE_TUNING_STATUSES, status)
}

/// A video's `status`.
pub fn video_state(status: &str) -> Option<JobState> {
    table_state(&VIDEO_STATUSES, status)
}

/// The API base URL in force: `NEVERMISS_OPENAI_BASE_URL`, the `openai.base_url` setting, else
/// the real API.
pub fn base_url(ctx: &ProviderContext) -> String {
    ctx.settings.base_url(NAME).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned())
}

const KNOWN_EVENTS: &str = "response.*, batch.*, fine_tuning.job.*, eval.run.*, video.* or agent.session.*";

/// What an id names, from its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Response,
    Batch,
    FineTuningJob,
    Video,
    EvalRun,
    /// Any other id: an agent session, or one of its turns or waits (see `agent_sessions`).
    AgentSession,
}

impl Kind {
    pub fn of(id: &str) -> Kind {
        match id {
            _ if id.starts_with("resp_") => Kind::Response,
            _ if id.starts_with("batch_") => Kind::Batch,
            _ if id.starts_with("ftjob-") => Kind::FineTuningJob,
            _ if id.starts_with("video_") => Kind::Video,
            _ if id.starts_with("evalrun_") => Kind::EvalRun,
            _ => Kind::AgentSession,
        }
    }

    /// The API path of this kind's objects.
    fn path(self) -> &'static str {
        match self {
            Kind::Response => "responses",
            Kind::Batch => "batches",
            Kind::FineTuningJob => "fine_tuning/jobs",
            Kind::Video => "videos",
            Kind::EvalRun => "evals/runs",
            Kind::AgentSession => "agents/sessions",
        }
    }
}

/// Unix seconds, integer or fractional, as milliseconds (`None` for a time no clock can give).
pub fn secs_to_ms(secs: f64) -> Option<i64> {
    let ms = (secs * 1000.0).round();
    (ms.is_finite() && ms.abs() < 1e15).then_some(ms as i64)
}

/// Serde readers of OpenAI's times (Unix seconds, integer or fractional) as milliseconds.
mod unix_secs {
    use serde::{de::Error, Deserialize, Deserializer};

    pub fn ms<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let secs = f64::deserialize(d)?;
        super::secs_to_ms(secs).ok_or_else(|| D::Error::custom(format!("{secs} is not a time")))
    }

    pub fn opt_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(secs) => super::secs_to_ms(secs).map(Some).ok_or_else(|| D::Error::custom(format!("{secs} is not a time"))),
        }
    }
}

/// `{"code":...,"message":...}` as one line.
#[derive(Debug, Deserialize)]
pub(crate) struct ApiError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl ApiError {
    fn line(&self) -> Option<String> {
        match (self.code.as_deref(), self.message.as_deref()) {
            (Some(code), Some(message)) => Some(format!("{code}: {message}")),
            (None, Some(message)) => Some(message.to_owned()),
            (Some(code), None) => Some(code.to_owned()),
            (None, None) => None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

/// The fields a response and a video share.
#[derive(Debug, Deserialize)]
struct Lifecycle {
    id: String,
    status: String,
    #[serde(deserialize_with = "unix_secs::ms")]
    created_at: i64,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    completed_at: Option<i64>,
    #[serde(default)]
    error: Option<ApiError>,
}

/// `GET /v1/responses/{id}`, the fields NeverMiss reads.
#[derive(Debug, Deserialize)]
struct ResponseObject {
    #[serde(flatten)]
    life: Lifecycle,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    /// `Response.output`: its messages' text is the job's result.
    #[serde(default)]
    output: Option<Value>,
    /// `Response.metadata`: `nevermiss_group` puts the job in a group.
    #[serde(default)]
    metadata: Option<Metadata>,
    /// `Response.model`: its kind's model.
    #[serde(default)]
    model: Option<String>,
}

/// The SDK's `Metadata` (string keys and values) of a response, batch or fine-tuning job.
type Metadata = std::collections::HashMap<String, String>;

#[derive(Debug, Deserialize)]
struct BatchErrors {
    #[serde(default)]
    data: Vec<ApiError>,
}

#[derive(Debug, Deserialize)]
struct BatchCounts {
    #[serde(default)]
    total: i64,
    #[serde(default)]
    completed: i64,
    #[serde(default)]
    failed: i64,
}

/// `GET /v1/batches/{id}`, the fields NeverMiss reads.
#[derive(Debug, Deserialize)]
struct Batch {
    id: String,
    status: String,
    #[serde(deserialize_with = "unix_secs::ms")]
    created_at: i64,
    #[serde(default)]
    completion_window: Option<String>,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    in_progress_at: Option<i64>,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    finalizing_at: Option<i64>,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    completed_at: Option<i64>,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    failed_at: Option<i64>,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    expired_at: Option<i64>,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    cancelling_at: Option<i64>,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    cancelled_at: Option<i64>,
    #[serde(default)]
    errors: Option<BatchErrors>,
    #[serde(default)]
    request_counts: Option<BatchCounts>,
    #[serde(default)]
    output_file_id: Option<String>,
    #[serde(default)]
    error_file_id: Option<String>,
    #[serde(default)]
    metadata: Option<Metadata>,
}

/// `GET /v1/fine_tuning/jobs/{id}`, the fields NeverMiss reads.
#[derive(Debug, Deserialize)]
struct FineTuningJob {
    id: String,
    status: String,
    #[serde(deserialize_with = "unix_secs::ms")]
    created_at: i64,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    finished_at: Option<i64>,
    #[serde(default)]
    error: Option<ApiError>,
    #[serde(default)]
    fine_tuned_model: Option<String>,
    #[serde(default)]
    metadata: Option<Metadata>,
    /// `FineTuningJob.model`, the base model tuned: its kind's model.
    #[serde(default)]
    model: Option<String>,
}

/// `GET /v1/videos/{id}`, the fields NeverMiss reads.
#[derive(Debug, Deserialize)]
struct Video {
    #[serde(flatten)]
    life: Lifecycle,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    progress: Option<f64>,
    /// `Video.seconds` and `Video.size` (strings in the SDK's types).
    #[serde(default)]
    seconds: Option<String>,
    #[serde(default)]
    size: Option<String>,
}

/// `seq_ms` and `finished_ms` are milliseconds (read from OpenAI's seconds).
fn event(job_id: &str, state: JobState, seq_ms: i64, finished_ms: Option<i64>) -> JobEvent {
    JobEvent {
        group: None,
        provider: NAME.into(),
        job_id: job_id.to_owned(),
        state,
        seq: seq_ms,
        label: None,
        finished_at: if state.is_terminal() { finished_ms } else { None },
        // Set from the object's own `created_at` by a poll; a webhook's `created_at` is the
        // event's time, not the job's, so a webhook carries no start.
        started_at: None,
        error: None,
        detail: None,
        result: None,
        provider_url: None,
        kind: None,
    }
}

/// The state a polled object's `status` stands for, and the reason to show for one NeverMiss does
/// not know (the job stays running: `WhenUnknown::KeepsRunning`).
fn known_status(table: &Table, status: &str, job_id: &str) -> (JobState, Option<String>) {
    let read = table.state(status, job_id);
    (read.state, read.unknown.and(read.reason))
}

/// A polled object's event when its own times say it all: its creation is its start, and it is
/// unchanged while the object is (its creation, then its end).
fn polled_event(job_id: &str, state: JobState, created_at: i64, finished_at: Option<i64>) -> JobEvent {
    let seq = finished_at.unwrap_or(created_at).max(created_at);
    JobEvent { started_at: Some(created_at), ..event(job_id, state, seq, finished_at) }
}

fn response_event(job_id: &str, response: ResponseObject) -> Result<JobEvent, FetchError> {
    let (r, incomplete_details, output) = (response.life, response.incomplete_details, response.output);
    let group = crate::store::groups::from_metadata(response.metadata.as_ref());
    same_id(job_id, &r.id)?;
    let (state, unknown) = known_status(&RESPONSE_STATUSES, &r.status, job_id);
    let mut ev = polled_event(job_id, state, r.created_at, r.completed_at);
    ev.error = match r.status.as_str() {
        "incomplete" => {
            Some(format!("incomplete: {}", incomplete_details.and_then(|d| d.reason).unwrap_or_else(|| "no reason given".into())))
        }
        "failed" => Some(r.error.and_then(|e| e.line()).unwrap_or_else(|| "the response failed".into())),
        _ => None,
    };
    ev.detail = unknown;
    ev.result = output.as_ref().filter(|_| state.is_terminal()).and_then(crate::result::openai_response);
    ev.group = group;
    ev.kind = Some(job_kind::of(NAME, "response", response.model.as_deref()));
    Ok(ev)
}

fn batch_event(job_id: &str, b: Batch) -> Result<JobEvent, FetchError> {
    same_id(job_id, &b.id)?;
    let (state, unknown) = known_status(&BATCH_STATUSES, &b.status, job_id);
    // The latest transition time (`expires_at` is a deadline, not a transition).
    let seq =
        [Some(b.created_at), b.in_progress_at, b.finalizing_at, b.completed_at, b.failed_at, b.expired_at, b.cancelling_at, b.cancelled_at]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(b.created_at);
    let finished = b.completed_at.or(b.failed_at).or(b.expired_at).or(b.cancelled_at);
    let mut ev = event(job_id, state, seq, finished);
    ev.started_at = Some(b.created_at);
    ev.group = crate::store::groups::from_metadata(b.metadata.as_ref());
    ev.kind = Some(job_kind::of(NAME, "batch", None));
    ev.error = match b.status.as_str() {
        "failed" => Some(b.errors.and_then(|e| e.data.into_iter().find_map(|d| d.line())).unwrap_or_else(|| "the batch failed".into())),
        "expired" => Some(format!("expired: not completed within its {} window", b.completion_window.as_deref().unwrap_or("completion"))),
        _ => None,
    };
    ev.detail = b.request_counts.as_ref().filter(|c| c.total > 0).map(|c| {
        if c.failed > 0 {
            format!("{} of {} requests completed, {} failed", c.completed, c.total, c.failed)
        } else {
            format!("{} of {} requests completed", c.completed, c.total)
        }
    });
    ev.detail = unknown.or(ev.detail);
    if state.is_terminal() {
        let counts = b.request_counts.as_ref();
        ev.result = crate::result::openai_batch(
            counts.map_or(0, |c| c.completed),
            counts.map_or(0, |c| c.failed),
            counts.map_or(0, |c| c.total),
            b.output_file_id.as_deref(),
            b.error_file_id.as_deref(),
        );
    }
    Ok(ev)
}

impl Listed for Batch {
    fn created_ms(&self) -> Option<i64> {
        Some(self.created_at)
    }

    fn into_event(self) -> Result<JobEvent, String> {
        let id = self.id.clone();
        batch_event(&id, self).map_err(|e| e.to_string())
    }

    fn list_id(&self) -> Option<&str> {
        Some(&self.id)
    }
}

/// Discovery: the account's batches created at or after `since_ms`, newest first.
async fn list_batches(ctx: &ProviderContext, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
    let key = ctx.api_key(NAME)?;
    let url = format!("{}/v1/batches", base_url(ctx));
    walk_id_cursor::<Batch, _>(NAME, since_ms, max_jobs, ("after", NextCursor::LastItemId), || {
        ctx.get(&url).bearer_auth(&key).query(&[("limit", "100")])
    })
    .await
}

fn fine_tuning_event(job_id: &str, j: FineTuningJob) -> Result<JobEvent, FetchError> {
    same_id(job_id, &j.id)?;
    let (state, unknown) = known_status(&FINE_TUNING_STATUSES, &j.status, job_id);
    let mut ev = polled_event(job_id, state, j.created_at, j.finished_at);
    ev.group = crate::store::groups::from_metadata(j.metadata.as_ref());
    ev.kind = Some(job_kind::of(NAME, "fine_tuning", j.model.as_deref()));
    if j.status == "failed" {
        ev.error = Some(j.error.and_then(|e| e.line()).unwrap_or_else(|| "the fine-tuning job failed".into()));
    }
    if state.is_terminal() {
        ev.result = crate::result::openai_fine_tuning(j.fine_tuned_model.as_deref());
    }
    ev.detail = unknown.or_else(|| j.fine_tuned_model.filter(|m| !m.is_empty()).map(|m| format!("model {m}")));
    Ok(ev)
}

fn video_event(job_id: &str, video: Video) -> Result<JobEvent, FetchError> {
    let (v, model, progress) = (video.life, video.model, video.progress);
    let made = crate::result::openai_video(video.seconds.as_deref(), video.size.as_deref());
    same_id(job_id, &v.id)?;
    let (state, unknown) = known_status(&VIDEO_STATUSES, &v.status, job_id);
    // While it runs, its progress moves it forward within the rank (a percentage, at most 100).
    let progress = progress.filter(|p| p.is_finite()).map_or(0, |p| p.clamp(0.0, 100.0) as i64);
    let seq = v.completed_at.unwrap_or(v.created_at + progress).max(v.created_at);
    let mut ev = event(job_id, state, seq, v.completed_at);
    if state == JobState::Failed {
        ev.error = Some(v.error.and_then(|e| e.line()).unwrap_or_else(|| "the video failed".into()));
    }
    ev.kind = Some(job_kind::of(NAME, "video", model.as_deref()));
    ev.label = model.filter(|m| !m.is_empty());
    ev.detail = unknown;
    ev.result = made.filter(|_| state == JobState::Succeeded);
    Ok(ev)
}

#[async_trait]
impl Provider for Openai {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A token of letters, digits, `_`, `-` and `.`: `resp_...`, `batch_...`, `ftjob-...`,
    /// `video_...`, `evalrun_...`, or an agent session's id (whose beginning the SDK does not
    /// name, so any other token is taken as one).
    fn check_job_id(&self, job_id: &str) -> Result<(), crate::BadJobId> {
        if crate::job_id::is_a_token(job_id, &['_', '-', '.']) {
            return Ok(());
        }
        Err(crate::BadJobId::NotItsShape {
            provider: NAME,
            shape: "resp_..., batch_..., ftjob-..., video_..., evalrun_... or an agent session's id (letters, digits, _, - and .)",
            job_id: job_id.to_owned(),
        })
    }

    /// Where the secret is set, except for agent sessions: their webhooks are hints that trigger
    /// a poll, so every end of a turn is learned by polling.
    fn webhook_expected(&self, job_id: &str) -> bool {
        Kind::of(job_id) != Kind::AgentSession && self.ctx.has_webhook_secret(NAME)
    }

    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        standard_webhooks::verify_with_stored_secret(&self.ctx, NAME, SECRET_FORMAT, headers, body)
    }

    fn secret_format(&self) -> Option<standard_webhooks::SecretFormat> {
        Some(SECRET_FORMAT)
    }

    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        let envelope = standard_webhooks::Envelope::read_typed(headers, body, "/data/id", "/type");
        // The type first: an event NeverMiss does not act on is ignored whatever its data holds
        // (`realtime.call.incoming` has no `data.id`).
        if let Some(kind) = envelope.event_type().filter(|k| event_state(k).is_none() && agent_sessions::webhook_state(k).is_none()) {
            return Err(envelope
                .ignore(format!("event type {kind:?} is not acted on (NeverMiss acts on {KNOWN_EVENTS})"))
                .of_unknown_type(&WEBHOOK_TYPES, kind));
        }
        let (delivery, id, body) = envelope.require("data.id")?;
        let reject = |reason: String| envelope.reject(reason);
        let kind = envelope.event_type().ok_or_else(|| reject("the event has no type".into()))?;
        let created_at = body
            .get("created_at")
            .and_then(Value::as_f64)
            .and_then(secs_to_ms)
            .ok_or_else(|| reject("the event has no created_at (Unix seconds)".into()))?;
        if let Some(hint) = agent_sessions::webhook_state(kind) {
            // Thin: which turn ended, and how, is asked of the session right away.
            let mut ev = event(&id, hint, created_at, None);
            ev.detail = Some(match body.pointer("/data/required_action/type").and_then(Value::as_str) {
                Some(action) => format!("{kind} ({action}): asking the session what happened"),
                None => format!("{kind}: asking the session what happened"),
            });
            return Ok(ParsedDelivery { delivery_id: delivery, event: ev });
        }
        let (state, error) = event_state(kind).ok_or_else(|| reject(format!("unknown event type {kind:?} (expected {KNOWN_EVENTS})")))?;
        let mut ev = event(&id, state, created_at, Some(created_at));
        ev.error = error.map(str::to_owned);
        Ok(ParsedDelivery { delivery_id: delivery, event: ev })
    }

    /// An agent session's webhook is a hint; every other webhook is thin too (`data.id` and the
    /// event's type): a job's end is read at once, when the API key is set, for what it produced
    /// (the job's result), so a job ended by webhook shows the same result as one ended by polling.
    fn poll_after_push(&self, event: &JobEvent) -> bool {
        match Kind::of(&event.job_id) {
            Kind::AgentSession => true,
            Kind::EvalRun => false,
            _ => event.state.is_terminal() && self.ctx.api_key(NAME).is_ok(),
        }
    }

    fn may_be_stuck(&self, job_id: &str) -> bool {
        // An agent session idles between turns for as long as its user likes; its turns may be stuck.
        Kind::of(job_id) != Kind::AgentSession || agent_sessions::session_of(job_id) != job_id
    }

    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        let answer = self.fetch_statuses(job).await?;
        answer.events.into_iter().find(|e| e.job_id == job.job_id).ok_or(FetchError::NotFound)
    }

    async fn fetch_statuses(&self, job: &JobRef) -> Result<StatusAnswer, FetchError> {
        let id = job.job_id.as_str();
        let kind = Kind::of(id);
        if kind == Kind::EvalRun {
            return Err(FetchError::Unpollable(
                "an eval run can only be fetched with its eval's id, which its webhook does not carry".into(),
            ));
        }
        let key = self.ctx.api_key(NAME)?;
        let base = base_url(&self.ctx);
        if kind == Kind::AgentSession {
            return self.fetch_session(&base, &key, id).await;
        }
        let url = format!("{base}/v1/{}/{}", kind.path(), urlencode_segment(id));
        let request = self.ctx.get(&url).bearer_auth(key);
        // A status NeverMiss does not know keeps the job running, shown and counted.
        let unknown = |table: &Table, status: &str| table.state(status, id).unknown;
        Ok(match kind {
            Kind::Response => {
                let r: ResponseObject = fetch_json(request).await?;
                let unknown = unknown(&RESPONSE_STATUSES, &r.life.status);
                StatusAnswer::one(response_event(id, r)?).with_unknown(unknown)
            }
            Kind::Batch => {
                let b: Batch = fetch_json(request).await?;
                let unknown = unknown(&BATCH_STATUSES, &b.status);
                StatusAnswer::one(batch_event(id, b)?).with_unknown(unknown)
            }
            Kind::Video => {
                let v: Video = fetch_json(request).await?;
                let unknown = unknown(&VIDEO_STATUSES, &v.life.status);
                StatusAnswer::one(video_event(id, v)?).with_unknown(unknown)
            }
            _ => {
                let j: FineTuningJob = fetch_json(request).await?;
                let unknown = unknown(&FINE_TUNING_STATUSES, &j.status);
                StatusAnswer::one(fine_tuning_event(id, j)?).with_unknown(unknown)
            }
        })
    }

    /// A response's, batch's or fine-tuning job's own cancel (`POST /v1/{kind}/{id}/cancel`,
    /// Bearer key, as openai-python's `responses.cancel`, `batches.cancel` and
    /// `fine_tuning.jobs.cancel`); an agent session's turn by the session's cancel event
    /// (`POST /v1/agents/sessions/{id}/events` with `agent.session.input.cancel`, which cancels
    /// the session's active turn, as `beta.agents.sessions.events.create` sends it). Videos, eval
    /// runs, a session itself and its waits have none.
    async fn cancel(&self, job: &JobRef) -> Result<String, CancelError> {
        let id = job.job_id.as_str();
        let kind = Kind::of(id);
        let base = base_url(&self.ctx);
        match kind {
            Kind::Response | Kind::Batch | Kind::FineTuningJob => {
                let key = self.ctx.api_key(NAME).map_err(CancelError::NotAsked)?;
                let url = format!("{base}/v1/{}/{}/cancel", kind.path(), urlencode_segment(id));
                send_cancel(self.ctx.post(&url).bearer_auth(key)).await
            }
            Kind::AgentSession if agent_sessions::is_turn_job(id) => {
                let key = self.ctx.api_key(NAME).map_err(CancelError::NotAsked)?;
                let session = agent_sessions::session_of(id);
                let url = format!("{base}/v1/{}/{}/events", kind.path(), urlencode_segment(session));
                let (beta, version) = agent_sessions::BETA;
                let body = serde_json::json!({"events": [{"type": agent_sessions::CANCEL_EVENT}]});
                send_cancel(self.ctx.post(&url).bearer_auth(key).header(beta, version).header("Accept", "*/*").json(&body)).await
            }
            _ => Err(CancelError::no_cancel()),
        }
    }

    /// Batches can be listed (`GET /v1/batches`); responses cannot (there is no list endpoint).
    fn can_discover(&self) -> bool {
        true
    }

    async fn discover(&self, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
        list_batches(&self.ctx, since_ms, max_jobs).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(id: &str) -> HeaderMap {
        crate::test_headers(id)
    }

    fn provider() -> Openai {
        Openai::new(crate::test_context())
    }

    #[tokio::test]
    async fn parses_the_documented_event() {
        let p = provider();
        let body = br#"{"id":"evt_685343a1381c819085d44c354e1b330e","object":"event","type":"response.completed","created_at":1719168000,"data":{"id":"resp_abc123"}}"#;
        let parsed = p.parse(&headers("wh_685342e6c53c8190a1be43f081506c52"), body).unwrap();
        assert_eq!(parsed.delivery_id, "wh_685342e6c53c8190a1be43f081506c52");
        assert_eq!(parsed.event.job_id, "resp_abc123");
        assert_eq!(parsed.event.state, JobState::Succeeded);
        assert_eq!(parsed.event.seq, 1_719_168_000_000);
        assert_eq!(parsed.event.finished_at, Some(1_719_168_000_000));
        // The event's created_at is when it was sent, not when the job started.
        assert_eq!(parsed.event.started_at, None);
        assert_eq!(parsed.event.provider, "openai");
    }

    #[tokio::test]
    async fn every_event_type() {
        let p = provider();
        let cases = [
            ("response.completed", JobState::Succeeded),
            ("response.failed", JobState::Failed),
            ("response.cancelled", JobState::Canceled),
            ("response.incomplete", JobState::Failed),
            ("batch.completed", JobState::Succeeded),
            ("batch.failed", JobState::Failed),
            ("batch.expired", JobState::Failed),
            ("batch.cancelled", JobState::Canceled),
            ("fine_tuning.job.succeeded", JobState::Succeeded),
            ("fine_tuning.job.failed", JobState::Failed),
            ("fine_tuning.job.cancelled", JobState::Canceled),
            ("eval.run.succeeded", JobState::Succeeded),
            ("eval.run.failed", JobState::Failed),
            ("eval.run.canceled", JobState::Canceled),
        ];
        for (kind, state) in cases {
            let body = format!(r#"{{"id":"evt_1","object":"event","type":"{kind}","created_at":1719168000,"data":{{"id":"x_1"}}}}"#);
            let ev = p.parse(&headers("wh_1"), body.as_bytes()).unwrap().event;
            assert_eq!(ev.state, state, "{kind}");
        }
        let body = br#"{"type":"response.incomplete","created_at":1,"data":{"id":"resp_1"}}"#;
        assert!(p.parse(&headers("wh_1"), body).unwrap().event.error.unwrap().contains("incomplete"));
    }

    #[tokio::test]
    async fn unusable_events_keep_their_ids() {
        let p = provider();
        let body = br#"{"id":"evt_1","object":"event","type":"response.created","created_at":1719168000,"data":{"id":"resp_9"}}"#;
        let e = p.parse(&headers("wh_9"), body).unwrap_err();
        assert!(e.reason.starts_with("event type \"response.created\" is not acted on"), "{}", e.reason);
        assert_eq!(e.kind, crate::Unusable::Unhandled);
        assert_eq!((e.delivery_id.as_deref(), e.job_id.as_deref()), (Some("wh_9"), Some("resp_9")));
        // Ignored whatever its data holds.
        let call = br#"{"id":"evt_2","object":"event","type":"realtime.call.incoming","created_at":1,"data":{"call_id":"rtc_1"}}"#;
        assert_eq!(p.parse(&headers("wh_10"), call).unwrap_err().kind, crate::Unusable::Unhandled);

        let e = p.parse(&headers("wh_9"), br#"{"type":"batch.completed","data":{"id":"batch_1"}}"#).unwrap_err();
        assert!(e.reason.contains("created_at"));
        assert_eq!(e.kind, crate::Unusable::Malformed);
        assert_eq!(e.job_id.as_deref(), Some("batch_1"));

        let e = p.parse(&headers("wh_9"), br#"{"type":"batch.completed","created_at":1,"data":{}}"#).unwrap_err();
        assert!(e.reason.contains("data.id"));

        let e = p.parse(&headers("wh_9"), b"[]").unwrap_err();
        assert_eq!(e.delivery_id.as_deref(), Some("wh_9"));
    }

    /// A status reader and what it must make of each status.
    type StatusMap<'a> = (fn(&str) -> Option<JobState>, &'a [(&'a str, Option<JobState>)]);

    #[test]
    fn the_status_maps() {
        use JobState::*;
        let maps: [StatusMap; 4] = [
            (
                response_state,
                &[
                    ("queued", Some(Queued)),
                    ("in_progress", Some(Running)),
                    ("completed", Some(Succeeded)),
                    ("failed", Some(Failed)),
                    ("cancelled", Some(Canceled)),
                    ("incomplete", Some(Failed)),
                    ("canceled", None),
                ],
            ),
            (
                batch_state,
                &[
                    ("validating", Some(Queued)),
                    ("in_progress", Some(Running)),
                    ("finalizing", Some(Running)),
                    ("cancelling", Some(Running)),
                    ("completed", Some(Succeeded)),
                    ("failed", Some(Failed)),
                    ("expired", Some(Failed)),
                    ("cancelled", Some(Canceled)),
                    ("queued", None),
                ],
            ),
            (
                fine_tuning_state,
                &[
                    ("validating_files", Some(Queued)),
                    ("running", Some(Running)),
                    ("succeeded", Some(Succeeded)),
                    ("cancelled", Some(Canceled)),
                ],
            ),
            (
                video_state,
                &[
                    ("queued", Some(Queued)),
                    ("in_progress", Some(Running)),
                    ("completed", Some(Succeeded)),
                    ("failed", Some(Failed)),
                    ("cancelled", None),
                ],
            ),
        ];
        for (map, cases) in maps {
            for (status, state) in cases {
                assert_eq!(map(status), *state, "{status}");
            }
        }
    }

    #[test]
    fn a_documented_batch() {
        let body = r#"{
          "id": "batch_abc123", "object": "batch", "endpoint": "/v1/chat/completions",
          "errors": null, "input_file_id": "file-abc123", "completion_window": "24h",
          "status": "completed", "output_file_id": "file-cvaTdG", "error_file_id": "file-HOWS94",
          "created_at": 1711471533, "in_progress_at": 1711471538, "expires_at": 1711557933,
          "finalizing_at": 1711493133, "completed_at": 1711493163, "failed_at": null,
          "expired_at": null, "cancelling_at": null, "cancelled_at": null,
          "request_counts": {"total": 100, "completed": 95, "failed": 5},
          "metadata": {"customer_id": "user_123456789"}
        }"#;
        let ev = batch_event("batch_abc123", serde_json::from_str(body).unwrap()).unwrap();
        assert_eq!(ev.state, JobState::Succeeded);
        assert_eq!(ev.seq, 1_711_493_163_000);
        assert_eq!(ev.finished_at, Some(1_711_493_163_000));
        assert_eq!(ev.started_at, Some(1_711_471_533_000), "the batch's own created_at: the SLA's start");
        assert_eq!(ev.detail.as_deref(), Some("95 of 100 requests completed, 5 failed"));

        let in_progress = body
            .replace(r#""status": "completed""#, r#""status": "in_progress""#)
            .replace(r#""finalizing_at": 1711493133"#, r#""finalizing_at": null"#)
            .replace(r#""completed_at": 1711493163"#, r#""completed_at": null"#);
        let ev = batch_event("batch_abc123", serde_json::from_str(&in_progress).unwrap()).unwrap();
        assert_eq!((ev.state, ev.seq, ev.finished_at), (JobState::Running, 1_711_471_538_000, None));

        let expired = body
            .replace(r#""status": "completed""#, r#""status": "expired""#)
            .replace(r#""completed_at": 1711493163"#, r#""completed_at": null"#)
            .replace(r#""expired_at": null"#, r#""expired_at": 1711557933"#);
        let ev = batch_event("batch_abc123", serde_json::from_str(&expired).unwrap()).unwrap();
        assert_eq!(ev.state, JobState::Failed);
        assert!(ev.error.unwrap().contains("24h"));

        assert!(matches!(batch_event("batch_other", serde_json::from_str(body).unwrap()), Err(FetchError::Malformed(_))));
    }

    #[test]
    fn a_documented_response() {
        let incomplete = r#"{"id":"resp_1","object":"response","created_at":1741476542,"status":"incomplete",
            "background":true,"error":null,"incomplete_details":{"reason":"max_output_tokens"},"model":"o3","output":[]}"#;
        let ev = response_event("resp_1", serde_json::from_str(incomplete).unwrap()).unwrap();
        assert_eq!(ev.state, JobState::Failed);
        assert_eq!(ev.error.as_deref(), Some("incomplete: max_output_tokens"));
        assert_eq!(ev.seq, 1_741_476_542_000);

        let failed = r#"{"id":"resp_1","object":"response","created_at":1741476542,"status":"failed",
            "error":{"code":"server_error","message":"The model failed"},"incomplete_details":null}"#;
        let ev = response_event("resp_1", serde_json::from_str(failed).unwrap()).unwrap();
        assert_eq!(ev.error.as_deref(), Some("server_error: The model failed"));

        // A status NeverMiss does not know keeps the response running, with the status shown.
        let unknown = r#"{"id":"resp_1","created_at":1,"status":"paused"}"#;
        let ev = response_event("resp_1", serde_json::from_str(unknown).unwrap()).unwrap();
        assert_eq!(ev.state, JobState::Running);
        assert!(ev.detail.as_deref().unwrap().contains("\"paused\""), "{ev:?}");
    }

    #[test]
    fn a_documented_fine_tuning_job() {
        let body = r#"{"object":"fine_tuning.job","id":"ftjob-abc123","model":"gpt-4o-mini-2024-07-18",
            "created_at":1721764800,"finished_at":1721767800,"fine_tuned_model":"ft:gpt-4o-mini:org::id",
            "organization_id":"org-123","result_files":["file-abc123"],"status":"succeeded",
            "validation_file":null,"training_file":"file-abc123","trained_tokens":5768,"error":null}"#;
        let ev = fine_tuning_event("ftjob-abc123", serde_json::from_str(body).unwrap()).unwrap();
        assert_eq!((ev.state, ev.seq), (JobState::Succeeded, 1_721_767_800_000));
        assert_eq!(ev.detail.as_deref(), Some("model ft:gpt-4o-mini:org::id"));
    }

    #[tokio::test]
    async fn an_eval_run_is_unpollable_and_other_ids_are_agent_sessions() {
        let p = provider();
        assert!(matches!(p.fetch_status(&JobRef::new("evalrun_1")).await, Err(FetchError::Unpollable(_))));
        assert!(matches!(p.fetch_status(&JobRef::new("resp_1")).await, Err(FetchError::NotConfigured(_))));
        assert_eq!(Kind::of("sess_1.turn_2"), Kind::AgentSession);
        assert!(p.may_be_stuck("sess_1.turn_2") && !p.may_be_stuck("sess_1") && p.may_be_stuck("batch_1"));
    }

    #[tokio::test]
    async fn agent_session_webhooks_are_hints_that_ask_for_a_poll() {
        let p = provider();
        let body = br#"{"id":"evt_1","object":"event","type":"agent.session.action_required","created_at":1796033400,"data":{"id":"sess_1","required_action":{"type":"function_call"}}}"#;
        let ev = p.parse(&headers("wh_1"), body).unwrap().event;
        assert_eq!((ev.job_id.as_str(), ev.state, ev.finished_at), ("sess_1", JobState::Running, None));
        assert_eq!(ev.detail.as_deref(), Some("agent.session.action_required (function_call): asking the session what happened"));
        assert!(p.poll_after_push(&ev));
        assert!(!p.webhook_expected("sess_1.turn_1"));
        let body = br#"{"id":"evt_2","object":"event","type":"agent.session.idle","created_at":1796033400,"data":{"id":"sess_1","environment_type":"none"}}"#;
        assert!(!p.parse(&headers("wh_2"), body).unwrap().event.state.is_terminal());
        let body = br#"{"id":"evt_3","object":"event","type":"agent.environment.ready","created_at":1796033400,"data":{"id":"env_1"}}"#;
        assert_eq!(p.parse(&headers("wh_3"), body).unwrap_err().kind, crate::Unusable::Unhandled);
    }

    #[tokio::test]
    async fn times_are_read_whether_integer_or_fractional() {
        let p = provider();
        let body = br#"{"id":"evt_1","object":"event","type":"video.completed","created_at":1719168000.25,"data":{"id":"video_1"}}"#;
        let ev = p.parse(&headers("wh_1"), body).unwrap().event;
        assert_eq!((ev.job_id.as_str(), ev.state, ev.seq), ("video_1", JobState::Succeeded, 1_719_168_000_250));
        let body = br#"{"id":"evt_2","object":"event","type":"video.failed","created_at":1719168000,"data":{"id":"video_2"}}"#;
        assert_eq!(p.parse(&headers("wh_2"), body).unwrap().event.seq, 1_719_168_000_000);
        let body = br#"{"id":"evt_3","object":"event","type":"video.failed","created_at":"soon","data":{"id":"video_2"}}"#;
        assert!(p.parse(&headers("wh_3"), body).unwrap_err().reason.contains("created_at"));

        let r: ResponseObject =
            serde_json::from_str(r#"{"id":"resp_1","status":"completed","created_at":1719168000.5,"completed_at":1719168010}"#).unwrap();
        assert_eq!((r.life.created_at, r.life.completed_at), (1_719_168_000_500, Some(1_719_168_010_000)));
        assert!(serde_json::from_str::<ResponseObject>(r#"{"id":"resp_1","status":"completed","created_at":"x"}"#).is_err());
    }

    #[test]
    fn a_documented_video() {
        let body = r#"{"id":"video_123","object":"video","created_at":1719168000,"completed_at":1719168100.5,
            "error":null,"expires_at":null,"model":"sora-2","progress":100,"remixed_from_video_id":null,
            "seconds":"8","size":"1280x720","status":"completed"}"#;
        let ev = video_event("video_123", serde_json::from_str(body).unwrap()).unwrap();
        assert_eq!((ev.state, ev.finished_at), (JobState::Succeeded, Some(1_719_168_100_500)));
        assert_eq!(ev.label.as_deref(), Some("sora-2"));
        for (status, state) in [("queued", JobState::Queued), ("in_progress", JobState::Running), ("failed", JobState::Failed)] {
            assert_eq!(video_state(status), Some(state));
        }
        assert_eq!(video_state("cancelled"), None);
        let failed = r#"{"id":"video_9","object":"video","created_at":1719168000,"status":"failed","progress":10,
            "error":{"code":"moderation_blocked","message":"blocked"}}"#;
        let ev = video_event("video_9", serde_json::from_str(failed).unwrap()).unwrap();
        assert_eq!(ev.error.as_deref(), Some("moderation_blocked: blocked"));
    }
}

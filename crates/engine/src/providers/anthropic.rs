//! The `anthropic` provider: Message Batches (polling only, `msgbatch_` ids) and Managed Agents
//! sessions (Standard Webhooks-signed `session.*` events, and polling with the
//! `managed-agents-2026-04-01` beta header). Requests carry `x-api-key` and
//! `anthropic-version: 2023-06-01`. Anthropic sends no sequence number: `seq` is the event's or
//! the object's own time, in milliseconds.
//!
//! **A session is multi-turn, so it is watched as runs.** A session is created `idle`; each user
//! message starts a run (`session.status_running` in its event list); the run ends back in `idle`
//! (`session.status_idle`, whose `stop_reason.type` says why) or with the session
//! (`session.status_terminated`). NeverMiss keeps:
//! - the **session job** (`sesn_...`, the id one tracks): `queued` while it never ran, `running`
//!   once it has, and at its end `canceled` (archived: `archived_at` set) or `failed` (terminated
//!   otherwise). It is polled while it lives and raises no stuck alert (a session idles for days).
//! - one **run job** per run, `sesn_....runN` (N counts the runs from 1 in the session's event list,
//!   labelled "session T, run N"): `running`, then `succeeded` (`end_turn`), `needs_input`
//!   (`requires_action`: a tool permission or a custom tool result is awaited; answering it starts
//!   the next run), `failed` (`retries_exhausted`, or the session terminated during the run) or
//!   `canceled` (the session archived during the run). A `session.status_running` that follows a
//!   reschedule continues the open run.
//!
//! So each job still only moves forward and ends once, one notification each: a session whose
//! runs end, wait for permission, end again and is archived notifies "succeeded" (run 1), "needs
//! input" (run 2), "succeeded" (run 3), "canceled" (the session); an idle session that never ran
//! notifies nothing. A session terminated during a run notifies twice (the run and the session
//! both failed).
//!
//! Both paths reach the same jobs from the same facts: runs are read only from the session
//! (`GET /v1/sessions/{id}`) and its event list (`GET /v1/sessions/{id}/events`, all pages, oldest
//! first). A session webhook is thin (`data.type`, `data.id`): it moves the session job forward
//! (a hint, never a terminal state) and asks for a poll of the session right away
//! (`Provider::poll_after_push`); polling a session or any of its runs merges them all. Sessions
//! therefore need the API key.

use async_trait::async_trait;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::discovery::{walk, walk_id_cursor, ListPage, Listed};
use super::generic::urlencode_segment;
use super::standard_webhooks;
use super::{fetch_json, same_id, Discovered, FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext, StatusAnswer, VerifyError};
use crate::job::{parse_rfc3339, JobEvent, JobState};

pub const NAME: &str = "anthropic";
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const API_VERSION: &str = "2023-06-01";
pub const MANAGED_AGENTS_BETA: &str = "managed-agents-2026-04-01";
/// Anthropic's SDK verifies with the Standard Webhooks library, which decodes the secret as
/// base64 with or without `whsec_`.
pub const SECRET_FORMAT: standard_webhooks::SecretFormat = standard_webhooks::SecretFormat::Base64;
/// Message Batch ids start with this; every other id is taken for a session.
pub const BATCH_PREFIX: &str = "msgbatch_";

pub struct Anthropic {
    ctx: ProviderContext,
}

impl Anthropic {
    pub fn new(ctx: ProviderContext) -> Anthropic {
        Anthropic { ctx }
    }
}

/// What a session webhook's `data.type` says of the session job: a hint, never a terminal state
/// (which run ended and why, or whether a terminated session was archived, is learned by the
/// poll the webhook triggers).
pub fn session_event_state(kind: &str) -> Option<JobState> {
    Some(match kind {
        "session.status_scheduled" => JobState::Queued,
        "session.status_run_started"
        | "session.status_rescheduled"
        | "session.status_idled"
        | "session.status_terminated"
        | "session.archived" => JobState::Running,
        _ => return None,
    })
}

/// What joins a session's id and a run's number in a run job's id: `sesn_....runN` (characters a
/// URL path keeps as they are, unlike `#`).
pub const RUN_SEPARATOR: &str = ".run";

/// A run job's id: `sesn_....runN`.
pub fn run_job_id(session_id: &str, run: usize) -> String {
    format!("{session_id}{RUN_SEPARATOR}{run}")
}

/// The session id and run number of a run job's id.
pub fn parse_run_job_id(job_id: &str) -> Option<(&str, usize)> {
    let (session, run) = job_id.rsplit_once(RUN_SEPARATOR)?;
    Some((session, run.parse().ok().filter(|n| *n > 0)?))
}

/// How a run ended, from its `session.status_idle` event's `stop_reason.type`.
pub fn stop_reason_state(stop_reason: &str) -> (JobState, Option<&'static str>) {
    match stop_reason {
        "end_turn" => (JobState::Succeeded, None),
        "requires_action" => (JobState::NeedsInput, None),
        "retries_exhausted" => (JobState::Failed, Some("the agent gave up after its retries were exhausted")),
        // A reason added later: the run is over, and nothing says it failed.
        _ => (JobState::Succeeded, None),
    }
}

/// A Message Batch's `request_counts`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct RequestCounts {
    #[serde(default)]
    pub processing: i64,
    #[serde(default)]
    pub succeeded: i64,
    #[serde(default)]
    pub errored: i64,
    #[serde(default)]
    pub canceled: i64,
    #[serde(default)]
    pub expired: i64,
}

impl RequestCounts {
    fn total(&self) -> i64 {
        self.processing + self.succeeded + self.errored + self.canceled + self.expired
    }

    /// The non-zero counts, e.g. "98 succeeded, 2 errored".
    pub fn summary(&self) -> String {
        let parts: Vec<String> = [
            (self.succeeded, "succeeded"),
            (self.errored, "errored"),
            (self.canceled, "canceled"),
            (self.expired, "expired"),
            (self.processing, "processing"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if parts.is_empty() {
            "no requests".into()
        } else {
            parts.join(", ")
        }
    }
}

/// A batch's state from its `processing_status` and, once `ended`, its counts: every request
/// errored (or expired) → failed; every request canceled, or none succeeded and some were
/// canceled → canceled; otherwise succeeded.
pub fn batch_state(processing_status: &str, counts: &RequestCounts) -> Option<JobState> {
    Some(match processing_status {
        "in_progress" | "canceling" => JobState::Running,
        "ended" => {
            let total = counts.total();
            if total == 0 || counts.succeeded > 0 {
                JobState::Succeeded
            } else if counts.canceled > 0 {
                JobState::Canceled
            } else {
                // Nothing succeeded and nothing was canceled: all errored or expired.
                JobState::Failed
            }
        }
        _ => return None,
    })
}

/// The API base URL in force: `NEVERMISS_ANTHROPIC_BASE_URL`, the `anthropic.base_url` setting,
/// else the real API.
pub fn base_url(ctx: &ProviderContext) -> String {
    ctx.settings.base_url(NAME).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned())
}

/// `GET /v1/messages/batches/{id}`, the fields NeverMiss reads.
#[derive(Debug, Deserialize)]
struct MessageBatch {
    id: String,
    processing_status: String,
    #[serde(default)]
    request_counts: RequestCounts,
    created_at: String,
    #[serde(default)]
    ended_at: Option<String>,
    #[serde(default)]
    cancel_initiated_at: Option<String>,
}

impl Listed for MessageBatch {
    fn created_ms(&self) -> Option<i64> {
        parse_rfc3339(&self.created_at)
    }

    fn into_event(self) -> Result<JobEvent, String> {
        let id = self.id.clone();
        batch_event(&id, self).map_err(|e| e.to_string())
    }
}

/// A GET of Anthropic's API: the key and the API version every request carries.
fn api_get(ctx: &ProviderContext, url: &str, key: &str) -> reqwest::RequestBuilder {
    ctx.get(url).header("x-api-key", key).header("anthropic-version", API_VERSION)
}

/// Discovery: the account's Message Batches created at or after `since_ms`, newest first.
async fn list_batches(ctx: &ProviderContext, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
    let key = ctx.api_key(NAME)?;
    let url = format!("{}/v1/messages/batches", base_url(ctx));
    walk_id_cursor::<MessageBatch, _>(NAME, since_ms, max_jobs, "after_id", || {
        api_get(ctx, &url, &key).query(&[("limit", "100")])
    })
    .await
}

/// `GET /v1/sessions/{id}`, the fields NeverMiss reads.
#[derive(Debug, Deserialize)]
pub struct Session {
    pub id: String,
    /// `rescheduling`, `running`, `idle` or `terminated`.
    pub status: String,
    #[serde(default)]
    pub archived_at: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub stats: Option<SessionStats>,
}

/// A session's `stats`: `active_seconds` is absent or 0 for a session that never ran.
#[derive(Debug, Default, Deserialize)]
pub struct SessionStats {
    #[serde(default)]
    pub active_seconds: Option<f64>,
}

impl Listed for Session {
    fn created_ms(&self) -> Option<i64> {
        parse_rfc3339(self.created_at.as_deref()?)
    }

    /// A hint, never a terminal state: the session job is then unfinished, so the next poll reads
    /// its runs and its end (a session archived before it was discovered still notifies its runs).
    fn into_event(self) -> Result<JobEvent, String> {
        let never_ran = self.status == "idle" && self.stats.as_ref().and_then(|s| s.active_seconds).unwrap_or(0.0) <= 0.0;
        let (state, detail) = if never_ran && self.archived_at.is_none() {
            (JobState::Queued, "idle: it has not run yet")
        } else {
            (JobState::Running, "discovered: its runs are read by the next poll")
        };
        Ok(JobEvent {
            provider: NAME.into(),
            job_id: self.id.clone(),
            state,
            seq: self.created_ms().ok_or("no created_at")?,
            label: Some(format!("session {}", session_name(&self))),
            finished_at: None,
            started_at: None,
            error: None,
            detail: Some(detail.into()),
        })
    }
}

/// A page of `GET /v1/sessions` (newest first; `next_page`, an opaque cursor, while there are more).
#[derive(Debug, Deserialize)]
struct SessionPage {
    #[serde(default)]
    data: Vec<Session>,
    #[serde(default)]
    next_page: Option<String>,
}

/// Discovery: the account's sessions (archived ones too) created at or after `since_ms`.
async fn list_sessions(ctx: &ProviderContext, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
    let key = ctx.api_key(NAME)?;
    let url = format!("{}/v1/sessions", base_url(ctx));
    walk(NAME, since_ms, max_jobs, |page| {
        let mut request = api_get(ctx, &url, &key)
            .header("anthropic-beta", MANAGED_AGENTS_BETA)
            .query(&[("limit", "100"), ("order", "desc"), ("include_archived", "true")]);
        if let Some(page) = page {
            request = request.query(&[("page", page)]);
        }
        async move {
            let page: SessionPage = fetch_json(request).await?;
            Ok(ListPage { items: page.data, next: page.next_page })
        }
    })
    .await
}

/// One entry of `GET /v1/sessions/{id}/events` (only the `session.status_*` ones are read).
#[derive(Debug, Deserialize)]
pub struct SessionEvent {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub processed_at: Option<String>,
    #[serde(default)]
    pub stop_reason: Option<StopReason>,
}

#[derive(Debug, Deserialize)]
pub struct StopReason {
    #[serde(rename = "type")]
    pub kind: String,
}

/// A page of a session's events: `data`, and `next_page` (an opaque cursor) while there are more.
#[derive(Debug, Deserialize)]
struct SessionEventPage {
    #[serde(default)]
    data: Vec<SessionEvent>,
    #[serde(default)]
    next_page: Option<String>,
}

/// Most pages of a session's events read in one poll (100 events each).
const MAX_EVENT_PAGES: usize = 50;

fn time(value: Option<&str>, field: &str) -> Result<Option<i64>, FetchError> {
    match value.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => parse_rfc3339(s)
            .map(Some)
            .ok_or_else(|| FetchError::Malformed(format!("{field} is not an RFC 3339 time: {s:?}"))),
    }
}

fn batch_event(job_id: &str, b: MessageBatch) -> Result<JobEvent, FetchError> {
    same_id(job_id, &b.id)?;
    let state = batch_state(&b.processing_status, &b.request_counts).ok_or_else(|| {
        FetchError::Malformed(format!("unknown batch processing_status {:?}", b.processing_status))
    })?;
    let created = time(Some(&b.created_at), "created_at")?
        .ok_or_else(|| FetchError::Malformed("the batch has no created_at".into()))?;
    let cancel = time(b.cancel_initiated_at.as_deref(), "cancel_initiated_at")?;
    let ended = time(b.ended_at.as_deref(), "ended_at")?;
    let seq = [Some(created), cancel, ended].into_iter().flatten().max().unwrap_or(created);
    let counts = b.request_counts;
    let error = (state == JobState::Failed).then(|| format!("no request succeeded ({})", counts.summary()));
    Ok(JobEvent {
        provider: NAME.into(),
        job_id: job_id.to_owned(),
        state,
        seq,
        label: None,
        finished_at: if state.is_terminal() { ended } else { None },
        started_at: Some(created),
        error,
        detail: Some(counts.summary()),
    })
}

/// One run of a session, as its event list tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    pub state: JobState,
    pub error: Option<&'static str>,
}

/// The runs of a session, oldest first, from its `session.status_*` events (oldest first) and the
/// session itself (an open run of an archived or terminated session ends with it).
pub fn session_runs(session: &Session, events: &[SessionEvent]) -> Result<Vec<Run>, FetchError> {
    let mut runs: Vec<Run> = Vec::new();
    let mut open: Option<usize> = None;
    for event in events {
        if !event.kind.starts_with("session.status_") {
            continue;
        }
        let at = time(event.processed_at.as_deref(), "processed_at")?
            .ok_or_else(|| FetchError::Malformed(format!("a {} event has no processed_at", event.kind)))?;
        match (event.kind.as_str(), open) {
            // A run starts; after a reschedule, the open run goes on.
            ("session.status_running", None) => {
                runs.push(Run { started_ms: at, ended_ms: None, state: JobState::Running, error: None });
                open = Some(runs.len() - 1);
            }
            ("session.status_idle", Some(i)) => {
                let reason = event.stop_reason.as_ref().map(|r| r.kind.as_str()).unwrap_or("end_turn");
                let (state, error) = stop_reason_state(reason);
                runs[i] = Run { ended_ms: Some(at), state, error, ..runs[i].clone() };
                open = None;
            }
            ("session.status_terminated", Some(i)) => {
                runs[i] = Run {
                    ended_ms: Some(at),
                    state: JobState::Failed,
                    error: Some("the session was terminated during this run"),
                    ..runs[i].clone()
                };
                open = None;
            }
            _ => {}
        }
    }
    if let Some(i) = open {
        let archived = time(session.archived_at.as_deref(), "archived_at")?;
        let updated = time(session.updated_at.as_deref(), "updated_at")?;
        if let Some(at) = archived {
            runs[i] = Run { ended_ms: Some(at), state: JobState::Canceled, error: None, ..runs[i].clone() };
        } else if session.status == "terminated" {
            let at = updated.unwrap_or(runs[i].started_ms);
            runs[i] = Run {
                ended_ms: Some(at),
                state: JobState::Failed,
                error: Some("the session was terminated during this run"),
                ..runs[i].clone()
            };
        }
    }
    Ok(runs)
}

fn session_name(session: &Session) -> String {
    session.title.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| session.id.clone())
}

/// The session job's event (see the module's comment).
pub fn session_job_event(session: &Session, runs: &[Run]) -> Result<JobEvent, FetchError> {
    let archived = time(session.archived_at.as_deref(), "archived_at")?;
    let created = time(session.created_at.as_deref(), "created_at")?;
    let updated = time(session.updated_at.as_deref(), "updated_at")?;
    let (state, error, detail) = if archived.is_some() {
        (JobState::Canceled, None, Some("archived".to_owned()))
    } else {
        match session.status.as_str() {
            "terminated" => (JobState::Failed, Some("the session was terminated".to_owned()), None),
            "running" | "rescheduling" => (JobState::Running, None, Some(format!("run {} in progress", runs.len().max(1)))),
            "idle" if runs.is_empty() => (JobState::Queued, None, Some("idle: it has not run yet".to_owned())),
            "idle" => (JobState::Running, None, Some(format!("idle after {} run(s), waiting for input", runs.len()))),
            other => return Err(FetchError::Malformed(format!("unknown session status {other:?}"))),
        }
    };
    // Stable while the session is unchanged.
    let seq = [created, updated, archived].into_iter().flatten().max().unwrap_or(0);
    Ok(JobEvent {
        provider: NAME.into(),
        job_id: session.id.clone(),
        state,
        seq,
        label: Some(format!("session {}", session_name(session))),
        finished_at: if state.is_terminal() { archived.or(updated) } else { None },
        // A session is multi-turn: its creation is not the start of the run that ends it.
        started_at: None,
        error,
        detail,
    })
}

/// A run job's event.
pub fn run_event(session: &Session, number: usize, run: &Run) -> JobEvent {
    JobEvent {
        provider: NAME.into(),
        job_id: run_job_id(&session.id, number),
        state: run.state,
        seq: run.ended_ms.unwrap_or(run.started_ms),
        label: Some(format!("session {}, run {number}", session_name(session))),
        finished_at: if run.state.is_terminal() { run.ended_ms } else { None },
        // The run's own start: its SLA is measured from when this turn began.
        started_at: Some(run.started_ms),
        error: run.error.map(str::to_owned),
        detail: None,
    }
}

/// Every job a session's poll learns, in the order they are merged: the runs as they ran, then the
/// session (so a whole life learned at once notifies in the order it happened). `NotFound` when
/// the asked job (the session, or one of its runs) is not among them.
pub fn session_answer(asked: &str, session: &Session, events: &[SessionEvent]) -> Result<Vec<JobEvent>, FetchError> {
    let runs = session_runs(session, events)?;
    let mut all: Vec<JobEvent> = runs.iter().enumerate().map(|(i, run)| run_event(session, i + 1, run)).collect();
    all.push(session_job_event(session, &runs)?);
    if !all.iter().any(|e| e.job_id == asked) {
        return Err(FetchError::NotFound);
    }
    Ok(all)
}

#[async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Never: Message Batches have no webhooks, and a session's webhooks are thin hints (they do
    /// not say which run ended nor why) that trigger a poll of the session: every end of a run or
    /// a session is learned by that poll, so none of them is a rescue.
    fn webhook_expected(&self, _job_id: &str) -> bool {
        false
    }

    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        standard_webhooks::verify_with_stored_secret(&self.ctx, NAME, SECRET_FORMAT, headers, body)
    }

    fn secret_format(&self) -> Option<standard_webhooks::SecretFormat> {
        Some(SECRET_FORMAT)
    }

    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        let envelope = standard_webhooks::Envelope::read_typed(headers, body, "/data/id", "/data/type");
        // The type first: thread, vault, deployment, agent and other events NeverMiss does not
        // act on are ignored whatever their data holds.
        if let Some(kind) = envelope.event_type().filter(|k| session_event_state(k).is_none()) {
            return Err(envelope.ignore(format!(
                "event type {kind:?} is not acted on (NeverMiss acts on session.status_run_started, _rescheduled, _idled and _terminated)"
            )));
        }
        let (delivery, id, body) = envelope.require("data.id")?;
        let reject = |reason: String| envelope.reject(reason);
        let kind = envelope.event_type().ok_or_else(|| reject("the event has no data.type".into()))?;
        let state = session_event_state(kind).ok_or_else(|| {
            reject(format!(
                "unknown event type {kind:?} (expected session.status_scheduled, _run_started, _rescheduled, _idled, _terminated or session.archived)"
            ))
        })?;
        let created_at = body
            .get("created_at")
            .and_then(Value::as_str)
            .ok_or_else(|| reject("the event has no created_at".into()))?;
        let at = parse_rfc3339(created_at)
            .ok_or_else(|| reject(format!("created_at is not an RFC 3339 time: {created_at:?}")))?;
        Ok(ParsedDelivery {
            delivery_id: delivery,
            event: JobEvent {
                provider: NAME.into(),
                job_id: id,
                state,
                seq: at,
                label: None,
                finished_at: None,
                // The event's time only (a thin body): no start.
                started_at: None,
                error: None,
                detail: Some(format!("{kind}: asking the session what happened")),
            },
        })
    }

    fn poll_after_push(&self, event: &JobEvent) -> bool {
        // Every session webhook is thin: which run ended, and why, is in the session's events.
        !event.job_id.starts_with(BATCH_PREFIX)
    }

    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        let answer = self.fetch_statuses(job).await?;
        answer.events.into_iter().find(|e| e.job_id == job.job_id).ok_or(FetchError::NotFound)
    }

    async fn fetch_statuses(&self, job: &JobRef) -> Result<StatusAnswer, FetchError> {
        let id = job.job_id.as_str();
        let key = self.ctx.api_key(NAME)?;
        let base = base_url(&self.ctx);
        if id.starts_with(BATCH_PREFIX) {
            let url = format!("{base}/v1/messages/batches/{}", urlencode_segment(id));
            let request = api_get(&self.ctx, &url, &key);
            return Ok(StatusAnswer::one(batch_event(id, fetch_json(request).await?)?));
        }
        let session_id = parse_run_job_id(id).map_or(id, |(session, _)| session);
        let get = |url: &str| api_get(&self.ctx, url, &key).header("anthropic-beta", MANAGED_AGENTS_BETA);
        let url = format!("{base}/v1/sessions/{}", urlencode_segment(session_id));
        let session: Session = fetch_json(get(&url)).await?;
        same_id(session_id, &session.id)?;
        // A session idle that never ran has no runs to read.
        let never_ran = session.status == "idle" && session.stats.as_ref().and_then(|s| s.active_seconds).unwrap_or(0.0) <= 0.0;
        let mut events = Vec::new();
        if !never_ran {
            let events_url = format!("{base}/v1/sessions/{}/events", urlencode_segment(session_id));
            let mut page: Option<String> = None;
            for _ in 0..MAX_EVENT_PAGES {
                let mut query: Vec<(&str, &str)> = vec![("limit", "100"), ("order", "asc")];
                if let Some(cursor) = page.as_deref() {
                    query.push(("page", cursor));
                }
                let answer: SessionEventPage = fetch_json(get(&events_url).query(&query)).await?;
                events.extend(answer.data);
                page = answer.next_page.filter(|p| !p.is_empty());
                if page.is_none() {
                    break;
                }
            }
            if page.is_some() {
                return Err(FetchError::Malformed(format!(
                    "the session has more than {} pages of events; its runs cannot all be read",
                    MAX_EVENT_PAGES
                )));
            }
        }
        Ok(StatusAnswer { events: session_answer(id, &session, &events)?, poll_url: None })
    }

    fn may_be_stuck(&self, job_id: &str) -> bool {
        // A session idles between runs for as long as its user likes; its runs may be stuck.
        job_id.starts_with(BATCH_PREFIX) || parse_run_job_id(job_id).is_some()
    }

    /// Message Batches (`GET /v1/messages/batches`) and sessions (`GET /v1/sessions`) can be listed.
    fn can_discover(&self) -> bool {
        true
    }

    async fn discover(&self, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
        let batches = list_batches(&self.ctx, since_ms, max_jobs).await?;
        let sessions = list_sessions(&self.ctx, since_ms, max_jobs.saturating_sub(batches.events.len())).await?;
        Ok(batches.and(sessions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(id: &str) -> HeaderMap {
        crate::providers::test_headers(id)
    }

    async fn provider() -> (Anthropic, tempfile::TempDir) {
        let (ctx, dir) = crate::providers::test_context().await;
        (Anthropic::new(ctx), dir)
    }

    fn counts(processing: i64, succeeded: i64, errored: i64, canceled: i64, expired: i64) -> RequestCounts {
        RequestCounts { processing, succeeded, errored, canceled, expired }
    }

    #[tokio::test]
    async fn parses_the_documented_session_event() {
        let (p, _dir) = provider().await;
        let body = br#"{"type":"event","id":"wevt_011CZkZYZd9rLmz3ujAcsqEw","created_at":"2026-03-15T10:00:00.250Z","data":{"id":"sesn_011CZkZAtmR3yMPDzynEDxu7","organization_id":"org_011CZkZZAe0sMna4vkBdtrfx","type":"session.status_idled","workspace_id":"wrkspc_011CZkZaBF1tNoB5wlCeusgy"}}"#;
        let parsed = p.parse(&headers("msg_2"), body).unwrap();
        assert_eq!(parsed.delivery_id, "msg_2");
        let ev = parsed.event;
        assert_eq!((ev.provider.as_str(), ev.job_id.as_str()), ("anthropic", "sesn_011CZkZAtmR3yMPDzynEDxu7"));
        // Idle is not "done": a hint for the session job, and a poll to learn which run ended.
        assert_eq!(ev.state, JobState::Running);
        assert_eq!(ev.seq, parse_rfc3339("2026-03-15T10:00:00.250Z").unwrap());
        assert_eq!(ev.finished_at, None);
        assert!(p.poll_after_push(&ev));
    }

    #[tokio::test]
    async fn every_session_event_type_and_unknown_ones() {
        let (p, _dir) = provider().await;
        for (kind, state) in [
            ("session.status_scheduled", JobState::Queued),
            ("session.status_run_started", JobState::Running),
            ("session.status_rescheduled", JobState::Running),
            ("session.status_idled", JobState::Running),
            ("session.status_terminated", JobState::Running),
            ("session.archived", JobState::Running),
        ] {
            let body = format!(r#"{{"type":"event","id":"event_1","created_at":"2026-05-01T12:00:00Z","data":{{"type":"{kind}","id":"sesn_1"}}}}"#);
            let ev = p.parse(&headers("m"), body.as_bytes()).unwrap().event;
            assert_eq!(ev.state, state, "{kind}");
            assert!(!ev.state.is_terminal(), "{kind}");
        }
        let body = br#"{"type":"event","id":"event_1","created_at":"2026-05-01T12:00:00Z","data":{"type":"session.created","id":"sesn_7"}}"#;
        let e = p.parse(&headers("m7"), body).unwrap_err();
        assert!(e.reason.starts_with("event type \"session.created\" is not acted on"), "{}", e.reason);
        assert_eq!(e.kind, crate::providers::Unusable::Unhandled);
        assert_eq!((e.delivery_id.as_deref(), e.job_id.as_deref()), (Some("m7"), Some("sesn_7")));

        let body = br#"{"type":"event","id":"event_1","created_at":"yesterday","data":{"type":"session.status_idled","id":"sesn_7"}}"#;
        let e = p.parse(&headers("m7"), body).unwrap_err();
        assert!(e.reason.contains("RFC 3339"));
        assert_eq!(e.job_id.as_deref(), Some("sesn_7"));

        let body = br#"{"type":"event","data":{"type":"session.status_idled","id":"sesn_7"}}"#;
        assert!(p.parse(&headers("m7"), body).unwrap_err().reason.contains("created_at"));
    }

    #[test]
    fn run_ids_and_stop_reasons() {
        assert_eq!(run_job_id("sesn_1", 3), "sesn_1.run3");
        assert_eq!(parse_run_job_id("sesn_1.run3"), Some(("sesn_1", 3)));
        assert_eq!(parse_run_job_id("sesn_1"), None);
        assert_eq!(parse_run_job_id("sesn_1.run0"), None);
        assert_eq!(parse_run_job_id("sesn_1.runx"), None);
        assert_eq!(stop_reason_state("end_turn").0, JobState::Succeeded);
        assert_eq!(stop_reason_state("requires_action").0, JobState::NeedsInput);
        assert_eq!(stop_reason_state("retries_exhausted").0, JobState::Failed);
    }

    fn session(status: &str, archived_at: Option<&str>) -> Session {
        serde_json::from_value(serde_json::json!({
            "id": "sesn_1", "type": "session", "status": status, "title": "refactor",
            "archived_at": archived_at, "created_at": "2026-05-01T12:00:00Z", "updated_at": "2026-05-01T13:00:00Z",
            "stats": {"active_seconds": 120.5}
        }))
        .unwrap()
    }

    fn events(list: serde_json::Value) -> Vec<SessionEvent> {
        serde_json::from_value(list).unwrap()
    }

    #[test]
    fn runs_from_the_event_list() {
        let list = events(serde_json::json!([
            {"type": "user.message", "id": "sevt_1", "processed_at": "2026-05-01T12:01:00Z"},
            {"type": "session.status_running", "id": "sevt_2", "processed_at": "2026-05-01T12:01:01Z"},
            {"type": "session.status_idle", "id": "sevt_3", "processed_at": "2026-05-01T12:02:00Z", "stop_reason": {"type": "end_turn"}},
            {"type": "session.status_running", "id": "sevt_4", "processed_at": "2026-05-01T12:03:00Z"},
            {"type": "session.status_rescheduled", "id": "sevt_5", "processed_at": "2026-05-01T12:03:30Z"},
            {"type": "session.status_running", "id": "sevt_6", "processed_at": "2026-05-01T12:03:40Z"},
            {"type": "session.status_idle", "id": "sevt_7", "processed_at": "2026-05-01T12:04:00Z", "stop_reason": {"type": "requires_action", "event_ids": ["sevt_9"]}},
            {"type": "session.status_idle", "id": "sevt_8", "processed_at": "2026-05-01T12:04:10Z", "stop_reason": {"type": "requires_action", "event_ids": ["sevt_9"]}},
            {"type": "session.status_running", "id": "sevt_10", "processed_at": "2026-05-01T12:05:00Z"}
        ]));
        let runs = session_runs(&session("running", None), &list).unwrap();
        let states: Vec<JobState> = runs.iter().map(|r| r.state).collect();
        assert_eq!(states, [JobState::Succeeded, JobState::NeedsInput, JobState::Running]);
        assert_eq!(runs[1].started_ms, parse_rfc3339("2026-05-01T12:03:00Z").unwrap());
        assert_eq!(runs[1].ended_ms, Some(parse_rfc3339("2026-05-01T12:04:00Z").unwrap()));

        // Archived during run 3: that run is canceled, and so is the session.
        let archived = session("terminated", Some("2026-05-01T12:06:00Z"));
        let all = session_answer("sesn_1.run2", &archived, &list).unwrap();
        let got: Vec<(&str, JobState)> = all.iter().map(|e| (e.job_id.as_str(), e.state)).collect();
        assert_eq!(
            got,
            [
                ("sesn_1.run1", JobState::Succeeded),
                ("sesn_1.run2", JobState::NeedsInput),
                ("sesn_1.run3", JobState::Canceled),
                ("sesn_1", JobState::Canceled),
            ]
        );
        assert_eq!(all[1].label.as_deref(), Some("session refactor, run 2"));
        assert_eq!(all[3].label.as_deref(), Some("session refactor"));

        // Terminated (not archived) during run 3: failed.
        let all = session_answer("sesn_1", &session("terminated", None), &list).unwrap();
        assert_eq!((all[2].state, all[3].state), (JobState::Failed, JobState::Failed));
        // A run the session does not have.
        assert_eq!(session_answer("sesn_1.run9", &session("idle", None), &list), Err(FetchError::NotFound));
    }

    #[test]
    fn a_session_that_never_ran() {
        let all = session_answer("sesn_1", &session("idle", None), &[]).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].state, JobState::Queued);
        assert_eq!(all[0].job_id, "sesn_1");
        let unknown = r#"{"id":"sesn_1","status":"sleeping","created_at":"2026-05-01T12:00:00Z"}"#;
        assert!(matches!(
            session_answer("sesn_1", &serde_json::from_str(unknown).unwrap(), &[]),
            Err(FetchError::Malformed(_))
        ));
    }

    #[test]
    fn the_batch_state_map() {
        assert_eq!(batch_state("in_progress", &counts(100, 0, 0, 0, 0)), Some(JobState::Running));
        assert_eq!(batch_state("canceling", &counts(50, 50, 0, 0, 0)), Some(JobState::Running));
        assert_eq!(batch_state("ended", &counts(0, 98, 2, 0, 0)), Some(JobState::Succeeded));
        assert_eq!(batch_state("ended", &counts(0, 0, 100, 0, 0)), Some(JobState::Failed));
        assert_eq!(batch_state("ended", &counts(0, 0, 0, 0, 100)), Some(JobState::Failed));
        assert_eq!(batch_state("ended", &counts(0, 0, 0, 100, 0)), Some(JobState::Canceled));
        assert_eq!(batch_state("ended", &counts(0, 0, 10, 90, 0)), Some(JobState::Canceled));
        assert_eq!(batch_state("ended", &counts(0, 1, 0, 99, 0)), Some(JobState::Succeeded));
        assert_eq!(batch_state("ended", &counts(0, 0, 0, 0, 0)), Some(JobState::Succeeded));
        assert_eq!(batch_state("done", &counts(0, 1, 0, 0, 0)), None);
        assert_eq!(counts(0, 98, 2, 0, 0).summary(), "98 succeeded, 2 errored");
        assert_eq!(counts(0, 0, 0, 0, 0).summary(), "no requests");
    }

    #[test]
    fn a_documented_batch() {
        let body = r#"{
          "id": "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF", "type": "message_batch",
          "processing_status": "ended",
          "request_counts": {"processing": 0, "succeeded": 98, "errored": 2, "canceled": 0, "expired": 0},
          "ended_at": "2024-08-20T18:37:24.100435Z", "created_at": "2024-08-20T18:37:24.100435Z",
          "expires_at": "2024-08-20T18:37:24.100435Z", "archived_at": null,
          "cancel_initiated_at": null,
          "results_url": "https://api.anthropic.com/v1/messages/batches/msgbatch_013Zva2CMHLNnXjNJJKqJ2EF/results"
        }"#;
        let ev = batch_event("msgbatch_013Zva2CMHLNnXjNJJKqJ2EF", serde_json::from_str(body).unwrap()).unwrap();
        assert_eq!(ev.state, JobState::Succeeded);
        assert_eq!(ev.detail.as_deref(), Some("98 succeeded, 2 errored"));
        assert_eq!(ev.seq, parse_rfc3339("2024-08-20T18:37:24.100435Z").unwrap());
        assert_eq!(ev.finished_at, Some(ev.seq));
        assert_eq!(ev.error, None);
    }
}

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
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::discovery::{walk, walk_id_cursor, ListPage, Listed, NextCursor};
use super::generic::urlencode_segment;
use super::job_kind;
use super::standard_webhooks;
use super::vocabulary::{Meaning, Status, Table, UnknownValue, WhenUnknown};
use super::{
    fetch_json, same_id, send_cancel, CancelError, Discovered, FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext,
    StatusAnswer, VerifyError,
};
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

/// Every `data.type` of a webhook, from anthropic-sdk-python's `BetaWebhookEventData` union
/// (`types/beta/beta_webhook_event_data.py`). A webhook is thin (`data.type`, `data.id`): every type
/// that says a session's status changed, under its plain name (`session.idled`) or its status name
/// (`session.status_idled`), moves the session job forward as a hint (never a terminal state) and
/// makes the engine read the session at once (`Provider::poll_after_push`): which run ended, and
/// why, is in the session's events. `session.deleted` ends the session and its open run as
/// canceled (a deleted session answers 404: there is nothing left to read).
pub const WEBHOOK_TYPES: Table = Table {
    provider: NAME,
    key: "anthropic.webhook.type",
    sdk: "`BetaWebhookEventData`",
    entries: &[
        ("session.created", Meaning::ReadAtOnce(JobState::Queued)),
        ("session.pending", Meaning::ReadAtOnce(JobState::Queued)),
        ("session.running", Meaning::ReadAtOnce(JobState::Running)),
        ("session.idled", Meaning::ReadAtOnce(JobState::Running)),
        ("session.requires_action", Meaning::ReadAtOnce(JobState::Running)),
        ("session.budget_reached", Meaning::ReadAtOnce(JobState::Running)),
        ("session.archived", Meaning::ReadAtOnce(JobState::Running)),
        ("session.deleted", Meaning::Deleted),
        ("session.status_run_started", Meaning::ReadAtOnce(JobState::Running)),
        ("session.status_rescheduled", Meaning::ReadAtOnce(JobState::Running)),
        ("session.status_idled", Meaning::ReadAtOnce(JobState::Running)),
        ("session.status_terminated", Meaning::ReadAtOnce(JobState::Running)),
        ("session.updated", Meaning::NotAStatus),
        ("session.thread_created", Meaning::NotAStatus),
        ("session.thread_idled", Meaning::NotAStatus),
        ("session.thread_terminated", Meaning::NotAStatus),
        ("session.outcome_evaluation_ended", Meaning::NotAStatus),
        ("vault.created", Meaning::NotAStatus),
        ("vault.archived", Meaning::NotAStatus),
        ("vault.deleted", Meaning::NotAStatus),
        ("vault_credential.created", Meaning::NotAStatus),
        ("vault_credential.archived", Meaning::NotAStatus),
        ("vault_credential.deleted", Meaning::NotAStatus),
        ("vault_credential.refresh_failed", Meaning::NotAStatus),
        ("agent.created", Meaning::NotAStatus),
        ("agent.archived", Meaning::NotAStatus),
        ("agent.deleted", Meaning::NotAStatus),
        ("agent.updated", Meaning::NotAStatus),
        ("deployment.created", Meaning::NotAStatus),
        ("deployment.updated", Meaning::NotAStatus),
        ("deployment.paused", Meaning::NotAStatus),
        ("deployment.unpaused", Meaning::NotAStatus),
        ("deployment.archived", Meaning::NotAStatus),
        ("deployment.deleted", Meaning::NotAStatus),
        ("deployment_run.started", Meaning::NotAStatus),
        ("deployment_run.succeeded", Meaning::NotAStatus),
        ("deployment_run.failed", Meaning::NotAStatus),
        ("environment.created", Meaning::NotAStatus),
        ("environment.updated", Meaning::NotAStatus),
        ("environment.archived", Meaning::NotAStatus),
        ("environment.deleted", Meaning::NotAStatus),
        ("memory_store.created", Meaning::NotAStatus),
        ("memory_store.archived", Meaning::NotAStatus),
        ("memory_store.deleted", Meaning::NotAStatus),
        ("user_profile.enforcement_action_opened", Meaning::NotAStatus),
        ("user_profile.enforcement_action_resolved", Meaning::NotAStatus),
        ("user_profile.program_status_updated", Meaning::NotAStatus),
        ("external_key.failed", Meaning::NotAStatus),
        ("external_key.recovered", Meaning::NotAStatus),
        ("external_storage.failed", Meaning::NotAStatus),
        ("external_storage.recovered", Meaning::NotAStatus),
    ],
    when_unknown: WhenUnknown::Ignored,
};

/// A session's `status` (`BetaManagedAgentsSession.status`), for the session job; its runs are read
/// from the event list.
pub const SESSION_STATUSES: Table = Table {
    provider: NAME,
    key: "anthropic.session.status",
    sdk: "`BetaManagedAgentsSession.status`",
    entries: &[
        ("idle", Meaning::State(JobState::Running, Some("waiting for input (`queued` until its first run)"))),
        ("running", Meaning::State(JobState::Running, None)),
        ("rescheduling", Meaning::State(JobState::Running, None)),
        ("terminated", Meaning::State(JobState::Failed, Some("the session was terminated; `canceled` when archived"))),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// The `type`s of a session's event list NeverMiss reads (`session.status_*` of
/// `BetaManagedAgentsSessionEvent`; the others are messages and tool calls, not status changes).
pub const SESSION_EVENT_TYPES: Table = Table {
    provider: NAME,
    key: "anthropic.session_event.type",
    sdk: "`BetaManagedAgentsSessionEvent`, its `session.status_*` members",
    entries: &[
        ("session.status_running", Meaning::State(JobState::Running, None)),
        ("session.status_rescheduled", Meaning::State(JobState::Running, None)),
        ("session.status_idle", Meaning::EndsBy("stop_reason")),
        ("session.status_terminated", Meaning::State(JobState::Failed, Some("the session was terminated during this run"))),
    ],
    when_unknown: WhenUnknown::Skipped,
};

/// How a run ended, from its `session.status_idle` event's `stop_reason.type`
/// (`BetaManagedAgentsSessionStatusIdleEvent.stop_reason`). Only `end_turn` is a success.
/// `requires_action` and `budget_reached` wait for the user (a tool permission or result; a
/// higher budget): answering resumes the agent, so the run `needs_input`. `refusal` and
/// `retries_exhausted` end the turn with nothing to answer: the run failed.
pub const SESSION_STOP_REASONS: Table = Table {
    provider: NAME,
    key: "anthropic.session_event.stop_reason",
    sdk: "`BetaManagedAgentsSessionStatusIdleEvent.stop_reason`",
    entries: &[
        ("end_turn", Meaning::State(JobState::Succeeded, None)),
        ("requires_action", Meaning::State(JobState::NeedsInput, Some("waiting for a tool permission or a tool result"))),
        ("budget_reached", Meaning::State(JobState::NeedsInput, Some("the session's budget stopped the agent: raise it to continue"))),
        ("refusal", Meaning::State(JobState::Failed, Some("the model's answer was refused"))),
        ("retries_exhausted", Meaning::State(JobState::Failed, Some("the agent gave up after its retries were exhausted"))),
    ],
    when_unknown: WhenUnknown::Fails,
};

/// A Message Batch's `processing_status` (`MessageBatch.processing_status`); an `ended` batch's
/// state is then read from its `request_counts` (`batch_state`).
pub const BATCH_STATUSES: Table = Table {
    provider: NAME,
    key: "anthropic.batch.processing_status",
    sdk: "`MessageBatch.processing_status`",
    entries: &[
        ("in_progress", Meaning::State(JobState::Running, None)),
        ("canceling", Meaning::State(JobState::Running, None)),
        ("ended", Meaning::State(JobState::Succeeded, None)),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// What a session webhook's `data.type` says of the session job: a hint, never a terminal state,
/// or `None` for a type that says nothing of a session (see `WEBHOOK_TYPES`).
pub fn session_event_state(kind: &str) -> Option<JobState> {
    match WEBHOOK_TYPES.get(kind)? {
        Meaning::ReadAtOnce(state) => Some(state),
        Meaning::Deleted => Some(JobState::Canceled),
        Meaning::State(..) | Meaning::NotAStatus | Meaning::EndsBy(_) => None,
    }
}

/// The webhook types that move a session, for the answer to the others.
fn acted_on() -> String {
    WEBHOOK_TYPES
        .entries
        .iter()
        .filter(|(_, m)| matches!(m, Meaning::ReadAtOnce(_) | Meaning::Deleted))
        .map(|(kind, _)| *kind)
        .collect::<Vec<_>>()
        .join(", ")
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

/// How a run ended, from its `session.status_idle` event's `stop_reason.type`
/// (`SESSION_STOP_REASONS`; a reason not in it fails the run, the reason shown and counted).
pub fn stop_reason_state(stop_reason: &str, run_job: &str) -> Status {
    SESSION_STOP_REASONS.state(stop_reason, run_job)
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

/// A batch's state from its `processing_status` (`BATCH_STATUSES`) and, once `ended`, its counts:
/// every request errored (or expired) → failed; every request canceled, or none succeeded and
/// some were canceled → canceled; otherwise succeeded. `None` for a status NeverMiss does not know.
pub fn batch_state(processing_status: &str, counts: &RequestCounts) -> Option<JobState> {
    match (processing_status, BATCH_STATUSES.get(processing_status)?) {
        ("ended", _) => {
            let total = counts.total();
            Some(if total == 0 || counts.succeeded > 0 {
                JobState::Succeeded
            } else if counts.canceled > 0 {
                JobState::Canceled
            } else {
                // Nothing succeeded and nothing was canceled: all errored or expired.
                JobState::Failed
            })
        }
        (_, Meaning::State(state, _)) => Some(state),
        _ => None,
    }
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

/// A POST with the headers every Anthropic request carries.
fn api_post(ctx: &ProviderContext, url: &str, key: &str) -> reqwest::RequestBuilder {
    ctx.post(url).header("x-api-key", key).header("anthropic-version", API_VERSION)
}

/// Discovery: the account's Message Batches created at or after `since_ms`, newest first.
async fn list_batches(ctx: &ProviderContext, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
    let key = ctx.api_key(NAME)?;
    let url = format!("{}/v1/messages/batches", base_url(ctx));
    walk_id_cursor::<MessageBatch, _>(NAME, since_ms, max_jobs, ("after_id", NextCursor::LastId), || {
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
    /// The agent it runs (`BetaManagedAgentsSession.agent`): its runs' kind.
    #[serde(default)]
    pub agent: Option<SessionAgent>,
    /// `BetaManagedAgentsSession.metadata` (string keys and values): `nevermiss_group` puts the
    /// session in a group, as OpenAI's metadata does. Read leniently: a value that is not a string
    /// is skipped, never the session.
    #[serde(default)]
    pub metadata: Option<std::collections::HashMap<String, Value>>,
}

/// A session's agent, the fields NeverMiss reads (`BetaManagedAgentsSessionAgent`).
#[derive(Debug, Deserialize)]
pub struct SessionAgent {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
}

impl Session {
    /// The group its metadata names (`groups::METADATA_KEY`), if a valid one.
    pub fn group(&self) -> Option<String> {
        let metadata = self.metadata.as_ref()?;
        let strings: std::collections::HashMap<String, String> =
            metadata.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect();
        crate::store::groups::from_metadata(Some(&strings))
    }

    /// Its runs' kind: `anthropic/session/<agent>` (the agent's name, else its id).
    pub fn run_kind(&self) -> Option<String> {
        let agent = self.agent.as_ref()?;
        let name = agent.name.as_deref().filter(|n| !n.trim().is_empty()).unwrap_or(&agent.id);
        Some(job_kind::of(NAME, "session", Some(name)))
    }
}

/// A session's `stats` (`BetaManagedAgentsSessionStats`): `active_seconds` is optional, and its
/// absence does not mean the session never ran (NeverMiss reads the event list whatever it holds).
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
        // Whether an idle session ever ran is in its event list, read by the next poll (its
        // `stats.active_seconds` is optional: its absence does not mean it never ran).
        let (state, detail) = if self.status == "idle" && self.archived_at.is_none() {
            (JobState::Queued, "idle: its runs are read by the next poll")
        } else {
            (JobState::Running, "discovered: its runs are read by the next poll")
        };
        Ok(JobEvent {
            group: self.group(),
            provider: NAME.into(),
            job_id: self.id.clone(),
            state,
            seq: self.created_ms().ok_or("no created_at")?,
            label: Some(format!("session {}", session_name(&self))),
            finished_at: None,
            started_at: None,
            error: None,
            detail: Some(detail.into()),
            result: None,
            provider_url: None,
            kind: None,
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
        let mut request = api_get(ctx, &url, &key).header("anthropic-beta", MANAGED_AGENTS_BETA).query(&[
            ("limit", "100"),
            ("order", "desc"),
            ("include_archived", "true"),
        ]);
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
    /// An `agent.message`'s content blocks (its text is a run's result).
    #[serde(default)]
    pub content: Option<Value>,
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
        Some(s) => parse_rfc3339(s).map(Some).ok_or_else(|| FetchError::Malformed(format!("{field} is not an RFC 3339 time: {s:?}"))),
    }
}

fn batch_event(job_id: &str, b: MessageBatch) -> Result<JobEvent, FetchError> {
    Ok(batch_answer(job_id, b)?.0)
}

/// A batch's event, and its `processing_status` when NeverMiss does not know it (the batch then
/// stays running, the status shown).
fn batch_answer(job_id: &str, b: MessageBatch) -> Result<(JobEvent, Option<UnknownValue>), FetchError> {
    same_id(job_id, &b.id)?;
    let (state, unknown) = match batch_state(&b.processing_status, &b.request_counts) {
        Some(state) => (state, None),
        None => {
            let status = BATCH_STATUSES.state(&b.processing_status, job_id);
            (status.state, status.unknown.map(|u| (u, status.reason.unwrap_or_default())))
        }
    };
    let created = time(Some(&b.created_at), "created_at")?.ok_or_else(|| FetchError::Malformed("the batch has no created_at".into()))?;
    let cancel = time(b.cancel_initiated_at.as_deref(), "cancel_initiated_at")?;
    let ended = time(b.ended_at.as_deref(), "ended_at")?;
    let seq = [Some(created), cancel, ended].into_iter().flatten().max().unwrap_or(created);
    let counts = b.request_counts;
    let error = (state == JobState::Failed).then(|| format!("no request succeeded ({})", counts.summary()));
    let detail = match &unknown {
        Some((_, reason)) => format!("{reason}; {}", counts.summary()),
        None => counts.summary(),
    };
    let event = JobEvent {
        group: None,
        provider: NAME.into(),
        job_id: job_id.to_owned(),
        state,
        seq,
        label: None,
        finished_at: if state.is_terminal() { ended } else { None },
        started_at: Some(created),
        error,
        detail: Some(detail),
        // What it produced: its counts (its results are fetched with the API key, not linked).
        result: if state.is_terminal() { crate::result::anthropic_batch(&counts.summary()) } else { None },
        provider_url: None,
        kind: Some(job_kind::of(NAME, "message_batch", None)),
    };
    Ok((event, unknown.map(|(u, _)| u)))
}

/// The event a user sends to interrupt a session's running agent (`BetaManagedAgentsUserInterruptEvent`):
/// the run it interrupts ends canceled when the session goes idle.
pub const INTERRUPT_EVENT: &str = "user.interrupt";

/// One run of a session, as its event list tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    pub state: JobState,
    pub error: Option<String>,
    /// The stop reason NeverMiss did not know, when that decided the run's end.
    pub unknown: Option<UnknownValue>,
    /// The text of the last `agent.message` of the run (its result).
    pub last_message: Option<String>,
}

/// The runs of a session, oldest first, from its `session.status_*` events (oldest first) and the
/// session itself (an open run of an archived or terminated session ends with it).
pub fn session_runs(session: &Session, events: &[SessionEvent]) -> Result<Vec<Run>, FetchError> {
    let terminated = |runs: &[Run], i: usize, at: i64| Run {
        ended_ms: Some(at),
        state: JobState::Failed,
        error: Some("the session was terminated during this run".to_owned()),
        ..runs[i].clone()
    };
    // The open run was interrupted by its user (`user.interrupt`): it ends canceled.
    let mut interrupted = false;
    let mut runs: Vec<Run> = Vec::new();
    let mut open: Option<usize> = None;
    for event in events {
        if event.kind == "agent.message" {
            if let (Some(i), Some(text)) = (open, event.content.as_ref().and_then(crate::result::agent_message_text)) {
                runs[i].last_message = Some(text);
            }
            continue;
        }
        if !event.kind.starts_with("session.status_") {
            interrupted |= event.kind == INTERRUPT_EVENT && open.is_some();
            continue;
        }
        let at = time(event.processed_at.as_deref(), "processed_at")?
            .ok_or_else(|| FetchError::Malformed(format!("a {} event has no processed_at", event.kind)))?;
        match (event.kind.as_str(), open) {
            // A run starts; after a reschedule, the open run goes on.
            ("session.status_running", None) => {
                runs.push(Run { started_ms: at, ended_ms: None, state: JobState::Running, error: None, unknown: None, last_message: None });
                open = Some(runs.len() - 1);
            }
            ("session.status_idle", Some(i)) => {
                let Some(reason) = event.stop_reason.as_ref() else {
                    return Err(FetchError::Malformed(format!("the {} event has no stop_reason", event.kind)));
                };
                let read = stop_reason_state(&reason.kind, &run_job_id(&session.id, i + 1));
                runs[i] = if std::mem::take(&mut interrupted) {
                    Run { ended_ms: Some(at), state: JobState::Canceled, error: None, unknown: None, ..runs[i].clone() }
                } else {
                    let error = read.reason.filter(|_| read.state != JobState::Succeeded);
                    Run { ended_ms: Some(at), state: read.state, error, unknown: read.unknown, ..runs[i].clone() }
                };
                open = None;
            }
            ("session.status_terminated", Some(i)) => {
                runs[i] = terminated(&runs, i, at);
                open = None;
                interrupted = false;
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
            runs[i] = terminated(&runs, i, at);
        }
    }
    Ok(runs)
}

fn session_name(session: &Session) -> String {
    session.title.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| session.id.clone())
}

/// The session job's event (see the module's comment).
pub fn session_job_event(session: &Session, runs: &[Run]) -> Result<(JobEvent, Option<UnknownValue>), FetchError> {
    let archived = time(session.archived_at.as_deref(), "archived_at")?;
    let created = time(session.created_at.as_deref(), "created_at")?;
    let updated = time(session.updated_at.as_deref(), "updated_at")?;
    let status = SESSION_STATUSES.state(&session.status, &session.id);
    let (state, error, detail) = if archived.is_some() {
        (JobState::Canceled, None, Some("archived".to_owned()))
    } else if status.unknown.is_some() {
        (status.state, None, status.reason.clone())
    } else {
        match (session.status.as_str(), status.state) {
            (_, JobState::Failed) => (JobState::Failed, Some("the session was terminated".to_owned()), None),
            ("idle", _) if runs.is_empty() => (JobState::Queued, None, Some("idle: it has not run yet".to_owned())),
            ("idle", _) => (JobState::Running, None, Some(format!("idle after {} run(s), waiting for input", runs.len()))),
            (_, state) => (state, None, Some(format!("run {} in progress", runs.len().max(1)))),
        }
    };
    // Stable while the session is unchanged.
    let seq = [created, updated, archived].into_iter().flatten().max().unwrap_or(0);
    let event = JobEvent {
        // Only the session joins the group its metadata names (its runs notify as before).
        group: session.group(),
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
        result: None,
        provider_url: None,
        // A session lives as long as its user likes: its runs have a duration, it has none.
        kind: None,
    };
    Ok((event, status.unknown.filter(|_| archived.is_none())))
}

/// A run job's event.
pub fn run_event(session: &Session, number: usize, run: &Run) -> JobEvent {
    JobEvent {
        group: None,
        provider: NAME.into(),
        job_id: run_job_id(&session.id, number),
        state: run.state,
        seq: run.ended_ms.unwrap_or(run.started_ms),
        label: Some(format!("session {}, run {number}", session_name(session))),
        finished_at: if run.state.is_terminal() { run.ended_ms } else { None },
        // The run's own start: its SLA is measured from when this turn began.
        started_at: Some(run.started_ms),
        error: run.error.clone(),
        detail: None,
        result: if run.state.is_terminal() { crate::result::agent_run(run.last_message.as_deref()) } else { None },
        provider_url: None,
        kind: session.run_kind(),
    }
}

/// Every job a session's poll learns, in the order they are merged: the runs as they ran, then the
/// session (so a whole life learned at once notifies in the order it happened). `NotFound` when
/// the asked job (the session, or one of its runs) is not among them.
pub fn session_answer(asked: &str, session: &Session, events: &[SessionEvent]) -> Result<StatusAnswer, FetchError> {
    let runs = session_runs(session, events)?;
    let mut all: Vec<JobEvent> = runs.iter().enumerate().map(|(i, run)| run_event(session, i + 1, run)).collect();
    let (session_event, unknown_status) = session_job_event(session, &runs)?;
    all.push(session_event);
    if !all.iter().any(|e| e.job_id == asked) {
        return Err(FetchError::NotFound);
    }
    let mut unknown: Vec<UnknownValue> = runs.into_iter().filter_map(|run| run.unknown).collect();
    unknown.extend(unknown_status);
    Ok(StatusAnswer { events: all, poll_url: None, unknown })
}

#[async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A Message Batch (`msgbatch_...`) or a session (`sesn_...`, its runs `sesn_....runN`), as
    /// the SDK's types name them.
    fn check_job_id(&self, job_id: &str) -> Result<(), crate::BadJobId> {
        let shaped =
            (job_id.starts_with(BATCH_PREFIX) || job_id.starts_with("sesn_")) && crate::job_id::is_a_token(job_id, &['_', '-', '.']);
        if shaped {
            return Ok(());
        }
        Err(crate::BadJobId::NotItsShape {
            provider: NAME,
            shape: "msgbatch_... (a Message Batch) or sesn_... (a session)",
            job_id: job_id.to_owned(),
        })
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
        // The type first: thread, vault, deployment, agent and other events that say nothing of a
        // session's status are ignored whatever their data holds (`WEBHOOK_TYPES`).
        if let Some(kind) = envelope.event_type().filter(|k| session_event_state(k).is_none()) {
            return Err(envelope
                .ignore(format!("event type {kind:?} is not acted on (NeverMiss acts on the session status events: {})", acted_on()))
                .of_unknown_type(&WEBHOOK_TYPES, kind));
        }
        let (delivery, id, body) = envelope.require("data.id")?;
        let reject = |reason: String| envelope.reject(reason);
        let kind = envelope.event_type().ok_or_else(|| reject("the event has no data.type".into()))?;
        let state = session_event_state(kind).ok_or_else(|| reject(format!("unknown event type {kind:?}")))?;
        let created_at = body.get("created_at").and_then(Value::as_str).ok_or_else(|| reject("the event has no created_at".into()))?;
        let at = parse_rfc3339(created_at).ok_or_else(|| reject(format!("created_at is not an RFC 3339 time: {created_at:?}")))?;
        let deleted = WEBHOOK_TYPES.get(kind) == Some(Meaning::Deleted);
        Ok(ParsedDelivery {
            delivery_id: delivery,
            event: JobEvent {
                group: None,
                provider: NAME.into(),
                job_id: id,
                state,
                seq: at,
                label: None,
                finished_at: deleted.then_some(at),
                // The event's time only (a thin body): no start.
                started_at: None,
                error: None,
                detail: Some(if deleted {
                    format!("{kind}: the session was deleted")
                } else {
                    format!("{kind}: asking the session what happened")
                }),
                result: None,
                provider_url: None,
                kind: None,
            },
        })
    }

    fn poll_after_push(&self, event: &JobEvent) -> bool {
        // Every session webhook is thin: which run ended, and why, is in the session's events. A
        // deleted session has nothing left to read (it answers 404).
        !event.job_id.starts_with(BATCH_PREFIX) && !event.state.is_terminal()
    }

    fn ends_with_it(&self, event: &JobEvent) -> Option<String> {
        // A deleted session's open run ends with it (canceled, as the session).
        (event.state == JobState::Canceled && parse_run_job_id(&event.job_id).is_none() && !event.job_id.starts_with(BATCH_PREFIX))
            .then(|| format!("{}{RUN_SEPARATOR}", event.job_id))
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
            let (event, unknown) = batch_answer(id, fetch_json(request).await?)?;
            return Ok(StatusAnswer::one(event).with_unknown(unknown));
        }
        let session_id = parse_run_job_id(id).map_or(id, |(session, _)| session);
        let get = |url: &str| api_get(&self.ctx, url, &key).header("anthropic-beta", MANAGED_AGENTS_BETA);
        let url = format!("{base}/v1/sessions/{}", urlencode_segment(session_id));
        let session: Session = fetch_json(get(&url)).await?;
        same_id(session_id, &session.id)?;
        // The runs are in the event list, whatever `stats` holds (its `active_seconds` is optional).
        let mut events = Vec::new();
        {
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
        session_answer(id, &session, &events)
    }

    fn may_be_stuck(&self, job_id: &str) -> bool {
        // A session idles between runs for as long as its user likes; its runs may be stuck.
        job_id.starts_with(BATCH_PREFIX) || parse_run_job_id(job_id).is_some()
    }

    /// A Message Batch's cancel (`POST /v1/messages/batches/{id}/cancel`, as anthropic-sdk-python's
    /// `messages.batches.cancel` sends it: `x-api-key`, `anthropic-version`); a session's run by
    /// interrupting the session (`POST /v1/sessions/{id}/events` with `user.interrupt`, as
    /// `beta.sessions.events.send` sends it, with the managed-agents beta header): the run then
    /// ends canceled when the session goes idle. A session itself has none (archiving it is the
    /// user's own act).
    async fn cancel(&self, job: &JobRef) -> Result<String, CancelError> {
        let id = job.job_id.as_str();
        let base = base_url(&self.ctx);
        if id.starts_with(BATCH_PREFIX) {
            let key = self.ctx.api_key(NAME).map_err(CancelError::NotAsked)?;
            let url = format!("{base}/v1/messages/batches/{}/cancel", urlencode_segment(id));
            return send_cancel(api_post(&self.ctx, &url, &key)).await;
        }
        if let Some((session, _)) = parse_run_job_id(id) {
            let key = self.ctx.api_key(NAME).map_err(CancelError::NotAsked)?;
            let url = format!("{base}/v1/sessions/{}/events", urlencode_segment(session));
            let body = serde_json::json!({"events": [{"type": INTERRUPT_EVENT}]});
            return send_cancel(api_post(&self.ctx, &url, &key).header("anthropic-beta", MANAGED_AGENTS_BETA).json(&body)).await;
        }
        Err(CancelError::no_cancel())
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
        crate::test_headers(id)
    }

    fn provider() -> Anthropic {
        Anthropic::new(crate::test_context())
    }

    fn counts(processing: i64, succeeded: i64, errored: i64, canceled: i64, expired: i64) -> RequestCounts {
        RequestCounts { processing, succeeded, errored, canceled, expired }
    }

    #[tokio::test]
    async fn parses_the_documented_session_event() {
        let p = provider();
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
        let p = provider();
        // Every type that says a session's status changed, by its plain name or its status name.
        for (kind, state) in [
            ("session.created", JobState::Queued),
            ("session.pending", JobState::Queued),
            ("session.running", JobState::Running),
            ("session.idled", JobState::Running),
            ("session.requires_action", JobState::Running),
            ("session.budget_reached", JobState::Running),
            ("session.status_run_started", JobState::Running),
            ("session.status_rescheduled", JobState::Running),
            ("session.status_idled", JobState::Running),
            ("session.status_terminated", JobState::Running),
            ("session.archived", JobState::Running),
        ] {
            let body = format!(
                r#"{{"type":"event","id":"event_1","created_at":"2026-05-01T12:00:00Z","data":{{"type":"{kind}","id":"sesn_1"}}}}"#
            );
            let ev = p.parse(&headers("m"), body.as_bytes()).unwrap().event;
            assert_eq!(ev.state, state, "{kind}");
            assert!(!ev.state.is_terminal(), "{kind}");
            assert!(p.poll_after_push(&ev), "{kind}");
        }
        // A deleted session ends, canceled, with its open run; there is nothing left to read.
        let body =
            br#"{"type":"event","id":"event_1","created_at":"2026-05-01T12:00:00Z","data":{"type":"session.deleted","id":"sesn_7"}}"#;
        let ev = p.parse(&headers("m8"), body).unwrap().event;
        assert_eq!((ev.state, ev.finished_at), (JobState::Canceled, Some(ev.seq)));
        assert!(!p.poll_after_push(&ev));
        assert_eq!(p.ends_with_it(&ev).as_deref(), Some("sesn_7.run"));
        // A type that says nothing of a session's status (and one that never existed) is ignored.
        for kind in ["session.updated", "session.status_scheduled"] {
            let body = format!(
                r#"{{"type":"event","id":"event_1","created_at":"2026-05-01T12:00:00Z","data":{{"type":"{kind}","id":"sesn_7"}}}}"#
            );
            let e = p.parse(&headers("m7"), body.as_bytes()).unwrap_err();
            assert!(e.reason.starts_with(&format!("event type \"{kind}\" is not acted on")), "{}", e.reason);
        }
        let body = br#"{"type":"event","id":"event_1","created_at":"2026-05-01T12:00:00Z","data":{"type":"session.thread_created","id":"sesn_7"}}"#;
        let e = p.parse(&headers("m7"), body).unwrap_err();
        assert_eq!(e.kind, crate::Unusable::Unhandled);
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
        assert_eq!(stop_reason_state("end_turn", "r").state, JobState::Succeeded);
        assert_eq!(stop_reason_state("requires_action", "r").state, JobState::NeedsInput);
        assert_eq!(stop_reason_state("retries_exhausted", "r").state, JobState::Failed);
        assert_eq!(stop_reason_state("budget_reached", "r").state, JobState::NeedsInput);
        assert_eq!(stop_reason_state("refusal", "r").state, JobState::Failed);
        // A reason added later is never a success: the run failed, the reason shown and counted.
        let later = stop_reason_state("tool_budget", "sesn_1.run2");
        assert_eq!(later.state, JobState::Failed);
        assert!(later.reason.unwrap().contains("\"tool_budget\""));
        assert_eq!(later.unknown.unwrap().job_id, "sesn_1.run2");
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
    fn a_sessions_metadata_names_its_group_and_its_agent_its_runs_kind() {
        let tagged: Session = serde_json::from_value(serde_json::json!({
            "id": "sesn_1", "status": "running",
            "agent": {"id": "agent_1", "name": "Billing refactorer", "type": "agent"},
            "metadata": {"nevermiss_group": "agents-sweep", "attempt": 3}
        }))
        .unwrap();
        assert_eq!(tagged.group().as_deref(), Some("agents-sweep"), "a value that is not a string is skipped, not the session");
        assert_eq!(tagged.run_kind().as_deref(), Some("anthropic/session/Billing refactorer"));
        let unnamed: Session =
            serde_json::from_value(serde_json::json!({"id": "sesn_2", "status": "idle", "agent": {"id": "agent_2", "name": " "}})).unwrap();
        assert_eq!((unnamed.group(), unnamed.run_kind().as_deref()), (None, Some("anthropic/session/agent_2")));
        let runs = [Run { state: JobState::Succeeded, started_ms: 1, ended_ms: Some(2), error: None, last_message: None, unknown: None }];
        let (session_event, _) = session_job_event(&tagged, &runs).unwrap();
        assert_eq!(
            (session_event.group.as_deref(), session_event.kind),
            (Some("agents-sweep"), None),
            "the session joins, its runs do not"
        );
        let run = run_event(&tagged, 1, &runs[0]);
        assert_eq!((run.group, run.kind.as_deref()), (None, Some("anthropic/session/Billing refactorer")));
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
        let all = session_answer("sesn_1.run2", &archived, &list).unwrap().events;
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
        let all = session_answer("sesn_1", &session("terminated", None), &list).unwrap().events;
        assert_eq!((all[2].state, all[3].state), (JobState::Failed, JobState::Failed));
        // A run the session does not have.
        assert_eq!(session_answer("sesn_1.run9", &session("idle", None), &list), Err(FetchError::NotFound));
    }

    #[test]
    fn a_run_interrupted_by_its_user_ends_canceled() {
        let list = events(serde_json::json!([
            {"type": "session.status_running", "id": "sevt_1", "processed_at": "2026-05-01T12:01:00Z"},
            {"type": "user.interrupt", "id": "sevt_2", "processed_at": "2026-05-01T12:01:30Z"},
            {"type": "session.status_idle", "id": "sevt_3", "processed_at": "2026-05-01T12:01:31Z", "stop_reason": {"type": "end_turn"}},
            {"type": "session.status_running", "id": "sevt_4", "processed_at": "2026-05-01T12:02:00Z"},
            {"type": "session.status_idle", "id": "sevt_5", "processed_at": "2026-05-01T12:03:00Z", "stop_reason": {"type": "end_turn"}}
        ]));
        let runs = session_runs(&session("idle", None), &list).unwrap();
        let states: Vec<JobState> = runs.iter().map(|r| r.state).collect();
        // The interrupt ends its own run only; the next run ends as its stop reason says.
        assert_eq!(states, [JobState::Canceled, JobState::Succeeded]);
        assert_eq!(runs[0].ended_ms, Some(parse_rfc3339("2026-05-01T12:01:31Z").unwrap()));
    }

    #[test]
    fn a_session_that_never_ran() {
        let all = session_answer("sesn_1", &session("idle", None), &[]).unwrap().events;
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].state, JobState::Queued);
        assert_eq!(all[0].job_id, "sesn_1");
        // A status NeverMiss does not know keeps the session running, shown and counted.
        let unknown = r#"{"id":"sesn_1","status":"sleeping","created_at":"2026-05-01T12:00:00Z"}"#;
        let answer = session_answer("sesn_1", &serde_json::from_str(unknown).unwrap(), &[]).unwrap();
        assert_eq!(answer.events[0].state, JobState::Running);
        assert!(answer.events[0].detail.as_deref().unwrap().contains("\"sleeping\""), "{answer:?}");
        assert_eq!(answer.unknown[0].value, "sleeping");
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

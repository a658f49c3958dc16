//! The `anthropic` provider: Message Batches (polling only, `msgbatch_` ids) and Managed Agents
//! sessions (Standard Webhooks-signed `session.status_*` events, and polling with the
//! `managed-agents-2026-04-01` beta header). Requests carry `x-api-key` and
//! `anthropic-version: 2023-06-01`. Anthropic sends no sequence number: `seq` is the event's or
//! the object's own time, in milliseconds.

use async_trait::async_trait;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::generic::urlencode_segment;
use super::standard_webhooks;
use super::{fetch_json, FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext, VerifyError};
use crate::job::{parse_rfc3339, JobEvent, JobState};
use crate::secrets::SecretKind;

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

/// A session webhook's `data.type` as a state.
pub fn session_event_state(kind: &str) -> Option<JobState> {
    Some(match kind {
        "session.status_run_started" => JobState::Running,
        "session.status_rescheduled" => JobState::Queued,
        "session.status_idled" => JobState::Succeeded,
        "session.status_terminated" => JobState::Failed,
        _ => return None,
    })
}

/// A session's `status` as a state.
pub fn session_state(status: &str) -> Option<JobState> {
    Some(match status {
        "running" => JobState::Running,
        "rescheduling" => JobState::Queued,
        "idle" => JobState::Succeeded,
        "terminated" => JobState::Failed,
        _ => return None,
    })
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

/// `GET /v1/sessions/{id}`, the fields NeverMiss reads.
#[derive(Debug, Deserialize)]
struct Session {
    id: String,
    status: String,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    title: Option<String>,
}

fn time(value: Option<&str>, field: &str) -> Result<Option<i64>, FetchError> {
    match value.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => parse_rfc3339(s)
            .map(Some)
            .ok_or_else(|| FetchError::Malformed(format!("{field} is not an RFC 3339 time: {s:?}"))),
    }
}

fn same_id(asked: &str, answered: &str) -> Result<(), FetchError> {
    if asked == answered {
        Ok(())
    } else {
        Err(FetchError::Malformed(format!("asked for {asked}, the answer is about {answered}")))
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
        error,
        detail: Some(counts.summary()),
    })
}

fn session_event(job_id: &str, s: Session) -> Result<JobEvent, FetchError> {
    same_id(job_id, &s.id)?;
    let state =
        session_state(&s.status).ok_or_else(|| FetchError::Malformed(format!("unknown session status {:?}", s.status)))?;
    let created = time(s.created_at.as_deref(), "created_at")?;
    let updated = time(s.updated_at.as_deref(), "updated_at")?;
    // Stable while the session is unchanged.
    let seq = updated.or(created).unwrap_or(0);
    Ok(JobEvent {
        provider: NAME.into(),
        job_id: job_id.to_owned(),
        state,
        seq,
        label: s.title.filter(|t| !t.is_empty()),
        finished_at: if state.is_terminal() { updated } else { None },
        error: (state == JobState::Failed).then(|| "the session was terminated".to_owned()),
        detail: None,
    })
}

#[async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        standard_webhooks::verify_with_stored_secret(&self.ctx, NAME, SECRET_FORMAT, headers, body)
    }

    fn secret_format(&self) -> Option<standard_webhooks::SecretFormat> {
        Some(SECRET_FORMAT)
    }

    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        let envelope = standard_webhooks::Envelope::read(headers, body, "/data/id");
        let reject = |reason: String| envelope.reject(reason);
        // The type first: thread, vault, deployment, agent and other events NeverMiss does not
        // act on are ignored whatever their data holds.
        let kind = envelope
            .body
            .as_ref()
            .and_then(|b| b.pointer("/data/type"))
            .and_then(Value::as_str)
            .filter(|_| envelope.delivery_id.is_some());
        if let Some(kind) = kind.filter(|k| session_event_state(k).is_none()) {
            return Err(envelope.ignore(format!(
                "event type {kind:?} is not acted on (NeverMiss acts on session.status_run_started, _rescheduled, _idled and _terminated)"
            )));
        }
        let (delivery, id, body) = envelope.require("data.id")?;
        let kind = body
            .pointer("/data/type")
            .and_then(Value::as_str)
            .ok_or_else(|| reject("the event has no data.type".into()))?;
        let state = session_event_state(kind).ok_or_else(|| {
            reject(format!(
                "unknown event type {kind:?} (expected session.status_run_started, _rescheduled, _idled or _terminated)"
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
                finished_at: state.is_terminal().then_some(at),
                error: (state == JobState::Failed).then(|| "the session was terminated".to_owned()),
                detail: None,
            },
        })
    }

    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        let id = job.job_id.as_str();
        let key = self
            .ctx
            .secrets
            .get(NAME, SecretKind::ApiKey)
            .ok_or_else(|| FetchError::NotConfigured("no API key (NEVERMISS_ANTHROPIC_API_KEY)".into()))?;
        let base = base_url(&self.ctx);
        if id.starts_with(BATCH_PREFIX) {
            let url = format!("{base}/v1/messages/batches/{}", urlencode_segment(id));
            let request = self
                .ctx
                .get(&url)
                .header("x-api-key", key)
                .header("anthropic-version", API_VERSION);
            batch_event(id, fetch_json(request).await?)
        } else {
            let url = format!("{base}/v1/sessions/{}", urlencode_segment(id));
            let request = self
                .ctx
                .get(&url)
                .header("x-api-key", key)
                .header("anthropic-version", API_VERSION)
                .header("anthropic-beta", MANAGED_AGENTS_BETA);
            session_event(id, fetch_json(request).await?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::standard_webhooks::ID_HEADER;
    use std::sync::Arc;

    fn headers(id: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ID_HEADER, id.parse().unwrap());
        h
    }

    async fn provider() -> (Anthropic, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&dir.path().join("db.sqlite")).unwrap();
        let settings = Arc::new(crate::settings::Settings::load(store).await.unwrap());
        let secrets = Arc::new(crate::secrets::Secrets::open(dir.path()).unwrap());
        (Anthropic::new(ProviderContext::new(secrets, settings)), dir)
    }

    fn counts(processing: i64, succeeded: i64, errored: i64, canceled: i64, expired: i64) -> RequestCounts {
        RequestCounts { processing, succeeded, errored, canceled, expired }
    }

    #[tokio::test]
    async fn parses_the_documented_session_event() {
        let (p, _dir) = provider().await;
        let body = br#"{"type":"event","id":"event_01","created_at":"2026-05-01T12:00:00.250Z","data":{"type":"session.status_idled","id":"session_01abc"}}"#;
        let parsed = p.parse(&headers("msg_2"), body).unwrap();
        assert_eq!(parsed.delivery_id, "msg_2");
        let ev = parsed.event;
        assert_eq!((ev.provider.as_str(), ev.job_id.as_str()), ("anthropic", "session_01abc"));
        assert_eq!(ev.state, JobState::Succeeded);
        assert_eq!(ev.seq, parse_rfc3339("2026-05-01T12:00:00.250Z").unwrap());
        assert_eq!(ev.finished_at, Some(ev.seq));
    }

    #[tokio::test]
    async fn every_session_event_type_and_unknown_ones() {
        let (p, _dir) = provider().await;
        for (kind, state) in [
            ("session.status_run_started", JobState::Running),
            ("session.status_rescheduled", JobState::Queued),
            ("session.status_idled", JobState::Succeeded),
            ("session.status_terminated", JobState::Failed),
        ] {
            let body = format!(r#"{{"type":"event","id":"event_1","created_at":"2026-05-01T12:00:00Z","data":{{"type":"{kind}","id":"session_1"}}}}"#);
            assert_eq!(p.parse(&headers("m"), body.as_bytes()).unwrap().event.state, state, "{kind}");
        }
        let body = br#"{"type":"event","id":"event_1","created_at":"2026-05-01T12:00:00Z","data":{"type":"session.created","id":"session_7"}}"#;
        let e = p.parse(&headers("m7"), body).unwrap_err();
        assert!(e.reason.starts_with("event type \"session.created\" is not acted on"), "{}", e.reason);
        assert_eq!(e.kind, crate::providers::Unusable::Unhandled);
        assert_eq!((e.delivery_id.as_deref(), e.job_id.as_deref()), (Some("m7"), Some("session_7")));

        let body = br#"{"type":"event","id":"event_1","created_at":"yesterday","data":{"type":"session.status_idled","id":"session_7"}}"#;
        let e = p.parse(&headers("m7"), body).unwrap_err();
        assert!(e.reason.contains("RFC 3339"));
        assert_eq!(e.job_id.as_deref(), Some("session_7"));

        let body = br#"{"type":"event","data":{"type":"session.status_idled","id":"session_7"}}"#;
        assert!(p.parse(&headers("m7"), body).unwrap_err().reason.contains("created_at"));
    }

    #[test]
    fn the_session_status_map() {
        assert_eq!(session_state("running"), Some(JobState::Running));
        assert_eq!(session_state("rescheduling"), Some(JobState::Queued));
        assert_eq!(session_state("idle"), Some(JobState::Succeeded));
        assert_eq!(session_state("terminated"), Some(JobState::Failed));
        assert_eq!(session_state("archived"), None);
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

    #[test]
    fn a_session_answer() {
        let body = r#"{"id":"session_1","type":"session","status":"terminated","title":"nightly refactor",
            "created_at":"2026-05-01T12:00:00Z","updated_at":"2026-05-01T12:30:00Z"}"#;
        let ev = session_event("session_1", serde_json::from_str(body).unwrap()).unwrap();
        assert_eq!(ev.state, JobState::Failed);
        assert_eq!(ev.seq, parse_rfc3339("2026-05-01T12:30:00Z").unwrap());
        assert_eq!(ev.label.as_deref(), Some("nightly refactor"));
        let unknown = r#"{"id":"session_1","status":"sleeping","created_at":"2026-05-01T12:00:00Z"}"#;
        assert!(matches!(
            session_event("session_1", serde_json::from_str(unknown).unwrap()),
            Err(FetchError::Malformed(_))
        ));
    }
}

//! What a job is: its states and their rank, the normalized event both paths produce, and the
//! shapes the admin API answers with (contract §3).

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::closed_set::closed_set;

closed_set! {
    /// A job's state. The rank orders them; the terminal states share the top rank and are sinks.
    /// `needs_input` is a terminal outcome of one run of an agent session: the run stopped to wait
    /// for the user (a tool permission, a tool result); the session's next run is another job.
    /// `ended` is an end whose outcome is unknown: the provider no longer keeps a job that was
    /// last seen unfinished (RunPod forgets a job 30 minutes after it ends), so it ended while
    /// nothing was looking. Never a success; announced as urgently as a failure.
    #[ts(export)]
    pub enum JobState {
        Unknown = "unknown",
        Queued = "queued",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Canceled = "canceled",
        NeedsInput = "needs_input",
        Ended = "ended",
    }
}

pub const TERMINAL_RANK: i64 = 3;

impl JobState {
    pub fn rank(self) -> i64 {
        match self {
            JobState::Unknown => 0,
            JobState::Queued => 1,
            JobState::Running => 2,
            JobState::Succeeded | JobState::Failed | JobState::Canceled | JobState::NeedsInput | JobState::Ended => TERMINAL_RANK,
        }
    }

    /// Whether an end needs the person's attention: a failure, a run waiting for input, an end
    /// whose outcome is unknown. Such an end is announced on its own even in a group, breaks
    /// through quiet hours, and goes to the channels that announce failures.
    pub fn is_urgent_end(self) -> bool {
        matches!(self, JobState::Failed | JobState::NeedsInput | JobState::Ended)
    }

    /// The channel outcome (`Announce`) that announces this end: its own name, except an end
    /// whose outcome is unknown, which goes where failures go.
    pub fn announced_as(self) -> &'static str {
        match self {
            JobState::Ended => "failed",
            other => other.as_str(),
        }
    }

    pub fn is_terminal(self) -> bool {
        self.rank() == TERMINAL_RANK
    }
}

closed_set! {
    /// Which path an event came by.
    #[ts(export)]
    pub enum Source {
        Push = "push",
        Pull = "pull",
    }
}

closed_set! {
    /// What the merge point (or dedupe before it) did with an event.
    #[ts(export)]
    pub enum Outcome {
        Applied = "applied",
        Duplicate = "duplicate",
        Stale = "stale",
        Rejected = "rejected",
        /// A verified event of a kind NeverMiss does not act on (answered 200, never 4xx).
        Ignored = "ignored",
        /// The user asked the provider to cancel the job (no state: the job's end comes by the
        /// merge point like any other); the detail is what the provider answered.
        Requested = "requested",
    }
}

/// Which job: its provider and its id there, always together (an id alone names no job: two
/// providers may use the same one).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey {
    pub provider: String,
    pub id: String,
}

impl JobKey {
    pub fn new(provider: impl Into<String>, id: impl Into<String>) -> JobKey {
        JobKey { provider: provider.into(), id: id.into() }
    }
}

/// One observation of a job's state, normalized from any provider, by either path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    pub provider: String,
    pub job_id: String,
    pub state: JobState,
    /// The sender's version number; providers without one use the event's time in milliseconds.
    pub seq: i64,
    pub label: Option<String>,
    /// Unix milliseconds, when the sender says the job finished.
    pub finished_at: Option<i64>,
    /// Unix milliseconds, when the provider says the job was created (its own start time, e.g.
    /// a Replicate prediction's `created_at`): the SLA is measured from it. None when the event
    /// does not say (a webhook whose only time is the event's own).
    pub started_at: Option<i64>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// A one-line summary worth showing (e.g. a batch's request counts).
    pub detail: Option<String>,
    /// The group the sender puts the job in (the generic contract's `group`), if it says.
    pub group: Option<String>,
    /// What the job produced, when the event says (bounded: see `JobResult`).
    pub result: Option<JobResult>,
    /// The job's page on the provider's own site, when it has one.
    pub provider_url: Option<String>,
    /// The kind of job, as its provider names it (`durations`: what "usually" is measured
    /// over), e.g. `replicate/prediction/stability-ai/sdxl`; None when the event does not say.
    pub kind: Option<String>,
}

/// Longest texts a job keeps of what a sender or a provider says (in characters), so that no
/// answer can grow the database without bound: the label as the API caps it, a provider's kind,
/// the error and the detail as a screen shows them, the page's URL.
pub const MAX_LABEL: usize = 200;
pub const MAX_KIND: usize = 200;
pub const MAX_ERROR: usize = 2000;
pub const MAX_DETAIL: usize = 500;
pub const MAX_PROVIDER_URL: usize = 2048;

/// `text` cut to at most `max` characters (an ellipsis standing for the rest).
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some(_) => {
            let kept: String = text.chars().take(max.saturating_sub(1)).collect();
            format!("{kept}…")
        }
    }
}

impl JobEvent {
    /// The event with its texts within the bounds above (a page URL past its bound is dropped, a
    /// cut one would not lead anywhere). Every event from outside passes here before it is merged.
    pub fn bounded(mut self) -> JobEvent {
        let cut_to = |text: &mut Option<String>, max: usize| {
            if let Some(t) = text.as_mut() {
                if t.chars().nth(max).is_some() {
                    *t = cut(t, max);
                }
            }
        };
        cut_to(&mut self.label, MAX_LABEL);
        cut_to(&mut self.kind, MAX_KIND);
        cut_to(&mut self.error, MAX_ERROR);
        cut_to(&mut self.detail, MAX_DETAIL);
        if self.provider_url.as_ref().is_some_and(|u| u.len() > MAX_PROVIDER_URL) {
            self.provider_url = None;
        }
        self
    }

    /// The job this event is about.
    pub fn key(&self) -> JobKey {
        JobKey::new(&self.provider, &self.job_id)
    }

    /// An event that says only the job's state and seq (the rest can follow:
    /// `JobEvent { label: Some(..), ..JobEvent::new(..) }`).
    pub fn new(provider: &str, job_id: &str, state: JobState, seq: i64) -> JobEvent {
        JobEvent {
            provider: provider.to_owned(),
            job_id: job_id.to_owned(),
            state,
            seq,
            label: None,
            finished_at: None,
            started_at: None,
            error: None,
            detail: None,
            group: None,
            result: None,
            provider_url: None,
            kind: None,
        }
    }
}

/// What a finished job produced: an excerpt of its text, the URLs of its
/// outputs and the URL of its first image output. Kept small: the engine's `result` module bounds
/// it before it reaches an event; stored as JSON text in the job's `result` column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct JobResult {
    pub text: Option<String>,
    #[serde(default)]
    pub urls: Vec<String>,
    pub image: Option<String>,
}

impl JobResult {
    /// Whether it says nothing (no text, no URL, no image).
    pub fn is_empty(&self) -> bool {
        self.text.is_none() && self.urls.is_empty() && self.image.is_none()
    }

    /// The JSON text the `result` column keeps.
    pub fn to_column(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// From the `result` column; a value that does not read as one is no result.
    pub fn from_column(text: &str) -> Option<JobResult> {
        serde_json::from_str(text).ok()
    }
}

/// A job as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct Job {
    pub provider: String,
    pub job_id: String,
    pub label: Option<String>,
    pub state: JobState,
    pub seq: Option<i64>,
    pub error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
    /// When the provider says the job started (its own creation time), when it says one: how
    /// long the job took or has run counts from it, else from `created_at` (when NeverMiss first
    /// heard of it).
    #[serde(default)]
    pub started_at: Option<String>,
    pub terminal_source: Option<Source>,
    pub notified_at: Option<String>,
    pub detail: Option<String>,
    pub last_polled_at: Option<String>,
    /// Why the last poll failed (e.g. "the provider does not know this job (404)").
    pub poll_error: Option<String>,
    /// The kind of that failure.
    pub poll_error_kind: Option<PollErrorKind>,
    /// When polling gave up on this unfinished job (see `AbandonReason`): it is not polled any
    /// more, raised one alert, and a webhook still finishes it.
    pub abandoned_at: Option<String>,
    /// Why polling gave up on it.
    pub abandoned_reason: Option<AbandonReason>,
    /// The group it belongs to (a sweep, a batch per shard), if any: its end is announced once
    /// for the whole group (`store::groups`).
    pub group: Option<String>,
    /// What it produced, when known.
    pub result: Option<JobResult>,
    /// Its page on the provider's own site, when the provider has one.
    pub provider_url: Option<String>,
    /// Its kind, as its provider names it (`replicate/prediction/<model>`, `openai/batch`, ...),
    /// when known: jobs of one kind make its expected duration (`durations`).
    pub kind: Option<String>,
    /// How long a job of its kind usually takes (ms, from the durations of the last succeeded
    /// ones), or None without enough history.
    pub expected_ms: Option<i64>,
}

/// One entry of a job's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct TimelineEvent {
    pub at: String,
    pub source: Source,
    pub delivery_id: Option<String>,
    pub state: Option<JobState>,
    pub seq: Option<i64>,
    pub outcome: Outcome,
    /// A one-line reason for rejected events, or an error reported with the state.
    pub detail: Option<String>,
}

/// A job to poll: its id, and where to poll it when the id alone does not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRef {
    pub job_id: String,
    pub poll_url: Option<String>,
    /// Its state as last known (a provider that forgets ended jobs tells an ended one from one
    /// it never had by it).
    pub state: JobState,
}

impl JobRef {
    pub fn new(job_id: impl Into<String>) -> JobRef {
        JobRef { job_id: job_id.into(), poll_url: None, state: JobState::Unknown }
    }
}

closed_set! {
    /// Why the last poll of a job failed, as a closed set (the words are in the job's `poll_error`).
    #[ts(export)]
    pub enum PollErrorKind {
        /// The provider does not know the job (404).
        NotFound = "not_found",
        /// The job cannot be polled at all (no status endpoint for its kind, no status URL).
        Unpollable = "unpollable",
        /// The provider did not answer in time.
        Timeout = "timeout",
        /// The provider answered an unexpected HTTP status.
        Http = "http",
        /// The provider's answer could not be read.
        Malformed = "malformed",
        /// The provider could not be reached.
        Transport = "transport",
    }
}

/// Why reconciliation stopped polling an unfinished job ("abandoned"), as a closed set. The limits
/// are the reconciler's (`reconcile::ABANDON_AFTER_NOT_FOUND` and the `abandon_after_secs` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
#[serde(rename_all = "snake_case")]
pub enum AbandonReason {
    /// The provider answered 404 at every poll, for longer than the limit.
    NotFound,
    /// The job cannot be polled at all (no status URL known, an id of a kind with no status
    /// endpoint such as an OpenAI eval run): given up at the first try.
    Unpollable,
    /// Its provider has no status API: its jobs end by webhook only.
    NoStatusApi,
}

impl AbandonReason {
    pub const ALL: [AbandonReason; 3] = [AbandonReason::NotFound, AbandonReason::Unpollable, AbandonReason::NoStatusApi];

    pub fn as_str(self) -> &'static str {
        match self {
            AbandonReason::NotFound => "not_found",
            AbandonReason::Unpollable => "unpollable",
            AbandonReason::NoStatusApi => "no_status_api",
        }
    }

    pub fn parse(s: &str) -> Option<AbandonReason> {
        AbandonReason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The reason in words, for the alert and the log.
    pub fn describe(self) -> &'static str {
        match self {
            AbandonReason::NotFound => "the provider has answered 404 (unknown job) at every poll",
            AbandonReason::Unpollable => "this job cannot be polled",
            AbandonReason::NoStatusApi => "its provider has no status API",
        }
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Unix milliseconds as RFC 3339 UTC, the only time format of the API.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// RFC 3339 to Unix milliseconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_texts_are_cut_to_their_bounds() {
        let huge = "é".repeat(300_000);
        let event = JobEvent {
            label: Some(huge.clone()),
            kind: Some(huge.clone()),
            error: Some(huge.clone()),
            detail: Some(huge.clone()),
            provider_url: Some(format!("https://x.example/{huge}")),
            ..JobEvent::new("acme", "j-1", JobState::Running, 1)
        }
        .bounded();
        assert_eq!(event.label.as_deref().map(|t| t.chars().count()), Some(MAX_LABEL));
        assert_eq!(event.kind.as_deref().map(|t| t.chars().count()), Some(MAX_KIND));
        assert_eq!(event.error.as_deref().map(|t| t.chars().count()), Some(MAX_ERROR));
        assert_eq!(event.detail.as_deref().map(|t| t.chars().count()), Some(MAX_DETAIL));
        assert!(event.label.unwrap().ends_with('…'));
        assert_eq!(event.provider_url, None);
        let short = JobEvent { label: Some("sdxl test".into()), ..JobEvent::new("acme", "j-1", JobState::Running, 1) }.bounded();
        assert_eq!(short.label.as_deref(), Some("sdxl test"));
    }
}

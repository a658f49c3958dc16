//! What a job is: its states and their rank, the normalized event both paths produce, and the
//! shapes the admin API answers with (contract section 3).

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::closed_set::closed_set;

closed_set! {
    /// A job's state. The rank orders them; the three terminal states share the top rank and are sinks.
    #[ts(export)]
    pub enum JobState {
        Unknown = "unknown",
        Queued = "queued",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Canceled = "canceled",
    }
}

pub const TERMINAL_RANK: i64 = 3;

impl JobState {
    pub fn rank(self) -> i64 {
        match self {
            JobState::Unknown => 0,
            JobState::Queued => 1,
            JobState::Running => 2,
            JobState::Succeeded | JobState::Failed | JobState::Canceled => TERMINAL_RANK,
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
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// A one-line summary worth showing (e.g. a batch's request counts).
    pub detail: Option<String>,
}

/// A job as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
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
    pub terminal_source: Option<Source>,
    pub notified_at: Option<String>,
    pub detail: Option<String>,
    pub last_polled_at: Option<String>,
    /// Why the last poll failed (e.g. "the provider does not know this job (404)").
    pub poll_error: Option<String>,
    /// The kind of that failure.
    pub poll_error_kind: Option<PollErrorKind>,
}

/// One entry of a job's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
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
}

impl JobRef {
    pub fn new(job_id: impl Into<String>) -> JobRef {
        JobRef { job_id: job_id.into(), poll_url: None }
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

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Unix milliseconds as RFC 3339 UTC, the only time format of the API.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// RFC 3339 to Unix milliseconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

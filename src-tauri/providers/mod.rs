//! The provider trait: each provider verifies its own signatures on the raw bytes, parses its own
//! payloads into normalized job events, and fetches a job's status for reconciliation.
//! Everything a provider produces goes through the one merge point.

pub mod anthropic;
pub mod fal;
pub mod generic;
pub mod openai;
pub mod replicate;
pub mod standard_webhooks;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::HeaderMap;

use crate::job::JobEvent;
use crate::secrets::Secrets;
use crate::settings::Settings;

/// Why a request's signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing signature header {0}")]
    Missing(&'static str),
    #[error("invalid signature")]
    Invalid,
    #[error("timestamp outside the 5-minute tolerance (a replay or a wrong clock)")]
    Expired,
    #[error("no webhook secret is configured for {0}")]
    NotConfigured(&'static str),
    /// The keys to check with cannot be had right now (e.g. a key set that cannot be fetched):
    /// answered 503 so the sender retries.
    #[error("cannot verify now: {0}")]
    Unavailable(String),
}

/// A signed payload NeverMiss cannot use. Whatever ids could be read are kept with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ParseError {
    pub reason: String,
    pub delivery_id: Option<String>,
    pub job_id: Option<String>,
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

/// A verified, parsed delivery: its dedupe key and the job event it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedDelivery {
    pub delivery_id: String,
    pub event: JobEvent,
}

/// Why a status fetch gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("{0} has no status API")]
    NotSupported(&'static str),
    #[error("not configured: {0}")]
    NotConfigured(String),
    #[error("the provider does not know this job (404)")]
    NotFound,
    /// This job cannot be polled (e.g. an id of a kind without a status endpoint, or no status
    /// URL known); the job backs off, the provider's other jobs go on.
    #[error("cannot poll this job: {0}")]
    Unpollable(String),
    #[error("the provider refused the API key ({0})")]
    Unauthorized(u16),
    #[error("rate limited by the provider")]
    RateLimited { retry_after: Option<Duration> },
    #[error("the provider did not answer in time")]
    Timeout,
    #[error("the provider answered {0}")]
    Http(u16),
    #[error("the provider's answer is malformed: {0}")]
    Malformed(String),
    #[error("cannot reach the provider: {0}")]
    Transport(String),
}

impl FetchError {
    /// A configuration problem (the user must act), as opposed to a passing failure.
    pub fn is_configuration(&self) -> bool {
        matches!(self, FetchError::NotConfigured(_) | FetchError::Unauthorized(_))
    }

    pub fn from_reqwest(e: reqwest::Error) -> FetchError {
        if e.is_timeout() {
            FetchError::Timeout
        } else if e.is_decode() {
            FetchError::Malformed(e.to_string())
        } else {
            FetchError::Transport(e.without_url().to_string())
        }
    }

    /// Maps a non-success HTTP status (401/403, 404, 429 with `Retry-After`, others).
    pub fn from_status(response: &reqwest::Response) -> FetchError {
        let status = response.status().as_u16();
        match status {
            401 | 403 => FetchError::Unauthorized(status),
            404 => FetchError::NotFound,
            429 => FetchError::RateLimited {
                retry_after: response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs),
            },
            _ => FetchError::Http(status),
        }
    }
}

#[async_trait]
pub trait Provider: Send + Sync {
    /// The lower-case name used in URLs (`/hooks/{name}`) and commands.
    fn name(&self) -> &'static str;

    /// Checks the request's signature on the raw body, in constant time.
    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError>;

    /// Parses a verified request. Only called after `verify` succeeded.
    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError>;

    /// Asks the provider for a job's current state (the pull path).
    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError>;
}

/// What every provider shares: secrets, settings and one HTTP client.
#[derive(Clone)]
pub struct ProviderContext {
    pub secrets: Arc<Secrets>,
    pub settings: Arc<Settings>,
    pub http: reqwest::Client,
}

impl ProviderContext {
    pub fn new(secrets: Arc<Secrets>, settings: Arc<Settings>) -> ProviderContext {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(20))
            .user_agent(concat!("nevermiss/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the HTTP client builds with static settings");
        ProviderContext { secrets, settings, http }
    }
}

/// The providers NeverMiss knows, by name.
#[derive(Clone)]
pub struct Providers {
    by_name: BTreeMap<&'static str, Arc<dyn Provider>>,
}

impl Providers {
    pub fn new(list: Vec<Arc<dyn Provider>>) -> Providers {
        Providers {
            by_name: list.into_iter().map(|p| (p.name(), p)).collect(),
        }
    }

    /// Every built-in provider.
    pub fn builtin(ctx: &ProviderContext) -> Providers {
        Providers::new(vec![
            Arc::new(generic::Generic::new(ctx.clone())),
            Arc::new(replicate::Replicate::new(ctx.clone())),
            Arc::new(openai::Openai::new(ctx.clone())),
            Arc::new(anthropic::Anthropic::new(ctx.clone())),
            Arc::new(fal::Fal::new(ctx.clone())),
        ])
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.by_name.keys().copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Provider>> {
        self.by_name.values()
    }
}

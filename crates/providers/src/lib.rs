//! NeverMiss's providers: the `Provider` trait and its error types (here, at the top of the
//! crate), each provider's adapter a module of its own (`generic`, `replicate`, `openai`,
//! `anthropic`, `fal`), the tables that map a provider's values to NeverMiss's beside them
//! (`vocabulary`, `job_kind`), the signing schemes they share (`standard_webhooks`), listing an
//! account's jobs (`discovery`) and reading a finished job's result from an answer (`result`).
//!
//! Each provider verifies its own signatures on the raw bytes, parses its own payloads into
//! normalized job events, and fetches a job's status for reconciliation; everything a provider
//! produces goes through the engine's one merge point. This crate sits between the store (the job
//! types it produces) and the engine: it cannot import the engine (it does not depend on it,
//! `tools/check-layers` checks that it never does), so the receiver, reconciliation and the API
//! are out of its reach. What it needs of the engine comes through the two traits below: the
//! settings it reads (`ProviderConfig`) and the secrets (`Credentials`).

pub mod anthropic;
pub mod discovery;
pub mod fal;
pub mod generic;
pub mod job_id;
pub mod job_kind;
pub mod masking;
pub mod openai;
pub mod recipe;
pub mod replicate;
pub mod result;
pub mod standard_webhooks;
pub mod vocabulary;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::HeaderMap;

use nevermiss_store as store;
use nevermiss_store::job;

use crate::job::JobEvent;

/// The variable that sets `what` for `provider`: `NEVERMISS_<PROVIDER>_<WHAT>`, the name upper-
/// cased and its `-` written `_` (a recipe's `acme-run` is `NEVERMISS_ACME_RUN_API_KEY`).
pub fn variable(provider: &str, what: &str) -> String {
    format!("NEVERMISS_{}_{what}", provider.to_ascii_uppercase().replace('-', "_"))
}

/// Which secret of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    WebhookSecret,
    ApiKey,
}

impl SecretKind {
    /// How the variable that overrides it ends (`NEVERMISS_<PROVIDER>_<SUFFIX>`).
    pub fn suffix(self) -> &'static str {
        match self {
            SecretKind::WebhookSecret => "WEBHOOK_SECRET",
            SecretKind::ApiKey => "API_KEY",
        }
    }
}

/// Why a secret could not be stored: the secret store's own error, in its own words.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StoreSecretError(pub Box<dyn std::error::Error + Send + Sync>);

/// Where the providers' secrets come from (the engine's secret store: the OS keychain or its
/// file, each secret overridden by `NEVERMISS_<PROVIDER>_<KIND>`). Secrets never enter the
/// database, the logs or an API answer.
pub trait Credentials: Send + Sync {
    /// A provider's secret, when it is set.
    fn get(&self, provider: &str, kind: SecretKind) -> Option<String>;

    /// Stores (or, with `None`, removes) a provider's secret: one a provider fetched for itself
    /// (Replicate's signing secret).
    fn set(&self, provider: &str, kind: SecretKind, value: Option<&str>) -> Result<(), StoreSecretError>;

    /// A secret a recipe names (`{secret.NAME}`), when it is set: `NEVERMISS_<PROVIDER>_<NAME>`,
    /// else `<provider>.<name>` in the secret store.
    fn get_named(&self, provider: &str, name: &str) -> Option<String>;
}

/// The settings the providers read (the engine's stored settings, cached in memory: a change
/// applies at the next request).
pub trait ProviderConfig: Send + Sync {
    /// A setting's value, when it is set.
    fn get(&self, key: &str) -> Option<String>;

    /// A provider's API base URL in force, without a trailing `/` (the engine's rule:
    /// `NEVERMISS_<PROVIDER>_BASE_URL`, else the stored setting `<provider>.base_url`; empty or
    /// unset: `None`, the provider's own).
    fn base_url(&self, provider: &str) -> Option<String>;

    /// The owner's account at `provider`: `NEVERMISS_<PROVIDER>_ACCOUNT`, else the stored setting
    /// `<provider>.account`; `None` while neither says one.
    fn account(&self, provider: &str) -> Option<String> {
        std::env::var(variable(provider, "ACCOUNT"))
            .ok()
            .or_else(|| self.get(&format!("{provider}.account")))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }
}

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
    /// The webhook secret in force cannot be this provider's (e.g. `whsec_` and not base64):
    /// answered 503, so the sender retries once it is corrected, never a 401 that looks like
    /// forgery.
    #[error("the webhook secret set for {provider} cannot be used: {reason}")]
    BadSecret { provider: &'static str, reason: String },
    /// Signed by the platform, for an account that is not the owner's (a scheme that proves only
    /// the platform): refused as unverified (401), kept with this cause as `foreign_account`.
    #[error("not sent for this NeverMiss's account")]
    ForeignAccount(String),
    /// The keys to check with cannot be had right now (e.g. a key set that cannot be fetched):
    /// answered 503 so the sender retries.
    #[error("cannot verify now: {0}")]
    Unavailable(String),
}

/// Why a job id cannot be one of a provider's jobs (`Provider::check_job_id`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadJobId {
    /// The recipe lists its ids' beginnings (`ids`), and the id starts with none of them.
    #[error("{provider} job ids are {prefixes}, not {job_id:?}")]
    NotItsPrefix { provider: String, prefixes: String, job_id: String },
    /// A built-in provider's ids have a shape (characters, a beginning) and the id has not.
    #[error("{provider} job ids are {shape}, not {job_id:?}")]
    NotItsShape { provider: &'static str, shape: &'static str, job_id: String },
    /// The poll URL puts piece `piece` of the id (`{job_id.N}`) in its path, and it has none.
    #[error("the job id {job_id:?} has no piece {piece}: this provider's ids are {pieces} pieces joined by /")]
    MissingPiece { job_id: String, piece: usize, pieces: usize },
    /// The poll URL puts the id in its path (`{job_id.path}`): an empty, `.` or `..` piece.
    #[error("the job id {job_id:?} is not a path of names (an empty, `.` or `..` piece)")]
    NotAPath { job_id: String },
}

/// Why a status URL a track request supplies is not kept (`Provider::check_poll_url`). fal is the
/// one provider that takes one (`fal::status_url_of`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPollUrl {
    /// The provider polls its jobs by their id.
    #[error("{provider} jobs are polled by their id: it takes no status_url")]
    TakesNone { provider: String },
    /// Not a URL (the parser's reason).
    #[error("the status_url is not a URL ({0})")]
    NotAUrl(String),
    #[error("the status_url must be an https URL on fal's queue")]
    NotHttp,
    /// On another origin than fal's queue or the configured base URL: the key is sent there.
    #[error("the status_url must be on fal's queue ({queue}/...) or the configured fal base URL, not {origin}")]
    ElsewhereThanTheQueue { queue: &'static str, origin: String },
}

/// A signed payload NeverMiss cannot use. Whatever ids could be read are kept with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ParseError {
    pub reason: String,
    pub delivery_id: Option<String>,
    pub job_id: Option<String>,
    pub kind: Unusable,
    /// The event type NeverMiss does not know (not in the provider's table of types), counted in
    /// `unknown_values` when the event is ignored (boxed: the refusal stays small).
    pub unknown: Option<Box<vocabulary::UnknownValue>>,
}

/// Why a verified payload is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// Unreadable, or without what NeverMiss needs (ids, times): kept as a rejected delivery.
    Malformed,
    /// A well-formed event of a kind NeverMiss does not act on (providers send more kinds than
    /// NeverMiss needs, and add new ones): answered `ignored` by the real providers.
    Unhandled,
}

impl ParseError {
    /// A malformed payload, with the ids it still names.
    pub fn malformed(reason: impl Into<String>, delivery_id: Option<String>, job_id: Option<String>) -> ParseError {
        ParseError { reason: reason.into(), delivery_id, job_id, kind: Unusable::Malformed, unknown: None }
    }

    /// The same refusal, as an event of a kind NeverMiss does not act on.
    pub fn unhandled(self) -> ParseError {
        ParseError { kind: Unusable::Unhandled, ..self }
    }

    /// The same refusal, about an event type `table` does not have (counted when ignored).
    pub fn of_unknown_type(self, table: &vocabulary::Table, kind: &str) -> ParseError {
        let known = table.get(kind).is_some();
        let unknown = (!known).then(|| {
            Box::new(vocabulary::UnknownValue {
                provider: table.provider,
                field: table.field(),
                value: vocabulary::counted_value(kind),
                job_id: self.job_id.clone().unwrap_or_default(),
            })
        });
        ParseError { unknown, ..self }
    }
}

use crate::job::JobRef;

/// Whose request a platform-signed delivery is (`Provider::sender_account`): the account it names
/// in its signed headers, and the job it is about, by which the owner's account is learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderAccount {
    pub account: String,
    pub job_id: Option<String>,
}

/// What a provider's job list gave (see `Provider::discover`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovered {
    /// Each listed job's current state, newest first.
    pub events: Vec<ListedJob>,
    /// The creation time (ms) of the newest job listed.
    pub newest_created_ms: Option<i64>,
    /// The list went on past `max_jobs`: older jobs of the window were not read.
    pub truncated: bool,
}

/// One job of a provider's list: its current state and when it was created (ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedJob {
    pub event: JobEvent,
    pub created_ms: i64,
}

impl Discovered {
    /// What two lists of one provider found together (one watermark: every list is walked down
    /// to the same `since`).
    pub fn and(mut self, other: Discovered) -> Discovered {
        self.events.extend(other.events);
        self.truncated |= other.truncated;
        self.newest_created_ms = self.newest_created_ms.max(other.newest_created_ms);
        self
    }
}

/// A verified, parsed delivery: its dedupe key and the job event it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedDelivery {
    pub delivery_id: String,
    pub event: JobEvent,
}

/// What one poll learned: the asked job's event and those of the jobs that belong with it (an
/// agent session's runs: polling the session learns them all), in the order they are to be
/// merged, and where to poll the asked job from now on when its id alone does not say (e.g. a
/// Replicate training).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusAnswer {
    pub events: Vec<JobEvent>,
    pub poll_url: Option<String>,
    /// The values the answer held that NeverMiss does not know (each names the job it decided):
    /// counted when that job's event is applied.
    pub unknown: Vec<vocabulary::UnknownValue>,
}

impl StatusAnswer {
    pub fn one(event: JobEvent) -> StatusAnswer {
        StatusAnswer { events: vec![event], poll_url: None, unknown: Vec::new() }
    }

    /// The same answer, with an unknown value it held.
    pub fn with_unknown(mut self, unknown: Option<vocabulary::UnknownValue>) -> StatusAnswer {
        self.unknown.extend(unknown);
        self
    }
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
    /// The kind of a failure of one job's poll (`None` for failures of the whole provider).
    pub fn job_error_kind(&self) -> Option<crate::job::PollErrorKind> {
        use crate::job::PollErrorKind;
        match self {
            FetchError::NotFound => Some(PollErrorKind::NotFound),
            FetchError::Unpollable(_) => Some(PollErrorKind::Unpollable),
            FetchError::Timeout => Some(PollErrorKind::Timeout),
            FetchError::Http(_) => Some(PollErrorKind::Http),
            FetchError::Malformed(_) => Some(PollErrorKind::Malformed),
            FetchError::Transport(_) => Some(PollErrorKind::Transport),
            FetchError::NotSupported(_) | FetchError::NotConfigured(_) | FetchError::Unauthorized(_) | FetchError::RateLimited { .. } => {
                None
            }
        }
    }

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
            429 => FetchError::RateLimited { retry_after: retry_after(response.headers(), chrono::Utc::now().timestamp()) },
            _ => FetchError::Http(status),
        }
    }
}

/// Sends a status request and reads its JSON answer: a transport failure or timeout, a non-2xx
/// status (`FetchError::from_status`) or a body that is not the expected JSON each become their
/// `FetchError`.
pub async fn fetch_json<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, FetchError> {
    let response = request.send().await.map_err(FetchError::from_reqwest)?;
    if !response.status().is_success() {
        return Err(FetchError::from_status(&response));
    }
    let bytes = read_answer(response).await?;
    serde_json::from_slice(&bytes).map_err(|e| FetchError::Malformed(e.to_string()))
}

/// A status answer must be about the job asked for: one about another is `Malformed`.
pub fn same_id(asked: &str, answered: &str) -> Result<(), FetchError> {
    if asked == answered {
        Ok(())
    } else {
        Err(FetchError::Malformed(format!("asked for {asked}, the answer is about {answered}")))
    }
}

/// Largest status answer read from a provider (real ones are a few KiB): a provider that sends
/// an endless body cannot fill the memory before the request timeout.
pub const MAX_STATUS_ANSWER: usize = 1024 * 1024;

/// Reads an answer's body, at most `MAX_STATUS_ANSWER` bytes (more is `Malformed`).
pub async fn read_answer(mut response: reqwest::Response) -> Result<Vec<u8>, FetchError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(FetchError::from_reqwest)? {
        if bytes.len() + chunk.len() > MAX_STATUS_ANSWER {
            return Err(FetchError::Malformed(format!("the answer is over {} KiB", MAX_STATUS_ANSWER / 1024)));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// How long a 429 asks to wait: OpenAI's `retry-after-ms` (milliseconds) first, else
/// `Retry-After` in seconds or as an HTTP date (`now_secs` is the current Unix time).
pub fn retry_after(headers: &reqwest::header::HeaderMap, now_secs: i64) -> Option<Duration> {
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = value("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_millis(ms.ceil() as u64));
        }
    }
    let v = value("retry-after")?;
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs));
        }
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?.timestamp();
    Some(Duration::from_secs(at.saturating_sub(now_secs).max(0) as u64))
}

/// Why a cancel request was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    /// The provider has no cancel call for this kind of job (answered 501).
    #[error("{0}")]
    NoCancel(String),
    /// The provider answered and refused, in its own words (answered 502 with them).
    #[error("the provider answered {status}: {text}")]
    Refused { status: u16, text: String },
    /// The provider could not be asked (no key, unreachable, no answer in time) (answered 502).
    #[error("{0}")]
    NotAsked(FetchError),
}

/// What a provider without a cancel call for a kind of job answers.
pub const NO_CANCEL: &str = "the provider has no cancel for this kind of job";

impl CancelError {
    pub fn no_cancel() -> CancelError {
        CancelError::NoCancel(NO_CANCEL.to_owned())
    }
}

/// Longest refusal text kept from a provider's answer.
const MAX_ANSWER_TEXT: usize = 300;

/// Sends a provider's cancel request and reads its answer: 2xx is accepted (its body's `status`,
/// or a Message Batch's `processing_status`, is the answer, else the HTTP status); anything else is the provider's
/// refusal in its own words (`answer_text`).
pub async fn send_cancel(request: reqwest::RequestBuilder) -> Result<String, CancelError> {
    let response = request.send().await.map_err(|e| CancelError::NotAsked(FetchError::from_reqwest(e)))?;
    let status = response.status();
    let bytes = read_answer(response).await.map_err(CancelError::NotAsked)?;
    if status.is_success() {
        let said = serde_json::from_slice::<serde_json::Value>(&bytes).ok().and_then(|v| {
            ["status", "processing_status"].iter().find_map(|f| v.get(*f).and_then(serde_json::Value::as_str).map(str::to_owned))
        });
        return Ok(match said {
            Some(said) => format!("accepted (status {said})"),
            None => format!("accepted ({status})"),
        });
    }
    Err(CancelError::Refused { status: status.as_u16(), text: answer_text(&bytes) })
}

/// A refusal's words as the provider wrote them, in one line: the message of its error shape
/// (`{"error":{"message"}}` for OpenAI and Anthropic, `{"detail"}` for Replicate and fal,
/// `{"title"}`, `{"status"}` for fal's queue), else the body's text.
pub fn answer_text(body: &[u8]) -> String {
    use serde_json::Value;
    let json = serde_json::from_slice::<Value>(body).ok();
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    let said = json.as_ref().and_then(|v| {
        text(v.pointer("/error/message"))
            .or_else(|| text(v.get("detail")))
            .or_else(|| text(v.get("message")))
            .or_else(|| text(v.get("title")))
            .or_else(|| text(v.get("error")))
            .or_else(|| text(v.get("status")))
    });
    let said = said.unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    let line: String = said.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = if line.is_empty() { "(no text)".to_owned() } else { line };
    match line.char_indices().nth(MAX_ANSWER_TEXT) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// Settings and secrets held in memory, for the providers' unit tests.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct InMemory {
    settings: std::sync::RwLock<BTreeMap<String, String>>,
    secrets: std::sync::RwLock<BTreeMap<(String, &'static str), String>>,
    pub(crate) named: std::sync::RwLock<BTreeMap<(String, String), String>>,
}

#[cfg(test)]
impl ProviderConfig for InMemory {
    fn get(&self, key: &str) -> Option<String> {
        self.settings.read().unwrap().get(key).cloned()
    }

    fn base_url(&self, provider: &str) -> Option<String> {
        ProviderConfig::get(self, &format!("{provider}.base_url"))
            .filter(|v| !v.trim().is_empty())
            .map(|v| v.trim_end_matches('/').to_owned())
    }
}

#[cfg(test)]
impl Credentials for InMemory {
    fn get(&self, provider: &str, kind: SecretKind) -> Option<String> {
        self.secrets.read().unwrap().get(&(provider.to_owned(), kind.suffix())).cloned()
    }

    fn set(&self, provider: &str, kind: SecretKind, value: Option<&str>) -> Result<(), StoreSecretError> {
        let mut secrets = self.secrets.write().unwrap();
        let key = (provider.to_owned(), kind.suffix());
        match value {
            Some(value) => secrets.insert(key, value.to_owned()),
            None => secrets.remove(&key),
        };
        Ok(())
    }

    fn get_named(&self, provider: &str, name: &str) -> Option<String> {
        self.named.read().unwrap().get(&(provider.to_owned(), name.to_owned())).cloned()
    }
}

/// A provider context with no setting and no secret (held in memory), for the providers' unit
/// tests.
#[cfg(test)]
pub(crate) fn test_context() -> ProviderContext {
    let memory = Arc::new(InMemory::default());
    ProviderContext::new(memory.clone(), memory)
}

/// Headers with a Standard Webhooks message id, for the providers' unit tests.
#[cfg(test)]
pub(crate) fn test_headers(id: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(standard_webhooks::ID_HEADER, id.parse().unwrap());
    h
}

#[async_trait]
pub trait Provider: Send + Sync {
    /// The lower-case name used in URLs (`/hooks/{name}`) and commands.
    fn name(&self) -> &'static str;

    /// Checks the request's signature on the raw body, in constant time.
    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError>;

    /// Parses a verified request. Only called after `verify` succeeded.
    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError>;

    /// Whether the sender is the user's own code (`generic`): a verified but unusable payload is
    /// then answered 400 with its reason, so they see it. A real provider's verified request is
    /// never answered 4xx (it retries for days, or disables the endpoint): 200 `ignored` or
    /// `rejected` (contract §2).
    fn sender_is_users_own(&self) -> bool {
        false
    }

    /// How this provider's webhook secret is written, when it signs with Standard Webhooks: what
    /// a secret is checked against when it is saved, and read with when a request is verified.
    fn secret_format(&self) -> Option<standard_webhooks::SecretFormat> {
        None
    }

    /// Whether a polling URL a track request supplies may be kept for this provider's jobs. The
    /// provider's key is sent there, so only a URL on the provider's own API hosts (or its
    /// configured base URL) is: anything else is refused with the reason. By default a provider
    /// polls its jobs by their id and takes no URL.
    fn check_poll_url(&self, url: &str) -> Result<(), BadPollUrl> {
        let _ = url;
        Err(BadPollUrl::TakesNone { provider: self.name().to_owned() })
    }

    /// The account a verified request was sent for, when the signature proves only that the
    /// platform sent it (fal signs every customer's webhooks with the same keys): the receiver
    /// then takes it only for the owner's account (`owner_account`). By default none: the
    /// signature is made with the owner's own secret.
    fn sender_account(&self, headers: &HeaderMap) -> Option<SenderAccount> {
        let _ = headers;
        None
    }

    /// Whether this provider's sender signs nothing, so that its webhook URL carries a secret
    /// token instead (`/hooks/{provider}/{token}`, checked by `verify_url_token`). By default, no.
    fn takes_url_token(&self) -> bool {
        false
    }

    /// Checks the token of the webhook URL, in constant time, for a provider that
    /// `takes_url_token`; its delivery is then only a hint (`poll_after_push`).
    fn verify_url_token(&self, token: &str) -> Result<(), VerifyError> {
        let _ = token;
        Err(VerifyError::Invalid)
    }

    /// How this provider's webhooks come in, for the UI to say what to set and paste.
    fn webhook_intake(&self) -> WebhookIntake {
        if self.takes_url_token() {
            WebhookIntake::UrlToken
        } else if self.proves_only_the_platform() {
            WebhookIntake::PlatformKeys
        } else {
            WebhookIntake::Signed
        }
    }

    /// The names of the secrets this provider's calls take besides its API key and webhook
    /// secret (a recipe's `{secret.NAME}`). By default, none.
    fn named_secrets(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether this provider's signature proves only the platform, so that its webhooks are
    /// taken only for the owner's account (`sender_account`).
    fn proves_only_the_platform(&self) -> bool {
        false
    }

    /// Where this provider comes from, in words: `built-in` (an adapter of this crate), `shipped
    /// recipe`, or the user's recipe file.
    fn origin(&self) -> String {
        "built-in".to_owned()
    }

    /// Asks the provider for a job's current state (the pull path).
    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError>;

    /// Whether a webhook is expected for this job: the provider sends webhooks for its kind of
    /// job and the webhook secret is set. Its end learned by polling is then a reconcile rescue
    /// (a webhook went missing); otherwise it is a completion by polling, counted apart.
    fn webhook_expected(&self, job_id: &str) -> bool;

    /// What reconciliation calls: the job's state and those of the jobs that belong with it (see
    /// `StatusAnswer`). By default, `fetch_status` alone.
    async fn fetch_statuses(&self, job: &JobRef) -> Result<StatusAnswer, FetchError> {
        Ok(StatusAnswer::one(self.fetch_status(job).await?))
    }

    /// Whether a delivery about this job is only a hint, thin on facts: the receiver then asks
    /// reconciliation to poll the job right after answering (e.g. an agent session's status
    /// webhook, which does not say which run ended nor why). By default, no.
    fn poll_after_push(&self, event: &JobEvent) -> bool {
        let _ = event;
        false
    }

    /// The id prefix of the jobs that end with this pushed event's job (a deleted session's runs):
    /// their unfinished ones are moved to the same state, in the same write. By default, none.
    fn ends_with_it(&self, event: &JobEvent) -> Option<String> {
        let _ = event;
        None
    }

    /// Whether an unfinished job of this provider raises a stuck alert when it is old (not a
    /// watcher that lives as long as its user likes, such as an agent session). By default, yes.
    fn may_be_stuck(&self, job_id: &str) -> bool {
        let _ = job_id;
        true
    }

    /// One poll of `job`, shown rather than merged (`nevermiss providers test`). By default, the
    /// conclusion of `fetch_statuses`; a recipe shows each expression's output too.
    async fn trace_poll(&self, job: &JobRef) -> PollTrace {
        let answer = self.fetch_statuses(job).await;
        PollTrace {
            request: format!("{} job {}", self.name(), job.job_id),
            status: None,
            reads: Vec::new(),
            conclusion: conclusion(&answer),
        }
    }

    /// Whether `job_id` can be one of this provider's jobs (its form), said when it is tracked so
    /// that a typo is refused at once rather than polled into an abandoned job, and before a
    /// URL-token hint about a job NeverMiss does not track would create one (a job that cannot be
    /// polled is never created). By default, any.
    fn check_job_id(&self, job_id: &str) -> Result<(), BadJobId> {
        let _ = job_id;
        Ok(())
    }

    /// Asks the provider to cancel a job with its own cancel call. Never a state: once the
    /// provider accepted, the job's end comes by a poll like any other. By default, none.
    async fn cancel(&self, job: &JobRef) -> Result<String, CancelError> {
        let _ = job;
        Err(CancelError::no_cancel())
    }

    /// Whether this provider can list the jobs started on the account (`discover`).
    fn can_discover(&self) -> bool {
        false
    }

    /// Whether its list names the owner's account, which only the owner can say
    /// (`<provider>.account`): discovery waits for it.
    fn discovery_needs_account_setting(&self) -> bool {
        false
    }

    /// The account's jobs created at or after `since_ms`, by listing them (not only the tracked
    /// or webhooked ones): a job started elsewhere is watched too. At most `max_jobs`.
    async fn discover(&self, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
        let _ = (since_ms, max_jobs);
        Err(FetchError::NotSupported(self.name()))
    }
}

/// How a provider's webhooks come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[ts(export)]
pub enum WebhookIntake {
    /// It sends none NeverMiss can take: its jobs are polled.
    None,
    /// Signed with the webhook secret, at `/hooks/{provider}`.
    Signed,
    /// Signed with the platform's published keys (no secret to set), at `/hooks/{provider}`.
    PlatformKeys,
    /// Unsigned: the webhook secret is a token in the URL, `/hooks/{provider}/{token}`.
    UrlToken,
}

/// One poll of one job, as `nevermiss providers test` shows it: what was asked, what the
/// provider answered, what each of a recipe's expressions read, and what NeverMiss concludes.
/// Nothing of it is merged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PollTrace {
    /// `GET https://...` (a URL never holds a secret: a recipe sends them in headers).
    pub request: String,
    /// The answer's HTTP status, when there was one.
    pub status: Option<u16>,
    pub reads: Vec<ReadTrace>,
    /// The state NeverMiss would merge, or the poll error the job would show.
    pub conclusion: String,
}

/// One expression of a recipe on one answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ReadTrace {
    pub key: String,
    pub expression: String,
    /// Its output as JSON text (`(nothing)` when it gave none), or why it failed.
    #[schema(value_type = ReadOutput)]
    pub output: Result<String, String>,
}

/// How a `Result<String, String>` is written (serde's own form), for the API's description.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
enum ReadOutput {
    /// The expression's output as JSON text.
    Ok(String),
    /// Why it failed.
    Err(String),
}

/// What `fetch_statuses` concludes, in words: the state (with the provider's value NeverMiss
/// does not know) or the poll's error.
pub fn conclusion(answer: &Result<StatusAnswer, FetchError>) -> String {
    match answer {
        Ok(answer) => {
            let event = &answer.events[0];
            let mut text = format!("state {}", event.state);
            for unknown in &answer.unknown {
                text.push_str(&format!(" ({} {} {:?} is not in its table)", unknown.provider, unknown.field, unknown.value));
            }
            if let Some(error) = &event.error {
                text.push_str(&format!(": {error}"));
            }
            text
        }
        Err(e) => format!("a poll error: {e}"),
    }
}

/// Most redirects followed by a call to a provider.
pub const MAX_REDIRECTS: usize = 5;

/// A call to a provider carries the owner's key, and not always as `Authorization` (which reqwest
/// drops on a redirect to another origin): `x-api-key`, `x-goog-api-key`, a recipe's own header.
/// So a redirect is followed only within the origin (scheme, host and port) the call was made
/// to; one to another origin is not followed, and its 3xx answer is the poll's error.
fn same_origin_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let first = attempt.previous().first();
    let same = first.is_some_and(|first| first.origin() == attempt.url().origin());
    if !same || attempt.previous().len() > MAX_REDIRECTS {
        attempt.stop()
    } else {
        attempt.follow()
    }
}

/// What every provider shares: secrets, settings and one HTTP client.
#[derive(Clone)]
pub struct ProviderContext {
    pub secrets: Arc<dyn Credentials>,
    pub settings: Arc<dyn ProviderConfig>,
    pub http: reqwest::Client,
}

/// The setting that bounds each request to a provider, in seconds (default 20).
pub const PROVIDER_TIMEOUT_SECS: &str = "provider_timeout_secs";
pub const DEFAULT_PROVIDER_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one request to a provider may take: the `provider_timeout_secs` setting (at most
/// 600 s), else 20 s.
pub fn provider_timeout(settings: &dyn ProviderConfig) -> Duration {
    settings
        .get(PROVIDER_TIMEOUT_SECS)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|secs| secs.is_finite() && *secs > 0.0)
        .map(|secs| Duration::from_secs_f64(secs.min(600.0)))
        .unwrap_or(DEFAULT_PROVIDER_TIMEOUT)
}

impl ProviderContext {
    pub fn new(secrets: Arc<dyn Credentials>, settings: Arc<dyn ProviderConfig>) -> ProviderContext {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(DEFAULT_PROVIDER_TIMEOUT)
            .user_agent(concat!("nevermiss/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::custom(same_origin_redirects))
            .build()
            .expect("the HTTP client builds with static settings");
        ProviderContext { secrets, settings, http }
    }

    /// Whether `provider`'s webhook secret is set (so its webhooks can be verified at all).
    pub fn has_webhook_secret(&self, provider: &str) -> bool {
        self.secrets.get(provider, SecretKind::WebhookSecret).is_some()
    }

    /// `provider`'s API key, or why polling cannot start (naming the variable that sets it).
    pub fn api_key(&self, provider: &str) -> Result<String, FetchError> {
        self.secrets
            .get(provider, SecretKind::ApiKey)
            .ok_or_else(|| FetchError::NotConfigured(format!("no API key ({})", variable(provider, "API_KEY"))))
    }

    /// How long one request to a provider may take (`provider_timeout`, read at each request, so
    /// a change applies at once).
    pub fn request_timeout(&self) -> Duration {
        provider_timeout(self.settings.as_ref())
    }

    /// A POST with the request timeout in force.
    pub fn post(&self, url: &str) -> reqwest::RequestBuilder {
        self.http.post(url).timeout(self.request_timeout())
    }

    /// A GET with the request timeout in force.
    pub fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.http.get(url).timeout(self.request_timeout())
    }
}

/// The providers NeverMiss knows, by name: the built-in ones and the shipped recipes, fixed at
/// start, and the user's recipes, replaced whole when their folder changes (`set_user_recipes`).
/// Clones share one set: the receiver, reconciliation and the API see a reload at once.
#[derive(Clone)]
pub struct Providers {
    known: Arc<std::sync::RwLock<Known>>,
}

struct Known {
    /// The built-in providers and the shipped recipes.
    fixed: BTreeMap<&'static str, Arc<dyn Provider>>,
    /// `fixed` and the user's recipes.
    by_name: BTreeMap<&'static str, Arc<dyn Provider>>,
    /// The user's recipe files refused at the last load, one line each.
    refused: Vec<String>,
}

impl Providers {
    pub fn new(list: Vec<Arc<dyn Provider>>) -> Providers {
        let fixed: BTreeMap<_, _> = list.into_iter().map(|p| (p.name(), p)).collect();
        Providers { known: Arc::new(std::sync::RwLock::new(Known { by_name: fixed.clone(), fixed, refused: Vec::new() })) }
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

    /// These providers and `more` (the shipped recipes), fixed, each under its own name; one
    /// whose name is taken already is left out.
    pub fn with(self, more: impl IntoIterator<Item = Arc<dyn Provider>>) -> Providers {
        {
            let mut known = self.known.write().unwrap();
            for provider in more {
                known.fixed.entry(provider.name()).or_insert(provider);
            }
            known.by_name = known.fixed.clone();
        }
        self
    }

    /// The user's recipes now: they replace the ones loaded before, with the files refused. A
    /// recipe cannot take a built-in or shipped provider's name (it is left out).
    pub fn set_user_recipes(&self, recipes: impl IntoIterator<Item = Arc<dyn Provider>>, refused: Vec<String>) {
        let mut known = self.known.write().unwrap();
        let mut by_name = known.fixed.clone();
        for provider in recipes {
            by_name.entry(provider.name()).or_insert(provider);
        }
        known.by_name = by_name;
        known.refused = refused;
    }

    /// The user's recipe files refused at the last load, one line each (file, key, problem).
    pub fn refused_recipes(&self) -> Vec<String> {
        self.known.read().unwrap().refused.clone()
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Provider>> {
        self.known.read().unwrap().by_name.get(name).cloned()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.known.read().unwrap().by_name.keys().copied().collect()
    }

    pub fn list(&self) -> Vec<Arc<dyn Provider>> {
        self.known.read().unwrap().by_name.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(retry_after(&headers(&[("retry-after", "7")]), 0), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&headers(&[("retry-after", "1.5")]), 0), Some(Duration::from_millis(1500)));
        assert_eq!(retry_after(&headers(&[("retry-after", "3"), ("retry-after-ms", "250")]), 0), Some(Duration::from_millis(250)));
        // An HTTP date: Wed, 21 Oct 2015 07:28:00 GMT is 1445412480.
        assert_eq!(
            retry_after(&headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]), 1445412480 - 30),
            Some(Duration::from_secs(30))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), 0), None);
        assert_eq!(retry_after(&headers(&[]), 0), None);
    }

    #[test]
    fn a_refusal_is_read_in_the_providers_own_words() {
        let openai = br#"{"error":{"message":"Cannot cancel a batch with status 'completed'.","type":"invalid_request_error"}}"#;
        assert_eq!(answer_text(openai), "Cannot cancel a batch with status 'completed'.");
        let replicate = br#"{"title":"Prediction is not cancelable","detail":"Prediction has already completed","status":400}"#;
        assert_eq!(answer_text(replicate), "Prediction has already completed");
        assert_eq!(answer_text(br#"{"status":"ALREADY_COMPLETED"}"#), "ALREADY_COMPLETED");
        assert_eq!(answer_text(b"  bad\n gateway "), "bad gateway");
        assert_eq!(answer_text(b""), "(no text)");
        assert!(answer_text("x".repeat(400).as_bytes()).ends_with("..."));
    }
}

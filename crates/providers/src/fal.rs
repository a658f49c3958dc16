//! The `fal` provider (fal's queue; see providers.md, section fal).
//!
//! - Webhooks are signed with Ed25519. The signed message is
//!   `{request_id}\n{user_id}\n{timestamp}\n{hex(sha256(raw body))}`, from the headers
//!   `X-Fal-Webhook-Request-Id`, `X-Fal-Webhook-User-Id`, `X-Fal-Webhook-Timestamp` (Unix seconds,
//!   5-minute tolerance) and `X-Fal-Webhook-Signature` (hex of the 64-byte signature). The public
//!   keys are fal's JWKS at `{base}/.well-known/jwks.json` (base: `NEVERMISS_FAL_BASE_URL`, the
//!   `fal.base_url` setting, else `https://rest.alpha.fal.ai`), kept in memory at most a day.
//!   When no cached key verifies, the JWKS is fetched again once, but never more than once a
//!   minute, so hostile traffic cannot make us hammer fal. No webhook secret is needed.
//! - One webhook per request (retried by fal): the request id is both the job id and the
//!   delivery id, so retries dedupe. `OK` is succeeded, `ERROR` is failed with its error text.
//! - Polling needs the submission's `status_url` (fal's status URL cannot be derived from the
//!   request id alone), given when the job is tracked. `COMPLETED` does not say how it ended: the
//!   `response_url` answers 2xx for a success, an error with a JSON `detail` for a failure.
//! - A cancelled request (fal's cancel call, `nevermiss cancel`) also ends `COMPLETED`; its error
//!   type `client_cancelled` (`ended_with`) makes it `canceled`, by polling and by webhook alike.
//!   The API key (`Authorization: Key ...`) is only ever sent to the status URL's origin.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use ed25519_dalek::{Signature, VerifyingKey};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::job_kind;
use super::vocabulary::{Meaning, Table, WhenUnknown};
use super::{send_cancel, BadPollUrl, CancelError, FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext, VerifyError};
use crate::job::{JobEvent, JobState};
use crate::SecretKind;

pub const NAME: &str = "fal";
/// Where fal publishes its webhook keys, unless a base URL is configured.
pub const DEFAULT_JWKS_BASE: &str = "https://rest.alpha.fal.ai";
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

pub const REQUEST_ID_HEADER: &str = "x-fal-webhook-request-id";
pub const USER_ID_HEADER: &str = "x-fal-webhook-user-id";
pub const TIMESTAMP_HEADER: &str = "x-fal-webhook-timestamp";
pub const SIGNATURE_HEADER: &str = "x-fal-webhook-signature";

/// Accepted distance between a webhook's timestamp and now, either way.
pub const TOLERANCE_SECS: i64 = 5 * 60;
/// Longest a fetched key set is trusted.
pub const JWKS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Least time between two fetches caused by a signature no cached key verifies.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// With no usable key set, least time between two attempts to load one after a failure
/// (meanwhile deliveries are answered 503 and the sender retries).
pub const FAILED_LOAD_RETRY: Duration = Duration::from_secs(5);
/// Most time allowed to fetch the key set (a webhook waits for it); less if the
/// `provider_timeout_secs` setting says so.
const JWKS_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest key set, status answer or error answer read.
const MAX_ANSWER: usize = 256 * 1024;
/// Longest error text kept with a failed job.
const MAX_ERROR_TEXT: usize = 1000;

pub struct Fal {
    ctx: ProviderContext,
    keys: KeyCache,
}

impl Fal {
    pub fn new(ctx: ProviderContext) -> Fal {
        Fal { ctx, keys: KeyCache::default() }
    }

    /// A job's status URL, if it is one the key may be sent to (`status_url_of`), checked at each
    /// use: a URL kept before this rule, or with another base URL, is not called.
    fn status_url(&self, text: &str) -> Result<Url, BadPollUrl> {
        status_url_of(text, self.ctx.settings.base_url(NAME).as_deref())
    }

    /// Where the key set is fetched from now (the setting may change at run time).
    fn jwks_url(&self) -> String {
        let base = self.ctx.settings.base_url(NAME).unwrap_or_else(|| DEFAULT_JWKS_BASE.to_owned());
        format!("{base}{JWKS_PATH}")
    }
}

// ---------------------------------------------------------------------------------------------
// Signatures
// ---------------------------------------------------------------------------------------------

/// The bytes fal signs: `{request_id}\n{user_id}\n{timestamp}\n{hex(sha256(body))}`.
pub fn signing_message(request_id: &str, user_id: &str, timestamp: &str, body: &[u8]) -> String {
    format!("{request_id}\n{user_id}\n{timestamp}\n{}", hex::encode(Sha256::digest(body)))
}

/// A request's signature, checked for form and age, ready to be verified against keys.
#[derive(Debug)]
pub struct SignedRequest {
    message: Vec<u8>,
    signature: Signature,
}

fn header<'a>(headers: &'a HeaderMap, name: &'static str, shown: &'static str) -> Result<&'a str, VerifyError> {
    headers.get(name).ok_or(VerifyError::Missing(shown))?.to_str().map(str::trim).map_err(|_| VerifyError::Invalid)
}

/// Reads the four signature headers: `Missing` if one is absent, `Expired` if the timestamp is
/// more than 5 minutes from `now_secs`, `Invalid` if the signature is not 64 bytes of hex.
pub fn signed_request(headers: &HeaderMap, body: &[u8], now_secs: i64) -> Result<SignedRequest, VerifyError> {
    let request_id = header(headers, REQUEST_ID_HEADER, "X-Fal-Webhook-Request-Id")?;
    let user_id = header(headers, USER_ID_HEADER, "X-Fal-Webhook-User-Id")?;
    let timestamp = header(headers, TIMESTAMP_HEADER, "X-Fal-Webhook-Timestamp")?;
    let signature = header(headers, SIGNATURE_HEADER, "X-Fal-Webhook-Signature")?;
    let ts: i64 = timestamp.parse().map_err(|_| VerifyError::Invalid)?;
    if now_secs.abs_diff(ts) > TOLERANCE_SECS as u64 {
        return Err(VerifyError::Expired);
    }
    let mut bytes = [0u8; 64];
    hex::decode_to_slice(signature, &mut bytes).map_err(|_| VerifyError::Invalid)?;
    Ok(SignedRequest {
        message: signing_message(request_id, user_id, timestamp, body).into_bytes(),
        signature: Signature::from_bytes(&bytes),
    })
}

impl SignedRequest {
    /// Whether any of `keys` verifies this request (strict Ed25519 verification).
    pub fn verified_by_any(&self, keys: &[VerifyingKey]) -> bool {
        keys.iter().any(|key| key.verify_strict(&self.message, &self.signature).is_ok())
    }
}

/// The Ed25519 keys of a JWKS (`kty` `OKP`, `crv` `Ed25519`, `x` base64url); others are skipped.
pub fn parse_jwks(bytes: &[u8]) -> Result<Vec<VerifyingKey>, String> {
    #[derive(Deserialize)]
    struct Jwks {
        keys: Vec<Value>,
    }
    let jwks: Jwks = serde_json::from_slice(bytes).map_err(|e| format!("the key set is not a JWKS: {e}"))?;
    let base64url = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new().with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let keys: Vec<VerifyingKey> = jwks
        .keys
        .iter()
        .filter(|k| k.get("kty").and_then(Value::as_str) == Some("OKP") && k.get("crv").and_then(Value::as_str) == Some("Ed25519"))
        .filter_map(|k| k.get("x").and_then(Value::as_str))
        .filter_map(|x| base64url.decode(x).ok())
        .filter_map(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
        .filter_map(|bytes| VerifyingKey::from_bytes(&bytes).ok())
        .collect();
    if keys.is_empty() {
        return Err("the key set has no Ed25519 key".into());
    }
    Ok(keys)
}

/// A fetched key set.
struct KeySet {
    url: String,
    keys: Vec<VerifyingKey>,
    fetched_at: Instant,
    generation: u64,
}

impl KeySet {
    fn usable_for(&self, url: &str) -> bool {
        self.url == url && self.fetched_at.elapsed() < JWKS_MAX_AGE
    }
}

/// fal's keys in memory. Reads take a snapshot; fetches are one at a time (the async lock), so a
/// burst of webhooks causes one fetch, not one each.
#[derive(Default)]
struct KeyCache {
    current: RwLock<Option<Arc<KeySet>>>,
    fetching: tokio::sync::Mutex<FetchState>,
}

#[derive(Default)]
struct FetchState {
    generation: u64,
    /// The last fetch caused by a signature no cached key verified.
    last_refresh: Option<Instant>,
    /// The last failed load while no usable key set was held: (when, for which URL, why).
    last_failure: Option<(Instant, String, String)>,
}

impl KeyCache {
    fn snapshot(&self, url: &str) -> Option<Arc<KeySet>> {
        self.current.read().unwrap().clone().filter(|set| set.usable_for(url))
    }

    fn store(&self, state: &mut FetchState, url: &str, keys: Vec<VerifyingKey>) -> Arc<KeySet> {
        state.generation += 1;
        let set = Arc::new(KeySet { url: url.to_owned(), keys, fetched_at: Instant::now(), generation: state.generation });
        *self.current.write().unwrap() = Some(set.clone());
        set
    }
}

impl Fal {
    /// The keys to verify with: the cached set while it is under a day old, else a fresh one.
    /// `Unavailable` when none can be had (the delivery is answered 503 and retried).
    async fn keys(&self, url: &str) -> Result<Arc<KeySet>, VerifyError> {
        if let Some(set) = self.keys.snapshot(url) {
            return Ok(set);
        }
        let mut state = self.keys.fetching.lock().await;
        // Another request may have loaded it while this one waited.
        if let Some(set) = self.keys.snapshot(url) {
            return Ok(set);
        }
        if let Some((at, failed_url, reason)) = &state.last_failure {
            if failed_url == url && at.elapsed() < FAILED_LOAD_RETRY {
                return Err(VerifyError::Unavailable(reason.clone()));
            }
        }
        match self.fetch_jwks(url).await {
            Ok(keys) => {
                state.last_failure = None;
                Ok(self.keys.store(&mut state, url, keys))
            }
            Err(reason) => {
                tracing::warn!(provider = NAME, %reason, "cannot load fal's webhook keys");
                state.last_failure = Some((Instant::now(), url.to_owned(), reason.clone()));
                Err(VerifyError::Unavailable(reason))
            }
        }
    }

    /// No key of `seen` verified: fetch the set again (fal may have rotated its keys), unless
    /// another request already did since, or a refresh was made less than a minute ago.
    async fn refreshed_keys(&self, url: &str, seen: &KeySet) -> Option<Arc<KeySet>> {
        let mut state = self.keys.fetching.lock().await;
        if let Some(set) = self.keys.snapshot(url) {
            if set.generation != seen.generation {
                return Some(set);
            }
        }
        if state.last_refresh.is_some_and(|at| at.elapsed() < MIN_REFRESH_INTERVAL) {
            return None;
        }
        state.last_refresh = Some(Instant::now());
        match self.fetch_jwks(url).await {
            Ok(keys) => Some(self.keys.store(&mut state, url, keys)),
            Err(reason) => {
                tracing::warn!(provider = NAME, %reason, "cannot refresh fal's webhook keys");
                None
            }
        }
    }

    async fn fetch_jwks(&self, url: &str) -> Result<Vec<VerifyingKey>, String> {
        let response = self
            .ctx
            .http
            .get(url)
            .timeout(self.ctx.request_timeout().min(JWKS_TIMEOUT))
            .send()
            .await
            .map_err(|e| format!("cannot fetch fal's key set: {}", e.without_url()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("fal's key set answered {}", status.as_u16()));
        }
        let bytes = read_limited(response).await.map_err(|e| format!("cannot read fal's key set: {e}"))?;
        parse_jwks(&bytes)
    }
}

// ---------------------------------------------------------------------------------------------
// Webhook payloads
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct WebhookBody {
    request_id: String,
    status: String,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    payload: Option<Value>,
}

/// One line of text for an error value: a string as is; a list of `{msg, loc}` entries (a
/// validation error) as their messages; anything else as compact JSON. Bounded in length.
fn error_text(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|item| match item.get("msg").and_then(Value::as_str) {
                Some(msg) => {
                    let loc = item
                        .get("loc")
                        .and_then(Value::as_array)
                        .map(|parts| {
                            parts
                                .iter()
                                .map(|p| p.as_str().map(str::to_owned).unwrap_or_else(|| p.to_string()))
                                .collect::<Vec<_>>()
                                .join(".")
                        })
                        .filter(|l| !l.is_empty());
                    match loc {
                        Some(loc) => format!("{loc}: {msg}"),
                        None => msg.to_owned(),
                    }
                }
                None => error_text(item),
            })
            .collect::<Vec<_>>()
            .join("; "),
        Value::Object(map) => match map.get("msg").or_else(|| map.get("message")).or_else(|| map.get("detail")) {
            Some(inner) => error_text(inner),
            None => value.to_string(),
        },
        other => other.to_string(),
    };
    one_line(&text)
}

fn one_line(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= MAX_ERROR_TEXT {
        return flat;
    }
    let mut cut: String = flat.chars().take(MAX_ERROR_TEXT).collect();
    cut.push('…');
    cut
}

// ---------------------------------------------------------------------------------------------
// Polling
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct StatusAnswer {
    status: String,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    response_url: Option<String>,
    /// A completed request that failed may say so here already (fal-client's `Completed` reads
    /// `error` and `error_type`).
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    error_type: Option<String>,
}

/// A status answer's `status`, as fal-client's `_parse_status` reads it (`IN_QUEUE`,
/// `IN_PROGRESS`, `COMPLETED`; the client has no typed model). `COMPLETED` does not say how the
/// request ended: its response URL does (its `error_type` or `X-Fal-Error-Type`, else 2xx).
pub const STATUSES: Table = Table {
    provider: NAME,
    key: "fal.status",
    sdk: "`_BaseRequestHandle._parse_status`",
    entries: &[
        ("IN_QUEUE", Meaning::State(JobState::Queued, None)),
        ("IN_PROGRESS", Meaning::State(JobState::Running, None)),
        ("COMPLETED", Meaning::ReadAtOnce(JobState::Running)),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// The header a failed request's response carries its error type in (as its body's `error_type`).
pub const ERROR_TYPE_HEADER: &str = "x-fal-error-type";

/// The error type of a request its caller cancelled (fal's request errors: `client_cancelled`,
/// "The request was cancelled by the client", HTTP 499). A cancelled request still ends
/// `COMPLETED` in the queue; this error type is what says it was cancelled rather than failed.
pub const CANCELLED: &str = "client_cancelled";

/// How a request that ended with `error_type` ended: canceled when fal says its caller cancelled
/// it, failed for every other error type (the one place that tells them apart, for the status
/// answer, the response URL and the webhook alike).
pub fn ended_with(error_type: &str) -> JobState {
    if error_type == CANCELLED {
        JobState::Canceled
    } else {
        JobState::Failed
    }
}

/// fal's queue: where every request's status URL is (`https://queue.fal.run/{app}/requests/{id}/status`).
pub const QUEUE_ORIGIN: &str = "https://queue.fal.run";

/// A status URL, accepted only on fal's queue or on the configured base URL's origin (the user
/// pointed NeverMiss there): the API key is sent to it, so a URL anyone supplies must not take the
/// key elsewhere, nor make the engine call an internal address.
pub fn status_url_of(text: &str, base_url: Option<&str>) -> Result<Url, BadPollUrl> {
    let url = Url::parse(text.trim()).map_err(|e| BadPollUrl::NotAUrl(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(BadPollUrl::NotHttp);
    }
    let queue = Url::parse(QUEUE_ORIGIN).expect("fal's queue origin is a URL");
    let configured = base_url.and_then(|b| Url::parse(b.trim()).ok());
    if same_origin(&url, &queue) || configured.is_some_and(|base| same_origin(&url, &base)) {
        return Ok(url);
    }
    Err(BadPollUrl::ElsewhereThanTheQueue { queue: QUEUE_ORIGIN, origin: url.origin().ascii_serialization() })
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme() && a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
}

/// Where a request is cancelled: its status URL with `/cancel` for `/status` (fal-client's
/// `cancel_url` is the request's URL with `/cancel`, its `status_url` the same with `/status`).
/// The app a status URL names, the path before its `/requests/` (`fal-ai/flux/dev` in
/// `https://queue.fal.run/fal-ai/flux/dev/requests/{id}/status`): its jobs' kind.
pub fn app_path(status_url: &Url) -> Option<String> {
    let (app, _) = status_url.path().trim_start_matches('/').split_once("/requests/")?;
    Some(app.trim_end_matches('/').to_owned()).filter(|app| !app.is_empty())
}

pub fn cancel_url(status_url: &Url) -> Result<Url, String> {
    let path = status_url.path().trim_end_matches('/');
    let base = path.strip_suffix("/status").ok_or("the status_url does not end in /status")?;
    let mut url = status_url.clone();
    url.set_path(&format!("{base}/cancel"));
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// Where the result of a completed request is: the status answer's `response_url` when it is on
/// the status URL's own origin (the API key is sent there, and nowhere else), else the status URL
/// without its `/status`.
fn response_url(status_url: &Url, given: Option<&str>) -> Result<Url, FetchError> {
    if let Some(given) = given.map(str::trim).filter(|g| !g.is_empty()) {
        match status_url.join(given) {
            Ok(url) if same_origin(status_url, &url) => return Ok(url),
            Ok(url) => tracing::warn!(
                provider = NAME,
                host = url.host_str().unwrap_or(""),
                "response_url is on another host than the status_url; using the status_url's own instead"
            ),
            Err(_) => tracing::warn!(provider = NAME, "response_url is not a URL; using the status_url's own instead"),
        }
    }
    let path = status_url.path().trim_end_matches('/');
    let Some(base) = path.strip_suffix("/status") else {
        return Err(FetchError::Malformed("COMPLETED without a usable response_url, and the status_url does not end in /status".into()));
    };
    let mut url = status_url.clone();
    url.set_path(base);
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

/// Reads an answer's body, at most `MAX_ANSWER` bytes.
async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.without_url().to_string())? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(format!("answer over {MAX_ANSWER} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Answers of the response URL that say nothing about how the job ended: a refused key, a rate
/// limit, an unknown request, or a gateway in trouble. They are errors of the poll, not of the job.
fn is_poll_problem(status: u16) -> bool {
    matches!(status, 401 | 403 | 404 | 408 | 429 | 502 | 503 | 504)
}

impl Fal {
    fn authorization(&self) -> Result<HeaderValue, FetchError> {
        let key = self
            .ctx
            .secrets
            .get(NAME, SecretKind::ApiKey)
            .filter(|k| !k.trim().is_empty())
            .ok_or_else(|| FetchError::NotConfigured("no fal API key (NEVERMISS_FAL_API_KEY or the secret store)".into()))?;
        let mut value = HeaderValue::from_str(&format!("Key {}", key.trim()))
            .map_err(|_| FetchError::NotConfigured("the fal API key has characters a header cannot carry".into()))?;
        value.set_sensitive(true);
        Ok(value)
    }

    async fn get(&self, url: &Url, auth: &HeaderValue) -> Result<reqwest::Response, FetchError> {
        // reqwest drops the Authorization header when a redirect leaves the origin.
        self.ctx
            .http
            .get(url.clone())
            .timeout(self.ctx.request_timeout())
            .header(reqwest::header::AUTHORIZATION, auth.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(FetchError::from_reqwest)
    }

    /// How a completed request ended, from its response URL. A failed request says why in its
    /// body's `error_type` or its `X-Fal-Error-Type` header (fal-client's `_raise_for_status`
    /// reads both): the job failed, whatever the HTTP status (a `request_timeout` comes as a
    /// 504), never a polling problem.
    async fn outcome(&self, job_id: &str, url: &Url, auth: &HeaderValue) -> Result<JobEvent, FetchError> {
        let response = self.get(url, auth).await?;
        let status = response.status();
        if status.is_success() {
            // What it produced, when the answer is JSON of at most `MAX_ANSWER` bytes (a larger
            // one still says it succeeded): the same result as its webhook's `payload`.
            let result = read_limited(response)
                .await
                .ok()
                .and_then(|body| serde_json::from_slice::<Value>(&body).ok())
                .and_then(|payload| crate::result::fal(&payload));
            return Ok(JobEvent { result, ..event(job_id, JobState::Succeeded, None) });
        }
        let fallback = FetchError::from_status(&response);
        let header_type = response
            .headers()
            .get(ERROR_TYPE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        let body = read_limited(response).await.map_err(FetchError::Transport)?;
        let json = serde_json::from_slice::<Value>(&body).ok();
        let detail = json.as_ref().and_then(|v| v.get("detail").filter(|d| !d.is_null()).map(error_text)).filter(|d| !d.is_empty());
        let error_type = json
            .as_ref()
            .and_then(|v| v.get("error_type"))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .or(header_type);
        if let Some(error_type) = error_type {
            return Ok(event(job_id, ended_with(&error_type), Some(failure(&error_type, detail))));
        }
        if is_poll_problem(status.as_u16()) {
            return Err(fallback);
        }
        match detail {
            Some(detail) => Ok(event(job_id, JobState::Failed, Some(detail))),
            None => Err(fallback),
        }
    }
}

/// A failed request's reason: its error type, with its detail when it has one.
fn failure(error_type: &str, detail: Option<String>) -> String {
    match detail {
        Some(detail) => format!("{error_type}: {detail}"),
        None => error_type.to_owned(),
    }
}

fn event(job_id: &str, state: JobState, error: Option<String>) -> JobEvent {
    JobEvent {
        group: None,
        provider: NAME.into(),
        job_id: job_id.to_owned(),
        state,
        // fal gives no version: an unchanged state polls as the same event ("stale"), and the
        // rank alone orders queued < running < terminal.
        seq: 0,
        label: None,
        finished_at: None,
        // fal's status answer and webhook carry no start time (documented formats, 2026).
        started_at: None,
        error,
        detail: None,
        result: None,
        provider_url: None,
        kind: None,
    }
}

#[async_trait]
impl Provider for Fal {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A fal job sends a webhook only when it was submitted with `fal_webhook`, which a tracked
    /// job does not say: its end learned by polling is a completion by polling, not a rescue.
    fn webhook_expected(&self, _job_id: &str) -> bool {
        false
    }

    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        // Form and age first: a replay or garbage costs no key fetch.
        let request = signed_request(headers, body, chrono::Utc::now().timestamp())?;
        let url = self.jwks_url();
        let keys = self.keys(&url).await?;
        if request.verified_by_any(&keys.keys) {
            return Ok(());
        }
        match self.refreshed_keys(&url, &keys).await {
            Some(fresh) if request.verified_by_any(&fresh.keys) => Ok(()),
            _ => Err(VerifyError::Invalid),
        }
    }

    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        parse_webhook(headers, body)
    }

    fn proves_only_the_platform(&self) -> bool {
        true
    }

    /// fal's signature proves only fal: the user id it signs says whose request it is.
    fn sender_account(&self, headers: &HeaderMap) -> Option<super::SenderAccount> {
        let read = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty());
        Some(super::SenderAccount {
            account: read(USER_ID_HEADER).unwrap_or_default().to_owned(),
            job_id: read(REQUEST_ID_HEADER).map(str::to_owned),
        })
    }

    fn check_poll_url(&self, url: &str) -> Result<(), BadPollUrl> {
        self.status_url(url).map(drop)
    }

    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        Ok(self.fetch_statuses(job).await?.events.swap_remove(0))
    }

    async fn fetch_statuses(&self, job: &JobRef) -> Result<super::StatusAnswer, FetchError> {
        let auth = self.authorization()?;
        let status_url =
            job.poll_url.as_deref().ok_or_else(|| FetchError::Unpollable("no status_url known: track it with --status-url".into()))?;
        let status_url = self.status_url(status_url).map_err(|e| FetchError::Unpollable(e.to_string()))?;
        let response = self.get(&status_url, &auth).await?;
        if !response.status().is_success() {
            return Err(FetchError::from_status(&response));
        }
        let bytes = read_limited(response).await.map_err(FetchError::Transport)?;
        let answer: StatusAnswer = serde_json::from_slice(&bytes).map_err(|e| FetchError::Malformed(format!("status answer: {e}")))?;
        if let Some(id) = answer.request_id.as_deref().filter(|id| !id.is_empty()) {
            if id != job.job_id {
                return Err(FetchError::Malformed(format!("asked for {}, the answer is about {id}", job.job_id)));
            }
        }
        let mut answer = self.status_answer(job, &status_url, &auth, answer).await?;
        // Its kind: the app the status URL names (a webhook names none).
        let kind = app_path(&status_url).map(|app| job_kind::of(NAME, &app, None));
        for ev in &mut answer.events {
            ev.kind = kind.clone();
        }
        Ok(answer)
    }

    /// `PUT {queue}/requests/{id}/cancel` with the key, as fal-client's `cancel` sends it (only to
    /// the status URL's own origin, like every request with the key).
    async fn cancel(&self, job: &JobRef) -> Result<String, CancelError> {
        let auth = self.authorization().map_err(CancelError::NotAsked)?;
        let status_url = job
            .poll_url
            .as_deref()
            .ok_or_else(|| CancelError::NoCancel("no status_url known: fal's cancel URL is derived from it".into()))?;
        let url = self.status_url(status_url).map_err(|e| e.to_string()).and_then(|u| cancel_url(&u)).map_err(CancelError::NoCancel)?;
        let request = self.ctx.http.put(url).timeout(self.ctx.request_timeout()).header(reqwest::header::AUTHORIZATION, auth);
        send_cancel(request).await
    }
}

impl Fal {
    /// What a status answer says (`STATUSES`): queued, running, or, once `COMPLETED`, what its
    /// error type or its response URL says.
    async fn status_answer(
        &self,
        job: &JobRef,
        status_url: &Url,
        auth: &HeaderValue,
        answer: StatusAnswer,
    ) -> Result<super::StatusAnswer, FetchError> {
        let read = STATUSES.state(&answer.status, &job.job_id);
        if STATUSES.get(&answer.status) != Some(Meaning::ReadAtOnce(JobState::Running)) {
            let mut ev = event(&job.job_id, read.state, None);
            ev.detail = read.unknown.as_ref().and(read.reason.clone());
            return Ok(super::StatusAnswer::one(ev).with_unknown(read.unknown));
        }
        if let Some(error_type) = answer.error_type.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            let detail = answer.error.as_ref().filter(|e| !e.is_null()).map(error_text).filter(|d| !d.is_empty());
            return Ok(super::StatusAnswer::one(event(&job.job_id, ended_with(error_type), Some(failure(error_type, detail)))));
        }
        let url = response_url(status_url, answer.response_url.as_deref())?;
        Ok(super::StatusAnswer::one(self.outcome(&job.job_id, &url, auth).await?))
    }
}

/// A verified webhook: the request id is the job and the delivery id; `seq` is the timestamp
/// header in milliseconds.
pub fn parse_webhook(headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError> {
    let reject = |reason: String| {
        let loose: Option<Value> = serde_json::from_slice(body).ok();
        // The body's request id, else the signed X-Fal-Webhook-Request-Id header's: a body
        // that cannot be read is still kept once per request (fal retries it).
        let id =
            loose.as_ref().and_then(|v| v.get("request_id")).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned).or_else(
                || headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned),
            );
        ParseError::malformed(one_line(&reason), id.clone(), id)
    };
    let p: WebhookBody = serde_json::from_slice(body).map_err(|e| reject(format!("invalid fal webhook: {e}")))?;
    let request_id = p.request_id.trim().to_owned();
    if request_id.is_empty() {
        return Err(reject("request_id is empty".into()));
    }
    let timestamp: i64 = headers
        .get(TIMESTAMP_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| reject("X-Fal-Webhook-Timestamp is missing or not a number".into()))?;
    let (state, error) = match p.status.as_str() {
        "OK" => (JobState::Succeeded, None),
        "ERROR" => {
            let error = p.error.as_ref().filter(|e| !e.is_null()).map(error_text).filter(|e| !e.is_empty());
            let detail =
                p.payload.as_ref().and_then(|pl| pl.get("detail")).filter(|d| !d.is_null()).map(error_text).filter(|d| !d.is_empty());
            let text = match (error, detail) {
                (Some(e), Some(d)) => format!("{e}: {d}"),
                (Some(e), None) => e,
                (None, Some(d)) => d,
                (None, None) => "fal reported an error without a message".to_owned(),
            };
            // A request error names its type beside its detail (as the response URL answers it).
            let error_type = p.payload.as_ref().and_then(|pl| pl.get("error_type")).and_then(Value::as_str).map(str::trim);
            (error_type.map(ended_with).unwrap_or(JobState::Failed), Some(one_line(&text)))
        }
        // A status NeverMiss does not act on (fal documents only OK and ERROR): ignored.
        other => return Err(reject(format!("unknown fal status {other:?} (expected OK or ERROR)")).unhandled()),
    };
    Ok(ParsedDelivery {
        delivery_id: request_id.clone(),
        event: JobEvent {
            group: None,
            provider: NAME.into(),
            job_id: request_id,
            state,
            seq: timestamp.saturating_mul(1000),
            label: None,
            finished_at: None,
            started_at: None,
            error,
            detail: None,
            // What it produced: the model's output, as its response URL answers it too.
            result: p.payload.as_ref().filter(|_| state == JobState::Succeeded).and_then(crate::result::fal),
            provider_url: None,
            // The app is in the status URL (a poll's), not in the webhook.
            kind: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    const NOW: i64 = 1_790_000_000;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn signed_headers(signer: &SigningKey, request_id: &str, timestamp: i64, body: &[u8]) -> HeaderMap {
        let ts = timestamp.to_string();
        let message = signing_message(request_id, "user-1", &ts, body);
        let signature = signer.sign(message.as_bytes());
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID_HEADER, request_id.parse().unwrap());
        headers.insert(USER_ID_HEADER, "user-1".parse().unwrap());
        headers.insert(TIMESTAMP_HEADER, ts.parse().unwrap());
        headers.insert(SIGNATURE_HEADER, hex::encode(signature.to_bytes()).parse().unwrap());
        headers
    }

    fn check(headers: &HeaderMap, body: &[u8], keys: &[VerifyingKey], now: i64) -> Result<(), VerifyError> {
        let request = signed_request(headers, body, now)?;
        if request.verified_by_any(keys) {
            Ok(())
        } else {
            Err(VerifyError::Invalid)
        }
    }

    const BODY: &[u8] = br#"{"request_id":"req-1","gateway_request_id":"req-1","status":"OK","payload":{"images":[]}}"#;

    #[test]
    fn the_cancel_url_is_the_status_urls_own() {
        let status = Url::parse("https://queue.fal.run/fal-ai/flux/requests/r-1/status?logs=1").unwrap();
        assert_eq!(cancel_url(&status).unwrap().as_str(), "https://queue.fal.run/fal-ai/flux/requests/r-1/cancel");
        assert!(cancel_url(&Url::parse("https://queue.fal.run/fal-ai/flux/requests/r-1").unwrap()).is_err());
    }

    #[test]
    fn message_format() {
        let msg = signing_message("r", "u", "12", b"");
        assert_eq!(msg, "r\nu\n12\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn a_good_signature_verifies() {
        let signer = key(7);
        let headers = signed_headers(&signer, "req-1", NOW, BODY);
        assert_eq!(check(&headers, BODY, &[signer.verifying_key()], NOW), Ok(()));
        // Within the tolerance either way.
        assert_eq!(check(&headers, BODY, &[signer.verifying_key()], NOW + 299), Ok(()));
        assert_eq!(check(&headers, BODY, &[signer.verifying_key()], NOW - 299), Ok(()));
        // Any key of the set may verify (rotation).
        assert_eq!(check(&headers, BODY, &[key(1).verifying_key(), signer.verifying_key()], NOW), Ok(()));
    }

    #[test]
    fn a_tampered_body_fails() {
        let signer = key(7);
        let headers = signed_headers(&signer, "req-1", NOW, BODY);
        let tampered = String::from_utf8(BODY.to_vec()).unwrap().replace("\"OK\"", "\"ERROR\"");
        assert_eq!(check(&headers, tampered.as_bytes(), &[signer.verifying_key()], NOW), Err(VerifyError::Invalid));
    }

    #[test]
    fn signed_headers_cannot_be_changed() {
        let signer = key(7);
        let mut headers = signed_headers(&signer, "req-1", NOW, BODY);
        headers.insert(REQUEST_ID_HEADER, "req-2".parse().unwrap());
        assert_eq!(check(&headers, BODY, &[signer.verifying_key()], NOW), Err(VerifyError::Invalid));
        let mut headers = signed_headers(&signer, "req-1", NOW, BODY);
        headers.insert(USER_ID_HEADER, "someone-else".parse().unwrap());
        assert_eq!(check(&headers, BODY, &[signer.verifying_key()], NOW), Err(VerifyError::Invalid));
        let mut headers = signed_headers(&signer, "req-1", NOW, BODY);
        headers.insert(TIMESTAMP_HEADER, (NOW + 1).to_string().parse().unwrap());
        assert_eq!(check(&headers, BODY, &[signer.verifying_key()], NOW), Err(VerifyError::Invalid));
    }

    #[test]
    fn a_wrong_key_fails() {
        let headers = signed_headers(&key(7), "req-1", NOW, BODY);
        assert_eq!(check(&headers, BODY, &[key(8).verifying_key()], NOW), Err(VerifyError::Invalid));
        assert_eq!(check(&headers, BODY, &[], NOW), Err(VerifyError::Invalid));
    }

    #[test]
    fn an_expired_timestamp_fails() {
        let signer = key(7);
        let old = signed_headers(&signer, "req-1", NOW - 301, BODY);
        assert_eq!(check(&old, BODY, &[signer.verifying_key()], NOW), Err(VerifyError::Expired));
        let future = signed_headers(&signer, "req-1", NOW + 301, BODY);
        assert_eq!(check(&future, BODY, &[signer.verifying_key()], NOW), Err(VerifyError::Expired));
        let mut garbled = signed_headers(&signer, "req-1", NOW, BODY);
        garbled.insert(TIMESTAMP_HEADER, "yesterday".parse().unwrap());
        assert_eq!(check(&garbled, BODY, &[signer.verifying_key()], NOW), Err(VerifyError::Invalid));
    }

    #[test]
    fn a_malformed_signature_fails() {
        let signer = key(7);
        let good = signed_headers(&signer, "req-1", NOW, BODY);
        let hex_sig = good.get(SIGNATURE_HEADER).unwrap().to_str().unwrap().to_owned();
        for bad in [
            format!("{}zz", &hex_sig[..126]), // not hex
            hex_sig[..126].to_owned(),        // 63 bytes
            format!("{hex_sig}00"),           // 65 bytes
            String::new(),                    // empty
            format!("0x{}", &hex_sig[2..]),   // a prefix
        ] {
            let mut headers = good.clone();
            headers.insert(SIGNATURE_HEADER, bad.parse().unwrap());
            assert_eq!(check(&headers, BODY, &[signer.verifying_key()], NOW), Err(VerifyError::Invalid), "{bad:?}");
        }
        // Upper-case hex is still hex.
        let mut upper = good.clone();
        upper.insert(SIGNATURE_HEADER, hex_sig.to_ascii_uppercase().parse().unwrap());
        assert_eq!(check(&upper, BODY, &[signer.verifying_key()], NOW), Ok(()));
    }

    #[test]
    fn missing_headers_are_named() {
        let signer = key(7);
        let good = signed_headers(&signer, "req-1", NOW, BODY);
        for (name, shown) in [
            (REQUEST_ID_HEADER, "X-Fal-Webhook-Request-Id"),
            (USER_ID_HEADER, "X-Fal-Webhook-User-Id"),
            (TIMESTAMP_HEADER, "X-Fal-Webhook-Timestamp"),
            (SIGNATURE_HEADER, "X-Fal-Webhook-Signature"),
        ] {
            let mut headers = good.clone();
            headers.remove(name);
            assert_eq!(check(&headers, BODY, &[signer.verifying_key()], NOW).unwrap_err(), VerifyError::Missing(shown));
        }
    }

    #[test]
    fn jwks_keys_are_read() {
        let a = key(7).verifying_key();
        let b = key(9).verifying_key();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let padded = base64::engine::general_purpose::URL_SAFE;
        let jwks = serde_json::json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": b64.encode(a.as_bytes()), "kid": "a"},
            {"kty": "OKP", "crv": "Ed25519", "x": padded.encode(b.as_bytes()), "kid": "b"},
            {"kty": "RSA", "n": "xyz", "e": "AQAB"},
            {"kty": "OKP", "crv": "X25519", "x": b64.encode([1u8; 32])},
            {"kty": "OKP", "crv": "Ed25519", "x": "not base64 !"},
            {"kty": "OKP", "crv": "Ed25519", "x": b64.encode([1u8; 16])},
        ]});
        let keys = parse_jwks(jwks.to_string().as_bytes()).unwrap();
        assert_eq!(keys, vec![a, b]);
        assert!(parse_jwks(br#"{"keys":[]}"#).is_err());
        assert!(parse_jwks(b"<html>").is_err());
    }

    fn parse(body: &Value, timestamp: Option<i64>) -> Result<ParsedDelivery, ParseError> {
        let mut headers = HeaderMap::new();
        if let Some(ts) = timestamp {
            headers.insert(TIMESTAMP_HEADER, ts.to_string().parse().unwrap());
        }
        parse_webhook(&headers, body.to_string().as_bytes())
    }

    use serde_json::json;

    #[test]
    fn webhooks_parse() {
        let ok = parse(&json!({"request_id": "req-1", "gateway_request_id": "gw-1", "status": "OK", "payload": {"images": []}}), Some(NOW))
            .unwrap();
        assert_eq!(ok.delivery_id, "req-1");
        assert_eq!(ok.event.job_id, "req-1");
        assert_eq!(ok.event.state, JobState::Succeeded);
        assert_eq!(ok.event.seq, NOW * 1000);
        assert_eq!(ok.event.error, None);

        let failed = parse(
            &json!({"request_id": "req-2", "status": "ERROR", "error": "Invalid status code: 422",
                    "payload": {"detail": [{"loc": ["body", "prompt"], "msg": "field required", "type": "value_error.missing"}]}}),
            Some(NOW),
        )
        .unwrap();
        assert_eq!(failed.event.state, JobState::Failed);
        assert_eq!(failed.event.error.as_deref(), Some("Invalid status code: 422: body.prompt: field required"));

        let bare = parse(&json!({"request_id": "req-3", "status": "ERROR", "error": "Out of memory"}), Some(NOW)).unwrap();
        assert_eq!(bare.event.error.as_deref(), Some("Out of memory"));

        // A request its caller cancelled ends canceled; another request error is a failure.
        let cancelled = json!({"request_id": "req-6", "status": "ERROR", "error": "Request cancelled",
                               "payload": {"detail": "The request was cancelled", "error_type": "client_cancelled"}});
        let cancelled = parse(&cancelled, Some(NOW)).unwrap();
        assert_eq!(cancelled.event.state, JobState::Canceled);
        assert_eq!(cancelled.event.error.as_deref(), Some("Request cancelled: The request was cancelled"));
        let timed_out = json!({"request_id": "req-7", "status": "ERROR", "error": "Request timed out",
                               "payload": {"detail": "after 300 s", "error_type": "request_timeout"}});
        assert_eq!(parse(&timed_out, Some(NOW)).unwrap().event.state, JobState::Failed);

        let unknown = parse(&json!({"request_id": "req-4", "status": "MAYBE"}), Some(NOW)).unwrap_err();
        assert!(unknown.reason.contains("MAYBE"), "{}", unknown.reason);
        assert_eq!(unknown.job_id.as_deref(), Some("req-4"));
        assert_eq!(unknown.delivery_id.as_deref(), Some("req-4"));
        assert!(!unknown.reason.contains('\n'));

        let no_id = parse(&json!({"status": "OK"}), Some(NOW)).unwrap_err();
        assert_eq!(no_id.job_id, None);
        let no_ts = parse(&json!({"request_id": "req-5", "status": "OK"}), None).unwrap_err();
        assert_eq!(no_ts.job_id.as_deref(), Some("req-5"));
    }

    #[test]
    fn response_urls_stay_on_the_status_origin() {
        let status = Url::parse("https://queue.fal.run/fal-ai/flux/requests/r1/status?logs=1").unwrap();
        let same = response_url(&status, Some("https://queue.fal.run/fal-ai/flux/requests/r1")).unwrap();
        assert_eq!(same.as_str(), "https://queue.fal.run/fal-ai/flux/requests/r1");
        let derived = response_url(&status, None).unwrap();
        assert_eq!(derived.as_str(), "https://queue.fal.run/fal-ai/flux/requests/r1");
        // Another host, another scheme or another port: the key is not sent there.
        for foreign in [
            "https://evil.example/fal-ai/flux/requests/r1",
            "http://queue.fal.run/fal-ai/flux/requests/r1",
            "https://queue.fal.run:8443/fal-ai/flux/requests/r1",
        ] {
            assert_eq!(response_url(&status, Some(foreign)).unwrap(), derived, "{foreign}");
        }
        let odd = Url::parse("https://queue.fal.run/whatever").unwrap();
        assert!(matches!(response_url(&odd, None), Err(FetchError::Malformed(_))));
        assert!(matches!(response_url(&odd, Some("https://elsewhere.example/x")), Err(FetchError::Malformed(_))));
    }

    #[test]
    fn status_urls_are_on_fals_queue_or_the_configured_base_url_only() {
        assert!(status_url_of("https://queue.fal.run/a/b/requests/r/status", None).is_ok());
        // The configured base URL's origin (a stand-in, a proxy the user set), and no other port.
        let base = Some("http://127.0.0.1:9");
        assert!(status_url_of("http://127.0.0.1:9/a/b/requests/r/status", base).is_ok());
        assert!(status_url_of("http://127.0.0.1:10/a/b/requests/r/status", base).is_err());
        assert!(status_url_of("http://127.0.0.1:9/a/b/requests/r/status", None).is_err());
        for foreign in [
            "http://queue.fal.run/a/b/requests/r/status",
            "https://queue.fal.run:8443/a/b/requests/r/status",
            "https://queue.fal.run.evil.example/a/b/requests/r/status",
            "https://evil.example/a/b/requests/r/status",
            "http://169.254.169.254/latest/meta-data/",
            "file:///etc/passwd",
            "ftp://queue.fal.run/x",
            "not a url",
        ] {
            assert!(status_url_of(foreign, None).is_err(), "{foreign}");
        }
    }

    #[test]
    fn error_texts_are_one_line() {
        assert_eq!(error_text(&json!("boom\nagain")), "boom again");
        assert_eq!(error_text(&json!([{"msg": "a"}, {"msg": "b", "loc": ["body", 0]}])), "a; body.0: b");
        assert_eq!(error_text(&json!({"message": "nope"})), "nope");
        assert!(error_text(&json!("x".repeat(5000))).chars().count() <= MAX_ERROR_TEXT + 1);
    }
}

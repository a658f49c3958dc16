//! The `replicate` provider (predictions and trainings): webhooks are whole prediction or
//! training objects signed with Standard Webhooks; the signing secret can be fetched with the API
//! key (`GET /v1/webhooks/default/secret`); polling is `GET /v1/predictions/{id}` or
//! `GET /v1/trainings/{id}` with a Bearer key. A training has the same statuses as a prediction
//! and an id of the same shape: a body is told to be a training by what the current `Training`
//! type has (replicate-python 2's `TrainingGetResponse`, which has no `destination`): its
//! `urls.get` is a `/v1/trainings/` URL, or its `output` is a training's (`weights`, `version`);
//! it is labelled "training of" its model. A job whose kind is unknown (tracked by id) is polled as a
//! prediction first and, on a 404, as a training, which is then remembered in the job's
//! `poll_url` (`/v1/trainings/{id}`).
//! Replicate sends no sequence number: `seq` is the prediction's latest own time, in milliseconds.
//! Discovery (when turned on in Settings) lists the account's predictions (`GET /v1/predictions`,
//! newest first, 100 a page, a `next` cursor URL), so predictions started elsewhere are watched too.

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::discovery::{origin, walk, ListPage, Listed};
use super::generic::urlencode_segment;
use super::job_kind;
use super::standard_webhooks::{self, ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use super::vocabulary::{Meaning, Table, UnknownValue, WhenUnknown};
use super::{
    fetch_json, send_cancel, CancelError, Discovered, FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext,
    StatusAnswer, VerifyError,
};
use crate::job::{parse_rfc3339, JobEvent, JobState};
use crate::{SecretKind, StoreSecretError};

pub const NAME: &str = "replicate";
pub const DEFAULT_BASE_URL: &str = "https://api.replicate.com";
/// Replicate's `validateWebhook` decodes the secret as base64, with or without `whsec_`.
pub const SECRET_FORMAT: standard_webhooks::SecretFormat = standard_webhooks::SecretFormat::Base64;

pub struct Replicate {
    ctx: ProviderContext,
    /// One signing-secret fetch at a time: a burst of webhooks asks Replicate once.
    secret_fetch: tokio::sync::Mutex<()>,
}

impl Replicate {
    pub fn new(ctx: ProviderContext) -> Replicate {
        Replicate { ctx, secret_fetch: tokio::sync::Mutex::new(()) }
    }

    /// Fetches the account's signing secret with the API key and stores it (see
    /// [`fetch_signing_secret`]).
    pub async fn fetch_signing_secret(&self) -> Result<String, SigningSecretError> {
        fetch_signing_secret(&self.ctx).await
    }

    /// The secret to verify with: the configured one, else (with an API key) the one fetched from
    /// Replicate, once.
    async fn webhook_secret(&self) -> Result<String, VerifyError> {
        if let Some(secret) = self.ctx.secrets.get(NAME, SecretKind::WebhookSecret) {
            return Ok(secret);
        }
        if self.ctx.secrets.get(NAME, SecretKind::ApiKey).is_none() {
            return Err(VerifyError::NotConfigured(NAME));
        }
        let _one_at_a_time = self.secret_fetch.lock().await;
        // Another request may have fetched it while this one waited.
        if let Some(secret) = self.ctx.secrets.get(NAME, SecretKind::WebhookSecret) {
            return Ok(secret);
        }
        fetch_signing_secret(&self.ctx).await.map_err(|e| {
            tracing::warn!(provider = NAME, error = %e, "cannot fetch the webhook signing secret");
            VerifyError::Unavailable(format!("cannot fetch Replicate's signing secret: {e}"))
        })
    }
}

/// Why the signing secret could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SigningSecretError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(transparent)]
    Store(#[from] StoreSecretError),
}

/// The API base URL in force: `NEVERMISS_REPLICATE_BASE_URL`, the `replicate.base_url` setting,
/// else the real API.
pub fn base_url(ctx: &ProviderContext) -> String {
    ctx.settings.base_url(NAME).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned())
}

fn api_key(ctx: &ProviderContext) -> Result<String, FetchError> {
    ctx.api_key(NAME)
}

/// Asks Replicate for the account's webhook signing secret (`GET /v1/webhooks/default/secret`,
/// answered `{"key":"whsec_..."}`) with the API key, and stores it as the webhook secret.
pub async fn fetch_signing_secret(ctx: &ProviderContext) -> Result<String, SigningSecretError> {
    #[derive(Deserialize)]
    struct Answer {
        key: String,
    }
    let key = api_key(ctx)?;
    let url = format!("{}/v1/webhooks/default/secret", base_url(ctx));
    let answer: Answer = fetch_json(ctx.get(&url).bearer_auth(key)).await?;
    let secret = answer.key.trim().to_owned();
    if secret.is_empty() {
        return Err(FetchError::Malformed("the signing secret is empty".into()).into());
    }
    ctx.secrets.set(NAME, SecretKind::WebhookSecret, Some(&secret))?;
    tracing::info!(provider = NAME, "fetched and stored the webhook signing secret");
    Ok(secret)
}

/// A prediction as Replicate sends it (webhook body) and answers it (poll). Only the fields
/// NeverMiss reads (`output` and `urls.web` for the job's result and page); the rest (`input`, `logs`, ...) is ignored.
#[derive(Debug, Deserialize)]
struct Prediction {
    id: Option<String>,
    status: Option<String>,
    #[serde(default)]
    model: Option<String>,
    /// The model version that ran it (`Prediction.version`): its kind when no model is named.
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    started_at: Option<String>,
    #[serde(default)]
    completed_at: Option<String>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    metrics: Option<Value>,
    #[serde(default)]
    urls: Option<Urls>,
    #[serde(default)]
    output: Option<Value>,
    /// Only the old replicate-python's Training had one (the model a training pushes to); read
    /// when present, never needed.
    #[serde(default)]
    destination: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Urls {
    #[serde(default)]
    get: Option<String>,
    /// The prediction's page on replicate.com (`PredictionURLs.web`).
    #[serde(default)]
    web: Option<String>,
}

impl Prediction {
    /// Whether this object is a training, by what the current `Training` type has: its `urls.get`
    /// is a training's URL, or its `output` is a training's (`{"version", "weights"}`).
    fn is_training(&self) -> bool {
        let by_url = self.urls.as_ref().and_then(|u| u.get.as_deref()).is_some_and(|get| get.contains("/v1/trainings/"));
        let by_output = self.output.as_ref().and_then(Value::as_object).is_some_and(|o| o.contains_key("weights"));
        by_url || by_output || self.destination.as_deref().is_some_and(|d| !d.is_empty())
    }
}

/// A page of `GET /v1/predictions`.
#[derive(Debug, Deserialize)]
struct PredictionPage {
    #[serde(default)]
    results: Vec<Prediction>,
    #[serde(default)]
    next: Option<String>,
}

impl Listed for Prediction {
    fn created_ms(&self) -> Option<i64> {
        time(self.created_at.as_deref(), "created_at").ok().flatten()
    }

    fn into_event(self) -> Result<JobEvent, String> {
        to_event(self)
    }
}

/// Lists the predictions created at or after `since_ms`, newest first, following `next` pages
/// only on the API's origin.
async fn list_predictions(ctx: &ProviderContext, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
    let key = api_key(ctx)?;
    let base = base_url(ctx);
    let api_origin = origin(&base).ok_or_else(|| FetchError::NotConfigured(format!("the API address {base:?} is not a URL")))?;
    let first = format!("{base}/v1/predictions");
    walk(NAME, since_ms, max_jobs, |next| {
        let url = next.unwrap_or_else(|| first.clone());
        let (key, api_origin) = (&key, &api_origin);
        async move {
            if origin(&url).as_deref() != Some(api_origin.as_str()) {
                return Err(FetchError::Malformed(format!("the next page is on another host ({url}); not following it with the API key")));
            }
            let page: PredictionPage = fetch_json(ctx.get(&url).bearer_auth(key)).await?;
            Ok(ListPage { items: page.results, next: page.next })
        }
    })
    .await
}

/// A prediction's `status` (`Prediction.status`), with `aborted` (the deadline passed before it
/// started), which the API sends and the SDK's type does not list yet.
pub const PREDICTION_STATUSES: Table = Table {
    provider: NAME,
    key: "replicate.prediction.status",
    sdk: "`Prediction.status`",
    entries: &[
        ("starting", Meaning::State(JobState::Queued, None)),
        ("processing", Meaning::State(JobState::Running, None)),
        ("succeeded", Meaning::State(JobState::Succeeded, None)),
        ("failed", Meaning::State(JobState::Failed, None)),
        ("canceled", Meaning::State(JobState::Canceled, None)),
        ("aborted", Meaning::State(JobState::Failed, Some("aborted: the deadline passed before it started"))),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// A training's `status` (`TrainingGetResponse.status`): a prediction's, read by the same code.
pub const TRAINING_STATUSES: Table = Table {
    provider: NAME,
    key: "replicate.training.status",
    sdk: "`TrainingGetResponse.status`",
    entries: &[
        ("starting", Meaning::State(JobState::Queued, None)),
        ("processing", Meaning::State(JobState::Running, None)),
        ("succeeded", Meaning::State(JobState::Succeeded, None)),
        ("failed", Meaning::State(JobState::Failed, None)),
        ("canceled", Meaning::State(JobState::Canceled, None)),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// A prediction `status` as a NeverMiss state (`PREDICTION_STATUSES`).
pub fn map_status(status: &str) -> Option<JobState> {
    match PREDICTION_STATUSES.get(status)? {
        Meaning::State(state, _) => Some(state),
        _ => None,
    }
}

fn time(value: Option<&str>, field: &str) -> Result<Option<i64>, String> {
    match value.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => parse_rfc3339(s).map(Some).ok_or_else(|| format!("{field} is not an RFC 3339 time: {s:?}")),
    }
}

/// The normalized event of a prediction, or a one-line reason it cannot be used.
fn to_event(p: Prediction) -> Result<JobEvent, String> {
    Ok(read_object(p)?.0)
}

/// The normalized event of a prediction or a training, and its status when NeverMiss does not
/// know it (the job then stays running, the status shown).
fn read_object(p: Prediction) -> Result<(JobEvent, Option<UnknownValue>), String> {
    let training = p.is_training();
    let id = p.id.clone().filter(|id| !id.is_empty()).ok_or("the prediction has no id")?;
    let status = p.status.clone().ok_or("the prediction has no status")?;
    let table = if training { &TRAINING_STATUSES } else { &PREDICTION_STATUSES };
    // A training in a prediction's status (`aborted`) reads as one.
    let read = match (table.get(&status), PREDICTION_STATUSES.get(&status)) {
        (None, Some(_)) => PREDICTION_STATUSES.state(&status, &id),
        _ => table.state(&status, &id),
    };
    let state = read.state;
    let created = time(p.created_at.as_deref(), "created_at")?;
    let started = time(p.started_at.as_deref(), "started_at")?;
    let completed = time(p.completed_at.as_deref(), "completed_at")?;
    let seq =
        [created, started, completed].into_iter().flatten().max().ok_or("the prediction has no created_at, started_at or completed_at")?;
    let error = match p.error {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    };
    let error = match (status.as_str(), error) {
        ("aborted", None) => Some("aborted: the deadline passed before it started".to_owned()),
        (_, error) => error,
    };
    let unknown_reason = read.unknown.as_ref().and(read.reason.clone());
    let predict_time = p.metrics.as_ref().and_then(|m| m.get("predict_time")).and_then(Value::as_f64);
    let detail = match (state, predict_time) {
        (JobState::Succeeded, Some(secs)) if secs < 1.0 => Some(format!("predicted in {secs:.2} s")),
        (JobState::Succeeded, Some(secs)) => Some(format!("predicted in {secs:.1} s")),
        _ => unknown_reason,
    };
    // Its kind: what ran it, the model, else the version (a training's is its base model's);
    // none when neither is named (predictions of unknown models are not one kind).
    let ran = p.model.as_deref().filter(|m| !m.is_empty()).or(p.version.as_deref().filter(|v| !v.is_empty()));
    let kind = ran.map(|ran| job_kind::of(NAME, if training { "training" } else { "prediction" }, Some(ran)));
    let model = p.destination.filter(|d| !d.is_empty()).or(p.model).filter(|m| !m.is_empty());
    // What it produced, once it ended (a running prediction's output is partial).
    let result = p.output.as_ref().filter(|_| state.is_terminal()).and_then(crate::result::replicate);
    let provider_url = p.urls.and_then(|u| u.web).as_deref().and_then(crate::result::link);
    let event = JobEvent {
        group: None,
        provider: NAME.into(),
        job_id: id,
        state,
        seq,
        label: match (training, model) {
            (true, Some(model)) => Some(format!("training of {model}")),
            (true, None) => Some("training".to_owned()),
            (false, model) => model,
        },
        finished_at: if state.is_terminal() { completed } else { None },
        // The prediction's creation: the user's wait starts there, queue included.
        started_at: created,
        error,
        detail,
        result,
        provider_url,
        kind,
    };
    Ok((event, read.unknown))
}

/// Where a training is polled (kept as the job's `poll_url` once a poll found it is one).
pub fn training_path(id: &str) -> String {
    format!("/v1/trainings/{}", urlencode_segment(id))
}

impl Replicate {
    /// `GET {base}{path}` (a prediction or a training), as an event about `id`.
    async fn fetch_object(&self, id: &str, path: &str) -> Result<StatusAnswer, FetchError> {
        let key = api_key(&self.ctx)?;
        let url = format!("{}{path}", base_url(&self.ctx));
        let object: Prediction = fetch_json(self.ctx.get(&url).bearer_auth(key)).await?;
        if let Some(answered) = object.id.as_deref().filter(|answered| *answered != id) {
            return Err(FetchError::Malformed(format!("asked for {id}, the answer is about {answered}")));
        }
        let (event, unknown) = read_object(object).map_err(FetchError::Malformed)?;
        Ok(StatusAnswer::one(event).with_unknown(unknown))
    }
}

impl Replicate {
    /// `POST {base}{path}/cancel`, as replicate-python's `predictions.cancel` and
    /// `trainings.cancel` send it (Bearer key, no body).
    async fn cancel_at(&self, path: &str) -> Result<String, CancelError> {
        let key = api_key(&self.ctx).map_err(CancelError::NotAsked)?;
        let url = format!("{}{path}/cancel", base_url(&self.ctx));
        send_cancel(self.ctx.post(&url).bearer_auth(key)).await
    }
}

#[async_trait]
impl Provider for Replicate {
    fn name(&self) -> &'static str {
        NAME
    }

    /// A prediction's or a training's id: letters and digits (`gm3qorzdhgbfurvjtvhg6dckhu`).
    fn check_job_id(&self, job_id: &str) -> Result<(), crate::BadJobId> {
        if crate::job_id::is_a_token(job_id, &['_', '-']) {
            return Ok(());
        }
        Err(crate::BadJobId::NotItsShape {
            provider: NAME,
            shape: "letters and digits, such as gm3qorzdhgbfurvjtvhg6dckhu",
            job_id: job_id.to_owned(),
        })
    }

    fn webhook_expected(&self, _job_id: &str) -> bool {
        self.ctx.has_webhook_secret(NAME)
    }

    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        // An unsigned request is refused before any secret is fetched for it.
        for header in [ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER] {
            if !headers.contains_key(header) {
                return Err(VerifyError::Missing(header));
            }
        }
        let secret = self.webhook_secret().await?;
        standard_webhooks::verify_with_secret(NAME, SECRET_FORMAT, &secret, headers, body)
    }

    fn secret_format(&self) -> Option<standard_webhooks::SecretFormat> {
        Some(SECRET_FORMAT)
    }

    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        let envelope = standard_webhooks::Envelope::read(headers, body, "/id");
        let reject = |reason: String| envelope.reject(reason);
        let Some(id) = envelope.delivery_id.clone() else {
            return Err(reject("no webhook-id header".into()));
        };
        let prediction: Prediction = serde_json::from_slice(body).map_err(|e| reject(format!("not a prediction: {e}")))?;
        // A prediction (with an id) in a status NeverMiss does not act on: ignored.
        if let (Some(_), Some(status)) = (envelope.job_id.as_ref(), prediction.status.as_deref()) {
            if map_status(status).is_none() {
                return Err(envelope.ignore(format!(
                    "prediction status {status:?} is not acted on (expected starting, processing, succeeded, failed, canceled or aborted)"
                )));
            }
        }
        let event = to_event(prediction).map_err(reject)?;
        Ok(ParsedDelivery { delivery_id: id, event })
    }

    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        let mut answer = self.fetch_statuses(job).await?;
        Ok(answer.events.swap_remove(0))
    }

    async fn fetch_statuses(&self, job: &JobRef) -> Result<StatusAnswer, FetchError> {
        let training = training_path(&job.job_id);
        if job.poll_url.as_deref() == Some(training.as_str()) {
            return self.fetch_object(&job.job_id, &training).await;
        }
        let prediction = format!("/v1/predictions/{}", urlencode_segment(&job.job_id));
        match self.fetch_object(&job.job_id, &prediction).await {
            // Not a prediction: perhaps a training (same statuses, same id shape).
            Err(FetchError::NotFound) => {
                let answer = self.fetch_object(&job.job_id, &training).await?;
                Ok(StatusAnswer { poll_url: Some(training), ..answer })
            }
            other => other,
        }
    }

    /// A prediction's or a training's cancel; a job whose kind is not known yet is a prediction
    /// first and, when Replicate does not know that prediction, a training.
    async fn cancel(&self, job: &JobRef) -> Result<String, CancelError> {
        let training = training_path(&job.job_id);
        if job.poll_url.as_deref() == Some(training.as_str()) {
            return self.cancel_at(&training).await;
        }
        match self.cancel_at(&format!("/v1/predictions/{}", urlencode_segment(&job.job_id))).await {
            Err(CancelError::Refused { status: 404, .. }) => self.cancel_at(&training).await,
            other => other,
        }
    }

    fn can_discover(&self) -> bool {
        true
    }

    async fn discover(&self, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
        list_predictions(&self.ctx, since_ms, max_jobs).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prediction as Replicate's documentation shows one.
    const SUCCEEDED: &str = r#"{
      "id": "ufawqhfynnddngldkgtslldrkq",
      "model": "replicate/hello-world",
      "version": "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa",
      "input": {"text": "Alice"},
      "logs": "",
      "output": "hello Alice",
      "data_removed": false,
      "error": null,
      "status": "succeeded",
      "created_at": "2023-09-08T16:19:34.765994Z",
      "started_at": "2023-09-08T16:19:34.779176Z",
      "completed_at": "2023-09-08T16:19:34.791859Z",
      "metrics": {"predict_time": 0.012683},
      "urls": {
        "cancel": "https://api.replicate.com/v1/predictions/ufawqhfynnddngldkgtslldrkq/cancel",
        "get": "https://api.replicate.com/v1/predictions/ufawqhfynnddngldkgtslldrkq"
      }
    }"#;

    fn provider() -> Replicate {
        Replicate::new(crate::test_context())
    }

    fn headers(id: &str) -> HeaderMap {
        crate::test_headers(id)
    }

    #[test]
    fn the_status_map() {
        assert_eq!(map_status("starting"), Some(JobState::Queued));
        assert_eq!(map_status("processing"), Some(JobState::Running));
        assert_eq!(map_status("succeeded"), Some(JobState::Succeeded));
        assert_eq!(map_status("failed"), Some(JobState::Failed));
        assert_eq!(map_status("canceled"), Some(JobState::Canceled));
        assert_eq!(map_status("aborted"), Some(JobState::Failed));
        assert_eq!(map_status("cancelled"), None);
        assert_eq!(map_status("queued"), None);
    }

    #[tokio::test]
    async fn parses_a_documented_prediction() {
        let p = provider();
        let parsed = p.parse(&headers("msg_1"), SUCCEEDED.as_bytes()).unwrap();
        assert_eq!(parsed.delivery_id, "msg_1");
        let ev = parsed.event;
        assert_eq!(ev.provider, "replicate");
        assert_eq!(ev.job_id, "ufawqhfynnddngldkgtslldrkq");
        assert_eq!(ev.state, JobState::Succeeded);
        let completed = parse_rfc3339("2023-09-08T16:19:34.791859Z").unwrap();
        assert_eq!(ev.seq, completed);
        assert_eq!(ev.finished_at, Some(completed));
        assert_eq!(ev.started_at, parse_rfc3339("2023-09-08T16:19:34.765994Z"), "the prediction's created_at: the SLA's start");
        assert_eq!(ev.label.as_deref(), Some("replicate/hello-world"));
        assert_eq!(ev.error, None);
        assert_eq!(ev.detail.as_deref(), Some("predicted in 0.01 s"));
    }

    #[tokio::test]
    async fn seq_is_the_latest_own_time() {
        let p = provider();
        let starting = r#"{"id":"p1","status":"starting","created_at":"2024-01-01T00:00:00Z","started_at":null,"completed_at":null}"#;
        let ev = p.parse(&headers("m1"), starting.as_bytes()).unwrap().event;
        assert_eq!((ev.state, ev.seq, ev.finished_at), (JobState::Queued, 1_704_067_200_000, None));
        let processing = r#"{"id":"p1","status":"processing","created_at":"2024-01-01T00:00:00Z","started_at":"2024-01-01T00:00:02.5Z"}"#;
        let ev = p.parse(&headers("m2"), processing.as_bytes()).unwrap().event;
        assert_eq!((ev.state, ev.seq), (JobState::Running, 1_704_067_202_500));
    }

    #[tokio::test]
    async fn errors_and_aborts() {
        let p = provider();
        let failed = r#"{"id":"p2","status":"failed","error":"CUDA out of memory","created_at":"2024-01-01T00:00:00Z","completed_at":"2024-01-01T00:01:00Z"}"#;
        let ev = p.parse(&headers("m"), failed.as_bytes()).unwrap().event;
        assert_eq!(ev.state, JobState::Failed);
        assert_eq!(ev.error.as_deref(), Some("CUDA out of memory"));
        let aborted = r#"{"id":"p3","status":"aborted","created_at":"2024-01-01T00:00:00Z"}"#;
        let ev = p.parse(&headers("m"), aborted.as_bytes()).unwrap().event;
        assert_eq!(ev.state, JobState::Failed);
        assert!(ev.error.unwrap().contains("deadline"));
    }

    #[tokio::test]
    async fn unusable_payloads_keep_their_ids() {
        let p = provider();
        let unknown = r#"{"id":"p4","status":"exploded","created_at":"2024-01-01T00:00:00Z"}"#;
        let e = p.parse(&headers("m9"), unknown.as_bytes()).unwrap_err();
        assert!(e.reason.contains("prediction status \"exploded\" is not acted on"), "{}", e.reason);
        assert_eq!(e.kind, crate::Unusable::Unhandled);
        assert!(!e.reason.contains('\n'));
        assert_eq!(e.delivery_id.as_deref(), Some("m9"));
        assert_eq!(e.job_id.as_deref(), Some("p4"));

        let e = p.parse(&headers("m9"), br#"{"id":"p5","status":"succeeded"}"#).unwrap_err();
        assert!(e.reason.contains("created_at"), "{}", e.reason);
        assert_eq!(e.job_id.as_deref(), Some("p5"));

        let e = p.parse(&headers("m9"), br#"{"status":"succeeded","created_at":"2024-01-01T00:00:00Z"}"#).unwrap_err();
        assert!(e.reason.contains("no id"), "{}", e.reason);

        let e = p.parse(&headers("m9"), b"not json").unwrap_err();
        assert_eq!((e.delivery_id.as_deref(), e.job_id), (Some("m9"), None));

        let e = p.parse(&HeaderMap::new(), SUCCEEDED.as_bytes()).unwrap_err();
        assert!(e.reason.contains("webhook-id"));
    }

    #[tokio::test]
    async fn verify_needs_a_secret_or_a_key() {
        let p = provider();
        let body = SUCCEEDED.as_bytes();
        let now = chrono::Utc::now().timestamp();
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let mut h = headers("msg_x");
        h.insert(TIMESTAMP_HEADER, now.to_string().parse().unwrap());
        let signature = standard_webhooks::sign(&standard_webhooks::secret_key(secret), "msg_x", now, body);
        h.insert(SIGNATURE_HEADER, signature.parse().unwrap());
        assert_eq!(p.verify(&h, body).await, Err(VerifyError::NotConfigured(NAME)));
        p.ctx.secrets.set(NAME, SecretKind::WebhookSecret, Some(secret)).unwrap();
        assert_eq!(p.verify(&h, body).await, Ok(()));
        assert_eq!(p.verify(&h, b"{}").await, Err(VerifyError::Invalid));
        h.remove(SIGNATURE_HEADER);
        assert_eq!(p.verify(&h, body).await, Err(VerifyError::Missing(SIGNATURE_HEADER)));
    }

    #[tokio::test]
    async fn a_training_webhook_is_recognised_by_its_destination() {
        let p = provider();
        let body = br#"{"id":"zz4ibbonubfz7carwiefibzgga","model":"stability-ai/sdxl",
            "version":"39ed52f2a78e934b3ba6e2a89f5b1c712de7dfea535525255b1aa35c5565e08b",
            "destination":"alice/sdxl-fine-tuned","input":{},"logs":"","output":null,"error":null,
            "status":"processing","created_at":"2026-11-30T10:00:00.000000Z","started_at":"2026-11-30T10:00:05.000000Z",
            "completed_at":null,"urls":{"get":"https://api.replicate.com/v1/trainings/zz4ibbonubfz7carwiefibzgga"}}"#;
        let mut h = HeaderMap::new();
        h.insert(ID_HEADER, "msg_1".parse().unwrap());
        let ev = p.parse(&h, body).unwrap().event;
        assert_eq!((ev.state, ev.label.as_deref()), (JobState::Running, Some("training of alice/sdxl-fine-tuned")));
        assert_eq!(training_path("zz4ibbonubfz7carwiefibzgga"), "/v1/trainings/zz4ibbonubfz7carwiefibzgga");
    }
}

//! The fal provider end to end: a real engine in-process, a local stand-in for fal (its JWKS, its
//! queue status and response endpoints, failures on demand), Ed25519-signed webhooks over real
//! HTTP, and polling through the admin API.
//!
//! Each test configures its own engine through the engine's settings and secret store (never the
//! process environment: tests run in parallel threads of one process).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ed25519_dalek::SigningKey;
use nevermiss_engine::api::devices::DeviceToken;
use nevermiss_engine::api::jobs::{JobDetail, TrackRequest};
use nevermiss_engine::api::settings::SettingsView;
use nevermiss_engine::api::{ErrorBody, RefusedList};
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::store::job::{JobResult, JobState, Outcome, Source};
use nevermiss_engine::store::refused::RefusalKind;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::api::ApiClient;
use crate::harness::signing;
use crate::harness::stand_in::serve;
use crate::harness::{wait_until, TestApp};

const API_KEY: &str = "fal-test-key-1234";

// -------------------------------------------------------------------------------------------
// The stand-in for fal
// -------------------------------------------------------------------------------------------

/// What one stand-in endpoint answers.
#[derive(Clone, Debug)]
enum Answer {
    Json(u16, Value),
    /// A body that is not JSON.
    Garbage(u16),
    /// 429 with `Retry-After` in seconds.
    RateLimited(u64),
}

#[derive(Default)]
struct FalState {
    /// The JWKS served; `None` answers 500.
    jwks: Mutex<Option<Answer>>,
    jwks_hits: AtomicUsize,
    /// Per request id: what its status URL answers (none: 404).
    status: Mutex<HashMap<String, Answer>>,
    /// Per request id: what its response URL answers (none: 404).
    response: Mutex<HashMap<String, Answer>>,
    /// Every `Authorization` header the queue endpoints saw.
    authorizations: Mutex<Vec<String>>,
    queue_hits: AtomicUsize,
    /// Per request id: where its `/moved/.../status` URL redirects.
    redirects: Mutex<HashMap<String, String>>,
}

struct StandIn {
    base: String,
    state: Arc<FalState>,
}

impl StandIn {
    async fn start() -> StandIn {
        let state = Arc::new(FalState::default());
        let app = Router::new()
            .route("/.well-known/jwks.json", get(jwks))
            .route("/{owner}/{alias}/requests/{id}/status", get(status))
            .route("/{owner}/{alias}/requests/{id}", get(response))
            .route("/moved/{id}/status", get(moved))
            .with_state(state.clone());
        StandIn { base: serve(app).await, state }
    }

    fn serve_keys(&self, keys: &[&SigningKey]) {
        *self.state.jwks.lock().unwrap() = Some(Answer::Json(200, signing::jwks(keys)));
    }

    fn serve_jwks(&self, answer: Option<Answer>) {
        *self.state.jwks.lock().unwrap() = answer;
    }

    fn jwks_hits(&self) -> usize {
        self.state.jwks_hits.load(Ordering::SeqCst)
    }

    fn status_url(&self, id: &str) -> String {
        format!("{}/fal-ai/flux/requests/{id}/status", self.base)
    }

    fn response_url(&self, id: &str) -> String {
        format!("{}/fal-ai/flux/requests/{id}", self.base)
    }

    /// A status answer as fal writes it.
    fn status_body(&self, id: &str, status: &str) -> Value {
        let mut body = json!({
            "status": status,
            "request_id": id,
            "response_url": self.response_url(id),
            "status_url": self.status_url(id),
            "cancel_url": format!("{}/fal-ai/flux/requests/{id}/cancel", self.base),
            "logs": null,
            "metrics": {},
        });
        if status == "IN_QUEUE" {
            body["queue_position"] = json!(3);
        }
        body
    }

    fn set_status(&self, id: &str, status: &str) {
        let body = self.status_body(id, status);
        self.set_status_answer(id, Answer::Json(if status == "COMPLETED" { 200 } else { 202 }, body));
    }

    fn set_status_answer(&self, id: &str, answer: Answer) {
        self.state.status.lock().unwrap().insert(id.to_owned(), answer);
    }

    fn set_response(&self, id: &str, answer: Answer) {
        self.state.response.lock().unwrap().insert(id.to_owned(), answer);
    }

    fn set_redirect(&self, id: &str, to: &str) {
        self.state.redirects.lock().unwrap().insert(id.to_owned(), to.to_owned());
    }

    fn redirect_url(&self, id: &str) -> String {
        format!("{}/moved/{id}/status", self.base)
    }

    fn authorizations(&self) -> Vec<String> {
        self.state.authorizations.lock().unwrap().clone()
    }

    fn queue_hits(&self) -> usize {
        self.state.queue_hits.load(Ordering::SeqCst)
    }
}

fn render(answer: Option<Answer>) -> Response {
    match answer {
        None => (AxumStatus::NOT_FOUND, axum::Json(json!({"detail": "Request not found"}))).into_response(),
        Some(Answer::Json(code, body)) => (AxumStatus::from_u16(code).unwrap(), axum::Json(body)).into_response(),
        Some(Answer::Garbage(code)) => (AxumStatus::from_u16(code).unwrap(), "<html>Bad gateway{").into_response(),
        Some(Answer::RateLimited(secs)) => {
            (AxumStatus::TOO_MANY_REQUESTS, [("retry-after", secs.to_string())], axum::Json(json!({"detail": "Rate limit exceeded"})))
                .into_response()
        }
    }
}

async fn jwks(State(state): State<Arc<FalState>>) -> Response {
    state.jwks_hits.fetch_add(1, Ordering::SeqCst);
    let answer = state.jwks.lock().unwrap().clone();
    match answer {
        None => (AxumStatus::INTERNAL_SERVER_ERROR, "JWKS unavailable").into_response(),
        some => render(some),
    }
}

/// fal's queue refuses a request without the right `Authorization: Key ...`.
fn authorized(state: &FalState, headers: &HeaderMap) -> bool {
    state.queue_hits.fetch_add(1, Ordering::SeqCst);
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    state.authorizations.lock().unwrap().push(auth.clone());
    auth == format!("Key {API_KEY}")
}

fn unauthorized() -> Response {
    (AxumStatus::UNAUTHORIZED, axum::Json(json!({"detail": "Invalid API key"}))).into_response()
}

async fn status(State(state): State<Arc<FalState>>, headers: HeaderMap, Path((_, _, id)): Path<(String, String, String)>) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    let answer = state.status.lock().unwrap().get(&id).cloned();
    render(answer)
}

async fn moved(State(state): State<Arc<FalState>>, Path(id): Path<String>) -> Response {
    match state.redirects.lock().unwrap().get(&id) {
        Some(to) => (AxumStatus::TEMPORARY_REDIRECT, [("location", to.clone())]).into_response(),
        None => render(None),
    }
}

async fn response(State(state): State<Arc<FalState>>, headers: HeaderMap, Path((_, _, id)): Path<(String, String, String)>) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    let answer = state.response.lock().unwrap().get(&id).cloned();
    render(answer)
}

// -------------------------------------------------------------------------------------------
// The engine under test: the harness's `TestApp`, fal pointed at a fresh stand-in
// -------------------------------------------------------------------------------------------

/// An engine whose fal base URL (the JWKS) is a fresh stand-in, with `api_key` stored.
async fn start(api_key: Option<&str>) -> (TestApp, StandIn) {
    let fal = StandIn::start().await;
    let app = TestApp::spawn().await;
    app.configure("fal", &fal.base, api_key, None).await;
    (app, fal)
}

/// `POST /api/jobs` for a fal request, with its status URL when known.
async fn track(app: &TestApp, id: &str, status_url: Option<&str>) {
    let request =
        TrackRequest { provider: "fal".into(), job_id: id.into(), label: None, status_url: status_url.map(str::to_owned), group: None };
    app.api.track(&request).await;
}

async fn fal_job(app: &TestApp, id: &str) -> Option<JobDetail> {
    app.api.job("fal", id).await
}

async fn state_of(app: &TestApp, id: &str) -> JobState {
    app.api.job_now("fal", id).await.job.state
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn ok_body(id: &str) -> Value {
    json!({"request_id": id, "gateway_request_id": id, "status": "OK",
           "payload": {"images": [{"url": "https://v3.fal.media/files/x.png", "content_type": "image/png"}], "seed": 42}})
}

fn error_body(id: &str) -> Value {
    json!({"request_id": id, "gateway_request_id": id, "status": "ERROR", "error": "Invalid status code: 422",
           "payload": {"detail": [{"loc": ["body", "prompt"], "msg": "field required", "type": "value_error.missing"}]}})
}

fn key(seed: u8) -> SigningKey {
    signing::fal_key(seed)
}

fn sign(key: &SigningKey, request_id: &str, timestamp: i64, body: &[u8]) -> signing::Headers {
    signing::fal(key, request_id, timestamp, body)
}

// -------------------------------------------------------------------------------------------
// Webhooks
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_webhooks_are_applied_once_and_forgeries_refused() {
    let (mut app, fal) = start(Some(API_KEY)).await;
    let signer = key(7);
    fal.serve_keys(&[&signer]);

    // A success: applied, then the same delivery (fal's retry) is a duplicate.
    let (status, answer) = app.fal_hook(&signer, &ok_body("req-ok"), now()).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    let job = fal_job(&app, "req-ok").await.unwrap();
    assert_eq!(job.job.state, JobState::Succeeded);
    assert_eq!(job.job.terminal_source, Some(Source::Push));
    // A retry is a new attempt: a new timestamp and signature, the same request id.
    let (status, answer) = app.fal_hook(&signer, &ok_body("req-ok"), now() + 1).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Duplicate)), "{answer:?}");
    assert_eq!(app.api.metrics().await.store.duplicates, 1);
    assert_eq!(fal.jwks_hits(), 1, "the key set is fetched once and cached");

    // A failure carries fal's error text.
    let (status, answer) = app.fal_hook(&signer, &error_body("req-err"), now()).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    let job = fal_job(&app, "req-err").await.unwrap();
    assert_eq!(job.job.state, JobState::Failed);
    let error = job.job.error.as_deref().unwrap_or_default();
    assert!(error.contains("Invalid status code: 422") && error.contains("field required"), "{job:?}");

    // A tampered body: 401, counted, nothing stored.
    let hits_before = fal.jwks_hits();
    let body = ok_body("req-tampered").to_string().into_bytes();
    let headers = sign(&signer, "req-tampered", now(), &body);
    let tampered = String::from_utf8(body).unwrap().replace("\"seed\":42", "\"seed\":43").into_bytes();
    let (status, _) = app.hook("fal", tampered.clone(), &headers).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.api.metrics().await.store.bad_signatures, 1);
    assert!(fal_job(&app, "req-tampered").await.is_none());

    // More forgeries (a wrong key) cannot make the engine hammer fal's key set.
    let stranger = key(99);
    for i in 0..5 {
        let (status, _) = app.fal_hook(&stranger, &ok_body(&format!("req-forged-{i}")), now()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(app.api.metrics().await.store.bad_signatures, 6);
    assert!(fal.jwks_hits() - hits_before <= 1, "six bad signatures refetched the key set {} times", fal.jwks_hits() - hits_before);

    // A replay outside the 5-minute tolerance, correctly signed: 401 (in the past and the future).
    let (status, _) = app.fal_hook(&signer, &ok_body("req-replay"), now() - 600).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = app.fal_hook(&signer, &ok_body("req-replay"), now() + 600).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.api.metrics().await.store.bad_signatures, 8);
    assert!(fal_job(&app, "req-replay").await.is_none());

    // Missing headers and a malformed signature: 401.
    let body = ok_body("req-bare").to_string().into_bytes();
    let (status, answer) = app.hook("fal", body.clone(), &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(answer.error.as_deref().unwrap_or_default().contains("X-Fal-Webhook"), "{answer:?}");
    let mut headers = sign(&signer, "req-bare", now(), &body);
    headers[3].1 = "abcd".into();
    let (status, _) = app.hook("fal", body.clone(), &headers).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.api.metrics().await.store.bad_signatures, 10);

    // Signed, in a status NeverMiss does not act on: 200 ignored, never a 4xx (fal retries).
    let odd = json!({"request_id": "req-odd", "status": "PENDING"});
    let (status, answer) = app.fal_hook(&signer, &odd, now()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer.outcome, Some(Outcome::Ignored), "{answer:?}");
    assert_eq!(app.api.metrics().await.store.ignored, 1);

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_are_picked_up_with_one_refresh() {
    let (mut app, fal) = start(Some(API_KEY)).await;
    let old = key(1);
    let new = key(2);
    fal.serve_keys(&[&old]);
    let (status, _) = app.fal_hook(&old, &ok_body("rot-0"), now()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fal.jwks_hits(), 1);

    // fal rotates: the key set now has only the new key.
    fal.serve_keys(&[&new]);
    for i in 1..=4 {
        let (status, answer) = app.fal_hook(&new, &ok_body(&format!("rot-{i}")), now()).await;
        assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "rot-{i}: {answer:?}");
    }
    assert_eq!(fal.jwks_hits(), 2, "one refresh for the rotation, then the cache");
    // Several at once still need no further fetch.
    let sends = (5..=8).map(|i| {
        let app = &app;
        let new = &new;
        async move { app.fal_hook(new, &ok_body(&format!("rot-{i}")), now()).await.0 }
    });
    for status in futures_util::future::join_all(sends).await {
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(fal.jwks_hits(), 2);
    // The old key is gone from the set and from the cache.
    let (status, _) = app.fal_hook(&old, &ok_body("rot-old"), now()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_key_set_answers_503_so_fal_retries() {
    let (mut app, fal) = start(Some(API_KEY)).await;
    let signer = key(5);
    fal.serve_jwks(None);

    let (status, answer) = app.fal_hook(&signer, &ok_body("req-later"), now()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
    assert!(fal.jwks_hits() >= 1);
    // Not a bad signature, and nothing stored: fal will retry.
    assert_eq!(app.api.metrics().await.store.bad_signatures, 0);
    assert!(fal_job(&app, "req-later").await.is_none());

    // Once fal serves its keys again, a retry of the same delivery goes through.
    fal.serve_keys(&[&signer]);
    wait_until("a retried webhook is accepted", || async { app.fal_hook(&signer, &ok_body("req-later"), now()).await.0 == StatusCode::OK })
        .await;
    assert_eq!(state_of(&app, "req-later").await, JobState::Succeeded);
    assert_eq!(app.api.metrics().await.store.bad_signatures, 0);

    app.shutdown().await;
}

// -------------------------------------------------------------------------------------------
// Polling
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_finds_the_true_terminal_state() {
    let (mut app, fal) = start(Some(API_KEY)).await;

    // A running job whose webhook never comes.
    fal.set_status("poll-ok", "IN_PROGRESS");
    track(&app, "poll-ok", Some(&fal.status_url("poll-ok"))).await;
    app.api.wait_for_state("fal", "poll-ok", JobState::Running).await;

    // A queued one: polled again and again while unchanged, it stays one timeline entry.
    fal.set_status("poll-queued", "IN_QUEUE");
    track(&app, "poll-queued", Some(&fal.status_url("poll-queued"))).await;
    app.api.wait_for_state("fal", "poll-queued", JobState::Queued).await;

    // It completes; the response URL says it succeeded.
    fal.set_status("poll-ok", "COMPLETED");
    fal.set_response("poll-ok", Answer::Json(200, json!({"images": [], "seed": 1})));
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.providers["fal"], "ok", "{report:?}");
    // A tracked fal job may have no webhook: its end by polling is not a rescue.
    assert_eq!(report.pass.counts.rescues, 0, "{report:?}");
    let job = fal_job(&app, "poll-ok").await.unwrap();
    assert_eq!(job.job.state, JobState::Succeeded, "{job:?}");
    assert_eq!(job.job.terminal_source, Some(Source::Pull), "{job:?}");
    let m = app.api.metrics().await.store;
    assert_eq!((m.reconcile_rescues, m.poll_only_completions), (0, 1));

    app.api.reconcile().await;
    let queued = fal_job(&app, "poll-queued").await.unwrap();
    assert_eq!(queued.job.state, JobState::Queued);
    let pulls = queued.timeline.iter().filter(|e| e.source == Source::Pull).count();
    assert_eq!(pulls, 1, "unchanged polls are stale, not new events: {queued:?}");

    // COMPLETED with an error answer on the response URL: failed, with fal's detail.
    fal.set_status("poll-err", "COMPLETED");
    fal.set_response(
        "poll-err",
        Answer::Json(
            422,
            json!({"detail": [{"loc": ["body", "image_url"], "msg": "Could not download the image", "type": "image_load_error"}]}),
        ),
    );
    track(&app, "poll-err", Some(&fal.status_url("poll-err"))).await;
    app.api.reconcile().await;
    app.api.wait_for_state("fal", "poll-err", JobState::Failed).await;
    let job = fal_job(&app, "poll-err").await.unwrap();
    assert!(job.job.error.as_deref().unwrap_or_default().contains("Could not download the image"), "{job:?}");
    assert_eq!(job.job.terminal_source, Some(Source::Pull));
    let m = app.api.metrics().await.store;
    assert_eq!((m.reconcile_rescues, m.poll_only_completions), (0, 2));

    // Every call to fal carried the key, as fal wants it.
    assert!(!fal.authorizations().is_empty());
    assert!(fal.authorizations().iter().all(|a| a == &format!("Key {API_KEY}")), "{:?}", fal.authorizations());

    app.shutdown().await;
}

/// Fal signs every customer's webhooks with the same keys, so a valid
/// signature says fal sent it, not whose request it is. Only the owner's account is taken: set in
/// Settings, or learned from the first webhook of a request the owner tracked with its status URL
/// (fal signs a request's id only for the account that made it). Another account's webhook is
/// refused as unverified (401), counted, kept with its cause, and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owners_fal_account_is_taken_learned_from_a_request_the_owner_tracked() {
    let fal = StandIn::start().await;
    let mut app = TestApp::spawn().await;
    // fal pointed at the stand-in, and no owner account known yet.
    app.set_setting("fal.base_url", &fal.base).await;
    app.set_secret("fal", SecretKind::ApiKey, Some(API_KEY));
    let signer = key(7);
    fal.serve_keys(&[&signer]);
    let foreign = |id: &str| {
        let bytes = ok_body(id).to_string().into_bytes();
        let headers = signing::fal_for(&signer, "user-attacker", id, now(), &bytes);
        (bytes, headers)
    };

    // Another customer's webhook, before the owner's account is known: refused, nothing made.
    let (bytes, headers) = foreign("req-theirs");
    let (status, _) = app.hook("fal", bytes, &headers).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(fal_job(&app, "req-theirs").await.is_none());
    let refused: RefusedList = app.api.get("/api/refused", StatusCode::OK).await;
    let first = &refused.refused[0];
    assert_eq!(first.kind, RefusalKind::ForeignAccount, "{first:?}");
    assert!(first.cause.contains("not known yet") && first.cause.contains("user-attacker"), "{}", first.cause);
    assert_eq!(app.api.metrics().await.store.bad_signatures, 1, "counted as a bad signature");

    // The owner tracks a request of theirs; its webhook teaches the owner's account.
    fal.set_status("req-mine", "IN_PROGRESS");
    track(&app, "req-mine", Some(&fal.status_url("req-mine"))).await;
    let (status, answer) = app.fal_hook(&signer, &ok_body("req-mine"), now()).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    let settings: SettingsView = app.api.get("/api/settings", StatusCode::OK).await;
    assert_eq!(settings.providers["fal"].account.as_deref(), Some(signing::FAL_USER), "learned");

    // From now on: the owner's webhooks are taken for any request, another account's never.
    let (status, answer) = app.fal_hook(&signer, &ok_body("req-mine-untracked"), now()).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    let (bytes, headers) = foreign("req-theirs-2");
    let (status, _) = app.hook("fal", bytes, &headers).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(fal_job(&app, "req-theirs-2").await.is_none());
    let refused: RefusedList = app.api.get("/api/refused", StatusCode::OK).await;
    assert!(refused.refused[0].cause.contains("another account"), "{:?}", refused.refused[0]);
    assert_eq!(app.api.metrics().await.store.bad_signatures, 2);

    // The account set in Settings wins: the learned one's webhooks are then refused too.
    let _: Value = app.api.put("/api/settings", &json!({"fal.account": "user-new"}), StatusCode::OK).await;
    let (status, _) = app.fal_hook(&signer, &ok_body("req-old-account"), now()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    app.shutdown().await;
}

/// A device (a hub's device token) tracks a job by provider and id only: it
/// cannot point the owner's job at another host (which would receive the fal key with every poll
/// and cancel), rename it or group it. Nor can anyone send the key off fal's queue: a status URL
/// on another host is refused when tracking, for the owner too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_cannot_retarget_a_job_and_the_fal_key_goes_only_to_fals_queue() {
    let (mut app, fal) = start(Some(API_KEY)).await;
    let thief = StandIn::start().await;
    let device: DeviceToken = app.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let as_device = ApiClient::new(app.api.base.clone(), device.token.clone());

    fal.set_status("req-1", "IN_PROGRESS");
    track(&app, "req-1", Some(&fal.status_url("req-1"))).await;
    app.api.wait_for_state("fal", "req-1", JobState::Running).await;

    for (what, body) in [
        ("its status URL", json!({"provider": "fal", "job_id": "req-1", "status_url": thief.status_url("req-1")})),
        ("its label", json!({"provider": "fal", "job_id": "req-1", "label": "renamed"})),
        ("its group", json!({"provider": "fal", "job_id": "req-1", "group": "theirs"})),
        ("a new job's status URL", json!({"provider": "fal", "job_id": "req-new", "status_url": thief.status_url("req-new")})),
    ] {
        let refusal: ErrorBody = as_device.post("/api/jobs", &body, StatusCode::FORBIDDEN).await;
        assert!(refusal.error.contains("provider and id only"), "{what}: {refusal:?}");
    }
    // Tracking by provider and id is a device's right; it changes nothing of the owner's job.
    let response = as_device.raw_post("/api/jobs", &json!({"provider": "fal", "job_id": "req-1"})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let job = app.api.job_now("fal", "req-1").await.job;
    assert_eq!(job.label, None);
    assert!(fal_job(&app, "req-new").await.is_none(), "a refused track made no job");

    // The owner cannot send the key elsewhere either.
    let refusal: ErrorBody = app
        .api
        .post("/api/jobs", &json!({"provider": "fal", "job_id": "req-2", "status_url": thief.status_url("req-2")}), StatusCode::BAD_REQUEST)
        .await;
    assert!(refusal.error.contains("fal's queue"), "{refusal:?}");
    // Nor name a status URL for a provider that polls by id.
    let refusal: ErrorBody = app
        .api
        .post(
            "/api/jobs",
            &json!({"provider": "replicate", "job_id": "p-1", "status_url": thief.status_url("p-1")}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(refusal.error.contains("polled by their id"), "{refusal:?}");

    // Polls and the cancel of the owner's job go to fal's queue, with the key; the thief hears nothing.
    app.api.reconcile().await;
    let _ = app.api.raw_post("/api/jobs/fal/req-1/cancel", &json!({})).await;
    app.api.reconcile().await;
    assert_eq!(thief.queue_hits(), 0, "the thief was called: {:?}", thief.authorizations());
    assert!(fal.authorizations().iter().all(|a| a == &format!("Key {API_KEY}")) && !fal.authorizations().is_empty());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_never_leaves_the_status_urls_host() {
    let (mut app, fal) = start(Some(API_KEY)).await;
    let decoy = StandIn::start().await;

    // The status answer points its response_url at another host: the key is not sent there;
    // the status URL's own response URL is used instead.
    let mut body = fal.status_body("poll-decoy", "COMPLETED");
    body["response_url"] = json!(decoy.response_url("poll-decoy"));
    fal.set_status_answer("poll-decoy", Answer::Json(200, body));
    fal.set_response("poll-decoy", Answer::Json(200, json!({"ok": true})));
    decoy.set_response("poll-decoy", Answer::Json(200, json!({"ok": true})));
    track(&app, "poll-decoy", Some(&fal.status_url("poll-decoy"))).await;
    app.api.reconcile().await;
    app.api.wait_for_state("fal", "poll-decoy", JobState::Succeeded).await;
    assert_eq!(decoy.queue_hits(), 0, "the other host was called: {:?}", decoy.authorizations());

    // A status URL that redirects to another host: not followed at all (a call that carries a
    // key never leaves the origin it was made to); the job says what fal answered.
    decoy.set_status("poll-moved", "IN_PROGRESS");
    fal.set_redirect("poll-moved", &decoy.status_url("poll-moved"));
    track(&app, "poll-moved", Some(&fal.redirect_url("poll-moved"))).await;
    let moved = app.api.wait_for_job("fal", "poll-moved", "the redirect's poll error", |j| j.job.poll_error.is_some()).await;
    assert!(moved.job.poll_error.as_deref().is_some_and(|e| e.contains("answered 30")), "{:?}", moved.job.poll_error);
    assert_eq!(decoy.queue_hits(), 0, "a redirect to another host was followed: {:?}", decoy.authorizations());

    // A status_url that is not http(s) is refused when tracking.
    let refusal: ErrorBody = app
        .api
        .post("/api/jobs", &json!({"provider": "fal", "job_id": "poll-file", "status_url": "file:///etc/passwd"}), StatusCode::BAD_REQUEST)
        .await;
    assert!(!refusal.error.is_empty());

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_polls_are_kept_on_the_job() {
    let (mut app, fal) = start(Some(API_KEY)).await;

    // Unknown to fal: 404.
    track(&app, "poll-404", Some(&fal.status_url("poll-404"))).await;
    // fal in trouble: 500, and an answer that is not JSON.
    fal.set_status_answer("poll-500", Answer::Json(500, json!({"detail": "Internal Server Error"})));
    track(&app, "poll-500", Some(&fal.status_url("poll-500"))).await;
    fal.set_status_answer("poll-garbage", Answer::Garbage(200));
    track(&app, "poll-garbage", Some(&fal.status_url("poll-garbage"))).await;
    // No status URL known.
    track(&app, "poll-nourl", None).await;

    // Failures of single jobs back those jobs off; they do not pause the provider.
    let report = app.api.reconcile().await;
    if let Some(fal) = report.pass.providers.get("fal") {
        assert_eq!(fal, "ok", "{report:?}");
    }
    app.api.wait_for_poll_error("fal", "poll-404", "not know this job (404)").await;
    app.api.wait_for_poll_error("fal", "poll-500", "500").await;
    app.api.wait_for_poll_error("fal", "poll-garbage", "malformed").await;
    app.api.wait_for_poll_error("fal", "poll-nourl", "no status_url known").await;
    for id in ["poll-404", "poll-500", "poll-garbage", "poll-nourl"] {
        assert_eq!(state_of(&app, id).await, JobState::Unknown, "{id}");
    }

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_shows_the_provider_as_misconfigured() {
    let (mut app, fal) = start(Some("not-the-right-key")).await;
    fal.set_status("poll-key", "IN_PROGRESS");
    track(&app, "poll-key", Some(&fal.status_url("poll-key"))).await;
    let report = app.api.reconcile().await;
    let fal = report.pass.providers["fal"].as_str();
    assert!(fal.contains("refused the API key (401)"), "{report:?}");
    let health = app.engine().services.reconciler.health();
    assert_eq!(health.get("fal").map(|h| h.status.as_str()), Some("misconfigured"));
    assert_eq!(state_of(&app, "poll-key").await, JobState::Unknown);

    // The user fixes the key: the next pass on demand polls again.
    app.set_secret("fal", SecretKind::ApiKey, Some(API_KEY));
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.providers["fal"], "ok", "{report:?}");
    assert_eq!(state_of(&app, "poll-key").await, JobState::Running);

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_pauses_the_provider() {
    let (mut app, fal) = start(Some(API_KEY)).await;
    fal.set_status_answer("poll-429", Answer::RateLimited(120));
    track(&app, "poll-429", Some(&fal.status_url("poll-429"))).await;
    let report = app.api.reconcile().await;
    let fal = report.pass.providers["fal"].as_str();
    assert!(fal.contains("rate limited"), "{report:?}");
    let health = app.engine().services.reconciler.health();
    let fal = health.get("fal").expect("fal's polling health is known");
    assert_eq!(fal.status, nevermiss_engine::provider_health::HealthStatus::RateLimited);
    assert!(fal.paused_until.is_some());

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_api_key_means_not_configured_but_webhooks_still_work() {
    let (mut app, fal) = start(None).await;
    let signer = key(3);
    fal.serve_keys(&[&signer]);
    fal.set_status("poll-nokey", "IN_PROGRESS");
    track(&app, "poll-nokey", Some(&fal.status_url("poll-nokey"))).await;
    let report = app.api.reconcile().await;
    assert!(report.pass.providers["fal"].as_str().contains("no fal API key"), "{report:?}");
    assert_eq!(fal.queue_hits(), 0);

    // Webhooks need no secret at all.
    let (status, answer) = app.fal_hook(&signer, &ok_body("poll-nokey"), now()).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    assert_eq!(fal_job(&app, "poll-nokey").await.unwrap().job.terminal_source, Some(Source::Push));

    app.shutdown().await;
}

/// What a request produced (its first image and URLs) is the same whether its end came by webhook
/// (`payload`) or by polling alone (what its response URL answers) (contract §6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_is_the_same_by_webhook_and_by_polling() {
    let (mut app, fal) = start(Some(API_KEY)).await;
    let signer = key(7);
    fal.serve_keys(&[&signer]);

    let (status, answer) = app.fal_hook(&signer, &ok_body("req-hook"), now()).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    fal.set_status("req-poll", "COMPLETED");
    fal.set_response("req-poll", Answer::Json(200, ok_body("req-poll")["payload"].clone()));
    track(&app, "req-poll", Some(&fal.status_url("req-poll"))).await;
    let polled = app.api.wait_for_state("fal", "req-poll", JobState::Succeeded).await;
    let pushed = fal_job(&app, "req-hook").await.unwrap();
    assert_eq!((pushed.job.terminal_source, polled.job.terminal_source), (Some(Source::Push), Some(Source::Pull)));
    const IMAGE: &str = "https://v3.fal.media/files/x.png";
    let expected = Some(JobResult { text: None, urls: vec![IMAGE.to_owned()], image: Some(IMAGE.to_owned()) });
    assert_eq!(pushed.job.result, expected, "{pushed:?}");
    assert_eq!(polled.job.result, expected, "{polled:?}");
    app.shutdown().await;
}

/// A request its caller cancelled ends `canceled`, not failed, whether its end came by webhook
/// (`ERROR` with the request error `client_cancelled` in its payload) or by polling alone
/// (`COMPLETED`, then its response URL answers 499 `client_cancelled`, as fal's request errors
/// are documented); another request error (`request_timeout`) stays a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_ends_canceled_by_webhook_and_by_polling() {
    let (mut app, fal) = start(Some(API_KEY)).await;
    let signer = key(7);
    fal.serve_keys(&[&signer]);
    let cancelled = json!({"detail": "The request was cancelled by the client.", "error_type": "client_cancelled"});

    let hook = json!({"request_id": "req-hook", "gateway_request_id": "req-hook", "status": "ERROR",
                      "error": "Request cancelled", "payload": cancelled});
    let (status, answer) = app.fal_hook(&signer, &hook, now()).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    let pushed = fal_job(&app, "req-hook").await.unwrap();
    assert_eq!((pushed.job.state, pushed.job.terminal_source), (JobState::Canceled, Some(Source::Push)), "{pushed:?}");

    fal.set_status("req-poll", "COMPLETED");
    fal.set_response("req-poll", Answer::Json(499, cancelled.clone()));
    track(&app, "req-poll", Some(&fal.status_url("req-poll"))).await;
    let polled = app.api.wait_for_state("fal", "req-poll", JobState::Canceled).await;
    assert_eq!(polled.job.terminal_source, Some(Source::Pull));
    assert_eq!(polled.job.error.as_deref(), Some("client_cancelled: The request was cancelled by the client."));

    fal.set_status("req-timeout", "COMPLETED");
    fal.set_response("req-timeout", Answer::Json(504, json!({"detail": "Request timed out", "error_type": "request_timeout"})));
    track(&app, "req-timeout", Some(&fal.status_url("req-timeout"))).await;
    app.api.wait_for_state("fal", "req-timeout", JobState::Failed).await;
    app.shutdown().await;
}

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
use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey};
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::secrets::SecretKind;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

use crate::waiting;
use waiting::{wait_until, WAIT};

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
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        StandIn { base, state }
    }

    fn serve_keys(&self, keys: &[&SigningKey]) {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let keys: Vec<Value> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                json!({"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": format!("key-{i}"),
                       "x": b64.encode(k.verifying_key().as_bytes())})
            })
            .collect();
        *self.state.jwks.lock().unwrap() = Some(Answer::Json(200, json!({ "keys": keys })));
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
        Some(Answer::RateLimited(secs)) => (
            AxumStatus::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
            axum::Json(json!({"detail": "Rate limit exceeded"})),
        )
            .into_response(),
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
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
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
// The engine under test
// -------------------------------------------------------------------------------------------

struct App {
    engine: Option<Engine>,
    http: reqwest::Client,
    receiver: String,
    api: String,
    token: String,
    fal: StandIn,
    _dir: TempDir,
}

impl App {
    /// An engine whose fal base URL (the JWKS) is a fresh stand-in, with `api_key` stored.
    async fn start(api_key: Option<&str>) -> App {
        let fal = StandIn::start().await;
        let dir = tempfile::tempdir().unwrap();
        // Loopback on ports the OS picks (127.0.0.1:0), no polling interval override.
        let engine = Engine::start(EngineConfig::local(dir.path()), Arc::new(nevermiss_engine::outbox::LogNotifier))
        .await
        .expect("the engine starts");
        engine.services.settings.set("fal.base_url", &fal.base).await.unwrap();
        engine.services.secrets.set("fal", SecretKind::ApiKey, api_key).unwrap();
        App {
            http: reqwest::Client::builder().timeout(WAIT).build().unwrap(),
            receiver: format!("http://{}", engine.receiver_addr),
            api: format!("http://{}", engine.api_addr),
            token: engine.token.clone(),
            engine: Some(engine),
            fal,
            _dir: dir,
        }
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().unwrap()
    }

    async fn shutdown(mut self) {
        if let Some(engine) = self.engine.take() {
            engine.shutdown().await;
        }
    }

    async fn post_hook(&self, headers: &[(&str, String)], body: &[u8]) -> (StatusCode, Value) {
        let mut request = self
            .http
            .post(format!("{}/hooks/fal", self.receiver))
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A webhook signed by `key` at `timestamp`, as fal sends it.
    async fn deliver(&self, key: &SigningKey, body: &Value, timestamp: i64) -> (StatusCode, Value) {
        let bytes = body.to_string().into_bytes();
        let id = body["request_id"].as_str().unwrap_or("none").to_owned();
        self.post_hook(&sign(key, &id, timestamp, &bytes), &bytes).await
    }

    async fn api_get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }

    async fn api_post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.api))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn job(&self, id: &str) -> Option<Value> {
        let response = self.api_get(&format!("/api/jobs/fal/{id}")).await;
        match response.status() {
            StatusCode::NOT_FOUND => None,
            StatusCode::OK => Some(response.json().await.unwrap()),
            other => panic!("GET job {id}: {other}"),
        }
    }

    async fn job_field(&self, id: &str, field: &str) -> Value {
        self.job(id).await.map(|j| j[field].clone()).unwrap_or(Value::Null)
    }

    async fn metric(&self, name: &str) -> i64 {
        let metrics: Value = self.api_get("/api/metrics").await.json().await.unwrap();
        metrics[name].as_i64().unwrap_or_else(|| panic!("no metric {name} in {metrics}"))
    }

    async fn track(&self, id: &str, status_url: Option<&str>) {
        let mut body = json!({"provider": "fal", "job_id": id});
        if let Some(url) = status_url {
            body["status_url"] = json!(url);
        }
        let response = self.api_post("/api/jobs", &body).await;
        assert!(response.status().is_success(), "track {id}: {}", response.status());
    }

    async fn reconcile(&self) -> Value {
        let response = self.api_post("/api/reconcile", &json!({})).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    async fn wait_for_field(&self, id: &str, field: &str, what: &str, check: impl Fn(&Value) -> bool) {
        let check = &check;
        wait_until(what, || async move { check(&self.job_field(id, field).await) }).await;
    }
}


/// fal's four signature headers, written independently of the engine's own code.
fn sign(key: &SigningKey, request_id: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let digest = hex::encode(Sha256::digest(body));
    let message = format!("{request_id}\nuser-42\n{timestamp}\n{digest}");
    let signature = key.sign(message.as_bytes());
    vec![
        ("X-Fal-Webhook-Request-Id", request_id.to_owned()),
        ("X-Fal-Webhook-User-Id", "user-42".to_owned()),
        ("X-Fal-Webhook-Timestamp", timestamp.to_string()),
        ("X-Fal-Webhook-Signature", hex::encode(signature.to_bytes())),
    ]
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
    SigningKey::from_bytes(&[seed; 32])
}

// -------------------------------------------------------------------------------------------
// Webhooks
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_webhooks_are_applied_once_and_forgeries_refused() {
    let app = App::start(Some(API_KEY)).await;
    let signer = key(7);
    app.fal.serve_keys(&[&signer]);

    // A success: applied, then the same delivery (fal's retry) is a duplicate.
    let (status, answer) = app.deliver(&signer, &ok_body("req-ok"), now()).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("applied")), "{answer}");
    let job = app.job("req-ok").await.unwrap();
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["terminal_source"], "push");
    // A retry is a new attempt: a new timestamp and signature, the same request id.
    let (status, answer) = app.deliver(&signer, &ok_body("req-ok"), now() + 1).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("duplicate")), "{answer}");
    assert_eq!(app.metric("duplicates").await, 1);
    assert_eq!(app.fal.jwks_hits(), 1, "the key set is fetched once and cached");

    // A failure carries fal's error text.
    let (status, answer) = app.deliver(&signer, &error_body("req-err"), now()).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("applied")), "{answer}");
    let job = app.job("req-err").await.unwrap();
    assert_eq!(job["state"], "failed");
    let error = job["error"].as_str().unwrap_or_default();
    assert!(error.contains("Invalid status code: 422") && error.contains("field required"), "{job}");

    // A tampered body: 401, counted, nothing stored.
    let hits_before = app.fal.jwks_hits();
    let body = ok_body("req-tampered").to_string().into_bytes();
    let headers = sign(&signer, "req-tampered", now(), &body);
    let tampered = String::from_utf8(body).unwrap().replace("\"seed\":42", "\"seed\":43").into_bytes();
    let (status, _) = app.post_hook(&headers, &tampered).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.metric("bad_signatures").await, 1);
    assert!(app.job("req-tampered").await.is_none());

    // More forgeries (a wrong key) cannot make the engine hammer fal's key set.
    let stranger = key(99);
    for i in 0..5 {
        let (status, _) = app.deliver(&stranger, &ok_body(&format!("req-forged-{i}")), now()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(app.metric("bad_signatures").await, 6);
    assert!(
        app.fal.jwks_hits() - hits_before <= 1,
        "six bad signatures refetched the key set {} times",
        app.fal.jwks_hits() - hits_before
    );

    // A replay outside the 5-minute tolerance, correctly signed: 401 (in the past and the future).
    let (status, _) = app.deliver(&signer, &ok_body("req-replay"), now() - 600).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = app.deliver(&signer, &ok_body("req-replay"), now() + 600).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.metric("bad_signatures").await, 8);
    assert!(app.job("req-replay").await.is_none());

    // Missing headers and a malformed signature: 401.
    let body = ok_body("req-bare").to_string().into_bytes();
    let (status, answer) = app.post_hook(&[], &body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(answer["error"].as_str().unwrap_or_default().contains("X-Fal-Webhook"), "{answer}");
    let mut headers = sign(&signer, "req-bare", now(), &body);
    headers[3].1 = "abcd".into();
    let (status, _) = app.post_hook(&headers, &body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.metric("bad_signatures").await, 10);

    // Signed, in a status NeverMiss does not act on: 200 ignored, never a 4xx (fal retries).
    let odd = json!({"request_id": "req-odd", "status": "PENDING"});
    let (status, answer) = app.deliver(&signer, &odd, now()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["outcome"], "ignored", "{answer}");
    assert_eq!(app.metric("ignored").await, 1);

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_are_picked_up_with_one_refresh() {
    let app = App::start(Some(API_KEY)).await;
    let old = key(1);
    let new = key(2);
    app.fal.serve_keys(&[&old]);
    let (status, _) = app.deliver(&old, &ok_body("rot-0"), now()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(app.fal.jwks_hits(), 1);

    // fal rotates: the key set now has only the new key.
    app.fal.serve_keys(&[&new]);
    for i in 1..=4 {
        let (status, answer) = app.deliver(&new, &ok_body(&format!("rot-{i}")), now()).await;
        assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("applied")), "rot-{i}: {answer}");
    }
    assert_eq!(app.fal.jwks_hits(), 2, "one refresh for the rotation, then the cache");
    // Several at once still need no further fetch.
    let sends = (5..=8).map(|i| {
        let app = &app;
        let new = &new;
        async move { app.deliver(new, &ok_body(&format!("rot-{i}")), now()).await.0 }
    });
    for status in futures_util::future::join_all(sends).await {
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(app.fal.jwks_hits(), 2);
    // The old key is gone from the set and from the cache.
    let (status, _) = app.deliver(&old, &ok_body("rot-old"), now()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_key_set_answers_503_so_fal_retries() {
    let app = App::start(Some(API_KEY)).await;
    let signer = key(5);
    app.fal.serve_jwks(None);

    let (status, answer) = app.deliver(&signer, &ok_body("req-later"), now()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert!(app.fal.jwks_hits() >= 1);
    // Not a bad signature, and nothing stored: fal will retry.
    assert_eq!(app.metric("bad_signatures").await, 0);
    assert!(app.job("req-later").await.is_none());

    // Once fal serves its keys again, a retry of the same delivery goes through.
    app.fal.serve_keys(&[&signer]);
    wait_until("a retried webhook is accepted", || async {
        app.deliver(&signer, &ok_body("req-later"), now()).await.0 == StatusCode::OK
    })
    .await;
    assert_eq!(app.job_field("req-later", "state").await, "succeeded");
    assert_eq!(app.metric("bad_signatures").await, 0);

    app.shutdown().await;
}

// -------------------------------------------------------------------------------------------
// Polling
// -------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_finds_the_true_terminal_state() {
    let app = App::start(Some(API_KEY)).await;

    // A running job whose webhook never comes.
    app.fal.set_status("poll-ok", "IN_PROGRESS");
    app.track("poll-ok", Some(&app.fal.status_url("poll-ok"))).await;
    app.wait_for_field("poll-ok", "state", "the first poll sees it running", |s| s == "running").await;

    // A queued one: polled again and again while unchanged, it stays one timeline entry.
    app.fal.set_status("poll-queued", "IN_QUEUE");
    app.track("poll-queued", Some(&app.fal.status_url("poll-queued"))).await;
    app.wait_for_field("poll-queued", "state", "the first poll sees it queued", |s| s == "queued").await;

    // It completes; the response URL says it succeeded.
    app.fal.set_status("poll-ok", "COMPLETED");
    app.fal.set_response("poll-ok", Answer::Json(200, json!({"images": [], "seed": 1})));
    let report = app.reconcile().await;
    assert_eq!(report["providers"]["fal"], "ok", "{report}");
    // A tracked fal job may have no webhook: its end by polling is not a rescue.
    assert_eq!(report["rescues"], 0, "{report}");
    let job = app.job("poll-ok").await.unwrap();
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["terminal_source"], "pull", "{job}");
    assert_eq!((app.metric("reconcile_rescues").await, app.metric("poll_only_completions").await), (0, 1));

    app.reconcile().await;
    let queued = app.job("poll-queued").await.unwrap();
    assert_eq!(queued["state"], "queued");
    let pulls = queued["timeline"].as_array().unwrap().iter().filter(|e| e["source"] == "pull").count();
    assert_eq!(pulls, 1, "unchanged polls are stale, not new events: {queued}");

    // COMPLETED with an error answer on the response URL: failed, with fal's detail.
    app.fal.set_status("poll-err", "COMPLETED");
    app.fal.set_response(
        "poll-err",
        Answer::Json(422, json!({"detail": [{"loc": ["body", "image_url"], "msg": "Could not download the image", "type": "image_load_error"}]})),
    );
    app.track("poll-err", Some(&app.fal.status_url("poll-err"))).await;
    app.reconcile().await;
    app.wait_for_field("poll-err", "state", "the error answer fails the job", |s| s == "failed").await;
    let job = app.job("poll-err").await.unwrap();
    assert!(job["error"].as_str().unwrap_or_default().contains("Could not download the image"), "{job}");
    assert_eq!(job["terminal_source"], "pull");
    assert_eq!((app.metric("reconcile_rescues").await, app.metric("poll_only_completions").await), (0, 2));

    // Every call to fal carried the key, as fal wants it.
    assert!(!app.fal.authorizations().is_empty());
    assert!(app.fal.authorizations().iter().all(|a| a == &format!("Key {API_KEY}")), "{:?}", app.fal.authorizations());

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_never_leaves_the_status_urls_host() {
    let app = App::start(Some(API_KEY)).await;
    let decoy = StandIn::start().await;

    // The status answer points its response_url at another host: the key is not sent there;
    // the status URL's own response URL is used instead.
    let mut body = app.fal.status_body("poll-decoy", "COMPLETED");
    body["response_url"] = json!(decoy.response_url("poll-decoy"));
    app.fal.set_status_answer("poll-decoy", Answer::Json(200, body));
    app.fal.set_response("poll-decoy", Answer::Json(200, json!({"ok": true})));
    decoy.set_response("poll-decoy", Answer::Json(200, json!({"ok": true})));
    app.track("poll-decoy", Some(&app.fal.status_url("poll-decoy"))).await;
    app.reconcile().await;
    app.wait_for_field("poll-decoy", "state", "the job succeeds", |s| s == "succeeded").await;
    assert_eq!(decoy.queue_hits(), 0, "the other host was called: {:?}", decoy.authorizations());

    // A status URL that redirects to another host: the redirect is followed without the key.
    decoy.set_status("poll-moved", "IN_PROGRESS");
    app.fal.set_redirect("poll-moved", &decoy.status_url("poll-moved"));
    app.track("poll-moved", Some(&app.fal.redirect_url("poll-moved"))).await;
    wait_until("the redirected status URL is polled", || async { decoy.queue_hits() > 0 }).await;
    assert!(decoy.authorizations().iter().all(|a| a.is_empty()), "the key followed a redirect: {:?}", decoy.authorizations());

    // A status_url that is not http(s) is refused when tracking.
    let response = app
        .api_post("/api/jobs", &json!({"provider": "fal", "job_id": "poll-file", "status_url": "file:///etc/passwd"}))
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_polls_are_kept_on_the_job() {
    let app = App::start(Some(API_KEY)).await;

    // Unknown to fal: 404.
    app.track("poll-404", Some(&app.fal.status_url("poll-404"))).await;
    // fal in trouble: 500, and an answer that is not JSON.
    app.fal.set_status_answer("poll-500", Answer::Json(500, json!({"detail": "Internal Server Error"})));
    app.track("poll-500", Some(&app.fal.status_url("poll-500"))).await;
    app.fal.set_status_answer("poll-garbage", Answer::Garbage(200));
    app.track("poll-garbage", Some(&app.fal.status_url("poll-garbage"))).await;
    // No status URL known.
    app.track("poll-nourl", None).await;

    // Failures of single jobs back those jobs off; they do not pause the provider.
    let report = app.reconcile().await;
    if let Some(fal) = report["providers"].get("fal") {
        assert_eq!(fal, "ok", "{report}");
    }
    app.wait_for_field("poll-404", "poll_error", "the 404 is kept", |e| e.as_str().is_some_and(|e| e.contains("not know this job (404)")))
        .await;
    app.wait_for_field("poll-500", "poll_error", "the 500 is kept", |e| e.as_str().is_some_and(|e| e.contains("500"))).await;
    app.wait_for_field("poll-garbage", "poll_error", "the garbage is kept", |e| e.as_str().is_some_and(|e| e.contains("malformed")))
        .await;
    app.wait_for_field("poll-nourl", "poll_error", "the missing status_url is explained", |e| {
        e.as_str().is_some_and(|e| e.contains("no status_url known"))
    })
    .await;
    for id in ["poll-404", "poll-500", "poll-garbage", "poll-nourl"] {
        assert_eq!(app.job_field(id, "state").await, "unknown", "{id}");
    }

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_shows_the_provider_as_misconfigured() {
    let app = App::start(Some("not-the-right-key")).await;
    app.fal.set_status("poll-key", "IN_PROGRESS");
    app.track("poll-key", Some(&app.fal.status_url("poll-key"))).await;
    let report = app.reconcile().await;
    let fal = report["providers"]["fal"].as_str().unwrap_or_default();
    assert!(fal.contains("refused the API key (401)"), "{report}");
    let health = app.engine().services.reconciler.health();
    assert_eq!(health.get("fal").map(|h| h.status.as_str()), Some("misconfigured"));
    assert_eq!(app.job_field("poll-key", "state").await, "unknown");

    // The user fixes the key: the next pass on demand polls again.
    app.engine().services.secrets.set("fal", SecretKind::ApiKey, Some(API_KEY)).unwrap();
    let report = app.reconcile().await;
    assert_eq!(report["providers"]["fal"], "ok", "{report}");
    assert_eq!(app.job_field("poll-key", "state").await, "running");

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_pauses_the_provider() {
    let app = App::start(Some(API_KEY)).await;
    app.fal.set_status_answer("poll-429", Answer::RateLimited(120));
    app.track("poll-429", Some(&app.fal.status_url("poll-429"))).await;
    let report = app.reconcile().await;
    let fal = report["providers"]["fal"].as_str().unwrap_or_default();
    assert!(fal.contains("rate limited"), "{report}");
    let health = app.engine().services.reconciler.health();
    let fal = health.get("fal").expect("fal's polling health is known");
    assert_eq!(fal.status, nevermiss_engine::reconcile::HealthStatus::RateLimited);
    assert!(fal.paused_until.is_some());

    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_api_key_means_not_configured_but_webhooks_still_work() {
    let app = App::start(None).await;
    let signer = key(3);
    app.fal.serve_keys(&[&signer]);
    app.fal.set_status("poll-nokey", "IN_PROGRESS");
    app.track("poll-nokey", Some(&app.fal.status_url("poll-nokey"))).await;
    let report = app.reconcile().await;
    assert!(report["providers"]["fal"].as_str().unwrap_or_default().contains("no fal API key"), "{report}");
    assert_eq!(app.fal.queue_hits(), 0);

    // Webhooks need no secret at all.
    let (status, answer) = app.deliver(&signer, &ok_body("poll-nokey"), now()).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("applied")), "{answer}");
    assert_eq!(app.job_field("poll-nokey", "terminal_source").await, "push");

    app.shutdown().await;
}

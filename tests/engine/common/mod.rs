//! The integration test harness (zero2prod/svix style): a real engine in-process on `127.0.0.1:0`,
//! a recording notifier, a signing sender over real HTTP, the admin API with the token, direct
//! read-only looks at the SQLite file, restarts on the same data dir, and bounded waits.
//!
//! The generic webhook secret is stored per data dir through the engine's secret store (never
//! through the process-global environment), so tests running in parallel threads cannot disturb
//! each other.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use nevermiss_engine::engine::{Engine, EngineConfig, DATABASE_FILE};
use nevermiss_engine::outbox::{Notification, Notifier, NotifyError};
use nevermiss_engine::secrets::SecretKind;
use reqwest::StatusCode;
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};
use sha2::Sha256;
use tempfile::TempDir;

use crate::waiting;
#[allow(unused_imports)]
pub use waiting::{wait_until, WAIT};

/// The generic webhook secret every `TestApp` is configured with.
pub const SECRET: &str = "nevermiss-integration-test-secret";

/// `sha256=<lower-case hex of HMAC-SHA256(secret, body)>`, written independently of the engine's
/// own helper so the test proves the wire format rather than the engine agreeing with itself.
pub fn sign_with(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

pub fn sign(body: &[u8]) -> String {
    sign_with(SECRET, body)
}

/// A generic delivery body.
pub fn payload(delivery_id: &str, job_id: &str, state: &str, seq: i64) -> Value {
    json!({ "deliveryId": delivery_id, "jobId": job_id, "state": state, "seq": seq })
}

/// The identity the outbox gives a job's terminal notification.
pub fn terminal_identity(job_id: &str) -> String {
    format!("nevermiss:generic:{job_id}:terminal")
}


/// A notifier that records what it was asked to deliver, per identity, with the outbox row each
/// call carried. It can be told to fail (return `Err`), so the outbox keeps the row pending, or
/// to hold every call until released (so a test can arrange the store before anything is shown).
pub struct RecordingNotifier {
    delivered: Mutex<HashMap<String, usize>>,
    attempts: Mutex<HashMap<String, usize>>,
    outbox_ids: Mutex<HashMap<String, i64>>,
    failing: AtomicBool,
    open: tokio::sync::watch::Sender<bool>,
}

impl Default for RecordingNotifier {
    fn default() -> Self {
        RecordingNotifier {
            delivered: Mutex::default(),
            attempts: Mutex::default(),
            outbox_ids: Mutex::default(),
            failing: AtomicBool::new(false),
            open: tokio::sync::watch::Sender::new(true),
        }
    }
}

impl RecordingNotifier {
    pub fn new() -> Arc<RecordingNotifier> {
        Arc::new(RecordingNotifier::default())
    }

    /// A notifier whose every call fails until `set_failing(false)`.
    pub fn failing() -> Arc<RecordingNotifier> {
        let n = RecordingNotifier::default();
        n.failing.store(true, Ordering::SeqCst);
        Arc::new(n)
    }

    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// A notifier whose calls wait (before anything is recorded) until `release()`.
    pub fn held() -> Arc<RecordingNotifier> {
        let n = RecordingNotifier::default();
        n.open.send_replace(false);
        Arc::new(n)
    }

    /// Lets held calls (and every later one) through.
    pub fn release(&self) {
        self.open.send_replace(true);
    }

    /// The outbox row id the last call for `identity` carried.
    pub fn outbox_id(&self, identity: &str) -> Option<i64> {
        self.outbox_ids.lock().unwrap().get(identity).copied()
    }

    /// Successful calls for one identity.
    pub fn count(&self, identity: &str) -> usize {
        self.delivered.lock().unwrap().get(identity).copied().unwrap_or(0)
    }

    /// Successful calls, all identities.
    pub fn total(&self) -> usize {
        self.delivered.lock().unwrap().values().sum()
    }

    /// Every call for one identity, failed or not.
    pub fn attempts(&self, identity: &str) -> usize {
        self.attempts.lock().unwrap().get(identity).copied().unwrap_or(0)
    }
}

#[async_trait]
impl Notifier for RecordingNotifier {
    async fn notify(&self, n: &Notification) -> Result<(), NotifyError> {
        let _ = self.open.subscribe().wait_for(|open| *open).await;
        let identity = n.identity();
        self.outbox_ids.lock().unwrap().insert(identity.clone(), n.outbox_id);
        *self.attempts.lock().unwrap().entry(identity.clone()).or_default() += 1;
        if self.failing.load(Ordering::SeqCst) {
            return Err(NotifyError("the test notifier is told to fail".into()));
        }
        *self.delivered.lock().unwrap().entry(identity).or_default() += 1;
        Ok(())
    }
}

/// A running engine with everything a test needs to talk to it.
pub struct TestApp {
    // Field order matters: the engine is dropped before the temporary dir it lives in.
    engine: Option<Engine>,
    pub data_dir: PathBuf,
    pub notifier: Arc<RecordingNotifier>,
    /// One keep-alive client for everything.
    pub http: reqwest::Client,
    /// `http://127.0.0.1:PORT` of the receiver.
    pub receiver: String,
    /// `http://127.0.0.1:PORT` of the admin API.
    pub api: String,
    pub token: String,
    configure_secret: bool,
    _temp: Option<TempDir>,
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(WAIT)
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

impl TestApp {
    /// An engine on a fresh temporary data dir, with the generic secret configured.
    pub async fn spawn() -> TestApp {
        let temp = TempDir::new().unwrap();
        let mut app = TestApp::start_with(temp.path(), RecordingNotifier::new(), true).await;
        app._temp = Some(temp);
        app
    }

    /// An engine on a fresh temporary data dir with no generic secret at all.
    pub async fn spawn_unconfigured() -> TestApp {
        let temp = TempDir::new().unwrap();
        let mut app = TestApp::start_with(temp.path(), RecordingNotifier::new(), false).await;
        app._temp = Some(temp);
        app
    }

    /// An engine on `data_dir` (kept by the caller), with the generic secret configured.
    pub async fn start(data_dir: &Path) -> TestApp {
        TestApp::start_with(data_dir, RecordingNotifier::new(), true).await
    }

    pub async fn start_with(data_dir: &Path, notifier: Arc<RecordingNotifier>, configure_secret: bool) -> TestApp {
        let engine = start_engine(data_dir, notifier.clone(), configure_secret).await;
        TestApp {
            receiver: format!("http://{}", engine.receiver_addr),
            api: format!("http://{}", engine.api_addr),
            token: engine.token.clone(),
            engine: Some(engine),
            data_dir: data_dir.to_owned(),
            notifier,
            http: client(),
            configure_secret,
            _temp: None,
        }
    }

    pub fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("the engine runs")
    }

    /// Stops the engine (as `nevermiss serve` does on SIGTERM).
    pub async fn shutdown(&mut self) {
        if let Some(engine) = self.engine.take() {
            engine.shutdown().await;
        }
    }

    /// Shutdown, then start again on the same data dir with the same notifier.
    pub async fn restart(&mut self) {
        let notifier = self.notifier.clone();
        self.restart_with(notifier).await;
    }

    /// Shutdown, then start again on the same data dir with another notifier.
    pub async fn restart_with(&mut self, notifier: Arc<RecordingNotifier>) {
        self.shutdown().await;
        let engine = start_engine(&self.data_dir, notifier.clone(), self.configure_secret).await;
        self.receiver = format!("http://{}", engine.receiver_addr);
        self.api = format!("http://{}", engine.api_addr);
        self.token = engine.token.clone();
        self.engine = Some(engine);
        self.notifier = notifier;
        // Fresh connections to the new ports.
        self.http = client();
    }

    // ----- the receiver -----

    /// POSTs raw bytes to `/hooks/{provider}` with the given signature header (if any).
    pub async fn post_hook(&self, provider: &str, body: Vec<u8>, signature: Option<&str>) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}/hooks/{provider}", self.receiver))
            .header("content-type", "application/json")
            .body(body);
        if let Some(signature) = signature {
            request = request.header("x-agent-signature", signature);
        }
        request.send().await.expect("the receiver answers")
    }

    /// POSTs a correctly signed generic delivery; returns the status and the JSON answer.
    pub async fn post_signed(&self, body: &Value) -> (StatusCode, Value) {
        let bytes = serde_json::to_vec(body).unwrap();
        let signature = sign(&bytes);
        let response = self.post_hook("generic", bytes, Some(&signature)).await;
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Sends one signed delivery that must be answered 200; returns its outcome.
    pub async fn deliver(&self, delivery_id: &str, job_id: &str, state: &str, seq: i64) -> String {
        self.deliver_json(&payload(delivery_id, job_id, state, seq)).await
    }

    pub async fn deliver_json(&self, body: &Value) -> String {
        let (status, answer) = self.post_signed(body).await;
        assert_eq!(status, StatusCode::OK, "delivery {body} was answered {status}: {answer}");
        answer["outcome"].as_str().unwrap_or_else(|| panic!("no outcome in {answer}")).to_owned()
    }

    // ----- the admin API -----

    pub async fn api_get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("the admin API answers")
    }

    /// GET that must be answered 200 with JSON.
    pub async fn api_json(&self, path: &str) -> Value {
        let response = self.api_get(path).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, StatusCode::OK, "GET {path} was answered {status}: {body}");
        body
    }

    pub async fn api_post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.api))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .expect("the admin API answers")
    }

    /// `POST /api/jobs`; returns the status and the job.
    pub async fn track(&self, job_id: &str, label: Option<&str>) -> (StatusCode, Value) {
        let response = self
            .api_post("/api/jobs", &json!({ "provider": "generic", "job_id": job_id, "label": label }))
            .await;
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn metrics(&self) -> Value {
        self.api_json("/api/metrics").await
    }

    pub async fn metric(&self, name: &str) -> i64 {
        let m = self.metrics().await;
        m[name].as_i64().unwrap_or_else(|| panic!("no metric {name} in {m}"))
    }

    /// The job with its timeline, or `None` on 404.
    pub async fn job(&self, job_id: &str) -> Option<Value> {
        let response = self.api_get(&format!("/api/jobs/generic/{job_id}")).await;
        match response.status() {
            StatusCode::NOT_FOUND => None,
            StatusCode::OK => Some(response.json().await.unwrap()),
            other => panic!("GET job {job_id} was answered {other}"),
        }
    }

    pub async fn job_state(&self, job_id: &str) -> String {
        let job = self.job(job_id).await.unwrap_or_else(|| panic!("job {job_id} is unknown"));
        job["state"].as_str().unwrap().to_owned()
    }

    // ----- the database file, read directly -----

    /// A read-only connection to `<data_dir>/nevermiss.db` (WAL: sees every committed write).
    pub fn db(&self) -> Connection {
        let conn = Connection::open_with_flags(
            self.data_dir.join(DATABASE_FILE),
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .expect("the database opens read-only");
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn
    }

    /// `SELECT count(*) ...` or any single-integer query.
    pub fn count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Rows in deliveries, jobs, job_events and outbox together: what "nothing stored" means.
    pub fn stored_rows(&self) -> i64 {
        self.count(
            "SELECT (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM jobs)
                  + (SELECT count(*) FROM job_events) + (SELECT count(*) FROM outbox)",
        )
    }
}

async fn start_engine(data_dir: &Path, notifier: Arc<RecordingNotifier>, configure_secret: bool) -> Engine {
    // Loopback, ports picked by the OS, no poll interval override, no simulation.
    let mut config = EngineConfig::local(data_dir);
    config.receiver_addr = "127.0.0.1:0".parse().unwrap();
    config.api_addr = "127.0.0.1:0".parse().unwrap();
    config.poll_interval_override = None;
    let engine = Engine::start(config, notifier).await.expect("the engine starts");
    if configure_secret {
        engine
            .services
            .secrets
            .set("generic", SecretKind::WebhookSecret, Some(SECRET))
            .expect("the secret is stored");
    }
    engine
}

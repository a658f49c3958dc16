//! The one in-process harness (zero2prod's `spawn_app`): a real engine on `127.0.0.1:0` in a temp
//! dir, a recording notifier, the admin API as an `ApiClient`, a signing sender for any provider
//! over real HTTP, providers pointed at stand-ins through the engine's own settings and secret
//! store (never the process environment: tests run in parallel threads of one process), a
//! read-only look at the SQLite file, restarts on the same data dir.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ed25519_dalek::SigningKey;
use nevermiss_engine::data_dir::DATABASE_FILE;
use nevermiss_engine::engine::{Engine, EngineConfig, StartError};
use nevermiss_engine::notification::{Message, Notifier, NotifyError};
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::receiver::HookAnswer;
use nevermiss_engine::store::job::{JobState, Outcome};
use reqwest::StatusCode;
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};
use tempfile::TempDir;

use nevermiss_engine::store::sql::Db;
use nevermiss_engine::store::sql::Result as DbResult;

use super::api::{http_client, ApiClient};
use super::postgres::TestDatabase;
use super::signing::{self, Headers};
use super::waiting::WAIT;

/// The generic webhook secret a `TestApp` is configured with.
pub const SECRET: &str = "nevermiss-integration-test-secret";

/// A generic delivery body.
pub fn payload(delivery_id: &str, job_id: &str, state: &str, seq: i64) -> Value {
    json!({ "deliveryId": delivery_id, "jobId": job_id, "state": state, "seq": seq })
}

/// The generic delivery body, as bytes.
pub fn payload_bytes(delivery_id: &str, job_id: &str, state: &str, seq: i64) -> Vec<u8> {
    serde_json::to_vec(&payload(delivery_id, job_id, state, seq)).unwrap()
}

/// `sha256=<hex>` of `body` with the test's generic secret.
pub fn sign(body: &[u8]) -> String {
    signing::generic_signature(SECRET, body)
}

/// The identity the outbox gives a generic job's terminal notification.
pub fn terminal_identity(job_id: &str) -> String {
    format!("nevermiss:generic:{job_id}:terminal")
}

/// A notifier that records what it was asked to deliver, per identity. It can be told to fail
/// (return `Err`), so the outbox keeps the row pending.
pub struct RecordingNotifier {
    delivered: Mutex<HashMap<String, usize>>,
    attempts: Mutex<HashMap<String, usize>>,
    outbox_ids: Mutex<HashMap<String, i64>>,
    /// Every successful call's title and body, in order.
    shown: Mutex<Vec<(String, String)>>,
    failing: AtomicBool,
    open: tokio::sync::watch::Sender<bool>,
}

impl Default for RecordingNotifier {
    fn default() -> Self {
        RecordingNotifier {
            delivered: Mutex::default(),
            attempts: Mutex::default(),
            outbox_ids: Mutex::default(),
            shown: Mutex::default(),
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

    /// The titles and bodies shown, in order.
    pub fn shown(&self) -> Vec<(String, String)> {
        self.shown.lock().unwrap().clone()
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
    async fn notify(&self, n: &Message<'_>) -> Result<(), NotifyError> {
        let _ = self.open.subscribe().wait_for(|open| *open).await;
        let identity = n.identity();
        let outbox_id = match n {
            Message::One(one) => one.outbox_id,
            Message::Summary(summary) => summary.outbox_id,
            Message::Test { .. } => 0,
        };
        self.outbox_ids.lock().unwrap().insert(identity.clone(), outbox_id);
        if !self.failing.load(Ordering::SeqCst) {
            self.shown.lock().unwrap().push((n.title(), n.body()));
        }
        *self.attempts.lock().unwrap().entry(identity.clone()).or_default() += 1;
        if self.failing.load(Ordering::SeqCst) {
            return Err(NotifyError::channel("the test notifier is told to fail"));
        }
        *self.delivered.lock().unwrap().entry(identity).or_default() += 1;
        Ok(())
    }
}

/// A running engine with everything a test needs to talk to it.
/// The store a `TestApp` runs on: SQLite in its data dir, or a database of its own on a
/// PostgreSQL cluster (`serve --database`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The store of the suite's run: `NEVERMISS_TEST_STORE=postgres` runs every test that does
    /// not choose its store on PostgreSQL (`make test` runs the suite once on each); SQLite
    /// otherwise.
    pub fn of_this_run() -> Backend {
        match std::env::var("NEVERMISS_TEST_STORE").as_deref() {
            Ok("postgres") => Backend::Postgres,
            Ok("sqlite") | Ok("") | Err(_) => Backend::Sqlite,
            Ok(other) => panic!("NEVERMISS_TEST_STORE is sqlite or postgres, not {other:?}"),
        }
    }
}

pub struct TestApp {
    // Field order matters: the engine is dropped before the temporary dir it lives in.
    engine: Option<Engine>,
    /// On PostgreSQL: the test's database (dropped after the engine).
    database: Option<TestDatabase>,
    pub data_dir: PathBuf,
    pub notifier: Arc<RecordingNotifier>,
    /// One keep-alive client for the receiver.
    pub http: reqwest::Client,
    /// `http://127.0.0.1:PORT` of the receiver.
    pub receiver: String,
    /// The admin API, with the token.
    pub api: ApiClient,
    configure_secret: bool,
    /// The unit of a failed notification's retry backoff (1 s, as in use; shorter for tests that
    /// go through many retries).
    retry_unit: Duration,
    /// Notifications held until `open_gate` (as the desktop shell does until its window is up).
    gated: bool,
    _temp: Option<TempDir>,
}

impl TestApp {
    /// An engine on a fresh temporary data dir, with the generic secret configured.
    pub async fn spawn() -> TestApp {
        TestApp::spawn_on(Backend::of_this_run()).await
    }

    /// As `spawn`, on `backend`.
    pub async fn spawn_on(backend: Backend) -> TestApp {
        TestApp::spawn_in_temp(true, backend).await
    }

    /// An engine on a fresh temporary data dir with no generic secret at all.
    pub async fn spawn_unconfigured() -> TestApp {
        TestApp::spawn_unconfigured_on(Backend::of_this_run()).await
    }

    /// As `spawn_unconfigured`, on `backend`.
    pub async fn spawn_unconfigured_on(backend: Backend) -> TestApp {
        TestApp::spawn_in_temp(false, backend).await
    }

    async fn spawn_in_temp(configure_secret: bool, backend: Backend) -> TestApp {
        let temp = TempDir::new().unwrap();
        let database = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(TestDatabase::create().await),
        };
        let mut app = TestApp::start_on(temp.path(), RecordingNotifier::new(), configure_secret, database).await;
        app._temp = Some(temp);
        app
    }

    /// An engine on `data_dir` (kept by the caller), with the generic secret configured.
    pub async fn start(data_dir: &Path) -> TestApp {
        TestApp::start_with(data_dir, RecordingNotifier::new(), true).await
    }

    pub async fn start_with(data_dir: &Path, notifier: Arc<RecordingNotifier>, configure_secret: bool) -> TestApp {
        TestApp::start_on(data_dir, notifier, configure_secret, None).await
    }

    async fn start_on(
        data_dir: &Path,
        notifier: Arc<RecordingNotifier>,
        configure_secret: bool,
        database: Option<TestDatabase>,
    ) -> TestApp {
        let retry_unit = nevermiss_engine::outbox::RETRY_UNIT;
        let engine =
            start_engine(data_dir, notifier.clone(), configure_secret, database.as_ref().map(|d| d.url.as_str()), retry_unit, false).await;
        let app = TestApp {
            database,
            receiver: format!("http://{}", engine.receiver_addr),
            api: ApiClient::new(format!("http://{}", engine.api_addr), engine.token.clone()),
            engine: Some(engine),
            data_dir: data_dir.to_owned(),
            notifier,
            http: http_client(WAIT),
            configure_secret,
            retry_unit,
            gated: false,
            _temp: None,
        };
        // The suites count one desktop notification per finished job, however many finish at
        // once; the summary of a backlog is tested on its own (`channels`), where it is put back.
        app.api.never_summarize().await;
        app
    }

    /// Restarts the engine with failed notifications retried after `unit` doubling (from twice
    /// `unit`) instead of seconds.
    pub async fn with_retry_unit(mut self, unit: Duration) -> TestApp {
        self.retry_unit = unit;
        self.restart().await;
        self
    }

    /// Restarts the engine holding every notification until `open_gate`.
    pub async fn with_gate_closed(mut self) -> TestApp {
        self.gated = true;
        self.restart().await;
        self
    }

    /// Lets the held notifications go.
    pub fn open_gate(&self) {
        self.engine().services.outbox.open_gate();
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
        let url = self.database.as_ref().map(|d| d.url.as_str());
        let engine = start_engine(&self.data_dir, notifier.clone(), self.configure_secret, url, self.retry_unit, self.gated).await;
        self.receiver = format!("http://{}", engine.receiver_addr);
        // Fresh connections to the new ports.
        self.api = ApiClient::new(format!("http://{}", engine.api_addr), engine.token.clone());
        self.http = http_client(WAIT);
        self.engine = Some(engine);
        self.notifier = notifier;
    }

    // ----- configuration, through the engine's own stores -----

    /// Points a provider at a stand-in: its base URL setting and its secrets (`None` forgets).
    /// fal's owner account is the tests' (`signing::FAL_USER`): only its webhooks are taken.
    pub async fn configure(&self, provider: &str, base_url: &str, api_key: Option<&str>, webhook_secret: Option<&str>) {
        self.set_setting(&format!("{provider}.base_url"), base_url).await;
        if provider == "fal" {
            self.set_setting("fal.account", super::signing::FAL_USER).await;
        }
        self.set_secret(provider, SecretKind::ApiKey, api_key);
        self.set_secret(provider, SecretKind::WebhookSecret, webhook_secret);
    }

    pub async fn set_setting(&self, key: &str, value: &str) {
        self.engine().services.settings.set(key, value).await.unwrap();
    }

    pub fn set_secret(&self, provider: &str, kind: SecretKind, value: Option<&str>) {
        self.engine().services.secrets.set(provider, kind, value).expect("the secret is stored");
    }

    // ----- the receiver -----

    /// POSTs raw bytes to `/hooks/{provider}` with these headers; the raw response.
    pub async fn post_hook(&self, provider: &str, body: impl Into<Vec<u8>>, headers: &[(&str, String)]) -> reqwest::Response {
        let mut request =
            self.http.post(format!("{}/hooks/{provider}", self.receiver)).header("content-type", "application/json").body(body.into());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request.send().await.expect("the receiver answers")
    }

    /// POSTs raw bytes to `/hooks/{provider}` with this `X-Agent-Signature` (if any).
    pub async fn post_hook_sig(&self, provider: &str, body: impl Into<Vec<u8>>, signature: Option<&str>) -> reqwest::Response {
        let headers: Vec<(&str, String)> = signature.map(|s| ("x-agent-signature", s.to_owned())).into_iter().collect();
        self.post_hook(provider, body, &headers).await
    }

    /// POSTs raw bytes to `/hooks/{provider}`; the status and the answer.
    /// A body the engine accepted as a well-formed event of a real provider (applied, duplicate
    /// or stale) is logged for the SDKs' judge (`conformance`).
    pub async fn hook(&self, provider: &str, body: impl Into<Vec<u8>>, headers: &[(&str, String)]) -> (StatusCode, HookAnswer) {
        let body = body.into();
        let (status, answer) = hook_answer(self.post_hook(provider, body.clone(), headers).await).await;
        if status == StatusCode::OK && matches!(answer.outcome, Some(Outcome::Applied | Outcome::Stale)) {
            super::conformance::record_sent(provider, &body, super::conformance::sends_off_spec());
        }
        (status, answer)
    }

    /// A generic delivery signed with the test's secret; the status and the answer.
    pub async fn post_signed(&self, body: &Value) -> (StatusCode, HookAnswer) {
        let bytes = serde_json::to_vec(body).unwrap();
        let headers = signing::generic(SECRET, &bytes);
        self.hook("generic", bytes, &headers).await
    }

    /// Sends one signed generic delivery that must be answered 200; returns its outcome.
    pub async fn deliver(&self, delivery_id: &str, job_id: &str, state: &str, seq: i64) -> Outcome {
        self.deliver_json(&payload(delivery_id, job_id, state, seq)).await
    }

    pub async fn deliver_json(&self, body: &Value) -> Outcome {
        let (status, answer) = self.post_signed(body).await;
        outcome_of(status, answer, &body.to_string())
    }

    /// `body` signed the Standard Webhooks way with `secret` as of `timestamp`.
    pub async fn sw_hook_at(
        &self,
        provider: &str,
        secret: &str,
        webhook_id: &str,
        timestamp: i64,
        body: &[u8],
    ) -> (StatusCode, HookAnswer) {
        self.hook(provider, body, &signing::standard_webhooks(secret, webhook_id, timestamp, body)).await
    }

    /// A Standard Webhooks delivery signed as of now.
    pub async fn sw_hook(&self, provider: &str, secret: &str, webhook_id: &str, body: &Value) -> (StatusCode, HookAnswer) {
        self.sw_hook_at(provider, secret, webhook_id, signing::now_secs(), &serde_json::to_vec(body).unwrap()).await
    }

    /// A Standard Webhooks delivery that must be answered 200; returns its outcome.
    pub async fn sw_deliver(&self, provider: &str, secret: &str, webhook_id: &str, body: &Value) -> Outcome {
        let (status, answer) = self.sw_hook(provider, secret, webhook_id, body).await;
        outcome_of(status, answer, webhook_id)
    }

    /// A fal webhook signed by `key` at `timestamp` (its request id read from the body).
    pub async fn fal_hook(&self, key: &SigningKey, body: &Value, timestamp: i64) -> (StatusCode, HookAnswer) {
        let bytes = body.to_string().into_bytes();
        let id = body["request_id"].as_str().unwrap_or("none").to_owned();
        self.hook("fal", bytes.clone(), &signing::fal(key, &id, timestamp, &bytes)).await
    }

    // ----- the admin API, generic jobs -----

    /// A generic job with its timeline, `None` when unknown.
    pub async fn job(&self, job_id: &str) -> Option<nevermiss_engine::api::jobs::JobDetail> {
        self.api.job("generic", job_id).await
    }

    /// A generic job's state; the job must exist.
    pub async fn job_state(&self, job_id: &str) -> JobState {
        self.api.job_now("generic", job_id).await.job.state
    }

    /// Tracks a generic job with an optional label.
    pub async fn track(&self, job_id: &str, label: Option<&str>) -> (StatusCode, nevermiss_engine::store::job::Job) {
        self.api
            .track(&nevermiss_engine::api::jobs::TrackRequest {
                provider: "generic".into(),
                job_id: job_id.into(),
                label: label.map(str::to_owned),
                ..Default::default()
            })
            .await
    }

    // ----- the database file, read directly -----

    /// A read-only connection to `<data_dir>/nevermiss.db`.
    pub fn db(&self) -> Connection {
        open_db(&self.data_dir)
    }

    /// `SELECT count(*) ...` or any single-integer query, on either store.
    pub fn count(&self, sql: &str) -> i64 {
        match self.database {
            None => count(&self.db(), sql),
            Some(_) => {
                let store = self.engine().services.store.clone();
                let text = sql.to_owned();
                tokio::task::block_in_place(|| store.read_blocking(|db| db.query_row(&text, [], |r| r.get(0))))
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
            }
        }
    }

    /// A read of the engine's own store (either backend), through its queries' API.
    pub async fn read<T: Send + 'static>(&self, f: impl FnOnce(&dyn Db) -> DbResult<T> + Send + 'static) -> T {
        self.engine().services.store.read(f).await.expect("the store answers")
    }

    /// Every outbox row (one per notification), oldest first, as `job_id kind state`, read
    /// through the engine's store (either database).
    pub fn outbox_rows(&self) -> Vec<String> {
        let store = self.engine().services.store.clone();
        tokio::task::block_in_place(|| {
            store.read_blocking(|db| {
                db.prepare_cached("SELECT job_id, kind, COALESCE(state, '-') AS state FROM outbox ORDER BY id")?
                    .query_map([], |r| {
                        Ok(format!("{} {} {}", r.get::<_, String>("job_id")?, r.get::<_, String>("kind")?, r.get::<_, String>("state")?))
                    })?
                    .collect::<DbResult<Vec<_>>>()
            })
        })
        .expect("the store answers")
    }

    /// The store this engine runs on.
    pub fn backend(&self) -> Backend {
        if self.database.is_some() {
            Backend::Postgres
        } else {
            Backend::Sqlite
        }
    }

    /// Rows in deliveries, jobs, job_events and outbox together: what "nothing stored" means.
    pub fn stored_rows(&self) -> i64 {
        self.count(
            "SELECT (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM jobs)
                  + (SELECT count(*) FROM job_events) + (SELECT count(*) FROM outbox)",
        )
    }
}

/// The status and the receiver's answer (empty when the answer is not the receiver's JSON).
pub async fn hook_answer(response: reqwest::Response) -> (StatusCode, HookAnswer) {
    let status = response.status();
    let answer = response.json().await.unwrap_or(HookAnswer { outcome: None, error: None });
    (status, answer)
}

fn outcome_of(status: StatusCode, answer: HookAnswer, what: &str) -> Outcome {
    assert_eq!(status, StatusCode::OK, "delivery {what} was answered {status}: {answer:?}");
    answer.outcome.unwrap_or_else(|| panic!("no outcome in {answer:?}"))
}

/// Headers of a generic delivery signed with the test's secret.
pub fn signed(body: &[u8]) -> Headers {
    signing::generic(SECRET, body)
}

async fn start_engine(
    data_dir: &Path,
    notifier: Arc<RecordingNotifier>,
    configure_secret: bool,
    database_url: Option<&str>,
    retry_unit: Duration,
    gated: bool,
) -> Engine {
    // Loopback, ports picked by the OS, no poll interval override, no simulation.
    let config = EngineConfig {
        database_url: database_url.map(str::to_owned),
        notify_retry_unit: retry_unit,
        notifications_gated: gated,
        ..EngineConfig::local(data_dir)
    };
    let engine = start_when_free(config, notifier).await;
    if configure_secret {
        engine.services.secrets.set("generic", SecretKind::WebhookSecret, Some(SECRET)).expect("the secret is stored");
    }
    engine
}

/// Starts the engine, waiting a little while its data dir's lock is held by this very process:
/// a restart's earlier engine has closed its lock file, but a child another test forked at that
/// moment holds a copy of the descriptor (and so the `flock`) until it execs (its close-on-exec
/// copy goes then). Any other holder is a failure at once.
async fn start_when_free(config: EngineConfig, notifier: Arc<RecordingNotifier>) -> Engine {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match Engine::start(config.clone(), notifier.clone()).await {
            Ok(engine) => return engine,
            Err(StartError::InUse { pid: Some(pid), .. }) if pid == std::process::id() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the engine starts: {e:?}"),
        }
    }
}

/// A read-only connection to `<data_dir>/nevermiss.db` (WAL: sees every committed write).
pub fn open_db(data_dir: &Path) -> Connection {
    let conn =
        Connection::open_with_flags(data_dir.join(DATABASE_FILE), OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .expect("the database opens read-only");
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

/// `SELECT count(*) ...` or any single-integer query.
pub fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

//! The bore tunnel end to end on loopback: a real bore server (`bore_cli::server::Server`, bound to
//! 127.0.0.1) started by the test, the engine connecting to it as a client, signed deliveries sent
//! to the tunnel's public address landing as applied, the admin API unreachable through it, the
//! tunnel restarted by the supervisor (asked, and after the server dies), and the self-test.
//!
//! bore's control port is fixed (7835), so every test here takes `BORE` first: they never run at
//! the same time, and no other test binary starts a bore server.

// `bore_lock` is held for a whole test, across its awaits, on purpose: bore's control port is
// fixed (7835), so these tests run one at a time, each on its own runtime, where nothing waits
// for the lock.
#![allow(clippy::await_holding_lock)]

use crate::harness;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bore_cli::server::Server;
use harness::tunnel::*;
use harness::{TestApp, WAIT};
use nevermiss_engine::api::status::Info;
use nevermiss_engine::store::job::{JobState, Outcome};
use nevermiss_engine::tunnel::config::TunnelKind;
use nevermiss_engine::tunnel::self_test::{SelfTestOutcome, SelfTestTrigger};
use nevermiss_engine::tunnel::Status;
use reqwest::StatusCode;
use serde_json::{json, Value};

static BORE: Mutex<()> = Mutex::new(());

fn bore_lock() -> std::sync::MutexGuard<'static, ()> {
    BORE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A bore server on 127.0.0.1 in its own runtime on its own thread: `stop` drops that runtime,
/// which closes every socket it holds at once, as if the server machine had died.
struct BoreServer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BoreServer {
    fn start(secret: Option<&str>) -> BoreServer {
        let secret = secret.map(str::to_owned);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let mut server = Server::new(20_000..=60_000, secret.as_deref());
                server.set_bind_addr(IpAddr::V4(Ipv4Addr::LOCALHOST));
                server.set_bind_tunnels(IpAddr::V4(Ipv4Addr::LOCALHOST));
                tokio::select! {
                    result = server.listen() => panic!("the bore server stopped: {result:?}"),
                    _ = stopped => {}
                }
            });
            // Dropping the runtime ends every connection task of the server.
            drop(runtime);
        });
        // Ready once the control port accepts.
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", 7835)).is_err() {
            assert!(Instant::now() < deadline, "the bore server did not listen on 127.0.0.1:7835");
            std::thread::sleep(Duration::from_millis(20));
        }
        BoreServer { stop: Some(stop), thread: Some(thread) }
    }

    fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the bore server thread ends");
        }
    }
}

impl Drop for BoreServer {
    fn drop(&mut self) {
        self.halt();
    }
}

async fn use_bore(app: &TestApp) {
    configure(app, json!({ "tunnel": "bore", "tunnel.bore_server": "127.0.0.1" })).await;
}

/// `nevermiss url` against the running instance (the real binary, its clean environment).
fn nevermiss_url(app: &TestApp) -> String {
    nevermiss_url_said(app).0
}

/// `nevermiss url`: what it prints, and what it says on stderr.
fn nevermiss_url_said(app: &TestApp) -> (String, String) {
    let mut command = crate::harness::serve_child::nevermiss_command();
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NEVERMISS_") {
            command.env_remove(&name);
        }
    }
    let output =
        command.args(["url", "--data-dir"]).arg(&app.data_dir).stdin(std::process::Stdio::null()).output().expect("the binary runs");
    assert!(output.status.success(), "nevermiss url failed: {}", String::from_utf8_lossy(&output.stderr));
    (String::from_utf8(output.stdout).unwrap().trim().to_owned(), String::from_utf8(output.stderr).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_flow_through_bore_and_survive_restarts() {
    let _serial = bore_lock();
    let server = BoreServer::start(None);
    let mut app = TestApp::spawn().await;
    let outside = outside_client();

    // Off until configured; `nevermiss url` is then the local receiver.
    let st = state(&app).await;
    assert_eq!(st.status, Status::Off);
    assert_eq!(st.kind, TunnelKind::None);

    use_bore(&app).await;
    let (st, url) = wait_up_as(&app, TunnelKind::Bore, "http://127.0.0.1:", "").await;
    assert_eq!(st.forwards_to, app.receiver, "only the receiver is forwarded");
    assert_eq!(st.webhook_urls["generic"], format!("{url}/hooks/generic"));
    assert_eq!(app.api.get::<Info>("/api/info", StatusCode::OK).await.public_url, Some(url.clone()));
    assert_eq!(nevermiss_url(&app), url);

    // The self-test runs after the start and passes: the delivery came back to the receiver.
    let st = wait_for_state(&app, "the first self-test is done", |st| st.self_test.is_some()).await;
    let report = st.self_test.as_ref().unwrap();
    assert_eq!(report.outcome, SelfTestOutcome::Passed, "{report:?}");
    assert_eq!(report.trigger, SelfTestTrigger::Start);
    assert!(report.arrived);
    assert!(report.arrived_after_ms.is_some() && report.round_trip_ms.is_some(), "{report:?}");
    assert!(st.warning.is_none(), "{st:?}");
    // Its job is gone again (no notification, nothing to poll).
    let job_id = report.job_id.as_deref().unwrap();
    assert!(job_id.starts_with("nevermiss-selftest-"));
    assert!(app.job(job_id).await.is_none(), "the self-test job was removed");

    // Signed deliveries through the public address land as applied.
    let (status, answer) = deliver_to(&outside, &url, "bore-d1", "bore-job-1", "running", 1).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    let (status, answer) = deliver_to(&outside, &url, "bore-d2", "bore-job-1", "succeeded", 2).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    let (_, answer) = deliver_to(&outside, &url, "bore-d2", "bore-job-1", "succeeded", 2).await;
    assert_eq!(answer.outcome, Some(Outcome::Duplicate));
    assert_eq!(app.job_state("bore-job-1").await, JobState::Succeeded);
    let notifier = app.notifier.clone();
    harness::wait_until("the finished job is notified once", || {
        let n = notifier.clone();
        async move { n.count(&harness::terminal_identity("bore-job-1")) == 1 }
    })
    .await;

    // The admin API is not reachable through the tunnel, token or not: the receiver answers 404.
    for path in ["/api/health", "/api/tunnel", "/api/jobs", "/"] {
        let response = outside.get(format!("{url}{path}")).bearer_auth(&app.api.token).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "GET {path} through the tunnel");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("receiver"), "{path}: {body}");
    }

    // A restart asked of the supervisor: a new connection, deliveries flow again.
    let response = app.api.raw_post("/api/tunnel/restart", &json!({})).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let st = wait_for_state(&app, "the tunnel restarted", |st| st.status == Status::Up && st.restarts >= 1 && st.since.is_some()).await;
    let url2 = public_url(&st);
    if url2 != url {
        assert!(st.url_changed, "{st:?}");
        assert_eq!(st.previous_url.as_deref(), Some(&*url));
        assert!(st.notice.as_deref().unwrap().contains("update the webhook URL"), "{st:?}");
    }
    let (status, answer) = deliver_to(&outside, &url2, "bore-d3", "bore-job-2", "running", 1).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    let (printed, said) = nevermiss_url_said(&app);
    assert_eq!(printed, url2);
    if url2 != url {
        assert!(said.contains("update the webhook URL"), "{said}");
    }

    // Acknowledged: the flag goes.
    let response = app.api.raw_post("/api/tunnel/ack", &json!({})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let st = state(&app).await;
    assert!(!st.url_changed);
    assert!(st.notice.is_none());

    // The server dies: the tunnel goes down with a one-line reason, the self-test says so.
    let restarts_before = st.restarts;
    server.stop();
    let st = wait_for_state(&app, "the tunnel is down", |st| st.status == Status::Down).await;
    assert_one_line(st.last_error.as_deref(), "down");
    assert!(st.down_since.is_some() && st.public_url.is_none(), "{st:?}");
    assert!(st.warning.as_deref().unwrap().contains("down"), "{st:?}");
    let report = self_test(&app).await;
    assert_eq!(report.outcome, SelfTestOutcome::Failed, "{report:?}");
    assert!(report.reason.as_deref().unwrap().contains("down"), "{report:?}");
    assert_eq!(state(&app).await.self_test.as_ref().map(|t| t.outcome), Some(SelfTestOutcome::Failed));
    // Nothing answers at the old public address any more.
    assert!(outside.get(format!("{url2}/hooks/generic")).send().await.is_err());
    // `nevermiss url` falls back to the local receiver, and says why.
    let (printed, said) = nevermiss_url_said(&app);
    assert_eq!(printed, app.receiver);
    assert!(said.contains("the bore tunnel is down"), "{said}");

    // The server comes back: the supervisor reconnects by itself and deliveries flow again.
    let server = BoreServer::start(None);
    let st = wait_up(&app, None).await;
    assert!(st.restarts > restarts_before, "{st:?}");
    assert!(st.last_error.is_some(), "the last error stays visible: {st:?}");
    let url3 = public_url(&st);
    let (status, answer) = deliver_to(&outside, &url3, "bore-d4", "bore-job-2", "succeeded", 2).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");
    assert_eq!(app.job_state("bore-job-2").await, JobState::Succeeded);
    let st = wait_for_state(&app, "the self-test after the restart passed", |st| {
        st.self_test.as_ref().is_some_and(|t| t.outcome == SelfTestOutcome::Passed)
    })
    .await;
    assert!(st.warning.is_none(), "{st:?}");
    // And on demand.
    let report = self_test(&app).await;
    assert_eq!(report.outcome, SelfTestOutcome::Passed, "{report:?}");
    assert_eq!(report.trigger, SelfTestTrigger::Manual);

    app.shutdown().await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_secret_is_one_line_and_retried_with_backoff() {
    let _serial = bore_lock();
    let server = BoreServer::start(Some("the-right-secret"));
    let mut app = TestApp::spawn().await;
    let outside = outside_client();

    // Without a secret, then with a wrong one: down, one line, retried, not hammered.
    use_bore(&app).await;
    let st = wait_for_state(&app, "the tunnel is refused", |st| st.status == Status::Down).await;
    assert_one_line(st.last_error.as_deref(), "no secret");
    let credentials = set_credentials(&app, json!({ "bore_secret": "a-wrong-secret" })).await;
    assert!(credentials["bore_secret"].set);
    assert!(!serde_json::to_string(&credentials).unwrap().contains("a-wrong-secret"), "secrets are never answered");
    let st = wait_for_state(&app, "the wrong secret is retried twice", |st| st.status == Status::Down && st.restarts >= 3).await;
    assert_one_line(st.last_error.as_deref(), "wrong secret");
    assert!(!serde_json::to_string(&st).unwrap().contains("a-wrong-secret"));
    assert_backing_off(&app, &st).await;

    // The right secret: up at once (a change of secret restarts the tunnel), deliveries flow.
    set_credentials(&app, json!({ "bore_secret": "the-right-secret" })).await;
    let st = wait_up(&app, None).await;
    let url = public_url(&st);
    let (status, answer) = deliver_to(&outside, &url, "secret-d1", "secret-job", "running", 1).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Applied)), "{answer:?}");

    app.shutdown().await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_is_a_setup_error_and_a_refused_connection_is_retried() {
    let _serial = bore_lock();
    let mut app = TestApp::spawn().await;

    // No server configured: waits for the user, no retry.
    configure(&app, json!({ "tunnel": "bore" })).await;
    wait_down_for_user(&app, "the tunnel says what is missing", "bore server").await;

    // A server that refuses connections (none listens on 7835 now): retried with backoff.
    configure(&app, json!({ "tunnel.bore_server": "127.0.0.1" })).await;
    let st = wait_for_state(&app, "the refused connection is reported", |st| st.status == Status::Down && st.retrying).await;
    assert_one_line(st.last_error.as_deref(), "refused");
    assert!(st.last_error.as_deref().unwrap().to_lowercase().contains("refused"), "{st:?}");

    app.shutdown().await;
}

//! A hub and its devices (contract §5), as real processes: a `nevermiss serve` hub, and
//! `nevermiss serve` devices connected to it with their own tokens (`PUT /api/hub`). A device's
//! notifications are the log notifier's lines in its log (a `serve` without a session bus has no
//! desktop), so every line a device showed is counted, across its restarts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nevermiss_engine::api::devices::{DeviceList, DeviceToken};
use nevermiss_engine::hub_client::HubState;
use reqwest::StatusCode;
use serde_json::json;
use tempfile::TempDir;

use crate::harness::serve_child::{free_addr, ServeChild, ServeOptions};
use crate::harness::wait_until;

use crate::harness::app::SECRET;

struct Node {
    data_dir: PathBuf,
    log: PathBuf,
    receiver_addr: std::net::SocketAddr,
    api_addr: std::net::SocketAddr,
    env: Vec<(String, String)>,
}

impl Node {
    fn new(dir: &Path, name: &str, env: Vec<(String, String)>) -> Node {
        Node { data_dir: dir.join(name), log: dir.join(format!("{name}.log")), receiver_addr: free_addr(), api_addr: free_addr(), env }
    }

    async fn start(&self) -> ServeChild {
        ServeChild::start(&ServeOptions {
            data_dir: &self.data_dir,
            log: &self.log,
            receiver_addr: self.receiver_addr,
            api_addr: self.api_addr,
            env: self.env.clone(),
            rust_log: "info,nevermiss_engine::hub_client=debug",
        })
        .await
    }

    /// The notifications this node showed, per identity, over all its runs.
    fn shown(&self) -> HashMap<String, usize> {
        let log = String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned();
        let mut shown = HashMap::new();
        for line in log.lines().filter(|l| l.contains("nevermiss::notification")) {
            if let Some(identity) = line.split("identity=").nth(1).and_then(|rest| rest.split_whitespace().next()) {
                *shown.entry(identity.to_owned()).or_default() += 1;
            }
        }
        shown
    }

    fn titles(&self) -> Vec<String> {
        let log = String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned();
        log.lines()
            .filter(|l| l.contains("nevermiss::notification"))
            .filter_map(|l| l.split("title=").nth(1).map(|t| t.split(" body=").next().unwrap_or(t).to_owned()))
            .collect()
    }
}

fn job_identity(job_id: &str) -> String {
    format!("nevermiss:generic:{job_id}:terminal")
}

async fn connect(device: &ServeChild, hub_url: &str) {
    let state: HubState = device.api.put("/api/hub", &json!({ "url": hub_url }), StatusCode::OK).await;
    assert_eq!(state.url.as_deref(), Some(hub_url));
    assert!(state.token_set, "the token comes from NEVERMISS_HUB_TOKEN");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let state: HubState = device.api.get("/api/hub", StatusCode::OK).await;
        if state.connected {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the device did not connect to {hub_url}: {state:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn finish(hub: &ServeChild, job_id: &str) {
    let (status, answer) = hub.deliver(&format!("d-{job_id}"), job_id, "succeeded", 1).await;
    assert_eq!(status, StatusCode::OK, "{answer:?}");
}

async fn delivered_to(hub: &ServeChild, device: &str) -> (i64, i64) {
    let list: DeviceList = hub.api.get("/api/devices", StatusCode::OK).await;
    let d = list.devices.into_iter().find(|d| d.name == device).unwrap();
    (d.delivered, d.pending)
}

/// Waits until the hub counts `expected` (delivered, pending) for a device. A device acknowledges
/// a message after it showed it, so what the log shows runs a moment ahead of the hub's count.
async fn wait_delivered(hub: &ServeChild, device: &str, expected: (i64, i64)) {
    let what = format!("the hub counts {expected:?} (delivered, pending) for {device}");
    crate::harness::waiting::eventually(&what, std::time::Duration::from_secs(30), std::time::Duration::from_millis(25), || async {
        delivered_to(hub, device).await == expected
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_devices_each_show_every_job_once_and_one_back_from_fifty_missed_shows_one_summary() {
    let dir = TempDir::new().unwrap();
    let hub_node = Node::new(dir.path(), "hub", vec![("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into())]);
    let hub = hub_node.start().await;
    let hub_url = hub.api.base.clone();
    let laptop: DeviceToken = hub.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let desk: DeviceToken = hub.api.post("/api/devices", &json!({"name": "desk"}), StatusCode::OK).await;
    assert_ne!(laptop.token, desk.token);
    let taken = hub.api.raw_post("/api/devices", &json!({"name": "desk"})).await;
    assert_eq!(taken.status(), StatusCode::BAD_REQUEST, "a name is one device");

    let laptop_node = Node::new(dir.path(), "laptop", vec![("NEVERMISS_HUB_TOKEN".into(), laptop.token.clone())]);
    let desk_node = Node::new(dir.path(), "desk", vec![("NEVERMISS_HUB_TOKEN".into(), desk.token.clone())]);
    let laptop_app = laptop_node.start().await;
    let desk_app = desk_node.start().await;
    connect(&laptop_app, &hub_url).await;
    connect(&desk_app, &hub_url).await;

    // Both connected: each job once on each, one at a time.
    for i in 0..3 {
        finish(&hub, &format!("both-{i}")).await;
        wait_until("both devices showed it", || async {
            [&laptop_node, &desk_node].iter().all(|n| n.shown().get(&job_identity(&format!("both-{i}"))) == Some(&1))
        })
        .await;
        wait_delivered(&hub, "laptop", (i + 1, 0)).await;
        wait_delivered(&hub, "desk", (i + 1, 0)).await;
    }

    // The desk is killed (kill -9) and misses fifty jobs; the laptop goes on.
    desk_app.kill9();
    for i in 0..50 {
        finish(&hub, &format!("away-{i}")).await;
    }
    wait_delivered(&hub, "laptop", (53, 0)).await;
    assert_eq!(delivered_to(&hub, "desk").await, (3, 50), "the desk's fifty wait on the hub");

    // Back: one summary for the fifty, and nothing shown twice.
    let desk_app = desk_node.start().await;
    wait_delivered(&hub, "desk", (53, 0)).await;
    let desk_shown = desk_node.shown();
    let summaries: Vec<_> = desk_shown.keys().filter(|k| k.starts_with("nevermiss:summary:")).collect();
    assert_eq!(summaries.len(), 1, "one summary: {desk_shown:?}");
    assert!(desk_node.titles().iter().any(|t| t.contains("50 jobs finished while you were away")), "{:?}", desk_node.titles());
    assert!(desk_shown.values().all(|n| *n == 1), "nothing twice on the desk: {desk_shown:?}");
    assert!(!desk_shown.keys().any(|k| k.contains("away-")), "the fifty came as the summary only");
    let laptop_shown = laptop_node.shown();
    assert!(laptop_shown.values().all(|n| *n == 1), "nothing twice on the laptop: {laptop_shown:?}");
    assert!(laptop_shown.len() >= 4, "the laptop showed its jobs, perhaps some summarized: {laptop_shown:?}");

    // A device token reads jobs but changes nothing, and a revoked one stops working.
    let as_desk = crate::harness::api::ApiClient::new(hub_url.clone(), desk.token.clone());
    let jobs = as_desk.raw_get("/api/jobs").await;
    assert_eq!(jobs.status(), StatusCode::OK);
    for (method, path) in [("PUT", "/api/settings"), ("GET", "/api/channels"), ("POST", "/api/devices"), ("GET", "/api/secrets")] {
        let answer = as_desk.send(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), path, Some(&json!({}))).await;
        assert_eq!(answer.status(), StatusCode::FORBIDDEN, "{method} {path} with a device token");
    }
    let revoked: serde_json::Value = hub.api.call(reqwest::Method::DELETE, "/api/devices/desk", None, StatusCode::OK).await;
    assert_eq!(revoked["removed"], "desk");
    assert_eq!(as_desk.raw_get("/api/jobs").await.status(), StatusCode::UNAUTHORIZED);
    drop(desk_app);
    drop(laptop_app);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_resume_where_they_were_when_the_hub_restarts_mid_stream() {
    let dir = TempDir::new().unwrap();
    let hub_node = Node::new(dir.path(), "hub", vec![("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into())]);
    let hub = hub_node.start().await;
    let hub_url = hub.api.base.clone();
    let token: DeviceToken = hub.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let device_node = Node::new(dir.path(), "laptop", vec![("NEVERMISS_HUB_TOKEN".into(), token.token)]);
    let device = device_node.start().await;
    connect(&device, &hub_url).await;
    finish(&hub, "before").await;
    wait_until("shown before the restart", || async { device_node.shown().contains_key(&job_identity("before")) }).await;

    // The hub stops while the stream is open; jobs finish on the restarted hub.
    assert!(hub.stop().await, "the hub stops cleanly");
    let hub = hub_node.start().await;
    finish(&hub, "after-1").await;
    finish(&hub, "after-2").await;
    wait_until("the device resumed", || async {
        let shown = device_node.shown();
        shown.contains_key(&job_identity("after-1")) && shown.contains_key(&job_identity("after-2"))
    })
    .await;
    let shown = device_node.shown();
    assert!(shown.values().all(|n| *n == 1), "nothing twice: {shown:?}");
    wait_delivered(&hub, "laptop", (3, 0)).await;
    let state: HubState = device.api.get("/api/hub", StatusCode::OK).await;
    assert!(state.connected && state.device.as_deref() == Some("laptop"), "{state:?}");

    // The device's window reads the hub's jobs through its own API.
    let page: nevermiss_engine::store::jobs::JobPage = device.api.get("/api/jobs", StatusCode::OK).await;
    let ids: Vec<&str> = page.jobs.iter().map(|j| j.job_id.as_str()).collect();
    for job in ["before", "after-1", "after-2"] {
        assert!(ids.contains(&job), "the device lists the hub's {job}: {ids:?}");
    }

    // And acts on them: tracking a job and "poll now" in the device's window go to the hub. A
    // device tracks by provider and id only: the label, group and polling URL of a job
    // are the hub owner's, so the hub refuses them, forwarded or not.
    for extra in [
        json!({"label": "renamed on the laptop"}),
        json!({"group": "laptop's"}),
        json!({"status_url": "https://queue.fal.run/a/b/requests/r/status"}),
    ] {
        let mut body = json!({"provider": "generic", "job_id": "before"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let refusal: nevermiss_engine::api::ErrorBody = device.api.post("/api/jobs", &body, StatusCode::FORBIDDEN).await;
        assert!(refusal.error.contains("provider and id only"), "{refusal:?}");
    }
    let on_hub: nevermiss_engine::api::jobs::JobDetail = hub.api.get("/api/jobs/generic/before", StatusCode::OK).await;
    assert_eq!(on_hub.job.label, None, "the hub's job kept its label");
    let body = json!({"provider": "generic", "job_id": "from-the-laptop"});
    let tracked: nevermiss_engine::store::job::Job = device.api.post("/api/jobs", &body, StatusCode::CREATED).await;
    assert_eq!(tracked.job_id, "from-the-laptop");
    let on_hub: nevermiss_engine::api::jobs::JobDetail = hub.api.get("/api/jobs/generic/from-the-laptop", StatusCode::OK).await;
    assert_eq!(on_hub.job.job_id, "from-the-laptop");
    // Tracked waiting for its first poll (as `nevermiss track` asks): the query goes to the hub,
    // whose answer says what stopped that poll there (the hub has no status API set for generic).
    let body = json!({"provider": "generic", "job_id": "waited-from-the-laptop"});
    let waited: nevermiss_engine::api::jobs::TrackAnswer = device.api.post("/api/jobs?first_poll=wait", &body, StatusCode::CREATED).await;
    assert_eq!(waited.job.job_id, "waited-from-the-laptop");
    let problem = waited.poll_problem.expect("the hub's first poll says what stopped it");
    assert!(problem.contains("not configured") || problem.contains("status API"), "{problem}");
    let _: nevermiss_engine::api::jobs::JobDetail = hub.api.get("/api/jobs/generic/waited-from-the-laptop", StatusCode::OK).await;
    let polled: nevermiss_engine::api::jobs::PollAnswer =
        device.api.post("/api/jobs/generic/after-1/poll", &json!({}), StatusCode::OK).await;
    assert_eq!(
        (polled.job.job_id.as_str(), polled.job.state),
        ("after-1", nevermiss_engine::store::job::JobState::Succeeded),
        "the hub's job, which this device's own store does not have"
    );
}

/// This machine's address on its first non-loopback interface, if it has one.
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // No packet is sent: connecting a UDP socket only picks the route and so the local address.
    socket.connect("10.255.255.255:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_is_public_only_when_asked_and_answers_plain_http_only_from_loopback() {
    let dir = TempDir::new().unwrap();
    let port = free_addr().port();
    // Without --public-api, a non-loopback address is refused before anything starts.
    let refused = crate::harness::serve_child::nevermiss_command()
        .args(["serve", "--data-dir"])
        .arg(dir.path().join("refused"))
        .args(["--api-addr", &format!("0.0.0.0:{port}"), "--receiver-addr", &free_addr().to_string()])
        .env("NEVERMISS_SECRET_STORE", "file")
        .env("NEVERMISS_TUNNEL", "none")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--public-api"), "the refusal says how: {stderr}");
    let without_public = crate::harness::serve_child::nevermiss_command().args(["serve", "--insecure-http"]).output().unwrap();
    assert!(!without_public.status.success(), "--insecure-http needs --public-api");

    let Some(ip) = non_loopback_ip() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must check plain HTTP from another address: this machine has no non-loopback address"
        );
        eprintln!("skipped the plain-HTTP checks: this machine has no non-loopback address to call from");
        return;
    };
    for (insecure, expected) in [(false, StatusCode::FORBIDDEN), (true, StatusCode::OK)] {
        let mut node =
            Node::new(dir.path(), if insecure { "insecure" } else { "public" }, vec![("NEVERMISS_PUBLIC_API".into(), "true".into())]);
        node.api_addr = format!("0.0.0.0:{}", free_addr().port()).parse().unwrap();
        if insecure {
            node.env.push(("NEVERMISS_INSECURE_HTTP".into(), "true".into()));
        }
        let hub = node.start().await;
        let from_outside = crate::harness::api::ApiClient::new(format!("http://{ip}:{}", node.api_addr.port()), hub.api.token.clone());
        let answer = from_outside.raw_get("/api/jobs").await;
        let status = answer.status();
        let text = answer.text().await.unwrap();
        assert_eq!(status, expected, "plain HTTP from {ip}, insecure-http {insecure}: {text}");
        if !insecure {
            assert!(text.contains("put TLS in front"), "{text}");
        }
        // From loopback (where a TLS proxy on the same machine calls from) it is answered.
        let local = crate::harness::api::ApiClient::new(format!("http://127.0.0.1:{}", node.api_addr.port()), hub.api.token.clone());
        assert_eq!(local.raw_get("/api/jobs").await.status(), StatusCode::OK);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_reaches_the_hub_over_tls_through_the_readmes_nginx_example() {
    let dir = TempDir::new().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let ca = crate::harness::postgres::make_certificates(&certs);
    let hub_node = Node::new(
        dir.path(),
        "hub",
        vec![("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into()), ("NEVERMISS_PUBLIC_API".into(), "true".into())],
    );
    let hub = hub_node.start().await;
    let listen = free_addr();
    let nginx =
        crate::harness::nginx::Nginx::start_hub_example(listen, hub_node.api_addr, &certs.join("server.crt"), &certs.join("server.key"))
            .await;
    let token: DeviceToken = hub.api.post("/api/devices", &json!({"name": "away"}), StatusCode::OK).await;
    let device_node = Node::new(
        dir.path(),
        "away",
        vec![("NEVERMISS_HUB_TOKEN".into(), token.token.clone()), ("NEVERMISS_EXTRA_CA".into(), ca.display().to_string())],
    );
    let device = device_node.start().await;
    connect(&device, &nginx.url).await;
    finish(&hub, "over-tls").await;
    wait_until("shown through the TLS proxy", || async { device_node.shown().get(&job_identity("over-tls")) == Some(&1) }).await;
    wait_delivered(&hub, "away", (1, 0)).await;
    assert!(nginx.url.starts_with("https://"));

    // The owner's browser on the hub's https address: its own origin is answered, another refused.
    let pem = std::fs::read(&ca).unwrap();
    let browser = reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap()).build().unwrap();
    for (origin, expected) in [(nginx.url.clone(), StatusCode::OK), ("https://evil.example".to_owned(), StatusCode::FORBIDDEN)] {
        let answer =
            browser.get(format!("{}/api/jobs", nginx.url)).bearer_auth(&hub.api.token).header("origin", &origin).send().await.unwrap();
        assert_eq!(answer.status(), expected, "a page from {origin}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_is_a_hub_a_device_on_one_process_shows_what_another_finished() {
    let fleet = crate::harness::fleet::Fleet::start(2, Vec::new()).await;
    let (near, far) = (&fleet.servers[0], &fleet.servers[1]);
    let token: DeviceToken = far.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let dir = TempDir::new().unwrap();
    let device_node = Node::new(dir.path(), "laptop", vec![("NEVERMISS_HUB_TOKEN".into(), token.token)]);
    let device = device_node.start().await;
    // Connected to one process; the jobs finish on the other.
    connect(&device, &near.api.base).await;
    for i in 0..3 {
        finish(far, &format!("fleet-{i}")).await;
    }
    wait_until("the device showed each job", || async {
        let shown = device_node.shown();
        (0..3).all(|i| shown.get(&job_identity(&format!("fleet-{i}"))) == Some(&1))
    })
    .await;
    // Acknowledged through one process, counted by the other.
    wait_delivered(far, "laptop", (3, 0)).await;
    assert!(device_node.shown().values().all(|n| *n == 1));
}

/// A hub's device leaves polling to its hub: polling here too would show a job twice on this
/// machine (once as the hub's device row, once on its own desktop channel). A hub that is set
/// but unreachable keeps it so; back on its own, the app polls again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_leaves_polling_to_its_hub_and_polls_again_once_on_its_own() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    use axum::extract::{Path, State};
    use nevermiss_engine::provider_health::HealthStatus;
    use nevermiss_engine::store::job::{JobState, Outcome};

    async fn status(State(asked): State<Arc<AtomicUsize>>, Path(id): Path<String>) -> axum::Json<serde_json::Value> {
        asked.fetch_add(1, SeqCst);
        axum::Json(json!({"jobId": id, "state": "succeeded", "seq": 2}))
    }
    let asked = Arc::new(AtomicUsize::new(0));
    let provider =
        crate::harness::stand_in::serve(axum::Router::new().route("/jobs/{id}", axum::routing::get(status)).with_state(asked.clone()))
            .await;
    let app = crate::harness::TestApp::spawn().await;
    app.configure("generic", &provider, Some("key"), Some(SECRET)).await;
    let hub_url = format!("http://{}", free_addr());
    let state: HubState = app.api.put("/api/hub", &json!({ "url": hub_url }), StatusCode::OK).await;
    assert_eq!(state.url.as_deref(), Some(hub_url.as_str()));
    assert_eq!(app.deliver("d-1", "render", "running", 1).await, Outcome::Applied);
    // Running for an hour: past the 30-minute threshold, so stuck on its own.
    let store = app.engine().services.store.clone();
    store.write(|tx| tx.execute("UPDATE jobs SET created_at = created_at - 3600000 WHERE job_id = 'render'", [])).await.unwrap();

    let report = app.api.reconcile().await;
    assert_eq!(report.stuck_alerts, 0, "the hub raises stuck alerts, not its device: {report:?}");
    let said = &report.pass.providers["generic"];
    assert!(said.contains("device of the hub at") && said.contains(&hub_url), "{report:?}");
    assert_eq!(asked.load(SeqCst), 0, "no request to the provider while a hub is set");
    let metrics = app.api.metrics().await;
    assert_eq!(metrics.providers["generic"].status, HealthStatus::ByHub, "{metrics:?}");
    assert_eq!(app.job_state("render").await, JobState::Running);

    let _: HubState = app.api.put("/api/hub", &json!({ "url": "" }), StatusCode::OK).await;
    app.api.reconcile().await;
    assert_eq!(asked.load(SeqCst), 1, "on its own, it polls");
    assert_eq!(app.job_state("render").await, JobState::Succeeded);
    let metrics = app.api.metrics().await;
    assert_eq!(metrics.providers["generic"].status, HealthStatus::Ok, "{metrics:?}");
    assert!(metrics.providers.values().all(|h| h.status != HealthStatus::ByHub), "no provider is polled by a hub any more: {metrics:?}");
}

/// Makes the hub's job `job_id` run for an hour (its start and creation moved back in the
/// hub's database file), then asks the hub for a pass: past the 30-minute threshold, it is stuck.
async fn stuck_on_the_hub(hub: &ServeChild, hub_data_dir: &Path, job_id: &str) {
    let db = rusqlite::Connection::open(hub_data_dir.join(nevermiss_engine::data_dir::DATABASE_FILE)).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let moved = db
        .execute("UPDATE jobs SET created_at = created_at - 3600000, started_at = started_at - 3600000 WHERE job_id = ?1", [job_id])
        .unwrap();
    assert_eq!(moved, 1);
    let report: serde_json::Value = hub.api.post("/api/reconcile", &json!({}), StatusCode::OK).await;
    assert!(report["stuck_alerts"].as_i64().unwrap() >= 1, "{report}");
}

/// The actions (`open,provider,cancel`) of the notification `identity` once `node` has shown it.
async fn wait_shown_with_actions(node: &ServeChild, identity: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let shown = node
            .log_text()
            .lines()
            .filter(|l| l.contains("nevermiss::notification") && l.contains(&format!("identity={identity} ")))
            .find_map(|l| l.split("actions=").nth(1).map(|a| a.split_whitespace().next().unwrap_or("").to_owned()));
        if let Some(actions) = shown {
            return actions;
        }
        let log = node.log_text();
        let notifications: Vec<&str> = log.lines().filter(|l| l.contains("nevermiss::notification")).collect();
        assert!(std::time::Instant::now() < deadline, "{identity} was not shown on the device within 30 s; it showed {notifications:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Cancel from a device's window: the device forwards it to its hub, which asks the
/// provider only while its owner allows devices to cancel (`devices_may_cancel`, off by default);
/// refused, the hub's 403 comes back as it was answered and the provider is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_cancels_a_hubs_job_only_when_the_hubs_owner_allows_it() {
    use crate::harness::stand_in::{stand_in, StandIn};
    use crate::provider_replicate::{prediction, API_KEY};
    use nevermiss_engine::store::job::JobState;

    let (stand, url) = stand_in(crate::cancel::replicate_routes).await;
    let dir = TempDir::new().unwrap();
    let env = vec![("NEVERMISS_REPLICATE_BASE_URL".into(), url), ("NEVERMISS_REPLICATE_API_KEY".into(), API_KEY.into())];
    let hub = Node::new(dir.path(), "hub", env).start().await;
    let token: DeviceToken = hub.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let device = Node::new(dir.path(), "laptop", vec![("NEVERMISS_HUB_TOKEN".into(), token.token)]).start().await;
    connect(&device, &hub.api.base).await;

    stand.json("p1", prediction("p1", "processing"));
    stand.json("cancel:p1", prediction("p1", "canceled"));
    stand.json("canceled:p1", prediction("p1", "canceled"));
    let _: serde_json::Value = hub.api.post("/api/jobs", &json!({"provider": "replicate", "job_id": "p1"}), StatusCode::CREATED).await;
    hub.api.wait_for_state("replicate", "p1", JobState::Running).await;

    // Off by default: the hub refuses the device, and says why.
    let refused = device.api.raw_post("/api/jobs/replicate/p1/cancel", &json!({})).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "a device token cannot do this unless the hub's owner allows it");
    let asked = |stand: &StandIn| crate::cancel::cancels(stand).len();
    assert_eq!(asked(&stand), 0);

    // Its stuck alert on the device offers no Cancel either: the hub tells its devices.
    stuck_on_the_hub(&hub, &dir.path().join("hub"), "p1").await;
    let alert = wait_shown_with_actions(&device, "nevermiss:replicate:p1:stuck").await;
    assert_eq!(alert, "open,provider", "no cancel the hub would refuse");

    // Allowed on the hub: the device's Cancel reaches Replicate once, and the hub's job ends.
    let _: serde_json::Value = hub.api.put("/api/settings", &json!({"devices_may_cancel": "on"}), StatusCode::OK).await;
    // A stuck alert now offers it on the device.
    stand.json("p2", prediction("p2", "processing"));
    let _: serde_json::Value = hub.api.post("/api/jobs", &json!({"provider": "replicate", "job_id": "p2"}), StatusCode::CREATED).await;
    hub.api.wait_for_state("replicate", "p2", JobState::Running).await;
    stuck_on_the_hub(&hub, &dir.path().join("hub"), "p2").await;
    assert_eq!(wait_shown_with_actions(&device, "nevermiss:replicate:p2:stuck").await, "open,provider,cancel");
    let accepted = device.api.raw_post("/api/jobs/replicate/p1/cancel", &json!({})).await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    hub.api.wait_for_state("replicate", "p1", JobState::Canceled).await;
    assert_eq!(asked(&stand), 1);
}

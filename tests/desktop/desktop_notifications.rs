//! Notifications on a private D-Bus session bus with a real notification server (dunst, on an
//! Xvfb display): a burst of deliveries with duplicates, and reconcile passes polling the same
//! jobs at the same time, give exactly one `Notify` call per job. The calls are counted by
//! `dbus-monitor` on the bus itself, not by the app.
#![cfg(target_os = "linux")]

use crate::common;
use crate::session;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::routing::get;
use axum::{Json, Router};
use common::{payload, wait_until, SECRET};
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::providers::SecretKind;
use serde_json::json;
use session::{require, start_session_bus, start_xvfb, Killed};

const JOBS: usize = 12;
/// The job that finishes after everything else: once its Notify is on the bus, every notification
/// enqueued before it has gone out (the outbox delivers in order), so a doubled one would be there.
const MARKER: &str = "marker-after-the-burst";
/// What the test itself sends on the bus to know that `dbus-monitor` is listening.
const PROBE: &str = "monitor-attach-probe";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_with_duplicates_and_polling_gives_one_notify_per_job() {
    let _alone = session::one_at_a_time();
    require("dunst", "dunst");
    require("dbus-monitor", "dbus-bin");
    let (_x, display) = start_xvfb();
    let (_bus, address) = start_session_bus();
    // The desktop tests run one at a time (session::one_at_a_time), so the process environment is
    // this test's while it runs: the engine's desktop notifier finds the private bus here, as it
    // finds the user's bus in a session.
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", &address);
    std::env::set_var("NEVERMISS_SECRET_STORE", "file");

    let _dunst = session::start_dunst(&display, &address);

    let mut monitor = Command::new("dbus-monitor")
        .args(["--address", &address, "type='method_call',interface='org.freedesktop.Notifications',member='Notify'"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dbus-monitor starts");
    // Counted per line of the monitor's output: each Notify call, the test's own probes (one line
    // each naming PROBE) and the marker job's notification.
    let notify_calls = Arc::new(AtomicUsize::new(0));
    let probes = Arc::new(AtomicUsize::new(0));
    let marker_seen = Arc::new(AtomicUsize::new(0));
    let (counted, probed, marked) = (notify_calls.clone(), probes.clone(), marker_seen.clone());
    let lines = BufReader::new(monitor.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            if line.contains("member=Notify") {
                counted.fetch_add(1, Ordering::SeqCst);
            } else if line.contains(PROBE) {
                probed.fetch_add(1, Ordering::SeqCst);
            } else if line.contains(MARKER) {
                marked.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let _monitor = Killed(monitor);
    // The monitor listens once it sees a Notify call of our own (its arguments are not what the
    // server wants, so nothing is shown; the bus carries the call all the same).
    session::wait_for("dbus-monitor to see a probe Notify call", Duration::from_secs(20), || {
        let _ = Command::new("dbus-send")
            .args([
                "--print-reply",
                "--dest=org.freedesktop.Notifications",
                "/org/freedesktop/Notifications",
                "org.freedesktop.Notifications.Notify",
                &format!("string:{PROBE}"),
            ])
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .output();
        (probes.load(Ordering::SeqCst) > 0).then_some(())
    });
    // The app's own Notify calls: every call seen minus the probes.
    let app_notify_calls = || notify_calls.load(Ordering::SeqCst) - probes.load(Ordering::SeqCst);

    // The provider says every job succeeded; the engine will poll it while webhooks arrive.
    let status_api = Router::new()
        .route("/jobs/{id}", get(|Path(id): Path<String>| async move { Json(json!({"jobId": id, "state": "succeeded", "seq": 9})) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let status_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, status_api).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(EngineConfig::local(dir.path()), nevermiss_engine::channels::desktop::default_notifier()).await.unwrap();
    let services = engine.services.clone();
    services.secrets.set("generic", SecretKind::WebhookSecret, Some(SECRET)).unwrap();
    services.secrets.set("generic", SecretKind::ApiKey, Some("k")).unwrap();
    services.settings.set("generic.base_url", &status_url).await.unwrap();
    // One Notify per job is what this counts: the desktop channel never summarizes the burst.
    services
        .store
        .write(|tx| {
            let mut desktop = nevermiss_engine::store::channels::get(tx, "desktop")?.expect("the desktop channel is there from the start");
            desktop.summary_after = 0;
            nevermiss_engine::store::channels::put(tx, &desktop, nevermiss_engine::store::job::now_ms())
        })
        .await
        .unwrap();

    let http = reqwest::Client::new();
    let receiver = format!("http://{}/hooks/generic", engine.receiver_addr);
    let mut burst = Vec::new();
    for job in 0..JOBS {
        let job_id = format!("burst-{job}");
        services
            .store
            .write({
                let key = nevermiss_engine::store::job::JobKey::new("generic", job_id.clone());
                move |conn| nevermiss_engine::merge_point::track(conn, &key, None, None, None, nevermiss_engine::store::job::now_ms())
            })
            .await
            .unwrap();
        for (delivery, state, seq) in [("a", "running", 1), ("b", "succeeded", 2), ("b", "succeeded", 2), ("c", "succeeded", 3)] {
            let body = serde_json::to_vec(&payload(&format!("{job_id}-{delivery}"), &job_id, state, seq)).unwrap();
            let (http, receiver) = (http.clone(), receiver.clone());
            burst.push(tokio::spawn(async move {
                let status =
                    http.post(&receiver).header("X-Agent-Signature", common::sign(&body)).body(body).send().await.unwrap().status();
                assert_eq!(status, 200);
            }));
        }
    }
    let reconciler = services.reconciler.clone();
    let polls = tokio::spawn(async move {
        for _ in 0..3 {
            reconciler.run_pass().await.unwrap();
        }
    });
    for task in burst {
        task.await.unwrap();
    }
    polls.await.unwrap();

    wait_until("every job notified", || async { services.metrics().await.unwrap().store.notifications_delivered == JOBS as i64 }).await;
    wait_until("the bus saw the Notify calls", || async { app_notify_calls() >= JOBS }).await;
    // Anything doubled would go out before a job that finishes after all of them: the marker.
    let body = serde_json::to_vec(&payload("marker-d", MARKER, "succeeded", 1)).unwrap();
    let status = http.post(&receiver).header("X-Agent-Signature", common::sign(&body)).body(body).send().await.unwrap().status();
    assert_eq!(status, 200);
    wait_until("the marker's Notify on the bus", || async { marker_seen.load(Ordering::SeqCst) > 0 }).await;
    assert_eq!(app_notify_calls(), JOBS + 1, "exactly one Notify per finished job (and the marker's)");
    assert_eq!(services.metrics().await.unwrap().store.notifications_enqueued, JOBS as i64 + 1);
    engine.shutdown().await;
}

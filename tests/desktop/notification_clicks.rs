//! Clicks on real notifications: dunst on an Xvfb display and a private session bus, the click
//! made through dunst itself (`dunstctl action 0`: the default action of the topmost notification
//! shown, what a left click does with dunst's stock settings, see dunstctl(1)), which then sends
//! the app `ActionInvoked` as it does for a user's click.
//!
//! - a job that finishes while the window is open notifies; a click on it brings the window to the
//!   job's page;
//! - a notification left pending by the last run is shown only once the window can act on it, and
//!   a click on it opens the job too;
//! - clickable notifications hold nothing each (one listener for all): a burst of them does not
//!   grow the process's threads, a click on one still opens its job, and a repeat of one (same
//!   outbox row) replaces it on the server instead of stacking.
#![cfg(all(feature = "desktop", target_os = "linux"))]

use crate::session;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nevermiss_engine::channels::Message;
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::job::JobState;
use nevermiss_engine::outbox::{DesktopNotifier, Kind, Notification, Notifier, OpenJob, Subject};
use serde_json::Value;
use session::webdriver::Window;
use session::{dunstctl, start_dunst, start_session_bus, start_xvfb, wait_for, Killed, NotifyCalls};

const SECRET: &str = "click-test";

/// A desktop of the test's own: Xvfb, a private session bus, dunst on both, a watch on the bus's
/// `Notify` calls, and a data dir whose secrets file has the generic secret.
struct Desk {
    display: String,
    bus: String,
    calls: NotifyCalls,
    data_dir: tempfile::TempDir,
    // Stopped in this order when the test ends: dunst, then the bus, then the display.
    _dunst: Killed,
    _bus: Killed,
    _xvfb: Killed,
}

fn desk() -> Desk {
    let (xvfb, display) = start_xvfb();
    let (bus_daemon, bus) = start_session_bus();
    let dunst = start_dunst(&display, &bus);
    let calls = NotifyCalls::watch(&bus);
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("secrets.json"), format!(r#"{{"generic.webhook_secret":"{SECRET}"}}"#)).unwrap();
    Desk { display, bus, calls, data_dir, _dunst: dunst, _bus: bus_daemon, _xvfb: xvfb }
}

/// Waits for the one `Notify` call about `job_id` on the bus; returns it as dbus-monitor printed it.
fn notify_call(calls: &NotifyCalls, job_id: &str) -> String {
    let summary = format!("string \"Succeeded: {job_id}\"");
    let mut seen = wait_for(&format!("the Notify call for {job_id} on the bus"), Duration::from_secs(60), || {
        let seen = calls.containing(&summary);
        (!seen.is_empty()).then_some(seen)
    });
    assert_eq!(seen.len(), 1, "one Notify call for {job_id}: {seen:#?}");
    seen.pop().unwrap()
}

/// Clicks the one notification dunst shows and waits for the window's page to be the job's.
async fn click_and_see_the_job(window: &Window, bus: &str, job_id: &str) {
    wait_for("dunst to show the notification", Duration::from_secs(30), || (dunstctl(bus, &["count", "displayed"]) == "1").then_some(()));
    let route = format!("#/jobs/generic/{job_id}");
    let before = window.script("return location.hash").await;
    assert_ne!(before.as_str(), Some(route.as_str()), "the window is at the job's page before any click");

    dunstctl(bus, &["action", "0"]);

    let at = window.wait_for_script("return location.hash", Duration::from_secs(60), |hash| hash.as_str() == Some(route.as_str())).await;
    assert_eq!(at.as_str(), Some(route.as_str()), "the click did not bring the window to the job's page");
    let text = window
        .wait_for_script("return document.body.innerText", Duration::from_secs(60), |text| {
            text.as_str().is_some_and(|t| t.contains(job_id))
        })
        .await;
    assert!(text.as_str().unwrap_or("").contains(job_id), "the job's page does not name the job: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_a_notification_brings_the_window_to_its_job() {
    let _alone = session::one_at_a_time();
    let Desk { display, bus, calls, data_dir, .. } = &desk();

    let window = Window::launch("click", display, bus, data_dir.path()).await;
    let instance: Value = Window::instance(data_dir.path());
    let receiver = instance["receiver_url"].as_str().unwrap().to_owned();
    assert_eq!(session::deliver_generic(&receiver, SECRET, "click-1", "click-me"), r#"{"outcome":"applied"}"#);

    let call = notify_call(calls, "click-me");
    assert!(call.contains("string \"default\""), "the notification has no default action: {call}");
    assert!(call.contains("string \"nevermiss:outbox:1\""), "the notification is not tagged with its outbox row: {call}");

    click_and_see_the_job(&window, bus, "click-me").await;
    window.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_left_pending_by_the_last_run_is_clickable_after_the_restart() {
    let _alone = session::one_at_a_time();
    let Desk { display, bus, calls, data_dir, .. } = &desk();
    // The desktop tests run one at a time (session::one_at_a_time): the environment is this test's.
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", bus);
    std::env::set_var("NEVERMISS_SECRET_STORE", "file");

    // The last run: the job finished and its notification was enqueued, then the engine stopped
    // before showing it (as a quit or a crash between the merge and the dispatcher leaves it).
    let mut config = EngineConfig::local(data_dir.path());
    config.notifications_gated = true; // and never opened: nothing is shown in this run
    let engine = Engine::start(config, nevermiss_engine::outbox::default_notifier()).await.unwrap();
    let receiver = format!("http://{}", engine.receiver_addr);
    assert_eq!(session::deliver_generic(&receiver, SECRET, "pending-1", "left-pending"), r#"{"outcome":"applied"}"#);
    engine.shutdown().await;
    let pending: i64 = rusqlite::Connection::open(data_dir.path().join(nevermiss_engine::engine::DATABASE_FILE))
        .unwrap()
        .query_row("SELECT count(*) FROM outbox WHERE delivered_at IS NULL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(pending, 1, "the notification is pending at the restart");
    assert!(calls.containing("left-pending").is_empty(), "the last run showed it");

    // The restart, in the window: the pending notification goes out once a click can open it.
    let window = Window::launch("restart", display, bus, data_dir.path()).await;
    let call = notify_call(calls, "left-pending");
    assert!(
        call.contains("string \"default\""),
        "the pending notification was shown without its Open action (before the window could act on a click): {call}"
    );
    click_and_see_the_job(&window, bus, "left-pending").await;
    window.close().await;
}

/// Threads of this process, from /proc.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
}

fn finished(outbox_id: i64, job_id: &str) -> Notification {
    Notification {
        outbox_id,
        kind: Kind::Terminal,
        subject: Subject::job("generic", job_id),
        label: None,
        state: JobState::Succeeded,
        error: None,
        duration_ms: None,
        job: None,
        group: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickable_notifications_share_one_listener_and_a_repeat_replaces() {
    const BURST: i64 = 200;
    let _alone = session::one_at_a_time();
    let Desk { bus, calls, .. } = &desk();
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", bus);

    let opened: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let open_job = Arc::new(OpenJob::default());
    open_job.set({
        let opened = opened.clone();
        move |provider, job_id| opened.lock().unwrap().push((provider.to_owned(), job_id.to_owned()))
    });
    let notifier = DesktopNotifier::new(open_job);

    // A repeat of one outbox row (what a crash between showing and marking causes) replaces the
    // first on a server that honours the stack tag: dunst keeps one.
    notifier.notify(&Message::One(&finished(1, "repeated"))).await.unwrap();
    notifier.notify(&Message::One(&finished(1, "repeated"))).await.unwrap();
    assert_eq!(calls.containing("string \"nevermiss:outbox:1\"").len(), 2);
    let shown = |what: &str| dunstctl(bus, &["count", what]).parse::<usize>().unwrap();
    assert_eq!(shown("displayed") + shown("waiting"), 1, "the repeat stacked instead of replacing");
    dunstctl(bus, &["close-all"]);

    // A burst of clickable notifications: nothing is held per notification.
    let before = threads();
    for i in 0..BURST {
        notifier.notify(&Message::One(&finished(100 + i, &format!("burst-{i}")))).await.unwrap();
    }
    let after = threads();
    assert!(
        after < before + 20,
        "{BURST} clickable notifications took {} more threads ({before} before, {after} after)",
        after.saturating_sub(before)
    );
    assert!(notifier.clickable().await <= nevermiss_engine::outbox::CLICKABLE_KEPT);

    // A click on one still opens its job, once.
    wait_for("dunst to show the burst", Duration::from_secs(30), || (shown("displayed") > 0).then_some(()));
    dunstctl(bus, &["action", "0"]);
    let job = wait_for("the click to reach its job", Duration::from_secs(30), || opened.lock().unwrap().first().cloned());
    assert_eq!(job.0, "generic");
    assert!(job.1.starts_with("burst-"), "the click opened {job:?}");
    assert_eq!(opened.lock().unwrap().len(), 1);
}

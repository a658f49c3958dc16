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
//!   outbox row) replaces it on the server instead of stacking;
//! - a finished job's result reaches the server as the actions `result` and `provider`, the
//!   `urgency` hint (critical for a failed job, normal for a success) and the `image-path` hint
//!   (a `file://` copy of the result's image, fetched from a loopback server); the server's
//!   `ActionInvoked` for each action (sent on the bus as the server sends it: dunst 1.9 shows
//!   actions other than the default only in a dmenu context menu) opens its URL.
//!
//! The `cancel` action and the sounds, which need an engine behind the notifier, are in
//! `notification_cancel` and `notification_sounds`.
#![cfg(all(feature = "desktop", target_os = "linux"))]

use crate::session;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nevermiss_engine::channels::desktop::{DesktopNotifier, OpenJob};
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::notification::Message;
use nevermiss_engine::notification::{Notification, Notifier};
use nevermiss_engine::store::job::{JobResult, JobState};
use nevermiss_engine::store::outbox::{Kind, Subject};
use serde_json::Value;
use session::webdriver::Window;
use session::{dunstctl, start_dunst, start_session_bus, start_xvfb, wait_for, Killed, NotifyCalls};

pub(crate) const SECRET: &str = "click-test";

/// A desktop of the test's own: Xvfb, a private session bus, dunst on both, a watch on the bus's
/// `Notify` calls, and a data dir whose secrets file has the generic secret.
pub(crate) struct Desk {
    pub(crate) display: String,
    pub(crate) bus: String,
    pub(crate) calls: NotifyCalls,
    pub(crate) data_dir: tempfile::TempDir,
    // Stopped in this order when the test ends: dunst, then the bus, then the display.
    _dunst: Killed,
    _bus: Killed,
    _xvfb: Killed,
}

pub(crate) fn desk() -> Desk {
    let (xvfb, display) = start_xvfb();
    let (bus_daemon, bus) = start_session_bus();
    let dunst = start_dunst(&display, &bus);
    let calls = NotifyCalls::watch(&bus);
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("secrets.json"), format!(r#"{{"generic.webhook_secret":"{SECRET}"}}"#)).unwrap();
    Desk { display, bus, calls, data_dir, _dunst: dunst, _bus: bus_daemon, _xvfb: xvfb }
}

/// A desk for an engine in this process: its bus and the file secret store are this process's
/// environment (the desktop tests run one at a time, `session::one_at_a_time`).
pub(crate) fn desk_in_process() -> Desk {
    let desk = desk();
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", &desk.bus);
    std::env::set_var("NEVERMISS_SECRET_STORE", "file");
    desk
}

/// Waits for the one `Notify` call about `job_id` on the bus; returns it as dbus-monitor printed it.
pub(crate) fn notify_call(calls: &NotifyCalls, job_id: &str) -> String {
    calls.one(&format!("string \"Succeeded: {job_id}\""))
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
    let engine = Engine::start(config, nevermiss_engine::channels::desktop::default_notifier()).await.unwrap();
    let receiver = format!("http://{}", engine.receiver_addr);
    assert_eq!(session::deliver_generic(&receiver, SECRET, "pending-1", "left-pending"), r#"{"outcome":"applied"}"#);
    engine.shutdown().await;
    let pending: i64 = rusqlite::Connection::open(data_dir.path().join(nevermiss_engine::data_dir::DATABASE_FILE))
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

pub(crate) fn finished(outbox_id: i64, job_id: &str) -> Notification {
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
        result: None,
        provider_url: None,
        job_kind: None,
        expected_ms: None,
        may_not_cancel: false,
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
    assert!(notifier.clickable().await <= nevermiss_engine::channels::desktop::CLICKABLE_KEPT);

    // A click on one still opens its job, once.
    wait_for("dunst to show the burst", Duration::from_secs(30), || (shown("displayed") > 0).then_some(()));
    dunstctl(bus, &["action", "0"]);
    let job = wait_for("the click to reach its job", Duration::from_secs(30), || opened.lock().unwrap().first().cloned());
    assert_eq!(job.0, "generic");
    assert!(job.1.starts_with("burst-"), "the click opened {job:?}");
    assert_eq!(opened.lock().unwrap().len(), 1);
}

/// A 1x1 PNG.
pub(crate) const PNG: &[u8] = &[
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0, 144, 119, 83, 222, 0, 0, 0, 12,
    73, 68, 65, 84, 120, 156, 99, 248, 207, 192, 0, 0, 3, 1, 1, 0, 201, 254, 146, 239, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130,
];

/// Serves `PNG` at `/out.png` on loopback, and at `/away` a redirect to `away` when given;
/// returns the server's base URL.
pub(crate) async fn image_server_redirecting(away: Option<String>) -> String {
    let mut app =
        axum::Router::new().route("/out.png", axum::routing::get(|| async { ([(axum::http::header::CONTENT_TYPE, "image/png")], PNG) }));
    if let Some(away) = away {
        app = app.route("/away", axum::routing::get(move || async move { axum::response::Redirect::temporary(&away) }));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// The notification ids the server hands out, in order: the `uint32` of every method return on
/// the bus (only `Notify` answers one here), watched with `dbus-monitor`.
pub(crate) struct NotifyIds {
    ids: Arc<Mutex<Vec<u32>>>,
    _monitor: Killed,
}

impl NotifyIds {
    pub(crate) fn watch(bus: &str) -> NotifyIds {
        use std::io::BufRead;
        let mut monitor = std::process::Command::new("dbus-monitor")
            .args(["--address", bus, "type='method_return'"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("dbus-monitor starts");
        let ids: Arc<Mutex<Vec<u32>>> = Arc::default();
        let attached = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lines = std::io::BufReader::new(monitor.stdout.take().unwrap());
        let (seen, attached_seen) = (ids.clone(), attached.clone());
        std::thread::spawn(move || {
            let mut in_return = false;
            for line in lines.lines().map_while(Result::ok) {
                if line.contains("member=NameLost") {
                    attached_seen.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                if ["method call ", "method return ", "signal ", "error "].iter().any(|h| line.starts_with(h)) {
                    in_return = line.starts_with("method return");
                } else if let (true, Some(id)) = (in_return, line.trim().strip_prefix("uint32 ")) {
                    seen.lock().unwrap().push(id.parse().unwrap());
                }
            }
        });
        let monitor = Killed(monitor);
        wait_for("dbus-monitor to attach", Duration::from_secs(20), || attached.load(std::sync::atomic::Ordering::SeqCst).then_some(()));
        NotifyIds { ids, _monitor: monitor }
    }

    /// The `n`th id handed out (from 0), once it is.
    /// How many ids were handed out so far.
    pub(crate) fn count(&self) -> usize {
        self.ids.lock().unwrap().len()
    }

    pub(crate) fn nth(&self, n: usize) -> u32 {
        wait_for("the server's notification id", Duration::from_secs(30), || self.ids.lock().unwrap().get(n).copied())
    }
}

/// Sends `ActionInvoked(id, action)` on the bus, as the notification server does when the user
/// picks an action.
pub(crate) fn invoke(bus: &str, id: u32, action: &str) {
    let out = std::process::Command::new("dbus-send")
        .args(["--type=signal", "/org/freedesktop/Notifications", "org.freedesktop.Notifications.ActionInvoked"])
        .arg(format!("uint32:{id}"))
        .arg(format!("string:{action}"))
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .output()
        .expect("dbus-send runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_gives_actions_urgency_and_an_image_and_each_action_opens_its_link() {
    let _alone = session::one_at_a_time();
    let Desk { bus, calls, .. } = &desk();
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", bus);
    let ids = NotifyIds::watch(bus);

    let opened_jobs: Arc<Mutex<Vec<String>>> = Arc::default();
    let opened_urls: Arc<Mutex<Vec<String>>> = Arc::default();
    let open_job = Arc::new(OpenJob::default());
    open_job.set({
        let opened = opened_jobs.clone();
        move |_, job_id| opened.lock().unwrap().push(job_id.to_owned())
    });
    open_job.set_url_opener({
        let opened = opened_urls.clone();
        move |url| opened.lock().unwrap().push(url.to_owned())
    });
    // The image is served by a loopback stand-in of the job's provider, where the user pointed it
    // (a result's image is fetched from loopback only from there); copies go to this test's cache.
    let cache = tempfile::tempdir().unwrap();
    let _cache = crate::notification_images::EnvVar::set("XDG_CACHE_HOME", cache.path().to_str().unwrap());
    let provider = image_server_redirecting(None).await;
    let _provider = crate::notification_images::EnvVar::set("NEVERMISS_GENERIC_BASE_URL", &provider);
    let notifier = DesktopNotifier::new(open_job);

    let image = format!("{provider}/out.png");
    let page = "https://replicate.com/p/with-result";
    let mut done = finished(1, "with-result");
    done.result = Some(JobResult { text: Some("an astronaut on a horse".into()), urls: vec![image.clone()], image: Some(image.clone()) });
    done.provider_url = Some(page.to_owned());
    notifier.notify(&Message::One(&done)).await.unwrap();

    let call = notify_call(calls, "with-result");
    for action in ["default", "open", "result", "provider"] {
        assert!(call.contains(&format!("string \"{action}\"")), "no {action} action: {call}");
    }
    assert!(call.contains("\nan astronaut on a horse\""), "the body carries the result: {call}");
    let urgency = call.split("string \"urgency\"").nth(1).expect("an urgency hint");
    assert!(urgency.trim_start().starts_with("variant") && urgency.contains("byte 1"), "normal urgency for a success: {call}");
    let image_path = call.split("string \"image-path\"").nth(1).expect("an image-path hint");
    let uri = image_path.split('"').nth(1).expect("the hint's value");
    let file = uri.strip_prefix("file://").expect("a file:// URI");
    assert_eq!(std::fs::read(file).expect("the local copy exists"), PNG, "the copy is the result's image");
    assert!(file.starts_with(cache.path().to_str().unwrap()), "the copy is in the user's cache dir: {file}");

    // A failed job is critical; without a result it has neither result nor provider action.
    let mut failed = finished(2, "failed-one");
    failed.state = JobState::Failed;
    notifier.notify(&Message::One(&failed)).await.unwrap();
    let call = wait_for("the failed job's Notify call", Duration::from_secs(60), || calls.containing("Failed: failed-one").pop());
    let urgency = call.split("string \"urgency\"").nth(1).expect("an urgency hint");
    assert!(urgency.contains("byte 2"), "critical urgency for a failure: {call}");
    assert!(!call.contains("string \"result\"") && !call.contains("string \"provider\"") && !call.contains("image-path"), "{call}");

    // Each action does what it says.
    invoke(bus, ids.nth(0), "provider");
    let url = wait_for("the provider action to open its page", Duration::from_secs(30), || opened_urls.lock().unwrap().first().cloned());
    assert_eq!(url, page);
    assert!(opened_jobs.lock().unwrap().is_empty(), "the provider action opened the job instead");
    // A notification's targets are let go once one is acted on: another one's action acts.
    let mut again = done.clone();
    (again.outbox_id, again.subject) = (3, Subject::job("generic", "with-result-again"));
    notifier.notify(&Message::One(&again)).await.unwrap();
    invoke(bus, ids.nth(2), "result");
    let url = wait_for("the result action to open the result", Duration::from_secs(30), || opened_urls.lock().unwrap().get(1).cloned());
    assert_eq!(url, image);
    invoke(bus, ids.nth(1), "default");
    let job = wait_for("a click to open its job", Duration::from_secs(30), || opened_jobs.lock().unwrap().first().cloned());
    assert_eq!(job, "failed-one");
    assert_eq!(opened_urls.lock().unwrap().len(), 2);
}

//! The book's picture of a notification (`notification.png`, shown on its Notifications page): a
//! finished job's real notification, sent by the engine's desktop notifier to a real notification
//! server (dunst, on an Xvfb display and a private session bus), taken from the screen with
//! ImageMagick (`import`) and cut to the notification (`convert -trim`: the bare root window is
//! black around it). Into `test-artifacts/screenshots/` at every run, into `docs/src/screenshots/`
//! under `make screenshots` (`NEVERMISS_SCREENSHOTS_DIR`).
#![cfg(target_os = "linux")]

use crate::common::{sign, SECRET};
use crate::session;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::providers::SecretKind;
use serde_json::json;
use session::{dunstctl, require, start_dunst, start_session_bus, start_xvfb, wait_for};

/// The picture's name, as the book shows it.
const PICTURE: &str = "notification.png";

fn pictures_dir() -> PathBuf {
    std::env::var_os("NEVERMISS_SCREENSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("test-artifacts/screenshots"))
}

/// Width and height of a picture, as ImageMagick reads them.
fn size_of(path: &std::path::Path) -> (u32, u32) {
    let out = Command::new("identify").args(["-format", "%w %h"]).arg(path).output().expect("identify runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut numbers = text.split_whitespace().map(|n| n.parse::<u32>().expect("a size"));
    (numbers.next().expect("a width"), numbers.next().expect("a height"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_jobs_notification_as_dunst_shows_it() {
    let _alone = session::one_at_a_time();
    require("import", "imagemagick");
    require("convert", "imagemagick");
    let (_x, display) = start_xvfb();
    let (_bus, address) = start_session_bus();
    // The desktop tests run one at a time (session::one_at_a_time): the engine's desktop notifier
    // finds the private bus in this process's environment, as it finds the user's in a session.
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", &address);
    std::env::set_var("NEVERMISS_SECRET_STORE", "file");
    let _dunst = start_dunst(&display, &address);
    dunstctl(&address, &["close-all"]);

    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(EngineConfig::local(dir.path()), nevermiss_engine::channels::desktop::default_notifier()).await.unwrap();
    engine.services.secrets.set("generic", SecretKind::WebhookSecret, Some(SECRET)).unwrap();

    let started = (chrono::Utc::now() - chrono::Duration::seconds(252)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let body = json!({ "deliveryId": "picture-1", "jobId": "nightly-crawl-1204", "state": "succeeded", "seq": 2,
        "label": "nightly crawl", "createdAt": started, "result": { "text": "41,872 pages crawled, 312 new" } });
    let bytes = serde_json::to_vec(&body).unwrap();
    let answer = reqwest::Client::new()
        .post(format!("http://{}/hooks/generic", engine.receiver_addr))
        .header("x-agent-signature", sign(&bytes))
        .body(bytes)
        .send()
        .await
        .expect("the receiver answers");
    assert_eq!(answer.status(), 200);

    wait_for("dunst to show the notification", Duration::from_secs(30), || {
        (dunstctl(&address, &["count", "displayed"]) == "1").then_some(())
    });
    // dunst draws it right after it counts it: a moment for the frame to reach the screen.
    tokio::time::sleep(Duration::from_millis(700)).await;

    let out = pictures_dir();
    std::fs::create_dir_all(&out).unwrap();
    let screen = dir.path().join("screen.png");
    let took = Command::new("import").args(["-window", "root"]).arg(&screen).env("DISPLAY", &display).status().expect("import runs");
    assert!(took.success(), "the screen is taken");
    let picture = out.join(PICTURE);
    let cut = Command::new("convert").arg(&screen).args(["-trim", "+repage"]).arg(&picture).status().expect("convert runs");
    assert!(cut.success(), "the notification is cut out");

    // The notification, not the screen (1280x800) and not nothing.
    let (width, height) = size_of(&picture);
    assert!((100..1280).contains(&width) && (20..800).contains(&height), "{PICTURE} is one notification: {width}x{height}");
    engine.shutdown().await;
}

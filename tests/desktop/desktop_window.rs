//! The real desktop window under Xvfb: `nevermiss` with no command opens a window titled
//! NeverMiss whose process also runs the engine (its receiver answers a signed delivery).
//! A screenshot is kept in `test-artifacts/desktop-window.png`.
#![cfg(all(feature = "desktop", target_os = "linux"))]

use crate::session;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use session::{start_xvfb, wait_for, Killed};

fn map_state(display: &str) -> Option<String> {
    let out = Command::new("xwininfo").args(["-name", "NeverMiss"]).env("DISPLAY", display).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().find_map(|l| l.trim().strip_prefix("Map State: ").map(str::to_owned))
}

fn deliver(receiver: &str, delivery_id: &str, job_id: &str) -> String {
    session::deliver_generic(receiver, "window-test", delivery_id, job_id)
}

/// Starts `nevermiss` (the window); its log goes to `test-artifacts/desktop-<name>.log`.
fn launch(name: &str, display: &str, bus: &str, data_dir: &Path) -> std::process::Child {
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let log = std::fs::File::create(artifacts.join(format!("desktop-{name}.log"))).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_nevermiss"));
    session::desktop_env(&mut command, display, bus)
        .args(["--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data_dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("nevermiss starts")
}

#[test]
fn the_window_runs_the_engine_hides_to_the_tray_and_stays_one_instance() {
    let _alone = session::one_at_a_time();
    let (_xvfb, display) = start_xvfb();
    let (_bus, bus) = session::start_session_bus();
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("secrets.json"), r#"{"generic.webhook_secret":"window-test"}"#).unwrap();
    let app = Killed(launch("first", &display, &bus, data_dir.path()));

    // The engine runs in the window's own process.
    let instance: serde_json::Value = wait_for("instance.json", Duration::from_secs(60), || {
        let bytes = std::fs::read(data_dir.path().join("instance.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    });
    assert_eq!(instance["pid"].as_u64(), Some(app.0.id() as u64));
    let receiver = instance["receiver_url"].as_str().unwrap().to_owned();

    // A window titled NeverMiss is on the screen, and its receiver takes a signed delivery.
    wait_for("the NeverMiss window on screen", Duration::from_secs(60), || (map_state(&display)? == "IsViewable").then_some(()));
    assert_eq!(deliver(&receiver, "w-1", "window-job"), r#"{"outcome":"applied"}"#);

    // Let the page draw the job, then keep a screenshot.
    std::thread::sleep(Duration::from_secs(2));
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("desktop-window.png");
    let status = Command::new("import").args(["-window", "root"]).arg(&shot).env("DISPLAY", &display).status();
    match status {
        Ok(s) if s.success() => assert!(std::fs::metadata(&shot).unwrap().len() > 0),
        _ => eprintln!("no screenshot: ImageMagick's `import` is missing (run `make deps-test`)"),
    }

    // A second launch hands over to the first and exits; the first goes on.
    let other_dir = tempfile::tempdir().unwrap();
    let mut second = launch("second", &display, &bus, other_dir.path());
    let exit = wait_for("the second launch to exit", Duration::from_secs(60), || second.try_wait().ok().flatten());
    assert!(exit.success(), "the second launch exits cleanly: {exit:?}");
    assert!(!other_dir.path().join("instance.json").exists(), "the second launch started no engine");

    // Closing the window hides it; NeverMiss keeps receiving.
    let closed = Command::new("/usr/bin/python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/desktop/session/close_window.py"))
        .args([display.as_str(), "NeverMiss"])
        .status()
        .expect("python3 runs (Debian package python3-xlib: run `make deps-test`)");
    assert!(closed.success());
    wait_for("the window to hide", Duration::from_secs(30), || (map_state(&display)? == "IsUnMapped").then_some(()));
    let mut first = app;
    assert!(first.0.try_wait().unwrap().is_none(), "closing the window does not stop NeverMiss");
    assert_eq!(deliver(&receiver, "w-2", "after-close"), r#"{"outcome":"applied"}"#);
}

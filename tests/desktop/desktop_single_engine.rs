//! One engine per data dir, seen from the desktop app: `nevermiss` (the window) started on a data
//! dir a `nevermiss serve` is using says so on stderr, in one line naming the server (pid and
//! ports), and exits non-zero instead of starting a second engine; the server goes on.
#![cfg(all(feature = "desktop", target_os = "linux"))]

use crate::session;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use session::{start_xvfb, wait_for, Killed};

#[test]
fn the_window_refuses_a_data_dir_that_a_serve_is_using() {
    let _alone = session::one_at_a_time();
    let (_xvfb, display) = start_xvfb();
    let (_bus, bus) = session::start_session_bus();
    let data_dir = tempfile::tempdir().unwrap();

    let mut serve = Command::new(env!("CARGO_BIN_EXE_nevermiss"));
    let serve = Killed(
        session::desktop_env(&mut serve, &display, &bus)
            .args(["serve", "--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nevermiss serve starts"),
    );
    let serve_pid = serve.0.id() as u64;
    let instance: serde_json::Value = wait_for("the server's instance.json", Duration::from_secs(60), || {
        let bytes = std::fs::read(data_dir.path().join("instance.json")).ok()?;
        let instance: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        (instance["pid"].as_u64() == Some(serve_pid)).then_some(instance)
    });

    let mut window = Command::new(env!("CARGO_BIN_EXE_nevermiss"));
    let mut window = Killed(
        session::desktop_env(&mut window, &display, &bus)
            .args(["--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nevermiss starts"),
    );
    let exit = wait_for("the window to refuse the data dir and exit", Duration::from_secs(60), || window.0.try_wait().ok().flatten());
    let mut stderr = String::new();
    window.0.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!exit.success(), "a non-zero exit: {exit:?}; stderr: {stderr}");
    // GTK may say things of its own on stderr; ours is one line.
    let ours: Vec<&str> = stderr.lines().filter(|l| l.starts_with("nevermiss: ")).collect();
    assert_eq!(ours.len(), 1, "one line of ours: {stderr}");
    let line = ours[0];
    assert!(line.contains("in use"), "{line}");
    assert!(line.contains(&format!("pid {serve_pid}")), "names the server's pid: {line}");
    assert!(line.contains(instance["api_url"].as_str().unwrap()), "names its API: {line}");
    assert!(line.contains(instance["receiver_url"].as_str().unwrap()), "names its receiver: {line}");

    // The server goes on, its instance.json untouched.
    let still: serde_json::Value = serde_json::from_slice(&std::fs::read(data_dir.path().join("instance.json")).unwrap()).unwrap();
    assert_eq!(still, instance);
    drop(serve);
}

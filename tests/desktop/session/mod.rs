//! Real desktop-session parts for tests: an X server (Xvfb), a private D-Bus session bus, and a
//! guard that ends a child process when the test ends.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The desktop tests each start an X server, a session bus and desktop daemons, and WebKitGTK
/// under load can hang a page: they run one at a time, as they did when each was its own test
/// binary. Hold the guard for the whole test (a failed test's poisoned lock is taken over).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The environment of a window under test: the X display and the session bus given, no Wayland,
/// no accessibility bus, secrets in the data dir's file (no keychain), and no generic secret from
/// the test process's own environment (the test writes the one it signs with).
pub fn desktop_env<'a>(command: &'a mut Command, display: &str, bus: &str) -> &'a mut Command {
    command
        .env("DISPLAY", display)
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .env("NO_AT_BRIDGE", "1")
        .env("NEVERMISS_SECRET_STORE", "file")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("NEVERMISS_GENERIC_WEBHOOK_SECRET")
}

/// Sends a signed `generic` delivery (`succeeded`, seq 1) to a receiver base URL and returns the
/// answer's body; on its own thread and runtime, so sync and async tests alike can call it.
pub fn deliver_generic(receiver: &str, secret: &str, delivery_id: &str, job_id: &str) -> String {
    let body = format!(r#"{{"deliveryId":"{delivery_id}","jobId":"{job_id}","state":"succeeded","seq":1}}"#);
    let signature = nevermiss_engine::providers::generic::sign(secret.as_bytes(), body.as_bytes());
    let url = format!("{receiver}/hooks/generic");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let response = reqwest::Client::new().post(url).header("X-Agent-Signature", signature).body(body).send().await;
            response.expect("the receiver answers").text().await.unwrap()
        })
    })
    .join()
    .unwrap()
}

/// Kills (and reaps) its child when dropped, whatever the test's outcome.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `probe` every 100 ms until it gives a value; panics naming `what` after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("gave up waiting for {what} (a bound on the wait, not a timing check)");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn require(program: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false);
    assert!(found, "{program} is not installed (Debian package {package}): run `make deps`");
}

/// An Xvfb server on a free display; returns it and the display name (`:N`).
pub fn start_xvfb() -> (Killed, String) {
    require("Xvfb", "xvfb");
    for n in 80..160 {
        if Path::new(&format!("/tmp/.X11-unix/X{n}")).exists() || Path::new(&format!("/tmp/.X{n}-lock")).exists() {
            continue;
        }
        let display = format!(":{n}");
        let child = Command::new("Xvfb")
            .args([display.as_str(), "-screen", "0", "1280x800x24", "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb starts");
        let socket = PathBuf::from(format!("/tmp/.X11-unix/X{n}"));
        wait_for("the X server", Duration::from_secs(20), || socket.exists().then_some(()));
        return (Killed(child), display);
    }
    panic!("no free X display between :80 and :159");
}

/// A private D-Bus session bus; returns it and its address.
pub fn start_session_bus() -> (Killed, String) {
    require("dbus-daemon", "dbus");
    let mut child = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile", "--print-address=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dbus-daemon starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("dbus-daemon prints its address");
    let address = line.trim().to_owned();
    assert!(address.starts_with("unix:"), "unexpected bus address {address:?}");
    (Killed(child), address)
}

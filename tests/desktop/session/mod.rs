//! Real desktop-session parts for tests: an X server (Xvfb), a private D-Bus session bus, and a
//! guard that ends a child process when the test ends.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The app's `nevermiss` binary: the one cargo built for these tests, or, where this module is
/// built into something else (the window benchmark), the one beside that program in `target/`.
pub fn app_binary() -> PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_nevermiss") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the program knows its own path");
    let dir = exe.parent().expect("a program is in a directory");
    // target/<profile>/examples/<name> or target/<profile>/deps/<name>-<hash>
    dir.parent().unwrap_or(dir).join("nevermiss")
}

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
    deliver_generic_state(receiver, secret, delivery_id, job_id, "succeeded")
}

/// As `deliver_generic`, the job in `state` (`failed`, `running`, ...).
pub fn deliver_generic_state(receiver: &str, secret: &str, delivery_id: &str, job_id: &str, state: &str) -> String {
    let body = format!(r#"{{"deliveryId":"{delivery_id}","jobId":"{job_id}","state":"{state}","seq":1}}"#);
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
    let found = std::env::var_os("PATH").map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file())).unwrap_or(false);
    assert!(found, "{program} is not installed (Debian package {package}): run `make deps-test`");
}

/// An Xvfb server on a free display; returns it and the display name (`:N`).
pub fn start_xvfb() -> (Killed, String) {
    require("Xvfb", "xvfb");
    for n in 80..160 {
        let (socket, lock) = (format!("/tmp/.X11-unix/X{n}"), format!("/tmp/.X{n}-lock"));
        if stale_display(&lock) {
            // An X server killed without its cleanup (SIGKILL, a crashed test run) leaves its
            // lock and socket behind: the display is free again once its pid is gone.
            let _ = std::fs::remove_file(&lock);
            let _ = std::fs::remove_file(&socket);
        }
        if Path::new(&socket).exists() || Path::new(&lock).exists() {
            continue;
        }
        let display = format!(":{n}");
        let mut child = Command::new("Xvfb")
            .args([display.as_str(), "-screen", "0", "1280x800x24", "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb starts");
        let socket = PathBuf::from(format!("/tmp/.X11-unix/X{n}"));
        // Up when its socket is there; exited when another test's server took the display first
        // (the check above and the start are not one step): then the next display.
        let up = wait_for("the X server", Duration::from_secs(20), || {
            if matches!(child.try_wait(), Ok(Some(_))) {
                Some(false)
            } else {
                socket.exists().then_some(true)
            }
        });
        if up {
            return (Killed(child), display);
        }
    }
    panic!("no free X display between :80 and :159");
}

/// Whether an X lock file names a process that no longer runs.
fn stale_display(lock: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(lock) else { return false };
    match text.trim().parse::<u32>() {
        Ok(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
        Err(_) => false,
    }
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

/// dunst, the notification server, on `display` and the session bus at `bus`; returns once it owns
/// `org.freedesktop.Notifications`.
pub fn start_dunst(display: &str, bus: &str) -> Killed {
    require("dunst", "dunst");
    let dunst = Killed(
        Command::new("dunst")
            .env("DISPLAY", display)
            .env("DBUS_SESSION_BUS_ADDRESS", bus)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dunst starts"),
    );
    wait_for_bus_name(bus, "org.freedesktop.Notifications");
    dunst
}

/// Waits until `name` has an owner on the session bus at `bus` (a service started just before);
/// asking does not activate one.
pub fn wait_for_bus_name(bus: &str, name: &str) {
    wait_for(&format!("{name} to be owned on the bus"), Duration::from_secs(20), || {
        let out = Command::new("dbus-send")
            .args(["--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner"])
            .arg(format!("string:{name}"))
            .env("DBUS_SESSION_BUS_ADDRESS", bus)
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).contains("boolean true").then_some(())
    });
}

/// Runs `dunstctl ARGS` on the session bus at `bus` (dunst's own control tool: `action 0`
/// performs the default action of the topmost notification shown, as a click on it does);
/// returns its output.
pub fn dunstctl(bus: &str, args: &[&str]) -> String {
    require("dunstctl", "dunst");
    let out = Command::new("dunstctl").args(args).env("DBUS_SESSION_BUS_ADDRESS", bus).output().expect("dunstctl runs");
    assert!(out.status.success(), "dunstctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The `Notify` calls seen on a session bus, each as `dbus-monitor` prints it (its arguments:
/// app name, replaces id, icon, summary, body, actions, hints, timeout), watched from the bus
/// itself rather than from the app.
pub struct NotifyCalls {
    calls: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _monitor: Killed,
}

impl NotifyCalls {
    pub fn watch(bus: &str) -> NotifyCalls {
        require("dbus-monitor", "dbus-bin");
        let mut monitor = Command::new("dbus-monitor")
            .args(["--address", bus, "type='method_call',interface='org.freedesktop.Notifications',member='Notify'"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-monitor starts");
        let calls: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let attached = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lines = BufReader::new(monitor.stdout.take().unwrap());
        let (seen, attached_seen) = (calls.clone(), attached.clone());
        std::thread::spawn(move || {
            // A message starts at an unindented line, its arguments follow indented by three
            // spaces (deeper inside containers); a Notify call ends with its `int32` timeout.
            let mut current: Option<String> = None;
            for line in lines.lines().map_while(Result::ok) {
                // Becoming a monitor, dbus-monitor loses its own name: from then on it sees all.
                if line.contains("member=NameLost") {
                    attached_seen.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                // (A string argument with a line break goes on at the start of the next line:
                // only a message's own header line starts a message.)
                let header = ["method call ", "method return ", "signal ", "error "].iter().any(|h| line.starts_with(h));
                if header {
                    current = line.contains("member=Notify").then_some(line);
                    continue;
                }
                if let Some(call) = current.as_mut() {
                    call.push('\n');
                    call.push_str(&line);
                    if line.starts_with("   int32 ") {
                        seen.lock().unwrap().push(current.take().unwrap());
                    }
                }
            }
        });
        let monitor = Killed(monitor);
        wait_for("dbus-monitor to attach", Duration::from_secs(20), || attached.load(std::sync::atomic::Ordering::SeqCst).then_some(()));
        NotifyCalls { calls, _monitor: monitor }
    }

    /// The calls whose text contains `needle`.
    pub fn containing(&self, needle: &str) -> Vec<String> {
        self.calls.lock().unwrap().iter().filter(|c| c.contains(needle)).cloned().collect()
    }

    /// Waits for the call containing `needle` (at most a minute) and checks it is the only one.
    pub fn one(&self, needle: &str) -> String {
        let mut seen = wait_for(&format!("the Notify call with {needle}"), Duration::from_secs(60), || {
            let seen = self.containing(needle);
            (!seen.is_empty()).then_some(seen)
        });
        assert_eq!(seen.len(), 1, "one Notify call with {needle}: {seen:#?}");
        seen.pop().unwrap()
    }
}
pub mod webdriver;

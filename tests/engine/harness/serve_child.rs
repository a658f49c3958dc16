//! A real `nevermiss serve` child process for the security, chaos and crash suites: started with
//! a clean environment (no `NEVERMISS_*` or `RUST_LOG` of the machine leaks in) plus what the test
//! gives, its stderr appended to a log file (so restarts keep one log), ready once
//! `<data-dir>/instance.json` names its own pid. SIGKILL and SIGTERM by its pid only; killed on
//! drop. Also: free loopback ports picked up front, and a read-only look at the SQLite file.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::Value;

use super::api::{http_client, ApiClient};
use super::app::open_db;

/// How long a child may take to start or to stop.
pub const START_WAIT: Duration = Duration::from_secs(60);

/// The app's `nevermiss` binary, which the app crate builds into the same target dir as this test
/// (`cargo test --workspace` builds it for the app's own tests; `make test` builds it first).
/// `NEVERMISS_BIN` names another one.
pub fn nevermiss_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("NEVERMISS_BIN") {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/engine-<hash> -> target/<profile>/nevermiss
    let exe = std::env::current_exe().expect("the test knows its own path");
    let path = exe.parent().and_then(Path::parent).expect("the test runs from target/<profile>/deps").join("nevermiss");
    assert!(
        path.is_file(),
        "{} is missing: build the app first (`cargo build --bin nevermiss`, or `cargo test --workspace`)",
        path.display()
    );
    path
}

/// `NEVERMISS_BIN_WRAPPER` (e.g. `wine`): the program that runs `nevermiss_bin()`, for a Windows
/// build of the app run under Wine.
pub fn wrapper() -> Option<std::ffi::OsString> {
    std::env::var_os("NEVERMISS_BIN_WRAPPER").filter(|w| !w.is_empty())
}

/// A command that runs the app's binary: `nevermiss_bin()`, under the wrapper when one is set.
pub fn nevermiss_command() -> Command {
    match wrapper() {
        Some(wrapper) => {
            let mut command = Command::new(wrapper);
            command.arg(nevermiss_bin());
            command
        }
        None => Command::new(nevermiss_bin()),
    }
}

/// Under a wrapper (Wine), whether a check is skipped because the wrapper cannot stand for the
/// OS there; prints what is skipped and why (in the test's output), and says so. Without a
/// wrapper: false, and nothing printed.
pub fn skipped_under_wrapper(what: &str, why: &str) -> bool {
    match wrapper() {
        Some(wrapper) => {
            eprintln!("SKIPPED under {}: {what}: {why}", wrapper.to_string_lossy());
            true
        }
        None => false,
    }
}

/// A path as the child is given it: under a wrapper (Wine), the Windows form of the absolute
/// path, `Z:\...` (Wine's drive Z: is the Unix root), so it never depends on the child's drive.
pub fn child_path(path: &Path) -> std::ffi::OsString {
    if wrapper().is_none() {
        return path.as_os_str().to_owned();
    }
    let absolute = std::path::absolute(path).expect("an absolute path");
    format!("Z:{}", absolute.to_string_lossy().replace('/', "\\")).into()
}

/// A loopback port nothing listens on now (bound, then released), to pass explicitly; never the
/// same one twice in this test binary. Picked below the OS's ephemeral range (32768 and up on
/// Linux), where listeners on port 0 and outgoing connections never land: a child restarted on
/// its old ports finds them free even while other tests run (before, a parallel test's port-0
/// listener could take one in between).
pub fn free_addr() -> SocketAddr {
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap();
    // Each test binary starts at its own place in the range, so two binaries at once seldom meet.
    let offset = (std::process::id() % 1000) * 10;
    for step in 0..12_000u32 {
        // 7 and 12,000 share no factor: every port of the range comes once.
        let port = (20_000 + (offset + step * 7) % 12_000) as u16;
        if handed_out.contains(&port) {
            continue;
        }
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            handed_out.push(port);
            return listener.local_addr().unwrap();
        }
    }
    panic!("no free loopback port between 20000 and 32000")
}

pub struct ServeChild {
    child: Child,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    /// `http://127.0.0.1:PORT`
    pub receiver: String,
    /// Its admin API, with its token.
    pub api: ApiClient,
}

pub struct ServeOptions<'a> {
    pub data_dir: &'a Path,
    /// Where stderr goes (appended).
    pub log: &'a Path,
    pub receiver_addr: SocketAddr,
    pub api_addr: SocketAddr,
    pub env: Vec<(String, String)>,
    pub rust_log: &'a str,
}

impl ServeChild {
    pub async fn start(options: &ServeOptions<'_>) -> ServeChild {
        ServeChild::spawn(options, true).await
    }

    /// A child started without `--data-dir`, on the OS's own data dir, which the test names as
    /// `options.data_dir` (where it waits for `instance.json`).
    pub async fn start_on_the_os_data_dir(options: &ServeOptions<'_>) -> ServeChild {
        ServeChild::spawn(options, false).await
    }

    async fn spawn(options: &ServeOptions<'_>, data_dir_arg: bool) -> ServeChild {
        let mut command = nevermiss_command();
        for (name, _) in std::env::vars_os() {
            let name_text = name.to_string_lossy();
            if name_text.starts_with("NEVERMISS_") || name_text == "RUST_LOG" || name_text == "DBUS_SESSION_BUS_ADDRESS" {
                command.env_remove(&name);
            }
        }
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(options.log).unwrap();
        command.arg("serve");
        if data_dir_arg {
            command.arg("--data-dir").arg(child_path(options.data_dir));
        }
        command
            .args(["--receiver-addr", &options.receiver_addr.to_string()])
            .args(["--api-addr", &options.api_addr.to_string()])
            // Secrets set through the API go to the 0600 file in the data dir, not a keychain.
            .env("NEVERMISS_SECRET_STORE", "file")
            .env("NEVERMISS_TUNNEL", "none")
            .env("RUST_LOG", options.rust_log)
            .envs(options.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let spawned_at = std::time::SystemTime::now();
        let mut child = command.spawn().expect("the nevermiss binary starts");
        let instance = wait_for_instance(&mut child, options.data_dir, options.log, spawned_at).await;
        let token = std::fs::read_to_string(options.data_dir.join("api-token")).unwrap().trim().to_owned();
        ServeChild {
            child,
            data_dir: options.data_dir.to_owned(),
            log: options.log.to_owned(),
            receiver: instance["receiver_url"].as_str().unwrap().to_owned(),
            api: ApiClient::with_client(instance["api_url"].as_str().unwrap(), token, http_client(Duration::from_secs(120))),
        }
    }

    /// A child whose data dir is `<dir>/data` and log `<dir>/serve.log`, on fresh loopback ports,
    /// logging at `info`, with `env`.
    pub async fn start_in(dir: &Path, env: Vec<(String, String)>) -> ServeChild {
        ServeChild::start(&ServeOptions {
            data_dir: &dir.join("data"),
            log: &dir.join("serve.log"),
            receiver_addr: free_addr(),
            api_addr: free_addr(),
            env,
            rust_log: "info",
        })
        .await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// POSTs a signed generic delivery to its receiver; the status and the answer.
    pub async fn deliver(
        &self,
        delivery_id: &str,
        job_id: &str,
        state: &str,
        seq: i64,
    ) -> (reqwest::StatusCode, nevermiss_engine::receiver::HookAnswer) {
        super::tunnel::deliver_to(&self.api.http, &self.receiver, delivery_id, job_id, state, seq).await
    }

    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// SIGKILL: no shutdown code runs at all.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then a bounded wait for the exit; returns whether it exited cleanly.
    pub async fn stop(mut self) -> bool {
        let signal = stop_signal();
        let status = Command::new("kill").args([signal, &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill {signal} {}", self.child.id());
        let deadline = Instant::now() + START_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            assert!(Instant::now() < deadline, "`nevermiss serve` did not stop within {START_WAIT:?} of SIGTERM");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn db(&self) -> Connection {
        open_db(&self.data_dir)
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The signal that asks a child for its clean stop: SIGTERM; under Wine SIGINT, the program (a
/// Windows build) stopping cleanly on Ctrl-C, which Wine makes of SIGINT, while SIGTERM ends the
/// process at once (exit status 143).
pub fn stop_signal() -> &'static str {
    if wrapper().is_some() {
        "-INT"
    } else {
        "-TERM"
    }
}

/// Whether `instance` (read from the `instance.json` at `path`) was written by the child `child`
/// spawned at `spawned_at`: it names the child's pid; under Wine, whose pids are its own, the file
/// was written since that spawn.
pub fn written_by(instance: &Value, child: &Child, path: &Path, spawned_at: std::time::SystemTime) -> bool {
    if instance["pid"].as_u64() == Some(u64::from(child.id())) {
        return true;
    }
    wrapper().is_some() && std::fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|t| t >= spawned_at)
}

/// Waits for `instance.json` written by this very child (a killed predecessor leaves its own).
async fn wait_for_instance(child: &mut Child, data_dir: &Path, log: &Path, spawned_at: std::time::SystemTime) -> Value {
    let path = data_dir.join("instance.json");
    let deadline = Instant::now() + START_WAIT;
    loop {
        if let Ok(bytes) = std::fs::read(&path) {
            if let Ok(instance) = serde_json::from_slice::<Value>(&bytes) {
                if written_by(&instance, child, &path, spawned_at) {
                    return instance;
                }
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            let log = String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned();
            let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
            panic!("`nevermiss serve` exited ({status}) before it was ready:\n{tail}");
        }
        assert!(Instant::now() < deadline, "no instance.json of pid {} within {START_WAIT:?}", child.id());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The notifications a log notifier's line stands for: its identity, or for a summary each
/// notification it covers (`covers=a,b,...`). None for another line.
pub fn notified_identities(line: &str) -> Vec<String> {
    if !line.contains("nevermiss::notification") {
        return Vec::new();
    }
    let field = |name: &str| line.split(&format!(" {name}=")).nth(1).and_then(|rest| rest.split_whitespace().next()).map(str::to_owned);
    match field("covers") {
        Some(covers) => covers.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect(),
        None => field("identity").into_iter().collect(),
    }
}

/// A real serve whose data dir holds `recipe` as `providers/<file>`, with `env` (its keys, its
/// stand-in's URL): the data dir lives as long as the first value.
pub async fn serve_with_recipe(file: &str, recipe: &str, env: Vec<(String, String)>) -> (tempfile::TempDir, ServeChild) {
    let dir = tempfile::TempDir::new().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("providers")).unwrap();
    std::fs::write(data.join("providers").join(file), recipe).unwrap();
    let server = ServeChild::start_in(dir.path(), env).await;
    (dir, server)
}

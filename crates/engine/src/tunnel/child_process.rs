//! A tunnel program run as a child process (cloudflared, the ngrok agent): started with its
//! secrets in the environment (never on the command line), its output kept as the last lines and
//! the last error line, killed with the engine (and if NeverMiss dies, `kill_on_drop`).

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use super::session::{one_line, TunnelError};

const KEPT_LINES: usize = 50;

/// What the program has said, for URL discovery (a fallback) and for one-line reasons.
#[derive(Debug, Default)]
pub struct Output {
    pub lines: VecDeque<String>,
    /// The last line that reads like an error.
    pub last_error: Option<String>,
    /// A public URL the program printed (fallback when its API does not answer).
    pub url: Option<String>,
    /// A line saying a connection is up (fallback readiness).
    pub ready: bool,
}

impl Output {
    /// Why a start gave up waiting: `"{what} within {N}s"`, with the program's last error line.
    pub fn gave_up(&self, what: &str, waited: Duration) -> TunnelError {
        TunnelError::Failed(match &self.last_error {
            Some(line) => format!("{what} within {}s: {line}", waited.as_secs()),
            None => format!("{what} within {}s", waited.as_secs()),
        })
    }
}

/// Reads one line of output into `Output` (kind-specific: errors, URLs, readiness).
pub type LineParser = fn(&str, &mut Output);

pub struct ChildProcess {
    pub name: &'static str,
    child: Child,
    pub output: Arc<Mutex<Output>>,
}

impl ChildProcess {
    pub fn spawn<I, S>(
        name: &'static str,
        program: &Path,
        args: I,
        envs: &[(&str, &str)],
        env_remove: &[&str],
        parse: LineParser,
        install_hint: &str,
    ) -> Result<ChildProcess, TunnelError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(program);
        command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        for var in env_remove {
            command.env_remove(var);
        }
        for (k, v) in envs {
            command.env(k, v);
        }
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TunnelError::Setup(format!("{name} not found at {:?}: {install_hint}", program)),
            std::io::ErrorKind::PermissionDenied => TunnelError::Setup(format!("{name} at {:?} cannot be run: permission denied", program)),
            _ => TunnelError::Failed(format!("cannot start {name} ({:?}): {e}", program)),
        })?;
        let output = Arc::new(Mutex::new(Output::default()));
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(read_lines(stdout, output.clone(), parse));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(read_lines(stderr, output.clone(), parse));
        }
        Ok(ChildProcess { name, child, output })
    }

    /// Waits for the program to exit; the reason names its status and its last error line.
    pub async fn exited(&mut self) -> String {
        let status = self.child.wait().await;
        // Let the readers take in the last lines the program wrote before dying.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = match status {
            Ok(s) => match s.code() {
                Some(code) => format!("exit status {code}"),
                None => "killed by a signal".to_owned(),
            },
            Err(e) => e.to_string(),
        };
        match self.last_words() {
            Some(line) => format!("{} exited ({status}): {line}", self.name),
            None => format!("{} exited ({status})", self.name),
        }
    }

    /// The last error line, else the last line.
    pub fn last_words(&self) -> Option<String> {
        let out = self.output.lock().unwrap();
        out.last_error.clone().or_else(|| out.lines.back().cloned()).map(|l| one_line(&l))
    }

    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the program and reaps it.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

async fn read_lines(stream: impl AsyncRead + Unpin, output: Arc<Mutex<Output>>, parse: LineParser) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(target: "nevermiss::tunnel::child", "{line}");
        let mut out = output.lock().unwrap();
        parse(&line, &mut out);
        if out.lines.len() == KEPT_LINES {
            out.lines.pop_front();
        }
        out.lines.push_back(line);
    }
}

/// A free port on loopback, for a program's local API (picked by the OS, then released).
pub fn free_loopback_port() -> Result<u16, TunnelError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| TunnelError::Failed(format!("cannot find a free loopback port: {e}")))
}

/// A tunnel program's health is probed this often while it runs...
const HEALTH_EVERY: Duration = Duration::from_secs(5);
/// ... and this many failures in a row (30 s: the programs reconnect by themselves) end the session.
const HEALTH_FAILURES: u32 = 6;

/// How a watched program's session ended.
pub enum Watched<E> {
    /// The process exited (the reason, with its last words).
    Exited(String),
    /// The health probe failed `HEALTH_FAILURES` times in a row; the last failure.
    Unhealthy(E),
}

/// Watches a running tunnel program two ways: its exit, and a health probe every `HEALTH_EVERY`.
/// Cancel-safe: the next check and the failures so far are kept across calls.
pub struct HealthWatch {
    next_check: tokio::time::Instant,
    failures: u32,
}

impl HealthWatch {
    pub fn new() -> HealthWatch {
        HealthWatch { next_check: tokio::time::Instant::now() + HEALTH_EVERY, failures: 0 }
    }

    pub async fn watch<E, F, Fut>(&mut self, child: &mut ChildProcess, mut probe: F) -> Watched<E>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
    {
        loop {
            tokio::select! {
                reason = child.exited() => return Watched::Exited(reason),
                _ = tokio::time::sleep_until(self.next_check) => {}
            }
            self.next_check = tokio::time::Instant::now() + HEALTH_EVERY;
            match probe().await {
                Ok(()) => self.failures = 0,
                Err(e) => {
                    self.failures += 1;
                    if self.failures >= HEALTH_FAILURES {
                        return Watched::Unhealthy(e);
                    }
                }
            }
        }
    }
}

impl ChildProcess {
    /// `what` the program did, with its last words when it left any.
    pub fn explain(&self, what: &str) -> String {
        match self.last_words() {
            Some(line) => format!("{what}: {line}"),
            None => what.to_owned(),
        }
    }
}

/// A tunnel program as its session holds it: the process (gone once stopped) and the watch over
/// its health. What cloudflared's and ngrok's sessions share: the start that waits for the URL,
/// the watch, the stop.
pub struct Running {
    name: &'static str,
    child: Option<ChildProcess>,
    health: HealthWatch,
}

impl Running {
    /// Waits for `found` (the program's public URL, from its local API or its output) while the
    /// process runs: its exit first is a failure with its reason. On any failure the process is
    /// stopped; else it runs on, watched, with what was found.
    pub async fn start<T>(
        mut child: ChildProcess,
        found: impl std::future::Future<Output = Result<T, TunnelError>>,
    ) -> Result<(Running, T), TunnelError> {
        let result = tokio::select! {
            reason = child.exited() => Err(TunnelError::Failed(reason)),
            r = found => r,
        };
        match result {
            Ok(found) => Ok((Running { name: child.name, child: Some(child), health: HealthWatch::new() }, found)),
            Err(e) => {
                child.stop().await;
                Err(e)
            }
        }
    }

    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().and_then(ChildProcess::id)
    }

    /// Resolves when the program exits (with its reason), or when `probe` has failed
    /// `HEALTH_FAILURES` times in a row (what it said failed, with the program's last words).
    /// `None`: only the process is watched. Cancel-safe, as `HealthWatch::watch`.
    pub async fn ended<F, Fut>(&mut self, probe: Option<F>) -> String
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), &'static str>>,
    {
        let Some(child) = self.child.as_mut() else {
            return format!("{} is not running", self.name);
        };
        let Some(probe) = probe else {
            return child.exited().await;
        };
        match self.health.watch(child, probe).await {
            Watched::Exited(reason) => reason,
            Watched::Unhealthy(what) => child.explain(what),
        }
    }

    /// Kills the program and reaps it (once: a stopped program stays stopped).
    pub async fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            child.stop().await;
        }
    }
}

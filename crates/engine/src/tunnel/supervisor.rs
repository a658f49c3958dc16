//! The supervisor: starts the configured tunnel with the engine, forwarding the receiver's port and
//! nothing else; restarts it with exponential backoff (1 s doubling to 5 min) when it dies, when
//! its health check fails, or when self-tests keep failing; waits for the user instead when a start
//! cannot succeed by itself (a missing setting, token or binary). It keeps the state the API shows,
//! flags a changed URL, and runs the self-test after every start and when the tunnel has been quiet.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{self, TunnelConfig, TunnelKind};
use super::self_test::{SelfTestOutcome, SelfTestReport, SelfTestTrigger, SelfTester};
use super::session::{one_line, Opened, TunnelError};
use super::state::{Status, TunnelState};
use super::{bore, cloudflared, manual, ngrok};
use crate::changes::Changes;
use crate::secrets::Secrets;
use crate::settings::Settings;
use crate::store::job::{now_ms, rfc3339};
use crate::store::Store;

mod watch;

const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A tunnel up this long has proven itself: the backoff starts over.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How often, while up, the supervisor looks at whether a self-test is due.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// After a failed self-test, the next one comes this soon...
const RETRY_SELF_TEST_AFTER: Duration = Duration::from_secs(30);
/// ... and this many failures in a row mean the tunnel has stopped answering: restart it.
const SELF_TEST_FAILURES_BEFORE_RESTART: u32 = 3;
/// A test job not seen arrive is removed this long after the test (in case it lands late).
const LATE_TEST_JOB_AFTER: Duration = Duration::from_secs(60);
/// Stored: the URL the flag "changed" compares with (not a user setting).
const URL_CHANGED_FROM: &str = "tunnel.url_changed_from";

/// What the tunnel needs from the engine.
pub struct TunnelDeps {
    pub settings: Arc<Settings>,
    pub secrets: Arc<Secrets>,
    pub store: Store,
    pub changes: Arc<Changes>,
    /// The receiver: the only address a tunnel forwards to.
    pub receiver_addr: SocketAddr,
    /// Where a tunnel program's own files go (ngrok's config file).
    pub data_dir: PathBuf,
    pub providers: crate::providers::Providers,
    /// Told the public URL whenever it changes (`None` when the tunnel is down or off).
    pub on_url: Option<Box<OnUrl>>,
}

/// Told the tunnel's public URL (`None` when it is down or off).
pub type OnUrl = dyn Fn(Option<&str>) + Send + Sync;

pub struct Tunnel {
    deps: TunnelDeps,
    state: Mutex<TunnelState>,
    health: Mutex<Health>,
    wake: Notify,
    tester: SelfTester,
    local_http: reqwest::Client,
    self_test_running: AtomicBool,
    /// The automatic self-test in flight, awaited before `run` returns.
    self_test_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Test jobs not seen arrive, removed once this time has passed (they may still land).
    late_test_jobs: Mutex<Vec<(String, Instant)>>,
}

#[derive(Default)]
struct Health {
    /// Failed self-tests in a row against the current URL.
    failed_self_tests: u32,
    last_self_test: Option<Instant>,
    last_self_test_failed: bool,
}

/// Why the watch over a running session ended.
enum Watch {
    /// The tunnel died or stopped answering: the reason.
    Ended(String),
    /// A restart or a configuration change was asked for.
    Asked,
    Shutdown,
}

/// Why a wait ended.
enum Woken {
    Elapsed,
    /// A restart or a configuration change was asked for.
    Asked,
    Shutdown,
}

impl Tunnel {
    pub fn new(deps: TunnelDeps) -> Arc<Tunnel> {
        let local_http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(3)).build().expect("a plain HTTP client builds");
        let tester = SelfTester {
            store: deps.store.clone(),
            secrets: deps.secrets.clone(),
            changes: deps.changes.clone(),
            public_http: reqwest::Client::builder()
                .user_agent(concat!("NeverMiss-self-test/", env!("CARGO_PKG_VERSION")))
                .build()
                .expect("an HTTP client builds"),
            local_http: reqwest::Client::builder()
                .no_proxy()
                .user_agent(concat!("NeverMiss-self-test/", env!("CARGO_PKG_VERSION")))
                .build()
                .expect("an HTTP client builds"),
        };
        let forwards_to = format!("http://{}", forward_addr(deps.receiver_addr));
        Arc::new(Tunnel {
            deps,
            state: Mutex::new(TunnelState::new(forwards_to)),
            health: Mutex::new(Health::default()),
            wake: Notify::new(),
            tester,
            local_http,
            self_test_running: AtomicBool::new(false),
            self_test_task: Mutex::new(None),
            late_test_jobs: Mutex::new(Vec::new()),
        })
    }

    /// A snapshot of the state.
    pub fn state(&self) -> TunnelState {
        self.state.lock().unwrap().clone()
    }

    /// The public base URL while the tunnel is up.
    pub fn public_url(&self) -> Option<String> {
        self.state.lock().unwrap().public_url.clone()
    }

    /// Stops the tunnel and starts it again now (with the configuration in force).
    pub fn restart(&self) {
        self.wake.notify_one();
    }

    /// The tunnel settings or secrets changed: start again with them.
    pub fn reconfigure(&self) {
        self.wake.notify_one();
    }

    /// The user has updated the webhook URL at the providers: clear the flag.
    pub async fn acknowledge_url(&self) {
        {
            let mut st = self.state.lock().unwrap();
            st.url_changed = false;
            st.previous_url = None;
            st.refresh_warning();
        }
        if let Err(e) = self.deps.settings.set(URL_CHANGED_FROM, "").await {
            tracing::warn!(error = %e, "cannot store the acknowledged tunnel URL");
        }
    }

    /// `POST /api/tunnel/test`: a self-test now, recorded in the state.
    pub async fn self_test(&self) -> SelfTestReport {
        self.self_test_as(SelfTestTrigger::Manual).await
    }

    async fn self_test_as(&self, trigger: SelfTestTrigger) -> SelfTestReport {
        let (status, url, last_error, kind, was_down) = {
            let st = self.state.lock().unwrap();
            (st.status, st.public_url.clone(), st.last_error.clone(), st.kind, st.down_since.is_some())
        };
        let report = match (status, url) {
            (Status::Up, Some(url)) => self.tester.run(&url, trigger).await,
            (Status::Off, _) => {
                return SelfTestReport::skipped(trigger, None, "no tunnel is configured (NEVERMISS_TUNNEL or the setting tunnel)")
            }
            (Status::Starting, _) if !was_down => {
                return SelfTestReport::skipped(trigger, None, format!("the {} tunnel is starting", kind.as_str()))
            }
            _ => {
                SelfTestReport::failed(trigger, None, format!("the tunnel is down: {}", last_error.as_deref().unwrap_or("no reason given")))
            }
        };
        self.record(&report);
        report
    }

    fn record(&self, report: &SelfTestReport) {
        if let (Some(job_id), false) = (&report.job_id, report.arrived) {
            self.late_test_jobs.lock().unwrap().push((job_id.clone(), Instant::now() + LATE_TEST_JOB_AFTER));
        }
        let mut st = self.state.lock().unwrap();
        // A late report about a URL that is no longer ours says nothing about the tunnel now.
        if report.public_url.is_some() && report.public_url != st.public_url {
            return;
        }
        {
            let mut health = self.health.lock().unwrap();
            health.last_self_test = Some(Instant::now());
            match report.outcome {
                SelfTestOutcome::Passed => {
                    health.failed_self_tests = 0;
                    health.last_self_test_failed = false;
                }
                SelfTestOutcome::Failed => {
                    health.failed_self_tests += 1;
                    health.last_self_test_failed = true;
                }
                SelfTestOutcome::Skipped => health.last_self_test_failed = false,
            }
        }
        match report.outcome {
            SelfTestOutcome::Passed => tracing::info!(url = ?report.public_url, ms = ?report.arrived_after_ms, "tunnel self-test passed"),
            outcome => tracing::warn!(reason = ?report.reason, ?outcome, "tunnel self-test did not pass"),
        }
        st.self_test = Some(report.clone());
        st.refresh_warning();
    }

    /// Runs until `shutdown`; then waits for a self-test in flight and removes late test jobs, so
    /// nothing of the tunnel outlives the engine's store.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        self.clone().supervise(shutdown).await;
        let task = self.self_test_task.lock().unwrap().take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        self.forget_late_test_jobs(true).await;
    }

    async fn forget_late_test_jobs(&self, all: bool) {
        let due: Vec<String> = {
            let mut late = self.late_test_jobs.lock().unwrap();
            let now = Instant::now();
            let (due, keep): (Vec<_>, Vec<_>) = late.drain(..).partition(|(_, at)| all || *at <= now);
            *late = keep;
            due.into_iter().map(|(job, _)| job).collect()
        };
        for job_id in due {
            self.tester.forget(job_id).await;
        }
    }

    async fn supervise(self: Arc<Self>, shutdown: CancellationToken) {
        let mut failures: u32 = 0;
        let mut started_once = false;
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let config = TunnelConfig::resolve(&self.deps.settings, &self.deps.secrets);
            if started_once && config.kind != TunnelKind::None {
                self.state.lock().unwrap().restarts += 1;
            }
            self.state.lock().unwrap().self_test_automatic = config.self_test;
            if let Some(reason) = &config.kind_error {
                self.set_down(config.kind, reason, None).await;
                match self.wait(None, &shutdown).await {
                    Woken::Shutdown => return,
                    _ => continue,
                }
            }
            if config.kind == TunnelKind::None {
                self.set_off().await;
                match self.wait(None, &shutdown).await {
                    Woken::Shutdown => return,
                    _ => continue,
                }
            }
            started_once = true;
            self.set_starting(config.kind);
            let opened = tokio::select! {
                r = self.open(&config) => r,
                _ = self.wake.notified() => { failures = 0; continue; }
                _ = shutdown.cancelled() => return,
            };
            let retry_in = match opened {
                Err(TunnelError::Setup(reason)) => {
                    tracing::warn!(kind = config.kind.as_str(), %reason, "the tunnel cannot start until its configuration changes");
                    self.set_down(config.kind, &one_line(&reason), None).await;
                    match self.wait(None, &shutdown).await {
                        Woken::Shutdown => return,
                        _ => {
                            failures = 0;
                            continue;
                        }
                    }
                }
                Err(TunnelError::Failed(reason)) => {
                    failures += 1;
                    let delay = backoff(failures);
                    tracing::warn!(kind = config.kind.as_str(), %reason, retry_in = ?delay, "the tunnel did not start");
                    self.set_down(config.kind, &one_line(&reason), Some(delay)).await;
                    delay
                }
                Ok(Opened { url, session }) => {
                    let up_at = Instant::now();
                    self.set_up(config.kind, &url).await;
                    let watched = self.watch_session(&config, session, up_at, &shutdown).await;
                    if up_at.elapsed() >= STABLE_AFTER {
                        failures = 0;
                    }
                    match watched {
                        Watch::Shutdown => return,
                        Watch::Asked => {
                            failures = 0;
                            continue;
                        }
                        Watch::Ended(reason) => {
                            failures += 1;
                            let delay = backoff(failures);
                            tracing::warn!(kind = config.kind.as_str(), %reason, retry_in = ?delay, "the tunnel ended");
                            self.set_down(config.kind, &one_line(&reason), Some(delay)).await;
                            delay
                        }
                    }
                }
            };
            match self.wait(Some(retry_in), &shutdown).await {
                Woken::Shutdown => return,
                Woken::Asked => failures = 0,
                Woken::Elapsed => {}
            }
        }
    }

    async fn open(&self, config: &TunnelConfig) -> Result<Opened, TunnelError> {
        let local = forward_addr(self.deps.receiver_addr);
        match config.kind {
            TunnelKind::None => Err(TunnelError::Setup("no tunnel is configured".into())),
            TunnelKind::Cloudflared => cloudflared::open(config, local, &self.local_http).await,
            TunnelKind::Ngrok => ngrok::open(config, local, &self.deps.data_dir, &self.local_http).await,
            TunnelKind::Bore => bore::open(config, local).await,
            TunnelKind::Manual => manual::open(config),
        }
    }

    async fn wait(&self, delay: Option<Duration>, shutdown: &CancellationToken) -> Woken {
        let sleep = async {
            match delay {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => Woken::Elapsed,
            _ = self.wake.notified() => Woken::Asked,
            _ = shutdown.cancelled() => Woken::Shutdown,
        }
    }

    /// A self-test is due when the last one failed (soon), or when neither a delivery nor a
    /// self-test has been seen for the quiet period.
    async fn self_test_is_due(&self, config: &TunnelConfig) -> bool {
        if self.self_test_running.load(Ordering::SeqCst) {
            return false;
        }
        let (last, failed) = {
            let h = self.health.lock().unwrap();
            (h.last_self_test, h.last_self_test_failed)
        };
        let since_test = last.map(|t| t.elapsed());
        if failed {
            return since_test.is_none_or(|d| d >= RETRY_SELF_TEST_AFTER);
        }
        if since_test.is_some_and(|d| d < config.quiet) {
            return false;
        }
        let last_delivery: Option<i64> = self.deps.store.read(crate::store::deliveries::last_received_at).await.ok().flatten();
        let quiet_ms = config.quiet.as_millis() as i64;
        last_delivery.is_none_or(|at| now_ms() - at >= quiet_ms)
    }

    fn next_trigger(&self, up_at: Instant) -> SelfTestTrigger {
        let h = self.health.lock().unwrap();
        match h.last_self_test {
            None => SelfTestTrigger::Start,
            Some(t) if t < up_at => SelfTestTrigger::Start,
            Some(_) if h.last_self_test_failed => SelfTestTrigger::Retry,
            Some(_) => SelfTestTrigger::Quiet,
        }
    }

    fn spawn_self_test(self: &Arc<Self>, trigger: SelfTestTrigger, shutdown: CancellationToken) {
        if self.self_test_running.swap(true, Ordering::SeqCst) {
            return;
        }
        let this = self.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                _ = this.self_test_as(trigger) => {}
                _ = shutdown.cancelled() => {}
            }
            this.self_test_running.store(false, Ordering::SeqCst);
        });
        *self.self_test_task.lock().unwrap() = Some(task);
    }

    fn set_starting(&self, kind: TunnelKind) {
        let mut st = self.state.lock().unwrap();
        st.kind = kind;
        st.status = Status::Starting;
        st.since = Some(rfc3339(now_ms()));
        st.next_attempt_at = None;
        st.retrying = true;
        st.refresh_warning();
    }

    async fn set_up(&self, kind: TunnelKind, url: &str) {
        let last = self.deps.settings.get(config::LAST_URL).filter(|u| !u.is_empty());
        let flagged_from = self.deps.settings.get(URL_CHANGED_FROM).filter(|u| !u.is_empty());
        // Changed from the URL the user last had (the flag stays until acknowledged).
        let changed_from = match (flagged_from, last) {
            (Some(from), _) if from != url => Some(from),
            (Some(_), _) => None,
            (None, Some(last)) if last != url => Some(last),
            _ => None,
        };
        {
            let mut st = self.state.lock().unwrap();
            st.kind = kind;
            st.status = Status::Up;
            st.public_url = Some(url.to_owned());
            st.since = Some(rfc3339(now_ms()));
            st.down_since = None;
            st.next_attempt_at = None;
            st.retrying = true;
            st.url_changed = changed_from.is_some();
            st.previous_url = changed_from.clone();
            st.webhook_urls = self.deps.providers.names().into_iter().map(|p| (p.to_owned(), format!("{url}/hooks/{p}"))).collect();
            st.self_test = None;
            st.refresh_warning();
        }
        *self.health.lock().unwrap() = Health::default();
        tracing::info!(kind = kind.as_str(), %url, changed = changed_from.is_some(), "the tunnel is up");
        let settings = &self.deps.settings;
        let stored = async {
            settings.set(config::LAST_URL, url).await?;
            settings.set(URL_CHANGED_FROM, changed_from.as_deref().unwrap_or("")).await
        };
        if let Err(e) = stored.await {
            tracing::warn!(error = %e, "cannot store the tunnel URL");
        }
        if let Some(on_url) = &self.deps.on_url {
            on_url(Some(url));
        }
    }

    async fn set_down(&self, kind: TunnelKind, reason: &str, retry_in: Option<Duration>) {
        let had_url = {
            let mut st = self.state.lock().unwrap();
            let had_url = st.public_url.take().is_some();
            let now = rfc3339(now_ms());
            st.kind = kind;
            if st.status != Status::Down || st.down_since.is_none() {
                st.down_since = Some(now.clone());
            }
            st.status = Status::Down;
            st.since = st.down_since.clone();
            st.last_error = Some(reason.to_owned());
            st.retrying = retry_in.is_some();
            st.next_attempt_at = retry_in.map(|d| rfc3339(now_ms() + d.as_millis() as i64));
            st.webhook_urls.clear();
            st.refresh_warning();
            had_url
        };
        if had_url {
            if let Some(on_url) = &self.deps.on_url {
                on_url(None);
            }
        }
    }

    async fn set_off(&self) {
        let had_url = {
            let mut st = self.state.lock().unwrap();
            let had_url = st.public_url.take().is_some();
            let forwards_to = st.forwards_to.clone();
            let automatic = st.self_test_automatic;
            let restarts = st.restarts;
            *st = TunnelState::new(forwards_to);
            st.self_test_automatic = automatic;
            st.restarts = restarts;
            had_url
        };
        if had_url {
            if let Some(on_url) = &self.deps.on_url {
                on_url(None);
            }
        }
    }
}

/// 1 s, 2 s, 4 s ... 5 min.
fn backoff(failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    BACKOFF_FIRST.saturating_mul(factor).min(BACKOFF_MAX)
}

/// The receiver as a tunnel reaches it: a wildcard bind is reached on loopback.
fn forward_addr(receiver: SocketAddr) -> SocketAddr {
    match receiver.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), receiver.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), receiver.port()),
        _ => receiver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(30), BACKOFF_MAX);
    }

    #[test]
    fn wildcard_receivers_are_reached_on_loopback() {
        assert_eq!(forward_addr("0.0.0.0:8787".parse().unwrap()), "127.0.0.1:8787".parse().unwrap());
        assert_eq!(forward_addr("127.0.0.1:9".parse().unwrap()), "127.0.0.1:9".parse().unwrap());
    }
}

//! Reconciliation, the path that never drops: ask each provider for the state of every
//! unfinished job that is due, and feed each answer through the merge point. A terminal state
//! first learned this way is a "reconcile rescue": a webhook went missing.
//!
//! **One provider cannot stall another.** Each provider has its own poller: its own task, its own
//! timer (the polling interval, with up to 10% jitter, counted from the end of its last round),
//! one round at a time, at most `CONCURRENCY` requests in flight, and a time budget per round:
//! a round starts no new request once one interval has passed since it began (requests already
//! sent finish or time out, `provider_timeout_secs`); the jobs it did not reach are the longest
//! waiting, so the next round takes them first. A provider whose API hangs thus delays only its
//! own jobs. Stuck alerts have their own timer too. `POST /api/reconcile` (`run_pass`) asks every
//! provider for a round now and waits for them at most `ANSWER_WITHIN`: its report says what each
//! finished round did, and which providers are still running (over that bound).
//!
//! Manners toward providers: a 429 pauses that provider for its `Retry-After`; a refused API key
//! (401/403) pauses it and shows as a configuration error rather than being retried in a loop; a
//! failing job backs off exponentially; a 404 is kept on the job.
//!
//! **A hub's device does not poll.** While this app is connected to a hub (`hub.url`), the hub
//! polls and raises stuck alerts, and this machine shows the hub's notifications; polling here
//! as well would show each job twice. Rounds then stop at once (status `by_hub`); webhooks sent
//! to this machine's receiver are still received.
//!
//! **Abandoned jobs.** Polling gives up on an unfinished job that can never be polled: at once
//! when it cannot be polled at all (no status URL known, an id of a kind with no status endpoint
//! such as an OpenAI eval run, a provider with no status API), and after `ABANDON_AFTER_NOT_FOUND`
//! 404s in a row spanning at least the `abandon_after_secs` setting (3 days by default) for a job
//! its provider does not know. Other failures (timeouts, 5xx, unreadable answers) are passing by
//! nature: they back off (at most an hour) but never abandon. An abandoned job shows why, raises
//! one alert (outbox kind `abandoned`), is never due again, and is still finished by a webhook
//! (the merge point ignores abandonment). Tracking it again, or a successful "poll now", takes it
//! back.
//!
//! A provider that can list its jobs (Replicate), with discovery turned on in Settings, first lists
//! those created since the last listing: each goes through the merge point like a poll answer, so a
//! job started elsewhere (neither tracked nor webhooked) is watched too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::closed_set::closed_set;
use crate::expected;
use crate::job::{now_ms, rfc3339, AbandonReason, JobEvent, Outcome, PollErrorKind};
use crate::merge_point;
use crate::outbox::Outbox;
use crate::providers::{FetchError, JobRef, Provider, Providers};
use crate::settings::{self, Settings};
use crate::store::outbox::{self as store_outbox, Kind, Subject};
use crate::store::passes::{self, PassSummary, PollCounts};
use crate::store::{self, durations, jobs, Counter, Store, StoreError, Tx};

/// Jobs asked about at once, per provider.
pub const CONCURRENCY: usize = 8;
/// Due jobs looked at per provider per round (longest waiting first); the rest wait a round.
const PER_PASS: i64 = 5_000;
/// A refused API key pauses the scheduled polling of its provider this long.
const CONFIGURATION_PAUSE: Duration = Duration::from_secs(5 * 60);
/// A 429 without `Retry-After` pauses its provider this long.
const DEFAULT_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(60);
/// Most jobs one listing takes in (a provider's discovery, per round).
const DISCOVER_PER_PASS: usize = 2_000;
/// Each listing starts this far before the newest creation time the last one saw: a job that
/// shows up in the list a little late is still found (listing one twice changes nothing).
const DISCOVER_OVERLAP_MS: i64 = 60_000;
/// Longest wait between polls of a failing job.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// `POST /api/reconcile` waits at most this long for the rounds it asked for; a provider still
/// running then is reported `running` (its round goes on in the background).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(15);
/// 404s in a row (spanning at least the `abandon_after_secs` setting) after which polling gives
/// up on a job its provider does not know.
pub const ABANDON_AFTER_NOT_FOUND: i64 = 3;

/// What `POST /api/reconcile` did: the rounds it asked every provider for, summed over those that
/// finished within `ANSWER_WITHIN` (the fields of a recorded pass; `providers` says `ok` or why a
/// provider was not fully polled, or that it is still running), each provider's round typed in
/// `rounds`, and the lateness alerts raised (stuck, or slower than usual).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ts_rs::TS)]
#[ts(export)]
pub struct PassReport {
    #[serde(flatten)]
    pub pass: PassSummary,
    /// Stuck and slower-than-usual alerts raised.
    pub stuck_alerts: u64,
    /// Per provider that had something to do (or is still running): its round.
    pub rounds: BTreeMap<String, ProviderRound>,
    /// The bound of the wait, in seconds (`ANSWER_WITHIN`).
    pub answer_within_secs: u64,
}

/// How a provider's round ended (or that it had not when the answer was due).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ts_rs::TS)]
#[ts(export)]
#[serde(rename_all = "snake_case")]
pub enum RoundOutcome {
    /// Every due job was asked about.
    #[default]
    Done,
    /// The round's time budget ran out: `deferred` jobs wait for the next round.
    OverBudget,
    /// The provider as a whole could not be polled (paused, key refused, rate limited, not
    /// configured, no status API): `detail` says why, its health shows it.
    Stopped,
    /// Still running when `POST /api/reconcile` answered (over its bound): the provider is slow
    /// and its round goes on in the background.
    Running,
}

/// One provider's round: what it did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[ts(export)]
pub struct ProviderRound {
    pub outcome: RoundOutcome,
    /// Why the provider was not (fully) polled, when it was not.
    pub detail: Option<String>,
    pub started_at: Option<String>,
    pub duration_ms: u64,
    #[serde(flatten)]
    pub counts: PollCounts,
    /// Jobs polling gave up on in this round.
    pub abandoned: u64,
    /// Due jobs not asked about (the budget ran out); the next round takes them first.
    pub deferred: u64,
}

impl ProviderRound {
    /// The words of `PassSummary::providers` for this round.
    fn status_words(&self) -> String {
        match self.outcome {
            RoundOutcome::Done => "ok".to_owned(),
            RoundOutcome::OverBudget => format!("over budget: {} due jobs wait for the next round", self.deferred),
            RoundOutcome::Stopped => self.detail.clone().unwrap_or_else(|| "stopped".to_owned()),
            RoundOutcome::Running => format!("running: still polling after {} s (over budget)", ANSWER_WITHIN.as_secs()),
        }
    }
}

closed_set! {
    /// The state of a provider's polling.
    #[ts(export)]
    pub enum HealthStatus {
        Ok = "ok",
        /// Polling is off until the provider is set up (no API key, no status URL).
        NotConfigured = "not_configured",
        /// The provider refused the API key: polling pauses until it is fixed or asked for.
        Misconfigured = "misconfigured",
        /// The provider said to wait (429): polling pauses for its `Retry-After`.
        RateLimited = "rate_limited",
        /// The provider has no status API: its jobs end by webhook only.
        NoStatusApi = "no_status_api",
        /// This app is a hub's device: the hub polls, and this app shows the hub's notifications.
        ByHub = "by_hub",
    }
}

/// How a provider's polling is going, as the metrics and the UI show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[ts(export)]
pub struct ProviderHealth {
    pub status: HealthStatus,
    pub message: Option<String>,
    pub since: String,
    /// Scheduled polling of this provider waits until then.
    pub paused_until: Option<String>,
    #[serde(skip)]
    paused_until_ms: i64,
}

/// One provider's polling: its task's wake-ups and the rounds it finished.
struct Poller {
    /// Its provider's name: the provider itself is looked up at each round, so a recipe changed
    /// on disk is polled as it now reads, and a recipe removed ends its poller.
    name: &'static str,
    /// Asks the task for a round now. A permit is kept while a round runs, so asks during a
    /// round give one more round after it, never a queue of them.
    trigger: Notify,
    /// The next round is on demand (a refused key is tried again).
    on_demand: AtomicBool,
    /// Rounds started so far.
    started: AtomicU64,
    /// The number of the last finished round and what it did (`None`: nothing to do, or failed).
    finished: watch::Sender<(u64, Option<ProviderRound>)>,
}

impl Poller {
    fn new(name: &'static str) -> Arc<Poller> {
        Arc::new(Poller {
            name,
            trigger: Notify::new(),
            on_demand: AtomicBool::new(false),
            started: AtomicU64::new(0),
            finished: watch::Sender::new((0, None)),
        })
    }
}

/// What the reconciler works with, as the engine gives it.
pub struct ReconcilerDeps {
    pub store: Store,
    pub providers: Providers,
    pub settings: Arc<Settings>,
    pub changes: Arc<Changes>,
    pub outbox: Arc<Outbox>,
    /// `--poll-interval` (or its variable): beats the setting.
    pub interval_override: Option<u64>,
}

pub struct Reconciler {
    deps: ReconcilerDeps,
    /// One per provider, added when a recipe appears (`providers_changed`).
    pollers: RwLock<BTreeMap<&'static str, Arc<Poller>>>,
    /// The engine's shutdown, once `run` started: a poller added later stops with the others.
    shutdown: std::sync::OnceLock<CancellationToken>,
    /// Bumped when the interval setting changes: every timer starts its new wait.
    interval_version: watch::Sender<u64>,
    health: RwLock<BTreeMap<String, ProviderHealth>>,
}

/// What polling one job gave.
enum Polled {
    Applied {
        rescue: bool,
    },
    Unchanged,
    /// A failure of this job alone; it backs off, or polling gave up on it (`abandoned`).
    JobFailed {
        error: FetchError,
        abandoned: bool,
    },
    /// A failure of the whole provider (key, rate limit, no API); the rest of its jobs wait.
    ProviderError(FetchError),
    Skipped,
    /// Not asked: the round's budget ran out.
    Deferred,
}

impl Reconciler {
    pub fn new(deps: ReconcilerDeps) -> Arc<Reconciler> {
        let pollers = deps.providers.names().into_iter().map(|name| (name, Poller::new(name))).collect();
        Arc::new(Reconciler {
            deps,
            pollers: RwLock::new(pollers),
            shutdown: std::sync::OnceLock::new(),
            interval_version: watch::Sender::new(0),
            health: RwLock::new(BTreeMap::new()),
        })
    }

    /// The providers changed (the user's recipes were loaded again): a provider that is new gets
    /// its poller, started at once when the reconciler runs; a removed one's poller ends at its
    /// next wake.
    pub fn providers_changed(self: &Arc<Self>) {
        let mut added = Vec::new();
        {
            let mut pollers = self.pollers.write().unwrap();
            for name in self.deps.providers.names() {
                if !pollers.contains_key(name) {
                    let poller = Poller::new(name);
                    pollers.insert(name, poller.clone());
                    added.push(poller);
                }
            }
        }
        if let Some(shutdown) = self.shutdown.get() {
            for poller in added {
                poller.trigger.notify_one();
                tokio::spawn(self.clone().run_poller(poller, shutdown.clone()));
            }
        }
    }

    fn pollers(&self) -> Vec<(&'static str, Arc<Poller>)> {
        self.pollers.read().unwrap().iter().map(|(name, poller)| (*name, poller.clone())).collect()
    }

    /// The polling interval in force: `--poll-interval`/variable, else the setting, else 60 s.
    pub fn interval(&self) -> Duration {
        let secs = self
            .deps
            .interval_override
            .or_else(|| self.deps.settings.get(settings::POLL_INTERVAL_SECS).and_then(|v| v.parse().ok()))
            .unwrap_or(settings::DEFAULT_POLL_INTERVAL_SECS)
            .max(settings::MIN_POLL_INTERVAL_SECS);
        Duration::from_secs(secs)
    }

    /// How long a round may start new requests: one interval.
    fn round_budget(&self) -> Duration {
        self.interval()
    }

    /// Whether `--poll-interval` / `NEVERMISS_POLL_INTERVAL` overrides the stored setting.
    pub fn interval_overridden(&self) -> bool {
        self.deps.interval_override.is_some()
    }

    /// The interval setting changed: every timer starts its new wait now.
    pub fn interval_changed(&self) {
        self.interval_version.send_modify(|v| *v += 1);
    }

    /// Each provider's polling health (only providers that have had jobs to poll).
    pub fn health(&self) -> BTreeMap<String, ProviderHealth> {
        self.health.read().unwrap().clone()
    }

    /// The interval with up to 10% jitter (so providers and timers do not march in step).
    fn next_wait(&self) -> Duration {
        let interval = self.interval();
        let jitter = rand::rng().random_range(0..=interval.as_millis() as u64 / 10);
        interval + Duration::from_millis(jitter)
    }

    /// Runs every provider's poller and the stuck alerts, each on its own timer, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let _ = self.shutdown.set(shutdown.clone());
        let mut tasks: Vec<_> =
            self.pollers().into_iter().map(|(_, poller)| tokio::spawn(self.clone().run_poller(poller, shutdown.clone()))).collect();
        tasks.push(tokio::spawn(self.clone().run_stuck_alerts(shutdown.clone())));
        for task in tasks {
            let _ = task.await;
        }
    }

    /// One provider's task: a round every interval (after the last one ended), or when asked.
    async fn run_poller(self: Arc<Self>, poller: Arc<Poller>, shutdown: CancellationToken) {
        let mut interval_changes = self.interval_version.subscribe();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = interval_changes.changed() => continue,
                _ = poller.trigger.notified() => {}
                _ = tokio::time::sleep(self.next_wait()) => {}
            }
            let Some(provider) = self.deps.providers.get(poller.name) else {
                // Its recipe was removed: no more rounds; a pass waiting for one is answered.
                self.pollers.write().unwrap().remove(poller.name);
                poller.finished.send_replace((u64::MAX, None));
                tracing::info!(provider = poller.name, "no longer polled: its recipe was removed");
                return;
            };
            let on_demand = poller.on_demand.swap(false, Ordering::SeqCst);
            let number = poller.started.fetch_add(1, Ordering::SeqCst) + 1;
            let round = tokio::select! {
                _ = shutdown.cancelled() => return,
                round = self.round(provider.as_ref(), on_demand) => round,
            };
            let round = round.unwrap_or_else(|e| {
                tracing::error!(provider = poller.name, error = %e, "reconcile round failed");
                None
            });
            poller.finished.send_replace((number, round));
        }
    }

    /// Stuck alerts, on their own timer: a slow provider does not delay them.
    async fn run_stuck_alerts(self: Arc<Self>, shutdown: CancellationToken) {
        let mut interval_changes = self.interval_version.subscribe();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = interval_changes.changed() => continue,
                _ = tokio::time::sleep(self.next_wait()) => {}
            }
            if let Err(e) = self.stuck_alerts_now().await {
                tracing::error!(error = %e, "stuck alerts failed");
            }
        }
    }

    async fn stuck_alerts_now(&self) -> Result<u64, StoreError> {
        if self.deps.settings.hub_url().is_some() {
            // A hub's device shows the hub's stuck alerts.
            return Ok(0);
        }
        let raised = self.raise_stuck_alerts(now_ms()).await?;
        if raised > 0 {
            self.deps.outbox.wake();
            self.deps.changes.metrics_changed();
        }
        Ok(raised)
    }

    /// A round of every provider now, on demand (`POST /api/reconcile`): a provider paused for a
    /// refused key is tried again (the user may have just fixed it); a rate limit is still
    /// honoured. Waits for the rounds at most `ANSWER_WITHIN`; a provider whose round is still
    /// running then is reported `running`, and its round goes on. A provider already in a round
    /// does one more right after it (asks are not queued up).
    #[tracing::instrument(name = "reconcile_pass", skip(self))]
    pub async fn run_pass(&self) -> Result<PassReport, StoreError> {
        let started = Instant::now();
        let now = now_ms();
        let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
        let waits = self.pollers().into_iter().map(|(name, poller)| {
            let mut finished = poller.finished.subscribe();
            // A round numbered above this one starts after this call: it sees every job
            // committed before it.
            let before = poller.started.load(Ordering::SeqCst);
            poller.on_demand.store(true, Ordering::SeqCst);
            poller.trigger.notify_one();
            async move {
                let round = tokio::time::timeout_at(deadline, finished.wait_for(|(number, _)| *number > before)).await;
                let round = match round {
                    Ok(Ok(done)) => done.1.clone(),
                    // Over the bound (or the engine is stopping): still running.
                    Ok(Err(_)) | Err(_) => Some(ProviderRound { outcome: RoundOutcome::Running, ..ProviderRound::default() }),
                };
                (name, round)
            }
        });
        let (rounds, stuck_alerts) = tokio::join!(futures_util::future::join_all(waits), self.stuck_alerts_now());
        let mut report = PassReport {
            pass: PassSummary { started_at: rfc3339(now), ..PassSummary::default() },
            stuck_alerts: stuck_alerts?,
            rounds: BTreeMap::new(),
            answer_within_secs: ANSWER_WITHIN.as_secs(),
        };
        for (name, round) in rounds {
            let Some(round) = round else { continue };
            add_round(&mut report.pass, name, &round);
            report.rounds.insert(name.to_owned(), round);
        }
        report.pass.duration_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// One round of one provider, recorded as a pass when it had something to do.
    async fn round(&self, provider: &dyn Provider, on_demand: bool) -> Result<Option<ProviderRound>, StoreError> {
        // One round of a provider at a time across a fleet: another process's round is this one.
        let Some(lease) = RoundLease::take(&self.deps.store, provider.name()).await? else {
            tracing::debug!(provider = provider.name(), "another process of the fleet runs this round");
            return Ok(None);
        };
        // The round is timed while the lease is held (from after it is taken until before it is
        // given back), so that the recorded rounds of a fleet never overlap.
        let started = Instant::now();
        let now = now_ms();
        let budget_ends = started + self.round_budget();
        let round = self.pass_provider(provider, now, on_demand, budget_ends).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        lease.release().await;
        let Some(mut round) = round? else {
            return Ok(None);
        };
        round.started_at = Some(rfc3339(now));
        round.duration_ms = duration_ms;
        let mut row = PassSummary { started_at: rfc3339(now), ..PassSummary::default() };
        add_round(&mut row, provider.name(), &round);
        row.duration_ms = round.duration_ms;
        self.deps
            .store
            .write(move |tx| {
                tx.count(Counter::ReconcilePasses, 1);
                tx.count(Counter::ReconcileErrors, row.counts.errors as i64);
                store::settings::set(tx, store::metrics::LAST_RECONCILE_AT, &now.to_string())?;
                passes::record(tx, now, &row)
            })
            .await?;
        self.deps.changes.metrics_changed();
        tracing::info!(
            provider = provider.name(),
            outcome = ?round.outcome,
            checked = round.counts.checked,
            applied = round.counts.applied,
            rescues = round.counts.rescues,
            errors = round.counts.errors,
            abandoned = round.abandoned,
            deferred = round.deferred,
            duration_ms = round.duration_ms,
            "reconcile round"
        );
        Ok(Some(round))
    }

    /// Polls one provider's due jobs, starting none after `budget_ends`. `None` when it had
    /// nothing to do.
    #[tracing::instrument(name = "provider", level = "debug", skip_all, fields(provider = provider.name()))]
    async fn pass_provider(
        &self,
        provider: &dyn Provider,
        now: i64,
        on_demand: bool,
        budget_ends: Instant,
    ) -> Result<Option<ProviderRound>, StoreError> {
        let name = provider.name();
        if let Some(hub) = self.deps.settings.hub_url() {
            // Polling here too would notify this machine twice: once for the hub's device row,
            // once for its own desktop channel. Webhooks sent here are still received.
            let why = format!("not polled here: this app is a device of the hub at {hub}, which polls {name}");
            self.set_status(name, HealthStatus::ByHub, Some(why.clone()), None, now);
            // Said when asked (`POST /api/reconcile`); a scheduled round records no pass.
            return Ok(on_demand.then(|| ProviderRound { outcome: RoundOutcome::Stopped, detail: Some(why), ..ProviderRound::default() }));
        }
        // On its own again: "polled by the hub" is no longer true, even of a provider with
        // nothing to poll (whose round would otherwise leave its health as it was).
        self.health.write().unwrap().retain(|_, h| h.status != HealthStatus::ByHub);
        if let Some(reason) = self.paused(name, now, on_demand) {
            return Ok(Some(ProviderRound { outcome: RoundOutcome::Stopped, detail: Some(reason), ..ProviderRound::default() }));
        }
        let mut round = ProviderRound::default();
        let discovering = provider.can_discover() && self.deps.settings.discovers(name);
        if discovering {
            if let Err(e) = self.discover(provider, now, &mut round).await? {
                self.set_health(name, &e, now);
                round.outcome = RoundOutcome::Stopped;
                round.detail = Some(e.to_string());
                return Ok(Some(round));
            }
        }
        let jobs = self.deps.store.read(move |conn| jobs::unfinished_due(conn, name, now, PER_PASS)).await?;
        if jobs.is_empty() {
            if discovering {
                self.set_ok(name, now);
                return Ok(Some(round));
            }
            return Ok(None);
        }
        let ids: Vec<String> = jobs.iter().map(|j| j.job.job_id.clone()).collect();
        let stop = AtomicBool::new(false);
        let results: Vec<Result<Polled, StoreError>> = futures_util::stream::iter(jobs)
            .map(|job| {
                let stop = &stop;
                async move {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(Polled::Skipped);
                    }
                    if Instant::now() >= budget_ends {
                        return Ok(Polled::Deferred);
                    }
                    let polled = self.poll(provider, &job.job, job.poll_failures).await;
                    if matches!(polled, Ok(Polled::ProviderError(_))) {
                        stop.store(true, Ordering::Relaxed);
                    }
                    polled
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut provider_error = None;
        for result in results {
            match result? {
                Polled::Applied { rescue } => {
                    round.counts.checked += 1;
                    round.counts.applied += 1;
                    round.counts.rescues += rescue as u64;
                }
                Polled::Unchanged => round.counts.checked += 1,
                Polled::JobFailed { error, abandoned } => {
                    round.counts.checked += 1;
                    round.abandoned += abandoned as u64;
                    if error == FetchError::NotFound {
                        round.counts.not_found += 1;
                    } else {
                        round.counts.errors += 1;
                        tracing::debug!(provider = name, error = %error, "poll failed");
                    }
                }
                Polled::ProviderError(e) => {
                    if !matches!(e, FetchError::NotConfigured(_) | FetchError::NotSupported(_)) {
                        round.counts.errors += 1;
                    }
                    provider_error.get_or_insert(e);
                }
                Polled::Skipped => {}
                Polled::Deferred => round.deferred += 1,
            }
        }
        match provider_error {
            Some(e) => {
                self.set_health(name, &e, now);
                if matches!(e, FetchError::NotSupported(_)) {
                    // No status API: none of its jobs can ever be polled.
                    round.abandoned += self.abandon_all(name, ids, &e).await?;
                }
                round.outcome = RoundOutcome::Stopped;
                round.detail = Some(e.to_string());
            }
            None => {
                self.set_ok(name, now);
                if round.deferred > 0 {
                    round.outcome = RoundOutcome::OverBudget;
                    tracing::warn!(
                        provider = name,
                        deferred = round.deferred,
                        "reconcile round over budget: the rest wait for the next round"
                    );
                }
            }
        }
        Ok(Some(round))
    }

    /// Why a provider's polling waits now, if it does.
    fn paused(&self, name: &str, now: i64, on_demand: bool) -> Option<String> {
        let health = self.health.read().unwrap();
        let h = health.get(name)?;
        if h.paused_until_ms <= now || (on_demand && h.status != HealthStatus::RateLimited) {
            return None;
        }
        Some(format!(
            "paused until {}: {}",
            h.paused_until.as_deref().unwrap_or("later"),
            h.message.as_deref().unwrap_or(h.status.as_str())
        ))
    }

    fn set_health(&self, name: &str, e: &FetchError, now: i64) {
        let (status, pause) = match e {
            FetchError::RateLimited { retry_after } => {
                (HealthStatus::RateLimited, Some(retry_after.unwrap_or(DEFAULT_RATE_LIMIT_PAUSE).min(MAX_BACKOFF)))
            }
            FetchError::Unauthorized(_) => (HealthStatus::Misconfigured, Some(CONFIGURATION_PAUSE)),
            FetchError::NotSupported(_) => (HealthStatus::NoStatusApi, None),
            _ => (HealthStatus::NotConfigured, None),
        };
        if matches!(status, HealthStatus::Misconfigured | HealthStatus::RateLimited) {
            tracing::warn!(provider = name, status = status.as_str(), error = %e, "provider polling paused");
        }
        self.set_status(name, status, Some(e.to_string()), pause, now);
    }

    fn set_ok(&self, name: &str, now: i64) {
        if self.health.read().unwrap().get(name).is_some_and(|h| h.status == HealthStatus::Ok) {
            return;
        }
        self.set_status(name, HealthStatus::Ok, None, None, now);
    }

    /// Records a provider's polling health; `since` is kept while the status stays the same, and
    /// so is a pause that ends later than the new one: two polls that met the provider's 429 at
    /// once (a pass and a job's own poll) record it in either order, each with the time it began.
    fn set_status(&self, name: &str, status: HealthStatus, message: Option<String>, pause: Option<Duration>, now: i64) {
        let mut paused_until_ms = pause.map(|p| now + p.as_millis() as i64).unwrap_or(0);
        let mut health = self.health.write().unwrap();
        let since = match health.get(name) {
            Some(old) if old.status == status => {
                if pause.is_some() {
                    paused_until_ms = paused_until_ms.max(old.paused_until_ms);
                }
                old.since.clone()
            }
            _ => rfc3339(now),
        };
        health.insert(
            name.to_owned(),
            ProviderHealth {
                status,
                message,
                since,
                paused_until: (paused_until_ms > 0).then(|| rfc3339(paused_until_ms)),
                paused_until_ms,
            },
        );
    }

    /// Lists the provider's jobs created since the last listing and merges each (see the module's
    /// comment). A provider-wide failure (refused key, rate limit, ...) is handed back to pause
    /// the provider; any other failure of the listing is counted and polling goes on.
    async fn discover(&self, provider: &dyn Provider, now: i64, tally: &mut ProviderRound) -> Result<Result<(), FetchError>, StoreError> {
        let name = provider.name();
        let watermark_key = format!("{name}.{}", settings::DISCOVERED_UNTIL);
        let since = self.deps.settings.get(&watermark_key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(now);
        let found = match provider.discover(since, DISCOVER_PER_PASS).await {
            Ok(found) => found,
            Err(e) if is_provider_wide(&e) => return Ok(Err(e)),
            Err(e) => {
                tracing::warn!(provider = name, error = %e, "cannot list the provider's jobs; polling goes on");
                tally.counts.errors += 1;
                return Ok(Ok(()));
            }
        };
        if found.truncated {
            tracing::warn!(
                provider = name,
                limit = DISCOVER_PER_PASS,
                "more new jobs than one listing takes in; the oldest of them were not discovered"
            );
        }
        let events: Vec<(JobEvent, bool)> = found
            .events
            .into_iter()
            .filter(|event| crate::providers::job_id::is_a_name(&event.job_id).is_ok())
            .map(JobEvent::bounded)
            .map(|event| {
                let webhook_expected = provider.webhook_expected(&event.job_id);
                (event, webhook_expected)
            })
            .collect();
        let expected: Vec<bool> = events.iter().map(|(_, expected)| *expected).collect();
        let merged = self
            .deps
            .store
            .write(move |tx| {
                let mut results = Vec::with_capacity(events.len());
                let mut new_jobs = 0;
                for (event, webhook_expected) in &events {
                    let known = jobs::exists(tx, &event.provider, &event.job_id)?;
                    new_jobs += i64::from(!known);
                    results.push(merge_point::accept_poll(tx, event, *webhook_expected, now_ms())?);
                }
                tx.count(Counter::JobsDiscovered, new_jobs);
                Ok((results, new_jobs))
            })
            .await?;
        let (results, new_jobs) = merged;
        for (result, webhook_expected) in results.into_iter().zip(expected) {
            tally.counts.checked += 1;
            if result.outcome == Outcome::Applied {
                tally.counts.applied += 1;
                tally.counts.rescues += u64::from(result.first_terminal && webhook_expected);
            }
            merge_point::after_commit(result, &self.deps.outbox, &self.deps.changes);
        }
        if new_jobs > 0 {
            tracing::info!(provider = name, new_jobs, "discovered jobs started elsewhere");
        }
        if let Some(newest) = found.newest_created_ms {
            let until = (newest - DISCOVER_OVERLAP_MS).max(since);
            self.deps.settings.set(&watermark_key, &until.to_string()).await?;
        }
        Ok(Ok(()))
    }

    /// Polls one job now (after `track`, or "poll now" in the UI), rate limits permitting.
    pub async fn poll_job(&self, provider: &str, job_id: &str) -> Result<(), String> {
        let Some(provider) = self.deps.providers.get(provider) else {
            return Err(format!("unknown provider {provider:?}"));
        };
        if let Some(reason) = self.paused(provider.name(), now_ms(), true) {
            return Err(reason);
        }
        let (name, id) = (provider.name(), job_id.to_owned());
        let (job, failures) = self
            .deps
            .store
            .read(move |conn| jobs::poll_target(conn, name, &id))
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no job {job_id} of {name}"))?;
        match self.poll(provider.as_ref(), &job, failures).await.map_err(|e| e.to_string())? {
            Polled::ProviderError(e) => {
                self.set_health(provider.name(), &e, now_ms());
                Err(e.to_string())
            }
            Polled::JobFailed { error, .. } => Err(error.to_string()),
            _ => Ok(()),
        }
    }

    #[tracing::instrument(name = "poll", level = "debug", skip_all, fields(provider = provider.name(), job_id = %job.job_id))]
    async fn poll(&self, provider: &dyn Provider, job: &JobRef, failures: i64) -> Result<Polled, StoreError> {
        // An id that is no name (kept by an older build) is never put into a URL.
        let answer = match crate::providers::job_id::is_a_name(&job.job_id) {
            Ok(()) => provider.fetch_statuses(job).await.map(|mut answer| {
                answer.events = answer.events.into_iter().map(JobEvent::bounded).collect();
                answer
            }),
            Err(why) => Err(FetchError::Unpollable(why)),
        };
        match answer {
            Ok(answer) => {
                // The asked job's event and those of the jobs that belong with it (a session's
                // runs), merged in one transaction.
                let (name, asked) = (provider.name(), job.job_id.clone());
                let expected: Vec<bool> = answer.events.iter().map(|event| provider.webhook_expected(&event.job_id)).collect();
                let expected_in_tx = expected.clone();
                let results = self
                    .deps
                    .store
                    .write(move |tx| {
                        if let Some(poll_url) = answer.poll_url.as_deref() {
                            jobs::remember_poll_url(tx, name, &asked, poll_url)?;
                        }
                        let now = now_ms();
                        let results = answer
                            .events
                            .iter()
                            .zip(&expected_in_tx)
                            .map(|(event, webhook_expected)| merge_point::accept_poll(tx, event, *webhook_expected, now))
                            .collect::<Result<Vec<_>, _>>()?;
                        // A value NeverMiss does not know is counted once: when the job whose
                        // state it decided moved (not at every poll that meets it again).
                        for unknown in &answer.unknown {
                            let applied = answer
                                .events
                                .iter()
                                .zip(&results)
                                .any(|(event, result)| event.job_id == unknown.job_id && result.outcome == Outcome::Applied);
                            if applied {
                                tx.count_unknown_value(unknown.provider, unknown.field, &unknown.value);
                            }
                        }
                        Ok(results)
                    })
                    .await?;
                let (mut applied, mut rescue) = (false, false);
                for (result, webhook_expected) in results.into_iter().zip(expected) {
                    rescue |= result.first_terminal && webhook_expected;
                    applied |= result.outcome == Outcome::Applied;
                    merge_point::after_commit(result, &self.deps.outbox, &self.deps.changes);
                }
                if !applied {
                    return Ok(Polled::Unchanged);
                }
                Ok(Polled::Applied { rescue })
            }
            Err(e) if is_provider_wide(&e) => Ok(Polled::ProviderError(e)),
            Err(e) => {
                let failures = failures + 1;
                let delay = self.backoff(failures);
                let (name, id, reason) = (provider.name(), job.job_id.clone(), e.to_string());
                let kind = e.job_error_kind().unwrap_or(PollErrorKind::Transport);
                let abandon_after_ms = self.deps.settings.abandon_after().as_millis() as i64;
                let (job, abandoned) = self
                    .deps
                    .store
                    .write(move |tx| {
                        let now = now_ms();
                        let failing_since = jobs::poll_failed(tx, name, &id, now, kind, &reason, failures, now + delay.as_millis() as i64)?;
                        let give_up = match kind {
                            PollErrorKind::Unpollable => Some(AbandonReason::Unpollable),
                            PollErrorKind::NotFound if failures >= ABANDON_AFTER_NOT_FOUND && now - failing_since >= abandon_after_ms => {
                                Some(AbandonReason::NotFound)
                            }
                            _ => None,
                        };
                        let abandoned = match give_up {
                            Some(why) => abandon(tx, name, &id, why, now)?,
                            None => false,
                        };
                        Ok((jobs::job(tx, name, &id)?, abandoned))
                    })
                    .await?;
                if abandoned {
                    self.deps.outbox.wake();
                    tracing::warn!(provider = name, job_id = %job.as_ref().map(|j| j.job_id.as_str()).unwrap_or_default(), error = %e, "polling gave up on the job (abandoned)");
                }
                if let Some(job) = job {
                    self.deps.changes.job_changed(job);
                }
                Ok(Polled::JobFailed { error: e, abandoned })
            }
        }
    }

    /// Gives up on these jobs of a provider that has no status API (`error` is why); returns how
    /// many were abandoned now.
    async fn abandon_all(&self, provider: &'static str, ids: Vec<String>, error: &FetchError) -> Result<u64, StoreError> {
        let reason = error.to_string();
        let changed = self
            .deps
            .store
            .write(move |tx| {
                let now = now_ms();
                let mut changed = Vec::new();
                for id in &ids {
                    jobs::poll_failed(tx, provider, id, now, PollErrorKind::Unpollable, &reason, 1, now)?;
                    if abandon(tx, provider, id, AbandonReason::NoStatusApi, now)? {
                        changed.extend(jobs::job(tx, provider, id)?);
                    }
                }
                Ok(changed)
            })
            .await?;
        let abandoned = changed.len() as u64;
        if abandoned > 0 {
            self.deps.outbox.wake();
            tracing::warn!(provider, abandoned, "polling gave up on the jobs of a provider with no status API");
        }
        for job in changed {
            self.deps.changes.job_changed(job);
        }
        Ok(abandoned)
    }

    /// Wait before polling a job again after `failures` failures in a row: the interval doubled
    /// each time, at most an hour.
    fn backoff(&self, failures: i64) -> Duration {
        let factor = 2u32.saturating_pow(failures.clamp(0, 12) as u32);
        (self.interval() * factor).min(MAX_BACKOFF)
    }

    /// Enqueues one lateness alert for each unfinished job that is late (`expected::lateness`):
    /// slower than usual where its kind has the history for it, else stuck past its provider's
    /// threshold; once per job (the outbox's unique key, and `enqueue` gives a job one of the
    /// two). Reads every kind's expected duration first, and shares them (`Changes::expected`).
    /// Returns how many were raised.
    async fn raise_stuck_alerts(&self, now: i64) -> Result<u64, StoreError> {
        let windows = self.deps.store.read(durations::windows).await?;
        let kinds = self.deps.changes.expected().replace(&windows);
        // The earliest a job can be late: the shortest of the slow rules and of the thresholds.
        let shortest_slow = kinds.values().filter_map(|e| e.slow_after_ms).min().unwrap_or(i64::MAX);
        let thresholds: Vec<(Arc<dyn Provider>, i64)> = self
            .deps
            .providers
            .list()
            .into_iter()
            .map(|p| {
                let cutoff = now - self.deps.settings.stuck_threshold(p.name()).as_millis() as i64;
                (p, cutoff)
            })
            .collect();
        let (stuck, slow) = self
            .deps
            .store
            .write(move |tx| {
                let (mut stuck, mut slow) = (0, 0);
                for (p, stuck_cutoff) in &thresholds {
                    let provider = p.name();
                    let cutoff = (*stuck_cutoff).max(now.saturating_sub(shortest_slow));
                    for job in jobs::running_before(tx, provider, cutoff)? {
                        if !p.may_be_stuck(&job.job_id) {
                            continue;
                        }
                        let expected = job.kind.as_deref().and_then(|kind| kinds.get(kind));
                        let Some(alert) = expected::lateness(&job, expected, *stuck_cutoff, now) else {
                            continue;
                        };
                        let raised = !store_outbox::enqueue(tx, alert, &Subject::job(provider, &job.job_id), Some(job.state), now)?
                            .is_empty() as u64;
                        match alert {
                            Kind::Slow => slow += raised,
                            _ => stuck += raised,
                        }
                    }
                }
                tx.count(Counter::StuckAlerts, stuck as i64);
                tx.count(Counter::SlowAlerts, slow as i64);
                Ok((stuck, slow))
            })
            .await?;
        Ok(stuck + slow)
    }
}

/// Errors that say something about the provider rather than the job.
/// How long a round's lease lasts unless renewed; it is renewed every third of that while the
/// round runs, so a process that dies mid-round holds it at most this long.
const ROUND_LEASE: Duration = Duration::from_secs(15);

/// A provider's round lease (`store::leases`), renewed in the background while held.
struct RoundLease {
    store: Store,
    name: String,
    /// Tells the renewal to stop after its write in flight, if any (a renewal cut off mid-write
    /// could still commit after the release and hold the lease again).
    stop: CancellationToken,
    renewal: tokio::task::JoinHandle<()>,
}

impl RoundLease {
    /// The lease of `provider`'s rounds, if no other process holds it.
    async fn take(store: &Store, provider: &str) -> Result<Option<RoundLease>, StoreError> {
        let name = format!("reconcile/{provider}");
        let held = acquire_lease(store, &name).await?;
        if !held {
            return Ok(None);
        }
        let stop = CancellationToken::new();
        let renewal = tokio::spawn({
            let (store, name, stop) = (store.clone(), name.clone(), stop.clone());
            async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(ROUND_LEASE / 3) => {}
                    }
                    match acquire_lease(&store, &name).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(lease = %name, "the round's lease was taken by another process (this one was too slow to renew it)");
                            return;
                        }
                        Err(e) => tracing::warn!(lease = %name, error = %e, "cannot renew the round's lease"),
                    }
                }
            }
        });
        Ok(Some(RoundLease { store: store.clone(), name, stop, renewal }))
    }

    async fn release(self) {
        self.stop.cancel();
        let _ = self.renewal.await;
        let (name, node) = (self.name, self.store.node().to_owned());
        if let Err(e) = self.store.write(move |tx| store::leases::release(tx, &name, &node)).await {
            tracing::warn!(error = %e, "cannot release the round's lease; it expires by itself");
        }
    }
}

async fn acquire_lease(store: &Store, name: &str) -> Result<bool, StoreError> {
    let (name, node) = (name.to_owned(), store.node().to_owned());
    store
        .write(move |tx| {
            let now = now_ms();
            store::leases::acquire(tx, &name, &node, now, now + ROUND_LEASE.as_millis() as i64)
        })
        .await
}

fn is_provider_wide(e: &FetchError) -> bool {
    matches!(e, FetchError::NotSupported(_) | FetchError::NotConfigured(_) | FetchError::Unauthorized(_) | FetchError::RateLimited { .. })
}

/// Adds a provider's round to a pass's sums, and its words to `providers`.
fn add_round(pass: &mut PassSummary, name: &str, round: &ProviderRound) {
    pass.counts.add(&round.counts);
    pass.providers.insert(name.to_owned(), round.status_words());
}

/// Polling gives up on a job: marks it abandoned and enqueues its one alert, in the same
/// transaction. Returns whether it was abandoned now (not finished, not abandoned before).
fn abandon(tx: &mut Tx<'_>, provider: &str, job_id: &str, reason: AbandonReason, now: i64) -> crate::store::sql::Result<bool> {
    let Some(state) = jobs::abandon(tx, provider, job_id, reason, now)? else {
        return Ok(false);
    };
    store_outbox::enqueue(tx, Kind::Abandoned, &Subject::job(provider, job_id), Some(state), now)?;
    Ok(true)
}

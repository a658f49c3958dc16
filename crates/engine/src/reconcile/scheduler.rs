//! The scheduler: each provider's own poller (its task, its timer, one round at a time within a
//! time budget), and `POST /api/reconcile`'s pass over all of them.
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
//! **A hub's device does not poll.** While this app is connected to a hub (`hub.url`), the hub
//! polls and raises stuck alerts, and this machine shows the hub's notifications; polling here
//! as well would show each job twice. Rounds then stop at once (status `by_hub`); webhooks sent
//! to this machine's receiver are still received.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::lease::RoundLease;
use super::polling::Polled;
use super::Reconciler;
use crate::provider_health::HealthStatus;
use crate::providers::{FetchError, Provider};
use crate::store::counters::Counter;
use crate::store::job::{now_ms, rfc3339};
use crate::store::passes::{self, PassSummary, PollCounts};
use crate::store::{self, jobs, StoreError};

/// Jobs asked about at once, per provider.
pub const CONCURRENCY: usize = 8;
/// Due jobs looked at per provider per round (longest waiting first); the rest wait a round.
const PER_PASS: i64 = 5_000;
/// `POST /api/reconcile` waits at most this long for the rounds it asked for; a provider still
/// running then is reported `running` (its round goes on in the background).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// What `POST /api/reconcile` did: the rounds it asked every provider for, summed over those that
/// finished within `ANSWER_WITHIN` (the fields of a recorded pass; `providers` says `ok` or why a
/// provider was not fully polled, or that it is still running), each provider's round typed in
/// `rounds`, and the lateness alerts raised (stuck, or slower than usual).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
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

/// One provider's polling: its task's wake-ups and the rounds it finished.
pub(super) struct Poller {
    /// Its provider's name: the provider itself is looked up at each round, so a recipe changed
    /// on disk is polled as it now reads, and a recipe removed ends its poller.
    name: &'static str,
    /// Asks the task for a round now. A permit is kept while a round runs, so asks during a
    /// round give one more round after it, never a queue of them.
    pub(super) trigger: Notify,
    /// The next round is on demand (a refused key is tried again).
    on_demand: AtomicBool,
    /// Rounds started so far.
    started: AtomicU64,
    /// The number of the last finished round and what it did (`None`: nothing to do, or failed).
    finished: watch::Sender<(u64, Option<ProviderRound>)>,
}

impl Poller {
    pub(super) fn new(name: &'static str) -> Arc<Poller> {
        Arc::new(Poller {
            name,
            trigger: Notify::new(),
            on_demand: AtomicBool::new(false),
            started: AtomicU64::new(0),
            finished: watch::Sender::new((0, None)),
        })
    }
}

impl Reconciler {
    /// The interval with up to 10% jitter (so providers and timers do not march in step).
    pub(super) fn next_wait(&self) -> Duration {
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
    pub(super) async fn run_poller(self: Arc<Self>, poller: Arc<Poller>, shutdown: CancellationToken) {
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
        let discovering = provider.can_discover() && self.deps.settings.discovers(name) && self.discovery_ready(provider);
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
            // No job of it left to watch (ended, untracked): what its health said of its jobs
            // (not set up, a refused key, no status API) no longer holds, and no warning stays
            // behind. A 429's pause stays: it is the provider's word on when to ask again.
            let problem = [HealthStatus::NotConfigured, HealthStatus::Misconfigured, HealthStatus::NoStatusApi];
            let stale = self.health.read().unwrap().get(name).is_some_and(|h| problem.contains(&h.status));
            if stale && !self.deps.store.read(move |conn| jobs::any_unfinished(conn, name)).await? {
                self.health.write().unwrap().remove(name);
                self.deps.changes.metrics_changed();
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
}

/// Adds a provider's round to a pass's sums, and its words to `providers`.
fn add_round(pass: &mut PassSummary, name: &str, round: &ProviderRound) {
    pass.counts.add(&round.counts);
    pass.providers.insert(name.to_owned(), round.status_words());
}

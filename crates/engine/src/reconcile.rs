//! Reconciliation, the path that never drops: every polling interval (and on demand) ask each
//! provider for the state of every unfinished job that is due, and feed each answer through the
//! merge point. A terminal state first learned this way is a "reconcile rescue": a webhook went
//! missing. The same pass raises stuck alerts.
//!
//! Manners toward providers: bounded concurrency per provider; a 429 pauses that provider for its
//! `Retry-After`; a refused API key (401/403) pauses it and shows as a configuration error rather
//! than being retried in a loop; a failing job backs off exponentially; a 404 is kept on the job.
//!
//! A provider that can list its jobs (Replicate), with discovery turned on in Settings, first lists
//! those created since the last listing: each goes through the merge point like a poll answer, so a
//! job started elsewhere (neither tracked nor webhooked) is watched too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::closed_set::closed_set;
use crate::job::{now_ms, rfc3339, Outcome};
use crate::merge_point;
use crate::outbox::Outbox;
use crate::providers::{FetchError, JobRef, Provider, Providers};
use crate::settings::{self, Settings};
use crate::store::outbox::{self as store_outbox, Kind, Subject};
use crate::store::passes::{self, PassSummary};
use crate::store::{self, jobs, Counter, Store, StoreError};

/// Jobs asked about at once, per provider.
pub const CONCURRENCY: usize = 8;
/// Due jobs looked at per provider per pass (longest waiting first); the rest wait a pass.
const PER_PASS: i64 = 5_000;
/// A refused API key pauses the scheduled polling of its provider this long.
const CONFIGURATION_PAUSE: Duration = Duration::from_secs(5 * 60);
/// A 429 without `Retry-After` pauses its provider this long.
const DEFAULT_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(60);
/// Most jobs one listing takes in (a provider's discovery, per pass).
const DISCOVER_PER_PASS: usize = 2_000;
/// Each listing starts this far before the newest creation time the last one saw: a job that
/// shows up in the list a little late is still found (listing one twice changes nothing).
const DISCOVER_OVERLAP_MS: i64 = 60_000;
/// Longest wait between polls of a failing job.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// What one pass did (`POST /api/reconcile`): what is recorded of every pass, and the stuck
/// alerts it raised.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ts_rs::TS)]
#[ts(export)]
pub struct PassReport {
    #[serde(flatten)]
    pub pass: PassSummary,
    pub stuck_alerts: u64,
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

pub struct Reconciler {
    store: Store,
    providers: Providers,
    settings: Arc<Settings>,
    changes: Arc<Changes>,
    outbox: Arc<Outbox>,
    interval_override: Option<u64>,
    /// One pass at a time, whoever asks.
    running: tokio::sync::Mutex<()>,
    interval_changed: tokio::sync::Notify,
    health: RwLock<BTreeMap<String, ProviderHealth>>,
}

/// What polling one job gave.
enum Polled {
    Applied { rescue: bool },
    Unchanged,
    NotFound,
    /// A failure of this job alone; it backs off.
    JobError(FetchError),
    /// A failure of the whole provider (key, rate limit, no API); the rest of its jobs wait.
    ProviderError(FetchError),
    Skipped,
}

impl Reconciler {
    pub fn new(
        store: Store,
        providers: Providers,
        settings: Arc<Settings>,
        changes: Arc<Changes>,
        outbox: Arc<Outbox>,
        interval_override: Option<u64>,
    ) -> Arc<Reconciler> {
        Arc::new(Reconciler {
            store,
            providers,
            settings,
            changes,
            outbox,
            interval_override,
            running: tokio::sync::Mutex::new(()),
            interval_changed: tokio::sync::Notify::new(),
            health: RwLock::new(BTreeMap::new()),
        })
    }

    /// The polling interval in force: `--poll-interval`/variable, else the setting, else 60 s.
    pub fn interval(&self) -> Duration {
        let secs = self
            .interval_override
            .or_else(|| self.settings.get(settings::POLL_INTERVAL_SECS).and_then(|v| v.parse().ok()))
            .unwrap_or(settings::DEFAULT_POLL_INTERVAL_SECS)
            .max(settings::MIN_POLL_INTERVAL_SECS);
        Duration::from_secs(secs)
    }

    /// Whether `--poll-interval` / `NEVERMISS_POLL_INTERVAL` overrides the stored setting.
    pub fn interval_overridden(&self) -> bool {
        self.interval_override.is_some()
    }

    /// The interval setting changed: start the new wait now.
    pub fn interval_changed(&self) {
        self.interval_changed.notify_one();
    }

    /// Each provider's polling health (only providers that have had jobs to poll).
    pub fn health(&self) -> BTreeMap<String, ProviderHealth> {
        self.health.read().unwrap().clone()
    }

    /// Runs a pass every interval, with up to 10% jitter, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let interval = self.interval();
            let jitter = rand::rng().random_range(0..=interval.as_millis() as u64 / 10);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.interval_changed.notified() => continue,
                _ = tokio::time::sleep(interval + Duration::from_millis(jitter)) => {}
            }
            if let Err(e) = self.pass(false).await {
                tracing::error!(error = %e, "reconcile pass failed");
            }
        }
    }

    /// One pass now, on demand: a provider paused for a refused key is tried again (the user may
    /// have just fixed it); a rate limit is still honoured.
    pub async fn run_pass(&self) -> Result<PassReport, StoreError> {
        self.pass(true).await
    }

    #[tracing::instrument(name = "reconcile_pass", skip(self))]
    async fn pass(&self, on_demand: bool) -> Result<PassReport, StoreError> {
        let _one_at_a_time = self.running.lock().await;
        let started = Instant::now();
        let now = now_ms();
        let mut report = PassReport {
            pass: PassSummary {
                started_at: rfc3339(now),
                ..PassSummary::default()
            },
            stuck_alerts: 0,
        };
        let per_provider =
            futures_util::future::join_all(self.providers.iter().map(|p| self.pass_provider(p.as_ref(), now, on_demand))).await;
        for (provider, result) in self.providers.iter().zip(per_provider) {
            let Some((status, tally)) = result? else { continue };
            let pass = &mut report.pass;
            pass.checked += tally.checked;
            pass.applied += tally.applied;
            pass.rescues += tally.rescues;
            pass.errors += tally.errors;
            pass.not_found += tally.not_found;
            pass.providers.insert(provider.name().to_owned(), status);
        }
        report.stuck_alerts = self.raise_stuck_alerts(now).await?;
        if report.stuck_alerts > 0 {
            self.outbox.wake();
        }
        report.pass.duration_ms = started.elapsed().as_millis() as u64;
        let row = report.pass.clone();
        self.store
            .write(move |tx| {
                tx.count(Counter::ReconcilePasses, 1);
                tx.count(Counter::ReconcileErrors, row.errors as i64);
                store::settings::set(tx, store::metrics::LAST_RECONCILE_AT, &now.to_string())?;
                passes::record(tx, now, &row)
            })
            .await?;
        self.changes.metrics_changed();
        let pass = &report.pass;
        tracing::info!(
            checked = pass.checked,
            applied = pass.applied,
            rescues = pass.rescues,
            errors = pass.errors,
            stuck = report.stuck_alerts,
            duration_ms = pass.duration_ms,
            "reconcile pass"
        );
        Ok(report)
    }

    /// Polls one provider's due jobs. `None` when it had nothing to do.
    #[tracing::instrument(name = "provider", level = "debug", skip_all, fields(provider = provider.name()))]
    async fn pass_provider(&self, provider: &dyn Provider, now: i64, on_demand: bool) -> Result<Option<(String, Tally)>, StoreError> {
        let name = provider.name();
        if let Some(reason) = self.paused(name, now, on_demand) {
            return Ok(Some((reason, Tally::default())));
        }
        let mut tally = Tally::default();
        let discovering = provider.can_discover() && self.settings.discovers(name);
        if discovering {
            if let Err(e) = self.discover(provider, now, &mut tally).await? {
                self.set_health(name, &e, now);
                return Ok(Some((e.to_string(), tally)));
            }
        }
        let jobs = self.store.read(move |conn| jobs::unfinished_due(conn, name, now, PER_PASS)).await?;
        if jobs.is_empty() {
            if discovering {
                self.set_ok(name, now);
                return Ok(Some(("ok".to_owned(), tally)));
            }
            return Ok(None);
        }
        let stop = AtomicBool::new(false);
        let results: Vec<Result<Polled, StoreError>> = futures_util::stream::iter(jobs)
            .map(|job| {
                let stop = &stop;
                async move {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(Polled::Skipped);
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
                    tally.checked += 1;
                    tally.applied += 1;
                    tally.rescues += rescue as u64;
                }
                Polled::Unchanged => tally.checked += 1,
                Polled::NotFound => {
                    tally.checked += 1;
                    tally.not_found += 1;
                }
                Polled::JobError(e) => {
                    tally.checked += 1;
                    tally.errors += 1;
                    tracing::debug!(provider = name, error = %e, "poll failed");
                }
                Polled::ProviderError(e) => {
                    if !matches!(e, FetchError::NotConfigured(_) | FetchError::NotSupported(_)) {
                        tally.errors += 1;
                    }
                    provider_error.get_or_insert(e);
                }
                Polled::Skipped => {}
            }
        }
        let status = match provider_error {
            Some(e) => {
                self.set_health(name, &e, now);
                e.to_string()
            }
            None => {
                self.set_ok(name, now);
                "ok".to_owned()
            }
        };
        Ok(Some((status, tally)))
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
            FetchError::RateLimited { retry_after } => (
                HealthStatus::RateLimited,
                Some(retry_after.unwrap_or(DEFAULT_RATE_LIMIT_PAUSE).min(MAX_BACKOFF)),
            ),
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

    /// Records a provider's polling health; `since` is kept while the status stays the same.
    fn set_status(&self, name: &str, status: HealthStatus, message: Option<String>, pause: Option<Duration>, now: i64) {
        let paused_until_ms = pause.map(|p| now + p.as_millis() as i64).unwrap_or(0);
        let mut health = self.health.write().unwrap();
        let since = match health.get(name) {
            Some(old) if old.status == status => old.since.clone(),
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
    async fn discover(&self, provider: &dyn Provider, now: i64, tally: &mut Tally) -> Result<Result<(), FetchError>, StoreError> {
        let name = provider.name();
        let watermark_key = format!("{name}.{}", settings::DISCOVERED_UNTIL);
        let since = self.settings.get(&watermark_key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(now);
        let found = match provider.discover(since, DISCOVER_PER_PASS).await {
            Ok(found) => found,
            Err(e) if is_provider_wide(&e) => return Ok(Err(e)),
            Err(e) => {
                tracing::warn!(provider = name, error = %e, "cannot list the provider's jobs; polling goes on");
                tally.errors += 1;
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
        let events = found.events;
        let merged = self
            .store
            .write(move |tx| {
                let mut results = Vec::with_capacity(events.len());
                let mut new_jobs = 0;
                for event in &events {
                    let known = jobs::exists(tx, &event.provider, &event.job_id)?;
                    new_jobs += i64::from(!known);
                    results.push(merge_point::accept_poll(tx, event, now_ms())?);
                }
                tx.count(Counter::JobsDiscovered, new_jobs);
                Ok((results, new_jobs))
            })
            .await?;
        let (results, new_jobs) = merged;
        for result in results {
            tally.checked += 1;
            if result.first_terminal {
                self.outbox.wake();
            }
            if result.outcome == Outcome::Applied {
                tally.applied += 1;
                tally.rescues += u64::from(result.first_terminal);
                if let Some(job) = result.job {
                    self.changes.job_changed(job);
                }
            }
        }
        if new_jobs > 0 {
            tracing::info!(provider = name, new_jobs, "discovered jobs started elsewhere");
        }
        if let Some(newest) = found.newest_created_ms {
            let until = (newest - DISCOVER_OVERLAP_MS).max(since);
            self.settings.set(&watermark_key, &until.to_string()).await?;
        }
        Ok(Ok(()))
    }

    /// Polls one job now (after `track`, or "poll now" in the UI), rate limits permitting.
    pub async fn poll_job(&self, provider: &str, job_id: &str) -> Result<(), String> {
        let Some(provider) = self.providers.get(provider).cloned() else {
            return Err(format!("unknown provider {provider:?}"));
        };
        if let Some(reason) = self.paused(provider.name(), now_ms(), true) {
            return Err(reason);
        }
        let (name, id) = (provider.name(), job_id.to_owned());
        let (job, failures) = self
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
            Polled::JobError(e) => Err(e.to_string()),
            Polled::NotFound => Err(FetchError::NotFound.to_string()),
            _ => Ok(()),
        }
    }

    #[tracing::instrument(name = "poll", level = "debug", skip_all, fields(provider = provider.name(), job_id = %job.job_id))]
    async fn poll(&self, provider: &dyn Provider, job: &JobRef, failures: i64) -> Result<Polled, StoreError> {
        match provider.fetch_statuses(job).await {
            Ok(answer) => {
                // The asked job's event and those of the jobs that belong with it (a session's
                // runs), merged in one transaction.
                let (name, asked) = (provider.name(), job.job_id.clone());
                let results = self
                    .store
                    .write(move |tx| {
                        if let Some(poll_url) = answer.poll_url.as_deref() {
                            jobs::remember_poll_url(tx, name, &asked, poll_url)?;
                        }
                        let now = now_ms();
                        answer.events.iter().map(|event| merge_point::accept_poll(tx, event, now)).collect::<Result<Vec<_>, _>>()
                    })
                    .await?;
                let (mut applied, mut rescue) = (false, false);
                for result in results {
                    if result.first_terminal {
                        self.outbox.wake();
                        rescue = true;
                    }
                    if result.outcome == Outcome::Applied {
                        applied = true;
                        if let Some(changed) = result.job {
                            self.changes.job_changed(changed);
                        }
                    }
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
                let kind = e.job_error_kind().unwrap_or(crate::job::PollErrorKind::Transport);
                let job = self
                    .store
                    .write(move |tx| {
                        let now = now_ms();
                        jobs::poll_failed(tx, name, &id, now, kind, &reason, failures, now + delay.as_millis() as i64)?;
                        jobs::job(tx, name, &id)
                    })
                    .await?;
                if let Some(job) = job {
                    self.changes.job_changed(job);
                }
                Ok(if e == FetchError::NotFound { Polled::NotFound } else { Polled::JobError(e) })
            }
        }
    }

    /// Wait before polling a job again after `failures` failures in a row: the interval doubled
    /// each time, at most an hour.
    fn backoff(&self, failures: i64) -> Duration {
        let factor = 2u32.saturating_pow(failures.clamp(0, 12) as u32);
        (self.interval() * factor).min(MAX_BACKOFF)
    }

    /// Enqueues one stuck alert for each unfinished job older than its provider's threshold
    /// (once per job: the outbox's unique key). Returns how many were raised.
    async fn raise_stuck_alerts(&self, now: i64) -> Result<u64, StoreError> {
        let thresholds: Vec<(Arc<dyn Provider>, i64)> = self
            .providers
            .iter()
            .map(|p| (p.clone(), now - self.settings.stuck_threshold(p.name()).as_millis() as i64))
            .collect();
        self.store
            .write(move |tx| {
                let mut raised = 0;
                for (p, cutoff) in &thresholds {
                    let provider = p.name();
                    for (job_id, state) in jobs::unfinished_since_before(tx, provider, *cutoff)? {
                        if !p.may_be_stuck(&job_id) {
                            continue;
                        }
                        raised += store_outbox::enqueue(tx, Kind::Stuck, &Subject::job(provider, &job_id), Some(state), now)? as u64;
                    }
                }
                tx.count(Counter::StuckAlerts, raised as i64);
                Ok(raised)
            })
            .await
    }
}

/// Errors that say something about the provider rather than the job.
fn is_provider_wide(e: &FetchError) -> bool {
    matches!(
        e,
        FetchError::NotSupported(_) | FetchError::NotConfigured(_) | FetchError::Unauthorized(_) | FetchError::RateLimited { .. }
    )
}

#[derive(Default)]
struct Tally {
    checked: u64,
    applied: u64,
    rescues: u64,
    errors: u64,
    not_found: u64,
}

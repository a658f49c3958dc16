//! Reconciliation, the path that never drops: every polling interval (and on demand) ask each
//! provider for the state of every unfinished job and feed each answer through the merge point.
//! A terminal state first learned this way is a "reconcile rescue": a webhook went missing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::Rng;
use rusqlite::params;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::job::{now_ms, rfc3339};
use crate::merge_point;
use crate::outbox::Outbox;
use crate::providers::{FetchError, Provider, Providers};
use crate::settings::{Settings, DEFAULT_POLL_INTERVAL_SECS, MIN_POLL_INTERVAL_SECS, POLL_INTERVAL_SECS};
use crate::store::{queries, Store, StoreError};

/// Jobs asked about at once, per provider.
const CONCURRENCY: usize = 8;
/// Unfinished jobs looked at per provider per pass (least recently polled first).
const PER_PASS: i64 = 10_000;

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PassReport {
    pub started_at: String,
    pub duration_ms: u64,
    pub checked: u64,
    pub applied: u64,
    pub rescues: u64,
    pub errors: u64,
    pub not_found: u64,
    /// Per provider with unfinished jobs: `ok`, or why it was not (fully) polled.
    pub providers: BTreeMap<String, String>,
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
}

enum JobResult {
    Applied { rescue: bool },
    Unchanged,
    NotFound,
    Failed(FetchError),
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
        })
    }

    /// The polling interval in force: `--poll-interval`/variable, else the setting, else 60 s.
    pub fn interval(&self) -> Duration {
        let secs = self
            .interval_override
            .or_else(|| self.settings.get(POLL_INTERVAL_SECS).and_then(|v| v.parse().ok()))
            .unwrap_or(DEFAULT_POLL_INTERVAL_SECS)
            .max(MIN_POLL_INTERVAL_SECS);
        Duration::from_secs(secs)
    }

    /// The interval setting changed: start the new wait now.
    pub fn interval_changed(&self) {
        self.interval_changed.notify_one();
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
            if let Err(e) = self.run_pass().await {
                tracing::error!(error = %e, "reconcile pass failed");
            }
        }
    }

    /// One pass over every unfinished job of every provider.
    pub async fn run_pass(&self) -> Result<PassReport, StoreError> {
        let _one_at_a_time = self.running.lock().await;
        let started = Instant::now();
        let mut report = PassReport {
            started_at: rfc3339(now_ms()),
            ..PassReport::default()
        };
        for provider in self.providers.iter() {
            let name = provider.name();
            let jobs = self.store.read(move |conn| queries::unfinished_jobs(conn, name, PER_PASS)).await?;
            if jobs.is_empty() {
                continue;
            }
            let results: Vec<(String, Result<JobResult, StoreError>)> = futures_util::stream::iter(jobs)
                .map(|job| async move {
                    let result = self.poll(provider.as_ref(), &job.job_id).await;
                    (job.job_id, result)
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
            let mut status = "ok".to_owned();
            for (job_id, result) in results {
                report.checked += 1;
                match result? {
                    JobResult::Applied { rescue } => {
                        report.applied += 1;
                        report.rescues += rescue as u64;
                    }
                    JobResult::Unchanged => {}
                    JobResult::NotFound => report.not_found += 1,
                    JobResult::Failed(FetchError::NotSupported(_)) => {
                        status = format!("{name} has no status API: jobs wait for webhooks");
                    }
                    JobResult::Failed(e) => {
                        report.errors += 1;
                        if e.is_configuration() || status == "ok" {
                            status = e.to_string();
                        }
                        tracing::debug!(provider = name, job_id, error = %e, "poll failed");
                    }
                }
            }
            report.providers.insert(name.to_owned(), status);
        }
        report.duration_ms = started.elapsed().as_millis() as u64;
        let errors = report.errors as i64;
        self.store
            .write(move |conn| {
                queries::bump(conn, "reconcile_passes", 1)?;
                queries::bump(conn, "reconcile_errors", errors)?;
                queries::set_setting(conn, "last_reconcile_at", &now_ms().to_string())
            })
            .await?;
        self.changes.metrics_changed();
        tracing::info!(checked = report.checked, applied = report.applied, rescues = report.rescues, errors = report.errors, duration_ms = report.duration_ms, "reconcile pass");
        Ok(report)
    }

    /// Polls one job now (after `track`, or "poll now" in the UI). Errors are recorded on the job.
    pub async fn poll_job(&self, provider: &str, job_id: &str) {
        let Some(provider) = self.providers.get(provider).cloned() else {
            return;
        };
        match self.poll(provider.as_ref(), job_id).await {
            Ok(JobResult::Failed(e)) => tracing::debug!(job_id, error = %e, "poll failed"),
            Ok(_) => {}
            Err(e) => tracing::error!(job_id, error = %e, "cannot record a poll"),
        }
    }

    async fn poll(&self, provider: &dyn Provider, job_id: &str) -> Result<JobResult, StoreError> {
        match provider.fetch_status(job_id).await {
            Ok(event) => {
                let result = self.store.write(move |conn| merge_point::accept_poll(conn, &event, now_ms())).await?;
                if result.first_terminal {
                    self.outbox.wake();
                }
                if result.outcome == crate::job::Outcome::Applied {
                    if let Some(job) = result.job {
                        self.changes.job_changed(job);
                    }
                    Ok(JobResult::Applied { rescue: result.first_terminal })
                } else {
                    Ok(JobResult::Unchanged)
                }
            }
            Err(FetchError::NotSupported(name)) => Ok(JobResult::Failed(FetchError::NotSupported(name))),
            Err(e) => {
                let (name, id, reason) = (provider.name(), job_id.to_owned(), e.to_string());
                self.store
                    .write(move |conn| {
                        conn.prepare_cached("UPDATE jobs SET last_polled_at = ?3, poll_error = ?4 WHERE provider = ?1 AND job_id = ?2")?
                            .execute(params![name, id, now_ms(), reason])
                    })
                    .await?;
                Ok(if e == FetchError::NotFound { JobResult::NotFound } else { JobResult::Failed(e) })
            }
        }
    }
}

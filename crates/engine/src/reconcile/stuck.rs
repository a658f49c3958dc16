//! Stuck alerts: an unfinished job older than its threshold (or slower than usual) raises one
//! alert, on its own timer.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Reconciler;
use crate::expected;
use crate::providers::Provider;
use crate::store::counters::Counter;
use crate::store::job::now_ms;
use crate::store::outbox::{self as store_outbox, Kind, Subject};
use crate::store::{durations, jobs, StoreError};

impl Reconciler {
    /// Stuck alerts, on their own timer: a slow provider does not delay them.
    pub(super) async fn run_stuck_alerts(self: Arc<Self>, shutdown: CancellationToken) {
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

    pub(super) async fn stuck_alerts_now(&self) -> Result<u64, StoreError> {
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

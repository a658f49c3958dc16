//! Live changes for the UI and any other watcher: every job change, and a fresh metrics snapshot
//! shortly after counters move (coalesced, so a burst of deliveries sends one snapshot, not
//! thousands). Served as Server-Sent Events by `api::events`. A job goes out with its kind's
//! expected duration as last read (`expected`), which this keeps for everything that shows a job.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use crate::expected::ExpectedDurations;
use crate::metrics::Metrics;
use crate::store::job::Job;
use crate::store::StoreError;

/// How long a burst of counter changes is gathered into one metrics snapshot.
const METRICS_COALESCE: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Serialize, serde::Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Change {
    Job {
        job: Job,
    },
    /// A job no longer tracked (`untrack`): lists drop it.
    Untracked {
        provider: String,
        job_id: String,
    },
    Metrics {
        metrics: Metrics,
    },
}

pub struct Changes {
    sender: broadcast::Sender<Change>,
    metrics_dirty: Notify,
    expected: ExpectedDurations,
}

impl Changes {
    pub fn new() -> Arc<Changes> {
        let (sender, _) = broadcast::channel(4096);
        Arc::new(Changes { sender, metrics_dirty: Notify::new(), expected: ExpectedDurations::default() })
    }

    pub fn job_changed(&self, mut job: Job) {
        self.expected.fill(&mut job);
        let _ = self.sender.send(Change::Job { job });
        self.metrics_dirty.notify_one();
    }

    pub fn job_untracked(&self, provider: &str, job_id: &str) {
        let _ = self.sender.send(Change::Untracked { provider: provider.to_owned(), job_id: job_id.to_owned() });
        self.metrics_dirty.notify_one();
    }

    /// Every kind's expected duration, as last read.
    pub fn expected(&self) -> &ExpectedDurations {
        &self.expected
    }

    pub fn metrics_changed(&self) {
        self.metrics_dirty.notify_one();
    }

    /// Whether anyone watches the live changes now (the UI's stream, a device, the tunnel's self
    /// test): a job another process changed is read only for them.
    pub fn watched(&self) -> bool {
        self.sender.receiver_count() > 0
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.sender.subscribe()
    }

    /// Publishes a metrics snapshot (from `read_metrics`) after each burst of changes, until
    /// `shutdown`.
    pub async fn publish_metrics<F, Fut>(self: Arc<Self>, read_metrics: F, shutdown: CancellationToken)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Metrics, StoreError>>,
    {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.metrics_dirty.notified() => {}
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(METRICS_COALESCE) => {}
            }
            if self.sender.receiver_count() == 0 {
                continue;
            }
            match read_metrics().await {
                Ok(metrics) => {
                    let _ = self.sender.send(Change::Metrics { metrics });
                }
                Err(e) => tracing::warn!(error = %e, "cannot read metrics for the live stream"),
            }
        }
    }
}

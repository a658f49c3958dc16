//! What the receiver, the API and the background tasks share (`Services`), and how a running
//! instance is reached (`InstanceInfo`): below them all, so that the API and the receiver import
//! this module and never the engine's start-up (which builds a `Services`).

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::changes::Changes;
use crate::hub_client::HubClient;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::providers::Providers;
use crate::reconcile::Reconciler;
use crate::secrets::Secrets;
use crate::settings::Settings;
use crate::store::{Store, StoreError};
use crate::tunnel::Tunnel;

/// How a running instance can be reached; written to `<data-dir>/instance.json` for the CLI.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceInfo {
    pub pid: u32,
    pub api_url: String,
    pub receiver_url: String,
    /// The tunnel's public URL, when one runs.
    pub public_url: Option<String>,
    pub data_dir: PathBuf,
    #[serde(default)]
    pub simulation: bool,
}

/// What the receiver, the API and the background tasks share.
pub struct Services {
    pub store: Store,
    /// The built-in providers, the shipped recipes and the user's (with the user's recipe files
    /// refused at their last load).
    pub providers: Providers,
    pub changes: Arc<Changes>,
    pub outbox: Arc<Outbox>,
    pub reconciler: Arc<Reconciler>,
    pub settings: Arc<Settings>,
    pub secrets: Arc<Secrets>,
    pub instance: InstanceInfo,
    /// The public URL's tunnel (its `public_url()` is the live one; `instance.public_url` is not).
    pub tunnel: Arc<Tunnel>,
    /// This app as a hub's device, when one is set (Settings, Hub).
    pub hub: Arc<HubClient>,
}

impl Services {
    /// METRICS: the store's counters and gauges, with each provider's polling health.
    pub async fn metrics(&self) -> Result<Metrics, StoreError> {
        // Pending rows per channel are counted only when some channel is failing (the metrics
        // are read again at every change).
        let (store, channels, pending, unknown) = self
            .store
            .read(|db| {
                let channels = crate::store::channels::all(db)?;
                let pending = if channels.iter().any(|c| c.enabled && c.failing()) {
                    crate::store::channels::pending(db)?
                } else {
                    Default::default()
                };
                let unknown = crate::store::counters::of_unknown_values(db)?;
                Ok((crate::store::metrics::read(db)?, channels, pending, unknown))
            })
            .await?;
        let unknown_values = unknown
            .into_iter()
            .map(|(provider, field, value, count)| crate::metrics::UnknownValueCount { provider, field, value, count })
            .collect();
        let failing_channels = channels
            .into_iter()
            .filter(|c| c.enabled && c.failing())
            .map(|c| {
                let failing = crate::metrics::FailingChannel {
                    kind: c.kind,
                    last_error: c.last_error.clone().unwrap_or_default(),
                    pending: pending.get(&c.name).copied().unwrap_or(0),
                };
                (c.name, failing)
            })
            .collect();
        Ok(Metrics { store, providers: self.reconciler.health(), failing_channels, unknown_values })
    }
}

//! A provider's polling health as the metrics, the UI and the devices see it: the types only
//! (reconciliation keeps it: `reconcile::health`).

use serde::{Deserialize, Serialize};

use crate::closed_set::closed_set;

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct ProviderHealth {
    pub status: HealthStatus,
    pub message: Option<String>,
    pub since: String,
    /// Scheduled polling of this provider waits until then.
    pub paused_until: Option<String>,
    #[serde(skip)]
    pub(crate) paused_until_ms: i64,
}

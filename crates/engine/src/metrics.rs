//! METRICS as the admin API and the event stream answer them (contract §3): the store's
//! counters and gauges, with each provider's polling health from the reconciler.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::provider_health::ProviderHealth;
use crate::store::metrics::StoreMetrics;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct Metrics {
    #[serde(flatten)]
    pub store: StoreMetrics,
    /// Each provider's polling health (only providers that have had jobs to poll).
    pub providers: BTreeMap<String, ProviderHealth>,
    /// The channels whose last send failed (a warning on every screen), by name.
    pub failing_channels: BTreeMap<String, FailingChannel>,
    /// The values of providers' fields NeverMiss does not know (a status, a stop reason), each
    /// with how many times it decided a job's state (never a success: see
    /// `providers::vocabulary`), by provider, field and value.
    pub unknown_values: Vec<UnknownValueCount>,
}

/// A provider's field held a value NeverMiss does not know, `count` times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct UnknownValueCount {
    pub provider: String,
    pub field: String,
    pub value: String,
    pub count: i64,
}

/// A channel whose last send failed, with nothing through since.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct FailingChannel {
    pub kind: crate::store::channels::ChannelKind,
    pub last_error: String,
    /// Notifications waiting for it.
    pub pending: i64,
}

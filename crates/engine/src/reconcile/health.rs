//! Each provider's polling health: ok, not configured, a refused key or a rate limit (each
//! pausing its scheduled polling for a while), no status API, or polled by the hub.
//!
//! Manners toward providers: a 429 pauses that provider for its `Retry-After`; a refused API key
//! (401/403) pauses it and shows as a configuration error rather than being retried in a loop; a
//! failing job backs off exponentially; a 404 is kept on the job.

use std::collections::BTreeMap;
use std::time::Duration;

use super::polling::MAX_BACKOFF;
use super::Reconciler;
use crate::provider_health::{HealthStatus, ProviderHealth};
use crate::providers::FetchError;
use crate::store::job::rfc3339;

/// A refused API key pauses the scheduled polling of its provider this long.
const CONFIGURATION_PAUSE: Duration = Duration::from_secs(5 * 60);
/// A 429 without `Retry-After` pauses its provider this long.
const DEFAULT_RATE_LIMIT_PAUSE: Duration = Duration::from_secs(60);

impl Reconciler {
    /// Each provider's polling health (only providers that have had jobs to poll).
    pub fn health(&self) -> BTreeMap<String, ProviderHealth> {
        self.health.read().unwrap().clone()
    }

    /// Why a provider's polling waits now, if it does.
    pub(super) fn paused(&self, name: &str, now: i64, on_demand: bool) -> Option<String> {
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

    pub(super) fn set_health(&self, name: &str, e: &FetchError, now: i64) {
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

    pub(super) fn set_ok(&self, name: &str, now: i64) {
        if self.health.read().unwrap().get(name).is_some_and(|h| h.status == HealthStatus::Ok) {
            return;
        }
        self.set_status(name, HealthStatus::Ok, None, None, now);
    }

    /// Records a provider's polling health; `since` is kept while the status stays the same, and
    /// so is a pause that ends later than the new one: two polls that met the provider's 429 at
    /// once (a pass and a job's own poll) record it in either order, each with the time it began.
    pub(super) fn set_status(&self, name: &str, status: HealthStatus, message: Option<String>, pause: Option<Duration>, now: i64) {
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
}

/// Errors that say something about the provider rather than the job.
pub(super) fn is_provider_wide(e: &FetchError) -> bool {
    matches!(e, FetchError::NotSupported(_) | FetchError::NotConfigured(_) | FetchError::Unauthorized(_) | FetchError::RateLimited { .. })
}

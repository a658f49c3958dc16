//! Stored settings (polling interval, provider base URLs, ...): the `settings` table, cached in
//! memory so the hot paths read them without a query. Changes apply without a restart.

use std::collections::HashMap;
use std::sync::RwLock;

use crate::providers::ProviderConfig;
use crate::store::{Store, StoreError};

pub const POLL_INTERVAL_SECS: &str = "poll_interval_secs";
pub const DEFAULT_POLL_INTERVAL_SECS: u64 = 60;
pub const MIN_POLL_INTERVAL_SECS: u64 = 5;
pub const STUCK_THRESHOLD_SECS: &str = "stuck_threshold_secs";
pub const DEFAULT_STUCK_THRESHOLD_SECS: u64 = 30 * 60;
pub const SLA_SECS: &str = "sla_secs";
pub const DEFAULT_SLA_SECS: u64 = 5 * 60;
/// Where links in notifications point (the web UI as the user reaches it: a hub's public
/// address); empty: this engine's admin API.
pub const UI_URL: &str = "ui_url";
pub const DELIVERY_RETENTION_DAYS: &str = "delivery_retention_days";
pub const MIN_DELIVERY_RETENTION_DAYS: i64 = 7;
/// Days a finished job stays in the hot tables (jobs, timeline, outbox) before it is archived.
pub const JOB_RETENTION_DAYS: &str = "job_retention_days";
pub const DEFAULT_JOB_RETENTION_DAYS: i64 = 90;

/// How long a job must have been answered 404 at every poll before polling gives up on it
/// ("abandoned", see `reconcile`): 3 days by default; 0 gives up at the limit of polls alone.
pub const ABANDON_AFTER_SECS: &str = "abandon_after_secs";
pub const DEFAULT_ABANDON_AFTER_SECS: u64 = 3 * 86_400;
pub const MAX_ABANDON_AFTER_SECS: u64 = 90 * 86_400;

/// `<provider>.discover`: `on` to watch every job the provider lists (see `Provider::discover`).
pub const DISCOVER: &str = "discover";
/// `<provider>.discovered_until`: jobs created before this time (ms) are not discovered: the
/// moment discovery was turned on, then moved forward by each listing.
pub const DISCOVERED_UNTIL: &str = "discovered_until";

/// The hub this app is a device of (`https://hub.example.com`); empty or unset: none.
pub const HUB_URL: &str = "hub.url";
/// `on`: a hub's devices may ask it to cancel a job (`POST /api/jobs/{provider}/{job_id}/cancel`).
/// Off by default: only the owner cancels.
pub const DEVICES_MAY_CANCEL: &str = "devices_may_cancel";
/// `on`: a hub's devices may read the raw bodies of kept deliveries and refused requests (what a
/// provider sent, credentials masked). Off by default: a device sees their headers and reasons.
pub const DEVICES_MAY_READ_BODIES: &str = "devices_may_read_bodies";

/// The desktop notification's sound for urgent ones (failed, needs input, stuck, ...) and for the
/// others: `off` (the default: NeverMiss asks for no sound) or a sound name of the freedesktop
/// sound theme (`dialog-warning`, `message-new-instant`, `complete`), given to the notification
/// server as the `sound-name` hint.
pub const SOUND_URGENT: &str = "sound_urgent";
pub const SOUND_NORMAL: &str = "sound_normal";
/// A sound setting's value for no sound.
pub const SOUND_OFF: &str = "off";

/// A sound setting's value as it is stored: `off` (also for an empty text), or a freedesktop sound
/// name (the sound naming specification's form: lower-case ASCII letters, digits, `-` and `.`,
/// such as `dialog-warning`; at most 64 characters).
pub fn parse_sound(text: &str) -> Result<String, String> {
    let name = text.trim();
    if name.is_empty() || name == SOUND_OFF {
        return Ok(SOUND_OFF.to_owned());
    }
    let named = name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    if named {
        Ok(name.to_owned())
    } else {
        Err("must be off, or a sound name of the freedesktop sound theme such as dialog-warning or message-new-instant".into())
    }
}

/// A provider's API base URL from its variable alone (`NEVERMISS_<PROVIDER>_BASE_URL`), for what
/// runs without the stored settings; `Settings::base_url` is the whole rule.
pub fn env_base_url(provider: &str) -> Option<String> {
    std::env::var(crate::providers::variable(provider, "BASE_URL"))
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.trim_end_matches('/').to_owned())
}

pub struct Settings {
    store: Store,
    cache: RwLock<HashMap<String, String>>,
    /// Held by `set` and `reload` from their query to their cache update: a reload that read the
    /// table before a `set` committed must not put its older copy over the value `set` cached.
    refresh: tokio::sync::Mutex<()>,
}

impl Settings {
    pub async fn load(store: Store) -> Result<Settings, StoreError> {
        let cache = store.read(crate::store::settings::all).await?;
        Ok(Settings { store, cache: RwLock::new(cache), refresh: tokio::sync::Mutex::new(()) })
    }

    /// Reads every setting again (another process of a fleet changed some).
    pub async fn reload(&self) -> Result<(), StoreError> {
        let _refresh = self.refresh.lock().await;
        let all = self.store.read(crate::store::settings::all).await?;
        *self.cache.write().unwrap() = all;
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.cache.read().unwrap().get(key).cloned()
    }

    pub async fn set(&self, key: &str, value: &str) -> Result<(), StoreError> {
        let (k, v) = (key.to_owned(), value.to_owned());
        let _refresh = self.refresh.lock().await;
        self.store.write(move |tx| crate::store::settings::set(tx, &k, &v)).await?;
        self.cache.write().unwrap().insert(key.to_owned(), value.to_owned());
        Ok(())
    }

    /// A provider's API base URL: `NEVERMISS_<PROVIDER>_BASE_URL`, else the stored setting.
    pub fn base_url(&self, provider: &str) -> Option<String> {
        env_base_url(provider)
            .or_else(|| self.get(&format!("{provider}.base_url")))
            // An empty stored URL (cleared in Settings) means the provider's own.
            .filter(|v| !v.trim().is_empty())
            .map(|v| v.trim_end_matches('/').to_owned())
    }

    /// How long a job may stay unfinished before one stuck alert: the provider's own setting
    /// (`stuck_threshold_secs.<provider>`), else the general one, else 30 minutes. A job whose
    /// kind has 10 finished jobs is judged by "slower than usual" instead (`crate::expected`:
    /// 1.5 × the 95th percentile of their durations).
    pub fn stuck_threshold(&self, provider: &str) -> std::time::Duration {
        let secs = self
            .get(&format!("{STUCK_THRESHOLD_SECS}.{provider}"))
            .or_else(|| self.get(STUCK_THRESHOLD_SECS))
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_STUCK_THRESHOLD_SECS);
        std::time::Duration::from_secs(secs)
    }

    /// A job finished within this long of its start meets the SLA (default 5 minutes).
    pub fn sla(&self) -> std::time::Duration {
        let secs = self.get(SLA_SECS).and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_SLA_SECS);
        std::time::Duration::from_secs(secs)
    }

    /// How long a job must be unknown to its provider (404 at every poll) before polling gives up.
    pub fn abandon_after(&self) -> std::time::Duration {
        let secs = self.get(ABANDON_AFTER_SECS).and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_ABANDON_AFTER_SECS);
        std::time::Duration::from_secs(secs)
    }

    /// The hub this app is a device of, when one is set (without a trailing `/`).
    pub fn hub_url(&self) -> Option<String> {
        self.get(HUB_URL).map(|u| u.trim().trim_end_matches('/').to_owned()).filter(|u| !u.is_empty())
    }

    /// Whether a hub's devices may ask it to cancel a job (`devices_may_cancel`, off by default).
    pub fn devices_may_cancel(&self) -> bool {
        self.get(DEVICES_MAY_CANCEL).as_deref() == Some("on")
    }

    /// Whether a hub's devices may read kept bodies (`devices_may_read_bodies`, off by default).
    pub fn devices_may_read_bodies(&self) -> bool {
        self.get(DEVICES_MAY_READ_BODIES).as_deref() == Some("on")
    }

    /// The sound a desktop notification asks for (`sound_urgent` for an urgent one, else
    /// `sound_normal`): a freedesktop sound name, or none (off, the default).
    pub fn desktop_sound(&self, urgent: bool) -> Option<String> {
        let key = if urgent { SOUND_URGENT } else { SOUND_NORMAL };
        self.get(key).and_then(|v| parse_sound(&v).ok()).filter(|v| v != SOUND_OFF)
    }

    /// Whether jobs of this provider are discovered by listing them (`<provider>.discover`).
    pub fn discovers(&self, provider: &str) -> bool {
        self.get(&format!("{provider}.{DISCOVER}")).as_deref() == Some("on")
    }

    /// Days deliveries are kept for dedupe and inspection (never fewer than 7).
    pub fn delivery_retention_days(&self) -> i64 {
        self.get(DELIVERY_RETENTION_DAYS)
            .and_then(|v| v.parse().ok())
            .unwrap_or(MIN_DELIVERY_RETENTION_DAYS)
            .max(MIN_DELIVERY_RETENTION_DAYS)
    }

    /// Days a finished job is kept (then archived: removed with its timeline and delivered
    /// notifications; counters and daily completions stay). Never fewer than the delivery
    /// retention, so a job outlives the deliveries that name it.
    pub fn job_retention_days(&self) -> i64 {
        self.get(JOB_RETENTION_DAYS).and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_JOB_RETENTION_DAYS).max(self.delivery_retention_days())
    }
}

/// The providers read their base URLs and request timeout here.
impl ProviderConfig for Settings {
    fn get(&self, key: &str) -> Option<String> {
        Settings::get(self, key)
    }

    fn base_url(&self, provider: &str) -> Option<String> {
        Settings::base_url(self, provider)
    }
}

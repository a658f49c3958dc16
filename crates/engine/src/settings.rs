//! Stored settings (polling interval, provider base URLs, ...): the `settings` table, cached in
//! memory, and read as a typed `Snapshot` made once at each change, with every default here: a
//! reader takes a field and never parses a text. Changes apply without a restart. The keys a
//! user sets, and what each accepts, are checked when set (`api::settings`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

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

/// How long the tunnel may stay down before one alert (`tunnel::down_alert`): 5 minutes by default.
pub const TUNNEL_DOWN_ALERT_SECS: &str = "tunnel.down_alert_secs";
pub const DEFAULT_TUNNEL_DOWN_ALERT_SECS: u64 = 5 * 60;

/// `<provider>.discover`: `on` to watch every job the provider lists (see `Provider::discover`).
pub const DISCOVER: &str = "discover";
/// `<provider>.discovered_until`: jobs created before this time (ms) are not discovered: the
/// moment discovery was turned on, then moved forward by each listing.
pub const DISCOVERED_UNTIL: &str = "discovered_until";
/// `<provider>.discover_turned_on`: when discovery was last turned on (ms), kept until the first
/// listing after it, which also takes in the jobs of the week before still unfinished.
pub const DISCOVER_TURNED_ON: &str = "discover_turned_on";

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

/// Every setting the engine reads, typed, each with its default: made from the table's texts at
/// load, at each reload and at each set. A stored text that does not read as its setting (a row
/// edited by hand) counts as unset, so its default holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The stored polling interval (the reconciler's `--poll-interval` beats it), at least 5 s.
    pub poll_interval: Option<Duration>,
    /// How long a job may stay unfinished before one stuck alert, and each provider's own.
    pub stuck_threshold: Duration,
    pub stuck_threshold_of: BTreeMap<String, Duration>,
    /// A job finished within this long of its start meets the SLA.
    pub sla: Duration,
    /// How long a job must be unknown to its provider (404 at every poll) before polling gives up.
    pub abandon_after: Duration,
    /// Days deliveries are kept (at least 7), and finished jobs (at least as long).
    pub delivery_retention_days: i64,
    pub job_retention_days: i64,
    /// Where links in notifications point, when not this engine's admin API.
    pub ui_url: Option<String>,
    /// The hub this app is a device of (without a trailing `/`).
    pub hub_url: Option<String>,
    pub devices_may_cancel: bool,
    pub devices_may_read_bodies: bool,
    /// The desktop notification's sound name for urgent ones and for the others; `None`: none.
    pub sound_urgent: Option<String>,
    pub sound_normal: Option<String>,
    /// The providers whose jobs are discovered by listing them.
    pub discovers: BTreeSet<String>,
    /// How long the tunnel may stay down before one alert.
    pub tunnel_down_alert: Duration,
}

impl Snapshot {
    /// The settings `stored` says (key to stored text), defaults where it says nothing usable.
    pub fn of(stored: &HashMap<String, String>) -> Snapshot {
        let text = |key: &str| stored.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let secs = |key: &str| text(key).and_then(|v| v.parse::<u64>().ok()).map(Duration::from_secs);
        let days = |key: &str| text(key).and_then(|v| v.parse::<i64>().ok());
        let on = |key: &str| text(key) == Some("on");
        let sound = |key: &str| text(key).and_then(|v| parse_sound(v).ok()).filter(|v| v != SOUND_OFF);
        let stuck_prefix = format!("{STUCK_THRESHOLD_SECS}.");
        let delivery_retention_days = days(DELIVERY_RETENTION_DAYS).unwrap_or(MIN_DELIVERY_RETENTION_DAYS).max(MIN_DELIVERY_RETENTION_DAYS);
        Snapshot {
            poll_interval: secs(POLL_INTERVAL_SECS).map(|d| d.max(Duration::from_secs(MIN_POLL_INTERVAL_SECS))),
            stuck_threshold: secs(STUCK_THRESHOLD_SECS).unwrap_or(Duration::from_secs(DEFAULT_STUCK_THRESHOLD_SECS)),
            stuck_threshold_of: stored.keys().filter_map(|k| Some((k.strip_prefix(&stuck_prefix)?.to_owned(), secs(k)?))).collect(),
            sla: secs(SLA_SECS).unwrap_or(Duration::from_secs(DEFAULT_SLA_SECS)),
            abandon_after: secs(ABANDON_AFTER_SECS).unwrap_or(Duration::from_secs(DEFAULT_ABANDON_AFTER_SECS)),
            delivery_retention_days,
            job_retention_days: days(JOB_RETENTION_DAYS).unwrap_or(DEFAULT_JOB_RETENTION_DAYS).max(delivery_retention_days),
            ui_url: text(UI_URL).map(str::to_owned),
            hub_url: text(HUB_URL).map(|u| u.trim_end_matches('/').to_owned()).filter(|u| !u.is_empty()),
            devices_may_cancel: on(DEVICES_MAY_CANCEL),
            devices_may_read_bodies: on(DEVICES_MAY_READ_BODIES),
            sound_urgent: sound(SOUND_URGENT),
            sound_normal: sound(SOUND_NORMAL),
            discovers: stored
                .iter()
                .filter(|(_, v)| v.trim() == "on")
                .filter_map(|(k, _)| k.strip_suffix(&format!(".{DISCOVER}")).map(str::to_owned))
                .collect(),
            tunnel_down_alert: secs(TUNNEL_DOWN_ALERT_SECS).unwrap_or(Duration::from_secs(DEFAULT_TUNNEL_DOWN_ALERT_SECS)),
        }
    }
}

pub struct Settings {
    store: Store,
    cache: RwLock<HashMap<String, String>>,
    /// The cache, typed (`Snapshot::of`), made again at each change of it.
    snapshot: RwLock<Arc<Snapshot>>,
    /// Held by `set` and `reload` from their query to their cache update: a reload that read the
    /// table before a `set` committed must not put its older copy over the value `set` cached.
    refresh: tokio::sync::Mutex<()>,
}

impl Settings {
    pub async fn load(store: Store) -> Result<Settings, StoreError> {
        let cache = store.read(crate::store::settings::all).await?;
        let snapshot = RwLock::new(Arc::new(Snapshot::of(&cache)));
        Ok(Settings { store, cache: RwLock::new(cache), snapshot, refresh: tokio::sync::Mutex::new(()) })
    }

    /// Every setting, typed, as they stand now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap().clone()
    }

    /// Makes the snapshot again from the cache (after each change of it).
    fn retype(&self) {
        let snapshot = Snapshot::of(&self.cache.read().unwrap());
        *self.snapshot.write().unwrap() = Arc::new(snapshot);
    }

    /// Reads every setting again (another process of a fleet changed some).
    pub async fn reload(&self) -> Result<(), StoreError> {
        let _refresh = self.refresh.lock().await;
        let all = self.store.read(crate::store::settings::all).await?;
        *self.cache.write().unwrap() = all;
        self.retype();
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
        self.retype();
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
    pub fn stuck_threshold(&self, provider: &str) -> Duration {
        let snapshot = self.snapshot();
        snapshot.stuck_threshold_of.get(provider).copied().unwrap_or(snapshot.stuck_threshold)
    }

    /// A job finished within this long of its start meets the SLA (default 5 minutes).
    pub fn sla(&self) -> Duration {
        self.snapshot().sla
    }

    /// How long a job must be unknown to its provider (404 at every poll) before polling gives up.
    pub fn abandon_after(&self) -> Duration {
        self.snapshot().abandon_after
    }

    /// The hub this app is a device of, when one is set (without a trailing `/`).
    pub fn hub_url(&self) -> Option<String> {
        self.snapshot().hub_url.clone()
    }

    /// Whether a hub's devices may ask it to cancel a job (`devices_may_cancel`, off by default).
    pub fn devices_may_cancel(&self) -> bool {
        self.snapshot().devices_may_cancel
    }

    /// Whether a hub's devices may read kept bodies (`devices_may_read_bodies`, off by default).
    pub fn devices_may_read_bodies(&self) -> bool {
        self.snapshot().devices_may_read_bodies
    }

    /// The sound a desktop notification asks for (`sound_urgent` for an urgent one, else
    /// `sound_normal`): a freedesktop sound name, or none (off, the default).
    pub fn desktop_sound(&self, urgent: bool) -> Option<String> {
        let snapshot = self.snapshot();
        if urgent {
            snapshot.sound_urgent.clone()
        } else {
            snapshot.sound_normal.clone()
        }
    }

    /// Discovery (turned on again) watches `provider`'s jobs created from now on, and its next
    /// listing takes in those of the week before still unfinished: its finished history is not
    /// imported (one notification per old job); see `reconcile::discovery`.
    pub async fn start_discovery_afresh(&self, provider: &str) -> Result<(), StoreError> {
        let now = crate::store::job::now_ms().to_string();
        self.set(&format!("{provider}.{DISCOVERED_UNTIL}"), &now).await?;
        self.set(&format!("{provider}.{DISCOVER_TURNED_ON}"), &now).await
    }

    /// Turns discovery on for `provider` when the owner never chose (a key just set: every job
    /// of the account watched); `true` when it did.
    pub async fn discover_by_default(&self, provider: &str) -> Result<bool, StoreError> {
        if self.get(&format!("{provider}.{DISCOVER}")).is_some_and(|v| !v.trim().is_empty()) {
            return Ok(false);
        }
        self.start_discovery_afresh(provider).await?;
        self.set(&format!("{provider}.{DISCOVER}"), "on").await?;
        Ok(true)
    }

    /// Whether jobs of this provider are discovered by listing them (`<provider>.discover`).
    pub fn discovers(&self, provider: &str) -> bool {
        self.snapshot().discovers.contains(provider)
    }

    /// Days deliveries are kept for dedupe and inspection (never fewer than 7).
    pub fn delivery_retention_days(&self) -> i64 {
        self.snapshot().delivery_retention_days
    }

    /// Days a finished job is kept (then archived: removed with its timeline and delivered
    /// notifications; counters and daily completions stay). Never fewer than the delivery
    /// retention, so a job outlives the deliveries that name it.
    pub fn job_retention_days(&self) -> i64 {
        self.snapshot().job_retention_days
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn an_empty_table_is_every_default() {
        let defaults = Snapshot::of(&HashMap::new());
        assert_eq!(defaults.poll_interval, None);
        assert_eq!(defaults.stuck_threshold, Duration::from_secs(DEFAULT_STUCK_THRESHOLD_SECS));
        assert_eq!(defaults.sla, Duration::from_secs(DEFAULT_SLA_SECS));
        assert_eq!(defaults.abandon_after, Duration::from_secs(DEFAULT_ABANDON_AFTER_SECS));
        assert_eq!((defaults.delivery_retention_days, defaults.job_retention_days), (7, DEFAULT_JOB_RETENTION_DAYS));
        assert_eq!(defaults.tunnel_down_alert, Duration::from_secs(DEFAULT_TUNNEL_DOWN_ALERT_SECS));
        assert!(!defaults.devices_may_cancel && !defaults.devices_may_read_bodies && defaults.discovers.is_empty());
        assert_eq!((defaults.hub_url, defaults.ui_url, defaults.sound_urgent), (None, None, None));
    }

    #[test]
    fn stored_texts_are_typed_once_and_what_does_not_read_keeps_its_default() {
        let snapshot = Snapshot::of(&stored(&[
            (POLL_INTERVAL_SECS, "2"),
            (STUCK_THRESHOLD_SECS, "600"),
            ("stuck_threshold_secs.openai", "60"),
            ("stuck_threshold_secs.replicate", "soon"),
            (SLA_SECS, "ten"),
            (DELIVERY_RETENTION_DAYS, "30"),
            (JOB_RETENTION_DAYS, "10"),
            (HUB_URL, " https://hub.example.com/ "),
            (DEVICES_MAY_CANCEL, "on"),
            (SOUND_URGENT, "dialog-warning"),
            (SOUND_NORMAL, "off"),
            ("openai.discover", "on"),
            ("replicate.discover", "off"),
            (TUNNEL_DOWN_ALERT_SECS, "90"),
        ]));
        assert_eq!(snapshot.poll_interval, Some(Duration::from_secs(MIN_POLL_INTERVAL_SECS)), "at least 5 s");
        assert_eq!(snapshot.stuck_threshold, Duration::from_secs(600));
        assert_eq!(snapshot.stuck_threshold_of, BTreeMap::from([("openai".to_owned(), Duration::from_secs(60))]));
        assert_eq!(snapshot.sla, Duration::from_secs(DEFAULT_SLA_SECS), "a text that is no number keeps the default");
        assert_eq!((snapshot.delivery_retention_days, snapshot.job_retention_days), (30, 30), "jobs outlive their deliveries");
        assert_eq!(snapshot.hub_url.as_deref(), Some("https://hub.example.com"));
        assert!(snapshot.devices_may_cancel && !snapshot.devices_may_read_bodies);
        assert_eq!((snapshot.sound_urgent.as_deref(), snapshot.sound_normal.as_deref()), (Some("dialog-warning"), None));
        assert_eq!(snapshot.discovers, BTreeSet::from(["openai".to_owned()]));
        assert_eq!(snapshot.tunnel_down_alert, Duration::from_secs(90));
    }
}

//! Settings: read them all, change some. Each value is checked and a refusal names the field;
//! accepted changes apply at once (the scheduler restarts its wait on a new interval).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use super::{ApiContext, ApiError, ErrorBody, Routes};
use crate::settings::{self, Settings};
use crate::store::groups::{MemberNotifications, END_GRACE_SECS, MEMBER_NOTIFICATIONS};

/// `GET /api/settings` and the answer of `PUT /api/settings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct SettingsView {
    pub poll_interval_secs: u64,
    /// `--poll-interval` or NEVERMISS_POLL_INTERVAL beats the stored value.
    pub poll_interval_overridden: bool,
    pub stuck_threshold_secs: u64,
    pub sla_secs: u64,
    pub delivery_retention_days: i64,
    /// How long a job must be answered 404 at every poll before polling gives up on it
    /// (abandoned: one alert, no more polls, a webhook still finishes it). Jobs that cannot be
    /// polled at all (no status URL, an eval run) are given up at once.
    pub abandon_after_secs: u64,
    /// How long one request to a provider may take (a poll, a listing, a cancel), in seconds;
    /// default 20, at most 600.
    pub provider_timeout_secs: u64,
    /// Days a finished job is kept before it is archived (never fewer than `delivery_retention_days`).
    pub job_retention_days: i64,
    /// Where links in notifications point (a hub's public address); none: this engine's admin API.
    /// Which outcomes each channel announces is the channel's own (`/api/channels`).
    pub ui_url: Option<String>,
    /// Which of a grouped job's own notifications go out besides its group's one (`group`:
    /// none; `failures`, the default: a member that failed or needs input, at once; `every`).
    pub group_members: MemberNotifications,
    /// How long a group's end waits before it is sent (a job that joins meanwhile makes it wait
    /// for that job's end too), in seconds; default 60.
    pub group_end_grace_secs: u64,
    /// The desktop notification's sound for urgent ones (failed, needs input, stuck, ...):
    /// `off` (the default) or a freedesktop sound name (`dialog-warning`), sent as `sound-name`.
    pub sound_urgent: String,
    /// The same for the others (succeeded, canceled): `off` (the default) or a sound name
    /// (`message-new-instant`).
    pub sound_normal: String,
    pub providers: BTreeMap<String, ProviderSettings>,
    /// Every duration setting that has a value, as people write it (`30m`, `1h 30m`, `3d`), keyed
    /// as `PUT /api/settings` names it (`stuck_threshold_secs.openai`, `tunnel.down_alert_secs`):
    /// what the form shows. A PUT takes the same texts, or plain seconds.
    pub durations: BTreeMap<String, String>,
    /// Whether a hub's devices may ask it to cancel a job (off by default: only the owner does).
    pub devices_may_cancel: OnOff,
    /// Whether a hub's devices may read the bodies of kept deliveries and refused requests (off by
    /// default: only the owner does).
    pub devices_may_read_bodies: OnOff,
    /// Stored tunnel settings by key (`tunnel`, `tunnel.public_url`, ...); a variable may beat them.
    pub tunnel: BTreeMap<String, Option<String>>,
}

/// One provider's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct ProviderSettings {
    pub base_url: Option<String>,
    pub stuck_threshold_secs: Option<u64>,
    /// Only for providers that can list their jobs (Replicate): watch every job they list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub discover: Option<OnOff>,
    /// Only for providers whose signature proves only the platform (fal): the owner's account,
    /// the only one whose webhooks are taken (`owner_account`); and for those whose job list is
    /// the account's (Fireworks): the account listed. Empty while it is not known yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub account: Option<String>,
    /// What the account is for, when `account` is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub account_for: Option<AccountUse>,
}

crate::closed_set::closed_set! {
    /// What a provider's account setting is for.
    #[ts(export)]
    pub enum AccountUse {
        /// Only this account's webhooks are taken (a platform that signs for every account).
        Webhooks = "webhooks",
        /// Discovery lists this account's jobs.
        Discovery = "discovery",
    }
}

crate::closed_set::closed_set! {
    /// A choice that is on or off.
    #[ts(export)]
    pub enum OnOff {
        On = "on",
        Off = "off",
    }
}

pub fn router() -> Routes {
    Routes::new().owner("/settings", get(read).put(update))
}

#[utoipa::path(
    get, path = "/api/settings", operation_id = "get_settings", tag = "settings",
    summary = "Every setting with its value and where it comes from",
    responses((status = 200, description = "The settings", body = SettingsView))
)]
async fn read(State(ctx): State<Arc<ApiContext>>) -> Json<SettingsView> {
    Json(current(&ctx))
}

fn current(ctx: &ApiContext) -> SettingsView {
    let s = &ctx.services.settings;
    let typed = s.snapshot();
    let on_off = |on: bool| if on { OnOff::On } else { OnOff::Off };
    let providers = ctx
        .services
        .providers
        .list()
        .into_iter()
        .map(|p| {
            let name = p.name();
            let threshold = typed.stuck_threshold_of.get(name).map(|d| d.as_secs());
            let discover = p.can_discover().then(|| on_off(typed.discovers.contains(name)));
            let account_for = if p.proves_only_the_platform() {
                Some(AccountUse::Webhooks)
            } else if p.discovery_needs_account_setting() {
                Some(AccountUse::Discovery)
            } else {
                None
            };
            let account = account_for.map(|_| crate::owner_account::configured(s, name).unwrap_or_default());
            (
                name.to_owned(),
                ProviderSettings { base_url: s.base_url(name), stuck_threshold_secs: threshold, discover, account, account_for },
            )
        })
        .collect();
    let mut view = SettingsView {
        poll_interval_secs: ctx.services.reconciler.interval().as_secs(),
        poll_interval_overridden: ctx.services.reconciler.interval_overridden(),
        stuck_threshold_secs: typed.stuck_threshold.as_secs(),
        sla_secs: typed.sla.as_secs(),
        delivery_retention_days: typed.delivery_retention_days,
        abandon_after_secs: typed.abandon_after.as_secs(),
        provider_timeout_secs: crate::providers::provider_timeout(&**s).as_secs(),
        job_retention_days: typed.job_retention_days,
        ui_url: typed.ui_url.clone(),
        group_members: s.get(MEMBER_NOTIFICATIONS).as_deref().and_then(MemberNotifications::parse).unwrap_or(MemberNotifications::Failures),
        group_end_grace_secs: s
            .get(END_GRACE_SECS)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(crate::store::groups::DEFAULT_END_GRACE_SECS as u64),
        sound_urgent: typed.sound_urgent.clone().unwrap_or_else(|| settings::SOUND_OFF.into()),
        sound_normal: typed.sound_normal.clone().unwrap_or_else(|| settings::SOUND_OFF.into()),
        providers,
        durations: BTreeMap::new(),
        devices_may_cancel: on_off(typed.devices_may_cancel),
        devices_may_read_bodies: on_off(typed.devices_may_read_bodies),
        tunnel: tunnel_settings(s),
    };
    view.durations = durations_of(&view);
    view
}

/// The view's duration settings as people write them (`duration_text`).
fn durations_of(view: &SettingsView) -> BTreeMap<String, String> {
    let shown = crate::duration_text::format_secs;
    let mut out = BTreeMap::from([
        (settings::POLL_INTERVAL_SECS.to_owned(), shown(view.poll_interval_secs)),
        (settings::STUCK_THRESHOLD_SECS.to_owned(), shown(view.stuck_threshold_secs)),
        (settings::SLA_SECS.to_owned(), shown(view.sla_secs)),
        (settings::ABANDON_AFTER_SECS.to_owned(), shown(view.abandon_after_secs)),
        (crate::providers::PROVIDER_TIMEOUT_SECS.to_owned(), shown(view.provider_timeout_secs)),
        (END_GRACE_SECS.to_owned(), shown(view.group_end_grace_secs)),
    ]);
    for (name, p) in &view.providers {
        if let Some(secs) = p.stuck_threshold_secs {
            out.insert(format!("{}.{name}", settings::STUCK_THRESHOLD_SECS), shown(secs));
        }
    }
    for key in [settings::TUNNEL_DOWN_ALERT_SECS, crate::tunnel::config::SELF_TEST_QUIET_SECS] {
        if let Some(secs) = view.tunnel.get(key).cloned().flatten().and_then(|v| v.parse().ok()) {
            out.insert(key.to_owned(), shown(secs));
        }
    }
    out
}

/// The stored tunnel settings (a variable such as `NEVERMISS_TUNNEL` may beat them: the state at
/// `GET /api/tunnel` says what runs).
fn tunnel_settings(s: &Settings) -> BTreeMap<String, Option<String>> {
    use crate::tunnel::config as t;
    let keys = [
        settings::TUNNEL_DOWN_ALERT_SECS,
        t::KIND,
        t::CLOUDFLARED_PATH,
        t::CLOUDFLARED_HOSTNAME,
        t::NGROK_PATH,
        t::NGROK_DOMAIN,
        t::BORE_SERVER,
        t::PUBLIC_URL,
        t::SELF_TEST,
        t::SELF_TEST_QUIET_SECS,
    ];
    keys.iter().map(|k| ((*k).to_owned(), s.get(k).filter(|v| !v.is_empty()))).collect()
}

/// A setting's key, read once: a setting of the whole app, or one of a provider's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key<'a> {
    /// A key of the whole app (`poll_interval_secs`, `devices_may_cancel`, ...).
    App(&'a str),
    /// `stuck_threshold_secs.<provider>`.
    StuckThresholdOf(&'a str),
    /// `<provider>.discover`, for a provider that can list its jobs.
    DiscoverOf(&'a str),
    /// `<provider>.account`: the owner's account at a platform that signs for every account.
    AccountOf(&'a str),
    /// `<provider>.base_url`.
    BaseUrlOf(&'a str),
}

impl<'a> Key<'a> {
    /// `key` as one of the settings above: a provider's key only for a provider that exists
    /// (`discoverers` are those that can list their jobs); `None` for no setting.
    fn read(key: &'a str, providers: &[&str], discoverers: &[&str]) -> Option<Key<'a>> {
        let of = |provider: &'a str, known: &[&str], key: fn(&'a str) -> Key<'a>| known.contains(&provider).then(|| key(provider));
        if let Some(provider) = key.strip_prefix(&format!("{}.", settings::STUCK_THRESHOLD_SECS)) {
            return of(provider, providers, Key::StuckThresholdOf);
        }
        if let Some(provider) = key.strip_suffix(&format!(".{}", settings::DISCOVER)) {
            return of(provider, discoverers, Key::DiscoverOf);
        }
        if let Some(provider) = key.strip_suffix(".account") {
            return of(provider, providers, Key::AccountOf);
        }
        if let Some(provider) = key.strip_suffix(".base_url") {
            return of(provider, providers, Key::BaseUrlOf);
        }
        Some(Key::App(key))
    }
}

/// Checks one setting; returns the value to store or why it is refused. `discoverers` are the
/// providers that can list their jobs (`<provider>.discover`).
pub fn validate(key: &str, value: &Value, providers: &[&str], discoverers: &[&str]) -> Result<String, String> {
    let duration = |min: u64, max: u64| crate::duration_text::check(value, min, max).map(|secs| secs.to_string());
    match Key::read(key, providers, discoverers).ok_or("unknown setting")? {
        Key::StuckThresholdOf(_) => duration(60, 30 * 86_400),
        Key::DiscoverOf(_) => on_off(value),
        Key::AccountOf(_) => account(value),
        Key::BaseUrlOf(_) => base_url(value),
        Key::App(settings::TUNNEL_DOWN_ALERT_SECS) => duration(60, 7 * 86_400),
        Key::App(settings::DEVICES_MAY_CANCEL | settings::DEVICES_MAY_READ_BODIES) => on_off(value),
        Key::App(settings::SOUND_URGENT | settings::SOUND_NORMAL) => {
            settings::parse_sound(value.as_str().ok_or_else(|| "must be off or a sound name".to_owned())?)
        }
        Key::App(settings::POLL_INTERVAL_SECS) => duration(settings::MIN_POLL_INTERVAL_SECS, 86_400),
        Key::App(settings::STUCK_THRESHOLD_SECS) => duration(60, 30 * 86_400),
        Key::App(settings::SLA_SECS) => duration(1, 30 * 86_400),
        Key::App(settings::UI_URL) => ui_url(value),
        Key::App(settings::DELIVERY_RETENTION_DAYS | settings::JOB_RETENTION_DAYS) => {
            whole(value, settings::MIN_DELIVERY_RETENTION_DAYS as u64, 3650, "days")
        }
        Key::App(settings::ABANDON_AFTER_SECS) => duration(0, settings::MAX_ABANDON_AFTER_SECS),
        Key::App(MEMBER_NOTIFICATIONS) => member_notifications(value),
        Key::App(END_GRACE_SECS) => duration(0, 86_400),
        Key::App(crate::providers::PROVIDER_TIMEOUT_SECS) => duration(1, 600),
        // The tunnel's own keys (`tunnel`, `tunnel.public_url`, ...), checked by the tunnel.
        Key::App(other) => crate::tunnel::config::validate_setting(other, value).unwrap_or_else(|| Err("unknown setting".into())),
    }
}

/// A whole number from `min` to `max` (as a number or its text).
fn whole(value: &Value, min: u64, max: u64, unit: &str) -> Result<String, String> {
    let n = value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.trim().parse().ok()))
        .ok_or_else(|| format!("must be a whole number of {unit}"))?;
    if n < min {
        return Err(format!("must be at least {min} {unit}"));
    }
    if n > max {
        return Err(format!("must be at most {max} {unit}"));
    }
    Ok(n.to_string())
}

/// `on` or `off` (or a boolean).
fn on_off(value: &Value) -> Result<String, String> {
    match value {
        Value::Bool(true) => Ok("on".into()),
        Value::Bool(false) => Ok("off".into()),
        Value::String(v) if matches!(v.trim(), "on" | "off") => Ok(v.trim().to_owned()),
        _ => Err("must be on or off".into()),
    }
}

/// Where notifications' links point: an http(s) address, or empty for this engine's own.
fn ui_url(value: &Value) -> Result<String, String> {
    let url = value.as_str().ok_or("must be an http:// or https:// address, or empty")?.trim();
    if url.is_empty() {
        return Ok(String::new());
    }
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => Ok(url.trim_end_matches('/').to_owned()),
        _ => Err("must be an http:// or https:// address, or empty".into()),
    }
}

fn member_notifications(value: &Value) -> Result<String, String> {
    let names = || MemberNotifications::ALL.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ");
    value
        .as_str()
        .and_then(|v| MemberNotifications::parse(v.trim()))
        .map(|m| m.as_str().to_owned())
        .ok_or_else(|| format!("must be one of {}", names()))
}

/// The owner's account id at a platform, as the provider shows it: one line, at most 200 characters.
fn account(value: &Value) -> Result<String, String> {
    let account = value.as_str().unwrap_or("").trim();
    if account.chars().count() <= 200 && !account.chars().any(crate::plain_text::is_layout_control) {
        Ok(account.to_owned())
    } else {
        Err("must be the account's id as the provider shows it (at most 200 characters, one line)".into())
    }
}

/// A provider's API base URL: http(s), or empty for the provider's own.
fn base_url(value: &Value) -> Result<String, String> {
    let url = value.as_str().unwrap_or("").trim();
    if url.is_empty() || url.starts_with("http://") || url.starts_with("https://") {
        Ok(url.trim_end_matches('/').to_owned())
    } else {
        Err("must be an http(s) URL".into())
    }
}

/// `PUT /api/settings {"key": value, ...}`: all or nothing. 400 with `{"errors": {key: reason}}`.
#[utoipa::path(
    put, path = "/api/settings", operation_id = "put_settings", tag = "settings",
    summary = "Change settings",
    description = "A JSON object of setting keys (the book's configuration page lists them) to values; all are checked before any is saved.",
    request_body(content = BTreeMap<String, serde_json::Value>, description = "Setting keys to their new values", example = json!({"poll_interval_secs": 60, "replicate.discover": "on"})),
    responses((status = 200, description = "The settings after the change", body = SettingsView), (status = 400, description = "Refused: `errors` names each refused key", body = super::ErrorBody))
)]
async fn update(
    State(ctx): State<Arc<ApiContext>>,
    body: Result<Json<BTreeMap<String, Value>>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(changes) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let providers: Vec<&str> = ctx.services.providers.names();
    let discoverers: Vec<&str> = ctx.services.providers.list().iter().filter(|p| p.can_discover()).map(|p| p.name()).collect();
    let mut accepted = Vec::new();
    let mut errors = BTreeMap::new();
    for (key, value) in &changes {
        match validate(key, value, &providers, &discoverers) {
            Ok(v) => accepted.push((key.clone(), v)),
            Err(reason) => {
                errors.insert(key.clone(), reason);
            }
        }
    }
    // A list under the owner's account cannot be asked before the account is known.
    for (key, value) in &accepted {
        let Some(provider) = key.strip_suffix(&format!(".{}", settings::DISCOVER)) else { continue };
        let waits =
            ctx.services.providers.get(provider).is_some_and(|p| crate::owner_account::discovery_waits(&ctx.services.settings, p.as_ref()));
        let account_key = crate::owner_account::setting_key(provider);
        let account_given = accepted.iter().any(|(k, v)| *k == account_key && !v.is_empty());
        if value == "on" && waits && !account_given {
            errors.insert(
                key.clone(),
                format!("{provider} lists the jobs of an account: set {account_key} (your {provider} account id) first"),
            );
        }
    }
    // Nor can the account be cleared under a list that needs it (unless a variable names one).
    for (key, value) in &accepted {
        let Some(provider) = key.strip_suffix(".account") else { continue };
        let Some(adapter) = ctx.services.providers.get(provider) else { continue };
        let discover_key = format!("{provider}.{}", settings::DISCOVER);
        let stays_on = match accepted.iter().find(|(k, _)| *k == discover_key) {
            Some((_, v)) => v == "on",
            None => ctx.services.settings.discovers(provider),
        };
        let from_variable = std::env::var(crate::providers::variable(provider, "ACCOUNT")).is_ok_and(|v| !v.trim().is_empty());
        if value.is_empty() && stays_on && adapter.discovery_needs_account_setting() && !from_variable {
            errors.insert(key.clone(), format!("{provider}'s discovery lists this account's jobs: turn {discover_key} off first"));
        }
    }
    if !errors.is_empty() {
        return Ok((StatusCode::BAD_REQUEST, Json(ErrorBody::fields("some settings were refused", errors))).into_response());
    }
    let settings: &Settings = &ctx.services.settings;
    for (key, value) in &accepted {
        if let Some(provider) = key.strip_suffix(&format!(".{}", settings::DISCOVER)) {
            if value == "on" && !settings.discovers(provider) {
                settings.start_discovery_afresh(provider).await?;
            }
        }
        settings.set(key, value).await?;
    }
    if accepted.iter().any(|(k, _)| k == settings::POLL_INTERVAL_SECS) {
        ctx.services.reconciler.interval_changed();
    }
    if accepted.iter().any(|(k, _)| k == crate::tunnel::config::KIND || k.starts_with("tunnel.")) {
        ctx.services.tunnel.reconfigure();
    }
    Ok(Json(current(&ctx)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A key is read once as the app's or a provider's: a provider's key only for a provider that
    /// exists (discovery only for one that lists its jobs), the tunnel's by the tunnel, anything
    /// else unknown.
    #[test]
    fn each_key_is_one_setting_and_a_providers_only_for_a_known_provider() {
        let check = |key: &str, v: Value| validate(key, &v, &["openai", "generic"], &["openai"]);
        assert_eq!(check("stuck_threshold_secs.openai", json!("10m")), Ok("600".into()));
        assert_eq!(check("stuck_threshold_secs.nope", json!("10m")), Err("unknown setting".into()));
        assert_eq!(check("provider_timeout_secs", json!("30s")), Ok("30".into()));
        assert!(check("provider_timeout_secs", json!(0)).is_err() && check("provider_timeout_secs", json!("11m")).is_err());
        assert_eq!(check("group_end_grace_secs", json!(0)), Ok("0".into()));
        assert_eq!(check("group_end_grace_secs", json!("2m")), Ok("120".into()));
        assert_eq!(check("openai.discover", json!(true)), Ok("on".into()));
        assert_eq!(check("generic.discover", json!("on")), Err("unknown setting".into()), "generic lists no jobs");
        assert_eq!(check("generic.base_url", json!("http://127.0.0.1:9/")), Ok("http://127.0.0.1:9".into()));
        assert_eq!(check("generic.base_url", json!("ftp://x")), Err("must be an http(s) URL".into()));
        assert_eq!(check("openai.account", json!(" acct-1 ")), Ok("acct-1".into()));
        assert_eq!(check(settings::TUNNEL_DOWN_ALERT_SECS, json!("2m")), Ok("120".into()), "before the tunnel's own keys");
        assert_eq!(check(crate::tunnel::config::KIND, json!("bore")), Ok("bore".into()));
        assert_eq!(check("tunnel.nope", json!("x")), Err("unknown setting".into()));
        assert_eq!(check("nope", json!("x")), Err("unknown setting".into()));
    }

    /// `job_retention_days` is checked like `delivery_retention_days`: whole days, 7 to 3650.
    #[test]
    fn job_retention_is_whole_days_between_7_and_3650() {
        let check = |v: Value| validate(settings::JOB_RETENTION_DAYS, &v, &[], &[]);
        assert_eq!(check(json!(90)), Ok("90".into()));
        assert_eq!(check(json!(" 30 ")), Ok("30".into()));
        assert_eq!(check(json!(6)), Err("must be at least 7 days".into()));
        assert_eq!(check(json!(3651)), Err("must be at most 3650 days".into()));
        assert_eq!(check(json!("a month")), Err("must be a whole number of days".into()));
    }

    /// Every duration setting takes what people write (`30m`, `3d`) or plain seconds, stores
    /// seconds, and says its bounds in the same units.
    #[test]
    fn duration_settings_take_units_or_seconds_and_store_seconds() {
        let check = |key: &str, v: Value| validate(key, &v, &["openai"], &[]);
        assert_eq!(check(settings::STUCK_THRESHOLD_SECS, json!("30m")), Ok("1800".into()));
        assert_eq!(check(settings::STUCK_THRESHOLD_SECS, json!(1800)), Ok("1800".into()));
        assert_eq!(check(settings::ABANDON_AFTER_SECS, json!("3d")), Ok("259200".into()));
        assert_eq!(check(settings::POLL_INTERVAL_SECS, json!("2s")), Err("must be at least 5s".into()));
        assert_eq!(check(settings::SLA_SECS, json!("31d")), Err("must be at most 30d".into()));
        assert_eq!(check("stuck_threshold_secs.openai", json!("6h")), Ok("21600".into()));
        assert_eq!(check(settings::TUNNEL_DOWN_ALERT_SECS, json!("10m")), Ok("600".into()));
        assert_eq!(check(crate::tunnel::config::SELF_TEST_QUIET_SECS, json!("15m")), Ok("900".into()));
        assert!(check(settings::STUCK_THRESHOLD_SECS, json!("later")).unwrap_err().contains("30m"));
    }

    /// A sound is off (the default; an empty text too) or a freedesktop sound name.
    #[test]
    fn sounds_are_off_or_a_sound_name() {
        let check = |key: &str, v: Value| validate(key, &v, &[], &[]);
        assert_eq!(check(settings::SOUND_URGENT, json!("dialog-warning")), Ok("dialog-warning".into()));
        assert_eq!(check(settings::SOUND_NORMAL, json!(" message-new-instant ")), Ok("message-new-instant".into()));
        assert_eq!(check(settings::SOUND_NORMAL, json!("")), Ok("off".into()));
        assert_eq!(check(settings::SOUND_URGENT, json!("off")), Ok("off".into()));
        for bad in [json!("Dialog Warning"), json!("/usr/share/sounds/x.oga"), json!("-x"), json!(true), json!("a".repeat(65))] {
            assert!(check(settings::SOUND_URGENT, bad.clone()).unwrap_err().contains("sound name"), "{bad}");
        }
    }

    /// `devices_may_cancel` is on or off (a boolean or the word).
    #[test]
    fn devices_may_cancel_is_on_or_off() {
        let check = |v: Value| validate(settings::DEVICES_MAY_CANCEL, &v, &[], &[]);
        assert_eq!(check(json!(true)), Ok("on".into()));
        assert_eq!(check(json!("off")), Ok("off".into()));
        assert_eq!(check(json!("yes")), Err("must be on or off".into()));
    }
}

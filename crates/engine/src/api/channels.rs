//! `/api/channels` (contract §5): list, create or change, remove and test the channels
//! notifications go to. Secret fields (`secret`, `token`, `password`, the `url` of Slack and
//! Discord) go to the secret store and are never answered back: a channel says only which of
//! them are set.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{ApiContext, ApiError, ErrorBody, Routes};
use crate::channels::email::{self, EmailConfig};
use crate::channels::senders::{email_config, secret_fields};
use crate::channels::{Announce, ChannelKind, EmailTls};
use crate::job::{now_ms, rfc3339};
use crate::notification::Message;
use crate::secrets::Named;
use crate::store::channels::{self as stored, ChannelRow, Quiet, DEFAULT_SUMMARY_AFTER};
use crate::store::{counters, ChannelTally};

/// CHANNEL: a channel's settings, its non-secret fields, which secrets are set, and its tallies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct Channel {
    pub name: String,
    pub kind: ChannelKind,
    pub enabled: bool,
    /// The outcomes it announces.
    pub outcomes: Vec<Announce>,
    /// More due notifications at once than this become one summary (0: never).
    pub summary_after: i64,
    pub quiet_hours: Option<QuietHours>,
    /// Its kind's non-secret fields.
    #[serde(flatten)]
    #[ts(flatten)]
    pub fields: ChannelFields,
    /// The secret fields that are set (their values are never answered).
    pub secrets_set: Vec<String>,
    pub enqueued: i64,
    pub delivered: i64,
    pub failed: i64,
    pub pending: i64,
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
    /// Its last send failed, and nothing went through since.
    pub failing: bool,
    /// A device's last connection to this hub.
    pub last_seen_at: Option<String>,
}

/// A kind's fields, as a channel answers them and as `PUT` takes them: `url` (ntfy's topic, the
/// webhook's address; Slack's and Discord's, a secret, only in a `PUT`), and an e-mail channel's
/// server and addresses. A field a kind does not have is left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
#[ts(export, optional_fields)]
pub struct ChannelFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<EmailTls>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// One address, or several separated by commas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// Quiet hours, in this machine's local time ("22:00" to "07:00"): notifications wait until they
/// end; an urgent one (failed, stuck, needs input, the tunnel down) breaks through when allowed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct QuietHours {
    pub from: String,
    pub to: String,
    #[serde(default = "yes")]
    pub urgent_breaks_through: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct ChannelList {
    pub channels: Vec<Channel>,
}

/// The body of `PUT /api/channels/{name}`. A secret field left out keeps the stored one; an
/// empty one removes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export, optional_fields)]
pub struct ChannelInput {
    pub kind: ChannelKind,
    /// On unless said otherwise.
    pub enabled: Option<bool>,
    pub outcomes: Option<Vec<Announce>>,
    pub summary_after: Option<i64>,
    pub quiet_hours: Option<QuietHours>,
    #[serde(flatten)]
    #[ts(flatten)]
    pub fields: ChannelFields,
    /// The secret fields: a webhook's `secret`, an ntfy `token`, an SMTP `password`.
    pub secret: Option<String>,
    pub token: Option<String>,
    pub password: Option<String>,
}

/// What `POST /api/channels/{name}/test` answers: whether the channel took it, and what it said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct ChannelTestResult {
    pub ok: bool,
    pub answer: String,
}

/// What `DELETE /api/channels/{name}` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct ChannelRemoved {
    pub removed: String,
    /// Its pending notifications, dropped with it.
    pub dropped: i64,
}

pub fn router() -> Routes {
    Routes::new()
        .owner("/channels", get(list))
        .owner("/channels/{name}", axum::routing::put(put).delete(remove))
        .owner("/channels/{name}/test", post(test))
}

/// A channel name: lower-case letters, digits, `-` and `_`, at most 40 (it names secrets and tallies).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.len() <= 40
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

async fn list(State(ctx): State<Arc<ApiContext>>) -> Result<Json<ChannelList>, ApiError> {
    Ok(Json(ChannelList { channels: all(&ctx).await? }))
}

/// Every channel as the API shows it.
pub async fn all(ctx: &ApiContext) -> Result<Vec<Channel>, ApiError> {
    let (rows, tallies, pending) =
        ctx.services.store.read(|db| Ok((stored::all(db)?, counters::of_channels(db)?, stored::pending(db)?))).await?;
    let secrets = ctx.services.secrets.clone();
    let with_secrets = tokio::task::spawn_blocking(move || {
        rows.into_iter()
            .map(|row| {
                let set: Vec<String> = secret_fields(row.kind)
                    .iter()
                    .filter(|field| secrets.source_named(&Named::channel(&row.name, field)).is_some())
                    .map(|field| (*field).to_owned())
                    .collect();
                (row, set)
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|_| ApiError::BadRequest("the secret store stopped".into()))?;
    Ok(with_secrets
        .into_iter()
        .map(|(row, secrets_set)| {
            let tally = |t: ChannelTally| tallies.get(&row.name).and_then(|m| m.get(&t)).copied().unwrap_or(0);
            view(
                &row,
                secrets_set,
                tally(ChannelTally::Enqueued),
                tally(ChannelTally::Delivered),
                tally(ChannelTally::Failed),
                pending.get(&row.name).copied().unwrap_or(0),
            )
        })
        .collect())
}

fn view(row: &ChannelRow, secrets_set: Vec<String>, enqueued: i64, delivered: i64, failed: i64, pending: i64) -> Channel {
    let text = |field: &str| row.field(field).filter(|v| !v.is_empty()).map(str::to_owned);
    let secret_url = secret_fields(row.kind).contains(&"url");
    Channel {
        name: row.name.clone(),
        kind: row.kind,
        enabled: row.enabled,
        outcomes: row.outcomes.clone(),
        summary_after: row.summary_after,
        quiet_hours: row.quiet.map(|q| QuietHours { from: clock(q.from), to: clock(q.to), urgent_breaks_through: q.urgent_breaks_through }),
        fields: ChannelFields {
            url: if secret_url { None } else { text("url") },
            host: text("host"),
            port: row.config.get("port").and_then(serde_json::Value::as_u64).and_then(|p| u16::try_from(p).ok()),
            tls: row.field("tls").and_then(EmailTls::parse),
            username: text("username"),
            from: text("from"),
            to: text("to"),
        },
        secrets_set,
        enqueued,
        delivered,
        failed,
        pending,
        last_error: row.last_error.clone(),
        last_error_at: row.last_error_at.map(rfc3339),
        failing: row.failing(),
        last_seen_at: row.last_seen_at.map(rfc3339),
    }
}

/// "HH:MM" from minutes after midnight.
fn clock(minutes: i64) -> String {
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// Minutes after midnight from "HH:MM".
fn parse_clock(text: &str) -> Option<i64> {
    let (h, m) = text.trim().split_once(':')?;
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    ((0..24).contains(&h) && (0..60).contains(&m) && m.to_string().len() <= 2).then_some(h * 60 + m)
}

fn http_url(text: &str) -> Result<String, String> {
    let url = text.trim();
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => Ok(url.to_owned()),
        _ => Err("must be an http:// or https:// address".into()),
    }
}

/// A Standard Webhooks secret: `whsec_` and base64.
fn check_whsec(secret: &str) -> Result<(), String> {
    use base64::Engine;
    let key = secret.strip_prefix("whsec_").ok_or("must start with whsec_ (a Standard Webhooks secret)")?;
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(bytes) if bytes.len() >= 16 => Ok(()),
        Ok(_) => Err("is too short: at least 16 bytes after whsec_".into()),
        Err(_) => Err("must be base64 after whsec_".into()),
    }
}

async fn put(
    State(ctx): State<Arc<ApiContext>>,
    Path(name): Path<String>,
    body: Result<Json<ChannelInput>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(input) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if !valid_name(&name) {
        return Err(ApiError::BadRequest("a channel name is lower-case letters, digits, - and _ (at most 40)".into()));
    }
    let existing = {
        let name = name.clone();
        ctx.services.store.read(move |db| stored::get(db, &name)).await?
    };
    let mut errors: BTreeMap<String, String> = BTreeMap::new();
    let is_device = existing.as_ref().is_some_and(|c| c.kind == ChannelKind::Device);
    if input.kind == ChannelKind::Device && !is_device {
        errors.insert("kind".into(), "devices are added on the hub with `nevermiss devices add NAME`".into());
    }
    if is_device && input.kind != ChannelKind::Device {
        errors.insert("kind".into(), "a device stays a device (`nevermiss devices revoke NAME` removes it)".into());
    }
    let mut row = existing.clone().unwrap_or_else(|| ChannelRow::new(&name, input.kind));
    row.kind = input.kind;
    row.enabled = input.enabled.unwrap_or(true);
    row.outcomes = input.outcomes.clone().unwrap_or_else(|| Announce::ALL.to_vec());
    row.summary_after = input.summary_after.unwrap_or(DEFAULT_SUMMARY_AFTER);
    if !(0..=10_000).contains(&row.summary_after) {
        errors.insert("summary_after".into(), "must be between 0 (never summarize) and 10000".into());
    }
    row.quiet = match &input.quiet_hours {
        None => None,
        Some(q) => match (parse_clock(&q.from), parse_clock(&q.to)) {
            (Some(from), Some(to)) if from != to => Some(Quiet { from, to, urgent_breaks_through: q.urgent_breaks_through }),
            (Some(_), Some(_)) => {
                errors.insert("quiet_hours".into(), "must start and end at different times".into());
                None
            }
            _ => {
                errors.insert("quiet_hours".into(), "from and to must be times like 22:00 and 07:00".into());
                None
            }
        },
    };
    row.config = serde_json::Map::new();
    // Which secrets this PUT stores (Some: set or, when empty, remove).
    let mut secrets: Vec<(&'static str, Option<String>)> = Vec::new();
    // The secrets already stored for this channel (read off the runtime: the keychain blocks).
    let already_set: Vec<&'static str> = {
        let (secrets, channel, kind) = (ctx.services.secrets.clone(), name.clone(), input.kind);
        tokio::task::spawn_blocking(move || {
            secret_fields(kind).iter().copied().filter(|field| secrets.source_named(&Named::channel(&channel, field)).is_some()).collect()
        })
        .await
        .map_err(|_| ApiError::BadRequest("the secret store stopped".into()))?
    };
    let same_kind = existing.as_ref().is_some_and(|c| c.kind == input.kind);
    let stored_secret = |field: &'static str| same_kind && already_set.contains(&field);
    let mut secret =
        |field: &'static str, given: &Option<String>, required: bool, errors: &mut BTreeMap<String, String>| -> Option<String> {
            match given.as_deref().map(str::trim) {
                Some("") => {
                    secrets.push((field, None));
                    if required {
                        errors.insert(field.into(), "is required".into());
                    }
                    None
                }
                Some(value) => {
                    secrets.push((field, Some(value.to_owned())));
                    Some(value.to_owned())
                }
                None => {
                    if required && !stored_secret(field) {
                        errors.insert(field.into(), "is required".into());
                    }
                    None
                }
            }
        };
    let required_text = |field: &str, given: &Option<String>, errors: &mut BTreeMap<String, String>| -> Option<String> {
        match given.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            Some(v) => Some(v.to_owned()),
            None => {
                errors.insert(field.into(), "is required".into());
                None
            }
        }
    };
    match input.kind {
        ChannelKind::Desktop | ChannelKind::Device => {}
        ChannelKind::Webhook => {
            if let Some(url) = required_text("url", &input.fields.url, &mut errors) {
                match http_url(&url) {
                    Ok(url) => {
                        row.config.insert("url".into(), url.into());
                    }
                    Err(e) => {
                        errors.insert("url".into(), e);
                    }
                }
            }
            if let Some(given) = secret("secret", &input.secret, true, &mut errors) {
                if let Err(e) = check_whsec(&given) {
                    errors.insert("secret".into(), e);
                }
            }
        }
        ChannelKind::Ntfy => {
            if let Some(url) = required_text("url", &input.fields.url, &mut errors) {
                match http_url(&url) {
                    Ok(url) if reqwest::Url::parse(&url).is_ok_and(|u| !u.path().trim_matches('/').is_empty()) => {
                        row.config.insert("url".into(), url.into());
                    }
                    Ok(_) => {
                        errors.insert("url".into(), "must name the topic, like https://ntfy.sh/my-jobs".into());
                    }
                    Err(e) => {
                        errors.insert("url".into(), e);
                    }
                }
            }
            secret("token", &input.token, false, &mut errors);
        }
        ChannelKind::Slack | ChannelKind::Discord => {
            if let Some(given) = secret("url", &input.fields.url, true, &mut errors) {
                if let Err(e) = http_url(&given) {
                    errors.insert("url".into(), e);
                }
            }
        }
        ChannelKind::Email => {
            let tls = input.fields.tls.unwrap_or(EmailTls::Starttls);
            let port = input.fields.port.unwrap_or(tls.default_port());
            if port == 0 {
                errors.insert("port".into(), "must be a port between 1 and 65535".into());
            }
            let host = required_text("host", &input.fields.host, &mut errors);
            let from = required_text("from", &input.fields.from, &mut errors);
            let to = required_text("to", &input.fields.to, &mut errors);
            if let (Some(host), Some(from), Some(to)) = (host, from, to) {
                let config = EmailConfig {
                    host: host.clone(),
                    port,
                    tls,
                    username: input.fields.username.clone().filter(|u| !u.trim().is_empty()),
                    from: from.clone(),
                    to: email::recipients(&to),
                };
                if let Err(e) = email::validate(&config) {
                    // "from: ...", "to: ...": the field leads the reason.
                    let (field, reason) = e.0.split_once(": ").map(|(f, r)| (f.to_owned(), r.to_owned())).unwrap_or(("to".into(), e.0));
                    errors.insert(field, reason);
                }
                row.config.insert("host".into(), host.into());
                row.config.insert("from".into(), from.into());
                row.config.insert("to".into(), to.into());
            }
            row.config.insert("port".into(), port.into());
            row.config.insert("tls".into(), tls.as_str().into());
            if let Some(user) = input.fields.username.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
                row.config.insert("username".into(), user.into());
            }
            secret("password", &input.password, false, &mut errors);
        }
    }
    if !errors.is_empty() {
        return Ok((StatusCode::BAD_REQUEST, Json(ErrorBody::fields("the channel was refused", errors))).into_response());
    }
    // Secrets first: a channel is never saved pointing at a secret that was not stored.
    let store_secrets = ctx.services.secrets.clone();
    let channel_name = name.clone();
    let stored_secrets = tokio::task::spawn_blocking(move || {
        for (field, value) in &secrets {
            if let Err(e) = store_secrets.set_named(&Named::channel(&channel_name, field), value.as_deref()) {
                return Err((*field, e));
            }
        }
        Ok(())
    })
    .await
    .map_err(|_| ApiError::BadRequest("the secret store stopped".into()))?;
    if let Err((field, e)) = stored_secrets {
        tracing::warn!(channel = %name, field, error = %e, "cannot store a channel's secret");
        let errors = BTreeMap::from([(field.to_owned(), "cannot be stored: the secret store refused it (see the log)".to_owned())]);
        return Ok((StatusCode::SERVICE_UNAVAILABLE, Json(ErrorBody::fields("the secret store refused it", errors))).into_response());
    }
    let saved = row.clone();
    ctx.services
        .store
        .write(move |tx| {
            let now = now_ms();
            stored::put(tx, &saved, now)?;
            // Whatever waited (a retry, the channel's outage, quiet hours) is tried again with
            // the new settings.
            stored::outage_over(tx, &saved.name)?;
            crate::store::outbox::due_now(tx, &saved.name, now)
        })
        .await?;
    ctx.services.outbox.wake();
    tracing::info!(channel = %name, kind = %row.kind, enabled = row.enabled, "channel saved");
    let channel = all(&ctx).await?.into_iter().find(|c| c.name == name).ok_or_else(|| ApiError::NotFound("the channel is gone".into()))?;
    ctx.services.changes.metrics_changed();
    Ok(Json(channel).into_response())
}

async fn remove(State(ctx): State<Arc<ApiContext>>, Path(name): Path<String>) -> Result<Json<ChannelRemoved>, ApiError> {
    let kind = {
        let name = name.clone();
        ctx.services.store.read(move |db| stored::get(db, &name)).await?.map(|c| c.kind)
    };
    let Some(kind) = kind else {
        return Err(ApiError::NotFound(format!("no channel {name:?}")));
    };
    let dropped = {
        let name = name.clone();
        ctx.services.store.write(move |tx| stored::delete(tx, &name)).await?
    };
    let Some(dropped) = dropped else {
        return Err(ApiError::NotFound(format!("no channel {name:?}")));
    };
    let secrets = ctx.services.secrets.clone();
    let channel = name.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for field in secret_fields(kind) {
            if let Err(e) = secrets.set_named(&Named::channel(&channel, field), None) {
                tracing::warn!(%channel, field, error = %e, "cannot forget a removed channel's secret");
            }
        }
    })
    .await;
    tracing::info!(channel = %name, dropped, "channel removed");
    ctx.services.changes.metrics_changed();
    Ok(Json(ChannelRemoved { removed: name, dropped: dropped as i64 }))
}

async fn test(State(ctx): State<Arc<ApiContext>>, Path(name): Path<String>) -> Result<Json<ChannelTestResult>, ApiError> {
    let row = {
        let name = name.clone();
        ctx.services.store.read(move |db| stored::get(db, &name)).await?
    };
    let Some(row) = row else {
        return Err(ApiError::NotFound(format!("no channel {name:?}")));
    };
    if row.kind == ChannelKind::Email {
        if let Err(e) = email_config(&row) {
            return Ok(Json(ChannelTestResult { ok: false, answer: e.0 }));
        }
    }
    let answered = ctx.services.outbox.channels().send(&row, &Message::Test { channel: &row.name }).await;
    Ok(Json(match answered {
        Ok(answer) => ChannelTestResult { ok: true, answer },
        Err(e) => ChannelTestResult { ok: false, answer: e.0 },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_clocks() {
        assert!(valid_name("phone"));
        assert!(valid_name("ops-hook_2"));
        assert!(!valid_name("Phone"));
        assert!(!valid_name("a.b"));
        assert!(!valid_name("-x"));
        assert!(!valid_name(""));
        assert!(!valid_name(&"x".repeat(41)));
        assert_eq!(parse_clock("22:00"), Some(22 * 60));
        assert_eq!(parse_clock("7:05"), Some(7 * 60 + 5));
        assert_eq!(parse_clock("24:00"), None);
        assert_eq!(parse_clock("12:60"), None);
        assert_eq!(parse_clock("noon"), None);
        assert_eq!(clock(7 * 60 + 5), "07:05");
        assert!(check_whsec("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        assert!(check_whsec("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(check_whsec("whsec_!!!").is_err());
    }
}

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
use crate::channels::config::{check_secret, secret_fields, ChannelConfig, EmailConfig, FieldError, NtfyConfig, Problem, WebhookConfig};
use crate::channels::EmailTls;
use crate::notification::Message;
use crate::secrets::Named;
use crate::store::channels::{self as stored, Announce, ChannelKind, ChannelRow, Quiet, DEFAULT_SUMMARY_AFTER};
use crate::store::counters::{self, ChannelTally};
use crate::store::job::{now_ms, rfc3339};

/// CHANNEL: a channel's settings, its non-secret fields, which secrets are set, and its tallies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct ChannelList {
    pub channels: Vec<Channel>,
}

/// The body of `PUT /api/channels/{name}`. A secret field left out keeps the stored one; an
/// empty one removes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct ChannelTestResult {
    pub ok: bool,
    pub answer: String,
}

/// What `DELETE /api/channels/{name}` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
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

#[utoipa::path(
    get, path = "/api/channels", operation_id = "list_channels", tag = "channels",
    summary = "Every notification channel, with its tallies",
    description = "Secret fields are never answered: `secrets_set` names those that are set.",
    responses((status = 200, description = "The channels", body = ChannelList))
)]
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
                    .filter(|field| secrets.source_named(&Named::channel(&row.name, field.name)).is_some())
                    .map(|field| field.name.to_owned())
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
    Channel {
        name: row.name.clone(),
        kind: row.kind,
        enabled: row.enabled,
        outcomes: row.outcomes.clone(),
        summary_after: row.summary_after,
        quiet_hours: row.quiet.map(|q| QuietHours { from: clock(q.from), to: clock(q.to), urgent_breaks_through: q.urgent_breaks_through }),
        fields: fields_of(row),
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

/// A stored channel's non-secret fields as the API answers them (none when its row cannot be
/// read: its sends say why).
fn fields_of(row: &ChannelRow) -> ChannelFields {
    let text = |value: &str| Some(value.trim()).filter(|v| !v.is_empty()).map(str::to_owned);
    match ChannelConfig::of(row) {
        Ok(ChannelConfig::Webhook(WebhookConfig { url }) | ChannelConfig::Ntfy(NtfyConfig { url })) => {
            ChannelFields { url: text(&url), ..ChannelFields::default() }
        }
        Ok(ChannelConfig::Email(email)) => ChannelFields {
            host: text(&email.host),
            port: Some(email.port()),
            tls: Some(email.tls),
            username: email.username.as_deref().and_then(text),
            from: text(&email.from),
            to: text(&email.to),
            url: None,
        },
        Ok(_) | Err(_) => ChannelFields::default(),
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

/// Why a `PUT` refused a channel, field by field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Refusal {
    #[error("devices are added on the hub with `nevermiss devices add NAME`")]
    NewDevice,
    #[error("a device stays a device (`nevermiss devices revoke NAME` removes it)")]
    DeviceStays,
    #[error("must be between 0 (never summarize) and 10000")]
    SummaryAfter,
    #[error("must start and end at different times")]
    QuietAllDay,
    #[error("from and to must be times like 22:00 and 07:00")]
    QuietClock,
    #[error("{}", .0.problem)]
    Field(FieldError),
}

impl Refusal {
    fn field(&self) -> &'static str {
        match self {
            Refusal::NewDevice | Refusal::DeviceStays => "kind",
            Refusal::SummaryAfter => "summary_after",
            Refusal::QuietAllDay | Refusal::QuietClock => "quiet_hours",
            Refusal::Field(e) => e.field,
        }
    }
}

/// What a `PUT` saves: the row, and each secret it sets (Some) or removes (None).
#[derive(Debug)]
struct Change {
    row: ChannelRow,
    secrets: Vec<(&'static str, Option<String>)>,
}

/// The typed configuration a `PUT` gives (trimmed; what it leaves out takes its default).
fn config_of(kind: ChannelKind, fields: &ChannelFields) -> ChannelConfig {
    let text = |value: &Option<String>| value.as_deref().map(str::trim).unwrap_or_default().to_owned();
    match kind {
        ChannelKind::Desktop => ChannelConfig::Desktop,
        ChannelKind::Device => ChannelConfig::Device,
        ChannelKind::Webhook => ChannelConfig::Webhook(WebhookConfig { url: text(&fields.url) }),
        ChannelKind::Ntfy => ChannelConfig::Ntfy(NtfyConfig { url: text(&fields.url) }),
        ChannelKind::Slack => ChannelConfig::Slack,
        ChannelKind::Discord => ChannelConfig::Discord,
        ChannelKind::Email => ChannelConfig::Email(EmailConfig {
            host: text(&fields.host),
            port: fields.port,
            tls: fields.tls.unwrap_or_default(),
            username: Some(text(&fields.username)).filter(|u| !u.is_empty()),
            from: text(&fields.from),
            to: text(&fields.to),
        }),
    }
}

/// Checks a `PUT` against the channel it replaces (`existing`) and the secrets already stored
/// for it (`already_set`): every field that is wrong, or the row and secrets to save.
fn check(name: &str, input: ChannelInput, existing: Option<ChannelRow>, already_set: &[&str]) -> Result<Change, Vec<Refusal>> {
    let mut refusals = Vec::new();
    let was_device = existing.as_ref().is_some_and(|c| c.kind == ChannelKind::Device);
    match (was_device, input.kind == ChannelKind::Device) {
        (false, true) => refusals.push(Refusal::NewDevice),
        (true, false) => refusals.push(Refusal::DeviceStays),
        _ => {}
    }
    let summary_after = input.summary_after.unwrap_or(DEFAULT_SUMMARY_AFTER);
    if !(0..=10_000).contains(&summary_after) {
        refusals.push(Refusal::SummaryAfter);
    }
    let quiet = input.quiet_hours.as_ref().and_then(|q| match (parse_clock(&q.from), parse_clock(&q.to)) {
        (Some(from), Some(to)) if from != to => Some(Quiet { from, to, urgent_breaks_through: q.urgent_breaks_through }),
        (Some(_), Some(_)) => {
            refusals.push(Refusal::QuietAllDay);
            None
        }
        _ => {
            refusals.push(Refusal::QuietClock);
            None
        }
    });
    let config = config_of(input.kind, &input.fields);
    if let Err(errors) = config.validate() {
        refusals.extend(errors.0.into_iter().map(Refusal::Field));
    }
    // A secret counts as stored only for a channel of the same kind.
    let stored = if existing.as_ref().is_some_and(|c| c.kind == input.kind) { already_set } else { &[] };
    let secrets = secret_changes(&input, stored, &mut refusals);
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let row = ChannelRow {
        kind: input.kind,
        enabled: input.enabled.unwrap_or(true),
        outcomes: input.outcomes.unwrap_or_else(|| Announce::ALL.to_vec()),
        summary_after,
        quiet,
        config: config.to_stored(),
        ..existing.unwrap_or_else(|| ChannelRow::new(name, input.kind))
    };
    Ok(Change { row, secrets })
}

/// The secrets a `PUT` sets (Some) or removes (None, given empty), each checked; a required one
/// neither given nor `stored` is refused.
fn secret_changes(input: &ChannelInput, stored: &[&str], refusals: &mut Vec<Refusal>) -> Vec<(&'static str, Option<String>)> {
    let mut changes = Vec::new();
    for field in secret_fields(input.kind) {
        let given = match field.name {
            "secret" => input.secret.as_deref(),
            "token" => input.token.as_deref(),
            "password" => input.password.as_deref(),
            "url" => input.fields.url.as_deref(),
            _ => None,
        };
        let missing = Refusal::Field(FieldError::new(field.name, Problem::Required));
        match given.map(str::trim) {
            Some("") => {
                changes.push((field.name, None));
                refusals.extend(field.required.then_some(missing));
            }
            Some(value) => match check_secret(input.kind, field.name, value) {
                Ok(()) => changes.push((field.name, Some(value.to_owned()))),
                Err(problem) => refusals.push(Refusal::Field(FieldError::new(field.name, problem))),
            },
            None => refusals.extend((field.required && !stored.contains(&field.name)).then_some(missing)),
        }
    }
    changes
}

/// A refused `PUT`'s answer: 400, each field with its first reason.
fn refused(refusals: Vec<Refusal>) -> Response {
    let mut errors = BTreeMap::new();
    for refusal in refusals {
        errors.entry(refusal.field().to_owned()).or_insert_with(|| refusal.to_string());
    }
    (StatusCode::BAD_REQUEST, Json(ErrorBody::fields("the channel was refused", errors))).into_response()
}

/// The secret fields of `kind` set for the channel `name` (read off the runtime: the keychain
/// blocks).
async fn secrets_set(ctx: &ApiContext, name: &str, kind: ChannelKind) -> Result<Vec<&'static str>, ApiError> {
    let (secrets, channel) = (ctx.services.secrets.clone(), name.to_owned());
    tokio::task::spawn_blocking(move || {
        secret_fields(kind)
            .iter()
            .map(|field| field.name)
            .filter(|field| secrets.source_named(&Named::channel(&channel, field)).is_some())
            .collect()
    })
    .await
    .map_err(|_| ApiError::BadRequest("the secret store stopped".into()))
}

/// Sets or removes a `PUT`'s secrets; the answer when the secret store refuses one.
async fn store_secrets(ctx: &ApiContext, name: &str, secrets: Vec<(&'static str, Option<String>)>) -> Result<Option<Response>, ApiError> {
    let (store, channel) = (ctx.services.secrets.clone(), name.to_owned());
    let stored = super::with_secret_store(move || {
        secrets
            .iter()
            .try_for_each(|(field, value)| store.set_named(&Named::channel(&channel, field), value.as_deref()).map_err(|e| (*field, e)))
    })
    .await?;
    let Err((field, e)) = stored else { return Ok(None) };
    tracing::warn!(channel = %name, field, error = %e, "cannot store a channel's secret");
    Ok(Some(super::secret_not_stored(field)))
}

/// Saves the row; whatever waited for the channel (a retry, its outage, quiet hours) is tried
/// again with the new settings.
async fn save(ctx: &ApiContext, row: ChannelRow) -> Result<(), ApiError> {
    tracing::info!(channel = %row.name, kind = %row.kind, enabled = row.enabled, "channel saved");
    ctx.services
        .store
        .write(move |tx| {
            let now = now_ms();
            stored::put(tx, &row, now)?;
            stored::outage_over(tx, &row.name)?;
            crate::store::outbox::due_now(tx, &row.name, now)
        })
        .await?;
    ctx.services.outbox.wake();
    Ok(())
}

#[utoipa::path(
    put, path = "/api/channels/{name}", operation_id = "put_channel", tag = "channels",
    summary = "Create or change a channel",
    description = "A secret field left out keeps the stored one; an empty string forgets it.",
    params(("name" = String, Path, description = "Lower-case letters, digits, `-` and `_`, at most 40")),
    request_body = ChannelInput,
    responses(
        (status = 200, description = "The channel as saved", body = Channel),
        (status = 400, description = "Refused: `errors` names each refused field", body = super::ErrorBody),
        (status = 503, description = "The secret store refused a secret: nothing was saved", body = super::ErrorBody),
    )
)]
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
    let already_set = secrets_set(&ctx, &name, input.kind).await?;
    let change = match check(&name, input, existing, &already_set) {
        Ok(change) => change,
        Err(refusals) => return Ok(refused(refusals)),
    };
    // Secrets first: a channel is never saved pointing at a secret that was not stored.
    if let Some(refused) = store_secrets(&ctx, &name, change.secrets).await? {
        return Ok(refused);
    }
    save(&ctx, change.row).await?;
    let channel = all(&ctx).await?.into_iter().find(|c| c.name == name).ok_or_else(|| ApiError::NotFound("the channel is gone".into()))?;
    ctx.services.changes.metrics_changed();
    Ok(Json(channel).into_response())
}

#[utoipa::path(
    delete, path = "/api/channels/{name}", operation_id = "delete_channel", tag = "channels",
    summary = "Remove a channel",
    description = "Its pending notifications are dropped, and counted in the answer.",
    params(("name" = String, Path, description = "The channel's name")),
    responses((status = 200, description = "Removed", body = ChannelRemoved), (status = 404, description = "No such channel", body = super::ErrorBody))
)]
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
        for field in secret_fields(kind).iter().map(|field| field.name) {
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

#[utoipa::path(
    post, path = "/api/channels/{name}/test", operation_id = "test_channel", tag = "channels",
    summary = "Send a test notification through a channel",
    params(("name" = String, Path, description = "The channel's name")),
    responses((status = 200, description = "What the channel's send did", body = ChannelTestResult), (status = 404, description = "No such channel", body = super::ErrorBody))
)]
async fn test(State(ctx): State<Arc<ApiContext>>, Path(name): Path<String>) -> Result<Json<ChannelTestResult>, ApiError> {
    let row = {
        let name = name.clone();
        ctx.services.store.read(move |db| stored::get(db, &name)).await?
    };
    let Some(row) = row else {
        return Err(ApiError::NotFound(format!("no channel {name:?}")));
    };
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
    }

    const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn input(body: serde_json::Value) -> ChannelInput {
        serde_json::from_value(body).unwrap()
    }

    fn refusals(body: serde_json::Value, existing: Option<ChannelRow>, already_set: &[&str]) -> BTreeMap<&'static str, String> {
        check("c", input(body), existing, already_set).unwrap_err().into_iter().map(|r| (r.field(), r.to_string())).collect()
    }

    #[test]
    fn a_put_is_refused_field_by_field() {
        let errors = refusals(
            serde_json::json!({"kind": "webhook", "url": "ftp://x", "secret": "not-a-whsec", "summary_after": -1, "quiet_hours": {"from": "7:00", "to": "07:00"}}),
            None,
            &[],
        );
        assert_eq!(errors["url"], "must be an http:// or https:// address");
        assert_eq!(errors["secret"], "must start with whsec_ (a Standard Webhooks secret)");
        assert_eq!(errors["summary_after"], "must be between 0 (never summarize) and 10000");
        assert_eq!(errors["quiet_hours"], "must start and end at different times");
        let errors = refusals(serde_json::json!({"kind": "email", "from": "me", "port": 0}), None, &[]);
        assert_eq!(errors.keys().copied().collect::<Vec<_>>(), ["from", "host", "port", "to"]);
        assert!(errors["from"].starts_with("is not an e-mail address: \"me\""), "{errors:?}");
        assert!(refusals(serde_json::json!({"kind": "device"}), None, &[])["kind"].contains("devices add"));
        let device = ChannelRow::new("c", ChannelKind::Device);
        assert!(refusals(serde_json::json!({"kind": "desktop"}), Some(device), &[])["kind"].contains("stays a device"));
    }

    /// A required secret left out is kept when stored for a channel of the same kind; an empty
    /// one removes it, and is refused when required.
    #[test]
    fn a_required_secret_is_given_or_already_stored() {
        let hook = serde_json::json!({"kind": "webhook", "url": "http://127.0.0.1:9/x"});
        let webhook = ChannelRow::new("c", ChannelKind::Webhook);
        assert_eq!(refusals(hook.clone(), None, &["secret"])["secret"], "is required");
        assert_eq!(refusals(hook.clone(), Some(ChannelRow::new("c", ChannelKind::Ntfy)), &["secret"])["secret"], "is required");
        let kept = check("c", input(hook.clone()), Some(webhook.clone()), &["secret"]).unwrap();
        assert!(kept.secrets.is_empty());
        let mut emptied = hook.clone();
        emptied["secret"] = " ".into();
        assert_eq!(refusals(emptied, Some(webhook), &["secret"])["secret"], "is required");
        let mut given = hook;
        given["secret"] = WHSEC.into();
        assert_eq!(check("c", input(given), None, &[]).unwrap().secrets, [("secret", Some(WHSEC.to_owned()))]);
        let ntfy = check("c", input(serde_json::json!({"kind": "ntfy", "url": "https://ntfy.sh/t", "token": ""})), None, &[]).unwrap();
        assert_eq!(ntfy.secrets, [("token", None)]);
        assert_eq!(
            refusals(serde_json::json!({"kind": "slack", "url": "slack"}), None, &[])["url"],
            "must be an http:// or https:// address"
        );
    }

    /// A saved row keeps what a `PUT` does not set (its errors, its outage) and stores its
    /// kind's fields as the senders read them.
    #[test]
    fn a_put_keeps_the_rows_state_and_stores_its_fields_typed() {
        let mut existing = ChannelRow::new("mail", ChannelKind::Email);
        existing.last_error = Some("SMTP down".into());
        let body = serde_json::json!({"kind": "email", "host": " smtp.example.com ", "tls": "tls", "username": " ", "from": "a@example.com", "to": "b@example.com", "password": "pw"});
        let change = check("mail", input(body), Some(existing), &[]).unwrap();
        assert_eq!(change.row.last_error.as_deref(), Some("SMTP down"));
        assert_eq!(
            change.row.config,
            serde_json::json!({"host": "smtp.example.com", "tls": "tls", "from": "a@example.com", "to": "b@example.com"})
                .as_object()
                .cloned()
                .unwrap()
        );
        let Ok(ChannelConfig::Email(email)) = ChannelConfig::of(&change.row) else { panic!("{:?}", change.row) };
        assert_eq!(email.port(), 465);
        assert_eq!(fields_of(&change.row).port, Some(465));
        assert_eq!(change.secrets, [("password", Some("pw".to_owned()))]);
    }
}

//! Devices of a hub (contract §5). The hub's owner adds a device (`POST /api/devices`,
//! `nevermiss devices add NAME`), which makes a channel of kind `device` and answers its token
//! once; only the token's SHA-256 is kept. A device calls with its own token:
//!
//! - `GET /api/device/notifications`: Server-Sent Events, one `notification` per message due to
//!   this device (one notification, or one summary when more than the channel's `summary_after`
//!   are due at once, as after sleep). Every row not yet acknowledged is sent again on every new
//!   connection, so a device that slept, lost its network or saw the hub restart resumes where it
//!   was; within one connection each row is sent once.
//! - `POST /api/device/ack`: the rows it showed; they are delivered from then on, and never sent
//!   to it again. A device shows, records what it showed, then acknowledges (see `hub_client`).

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::{delete, get, post};
use axum::{Extension, Json};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use ts_rs::TS;

use super::channels::{all as all_channels, valid_name, Channel};
use super::{ApiContext, ApiError, Caller, Routes};
use crate::device_messages::{DeviceAck, DeviceNotification};
use crate::notification::{Notification, Pending};
use crate::store::channels as stored;
use crate::store::channels::ChannelKind;
use crate::store::job::now_ms;
use crate::store::outbox as stored_outbox;

/// How often a device's stream looks for new rows when nothing woke it.
const LOOK_EVERY: Duration = Duration::from_secs(5);
/// Most rows one look reads.
const BATCH: i64 = 1000;

/// What `POST /api/devices` answers: the new device's token, shown this once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct DeviceToken {
    pub name: String,
    pub token: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct NewDevice {
    pub name: String,
}

/// `GET /api/devices`: the devices, as channels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct DeviceList {
    pub devices: Vec<Channel>,
}

/// `GET /api/device`: who the calling device is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct DeviceInfo {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct DeviceAcked {
    /// Rows marked delivered by this call (a row acknowledged before is not counted again).
    pub acknowledged: i64,
}

pub fn router() -> Routes {
    Routes::new()
        .owner("/devices", get(list).post(add))
        .owner("/devices/{name}", delete(revoke))
        .devices_too("/device", get(whoami))
        .devices_too("/device/notifications", get(notifications))
        .devices_too("/device/ack", post(ack))
}

/// The SHA-256 of a device token, as stored.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn admin_only(caller: &Caller) -> Result<(), ApiError> {
    match caller {
        Caller::Admin => Ok(()),
        Caller::Device(_) => Err(ApiError::Forbidden("a device token cannot do this")),
    }
}

fn device_only(caller: &Caller) -> Result<&str, ApiError> {
    match caller {
        Caller::Device(name) => Ok(name),
        Caller::Admin => Err(ApiError::BadRequest("this call is a device's: use a device token (`nevermiss devices add NAME`)".into())),
    }
}

#[utoipa::path(
    get, path = "/api/devices", operation_id = "list_devices", tag = "hub",
    summary = "A hub's devices",
    responses((status = 200, description = "The devices, as channels of kind `device`", body = DeviceList))
)]
async fn list(State(ctx): State<Arc<ApiContext>>, Extension(caller): Extension<Caller>) -> Result<Json<DeviceList>, ApiError> {
    admin_only(&caller)?;
    let devices = all_channels(&ctx).await?.into_iter().filter(|c| c.kind == ChannelKind::Device).collect();
    Ok(Json(DeviceList { devices }))
}

#[utoipa::path(
    post, path = "/api/devices", operation_id = "add_device", tag = "hub",
    summary = "Add a device to this hub",
    description = "Answers the device's token once: it is kept only as a digest.",
    request_body = NewDevice,
    responses((status = 200, description = "The device's token, shown once", body = DeviceToken), (status = 400, description = "A name refused or already taken", body = super::ErrorBody))
)]
async fn add(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<NewDevice>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<DeviceToken>, ApiError> {
    admin_only(&caller)?;
    let Json(NewDevice { name }) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if !valid_name(&name) {
        return Err(ApiError::BadRequest("a device name is lower-case letters, digits, - and _ (at most 40)".into()));
    }
    let taken = {
        let name = name.clone();
        ctx.services.store.read(move |db| stored::get(db, &name)).await?.is_some()
    };
    if taken {
        return Err(ApiError::BadRequest(format!("the name {name:?} is taken by a channel or device")));
    }
    let token = format!("nmd_{}", hex::encode(rand::random::<[u8; 24]>()));
    let hash = token_hash(&token);
    let device = name.clone();
    ctx.services.store.write(move |tx| stored::add_device(tx, &device, &hash, now_ms())).await?;
    tracing::info!(device = %name, "device added");
    Ok(Json(DeviceToken { name, token }))
}

#[utoipa::path(
    delete, path = "/api/devices/{name}", operation_id = "revoke_device", tag = "hub",
    summary = "Revoke a device",
    params(("name" = String, Path, description = "The device's name")),
    responses((status = 200, description = "Revoked", body = super::channels::ChannelRemoved), (status = 404, description = "No such device", body = super::ErrorBody))
)]
async fn revoke(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<super::channels::ChannelRemoved>, ApiError> {
    admin_only(&caller)?;
    let is_device = {
        let name = name.clone();
        ctx.services.store.read(move |db| stored::get(db, &name)).await?.is_some_and(|c| c.kind == ChannelKind::Device)
    };
    if !is_device {
        return Err(ApiError::NotFound(format!("no device {name:?}")));
    }
    let device = name.clone();
    let dropped = ctx.services.store.write(move |tx| stored::delete(tx, &device)).await?.unwrap_or(0);
    tracing::info!(device = %name, dropped, "device revoked");
    // Its open stream ends at its next look (its token no longer names a device).
    Ok(Json(super::channels::ChannelRemoved { removed: name, dropped: dropped as i64 }))
}

#[utoipa::path(
    get, path = "/api/device", operation_id = "this_device", tag = "hub",
    summary = "Which device a device token is",
    responses((status = 200, description = "The device", body = DeviceInfo), (status = 403, description = "Not a device's token", body = super::ErrorBody))
)]
async fn whoami(Extension(caller): Extension<Caller>) -> Result<Json<DeviceInfo>, ApiError> {
    Ok(Json(DeviceInfo { name: device_only(&caller)?.to_owned() }))
}

#[utoipa::path(
    post, path = "/api/device/ack", operation_id = "device_ack", tag = "hub",
    summary = "A device says it showed notifications",
    request_body = DeviceAck,
    responses((status = 200, description = "How many were settled", body = DeviceAcked), (status = 400, description = "Not a `{\"ids\": [...]}` body", body = super::ErrorBody), (status = 403, description = "Not a device's token", body = super::ErrorBody))
)]
async fn ack(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<DeviceAck>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<DeviceAcked>, ApiError> {
    let device = device_only(&caller)?.to_owned();
    let Json(DeviceAck { ids }) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let acknowledged = ctx
        .services
        .store
        .write(move |tx| {
            let now = now_ms();
            let mut marked = 0;
            for id in &ids {
                // Only this device's own rows.
                if stored_outbox::pending_of_channel(tx, &device, *id)? && stored_outbox::mark_delivered(tx, *id, now)? {
                    marked += 1;
                }
            }
            stored::send_succeeded(tx, &device, now)?;
            stored::device_seen(tx, &device, now)?;
            Ok(marked)
        })
        .await?;
    ctx.services.changes.metrics_changed();
    Ok(Json(DeviceAcked { acknowledged }))
}

#[utoipa::path(
    get, path = "/api/device/notifications", operation_id = "device_notifications", tag = "hub",
    summary = "A device's notifications, as Server-Sent Events",
    description = "`hello` first, then each notification due for the device (`notification` events, JSON of `DeviceNotification`), until acknowledged with `POST /api/device/ack`.",
    responses((status = 200, description = "An event stream", content_type = "text/event-stream", body = String), (status = 403, description = "Not a device's token", body = super::ErrorBody))
)]
async fn notifications(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let device = device_only(&caller)?.to_owned();
    {
        let device = device.clone();
        ctx.services.store.write(move |tx| stored::device_seen(tx, &device, now_ms())).await?;
    }
    tracing::info!(%device, "device connected");
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(16);
    tokio::spawn(feed(ctx.clone(), device, sender));
    let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
    let stream = futures_util::StreamExt::take_until(stream, ctx.shutdown.clone().cancelled_owned());
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Sends one device its due rows until it disconnects, the engine stops or the device is revoked.
async fn feed(ctx: Arc<ApiContext>, device: String, sender: tokio::sync::mpsc::Sender<Result<Event, Infallible>>) {
    let mut changes = ctx.services.changes.subscribe();
    let hello = Event::default().event("hello").data(serde_json::json!({ "device": device }).to_string());
    if sender.send(Ok(hello)).await.is_err() {
        return;
    }
    // Rows sent on this connection: not sent again on it, whether acknowledged yet or not.
    let mut sent: HashSet<i64> = HashSet::new();
    loop {
        let name = device.clone();
        let looked =
            ctx.services.store.read(move |db| Ok((stored::get(db, &name)?, stored_outbox::for_device(db, &name, 0, BATCH)?))).await;
        let (channel, rows) = match looked {
            Ok((Some(channel), rows)) => (channel, rows),
            Ok((None, _)) => {
                tracing::info!(%device, "device revoked: its stream ends");
                return;
            }
            Err(e) => {
                tracing::warn!(%device, error = %e, "cannot read a device's notifications; trying again");
                tokio::time::sleep(LOOK_EVERY).await;
                continue;
            }
        };
        let now = now_ms();
        let minute = crate::outbox::local_minute_now();
        let due: Vec<Notification> =
            rows.into_iter().filter(|row| !sent.contains(&row.id)).map(|row| Pending::from_due(row, now).notification).collect();
        // A group's end carries the group's progress (read now), on a device as on a channel.
        let due = if due.iter().any(|n| n.kind == crate::store::outbox::Kind::GroupEnd) {
            let mut due = due;
            match ctx.services.store.read(move |db| crate::notification::add_groups(db, &mut due).map(|()| due)).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(%device, error = %e, "cannot read a group's progress; trying again");
                    tokio::time::sleep(LOOK_EVERY).await;
                    continue;
                }
            }
        } else {
            due
        };
        // A group's end a job joined since: settled unsent, as on a channel (`Notification::overtaken`).
        let (overtaken, due): (Vec<Notification>, Vec<Notification>) = due.into_iter().partition(Notification::overtaken);
        if !overtaken.is_empty() {
            let ids: Vec<i64> = overtaken.iter().map(|n| n.outbox_id).collect();
            let settled = ctx
                .services
                .store
                .write(move |tx| stored_outbox::settle(tx, &ids, now_ms(), crate::store::counters::ChannelTally::Dropped))
                .await;
            if let Err(e) = settled {
                tracing::warn!(%device, error = %e, "cannot settle an overtaken group's end; trying again");
            }
        }
        // A device offers Cancel only when this hub would take it from the device.
        let may_not_cancel = !ctx.services.settings.devices_may_cancel();
        let due: Vec<Notification> = due
            .into_iter()
            .filter(|n| !channel.quiet.is_some_and(|q| q.holds(minute, n.is_urgent())))
            .map(|n| Notification { may_not_cancel, ..n })
            .collect();
        let messages: Vec<DeviceNotification> = if channel.summarizes(due.len()) {
            vec![DeviceNotification { ids: due.iter().map(|n| n.outbox_id).collect(), summary: true, notifications: due }]
        } else {
            due.into_iter().map(|n| DeviceNotification { ids: vec![n.outbox_id], summary: false, notifications: vec![n] }).collect()
        };
        for message in messages {
            let event = Event::default()
                .event("notification")
                .id(message.ids[0].to_string())
                .data(serde_json::to_string(&message).expect("a device notification serializes"));
            if sender.send(Ok(event)).await.is_err() {
                tracing::info!(%device, "device disconnected");
                return;
            }
            sent.extend(message.ids);
        }
        // A job change (or another process's) may have enqueued a row for it; else look again soon.
        tokio::select! {
            _ = sender.closed() => {
                tracing::info!(%device, "device disconnected");
                return;
            }
            _ = changes.recv() => {}
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

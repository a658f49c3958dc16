//! What a hub sends its devices (`GET /api/device/notifications`) and what a device answers
//! (`POST /api/device/ack`): one definition for both ends, the hub's API (`api::devices`) and
//! the device (`hub_client`).

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::notification::Notification;

/// One message for a device: one notification, or a summary of several (`summary`). `ids` are
/// the outbox rows it covers, to acknowledge once shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct DeviceNotification {
    pub ids: Vec<i64>,
    pub summary: bool,
    pub notifications: Vec<Notification>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct DeviceAck {
    pub ids: Vec<i64>,
}

//! `/api/hub`: this app as a device of a NeverMiss hub (contract section 5). With a hub URL and
//! a device token (`nevermiss devices add NAME` on the hub prints one), the window shows the
//! hub's jobs and this machine shows the hub's notifications for it, once each.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// Whether this app is connected to a hub, and how that goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct HubState {
    /// The hub's address (`https://hub.example.com`); none: this app runs on its own.
    pub url: Option<String>,
    /// Whether a device token is in the secret store (never answered).
    pub token_set: bool,
    /// The stream of this device's notifications is open.
    pub connected: bool,
    /// This device's name on the hub, once the hub has answered.
    pub device: Option<String>,
    /// Why the last connection failed, while it is not connected.
    pub last_error: Option<String>,
}

/// The body of `PUT /api/hub`: an empty `url` disconnects; a `token` left out keeps the stored one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct HubInput {
    pub url: String,
    #[serde(default)]
    #[ts(optional)]
    pub token: Option<String>,
}

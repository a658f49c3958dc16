//! This app as a device of a NeverMiss hub (contract §5): with `hub.url` set and a device
//! token in the secret store, it keeps a stream open to the hub's `/api/device/notifications`,
//! shows each message with this machine's notifier, and acknowledges it. Exactly once per device:
//!
//! - the hub sends every row this device has not acknowledged, on every connection, so what came
//!   while it slept, was offline or the hub restarted comes when it reconnects (as one summary
//!   when there are many);
//! - the device shows a message, records its rows as shown (`hub.shown`, in its own database),
//!   then acknowledges them; a row that comes again (the acknowledgement was lost, the app was
//!   killed before it) is acknowledged without being shown again. A kill between the show and the
//!   record repeats that one message, with the same tag, which notification servers that honour
//!   it replace.
//!
//! The window shows the hub's jobs through the admin API, which forwards its reads to the hub
//! while one is set (`api::hub_proxy`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use ts_rs::TS;

use crate::device_messages::{DeviceAck, DeviceNotification};
use crate::extra_ca::ExtraRoots;
use crate::notification::{Message, Notifier, Summary};
use crate::secrets::{Named, Secrets};
use crate::settings::Settings;

/// The hub's outbox rows shown here and not yet acknowledged (JSON list).
const SHOWN: &str = "hub.shown";
/// A stream silent this long (the hub sends a keep-alive every 15 s) is dead: a sleeping laptop
/// or a lost network leaves no FIN.
const SILENT_FOR: Duration = Duration::from_secs(45);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct HubError(String);

/// Whether this app is connected to a hub, and how that goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
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

/// A hub's address: `https://`, since the device token travels with every call; plain `http://`
/// only to this very machine (a hub on loopback, or a TLS proxy's local end).
pub fn valid_hub_url(url: &str) -> Result<(), &'static str> {
    let url = reqwest::Url::parse(url).map_err(|_| "must be the hub's https:// address")?;
    let host = url.host_str().ok_or("must be the hub's https:// address")?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = bare.eq_ignore_ascii_case("localhost") || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err("must be https:// (the device token would travel in clear); plain http:// only to this machine"),
        _ => Err("must be the hub's https:// address"),
    }
}

/// The connection to the hub, and what the UI is told of it.
pub struct HubClient {
    settings: Arc<Settings>,
    secrets: Arc<Secrets>,
    notifier: Arc<dyn Notifier>,
    /// No overall timeout: the notification stream and proxied event streams stay open.
    http: reqwest::Client,
    /// The hub's URL and this device's token, read when the connection starts.
    target: Mutex<Option<(String, String)>>,
    state: Mutex<HubState>,
    changed: Notify,
}

impl HubClient {
    /// `extra_roots`: trusted for the hub's certificate besides the public roots (a home server).
    pub fn new(settings: Arc<Settings>, secrets: Arc<Secrets>, notifier: Arc<dyn Notifier>, extra_roots: &ExtraRoots) -> Arc<HubClient> {
        let builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("NeverMiss/", env!("CARGO_PKG_VERSION")));
        let http = extra_roots.trusted_by(builder).build().expect("an HTTP client with rustls builds");
        Arc::new(HubClient {
            settings,
            secrets,
            notifier,
            http,
            target: Mutex::new(None),
            state: Mutex::new(HubState { url: None, token_set: false, connected: false, device: None, last_error: None }),
            changed: Notify::new(),
        })
    }

    /// What the UI shows (whether a token is set is read off the runtime: the keychain blocks).
    pub async fn state(&self) -> HubState {
        let secrets = self.secrets.clone();
        let token_set = tokio::task::spawn_blocking(move || secrets.source_named(&Named::hub_token()).is_some()).await.unwrap_or(false);
        let mut state = self.state.lock().unwrap().clone();
        state.url = self.settings.hub_url();
        state.token_set = token_set;
        state
    }

    /// The hub and token in use, when this app is a hub's device (the admin API forwards reads).
    pub fn target(&self) -> Option<(String, String)> {
        self.target.lock().unwrap().clone()
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The hub's URL or token changed: connect again with them. A new hub starts with nothing
    /// shown (row ids are the hub's own).
    pub async fn settings_changed(&self, new_hub: bool) {
        if new_hub {
            if let Err(e) = self.settings.set(SHOWN, "[]").await {
                tracing::warn!(error = %e, "cannot reset the hub's shown rows");
            }
        }
        self.changed.notify_one();
    }

    /// Keeps the stream open while a hub is set, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut failures = 0u32;
        loop {
            let url = self.settings.hub_url();
            let secrets = self.secrets.clone();
            let token = tokio::task::spawn_blocking(move || secrets.get_named(&Named::hub_token())).await.ok().flatten();
            // A plain http:// hub elsewhere (stored before the rule): the token is not sent in clear.
            let refused = url.as_deref().and_then(|u| valid_hub_url(u).err());
            let (url, token) = match (url, token, refused) {
                (Some(url), Some(token), None) => (url, token),
                (url, token, refused) => {
                    *self.target.lock().unwrap() = None;
                    {
                        let mut state = self.state.lock().unwrap();
                        state.connected = false;
                        state.device = None;
                        state.last_error = match (url, token, refused) {
                            (Some(_), _, Some(reason)) => Some(format!("the hub's address {reason}")),
                            (Some(_), None, None) => {
                                Some("no device token: paste the one `nevermiss devices add NAME` printed on the hub".to_owned())
                            }
                            _ => None,
                        };
                    }
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = self.changed.notified() => continue,
                    }
                }
            };
            *self.target.lock().unwrap() = Some((url.clone(), token.clone()));
            let ended = self.session(&url, &token, &shutdown).await;
            {
                let mut state = self.state.lock().unwrap();
                state.connected = false;
                match &ended {
                    Ok(()) => failures = 0,
                    Err(e) => {
                        failures += 1;
                        tracing::warn!(hub = %url, error = %e, failures, "the hub's stream ended");
                        state.last_error = Some(e.to_string());
                    }
                }
            }
            if shutdown.is_cancelled() {
                return;
            }
            let delay = Duration::from_millis(500u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(30));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.changed.notified() => {}
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One connection: reads events until the stream ends, the settings change or `shutdown`.
    async fn session(&self, url: &str, token: &str, shutdown: &CancellationToken) -> Result<(), HubError> {
        let response = self
            .http
            .get(format!("{url}/api/device/notifications"))
            .bearer_auth(token)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| HubError(format!("cannot reach the hub at {url}: {e}")))?;
        match response.status() {
            s if s.is_success() => {}
            reqwest::StatusCode::UNAUTHORIZED => return Err(HubError("the hub refused this device's token (revoked, or mistyped)".into())),
            s => {
                let body = response.text().await.unwrap_or_default();
                return Err(HubError(format!("the hub answered {s}: {}", crate::channels::excerpt(&body, 200))));
            }
        }
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        loop {
            let chunk = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = self.changed.notified() => return Ok(()),
                chunk = tokio::time::timeout(SILENT_FOR, body.next()) => chunk,
            };
            let bytes = match chunk {
                Err(_) => return Err(HubError(format!("the hub said nothing for {SILENT_FOR:?}"))),
                Ok(None) => return Err(HubError("the hub closed the stream".into())),
                Ok(Some(Err(e))) => return Err(HubError(format!("the hub's stream broke: {e}"))),
                Ok(Some(Ok(bytes))) => bytes,
            };
            buffer.push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n"));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let (mut event, mut data) = ("message", String::new());
                for line in block.lines() {
                    if let Some(name) = line.strip_prefix("event:") {
                        event = if name.trim() == "hello" {
                            "hello"
                        } else if name.trim() == "notification" {
                            "notification"
                        } else {
                            "other"
                        };
                    } else if let Some(more) = line.strip_prefix("data:") {
                        data.push_str(more.strip_prefix(' ').unwrap_or(more));
                    }
                }
                match event {
                    "hello" => {
                        let device =
                            serde_json::from_str::<serde_json::Value>(&data).ok().and_then(|v| v["device"].as_str().map(str::to_owned));
                        tracing::info!(hub = %url, device = ?device, "connected to the hub");
                        let mut state = self.state.lock().unwrap();
                        state.connected = true;
                        state.device = device;
                        state.last_error = None;
                    }
                    "notification" => {
                        let message: DeviceNotification = serde_json::from_str(&data)
                            .map_err(|e| HubError(format!("the hub sent a notification this app cannot read: {e}")))?;
                        self.show_and_ack(url, token, message).await?;
                    }
                    _ => {}
                }
            }
        }
    }

    /// Shows a message unless its rows were shown already, records them, and acknowledges them.
    async fn show_and_ack(&self, url: &str, token: &str, message: DeviceNotification) -> Result<(), HubError> {
        let mut shown = self.shown();
        if !message.ids.iter().all(|id| shown.contains(id)) {
            let summary;
            let shown_message = if message.summary {
                summary = Summary::new(message.notifications.clone());
                Message::Summary(&summary)
            } else {
                match message.notifications.first() {
                    Some(one) => Message::One(one),
                    None => return Ok(()),
                }
            };
            self.notifier.notify(&shown_message).await.map_err(|e| HubError(format!("cannot show the hub's notification: {e}")))?;
            shown.extend(message.ids.iter().copied());
            self.record_shown(&shown).await?;
        } else {
            tracing::debug!(ids = ?message.ids, "shown before: acknowledged again, not shown");
        }
        let acked = self
            .http
            .post(format!("{url}/api/device/ack"))
            .bearer_auth(token)
            .timeout(Duration::from_secs(10))
            .json(&DeviceAck { ids: message.ids.clone() })
            .send()
            .await
            .map_err(|e| HubError(format!("cannot acknowledge to the hub: {e}")))?;
        if !acked.status().is_success() {
            return Err(HubError(format!("the hub refused the acknowledgement: {}", acked.status())));
        }
        for id in &message.ids {
            shown.remove(id);
        }
        self.record_shown(&shown).await
    }

    fn shown(&self) -> BTreeSet<i64> {
        self.settings.get(SHOWN).and_then(|v| serde_json::from_str(&v).ok()).unwrap_or_default()
    }

    async fn record_shown(&self, shown: &BTreeSet<i64>) -> Result<(), HubError> {
        let text = serde_json::to_string(shown).expect("ids serialize");
        self.settings.set(SHOWN, &text).await.map_err(|e| HubError(format!("cannot record what was shown: {e}")))
    }
}

//! The tunnel's state as the API, the UI, the tray and `nevermiss url` see it: the kind, where it
//! stands (off, starting, up with its URL, down since when and why), restarts, the flag that the
//! URL changed, and the last self-test.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::config::TunnelKind;
use super::self_test::{SelfTestOutcome, SelfTestReport};
use crate::closed_set::closed_set;

closed_set! {
    /// Where the tunnel stands.
    #[ts(export, rename = "TunnelStatus")]
    pub enum Status {
        /// No tunnel is configured (`none`).
        Off = "off",
        Starting = "starting",
        Up = "up",
        Down = "down",
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct TunnelState {
    pub kind: TunnelKind,
    pub status: Status,
    /// The public base URL, while up.
    pub public_url: Option<String>,
    /// The URL before the last change, when it changed.
    pub previous_url: Option<String>,
    /// When the current status began (RFC 3339).
    pub since: Option<String>,
    /// When the tunnel went down (kept through the restarts that follow, until it is up again).
    pub down_since: Option<String>,
    /// One line: why the last start failed or why the tunnel ended.
    pub last_error: Option<String>,
    /// Starts after the first one (by backoff, by a failed health check, or asked for).
    pub restarts: u64,
    /// The next start, while down and retrying.
    pub next_attempt_at: Option<String>,
    /// False when a start waits for the user (a setting, a token, a binary): no retry until the
    /// configuration changes or a restart is asked for.
    pub retrying: bool,
    /// The public URL differs from the one before: "update the webhook URL at the provider".
    /// Cleared by `POST /api/tunnel/ack`.
    pub url_changed: bool,
    pub notice: Option<String>,
    /// Something the user should see: the last self-test failed, or the tunnel is down.
    pub warning: Option<String>,
    /// The only local address a tunnel forwards to: the receiver.
    pub forwards_to: String,
    /// `<public>/hooks/<provider>` for each provider, while up.
    pub webhook_urls: BTreeMap<String, String>,
    pub self_test: Option<SelfTestReport>,
    /// Whether self-tests run by themselves (after each start and when quiet).
    pub self_test_automatic: bool,
}

impl TunnelState {
    pub fn new(forwards_to: String) -> TunnelState {
        TunnelState {
            kind: TunnelKind::None,
            status: Status::Off,
            public_url: None,
            previous_url: None,
            since: None,
            down_since: None,
            last_error: None,
            restarts: 0,
            next_attempt_at: None,
            retrying: false,
            url_changed: false,
            notice: None,
            warning: None,
            forwards_to,
            webhook_urls: BTreeMap::new(),
            self_test: None,
            self_test_automatic: true,
        }
    }

    /// The warning shown: the tunnel being down wins over a failed self-test.
    pub fn refresh_warning(&mut self) {
        self.warning = match (self.status, &self.self_test) {
            (Status::Down, _) => Some(format!("the tunnel is down: {}", self.last_error.as_deref().unwrap_or("no reason given"))),
            (Status::Up, Some(t)) if t.outcome == SelfTestOutcome::Failed => {
                Some(format!("the last self-test failed: {}", t.reason.as_deref().unwrap_or("no reason given")))
            }
            (Status::Up, Some(t)) if t.outcome == SelfTestOutcome::Skipped => {
                Some(format!("self-test not run: {}", t.reason.as_deref().unwrap_or("")))
            }
            _ => None,
        };
        self.notice = match (&self.public_url, self.url_changed) {
            (Some(url), true) => Some(format!(
                "the public URL changed{}: update the webhook URL at the provider to {url}/hooks/<provider>",
                self.previous_url.as_deref().map(|p| format!(" (was {p})")).unwrap_or_default()
            )),
            _ => None,
        };
    }
}

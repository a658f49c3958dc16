//! One notification when the tunnel stays down past a threshold (setting
//! `tunnel.down_alert_secs`, default 5 minutes): through the outbox, keyed on the down period, so
//! a long outage alerts once and a new outage alerts again.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Status, Tunnel};
use crate::outbox::Outbox;
use crate::settings::Settings;
use crate::store::job::{now_ms, parse_rfc3339};
use crate::store::outbox::{self as store_outbox, Kind, Subject};
use crate::store::Store;

const CHECK_EVERY: Duration = Duration::from_secs(15);

/// Watches the tunnel's state until `shutdown`.
pub async fn watch(tunnel: Arc<Tunnel>, store: Store, settings: Arc<Settings>, outbox: Arc<Outbox>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        let threshold = settings.snapshot().tunnel_down_alert;
        if let Some(subject) = overdue(&tunnel, threshold, now_ms()) {
            let enqueued = store.write(move |tx| store_outbox::enqueue(tx, Kind::TunnelDown, &subject, None, now_ms())).await;
            match enqueued {
                Ok(channels) if !channels.is_empty() => outbox.wake(),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "cannot enqueue the tunnel-down alert"),
            }
        }
    }
}

/// The tunnel's down period when it has been down longer than `threshold`: the same subject for
/// the whole period (it is the alert's key), whatever the errors on the way.
fn overdue(tunnel: &Tunnel, threshold: Duration, now: i64) -> Option<Subject> {
    let state = tunnel.state();
    if state.status != Status::Down {
        return None;
    }
    let since = state.down_since.as_deref()?;
    let down_since = parse_rfc3339(since)?;
    if now - down_since < threshold.as_millis() as i64 {
        return None;
    }
    let tunnel = serde_json::to_value(state.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    Some(Subject::Tunnel { tunnel, down_since })
}

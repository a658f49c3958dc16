//! The self-test: a generic delivery, signed with the generic webhook secret, sent to
//! `<public url>/hooks/generic` and looked for at the receiver (the live change it causes, then the
//! stored delivery), with the time it took. It proves the whole path a provider's webhook takes.
//!
//! The test job (`nevermiss-selftest-…`, state `queued`, so no notification) is removed once seen
//! (and, when it was not seen, again a minute later by the supervisor, in case it lands late); the
//! delivery stays counted like any other.

use std::time::Duration;

use reqwest::StatusCode;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::changes::{Change, Changes};
use crate::closed_set::closed_set;
use crate::providers::generic::{self, OwnDelivery};
use crate::providers::SecretKind;
use crate::secrets::Secrets;
use crate::store::job::{now_ms, rfc3339, JobKey, JobState};
use crate::store::Store;

/// Every self-test job id starts with this (the UI may hide such jobs).
pub const SELF_TEST_JOB_PREFIX: &str = "nevermiss-selftest-";
/// How long the request through the tunnel may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(20);
/// After the answer, how long to still watch for the arrival.
const GRACE: Duration = Duration::from_secs(2);

closed_set! {
    /// How a self-test ended.
    #[ts(export)]
    pub enum SelfTestOutcome {
        Passed = "passed",
        Failed = "failed",
        /// Nothing could be sent (no URL, no secret, the tunnel starting).
        Skipped = "skipped",
    }
}

closed_set! {
    /// What started a self-test.
    #[ts(export)]
    pub enum SelfTestTrigger {
        /// The tunnel came up (after a start or a restart).
        Start = "start",
        /// No delivery arrived for a while.
        Quiet = "quiet",
        /// The last one failed.
        Retry = "retry",
        /// Asked for (`POST /api/tunnel/test`).
        Manual = "manual",
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct SelfTestReport {
    pub outcome: SelfTestOutcome,
    pub at: String,
    pub trigger: SelfTestTrigger,
    pub public_url: Option<String>,
    pub job_id: Option<String>,
    /// The answer that came back through the tunnel.
    pub http_status: Option<u16>,
    /// The delivery reached this instance's receiver.
    pub arrived: bool,
    /// From sending to the receiver having it stored.
    pub arrived_after_ms: Option<u64>,
    /// From sending to the answer coming back.
    pub round_trip_ms: Option<u64>,
    /// One line, when not passed.
    pub reason: Option<String>,
}

impl SelfTestReport {
    pub fn skipped(trigger: SelfTestTrigger, public_url: Option<String>, reason: impl Into<String>) -> SelfTestReport {
        SelfTestReport {
            outcome: SelfTestOutcome::Skipped,
            at: rfc3339(now_ms()),
            trigger,
            public_url,
            job_id: None,
            http_status: None,
            arrived: false,
            arrived_after_ms: None,
            round_trip_ms: None,
            reason: Some(reason.into()),
        }
    }

    pub fn failed(trigger: SelfTestTrigger, public_url: Option<String>, reason: impl Into<String>) -> SelfTestReport {
        SelfTestReport { outcome: SelfTestOutcome::Failed, ..SelfTestReport::skipped(trigger, public_url, reason) }
    }
}

/// What a self-test needs from the engine.
pub struct SelfTester {
    pub store: Store,
    pub secrets: std::sync::Arc<Secrets>,
    pub changes: std::sync::Arc<Changes>,
    /// For the public URL (system proxy settings apply).
    pub public_http: reqwest::Client,
    /// For a public URL on loopback (a test, a local reverse proxy): no proxy.
    pub local_http: reqwest::Client,
}

impl SelfTester {
    pub async fn run(&self, public_url: &str, trigger: SelfTestTrigger) -> SelfTestReport {
        let url = public_url.trim_end_matches('/').to_owned();
        let Some(secret) = self.secrets.get(generic::NAME, SecretKind::WebhookSecret) else {
            return SelfTestReport::skipped(
                trigger,
                Some(url),
                "no generic webhook secret (NEVERMISS_GENERIC_WEBHOOK_SECRET or the secret store): the self-test signs with it",
            );
        };
        let nonce = hex::encode(rand::random::<[u8; 8]>());
        let job_id = format!("{SELF_TEST_JOB_PREFIX}{nonce}");
        let delivery_id = format!("{job_id}-delivery");
        let label = "NeverMiss tunnel self-test";
        let delivery =
            OwnDelivery { delivery_id: &delivery_id, job_id: &job_id, state: JobState::Queued, seq: 0, label, finished_at: None };
        let (body, signature) = delivery.signed(&secret);
        let http = if is_loopback_url(&url) { &self.local_http } else { &self.public_http };
        let request = http
            .post(format!("{url}/hooks/generic"))
            .header("content-type", "application/json")
            .header(generic::SIGNATURE_HEADER, signature)
            .timeout(SEND_TIMEOUT)
            .body(body);

        let mut changes = self.changes.subscribe();
        let started = Instant::now();
        let sent_at_ms = now_ms();
        let wanted = job_id.clone();
        let watch = async move {
            loop {
                match changes.recv().await {
                    Ok(Change::Job { job }) if job.provider == generic::NAME && job.job_id == wanted => return Some(started.elapsed()),
                    Ok(_) | Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            }
        };
        let send = async {
            let answer = request.send().await;
            let elapsed = started.elapsed();
            match answer {
                Ok(response) => {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    (Ok((status, text)), elapsed)
                }
                Err(e) => (Err(describe(&e)), elapsed),
            }
        };
        tokio::pin!(watch);
        tokio::pin!(send);
        let mut seen: Option<Duration> = None;
        let mut watching = true;
        let (answer, round_trip) = loop {
            tokio::select! {
                arrival = &mut watch, if watching => {
                    watching = false;
                    seen = arrival;
                }
                sent = &mut send => break sent,
            }
        };
        if watching {
            seen = tokio::time::timeout(GRACE, &mut watch).await.ok().flatten();
        }

        // The store says whether it really arrived here (not at someone else's server).
        let lookup = delivery_id.clone();
        let stored: Option<i64> =
            self.store.read(move |conn| crate::store::deliveries::received_at(conn, generic::NAME, &lookup)).await.ok().flatten();
        self.forget(job_id.clone()).await;

        let arrived = stored.is_some();
        let arrived_after_ms = seen.map(|d| d.as_millis() as u64).or_else(|| stored.map(|at| (at - sent_at_ms).max(0) as u64));
        let (status, reason) = match (&answer, arrived) {
            (Ok((status, _)), true) if status.is_success() => (Some(status.as_u16()), None),
            (Ok((status, _)), true) => {
                (Some(status.as_u16()), Some(format!("the delivery arrived, but the answer through the tunnel was {status}")))
            }
            (Ok((status, text)), false) => (Some(status.as_u16()), Some(not_arrived(*status, text))),
            (Err(e), true) => (None, Some(format!("the delivery arrived, but its answer did not come back: {e}"))),
            (Err(e), false) => (None, Some(format!("cannot reach {url}: {e}"))),
        };
        SelfTestReport {
            outcome: if reason.is_none() { SelfTestOutcome::Passed } else { SelfTestOutcome::Failed },
            at: rfc3339(sent_at_ms),
            trigger,
            public_url: Some(url),
            job_id: Some(job_id),
            http_status: status,
            arrived,
            arrived_after_ms,
            round_trip_ms: answer.is_ok().then_some(round_trip.as_millis() as u64),
            reason,
        }
    }

    /// Removes a test job and its timeline (nothing when it is not there).
    pub async fn forget(&self, job_id: String) {
        let result = self.store.write(move |tx| crate::store::jobs::forget(tx, &JobKey::new(generic::NAME, &job_id))).await;
        if let Err(e) = result {
            tracing::debug!(error = %e, "cannot remove a self-test job");
        }
    }
}

fn not_arrived(status: StatusCode, text: &str) -> String {
    let said = super::session::one_line(text);
    let said: String = said.chars().take(160).collect();
    let hint = match status.as_u16() {
        200..=299 => " (the URL answered, but not this instance's receiver)",
        401 => " (the signature was refused: the URL leads to another NeverMiss or service)",
        404 => " (nothing at /hooks/generic there: is the URL forwarded to the receiver port?)",
        502..=504 | 530 => " (the tunnel's edge cannot reach this machine)",
        _ => "",
    };
    if said.is_empty() {
        format!("the public URL answered {status}{hint}")
    } else {
        format!("the public URL answered {status}{hint}: {said}")
    }
}

/// The innermost cause of a request error (e.g. "Connection refused (os error 111)").
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("no answer within {}s", SEND_TIMEOUT.as_secs());
    }
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let text = cause.to_string();
    if text.is_empty() {
        e.to_string()
    } else {
        text
    }
}

fn is_loopback_url(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let host = rest.split('/').next().unwrap_or("");
    let host = host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host);
    matches!(host, "localhost" | "[::1]") || host.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls() {
        assert!(is_loopback_url("http://127.0.0.1:4000"));
        assert!(is_loopback_url("http://localhost:4000"));
        assert!(!is_loopback_url("https://abc.trycloudflare.com"));
    }
}

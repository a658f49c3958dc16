//! The outgoing webhook sender: one JSON POST to the user's URL, signed as Standard Webhooks
//! sign (https://www.standardwebhooks.com), so that any of its libraries verifies it with the
//! channel's `whsec_` secret.
//!
//! The body (contract §5) says what happened and carries the job as the admin API shows
//! it (`JOB`): `job.finished`, `job.stuck`, `job.slow` (slower than usual), `job.abandoned` (each with `job`), `tunnel.down`
//! (`tunnel`, `down_since`), `jobs.summary` (`count`, `by_state`, `jobs`), `test` (`channel`);
//! plus `url`, the web UI's page for it, when the UI has an address.
//!
//! The headers: `webhook-id`, the message's stable identity (the same on every retry of an
//! outbox row, so the receiver can drop a repeat: `msg_<row>`, `summary_<first row>`, a fresh
//! `test_...` per test), `webhook-timestamp` (unix seconds, now), and `webhook-signature`
//! (`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, the key the secret's base64 after
//! `whsec_`).

use serde_json::{json, Value};

use super::{Answer, Links};
use crate::notification::{Message, Notification, NotifyError};
use crate::providers::standard_webhooks::{self, SecretFormat};
use crate::store::job::rfc3339;
use crate::store::outbox::{Kind, Subject};

/// Posts `message`, signed with `secret`, to `url`; answers the receiver's status and the start
/// of its body, or an error naming them (or why the secret cannot sign).
pub async fn send(http: &reqwest::Client, url: &str, secret: &str, message: &Message<'_>, links: &Links) -> Result<Answer, NotifyError> {
    let key = key(secret)?;
    let body = serde_json::to_vec(&body(message, links)).expect("a JSON value serializes");
    let id = webhook_id(message);
    let timestamp = chrono::Utc::now().timestamp();
    let signature = standard_webhooks::sign(&key, &id, timestamp, &body);
    let request = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(standard_webhooks::ID_HEADER, &id)
        .header(standard_webhooks::TIMESTAMP_HEADER, timestamp.to_string())
        .header(standard_webhooks::SIGNATURE_HEADER, signature)
        .body(body);
    super::post("webhook", request).await
}

/// The key a channel's secret signs with: the bytes of the base64 after `whsec_`; or why the
/// secret is not one (said when the channel is saved and when a send cannot sign).
pub fn key(secret: &str) -> Result<Vec<u8>, NotifyError> {
    if !secret.starts_with("whsec_") {
        return Err(NotifyError::channel("the webhook secret must start with whsec_ (a Standard Webhooks secret: whsec_ and base64)"));
    }
    SecretFormat::Base64.key(secret).map_err(|why| NotifyError::channel(format!("the webhook secret cannot sign: {why}")))
}

/// The `webhook-id` of a message: derived from its outbox row only, so every retry of that row
/// (after a failure or a restart) carries the same id; a test is new each time.
pub fn webhook_id(message: &Message<'_>) -> String {
    match message {
        Message::One(n) => format!("msg_{}", n.outbox_id),
        Message::Summary(s) => format!("summary_{}", s.outbox_id),
        Message::Test { .. } => format!("test_{}", hex::encode(rand::random::<[u8; 16]>())),
    }
}

/// The JSON body of a message (contract §5).
pub fn body(message: &Message<'_>, links: &Links) -> Value {
    let mut body = match message {
        Message::One(n) => one(n),
        Message::Summary(s) => {
            let jobs: Vec<Value> = s.notifications.iter().filter(|n| n.job().is_some()).map(job).collect();
            let mut body = json!({ "type": "jobs.summary", "count": s.count, "by_state": s.by_state, "jobs": jobs });
            let tunnels: Vec<Value> = s.notifications.iter().filter_map(tunnel).collect();
            if !tunnels.is_empty() {
                body["tunnels"] = Value::Array(tunnels);
            }
            body
        }
        Message::Test { channel } => json!({ "type": "test", "channel": channel }),
    };
    if let Some(link) = links.of(message) {
        body["url"] = Value::String(link);
    }
    body
}

/// One notification's body.
fn one(n: &Notification) -> Value {
    let kind = match n.kind {
        Kind::Terminal => "job.finished",
        Kind::Stuck => "job.stuck",
        Kind::Slow => "job.slow",
        Kind::Abandoned => "job.abandoned",
        Kind::GroupEnd => {
            let group = serde_json::to_value(&n.group).expect("a group serializes");
            return json!({ "type": "group.finished", "group": group, "name": n.group_name(), "title": n.title() });
        }
        Kind::TunnelDown => {
            let mut body = tunnel(n).unwrap_or_default();
            body["type"] = Value::from("tunnel.down");
            return body;
        }
    };
    json!({ "type": kind, "job": job(n) })
}

/// The notification's job as the admin API shows it (`JOB`); when the dispatcher did not load
/// it, what the notification itself knows of it.
fn job(n: &Notification) -> Value {
    if let Some(job) = &n.job {
        return serde_json::to_value(job).expect("a Job serializes");
    }
    let (provider, job_id) = n.job().unwrap_or_default();
    json!({
        "provider": provider,
        "job_id": job_id,
        "label": n.label,
        "state": n.state,
        "error": n.error,
        "result": n.result,
        "provider_url": n.provider_url,
    })
}

/// `{"tunnel", "down_since"}` of a tunnel's notification.
fn tunnel(n: &Notification) -> Option<Value> {
    match &n.subject {
        Subject::Tunnel { tunnel, down_since } => Some(json!({ "tunnel": tunnel, "down_since": rfc3339(*down_since) })),
        Subject::Job { .. } | Subject::Group { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notification::Summary;
    use crate::store::job::{Job, JobState};

    fn notification(outbox_id: i64, kind: Kind, state: JobState) -> Notification {
        Notification {
            outbox_id,
            kind,
            subject: Subject::job("openai", "batch_1"),
            label: Some("nightly eval".to_owned()),
            state,
            error: (state == JobState::Failed).then(|| "quota exceeded".to_owned()),
            duration_ms: None,
            job: None,
            group: None,
            result: None,
            provider_url: None,
            job_kind: None,
            expected_ms: None,
            may_not_cancel: false,
        }
    }

    fn links() -> Links {
        Links { base: Some("http://127.0.0.1:8765".into()) }
    }

    #[test]
    fn one_finished_job_is_job_finished_with_a_minimal_job_and_its_link() {
        let n = notification(41, Kind::Terminal, JobState::Failed);
        assert_eq!(
            body(&Message::One(&n), &links()),
            json!({
                "type": "job.finished",
                "job": { "provider": "openai", "job_id": "batch_1", "label": "nightly eval", "state": "failed", "error": "quota exceeded",
                         "result": null, "provider_url": null },
                "url": "http://127.0.0.1:8765/#/jobs/openai/batch_1",
            })
        );
    }

    #[test]
    fn a_loaded_job_is_sent_whole() {
        let mut n = notification(42, Kind::Terminal, JobState::Succeeded);
        let job = Job {
            provider: "openai".into(),
            job_id: "batch_1".into(),
            label: Some("nightly eval".into()),
            state: JobState::Succeeded,
            seq: Some(7),
            error: None,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            updated_at: "2026-01-01T00:05:00.000Z".into(),
            finished_at: Some("2026-01-01T00:05:00.000Z".into()),
            started_at: None,
            terminal_source: None,
            notified_at: None,
            detail: None,
            last_polled_at: None,
            poll_error: None,
            poll_error_kind: None,
            abandoned_at: None,
            abandoned_reason: None,
            group: Some("nightly".into()),
            result: None,
            provider_url: None,
            kind: Some("openai/batch".into()),
            expected_ms: Some(300_000),
        };
        n.job = Some(job.clone());
        let sent = body(&Message::One(&n), &Links::default());
        assert_eq!(sent["job"], serde_json::to_value(&job).unwrap());
        assert_eq!(sent["job"]["seq"], 7);
        assert!(sent.get("url").is_none(), "no base, no url: {sent}");
    }

    #[test]
    fn stuck_abandoned_and_tunnel_down_have_their_own_types() {
        let stuck = notification(1, Kind::Stuck, JobState::Running);
        assert_eq!(body(&Message::One(&stuck), &Links::default())["type"], "job.stuck");
        assert_eq!(body(&Message::One(&stuck), &Links::default())["job"]["state"], "running");
        let abandoned = notification(2, Kind::Abandoned, JobState::Unknown);
        assert_eq!(body(&Message::One(&abandoned), &Links::default())["type"], "job.abandoned");
        let mut down = notification(3, Kind::TunnelDown, JobState::Unknown);
        down.subject = Subject::Tunnel { tunnel: "cloudflared".into(), down_since: 1_700_000_000_000 };
        assert_eq!(
            body(&Message::One(&down), &links()),
            json!({
                "type": "tunnel.down",
                "tunnel": "cloudflared",
                "down_since": "2023-11-14T22:13:20.000Z",
                "url": "http://127.0.0.1:8765/#/jobs",
            })
        );
    }

    #[test]
    fn a_summary_counts_by_state_and_lists_its_jobs() {
        let summary = Summary::new(vec![
            notification(10, Kind::Terminal, JobState::Succeeded),
            notification(11, Kind::Terminal, JobState::Failed),
            notification(12, Kind::Terminal, JobState::Succeeded),
        ]);
        let sent = body(&Message::Summary(&summary), &links());
        assert_eq!(sent["type"], "jobs.summary");
        assert_eq!(sent["count"], 3);
        assert_eq!(sent["by_state"], json!({ "succeeded": 2, "failed": 1 }));
        assert_eq!(sent["jobs"].as_array().unwrap().len(), 3);
        assert_eq!(sent["jobs"][1]["state"], "failed");
        assert_eq!(sent["url"], "http://127.0.0.1:8765/#/jobs");
        assert!(sent.get("tunnels").is_none());
    }

    #[test]
    fn a_test_names_its_channel() {
        assert_eq!(body(&Message::Test { channel: "ci" }, &Links::default()), json!({ "type": "test", "channel": "ci" }));
    }

    #[test]
    fn the_id_is_the_rows_and_a_tests_is_new_each_time() {
        let n = notification(41, Kind::Terminal, JobState::Succeeded);
        assert_eq!(webhook_id(&Message::One(&n)), "msg_41");
        assert_eq!(webhook_id(&Message::One(&n.clone())), "msg_41");
        let summary =
            Summary::new(vec![notification(13, Kind::Terminal, JobState::Succeeded), notification(12, Kind::Terminal, JobState::Failed)]);
        assert_eq!(webhook_id(&Message::Summary(&summary)), "summary_12");
        let (a, b) = (webhook_id(&Message::Test { channel: "c" }), webhook_id(&Message::Test { channel: "c" }));
        assert!(a.starts_with("test_") && b.starts_with("test_") && a != b, "{a} {b}");
    }

    #[test]
    fn a_secret_must_be_whsec_and_base64() {
        assert_eq!(key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap().len(), 24);
        for (bad, says) in
            [("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "must start with whsec_"), ("whsec_", "empty"), ("whsec_not base64!", "not base64")]
        {
            let e = key(bad).unwrap_err().0;
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_groups_end_is_group_finished_with_its_progress() {
        use crate::store::groups::GroupSummary;
        let mut n = notification(7, Kind::GroupEnd, JobState::Unknown);
        n.subject = Subject::Group { group: "sweep-7".into(), total: 40 };
        n.group = Some(GroupSummary {
            name: "sweep-7".into(),
            total: 40,
            by_state: [("succeeded".to_owned(), 38), ("failed".to_owned(), 2)].into(),
            running: 0,
            started_at: "2026-01-01T00:00:00.000Z".into(),
            finished_at: Some("2026-01-01T00:41:00.000Z".into()),
            duration_ms: Some(41 * 60_000),
            slowest_running: None,
        });
        let sent = body(&Message::One(&n), &Links::default());
        assert_eq!(sent["type"], "group.finished");
        assert_eq!((sent["name"].as_str(), sent["group"]["total"].as_i64()), (Some("sweep-7"), Some(40)));
        assert_eq!(sent["group"]["by_state"]["failed"], 2);
        assert_eq!(sent["title"], "sweep-7 done: 38 succeeded, 2 failed, 41m 0s");
        assert!(n.is_urgent(), "a group with failures is urgent");
    }
}

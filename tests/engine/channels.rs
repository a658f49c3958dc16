//! Channels end to end (contract §5): an engine with channels set through
//! `/api/channels`, jobs finishing through signed webhooks, and each channel's real server on
//! loopback (an HTTP recorder for the webhook, ntfy, Slack and Discord; aiosmtpd for e-mail).
//! One outbox row per finished job and channel, each delivered once; a failing channel retried
//! until it recovers, its failures counted; a backlog as one summary; secrets kept out of the
//! database and the answers.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::channel_servers::{Recorder, SmtpMode, SmtpServer};
use crate::harness::serve_child::free_addr;
use crate::harness::signing::standard_webhooks_signature;
use crate::harness::{terminal_identity, wait_until, TestApp};

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A webhook POST checked with the harness's own Standard Webhooks signer; its id and body.
fn verified(request: &crate::harness::channel_servers::Request) -> (String, Value) {
    let id = request.header("webhook-id");
    let timestamp: i64 = request.header("webhook-timestamp").parse().expect("webhook-timestamp is unix seconds");
    let expected = standard_webhooks_signature(WHSEC, &id, timestamp, &request.body);
    let signatures = request.header("webhook-signature");
    assert!(signatures.split(' ').any(|s| s == expected), "signature {signatures:?}, expected {expected:?}");
    (id, request.json())
}

async fn finish(app: &TestApp, job_id: &str, state: &str) {
    app.deliver_json(
        &json!({ "deliveryId": format!("d-{job_id}"), "jobId": job_id, "state": state, "seq": 1, "label": format!("label of {job_id}") }),
    )
    .await;
}

/// What a job produced and its links reach every channel (contract §6): the webhook's JOB
/// with `result` and `provider_url`, ntfy's click, attachment and view buttons, Slack's and
/// Discord's result line and links (Discord's image), the e-mail's text; a failed job is urgent on
/// each (ntfy's high priority, a red bar and embed, the subject's prefix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_and_its_links_reach_every_channel() {
    let app = TestApp::spawn().await;
    let (hook, hook_url) = Recorder::start().await;
    let (ntfy, ntfy_url) = Recorder::start().await;
    let (slack, slack_url) = Recorder::start().await;
    let (discord, discord_url) = Recorder::start().await;
    let smtp = SmtpServer::start().await;
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": format!("{hook_url}/nevermiss"), "secret": WHSEC})).await;
    app.api.put_channel("phone", &json!({"kind": "ntfy", "url": format!("{ntfy_url}/my-jobs")})).await;
    app.api.put_channel("team", &json!({"kind": "slack", "url": format!("{slack_url}/services/T0/B0/x")})).await;
    app.api.put_channel("guild", &json!({"kind": "discord", "url": format!("{discord_url}/api/webhooks/1/abc")})).await;
    app.api
        .put_channel("mail", &json!({"kind": "email", "host": "127.0.0.1", "port": smtp.port, "tls": "none", "from": "nevermiss@example.com", "to": "me@example.com"}))
        .await;
    app.set_setting("ui_url", "https://hub.example.com").await;

    const IMAGE: &str = "https://files.example.com/out/cat.png";
    const REPORT: &str = "https://files.example.com/out/report.txt";
    app.deliver_json(&json!({
        "deliveryId": "d-made", "jobId": "made", "state": "succeeded", "seq": 1, "label": "render",
        "result": { "text": "a cat on a mat\nsecond line", "urls": [IMAGE, REPORT, "javascript:alert(1)"], "image": IMAGE }
    }))
    .await;
    wait_until("every channel has it", || async {
        hook.requests().len() == 1
            && ntfy.requests().len() == 1
            && slack.requests().len() == 1
            && discord.requests().len() == 1
            && smtp.count() == 1
    })
    .await;
    let expected = json!({ "text": "a cat on a mat\nsecond line", "urls": [IMAGE, REPORT], "image": IMAGE });

    let (_, body) = verified(&hook.only());
    assert_eq!(body["type"], "job.finished");
    assert_eq!(body["job"]["result"], expected, "{body}");
    assert_eq!(body["job"]["provider_url"], Value::Null);

    let body = ntfy.only().json();
    assert_eq!(body["click"], "https://hub.example.com/#/jobs/generic/made", "{body}");
    assert_eq!(body["attach"], IMAGE, "{body}");
    assert_eq!(body["priority"], 3);
    assert!(body["message"].as_str().unwrap().contains("a cat on a mat second line"), "{body}");
    assert_eq!(
        body["actions"],
        json!([
            { "action": "view", "label": "Open in NeverMiss", "url": "https://hub.example.com/#/jobs/generic/made" },
            { "action": "view", "label": "Open result", "url": IMAGE },
        ])
    );

    let section = slack.only().json()["blocks"][0]["text"]["text"].as_str().unwrap().to_owned();
    assert!(section.contains("a cat on a mat second line"), "{section}");
    assert!(section.contains(&format!("<{IMAGE}|Open result>")), "{section}");
    assert!(slack.only().json().get("attachments").is_none(), "a success has no urgent bar");
    let embed = discord.only().json()["embeds"][0].clone();
    assert!(embed["description"].as_str().unwrap().contains(&format!("[Open result]({IMAGE})")), "{embed}");
    assert_eq!(embed["image"]["url"], IMAGE);

    let message = smtp.message(1).await;
    assert_eq!(message["subject"], "Succeeded: render");
    let text = message["text"].as_str().unwrap();
    assert!(text.contains("a cat on a mat second line") && text.contains(&format!("Open result: {IMAGE}")), "{message}");

    // A failed job is urgent everywhere.
    app.deliver_json(
        &json!({ "deliveryId": "d-broke", "jobId": "broke", "state": "failed", "seq": 1, "label": "render", "error": "out of memory" }),
    )
    .await;
    wait_until("every channel has the failure", || async {
        ntfy.requests().len() == 2 && slack.requests().len() == 2 && discord.requests().len() == 2 && smtp.count() == 2
    })
    .await;
    assert_eq!(ntfy.requests()[1].json()["priority"], 4);
    assert_eq!(slack.requests()[1].json()["attachments"][0]["color"], "#E01E5A");
    assert_eq!(discord.requests()[1].json()["embeds"][0]["color"], 0xE01E5A);
    assert_eq!(smtp.message(2).await["subject"], "[Action needed] Failed: render");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_finished_job_reaches_each_channel_once_in_its_own_format() {
    let app = TestApp::spawn().await;
    let (hook, hook_url) = Recorder::start().await;
    let (ntfy, ntfy_url) = Recorder::start().await;
    let (slack, slack_url) = Recorder::start().await;
    let (discord, discord_url) = Recorder::start().await;
    let smtp = SmtpServer::start().await;
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": format!("{hook_url}/nevermiss"), "secret": WHSEC})).await;
    app.api.put_channel("phone", &json!({"kind": "ntfy", "url": format!("{ntfy_url}/my-jobs"), "token": "tk_secret"})).await;
    app.api.put_channel("team", &json!({"kind": "slack", "url": format!("{slack_url}/services/T0/B0/x")})).await;
    app.api.put_channel("guild", &json!({"kind": "discord", "url": format!("{discord_url}/api/webhooks/1/abc")})).await;
    app.api
        .put_channel("mail", &json!({"kind": "email", "host": "127.0.0.1", "port": smtp.port, "tls": "none", "from": "nevermiss@example.com", "to": "me@example.com"}))
        .await;
    app.set_setting("ui_url", "https://hub.example.com").await;

    finish(&app, "job-a", "succeeded").await;
    finish(&app, "job-b", "failed").await;
    finish(&app, "job-c", "canceled").await;
    // A duplicate and a stale event change nothing.
    finish(&app, "job-a", "succeeded").await;

    wait_until("every channel has its three", || async {
        hook.requests().len() == 3
            && ntfy.requests().len() == 3
            && slack.requests().len() == 3
            && discord.requests().len() == 3
            && smtp.count() == 3
    })
    .await;
    // Each row is marked delivered right after its channel took it.
    wait_until("every row marked delivered", || async { app.count("SELECT count(*) FROM outbox WHERE delivered_at IS NULL") == 0 }).await;
    for job in ["job-a", "job-b", "job-c"] {
        assert_eq!(app.notifier.count(&terminal_identity(job)), 1, "the desktop shows {job} once");
    }

    // The webhook: signed, one id per outbox row, the JOB whole.
    let mut ids = BTreeSet::new();
    let mut states = BTreeSet::new();
    for request in hook.requests() {
        assert_eq!(request.path, "/nevermiss");
        let (id, body) = verified(&request);
        ids.insert(id);
        assert_eq!(body["type"], "job.finished", "{body}");
        assert_eq!(body["job"]["provider"], "generic");
        assert!(body["job"]["label"].as_str().unwrap().starts_with("label of job-"), "{body}");
        assert!(body["url"].as_str().unwrap().starts_with("https://hub.example.com/#/jobs/generic/job-"), "{body}");
        states.insert(body["job"]["state"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 3, "one webhook-id per row: {ids:?}");
    assert_eq!(states, BTreeSet::from(["succeeded".to_owned(), "failed".to_owned(), "canceled".to_owned()]));

    // ntfy: the token, the topic, a click link to the job; the failed one urgent.
    for request in ntfy.requests() {
        assert_eq!(request.header("authorization"), "Bearer tk_secret");
        let body = request.json();
        assert_eq!(body["topic"], "my-jobs", "{body}");
        assert!(body["click"].as_str().unwrap().starts_with("https://hub.example.com/#/jobs/generic/"), "{body}");
        if body["title"].as_str().unwrap().starts_with("Failed") {
            assert!(body["priority"].as_i64().unwrap() >= 4, "a failed job is urgent: {body}");
        }
    }
    assert!(slack.requests().iter().all(|r| r.json()["text"].as_str().is_some_and(|t| t.contains("label of job-"))));
    assert!(discord.requests().iter().all(|r| r.json()["embeds"][0]["title"].as_str().is_some_and(|t| t.contains("label of job-"))));

    // E-mail: one message per job, its subject the outcome and label, the link in the text.
    let mut subjects = BTreeSet::new();
    for n in 1..=3 {
        let message = smtp.message(n).await;
        let subject = message["subject"].as_str().unwrap().to_owned();
        let text = message["text"].as_str().unwrap_or_default().to_owned();
        assert!(text.contains("https://hub.example.com/#/jobs/generic/job-"), "{message}");
        subjects.insert(subject);
    }
    assert_eq!(
        subjects,
        BTreeSet::from([
            "Succeeded: label of job-a".to_owned(),
            "[Action needed] Failed: label of job-b".to_owned(),
            "Canceled: label of job-c".to_owned()
        ])
    );

    // Tallies per channel, and no secret in an answer or the database.
    for name in ["hook", "phone", "team", "guild", "mail", "desktop"] {
        let channel = app.api.channel(name).await;
        assert_eq!((channel.enqueued, channel.delivered, channel.failed, channel.pending), (3, 3, 0, 0), "{channel:?}");
        assert!(!channel.failing);
    }
    let listing = app.api.raw_get("/api/channels").await.text().await.unwrap();
    for secret in [WHSEC, "tk_secret", "/services/T0/B0/x", "/api/webhooks/1/abc"] {
        assert!(!listing.contains(secret), "{secret} must not be answered: {listing}");
        assert_eq!(
            app.count(&format!("SELECT count(*) FROM channels WHERE config LIKE '%{secret}%'")),
            0,
            "{secret} is not in the database"
        );
    }
    assert_eq!(app.api.channel("team").await.secrets_set, ["url"]);
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 18, "six channels, three jobs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_that_fails_five_times_then_recovers_delivers_once_and_counts_the_failures() {
    let app = TestApp::spawn().await.with_retry_unit(Duration::from_millis(20)).await;
    let (hook, url) = Recorder::start().await;
    for _ in 0..5 {
        hook.answer(503, &[], "upstream is napping");
    }
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": url, "secret": WHSEC})).await;
    finish(&app, "flaky", "succeeded").await;

    wait_until("delivered after five failures", || async { app.api.channel("hook").await.delivered == 1 }).await;
    let requests = hook.requests();
    assert_eq!(requests.len(), 6, "five failed attempts and the one that went through");
    let ids: BTreeSet<String> = requests.iter().map(|r| verified(r).0).collect();
    assert_eq!(ids.len(), 1, "every attempt carries the row's one webhook-id, so the receiver can dedupe: {ids:?}");
    let channel = app.api.channel("hook").await;
    assert_eq!((channel.enqueued, channel.delivered, channel.failed, channel.pending), (1, 1, 5, 0));
    assert!(channel.last_error.as_deref().unwrap().contains("503"), "{channel:?}");
    assert!(!channel.failing, "it went through since");
    assert!(app.api.metrics().await.failing_channels.is_empty());
    // Nothing more comes for it: the next job's one request is the only one after it.
    finish(&app, "next", "succeeded").await;
    wait_until("the next job delivered", || async { app.api.channel("hook").await.delivered == 2 }).await;
    let requests = hook.requests();
    assert_eq!(requests.len(), 7, "the flaky row was not sent again");
    assert_eq!(verified(&requests[6]).1["job"]["job_id"], "next");
    assert_eq!(app.notifier.count(&terminal_identity("flaky")), 1, "the desktop was not held up by the webhook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_that_keeps_failing_is_a_warning_in_the_metrics() {
    let app = TestApp::spawn().await;
    let (hook, url) = Recorder::start().await;
    for _ in 0..50 {
        hook.answer(410, &[], "this hook is gone");
    }
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": url, "secret": WHSEC})).await;
    finish(&app, "lost", "failed").await;
    wait_until("the failure shows in the metrics", || async { app.api.metrics().await.failing_channels.contains_key("hook") }).await;
    let failing = &app.api.metrics().await.failing_channels["hook"];
    assert_eq!(failing.pending, 1);
    assert!(failing.last_error.contains("410") && failing.last_error.contains("this hook is gone"), "{failing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_becomes_one_summary_and_every_row_it_covers_is_delivered() {
    let app = TestApp::spawn().await.with_gate_closed().await;
    let (hook, url) = Recorder::start().await;
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": url, "secret": WHSEC, "summary_after": 5})).await;
    app.api.put_channel("desktop", &json!({"kind": "desktop", "summary_after": 5})).await;
    for i in 0..12 {
        finish(&app, &format!("away-{i}"), if i < 10 { "succeeded" } else { "failed" }).await;
    }
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE delivered_at IS NULL"), 24, "held: 12 for the desktop, 12 for the hook");
    app.open_gate();

    wait_until("everything delivered", || async { app.count("SELECT count(*) FROM outbox WHERE delivered_at IS NULL") == 0 }).await;
    let (_, body) = verified(&hook.only());
    assert_eq!(body["type"], "jobs.summary", "{body}");
    assert_eq!(body["count"], 12);
    assert_eq!(body["by_state"], json!({"succeeded": 10, "failed": 2}));
    assert_eq!(body["jobs"].as_array().unwrap().len(), 12);
    let shown = app.notifier.shown();
    assert_eq!(shown.len(), 1, "the desktop shows one summary: {shown:?}");
    assert_eq!(shown[0], ("12 jobs finished while you were away".to_owned(), "10 succeeded, 2 failed".to_owned()));
    let channel = app.api.channel("hook").await;
    assert_eq!((channel.enqueued, channel.delivered, channel.pending), (12, 12, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_test_answers_what_the_channel_answered() {
    let app = TestApp::spawn().await;
    let (hook, url) = Recorder::start().await;
    hook.answer(404, &[], "no such hook here");
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": url, "secret": WHSEC})).await;
    let refused = app.api.test_channel("hook").await;
    assert!(!refused.ok);
    assert!(refused.answer.contains("404") && refused.answer.contains("no such hook here"), "{refused:?}");
    let taken = app.api.test_channel("hook").await;
    assert!(taken.ok, "{taken:?}");
    assert!(taken.answer.contains("200"), "{taken:?}");
    let (_, body) = verified(&hook.requests()[1]);
    assert_eq!(body["type"], "test");
    assert_eq!(app.api.test_channel("desktop").await.answer, "shown on this desktop");
    // A test is not a notification: nothing was enqueued or counted.
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_are_checked_field_by_field_and_removing_one_drops_its_pending_rows() {
    let app = TestApp::spawn().await.with_gate_closed().await;
    let refused = app.api.refused_channel("hook", &json!({"kind": "webhook", "url": "ftp://x", "secret": "not-a-whsec"})).await;
    let errors = refused.errors.unwrap();
    assert!(errors["url"].contains("http"), "{errors:?}");
    assert!(errors["secret"].contains("whsec_"), "{errors:?}");
    let refused =
        app.api.refused_channel("mail", &json!({"kind": "email", "host": "smtp.example.com", "from": "me", "to": "you@example.com"})).await;
    assert!(refused.errors.unwrap()["from"].contains("not an e-mail address"));
    let refused = app.api.refused_channel("slack", &json!({"kind": "slack"})).await;
    assert_eq!(refused.errors.unwrap()["url"], "is required");
    let refused = app.api.refused_channel("laptop", &json!({"kind": "device"})).await;
    assert!(refused.errors.unwrap()["kind"].contains("devices add"));
    let refused = app.api.refused_channel("quiet", &json!({"kind": "desktop", "quiet_hours": {"from": "25:00", "to": "07:00"}})).await;
    assert!(refused.errors.unwrap().contains_key("quiet_hours"));
    let bad_name = app.api.raw_put("/api/channels/Bad.Name", &json!({"kind": "desktop"})).await;
    assert_eq!(bad_name.status(), reqwest::StatusCode::BAD_REQUEST);

    // A secret left out keeps the stored one.
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": "http://127.0.0.1:9/x", "secret": WHSEC})).await;
    let changed = app.api.put_channel("hook", &json!({"kind": "webhook", "url": "http://127.0.0.1:9/y", "summary_after": 0})).await;
    assert_eq!(changed.secrets_set, ["secret"]);
    assert_eq!(changed.fields.url.as_deref(), Some("http://127.0.0.1:9/y"));
    let quiet = app.api.put_channel("desktop", &json!({"kind": "desktop", "quiet_hours": {"from": "22:00", "to": "7:00"}})).await;
    assert_eq!(quiet.quiet_hours.unwrap().to, "07:00");

    finish(&app, "left", "succeeded").await;
    assert_eq!(app.api.channel("hook").await.pending, 1);
    let removed: nevermiss_engine::api::channels::ChannelRemoved =
        app.api.call(reqwest::Method::DELETE, "/api/channels/hook", None, reqwest::StatusCode::OK).await;
    assert_eq!(removed.dropped, 1);
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE channel = 'hook'"), 0);
    let gone = app.api.raw_post("/api/channels/hook/test", &json!({})).await;
    assert_eq!(gone.status(), reqwest::StatusCode::NOT_FOUND);
}

/// Channels stored as rows of the `channels` table with their `config` JSON as it has always
/// been written (an e-mail row without a port and with one) are read by the API and send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_rows_in_the_stored_format_are_shown_and_send() {
    let app = TestApp::spawn().await;
    let (ntfy, ntfy_url) = Recorder::start().await;
    let smtp = SmtpServer::start().await;
    let rows = [
        ("phone", "ntfy", json!({"url": format!("{ntfy_url}/my-jobs")})),
        (
            "mail",
            "email",
            json!({"host": "127.0.0.1", "port": smtp.port, "tls": "none", "from": "nevermiss@example.com", "to": "me@example.com, ops@example.com"}),
        ),
        (
            "relay",
            "email",
            json!({"host": "smtp.example.com", "tls": "tls", "username": "me", "from": "a@example.com", "to": "b@example.com"}),
        ),
    ];
    for (name, kind, config) in rows {
        let sql = format!("INSERT INTO channels (name, kind, config, created_at) VALUES ('{name}', '{kind}', '{config}', 0)");
        app.engine().services.store.write(move |tx| tx.execute(&sql, [])).await.unwrap();
    }

    assert_eq!(app.api.channel("phone").await.fields.url, Some(format!("{ntfy_url}/my-jobs")));
    let mail = app.api.channel("mail").await.fields;
    assert_eq!(
        (mail.host.as_deref(), mail.port, mail.to.as_deref()),
        (Some("127.0.0.1"), Some(smtp.port), Some("me@example.com, ops@example.com"))
    );
    let relay = app.api.channel("relay").await.fields;
    assert_eq!((relay.port, relay.username.as_deref()), (Some(465), Some("me")), "no port: the one its TLS mode is served on");

    let phone = app.api.test_channel("phone").await;
    assert!(phone.ok, "{phone:?}");
    assert_eq!(ntfy.only().json()["topic"], "my-jobs");
    let mail = app.api.test_channel("mail").await;
    assert!(mail.ok, "{mail:?}");
    assert_eq!(smtp.message(1).await["rcpt_tos"], json!(["me@example.com", "ops@example.com"]));
}

/// A stored row its kind cannot send with answers why, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_channel_missing_a_field_says_which() {
    let app = TestApp::spawn().await;
    let sql = "INSERT INTO channels (name, kind, config, created_at) VALUES ('mail', 'email', '{\"host\": \"h\", \"to\": \"me@example.com\"}', 0)";
    app.engine().services.store.write(move |tx| tx.execute(sql, [])).await.unwrap();
    let answer = app.api.test_channel("mail").await;
    assert!(!answer.ok);
    assert_eq!(answer.answer, "the channel cannot send: from is required (set it in Settings, Channels)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_hours_hold_what_is_not_urgent_and_let_a_failure_through() {
    use chrono::Timelike;
    let app = TestApp::spawn().await;
    // Quiet from a minute ago to ten minutes from now, in this machine's local time (the engine's).
    let now = chrono::Local::now();
    let minute = i64::from(now.hour()) * 60 + i64::from(now.minute());
    let clock = |m: i64| format!("{:02}:{:02}", m.rem_euclid(1440) / 60, m.rem_euclid(1440) % 60);
    app.api
        .put_channel("desktop", &json!({"kind": "desktop", "summary_after": 0, "quiet_hours": {"from": clock(minute - 1), "to": clock(minute + 10), "urgent_breaks_through": true}}))
        .await;
    finish(&app, "hushed", "succeeded").await;
    finish(&app, "loud", "failed").await;
    wait_until("the failure broke through", || async { app.notifier.count(&terminal_identity("loud")) == 1 }).await;
    let held_until = app.count("SELECT next_attempt_at FROM outbox WHERE job_id = 'hushed' AND delivered_at IS NULL");
    let in_eight_minutes = nevermiss_engine::store::job::now_ms() + 8 * 60_000;
    assert!(held_until > in_eight_minutes, "the success waits for the end of the quiet hours ({held_until})");
    assert_eq!(app.notifier.count(&terminal_identity("hushed")), 0);

    // Quiet hours taken off: what they held goes at once.
    app.api.put_channel("desktop", &json!({"kind": "desktop", "summary_after": 0})).await;
    wait_until("the held one is shown", || async { app.notifier.count(&terminal_identity("hushed")) == 1 }).await;
    // The dispatcher marks a row delivered right after the notifier showed it.
    wait_until("the held one is marked delivered", || async { app.api.channel("desktop").await.pending == 0 }).await;
    assert_eq!(app.notifier.count(&terminal_identity("hushed")), 1, "shown once");
}

/// Whether every row of `channel` is delivered.
fn nothing_pending_for(app: &TestApp, channel: &str) -> bool {
    app.count(&format!("SELECT count(*) FROM outbox WHERE channel = '{channel}' AND delivered_at IS NULL")) == 0
}

/// An outage: a webhook receiver down (503) while twelve jobs finish. Its rows wait
/// together for the channel's next attempt, and when it answers again the twelve are one
/// summary: one POST that goes through, every row delivered, nothing pending, each refused
/// attempt counted as a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_down_while_twelve_jobs_finish_gets_one_summary_when_it_answers_again() {
    a_webhook_down_gets_one_summary(crate::harness::app::Backend::Sqlite).await;
}

/// The same on PostgreSQL, whatever the run's store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_down_while_twelve_jobs_finish_gets_one_summary_when_it_answers_again_on_postgres() {
    a_webhook_down_gets_one_summary(crate::harness::app::Backend::Postgres).await;
}

/// Whether every one of the `n` rows `channel` holds is pending and has been in a failed
/// attempt. The rows of a failing channel wait together, so the attempt that took the last
/// enqueued took them all: the channel's next attempt, once it answers, is for all `n`. (Answering
/// as soon as `n` are enqueued races an attempt in flight: one claimed before the last row was
/// enqueued, sent once the channel answers, is a summary of the rows it claimed, and the last row
/// goes after it on its own, as it should.)
fn all_pending_and_refused_once(app: &TestApp, channel: &str, n: i64) -> bool {
    app.count(&format!("SELECT count(*) FROM outbox WHERE channel = '{channel}' AND delivered_at IS NULL AND attempts >= 1")) == n
}

async fn a_webhook_down_gets_one_summary(backend: crate::harness::app::Backend) {
    let app = TestApp::spawn_on(backend).await.with_retry_unit(Duration::from_millis(20)).await;
    let (hook, url) = Recorder::start().await;
    hook.refuse_all(503, "upstream is napping");
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": url, "secret": WHSEC, "summary_after": 5})).await;
    for i in 0..12 {
        finish(&app, &format!("away-{i}"), if i < 10 { "succeeded" } else { "failed" }).await;
    }
    wait_until("the twelve enqueued, each refused at least once, and the hook failing", || async {
        let channel = app.api.channel("hook").await;
        channel.enqueued == 12 && channel.failing && all_pending_and_refused_once(&app, "hook", 12)
    })
    .await;
    hook.accept();

    wait_until("the hook's rows delivered", || async { nothing_pending_for(&app, "hook") }).await;
    let requests = hook.requests();
    let through: Vec<_> = requests.iter().filter(|r| r.status == 200).collect();
    // Each request as (status, type, the jobs it names), in the order they came.
    let seen: Vec<_> = requests
        .iter()
        .map(|r| {
            let body = r.json();
            let jobs: Vec<_> = match body["type"].as_str() {
                Some("jobs.summary") => {
                    body["jobs"].as_array().map(|j| j.iter().map(|j| j["job_id"].clone()).collect()).unwrap_or_default()
                }
                _ => vec![body["job"]["job_id"].clone()],
            };
            (r.status, body["type"].clone(), jobs)
        })
        .collect();
    assert_eq!(through.len(), 1, "one POST once it answers: {seen:?}");
    let (_, body) = verified(through[0]);
    assert_eq!(body["type"], "jobs.summary", "{body}");
    assert_eq!(body["count"], 12);
    assert_eq!(body["by_state"], json!({"succeeded": 10, "failed": 2}));
    let refused = requests.iter().filter(|r| r.status == 503).count() as i64;
    assert_eq!(refused + 1, requests.len() as i64, "every other request was refused");
    let channel = app.api.channel("hook").await;
    assert_eq!((channel.enqueued, channel.delivered, channel.pending, channel.failed), (12, 12, 0, refused), "{channel:?}");
    assert!(channel.last_error.as_deref().unwrap().contains("503"), "{channel:?}");
    assert!(!channel.failing, "it went through since");
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE channel = 'hook' AND delivered_at IS NULL"), 0);
}

/// The same outage for e-mail: the channel's SMTP server is not up (its port refuses
/// connections) while twelve jobs finish; once it is up, the twelve are one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_smtp_server_down_while_twelve_jobs_finish_gets_one_summary_once_it_is_up() {
    let app = TestApp::spawn().await.with_retry_unit(Duration::from_millis(20)).await;
    let port = free_addr().port();
    app.api
        .put_channel(
            "mail",
            &json!({"kind": "email", "host": "127.0.0.1", "port": port, "tls": "none", "from": "nevermiss@example.com", "to": "me@example.com", "summary_after": 5}),
        )
        .await;
    for i in 0..12 {
        finish(&app, &format!("away-{i}"), if i < 10 { "succeeded" } else { "failed" }).await;
    }
    wait_until("the twelve enqueued, each tried at least once, and the mail channel failing", || async {
        let channel = app.api.channel("mail").await;
        channel.enqueued == 12 && channel.failing && all_pending_and_refused_once(&app, "mail", 12)
    })
    .await;
    let down = app.api.channel("mail").await;
    assert!(down.last_error.as_deref().unwrap().contains(&format!("127.0.0.1:{port}")), "{down:?}");
    let smtp = SmtpServer::start_at(SmtpMode::Plain, port).await;

    wait_until("the mail channel's rows delivered", || async { nothing_pending_for(&app, "mail") }).await;
    assert_eq!(smtp.count(), 1, "one message for the twelve");
    let message = smtp.message(1).await;
    assert_eq!(message["subject"], "[Action needed] 12 jobs finished while you were away", "two of them failed");
    let text = message["text"].as_str().unwrap();
    assert!(text.contains("10 succeeded, 2 failed") && text.contains("- Succeeded: label of away-0"), "{text}");
    let channel = app.api.channel("mail").await;
    assert_eq!((channel.enqueued, channel.delivered, channel.pending), (12, 12, 0), "{channel:?}");
    assert!(channel.failed >= down.failed && !channel.failing, "{channel:?}");
}

/// A message the channel answers and refuses (a 422 for that one payload) is retried on its
/// own backoff and does not hold the channel: the others, due with it and behind it, go
/// through while it is still refused; it goes once the receiver takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_channel_refuses_is_retried_on_its_own_while_the_others_go_through() {
    let app = TestApp::spawn().await.with_retry_unit(Duration::from_millis(20)).await.with_gate_closed().await;
    let (hook, url) = Recorder::start().await;
    hook.refuse_matching("\"refused-one\"", 422, "this payload is not for us");
    app.api.put_channel("hook", &json!({"kind": "webhook", "url": url, "secret": WHSEC, "summary_after": 0})).await;
    // Due together, the refused one first.
    finish(&app, "refused-one", "failed").await;
    for i in 0..3 {
        finish(&app, &format!("good-{i}"), "succeeded").await;
    }
    app.open_gate();

    let refused_requests = || hook.requests().iter().filter(|r| r.status == 422).count();
    wait_until("the three others delivered and the refused one retried", || async {
        app.api.channel("hook").await.delivered == 3 && refused_requests() >= 2
    })
    .await;
    let channel = app.api.channel("hook").await;
    assert_eq!(channel.pending, 1, "only the refused one waits: {channel:?}");
    assert!(channel.last_error.as_deref().unwrap().contains("422"), "{channel:?}");
    let through: BTreeSet<String> =
        hook.requests().iter().filter(|r| r.status == 200).map(|r| verified(r).1["job"]["job_id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(through, BTreeSet::from(["good-0".to_owned(), "good-1".to_owned(), "good-2".to_owned()]));

    hook.accept();
    wait_until("the refused one delivered once taken", || async { nothing_pending_for(&app, "hook") }).await;
    let requests = hook.requests();
    let channel = app.api.channel("hook").await;
    assert_eq!((channel.enqueued, channel.delivered, channel.pending), (4, 4, 0));
    assert_eq!(channel.failed, requests.iter().filter(|r| r.status == 422).count() as i64, "each refusal counted");
    assert_eq!(verified(requests.last().unwrap()).1["job"]["job_id"], "refused-one");
}

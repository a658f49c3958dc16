//! The channel senders against real servers on loopback: an HTTP recorder standing for ntfy, a
//! webhook receiver, Slack and Discord (each request checked against the shape that service
//! documents), and a real SMTP server (aiosmtpd) for e-mail, plain, with STARTTLS and with TLS. The webhook's signature is checked
//! with the harness's own Standard Webhooks signer (`harness::signing`), not the engine's.

use std::collections::BTreeMap;

use serde_json::json;

use nevermiss_engine::channels::config::EmailConfig;
use nevermiss_engine::channels::email;
use nevermiss_engine::channels::{chat, ntfy, webhook, EmailTls, Links};
use nevermiss_engine::extra_ca::ExtraRoots;
use nevermiss_engine::notification::{Fault, Notification, NotifyError};
use nevermiss_engine::notification::{Message, Summary};
use nevermiss_engine::store::job::JobState;

use crate::harness::channel_servers::{Recorder, SmtpMode, SmtpServer, SMTP_LOGIN, SMTP_PASSWORD};
use crate::harness::signing::standard_webhooks_signature;
use nevermiss_engine::store::outbox::{Kind, Subject};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn finished(outbox_id: i64, state: JobState, label: &str) -> Notification {
    Notification {
        outbox_id,
        kind: Kind::Terminal,
        subject: Subject::job("replicate", "pred 42"),
        label: Some(label.to_owned()),
        state,
        error: (state == JobState::Failed).then(|| "CUDA out of memory".to_owned()),
        duration_ms: Some(125_000),
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
    Links { base: Some("https://hub.example".into()) }
}

const JOB_LINK: &str = "https://hub.example/#/jobs/replicate/pred%2042";

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

// ----- ntfy -----

#[tokio::test]
async fn ntfy_publishes_json_to_the_servers_root_with_the_token() {
    let (server, url) = Recorder::start().await;
    server.answer(200, &[("content-type", "application/json")], r#"{"id":"hw7kzN","event":"message","topic":"nevermiss_jobs"}"#);
    let n = finished(5, JobState::Failed, "Frühjahrs-Training ☀");

    let answer = ntfy::send(&http(), &format!("{url}/nevermiss_jobs"), Some("tk_abc"), &Message::One(&n), &links()).await.unwrap();

    assert!(answer.starts_with("HTTP 200 OK: ") && answer.contains("hw7kzN"), "{answer}");
    let request = server.only();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/", "JSON is published to the server's root");
    assert_eq!(request.header("authorization"), "Bearer tk_abc");
    assert!(request.header("content-type").starts_with("application/json"), "{:?}", request.headers);
    assert_eq!(
        request.json(),
        json!({
            "topic": "nevermiss_jobs",
            "title": "Failed: Frühjahrs-Training ☀",
            "message": "replicate · pred 42 · 2m 5s\nCUDA out of memory",
            "priority": 4,
            "tags": ["x"],
            "click": JOB_LINK,
        })
    );
}

#[tokio::test]
async fn ntfy_without_a_token_sends_no_authorization_and_a_refusal_is_an_error() {
    let (server, url) = Recorder::start().await;
    server.answer(200, &[], r#"{"id":"a"}"#);
    server.answer(403, &[], r#"{"code":40301,"http":403,"error":"forbidden"}"#);
    server.answer(429, &[("retry-after", "30")], r#"{"code":42901,"http":429,"error":"limit reached: too many requests"}"#);
    server.answer(400, &[], r#"{"code":40007,"http":400,"error":"invalid request: message too long"}"#);
    let test = Message::Test { channel: "phone" };

    ntfy::send(&http(), &format!("{url}/jobs"), None, &test, &Links::default()).await.unwrap();
    assert!(server.only().headers.get("authorization").is_none());
    assert_eq!(server.only().json()["tags"], json!(["bell"]));

    // Whose failure each is: a wrong token and a rate limit hold every message (the channel's),
    // a 400 refuses this one.
    let NotifyError(e, fault) = ntfy::send(&http(), &format!("{url}/jobs"), Some("tk_wrong"), &test, &Links::default()).await.unwrap_err();
    assert!(e.contains("403") && e.contains("forbidden"), "{e}");
    assert_eq!(fault, Fault::Channel);
    let NotifyError(e, fault) = ntfy::send(&http(), &format!("{url}/jobs"), None, &test, &Links::default()).await.unwrap_err();
    assert!(e.contains("429") && e.contains("Retry-After: 30") && e.contains("limit reached"), "{e}");
    assert_eq!(fault, Fault::Channel);
    let NotifyError(e, fault) = ntfy::send(&http(), &format!("{url}/jobs"), None, &test, &Links::default()).await.unwrap_err();
    assert!(e.contains("400") && e.contains("message too long"), "{e}");
    assert_eq!(fault, Fault::Message);

    let e = ntfy::send(&http(), &format!("{url}/"), None, &test, &Links::default()).await.unwrap_err().0;
    assert!(e.contains("does not end with a topic"), "{e}");
    assert_eq!(server.requests().len(), 4, "no request without a topic");
}

// ----- webhook -----

/// Checks a received webhook's three headers and its signature with the independent signer;
/// returns its id.
fn verified(request: &crate::harness::channel_servers::Request) -> String {
    let id = request.header("webhook-id");
    let timestamp: i64 = request.header("webhook-timestamp").parse().expect("webhook-timestamp is unix seconds");
    let now = chrono::Utc::now().timestamp();
    assert!((now - 60..=now + 1).contains(&timestamp), "webhook-timestamp {timestamp} is not now ({now})");
    assert!(request.header("content-type").starts_with("application/json"), "{:?}", request.headers);
    let expected = standard_webhooks_signature(SECRET, &id, timestamp, &request.body);
    let signatures = request.header("webhook-signature");
    assert!(signatures.split(' ').any(|s| s == expected), "signature {signatures:?}, expected {expected:?} over {id}.{timestamp}.body");
    id
}

#[tokio::test]
async fn a_webhook_is_signed_and_a_retry_of_the_same_row_has_the_same_id() {
    let (server, url) = Recorder::start().await;
    server.answer(500, &[], "database down");
    server.answer(200, &[], "thanks");
    let n = finished(41, JobState::Succeeded, "nightly");
    let hook = format!("{url}/hooks/nevermiss");

    let e = webhook::send(&http(), &hook, SECRET, &Message::One(&n), &links()).await.unwrap_err().0;
    assert!(e.contains("500") && e.contains("database down"), "{e}");
    let answer = webhook::send(&http(), &hook, SECRET, &Message::One(&n), &links()).await.unwrap();
    assert_eq!(answer, "HTTP 200 OK: thanks");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let ids: Vec<String> = requests.iter().map(verified).collect();
    assert_eq!(ids, ["msg_41", "msg_41"], "a retry of the same outbox row carries the same webhook-id");
    assert_eq!(requests[0].path, "/hooks/nevermiss");
    assert_eq!(requests[0].body, requests[1].body);
    assert_eq!(
        requests[1].json(),
        json!({
            "type": "job.finished",
            "job": { "provider": "replicate", "job_id": "pred 42", "label": "nightly", "state": "succeeded", "error": null,
                     "result": null, "provider_url": null },
            "url": JOB_LINK,
        })
    );
}

#[tokio::test]
async fn a_webhook_summary_and_tests_have_their_own_ids() {
    let (server, url) = Recorder::start().await;
    let summary = Summary::new(vec![
        finished(12, JobState::Succeeded, "a"),
        finished(13, JobState::Failed, "b"),
        finished(14, JobState::Succeeded, "c"),
    ]);

    webhook::send(&http(), &url, SECRET, &Message::Summary(&summary), &links()).await.unwrap();
    webhook::send(&http(), &url, SECRET, &Message::Test { channel: "ci" }, &Links::default()).await.unwrap();
    webhook::send(&http(), &url, SECRET, &Message::Test { channel: "ci" }, &Links::default()).await.unwrap();

    let requests = server.requests();
    let ids: Vec<String> = requests.iter().map(verified).collect();
    assert_eq!(ids[0], "summary_12");
    assert!(ids[1].starts_with("test_") && ids[2].starts_with("test_") && ids[1] != ids[2], "{ids:?}");
    let body = requests[0].json();
    assert_eq!(body["type"], "jobs.summary");
    assert_eq!(body["count"], 3);
    assert_eq!(body["by_state"], json!(BTreeMap::from([("failed", 1), ("succeeded", 2)])));
    let states: Vec<&str> = body["jobs"].as_array().unwrap().iter().map(|j| j["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["succeeded", "failed", "succeeded"]);
    assert_eq!(body["url"], "https://hub.example/#/jobs");
    assert_eq!(requests[1].json(), json!({ "type": "test", "channel": "ci" }));
}

#[tokio::test]
async fn a_webhook_with_a_bad_secret_is_not_sent() {
    let (server, url) = Recorder::start().await;
    for bad in ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_%%%"] {
        let e = webhook::send(&http(), &url, bad, &Message::Test { channel: "ci" }, &Links::default()).await.unwrap_err().0;
        assert!(e.contains("webhook secret"), "{bad}: {e}");
    }
    assert!(server.requests().is_empty());
}

// ----- Slack and Discord -----

#[tokio::test]
async fn slack_gets_text_and_a_mrkdwn_section_and_answers_ok() {
    let (server, url) = Recorder::start().await;
    server.answer(200, &[("content-type", "text/html")], "ok");
    server.answer(404, &[], "no_service");
    server.answer(429, &[("retry-after", "7")], "rate_limited");
    let n = finished(3, JobState::Succeeded, "a <b> & c");
    let hook = format!("{url}/services/T000/B000/XXXX");

    let answer = chat::send_slack(&http(), &hook, &Message::One(&n), &links()).await.unwrap();
    assert_eq!(answer, "HTTP 200 OK: ok");
    let request = server.only();
    assert_eq!(request.path, "/services/T000/B000/XXXX");
    assert!(request.header("content-type").starts_with("application/json"));
    assert_eq!(
        request.json(),
        json!({
            "text": "Succeeded: a &lt;b&gt; &amp; c\nreplicate · pred 42 · 2m 5s",
            "blocks": [{ "type": "section", "text": { "type": "mrkdwn", "text": format!("*Succeeded: a &lt;b&gt; &amp; c*\nreplicate · pred 42 · 2m 5s\n<{JOB_LINK}|Open in NeverMiss>") } }],
        })
    );

    let e = chat::send_slack(&http(), &hook, &Message::One(&n), &links()).await.unwrap_err().0;
    assert!(e.contains("404") && e.contains("no_service"), "{e}");
    let e = chat::send_slack(&http(), &hook, &Message::One(&n), &links()).await.unwrap_err().0;
    assert!(e.contains("429") && e.contains("Retry-After: 7") && e.contains("rate_limited"), "{e}");
}

#[tokio::test]
async fn discord_gets_one_embed_and_waits_for_the_created_message() {
    let (server, url) = Recorder::start().await;
    server.answer(200, &[("content-type", "application/json")], r#"{"id":"1234567890","type":0,"channel_id":"42"}"#);
    server.answer(200, &[("content-type", "application/json")], r#"{"id":"1234567891","type":0}"#);
    server.answer(429, &[("retry-after", "2")], r#"{"message":"You are being rate limited.","retry_after":1.5,"global":false}"#);
    let n = finished(4, JobState::Failed, "train");
    let hook = format!("{url}/api/webhooks/123/token");

    let answer = chat::send_discord(&http(), &hook, &Message::One(&n), &links()).await.unwrap();
    assert!(answer.starts_with("HTTP 200 OK: ") && answer.contains("1234567890"), "{answer}");
    let request = server.only();
    assert_eq!(request.path, "/api/webhooks/123/token");
    assert_eq!(request.query.as_deref(), Some("wait=true"));
    assert_eq!(
        request.json(),
        json!({
            "embeds": [{ "title": "Failed: train", "description": "replicate · pred 42 · 2m 5s\nCUDA out of memory", "url": JOB_LINK, "color": 0xE01E5A }],
            "allowed_mentions": { "parse": [] },
        })
    );

    server.clear();
    chat::send_discord(&http(), &format!("{hook}?thread_id=77"), &Message::Test { channel: "d" }, &Links::default()).await.unwrap();
    assert_eq!(server.only().query.as_deref(), Some("thread_id=77&wait=true"), "a thread's URL keeps its thread");

    let e = chat::send_discord(&http(), &hook, &Message::One(&n), &links()).await.unwrap_err().0;
    assert!(e.contains("429") && e.contains("Retry-After: 2") && e.contains("rate limited"), "{e}");
    assert!(!e.contains("token"), "the webhook URL (a secret) is not in the error: {e}");
}

// ----- e-mail -----

fn email_config(port: u16) -> EmailConfig {
    EmailConfig {
        host: "127.0.0.1".into(),
        port: Some(port),
        tls: EmailTls::None,
        username: None,
        from: "NeverMiss <nevermiss@example.com>".into(),
        to: "me@example.com, Ops <ops@example.org>".into(),
    }
}

#[tokio::test]
async fn an_email_reaches_a_real_smtp_server_with_subject_text_and_link() {
    let smtp = SmtpServer::start().await;
    let n = finished(9, JobState::Failed, "Frühjahrs-Training");

    let answer = email::send(&email_config(smtp.port), None, &ExtraRoots::none(), &Message::One(&n), &links()).await.unwrap();

    assert_eq!(answer, "250 OK: queued as nevermiss-1", "the answer is the server's reply to the message");
    let got = smtp.message(1).await;
    assert_eq!(got["login"], json!(null), "no username, no login");
    assert_eq!(got["mail_from"], "nevermiss@example.com");
    assert_eq!(got["rcpt_tos"], json!(["me@example.com", "ops@example.org"]));
    assert_eq!(got["subject"], "[Action needed] Failed: Frühjahrs-Training", "a failure is urgent");
    assert_eq!(got["from"], "NeverMiss <nevermiss@example.com>");
    assert_eq!(got["to"], "me@example.com, Ops <ops@example.org>");
    assert_eq!(got["content_type"], "text/plain");
    let text = got["text"].as_str().unwrap().replace("\r\n", "\n");
    assert_eq!(text.trim_end(), format!("replicate · pred 42 · 2m 5s\nCUDA out of memory\n\nOpen in NeverMiss: {JOB_LINK}"));
}

#[tokio::test]
async fn an_email_summary_lists_its_jobs_and_a_refused_recipient_is_an_error() {
    let smtp = SmtpServer::start().await;
    let summary = Summary::new(vec![finished(1, JobState::Succeeded, "alpha"), finished(2, JobState::Failed, "beta")]);

    email::send(&email_config(smtp.port), None, &ExtraRoots::none(), &Message::Summary(&summary), &links()).await.unwrap();
    let got = smtp.message(1).await;
    assert_eq!(got["subject"], "[Action needed] 2 jobs finished while you were away", "one of them failed");
    let text = got["text"].as_str().unwrap().replace("\r\n", "\n");
    assert_eq!(
        text.trim_end(),
        "1 failed, 1 succeeded\n\n- Succeeded: alpha\n- Failed: beta\n\nOpen in NeverMiss: https://hub.example/#/jobs"
    );

    let mut refused = email_config(smtp.port);
    refused.to = "nobody@example.com".into();
    let NotifyError(e, fault) =
        email::send(&refused, None, &ExtraRoots::none(), &Message::Test { channel: "mail" }, &Links::default()).await.unwrap_err();
    assert!(e.contains(&format!("127.0.0.1:{}", smtp.port)) && e.contains("nobody here"), "{e}");
    assert_eq!(fault, Fault::Message, "a refused recipient refuses this message, not the server's others");
    assert_eq!(smtp.count(), 1, "nothing delivered to a refused recipient");
}

#[tokio::test]
async fn an_email_logs_in_with_the_username_and_password() {
    let smtp = SmtpServer::start().await;
    let config = config_for(&smtp, EmailTls::None, true);

    let NotifyError(e, fault) =
        email::send(&config, Some("wrong"), &ExtraRoots::none(), &Message::Test { channel: "mail" }, &Links::default()).await.unwrap_err();
    assert!(e.contains("535"), "a refused login names the server's code: {e}");
    assert_eq!(fault, Fault::Channel, "a refused login refuses every message: the channel's");
    assert_eq!(smtp.count(), 0);

    let answer = send_test(&config, Some(SMTP_PASSWORD), &ExtraRoots::none()).await.unwrap();
    assert_eq!(answer, "250 OK: queued as nevermiss-1");
    let got = smtp.message(1).await;
    assert_eq!(got["login"], SMTP_LOGIN);
    assert_eq!(got["subject"], "NeverMiss test notification");
}

#[tokio::test]
async fn an_email_to_a_closed_port_says_where_it_could_not_connect() {
    let port = crate::harness::serve_child::free_addr().port();
    let NotifyError(e, fault) =
        email::send(&email_config(port), None, &ExtraRoots::none(), &Message::Test { channel: "mail" }, &Links::default())
            .await
            .unwrap_err();
    assert!(e.starts_with(&format!("SMTP 127.0.0.1:{port}: ")), "{e}");
    assert_eq!(fault, Fault::Channel);
}

/// The e-mail channel's fields for `smtp` over `tls`, logging in as `SMTP_LOGIN` when `login`.
fn config_for(smtp: &SmtpServer, tls: EmailTls, login: bool) -> EmailConfig {
    EmailConfig { tls, username: login.then(|| SMTP_LOGIN.to_owned()), ..email_config(smtp.port) }
}

/// Sends the channel's test message.
async fn send_test(config: &EmailConfig, password: Option<&str>, roots: &ExtraRoots) -> Result<String, String> {
    email::send(config, password, roots, &Message::Test { channel: "mail" }, &Links::default()).await.map_err(|e| e.0)
}

/// The roots that trust a TLS server's own CA, as `NEVERMISS_EXTRA_CA` would give them.
fn roots_of(smtp: &SmtpServer) -> ExtraRoots {
    ExtraRoots::from_pem_file(smtp.ca.as_ref().unwrap()).unwrap()
}

#[tokio::test]
async fn an_email_over_starttls_logs_in_only_after_the_upgrade_trusting_the_extra_ca() {
    let smtp = SmtpServer::start_in(SmtpMode::Starttls).await;
    let config = config_for(&smtp, EmailTls::Starttls, true);
    let n = finished(9, JobState::Succeeded, "nightly");

    let answer = email::send(&config, Some(SMTP_PASSWORD), &roots_of(&smtp), &Message::One(&n), &links()).await.unwrap();

    assert_eq!(answer, "250 OK: queued as nevermiss-1");
    let got = smtp.message(1).await;
    assert_eq!(got["login"], SMTP_LOGIN);
    assert_eq!(got["tls"], true);
    assert_eq!(got["subject"], "Succeeded: nightly");
    let text = got["text"].as_str().unwrap().replace("\r\n", "\n");
    assert!(text.trim_end().ends_with(&format!("\n\nOpen in NeverMiss: {JOB_LINK}")), "{text}");
    assert_eq!(smtp.auth_attempts(), vec![json!({"login": SMTP_LOGIN, "tls": true, "ok": true})], "one login, over TLS");
}

#[tokio::test]
async fn an_email_over_tls_from_the_first_byte_is_accepted() {
    let smtp = SmtpServer::start_in(SmtpMode::Tls).await;

    let answer = send_test(&config_for(&smtp, EmailTls::Tls, false), None, &roots_of(&smtp)).await.unwrap();

    assert_eq!(answer, "250 OK: queued as nevermiss-1");
    let got = smtp.message(1).await;
    assert_eq!(got["tls"], true);
    assert_eq!(got["subject"], "NeverMiss test notification");
}

#[tokio::test]
async fn without_the_extra_ca_tls_fails_naming_the_certificate_and_sends_nothing() {
    for (mode, tls) in [(SmtpMode::Starttls, EmailTls::Starttls), (SmtpMode::Tls, EmailTls::Tls)] {
        let smtp = SmtpServer::start_in(mode).await;

        let e = send_test(&config_for(&smtp, tls, true), Some(SMTP_PASSWORD), &ExtraRoots::none()).await.unwrap_err();

        assert!(e.starts_with(&format!("SMTP 127.0.0.1:{}: ", smtp.port)) && e.contains("certificate"), "{mode:?}: {e}");
        assert_eq!(smtp.auth_attempts(), Vec::<serde_json::Value>::new(), "{mode:?}: no login");
        assert_eq!(smtp.count(), 0, "{mode:?}: no message");
    }
}

#[tokio::test]
async fn starttls_to_a_server_without_it_fails_before_any_login_in_plain_text() {
    let smtp = SmtpServer::start().await;

    let e = send_test(&config_for(&smtp, EmailTls::Starttls, true), Some(SMTP_PASSWORD), &ExtraRoots::none()).await.unwrap_err();

    assert!(e.contains("STARTTLS"), "the error says the server offers no STARTTLS: {e}");
    assert_eq!(smtp.auth_attempts(), Vec::<serde_json::Value>::new(), "no login without TLS");
    assert_eq!(smtp.count(), 0, "no message without TLS");
}

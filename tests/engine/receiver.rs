//! The receiver (contract §2): signatures, size limit, methods and paths, rejected payloads,
//! an unconfigured secret. Every request goes over real HTTP to an in-process engine; each test runs
//! on both stores (SQLite, and a database of its own on PostgreSQL: `name::sqlite`, `name::postgres`).

use crate::harness;
use nevermiss_engine::store::job::{JobState, Outcome};

use harness::signing::generic_signature as sign_with;
use harness::{on_both_stores, payload, sign, TestApp, SECRET};
use nevermiss_engine::receiver::HookAnswer;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: usize = 1024 * 1024;

async fn error_of(response: reqwest::Response) -> String {
    let body: HookAnswer = response.json().await.expect("the answer is the receiver's JSON");
    let error = body.error.clone();
    error.unwrap_or_else(|| panic!("no error in {body:?}"))
}

on_both_stores!(spawn_on,
async fn a_valid_signature_is_accepted_with_or_without_the_prefix(app) {

    let body = serde_json::to_vec(&payload("d-prefixed", "job-a", "running", 1)).unwrap();
    let signature = sign(&body);
    assert!(signature.starts_with("sha256="));
    let response = app.post_hook_sig("generic", body, Some(&signature)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({ "outcome": "applied" }));

    let body = serde_json::to_vec(&payload("d-bare", "job-b", "running", 1)).unwrap();
    let bare = sign(&body).trim_start_matches("sha256=").to_owned();
    let response = app.post_hook_sig("generic", body, Some(&bare)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({ "outcome": "applied" }));

    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE status = 'accepted'"), 2);
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 2);
    let m = app.api.metrics().await.store;
    assert_eq!((m.deliveries_total, m.applied, m.bad_signatures), (2, 2, 0), "{m:?}");
});

on_both_stores!(spawn_on,
async fn every_bad_signature_is_401_counted_and_stores_nothing(app) {
    let body = serde_json::to_vec(&payload("d-1", "job-1", "succeeded", 7)).unwrap();
    let good = sign(&body);
    let mut tampered = body.clone();
    let at = tampered.iter().position(|&b| b == b'7').unwrap();
    tampered[at] = b'8';

    let cases: Vec<(&str, Vec<u8>, Option<String>)> = vec![
        ("missing header", body.clone(), None),
        ("wrong secret", body.clone(), Some(sign_with("not-the-secret", &body))),
        ("tampered body", tampered, Some(good.clone())),
        ("truncated hex", body.clone(), Some(good[..good.len() - 2].to_owned())),
        ("one hex digit short", body.clone(), Some(good[..good.len() - 1].to_owned())),
        ("empty", body.clone(), Some(String::new())),
        ("prefix only", body.clone(), Some("sha256=".to_owned())),
        ("not hex", body.clone(), Some(format!("sha256={}", "zz".repeat(32)))),
        ("signature of the empty body", body.clone(), Some(sign(b""))),
        ("another scheme", body.clone(), Some(good.replace("sha256=", "sha1="))),
    ];
    for (i, (what, bytes, signature)) in cases.into_iter().enumerate() {
        let response = app.post_hook_sig("generic", bytes, signature.as_deref()).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{what}");
        let reason = error_of(response).await;
        assert!(!reason.is_empty() && !reason.contains('\n'), "{what}: a one-line reason, got {reason:?}");
        assert_eq!(app.stored_rows(), 0, "{what}: nothing may be stored");
        assert_eq!(app.api.metrics().await.store.bad_signatures, i as i64 + 1, "{what}: counted");
    }
    let m = app.api.metrics().await.store;
    assert_eq!((m.applied, m.rejected, m.notifications_enqueued), (0, 0, 0), "{m:?}");
    assert!(app.job("job-1").await.is_none());
    // The right signature still works afterwards.
    assert_eq!(app.post_hook_sig("generic", body, Some(&good)).await.status(), StatusCode::OK);
    assert_eq!(app.api.metrics().await.store.bad_signatures, 10);
});

on_both_stores!(spawn_on,
async fn over_one_mib_is_413_and_stores_nothing(app) {

    // A declared length over the limit is refused on the headers alone. (Raw socket: a client
    // that goes on sending a body the server will never read can see its connection reset before
    // it reads the answer, which would make this test flaky.)
    let body = serde_json::to_vec(&payload("d-big", "job-big", "succeeded", 1)).unwrap();
    let head = format!(
        "POST /hooks/generic HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         X-Agent-Signature: {}\r\nContent-Length: {}\r\n\r\n",
        sign(&body),
        MIB + 1
    );
    assert_eq!(raw_exchange(&app, vec![head.into_bytes()]).await, 413, "a declared length over 1 MiB");
    assert_eq!(app.stored_rows(), 0);

    // No declared length (chunked): the limit applies while reading. The last byte sent is the
    // one over the limit, so the server has read everything when it answers.
    let head = format!(
        "POST /hooks/generic HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         X-Agent-Signature: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        sign(b"whatever")
    );
    let mut parts = vec![head.into_bytes()];
    let mut sent = 0;
    while sent < MIB + 1 {
        let n = (64 * 1024).min(MIB + 1 - sent);
        let mut chunk = format!("{n:x}\r\n").into_bytes();
        chunk.resize(chunk.len() + n, b' ');
        sent += n;
        if sent < MIB + 1 {
            chunk.extend_from_slice(b"\r\n");
        }
        parts.push(chunk);
    }
    assert_eq!(raw_exchange(&app, parts).await, 413, "a chunked body over 1 MiB");
    assert_eq!(app.stored_rows(), 0);

    let m = app.api.metrics().await;
    assert_eq!(m.store.deliveries_total, 0);
    assert_eq!(m.store.bad_signatures, 0, "an oversized body is refused before its signature is looked at");

    // Exactly 1 MiB is allowed: a valid payload padded with whitespace. Only its first 64 KiB are
    // kept with the accepted delivery.
    let mut exact = serde_json::to_vec(&payload("d-exact", "job-exact", "running", 1)).unwrap();
    exact.resize(MIB, b' ');
    let signature = sign(&exact);
    let response = app.post_hook_sig("generic", exact, Some(&signature)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        app.count("SELECT length(body) FROM deliveries WHERE delivery_id = 'd-exact' AND body_truncated = 1"),
        64 * 1024
    );
});

/// Writes `parts` to the receiver over a raw socket (in the background, keeping the write half
/// open) and returns the status code of the answer.
async fn raw_exchange(app: &TestApp, parts: Vec<Vec<u8>>) -> u16 {
    let addr = app.receiver.trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        for part in parts {
            if write.write_all(&part).await.is_err() {
                return;
            }
        }
        let _ = write.flush().await;
        // Dropping the write half would half-close the connection: hold it until aborted.
        std::future::pending::<()>().await;
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let status = loop {
        let n = tokio::time::timeout(harness::WAIT, read.read(&mut buf))
            .await
            .expect("the receiver answers in time")
            .expect("the connection is not reset before the answer");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((line, _)) = text.split_once("\r\n") {
            break line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
        }
        assert!(n > 0, "the connection closed without an answer: {text:?}");
    };
    writer.abort();
    status
}

on_both_stores!(spawn_on,
async fn only_post_is_allowed_on_a_hook_path(app) {
    for method in [reqwest::Method::GET, reqwest::Method::PUT, reqwest::Method::DELETE] {
        let response = app
            .http
            .request(method.clone(), format!("{}/hooks/generic", app.receiver))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(response.headers()["allow"], "POST");
    }
    assert_eq!(app.stored_rows(), 0);
});

on_both_stores!(spawn_on,
async fn the_admin_api_and_everything_else_is_404_on_the_receiver_port(app) {
    for path in ["/api/health", "/api/jobs", "/api/metrics", "/api/events", "/api/jobs/generic/x", "/", "/index.html", "/hooks", "/hooks/generic/extra"] {
        for method in [reqwest::Method::GET, reqwest::Method::POST] {
            let response = app
                .http
                .request(method.clone(), format!("{}{path}", app.receiver))
                .bearer_auth(&app.api.token)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path} on the receiver");
        }
    }
    // A provider NeverMiss does not know, even correctly signed.
    let body = serde_json::to_vec(&payload("d-1", "job-1", "running", 1)).unwrap();
    let signature = sign(&body);
    let response = app.post_hook_sig("unknownprovider", body, Some(&signature)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(app.stored_rows(), 0);
});

on_both_stores!(spawn_on,
async fn a_signed_but_unusable_payload_is_400_and_kept_as_rejected(app) {
    /// What is sent, the raw body, and what the rejection must say.
    type Case<'a> = (&'a str, Vec<u8>, Option<&'a str>, Option<&'a str>);
    let cases: Vec<Case> = vec![
        ("invalid JSON", b"{\"deliveryId\": \"d-x\", oops".to_vec(), None, None),
        (
            "unknown state",
            serde_json::to_vec(&payload("d-state", "job-state", "exploded", 3)).unwrap(),
            Some("d-state"),
            Some("job-state"),
        ),
        (
            "missing field",
            serde_json::to_vec(&json!({ "deliveryId": "d-noseq", "jobId": "job-noseq", "state": "running" })).unwrap(),
            Some("d-noseq"),
            Some("job-noseq"),
        ),
        (
            "the unknown state is NeverMiss's own, never sent",
            serde_json::to_vec(&payload("d-unknown", "job-unknown", "unknown", 3)).unwrap(),
            Some("d-unknown"),
            Some("job-unknown"),
        ),
        (
            "a finishedAt that is not RFC 3339",
            serde_json::to_vec(&json!({ "deliveryId": "d-time", "jobId": "job-time", "state": "succeeded", "seq": 1, "finishedAt": "yesterday" }))
                .unwrap(),
            Some("d-time"),
            Some("job-time"),
        ),
    ];
    for (i, (what, body, delivery_id, job_id)) in cases.into_iter().enumerate() {
        let signature = sign(&body);
        let response = app.post_hook_sig("generic", body.clone(), Some(&signature)).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{what}");
        let reason = error_of(response).await;
        assert!(!reason.is_empty() && !reason.contains('\n'), "{what}: a one-line reason, got {reason:?}");

        // The raw request is kept whole, with its reason and whatever ids could be read.
        let (status, kept_body, kept_reason, kept_delivery, kept_job): (String, Vec<u8>, String, Option<String>, Option<String>) = app
            .read(|db| {
                db.query_row(
                    "SELECT status, body, reason, delivery_id, job_id FROM deliveries ORDER BY id DESC LIMIT 1",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                )
            })
            .await;
        assert_eq!(status, "rejected", "{what}");
        assert_eq!(kept_body, body, "{what}: the body is kept whole");
        assert_eq!(kept_reason, reason, "{what}");
        assert_eq!(kept_delivery.as_deref(), delivery_id, "{what}");
        assert_eq!(kept_job.as_deref(), job_id, "{what}");
        assert_eq!(app.count("SELECT count(*) FROM deliveries"), i as i64 + 1, "{what}");
        assert_eq!(app.api.metrics().await.store.rejected, i as i64 + 1, "{what}: counted");
        // A rejected payload moves no job and enqueues nothing.
        assert_eq!(app.count("SELECT count(*) FROM jobs"), 0, "{what}");
        assert_eq!(app.count("SELECT count(*) FROM outbox"), 0, "{what}");
    }
    // The rejection is on the timeline of the job it named.
    assert_eq!(
        app.count("SELECT count(*) FROM job_events WHERE job_id = 'job-state' AND outcome = 'rejected'"),
        1
    );
    let m = app.api.metrics().await.store;
    assert_eq!((m.deliveries_total, m.applied, m.bad_signatures), (5, 0, 0), "{m:?}");

    // A rejected delivery id is not a dedupe key: a corrected resend is accepted.
    assert_eq!(app.deliver("d-state", "job-state", "running", 3).await, Outcome::Applied);
    assert_eq!(app.job_state("job-state").await, JobState::Running);
});

on_both_stores!(spawn_on,
async fn credentials_in_a_kept_request_are_masked(app) {
    let body = serde_json::to_vec(&payload("d-masked", "job-masked", "running", 1)).unwrap();
    let response = app
        .http
        .post(format!("{}/hooks/generic", app.receiver))
        .header("x-agent-signature", sign(&body))
        .header("authorization", "Bearer do-not-keep-me")
        .header("cookie", "session=do-not-keep-me")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let kept = app.api.delivery("generic", "d-masked").await.expect("the delivery is kept");
    assert_eq!(kept.status, "accepted");
    assert_eq!(kept.job_id.as_deref(), Some("job-masked"));
    assert_eq!(kept.headers["authorization"], "••••");
    assert_eq!(kept.headers["cookie"], "••••");
    let answered = app.api.raw_get("/api/deliveries/generic/d-masked").await.text().await.unwrap();
    assert!(!answered.contains("do-not-keep-me"), "{answered}");
    let raw: String = app.read(|db| db.query_row("SELECT headers FROM deliveries", [], |r| r.get(0))).await;
    assert!(!raw.contains("do-not-keep-me"));
});

on_both_stores!(spawn_unconfigured_on,
async fn an_unconfigured_secret_is_503_and_stores_nothing(app) {
    let body = serde_json::to_vec(&payload("d-1", "job-1", "succeeded", 1)).unwrap();
    let signature = sign(&body);
    let response = app.post_hook_sig("generic", body.clone(), Some(&signature)).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!error_of(response).await.is_empty());
    assert_eq!(app.stored_rows(), 0);
    let m = app.api.metrics().await;
    assert_eq!(m.store.bad_signatures, 0);
    assert_eq!(m.store.applied, 0);

    // Once configured, the sender's retry goes through.
    app.engine()
        .services
        .secrets
        .set("generic", nevermiss_engine::providers::SecretKind::WebhookSecret, Some(SECRET))
        .unwrap();
    let response = app.post_hook_sig("generic", body, Some(&signature)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(app.job_state("job-1").await, JobState::Succeeded);
});

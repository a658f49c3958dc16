//! A verified request to a real provider's hook is never answered 4xx (contract section 2): for
//! each of OpenAI, Anthropic, Replicate and fal, a verified event of a type NeverMiss does not act
//! on is 200 `ignored` (counted, on the timeline of a known job, never creating one), and a
//! verified but unusable body is 200 `rejected`, kept once across 5 resends (the resends answer
//! `duplicate`). Unverified requests stay 401. Answers are read into the engine's own types.

use axum::routing::get;
use axum::Router;
use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey};
use nevermiss_engine::job::Outcome;
use nevermiss_engine::metrics::Metrics;
use nevermiss_engine::receiver::HookAnswer;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::harness::json_app::App;
use crate::harness::stand_in::*;
use crate::harness::signing::now_secs;

/// The secret every Standard Webhooks provider here is configured with.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const RESENDS: usize = 5;

fn outcome_of(status: u16, answer: Value, what: &str) -> Outcome {
    assert_eq!(status, 200, "{what}: a verified request is answered 2xx: {answer}");
    let answer: HookAnswer = serde_json::from_value(answer.clone()).unwrap_or_else(|e| panic!("{what}: {e}: {answer}"));
    answer.outcome.unwrap_or_else(|| panic!("{what}: no outcome"))
}

async fn metrics(app: &App) -> Metrics {
    serde_json::from_value(app.metrics().await).expect("METRICS")
}

/// Rows of `deliveries` for one (provider, delivery id), read straight from the store.
async fn kept_rows(app: &App, provider: &str, delivery_id: &str) -> i64 {
    let (provider, delivery_id) = (provider.to_owned(), delivery_id.to_owned());
    app.engine()
        .services
        .store
        .read(move |c| {
            c.query_row(
                "SELECT count(*) FROM deliveries WHERE provider = ?1 AND delivery_id = ?2",
                [provider, delivery_id],
                |r| r.get(0),
            )
        })
        .await
        .unwrap()
}

/// What one Standard Webhooks provider sends, for the shared scenario.
struct Case {
    provider: &'static str,
    /// An event NeverMiss acts on, for job `job`.
    handled: Value,
    job: &'static str,
    /// Events of types NeverMiss does not act on: the first names `job`, the second a job
    /// NeverMiss does not know.
    unhandled: [Value; 2],
    unknown_job: &'static str,
    /// Verified bodies NeverMiss cannot use (each resent 5 times with one webhook-id).
    malformed: Vec<Vec<u8>>,
}

async fn never_4xx(case: Case) {
    let p = case.provider;
    let app = App::start().await;
    // Nothing to poll: the base URL is a closed port and there is no API key.
    app.configure(p, "http://127.0.0.1:9", None, Some(SECRET)).await;

    let (status, answer) = app.hook(p, SECRET, "wh_handled", &case.handled).await;
    assert_eq!(outcome_of(status, answer, "handled"), Outcome::Applied);

    // Unhandled types: 200 ignored, on the known job's timeline, never a new job.
    let (status, answer) = app.hook(p, SECRET, "wh_unhandled_1", &case.unhandled[0]).await;
    assert_eq!(outcome_of(status, answer, "unhandled, known job"), Outcome::Ignored);
    let (status, answer) = app.hook(p, SECRET, "wh_unhandled_2", &case.unhandled[1]).await;
    assert_eq!(outcome_of(status, answer, "unhandled, unknown job"), Outcome::Ignored);
    assert!(app.job(p, case.unknown_job).await.is_none(), "{p}: an ignored event created a job");
    let timeline = app.timeline(p, case.job).await;
    assert_eq!(timeline.last().map(String::as_str), Some("push:ignored:-"), "{p}: {timeline:?}");
    assert_eq!(kept_rows(&app, p, "wh_unhandled_1").await, 0, "{p}: an ignored event is not kept");

    // Unusable bodies: 200 rejected once, kept once; each resend (a new attempt, a new
    // timestamp) is 200 duplicate and adds no row.
    for (i, body) in case.malformed.iter().enumerate() {
        let id = format!("wh_bad_{i}");
        for attempt in 0..RESENDS {
            let (status, answer) = app.hook_at(p, SECRET, &id, now_secs() - attempt as i64, body).await;
            let expected = if attempt == 0 { Outcome::Rejected } else { Outcome::Duplicate };
            assert_eq!(outcome_of(status, answer, &format!("{p} malformed #{i}, attempt {attempt}")), expected);
        }
        assert_eq!(kept_rows(&app, p, &id).await, 1, "{p}: malformed #{i} kept once across {RESENDS} sends");
        let kept = app.delivery(p, &id).await.expect("kept");
        assert_eq!(kept["status"], "rejected");
        assert_eq!(kept["body"].as_str().unwrap().as_bytes(), body.as_slice(), "{p}: kept whole");
    }

    // Unverified stays 401.
    let (status, _) = app.hook(p, "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "wh_forged", &case.unhandled[0]).await;
    assert_eq!(status, 401, "{p}: a forged request");

    let m = metrics(&app).await.store;
    let bad = case.malformed.len() as i64;
    assert_eq!((m.applied, m.ignored, m.rejected), (1, 2, bad), "{p}: {m:?}");
    assert_eq!(m.duplicates, bad * (RESENDS as i64 - 1), "{p}: resends of a rejected delivery are duplicates");
    assert_eq!(m.bad_signatures, 1);
    assert_eq!(m.deliveries_total, 1 + 2 + bad * RESENDS as i64 + 1, "{p}: {m:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_unhandled_is_ignored_and_malformed_is_rejected_once() {
    let event = |kind: &str, data: Value| json!({"id": "evt_1", "object": "event", "type": kind, "created_at": 1_796_032_800, "data": data});
    never_4xx(Case {
        provider: "openai",
        handled: event("response.completed", json!({"id": "resp_1"})),
        job: "resp_1",
        unhandled: [
            event("response.created", json!({"id": "resp_1"})),
            // No data.id at all: still only an event type NeverMiss does not act on.
            event("realtime.call.incoming", json!({"call_id": "rtc_1", "sip_headers": []})),
        ],
        unknown_job: "rtc_1",
        malformed: vec![
            b"{\"type\": \"response.completed\", oops".to_vec(),
            serde_json::to_vec(&json!({"object": "event", "type": "batch.completed", "created_at": 1})).unwrap(),
            serde_json::to_vec(&json!({"type": "response.completed", "data": {"id": "resp_2"}})).unwrap(),
        ],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_unhandled_is_ignored_and_malformed_is_rejected_once() {
    let event = |kind: &str, id: &str| {
        json!({"type": "event", "id": "wevt_1", "created_at": "2026-11-30T10:00:00Z",
               "data": {"type": kind, "id": id, "organization_id": "org_1", "workspace_id": "wrkspc_1"}})
    };
    never_4xx(Case {
        provider: "anthropic",
        handled: event("session.status_run_started", "sesn_1"),
        job: "sesn_1",
        unhandled: [event("session.thread_created", "sesn_1"), event("vault.created", "vlt_1")],
        unknown_job: "vlt_1",
        malformed: vec![
            b"not json at all".to_vec(),
            serde_json::to_vec(&json!({"type": "event", "data": {"type": "session.status_idled", "id": "sesn_2"}})).unwrap(),
        ],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicate_unhandled_is_ignored_and_malformed_is_rejected_once() {
    let prediction = |id: &str, status: &str| {
        json!({"id": id, "model": "replicate/hello-world", "version": "5c7d5dc6", "input": {"text": "Alice"},
               "logs": "", "output": null, "error": null, "status": status,
               "created_at": "2026-11-30T10:00:00.000Z", "started_at": null, "completed_at": null,
               "urls": {"get": format!("https://api.replicate.com/v1/predictions/{id}")}})
    };
    never_4xx(Case {
        provider: "replicate",
        handled: prediction("p1", "processing"),
        job: "p1",
        unhandled: [prediction("p1", "paused"), prediction("p9", "queued_for_gpu")],
        unknown_job: "p9",
        malformed: vec![
            b"[1, 2".to_vec(),
            serde_json::to_vec(&json!({"status": "succeeded", "created_at": "2026-11-30T10:00:00Z"})).unwrap(),
            serde_json::to_vec(&json!({"id": "p3", "status": "succeeded", "created_at": "yesterday"})).unwrap(),
        ],
    })
    .await;
}

// ----- fal: Ed25519 signatures, its keys from a local JWKS -----

fn fal_headers(key: &SigningKey, request_id: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let message = format!("{request_id}\nuser-1\n{timestamp}\n{}", hex::encode(Sha256::digest(body)));
    vec![
        ("x-fal-webhook-request-id", request_id.to_owned()),
        ("x-fal-webhook-user-id", "user-1".to_owned()),
        ("x-fal-webhook-timestamp", timestamp.to_string()),
        ("x-fal-webhook-signature", hex::encode(key.sign(message.as_bytes()).to_bytes())),
    ]
}

async fn fal_post(app: &App, key: &SigningKey, request_id: &str, timestamp: i64, body: &[u8]) -> (u16, Value) {
    let mut request = app.http.post(format!("{}/hooks/fal", app.receiver)).header("content-type", "application/json");
    for (name, value) in fal_headers(key, request_id, timestamp, body) {
        request = request.header(name, value);
    }
    let response = request.body(body.to_vec()).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_unhandled_is_ignored_and_malformed_is_rejected_once() {
    let key = SigningKey::from_bytes(&[7; 32]);
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1",
        "x": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes())}]});
    let jwks_url = serve(Router::new().route("/.well-known/jwks.json", get(move || {
        let jwks = jwks.clone();
        async move { axum::Json(jwks) }
    })))
    .await;
    let app = App::start().await;
    app.set_setting("fal.base_url", &jwks_url).await;

    let ok = serde_json::to_vec(&json!({"request_id": "req-1", "status": "OK", "payload": {"images": []}})).unwrap();
    let (status, answer) = fal_post(&app, &key, "req-1", now_secs(), &ok).await;
    assert_eq!(outcome_of(status, answer, "fal OK"), Outcome::Applied);

    // A status other than OK or ERROR: ignored, on the known job's timeline, no job created.
    for (id, status_text) in [("req-1", "IN_PROGRESS"), ("req-2", "CANCELLED")] {
        let body = serde_json::to_vec(&json!({"request_id": id, "status": status_text, "payload": null})).unwrap();
        let (status, answer) = fal_post(&app, &key, id, now_secs(), &body).await;
        assert_eq!(outcome_of(status, answer, status_text), Outcome::Ignored);
    }
    assert!(app.job("fal", "req-2").await.is_none());
    assert_eq!(app.timeline("fal", "req-1").await.last().map(String::as_str), Some("push:ignored:-"));

    // Unusable bodies, each kept once across 5 retries (keyed by the signed request id header
    // when the body names none).
    let malformed: [(&str, Vec<u8>); 2] = [
        ("req-garbled", b"{\"request_id\": \"req-garbled\", \"status\": ".to_vec()),
        ("req-noid", serde_json::to_vec(&json!({"status": "OK", "payload": {}})).unwrap()),
    ];
    for (id, body) in &malformed {
        for attempt in 0..RESENDS {
            let (status, answer) = fal_post(&app, &key, id, now_secs(), body).await;
            let expected = if attempt == 0 { Outcome::Rejected } else { Outcome::Duplicate };
            assert_eq!(outcome_of(status, answer, &format!("{id} attempt {attempt}")), expected);
        }
        assert_eq!(kept_rows(&app, "fal", id).await, 1, "{id}: kept once");
    }

    // Unverified stays 401.
    let forger = SigningKey::from_bytes(&[9; 32]);
    let (status, _) = fal_post(&app, &forger, "req-1", now_secs(), &ok).await;
    assert_eq!(status, 401);

    let m = metrics(&app).await.store;
    assert_eq!((m.applied, m.ignored, m.rejected, m.duplicates, m.bad_signatures), (1, 2, 2, 8, 1), "{m:?}");
    app.shutdown().await;
}

/// The user's own sender keeps its 400 (it is their code; the reason tells them what to fix),
/// and its rejected delivery is kept once per delivery id too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_keeps_its_400() {
    let app = crate::harness::TestApp::spawn().await;
    let body = crate::harness::payload("d-odd", "job-odd", "exploded", 1);
    for _ in 0..3 {
        let (status, answer) = app.post_signed(&body).await;
        assert_eq!(status.as_u16(), 400, "{answer:?}");
        assert!(answer.error.as_deref().unwrap().contains("exploded"), "{answer:?}");
    }
    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE delivery_id = 'd-odd'"), 1);
}

//! A verified request to a real provider's hook is never answered 4xx (contract §2): for
//! each of OpenAI, Anthropic, Replicate and fal, a verified event of a type NeverMiss does not act
//! on is 200 `ignored` (counted, on the timeline of a known job, never creating one), and a
//! verified but unusable body is 200 `rejected`, kept once across 5 resends (the resends answer
//! `duplicate`). Unverified requests stay 401. Answers are read into the engine's own types.

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use ed25519_dalek::SigningKey;
use nevermiss_engine::receiver::HookAnswer;
use nevermiss_engine::store::job::Outcome;
use serde_json::{json, Value};

use crate::harness::conformance::fixture;
use crate::harness::signing::{self, now_secs};
use crate::harness::stand_in::*;
use crate::harness::TestApp;

/// The secret every Standard Webhooks provider here is configured with.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const RESENDS: usize = 5;

fn outcome_of((status, answer): (StatusCode, HookAnswer), what: &str) -> Outcome {
    assert_eq!(status, StatusCode::OK, "{what}: a verified request is answered 2xx: {answer:?}");
    answer.outcome.unwrap_or_else(|| panic!("{what}: no outcome"))
}

/// Rows of `deliveries` for one (provider, delivery id), read straight from the database.
fn kept_rows(app: &TestApp, provider: &str, delivery_id: &str) -> i64 {
    app.count(&format!("SELECT count(*) FROM deliveries WHERE provider = '{provider}' AND delivery_id = '{delivery_id}'"))
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
    let mut app = TestApp::spawn().await;
    // Nothing to poll: the base URL is a closed port and there is no API key.
    app.configure(p, "http://127.0.0.1:9", None, Some(SECRET)).await;

    assert_eq!(outcome_of(app.sw_hook(p, SECRET, "wh_handled", &case.handled).await, "handled"), Outcome::Applied);

    // Unhandled types: 200 ignored, on the known job's timeline, never a new job.
    let answer = app.sw_hook(p, SECRET, "wh_unhandled_1", &case.unhandled[0]).await;
    assert_eq!(outcome_of(answer, "unhandled, known job"), Outcome::Ignored);
    let answer = app.sw_hook(p, SECRET, "wh_unhandled_2", &case.unhandled[1]).await;
    assert_eq!(outcome_of(answer, "unhandled, unknown job"), Outcome::Ignored);
    assert!(app.api.job(p, case.unknown_job).await.is_none(), "{p}: an ignored event created a job");
    let timeline = app.api.timeline(p, case.job).await;
    assert_eq!(timeline.last().map(String::as_str), Some("push:ignored:-"), "{p}: {timeline:?}");
    assert_eq!(kept_rows(&app, p, "wh_unhandled_1"), 0, "{p}: an ignored event is not kept");

    // Unusable bodies: 200 rejected once, kept once; each resend (a new attempt, a new
    // timestamp) is 200 duplicate and adds no row.
    for (i, body) in case.malformed.iter().enumerate() {
        let id = format!("wh_bad_{i}");
        for attempt in 0..RESENDS {
            let answer = app.sw_hook_at(p, SECRET, &id, now_secs() - attempt as i64, body).await;
            let expected = if attempt == 0 { Outcome::Rejected } else { Outcome::Duplicate };
            assert_eq!(outcome_of(answer, &format!("{p} malformed #{i}, attempt {attempt}")), expected);
        }
        assert_eq!(kept_rows(&app, p, &id), 1, "{p}: malformed #{i} kept once across {RESENDS} sends");
        let kept = app.api.delivery(p, &id).await.expect("kept");
        assert_eq!(kept.status, "rejected");
        assert_eq!(kept.body.as_bytes(), body.as_slice(), "{p}: kept whole");
    }

    // Unverified stays 401.
    let (status, _) = app.sw_hook(p, "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "wh_forged", &case.unhandled[0]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{p}: a forged request");

    let m = app.api.metrics().await.store;
    let bad = case.malformed.len() as i64;
    assert_eq!((m.applied, m.ignored, m.rejected), (1, 2, bad), "{p}: {m:?}");
    assert_eq!(m.duplicates, bad * (RESENDS as i64 - 1), "{p}: resends of a rejected delivery are duplicates");
    assert_eq!(m.bad_signatures, 1);
    assert_eq!(m.deliveries_total, 1 + 2 + bad * RESENDS as i64 + 1, "{p}: {m:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_unhandled_is_ignored_and_malformed_is_rejected_once() {
    let event =
        |kind: &str, data: Value| json!({"id": "evt_1", "object": "event", "type": kind, "created_at": 1_796_032_800, "data": data});
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
        fixture("anthropic/webhook_event")
            .id("wevt_1")
            .set("created_at", "2026-11-30T10:00:00Z")
            .set("data.type", kind)
            .set("data.id", id)
            .value()
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
        fixture("replicate/prediction")
            .id(id)
            .status(status)
            .set("output", Value::Null)
            .set("created_at", "2026-11-30T10:00:00.000Z")
            .set("started_at", Value::Null)
            .set("completed_at", Value::Null)
            .set("urls.get", format!("https://api.replicate.com/v1/predictions/{id}"))
            .value()
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

/// Raw bytes (perhaps not JSON) signed by `key` for this request id, posted to `/hooks/fal`.
async fn fal_post(app: &TestApp, key: &SigningKey, request_id: &str, timestamp: i64, body: &[u8]) -> (StatusCode, HookAnswer) {
    app.hook("fal", body.to_vec(), &signing::fal(key, request_id, timestamp, body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fal_unhandled_is_ignored_and_malformed_is_rejected_once() {
    let key = signing::fal_key(7);
    let jwks = signing::jwks(&[&key]);
    let jwks_url = serve(Router::new().route(
        "/.well-known/jwks.json",
        get(move || {
            let jwks = jwks.clone();
            async move { axum::Json(jwks) }
        }),
    ))
    .await;
    let mut app = TestApp::spawn().await;
    app.set_setting("fal.base_url", &jwks_url).await;
    app.set_setting("fal.account", signing::FAL_USER).await;

    let ok = serde_json::to_vec(&json!({"request_id": "req-1", "status": "OK", "payload": {"images": []}})).unwrap();
    assert_eq!(outcome_of(fal_post(&app, &key, "req-1", now_secs(), &ok).await, "fal OK"), Outcome::Applied);

    // A status other than OK or ERROR: ignored, on the known job's timeline, no job created.
    for (id, status_text) in [("req-1", "IN_PROGRESS"), ("req-2", "CANCELLED")] {
        let body = serde_json::to_vec(&json!({"request_id": id, "status": status_text, "payload": null})).unwrap();
        assert_eq!(outcome_of(fal_post(&app, &key, id, now_secs(), &body).await, status_text), Outcome::Ignored);
    }
    assert!(app.api.job("fal", "req-2").await.is_none());
    assert_eq!(app.api.timeline("fal", "req-1").await.last().map(String::as_str), Some("push:ignored:-"));

    // Unusable bodies, each kept once across 5 retries (keyed by the signed request id header
    // when the body names none).
    let malformed: [(&str, Vec<u8>); 2] = [
        ("req-garbled", b"{\"request_id\": \"req-garbled\", \"status\": ".to_vec()),
        ("req-noid", serde_json::to_vec(&json!({"status": "OK", "payload": {}})).unwrap()),
    ];
    for (id, body) in &malformed {
        for attempt in 0..RESENDS {
            let expected = if attempt == 0 { Outcome::Rejected } else { Outcome::Duplicate };
            assert_eq!(outcome_of(fal_post(&app, &key, id, now_secs(), body).await, &format!("{id} attempt {attempt}")), expected);
        }
        assert_eq!(kept_rows(&app, "fal", id), 1, "{id}: kept once");
    }

    // Unverified stays 401.
    let forger = signing::fal_key(9);
    let (status, _) = fal_post(&app, &forger, "req-1", now_secs(), &ok).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let m = app.api.metrics().await.store;
    assert_eq!((m.applied, m.ignored, m.rejected, m.duplicates, m.bad_signatures), (1, 2, 2, 8, 1), "{m:?}");
    app.shutdown().await;
}

/// The user's own sender keeps its 400 (it is their code; the reason tells them what to fix),
/// and its rejected delivery is kept once per delivery id too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_keeps_its_400() {
    let app = TestApp::spawn().await;
    let body = crate::harness::payload("d-odd", "job-odd", "exploded", 1);
    for _ in 0..3 {
        let (status, answer) = app.post_signed(&body).await;
        assert_eq!(status.as_u16(), 400, "{answer:?}");
        assert!(answer.error.as_deref().unwrap().contains("exploded"), "{answer:?}");
    }
    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE delivery_id = 'd-odd'"), 1);
}

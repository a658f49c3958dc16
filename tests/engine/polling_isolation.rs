//! One bad provider cannot stall polling. The generic provider's status API hangs on
//! every request (longer than `POST /api/reconcile` may wait), with 48 unfinished jobs; a
//! Replicate stand-in answers at once. While generic's rounds hang: Replicate's jobs are polled on
//! their own schedule and finish by polling, a stuck generic job still raises its alert on the
//! stuck alerts' own schedule, and `POST /api/reconcile` answers within its stated bound, saying
//! Replicate's round is done and generic's is still running (over budget).
//! Everything is waited for by state, within the harness's bound; nothing asserts a duration.

use crate::harness;
use nevermiss_engine::store::job::Outcome;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use harness::stand_in::InFlight;
use harness::{wait_until, TestApp};
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::providers::PROVIDER_TIMEOUT_SECS;
use nevermiss_engine::reconcile::{PassReport, RoundOutcome, ANSWER_WITHIN};
use nevermiss_engine::store::job::JobState;
use serde_json::{json, Value};

const GENERIC_KEY: &str = "hanging-provider-key";
const REPLICATE_KEY: &str = "r8_isolation_0123456789abcdef";

/// A generic status API that never answers: every request hangs until the engine gives up on it.
#[derive(Default)]
struct Hangs {
    asked: AtomicU64,
    /// Requests hanging right now.
    hanging: InFlight,
}

async fn hang(State(s): State<Arc<Hangs>>) -> Response {
    s.asked.fetch_add(1, Ordering::SeqCst);
    let _in_flight = s.hanging.enter();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    StatusCode::GATEWAY_TIMEOUT.into_response()
}

/// A Replicate API that answers each prediction with the status set for it.
#[derive(Default)]
struct Predictions {
    status: Mutex<HashMap<String, String>>,
    asked: Mutex<HashMap<String, u64>>,
}

impl Predictions {
    fn set(&self, id: &str, status: &str) {
        self.status.lock().unwrap().insert(id.to_owned(), status.to_owned());
    }

    fn asked(&self, id: &str) -> u64 {
        self.asked.lock().unwrap().get(id).copied().unwrap_or(0)
    }
}

async fn prediction(State(s): State<Arc<Predictions>>, Path(id): Path<String>, headers: axum::http::HeaderMap) -> Response {
    *s.asked.lock().unwrap().entry(id.clone()).or_default() += 1;
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {REPLICATE_KEY}")) {
        return (StatusCode::UNAUTHORIZED, Json(json!({"title": "Unauthenticated", "status": 401}))).into_response();
    }
    let Some(status) = s.status.lock().unwrap().get(&id).cloned() else {
        return (StatusCode::NOT_FOUND, Json(json!({"title": "Not found", "status": 404}))).into_response();
    };
    let done = status == "succeeded";
    let prediction = harness::conformance::fixture("replicate/prediction")
        .id(&id)
        .status(&status)
        .set("model", "black-forest-labs/flux-schnell")
        .set("created_at", "2026-11-30T10:00:00.000000Z")
        .set("started_at", "2026-11-30T10:00:01.500000Z")
        .set("completed_at", if done { json!("2026-11-30T10:00:04.000000Z") } else { Value::Null })
        .set("output", if done { json!(["https://replicate.delivery/xezq/output.webp"]) } else { Value::Null });
    Json(prediction.value()).into_response()
}

/// The stand-ins are served (and their answers logged for the SDKs' judge) by the harness.
use harness::stand_in::serve;

async fn put_settings(app: &TestApp, changes: Value) {
    let response = app.api.raw_put("/api/settings", &changes).await;
    assert_eq!(response.status(), 200, "PUT /api/settings {changes}");
}

async fn track_replicate(app: &TestApp, id: &str) {
    let response = app.api.raw_post("/api/jobs", &json!({"provider": "replicate", "job_id": id})).await;
    assert_eq!(response.status(), 201, "tracking replicate/{id}");
}

async fn replicate_job(app: &TestApp, id: &str) -> nevermiss_engine::store::job::Job {
    let response = app.api.raw_get(&format!("/api/jobs/replicate/{id}")).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_provider_delays_only_itself() {
    // On SQLite whatever the run's store: the test ages rows in the SQLite file itself.
    let app = TestApp::spawn_on(crate::harness::app::Backend::Sqlite).await;
    let hangs = Arc::new(Hangs::default());
    let generic_url = serve(Router::new().route("/jobs/{id}", get(hang)).with_state(hangs.clone())).await;
    let predictions = Arc::new(Predictions::default());
    let replicate_url = serve(Router::new().route("/v1/predictions/{id}", get(prediction)).with_state(predictions.clone())).await;
    let services = &app.engine().services;
    services.settings.set("generic.base_url", &generic_url).await.unwrap();
    services.secrets.set("generic", SecretKind::ApiKey, Some(GENERIC_KEY)).unwrap();
    services.settings.set("replicate.base_url", &replicate_url).await.unwrap();
    services.secrets.set("replicate", SecretKind::ApiKey, Some(REPLICATE_KEY)).unwrap();
    // Each hanging request is given up only after a minute: far longer than `POST
    // /api/reconcile` waits, and 48 jobs at 8 at a time add up to minutes.
    services.settings.set(PROVIDER_TIMEOUT_SECS, "60").await.unwrap();

    // 48 generic jobs, running as a webhook said (no immediate poll): only the scheduler asks.
    for i in 0..48 {
        assert_eq!(app.deliver(&format!("hang-{i}-d1"), &format!("hang-{i}"), "running", 1).await, Outcome::Applied);
    }
    // One of them has been running for two hours: past the default 30-minute stuck threshold.
    let db = rusqlite::Connection::open(app.data_dir.join(nevermiss_engine::data_dir::DATABASE_FILE)).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute("UPDATE jobs SET created_at = created_at - 7200000 WHERE job_id = 'hang-0'", []).unwrap();
    drop(db);

    // Three Replicate predictions, tracked (polled once at once): processing.
    let replicate = ["r-1", "r-2", "r-3"];
    for id in replicate {
        predictions.set(id, "processing");
        track_replicate(&app, id).await;
    }
    wait_until("the tracked predictions are running", || async {
        for id in replicate {
            if replicate_job(&app, id).await.state != JobState::Running {
                return false;
            }
        }
        true
    })
    .await;

    // The scheduler at the 5 s minimum: generic's round hangs on its requests, and a scheduled
    // round of Replicate has asked about each prediction again since it was tracked.
    put_settings(&app, json!({"poll_interval_secs": 5})).await;
    wait_until("generic hangs and Replicate was polled by the scheduler", || async {
        hangs.hanging.now() > 0 && replicate.iter().all(|id| predictions.asked(id) >= 2)
    })
    .await;

    // The predictions finish, and no webhook says so: the next Replicate rounds learn it, on
    // schedule, although generic's requests still hang.
    for id in replicate {
        predictions.set(id, "succeeded");
    }
    wait_until("every prediction finished by polling while generic hangs", || async {
        for id in replicate {
            let job = replicate_job(&app, id).await;
            if job.state != JobState::Succeeded {
                return false;
            }
            assert_eq!(job.terminal_source, Some(nevermiss_engine::store::job::Source::Pull), "{job:?}");
        }
        true
    })
    .await;
    assert!(hangs.hanging.now() > 0, "generic was still hanging meanwhile");

    // The stuck job's alert runs on its own schedule too.
    wait_until("the stuck generic job alerted", || async { app.notifier.count("nevermiss:generic:hang-0:stuck") == 1 }).await;

    // A reconcile on demand answers within its bound: Replicate's round is done (it checked the
    // new prediction), generic's is still running, over budget.
    predictions.set("r-4", "processing");
    track_replicate(&app, "r-4").await;
    let response = app.api.raw_post("/api/reconcile", &json!({})).await;
    assert_eq!(response.status(), 200);
    let report: PassReport = response.json().await.unwrap();
    assert_eq!(report.answer_within_secs, ANSWER_WITHIN.as_secs());
    let generic = &report.rounds["generic"];
    assert_eq!(generic.outcome, RoundOutcome::Running, "{report:?}");
    assert!(report.pass.providers["generic"].contains("over budget"), "{report:?}");
    let replicate_round = &report.rounds["replicate"];
    assert_eq!(replicate_round.outcome, RoundOutcome::Done, "{report:?}");
    assert!(replicate_round.counts.checked >= 1, "{report:?}");
    assert_eq!(report.pass.providers["replicate"], "ok", "{report:?}");

    // The metrics show what happened: Replicate's polls finished the three predictions (by
    // polling: no Replicate webhook secret is set here, so no webhook was expected).
    let metrics = app.api.get::<Value>("/api/metrics", StatusCode::OK).await;
    assert!(metrics["poll_only_completions"].as_i64().unwrap() >= 3, "{metrics}");
    assert_eq!(metrics["providers"]["replicate"]["status"], "ok", "{metrics}");
}

//! Jobs that can never be polled are abandoned: a job its provider answers 404 for at
//! every poll, past the `abandon_after_secs` limit (3 polls at least), and a fal job with no status
//! URL (at once). Each gets one alert, shows why on the job and in the metrics, is not polled any
//! more (a later round polls another job and not them), and a webhook still finishes it with its
//! one terminal notification.

use crate::harness;
use nevermiss_engine::store::job::Outcome;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use harness::{terminal_identity, wait_until, TestApp};
use nevermiss_engine::metrics::Metrics;
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::reconcile::PassReport;
use nevermiss_engine::store::job::{AbandonReason, Job, JobState, PollErrorKind, Source};
use serde_json::{json, Value};

const API_KEY: &str = "abandon-test-key";

/// A generic status API: `gone-*` jobs are unknown (404), the others are running. Counts requests.
#[derive(Default)]
struct StandIn {
    asked: Mutex<HashMap<String, u64>>,
}

impl StandIn {
    fn asked(&self, id: &str) -> u64 {
        self.asked.lock().unwrap().get(id).copied().unwrap_or(0)
    }
}

async fn status(State(s): State<Arc<StandIn>>, Path(id): Path<String>) -> Response {
    *s.asked.lock().unwrap().entry(id.clone()).or_default() += 1;
    if id.starts_with("gone") {
        return (StatusCode::NOT_FOUND, Json(json!({"error": "no such job"}))).into_response();
    }
    Json(json!({"jobId": id, "state": "running", "seq": 2})).into_response()
}

async fn job(app: &TestApp, provider: &str, id: &str) -> Job {
    let response = app.api.raw_get(&format!("/api/jobs/{provider}/{id}")).await;
    assert_eq!(response.status(), 200, "GET job {provider}/{id}");
    response.json().await.unwrap()
}

/// What "poll now" answered (`PollAnswer`): whether the provider answered, and the job after it.
struct Polled {
    polled: bool,
    job: Job,
}

async fn poll_now(app: &TestApp, id: &str) -> Polled {
    let response = app.api.raw_post(&format!("/api/jobs/generic/{id}/poll"), &json!({})).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    Polled { polled: answer["polled"].as_bool().unwrap(), job: serde_json::from_value(answer["job"].clone()).unwrap() }
}

async fn put_settings(app: &TestApp, changes: Value) -> (u16, Value) {
    let response = app.api.raw_put("/api/settings", &changes).await;
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_can_never_be_polled_are_abandoned_once_and_a_webhook_still_finishes_them() {
    // On SQLite whatever the run's store: the test ages rows in the SQLite file itself.
    let app = TestApp::spawn_on(crate::harness::app::Backend::Sqlite).await;
    let stand = Arc::new(StandIn::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = Router::new().route("/jobs/{id}", get(status)).with_state(stand.clone());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let services = &app.engine().services;
    services.settings.set("generic.base_url", &url).await.unwrap();
    services.secrets.set("generic", SecretKind::ApiKey, Some(API_KEY)).unwrap();
    services.secrets.set("fal", SecretKind::ApiKey, Some(API_KEY)).unwrap();

    // The limit is a setting, checked like the others.
    let (status, answer) = put_settings(&app, json!({"abandon_after_secs": "soon"})).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["errors"]["abandon_after_secs"].is_string(), "{answer}");
    let (status, answer) = put_settings(&app, json!({"abandon_after_secs": 91 * 86_400})).await;
    assert_eq!(status, 400, "{answer}");
    let (_, settings) = put_settings(&app, json!({})).await;
    assert_eq!(settings["abandon_after_secs"], 3 * 86_400, "the default is 3 days: {settings}");

    // A job the provider does not know: tracking polls it once, "poll now" twice more. Three 404s
    // in a row, but within the default 3 days: it is still polled.
    let (status, _) = app.track("gone-1", Some("typo in the id")).await;
    assert_eq!(status, 201);
    wait_until("the first 404 is kept on the job", || async {
        let job = job(&app, "generic", "gone-1").await;
        job.poll_error_kind == Some(PollErrorKind::NotFound)
    })
    .await;
    for _ in 0..2 {
        let answer = poll_now(&app, "gone-1").await;
        assert!(!answer.polled);
        assert_eq!(answer.job.abandoned_at, None, "within the time limit: not abandoned yet: {:?}", answer.job);
    }
    assert_eq!(stand.asked("gone-1"), 3);

    // With the limit at 0 (3 polls alone), the next 404 gives up on it.
    let (status, answer) = put_settings(&app, json!({"abandon_after_secs": 0})).await;
    assert_eq!(status, 200, "{answer}");
    let answer = poll_now(&app, "gone-1").await;
    assert_eq!(answer.job.abandoned_reason, Some(AbandonReason::NotFound), "{:?}", answer.job);
    assert!(answer.job.abandoned_at.is_some(), "{:?}", answer.job);
    assert_eq!(answer.job.state, JobState::Unknown);
    assert_eq!(stand.asked("gone-1"), 4);

    // A fal request tracked without its status URL can never be polled: given up at once.
    let response = app.api.raw_post("/api/jobs", &json!({"provider": "fal", "job_id": "fal-nourl"})).await;
    assert_eq!(response.status(), 201);
    wait_until("the fal job without a status URL is abandoned", || async {
        job(&app, "fal", "fal-nourl").await.abandoned_reason == Some(AbandonReason::Unpollable)
    })
    .await;
    let fal = job(&app, "fal", "fal-nourl").await;
    assert!(fal.poll_error.as_deref().is_some_and(|e| e.contains("no status_url")), "the reason is shown: {fal:?}");

    // One alert each, through the outbox.
    wait_until("one alert per abandoned job", || async {
        app.notifier.count("nevermiss:generic:gone-1:abandoned") == 1 && app.notifier.count("nevermiss:fal:fal-nourl:abandoned") == 1
    })
    .await;
    let metrics: Metrics = app.api.raw_get("/api/metrics").await.json().await.unwrap();
    assert_eq!(metrics.store.jobs_abandoned, 2, "{metrics:?}");
    assert_eq!(metrics.store.jobs_not_found, 0, "an abandoned 404 is counted as abandoned: {metrics:?}");
    let listed = app.api.get::<Value>("/api/jobs?q=gone-1", StatusCode::OK).await;
    assert_eq!(listed["jobs"][0]["abandoned_reason"], "not_found", "the list shows it too: {listed}");

    // No more polls, even once their backoff would have passed (aged here as if hours went by):
    // a round on demand polls a new job (a later, known event) and neither of them.
    let db = rusqlite::Connection::open(app.data_dir.join(nevermiss_engine::data_dir::DATABASE_FILE)).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute("UPDATE jobs SET next_poll_at = 0 WHERE job_id IN ('gone-1', 'fal-nourl')", []).unwrap();
    drop(db);
    assert_eq!(app.deliver("marker-d1", "marker", "running", 1).await, Outcome::Applied);
    let report: PassReport = app.api.raw_post("/api/reconcile", &json!({})).await.json().await.unwrap();
    assert_eq!(stand.asked("marker"), 1, "the round polled the new job: {report:?}");
    assert_eq!(report.rounds["generic"].counts.checked, 1, "{report:?}");
    assert!(!report.rounds.contains_key("fal"), "no fal job is due: {report:?}");
    assert_eq!(stand.asked("gone-1"), 4, "the abandoned job was not polled");
    assert_eq!(job(&app, "fal", "fal-nourl").await.last_polled_at, fal.last_polled_at, "nor the fal job");

    // A webhook still finishes it: applied, notified once as any finished job.
    assert_eq!(app.deliver("gone-1-d1", "gone-1", "succeeded", 5).await, Outcome::Applied);
    wait_until("the terminal notification of the abandoned job", || async { app.notifier.count(&terminal_identity("gone-1")) == 1 }).await;
    let finished = job(&app, "generic", "gone-1").await;
    assert_eq!((finished.state, finished.terminal_source), (JobState::Succeeded, Some(Source::Push)), "{finished:?}");
    assert_eq!(app.notifier.count("nevermiss:generic:gone-1:abandoned"), 1);
    let metrics: Metrics = app.api.raw_get("/api/metrics").await.json().await.unwrap();
    assert_eq!(metrics.store.jobs_abandoned, 1, "a finished job is no longer counted: {metrics:?}");
}

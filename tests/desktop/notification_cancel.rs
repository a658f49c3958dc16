//! The `cancel` action of a stuck alert on a real notification server (dunst on a private session
//! bus), with a real engine in this process and a stand-in for Replicate's API on loopback
//! (`GET /v1/predictions/{id}`, `POST /v1/predictions/{id}/cancel`, bodies from the checked
//! fixture). The alert offers `cancel` beside `open` and `provider`, a finished job's notification
//! never does; the server's `ActionInvoked(id, "cancel")` (sent on the bus as dunst sends it) makes
//! the one cancel call the admin API makes, recorded on the job's timeline, and the job ends
//! `canceled` through the merge point (by the poll that follows, never written by the cancel);
//! what the provider answered takes the alert's place (same id), accepted or refused in its own
//! words, and a click on that answer opens the job.
#![cfg(all(feature = "desktop", target_os = "linux"))]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use nevermiss_engine::api::jobs::JobDetail;
use nevermiss_engine::channels::desktop::OpenJob;
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::store::job::JobState;
use serde_json::{json, Value};

use crate::common::OwnerApi;
use crate::notification_clicks::{desk_in_process, invoke, Desk, NotifyIds};
use crate::session::{self, wait_for, NotifyCalls};

const KEY: &str = "r8_desktop_standin_key";

/// The stand-in's state: each prediction's status, and every cancel call it took.
#[derive(Default)]
struct Replicate {
    statuses: Mutex<HashMap<String, &'static str>>,
    cancels: Mutex<Vec<String>>,
}

fn prediction(id: &str, status: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replicate/prediction.json");
    let mut p: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    p["id"] = json!(id);
    p["status"] = json!(status);
    // Its label: the notifications name each job by it.
    p["model"] = json!(format!("nevermiss/{id}"));
    p["urls"]["web"] = json!(format!("https://replicate.com/p/{id}"));
    p["completed_at"] = if status == "canceled" { json!("2026-11-30T10:00:04.000000Z") } else { Value::Null };
    p
}

fn authorized(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {KEY}"))
}

async fn get(State(r): State<Arc<Replicate>>, headers: HeaderMap, Path(id): Path<String>) -> axum::response::Response {
    let status = r.statuses.lock().unwrap().get(&id).copied();
    match status.filter(|_| authorized(&headers)) {
        Some(status) => axum::Json(prediction(&id, status)).into_response(),
        None => (StatusCode::NOT_FOUND, axum::Json(json!({"title": "Not found", "detail": "Not found", "status": 404}))).into_response(),
    }
}

/// Accepts (the prediction is canceled at once), except `refuse-*`, which Replicate refuses.
async fn cancel(State(r): State<Arc<Replicate>>, headers: HeaderMap, Path(id): Path<String>) -> axum::response::Response {
    r.cancels.lock().unwrap().push(format!("POST /v1/predictions/{id}/cancel"));
    if !authorized(&headers) {
        return (StatusCode::UNAUTHORIZED, axum::Json(json!({"title": "Unauthorized", "detail": "bad token", "status": 401})))
            .into_response();
    }
    if id.starts_with("refuse-") {
        let refusal = json!({"title": "Prediction cannot be canceled", "detail": "Prediction is already finishing", "status": 400});
        return (StatusCode::BAD_REQUEST, axum::Json(refusal)).into_response();
    }
    r.statuses.lock().unwrap().insert(id.clone(), "canceled");
    axum::Json(prediction(&id, "canceled")).into_response()
}

async fn replicate_stand_in(running: &[&str]) -> (Arc<Replicate>, String) {
    let state = Arc::new(Replicate::default());
    state.statuses.lock().unwrap().extend(running.iter().map(|id| (id.to_string(), "processing")));
    let router = axum::Router::new()
        .route("/v1/predictions/{id}", axum::routing::get(get))
        .route("/v1/predictions/{id}/cancel", axum::routing::post(cancel))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (state, url)
}

/// The engine's admin API, as the window calls it.
struct Api<'a>(OwnerApi<'a>);

impl Api<'_> {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> reqwest::Response {
        self.0.call(method, path, body).await
    }

    async fn job(&self, job_id: &str) -> JobDetail {
        self.call(reqwest::Method::GET, &format!("/api/jobs/replicate/{job_id}"), None).await.json().await.unwrap()
    }

    async fn wait_for_state(&self, job_id: &str, state: JobState) -> JobDetail {
        for _ in 0..300 {
            let job = self.job(job_id).await;
            if job.job.state == state {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{job_id} never became {state:?}: {:?}", self.job(job_id).await);
    }
}

/// The one `Notify` call containing `needle`.
fn call(calls: &NotifyCalls, needle: &str) -> String {
    calls.one(needle)
}

/// Tracks a running prediction, then ages it past the stuck threshold (30 minutes by default)
/// as if it had started two hours ago, and runs a pass: its stuck alert is raised.
async fn stuck(engine: &Engine, api: &Api<'_>, job_id: &str) {
    let tracked = api.call(reqwest::Method::POST, "/api/jobs", Some(json!({"provider": "replicate", "job_id": job_id}))).await;
    assert_eq!(tracked.status(), StatusCode::CREATED);
    api.wait_for_state(job_id, JobState::Running).await;
    let id = job_id.to_owned();
    engine
        .services
        .store
        .write(move |tx| tx.execute("UPDATE jobs SET created_at = created_at - 7200000 WHERE job_id = $1", [id.as_str()]))
        .await
        .unwrap();
    assert_eq!(api.call(reqwest::Method::POST, "/api/reconcile", None).await.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_on_a_stuck_alert_asks_the_provider_once_and_says_what_it_answered() {
    let _alone = session::one_at_a_time();
    let Desk { bus, calls, data_dir, .. } = &desk_in_process();
    let ids = NotifyIds::watch(bus);
    let (replicate, url) = replicate_stand_in(&["stuck-1", "refuse-1"]).await;

    let opened: Arc<Mutex<Vec<String>>> = Arc::default();
    let open_job = Arc::new(OpenJob::default());
    open_job.set({
        let opened = opened.clone();
        move |_, job_id| opened.lock().unwrap().push(job_id.to_owned())
    });
    open_job.set_url_opener(|_| {});
    let engine =
        Engine::start(EngineConfig::local(data_dir.path()), nevermiss_engine::channels::desktop::desktop_notifier(open_job)).await.unwrap();
    engine.services.secrets.set("replicate", SecretKind::ApiKey, Some(KEY)).unwrap();
    let api = Api(OwnerApi(&engine));
    let saved = api.call(reqwest::Method::PUT, "/api/settings", Some(json!({"replicate.base_url": url}))).await;
    assert_eq!(saved.status(), StatusCode::OK);

    // The stuck alert: urgent, and it offers cancel beside open and the provider's page.
    stuck(&engine, &api, "stuck-1").await;
    let alert = call(calls, "string \"Stuck: nevermiss/stuck-1\"");
    for action in ["default", "open", "provider", "cancel"] {
        assert!(alert.contains(&format!("string \"{action}\"")), "no {action} action: {alert}");
    }
    assert!(alert.split("string \"urgency\"").nth(1).expect("an urgency hint").contains("byte 2"), "{alert}");
    let alert_id = ids.nth(0);

    // Chosen: one cancel call, recorded on the timeline; the job ends canceled through the merge
    // point (the poll after the request), and the answer takes the alert's place.
    invoke(bus, alert_id, "cancel");
    let answer = call(calls, "string \"Cancel requested: nevermiss/stuck-1\"");
    assert!(answer.contains(&format!("uint32 {alert_id}")), "the answer replaces the alert (its replaces_id): {answer}");
    assert!(answer.contains("replicate answered: accepted (status canceled)"), "{answer}");
    assert!(!answer.contains("string \"cancel\""), "the answer offers no second cancel: {answer}");
    let job = api.wait_for_state("stuck-1", JobState::Canceled).await;
    assert_eq!(job.job.terminal_source.map(|s| s.as_str()), Some("pull"), "the end came by the poll, not by the cancel");
    let requested: Vec<_> = job.timeline.iter().filter(|e| e.outcome.as_str() == "requested").collect();
    assert_eq!(requested.len(), 1, "{:?}", job.timeline);
    assert_eq!(requested[0].detail.as_deref(), Some("cancel requested: accepted (status canceled)"));
    assert_eq!(*replicate.cancels.lock().unwrap(), ["POST /v1/predictions/stuck-1/cancel"]);

    // Its end is its own notification, which offers no cancel.
    let ended = call(calls, "string \"Canceled: nevermiss/stuck-1\"");
    assert!(!ended.contains("string \"cancel\""), "a finished job offers no cancel: {ended}");

    // A refusal is said as the provider answered it; the job goes on. (Three notifications so
    // far: the alert, the answer, the end; the next one's id is the fourth handed out.)
    wait_for("three notifications shown", Duration::from_secs(30), || (ids.count() == 3).then_some(()));
    stuck(&engine, &api, "refuse-1").await;
    let alert = call(calls, "string \"Stuck: nevermiss/refuse-1\"");
    let alert_id = ids.nth(3);
    assert!(alert.contains("string \"cancel\""), "{alert}");
    invoke(bus, alert_id, "cancel");
    let refused = call(calls, "string \"Not canceled: nevermiss/refuse-1\"");
    assert!(refused.contains("replicate refused: the provider answered 400: Prediction is already finishing"), "{refused}");
    assert_eq!(api.job("refuse-1").await.job.state, JobState::Running);
    let timeline = api.job("refuse-1").await.timeline;
    assert!(timeline.iter().any(|e| e.detail.as_deref().is_some_and(|d| d.starts_with("cancel refused: "))), "{timeline:?}");
    assert_eq!(replicate.cancels.lock().unwrap().len(), 2, "one call per choice");

    // A click on the answer opens the job.
    invoke(bus, ids.nth(4), "default");
    let job = wait_for("the click to open the job", Duration::from_secs(30), || opened.lock().unwrap().first().cloned());
    assert_eq!(job, "refuse-1");
    engine.shutdown().await;
}

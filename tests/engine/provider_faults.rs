//! Provider faults during reconciliation, against a local stand-in for the generic status API
//! that misbehaves for some jobs: it hangs (the request times out), drips its answer a byte at a
//! time, answers 500 or 503, malformed JSON, an answer about another job, an endless body, or 404;
//! and for the whole provider, a storm of 429s. The healthy jobs still reach their state at the
//! scheduled passes (the faulty ones back off instead of holding them up), a 429 pauses the
//! provider for its Retry-After and no longer, and the admin API answers while a slow pass runs.
//! Assertions are about what happened (states, counts, overlaps), never about durations.

use crate::harness;
use nevermiss_engine::store::job::{JobState, Outcome};

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use harness::stand_in::InFlight;
use harness::{wait_until, TestApp};
use nevermiss_engine::api::status::Passes;
use nevermiss_engine::provider_health::HealthStatus;
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::providers::PROVIDER_TIMEOUT_SECS;
use serde_json::json;

const API_KEY: &str = "faulty-provider-key";

#[derive(Default)]
struct StandIn {
    /// Requests per job id.
    requests: Mutex<HashMap<String, u64>>,
    /// Requests being answered right now that will never finish in time.
    hanging: InFlight,
    /// While set, every request is answered 429 with `Retry-After: 2`.
    storm: AtomicBool,
    rate_limited: AtomicU64,
}

async fn status(State(s): State<Arc<StandIn>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    *s.requests.lock().unwrap().entry(id.clone()).or_default() += 1;
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {API_KEY}")) {
        return (StatusCode::UNAUTHORIZED, "bad key").into_response();
    }
    if s.storm.load(Ordering::SeqCst) {
        s.rate_limited.fetch_add(1, Ordering::SeqCst);
        return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "2")], "slow down").into_response();
    }
    let done = json!({"jobId": id, "state": "succeeded", "seq": 2});
    let kind = id.split('-').next().unwrap_or("");
    match kind {
        "ok" => Json(done).into_response(),
        // Slow, but within the request timeout: still an answer.
        "slow" => {
            tokio::time::sleep(Duration::from_millis(800)).await;
            Json(done).into_response()
        }
        // Never answers: the request times out (the handler is dropped then).
        "hang" => {
            let _guard = s.hanging.enter();
            tokio::time::sleep(Duration::from_secs(600)).await;
            Json(done).into_response()
        }
        // The head at once, then the body a byte every 300 ms.
        "drip" => {
            let guard = Arc::new(s.hanging.enter());
            let bytes = done.to_string().into_bytes();
            let stream = futures_util::stream::unfold((0usize, bytes, guard), |(i, bytes, guard)| async move {
                if i >= bytes.len() {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                let byte = bytes::Bytes::copy_from_slice(&bytes[i..i + 1]);
                Some((Ok::<_, Infallible>(byte), (i + 1, bytes, guard)))
            });
            Response::new(Body::from_stream(stream))
        }
        // A body that never ends (spaces after an opening brace): must not be read whole.
        "endless" => {
            let guard = Arc::new(s.hanging.enter());
            let chunk = bytes::Bytes::from(vec![b' '; 64 * 1024]);
            let stream = futures_util::stream::unfold((true, chunk, guard), |(first, chunk, guard)| async move {
                tokio::task::yield_now().await;
                let next = if first { bytes::Bytes::from_static(b"{\"jobId\":") } else { chunk.clone() };
                Some((Ok::<_, Infallible>(next), (false, chunk, guard)))
            });
            Response::new(Body::from_stream(stream))
        }
        "err500" => (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": "internal"}))).into_response(),
        "err503" => (StatusCode::SERVICE_UNAVAILABLE, [("content-type", "text/html")], "<html>maintenance</html>").into_response(),
        "gone" => (StatusCode::NOT_FOUND, Json(json!({"error": "no such job"}))).into_response(),
        "wrong" => Json(json!({"jobId": "someone-else", "state": "succeeded", "seq": 2})).into_response(),
        "malformed" => {
            let n: u32 = id.rsplit('-').next().unwrap().parse().unwrap_or(0);
            let body = match n % 5 {
                0 => "{\"jobId\":".to_owned(),
                1 => "<html>not json</html>".to_owned(),
                2 => json!({"jobId": id, "state": "exploded", "seq": 2}).to_string(),
                3 => "[1,2,3]".to_owned(),
                _ => json!({"jobId": id, "state": "succeeded", "seq": "two"}).to_string(),
            };
            (StatusCode::OK, [("content-type", "application/json")], body).into_response()
        }
        _ => (StatusCode::NOT_FOUND, "unknown kind").into_response(),
    }
}

async fn stand_in(state: Arc<StandIn>) -> String {
    let app = Router::new().route("/jobs/{id}", get(status)).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn configure(app: &TestApp, url: &str) {
    app.set_setting(PROVIDER_TIMEOUT_SECS, "2").await;
    app.set_setting("generic.base_url", url).await;
    app.set_secret("generic", SecretKind::ApiKey, Some(API_KEY));
}

async fn set_interval(app: &TestApp, secs: u64) {
    app.api.put_settings(&json!({"poll_interval_secs": secs})).await;
}

async fn states(app: &TestApp, ids: &[String]) -> HashMap<String, JobState> {
    let mut out = HashMap::new();
    for id in ids {
        out.insert(id.clone(), app.job_state(id).await);
    }
    out
}

fn ids(kind: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{kind}-{i}")).collect()
}

/// Creates the jobs as a webhook would (running, seq 1), without the immediate poll that
/// tracking does: only the scheduler will ask the provider about them.
async fn push_running(app: &TestApp, jobs: &[String]) {
    for id in jobs {
        assert_eq!(app.deliver(&format!("{id}-d1"), id, "running", 1).await, Outcome::Applied);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_jobs_back_off_while_healthy_ones_finish_at_the_scheduled_passes() {
    let app = TestApp::spawn().await;
    let s = Arc::new(StandIn::default());
    configure(&app, &stand_in(s.clone()).await).await;

    let healthy: Vec<String> = [ids("ok", 24), ids("slow", 4)].concat();
    let faulty: Vec<String> = [
        ids("hang", 4),
        ids("drip", 2),
        ids("endless", 2),
        ids("err500", 3),
        ids("err503", 3),
        ids("gone", 2),
        ids("wrong", 2),
        ids("malformed", 5),
    ]
    .concat();
    // Faulty first, so they are the longest waiting and polled first.
    push_running(&app, &faulty).await;
    push_running(&app, &healthy).await;
    let passes = app.api.metrics().await.store.reconcile_passes;

    // The scheduler, at the 5 s minimum interval. While its pass waits on the hanging requests,
    // the admin API keeps answering.
    set_interval(&app, 5).await;
    let (answered, while_hanging) = (AtomicU64::new(0), AtomicU64::new(0));
    wait_until("a scheduled pass finished", || async {
        let hanging_before = s.hanging.now() > 0;
        let health = app.api.raw_get("/api/health").await;
        assert_eq!(health.status(), 200, "the admin API answers during a pass");
        answered.fetch_add(1, Ordering::SeqCst);
        if hanging_before && s.hanging.now() > 0 {
            while_hanging.fetch_add(1, Ordering::SeqCst);
        }
        app.api.metrics().await.store.reconcile_passes > passes
    })
    .await;
    assert!(
        while_hanging.load(Ordering::SeqCst) > 0,
        "GET /api/health answered while the provider was hanging on requests ({} answers)",
        answered.load(Ordering::SeqCst)
    );

    // The healthy jobs are done, learned by polling; the faulty ones are still running, with the
    // reason kept on the job, and wait longer before their next poll.
    let expected: HashMap<String, JobState> = healthy.iter().map(|id| (id.clone(), JobState::Succeeded)).collect();
    assert_eq!(states(&app, &healthy).await, expected);
    for id in &faulty {
        let job = app.job(id).await.unwrap();
        assert_eq!(job.job.state, JobState::Running, "{id}: {job:?}");
        assert!(job.job.poll_error.is_some(), "{id} keeps why its poll failed: {job:?}");
    }
    for id in ids("endless", 2) {
        let error = app.job(&id).await.unwrap().job.poll_error.unwrap();
        assert!(error.contains("over"), "an endless answer is cut at its size limit: {error}");
    }
    for id in [ids("hang", 4), ids("drip", 2)].concat() {
        let error = app.job(&id).await.unwrap().job.poll_error.unwrap();
        assert!(error.contains("in time"), "{id}: the provider_timeout_secs setting bounds the request: {error}");
    }
    let report: Passes = app.api.get("/api/reconcile/passes", StatusCode::OK).await;
    let pass = &report.passes[0];
    assert!(pass.counts.errors >= (faulty.len() - 2) as u64, "{pass:?}");
    assert!(pass.counts.rescues >= healthy.len() as u64, "{pass:?}");

    // More healthy jobs arrive: the next scheduled pass finishes them too, and does not ask
    // about the faulty ones again yet (they back off: twice the interval, then more).
    let late = ids("ok-late", 10);
    push_running(&app, &late).await;
    let asked_faulty = |s: &StandIn| -> u64 { faulty.iter().map(|id| s.requests.lock().unwrap().get(id).copied().unwrap_or(0)).sum() };
    let before = asked_faulty(&s);
    let passes = app.api.metrics().await.store.reconcile_passes;
    wait_until("the next scheduled pass", || async { app.api.metrics().await.store.reconcile_passes > passes }).await;
    let expected: HashMap<String, JobState> = late.iter().map(|id| (id.clone(), JobState::Succeeded)).collect();
    assert_eq!(states(&app, &late).await, expected);
    assert_eq!(asked_faulty(&s), before, "the faulty jobs were not polled in the very next pass");

    // The process stayed sound: no notification lost for the healthy ones, none for the others.
    wait_until("a notification per finished job", || async { app.notifier.total() == healthy.len() + late.len() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_storm_pauses_the_provider_for_its_retry_after_then_every_job_finishes() {
    let app = TestApp::spawn().await;
    let s = Arc::new(StandIn::default());
    configure(&app, &stand_in(s.clone()).await).await;
    let jobs = ids("ok", 20);
    push_running(&app, &jobs).await;

    s.storm.store(true, Ordering::SeqCst);
    let report = app.api.reconcile().await;
    let limited = s.rate_limited.load(Ordering::SeqCst);
    assert!(limited >= 1, "{report:?}");
    assert!(limited <= 8, "after the first 429 the pass stops asking (at most the 8 in flight): {limited}");
    let metrics = app.api.metrics().await;
    assert_eq!(metrics.providers["generic"].status, HealthStatus::RateLimited, "{metrics:?}");

    // During the pause a pass on demand honours it: no request at all.
    let report = app.api.reconcile().await;
    assert!(report.pass.providers["generic"].contains("paused"), "{report:?}");
    assert_eq!(s.rate_limited.load(Ordering::SeqCst), limited, "no request while paused");
    let health = app.api.raw_get("/api/health").await;
    assert_eq!(health.status(), 200);

    // The storm ends; once Retry-After has passed, the scheduled passes finish every job.
    s.storm.store(false, Ordering::SeqCst);
    set_interval(&app, 5).await;
    let expected: HashMap<String, JobState> = jobs.iter().map(|id| (id.clone(), JobState::Succeeded)).collect();
    wait_until("every job finished after the storm", || async { states(&app, &jobs).await == expected }).await;
    let metrics = app.api.metrics().await;
    assert_eq!(metrics.providers["generic"].status, HealthStatus::Ok, "{metrics:?}");
    assert_eq!(metrics.store.reconcile_rescues, 20);
}

//! The admin API calls the web UI adds (contract §3 grows by these): serving the built UI
//! with a strict CSP and no token, "poll now", the hourly metrics history, secrets set and shown
//! only as set, and the first-launch test delivery.

use crate::harness;
use nevermiss_engine::api::setup::{SecretsView, TestDelivery};
use nevermiss_engine::api::status::MetricsHistory;
use nevermiss_engine::api::ErrorBody;
use nevermiss_engine::store::job::{JobState, Outcome, Source};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::routing::get;
use axum::{Json, Router};
use harness::{TestApp, SECRET};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_is_served_with_a_strict_policy_and_its_assets_without_a_token() {
    let app = TestApp::spawn().await;
    let response = app.http.get(format!("{}/", app.api.base)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let csp = response.headers()["content-security-policy"].to_str().unwrap().to_owned();
    let script_src = csp.split(';').map(str::trim).find(|d| d.starts_with("script-src")).expect("a script-src");
    assert_eq!(script_src, "script-src 'self'", "no inline or eval'd script: {csp}");
    assert!(!csp.contains("unsafe"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    let html = response.text().await.unwrap();
    assert!(!html.contains("<script>") && !html.contains("<script type=\"module\">"), "no inline script in {html}");

    // Every asset the page names is served, without a token, with its type. (Without a built UI
    // the page is the built-in one that says to run make, and names none.)
    let assets: Vec<&str> = html.split(['"', '\'']).filter(|s| s.starts_with("/assets/")).collect();
    if std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ui/dist/index.html").is_file() {
        assert!(assets.iter().any(|a| a.ends_with(".js")) && assets.iter().any(|a| a.ends_with(".css")), "{html}");
    } else {
        assert!(html.contains("make"), "the fallback page says how to build the UI: {html}");
    }
    for asset in assets {
        let response = app.http.get(format!("{}{asset}", app.api.base)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{asset}");
        let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
        let expected = if asset.ends_with(".js") { "javascript" } else { "text/css" };
        assert!(kind.contains(expected), "{asset} is {kind}");
        assert!(response.headers()["cache-control"].to_str().unwrap().contains("immutable"));
    }
    let missing = app.http.get(format!("{}/assets/nope.js", app.api.base)).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let traversal = app.http.get(format!("{}/../Cargo.toml", app.api.base)).send().await.unwrap();
    assert_eq!(traversal.status(), StatusCode::NOT_FOUND);
}

/// A generic sender's status API (contract §2): every job it is asked about has
/// succeeded; it counts the questions and checks the key.
async fn status_stand_in(key: &'static str) -> (String, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let app = Router::new().route(
        "/jobs/{id}",
        get(move |Path(id): Path<String>, headers: HeaderMap| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {key}")) {
                    return Err(AxumStatus::UNAUTHORIZED);
                }
                Ok(Json(json!({ "jobId": id, "state": "succeeded", "seq": 7 })))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_now_asks_the_provider_and_answers_the_job_or_why_not() {
    let app = TestApp::spawn().await;
    app.api.post::<ErrorBody>("/api/jobs/generic/never-tracked/poll", &json!({}), StatusCode::NOT_FOUND).await;

    // No status API configured: the job is answered with the reason.
    app.deliver("d-1", "poll-me", "running", 1).await;
    let answer = app.api.poll_now("generic", "poll-me").await;
    assert!(!answer.polled, "{answer:?}");
    assert!(answer.reason.as_deref().unwrap().contains("base URL"), "{answer:?}");
    assert_eq!(answer.job.state, JobState::Running);

    // With the sender's status API and its key: the poll finishes the job at once.
    let (url, asked) = status_stand_in("status-key").await;
    app.api.put_settings(&json!({ "generic.base_url": url })).await;
    app.api.put_secrets("generic", &json!({ "api_key": "status-key" })).await;
    let answer = app.api.poll_now("generic", "poll-me").await;
    assert!(answer.polled, "{answer:?}");
    assert_eq!(answer.reason, None);
    assert_eq!(answer.job.state, JobState::Succeeded);
    assert_eq!(answer.job.terminal_source, Some(Source::Pull));
    assert!(asked.load(Ordering::SeqCst) >= 1);
    let job = app.job("poll-me").await.unwrap();
    let last = job.timeline.last().unwrap().clone();
    assert_eq!((last.source, last.outcome), (Source::Pull, Outcome::Applied), "{job:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_history_counts_each_hour() {
    let app = TestApp::spawn().await;
    app.deliver("d-1", "h-1", "running", 1).await;
    app.deliver("d-1", "h-1", "running", 1).await;
    app.deliver("d-2", "h-1", "succeeded", 2).await;
    let history: MetricsHistory = app.api.get("/api/metrics/history?hours=6", StatusCode::OK).await;
    let hours = &history.hours;
    assert_eq!(hours.len(), 6);
    let now_hour = chrono::Utc::now().timestamp() / 3600 * 3600;
    let last = *hours.last().unwrap();
    assert!(last == now_hour || last == now_hour - 3600, "the last bucket is this hour: {last} vs {now_hour}");
    assert!(hours.windows(2).all(|w| w[1] - w[0] == 3600));
    let series = &history.series;
    let total = |name: &str| series.get(name).map(|v| v.iter().sum::<i64>()).unwrap_or(0);
    assert_eq!(total("deliveries_total"), 3, "{history:?}");
    assert_eq!(total("duplicates"), 1, "{history:?}");
    assert_eq!(series["deliveries_total"].len(), 6, "dense series");

    let default: MetricsHistory = app.api.get("/api/metrics/history", StatusCode::OK).await;
    assert_eq!(default.hours.len(), 48, "48 hours by default");
    for bad in ["0", "-1", "100000", "x"] {
        let response = app.api.raw_get(&format!("/api/metrics/history?hours={bad}")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "hours={bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_set_and_shown_only_as_set() {
    let app = TestApp::spawn_unconfigured().await;
    let view: SecretsView = app.api.get("/api/secrets", StatusCode::OK).await;
    assert!(!view.providers["generic"].webhook_secret.set, "{view:?}");
    match view.store.as_str() {
        "keychain" => assert_eq!(view.store_note, None),
        "file" => assert!(view.store_note.is_some(), "the file store says why: {view:?}"),
        other => panic!("store {other:?} in {view:?}"),
    }
    assert_eq!(view.providers["openai"].api_key.masked, None);

    let secret = "whsec_dGhlLXJlYWwtc2VjcmV0LXZhbHVlLTEyMw==";
    let body = json!({ "api_key": "sk-live-key-456", "webhook_secret": secret });
    let response = app.api.raw_put("/api/secrets/openai", &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    assert!(!text.contains(secret) && !text.contains("sk-live-key-456"), "a secret came back: {text}");
    let view: SecretsView = serde_json::from_str(&text).unwrap();
    assert!(view.providers["openai"].webhook_secret.set);
    assert!(view.providers["openai"].api_key.set);
    assert_eq!(view.providers["openai"].api_key.source.as_deref(), Some(view.store.as_str()), "{view:?}");
    assert!(view.providers["openai"].api_key.masked.as_deref().unwrap().chars().all(|c| c == '•'));
    let again = app.api.raw_get("/api/secrets").await.text().await.unwrap();
    assert!(!again.contains(secret), "{again}");
    // Never in the database (its file, on SQLite).
    if app.backend() == crate::harness::app::Backend::Sqlite {
        let db = std::fs::read(app.data_dir.join(nevermiss_engine::data_dir::DATABASE_FILE)).unwrap();
        assert!(!db.windows(secret.len()).any(|w| w == secret.as_bytes()), "the secret is in the database");
    }

    // A field left out stays; null forgets.
    let view = app.api.put_secrets("openai", &json!({ "api_key": null })).await;
    assert!(!view.providers["openai"].api_key.set);
    assert!(view.providers["openai"].webhook_secret.set);

    // Refusals name the field and change nothing.
    let body = app
        .api
        .put::<ErrorBody>("/api/secrets/openai", &json!({ "api_key": "two\nlines", "webhook_secret": "fine" }), StatusCode::BAD_REQUEST)
        .await;
    assert!(body.errors.as_ref().is_some_and(|e| e.contains_key("api_key")), "{body:?}");
    let view: SecretsView = app.api.get("/api/secrets", StatusCode::OK).await;
    assert!(!view.providers["openai"].api_key.set);
    app.api.put::<ErrorBody>("/api/secrets/nope", &json!({ "api_key": "x" }), StatusCode::NOT_FOUND).await;
    let unauthorized = app.api.http.put(app.api.url("/api/secrets/openai")).json(&json!({ "api_key": "x" })).send().await.unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_delivery_arrives_signed_through_the_receiver() {
    let app = TestApp::spawn_unconfigured().await;
    let body: ErrorBody = app.api.post("/api/test-delivery", &json!({}), StatusCode::BAD_REQUEST).await;
    assert!(body.error.contains("secret"), "no generic secret yet: {body:?}");

    app.api.put_secrets("generic", &json!({ "webhook_secret": SECRET })).await;
    let answer: TestDelivery = app.api.post("/api/test-delivery", &json!({}), StatusCode::OK).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.answer.outcome, Some(Outcome::Applied), "{answer:?}");
    let job = app.job(&answer.job_id).await.expect("the test job exists");
    assert_eq!(job.job.state, JobState::Succeeded);
    assert_eq!(job.job.terminal_source, Some(Source::Push));
    assert_eq!(job.timeline[0].delivery_id.as_deref(), Some(answer.delivery_id.as_str()));
    assert_eq!(app.api.metrics().await.store.deliveries_total, 1);
}

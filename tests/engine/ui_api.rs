//! The admin API calls the web UI adds (contract section 3 grows by these): serving the built UI
//! with a strict CSP and no token, "poll now", the hourly metrics history, secrets set and shown
//! only as set, and the first-launch test delivery.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::routing::get;
use axum::{Json, Router};
use common::{TestApp, SECRET};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn put(app: &TestApp, path: &str, body: &Value) -> (StatusCode, Value) {
    let response = app
        .http
        .put(format!("{}{path}", app.api))
        .bearer_auth(&app.token)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn post(app: &TestApp, path: &str) -> (StatusCode, Value) {
    let response = app.http.post(format!("{}{path}", app.api)).bearer_auth(&app.token).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_is_served_with_a_strict_policy_and_its_assets_without_a_token() {
    let app = TestApp::spawn().await;
    let response = app.http.get(format!("{}/", app.api)).send().await.unwrap();
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
    let assets: Vec<&str> = html
        .split(['"', '\''])
        .filter(|s| s.starts_with("/assets/"))
        .collect();
    if std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ui/dist/index.html").is_file() {
        assert!(assets.iter().any(|a| a.ends_with(".js")) && assets.iter().any(|a| a.ends_with(".css")), "{html}");
    } else {
        assert!(html.contains("make"), "the fallback page says how to build the UI: {html}");
    }
    for asset in assets {
        let response = app.http.get(format!("{}{asset}", app.api)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{asset}");
        let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
        let expected = if asset.ends_with(".js") { "javascript" } else { "text/css" };
        assert!(kind.contains(expected), "{asset} is {kind}");
        assert!(response.headers()["cache-control"].to_str().unwrap().contains("immutable"));
    }
    let missing = app.http.get(format!("{}/assets/nope.js", app.api)).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let traversal = app.http.get(format!("{}/../Cargo.toml", app.api)).send().await.unwrap();
    assert_eq!(traversal.status(), StatusCode::NOT_FOUND);
}

/// A generic sender's status API (contract section 2): every job it is asked about has
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
    let (status, _) = post(&app, "/api/jobs/generic/never-tracked/poll").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // No status API configured: the job is answered with the reason.
    app.deliver("d-1", "poll-me", "running", 1).await;
    let (status, answer) = post(&app, "/api/jobs/generic/poll-me/poll").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["polled"], false, "{answer}");
    assert!(answer["reason"].as_str().unwrap().contains("base URL"), "{answer}");
    assert_eq!(answer["job"]["state"], "running");

    // With the sender's status API and its key: the poll finishes the job at once.
    let (url, asked) = status_stand_in("status-key").await;
    let (status, body) = put(&app, "/api/settings", &json!({ "generic.base_url": url })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = put(&app, "/api/secrets/generic", &json!({ "api_key": "status-key" })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, answer) = post(&app, "/api/jobs/generic/poll-me/poll").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["polled"], true, "{answer}");
    assert_eq!(answer["reason"], Value::Null);
    assert_eq!(answer["job"]["state"], "succeeded");
    assert_eq!(answer["job"]["terminal_source"], "pull");
    assert!(asked.load(Ordering::SeqCst) >= 1);
    let job = app.job("poll-me").await.unwrap();
    let last = job["timeline"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["source"].as_str(), last["outcome"].as_str()), (Some("pull"), Some("applied")), "{job}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_history_counts_each_hour() {
    let app = TestApp::spawn().await;
    app.deliver("d-1", "h-1", "running", 1).await;
    app.deliver("d-1", "h-1", "running", 1).await;
    app.deliver("d-2", "h-1", "succeeded", 2).await;
    let history = app.api_json("/api/metrics/history?hours=6").await;
    let hours = history["hours"].as_array().unwrap();
    assert_eq!(hours.len(), 6);
    let now_hour = chrono::Utc::now().timestamp() / 3600 * 3600;
    let last = hours.last().unwrap().as_i64().unwrap();
    assert!(last == now_hour || last == now_hour - 3600, "the last bucket is this hour: {last} vs {now_hour}");
    assert!(hours.windows(2).all(|w| w[1].as_i64().unwrap() - w[0].as_i64().unwrap() == 3600));
    let series = &history["series"];
    let total = |name: &str| series[name].as_array().map(|v| v.iter().map(|x| x.as_i64().unwrap()).sum::<i64>()).unwrap_or(0);
    assert_eq!(total("deliveries_total"), 3, "{history}");
    assert_eq!(total("duplicates"), 1, "{history}");
    assert_eq!(series["deliveries_total"].as_array().unwrap().len(), 6, "dense series");

    assert_eq!(app.api_json("/api/metrics/history").await["hours"].as_array().unwrap().len(), 48, "48 hours by default");
    for bad in ["0", "-1", "100000", "x"] {
        let response = app.api_get(&format!("/api/metrics/history?hours={bad}")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "hours={bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_set_and_shown_only_as_set() {
    let app = TestApp::spawn_unconfigured().await;
    let view = app.api_json("/api/secrets").await;
    assert_eq!(view["providers"]["generic"]["webhook_secret"]["set"], false, "{view}");
    match view["store"].as_str() {
        Some("keychain") => assert_eq!(view["store_note"], Value::Null),
        Some("file") => assert!(view["store_note"].is_string(), "the file store says why: {view}"),
        other => panic!("store {other:?} in {view}"),
    }
    assert_eq!(view["providers"]["openai"]["api_key"]["masked"], Value::Null);

    let secret = "whsec_dGhlLXJlYWwtc2VjcmV0LXZhbHVlLTEyMw==";
    let (status, view) = put(&app, "/api/secrets/openai", &json!({ "api_key": "sk-live-key-456", "webhook_secret": secret })).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let text = view.to_string();
    assert!(!text.contains(secret) && !text.contains("sk-live-key-456"), "a secret came back: {text}");
    assert_eq!(view["providers"]["openai"]["webhook_secret"]["set"], true);
    assert_eq!(view["providers"]["openai"]["api_key"]["set"], true);
    assert_eq!(view["providers"]["openai"]["api_key"]["source"], view["store"], "{view}");
    assert!(view["providers"]["openai"]["api_key"]["masked"].as_str().unwrap().chars().all(|c| c == '•'));
    let again = app.api_get("/api/secrets").await.text().await.unwrap();
    assert!(!again.contains(secret), "{again}");
    // Never in the database.
    let db = std::fs::read(app.data_dir.join(nevermiss_engine::engine::DATABASE_FILE)).unwrap();
    assert!(!db.windows(secret.len()).any(|w| w == secret.as_bytes()), "the secret is in the database");

    // A field left out stays; null forgets.
    let (status, view) = put(&app, "/api/secrets/openai", &json!({ "api_key": null })).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(view["providers"]["openai"]["api_key"]["set"], false);
    assert_eq!(view["providers"]["openai"]["webhook_secret"]["set"], true);

    // Refusals name the field and change nothing.
    let (status, body) = put(&app, "/api/secrets/openai", &json!({ "api_key": "two\nlines", "webhook_secret": "fine" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["errors"]["api_key"].is_string(), "{body}");
    assert_eq!(app.api_json("/api/secrets").await["providers"]["openai"]["api_key"]["set"], false);
    let (status, _) = put(&app, "/api/secrets/nope", &json!({ "api_key": "x" })).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let unauthorized = app.http.put(format!("{}/api/secrets/openai", app.api)).json(&json!({ "api_key": "x" })).send().await.unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_delivery_arrives_signed_through_the_receiver() {
    let app = TestApp::spawn_unconfigured().await;
    let (status, body) = post(&app, "/api/test-delivery").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "no generic secret yet: {body}");
    assert!(body["error"].as_str().unwrap().contains("secret"), "{body}");

    let (status, _) = put(&app, "/api/secrets/generic", &json!({ "webhook_secret": SECRET })).await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = post(&app, "/api/test-delivery").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["answer"]["outcome"], "applied", "{answer}");
    let job_id = answer["job_id"].as_str().unwrap();
    let job = app.job(job_id).await.expect("the test job exists");
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["terminal_source"], "push");
    assert_eq!(job["timeline"][0]["delivery_id"], answer["delivery_id"]);
    assert_eq!(app.metric("deliveries_total").await, 1);
}

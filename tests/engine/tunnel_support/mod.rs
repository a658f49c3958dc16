//! Helpers shared by the tunnel tests: configure the tunnel through the admin API (never through
//! the process-global environment, so tests in parallel threads cannot disturb each other), read
//! its state, wait for it, and send signed generic deliveries to a public URL.

#![allow(dead_code)]

pub mod stand_ins;

use std::future::Future;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{payload, sign, TestApp};

/// The bound of the tunnel waits: a start, a death noticed, a backoff, a restart.
pub const TUNNEL_WAIT: Duration = Duration::from_secs(60);

/// `PUT /api/settings` with tunnel settings; must be accepted.
pub async fn configure(app: &TestApp, settings: Value) {
    let response = app
        .http
        .put(format!("{}/api/settings", app.api))
        .bearer_auth(&app.token)
        .json(&settings)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::OK, "settings {settings} were refused: {body}");
}

/// `PUT /api/tunnel/credentials`; must be accepted. Answers which secrets are set.
pub async fn set_credentials(app: &TestApp, credentials: Value) -> Value {
    let response = app
        .http
        .put(format!("{}/api/tunnel/credentials", app.api))
        .bearer_auth(&app.token)
        .json(&credentials)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::OK, "credentials were refused: {body}");
    body
}

pub async fn state(app: &TestApp) -> Value {
    app.api_json("/api/tunnel").await
}

/// Polls the tunnel state until `check` holds (at most `TUNNEL_WAIT`); returns that state.
pub async fn wait_for_state(app: &TestApp, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for_state_within(app, what, TUNNEL_WAIT, check).await
}

pub async fn wait_for_state_within(app: &TestApp, what: &str, bound: Duration, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + bound;
    loop {
        let st = state(app).await;
        if check(&st) {
            return st;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {bound:?} waiting until {what}; the tunnel state is {st:#}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the tunnel is up at a URL other than `not` (any URL when `None`); returns the state.
pub async fn wait_up(app: &TestApp, not: Option<&str>) -> Value {
    wait_for_state(app, "the tunnel is up", |st| {
        st["status"] == "up" && st["public_url"].as_str().is_some_and(|u| Some(u) != not)
    })
    .await
}

pub fn public_url(st: &Value) -> String {
    st["public_url"].as_str().expect("an up tunnel has a URL").to_owned()
}

/// POSTs a signed generic delivery to `<base>/hooks/generic`; returns the status and the answer.
pub async fn deliver_to(http: &reqwest::Client, base: &str, delivery_id: &str, job_id: &str, state: &str, seq: i64) -> (StatusCode, Value) {
    let body = serde_json::to_vec(&payload(delivery_id, job_id, state, seq)).unwrap();
    let signature = sign(&body);
    let response = http
        .post(format!("{base}/hooks/generic"))
        .header("content-type", "application/json")
        .header("x-agent-signature", signature)
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {base}/hooks/generic: {e}"));
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `POST /api/tunnel/test`; returns the report.
pub async fn self_test(app: &TestApp) -> Value {
    let response = app.api_post("/api/tunnel/test", &json!({})).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// A one-line reason: something, and no line break.
pub fn assert_one_line(reason: &Value, what: &str) {
    let text = reason.as_str().unwrap_or_else(|| panic!("{what}: no reason in {reason}"));
    assert!(!text.trim().is_empty(), "{what}: an empty reason");
    assert!(!text.contains('\n'), "{what}: the reason is more than one line: {text:?}");
}

/// Polls `check` until it holds, at most `bound`.
pub async fn eventually<F, Fut>(what: &str, bound: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + bound;
    while !check().await {
        if Instant::now() >= deadline {
            panic!("timed out after {bound:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A plain client for the public side (no proxy: the tests talk to loopback only).
pub fn outside_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

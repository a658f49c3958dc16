//! What the tunnel suites share: configure the tunnel through the admin API (never through the
//! process-global environment, so tests in parallel threads cannot disturb each other), read its
//! state as the API's `TunnelState`, wait for it, and send signed generic deliveries to a public URL.

use std::time::Duration;

use nevermiss_engine::receiver::HookAnswer;
use nevermiss_engine::tunnel::config::TunnelKind;
use nevermiss_engine::tunnel::{Status, TunnelState};
use reqwest::StatusCode;
use serde_json::Value;

use super::api::{http_client, ApiClient};
use super::app::{hook_answer, payload_bytes, signed, TestApp};
use super::waiting::eventually;

/// The bound of the tunnel waits: a start, a death noticed, a backoff, a restart.
pub const TUNNEL_WAIT: Duration = Duration::from_secs(60);

/// `PUT /api/settings` with tunnel settings; must be accepted.
pub async fn configure(app: &TestApp, settings: Value) {
    app.api.put_settings(&settings).await;
}

/// `PUT /api/tunnel/credentials`; must be accepted. Answers which secrets are set.
pub async fn set_credentials(app: &TestApp, credentials: Value) -> nevermiss_engine::api::tunnel::Credentials {
    app.api.put("/api/tunnel/credentials", &credentials, StatusCode::OK).await
}

pub async fn state(app: &TestApp) -> TunnelState {
    app.api.tunnel().await
}

/// Polls the tunnel state until `check` holds (at most `TUNNEL_WAIT`); returns that state.
pub async fn wait_for_state(app: &TestApp, what: &str, check: impl Fn(&TunnelState) -> bool) -> TunnelState {
    wait_for_state_within(&app.api, what, TUNNEL_WAIT, check).await
}

pub async fn wait_for_state_within(api: &ApiClient, what: &str, bound: Duration, check: impl Fn(&TunnelState) -> bool) -> TunnelState {
    let deadline = std::time::Instant::now() + bound;
    loop {
        let st = api.tunnel().await;
        if check(&st) {
            return st;
        }
        if std::time::Instant::now() >= deadline {
            panic!("timed out after {bound:?} waiting until {what}; the tunnel state is {st:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the tunnel is up at a URL other than `not` (any URL when `None`); returns the state.
pub async fn wait_up(app: &TestApp, not: Option<&str>) -> TunnelState {
    wait_for_state(app, "the tunnel is up", |st| st.status == Status::Up && st.public_url.as_deref().is_some_and(|u| Some(u) != not)).await
}

pub fn public_url(st: &TunnelState) -> String {
    st.public_url.clone().expect("an up tunnel has a URL")
}

/// Waits for the first `kind` tunnel to be up with a URL that starts with `prefix` and ends with
/// `suffix`; its state and URL.
pub async fn wait_up_as(app: &TestApp, kind: TunnelKind, prefix: &str, suffix: &str) -> (TunnelState, String) {
    let st = wait_up(app, None).await;
    let url = public_url(&st);
    assert!(url.starts_with(prefix) && url.ends_with(suffix), "{url}");
    assert_eq!(st.kind, kind, "{st:?}");
    (st, url)
}

/// POSTs a signed generic delivery to `<base>/hooks/generic`; returns the status and the answer.
pub async fn deliver_to(
    http: &reqwest::Client,
    base: &str,
    delivery_id: &str,
    job_id: &str,
    state: &str,
    seq: i64,
) -> (StatusCode, HookAnswer) {
    let body = payload_bytes(delivery_id, job_id, state, seq);
    let mut request = http.post(format!("{base}/hooks/generic")).header("content-type", "application/json");
    for (name, value) in signed(&body) {
        request = request.header(name, value);
    }
    let response = request.body(body).send().await.unwrap_or_else(|e| panic!("POST {base}/hooks/generic: {e}"));
    hook_answer(response).await
}

/// `POST /api/tunnel/test`; returns the report.
pub async fn self_test(app: &TestApp) -> nevermiss_engine::tunnel::self_test::SelfTestReport {
    app.api.tunnel_self_test().await
}

/// Waits until the tunnel is down waiting for the user (a setting, a program, a token): not
/// retried, no next attempt, its one-line reason containing `because`. Returns that state.
pub async fn wait_down_for_user(app: &TestApp, what: &str, because: &str) -> TunnelState {
    let st = wait_for_state(app, what, |st| st.status == Status::Down).await;
    assert_one_line(st.last_error.as_deref(), what);
    assert!(st.last_error.as_deref().unwrap().contains(because), "{what}: {st:?}");
    assert!(!st.retrying, "{what}: {st:?}");
    assert!(st.next_attempt_at.is_none(), "{what}: {st:?}");
    st
}

/// A failed start retried with backoff (1 s, 2 s, 4 s ...): `st` says it is retrying, with a next
/// attempt, and a few seconds later there are at most a couple more tries (an upper bound only: a
/// slow machine makes fewer).
pub async fn assert_backing_off(app: &TestApp, st: &TunnelState) {
    assert!(st.retrying, "{st:?}");
    assert!(st.next_attempt_at.is_some(), "{st:?}");
    let seen = st.restarts;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = state(app).await.restarts;
    assert!(later <= seen + 2, "restarted {} times in 3 s: hammering", later - seen);
}

/// A one-line reason: something, and no line break.
pub fn assert_one_line(reason: Option<&str>, what: &str) {
    let text = reason.unwrap_or_else(|| panic!("{what}: no reason"));
    assert!(!text.trim().is_empty(), "{what}: an empty reason");
    assert!(!text.contains('\n'), "{what}: the reason is more than one line: {text:?}");
}

/// Polls `check` until it holds, at most `bound`.
pub async fn eventually_within<F, Fut>(what: &str, bound: Duration, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually(what, bound, Duration::from_millis(50), check).await
}

/// A plain client for the public side (no proxy: the tests talk to loopback only).
pub fn outside_client() -> reqwest::Client {
    http_client(Duration::from_secs(30))
}

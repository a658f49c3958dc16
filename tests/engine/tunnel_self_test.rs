//! The `manual` kind and the self-test on loopback: the user's own public URL shown and tested like
//! the other kinds; a self-test that passes (the signed delivery came back to the receiver, its
//! test job removed, no notification), one that fails (a visible warning, the URL kept: a manual
//! URL is not ours to restart), one that cannot run without the generic secret, and the settings
//! that are refused.

use crate::harness;

use harness::tunnel::*;
use harness::TestApp;
use nevermiss_engine::api::settings::SettingsView;
use nevermiss_engine::api::status::Info;
use nevermiss_engine::api::ErrorBody;
use nevermiss_engine::tunnel::config::TunnelKind;
use nevermiss_engine::tunnel::self_test::{SelfTestOutcome, SelfTestTrigger};
use nevermiss_engine::tunnel::Status;
use reqwest::StatusCode;
use serde_json::json;

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_url_is_self_tested_and_a_failure_is_a_visible_warning() {
    let mut app = TestApp::spawn().await;

    // Off: nothing to test, said so.
    let report = self_test(&app).await;
    assert_eq!(report.outcome, SelfTestOutcome::Skipped);
    assert!(report.reason.as_deref().unwrap().contains("no tunnel"), "{report:?}");

    // The user's URL leads to the receiver (here: it is the receiver itself).
    configure(&app, json!({ "tunnel": "manual", "tunnel.public_url": format!("{}/", app.receiver) })).await;
    let st = wait_up(&app, None).await;
    assert_eq!(st.kind, TunnelKind::Manual);
    assert_eq!(st.public_url.as_deref(), Some(&*app.receiver), "kept without its trailing slash");
    let st = wait_for_state(&app, "the self-test after the start", |st| st.self_test.is_some()).await;
    let report = st.self_test.as_ref().unwrap();
    assert_eq!(report.outcome, SelfTestOutcome::Passed, "{report:?}");
    assert_eq!(report.http_status, Some(200));
    let job_id = report.job_id.as_deref().unwrap().to_owned();
    assert!(app.job(&job_id).await.is_none(), "the test job was removed");
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 0, "a self-test never notifies");
    assert_eq!(
        app.count(&format!("SELECT count(*) FROM deliveries WHERE delivery_id = '{job_id}-delivery'")),
        1,
        "the delivery itself is on record"
    );

    // On demand, again and again: each a new job id, each passing.
    let first = self_test(&app).await;
    let second = self_test(&app).await;
    assert_eq!((first.outcome, second.outcome), (SelfTestOutcome::Passed, SelfTestOutcome::Passed));
    assert_ne!(first.job_id, second.job_id);
    assert_eq!(first.trigger, SelfTestTrigger::Manual);

    // A URL that leads nowhere: up (it is the user's), but the self-test fails, visibly.
    let dead = format!("http://127.0.0.1:{}", closed_port());
    configure(&app, json!({ "tunnel.public_url": dead })).await;
    let st = wait_for_state(&app, "the failing self-test is reported", |st| {
        st.public_url.as_deref() == Some(&*dead) && st.self_test.as_ref().is_some_and(|t| t.outcome == SelfTestOutcome::Failed)
    })
    .await;
    assert_eq!(st.status, Status::Up);
    assert!(st.url_changed, "a new URL is flagged: {st:?}");
    assert_one_line(st.self_test.as_ref().unwrap().reason.as_deref(), "unreachable");
    assert!(st.self_test.as_ref().unwrap().reason.as_deref().unwrap().contains("cannot reach"), "{st:?}");
    assert!(!st.self_test.as_ref().unwrap().arrived);
    assert!(st.warning.as_deref().unwrap().starts_with("the last self-test failed"), "{st:?}");
    let report = self_test(&app).await;
    assert_eq!(report.outcome, SelfTestOutcome::Failed);

    // A URL that answers, but is not this receiver: not counted as arrived.
    let stranger = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stranger_url = format!("http://{}", stranger.local_addr().unwrap());
    let other = axum::Router::new().fallback(|| async { (StatusCode::OK, "{\"outcome\":\"applied\"}") });
    tokio::spawn(async move { axum::serve(stranger, other).await.unwrap() });
    configure(&app, json!({ "tunnel.public_url": stranger_url })).await;
    wait_for_state(&app, "the stranger's URL is in force", |st| st.public_url.as_deref() == Some(&*stranger_url)).await;
    let report = self_test(&app).await;
    assert_eq!(report.outcome, SelfTestOutcome::Failed, "{report:?}");
    assert!(!report.arrived);
    assert!(report.reason.as_deref().unwrap().contains("not this instance"), "{report:?}");

    app.shutdown().await;
}

#[tokio::test]
async fn without_the_generic_secret_the_self_test_says_so() {
    let mut app = TestApp::spawn_unconfigured().await;
    configure(&app, json!({ "tunnel": "manual", "tunnel.public_url": app.receiver })).await;
    wait_up(&app, None).await;
    let report = self_test(&app).await;
    assert_eq!(report.outcome, SelfTestOutcome::Skipped, "{report:?}");
    assert!(report.reason.as_deref().unwrap().contains("no generic webhook secret"), "{report:?}");
    let st = state(&app).await;
    assert!(st.warning.as_deref().unwrap().contains("no generic webhook secret"), "{st:?}");
    app.shutdown().await;
}

#[tokio::test]
async fn tunnel_settings_are_checked_and_a_missing_url_waits_for_the_user() {
    let mut app = TestApp::spawn().await;
    for (key, value) in [
        ("tunnel", json!("frp")),
        ("tunnel.public_url", json!("ftp://example.test")),
        ("tunnel.public_url", json!("https://example.test/hooks/generic")),
        ("tunnel.bore_server", json!("http://bore.example.test")),
        ("tunnel.self_test", json!("sometimes")),
        ("tunnel.self_test_quiet_secs", json!(59)),
        ("tunnel.unknown", json!("x")),
    ] {
        let body = app.api.refused_settings(&json!({ key: value })).await;
        assert!(body.errors.as_ref().is_some_and(|e| e.contains_key(key)), "{key} = {value}: {body:?}");
    }
    app.api.put::<ErrorBody>("/api/tunnel/credentials", &json!({ "github_token": "x" }), StatusCode::BAD_REQUEST).await;

    // Manual without a URL: down, saying what is missing, not retried.
    configure(&app, json!({ "tunnel": "manual" })).await;
    wait_down_for_user(&app, "the missing URL is reported", "NEVERMISS_PUBLIC_URL").await;
    let settings: SettingsView = app.api.get("/api/settings", StatusCode::OK).await;
    assert_eq!(settings.tunnel["tunnel"].as_deref(), Some("manual"));

    // Back to none: off, and `/api/info` has no public URL.
    configure(&app, json!({ "tunnel": "none" })).await;
    wait_for_state(&app, "the tunnel is off", |st| st.status == Status::Off).await;
    assert!(app.api.get::<Info>("/api/info", StatusCode::OK).await.public_url.is_none());
    app.shutdown().await;
}

#[tokio::test]
async fn a_quiet_tunnel_is_self_tested_again() {
    let mut app = TestApp::spawn().await;
    // The API's shortest quiet period is a minute without a delivery or a self-test (a shorter
    // one is refused, see `tunnel_settings_are_checked_...`); written to the store directly, 3 s, so that the
    // test waits seconds, not a minute. The API takes the minute itself.
    configure(&app, json!({ "tunnel.self_test_quiet_secs": 60 })).await;
    app.set_setting(nevermiss_engine::tunnel::config::SELF_TEST_QUIET_SECS, "3").await;
    configure(&app, json!({ "tunnel": "manual", "tunnel.public_url": app.receiver })).await;
    let st = wait_for_state(&app, "the self-test after the start", |st| {
        st.self_test.as_ref().is_some_and(|t| t.trigger == SelfTestTrigger::Start)
    })
    .await;
    assert_eq!(st.self_test.as_ref().map(|t| t.outcome), Some(SelfTestOutcome::Passed), "{st:?}");
    let st = wait_for_state_within(&app.api, "a self-test after the quiet period", std::time::Duration::from_secs(60), |st| {
        st.self_test.as_ref().is_some_and(|t| t.trigger == SelfTestTrigger::Quiet)
    })
    .await;
    assert_eq!(st.self_test.as_ref().map(|t| t.outcome), Some(SelfTestOutcome::Passed), "{st:?}");
    app.shutdown().await;
}

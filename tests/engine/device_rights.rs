//! What a hub's device token may call, route by route: every route of the admin API's router
//! (`api::route_table`, the table the router is built from), every method each answers (read off
//! its `405`'s `Allow` header), called with a device's token over real HTTP. A route is closed to
//! devices unless it says otherwise (`Routes::devices_too`): a new route answers a device 403, and
//! opening one to devices fails here until it is added to the list below, on purpose.

use std::collections::BTreeSet;

use nevermiss_engine::api::devices::DeviceToken;
use nevermiss_engine::api::{route_table, Access};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::api::concrete_route;
use crate::harness::api::ApiClient;
use crate::harness::app::TestApp;

/// The calls a device may make: reads of jobs, groups and metrics, a job list's actions (track a
/// job, poll one now), its own notifications. Nothing of settings, channels, secrets, devices, the
/// tunnel or the hub.
const DEVICE_CALLS: &[(&str, &str)] = &[
    ("GET", "/health"),
    ("GET", "/info"),
    ("GET", "/metrics"),
    ("GET", "/metrics/history"),
    ("GET", "/reconcile/passes"),
    ("GET", "/jobs"),
    ("POST", "/jobs"),
    ("GET", "/jobs/{provider}/{job_id}"),
    ("POST", "/jobs/{provider}/{job_id}/poll"),
    ("GET", "/groups"),
    ("GET", "/groups/{name}"),
    ("GET", "/deliveries/{provider}/{delivery_id}"),
    ("GET", "/refused"),
    ("GET", "/events"),
    ("GET", "/device"),
    ("GET", "/device/notifications"),
    ("POST", "/device/ack"),
];

/// The calls a device may make only while the hub's owner allows it (each with its setting): 403
/// until then, like an owner's call.
const DEVICE_CALLS_WHEN_ALLOWED: &[(&str, &str, &str)] = &[("POST", "/jobs/{provider}/{job_id}/cancel", "devices_may_cancel")];

/// The methods a route answers, from the `Allow` header of its answer to a method it has not.
async fn methods_of(owner: &ApiClient, path: &str) -> Vec<Method> {
    let probe = Method::from_bytes(b"NMPROBE").unwrap();
    let answer = owner.send(probe, path, None).await;
    assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED, "{path} answers an unknown method 405");
    let allow = answer.headers().get("allow").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let methods: Vec<Method> = allow
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty() && *m != "HEAD")
        .map(|m| Method::from_bytes(m.as_bytes()).unwrap())
        .collect();
    assert!(!methods.is_empty(), "{path} names its methods: {allow:?}");
    methods
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_a_device_token_as_its_table_says_and_only_the_listed_calls_are_open() {
    let app = TestApp::spawn().await;
    let device: DeviceToken = app.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let as_device = ApiClient::new(app.api.base.clone(), device.token.clone());

    let table = route_table();
    let paths: BTreeSet<&str> = table.iter().map(|(path, _)| *path).collect();
    assert!(paths.len() >= 30, "the table lists every route of the router: {paths:?}");
    let listed: BTreeSet<(String, String)> = DEVICE_CALLS.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();

    let mut open = BTreeSet::new();
    let mut calls = 0;
    for path in &paths {
        let url = concrete_route(path);
        for method in methods_of(&app.api, &url).await {
            calls += 1;
            let answer = as_device.send(method.clone(), &url, Some(&json!({}))).await;
            let status = answer.status();
            drop(answer); // a stream's body (events, notifications) is not read
            assert_ne!(status, StatusCode::UNAUTHORIZED, "{method} {path}: the device's token is known");
            let call = (method.to_string(), path.to_string());
            if listed.contains(&call) {
                assert_ne!(status, StatusCode::FORBIDDEN, "{method} {path} is a device's call");
                open.insert(call);
            } else {
                assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path} is the owner's alone, yet a device got {status}");
            }
        }
    }
    assert_eq!(open, listed, "every call listed for devices is a route of the router, and open to them");
    // The table's own word agrees: a path is `DevicesToo` only for the listed calls.
    for (path, access) in &table {
        let any_listed = DEVICE_CALLS.iter().any(|(_, p)| p == path);
        if *access == Access::DevicesToo {
            assert!(any_listed, "{path} is open to devices in the table but not listed here");
        }
    }
    for (path, access) in &table {
        let when_allowed = DEVICE_CALLS_WHEN_ALLOWED.iter().any(|(_, p, _)| p == path);
        assert_eq!(
            *access == Access::DevicesWhenAllowed,
            when_allowed,
            "{path}: open to devices when allowed, in the table and here alike"
        );
    }
    assert!(calls > paths.len(), "several methods were tried ({calls} calls on {} paths)", paths.len());

    // Each call the owner may allow: refused above while off (the default); open once allowed,
    // refused again once withdrawn.
    for (method, path, setting) in DEVICE_CALLS_WHEN_ALLOWED {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let url = concrete_route(path);
        assert!(paths.contains(path), "{path} is a route of the router");
        app.api.put_settings(&json!({ setting.to_string(): "on" })).await;
        let status = as_device.send(method.clone(), &url, Some(&json!({}))).await.status();
        assert_ne!(status, StatusCode::FORBIDDEN, "{method} {path} with {setting} on");
        assert_ne!(status, StatusCode::UNAUTHORIZED);
        app.api.put_settings(&json!({ setting.to_string(): "off" })).await;
        let status = as_device.send(method.clone(), &url, Some(&json!({}))).await.status();
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path} with {setting} off");
    }

    // The owner's token is never refused by the same check.
    for path in ["/api/settings", "/api/channels", "/api/devices", "/api/secrets", "/api/tunnel", "/api/hub"] {
        assert_ne!(app.api.raw_get(path).await.status(), StatusCode::FORBIDDEN, "GET {path} as the owner");
    }
}

//! The web UI inside the real window: `nevermiss` (Tauri, WebKitGTK) under Xvfb, driven through
//! WebKitWebDriver (the W3C WebDriver of WebKitGTK, which `tauri-driver` wraps; Tauri allows it
//! with `TAURI_WEBVIEW_AUTOMATION=true`). The page in the window must render the jobs list, a job
//! delivered to the window's own receiver must appear in it, and the metrics screen must draw charts.
//!
//! The process runs with `LANG=C.UTF-8` on purpose: WebKitGTK then reports `navigator.language`
//! as "C", which is not a language tag; before the UI guarded against it, the page threw while
//! loading its chart library and the window stayed blank (the Chromium test could not see it).
#![cfg(all(feature = "desktop", target_os = "linux"))]

use crate::session;

use std::time::Duration;

use serde_json::Value;
use session::webdriver::Window;
use session::{start_session_bus, start_xvfb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_shows_the_ui_and_a_delivered_job() {
    let _alone = session::one_at_a_time();
    let (_xvfb, display) = start_xvfb();
    let (_bus, bus) = start_session_bus();
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("secrets.json"), r#"{"generic.webhook_secret":"webview-test"}"#).unwrap();
    let window = Window::launch("webview", &display, &bus, data_dir.path()).await;

    // The engine runs in the window's process; its receiver takes a signed delivery.
    let instance: Value = Window::instance(data_dir.path());
    let receiver = instance["receiver_url"].as_str().unwrap().to_owned();
    assert_eq!(session::deliver_generic(&receiver, "webview-test", "wv-1", "seen-in-the-window"), r#"{"outcome":"applied"}"#);

    // The page in the window renders the jobs list with that job (live, or at its next load).
    let mut text = String::new();
    for _ in 0..150 {
        text = window.script("return document.body.innerText").await.as_str().unwrap_or("").to_owned();
        if text.contains("seen-in-the-window") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let location = window.script("return location.href").await;
    assert!(
        text.contains("seen-in-the-window"),
        "the window's page does not show the delivered job (it took the token: {}); its text: {text:?}",
        !location.as_str().unwrap_or("").contains("token=")
    );
    assert!(!location.as_str().unwrap_or("").contains("token="), "the token stayed in the address: {location}");

    // The metrics screen draws its charts (uPlot, the library that failed to load under LANG=C).
    window.script("location.hash = '#/metrics'").await;
    let mut charts = 0;
    for _ in 0..100 {
        charts = window.script("return document.querySelectorAll('[data-testid^=\"chart-\"] canvas').length").await.as_u64().unwrap_or(0);
        if charts > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(charts > 0, "no chart was drawn on the metrics screen inside the window");

    window.close().await;
}

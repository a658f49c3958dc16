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

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use session::{require, start_session_bus, start_xvfb, wait_for, Killed};

/// A free TCP port on loopback for WebKitWebDriver.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct WebDriver {
    base: String,
    http: reqwest::Client,
}

impl WebDriver {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("WebKitWebDriver answers");
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "WebDriver {path}: {status} {answer}");
        answer["value"].clone()
    }

    async fn script(&self, session: &str, script: &str) -> Value {
        self.call(reqwest::Method::POST, &format!("/session/{session}/execute/sync"), Some(json!({ "script": script, "args": [] })))
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_shows_the_ui_and_a_delivered_job() {
    let _alone = session::one_at_a_time();
    require("WebKitWebDriver", "webkit2gtk-driver");
    let (_xvfb, display) = start_xvfb();
    let (_bus, bus) = start_session_bus();
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("secrets.json"), r#"{"generic.webhook_secret":"webview-test"}"#).unwrap();

    // WebKitWebDriver starts the app itself (`webkitgtk:browserOptions`), with its own environment.
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let log = std::fs::File::create(artifacts.join("desktop-webview.log")).unwrap();
    let port = free_port();
    let mut command = Command::new("WebKitWebDriver");
    let _driver = Killed(
        session::desktop_env(&mut command, &display, &bus)
            .arg(format!("--port={port}"))
            .env("TAURI_WEBVIEW_AUTOMATION", "true")
            .env("LANG", "C.UTF-8")
            .env_remove("LC_ALL")
            .env("NEVERMISS_DATA_DIR", data_dir.path())
            .env("NEVERMISS_RECEIVER_ADDR", "127.0.0.1:0")
            .env("NEVERMISS_API_ADDR", "127.0.0.1:0")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("WebKitWebDriver starts"),
    );
    let driver = WebDriver { base: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() };
    let status_url = format!("{}/status", driver.base);
    let ready = || async { reqwest::get(&status_url).await.is_ok() };
    for _ in 0..100 {
        if ready().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let capabilities = json!({ "capabilities": { "alwaysMatch": {
        "webkitgtk:browserOptions": { "binary": env!("CARGO_BIN_EXE_nevermiss"), "args": [] }
    } } });
    let session = driver.call(reqwest::Method::POST, "/session", Some(capabilities)).await;
    let session = session["sessionId"].as_str().expect("a WebDriver session").to_owned();

    // The engine runs in the window's process; its receiver takes a signed delivery.
    let instance: Value = wait_for("instance.json", Duration::from_secs(60), || {
        serde_json::from_slice(&std::fs::read(data_dir.path().join("instance.json")).ok()?).ok()
    });
    let receiver = instance["receiver_url"].as_str().unwrap().to_owned();
    assert_eq!(session::deliver_generic(&receiver, "webview-test", "wv-1", "seen-in-the-window"), r#"{"outcome":"applied"}"#);

    // The page in the window renders the jobs list with that job (live, or at its next load).
    let mut text = String::new();
    for _ in 0..150 {
        text = driver.script(&session, "return document.body.innerText").await.as_str().unwrap_or("").to_owned();
        if text.contains("seen-in-the-window") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let location = driver.script(&session, "return location.href").await;
    assert!(
        text.contains("seen-in-the-window"),
        "the window's page does not show the delivered job (it took the token: {}); its text: {text:?}",
        !location.as_str().unwrap_or("").contains("token=")
    );
    assert!(!location.as_str().unwrap_or("").contains("token="), "the token stayed in the address: {location}");

    // The metrics screen draws its charts (uPlot, the library that failed to load under LANG=C).
    driver.script(&session, "location.hash = '#/metrics'").await;
    let mut charts = 0;
    for _ in 0..100 {
        charts = driver.script(&session, "return document.querySelectorAll('[data-testid^=\"chart-\"] canvas').length").await.as_u64().unwrap_or(0);
        if charts > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(charts > 0, "no chart was drawn on the metrics screen inside the window");

    let _ = driver.call(reqwest::Method::DELETE, &format!("/session/{session}"), None).await;
}

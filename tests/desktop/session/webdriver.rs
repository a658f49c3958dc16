//! The real window driven from outside: WebKitWebDriver (the W3C WebDriver of WebKitGTK, which
//! `tauri-driver` wraps; Tauri allows it with `TAURI_WEBVIEW_AUTOMATION=true`) starts `nevermiss`
//! itself and answers for the page in its window.
#![cfg(all(feature = "desktop", target_os = "linux"))]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::{require, wait_for, Killed};

/// A free TCP port on loopback for WebKitWebDriver.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub struct WebDriver {
    base: String,
    http: reqwest::Client,
}

impl WebDriver {
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
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
}

/// `nevermiss` (the window, with its engine) on `data_dir`, under WebKitWebDriver, with one
/// WebDriver session on its page. The app's log goes to `test-artifacts/desktop-<name>.log`.
pub struct Window {
    pub driver: WebDriver,
    pub session: String,
    _process: Killed,
}

impl Window {
    pub async fn launch(name: &str, display: &str, bus: &str, data_dir: &Path) -> Window {
        require("WebKitWebDriver", "webkit2gtk-driver");
        let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("test-artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        let log = std::fs::File::create(artifacts.join(format!("desktop-{name}.log"))).unwrap();
        let port = free_port();
        let mut command = Command::new("WebKitWebDriver");
        // WebKitWebDriver starts the app itself (`webkitgtk:browserOptions`), with its own environment.
        let process = Killed(
            super::desktop_env(&mut command, display, bus)
                .arg(format!("--port={port}"))
                .env("TAURI_WEBVIEW_AUTOMATION", "true")
                .env("LANG", "C.UTF-8")
                .env_remove("LC_ALL")
                .env("NEVERMISS_DATA_DIR", data_dir)
                .env("NEVERMISS_RECEIVER_ADDR", "127.0.0.1:0")
                .env("NEVERMISS_API_ADDR", "127.0.0.1:0")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("WebKitWebDriver starts"),
        );
        let driver = WebDriver { base: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() };
        let status_url = format!("{}/status", driver.base);
        for _ in 0..100 {
            if reqwest::get(&status_url).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "webkitgtk:browserOptions": { "binary": super::app_binary(), "args": [] }
        } } });
        let session = driver.call(reqwest::Method::POST, "/session", Some(capabilities)).await;
        let session = session["sessionId"].as_str().expect("a WebDriver session").to_owned();
        Window { driver, session, _process: process }
    }

    /// Runs `script` in the page; its return value.
    pub async fn script(&self, script: &str) -> Value {
        self.driver
            .call(reqwest::Method::POST, &format!("/session/{}/execute/sync", self.session), Some(json!({ "script": script, "args": [] })))
            .await
    }

    /// Polls `script` every 200 ms until `done` holds for its value; the last value either way.
    pub async fn wait_for_script(&self, script: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let value = self.script(script).await;
            if done(&value) || std::time::Instant::now() >= deadline {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The instance file of the engine in the window's process (its receiver and API URLs).
    pub fn instance(data_dir: &Path) -> Value {
        wait_for("instance.json", Duration::from_secs(60), || {
            serde_json::from_slice(&std::fs::read(data_dir.join("instance.json")).ok()?).ok()
        })
    }

    pub async fn close(self) {
        let _ = self.driver.call(reqwest::Method::DELETE, &format!("/session/{}", self.session), None).await;
    }
}

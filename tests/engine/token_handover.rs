//! The API token travels no further than it must, against real `nevermiss serve`
//! children and the real CLI:
//! - an impostor listening where the data dir's instance would be (another user's program on the
//!   API port) gets no token from `nevermiss jobs` or `nevermiss wait` (it records every request's
//!   headers: no `Authorization` arrives, and the token appears nowhere), even when it relays the
//!   CLI's challenge to the real instance; the CLI says so in one line (`wait`: exit 69, as for
//!   no instance reachable); the real instance is talked to as before;
//! - a one-time code for the UI works once, is refused the second time and once expired, and is
//!   refused to a foreign `Origin`;
//! - `nevermiss open` prints a code URL and opens it through a page only the user can read: neither
//!   the token nor the code is on the command line of the program it starts (a stand-in
//!   `xdg-open`, which the `open` crate starts first on Linux, records its argv, and a watcher of
//!   `/proc/*/cmdline` sees every command line meanwhile), and the code redeems once.

use crate::harness;

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::response::IntoResponse;
use harness::serve_child::{child_path, free_addr, nevermiss_command, skipped_under_wrapper, ServeChild, ServeOptions};
use nevermiss_engine::engine::{Engine, EngineConfig};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// The CLI with a clean environment plus `env`; its output.
fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = nevermiss_command();
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if text.starts_with("NEVERMISS_") || text == "RUST_LOG" || text == "BROWSER" {
            command.env_remove(&name);
        }
    }
    let mut child = command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("`nevermiss {}` did not finish within {WAIT:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn serve(root: &Path) -> ServeChild {
    ServeChild::start(&ServeOptions {
        data_dir: &root.join("data"),
        log: &root.join("serve.log"),
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: Vec::new(),
        rust_log: "info",
    })
    .await
}

/// One request an impostor saw: its method, path and query, and its headers.
type SeenRequest = (String, Vec<(String, String)>);

/// What an impostor saw.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<SeenRequest>>>);

/// A program on `addr` that answers every request 200 with a plausible body and records it. With
/// `relay_to`, it answers `/api/whoami` with what the real instance there answers to the same
/// challenge.
async fn impostor(addr: std::net::SocketAddr, relay_to: Option<String>) -> Seen {
    async fn answer(State((seen, relay)): State<(Seen, Option<String>)>, request: Request) -> axum::response::Response {
        let target = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
        let headers = request.headers().iter().map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned())).collect();
        seen.0.lock().unwrap().push((format!("{} {target}", request.method()), headers));
        if target.starts_with("/api/whoami") {
            let proof = match relay {
                Some(real) => reqwest::get(format!("{real}{target}")).await.unwrap().json::<Value>().await.unwrap(),
                None => json!({ "proof": "0".repeat(64) }),
            };
            return axum::Json(proof).into_response();
        }
        axum::Json(json!({ "jobs": [], "next_cursor": null, "provider": "generic", "job_id": "x", "state": "running" })).into_response()
    }
    let seen = Seen::default();
    let app = axum::Router::new().fallback(answer).with_state((seen.clone(), relay_to));
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    seen
}

fn assert_no_token(seen: &Seen, token: &str) {
    let requests = seen.0.lock().unwrap().clone();
    assert!(!requests.is_empty(), "the CLI asked the impostor nothing: the test proves nothing");
    for (target, headers) in &requests {
        assert!(!target.contains(token), "the token went to the impostor in {target}");
        for (name, value) in headers {
            assert!(!name.eq_ignore_ascii_case("authorization"), "an Authorization header went to the impostor with {target}");
            assert!(!value.contains(token), "the token went to the impostor in {name} with {target}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_on_the_api_port_gets_no_token() {
    let root = tempfile::tempdir().unwrap();
    let real = serve(root.path()).await;
    let data_dir = real.data_dir.clone();
    let d = &child_path(&data_dir).into_string().unwrap();
    let token = real.api.token.clone();

    // The real instance: the CLI works as before.
    let out = cli(&["jobs", "--json", "--data-dir", d], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"jobs\""), "{}", text(&out.stdout));

    // Where the data dir's instance would be (the address `--api-addr` names), another program.
    let addr = free_addr();
    let seen = impostor(addr, None).await;
    let at = addr.to_string();
    let out = cli(&["jobs", "--data-dir", d, "--api-addr", &at], &[]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "`jobs` trusted the impostor: {}", text(&out.stdout));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("nevermiss: ") && stderr.contains("not the NeverMiss of the data dir"), "{stderr}");
    let out = cli(&["wait", "generic", "x", "--timeout", "5", "--data-dir", d, "--api-addr", &at], &[]);
    assert_eq!(out.status.code(), Some(69), "wait: as for no instance reachable: {}", text(&out.stderr));
    assert_no_token(&seen, &token);

    // The address the instance wrote in the data dir, taken by another program after it stopped
    // (its instance.json names it; a relay of the challenge to the real instance does not help).
    let relay_addr = free_addr();
    let relay = impostor(relay_addr, Some(real.api.base.clone())).await;
    let mut instance: Value = serde_json::from_slice(&std::fs::read(data_dir.join("instance.json")).unwrap()).unwrap();
    instance["api_url"] = json!(format!("http://{relay_addr}"));
    std::fs::write(data_dir.join("instance.json"), serde_json::to_vec(&instance).unwrap()).unwrap();
    let out = cli(&["jobs", "--data-dir", d], &[]);
    assert!(!out.status.success(), "`jobs` trusted a relay: {}", text(&out.stdout));
    assert!(text(&out.stderr).contains("not the NeverMiss of the data dir"), "{}", text(&out.stderr));
    assert_no_token(&relay, &token);
    assert!(
        relay.0.lock().unwrap().iter().all(|(target, _)| target.starts_with("GET /api/whoami?challenge=")),
        "only the challenge was asked"
    );

    assert!(real.stop().await);
}

/// Redeems `code` at `base` (no token); the status and the answer.
async fn redeem(base: &str, code: &str, origin: Option<&str>) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new().post(format!("{base}/api/ui-codes/redeem")).json(&json!({ "code": code }));
    if let Some(origin) = origin {
        request = request.header("Origin", origin);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ui_code_works_once() {
    let root = tempfile::tempdir().unwrap();
    let serve = serve(root.path()).await;
    let base = serve.api.base.clone();

    // Only the owner gets one.
    let anonymous = reqwest::Client::new().post(format!("{base}/api/ui-codes")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let issued = serve.api.request(Method::POST, "/api/ui-codes").send().await.unwrap();
    assert_eq!(issued.status(), StatusCode::CREATED);
    let issued: Value = issued.json().await.unwrap();
    let code = issued["code"].as_str().unwrap().to_owned();
    assert_ne!(code, serve.api.token);
    assert!(chrono::DateTime::parse_from_rfc3339(issued["expires_at"].as_str().unwrap()).is_ok(), "{issued}");

    // A page of another origin cannot redeem it (and does not spend it).
    let (status, _) = redeem(&base, &code, Some("https://evil.example")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, answer) = redeem(&base, &code, Some(&base)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["token"].as_str(), Some(serve.api.token.as_str()));
    let (status, answer) = redeem(&base, &code, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a code works once: {answer}");
    let (status, _) = redeem(&base, "not-a-code", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    assert!(serve.stop().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_ui_code_is_refused() {
    let root = tempfile::tempdir().unwrap();
    // Codes that expire as they are made: the engine's own parameter, no waiting.
    let config = EngineConfig { ui_code_ttl: Duration::ZERO, ..EngineConfig::local(root.path()) };
    let engine = Engine::start(config, nevermiss_engine::channels::desktop::default_notifier()).await.unwrap();
    let base = format!("http://{}", engine.api_addr);
    let issued: Value =
        reqwest::Client::new().post(format!("{base}/api/ui-codes")).bearer_auth(&engine.token).send().await.unwrap().json().await.unwrap();
    let (status, answer) = redeem(&base, issued["code"].as_str().unwrap(), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "an expired code: {answer}");
    assert!(answer.get("token").is_none());
    engine.shutdown().await;
}

/// Every command line of a process that runs while `until` is not set, as another local user
/// sees them (`/proc/*/cmdline`, read in a loop).
fn watch_command_lines(until: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut seen = std::collections::BTreeSet::new();
        while !until.load(std::sync::atomic::Ordering::SeqCst) {
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                if let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) {
                    seen.insert(String::from_utf8_lossy(&bytes).replace('\0', " "));
                }
            }
        }
        seen.into_iter().collect()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_puts_neither_the_token_nor_the_code_on_a_command_line() {
    let root = tempfile::tempdir().unwrap();
    let serve = serve(root.path()).await;
    let token = serve.api.token.clone();
    // The program the `open` crate starts first on Linux, on PATH before the system's: it records
    // its argv, stays a moment (long enough for a watcher of /proc to read it) and exits. Under
    // Wine the Windows build asks the shell (ShellExecute), whose winebrowser starts this same one.
    let bin = root.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let argv = root.path().join("argv");
    let script = bin.join("xdg-open");
    std::fs::write(&script, format!("#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > {}.part && mv {0}.part {0}\nsleep 0.5\n", argv.display()))
        .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());

    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = watch_command_lines(done.clone());
    let out = cli(
        &["open", "--data-dir", &child_path(&serve.data_dir).into_string().unwrap()],
        &[("PATH", &path), ("BROWSER", script.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(!printed.contains(&token) && !text(&out.stderr).contains(&token), "the token was printed: {printed}");
    let url = printed.trim();
    let code = url.strip_prefix(&format!("{}/#code=", serve.api.base)).unwrap_or_else(|| panic!("not a code URL: {url}"));

    let deadline = Instant::now() + WAIT;
    let opened = loop {
        if let Ok(text) = std::fs::read_to_string(&argv) {
            break text;
        }
        assert!(Instant::now() < deadline, "no browser was started within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let command_lines = watcher.join().unwrap();
    assert!(!opened.contains(&token) && !opened.contains(code), "the token or the code is on the browser's command line: {opened}");
    // What the browser was given: a page only the user can read, which sends it on to the code URL.
    let page = opened.lines().nth(1).unwrap_or_else(|| panic!("the browser got no argument: {opened}"));
    let page = std::path::Path::new(page.strip_prefix("file://").unwrap_or(page));
    if !skipped_under_wrapper("the page's owner-only ACL", "Wine keeps no ACL: it maps a DACL to the file's Unix mode bits") {
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(page).unwrap().permissions()) & 0o777;
        assert_eq!(mode, 0o600, "{} is readable by others", page.display());
    }
    let html = std::fs::read_to_string(page).unwrap();
    assert!(html.contains(&format!("url={url}")) && html.contains(&format!("location.replace(\"{url}\")")), "{html}");
    // Another user watching every command line meanwhile saw the browser's, and no code in any.
    assert!(
        command_lines.iter().any(|line| line.contains(&page.display().to_string())),
        "the watcher missed the browser: {command_lines:?}"
    );
    let leaked: Vec<&String> = command_lines.iter().filter(|line| line.contains(code) || line.contains(&token)).collect();
    assert!(leaked.is_empty(), "a command line held the code or the token: {leaked:?}");

    // The code in the page is what the browser redeems, once.
    let (status, answer) = redeem(&serve.api.base, code, None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["token"].as_str(), Some(token.as_str()));
    let (status, _) = redeem(&serve.api.base, code, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    assert!(serve.stop().await);
}

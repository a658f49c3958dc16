//! The web UI end to end in a real browser: the real engine (in this process, on loopback ports
//! the OS picks) serves the built UI, and Playwright drives Debian's Chromium through it
//! (`browser.mjs` beside this file). Covered: the first-launch guide and its test delivery, a job
//! appearing live after a signed delivery, the timeline showing a duplicate as a duplicate with
//! its raw request, "poll now" saying why it could not poll, a job tracked from the form, a bad
//! polling interval refused next to the field, Cancel on a running job (asked in the window, then
//! the provider's answer, the job ending canceled; a refusal shown as the provider answered it),
//! a finished job's result (text, links, image), a group's progress and its jobs filtered by it,
//! settings surviving a restart, a webhook channel
//! refused for its address next to the field then added and listed, the metrics screen, a refused
//! delivery listed. Accessibility: axe-core (WCAG 2.1 A and AA, best practices) on every screen in
//! the light and the dark theme, failing on any serious or critical violation; each screen
//! reflowing at 200% zoom; a keyboard-only walk (shortcuts, the `?` list, tracking a job, opening
//! it from the list, cancelling it); the theme following the OS or forced from Settings.
//! Screenshots are kept in `test-artifacts/`. The pictures the README and the book show
//! (`DOC_SHOTS`) are taken last, of an engine of their own holding a fixed data set (`docs_data`):
//! into `test-artifacts/screenshots/` at every run, into `docs/src/screenshots/` under
//! `make screenshots` (`NEVERMISS_SCREENSHOTS_DIR`).
//!
//! Needs `/usr/bin/chromium` and `node` (`make deps-test` installs both), and the built UI with its
//! node_modules (`make ui`, which `make test` runs first). Where Chromium or Node.js is missing
//! the app's build script compiles the test as ignored, with the reason (`cfg(nevermiss_no_browser)`,
//! src-tauri/build.rs): a skip in libtest's count, not a pass. Under `CI=true` it is never
//! ignored, so a missing browser fails the run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nevermiss_engine::channels::desktop::LogNotifier;
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::providers::generic;
use nevermiss_engine::providers::SecretKind;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";
const SECRET: &str = "ui-e2e-webhook-secret";
/// The whole browser run; far more than it takes, so only a hang reaches it (axe-core's passes
/// over every screen in both themes add most of a minute on a busy 2-core machine).
const BROWSER_BOUND: Duration = Duration::from_secs(600);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Why the browser cannot run here, if it cannot.
fn missing_tools() -> Option<String> {
    if !Path::new(CHROMIUM).exists() {
        return Some(format!("{CHROMIUM} is absent (make test installs Debian's chromium)"));
    }
    match std::process::Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("node is absent (install Node.js 20.19 or later)".into()),
    }
}

async fn start(dir: &Path) -> Engine {
    // A user's recipe with a typo: refused at start, and said so in Settings.
    std::fs::create_dir_all(dir.join("providers")).unwrap();
    let typo = "name = \"typo\"\nbase_url = \"https://api.typo.example\"\n[poll]\nurl = \"{base_url}/jobs/{job_id}\"\n[read]\nstate = \".status\"\ncolour = \"blue\"\n[states]\ndone = \"succeeded\"\n";
    std::fs::write(dir.join("providers").join("typo.toml"), typo).unwrap();
    let engine = Engine::start(EngineConfig::local(dir), Arc::new(LogNotifier)).await.expect("the engine starts");
    engine.services.secrets.set("generic", SecretKind::WebhookSecret, Some(SECRET)).expect("the webhook secret is stored");
    engine
}

/// POSTs a generic delivery signed with the stored secret; returns the receiver's outcome.
async fn deliver(http: &reqwest::Client, engine: &Engine, body: Value) -> String {
    let bytes = serde_json::to_vec(&body).unwrap();
    let response = http
        .post(format!("http://{}/hooks/generic", engine.receiver_addr))
        .header("content-type", "application/json")
        .header("x-agent-signature", generic::sign(SECRET.as_bytes(), &bytes))
        .body(bytes)
        .send()
        .await
        .expect("the receiver answers");
    assert_eq!(response.status(), 200, "delivery {body}");
    let answer: Value = response.json().await.unwrap();
    answer["outcome"].as_str().unwrap_or_default().to_owned()
}

/// A stand-in for Replicate's API (bodies from the checked fixture): `GET /v1/predictions/{id}`
/// and `POST /v1/predictions/{id}/cancel`. `ui-cancel-1` (and `ui-keyboard-1`,
/// tracked and canceled by keyboard alone) is accepted and then canceled; `ui-refuse-1` is refused
/// in Replicate's own words.
async fn replicate_stand_in() -> String {
    use axum::extract::{Path, State};
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use std::collections::HashMap;
    use std::sync::Mutex;

    type Statuses = Arc<Mutex<HashMap<String, &'static str>>>;
    fn prediction(id: &str, status: &str) -> Value {
        let text = std::fs::read_to_string(root().join("tests/fixtures/replicate/prediction.json")).unwrap();
        let mut p: Value = serde_json::from_str(&text).unwrap();
        p["id"] = json!(id);
        p["status"] = json!(status);
        p["model"] = json!("black-forest-labs/flux-schnell");
        p["completed_at"] = if status == "canceled" { json!("2026-11-30T10:00:04.000000Z") } else { Value::Null };
        p
    }
    async fn get(State(statuses): State<Statuses>, Path(id): Path<String>) -> axum::response::Response {
        match statuses.lock().unwrap().get(&id).copied() {
            Some(status) => axum::Json(prediction(&id, status)).into_response(),
            None => {
                (StatusCode::NOT_FOUND, axum::Json(json!({"title": "Not found", "detail": "Not found", "status": 404}))).into_response()
            }
        }
    }
    async fn cancel(State(statuses): State<Statuses>, Path(id): Path<String>) -> axum::response::Response {
        if id == "ui-refuse-1" {
            let refusal = json!({"title": "Prediction cannot be canceled", "detail": "Prediction is already finishing", "status": 400});
            return (StatusCode::BAD_REQUEST, axum::Json(refusal)).into_response();
        }
        statuses.lock().unwrap().insert(id.clone(), "canceled");
        axum::Json(prediction(&id, "canceled")).into_response()
    }
    let statuses: Statuses = Arc::new(Mutex::new(HashMap::from([
        ("ui-cancel-1".into(), "processing"),
        ("ui-refuse-1".into(), "processing"),
        ("ui-keyboard-1".into(), "processing"),
    ])));
    let router = axum::Router::new()
        .route("/v1/predictions/{id}", axum::routing::get(get))
        .route("/v1/predictions/{id}/cancel", axum::routing::post(cancel))
        .with_state(statuses);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

/// The pictures of the README and the book this test writes (docs/src/screenshots/; the book's
/// check, tools/check-book, fails on a picture there that no test writes).
const DOC_SHOTS: [&str; 4] = ["jobs-light.png", "jobs-dark.png", "job-light.png", "job-dark.png"];

/// Where the book's pictures go: `NEVERMISS_SCREENSHOTS_DIR` (`make screenshots`), else
/// `test-artifacts/screenshots/`.
fn doc_shots_dir() -> PathBuf {
    std::env::var_os("NEVERMISS_SCREENSHOTS_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("test-artifacts/screenshots"))
}

/// RFC 3339 for `secs` seconds ago.
fn ago(secs: i64) -> String {
    (chrono::Utc::now() - chrono::Duration::seconds(secs)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A delivery of `provider`'s, read by its own parser and taken by the merge point as it would
/// have been `secs_ago` seconds ago (the data set has a past: jobs that took minutes, a sweep that
/// ran for half an hour); its outcome.
async fn push_at(engine: &Engine, provider: &str, headers: &[(&str, &str)], body: Value, secs_ago: i64) -> String {
    use nevermiss_engine::merge_point::{accept_push, PushDelivery};
    use nevermiss_engine::store::deliveries::RawRequest;
    let bytes = serde_json::to_vec(&body).unwrap();
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        map.insert(reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
    }
    let adapter = engine.services.providers.get(provider).expect("a provider of the engine");
    let parsed = adapter.parse(&map, &bytes).unwrap_or_else(|e| panic!("{provider}'s delivery parses: {e:?}"));
    let headers_json =
        serde_json::to_string(&headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>())
            .unwrap();
    let push = PushDelivery {
        delivery_id: parsed.delivery_id,
        event: parsed.event,
        raw: RawRequest { headers_json, body: bytes, body_truncated: false },
    };
    let at = nevermiss_engine::store::job::now_ms() - secs_ago * 1000;
    let result = engine.services.store.write(move |tx| accept_push(tx, &push, at)).await.expect("the data set is written");
    // What it enqueued goes out now, as after a push the receiver took.
    engine.services.outbox.wake();
    result.outcome.as_str().to_owned()
}

/// The book's data set, the same at every run: a crawl that finished with its result (a duplicate
/// on its timeline), a sweep of three in a group (one failed), a job still running, one queued, and
/// a Replicate prediction ended by its webhook. Times are relative to now, so the pictures read the
/// same whenever they are taken.
async fn docs_data(engine: &Engine) {
    let generic = |body: Value, secs_ago: i64| push_at(engine, "generic", &[("content-type", "application/json")], body, secs_ago);
    let crawl = |state: &str, seq: i64, delivery: &str| {
        let mut body = json!({ "deliveryId": delivery, "jobId": "nightly-crawl-1204", "state": state, "seq": seq,
            "label": "nightly crawl", "kind": "nightly-crawl", "createdAt": ago(372) });
        if state == "succeeded" {
            body["finishedAt"] = json!(ago(120));
            body["result"] = json!({ "text": "41,872 pages crawled, 312 new\n3 hosts timed out",
                "urls": ["https://results.example.invalid/crawl-1204.jsonl"] });
        }
        body
    };
    assert_eq!(generic(crawl("running", 1, "crawl-1"), 371).await, "applied");
    assert_eq!(generic(crawl("running", 1, "crawl-1"), 365).await, "duplicate");
    assert_eq!(generic(crawl("succeeded", 2, "crawl-2"), 120).await, "applied");
    for n in 1..=3i64 {
        let started = 2400 + n * 30;
        let first = json!({ "deliveryId": format!("sweep-{n}-a"), "jobId": format!("eval-sweep-7-seed-{n}"), "state": "running", "seq": 1,
            "label": format!("eval, seed {n}"), "group": "sweep-7", "createdAt": ago(started) });
        assert_eq!(generic(first, started).await, "applied");
        let ended = 900 - n * 240;
        let mut last = json!({ "deliveryId": format!("sweep-{n}-b"), "jobId": format!("eval-sweep-7-seed-{n}"), "seq": 2,
            "state": if n == 2 { "failed" } else { "succeeded" }, "finishedAt": ago(ended) });
        if n == 2 {
            last["error"] = json!("CUDA out of memory (batch size 64)");
        }
        assert_eq!(generic(last, ended).await, "applied");
    }
    let running = json!({ "deliveryId": "embed-1", "jobId": "embed-shard-3", "state": "running", "seq": 1,
        "label": "embeddings, shard 3 of 8", "createdAt": ago(1260) });
    assert_eq!(generic(running, 1260).await, "applied");
    let queued = json!({ "deliveryId": "render-1", "jobId": "render-trailer", "state": "queued", "seq": 1, "label": "render trailer" });
    assert_eq!(generic(queued, 45).await, "applied");

    // A Replicate prediction, ended by its webhook (Replicate's own body, read by its adapter).
    let text = std::fs::read_to_string(root().join("tests/fixtures/replicate/prediction.json")).unwrap();
    let mut prediction: Value = serde_json::from_str(&text).unwrap();
    prediction["id"] = json!("q8hdrx3n2srm80ckv7ws6y1bgr");
    prediction["model"] = json!("black-forest-labs/flux-schnell");
    prediction["output"] = json!("a lighthouse at dawn, 4 images");
    prediction["created_at"] = json!(ago(48));
    prediction["started_at"] = json!(ago(47));
    let mut processing = prediction.clone();
    processing["status"] = json!("processing");
    processing["output"] = Value::Null;
    processing["completed_at"] = Value::Null;
    let headers = [("content-type", "application/json"), ("webhook-id", "msg_docs_replicate_0")];
    assert_eq!(push_at(engine, "replicate", &headers, processing, 47).await, "applied");
    prediction["completed_at"] = json!(ago(31));
    let headers = [("content-type", "application/json"), ("webhook-id", "msg_docs_replicate_1")];
    assert_eq!(push_at(engine, "replicate", &headers, prediction, 31).await, "applied");

    // The pictures show the crawl's notification sent, not pending.
    let http = reqwest::Client::new();
    let url = format!("http://{}/api/jobs/generic/nightly-crawl-1204", engine.api_addr);
    for _ in 0..100 {
        let job: Value = http.get(&url).bearer_auth(&engine.token).send().await.unwrap().json().await.unwrap();
        if !job["notified_at"].is_null() || !job["job"]["notified_at"].is_null() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the data set's notifications were not sent within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    nevermiss_no_browser,
    ignore = "Chromium (/usr/bin/chromium) or Node.js is absent: `make deps-test` installs them (under CI=true this test fails instead)"
)]
async fn the_ui_in_a_real_browser() {
    if let Some(reason) = missing_tools() {
        panic!("the UI browser test needs Chromium and Node.js: {reason}");
    }
    let ui = root().join("ui");
    assert!(
        ui.join("dist/index.html").is_file() && ui.join("node_modules/playwright-core").is_dir(),
        "the UI is not built: run `make ui` (make test does) before this test"
    );
    let artifacts = root().join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let doc_shots = doc_shots_dir();
    std::fs::create_dir_all(&doc_shots).unwrap();
    for shot in DOC_SHOTS {
        let _ = std::fs::remove_file(doc_shots.join(shot));
    }
    let docs_dir = tempfile::TempDir::new().unwrap();
    let mut docs_engine: Option<Engine> = None;

    let dir = tempfile::TempDir::new().unwrap();
    let first = start(dir.path()).await;
    let (first_url, first_token) = (format!("http://{}", first.api_addr), first.token.clone());
    // An Option: at a restart the old engine stops before the new one starts on the data dir.
    let mut engine = Some(first);
    let http = reqwest::Client::new();

    let mut browser = Command::new("node")
        .arg(root().join("tests/ui_e2e/browser.mjs"))
        .env("NM_URL", &first_url)
        .env("NM_TOKEN", &first_token)
        .env("NM_UI_DIR", &ui)
        .env("NM_ARTIFACTS", &artifacts)
        .env("NM_DOC_SHOTS", &doc_shots)
        .env("NM_CHROMIUM", CHROMIUM)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let mut to_browser = browser.stdin.take().unwrap();
    let mut from_browser = BufReader::new(browser.stdout.take().unwrap()).lines();

    let conversation = async {
        while let Some(line) = from_browser.next_line().await.expect("the browser's output reads") {
            let Some(step) = line.strip_prefix("STEP ") else {
                println!("{line}");
                continue;
            };
            let answer = match step {
                "deliver-first" => {
                    let body = json!({ "deliveryId": "d-1", "jobId": "ui-job-1", "state": "running", "seq": 1, "label": "nightly crawl" });
                    assert_eq!(deliver(&http, engine.as_ref().unwrap(), body).await, "applied");
                    json!({ "ok": true })
                }
                "deliver-duplicate-and-finish" => {
                    let again = json!({ "deliveryId": "d-1", "jobId": "ui-job-1", "state": "running", "seq": 1, "label": "nightly crawl" });
                    assert_eq!(deliver(&http, engine.as_ref().unwrap(), again).await, "duplicate");
                    let result = json!({
                        "text": "42 pages crawled",
                        "urls": ["https://results.example.invalid/crawl.jsonl"],
                        "image": "https://results.example.invalid/shot.png"
                    });
                    let done = json!({ "deliveryId": "d-2", "jobId": "ui-job-1", "state": "succeeded", "seq": 2, "result": result });
                    assert_eq!(deliver(&http, engine.as_ref().unwrap(), done).await, "applied");
                    json!({ "ok": true })
                }
                "discovery-turned-on" => {
                    // The key the guide set turned groq's discovery on; off again, so that nothing
                    // lists groq's real API (unreachable here) for the rest of the walk.
                    let engine = engine.as_ref().unwrap();
                    let url = format!("http://{}/api/settings", engine.api_addr);
                    let settings: Value = http.get(&url).bearer_auth(&engine.token).send().await.unwrap().json().await.unwrap();
                    assert_eq!(settings["providers"]["groq"]["discover"], "on", "{settings}");
                    let off = http.put(&url).bearer_auth(&engine.token).json(&json!({"groq.discover": "off"})).send().await.unwrap();
                    assert_eq!(off.status(), 200);
                    json!({ "ok": true })
                }
                "group-sweep" => {
                    // A sweep of three: two running, one already failed.
                    for (id, state) in [("ui-g-1", "running"), ("ui-g-2", "running"), ("ui-g-3", "failed")] {
                        let body = json!({ "deliveryId": format!("{id}-a"), "jobId": id, "state": state, "seq": 1, "group": "ui-sweep" });
                        assert_eq!(deliver(&http, engine.as_ref().unwrap(), body).await, "applied");
                    }
                    json!({ "ok": true })
                }
                "group-sweep-done" => {
                    for id in ["ui-g-1", "ui-g-2"] {
                        let body = json!({ "deliveryId": format!("{id}-b"), "jobId": id, "state": "succeeded", "seq": 2 });
                        assert_eq!(deliver(&http, engine.as_ref().unwrap(), body).await, "applied");
                    }
                    json!({ "ok": true })
                }
                "replicate-jobs" => {
                    // Two running Replicate predictions, tracked: one to cancel, one Replicate refuses.
                    let engine = engine.as_ref().unwrap();
                    let url = replicate_stand_in().await;
                    engine.services.settings.set("replicate.base_url", &url).await.unwrap();
                    engine.services.secrets.set("replicate", SecretKind::ApiKey, Some("r8_ui_e2e")).unwrap();
                    for id in ["ui-cancel-1", "ui-refuse-1"] {
                        let tracked = http
                            .post(format!("http://{}/api/jobs", engine.api_addr))
                            .bearer_auth(&engine.token)
                            .json(&json!({"provider": "replicate", "job_id": id}))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(tracked.status(), 201, "{id} tracked");
                    }
                    json!({ "ok": true })
                }
                "deliver-reversed-label" => {
                    // A label that would read "live" if its right-to-left override were applied.
                    let body =
                        json!({ "deliveryId": "d-rev", "jobId": "ui-reversed", "state": "running", "seq": 1, "label": "\u{202E}evil" });
                    assert_eq!(deliver(&http, engine.as_ref().unwrap(), body).await, "applied");
                    json!({ "ok": true })
                }
                "deliver-bad-signature" => {
                    // Signed with another secret: refused with 401 and listed on the Refused screen.
                    let engine = engine.as_ref().unwrap();
                    let bytes = serde_json::to_vec(&json!({ "deliveryId": "d-bad", "jobId": "ui-job-bad", "state": "succeeded" })).unwrap();
                    let refused = http
                        .post(format!("http://{}/hooks/generic", engine.receiver_addr))
                        .header("content-type", "application/json")
                        .header("x-agent-signature", generic::sign(b"not-the-secret", &bytes))
                        .body(bytes)
                        .send()
                        .await
                        .expect("the receiver answers");
                    assert_eq!(refused.status(), 401, "a wrong signature is refused");
                    json!({ "ok": true })
                }
                "restart" => {
                    // One engine per data dir: the old one stops first, then the new one starts
                    // there (on new ports).
                    let old = engine.take().expect("an engine runs");
                    old.shutdown().await;
                    let new = start(dir.path()).await;
                    let url = format!("http://{}", new.api_addr);
                    engine = Some(new);
                    json!({ "ok": true, "url": url })
                }
                "docs-data" => {
                    // The book's pictures: an engine of their own with the fixed data set.
                    let docs = Engine::start(EngineConfig::local(docs_dir.path()), Arc::new(LogNotifier)).await.expect("the engine starts");
                    docs_data(&docs).await;
                    let answer = json!({ "ok": true, "url": format!("http://{}", docs.api_addr), "token": docs.token });
                    docs_engine = Some(docs);
                    answer
                }
                other => json!({ "ok": false, "error": format!("unknown step {other:?}") }),
            };
            to_browser.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
            to_browser.flush().await.unwrap();
        }
    };
    tokio::time::timeout(BROWSER_BOUND, conversation).await.expect("the browser run ends in time");
    let status = tokio::time::timeout(Duration::from_secs(30), browser.wait()).await.expect("the browser exits").unwrap();
    assert!(status.success(), "the browser checks failed (see above; screenshot in test-artifacts/ui-failure.png)");

    // What the page said was saved is what the engine keeps.
    let engine = engine.expect("an engine runs");
    let settings: Value =
        http.get(format!("http://{}/api/settings", engine.api_addr)).bearer_auth(&engine.token).send().await.unwrap().json().await.unwrap();
    assert_eq!(settings["poll_interval_secs"], 45, "{settings}");
    assert_eq!(settings["sla_secs"], 600, "{settings}");
    for shot in [
        "ui-first-launch.png",
        "ui-jobs-live.png",
        "ui-job-detail.png",
        "ui-cancel.png",
        "ui-settings-refused.png",
        "ui-metrics.png",
        "ui-refused.png",
        "jobs-light.png",
        "jobs-dark.png",
        "job-light.png",
        "job-dark.png",
    ] {
        assert!(artifacts.join(shot).is_file(), "{shot} kept");
    }
    // The README's and the book's pictures: written, and each one shown where the docs say.
    let shown =
        std::fs::read_to_string(root().join("README.md")).unwrap() + &std::fs::read_to_string(root().join("docs/src/web-ui.md")).unwrap();
    for shot in DOC_SHOTS {
        assert!(doc_shots.join(shot).is_file(), "{shot} written into {}", doc_shots.display());
        assert!(shown.contains(&format!("screenshots/{shot}")), "{shot} is shown in the README or the book's web UI page");
    }
    engine.shutdown().await;
    docs_engine.expect("the book's data set was served").shutdown().await;
}

//! Security checks against a real `nevermiss serve` child process:
//! - the admin API refuses a missing or wrong token (every call, every method), a foreign `Origin`
//!   and a foreign `Host` (DNS rebinding), and is never reachable on the receiver port;
//! - after a run with secrets set (webhook secrets and API keys through variables and through the
//!   API, a tunnel token, the API token itself), no secret appears in the database files
//!   (`nevermiss.db`, `-wal`, `-shm`, read as bytes), in the logs (stderr at RUST_LOG=debug), or
//!   in any answer of the API (every GET endpoint walked, and the answers of the writes).

use crate::harness;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Path as AxumPath, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use harness::serve_child::{free_addr, ServeChild, ServeOptions};
use harness::signing::{generic_signature, standard_webhooks_signature};
use nevermiss_engine::api::jobs::JobDetail;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const GENERIC_SECRET: &str = "sec-generic-webhook-5f1e0c7a9b3d";
const GENERIC_KEY: &str = "sec-generic-apikey-8a2c4e6f0b1d";
const REPLICATE_KEY: &str = "sec-replicate-apikey-3c5e7a9b1d2f";
const OPENAI_SECRET: &str = "whsec_c2VjLW9wZW5haS13ZWJob29rLTlkOGM3YjZh";
const OPENAI_KEY: &str = "sec-openai-apikey-6b4d2f0e8c1a";
const ANTHROPIC_KEY: &str = "sec-anthropic-apikey-1f3e5d7c9b0a";
const FAL_KEY: &str = "sec-fal-apikey-0a9b8c7d6e5f";
const NGROK_TOKEN: &str = "sec-ngrok-authtoken-2e4c6a8b0d1f";

fn sign(secret: &str, body: &[u8]) -> String {
    generic_signature(secret, body)
}

/// The generic status API, as a local stand-in: `done-*` jobs succeeded, `refuse-*` answers 401,
/// `broken-*` 500; everything else runs. Counts the requests that carried the right key.
async fn status_stand_in(authorized: Arc<AtomicU64>) -> String {
    async fn status(
        State(authorized): State<Arc<AtomicU64>>,
        headers: HeaderMap,
        AxumPath(id): AxumPath<String>,
    ) -> (StatusCode, Json<Value>) {
        if headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {GENERIC_KEY}")) {
            authorized.fetch_add(1, Ordering::SeqCst);
        }
        if id.starts_with("refuse-") {
            return (StatusCode::UNAUTHORIZED, Json(json!({"error": "bad key"})));
        }
        if id.starts_with("broken-") {
            return (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": "oops"})));
        }
        let state = if id.starts_with("done-") { "succeeded" } else { "running" };
        (StatusCode::OK, Json(json!({"jobId": id, "state": state, "seq": 9})))
    }
    let app = Router::new().route("/jobs/{id}", get(status)).with_state(authorized);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn start(dir: &std::path::Path, status_url: &str) -> ServeChild {
    let log = dir.join("serve.log");
    ServeChild::start(&ServeOptions {
        data_dir: &dir.join("data"),
        log: &log,
        receiver_addr: "127.0.0.1:0".parse().unwrap(),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        env: vec![
            ("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), GENERIC_SECRET.into()),
            ("NEVERMISS_GENERIC_API_KEY".into(), GENERIC_KEY.into()),
            ("NEVERMISS_GENERIC_BASE_URL".into(), status_url.into()),
            // Other providers point at a closed loopback port: their polls fail, locally.
            ("NEVERMISS_REPLICATE_BASE_URL".into(), format!("http://{}", free_addr())),
            ("NEVERMISS_OPENAI_BASE_URL".into(), format!("http://{}", free_addr())),
            ("NEVERMISS_ANTHROPIC_BASE_URL".into(), format!("http://{}", free_addr())),
            ("NEVERMISS_FAL_BASE_URL".into(), format!("http://{}", free_addr())),
        ],
        rust_log: "debug",
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_refuses_missing_and_wrong_tokens_foreign_origins_and_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let status_url = status_stand_in(Arc::default()).await;
    let server = start(dir.path(), &status_url).await;
    let http = reqwest::Client::new();
    let calls: &[(&str, &str)] = &[
        ("GET", "/api/health"),
        ("GET", "/api/info"),
        ("GET", "/api/jobs"),
        ("POST", "/api/jobs"),
        ("GET", "/api/jobs/generic/x"),
        ("POST", "/api/jobs/generic/x/poll"),
        ("GET", "/api/deliveries/generic/x"),
        ("GET", "/api/metrics"),
        ("GET", "/api/metrics/history"),
        ("POST", "/api/reconcile"),
        ("GET", "/api/reconcile/passes"),
        ("GET", "/api/events"),
        ("GET", "/api/settings"),
        ("PUT", "/api/settings"),
        ("GET", "/api/secrets"),
        ("PUT", "/api/secrets/generic"),
        ("POST", "/api/test-delivery"),
        ("GET", "/api/tunnel"),
        ("POST", "/api/tunnel/test"),
        ("POST", "/api/tunnel/restart"),
        ("POST", "/api/tunnel/ack"),
        ("GET", "/api/tunnel/credentials"),
        ("PUT", "/api/tunnel/credentials"),
        ("GET", "/api/no-such-call"),
    ];
    let mut wrong = server.api.token.clone().into_bytes();
    wrong[0] = if wrong[0] == b'a' { b'b' } else { b'a' };
    let wrong = String::from_utf8(wrong).unwrap();
    let authorizations: Vec<(&str, Option<String>)> = vec![
        ("no token", None),
        ("empty bearer", Some("Bearer ".into())),
        ("wrong token of the same length", Some(format!("Bearer {wrong}"))),
        ("a prefix of the token", Some(format!("Bearer {}", &server.api.token[..server.api.token.len() - 1]))),
        ("the token and more", Some(format!("Bearer {}0", server.api.token))),
        ("the token as Basic", Some(format!("Basic {}", server.api.token))),
        ("the token without a scheme", Some(server.api.token.clone())),
    ];
    for (method, path) in calls {
        for (what, authorization) in &authorizations {
            let mut request = http
                .request(method.parse().unwrap(), format!("{}{path}", server.api.base))
                .header("content-type", "application/json")
                .body("{}");
            if let Some(value) = authorization {
                request = request.header("authorization", value);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{method} {path} with {what}");
        }
        // The token in the query string is not a token.
        let response =
            http.request(method.parse().unwrap(), format!("{}{path}?token={}", server.api.base, server.api.token)).send().await.unwrap();
        // Unknown /api/ paths too: every /api/ request needs the token (contract §3).
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{method} {path} with the token in the query");
    }

    // With the right token, a foreign Origin or Host is still refused.
    let receiver_port = server.receiver.rsplit(':').next().unwrap().to_owned();
    let api_port = server.api.base.rsplit(':').next().unwrap().to_owned();
    for origin in [
        "https://evil.example".to_owned(),
        "null".to_owned(),
        format!("http://127.0.0.1:{receiver_port}"),
        format!("http://localhost.evil.example:{api_port}"),
        format!("https://127.0.0.1:{api_port}"),
        "file://".to_owned(),
        // Every Tauri app's pages share these; this window loads the UI from the API's address.
        "tauri://localhost".to_owned(),
        "http://tauri.localhost".to_owned(),
    ] {
        let response = server.api.request(Method::GET, "/api/jobs").header("origin", &origin).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "Origin {origin}");
    }
    for host in ["evil.example".to_owned(), format!("evil.example:{api_port}"), format!("127.0.0.1.nip.io:{api_port}")] {
        let response = server.api.request(Method::GET, "/api/health").header("host", &host).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "Host {host}");
    }
    // The app's own origin with the token: allowed.
    let response = server.api.request(Method::GET, "/api/jobs").header("origin", &server.api.base).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // The receiver port serves no API call, token or not, whatever the method.
    for (method, path) in calls {
        let response = http
            .request(method.parse().unwrap(), format!("{}{path}", server.receiver))
            .bearer_auth(&server.api.token)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path} on the receiver port");
        let text = response.text().await.unwrap();
        assert!(!text.contains("\"ok\""), "{path} on the receiver: {text}");
    }
    for path in ["/", "/index.html", "/assets/index.js", "/api", "/api/", "/hooks/generic/../../api/health", "/%2e%2e/api/health"] {
        let response = http.get(format!("{}{path}", server.receiver)).bearer_auth(&server.api.token).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "GET {path} on the receiver port");
    }
    assert!(server.stop().await, "a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_is_in_the_database_the_logs_or_any_api_answer() {
    let dir = tempfile::tempdir().unwrap();
    let authorized = Arc::new(AtomicU64::new(0));
    let status_url = status_stand_in(authorized.clone()).await;
    let server = start(dir.path(), &status_url).await;
    let mut answers: Vec<(String, String)> = Vec::new();
    let mut keep = |what: String, text: String| answers.push((what, text));

    // Secrets set through the API (the file store in the data dir, 0600, is their place).
    for (provider, body) in [
        ("replicate", json!({"api_key": REPLICATE_KEY})),
        ("openai", json!({"api_key": OPENAI_KEY, "webhook_secret": OPENAI_SECRET})),
        ("anthropic", json!({"api_key": ANTHROPIC_KEY})),
        ("fal", json!({"api_key": FAL_KEY})),
    ] {
        let response = server.api.raw_put(&format!("/api/secrets/{provider}"), &body).await;
        assert_eq!(response.status(), StatusCode::OK, "PUT /api/secrets/{provider}");
        keep(format!("PUT /api/secrets/{provider}"), response.text().await.unwrap());
    }
    let response = server.api.raw_put("/api/tunnel/credentials", &json!({"ngrok_authtoken": NGROK_TOKEN})).await;
    assert_eq!(response.status(), StatusCode::OK);
    keep("PUT /api/tunnel/credentials".into(), response.text().await.unwrap());

    // A run: signed deliveries through every state, duplicates, a bad signature, a rejected
    // payload, a test delivery, tracked jobs polled with the key (answers 200, 401 and 500),
    // Standard Webhooks deliveries with the stored secret, good and bad.
    let http = reqwest::Client::new();
    let post_hook = |provider: &'static str, body: Vec<u8>, headers: Vec<(&'static str, String)>| {
        let mut request = http.post(format!("{}/hooks/{provider}", server.receiver)).body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.send()
    };
    for (i, (state, seq)) in [("queued", 1), ("running", 2), ("succeeded", 3), ("succeeded", 3)].iter().enumerate() {
        let body =
            json!({"deliveryId": format!("d-{i}"), "jobId": "job-secret-run", "state": state, "seq": seq, "label": "a run"}).to_string();
        let response = post_hook("generic", body.clone().into_bytes(), vec![("x-agent-signature", sign(GENERIC_SECRET, body.as_bytes()))])
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let dup = json!({"deliveryId": "d-0", "jobId": "job-secret-run", "state": "queued", "seq": 1}).to_string();
    let response =
        post_hook("generic", dup.clone().into_bytes(), vec![("x-agent-signature", sign(GENERIC_SECRET, dup.as_bytes()))]).await.unwrap();
    assert_eq!(response.json::<Value>().await.unwrap()["outcome"], "duplicate");
    let bad = json!({"deliveryId": "d-bad", "jobId": "job-bad", "state": "running", "seq": 1}).to_string();
    let response =
        post_hook("generic", bad.clone().into_bytes(), vec![("x-agent-signature", sign("not-the-secret", bad.as_bytes()))]).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    keep("401".into(), response.text().await.unwrap());
    let broken = br#"{"deliveryId":"d-broken","jobId":"job-broken","state":"exploded","seq":1}"#.to_vec();
    let response = post_hook("generic", broken.clone(), vec![("x-agent-signature", sign(GENERIC_SECRET, &broken))]).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    keep("400".into(), response.text().await.unwrap());
    let now = chrono::Utc::now().timestamp();
    let event = br#"{"id":"evt_1","object":"event","type":"response.completed","created_at":1,"data":{"id":"resp_secret_1"}}"#.to_vec();
    for (id, signature) in
        [("msg_good", standard_webhooks_signature(OPENAI_SECRET, "msg_good", now, &event)), ("msg_bad", "v1,AAAA".to_owned())]
    {
        let response = post_hook(
            "openai",
            event.clone(),
            vec![("webhook-id", id.to_owned()), ("webhook-timestamp", now.to_string()), ("webhook-signature", signature)],
        )
        .await
        .unwrap();
        keep(format!("openai {id}"), response.text().await.unwrap());
    }
    let response = server.api.raw_post("/api/test-delivery", &json!({})).await;
    assert_eq!(response.status(), StatusCode::OK);
    keep("POST /api/test-delivery".into(), response.text().await.unwrap());
    for job in ["done-1", "running-1", "refuse-1", "broken-1"] {
        let response = server.api.raw_post("/api/jobs", &json!({"provider": "generic", "job_id": job, "label": "tracked"})).await;
        assert!(response.status().is_success());
        keep(format!("POST /api/jobs {job}"), response.text().await.unwrap());
    }
    for provider_job in ["replicate/pred-secret-1", "anthropic/msgbatch_secret1", "openai/resp_secret_2"] {
        let (provider, job) = provider_job.split_once('/').unwrap();
        let response = server.api.raw_post("/api/jobs", &json!({"provider": provider, "job_id": job})).await;
        keep(format!("POST /api/jobs {provider_job}"), response.text().await.unwrap());
    }
    let response = server.api.raw_post("/api/reconcile", &json!({})).await;
    assert_eq!(response.status(), StatusCode::OK);
    keep("POST /api/reconcile".into(), response.text().await.unwrap());
    let response = server.api.raw_post("/api/jobs/generic/broken-1/poll", &json!({})).await;
    keep("POST poll".into(), response.text().await.unwrap());
    assert!(authorized.load(Ordering::SeqCst) >= 4, "the stand-in saw the key (so it was really used)");
    // The finished jobs' notifications have gone out (the log notifier writes them to stderr).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.api.metrics().await.store.notifications_delivered < 3 {
        assert!(std::time::Instant::now() < deadline, "notifications were not delivered");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // Every GET endpoint.
    let jobs = server.api.jobs("limit=100").await;
    let mut paths: Vec<String> = [
        "/api/health",
        "/api/info",
        "/api/jobs",
        "/api/metrics",
        "/api/metrics/history",
        "/api/metrics/history?hours=2160",
        "/api/reconcile/passes",
        "/api/settings",
        "/api/secrets",
        "/api/tunnel",
        "/api/tunnel/credentials",
        "/",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    for job in &jobs.jobs {
        let path = format!("/api/jobs/{}/{}", job.provider, job.job_id);
        let detail: JobDetail = server.api.get(&path, StatusCode::OK).await;
        for event in &detail.timeline {
            if let Some(delivery) = &event.delivery_id {
                paths.push(format!("/api/deliveries/{}/{delivery}", job.provider));
            }
        }
        paths.push(path);
    }
    paths.sort();
    paths.dedup();
    assert!(paths.iter().any(|p| p.starts_with("/api/deliveries/generic/")), "raw deliveries are walked too");
    for path in &paths {
        let response = server.api.raw_get(path).await;
        assert!(response.status().is_success(), "GET {path}: {}", response.status());
        keep(format!("GET {path}"), response.text().await.unwrap());
    }
    // The event stream: what it sends in its first moments (a metrics snapshot at least).
    let mut stream = server.api.raw_get("/api/events").await;
    let mut events = String::new();
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(until, stream.chunk()).await {
        events.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(stream);
    keep("GET /api/events".into(), events);

    let secrets = [GENERIC_SECRET, GENERIC_KEY, REPLICATE_KEY, OPENAI_SECRET, OPENAI_KEY, ANTHROPIC_KEY, FAL_KEY, NGROK_TOKEN];
    let token = server.api.token.clone();
    for (what, text) in &answers {
        for secret in secrets.iter().chain([&token.as_str()]) {
            assert!(!text.contains(secret), "{what} answered with a secret ({secret:.12}...): {text:.300}");
        }
    }

    // The database files, while the engine runs (WAL and shared memory present)...
    let data = dir.path().join("data");
    let search_db = |when: &str| {
        let mut searched = 0;
        for name in ["nevermiss.db", "nevermiss.db-wal", "nevermiss.db-shm"] {
            let Ok(bytes) = std::fs::read(data.join(name)) else { continue };
            searched += 1;
            for secret in secrets.iter().chain([&token.as_str()]) {
                assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "{when}: {name} holds a secret ({secret:.12}...)");
            }
        }
        searched
    };
    assert!(search_db("running") >= 2, "the database and its WAL were searched");
    // The same byte search finds what is there: the secrets set through the API are in their
    // place, the 0600 file store (no keychain in this run).
    let stored = std::fs::read(data.join("secrets.json")).expect("the file store exists");
    assert!(stored.windows(REPLICATE_KEY.len()).any(|w| w == REPLICATE_KEY.as_bytes()), "the search works");
    // ... and after a clean stop (the WAL checkpointed into the file).
    let log = server.log.clone();
    assert!(server.stop().await, "a clean stop");
    assert!(search_db("stopped") >= 1);

    // The logs, at debug level, of the whole run.
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("nevermiss::notification"), "the log is the real one: {log:.2000}");
    assert!(log.lines().count() > 20, "debug logging was on");
    for secret in secrets.iter().chain([&token.as_str()]) {
        if let Some(line) = log.lines().find(|l| l.contains(secret)) {
            panic!("the log holds a secret ({secret:.12}...): {line:.400}");
        }
    }
}

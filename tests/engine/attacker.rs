//! What an attacker's review found, each attack run again from outside, as the attacker
//! ran it, against a real `nevermiss serve` child process (the body budget's against the real
//! engine started in this process with a smaller budget):
//! - a web page in the user's browser posting to the receiver (finding 9);
//! - half-sent requests and idle connections to the admin API, which held connections forever and,
//!   under a lower open-files limit, starved the receiver (finding 4);
//! - stalled request bodies making the receiver hold memory without bound (finding 5);
//! - credential-like headers kept in clear and huge headers and paths kept whole (finding 6), read
//!   back with a device token;
//! - a label forging a log line (finding 8);
//! - a device token's owner pointing the app at a plain-http hub elsewhere (finding 11).
//!
//! The fal findings (1 and 2) are in `provider_fal` (its stand-in), the hub's forwarding of a
//! device's track in `hub`.

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use nevermiss_engine::api::devices::DeviceToken;
use nevermiss_engine::api::RefusedList;
use reqwest::StatusCode;
use serde_json::json;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::api::ApiClient;
use crate::harness::app::SECRET;
use crate::harness::serve_child::{free_addr, ServeChild, ServeOptions};
use crate::harness::signing;
use crate::harness::waiting::eventually;

async fn start(dir: &TempDir, rust_log: &str) -> ServeChild {
    ServeChild::start(&ServeOptions {
        data_dir: &dir.path().join("data"),
        log: &dir.path().join("serve.log"),
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: vec![("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into())],
        rust_log,
    })
    .await
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").trim_end_matches('/').to_owned()
}

/// A signed generic delivery with this body; the status it was answered.
async fn post_signed(server: &ServeChild, body: &serde_json::Value) -> StatusCode {
    let bytes = serde_json::to_vec(body).unwrap();
    let mut request = server.api.http.post(format!("{}/hooks/generic", server.receiver)).header("content-type", "application/json");
    for (name, value) in signing::generic(SECRET, &bytes) {
        request = request.header(name, value);
    }
    request.body(bytes).send().await.map(|r| r.status()).unwrap_or(StatusCode::BAD_GATEWAY)
}

/// Reads until the server answers or closes: `Some(status)` for an answer, `None` for a close
/// without one; panics if neither comes within `bound`.
async fn answer_or_close(stream: &mut TcpStream, bound: Duration) -> Option<u16> {
    let mut buf = vec![0u8; 4096];
    let mut read = Vec::new();
    let deadline = Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => panic!("the server neither answered nor closed the connection within {bound:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(n)) => {
                read.extend_from_slice(&buf[..n]);
                if let Some(line) = read.split(|b| *b == b'\n').next().filter(|_| read.contains(&b'\n')) {
                    let text = String::from_utf8_lossy(line);
                    return text.split_whitespace().nth(1).and_then(|s| s.parse().ok());
                }
            }
        }
    }
}

/// Finding 9: a page's cross-site form POST reached the receiver, was answered 401 and stored, so a
/// page could push the real refusals out of the kept ones and inflate the bad-signature count.
/// Providers send neither `Origin` nor `Sec-Fetch-Site`: such a request is 403, and nothing is kept
/// or counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_cannot_post_to_the_receiver_nor_fill_the_refused_list() {
    let dir = TempDir::new().unwrap();
    let server = start(&dir, "info").await;
    let http = &server.api.http;
    let page = |headers: &[(&str, &str)], path: &str| {
        let mut request = http
            .post(format!("{}{path}", server.receiver))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("jobId=pwned&state=succeeded");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send()
    };
    for (headers, path) in [
        (vec![("origin", "https://evil.example")], "/hooks/generic"),
        (vec![("origin", "null")], "/hooks/generic"),
        (vec![("sec-fetch-site", "cross-site")], "/hooks/generic"),
        (vec![("origin", "https://evil.example"), ("sec-fetch-site", "cross-site")], "/hooks/no-such-provider"),
    ] {
        let status = page(&headers, path).await.unwrap().status();
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?} {path}");
    }
    let refused: RefusedList = server.api.get("/api/refused", StatusCode::OK).await;
    assert!(refused.refused.is_empty(), "a page's posts were kept: {:?}", refused.refused);
    let metrics = server.api.metrics().await;
    assert_eq!(metrics.store.bad_signatures, 0, "a page's posts were counted");
    // A provider's request (no Origin) is still taken.
    let status = post_signed(&server, &json!({"deliveryId": "d-1", "jobId": "j-1", "state": "running", "seq": 1})).await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}

/// Finding 4: the admin API had no read timeout and no connection cap. Half-sent requests stayed
/// open forever, and under a lower open-files limit idle API connections took every descriptor, so
/// a signed webhook got no answer. Now a head must arrive within 10 s and a body within 15 s, and
/// the API keeps at most its own share of connections: the receiver answers at once while 600 idle
/// API connections wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_api_requests_are_cut_off_and_idle_api_connections_cannot_starve_the_receiver() {
    let dir = TempDir::new().unwrap();
    let server = start(&dir, "info").await;
    let api = host_port(&server.api.base);

    // A head that never ends, and a body that never ends.
    let mut half_head = TcpStream::connect(&api).await.unwrap();
    half_head.write_all(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    let mut half_body = TcpStream::connect(&api).await.unwrap();
    let head = format!(
        "POST /api/jobs HTTP/1.1\r\nHost: {api}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"prov",
        server.api.token
    );
    half_body.write_all(head.as_bytes()).await.unwrap();
    let (head_end, body_end) =
        tokio::join!(answer_or_close(&mut half_head, Duration::from_secs(40)), answer_or_close(&mut half_body, Duration::from_secs(40)));
    assert!(head_end.is_none_or(|status| status >= 400), "a half-sent head was answered {head_end:?}");
    assert!(body_end.is_none_or(|status| status >= 400), "a half-sent body was answered {body_end:?}");

    // The open-files limit of a small machine, then idle connections to the API, far more than it keeps.
    let limited = std::process::Command::new("prlimit").args(["--pid", &server.pid().to_string(), "--nofile=400:400"]).status();
    assert!(limited.is_ok_and(|s| s.success()), "prlimit could not lower the child's limit");
    let mut idle = Vec::new();
    for _ in 0..600 {
        match TcpStream::connect(&api).await {
            Ok(stream) => idle.push(stream),
            Err(_) => break,
        }
    }
    assert!(idle.len() >= 400, "only {} connections could be opened", idle.len());
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A provider's webhook is still answered, well before the idle ones time out.
    let delivered = tokio::time::timeout(
        Duration::from_secs(8),
        post_signed(&server, &json!({"deliveryId": "d-busy", "jobId": "j-busy", "state": "running", "seq": 1})),
    )
    .await;
    assert_eq!(delivered.ok(), Some(StatusCode::OK), "the receiver was starved by idle API connections");
    drop(idle);
    server.stop().await;
}

/// Finding 5: unauthenticated clients made the receiver hold memory: 200 stalled 1 MiB bodies
/// raised it by 307 MiB, and buffers were sized from the declared length. Now the bytes of bodies
/// in flight have a budget across every connection (`receiver::BODIES_IN_FLIGHT`, 64 MiB; here
/// the real engine with a budget of two bodies, so that the attack fills it within the 15 s a body
/// may take even on a loaded machine): past it a request is answered 503 (the sender retries), and
/// once the stalled clients go, requests are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_hold_at_most_the_budget_and_past_it_the_receiver_answers_503() {
    use nevermiss_engine::engine::{Engine, EngineConfig};
    use nevermiss_engine::receiver::MAX_BODY;
    let dir = TempDir::new().unwrap();
    let config = EngineConfig { receiver_body_budget: 2 * MAX_BODY, ..EngineConfig::local(dir.path()) };
    let engine =
        Engine::start(config, std::sync::Arc::new(nevermiss_engine::channels::desktop::LogNotifier)).await.expect("the engine starts");
    engine.services.secrets.set("generic", nevermiss_engine::providers::SecretKind::WebhookSecret, Some(SECRET)).unwrap();
    let receiver = engine.receiver_addr.to_string();
    let http = reqwest::Client::new();
    let post = |body: serde_json::Value| {
        let bytes = serde_json::to_vec(&body).unwrap();
        let mut request = http.post(format!("http://{receiver}/hooks/generic")).header("content-type", "application/json");
        for (name, value) in signing::generic(SECRET, &bytes) {
            request = request.header(name, value);
        }
        async move { request.body(bytes).send().await.map(|r| r.status()).unwrap_or(StatusCode::BAD_GATEWAY) }
    };

    // Two stalled clients declare a full body and send all of it but 100 bytes: together they
    // hold all of the budget but 200 bytes. A delivery that comes while their bytes are still
    // being read can take budget they then lack: such a client is answered 503 (its sender would
    // retry) and is replaced here by another.
    let chunk = vec![b' '; MAX_BODY - 100];
    let stall = || async {
        let mut stream = TcpStream::connect(&receiver).await.unwrap();
        let head = format!(
            "POST /hooks/generic HTTP/1.1\r\nHost: {receiver}\r\nContent-Type: application/json\r\nContent-Length: {MAX_BODY}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&chunk).await.unwrap();
        stream
    };
    let mut stalled = vec![stall().await, stall().await];

    // A real delivery of 1,000 bytes no longer fits: 503, so its sender retries.
    let padded = |id: String| json!({"deliveryId": id, "jobId": id, "state": "running", "seq": 1, "label": "x".repeat(900)});
    let deadline = Instant::now() + Duration::from_secs(20);
    for n in 0.. {
        assert!(Instant::now() < deadline, "no delivery past the budget was answered 503");
        for stream in stalled.iter_mut() {
            let mut buf = [0u8; 64];
            if stream.try_read(&mut buf).is_ok() {
                *stream = stall().await;
            }
        }
        if post(padded(format!("d-full-{n}"))).await == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The stalled clients go: their bytes are given back, and deliveries are taken again.
    drop(stalled);
    let mut m = 0;
    eventually("deliveries are taken once the stalled bodies are gone", Duration::from_secs(10), Duration::from_millis(20), || {
        m += 1;
        post(padded(format!("d-after-{m}"))).map(|status| status == StatusCode::OK)
    })
    .await;
    engine.shutdown().await;
}

/// Finding 6: credential-like headers (`X-Goog-Api-Key`, `X-Auth-Token`, `Api-Key`) were kept in
/// clear with refused requests, readable with a device token, and refused rows kept headers and
/// paths of any size. Now they are masked by the rule that masks a body's fields, a head over
/// 64 KiB is answered 431 and kept nowhere, and what is kept of headers and names is capped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_headers_are_masked_and_huge_headers_and_paths_are_not_kept() {
    let dir = TempDir::new().unwrap();
    let server = start(&dir, "info").await;
    let http = &server.api.http;
    let secrets = ["goog-k3y-0001", "auth-t0ken-0002", "api-k3y-0003", "amz-t0ken-0004"];
    let response = http
        .post(format!("{}/hooks/generic", server.receiver))
        .header("x-goog-api-key", secrets[0])
        .header("x-auth-token", secrets[1])
        .header("api-key", secrets[2])
        .header("x-amz-security-token", secrets[3])
        .header("x-agent-signature", "sha256=00")
        .body(r#"{"deliveryId":"d","jobId":"j","state":"running","seq":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // A head of 300 KB: refused by the server itself, kept nowhere.
    let huge = http.post(format!("{}/hooks/generic", server.receiver)).header("x-pad", "a".repeat(300_000)).body("{}").send().await;
    assert!(huge.is_err() || huge.as_ref().unwrap().status() == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "{huge:?}");
    // A 60 KB path: refused as an unknown provider, its name kept short.
    let long_name = "p".repeat(60_000);
    let response = http.post(format!("{}/hooks/{long_name}", server.receiver)).body("{}").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.text().await.unwrap().len() < 1_000, "the answer echoes the whole name");

    // Read back as a device of this hub would.
    let device: DeviceToken = server.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let as_device = ApiClient::new(server.api.base.clone(), device.token);
    let text = as_device.raw_get("/api/refused").await.text().await.unwrap();
    for secret in secrets {
        assert!(!text.contains(secret), "{secret} was kept in clear: {text}");
    }
    assert!(!text.contains(&"a".repeat(2_000)), "a huge header was kept");
    let refused: RefusedList = serde_json::from_str(&text).unwrap();
    assert_eq!(refused.refused.len(), 2, "the bad signature and the unknown provider: {:?}", refused.refused);
    for row in &refused.refused {
        let size = row.provider.len() + row.error.len() + row.cause.len() + row.headers.to_string().len();
        assert!(size < 8_000, "a refused row kept {size} bytes: {row:?}");
    }
    server.stop().await;
}

/// Finding 8: a label holding a newline and a fake timestamp became a `WARN` line of its own in
/// the log. Every value is escaped now: one event is one line, and what was sent is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_cannot_forge_a_log_line() {
    let dir = TempDir::new().unwrap();
    let server = start(&dir, "debug").await;
    let forged = "2026-12-03T10:00:00.000000Z  WARN nevermiss_engine::receiver: forged";
    let label = format!("nightly\n{forged}\n\u{202E}evil");
    let status = post_signed(&server, &json!({"deliveryId": "d-l", "jobId": "j-l", "state": "succeeded", "seq": 1, "label": label})).await;
    assert_eq!(status, StatusCode::OK);
    // The notification is logged with the job's title (the log notifier of `serve`).
    let log_path = dir.path().join("serve.log");
    let read_log = || String::from_utf8_lossy(&std::fs::read(&log_path).unwrap_or_default()).into_owned();
    eventually("the notification is logged", Duration::from_secs(30), Duration::from_millis(50), || {
        let log = read_log();
        async move { log.contains("nevermiss::notification") }
    })
    .await;
    let log = read_log();
    assert!(log.contains("nightly"), "the label is not in the log at all");
    assert!(!log.lines().any(|line| line.starts_with("2026-12-03T10:00:00")), "a forged line:\n{log}");
    assert!(!log.contains('\u{202E}'), "a right-to-left override went to the log as it is");
    server.stop().await;
}

/// Finding 11: a hub's address in plain `http://` to another machine sent the device token in
/// clear. Now it is refused with why; plain http only to this machine (a TLS proxy's local end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_hub_elsewhere_is_refused() {
    let dir = TempDir::new().unwrap();
    let server = start(&dir, "info").await;
    for url in ["http://192.0.2.10:8788", "http://hub.example.com", "ftp://hub.example.com"] {
        let response = server.api.raw_put("/api/hub", &json!({ "url": url, "token": "t-1" })).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{url}");
    }
    for url in ["https://hub.example.com", "http://127.0.0.1:9", "http://localhost:9"] {
        let response = server.api.raw_put("/api/hub", &json!({ "url": url })).await;
        assert_eq!(response.status(), StatusCode::OK, "{url}");
    }
    server.stop().await;
}

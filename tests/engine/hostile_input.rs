//! Hostile input on the receiver, over real HTTP (and raw sockets where a well-behaved client
//! cannot say it): oversized bodies, slow clients, header floods, invalid UTF-8, deep JSON, huge
//! numbers, wrong content types, signatures of the wrong length, replays. The answers stay the
//! ones the contract gives, nothing unsigned is stored, and the process's memory stays bounded
//! under a flood (measured from /proc/self/status, with a generous ceiling, never a timing).

use crate::harness;
use nevermiss_engine::receiver::HookAnswer;
use nevermiss_engine::store::job::Outcome;

use std::time::{Duration, Instant};

use harness::{payload, sign, TestApp, WAIT};
use nevermiss_engine::providers::fal;
use nevermiss_engine::providers::SecretKind;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: usize = 1024 * 1024;

/// The two other signature schemes under attack: OpenAI's (Standard Webhooks) with a webhook
/// secret, and fal's with its key set at a closed port (never fetched: what is refused is refused
/// on its form). Returns an OpenAI event to sign.
async fn openai_and_fal(app: &TestApp) -> Vec<u8> {
    app.set_secret("openai", SecretKind::WebhookSecret, Some("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"));
    app.set_setting("fal.base_url", "http://127.0.0.1:9").await;
    br#"{"id":"evt_1","type":"response.completed","created_at":1,"data":{"id":"resp_1"}}"#.to_vec()
}

fn addr(app: &TestApp) -> String {
    app.receiver.trim_start_matches("http://").to_owned()
}

/// A request head for `POST /hooks/{provider}` with extra header lines.
fn head(provider: &str, extra: &[String]) -> String {
    let mut head = format!("POST /hooks/{provider} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for line in extra {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head
}

/// Sends `bytes` over a fresh connection (keeping the write half open) and returns the status
/// code of the answer, or `None` if the server closed the connection without one.
async fn raw_status(app: &TestApp, bytes: Vec<u8>) -> Option<u16> {
    let stream = TcpStream::connect(addr(app)).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        let _ = write.write_all(&bytes).await;
        let _ = write.flush().await;
        std::future::pending::<()>().await;
    });
    let status = read_status(&mut read).await;
    writer.abort();
    status
}

async fn read_status(read: &mut (impl AsyncReadExt + Unpin)) -> Option<u16> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match tokio::time::timeout(WAIT, read.read(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) => return None, // reset
            Err(_) => panic!("the receiver neither answered nor closed within {WAIT:?}"),
        };
        if n == 0 {
            return None;
        }
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((line, _)) = text.split_once("\r\n") {
            return line.split(' ').nth(1).and_then(|s| s.parse().ok());
        }
    }
}

/// The resident set size of this process (engine and test client together), in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status is readable");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS is reported");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The receiver still does its job: a fresh signed delivery is applied.
async fn still_serves(app: &TestApp, delivery_id: &str) {
    assert_eq!(app.deliver(delivery_id, &format!("job-{delivery_id}"), "running", 1).await, Outcome::Applied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_declared_or_chunked_are_413_and_store_nothing() {
    let app = TestApp::spawn().await;
    let body = serde_json::to_vec(&payload("d-big", "job-big", "succeeded", 1)).unwrap();
    let sig = format!("X-Agent-Signature: {}", sign(&body));

    // Declared: just over the limit, far over it. Refused on the head alone.
    for length in [(MIB + 1) as u64, 10 * 1024 * MIB as u64, u64::MAX - 2] {
        let h = head("generic", &[sig.clone(), format!("Content-Length: {length}")]);
        assert_eq!(raw_status(&app, h.into_bytes()).await, Some(413), "declared {length}");
    }
    // A length that is not a number, or beyond what HTTP/1 can frame: the HTTP layer refuses it
    // (400, or 431 for u64::MAX, which hyper reserves and counts as a head too large).
    for (length, status) in [("18446744073709551615", 431), ("18446744073709551616", 400), ("1e9", 400), ("-1", 400), ("12, 13", 400)] {
        let h = head("generic", &[sig.clone(), format!("Content-Length: {length}")]);
        assert_eq!(raw_status(&app, h.into_bytes()).await, Some(status), "declared {length:?}");
    }

    // Chunked, in many tiny chunks (their framing costs more than their bytes): still counted by
    // the bytes of the body, refused once over 1 MiB.
    // The last byte sent is the one over the limit, so the server has read everything when it
    // answers (no reset can race the answer).
    let mut bytes = head("generic", &[sig.clone(), "Transfer-Encoding: chunked".into()]).into_bytes();
    let chunk = vec![b' '; 1024];
    for _ in 0..1024 {
        bytes.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        bytes.extend_from_slice(&chunk);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"1\r\n ");
    assert_eq!(raw_status(&app, bytes).await, Some(413), "chunked over 1 MiB");

    // A body longer than its declared length: only the declared bytes are the body; the rest is
    // a garbage next request (400), and the first answer is about the declared body (here a bad
    // signature: the signature was computed over the whole).
    let mut long = head("generic", &[sig.clone(), "Content-Length: 10".into()]).into_bytes();
    long.extend_from_slice(&body);
    assert_eq!(raw_status(&app, long).await, Some(401));

    assert_eq!(app.stored_rows(), 0, "nothing stored for any of them");
    assert_eq!(app.api.metrics().await.store.deliveries_total, 1, "only the short-declared one reached the signature check");
    still_serves(&app, "after-oversized").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_others_are_still_served() {
    let app = TestApp::spawn().await;
    let body = serde_json::to_vec(&payload("d-slow", "job-slow", "succeeded", 1)).unwrap();

    // A head sent one byte at a time, slowly: the receiver closes the connection (hyper's
    // header-read timeout) long before the head is complete.
    let slow_head = head("generic", &[format!("X-Agent-Signature: {}", sign(&body)), format!("Content-Length: {}", body.len())]);
    let head_client = {
        let addr = addr(&app);
        let bytes = slow_head.clone().into_bytes();
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            for (i, byte) in bytes.iter().enumerate() {
                if stream.write_all(&[*byte]).await.is_err() {
                    return (i, None);
                }
                // Did the server give up on us? (A closed connection reads 0 or errs at once.)
                let mut buf = [0u8; 512];
                match tokio::time::timeout(Duration::from_millis(400), stream.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return (i, None),
                    Ok(Ok(n)) => return (i, Some(String::from_utf8_lossy(&buf[..n]).into_owned())),
                    Err(_) => {}
                }
            }
            (bytes.len(), None)
        })
    };

    // A complete head, then the body one byte at a time: 408, nothing stored.
    let body_client = {
        let addr = addr(&app);
        let (head_bytes, body) = (slow_head.into_bytes(), body.clone());
        tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut read, mut write) = stream.into_split();
            write.write_all(&head_bytes).await.unwrap();
            let completed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let done = completed.clone();
            let writer = tokio::spawn(async move {
                for byte in body {
                    if write.write_all(&[byte]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                std::future::pending::<()>().await;
            });
            let status = read_status(&mut read).await;
            writer.abort();
            (status, completed.load(std::sync::atomic::Ordering::SeqCst))
        })
    };

    // Many idle connections that never send anything are closed too, and meanwhile the receiver
    // goes on serving others.
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(TcpStream::connect(addr(&app)).await.unwrap());
    }
    still_serves(&app, "during-slow-clients").await;

    let (sent, answer) = tokio::time::timeout(Duration::from_secs(120), head_client)
        .await
        .expect("the receiver never cut off a client sending its head byte by byte")
        .unwrap();
    assert!(sent < slow_head_len(&app, &body), "the connection was closed before the head was complete (sent {sent} bytes)");
    assert!(answer.is_none() || answer.as_deref().is_some_and(|a| a.starts_with("HTTP/1.1 408")), "{answer:?}");

    let (status, writer_done) = tokio::time::timeout(Duration::from_secs(120), body_client)
        .await
        .expect("the receiver never cut off a client sending its body byte by byte")
        .unwrap();
    assert!(!writer_done, "cut off before the body was complete");
    assert!(status == Some(408) || status.is_none(), "a body too slow is 408 (or closed): {status:?}");

    for mut stream in idle {
        let mut buf = [0u8; 64];
        let read =
            tokio::time::timeout(Duration::from_secs(120), stream.read(&mut buf)).await.expect("an idle connection was never closed");
        assert!(matches!(read, Ok(0) | Err(_)), "an idle connection is closed without an answer: {read:?}");
    }

    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE delivery_id = 'd-slow'"), 0);
    assert!(app.job("job-slow").await.is_none(), "nothing of a request that never arrived whole");
    still_serves(&app, "after-slow-clients").await;
}

fn slow_head_len(_app: &TestApp, body: &[u8]) -> usize {
    head("generic", &[format!("X-Agent-Signature: {}", sign(body)), format!("Content-Length: {}", body.len())]).len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_floods_are_refused_before_anything_is_read() {
    let app = TestApp::spawn().await;
    let body = serde_json::to_vec(&payload("d-flood", "job-flood", "succeeded", 1)).unwrap();
    let sig = format!("X-Agent-Signature: {}", sign(&body));
    let len = format!("Content-Length: {}", body.len());

    // Thousands of headers.
    let mut many: Vec<String> = (0..5000).map(|i| format!("X-Flood-{i}: {i}")).collect();
    many.extend([sig.clone(), len.clone()]);
    let mut bytes = head("generic", &many).into_bytes();
    bytes.extend_from_slice(&body);
    assert_eq!(raw_status(&app, bytes).await, Some(431), "5000 headers");

    // One enormous header (8 MiB): refused once the server's read buffer is full, and never
    // buffered whole.
    let huge = format!("X-Huge: {}", "a".repeat(8 * MIB));
    let mut bytes = head("generic", &[huge, sig.clone(), len.clone()]).into_bytes();
    bytes.extend_from_slice(&body);
    let status = raw_status(&app, bytes).await;
    assert!(matches!(status, Some(431) | None), "an 8 MiB header: {status:?}");

    // The same signature header many times over: still one signature (the first), which is valid
    // here, so the delivery is applied once; a repeat is a duplicate.
    let client = reqwest::Client::new();
    let mut request = client.post(format!("{}/hooks/generic", app.receiver)).header("content-type", "application/json").body(body.clone());
    request = request.header("x-agent-signature", sign(&body));
    for _ in 0..50 {
        request = request.header("x-agent-signature", "sha256=00");
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    assert_eq!(app.count("SELECT count(*) FROM deliveries"), 1, "only the well-formed request was stored");
    still_serves(&app, "after-header-floods").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_400_kept_as_rejected_and_never_crash() {
    let app = TestApp::spawn().await;
    let depth = 200_000; // far past serde_json's recursion limit, well under 1 MiB
    let deep_array = format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
    let deep_inside: Vec<u8> = format!(
        r#"{{"deliveryId":"d-deep","jobId":"job-deep","state":"running","seq":1,"extra":{}{}}}"#,
        "{\"a\":".repeat(depth / 10),
        "1".to_owned() + &"}".repeat(depth / 10)
    )
    .into_bytes();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("invalid UTF-8", vec![0xff, 0xfe, 0xfd, b'{', 0xc3, 0x28, b'}']),
        ("invalid UTF-8 inside a string", b"{\"deliveryId\":\"d-\xff\",\"jobId\":\"job-utf\",\"state\":\"running\",\"seq\":1}".to_vec()),
        ("lone surrogate escape", br#"{"deliveryId":"d-\ud800","jobId":"job-sur","state":"running","seq":1}"#.to_vec()),
        ("deeply nested array", deep_array),
        ("seq beyond i64", br#"{"deliveryId":"d-huge","jobId":"job-huge","state":"running","seq":9223372036854775808}"#.to_vec()),
        (
            "seq far beyond f64",
            format!(r#"{{"deliveryId":"d-e","jobId":"job-e","state":"running","seq":1{}}}"#, "0".repeat(400)).into_bytes(),
        ),
        ("seq in exponent form", br#"{"deliveryId":"d-x","jobId":"job-x","state":"running","seq":1e400}"#.to_vec()),
        ("seq a fraction", br#"{"deliveryId":"d-f","jobId":"job-f","state":"running","seq":1.5}"#.to_vec()),
        ("seq a string", br#"{"deliveryId":"d-s","jobId":"job-s","state":"running","seq":"1"}"#.to_vec()),
        ("NUL bytes", b"{\"deliveryId\":\"d-nul\",\0\"jobId\":\"j\"}".to_vec()),
        ("form encoded", b"deliveryId=d-form&jobId=job-form&state=running&seq=1".to_vec()),
        ("empty", Vec::new()),
        ("a JSON string", br#""just a string""#.to_vec()),
        ("duplicate keys", br#"{"deliveryId":"d-dup","deliveryId":"d-dup2","jobId":"j","state":"running","seq":1}"#.to_vec()),
    ];
    let total = cases.len() as i64;
    for (what, body) in cases {
        let signature = sign(&body);
        let response = app.post_hook_sig("generic", body.clone(), Some(&signature)).await;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
        let reason = answer["error"].as_str().unwrap_or_else(|| panic!("{what}: no reason in {answer}"));
        assert!(!reason.contains('\n') && reason.len() < 1000, "{what}: a one-line reason, got {reason:?}");
    }
    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE status = 'rejected'"), total, "each kept whole as rejected");
    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE status = 'accepted'"), 0);
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 0, "no job invented from a broken payload");
    let _ = &deep_inside;
    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE length(body) = 0 AND status = 'rejected'"), 1);
    let m = app.api.metrics().await;
    assert_eq!(m.store.rejected, total);
    assert_eq!(m.store.deliveries_total, total);

    // Deep nesting inside a field the payload does not have is skipped without recursion: the
    // payload itself is valid, so it is applied (and nothing overflows the stack).
    let response = app.post_hook_sig("generic", deep_inside.clone(), Some(&sign(&deep_inside))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.json::<Value>().await.unwrap()["outcome"], "applied");

    // The largest seq there is, and a negative one, are integers: accepted.
    assert_eq!(app.deliver("d-max", "job-max", "running", i64::MAX).await, Outcome::Applied);
    assert_eq!(app.deliver("d-max-2", "job-max", "running", i64::MAX).await, Outcome::Stale, "nothing is above i64::MAX");
    assert_eq!(app.deliver("d-neg", "job-neg", "queued", -5).await, Outcome::Applied);
    assert_eq!(app.deliver("d-neg-2", "job-neg", "queued", -4).await, Outcome::Applied);
    // Unicode ids survive whole.
    assert_eq!(app.deliver("d-ü-🎉", "job-日本-🎉", "running", 1).await, Outcome::Applied);
    assert_eq!(app.job_state("job-日本-🎉").await.as_str(), "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_types_do_not_change_the_answer() {
    // The signature is over the raw bytes, and the payload is read as JSON whatever the sender
    // says it is: a content type neither lets a request in nor keeps one out.
    let app = TestApp::spawn().await;
    let kinds = [
        Some("application/json"),
        Some("application/json; charset=latin1"),
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/octet-stream"),
        Some("\u{0}bogus"),
        None,
    ];
    for (i, kind) in kinds.iter().enumerate() {
        let body = serde_json::to_vec(&payload(&format!("d-ct-{i}"), &format!("job-ct-{i}"), "running", 1)).unwrap();
        let mut extra = vec![format!("X-Agent-Signature: {}", sign(&body)), format!("Content-Length: {}", body.len())];
        if let Some(kind) = kind {
            extra.push(format!("Content-Type: {kind}"));
        }
        let mut bytes = head("generic", &extra).into_bytes();
        bytes.extend_from_slice(&body);
        let status = raw_status(&app, bytes).await;
        if kind.is_some_and(|k| k.contains('\u{0}')) {
            assert_eq!(status, Some(400), "a NUL in a header value is malformed HTTP");
        } else {
            assert_eq!(status, Some(200), "content type {kind:?}");
        }
        // Unsigned with the same content type: 401 whatever it says.
        let mut extra = vec![format!("Content-Length: {}", body.len())];
        if let Some(kind) = kind.filter(|k| !k.contains('\u{0}')) {
            extra.push(format!("Content-Type: {kind}"));
        }
        let mut bytes = head("generic", &extra).into_bytes();
        bytes.extend_from_slice(&body);
        assert_eq!(raw_status(&app, bytes).await, Some(401), "unsigned, content type {kind:?}");
    }
    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE status = 'accepted'"), kinds.len() as i64 - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_of_the_wrong_length_or_form_are_401_and_counted() {
    let app = TestApp::spawn().await;
    let body = serde_json::to_vec(&payload("d-len", "job-len", "succeeded", 1)).unwrap();
    let good = sign(&body);
    let hex = good.trim_start_matches("sha256=").to_owned();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("63 hex digits", format!("sha256={}", &hex[..63]).into_bytes()),
        ("65 hex digits", format!("sha256={hex}0").into_bytes()),
        ("twice as long", format!("sha256={hex}{hex}").into_bytes()),
        ("10 KiB of hex", format!("sha256={}", "ab".repeat(5 * 1024)).into_bytes()),
        ("64 KiB", vec![b'a'; 64 * 1024]),
        ("base64 instead of hex", b"sha256=q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=".to_vec()),
        ("another algorithm", format!("sha512={hex}").into_bytes()),
        ("spaces inside", format!("sha256= {} {}", &hex[..32], &hex[32..]).into_bytes()),
        ("non-ASCII bytes", [b"sha256=".as_slice(), &[0xe9; 64]].concat()),
        ("two signatures in one", format!("sha256={hex},sha256={hex}").into_bytes()),
    ];
    let total = cases.len() as i64;
    for (what, signature) in cases {
        let mut bytes = head("generic", &[format!("Content-Length: {}", body.len())]).into_bytes();
        // Insert the raw header bytes (they may not be UTF-8) before the blank line.
        bytes.truncate(bytes.len() - 2);
        bytes.extend_from_slice(b"X-Agent-Signature: ");
        bytes.extend_from_slice(&signature);
        bytes.extend_from_slice(b"\r\n\r\n");
        bytes.extend_from_slice(&body);
        assert_eq!(raw_status(&app, bytes).await, Some(401), "{what}");
    }
    assert_eq!(app.stored_rows(), 0);
    assert_eq!(app.api.metrics().await.store.bad_signatures, total);

    // Standard Webhooks (OpenAI here) and fal: wrong lengths never verify, and fal's are refused
    // on their form alone, without fetching a key set.
    let event = openai_and_fal(&app).await;
    let now = chrono::Utc::now().timestamp().to_string();
    for signature in ["v1,", "v1,AAAA", "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=tZ1I4", "v2,abc", &"v1,a ".repeat(2000)] {
        let response = reqwest::Client::new()
            .post(format!("{}/hooks/openai", app.receiver))
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", &now)
            .header("webhook-signature", signature)
            .body(event.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "openai {signature:.20}");
    }
    let fal_body = br#"{"request_id":"req-1","status":"OK","payload":{}}"#.to_vec();
    for signature in ["", "ab", &"ab".repeat(63), &"ab".repeat(65), &"zz".repeat(64)] {
        let response = reqwest::Client::new()
            .post(format!("{}/hooks/fal", app.receiver))
            .header(fal::REQUEST_ID_HEADER, "req-1")
            .header(fal::USER_ID_HEADER, "user-1")
            .header(fal::TIMESTAMP_HEADER, &now)
            .header(fal::SIGNATURE_HEADER, signature)
            .body(fal_body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "fal signature of {} chars", signature.len());
    }
    assert_eq!(app.stored_rows(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_of_an_accepted_delivery_are_duplicates_even_all_at_once() {
    let app = TestApp::spawn().await;
    let body = serde_json::to_vec(&payload("d-replay", "job-replay", "succeeded", 3)).unwrap();
    let signature = sign(&body);
    // 64 copies at the same moment over separate connections, then 16 more later.
    let sends = (0..64).map(|_| {
        let (body, signature, url) = (body.clone(), signature.clone(), format!("{}/hooks/generic", app.receiver));
        async move {
            let response = reqwest::Client::new().post(url).header("x-agent-signature", signature).body(body).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            response.json::<HookAnswer>().await.unwrap().outcome.unwrap()
        }
    });
    let mut outcomes = futures_util::future::join_all(sends).await;
    for _ in 0..16 {
        outcomes.push(app.deliver_json(&serde_json::from_slice(&body).unwrap()).await);
    }
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Applied).count(), 1, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Duplicate).count(), 79, "{outcomes:?}");
    assert_eq!(app.count("SELECT count(*) FROM deliveries"), 1);
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 1);
    harness::wait_until("one notification", || async { app.notifier.total() == 1 }).await;
    let m = app.api.metrics().await;
    assert_eq!((m.store.deliveries_total, m.store.applied, m.store.duplicates), (80, 1, 79), "{m:?}");
    // A replay with a new delivery id but the same (terminal) content is stale, not a second
    // side effect.
    assert_eq!(app.deliver("d-replay-again", "job-replay", "succeeded", 3).await, Outcome::Stale);
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 1);
    let job = app.job("job-replay").await.unwrap();
    let outcomes: Vec<Outcome> = job.timeline.iter().map(|e| e.outcome).collect();
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Duplicate).count(), 79, "each replay is on the timeline");
}

/// `connections` clients at once, each sending `rounds` times: a body just under 1 MiB with a
/// bad signature (read whole, then 401) and a chunked body over 1 MiB (413). Returns how many of
/// each were answered as they should be.
async fn flood(app: &TestApp, connections: usize, rounds: usize) -> (usize, usize) {
    let near_limit = bytes::Bytes::from(vec![b'x'; MIB - 16]);
    let senders = (0..connections).map(|c| {
        let near_limit = near_limit.clone();
        let url = format!("{}/hooks/generic", app.receiver);
        async move {
            let client = reqwest::Client::new();
            let (mut unauthorized, mut too_large) = (0, 0);
            for round in 0..rounds {
                let response = client
                    .post(&url)
                    .header("x-agent-signature", format!("sha256={}", "0".repeat(64)))
                    .body(near_limit.clone())
                    .send()
                    .await;
                if response.is_ok_and(|r| r.status() == StatusCode::UNAUTHORIZED) {
                    unauthorized += 1;
                }
                // 1 MiB, then the one byte over the limit, sent last.
                let mut chunks: Vec<Result<bytes::Bytes, std::io::Error>> =
                    (0..16).map(|_| Ok(bytes::Bytes::from(vec![b'y'; 64 * 1024]))).collect();
                chunks.push(Ok(bytes::Bytes::from_static(b"z")));
                if raw_chunked(&url, chunks, c * 1000 + round).await == Some(413) {
                    too_large += 1;
                }
            }
            (unauthorized, too_large)
        }
    });
    let results = futures_util::future::join_all(senders).await;
    (results.iter().map(|r| r.0).sum(), results.iter().map(|r| r.1).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_a_flood_of_large_and_bad_requests() {
    const CONNECTIONS: usize = 32;
    const ROUNDS: usize = 16;
    let app = TestApp::spawn().await;
    still_serves(&app, "warm-up").await;
    let stored = app.stored_rows();

    // What is in memory at once is bounded by the connections times the 1 MiB limit: a first
    // short flood brings the process to that level (buffers, allocator arenas)...
    let idle = rss_bytes();
    assert_eq!(flood(&app, CONNECTIONS, 2).await, (CONNECTIONS * 2, CONNECTIONS * 2));
    let before = rss_bytes();
    // ...and a flood eight times as long (about 1 GB of request bodies) must not take it higher
    // by more than a generous ceiling.
    let started = Instant::now();
    let (unauthorized, too_large) = flood(&app, CONNECTIONS, ROUNDS).await;
    let after = rss_bytes();
    eprintln!(
        "flood: {unauthorized} x 401 (1 MiB bodies), {too_large} x 413 in {:.1?}; RSS idle {} MB, after a short flood {} MB, after the long one {} MB",
        started.elapsed(),
        idle / MIB as u64,
        before / MIB as u64,
        after / MIB as u64
    );
    assert_eq!(unauthorized, CONNECTIONS * ROUNDS, "every near-limit body with a bad signature is 401");
    assert_eq!(too_large, CONNECTIONS * ROUNDS, "every oversized chunked body is 413");
    let grown = after.saturating_sub(idle);
    assert!(grown < 200 * MIB as u64, "RSS grew by {} MB under the flood (ceiling 200 MB)", grown / MIB as u64);
    assert_eq!(app.stored_rows(), stored, "nothing of the flood is stored");
    assert_eq!(app.api.metrics().await.store.bad_signatures, (CONNECTIONS * (ROUNDS + 2)) as i64);
    still_serves(&app, "after-flood").await;
}

/// POSTs a chunked body over a raw socket (the chunks as given); returns the answer's status.
async fn raw_chunked(url: &str, chunks: Vec<Result<bytes::Bytes, std::io::Error>>, n: usize) -> Option<u16> {
    let addr = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let stream = TcpStream::connect(addr).await.ok()?;
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        let head = format!(
            "POST /hooks/generic HTTP/1.1\r\nHost: x\r\nX-Agent-Signature: sha256={}\r\nTransfer-Encoding: chunked\r\nX-N: {n}\r\n\r\n",
            "0".repeat(64)
        );
        if write.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let chunks: Vec<bytes::Bytes> = chunks.into_iter().flatten().collect();
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.into_iter().enumerate() {
            // The last chunk's closing CRLF is never sent: the server has read all we sent.
            let end: &[u8] = if i == last { b"" } else { b"\r\n" };
            let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, end].concat();
            if write.write_all(&framed).await.is_err() {
                return;
            }
        }
        std::future::pending::<()>().await;
    });
    let status = read_status(&mut read).await;
    writer.abort();
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_is_json_with_the_contract_shape() {
    // Whatever goes wrong, the sender gets a JSON answer it can log: {"error": "..."} or
    // {"outcome": "..."}.
    let app = TestApp::spawn().await;
    let body = serde_json::to_vec(&payload("d-shape", "job-shape", "running", 1)).unwrap();
    let checks: Vec<(reqwest::Response, StatusCode)> = vec![
        (app.post_hook_sig("generic", body.clone(), None).await, StatusCode::UNAUTHORIZED),
        (app.post_hook_sig("generic", b"{".to_vec(), Some(&sign(b"{"))).await, StatusCode::BAD_REQUEST),
        (app.post_hook_sig("nope", body.clone(), Some(&sign(&body))).await, StatusCode::NOT_FOUND),
        (app.post_hook_sig("generic", body.clone(), Some(&sign(&body))).await, StatusCode::OK),
        (app.post_hook_sig("generic", body.clone(), Some(&sign(&body))).await, StatusCode::OK),
    ];
    for (response, expected) in checks {
        assert_eq!(response.status(), expected);
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("application/json"), "{expected}: JSON");
        let answer: Value = response.json().await.unwrap();
        let keys: Vec<&String> = answer.as_object().unwrap().keys().collect();
        if expected == StatusCode::OK {
            assert_eq!(keys, ["outcome"], "{answer}");
        } else {
            assert_eq!(keys, ["error"], "{answer}");
        }
    }
    let _ = json!({});
}

/// The receiver's loop keeps at most `max_connections` open: a flood of idle connections cannot
/// take more, the next connection waits in the OS's queue (not refused), and it is served as soon
/// as one of the open ones closes.
#[tokio::test]
async fn open_connections_are_capped_and_the_next_one_waits_its_turn() {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/", get(|| async { "ok" }));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(nevermiss_engine::receiver::serve(listener, app, shutdown.clone(), 2));

    // Two idle connections take both slots (an idle connection sends nothing, as a slow client).
    let idle_a = TcpStream::connect(addr).await.unwrap();
    let idle_b = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    // A third connects (the OS queues it) and sends a whole request: no answer while both are open.
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 512];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf)).await;
    assert!(early.is_err(), "a connection past the cap was served at once: {early:?}");

    // One idle connection closes: the third is accepted and answered.
    drop(idle_a);
    assert_eq!(read_status(&mut third).await, Some(200), "the waiting connection was not served after a slot freed");

    // The slot of a closed connection is given back: after the third closes, a fourth is served.
    drop(third);
    let mut fourth = TcpStream::connect(addr).await.unwrap();
    fourth.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    assert_eq!(read_status(&mut fourth).await, Some(200));

    drop(idle_b);
    shutdown.cancel();
    tokio::time::timeout(WAIT, server).await.expect("the receiver stops at shutdown").unwrap();
}

/// `webhook-timestamp` (Standard Webhooks: OpenAI, Replicate, Anthropic) and fal's timestamp at
/// the ends of i64's range: refused as too old or too new (401), never a panic of the handler (a
/// debug build checks overflow; a panic there is a reset connection, not an answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_at_the_ends_of_the_i64_range_are_401_not_a_panic() {
    let app = TestApp::spawn().await;
    let event = openai_and_fal(&app).await;
    let fal_body = br#"{"request_id":"req-1","status":"OK","payload":{}}"#.to_vec();
    for timestamp in [i64::MIN.to_string(), i64::MAX.to_string()] {
        let response = reqwest::Client::new()
            .post(format!("{}/hooks/openai", app.receiver))
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", &timestamp)
            .header("webhook-signature", "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=")
            .body(event.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("openai, webhook-timestamp {timestamp}: no answer ({e})"));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "openai, webhook-timestamp {timestamp}");
        let response = reqwest::Client::new()
            .post(format!("{}/hooks/fal", app.receiver))
            .header(fal::REQUEST_ID_HEADER, "req-1")
            .header(fal::USER_ID_HEADER, "user-1")
            .header(fal::TIMESTAMP_HEADER, &timestamp)
            .header(fal::SIGNATURE_HEADER, "ab".repeat(64))
            .body(fal_body.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("fal, timestamp {timestamp}: no answer ({e})"));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "fal, timestamp {timestamp}");
    }
    assert_eq!(app.stored_rows(), 0);
    still_serves(&app, "d-after-extreme-timestamps").await;
}

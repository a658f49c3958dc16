//! See why a delivery was refused: `GET /api/refused` keeps the last 200 requests refused before
//! parsing (bad signature, too old, missing header, unknown provider, not verifiable), with
//! credentials masked and the likely cause in words; a flood of 10,000 forged requests to a real
//! `nevermiss serve` leaves exactly 200 rows and its memory flat.

use std::time::Duration;

use nevermiss_engine::api::RefusedList;
use nevermiss_engine::metrics::Metrics;
use nevermiss_engine::store::refused::{Refusal, RefusalKind};
use serde_json::json;

use crate::harness::app::count;
use crate::harness::serve_child::{ServeChild, ServeOptions};
use crate::harness::signing::now_secs;
use crate::harness::{ApiClient, TestApp};
use reqwest::StatusCode;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn refused(api: &ApiClient) -> RefusedList {
    api.get("/api/refused", StatusCode::OK).await
}

fn newest(list: &RefusedList) -> &Refusal {
    list.refused.first().expect("a refused request is kept")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refused_request_is_kept_masked_with_its_likely_cause() {
    let mut app = TestApp::spawn_unconfigured().await;
    app.configure("openai", "http://127.0.0.1:9", None, Some(SECRET)).await;
    let body = json!({"id": "evt_1", "object": "event", "type": "response.completed", "created_at": 1, "data": {"id": "resp_1"},
                      "api_key": "sk-do-not-keep"});
    let bytes = serde_json::to_vec(&body).unwrap();
    let list = || refused(&app.api);

    // A missing header, with a hint when the request carries another provider's headers.
    let headers = [("authorization", "Bearer do-not-keep-me".to_owned()), ("x-agent-signature", "sha256=00".to_owned())];
    let response = app.post_hook("openai", bytes.clone(), &headers).await;
    assert_eq!(response.status(), 401);
    let all = list().await;
    let r = newest(&all);
    assert_eq!((r.kind, r.status, r.provider.as_str()), (RefusalKind::MissingHeader, 401, "openai"));
    assert!(r.cause.contains("webhook-id") && r.cause.contains("/hooks/generic"), "{}", r.cause);
    assert_eq!(r.headers["authorization"], "••••", "credentials in headers are masked");
    assert!(!r.body.contains("sk-do-not-keep") && r.body.contains("resp_1"), "credentials in the body are masked: {}", r.body);
    assert_eq!(r.body_length, bytes.len() as i64);

    // Too old: the clock skew, in words.
    let (status, _) = app.sw_hook_at("openai", SECRET, "wh_old", now_secs() - 1000, &bytes).await;
    assert_eq!(status, 401);
    let all = list().await;
    let r = newest(&all);
    assert_eq!(r.kind, RefusalKind::Expired);
    assert!(r.cause.contains("16 min") && r.cause.contains("in the past"), "{}", r.cause);
    let (status, _) = app.sw_hook_at("openai", SECRET, "wh_future", now_secs() + 7230, &bytes).await;
    assert_eq!(status, 401);
    let all = list().await;
    assert!(newest(&all).cause.contains("2 h 0 min in the future"), "{}", newest(&all).cause);

    // A wrong secret, then the right secret written in the wrong form.
    let (status, _) = app.sw_hook("openai", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "wh_forged", &body).await;
    assert_eq!(status, 401);
    let all = list().await;
    assert_eq!(newest(&all).kind, RefusalKind::BadSignature);
    assert!(newest(&all).cause.contains("does not match"), "{}", newest(&all).cause);
    app.configure("openai", "http://127.0.0.1:9", None, Some(SECRET.strip_prefix("whsec_").unwrap())).await;
    let (status, _) = app.sw_hook("openai", SECRET, "wh_form", &body).await;
    assert_eq!(status, 401);
    let all = list().await;
    assert!(newest(&all).cause.contains("wrong form") && newest(&all).cause.contains("whsec_"), "{}", newest(&all).cause);

    // A body changed on the way.
    let headers = [
        ("webhook-id", "wh_gz".to_owned()),
        ("webhook-timestamp", now_secs().to_string()),
        ("webhook-signature", "v1,AAAA".to_owned()),
        ("content-encoding", "gzip".to_owned()),
    ];
    assert_eq!(app.post_hook("openai", bytes.clone(), &headers).await.status(), 401);
    assert!(newest(&list().await).cause.contains("Content-Encoding: gzip"));

    // An unknown provider (a mistyped URL), and a provider with no secret.
    assert_eq!(app.post_hook("openia", bytes.clone(), &[]).await.status(), 404);
    let all = list().await;
    assert_eq!((newest(&all).kind, newest(&all).provider.as_str()), (RefusalKind::UnknownProvider, "openia"));
    assert!(newest(&all).cause.contains("/hooks/openai"), "{}", newest(&all).cause);
    let (status, _) = app.sw_hook("anthropic", SECRET, "m_1", &body).await;
    assert_eq!(status, 503);
    let all = list().await;
    assert_eq!((newest(&all).kind, newest(&all).status), (RefusalKind::NotConfigured, 503));

    // Newest first; nothing of a refused request reached the jobs.
    assert_eq!(all.refused.len(), 8);
    assert!(all.refused.windows(2).all(|w| w[0].id > w[1].id));
    assert_eq!(all.kept, 200);
    assert!(app.api.job("openai", "resp_1").await.is_none());
    app.shutdown().await;
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Sends `n` forged generic deliveries over `workers` keep-alive connections; each must be 401.
async fn flood(http: &reqwest::Client, receiver: &str, from: usize, n: usize, workers: usize) {
    let mut tasks = Vec::new();
    for w in 0..workers {
        let http = http.clone();
        let url = format!("{receiver}/hooks/generic");
        tasks.push(tokio::spawn(async move {
            for i in (from + w..from + n).step_by(workers) {
                let body = format!(r#"{{"deliveryId":"forged-{i}","jobId":"job-{i}","state":"succeeded","seq":1}}"#);
                let response = http.post(&url).header("x-agent-signature", format!("sha256={:064x}", i)).body(body).send().await.unwrap();
                assert_eq!(response.status(), 401);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// 10,000 forged requests: exactly 200 refused rows are left, the metrics count all of them, and
/// the process's resident memory after 10,000 is close to what it was after 1,000 (a memory
/// check with a generous margin, not a timing assertion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_flood_leaves_exactly_200_rows_and_memory_flat() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let server = ServeChild::start(&ServeOptions {
        data_dir: &data_dir,
        log: &dir.path().join("serve.log"),
        receiver_addr: "127.0.0.1:0".parse().unwrap(),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        env: vec![("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), "the-real-secret".into())],
        rust_log: "warn",
    })
    .await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();

    flood(&http, &server.receiver, 0, 1_000, 8).await;
    let after_1k = vm_rss_kib(server.pid());
    flood(&http, &server.receiver, 1_000, 9_000, 8).await;
    let after_10k = vm_rss_kib(server.pid());

    let db = server.db();
    assert_eq!(count(&db, "SELECT count(*) FROM refused"), 200, "the table is held at its cap");
    assert_eq!(count(&db, "SELECT min(id) FROM refused"), 10_000 - 199, "the newest 200 are kept");
    assert_eq!(count(&db, "SELECT count(*) FROM deliveries") + count(&db, "SELECT count(*) FROM jobs"), 0);
    let list: RefusedList = refused(&server.api).await;
    assert_eq!(list.refused.len(), 200);
    assert!(list.refused.iter().all(|r| r.kind == RefusalKind::BadSignature));
    let metrics: Metrics = server.api.metrics().await;
    assert_eq!(metrics.store.bad_signatures, 10_000);

    eprintln!("VmRSS after 1,000 forged requests: {after_1k} KiB; after 10,000: {after_10k} KiB");
    assert!(
        after_10k <= after_1k * 3 / 2 + 8 * 1024,
        "memory grew with the flood: {after_1k} KiB after 1,000, {after_10k} KiB after 10,000"
    );
    assert!(server.stop().await, "`nevermiss serve` stops cleanly after the flood");
}

/// The cap in-process (no child process needed): 1,000 forged requests leave the newest 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_holds_in_process() {
    let mut app = TestApp::spawn_unconfigured().await;
    app.engine().services.secrets.set("generic", nevermiss_engine::providers::SecretKind::WebhookSecret, Some("the-real-secret")).unwrap();
    flood(&app.http, &app.receiver, 0, 1_000, 8).await;
    let (rows, min_id): (i64, i64) = app
        .engine()
        .services
        .store
        .read(|c| c.query_row("SELECT count(*), min(id) FROM refused", [], |r| Ok((r.get(0)?, r.get(1)?))))
        .await
        .unwrap();
    assert_eq!((rows, min_id), (200, 801));
    assert_eq!(refused(&app.api).await.refused.len(), 200);
    app.shutdown().await;
}

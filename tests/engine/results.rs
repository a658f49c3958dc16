//! What a job produced and its links (contract §6), through the generic contract on both
//! stores: the result kept with the job (bounded, masked), replaced only by an adopted event and
//! kept by one that says nothing of it, filled in by a late event when unknown; the same by webhook
//! and by polling alone; the webhook channel's `job.finished` carrying it.

use crate::harness;

use harness::{on_both_stores, TestApp};
use nevermiss_engine::store::job::{JobResult, JobState, Outcome, Source};
use serde_json::{json, Value};

fn delivery(delivery_id: &str, job_id: &str, state: &str, seq: i64, result: Option<Value>) -> Value {
    let mut body = json!({ "deliveryId": delivery_id, "jobId": job_id, "state": state, "seq": seq });
    if let Some(result) = result {
        body["result"] = result;
    }
    body
}

fn text(t: &str) -> Option<JobResult> {
    Some(JobResult { text: Some(t.to_owned()), urls: vec![], image: None })
}

async fn result_of(app: &TestApp, job_id: &str) -> Option<JobResult> {
    app.job(job_id).await.expect("the job").job.result
}

on_both_stores!(spawn_on,
/// An adopted event replaces the result, one without a result keeps it, a stale one never
/// replaces it but fills it in when none is known; a result is bounded and masked.
async fn a_result_moves_only_with_the_job_and_is_kept_bounded(app) {
    assert_eq!(app.deliver_json(&delivery("d-1", "j", "running", 1, Some(json!({"text": "first half"})))).await, Outcome::Applied);
    assert_eq!(result_of(&app, "j").await, text("first half"));
    assert_eq!(app.deliver_json(&delivery("d-2", "j", "running", 2, None)).await, Outcome::Applied);
    assert_eq!(result_of(&app, "j").await, text("first half"), "an adopted event without a result keeps it");
    assert_eq!(app.deliver_json(&delivery("d-3", "j", "succeeded", 3, Some(json!({"text": "all of it"})))).await, Outcome::Applied);
    assert_eq!(result_of(&app, "j").await, text("all of it"), "an adopted event replaces it");
    assert_eq!(app.deliver_json(&delivery("d-4", "j", "running", 2, Some(json!({"text": "stale"})))).await, Outcome::Stale);
    assert_eq!(result_of(&app, "j").await, text("all of it"), "a stale event does not replace it");

    // A job whose end said nothing of its result: a later event that does fills it in.
    assert_eq!(app.deliver_json(&delivery("d-5", "k", "succeeded", 1, None)).await, Outcome::Applied);
    assert_eq!(result_of(&app, "k").await, None);
    assert_eq!(app.deliver_json(&delivery("d-6", "k", "succeeded", 2, Some(json!({"text": "late but known"})))).await, Outcome::Stale);
    assert_eq!(result_of(&app, "k").await, text("late but known"));

    // Bounded: a long text cut, a few web URLs of bounded length, credentials masked.
    let urls: Vec<String> = (0..20).map(|i| format!("https://files.example.com/{i}.png")).collect();
    let long = format!("{} sk-proj-0123456789abcdef", "word ".repeat(2_000));
    let result = json!({"text": long, "urls": urls, "image": "javascript:alert(1)"});
    assert_eq!(app.deliver_json(&delivery("d-7", "big", "succeeded", 1, Some(result))).await, Outcome::Applied);
    let kept = result_of(&app, "big").await.expect("a result");
    assert_eq!(kept.text.as_deref().unwrap().chars().count(), nevermiss_engine::providers::result::TEXT_MAX_CHARS + 1);
    assert_eq!(kept.urls.len(), nevermiss_engine::providers::result::URLS_MAX);
    assert_eq!(kept.image, None, "only web links are kept");
    let stored: i64 = app.count("SELECT max(length(result)) FROM jobs");
    assert!(stored < 2_000, "the stored result is small: {stored} bytes");
    let masked = app.deliver_json(&delivery("d-8", "key", "succeeded", 1, Some(json!({"text": "token sk-proj-0123456789abcdef here"})))).await;
    assert_eq!(masked, Outcome::Applied);
    assert_eq!(result_of(&app, "key").await, text("token •••• here"));
});

/// The same result by webhook and by polling alone: the status answer carries `result` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_is_the_same_by_webhook_and_by_polling() {
    use axum::routing::get;
    let result = json!({"text": "3 files written", "urls": ["https://files.example.com/report.txt"], "image": "https://files.example.com/chart.png"});
    let answer = json!({"jobId": "by-poll", "state": "succeeded", "seq": 2, "result": result});
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stand_in = axum::Router::new().route("/jobs/by-poll", get(move || async move { axum::Json(answer) }));
    tokio::spawn(async move { axum::serve(listener, stand_in).await });

    let mut app = TestApp::spawn().await;
    app.configure("generic", &base, Some("key"), Some(harness::SECRET)).await;
    assert_eq!(app.deliver_json(&delivery("d-1", "by-hook", "succeeded", 2, Some(result.clone()))).await, Outcome::Applied);
    app.api.track_job("generic", "by-poll").await;
    let polled = app.api.wait_for_state("generic", "by-poll", JobState::Succeeded).await;
    let pushed = app.api.job_now("generic", "by-hook").await;
    assert_eq!((pushed.job.terminal_source, polled.job.terminal_source), (Some(Source::Push), Some(Source::Pull)));
    let expected = Some(JobResult {
        text: Some("3 files written".into()),
        urls: vec!["https://files.example.com/report.txt".into()],
        image: Some("https://files.example.com/chart.png".into()),
    });
    assert_eq!(pushed.job.result, expected);
    assert_eq!(polled.job.result, expected);
    app.shutdown().await;
}

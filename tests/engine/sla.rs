//! The SLA per day (`completions_by_day` in METRICS), with real timestamps: measured from the
//! provider's own start time when it gives one (a Replicate prediction's `created_at`, a generic
//! sender's `createdAt`), not from when NeverMiss first heard of the job; a job first heard of
//! already finished with no start time is counted apart (`without_start`), never "within".

use chrono::{Duration as Span, SecondsFormat, Utc};
use nevermiss_engine::metrics::Metrics;
use nevermiss_engine::store::metrics::DailyCompletions;
use serde_json::json;

use crate::harness::TestApp;
use nevermiss_engine::store::job::{JobState, Outcome, Source};

const REPLICATE_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const GENERIC_SECRET: &str = "sla-generic-secret";

fn at(offset: Span) -> String {
    (Utc::now() + offset).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Today's completions (UTC), read into the API's own type.
async fn today(app: &TestApp) -> DailyCompletions {
    let metrics: Metrics = app.api.metrics().await;
    let day = Utc::now().format("%Y-%m-%d").to_string();
    metrics.store.completions_by_day.into_iter().find(|d| d.day == day).unwrap_or_else(|| DailyCompletions { day, ..Default::default() })
}

/// A signed generic delivery; returns its outcome.
async fn generic(app: &TestApp, body: serde_json::Value) -> String {
    let bytes = serde_json::to_vec(&body).unwrap();
    let response = app
        .http
        .post(format!("{}/hooks/generic", app.receiver))
        .header("x-agent-signature", nevermiss_engine::providers::generic::sign(GENERIC_SECRET.as_bytes(), &bytes))
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = response.json().await.unwrap();
    answer["outcome"].as_str().unwrap().to_owned()
}

/// A prediction created 10 minutes before NeverMiss hears of it (its `processing` webhook), which
/// then finishes at once: by NeverMiss's first sight it took a second; by Replicate's own
/// `created_at` it took 10 minutes, past a 5-minute SLA. It is a breach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicate_prediction_created_10_minutes_before_its_webhook_breaches_a_5_minute_sla() {
    let mut app = TestApp::spawn_unconfigured().await;
    app.configure("replicate", "http://127.0.0.1:9", None, Some(REPLICATE_SECRET)).await;
    app.api.put_settings(&json!({"sla_secs": 300})).await;

    let created = at(Span::minutes(-10));
    let prediction = |status: &str, completed: Option<String>| {
        crate::harness::conformance::fixture("replicate/prediction")
            .id("p-sla")
            .status(status)
            .set("model", "owner/model")
            .set("created_at", created.clone())
            .set("started_at", at(Span::minutes(-9)))
            .set("completed_at", completed)
            .value()
    };
    assert_eq!(app.sw_deliver("replicate", REPLICATE_SECRET, "msg_sla_1", &prediction("processing", None)).await, Outcome::Applied);
    assert_eq!(
        app.sw_deliver("replicate", REPLICATE_SECRET, "msg_sla_2", &prediction("succeeded", Some(at(Span::zero())))).await,
        Outcome::Applied
    );

    let day = today(&app).await;
    assert_eq!((day.finished, day.within_sla, day.without_start), (1, 0, 0), "{day:?}");
    app.shutdown().await;
}

/// Generic jobs first heard of already finished: with `createdAt` 1 minute earlier, within a
/// 5-minute SLA; with `createdAt` 10 minutes earlier, a breach; with no `createdAt`, counted
/// apart (not within, not a breach).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_jobs_are_measured_from_created_at_and_without_it_counted_apart() {
    let mut app = TestApp::spawn_unconfigured().await;
    app.configure("generic", "http://127.0.0.1:9", None, Some(GENERIC_SECRET)).await;
    app.api.put_settings(&json!({"sla_secs": 300})).await;

    let done = |job: &str, created: Option<String>| {
        let mut body =
            json!({"deliveryId": format!("{job}-d"), "jobId": job, "state": "succeeded", "seq": 2, "finishedAt": at(Span::zero())});
        if let Some(created) = created {
            body["createdAt"] = json!(created);
        }
        body
    };
    assert_eq!(generic(&app, done("quick", Some(at(Span::minutes(-1))))).await, "applied");
    let day = today(&app).await;
    assert_eq!((day.finished, day.within_sla, day.without_start), (1, 1, 0), "createdAt 1 minute before: within; {day:?}");

    assert_eq!(generic(&app, done("slow", Some(at(Span::minutes(-10))))).await, "applied");
    let day = today(&app).await;
    assert_eq!((day.finished, day.within_sla, day.without_start), (2, 1, 0), "createdAt 10 minutes before: a breach; {day:?}");

    assert_eq!(generic(&app, done("unknown-start", None)).await, "applied");
    let day = today(&app).await;
    assert_eq!((day.finished, day.within_sla, day.without_start), (3, 1, 1), "no start: counted apart; {day:?}");

    // Seen unfinished first, with `createdAt` on a later event only: the earliest start known counts.
    assert_eq!(generic(&app, json!({"deliveryId": "late-1", "jobId": "late", "state": "running", "seq": 1})).await, "applied");
    assert_eq!(generic(&app, done("late", Some(at(Span::minutes(-10))))).await, "applied");
    let day = today(&app).await;
    assert_eq!((day.finished, day.within_sla, day.without_start), (4, 1, 1), "measured from createdAt, not first heard; {day:?}");
    app.shutdown().await;
}

/// A generic job tracked now and learned finished by polling, whose status answer says it was
/// created 10 minutes ago: measured from that `createdAt`, not from the tracking, so a breach of a
/// 5-minute SLA. The status API is a local stand-in speaking the generic contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_generic_job_is_measured_from_the_status_answers_created_at() {
    use axum::routing::get;
    let created = at(Span::minutes(-10));
    let answer = json!({"jobId": "polled", "state": "succeeded", "seq": 2, "createdAt": created, "finishedAt": at(Span::zero())});
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stand_in = axum::Router::new().route("/jobs/polled", get(move || async move { axum::Json(answer) }));
    tokio::spawn(async move { axum::serve(listener, stand_in).await });

    let mut app = TestApp::spawn_unconfigured().await;
    app.configure("generic", &base, Some("key"), Some(GENERIC_SECRET)).await;
    app.api.put_settings(&json!({"sla_secs": 300})).await;
    app.api.track_job("generic", "polled").await;
    app.api.reconcile().await;
    let job = app.api.wait_for_state("generic", "polled", JobState::Succeeded).await;
    assert_eq!(job.job.terminal_source, Some(Source::Pull));

    let day = today(&app).await;
    assert_eq!((day.finished, day.within_sla, day.by_pull, day.without_start), (1, 0, 1, 0), "{day:?}");
    app.shutdown().await;
}

/// A job whose sender says it was created 90 minutes ago, first heard of now and ended at once,
/// took 90 minutes: its notification and its page (`started_at`) say so, not the seconds NeverMiss
/// has known of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_heard_of_late_took_as_long_as_its_sender_says() {
    let app = TestApp::spawn_unconfigured().await;
    app.configure("generic", "http://127.0.0.1:9", None, Some(GENERIC_SECRET)).await;
    let created = at(Span::minutes(-90));
    let delivery =
        |id: &str, state: &str, seq: i64| json!({"deliveryId": id, "jobId": "late-1", "state": state, "seq": seq, "createdAt": created});
    assert_eq!(generic(&app, delivery("l-1", "running", 1)).await, "applied");
    assert_eq!(generic(&app, delivery("l-2", "succeeded", 2)).await, "applied");
    let job = app.api.job_now("generic", "late-1").await.job;
    assert_eq!(job.started_at.as_deref().map(|s| &s[..16]), Some(&created[..16]), "the sender's start is on the job");

    let identity = "nevermiss:generic:late-1:terminal";
    crate::harness::wait_until("the end is shown", || async { app.notifier.count(identity) > 0 }).await;
    let shown = app.notifier.shown();
    assert!(shown.iter().any(|(_, body)| body.contains("1h 30m") || body.contains("1h 29m")), "it took 90 minutes: {shown:?}");
}

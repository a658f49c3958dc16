//! Expected durations: the durations of the last succeeded jobs of each kind, kept in a
//! bounded window and removed by retention; a job's `expected_ms` in the API; and "slower than
//! usual", which replaces the fixed stuck threshold once a kind has ten finished jobs, one alert
//! per job. Real deliveries to the in-process engine's receiver (generic jobs with a `kind`), real
//! reconcile passes through the admin API, on SQLite and on PostgreSQL.

use chrono::{Duration as Span, SecondsFormat, Utc};
use serde_json::{json, Value};

use crate::harness::on_both_stores;
use crate::harness::waiting::wait_until;
use crate::harness::TestApp;
use nevermiss_engine::retention::{self, Policy, Sweep};
use nevermiss_engine::store::job::Outcome;
use nevermiss_engine::store::{durations, groups};

fn at(time: chrono::DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A generic job of `kind` that started `started` before `now`, as a delivery.
fn job(delivery: &str, job_id: &str, kind: &str, state: &str, seq: i64, started: chrono::DateTime<Utc>) -> Value {
    json!({"deliveryId": delivery, "jobId": job_id, "kind": kind, "state": state, "seq": seq, "createdAt": at(started)})
}

/// `n` jobs of `kind` seen running, then finished, each having taken `took(i)`.
async fn finish_jobs(app: &TestApp, kind: &str, n: usize, took: impl Fn(usize) -> Span) {
    let now = Utc::now();
    for i in 0..n {
        let id = format!("{kind}-{i}");
        let started = now - took(i) - Span::seconds(1);
        assert_eq!(app.deliver_json(&job(&format!("{id}-run"), &id, kind, "running", 1, started)).await, Outcome::Applied);
        let mut done = job(&format!("{id}-end"), &id, kind, "succeeded", 2, started);
        done["finishedAt"] = json!(at(now - Span::seconds(1)));
        assert_eq!(app.deliver_json(&done).await, Outcome::Applied);
    }
}

/// Only lateness alerts reach the desktop (finished jobs would be summed up with them).
async fn only_lateness_alerts(app: &TestApp) {
    app.api.put_channel("desktop", &json!({"kind": "desktop", "outcomes": ["stuck"]})).await;
}

async fn age(app: &TestApp, job_id: &str, ms: i64) {
    let store = app.engine().services.store.clone();
    let sql = format!("UPDATE jobs SET created_at = created_at - {ms} WHERE job_id = '{job_id}'");
    store.write(move |tx| tx.execute(&sql, [])).await.unwrap();
}

on_both_stores!(spawn_on,
/// Ten renders took a minute each: "usually 1m 0s", slower than usual past 90 s (the 95th
/// percentile, 60 s, times 1.5). A render running 80 s raises nothing; once it has run 100 s it
/// raises one "slower than usual" alert, once, and never a stuck alert after it, even past the
/// fixed threshold. A kind with two finished jobs keeps the fixed threshold: a resize started ten
/// minutes ago raises nothing until NeverMiss has known it for longer than the threshold, then one
/// stuck alert.
async fn after_ten_jobs_of_a_kind_a_running_one_past_the_rule_is_slower_than_usual_once(app) {
    only_lateness_alerts(&app).await;
    finish_jobs(&app, "render", 10, |_| Span::seconds(60)).await;
    finish_jobs(&app, "resize", 2, |_| Span::seconds(60)).await;
    let windows = app.read(durations::windows).await;
    assert_eq!(windows["generic/render"], vec![60_000; 10]);
    assert_eq!(windows["generic/resize"], vec![60_000; 2]);

    let now = Utc::now();
    assert_eq!(app.deliver_json(&job("late-1", "render-late", "render", "running", 1, now - Span::seconds(80))).await, Outcome::Applied);
    assert_eq!(app.deliver_json(&job("resize-1", "resize-late", "resize", "running", 1, now - Span::minutes(10))).await, Outcome::Applied);
    let report = app.api.reconcile().await;
    assert_eq!(report.stuck_alerts, 0, "80 s is within the rule, and ten minutes within the fixed threshold: {report:?}");

    // The provider says it started earlier: it has run 100 s.
    let earlier = job("late-2", "render-late", "render", "running", 2, Utc::now() - Span::seconds(100));
    assert_eq!(app.deliver_json(&earlier).await, Outcome::Applied);
    let report = app.api.reconcile().await;
    assert_eq!(report.stuck_alerts, 1, "{report:?}");
    let slow = "nevermiss:generic:render-late:slow";
    wait_until("the slower-than-usual alert is shown", || async { app.notifier.count(slow) == 1 }).await;
    let (title, body) = app.notifier.shown().into_iter().find(|(title, _)| title.contains("render-late")).unwrap();
    assert_eq!(title, "Slower than usual: render-late");
    assert!(body.contains("render is slower than usual:") && body.ends_with("usually 1m 0s"), "{body}");

    // Past the fixed threshold too: still one alert for the job, and none stuck.
    age(&app, "render-late", 3_600_000).await;
    assert_eq!(app.api.reconcile().await.stuck_alerts, 0);
    let metrics = app.api.metrics().await;
    assert_eq!((metrics.store.slow_alerts, metrics.store.stuck_alerts), (1, 0));
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE job_id = 'render-late'"), 1, "one alert per job");

    // Two resizes are not enough history: the fixed threshold, from when NeverMiss heard of it.
    age(&app, "resize-late", 3_600_000).await;
    assert_eq!(app.api.reconcile().await.stuck_alerts, 1);
    let metrics = app.api.metrics().await;
    assert_eq!((metrics.store.slow_alerts, metrics.store.stuck_alerts), (1, 1));
    wait_until("the stuck alert is shown", || async { app.notifier.count("nevermiss:generic:resize-late:stuck") == 1 }).await;
    assert_eq!(app.notifier.count(slow), 1);
});

on_both_stores!(spawn_on,
/// A success first heard of finished, with neither its kind nor its start (as an OpenAI response
/// is by its thin webhook), adds its duration once a later, stale event says both (as the
/// webhook's follow-up read does), measured from the provider's start; once, however often it is
/// said again. A failure never adds one.
async fn a_success_whose_kind_comes_after_its_end_adds_its_duration_once(app) {
    let now = Utc::now();
    let ended = at(now - Span::seconds(1));
    for (id, state) in [("thin-ok", "succeeded"), ("thin-failed", "failed")] {
        let end = json!({"deliveryId": format!("{id}-end"), "jobId": id, "state": state, "seq": 2, "finishedAt": ended});
        assert_eq!(app.deliver_json(&end).await, Outcome::Applied);
    }
    assert!(app.read(durations::windows).await.is_empty(), "no kind, no start: nothing to measure yet");

    for (id, delivery) in [("thin-ok", "a"), ("thin-ok", "b"), ("thin-failed", "a")] {
        let read = job(&format!("{id}-read-{delivery}"), id, "answer", "running", 1, now - Span::seconds(46));
        assert_eq!(app.deliver_json(&read).await, Outcome::Stale);
    }
    let windows = app.read(durations::windows).await;
    assert_eq!(windows.get("generic/answer"), Some(&vec![45_000]), "{windows:?}");
    let job = app.api.job_now("generic", "thin-ok").await.job;
    assert_eq!(job.kind.as_deref(), Some("generic/answer"));
});

on_both_stores!(spawn_on,
/// A job seen running without a kind that says its kind with its end adds its duration once: the
/// end measures it, and the kind learned in the same update is not a late kind (SQLite V16,
/// PostgreSQL V11; each added it a second time before).
async fn a_job_that_ends_and_says_its_kind_at_once_adds_its_duration_once(app) {
    let now = Utc::now();
    let started = now - Span::seconds(46);
    let mut running = job("once-run", "once", "answer", "running", 1, started);
    running.as_object_mut().unwrap().remove("kind");
    assert_eq!(app.deliver_json(&running).await, Outcome::Applied);
    assert!(app.api.job_now("generic", "once").await.job.kind.is_none(), "no kind while it runs");
    let mut done = job("once-end", "once", "answer", "succeeded", 2, started);
    done["finishedAt"] = json!(at(now - Span::seconds(1)));
    assert_eq!(app.deliver_json(&done).await, Outcome::Applied);
    let windows = app.read(durations::windows).await;
    assert_eq!(windows.get("generic/answer"), Some(&vec![45_000]), "{windows:?}");
});

on_both_stores!(spawn_on,
/// `expected_ms` is how long a job of its kind usually takes (the median of its durations), in the
/// job, the list and a group's jobs; null for a kind with too little history and for a job of no
/// known kind.
async fn expected_ms_comes_from_the_kinds_history_and_is_null_without(app) {
    finish_jobs(&app, "crawl", 5, |i| Span::seconds(10 * (i as i64 + 1))).await;
    finish_jobs(&app, "thumb", 2, |_| Span::seconds(5)).await;
    let now = Utc::now();
    let mut crawl = job("c-1", "crawl-now", "crawl", "running", 1, now);
    crawl["group"] = json!("nightly");
    assert_eq!(app.deliver_json(&crawl).await, Outcome::Applied);
    assert_eq!(app.deliver_json(&job("t-1", "thumb-now", "thumb", "running", 1, now)).await, Outcome::Applied);
    assert_eq!(app.deliver("n-1", "no-kind", "running", 1).await, Outcome::Applied);

    let crawl = app.api.job_now("generic", "crawl-now").await.job;
    assert_eq!((crawl.kind.as_deref(), crawl.expected_ms), (Some("generic/crawl"), Some(30_000)), "10 s to 50 s: usually 30 s");
    let thumb = app.api.job_now("generic", "thumb-now").await.job;
    assert_eq!((thumb.kind.as_deref(), thumb.expected_ms), (Some("generic/thumb"), None), "two durations are no history");
    assert_eq!(app.api.job_now("generic", "no-kind").await.job.expected_ms, None);

    let page = app.api.jobs("").await;
    let listed = |id: &str| page.jobs.iter().find(|j| j.job_id == id).unwrap().expected_ms;
    assert_eq!((listed("crawl-now"), listed("thumb-now"), listed("no-kind"), listed("crawl-0")), (Some(30_000), None, None, Some(30_000)));
    let group: nevermiss_engine::api::groups::GroupDetail = app.api.get("/api/groups/nightly", reqwest::StatusCode::OK).await;
    assert_eq!(group.jobs.iter().map(|j| j.expected_ms).collect::<Vec<_>>(), [Some(30_000)]);
});

on_both_stores!(spawn_on,
/// 105 finished jobs of one kind leave its last 100 durations (the window), oldest gone; the jobs'
/// retention removes them with the jobs, and the row of a group none of whose jobs is left.
async fn the_window_keeps_the_last_hundred_and_retention_removes_them(app) {
    app.api.put_channel("desktop", &json!({"kind": "desktop", "outcomes": ["failed"]})).await;
    finish_jobs(&app, "batch", 105, |i| Span::seconds(i as i64 + 1)).await;
    let now = Utc::now();
    let mut grouped = job("g-1", "grouped", "other", "succeeded", 1, now - Span::seconds(3));
    grouped["group"] = json!("old-sweep");
    grouped["finishedAt"] = json!(at(now));
    assert_eq!(app.deliver_json(&grouped).await, Outcome::Applied);

    let window = app.read(|db| durations::window(db, "generic/batch")).await;
    assert_eq!(window.len(), durations::WINDOW, "bounded");
    assert_eq!(window, (6..=105).map(|s| s * 1_000).collect::<Vec<i64>>(), "the last hundred, oldest first");
    assert_eq!(app.read(durations::count).await, 101);
    assert_eq!(app.count("SELECT count(*) FROM job_groups"), 1);

    // A purge as of 100 days from now, with the default 90 days of job retention.
    let policy = Policy { delivery_days: 7, job_days: 90 };
    let store = app.engine().services.store.clone();
    let later = nevermiss_engine::store::job::now_ms() + 100 * 86_400_000;
    let purged = retention::purge(&store, policy, later, &mut Sweep::default()).await.unwrap();
    assert_eq!((purged.jobs_archived, purged.durations, purged.groups), (106, 101, 1), "{purged:?}");
    assert_eq!(app.read(durations::count).await, 0);
    assert_eq!(app.count("SELECT count(*) FROM job_groups"), 0);
    assert!(app.read(|db| groups::list(db, 10)).await.is_empty());
});

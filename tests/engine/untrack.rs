//! Untrack (the book's command line page): the owner stops watching a job; its row, timeline and
//! notifications are forgotten, the per-state counts drop it, a webhook that comes later starts a
//! new job, and a provider whose last job is gone no longer warns that its jobs are not polled.

use nevermiss_engine::provider_health::HealthStatus;
use nevermiss_engine::store::job::{Job, JobState, Outcome};
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::TestApp;

fn count(metrics: &nevermiss_engine::metrics::Metrics, state: &str) -> i64 {
    metrics.store.jobs_by_state.get(state).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrack_forgets_a_job_and_its_timeline_and_the_counts_drop_it() {
    let app = TestApp::spawn().await;
    assert_eq!(app.deliver("d-1", "job-1", "succeeded", 1).await, Outcome::Applied);
    assert_eq!(app.deliver("d-2", "job-2", "running", 1).await, Outcome::Applied);
    let before = app.api.metrics().await;

    let gone: Job = app.api.post("/api/jobs/generic/job-1/untrack", &json!({}), StatusCode::OK).await;
    assert_eq!((gone.job_id.as_str(), gone.state), ("job-1", JobState::Succeeded), "the job as it was");
    assert!(app.api.job("generic", "job-1").await.is_none(), "gone from the API");
    let listed: Vec<String> = app.api.jobs("").await.jobs.into_iter().map(|j| j.job_id).collect();
    assert_eq!(listed, ["job-2"]);
    let after = app.api.metrics().await;
    assert_eq!(count(&after, "succeeded"), count(&before, "succeeded") - 1, "the counts drop it");
    assert_eq!(count(&after, "running"), count(&before, "running"), "and only it");

    let again = app.api.raw_post("/api/jobs/generic/job-1/untrack", &json!({})).await;
    assert_eq!(again.status(), StatusCode::NOT_FOUND, "a job not tracked is 404");

    // The sender's same delivery is still a duplicate (its record stays); a new one starts a new
    // job, whose timeline has none of the forgotten job's events.
    assert_eq!(app.deliver("d-1", "job-1", "succeeded", 1).await, Outcome::Duplicate);
    assert_eq!(app.deliver("d-3", "job-1", "running", 2).await, Outcome::Applied);
    let timeline = app.api.timeline("generic", "job-1").await;
    assert!(!timeline.contains(&"push:applied:succeeded".to_owned()), "the forgotten job's events are gone: {timeline:?}");
    assert_eq!(timeline.last().map(String::as_str), Some("push:applied:running"), "{timeline:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_last_unwatched_job_is_untracked_stops_warning() {
    let app = TestApp::spawn().await;
    app.api.track_job("replicate", "gm3qorzdhgbfurvjtvhg6dckhu").await;
    let health = app.api.wait_for_health("replicate", HealthStatus::NotConfigured).await;
    assert!(health.message.as_deref().is_some_and(|m| m.contains("no API key")), "{health:?}");
    app.api.reconcile().await;
    assert!(app.api.metrics().await.providers.contains_key("replicate"), "while its job waits, the warning stays");

    let _: Job = app.api.post("/api/jobs/replicate/gm3qorzdhgbfurvjtvhg6dckhu/untrack", &json!({}), StatusCode::OK).await;
    app.api.reconcile().await;
    let providers = app.api.metrics().await.providers;
    assert!(!providers.contains_key("replicate"), "no job of it left, no warning: {providers:?}");
}

//! The one merge point (contract §4), driven through the real receiver and admin API:
//! dedupe (also across a restart), rank and seq ordering, terminal sinks, unknown jobs, tracking,
//! the concurrent first-terminal race, and notifications that survive a restart.

use crate::harness;
use nevermiss_engine::store::job::{JobState, Outcome, Source};

use harness::{payload, sign, terminal_identity, wait_until, RecordingNotifier, TestApp};
use nevermiss_engine::api::jobs::JobDetail;
use nevermiss_engine::receiver::HookAnswer;
use reqwest::StatusCode;
use serde_json::json;

/// Proves an absence without a sleep: a marker job finishes after whatever must not notify again,
/// and the outbox delivers in order, so once the marker's notification is out every notification
/// enqueued before it has been sent. Count after this.
async fn after_a_marker(app: &TestApp, marker: &str) {
    assert_eq!(app.deliver(&format!("{marker}-done"), marker, "succeeded", 1).await, Outcome::Applied);
    wait_until("the marker's notification", || async { app.notifier.count(&terminal_identity(marker)) == 1 }).await;
}

/// Delivers each `(delivery id, job id, state, seq, outcome)` in turn: each must be answered with
/// its outcome.
async fn deliver_in_turn(app: &TestApp, deliveries: &[(&str, &str, &str, i64, Outcome)]) {
    for &(delivery_id, job_id, state, seq, outcome) in deliveries {
        assert_eq!(app.deliver(delivery_id, job_id, state, seq).await, outcome, "{delivery_id}: {job_id} {state} with seq {seq}");
    }
}

/// The notification counters: (enqueued, delivered, pending).
async fn notifications(app: &TestApp) -> (i64, i64, i64) {
    let m = app.api.metrics().await;
    (m.store.notifications_enqueued, m.store.notifications_delivered, m.store.notifications_pending)
}

/// The (outcome, delivery_id) pairs of a job's timeline, oldest first.
fn timeline(job: &JobDetail) -> Vec<(Outcome, Option<String>)> {
    job.timeline.iter().map(|e| (e.outcome, e.delivery_id.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_delivery_twice_is_applied_once_then_duplicate() {
    let app = TestApp::spawn().await;
    deliver_in_turn(
        &app,
        &[
            ("d-1", "job-1", "running", 1, Outcome::Applied),
            ("d-1", "job-1", "running", 1, Outcome::Duplicate),
            // The same delivery id is a duplicate whatever it now carries.
            ("d-1", "job-1", "succeeded", 2, Outcome::Duplicate),
        ],
    )
    .await;

    let job = app.job("job-1").await.unwrap();
    assert_eq!(job.job.state, JobState::Running);
    assert_eq!(
        timeline(&job),
        vec![
            (Outcome::Applied, Some("d-1".to_owned())),
            (Outcome::Duplicate, Some("d-1".to_owned())),
            (Outcome::Duplicate, Some("d-1".to_owned())),
        ]
    );
    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE status = 'accepted'"), 1);
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 0);
    let m = app.api.metrics().await.store;
    assert_eq!((m.deliveries_total, m.applied, m.duplicates, m.stale), (3, 1, 2, 0), "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedupe_survives_a_restart() {
    let mut app = TestApp::spawn().await;
    assert_eq!(app.deliver("d-1", "job-1", "succeeded", 4).await, Outcome::Applied);
    wait_until("the notification is delivered", || async { app.notifier.count(&terminal_identity("job-1")) == 1 }).await;

    app.restart().await;
    assert_eq!(app.deliver("d-1", "job-1", "succeeded", 4).await, Outcome::Duplicate);
    let m = app.api.metrics().await;
    assert_eq!(m.store.duplicates, 1, "counters persist across restarts");
    assert_eq!(m.store.applied, 1);
    assert_eq!(m.store.notifications_enqueued, 1);
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 1);
    // Nothing new to notify after the restart (the new notifier is the same recorder).
    after_a_marker(&app, "marker").await;
    assert_eq!(app.notifier.count(&terminal_identity("job-1")), 1);
    assert_eq!(app.notifier.total(), 2, "job-1 once, then the marker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_moves_a_job_out_of_a_terminal_state() {
    let app = TestApp::spawn().await;
    deliver_in_turn(
        &app,
        &[
            ("d-1", "job-1", "running", 3, Outcome::Applied),
            ("d-2", "job-1", "succeeded", 5, Outcome::Applied),
            // Later progress events, even with a higher seq, are stale.
            ("d-3", "job-1", "running", 99, Outcome::Stale),
            ("d-4", "job-1", "queued", 100, Outcome::Stale),
            // Another terminal state is refused too: the first terminal state stays.
            ("d-5", "job-1", "failed", 101, Outcome::Stale),
            ("d-6", "job-1", "canceled", 102, Outcome::Stale),
            ("d-7", "job-1", "succeeded", 103, Outcome::Stale),
        ],
    )
    .await;

    let job = app.job("job-1").await.unwrap();
    assert_eq!(job.job.state, JobState::Succeeded);
    assert_eq!(job.job.seq, Some(5));
    assert_eq!(job.job.terminal_source, Some(Source::Push));
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 1);
    let m = app.api.metrics().await.store;
    assert_eq!((m.applied, m.stale, m.notifications_enqueued), (2, 5, 1), "{m:?}");
    assert_eq!(m.jobs_by_state["succeeded"], 1);
    assert_eq!(m.jobs_by_state["running"], 0);

    wait_until("the notification is delivered", || async { app.notifier.count(&terminal_identity("job-1")) == 1 }).await;
    after_a_marker(&app, "marker").await;
    assert_eq!(app.notifier.count(&terminal_identity("job-1")), 1, "one notification, for the first terminal state only");
    assert_eq!(app.notifier.total(), 2, "job-1 once, then the marker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_event_for_an_unknown_job_creates_it_and_notifies_once() {
    let app = TestApp::spawn().await;
    let body = json!({
        "deliveryId": "d-1", "jobId": "job-new", "state": "failed", "seq": 9,
        "finishedAt": "2026-11-30T10:00:00Z", "label": "nightly crawl", "error": "out of memory"
    });
    assert_eq!(app.deliver_json(&body).await, Outcome::Applied);

    let job = app.job("job-new").await.expect("the job was created, not dropped");
    assert_eq!(job.job.state, JobState::Failed);
    assert_eq!(job.job.seq, Some(9));
    assert_eq!(job.job.terminal_source, Some(Source::Push));
    assert_eq!(job.job.label.as_deref(), Some("nightly crawl"));
    assert_eq!(job.job.error.as_deref(), Some("out of memory"));
    assert_eq!(job.job.finished_at.as_deref(), Some("2026-11-30T10:00:00.000Z"));
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE job_id = 'job-new' AND state = 'failed'"), 1);

    let identity = terminal_identity("job-new");
    wait_until("the notification is delivered", || async { app.notifier.count(&identity) == 1 }).await;
    wait_until("the job is marked notified", || async { app.job("job-new").await.unwrap().job.notified_at.is_some() }).await;
    assert_eq!(notifications(&app).await, (1, 1, 0), "(enqueued, delivered, pending)");
    after_a_marker(&app, "marker").await;
    assert_eq!(app.notifier.count(&identity), 1);
    assert_eq!(app.notifier.total(), 2, "job-new once, then the marker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_rank_progress_is_adopted_only_with_a_higher_seq() {
    let app = TestApp::spawn().await;
    deliver_in_turn(&app, &[("d-1", "job-1", "running", 5, Outcome::Applied), ("d-2", "job-1", "running", 3, Outcome::Stale)]).await;
    assert_eq!(app.job("job-1").await.unwrap().job.seq, Some(5));
    deliver_in_turn(
        &app,
        &[
            // An equal seq is not newer.
            ("d-3", "job-1", "running", 5, Outcome::Stale),
            ("d-4", "job-1", "running", 7, Outcome::Applied),
        ],
    )
    .await;
    let job = app.job("job-1").await.unwrap();
    assert_eq!(job.job.state, JobState::Running);
    assert_eq!(job.job.seq, Some(7));

    // Rank comes first: a lower rank is stale whatever its seq, a higher rank wins whatever its seq.
    deliver_in_turn(
        &app,
        &[
            ("d-5", "job-1", "queued", 50, Outcome::Stale),
            ("d-6", "job-2", "queued", 10, Outcome::Applied),
            ("d-7", "job-2", "running", 2, Outcome::Applied),
        ],
    )
    .await;
    assert_eq!(app.job("job-2").await.unwrap().job.seq, Some(2));

    let job = app.job("job-1").await.unwrap();
    let outcomes: Vec<Outcome> = timeline(&job).into_iter().map(|(o, _)| o).collect();
    assert_eq!(outcomes, [Outcome::Applied, Outcome::Stale, Outcome::Stale, Outcome::Applied, Outcome::Stale]);
    assert!(job.job.terminal_source.is_none());
    assert!(job.job.finished_at.is_none());
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tracked_job_is_moved_by_events() {
    let app = TestApp::spawn().await;
    let (status, tracked) = app.track("job-t", Some("my label")).await;
    assert_eq!(status, StatusCode::CREATED, "{tracked:?}");
    assert_eq!(tracked.state, JobState::Unknown);
    assert_eq!(tracked.label.as_deref(), Some("my label"));
    assert!(tracked.seq.is_none());
    let (status, tracked) = app.track("job-t", None).await;
    assert_eq!(status, StatusCode::OK, "already tracked: {tracked:?}");
    assert_eq!(tracked.label.as_deref(), Some("my label"), "tracking again without a label keeps it");

    assert_eq!(app.deliver("d-1", "job-t", "queued", 1).await, Outcome::Applied);
    assert_eq!(app.job_state("job-t").await, JobState::Queued);
    assert_eq!(app.deliver("d-2", "job-t", "running", 2).await, Outcome::Applied);
    assert_eq!(app.job_state("job-t").await, JobState::Running);
    let mut done = payload("d-3", "job-t", "succeeded", 3);
    done["label"] = json!("a sender's label");
    assert_eq!(app.deliver_json(&done).await, Outcome::Applied);
    let job = app.job("job-t").await.unwrap();
    assert_eq!(job.job.state, JobState::Succeeded);
    assert_eq!(job.job.label.as_deref(), Some("my label"), "a sender's label does not replace the user's");
    assert_eq!(job.job.terminal_source, Some(Source::Push));
    wait_until("the notification is delivered", || async { app.notifier.count(&terminal_identity("job-t")) == 1 }).await;

    // Tracking a finished job again changes nothing but what it may: its label.
    let (status, tracked) = app.track("job-t", Some("renamed")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(tracked.state, JobState::Succeeded);
    assert_eq!(tracked.label.as_deref(), Some("renamed"));
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_first_terminals_give_exactly_one_notification() {
    const N: usize = 50;
    let app = TestApp::spawn().await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..N {
        let http = app.http.clone();
        let url = format!("{}/hooks/generic", app.receiver);
        // Each its own delivery (not duplicates): all but one must lose at the guarded write.
        let body = serde_json::to_vec(&payload(&format!("race-{i}"), "job-race", "succeeded", 10)).unwrap();
        tasks.spawn(async move {
            let response = http.post(url).header("x-agent-signature", sign(&body)).body(body).send().await.expect("the receiver answers");
            assert_eq!(response.status(), StatusCode::OK);
            response.json::<HookAnswer>().await.unwrap().outcome.unwrap()
        });
    }
    let mut outcomes = Vec::new();
    while let Some(outcome) = tasks.join_next().await {
        outcomes.push(outcome.expect("a sender task"));
    }
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Applied).count(), 1, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Stale).count(), N - 1, "{outcomes:?}");

    assert_eq!(app.count("SELECT count(*) FROM outbox"), 1);
    assert_eq!(app.count("SELECT count(*) FROM deliveries WHERE status = 'accepted'"), N as i64);
    let m = app.api.metrics().await;
    assert_eq!(m.store.notifications_enqueued, 1);
    assert_eq!(m.store.deliveries_total, N as i64);
    assert_eq!(m.store.applied, 1);
    assert_eq!(m.store.stale, (N - 1) as i64);
    assert_eq!(m.store.jobs_by_state["succeeded"], 1);

    let identity = terminal_identity("job-race");
    wait_until("the notification is delivered", || async { app.notifier.count(&identity) >= 1 }).await;
    // A wrongly enqueued second notification would go out before the marker's.
    after_a_marker(&app, "marker").await;
    assert_eq!(app.notifier.count(&identity), 1);
    assert_eq!(app.notifier.total(), 2, "job-race once, then the marker");
    wait_until("both are marked delivered", || async { app.api.metrics().await.store.notifications_delivered == 2 }).await;
    assert_eq!(app.api.metrics().await.store.notifications_enqueued, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_pending_at_shutdown_is_delivered_after_a_restart() {
    let dir = tempfile::TempDir::new().unwrap();
    let failing = RecordingNotifier::failing();
    let mut app = TestApp::start_with(dir.path(), failing.clone(), true).await;
    let identity = terminal_identity("job-p");

    assert_eq!(app.deliver("d-1", "job-p", "succeeded", 1).await, Outcome::Applied);
    wait_until("the notifier was tried (and failed)", || async { failing.attempts(&identity) >= 1 }).await;
    wait_until("the failure is recorded on the outbox row", || async {
        app.count("SELECT count(*) FROM outbox WHERE attempts >= 1 AND last_error IS NOT NULL AND delivered_at IS NULL") == 1
    })
    .await;
    assert_eq!(notifications(&app).await, (1, 0, 1), "(enqueued, delivered, pending)");
    assert!(app.job("job-p").await.unwrap().job.notified_at.is_none());

    let working = RecordingNotifier::new();
    app.restart_with(working.clone()).await;
    wait_until("the pending notification is delivered after the restart", || async { working.count(&identity) == 1 }).await;
    wait_until("the row is marked delivered", || async { app.count("SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL") == 1 })
        .await;
    assert_eq!(notifications(&app).await, (1, 1, 0), "(enqueued, delivered, pending)");
    assert!(app.job("job-p").await.unwrap().job.notified_at.is_some());
    assert_eq!(failing.count(&identity), 0, "the failing notifier never delivered");

    after_a_marker(&app, "marker").await;
    assert_eq!(working.count(&identity), 1, "delivered once");
    assert_eq!(working.total(), 2, "job-p once, then the marker");
    app.shutdown().await;
}

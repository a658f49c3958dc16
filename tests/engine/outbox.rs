//! The outbox dispatcher when the store fails under it: a notification shown but not yet marked
//! delivered is never shown again while the process lives; only its marking is retried, and
//! everything ends marked once the store recovers. Each notification carries its outbox row.

use crate::harness;
use nevermiss_engine::store::job::Outcome;

use harness::{terminal_identity, wait_until, RecordingNotifier, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_whose_mark_fails_is_not_shown_again() {
    const JOBS: usize = 20;
    let dir = tempfile::TempDir::new().unwrap();
    // Held: nothing is shown until the store is set to fail.
    let notifier = RecordingNotifier::held();
    let mut app = TestApp::start_with(dir.path(), notifier.clone(), true).await;

    for i in 0..JOBS {
        assert_eq!(app.deliver(&format!("d-{i}"), &format!("job-{i}"), "succeeded", 1).await, Outcome::Applied);
    }
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE delivered_at IS NULL"), JOBS as i64);

    // The next three commits fail as on a failing disk: the first notification's mark, and its
    // first two retries.
    let store = app.engine().store().clone();
    store.fail_next_commits(3);
    notifier.release();

    wait_until("every row is marked delivered once the store recovers", || async {
        app.count("SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL") == JOBS as i64
    })
    .await;
    assert_eq!(store.commits_left_to_fail(), 0, "the injected failures were all met");
    // The dispatcher marks each row before it shows the next: all rows are marked, so nothing
    // can be shown after this point.
    for i in 0..JOBS {
        let identity = terminal_identity(&format!("job-{i}"));
        assert_eq!(notifier.count(&identity), 1, "{identity} was shown {} times", notifier.count(&identity));
        let row: i64 = app.count(&format!("SELECT id FROM outbox WHERE job_id = 'job-{i}'"));
        assert_eq!(notifier.outbox_id(&identity), Some(row), "the notification carries its outbox row");
    }
    assert_eq!(notifier.total(), JOBS);
    let m = app.api.metrics().await.store;
    assert_eq!(m.notifications_delivered, JOBS as i64);
    assert_eq!(m.notifications_enqueued, JOBS as i64);
    assert_eq!(m.notifications_pending, 0);
    assert_eq!(app.count("SELECT count(*) FROM jobs WHERE notified_at IS NOT NULL"), JOBS as i64);
    app.shutdown().await;
}

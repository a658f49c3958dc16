//! When storage fails the receiver answers 503 (so the sender retries) and stores nothing; the
//! retry after the failure is applied as if it were the first delivery.

use crate::harness;

use std::time::Duration;

use harness::{payload, sign, TestApp};
use nevermiss_engine::receiver::HookAnswer;
use nevermiss_engine::store::job::Outcome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_answers_503_and_the_retry_is_applied() {
    // On SQLite whatever the run's store: another process holds the SQLite file's write lock.
    let app = TestApp::spawn_on(crate::harness::app::Backend::Sqlite).await;
    let body = serde_json::to_vec(&payload("d-locked", "job-locked", "succeeded", 1)).unwrap();

    // Another process holds the write lock for longer than the engine's busy timeout (5 s).
    let blocker = rusqlite::Connection::open(app.data_dir.join(nevermiss_engine::data_dir::DATABASE_FILE)).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let response = app.post_hook_sig("generic", body.clone(), Some(&sign(&body))).await;
    assert_eq!(response.status(), 503);
    let answer: HookAnswer = response.json().await.unwrap();
    assert!(answer.error.as_deref().unwrap().contains("retry"), "{answer:?}");
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);

    assert_eq!(app.count("SELECT count(*) FROM deliveries"), 0, "nothing half-stored");
    assert!(app.job("job-locked").await.is_none());

    // The sender retries: the same delivery is now applied, not a duplicate.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let response = app.post_hook_sig("generic", body.clone(), Some(&sign(&body))).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<HookAnswer>().await.unwrap().outcome, Some(Outcome::Applied));
    harness::wait_until("one notification", || async { app.notifier.total() == 1 }).await;
}

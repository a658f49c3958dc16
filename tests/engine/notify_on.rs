//! "Notify on" (Settings): outcomes left out are still one side effect in the record, delivered,
//! but never announced; the others are announced as before. A bad list is refused by name.

use crate::harness;

use harness::{terminal_identity, wait_until, TestApp};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_chosen_outcomes_are_announced() {
    let app = TestApp::spawn().await;
    let refused = app.api.refused_settings(&json!({"notify_on": "failed, exploded"})).await;
    let errors = refused.errors.expect("the refused field is named");
    assert!(errors["notify_on"].contains("exploded"), "{errors:?}");

    let saved = app.api.put_settings(&json!({"notify_on": " failed ,stuck"})).await;
    assert_eq!(saved.notify_on, "failed,stuck");

    app.deliver("q-1", "quiet-job", "succeeded", 1).await;
    app.deliver("l-1", "loud-job", "failed", 1).await;
    wait_until("both side effects delivered in the record", || async {
        app.api.metrics().await.store.notifications_delivered == 2
    })
    .await;
    assert_eq!(app.notifier.count(&terminal_identity("loud-job")), 1);
    assert_eq!(app.notifier.count(&terminal_identity("quiet-job")), 0, "a success is not announced");
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL"), 2);
}

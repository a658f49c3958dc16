//! "Notify on" (Settings): outcomes left out are still one side effect in the record, delivered,
//! but never announced; the others are announced as before. A bad list is refused by name.

use crate::common;

use common::{terminal_identity, wait_until, TestApp};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_chosen_outcomes_are_announced() {
    let app = TestApp::spawn().await;
    let put = |body: Value| app.http.put(format!("{}/api/settings", app.api)).bearer_auth(&app.token).json(&body).send();

    let refused = put(json!({"notify_on": "failed, exploded"})).await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert!(body["errors"]["notify_on"].as_str().unwrap().contains("exploded"), "{body}");

    let saved = put(json!({"notify_on": " failed ,stuck"})).await.unwrap();
    assert_eq!(saved.status(), 200);
    assert_eq!(saved.json::<Value>().await.unwrap()["notify_on"], "failed,stuck");

    app.deliver("q-1", "quiet-job", "succeeded", 1).await;
    app.deliver("l-1", "loud-job", "failed", 1).await;
    wait_until("both side effects delivered in the record", || async {
        app.metric("notifications_delivered").await == 2
    })
    .await;
    assert_eq!(app.notifier.count(&terminal_identity("loud-job")), 1);
    assert_eq!(app.notifier.count(&terminal_identity("quiet-job")), 0, "a success is not announced");
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL"), 2);
}

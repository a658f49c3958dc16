//! A channel's outcomes (Settings, Channels): an outcome left out enqueues nothing for that
//! channel; the others are announced as before. A bad outcome is refused by name.

use crate::harness;

use harness::{terminal_identity, wait_until, TestApp};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_chosen_outcomes_are_announced() {
    let app = TestApp::spawn().await;
    let refused = app
        .api
        .send(reqwest::Method::PUT, "/api/channels/desktop", Some(&json!({"kind": "desktop", "outcomes": ["failed", "exploded"]})))
        .await;
    assert_eq!(refused.status(), reqwest::StatusCode::BAD_REQUEST);
    let text = refused.text().await.unwrap();
    assert!(text.contains("exploded"), "the refused outcome is named: {text}");

    let saved = app.api.put_channel("desktop", &json!({"kind": "desktop", "outcomes": ["failed", "stuck"]})).await;
    assert_eq!(saved.outcomes.iter().map(|o| o.as_str()).collect::<Vec<_>>(), ["failed", "stuck"]);

    app.deliver("q-1", "quiet-job", "succeeded", 1).await;
    app.deliver("l-1", "loud-job", "failed", 1).await;
    wait_until("the failed job announced", || async { app.api.metrics().await.store.notifications_delivered == 1 }).await;
    assert_eq!(app.notifier.count(&terminal_identity("loud-job")), 1);
    assert_eq!(app.notifier.count(&terminal_identity("quiet-job")), 0, "a success is not announced");
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 1, "no row for an outcome the channel leaves out");
    let desktop = app.api.channel("desktop").await;
    assert_eq!((desktop.enqueued, desktop.delivered, desktop.pending, desktop.failed), (1, 1, 0, 0));
}

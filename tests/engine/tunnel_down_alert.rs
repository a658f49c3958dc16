//! A tunnel that stays down past its alert threshold raises one notification through the outbox
//! (one per down period), and it is counted with the others.

use crate::harness;

use harness::{wait_until, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_down_past_the_threshold_alerts_once() {
    let app = TestApp::spawn().await;
    let services = &app.engine().services;
    // A bore server where nothing listens: the tunnel is down, and retries with backoff.
    services.settings.set("tunnel.bore_server", "127.0.0.1:1").await.unwrap();
    services.settings.set("tunnel.self_test", "off").await.unwrap();
    services.settings.set("tunnel.down_alert_secs", "1").await.unwrap();
    services.settings.set("tunnel", "bore").await.unwrap();
    services.tunnel.reconfigure();

    wait_until("the tunnel-down alert", || async { app.notifier.total() == 1 }).await;
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE kind = 'tunnel_down'"), 1);
    let state = services.tunnel.state();
    assert!(state.down_since.is_some(), "{state:?}");
    assert_eq!(app.api.metrics().await.store.notifications_enqueued, 1);

    // Refused through the API: the threshold is at least a minute there.
    app.api.refused_settings(&serde_json::json!({"tunnel.down_alert_secs": 5})).await;
}

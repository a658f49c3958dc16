//! Rescues mean what the UI says: a terminal state learned by polling is a reconcile rescue only
//! where a webhook was expected (the provider sends webhooks for that kind of job and its secret
//! is set). An Anthropic Message Batch (polling only), and any job of a provider without a
//! webhook secret, end "by polling": counted apart, never a rescue.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use nevermiss_engine::metrics::Metrics;
use serde_json::{json, Value};

use crate::harness::conformance::fixture;
use crate::harness::stand_in::{respond, stand_in, StandIn};
use crate::harness::TestApp;
use nevermiss_engine::store::job::JobState;

/// One stand-in for both APIs: `GET /v1/messages/batches/{id}` and `GET /v1/predictions/{id}`,
/// each answering what the test stored under the id.
fn routes() -> Router<Arc<StandIn>> {
    async fn by_id(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
        let answer = stand.take(&id, &id, &headers);
        respond(answer, |status| json!({ "type": "error", "error": { "type": "not_found_error", "message": status.to_string() } })).await
    }
    Router::new().route("/v1/messages/batches/{id}", get(by_id)).route("/v1/predictions/{id}", get(by_id))
}

/// A Message Batch that has ended, as `GET /v1/messages/batches/{id}` answers it (the checked
/// fixture).
fn ended_batch(id: &str) -> Value {
    fixture("anthropic/message_batch")
        .id(id)
        .set("request_counts", json!({ "processing": 0, "succeeded": 10, "errored": 0, "canceled": 0, "expired": 0 }))
        .set("ended_at", "2026-11-30T11:10:00.000000Z")
        .set("created_at", "2026-11-30T10:00:00.000000Z")
        .set("expires_at", "2026-12-01T10:00:00.000000Z")
        .set("results_url", format!("https://api.anthropic.com/v1/messages/batches/{id}/results"))
        .value()
}

/// A prediction that has succeeded, as `GET /v1/predictions/{id}` answers it (the checked fixture).
fn succeeded_prediction(id: &str) -> Value {
    fixture("replicate/prediction")
        .id(id)
        .set("model", "black-forest-labs/flux-schnell")
        .set("urls.get", format!("https://api.replicate.com/v1/predictions/{id}"))
        .set("urls.cancel", format!("https://api.replicate.com/v1/predictions/{id}/cancel"))
        .set("urls.web", format!("https://replicate.com/p/{id}"))
        .value()
}

async fn metrics(app: &TestApp) -> Metrics {
    app.api.metrics().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_finished_by_polling_is_not_a_rescue_a_dropped_prediction_webhook_is() {
    let mut app = TestApp::spawn_unconfigured().await;
    let (stand, url) = stand_in(routes).await;
    app.configure("anthropic", &url, Some("sk-ant-test"), Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")).await;
    app.configure("replicate", &url, Some("r8_test"), Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")).await;

    // An Anthropic batch: polling is the only way it can end.
    stand.json("msgbatch_rescue", ended_batch("msgbatch_rescue"));
    app.api.track_job("anthropic", "msgbatch_rescue").await;
    app.api.wait_for_state("anthropic", "msgbatch_rescue", JobState::Succeeded).await;
    let m = metrics(&app).await;
    assert_eq!((m.store.reconcile_rescues, m.store.poll_only_completions), (0, 1), "a batch is a completion by polling");

    // A Replicate prediction, its secret set: its webhook was expected and never came.
    stand.json("p-dropped", succeeded_prediction("p-dropped"));
    app.api.track_job("replicate", "p-dropped").await;
    app.api.wait_for_state("replicate", "p-dropped", JobState::Succeeded).await;
    let m = metrics(&app).await;
    assert_eq!((m.store.reconcile_rescues, m.store.poll_only_completions), (1, 1), "the dropped webhook is a rescue");

    // The same prediction kind without a webhook secret: nothing was expected, nothing missed.
    app.configure("replicate", &url, Some("r8_test"), None).await;
    stand.json("p-no-secret", succeeded_prediction("p-no-secret"));
    app.api.track_job("replicate", "p-no-secret").await;
    app.api.wait_for_state("replicate", "p-no-secret", JobState::Succeeded).await;
    let m = metrics(&app).await;
    assert_eq!((m.store.reconcile_rescues, m.store.poll_only_completions), (1, 2));
    app.shutdown().await;
}

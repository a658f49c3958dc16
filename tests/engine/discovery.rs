//! Discovery beyond Replicate: with the provider's key set and `<provider>.discover` on, jobs
//! started anywhere are watched: OpenAI batches (`GET /v1/batches`, cursor `after`) and Anthropic
//! Message Batches (`GET /v1/messages/batches`, cursor `after_id`). Same rules as Replicate's:
//! nothing from before discovery was turned on (the watermark), pages followed by the API's own
//! cursor (the next page is asked of the same API, never of a URL the answer names), and a job
//! older than the watermark ends the walk: the page after it is never asked for.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use nevermiss_engine::metrics::Metrics;
use serde_json::{json, Value};

use crate::harness::TestApp;
use nevermiss_engine::api::settings::OnOff;
use nevermiss_engine::job::JobState;
use crate::harness::signing::now_secs;
use crate::harness::stand_in::{respond, serve, StandIn};

/// A list endpoint: the page stored under `list:<cursor>` (the cursor is the `after` or
/// `after_id` query parameter; empty for the first page).
async fn list_route(State(stand): State<Arc<StandIn>>, Query(query): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    let cursor = query.get("after").or(query.get("after_id")).cloned().unwrap_or_default();
    let answer = stand.take(&format!("list:{cursor}"), &format!("list?cursor={cursor}"), &headers);
    respond(answer, |status| json!({ "error": { "message": format!("status {status}") } })).await
}

async fn stand_in(path: &str) -> (Arc<StandIn>, String) {
    let stand = StandIn::new();
    let router = Router::new().route(path, get(list_route)).with_state(stand.clone());
    let url = serve(router).await;
    (stand, url)
}

/// An OpenAI batch as the list shows it, created `created` (Unix seconds).
fn openai_batch(id: &str, status: &str, created: i64) -> Value {
    json!({
        "id": id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": null,
        "input_file_id": "file-abc123", "completion_window": "24h", "status": status,
        "output_file_id": null, "error_file_id": null, "created_at": created,
        "in_progress_at": if status == "in_progress" { json!(created + 1) } else { Value::Null },
        "expires_at": created + 86_400, "finalizing_at": null,
        "completed_at": if status == "completed" { json!(created + 2) } else { Value::Null },
        "failed_at": null, "expired_at": null, "cancelling_at": null, "cancelled_at": null,
        "request_counts": { "total": 10, "completed": if status == "completed" { 10 } else { 0 }, "failed": 0 },
        "metadata": {}
    })
}

/// An Anthropic Message Batch as the list shows it, created `created` (Unix seconds).
fn anthropic_batch(id: &str, status: &str, created: i64) -> Value {
    let at = |secs: i64| chrono::DateTime::from_timestamp(secs, 0).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    json!({
        "id": id, "type": "message_batch", "processing_status": status,
        "request_counts": { "processing": if status == "ended" { 0 } else { 5 }, "succeeded": if status == "ended" { 5 } else { 0 }, "errored": 0, "canceled": 0, "expired": 0 },
        "ended_at": if status == "ended" { json!(at(created + 2)) } else { Value::Null },
        "created_at": at(created), "expires_at": at(created + 86_400), "archived_at": null, "cancel_initiated_at": null,
        "results_url": if status == "ended" { json!(format!("https://api.anthropic.com/v1/messages/batches/{id}/results")) } else { Value::Null }
    })
}

/// A page of either list (both answer `data`, `has_more`, `first_id`, `last_id`).
fn page(items: Vec<Value>, has_more: bool) -> Value {
    let ids: Vec<Value> = items.iter().map(|i| i["id"].clone()).collect();
    json!({ "object": "list", "data": items, "has_more": has_more, "first_id": ids.first(), "last_id": ids.last() })
}

struct Case {
    provider: &'static str,
    path: &'static str,
    batch: fn(&str, &str, i64) -> Value,
    running: &'static str,
    done: &'static str,
    ids: [&'static str; 4],
}

async fn discovers(case: Case) {
    let mut app = TestApp::spawn_unconfigured().await;
    let (stand, url) = stand_in(case.path).await;
    app.configure(case.provider, &url, Some("key-for-listing"), None).await;
    let [new_done, new_running, page2_new, old] = case.ids;
    let later = now_secs() + 5;
    stand.json("list:", page(vec![(case.batch)(new_done, case.done, later + 2), (case.batch)(new_running, case.running, later + 1)], true));
    stand.json(&format!("list:{new_running}"), page(vec![(case.batch)(page2_new, case.running, later), (case.batch)(old, case.done, later - 3_600)], true));
    stand.json(&format!("list:{old}"), page(vec![(case.batch)("never-read", case.done, later - 7_200)], false));

    // Off by default: nothing is listed.
    app.api.reconcile().await;
    assert_eq!(stand.count("cursor="), 0, "{} was listed with discovery off", case.provider);

    let answer = app.api.put_settings(&json!({ format!("{}.discover", case.provider): "on" })).await;
    assert_eq!(answer.providers[case.provider].discover, Some(OnOff::On), "{answer:?}");
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.providers[case.provider], "ok", "{report:?}");

    assert_eq!(app.api.job_now(case.provider, new_done).await.job.state, JobState::Succeeded);
    assert_eq!(app.api.job_now(case.provider, new_running).await.job.state, JobState::Running);
    assert_eq!(app.api.job_now(case.provider, page2_new).await.job.state, JobState::Running, "the second page was followed");
    assert!(app.api.job(case.provider, old).await.is_none(), "a batch from before discovery was turned on was imported");
    assert!(app.api.job(case.provider, "never-read").await.is_none());
    let paths: Vec<String> = stand.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, [String::from("list?cursor="), format!("list?cursor={new_running}")], "the walk stops at the first older batch");

    let metrics: Metrics = app.api.metrics().await;
    assert_eq!(metrics.store.jobs_discovered, 3);
    assert_eq!(metrics.store.notifications_enqueued, 1, "one notification, for the finished one");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_batches_are_discovered_from_when_it_is_turned_on() {
    discovers(Case {
        provider: "openai",
        path: "/v1/batches",
        batch: openai_batch,
        running: "in_progress",
        done: "completed",
        ids: ["batch_new_done", "batch_new_running", "batch_page2", "batch_old"],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_message_batches_are_discovered_from_when_it_is_turned_on() {
    discovers(Case {
        provider: "anthropic",
        path: "/v1/messages/batches",
        batch: anthropic_batch,
        running: "in_progress",
        done: "ended",
        ids: ["msgbatch_new_done", "msgbatch_new_running", "msgbatch_page2", "msgbatch_old"],
    })
    .await;
}

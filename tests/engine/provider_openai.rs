//! The `openai` provider end to end: a real engine in-process, signed webhook events over real
//! HTTP, and a local stand-in for OpenAI's API (`GET /v1/responses/{id}`, `/v1/batches/{id}`,
//! `/v1/fine_tuning/jobs/{id}`, Bearer keys, `retry-after` / `retry-after-ms` on 429) answering
//! with objects shaped as OpenAI documents them, and able to fail.

use crate::harness;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use harness::faults::*;
use harness::signing::now_secs;
use harness::stand_in::*;
use nevermiss_engine::provider_health::HealthStatus;
use nevermiss_engine::store::job::{JobResult, JobState, Outcome, Source};
use serde_json::{json, Value};

const P: &str = "openai";
pub(crate) const API_KEY: &str = "sk-proj-standin0123456789";
/// OpenAI's dashboard shows secrets as `whsec_...`.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const CREATED: i64 = 1_796_032_800; // 2026-11-30T10:00:00Z

/// OpenAI's error shape.
pub(crate) fn error_body(status: u16) -> Value {
    let (kind, code, message) = match status {
        401 => ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-proj-****."),
        404 => ("invalid_request_error", "not_found", "No such object."),
        429 => ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
        _ => ("server_error", "server_error", "The server had an error while processing your request."),
    };
    json!({ "error": { "message": message, "type": kind, "param": null, "code": code } })
}

pub(crate) async fn object_route(
    State(stand): State<Arc<StandIn>>,
    Path((kind, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let authorized = header(&headers, "authorization") == format!("Bearer {API_KEY}");
    stand.answer(&id, &format!("/v1/{kind}/{id}"), &headers, authorized, error_body).await
}

pub(crate) async fn fine_tuning_route(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    object_route(State(stand), Path(("fine_tuning/jobs".to_owned(), id)), headers).await
}

/// The routes of a stand-in for api.openai.com.
fn routes() -> Router<Arc<StandIn>> {
    Router::new().route("/v1/fine_tuning/jobs/{id}", get(fine_tuning_route)).route("/v1/{kind}/{id}", get(object_route))
}

/// A webhook event as OpenAI documents it.
fn event(kind: &str, object_id: &str, created_at: i64) -> Value {
    json!({
        "id": format!("evt_{object_id}_{}", kind.replace('.', "_")),
        "object": "event",
        "type": kind,
        "created_at": created_at,
        "data": { "id": object_id }
    })
}

/// A background response object, as `GET /v1/responses/{id}` answers it.
pub(crate) fn response(id: &str, status: &str) -> Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": true,
        "error": if status == "failed" { json!({"code": "server_error", "message": "The model crashed"}) } else { Value::Null },
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "instructions": null,
        "max_output_tokens": 2048,
        "model": "o3-2025-04-16",
        "output": [],
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": { "effort": "high", "summary": null },
        "temperature": 1.0,
        "text": { "format": { "type": "text" } },
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": null,
        "user": null,
        "metadata": {}
    })
}

/// A batch object, as `GET /v1/batches/{id}` answers it, with the timestamps its status has.
pub(crate) fn batch(id: &str, status: &str) -> Value {
    let at = |offset: i64, when: &[&str]| if when.contains(&status) { json!(CREATED + offset) } else { Value::Null };
    let after_start = ["in_progress", "finalizing", "completed", "cancelling", "cancelled"];
    json!({
        "id": id,
        "object": "batch",
        "endpoint": "/v1/chat/completions",
        "errors": if status == "failed" {
            json!({"object": "list", "data": [{"code": "invalid_json", "message": "Line 1 is not valid JSON.", "param": null, "line": 1}]})
        } else { Value::Null },
        "input_file_id": "file-abc123",
        "completion_window": "24h",
        "status": status,
        "output_file_id": if status == "completed" { json!("file-cvaTdG") } else { Value::Null },
        "error_file_id": if status == "completed" { json!("file-HOWS94") } else { Value::Null },
        "created_at": CREATED,
        "in_progress_at": at(5, &after_start),
        "expires_at": CREATED + 86_400,
        "finalizing_at": at(3_600, &["finalizing", "completed"]),
        "completed_at": at(3_630, &["completed"]),
        "failed_at": at(2, &["failed"]),
        "expired_at": at(86_400, &["expired"]),
        "cancelling_at": at(60, &["cancelling", "cancelled"]),
        "cancelled_at": at(90, &["cancelled"]),
        "request_counts": { "total": 100, "completed": if status == "completed" { 95 } else { 0 }, "failed": if status == "completed" { 5 } else { 0 } },
        "metadata": { "customer_id": "user_123456789" }
    })
}

/// A fine-tuning job, as `GET /v1/fine_tuning/jobs/{id}` answers it.
pub(crate) fn fine_tuning_job(id: &str, status: &str) -> Value {
    let done = matches!(status, "succeeded" | "failed" | "cancelled");
    json!({
        "object": "fine_tuning.job",
        "id": id,
        "model": "gpt-4o-mini-2024-07-18",
        "created_at": CREATED,
        "finished_at": if done { json!(CREATED + 3_000) } else { Value::Null },
        "fine_tuned_model": if status == "succeeded" { json!("ft:gpt-4o-mini:my-org:custom:id") } else { Value::Null },
        "organization_id": "org-123",
        "result_files": [],
        "status": status,
        "validation_file": null,
        "training_file": "file-abc123",
        "hyperparameters": { "n_epochs": 3 },
        "trained_tokens": null,
        "error": null,
        "seed": 42,
        "estimated_finish": null,
        "method": { "type": "supervised" }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_applied_deduplicated_and_replays_refused() {
    let (mut app, _stand, _url) = start(P, routes, None, Some(SECRET)).await;

    let done = event("response.completed", "resp_1", CREATED + 30);
    assert_eq!(app.sw_deliver(P, SECRET, "wh_1", &done).await, Outcome::Applied);
    let job = app.api.job_now(P, "resp_1").await;
    assert_eq!(job.job.state, JobState::Succeeded);
    assert_eq!(job.job.terminal_source, Some(Source::Push));
    assert_eq!(job.job.seq, Some((CREATED + 30) * 1000));
    assert_eq!(job.job.finished_at.as_deref(), Some("2026-11-30T10:00:30.000Z"));

    // OpenAI retries for days: the same webhook-id with a new timestamp is a duplicate.
    let body = serde_json::to_vec(&done).unwrap();
    let (status, answer) = app.sw_hook_at(P, SECRET, "wh_1", now_secs() + 2, &body).await;
    assert_eq!((status, answer.outcome), (StatusCode::from_u16(200).unwrap(), Some(Outcome::Duplicate)));
    // A second event about a finished response (another delivery) changes nothing.
    let cancelled = event("response.cancelled", "resp_1", CREATED + 40);
    assert_eq!(app.sw_deliver(P, SECRET, "wh_2", &cancelled).await, Outcome::Stale);
    assert_eq!(app.api.job_now(P, "resp_1").await.job.state, JobState::Succeeded);

    // A replay from outside the tolerance, and a signature with another secret: 401, counted.
    let (status, _) = app.sw_hook_at(P, SECRET, "wh_1", now_secs() - 301 - 60, &body).await;
    assert_eq!(status, 401);
    let (status, _) = app.sw_hook_at(P, "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "wh_3", now_secs(), &body).await;
    assert_eq!(status, 401);

    // Incomplete and expired are failures with a reason.
    assert_eq!(app.sw_deliver(P, SECRET, "wh_4", &event("response.incomplete", "resp_2", CREATED)).await, Outcome::Applied);
    let job = app.api.job_now(P, "resp_2").await;
    assert_eq!(job.job.state, JobState::Failed);
    assert!(job.job.error.as_deref().unwrap().contains("incomplete"), "{job:?}");
    assert_eq!(app.sw_deliver(P, SECRET, "wh_5", &event("batch.expired", "batch_1", CREATED)).await, Outcome::Applied);
    let job = app.api.job_now(P, "batch_1").await;
    assert_eq!(job.job.state, JobState::Failed);
    assert!(job.job.error.as_deref().unwrap().contains("expired"), "{job:?}");
    assert_eq!(app.sw_deliver(P, SECRET, "wh_6", &event("fine_tuning.job.cancelled", "ftjob-1", CREATED)).await, Outcome::Applied);
    assert_eq!(app.api.job_now(P, "ftjob-1").await.job.state, JobState::Canceled);

    // An event type NeverMiss does not act on: 200 ignored (never a 4xx: OpenAI would retry it
    // for days), not kept.
    let (status, answer) = app.sw_hook(P, SECRET, "wh_7", &event("response.created", "resp_3", CREATED)).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Ignored)), "{answer:?}");
    assert!(app.api.delivery(P, "wh_7").await.is_none());

    assert_eq!(app.api.timeline(P, "resp_1").await, ["push:applied:succeeded", "push:duplicate:succeeded", "push:stale:canceled"]);
    let m = app.api.metrics().await.store;
    assert_eq!((m.bad_signatures, m.duplicates, m.ignored, m.applied), (2, 1, 1, 4), "{m:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_responses_rescues_a_lost_completion() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;

    // Tracked: polled at once.
    stand.json("resp_1", response("resp_1", "in_progress"));
    app.api.track_job(P, "resp_1").await;
    let job = app.api.wait_for_state(P, "resp_1", JobState::Running).await;
    assert!(job.job.terminal_source.is_none());

    // Unchanged, polled again: not re-applied.
    app.api.reconcile_unchanged(P).await;

    // The response.completed webhook never comes; the next pass learns the end.
    stand.json("resp_1", response("resp_1", "completed"));
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.counts.rescues, 1, "{report:?}");
    app.api.job_ended_by_polling(P, "resp_1", JobState::Succeeded).await;
    assert_eq!(app.api.timeline(P, "resp_1").await, ["pull:applied:running", "pull:applied:succeeded"]);

    // The late webhook is stale.
    assert_eq!(app.sw_deliver(P, SECRET, "wh_1", &event("response.completed", "resp_1", CREATED + 60)).await, Outcome::Stale);

    // incomplete is a failure with its reason; failed carries the error.
    stand.json("resp_2", response("resp_2", "incomplete"));
    stand.json("resp_3", response("resp_3", "failed"));
    app.api.track_job(P, "resp_2").await;
    app.api.track_job(P, "resp_3").await;
    let job = app.api.wait_for_state(P, "resp_2", JobState::Failed).await;
    assert_eq!(job.job.error.as_deref(), Some("incomplete: max_output_tokens"));
    let job = app.api.wait_for_state(P, "resp_3", JobState::Failed).await;
    assert_eq!(job.job.error.as_deref(), Some("server_error: The model crashed"));

    let seen = stand.seen();
    assert!(seen.iter().all(|s| s.path.starts_with("/v1/responses/resp_")), "{seen:?}");
    assert!(seen.iter().all(|s| header(&s.headers, "authorization") == format!("Bearer {API_KEY}")));
    let metrics = app.api.metrics().await;
    assert_eq!(metrics.store.reconcile_rescues, 3, "{metrics:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_batches_and_fine_tuning_jobs() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), None).await;

    stand.json("batch_1", batch("batch_1", "validating"));
    app.api.track_job(P, "batch_1").await;
    app.api.wait_for_state(P, "batch_1", JobState::Queued).await;

    stand.json("batch_1", batch("batch_1", "in_progress"));
    assert_eq!(app.api.reconcile().await.pass.counts.applied, 1);
    assert_eq!(app.api.job_now(P, "batch_1").await.job.state, JobState::Running);
    // finalizing is still running, but later: applied (its own time moved on).
    stand.json("batch_1", batch("batch_1", "finalizing"));
    assert_eq!(app.api.reconcile().await.pass.counts.applied, 1);
    // Polled again unchanged: not re-applied.
    assert_eq!(app.api.reconcile().await.pass.counts.applied, 0);

    stand.json("batch_1", batch("batch_1", "completed"));
    let report = app.api.reconcile().await;
    // No webhook secret is set: a completion by polling, not a rescue.
    assert_eq!(report.pass.counts.rescues, 0, "{report:?}");
    let job = app.api.job_ended_by_polling(P, "batch_1", JobState::Succeeded).await;
    assert_eq!(job.job.detail.as_deref(), Some("95 of 100 requests completed, 5 failed"));
    assert_eq!(
        app.api.timeline(P, "batch_1").await,
        ["pull:applied:queued", "pull:applied:running", "pull:applied:running", "pull:applied:succeeded"]
    );

    for (id, status, state) in [("batch_2", "expired", "failed"), ("batch_3", "failed", "failed"), ("batch_4", "cancelled", "canceled")] {
        stand.json(id, batch(id, status));
        app.api.track_job(P, id).await;
        app.api.wait_for_state(P, id, JobState::parse(state).unwrap()).await;
    }
    assert!(app.api.job_now(P, "batch_2").await.job.error.as_deref().unwrap().contains("24h"));
    assert_eq!(app.api.job_now(P, "batch_3").await.job.error.as_deref(), Some("invalid_json: Line 1 is not valid JSON."));

    stand.json("ftjob-abc123", fine_tuning_job("ftjob-abc123", "running"));
    app.api.track_job(P, "ftjob-abc123").await;
    app.api.wait_for_state(P, "ftjob-abc123", JobState::Running).await;
    stand.json("ftjob-abc123", fine_tuning_job("ftjob-abc123", "succeeded"));
    app.api.reconcile().await;
    let job = app.api.job_now(P, "ftjob-abc123").await;
    assert_eq!((job.job.state, job.job.terminal_source), (JobState::Succeeded, Some(Source::Pull)));
    assert_eq!(job.job.detail.as_deref(), Some("model ft:gpt-4o-mini:my-org:custom:id"));
    assert!(stand.seen().iter().any(|s| s.path == "/v1/fine_tuning/jobs/ftjob-abc123"));
    assert!(stand.seen().iter().any(|s| s.path == "/v1/batches/batch_1"));

    // An id of a kind without a status endpoint: that job alone cannot be polled.
    app.api.track_job(P, "evalrun_67abd54d60ec8190832b46859da808f7").await;
    let job = app.api.wait_for_poll_error(P, "evalrun_67abd54d60ec8190832b46859da808f7", "cannot poll this job").await;
    assert_eq!(job.job.state, JobState::Unknown);
    assert!(!stand.seen().iter().any(|s| s.path.contains("evalrun")));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_api_key_pauses_the_provider_and_shows() {
    let (mut app, stand, url) = start(P, routes, Some("sk-proj-revoked"), None).await;
    stand.json("resp_1", response("resp_1", "completed"));
    app.api.track_job(P, "resp_1").await;

    // Tracked, the job is polled at once: the provider is paused before any pass.
    app.api.wait_for_health(P, HealthStatus::Misconfigured).await;
    // A pass on demand tries again (the user may just have fixed it) and reports the refusal.
    refused_key_until_fixed(&app, P, &url, "resp_1", JobState::Unknown, (Some(API_KEY), None)).await;
    assert_eq!(app.api.job_now(P, "resp_1").await.job.state, JobState::Succeeded);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_pauses_the_provider_for_retry_after_ms() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), None).await;
    // OpenAI rounds `retry-after` up to whole seconds; `retry-after-ms` is the precise wait.
    stand.answer_everything(Some(Answer::RateLimited(vec![
        ("retry-after", "91"),
        ("retry-after-ms", "90500"),
        ("x-ratelimit-limit-requests", "500"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "1m30.5s"),
    ])));
    // Tracked, the job is polled at once, once; paused, a pass on demand asks nothing more.
    app.api.track_job(P, "resp_1").await;
    let asked = rate_limited(&app, &stand, P, Duration::from_millis(90_500), false, &["resp_1"]).await;
    assert_eq!(asked, 1);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_keeps_its_reason_and_the_others_go_on() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), None).await;
    app.set_setting("provider_timeout_secs", "1").await;
    let faults =
        JobFaults { gone: "resp_gone", bad: "resp_bad", broken: "batch_broken", slow: "resp_slow", fine: "batch_fine", status: 500 };
    faults.arrange(&stand, response("resp_slow", "completed"), batch("batch_fine", "completed"));
    for id in faults.ids() {
        app.api.track_job(P, id).await;
    }
    faults.check_jobs(&app.api, P, JobState::Unknown).await;

    let metrics = app.api.metrics().await;
    assert_eq!(metrics.store.jobs_not_found, 1, "{metrics:?}");
    // No webhook secret is set here: the end learned by polling is not a rescue.
    assert_eq!((metrics.store.reconcile_rescues, metrics.store.poll_only_completions), (0, 1));
    // Job failures back off the job, not the provider.
    let health = metrics.providers.get(P);
    assert!(health.is_none_or(|h| h.status == HealthStatus::Ok), "{metrics:?}");
    app.shutdown().await;
}

/// A response's output text, a batch's counts and files, a fine-tuning job's model: the same
/// whether the end came by webhook (thin: the job is read at once, with the API key) or by polling
/// alone (contract §6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_is_the_same_by_webhook_and_by_polling() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;
    let answered = |id: &str| {
        let mut r = response(id, "completed");
        r["output"] = json!([{
            "type": "message", "id": format!("msg_{id}"), "role": "assistant", "status": "completed",
            "content": [{ "type": "output_text", "text": "The answer is 42.\nBecause six times seven.", "annotations": [] }]
        }]);
        r
    };
    let text = |t: &str| Some(JobResult { text: Some(t.to_owned()), urls: vec![], image: None });
    let cases = [
        ("resp_hook", "resp_poll", "response.completed", text("The answer is 42.\nBecause six times seven.")),
        (
            "batch_hook",
            "batch_poll",
            "batch.completed",
            text("95 of 100 requests completed, 5 failed\noutput file file-cvaTdG\nerror file file-HOWS94"),
        ),
        ("ftjob-hook", "ftjob-poll", "fine_tuning.job.succeeded", text("model ft:gpt-4o-mini:my-org:custom:id")),
    ];
    for (i, (by_hook, by_poll, kind, expected)) in cases.into_iter().enumerate() {
        for id in [by_hook, by_poll] {
            let object = match id {
                _ if id.starts_with("resp_") => answered(id),
                _ if id.starts_with("batch_") => batch(id, "completed"),
                _ => fine_tuning_job(id, "succeeded"),
            };
            stand.json(id, object);
        }
        assert_eq!(app.sw_deliver(P, SECRET, &format!("wh_{i}"), &event(kind, by_hook, CREATED + 60)).await, Outcome::Applied);
        app.api.track_job(P, by_poll).await;
        let polled = app.api.wait_for_job(P, by_poll, "its end and result by polling", |j| j.job.result.is_some()).await;
        let pushed = app.api.wait_for_job(P, by_hook, "its result read after the webhook", |j| j.job.result.is_some()).await;
        assert_eq!((pushed.job.terminal_source, polled.job.terminal_source), (Some(Source::Push), Some(Source::Pull)), "{kind}");
        assert_eq!(pushed.job.result, expected, "{kind}: {pushed:?}");
        assert_eq!(polled.job.result, expected, "{kind}: {polled:?}");
        // OpenAI's pages for these are not linked (their URL form is not documented).
        assert_eq!((pushed.job.provider_url.as_deref(), polled.job.provider_url.as_deref()), (None, None));
        // The webhook told neither the kind nor the start; the read after it told both, so the
        // success counts in its kind's durations: from the object's created_at to the webhook's
        // end, 60 s.
        let kind = pushed.job.kind.clone().unwrap_or_else(|| panic!("{kind}: the read names the job's kind: {pushed:?}"));
        let windows = app.read(nevermiss_engine::store::durations::windows).await;
        assert!(windows.get(&kind).is_some_and(|durations| durations.contains(&60_000)), "{kind}: {windows:?}");
    }
    app.shutdown().await;
}

/// A job started elsewhere joins its group through the metadata OpenAI keeps on it
/// (`metadata={"nevermiss_group": ...}` on a response, a batch or a fine-tuning job): tracked
/// with no group, polled, it is in the group; when the three end, the group is heard once. Other
/// metadata keys name no group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_tagged_with_a_group_in_their_metadata_join_it() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), None).await;
    app.set_setting("group_end_grace_secs", "0").await;
    let tagged = |mut body: Value| {
        body["metadata"] = json!({ "nevermiss_group": "shards", "customer_id": "user_123456789" });
        body
    };
    let jobs = [
        ("batch_g1", tagged(batch("batch_g1", "in_progress")), tagged(batch("batch_g1", "completed"))),
        ("resp_g2", tagged(response("resp_g2", "in_progress")), tagged(response("resp_g2", "completed"))),
        ("ftjob-g3", tagged(fine_tuning_job("ftjob-g3", "running")), tagged(fine_tuning_job("ftjob-g3", "succeeded"))),
    ];
    for (id, running, _) in &jobs {
        stand.json(id, running.clone());
        app.api.track_job(P, id).await;
        let job = app.api.wait_for_state(P, id, JobState::Running).await;
        assert_eq!(job.job.group.as_deref(), Some("shards"), "{id}");
    }
    stand.json("batch_plain", batch("batch_plain", "in_progress"));
    app.api.track_job(P, "batch_plain").await;
    assert_eq!(app.api.wait_for_state(P, "batch_plain", JobState::Running).await.job.group, None, "customer_id names no group");

    for (id, _, done) in &jobs {
        stand.json(id, done.clone());
    }
    app.api.reconcile().await;
    for (id, _, _) in &jobs {
        app.api.wait_for_state(P, id, JobState::Succeeded).await;
    }
    let identity = "nevermiss:group:shards@3:group_end";
    harness::wait_until("the group's end is shown", || {
        let shown = app.notifier.count(identity) == 1;
        async move { shown }
    })
    .await;
    for (id, _, _) in &jobs {
        assert_eq!(app.notifier.count(&format!("nevermiss:openai:{id}:terminal")), 0, "{id}: a grouped success is quiet");
    }
    app.shutdown().await;
}

//! The long jobs: OpenAI videos (`video.completed` / `video.failed` webhooks, `GET /v1/videos/{id}`
//! with `queued`, `in_progress`, `completed`, `failed`; times in Unix seconds, integer or
//! fractional) and Replicate trainings (a training object as the webhook body, told from a
//! prediction by its `urls.get`; `GET /v1/trainings/{id}`, the same statuses as predictions). Each ends by webhook,
//! and by polling alone. Objects are shaped as the SDKs' `Video` and `Training` types.

use std::sync::Arc;

use crate::harness::conformance::{fixture, off_spec_sends};
use crate::harness::stand_in::*;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use nevermiss_engine::store::job::{JobState, Outcome, Source};
use serde_json::{json, Value};

const OPENAI_KEY: &str = "sk-proj-standin0123456789";
const OPENAI_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const REPLICATE_KEY: &str = "r8_standin0123456789";
const REPLICATE_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn error_body(status: u16) -> Value {
    json!({ "error": { "message": format!("status {status}"), "type": "invalid_request_error", "param": null, "code": null }, "detail": "Not found." })
}

async fn route(State(stand): State<Arc<StandIn>>, Path((kind, id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    let answer = stand.take(&format!("{kind}/{id}"), &format!("/v1/{kind}/{id}"), &headers);
    let auth = header(&headers, "authorization");
    if auth != format!("Bearer {OPENAI_KEY}") && auth != format!("Bearer {REPLICATE_KEY}") {
        return (StatusCode::UNAUTHORIZED, axum::Json(error_body(401))).into_response();
    }
    respond(answer, error_body).await
}

/// One stand-in for both APIs: `GET /v1/{kind}/{id}`, answers keyed `kind/id`.
fn routes() -> Router<Arc<StandIn>> {
    Router::new().route("/v1/{kind}/{id}", get(route))
}

/// `GET /v1/videos/{id}` as the SDK's `Video` has it (the checked fixture; its times are integers).
fn video(id: &str, status: &str, progress: i64) -> Value {
    let ended = status == "completed" || status == "failed";
    fixture("openai/video")
        .id(id)
        .status(status)
        .set("created_at", 1_796_032_800)
        .set("completed_at", if ended { json!(1_796_033_100) } else { Value::Null })
        .set("expires_at", Value::Null)
        .set(
            "error",
            if status == "failed" { json!({"code": "moderation_blocked", "message": "The prompt was blocked"}) } else { Value::Null },
        )
        .set("progress", progress)
        .value()
}

/// An OpenAI webhook event; `created_at` may be fractional.
fn openai_event(kind: &str, id: &str, created_at: Value) -> Value {
    json!({"id": format!("evt_{id}"), "object": "event", "type": kind, "created_at": created_at, "data": {"id": id}})
}

/// A training as Replicate's API and webhooks carry it (`TrainingGetResponse` in replicate-python
/// 2: no `destination`; the checked fixture).
pub(crate) fn training(id: &str, status: &str) -> Value {
    let done = matches!(status, "succeeded" | "failed" | "canceled");
    fixture("replicate/training")
        .id(id)
        .status(status)
        .set("output", if status == "succeeded" { json!({"version": "alice/sdxl-fine-tuned:abcdef", "weights": "https://replicate.delivery/weights.tar"}) } else { Value::Null })
        .set("error", if status == "failed" { json!("CUDA out of memory") } else { Value::Null })
        .set("created_at", "2026-11-30T10:00:00.000000Z")
        .set("started_at", if status == "starting" { Value::Null } else { json!("2026-11-30T10:00:05.000000Z") })
        .set("completed_at", if done { json!("2026-11-30T10:40:00.500000Z") } else { Value::Null })
        .set(
            "urls",
            json!({"get": format!("https://api.replicate.com/v1/trainings/{id}"), "cancel": format!("https://api.replicate.com/v1/trainings/{id}/cancel")}),
        )
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn videos_end_by_webhook_with_integer_or_fractional_times() {
    let (mut app, _stand, _url) = start("openai", routes, None, Some(OPENAI_SECRET)).await;

    // `video.*` is not in openai-python's `UnwrapWebhookEvent` yet, and its `created_at` is an
    // integer there: a fractional one is read too.
    let done = openai_event("video.completed", "video_68d7512d07848190b3e45da0ecbebcde", json!(1_796_033_100.25));
    let why = "video.* webhooks, not in openai-python's union yet (one with a fractional created_at)";
    assert_eq!(off_spec_sends(why, app.sw_deliver("openai", OPENAI_SECRET, "wh_1", &done)).await, Outcome::Applied);
    let job = app.api.job_now("openai", "video_68d7512d07848190b3e45da0ecbebcde").await;
    assert_eq!((job.job.state, job.job.terminal_source), (JobState::Succeeded, Some(Source::Push)));
    assert_eq!(job.job.finished_at.as_deref(), Some("2026-11-30T10:05:00.250Z"));

    let failed = openai_event("video.failed", "video_2", json!(1_796_033_100));
    assert_eq!(off_spec_sends(why, app.sw_deliver("openai", OPENAI_SECRET, "wh_2", &failed)).await, Outcome::Applied);
    let job = app.api.job_now("openai", "video_2").await;
    assert_eq!(job.job.state, JobState::Failed);
    assert_eq!(job.job.finished_at.as_deref(), Some("2026-11-30T10:05:00.000Z"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn videos_end_by_polling_alone() {
    let (mut app, stand, _url) = start("openai", routes, Some(OPENAI_KEY), Some(OPENAI_SECRET)).await;

    let id = "video_68d7512d07848190b3e45da0ecbef000";
    stand.json(&format!("videos/{id}"), video(id, "queued", 0));
    app.api.track_job("openai", id).await;
    app.api.wait_for_state("openai", id, JobState::Queued).await;
    stand.json(&format!("videos/{id}"), video(id, "in_progress", 40));
    assert_eq!(app.api.reconcile().await.pass.counts.applied, 1);
    assert_eq!(app.api.job_now("openai", id).await.job.state, JobState::Running);
    stand.json(&format!("videos/{id}"), video(id, "in_progress", 80));
    assert_eq!(app.api.reconcile().await.pass.counts.applied, 1, "progress moves it forward");
    stand.json(&format!("videos/{id}"), video(id, "completed", 100));
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.counts.applied, 1, "{report:?}");
    let job = app.api.job_now("openai", id).await;
    assert_eq!((job.job.state, job.job.terminal_source), (JobState::Succeeded, Some(Source::Pull)));
    assert_eq!(job.job.finished_at.as_deref(), Some("2026-11-30T10:05:00.000Z"));
    assert_eq!(job.job.label.as_deref(), Some("sora-2"));

    stand.json("videos/video_bad", video("video_bad", "failed", 30));
    app.api.track_job("openai", "video_bad").await;
    let job = app.api.wait_for_state("openai", "video_bad", JobState::Failed).await;
    assert_eq!(job.job.error.as_deref(), Some("moderation_blocked: The prompt was blocked"));
    assert!(stand.seen().iter().all(|s| s.path.starts_with("/v1/videos/")));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trainings_end_by_webhook() {
    let (mut app, _stand, _url) = start("replicate", routes, None, Some(REPLICATE_SECRET)).await;

    let id = "zz4ibbonubfz7carwiefibzgga";
    assert_eq!(app.sw_deliver("replicate", REPLICATE_SECRET, "msg_1", &training(id, "processing")).await, Outcome::Applied);
    let job = app.api.job_now("replicate", id).await;
    assert_eq!((job.job.state, job.job.label.as_deref()), (JobState::Running, Some("training of stability-ai/sdxl")));
    assert_eq!(app.sw_deliver("replicate", REPLICATE_SECRET, "msg_2", &training(id, "succeeded")).await, Outcome::Applied);
    let job = app.api.job_now("replicate", id).await;
    assert_eq!((job.job.state, job.job.terminal_source), (JobState::Succeeded, Some(Source::Push)));
    assert_eq!(job.job.finished_at.as_deref(), Some("2026-11-30T10:40:00.500Z"));

    assert_eq!(app.sw_deliver("replicate", REPLICATE_SECRET, "msg_3", &training("zz_failed", "failed")).await, Outcome::Applied);
    assert_eq!(app.api.job_now("replicate", "zz_failed").await.job.error.as_deref(), Some("CUDA out of memory"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tracked_training_is_polled_at_its_own_endpoint() {
    let (mut app, stand, _url) = start("replicate", routes, Some(REPLICATE_KEY), Some(REPLICATE_SECRET)).await;

    // Tracked by id alone: not a prediction (404), so a training, remembered as one.
    let id = "zz4ibbonubfz7carwiefibzgga";
    stand.json(&format!("trainings/{id}"), training(id, "processing"));
    app.api.track_job("replicate", id).await;
    app.api.wait_for_state("replicate", id, JobState::Running).await;
    assert_eq!(stand.count(&format!("/v1/predictions/{id}")), 1);
    assert_eq!(stand.count(&format!("/v1/trainings/{id}")), 1);

    stand.json(&format!("trainings/{id}"), training(id, "succeeded"));
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.counts.applied, 1, "{report:?}");
    let job = app.api.job_now("replicate", id).await;
    assert_eq!((job.job.state, job.job.terminal_source), (JobState::Succeeded, Some(Source::Pull)));
    assert!(job.job.poll_error.is_none(), "{job:?}");
    // The second poll went straight to the training.
    assert_eq!(stand.count(&format!("/v1/predictions/{id}")), 1);
    assert_eq!(stand.count(&format!("/v1/trainings/{id}")), 2);

    // A prediction is still a prediction.
    let prediction =
        fixture("replicate/prediction").id("p_1").set("created_at", "2026-11-30T10:00:00Z").set("completed_at", "2026-11-30T10:01:00Z");
    stand.json("predictions/p_1", prediction.value());
    app.api.track_job("replicate", "p_1").await;
    app.api.wait_for_state("replicate", "p_1", JobState::Succeeded).await;
    assert_eq!(stand.count("/v1/trainings/p_1"), 0);
    // Neither: the 404 is kept on the job.
    app.api.track_job("replicate", "nothing_here").await;
    app.api.wait_for_poll_error("replicate", "nothing_here", "404").await;
    app.shutdown().await;
}

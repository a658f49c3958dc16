//! Cancel end to end (contract §6): `POST /api/jobs/{provider}/{job_id}/cancel`
//! against each provider's stand-in. The provider's own cancel call is made once, with its method,
//! path and headers (each cancel route answers only its own method); the stand-in then flips the
//! job and the poll the engine asks for right away finds it, so the job ends `canceled` through
//! the merge point (`pull:applied:canceled`), never written by the cancel itself. A job NeverMiss
//! knows is finished answers 409 without a call; a provider's refusal is answered 502 in its own
//! words; a kind of job without a cancel answers 501. Each request is on the job's timeline
//! (`requested`) and counted (`cancel_requests`). A hub's device may cancel only while the owner
//! allows it (`devices_may_cancel`, off by default).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use nevermiss_engine::api::cancel::CancelAnswer;
use nevermiss_engine::api::devices::DeviceToken;
use nevermiss_engine::api::ErrorBody;
use nevermiss_engine::store::job::JobState;
use serde_json::{json, Value};

use crate::harness::api::ApiClient;
use crate::harness::conformance::fixture;
use crate::harness::stand_in::*;
use crate::harness::TestApp;
use crate::{provider_anthropic as anthropic, provider_openai as openai, provider_replicate as replicate};

fn cancel_path(provider: &str, job_id: &str) -> String {
    format!("/api/jobs/{provider}/{job_id}/cancel")
}

/// Asks the engine to cancel a job; returns the status and the JSON answer.
async fn cancel(api: &ApiClient, provider: &str, job_id: &str) -> (StatusCode, Value) {
    let response = api.raw_post(&cancel_path(provider, job_id), &json!({})).await;
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The cancel requests a stand-in saw (`METHOD path`).
pub(crate) fn cancels(stand: &StandIn) -> Vec<String> {
    stand.seen().into_iter().map(|s| s.path).filter(|p| p.ends_with("/cancel") || p.ends_with("/events")).collect()
}

// ----- Replicate -----

/// A cancel of a prediction (kept under its id) or a training (under `trainings/{id}`, so a
/// training's id is unknown to the predictions' routes, as on Replicate).
async fn replicate_cancel(stand: &StandIn, kind: &str, id: &str, headers: &HeaderMap) -> Response {
    let refusal =
        (!replicate::authorized(headers)).then(|| (StatusCode::UNAUTHORIZED, axum::Json(replicate::error_body(401))).into_response());
    let key = if kind == "trainings" { format!("trainings/{id}") } else { id.to_owned() };
    stand.cancel(&key, &format!("POST /v1/{kind}/{id}/cancel"), headers, refusal, replicate::error_body).await
}

async fn replicate_prediction_cancel(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    replicate_cancel(&stand, "predictions", &id, &headers).await
}

async fn replicate_training_cancel(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    replicate_cancel(&stand, "trainings", &id, &headers).await
}

async fn replicate_training(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    stand
        .answer(
            &format!("trainings/{id}"),
            &format!("/v1/trainings/{id}"),
            &headers,
            replicate::authorized(&headers),
            replicate::error_body,
        )
        .await
}

pub(crate) fn replicate_routes() -> Router<Arc<StandIn>> {
    Router::new()
        .route("/v1/predictions/{id}", get(replicate::prediction_route))
        .route("/v1/trainings/{id}", get(replicate_training))
        .route("/v1/predictions/{id}/cancel", post(replicate_prediction_cancel))
        .route("/v1/trainings/{id}/cancel", post(replicate_training_cancel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicate_predictions_and_trainings_are_canceled_through_the_merge_point() {
    let (mut app, stand, _url) = start("replicate", replicate_routes, Some(replicate::API_KEY), None).await;

    // A running prediction: Replicate accepts and answers the prediction, now canceled.
    stand.json("p1", replicate::prediction("p1", "processing"));
    app.api.track_job("replicate", "p1").await;
    app.api.wait_for_state("replicate", "p1", JobState::Running).await;
    stand.json("cancel:p1", replicate::prediction("p1", "canceled"));
    stand.json("canceled:p1", replicate::prediction("p1", "canceled"));
    let (status, answer) = cancel(&app.api, "replicate", "p1").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let answer: CancelAnswer = serde_json::from_value(answer).unwrap();
    assert!(answer.requested);
    assert_eq!(answer.answer, "accepted (status canceled)");
    let job = app.api.wait_for_state("replicate", "p1", JobState::Canceled).await;
    assert_eq!(job.job.terminal_source.map(|s| s.as_str()), Some("pull"), "the end came by the poll");
    assert_eq!(cancels(&stand), ["POST /v1/predictions/p1/cancel"]);
    let seen = stand.seen().into_iter().find(|s| s.path.ends_with("/cancel")).unwrap();
    assert_eq!(header(&seen.headers, "authorization"), format!("Bearer {}", replicate::API_KEY));
    let timeline = app.api.timeline("replicate", "p1").await;
    assert!(timeline.ends_with(&["pull:requested:running".to_owned(), "pull:applied:canceled".to_owned()]), "{timeline:?}");
    let requested = app.api.job_now("replicate", "p1").await.timeline.into_iter().find(|e| e.outcome.as_str() == "requested").unwrap();
    assert_eq!(requested.detail.as_deref(), Some("cancel requested: accepted (status canceled)"));

    // Finished now: 409, and Replicate is not asked again.
    let (status, answer) = cancel(&app.api, "replicate", "p1").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"], "the job is already finished (canceled)");
    assert_eq!(cancels(&stand).len(), 1);

    // A training (found by its poll, so its poll URL is known): its own cancel.
    stand.json("trainings/t1", crate::videos_trainings::training("t1", "processing"));
    app.api.track_job("replicate", "t1").await;
    app.api.wait_for_state("replicate", "t1", JobState::Running).await;
    stand.json("cancel:trainings/t1", crate::videos_trainings::training("t1", "canceled"));
    stand.json("canceled:trainings/t1", crate::videos_trainings::training("t1", "canceled"));
    assert_eq!(cancel(&app.api, "replicate", "t1").await.0, StatusCode::ACCEPTED);
    app.api.wait_for_state("replicate", "t1", JobState::Canceled).await;
    assert_eq!(cancels(&stand), ["POST /v1/predictions/p1/cancel", "POST /v1/trainings/t1/cancel"]);

    // Unknown to NeverMiss: 404, nobody asked.
    assert_eq!(cancel(&app.api, "replicate", "nope").await.0, StatusCode::NOT_FOUND);
    assert_eq!(cancels(&stand).len(), 2);
    assert_eq!(app.api.metrics().await.store.cancel_requests, 2);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_refusal_is_answered_in_its_own_words_and_the_job_goes_on() {
    let (mut app, stand, _url) = start("replicate", replicate_routes, Some(replicate::API_KEY), None).await;
    stand.json("p2", replicate::prediction("p2", "processing"));
    app.api.track_job("replicate", "p2").await;
    app.api.wait_for_state("replicate", "p2", JobState::Running).await;
    // Replicate says it cannot (its problem-details shape).
    let refusal = json!({"title": "Prediction cannot be canceled", "detail": "Prediction is already finishing", "status": 400});
    stand.set("cancel:p2", Answer::JsonStatus(400, refusal));
    let (status, answer) = cancel(&app.api, "replicate", "p2").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}");
    let answer: ErrorBody = serde_json::from_value(answer).unwrap();
    assert_eq!(answer.error, "the provider answered 400: Prediction is already finishing");
    assert_eq!(cancels(&stand).len(), 1);
    // On the timeline as answered; the job is still running, its state untouched.
    let job = app.api.job_now("replicate", "p2").await;
    assert_eq!(job.job.state, JobState::Running);
    let requested = job.timeline.iter().find(|e| e.outcome.as_str() == "requested").expect("the request is on the timeline");
    assert_eq!(requested.detail.as_deref(), Some("cancel refused: the provider answered 400: Prediction is already finishing"));

    // A refused key is the provider's refusal too.
    app.set_secret("replicate", nevermiss_engine::providers::SecretKind::ApiKey, Some("r8_wrong"));
    let (status, answer) = cancel(&app.api, "replicate", "p2").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(answer["error"], "the provider answered 401: You did not pass a valid authentication token");
    assert_eq!(app.api.metrics().await.store.cancel_requests, 2);
    app.shutdown().await;
}

// ----- OpenAI -----

async fn openai_cancel(State(stand): State<Arc<StandIn>>, Path((kind, id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    let refusal = (header(&headers, "authorization") != format!("Bearer {}", openai::API_KEY))
        .then(|| (StatusCode::UNAUTHORIZED, axum::Json(openai::error_body(401))).into_response());
    stand.cancel(&id, &format!("POST /v1/{kind}/{id}/cancel"), &headers, refusal, openai::error_body).await
}

async fn openai_fine_tuning_cancel(stand: State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    openai_cancel(stand, Path(("fine_tuning/jobs".to_owned(), id)), headers).await
}

fn openai_routes() -> Router<Arc<StandIn>> {
    Router::new()
        .route("/v1/fine_tuning/jobs/{id}", get(openai::fine_tuning_route))
        .route("/v1/fine_tuning/jobs/{id}/cancel", post(openai_fine_tuning_cancel))
        .route("/v1/{kind}/{id}", get(openai::object_route))
        .route("/v1/{kind}/{id}/cancel", post(openai_cancel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_batches_and_fine_tuning_jobs_are_canceled_through_the_merge_point() {
    let (mut app, stand, _url) = start("openai", openai_routes, Some(openai::API_KEY), None).await;
    let jobs = [
        ("resp_c1", openai::response("resp_c1", "in_progress"), openai::response("resp_c1", "cancelled"), "/v1/responses/resp_c1/cancel"),
        ("batch_c1", openai::batch("batch_c1", "in_progress"), openai::batch("batch_c1", "cancelled"), "/v1/batches/batch_c1/cancel"),
        (
            "ftjob-c1",
            openai::fine_tuning_job("ftjob-c1", "running"),
            openai::fine_tuning_job("ftjob-c1", "cancelled"),
            "/v1/fine_tuning/jobs/ftjob-c1/cancel",
        ),
    ];
    for (id, running, canceled, path) in jobs {
        stand.json(id, running);
        app.api.track_job("openai", id).await;
        app.api.wait_for_job("openai", id, "running", |j| j.job.state == JobState::Running || j.job.state == JobState::Queued).await;
        stand.json(&format!("cancel:{id}"), canceled.clone());
        stand.json(&format!("canceled:{id}"), canceled);
        let (status, answer) = cancel(&app.api, "openai", id).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{id}: {answer}");
        assert_eq!(answer["answer"], "accepted (status cancelled)");
        let job = app.api.wait_for_state("openai", id, JobState::Canceled).await;
        assert_eq!(job.job.terminal_source.map(|s| s.as_str()), Some("pull"));
        assert_eq!(cancels(&stand).last().map(String::as_str), Some(format!("POST {path}").as_str()));
        // Finished: 409 without a call.
        assert_eq!(cancel(&app.api, "openai", id).await.0, StatusCode::CONFLICT);
    }
    assert_eq!(cancels(&stand).len(), 3, "each cancel call made once");
    for seen in stand.seen().iter().filter(|s| s.path.ends_with("/cancel")) {
        assert_eq!(header(&seen.headers, "authorization"), format!("Bearer {}", openai::API_KEY));
    }

    // A video has no cancel: 501, OpenAI not asked.
    stand.json("video_c1", fixture("openai/video").id("video_c1").status("in_progress").value());
    app.api.track_job("openai", "video_c1").await;
    app.api.wait_for_job("openai", "video_c1", "polled", |j| j.job.last_polled_at.is_some()).await;
    let (status, answer) = cancel(&app.api, "openai", "video_c1").await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{answer}");
    assert_eq!(answer["error"], "the provider has no cancel for this kind of job");
    assert_eq!(cancels(&stand).len(), 3);
    assert_eq!(app.api.metrics().await.store.cancel_requests, 3);
    app.shutdown().await;
}

// ----- Anthropic -----

async fn anthropic_cancel(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let refusal = anthropic::refused(&headers, false);
    stand.cancel(&id, &format!("POST /v1/messages/batches/{id}/cancel"), &headers, refusal, anthropic::error_body).await
}

fn anthropic_routes() -> Router<Arc<StandIn>> {
    Router::new()
        .route("/v1/messages/batches/{id}", get(anthropic::batch_route))
        .route("/v1/messages/batches/{id}/cancel", post(anthropic_cancel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_message_batch_is_canceled_through_the_merge_point() {
    let (mut app, stand, _url) = start("anthropic", anthropic_routes, Some(anthropic::API_KEY), None).await;
    let id = "msgbatch_c1";
    stand.json(id, anthropic::batch(id, "in_progress", [10, 0, 0, 0, 0]));
    app.api.track_job("anthropic", id).await;
    app.api.wait_for_state("anthropic", id, JobState::Running).await;
    // Anthropic answers the batch, `canceling`; it ends with every request canceled.
    stand.json(&format!("cancel:{id}"), anthropic::batch(id, "canceling", [10, 0, 0, 0, 0]));
    stand.json(&format!("canceled:{id}"), anthropic::batch(id, "ended", [0, 0, 0, 10, 0]));
    let (status, answer) = cancel(&app.api, "anthropic", id).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["answer"], "accepted (status canceling)");
    app.api.wait_for_state("anthropic", id, JobState::Canceled).await;
    assert_eq!(cancels(&stand), [format!("POST /v1/messages/batches/{id}/cancel")]);
    let seen = stand.seen().into_iter().find(|s| s.path.ends_with("/cancel")).unwrap();
    assert_eq!(header(&seen.headers, "x-api-key"), anthropic::API_KEY);
    assert_eq!(header(&seen.headers, "anthropic-version"), "2023-06-01");
    assert_eq!(cancel(&app.api, "anthropic", id).await.0, StatusCode::CONFLICT);
    assert_eq!(cancels(&stand).len(), 1);
    app.shutdown().await;
}

// ----- fal -----

const FAL_KEY: &str = "fal-test-key-1234";

async fn fal_status(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let authorized = header(&headers, "authorization") == format!("Key {FAL_KEY}");
    stand.answer(&id, &format!("/fal-ai/flux/requests/{id}/status"), &headers, authorized, |_| json!({"detail": "refused"})).await
}

async fn fal_cancel(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let refusal = (header(&headers, "authorization") != format!("Key {FAL_KEY}"))
        .then(|| (StatusCode::UNAUTHORIZED, axum::Json(json!({"detail": "Unauthorized"}))).into_response());
    stand.cancel(&id, &format!("PUT /fal-ai/flux/requests/{id}/cancel"), &headers, refusal, |_| json!({"status": "NOT_FOUND"})).await
}

/// A request's result (its response URL): what is set for `response:{id}`.
async fn fal_response(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let authorized = header(&headers, "authorization") == format!("Key {FAL_KEY}");
    stand
        .answer(&format!("response:{id}"), &format!("/fal-ai/flux/requests/{id}"), &headers, authorized, |_| json!({"detail": "refused"}))
        .await
}

fn fal_routes() -> Router<Arc<StandIn>> {
    Router::new()
        .route("/fal-ai/flux/requests/{id}/status", get(fal_status))
        .route("/fal-ai/flux/requests/{id}", get(fal_response))
        .route("/fal-ai/flux/requests/{id}/cancel", put(fal_cancel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fal_request_is_cancelled_at_its_queue_and_a_finished_one_is_refused_as_fal_says() {
    let (mut app, stand, url) = start("fal", fal_routes, Some(FAL_KEY), None).await;
    let status = |id: &str, s: &str| {
        fixture("fal/status_completed")
            .status(s)
            .set("request_id", id)
            .set("response_url", format!("{url}/fal-ai/flux/requests/{id}"))
            .value()
    };
    for id in ["r-1", "r-2"] {
        stand.json(id, status(id, "IN_PROGRESS"));
        let track = json!({"provider": "fal", "job_id": id, "status_url": format!("{url}/fal-ai/flux/requests/{id}/status")});
        let _: Value = app.api.post("/api/jobs", &track, StatusCode::CREATED).await;
        app.api.wait_for_state("fal", id, JobState::Running).await;
    }
    // fal accepts (202 `CANCELLATION_REQUESTED`); the request then ends `COMPLETED`, and its
    // response URL answers fal's request error `client_cancelled` (499): canceled, not failed,
    // through the merge point.
    stand.set("cancel:r-1", Answer::JsonStatus(202, json!({"status": "CANCELLATION_REQUESTED"})));
    stand.json("canceled:r-1", status("r-1", "COMPLETED"));
    stand.set("response:r-1", Answer::JsonStatus(499, fixture("fal/response_cancelled").value()));
    let (code, answer) = cancel(&app.api, "fal", "r-1").await;
    assert_eq!(code, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["answer"], "accepted (status CANCELLATION_REQUESTED)");
    let job = app.api.wait_for_state("fal", "r-1", JobState::Canceled).await;
    assert_eq!(job.job.terminal_source.map(|s| s.as_str()), Some("pull"), "the end came by the poll");
    assert_eq!(job.job.error.as_deref(), Some("client_cancelled: The request was cancelled by the client."));
    let timeline = app.api.timeline("fal", "r-1").await;
    assert!(timeline.ends_with(&["pull:requested:running".to_owned(), "pull:applied:canceled".to_owned()]), "{timeline:?}");
    // fal says it is too late, in its own word.
    stand.set("cancel:r-2", Answer::JsonStatus(400, json!({"status": "ALREADY_COMPLETED"})));
    let (code, answer) = cancel(&app.api, "fal", "r-2").await;
    assert_eq!(code, StatusCode::BAD_GATEWAY, "{answer}");
    assert_eq!(answer["error"], "the provider answered 400: ALREADY_COMPLETED");
    assert_eq!(cancels(&stand), ["PUT /fal-ai/flux/requests/r-1/cancel", "PUT /fal-ai/flux/requests/r-2/cancel"]);
    for seen in stand.seen().iter().filter(|s| s.path.ends_with("/cancel")) {
        assert_eq!(header(&seen.headers, "authorization"), format!("Key {FAL_KEY}"));
    }
    app.shutdown().await;
}

// ----- generic, and devices -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generic_contract_has_no_cancel() {
    let mut app = TestApp::spawn().await;
    app.api.track_job("generic", "g-1").await;
    let (status, answer) = cancel(&app.api, "generic", "g-1").await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{answer}");
    assert_eq!(answer["error"], "the provider has no cancel for this kind of job");
    assert_eq!(app.api.metrics().await.store.cancel_requests, 0, "nothing was asked of anyone");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hubs_device_cancels_only_when_the_owner_allows_it() {
    let (mut app, stand, _url) = start("replicate", replicate_routes, Some(replicate::API_KEY), None).await;
    stand.json("p3", replicate::prediction("p3", "processing"));
    app.api.track_job("replicate", "p3").await;
    app.api.wait_for_state("replicate", "p3", JobState::Running).await;
    stand.json("cancel:p3", replicate::prediction("p3", "canceled"));
    stand.json("canceled:p3", replicate::prediction("p3", "canceled"));
    let device: DeviceToken = app.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let as_device = ApiClient::new(app.api.base.clone(), device.token.clone());

    // Off by default: 403, Replicate not asked.
    assert!(app.api.get::<Value>("/api/settings", StatusCode::OK).await["devices_may_cancel"] == "off");
    let (status, answer) = cancel(&as_device, "replicate", "p3").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(cancels(&stand).is_empty());

    // The owner allows it: the device's request goes through, and the job ends as Replicate says.
    app.api.put_settings(&json!({"devices_may_cancel": "on"})).await;
    let (status, answer) = cancel(&as_device, "replicate", "p3").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    app.api.wait_for_state("replicate", "p3", JobState::Canceled).await;
    assert_eq!(cancels(&stand), ["POST /v1/predictions/p3/cancel"]);

    // And withdrawn again.
    app.api.put_settings(&json!({"devices_may_cancel": false})).await;
    assert_eq!(cancel(&as_device, "replicate", "p3").await.0, StatusCode::FORBIDDEN);
    app.shutdown().await;
}

// ----- the command line -----

/// `nevermiss cancel PROVIDER JOB_ID --data-dir DIR`: its exit code, stdout and stderr.
async fn cancel_command(data_dir: &std::path::Path, provider: &str, job_id: &str) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::from(crate::harness::serve_child::nevermiss_command())
        .args(["cancel", provider, job_id, "--data-dir"])
        .arg(data_dir)
        .env_remove("NEVERMISS_API_ADDR")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), out).await.expect("cancel exits").unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).trim().to_owned(), String::from_utf8_lossy(&out.stderr).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cancel_command_exits_0_when_accepted_1_otherwise_69_without_an_instance() {
    use crate::harness::serve_child::{ServeChild, ServeOptions};
    let (stand, url) = stand_in(replicate_routes).await;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let child = ServeChild::start(&ServeOptions {
        data_dir: &data_dir,
        log: &dir.path().join("serve.log"),
        receiver_addr: "127.0.0.1:0".parse().unwrap(),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        env: vec![("NEVERMISS_REPLICATE_BASE_URL".into(), url.clone()), ("NEVERMISS_REPLICATE_API_KEY".into(), replicate::API_KEY.into())],
        rust_log: "info",
    })
    .await;
    stand.json("p1", replicate::prediction("p1", "processing"));
    stand.json("cancel:p1", replicate::prediction("p1", "canceled"));
    stand.json("canceled:p1", replicate::prediction("p1", "canceled"));
    let _: Value = child.api.post("/api/jobs", &json!({"provider": "replicate", "job_id": "p1"}), StatusCode::CREATED).await;
    child.api.wait_for_state("replicate", "p1", JobState::Running).await;

    let (exit, stdout, stderr) = cancel_command(&data_dir, "replicate", "p1").await;
    assert_eq!(exit, Some(0), "stdout {stdout:?} stderr {stderr:?}");
    assert_eq!(stdout, "cancel requested: accepted (status canceled)");
    child.api.wait_for_state("replicate", "p1", JobState::Canceled).await;

    // Finished now: 1, with NeverMiss's answer; Replicate was asked once in all.
    let (exit, _, stderr) = cancel_command(&data_dir, "replicate", "p1").await;
    assert_eq!(exit, Some(1), "{stderr}");
    assert_eq!(stderr, "nevermiss: not canceled (409): the job is already finished (canceled)");
    assert_eq!(cancels(&stand), ["POST /v1/predictions/p1/cancel"]);

    // A refusal is printed as the provider answered it.
    stand.json("p2", replicate::prediction("p2", "processing"));
    stand.set(
        "cancel:p2",
        Answer::JsonStatus(400, json!({"title": "Bad request", "detail": "Prediction is already finishing", "status": 400})),
    );
    let _: Value = child.api.post("/api/jobs", &json!({"provider": "replicate", "job_id": "p2"}), StatusCode::CREATED).await;
    child.api.wait_for_state("replicate", "p2", JobState::Running).await;
    let (exit, _, stderr) = cancel_command(&data_dir, "replicate", "p2").await;
    assert_eq!(exit, Some(1), "{stderr}");
    assert_eq!(stderr, "nevermiss: not canceled (502): the provider answered 400: Prediction is already finishing");

    // No instance: 69, one line.
    assert!(child.stop().await);
    let (exit, _, stderr) = cancel_command(&data_dir, "replicate", "p2").await;
    assert_eq!(exit, Some(69), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_record_the_request_answers_503() {
    // On SQLite whatever the run's store: another process holds the SQLite file's write lock.
    let (mut app, stand, _url) = crate::harness::stand_in::start_on(
        crate::harness::app::Backend::Sqlite,
        "replicate",
        replicate_routes,
        Some(replicate::API_KEY),
        None,
    )
    .await;
    stand.json("p4", replicate::prediction("p4", "processing"));
    app.api.track_job("replicate", "p4").await;
    app.api.wait_for_state("replicate", "p4", JobState::Running).await;
    stand.set(
        "cancel:p4",
        Answer::JsonStatus(400, json!({"title": "Bad request", "detail": "Prediction is already finishing", "status": 400})),
    );
    // Another process holds the write lock for longer than the engine's busy timeout (5 s).
    let blocker = rusqlite::Connection::open(app.data_dir.join(nevermiss_engine::data_dir::DATABASE_FILE)).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let (status, answer) = cancel(&app.api, "replicate", "p4").await;
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["error"], "storage unavailable");
    assert_eq!(app.api.metrics().await.store.cancel_requests, 0, "nothing recorded");
    app.shutdown().await;
}

/// The same request on PostgreSQL (a fleet's store): recorded, counted, and the end merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_postgresql_is_recorded_counted_and_ends_through_the_merge_point() {
    let mut app = TestApp::spawn_on(crate::harness::app::Backend::Postgres).await;
    let (stand, url) = stand_in(replicate_routes).await;
    app.configure("replicate", &url, Some(replicate::API_KEY), None).await;
    stand.json("p5", replicate::prediction("p5", "processing"));
    stand.json("cancel:p5", replicate::prediction("p5", "canceled"));
    stand.json("canceled:p5", replicate::prediction("p5", "canceled"));
    app.api.track_job("replicate", "p5").await;
    app.api.wait_for_state("replicate", "p5", JobState::Running).await;
    assert_eq!(cancel(&app.api, "replicate", "p5").await.0, StatusCode::ACCEPTED);
    app.api.wait_for_state("replicate", "p5", JobState::Canceled).await;
    let timeline = app.api.timeline("replicate", "p5").await;
    assert!(timeline.ends_with(&["pull:requested:running".to_owned(), "pull:applied:canceled".to_owned()]), "{timeline:?}");
    assert_eq!(app.api.metrics().await.store.cancel_requests, 1);
    assert_eq!(cancel(&app.api, "replicate", "p5").await.0, StatusCode::CONFLICT);
    assert_eq!(cancels(&stand).len(), 1);
    app.shutdown().await;
}

//! The `anthropic` provider end to end: a real engine in-process, signed Managed Agents session
//! webhooks over real HTTP, and a local stand-in for Anthropic's API
//! (`GET /v1/messages/batches/{id}`, `GET /v1/sessions/{id}` with `x-api-key`,
//! `anthropic-version` and, for sessions, the `anthropic-beta` header) answering with objects shaped
//! as Anthropic documents them, and able to fail.

use crate::harness;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use harness::conformance::fixture;
use harness::faults::*;
use harness::signing::now_secs;
use harness::stand_in::*;
use nevermiss_engine::store::job::{JobResult, JobState, Outcome, Source};
use serde_json::{json, Value};

const P: &str = "anthropic";
pub(crate) const API_KEY: &str = "sk-ant-api03-standin0123456789";
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// Anthropic's error shape.
pub(crate) fn error_body(status: u16) -> Value {
    let (kind, message) = match status {
        400 => ("invalid_request_error", "missing or wrong anthropic-version / anthropic-beta header"),
        401 => ("authentication_error", "invalid x-api-key"),
        404 => ("not_found_error", "Not found"),
        429 => ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
        529 => ("overloaded_error", "Overloaded"),
        _ => ("api_error", "Internal server error"),
    };
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

/// Checks what every Anthropic request needs (and, for sessions, the beta header).
pub(crate) fn refused(headers: &HeaderMap, beta: bool) -> Option<Response> {
    if header(headers, "x-api-key") != API_KEY {
        return Some((StatusCode::UNAUTHORIZED, axum::Json(error_body(401))).into_response());
    }
    let beta_ok = !beta || header(headers, "anthropic-beta").split(',').any(|b| b.trim() == "managed-agents-2026-04-01");
    if header(headers, "anthropic-version") != "2023-06-01" || !beta_ok {
        return Some((StatusCode::BAD_REQUEST, axum::Json(error_body(400))).into_response());
    }
    None
}

pub(crate) async fn batch_route(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let answer = stand.take(&id, &format!("/v1/messages/batches/{id}"), &headers);
    match refused(&headers, false) {
        Some(response) => response,
        None => respond(answer, error_body).await,
    }
}

async fn session_route(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let answer = stand.take(&id, &format!("/v1/sessions/{id}"), &headers);
    match refused(&headers, true) {
        Some(response) => response,
        None => respond(answer, error_body).await,
    }
}

/// `GET /v1/sessions/{id}/events`: the answer set for `{id}/events`, else an empty page.
async fn session_events_route(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let answer = stand.take(&format!("{id}/events"), &format!("/v1/sessions/{id}/events"), &headers);
    match refused(&headers, true) {
        Some(response) => response,
        None => respond(Some(answer.unwrap_or(Answer::Json(json!({"data": [], "next_page": null})))), error_body).await,
    }
}

/// The event list of a session that ran once, its turn ended at `ended_at`.
fn one_run(ended_at: &str) -> Value {
    json!({"data": [
        fixture("anthropic/session_event_user_message").id("sevt_1").set("processed_at", "2026-11-30T10:00:00.500Z").value(),
        fixture("anthropic/session_event_running").id("sevt_2").set("processed_at", "2026-11-30T10:00:01Z").value(),
        fixture("anthropic/session_event_idle").id("sevt_3").set("processed_at", ended_at).set("stop_reason.type", "end_turn").value()
    ], "next_page": null})
}

/// A session that ran once, its turn ended at `ended_at`: the session and its event list.
fn ran_once(stand: &StandIn, id: &str, ended_at: &str) {
    stand.json(id, session(id, "idle", ended_at));
    stand.json(&format!("{id}/events"), one_run(ended_at));
}

/// The routes of a stand-in for api.anthropic.com.
fn routes() -> Router<Arc<StandIn>> {
    Router::new()
        .route("/v1/messages/batches/{id}", get(batch_route))
        .route("/v1/sessions/{id}", get(session_route))
        .route("/v1/sessions/{id}/events", get(session_events_route))
}

/// A Message Batch as `GET /v1/messages/batches/{id}` answers it (the checked fixture).
pub(crate) fn batch(id: &str, status: &str, counts: [i64; 5]) -> Value {
    let [processing, succeeded, errored, canceled, expired] = counts;
    let ended = status == "ended";
    fixture("anthropic/message_batch")
        .id(id)
        .set("processing_status", status)
        .set(
            "request_counts",
            json!({"processing": processing, "succeeded": succeeded, "errored": errored, "canceled": canceled, "expired": expired}),
        )
        .set("ended_at", if ended { json!("2026-11-30T11:10:00.000000Z") } else { Value::Null })
        .set("created_at", "2026-11-30T10:00:00.000000Z")
        .set("expires_at", "2026-12-01T10:00:00.000000Z")
        .set("cancel_initiated_at", if status == "canceling" || canceled > 0 { json!("2026-11-30T10:30:00.000000Z") } else { Value::Null })
        .set("results_url", if ended { json!(format!("https://api.anthropic.com/v1/messages/batches/{id}/results")) } else { Value::Null })
        .value()
}

/// A Managed Agents session as `GET /v1/sessions/{id}` answers it (the checked fixture).
fn session(id: &str, status: &str, updated_at: &str) -> Value {
    fixture("anthropic/session").id(id).status(status).set("updated_at", updated_at).set("stats.active_seconds", 30.5).value()
}

/// A session webhook event as Anthropic documents it.
fn session_event(kind: &str, session_id: &str, created_at: &str) -> Value {
    fixture("anthropic/webhook_event")
        .id(&format!("event_{}_{}", session_id, kind.rsplit('.').next().unwrap()))
        .set("created_at", created_at)
        .set("data.type", kind)
        .set("data.id", session_id)
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_webhooks_are_applied_deduplicated_and_replays_refused() {
    let (mut app, _stand, _url) = start(P, routes, None, Some(SECRET)).await;

    let started = session_event("session.status_run_started", "sesn_1", "2026-11-30T10:00:01Z");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &started).await, Outcome::Applied);
    assert_eq!(app.api.job_now(P, "sesn_1").await.job.state, JobState::Running);
    let rescheduled = session_event("session.status_rescheduled", "sesn_1", "2026-11-30T10:00:02Z");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_2", &rescheduled).await, Outcome::Applied, "a hint about the session, later");

    // Idle is not "done" (a session is multi-turn): which run ended, and why, is asked of the API.
    let idled = session_event("session.status_idled", "sesn_1", "2026-11-30T10:20:00.500Z");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_3", &idled).await, Outcome::Applied);
    let job = app.api.job_now(P, "sesn_1").await;
    assert_eq!(job.job.state, JobState::Running);
    assert!(job.job.finished_at.is_none(), "{job:?}");

    let body = serde_json::to_vec(&idled).unwrap();
    let (status, answer) = app.sw_hook_at(P, SECRET, "msg_3", now_secs() + 1, &body).await;
    assert_eq!((status, answer.outcome), (StatusCode::from_u16(200).unwrap(), Some(Outcome::Duplicate)));
    let (status, _) = app.sw_hook_at(P, SECRET, "msg_3", now_secs() + 400, &body).await;
    assert_eq!(status, 401, "a timestamp from the future beyond the tolerance");
    let (status, _) = app.sw_hook_at(P, SECRET, "msg_3", now_secs() - 400, &body).await;
    assert_eq!(status, 401, "a replay from the past beyond the tolerance");

    // Terminated may be an error or an archive: the session says which, not the webhook.
    let terminated = session_event("session.status_terminated", "sesn_2", "2026-11-30T10:05:00Z");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_4", &terminated).await, Outcome::Applied);
    assert_eq!(app.api.job_now(P, "sesn_2").await.job.state, JobState::Running);

    let (status, answer) =
        app.sw_hook(P, SECRET, "msg_5", &session_event("session.thread_created", "sesn_3", "2026-11-30T10:00:00Z")).await;
    // An event type NeverMiss does not act on: 200 ignored (a 4xx would count toward Anthropic
    // disabling the endpoint), not kept.
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Ignored)), "{answer:?}");
    assert!(app.api.delivery(P, "msg_5").await.is_none());

    assert_eq!(
        app.api.timeline(P, "sesn_1").await,
        ["push:applied:running", "push:applied:running", "push:applied:running", "push:duplicate:running"]
    );
    let m = app.api.metrics().await.store;
    assert_eq!((m.bad_signatures, m.duplicates, m.ignored), (2, 1, 1), "{m:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_message_batches() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), None).await;

    let id = "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF";
    stand.json(id, batch(id, "in_progress", [100, 0, 0, 0, 0]));
    app.api.track_job(P, id).await;
    app.api.wait_for_state(P, id, JobState::Running).await;
    app.api.reconcile_unchanged(P).await;

    // Batches have no webhooks: polling is the only way to learn the end, and so no rescue.
    stand.json(id, batch(id, "ended", [0, 98, 2, 0, 0]));
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.counts.rescues, 0, "{report:?}");
    assert_eq!(app.api.metrics().await.store.poll_only_completions, 1);
    assert_eq!(report.pass.providers[P], "ok");
    let job = app.api.job_ended_by_polling(P, id, JobState::Succeeded).await;
    assert_eq!(job.job.detail.as_deref(), Some("98 succeeded, 2 errored"));
    assert_eq!(job.job.finished_at.as_deref(), Some("2026-11-30T11:10:00.000Z"));

    for (id, counts, state) in [
        ("msgbatch_errored", [0, 0, 100, 0, 0], "failed"),
        ("msgbatch_canceled", [0, 0, 0, 100, 0], "canceled"),
        ("msgbatch_mixed", [0, 40, 0, 60, 0], "succeeded"),
    ] {
        stand.json(id, batch(id, "ended", counts));
        app.api.track_job(P, id).await;
        app.api.wait_for_state(P, id, JobState::parse(state).unwrap()).await;
    }
    assert_eq!(app.api.job_now(P, "msgbatch_errored").await.job.error.as_deref(), Some("no request succeeded (100 errored)"));
    assert_eq!(app.api.job_now(P, "msgbatch_mixed").await.job.detail.as_deref(), Some("40 succeeded, 60 canceled"));

    // Canceling is still running, but later.
    stand.json("msgbatch_cancel", batch("msgbatch_cancel", "in_progress", [10, 0, 0, 0, 0]));
    app.api.track_job(P, "msgbatch_cancel").await;
    app.api.wait_for_state(P, "msgbatch_cancel", JobState::Running).await;
    stand.json("msgbatch_cancel", batch("msgbatch_cancel", "canceling", [10, 0, 0, 0, 0]));
    assert_eq!(app.api.reconcile().await.pass.counts.applied, 1);

    let seen = stand.seen();
    assert!(seen.iter().all(|s| s.path.starts_with("/v1/messages/batches/msgbatch_")), "{seen:?}");
    assert!(seen.iter().all(|s| header(&s.headers, "x-api-key") == API_KEY && header(&s.headers, "anthropic-version") == "2023-06-01"));
    let metrics = app.api.metrics().await;
    assert_eq!((metrics.store.reconcile_rescues, metrics.store.poll_only_completions), (0, 4), "{metrics:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_a_session_rescues_a_lost_webhook() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;

    // The run started and its webhook came (the engine asks the session at once).
    stand.json("sesn_1", session("sesn_1", "running", "2026-11-30T10:00:01Z"));
    stand.json(
        "sesn_1/events",
        json!({"data": [fixture("anthropic/session_event_running").id("sevt_2").set("processed_at", "2026-11-30T10:00:01Z").value()], "next_page": null}),
    );
    let started = session_event("session.status_run_started", "sesn_1", "2026-11-30T10:00:01Z");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &started).await, Outcome::Applied);
    app.api.wait_for_state(P, "sesn_1.run1", JobState::Running).await;
    // The sender gave up on the endpoint; the idled webhook never comes.
    ran_once(&stand, "sesn_1", "2026-11-30T10:20:00Z");
    let report = app.api.reconcile().await;
    // A session's webhooks are thin hints that trigger a poll: every run's end is learned by
    // polling, so it is a completion by polling, not a rescue.
    assert_eq!(report.pass.counts.rescues, 0, "{report:?}");
    assert_eq!(report.pass.counts.applied, 1, "{report:?}");
    let run = app.api.job_ended_by_polling(P, "sesn_1.run1", JobState::Succeeded).await;
    assert_eq!(run.job.label.as_deref(), Some("session Refactor the billing module, run 1"));
    assert_eq!(app.api.timeline(P, "sesn_1.run1").await, ["pull:applied:running", "pull:applied:succeeded"]);
    let session_job = app.api.job_now(P, "sesn_1").await;
    assert_eq!((session_job.job.state, session_job.job.label.as_deref()), (JobState::Running, Some("session Refactor the billing module")));

    let seen = stand.seen();
    assert!(seen.iter().any(|s| s.path == "/v1/sessions/sesn_1"), "{seen:?}");
    assert!(seen.iter().any(|s| s.path == "/v1/sessions/sesn_1/events"), "{seen:?}");
    for s in &seen {
        assert_eq!(header(&s.headers, "x-api-key"), API_KEY);
        assert_eq!(header(&s.headers, "anthropic-version"), "2023-06-01");
        assert_eq!(header(&s.headers, "anthropic-beta"), "managed-agents-2026-04-01");
    }

    for (id, status, state) in [("sesn_2", "terminated", "failed"), ("sesn_3", "rescheduling", "running"), ("sesn_4", "running", "running")]
    {
        stand.json(id, session(id, status, "2026-11-30T10:05:00Z"));
        app.api.track_job(P, id).await;
        app.api.wait_for_state(P, id, JobState::parse(state).unwrap()).await;
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_api_key_pauses_the_provider_and_shows() {
    let (mut app, stand, url) = start(P, routes, Some("sk-ant-revoked"), Some(SECRET)).await;
    ran_once(&stand, "sesn_1", "2026-11-30T10:20:00Z");
    let started = session_event("session.status_run_started", "sesn_1", "2026-11-30T10:00:01Z");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &started).await, Outcome::Applied);

    refused_key_until_fixed(&app, P, &url, "sesn_1", JobState::Running, (Some(API_KEY), Some(SECRET))).await;
    assert_eq!(app.api.job_now(P, "sesn_1.run1").await.job.state, JobState::Succeeded);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_pauses_the_provider_for_its_retry_after() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;
    stand.answer_everything(Some(Answer::RateLimited(vec![("retry-after", "45"), ("anthropic-ratelimit-requests-remaining", "0")])));
    for n in 1..=3 {
        let started = session_event("session.status_run_started", &format!("session_{n}"), "2026-11-30T10:00:01Z");
        assert_eq!(app.sw_deliver(P, SECRET, &format!("msg_{n}"), &started).await, Outcome::Applied);
    }
    rate_limited(&app, &stand, P, Duration::from_secs(45), true, &[]).await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_keeps_its_reason_and_the_others_go_on() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;
    app.set_setting("provider_timeout_secs", "1").await;
    let ended = "2026-11-30T10:20:00Z";
    let faults =
        JobFaults { gone: "sesn_gone", bad: "sesn_bad", broken: "sesn_overloaded", slow: "sesn_slow", fine: "sesn_fine", status: 529 };
    faults.arrange(&stand, session("sesn_slow", "idle", ended), session("sesn_fine", "idle", ended));
    stand.json("sesn_fine/events", one_run(ended));
    for (n, id) in faults.ids().into_iter().enumerate() {
        let started = session_event("session.status_run_started", id, "2026-11-30T10:00:01Z");
        assert_eq!(app.sw_deliver(P, SECRET, &format!("msg_{n}"), &started).await, Outcome::Applied);
    }

    // Each session webhook is thin: the engine polls the session right away, one job failing
    // does not stop the others (the session stays running; its run is the job that ends).
    faults.check_failing(&app.api, P, JobState::Running).await;
    assert_eq!(app.api.wait_for_state(P, "sesn_fine.run1", JobState::Succeeded).await.job.terminal_source, Some(Source::Pull));
    let metrics = app.api.metrics().await;
    assert_eq!(metrics.store.jobs_not_found, 1, "{metrics:?}");
    app.shutdown().await;
}

/// A session run's last agent message is its result, the same whether its end was asked after a
/// webhook or found by polling alone; a Message Batch's counts are its result (contract
/// section 6). Anthropic's console pages are not linked (their URL form is not documented).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_is_the_same_by_webhook_and_by_polling() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;
    let said = |id: &str, text: &str| {
        fixture("anthropic/session_event_agent_message")
            .id(id)
            .set("processed_at", "2026-11-30T10:10:00Z")
            .set("content", json!([{"type": "text", "text": text}]))
            .value()
    };
    let events = json!({"data": [
        fixture("anthropic/session_event_user_message").id("sevt_1").set("processed_at", "2026-11-30T10:00:00.500Z").value(),
        fixture("anthropic/session_event_running").id("sevt_2").set("processed_at", "2026-11-30T10:00:01Z").value(),
        said("sevt_3", "Looking at the module first."),
        said("sevt_4", "Done: the module is split in three."),
        fixture("anthropic/session_event_idle").id("sevt_5").set("processed_at", "2026-11-30T10:20:00Z").set("stop_reason.type", "end_turn").value()
    ], "next_page": null});
    for id in ["sesn_hook", "sesn_poll"] {
        stand.json(id, session(id, "idle", "2026-11-30T10:20:00Z"));
        stand.json(&format!("{id}/events"), events.clone());
    }
    let idled = session_event("session.status_idled", "sesn_hook", "2026-11-30T10:20:00.500Z");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &idled).await, Outcome::Applied);
    app.api.track_job(P, "sesn_poll").await;
    let expected = Some(JobResult { text: Some("Done: the module is split in three.".into()), urls: vec![], image: None });
    for id in ["sesn_hook.run1", "sesn_poll.run1"] {
        let run = app.api.wait_for_state(P, id, JobState::Succeeded).await;
        assert_eq!(run.job.result, expected, "{run:?}");
        assert_eq!(run.job.provider_url, None);
    }

    let id = "msgbatch_results";
    stand.json(id, batch(id, "ended", [0, 98, 2, 0, 0]));
    app.api.track_job(P, id).await;
    let job = app.api.wait_for_state(P, id, JobState::Succeeded).await;
    assert_eq!(job.job.result, Some(JobResult { text: Some("98 succeeded, 2 errored".into()), urls: vec![], image: None }));
    app.shutdown().await;
}

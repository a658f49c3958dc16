//! Anthropic Managed Agents sessions watched as runs (see `providers/anthropic.rs`), end to end: a
//! real engine in-process, signed thin session webhooks, and a stand-in for Anthropic's
//! `GET /v1/sessions/{id}` and `GET /v1/sessions/{id}/events` (paged by `next_page`, two events a
//! page) shaped as the SDK's types (`BetaManagedAgentsSession`, `session.status_running`,
//! `session.status_idle` with `stop_reason.type`, `session.status_terminated`, `processed_at`).
//!
//! The life every test plays: run 1 ends its turn, run 2 stops for a tool permission
//! (`requires_action`), the permission is given and run 3 ends its turn, then the session is
//! archived. The notifications (outbox rows, in order) must be exactly: run 1 succeeded, run 2
//! needs input, run 3 succeeded, the session canceled; by webhooks, and by polling alone.


use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use crate::harness::json_app::App;
use crate::harness::stand_in::*;
use serde_json::{json, Value};

const P: &str = "anthropic";
const API_KEY: &str = "sk-ant-api03-standin0123456789";
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const SESSION: &str = "sesn_011CZkZAtmR3yMPDzynEDxu7";
const TITLE: &str = "Refactor the billing module";
/// Events a page of the stand-in's event list holds (small, so the paging is exercised).
const PAGE: usize = 2;

/// The stand-in's sessions: each the session object and its event list (oldest first).
#[derive(Default)]
struct Sessions {
    by_id: Mutex<HashMap<String, (Value, Vec<Value>)>>,
    requests: Mutex<Vec<String>>,
}

impl Sessions {
    fn set(&self, session: Value, events: Vec<Value>) {
        let id = session["id"].as_str().unwrap().to_owned();
        self.by_id.lock().unwrap().insert(id, (session, events));
    }
}

fn refused(headers: &HeaderMap) -> Option<Response> {
    let beta_ok = header(headers, "anthropic-beta").split(',').any(|b| b.trim() == "managed-agents-2026-04-01");
    if header(headers, "x-api-key") != API_KEY || header(headers, "anthropic-version") != "2023-06-01" || !beta_ok {
        let body = json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}});
        return Some((StatusCode::UNAUTHORIZED, axum::Json(body)).into_response());
    }
    None
}

fn not_found() -> Response {
    let body = json!({"type": "error", "error": {"type": "not_found_error", "message": "Not found"}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

async fn session_route(State(s): State<Arc<Sessions>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    s.requests.lock().unwrap().push(format!("/v1/sessions/{id}"));
    if let Some(response) = refused(&headers) {
        return response;
    }
    match s.by_id.lock().unwrap().get(&id) {
        Some((session, _)) => axum::Json(session.clone()).into_response(),
        None => not_found(),
    }
}

async fn events_route(
    State(s): State<Arc<Sessions>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    s.requests.lock().unwrap().push(format!("/v1/sessions/{id}/events"));
    if let Some(response) = refused(&headers) {
        return response;
    }
    let Some((_, events)) = s.by_id.lock().unwrap().get(&id).cloned() else { return not_found() };
    assert_eq!(query.get("order").map(String::as_str), Some("asc"), "events are read oldest first");
    let start: usize = query.get("page").map(|p| p.strip_prefix("page_").unwrap().parse().unwrap()).unwrap_or(0);
    let end = (start + PAGE).min(events.len());
    let next_page = (end < events.len()).then(|| format!("page_{end}"));
    axum::Json(json!({"data": events[start..end].to_vec(), "next_page": next_page})).into_response()
}

async fn stand_in() -> (Arc<Sessions>, String) {
    let sessions = Arc::new(Sessions::default());
    let router = Router::new()
        .route("/v1/sessions/{id}", get(session_route))
        .route("/v1/sessions/{id}/events", get(events_route))
        .with_state(sessions.clone());
    (sessions, serve(router).await)
}

/// `GET /v1/sessions/{id}` as the SDK's `BetaManagedAgentsSession` has it.
fn session(id: &str, status: &str, active_seconds: f64, updated_at: &str, archived_at: Option<&str>) -> Value {
    json!({
        "id": id,
        "type": "session",
        "status": status,
        "title": TITLE,
        "agent": {"id": "agent_011CZkYpogX7uDKUyvBTophP", "type": "agent", "version": 1},
        "environment_id": "env_011CZkZ9X2dpNyB7HsEFoRfW",
        "metadata": {},
        "resources": [],
        "outcome_evaluations": [],
        "vault_ids": [],
        "stats": {"active_seconds": active_seconds, "duration_seconds": 600.0},
        "usage": {"input_tokens": 1200, "output_tokens": 800},
        "created_at": "2026-11-30T10:00:00Z",
        "updated_at": updated_at,
        "archived_at": archived_at
    })
}

/// One entry of the session's event list.
fn event(n: u32, kind: &str, at: &str) -> Value {
    json!({"id": format!("sevt_{n:03}"), "type": kind, "processed_at": at})
}

fn idle(n: u32, at: &str, reason: &str) -> Value {
    let stop_reason = match reason {
        "requires_action" => json!({"type": "requires_action", "event_ids": [format!("sevt_{:03}", n - 1)]}),
        other => json!({"type": other}),
    };
    json!({"id": format!("sevt_{n:03}"), "type": "session.status_idle", "processed_at": at, "stop_reason": stop_reason})
}

/// A thin session webhook as Anthropic sends it.
fn hook(kind: &str, at: &str) -> Value {
    json!({
        "type": "event",
        "id": format!("wevt_{}_{}", kind.rsplit('.').next().unwrap(), at.replace([':', '-'], "")),
        "created_at": at,
        "data": {"type": kind, "id": SESSION, "organization_id": "org_011CZkZZAe0sMna4vkBdtrfx", "workspace_id": "wrkspc_011CZkZaBF1tNoB5wlCeusgy"}
    })
}

/// The session's life, one phase at a time: the session and its events at the end of the phase,
/// the webhooks the phase sends, and which job then ends up in which state.
struct Phase {
    session: Value,
    events: Vec<Value>,
    hooks: Vec<Value>,
    expect: (String, &'static str),
}

fn life() -> Vec<Phase> {
    let run = |n: u32| format!("{SESSION}.run{n}");
    let mut events = Vec::new();
    let mut phases = Vec::new();
    // Run 1 starts with a user message, and ends its turn.
    events.extend([event(1, "user.message", "2026-11-30T10:01:00Z"), event(2, "session.status_running", "2026-11-30T10:01:01Z")]);
    phases.push(Phase {
        session: session(SESSION, "running", 1.0, "2026-11-30T10:01:01Z", None),
        events: events.clone(),
        hooks: vec![hook("session.status_run_started", "2026-11-30T10:01:01Z")],
        expect: (run(1), "running"),
    });
    events.extend([event(3, "agent.message", "2026-11-30T10:01:50Z"), idle(4, "2026-11-30T10:02:00Z", "end_turn")]);
    phases.push(Phase {
        session: session(SESSION, "idle", 59.0, "2026-11-30T10:02:00Z", None),
        events: events.clone(),
        hooks: vec![hook("session.status_idled", "2026-11-30T10:02:00Z")],
        expect: (run(1), "succeeded"),
    });
    // Run 2 asks for a tool permission (an `always_ask` policy).
    events.extend([
        event(5, "user.message", "2026-11-30T10:03:00Z"),
        event(6, "session.status_running", "2026-11-30T10:03:01Z"),
        event(7, "agent.tool_use", "2026-11-30T10:03:30Z"),
        idle(8, "2026-11-30T10:04:00Z", "requires_action"),
    ]);
    phases.push(Phase {
        session: session(SESSION, "idle", 118.0, "2026-11-30T10:04:00Z", None),
        events: events.clone(),
        hooks: vec![
            hook("session.status_run_started", "2026-11-30T10:03:01Z"),
            hook("session.status_idled", "2026-11-30T10:04:00Z"),
        ],
        expect: (run(2), "needs_input"),
    });
    // The permission is given: run 3 goes on, through a reschedule, and ends its turn.
    events.extend([
        event(9, "user.tool_confirmation", "2026-11-30T10:05:00Z"),
        event(10, "session.status_running", "2026-11-30T10:05:01Z"),
        event(11, "session.status_rescheduled", "2026-11-30T10:05:20Z"),
        event(12, "session.status_running", "2026-11-30T10:05:30Z"),
        idle(13, "2026-11-30T10:06:00Z", "end_turn"),
    ]);
    phases.push(Phase {
        session: session(SESSION, "idle", 177.0, "2026-11-30T10:06:00Z", None),
        events: events.clone(),
        hooks: vec![
            hook("session.status_run_started", "2026-11-30T10:05:01Z"),
            hook("session.status_rescheduled", "2026-11-30T10:05:20Z"),
            hook("session.status_run_started", "2026-11-30T10:05:30Z"),
            hook("session.status_idled", "2026-11-30T10:06:00Z"),
        ],
        expect: (run(3), "succeeded"),
    });
    // Archived: the session is terminated with `archived_at` set.
    events.push(event(14, "session.status_terminated", "2026-11-30T10:07:00Z"));
    phases.push(Phase {
        session: session(SESSION, "terminated", 177.0, "2026-11-30T10:07:00Z", Some("2026-11-30T10:07:00Z")),
        events: events.clone(),
        hooks: vec![hook("session.status_terminated", "2026-11-30T10:07:00Z"), hook("session.archived", "2026-11-30T10:07:00Z")],
        expect: (SESSION.to_owned(), "canceled"),
    });
    phases
}

/// Every outbox row (one per notification), oldest first, as `job_id kind state`.
async fn notifications(app: &App) -> Vec<String> {
    app.engine()
        .services
        .store
        .read(|conn| {
            let mut statement = conn.prepare("SELECT job_id, kind, COALESCE(state, '-') FROM outbox ORDER BY id")?;
            let rows = statement.query_map([], |r| {
                Ok(format!("{} {} {}", r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
            })?;
            rows.collect()
        })
        .await
        .unwrap()
}

fn expected_notifications() -> Vec<String> {
    vec![
        format!("{SESSION}.run1 terminal succeeded"),
        format!("{SESSION}.run2 terminal needs_input"),
        format!("{SESSION}.run3 terminal succeeded"),
        format!("{SESSION} terminal canceled"),
    ]
}

/// What every path must leave: the session and its three runs, with their labels and ends.
async fn assert_the_whole_life(app: &App) {
    assert_eq!(notifications(app).await, expected_notifications());
    let job = app.job_now(P, SESSION).await;
    assert_eq!((job["state"].as_str(), job["label"].as_str()), (Some("canceled"), Some(&*format!("session {TITLE}"))));
    assert_eq!(job["finished_at"], "2026-11-30T10:07:00.000Z");
    for (n, state, finished) in [
        (1, "succeeded", "2026-11-30T10:02:00.000Z"),
        (2, "needs_input", "2026-11-30T10:04:00.000Z"),
        (3, "succeeded", "2026-11-30T10:06:00.000Z"),
    ] {
        let run = app.job_now(P, &format!("{SESSION}.run{n}")).await;
        assert_eq!(run["state"], state, "run {n}: {run}");
        assert_eq!(run["label"], format!("session {TITLE}, run {n}"));
        assert_eq!(run["finished_at"], finished, "run {n}");
    }
    assert!(app.job(P, &format!("{SESSION}.run4")).await.is_none(), "a reschedule is not a new run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_life_through_webhooks() {
    let app = App::start().await;
    let (sessions, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    sessions.set(session(SESSION, "idle", 0.0, "2026-11-30T10:00:00Z", None), vec![]);
    app.track(P, SESSION).await;
    app.wait_for_state(P, SESSION, "queued").await;

    let mut delivered = 0;
    for phase in life() {
        sessions.set(phase.session, phase.events);
        for body in &phase.hooks {
            delivered += 1;
            let outcome = app.deliver(P, SECRET, &format!("msg_{delivered}"), body).await;
            assert!(outcome == "applied" || outcome == "stale", "{outcome} for {body}");
        }
        // Each webhook is thin; the engine asks the session at once (no reconcile pass here).
        let (job, state) = &phase.expect;
        app.wait_for_state(P, job, state).await;
    }
    assert_the_whole_life(&app).await;
    // A webhook delivered again changes nothing.
    let again = hook("session.status_idled", "2026-11-30T10:04:00Z");
    assert_eq!(app.deliver(P, SECRET, "msg_4", &again).await, "duplicate");
    assert_eq!(notifications(&app).await, expected_notifications());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_life_with_every_webhook_lost() {
    let app = App::start().await;
    let (sessions, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    sessions.set(session(SESSION, "idle", 0.0, "2026-11-30T10:00:00Z", None), vec![]);
    app.track(P, SESSION).await;
    app.wait_for_state(P, SESSION, "queued").await;

    for phase in life() {
        sessions.set(phase.session, phase.events);
        app.reconcile().await;
        let (job, state) = &phase.expect;
        assert_eq!(app.job_now(P, job).await["state"], *state, "{job}");
    }
    assert_the_whole_life(&app).await;
    assert_eq!(app.job_now(P, &format!("{SESSION}.run2")).await["terminal_source"], "pull");
    // Finished: nothing of the session is polled again.
    let asked = sessions.requests.lock().unwrap().len();
    let report = app.reconcile().await;
    assert_eq!(report["checked"], 0, "{report}");
    assert_eq!(sessions.requests.lock().unwrap().len(), asked);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_life_learned_by_one_poll_after_it() {
    let app = App::start().await;
    let (sessions, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    let last = life().pop().unwrap();
    sessions.set(last.session, last.events);
    app.track(P, SESSION).await;
    app.wait_for_state(P, SESSION, "canceled").await;
    // The runs are merged in the order they ran, in the same transaction as the session.
    assert_the_whole_life(&app).await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_that_never_ran_notifies_nothing() {
    let app = App::start().await;
    let (sessions, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    let id = "sesn_011CZkZnever";
    sessions.set(session(id, "idle", 0.0, "2026-11-30T10:00:00Z", None), vec![]);
    app.track(P, id).await;
    let job = app.wait_for_state(P, id, "queued").await;
    assert_eq!(job["detail"], "idle: it has not run yet");
    app.reconcile().await;
    app.reconcile().await;
    assert_eq!(app.job_now(P, id).await["state"], "queued");
    assert!(notifications(&app).await.is_empty());
    assert!(app.job(P, &format!("{id}.run1")).await.is_none());
    // A session that never ran is not asked for its events.
    assert!(sessions.requests.lock().unwrap().iter().all(|r| !r.ends_with("/events")));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_terminated_during_a_run_fails_it() {
    let app = App::start().await;
    let (sessions, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    let id = "sesn_011CZkZbroken";
    sessions.set(
        session(id, "terminated", 30.0, "2026-11-30T10:02:00Z", None),
        vec![
            event(1, "user.message", "2026-11-30T10:01:00Z"),
            event(2, "session.status_running", "2026-11-30T10:01:01Z"),
            event(3, "session.error", "2026-11-30T10:01:59Z"),
            event(4, "session.status_terminated", "2026-11-30T10:02:00Z"),
        ],
    );
    app.track(P, id).await;
    app.wait_for_state(P, id, "failed").await;
    let run = app.job_now(P, &format!("{id}.run1")).await;
    assert_eq!(run["state"], "failed");
    assert_eq!(run["error"], "the session was terminated during this run");
    app.shutdown().await;
}

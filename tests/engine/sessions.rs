//! Agent sessions watched as runs, end to end, for both providers that have them: Anthropic's
//! Managed Agents sessions (runs read from the session's event list, see `providers/anthropic.rs`)
//! and OpenAI's agent sessions (turns, see `providers/openai/agent_sessions.rs`). A real engine
//! in-process, signed thin session webhooks, and one stand-in serving both APIs, shaped as the
//! SDKs' types: Anthropic's `GET /v1/sessions/{id}` (`BetaManagedAgentsSession`) and
//! `GET /v1/sessions/{id}/events` (paged by `next_page`); OpenAI's `GET /v1/agents/sessions/{id}`
//! (`AgentSession`, with `required_actions`) and `GET /v1/agents/sessions/{id}/turns` (`Turn`,
//! cursor pages by `after` and `has_more`). Two entries a page, so paging is exercised.
//!
//! The life every test plays, per provider:
//! - Anthropic: run 1 ends its turn, run 2 stops for a tool permission (`requires_action`), the
//!   permission is given and run 3 ends its turn, then the session is archived. Notifications:
//!   run 1 succeeded, run 2 needs input, run 3 succeeded, the session canceled.
//! - OpenAI: turn 1 completes, turn 2 waits for a function call's result, gets it and completes,
//!   then the session fails. Notifications: turn 1 succeeded, turn 2's call needs input, turn 2
//!   succeeded, the session failed.
//!
//! Each by webhooks, by polling alone, and learned all at once by one poll after the fact; an idle
//! session that never ran notifies nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use nevermiss_engine::provider_health::HealthStatus;
use nevermiss_engine::store::job::{parse_rfc3339, rfc3339, JobState, Outcome, Source};
use serde_json::{json, Value};

use crate::harness::conformance::fixture;
use crate::harness::stand_in::*;
use crate::harness::TestApp;

/// Entries a page of the stand-in's event and turn lists holds.
const PAGE: usize = 2;

/// The stand-in's sessions: each the session object and its list (events or turns, oldest first).
#[derive(Default)]
struct Sessions {
    by_id: Mutex<HashMap<String, (Value, Vec<Value>)>>,
    requests: Mutex<Vec<String>>,
    /// What a session becomes once an event is sent to it (a cancel, an interrupt).
    after_events: Mutex<HashMap<String, (Value, Vec<Value>)>>,
    /// The events sent (`POST .../events`): the path, the headers and the body.
    sent: Mutex<Vec<(String, HeaderMap, Value)>>,
}

impl Sessions {
    fn set(&self, session: Value, list: Vec<Value>) {
        let id = session["id"].as_str().unwrap().to_owned();
        self.by_id.lock().unwrap().insert(id, (session, list));
    }

    /// Records events sent to session `id`; once they are accepted the session becomes what
    /// `after_events` holds for it.
    fn send(&self, path: String, id: &str, headers: &HeaderMap, body: Value) {
        self.sent.lock().unwrap().push((path, headers.clone(), body));
        if let Some(after) = self.after_events.lock().unwrap().get(id).cloned() {
            self.by_id.lock().unwrap().insert(id.to_owned(), after);
        }
    }

    fn get(&self, path: String, id: &str) -> Option<(Value, Vec<Value>)> {
        self.requests.lock().unwrap().push(path);
        self.by_id.lock().unwrap().get(id).cloned()
    }
}

// ----- Anthropic's API -----

mod anthropic {
    use super::*;

    pub const KEY: &str = "sk-ant-api03-standin0123456789";
    pub const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    pub const SESSION: &str = "sesn_011CZkZAtmR3yMPDzynEDxu7";
    const TITLE: &str = "Refactor the billing module";

    pub fn refused(headers: &HeaderMap) -> Option<Response> {
        let beta_ok = header(headers, "anthropic-beta").split(',').any(|b| b.trim() == "managed-agents-2026-04-01");
        if header(headers, "x-api-key") != KEY || header(headers, "anthropic-version") != "2023-06-01" || !beta_ok {
            let body = json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}});
            return Some((StatusCode::UNAUTHORIZED, axum::Json(body)).into_response());
        }
        None
    }

    pub fn not_found() -> Response {
        let body = json!({"type": "error", "error": {"type": "not_found_error", "message": "Not found"}});
        (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
    }

    pub async fn session_route(State(s): State<Arc<Sessions>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
        let found = s.get(format!("/v1/sessions/{id}"), &id);
        if let Some(response) = refused(&headers) {
            return response;
        }
        found.map_or_else(not_found, |(session, _)| axum::Json(session).into_response())
    }

    pub async fn events_route(
        State(s): State<Arc<Sessions>>,
        Path(id): Path<String>,
        Query(query): Query<HashMap<String, String>>,
        headers: HeaderMap,
    ) -> Response {
        let found = s.get(format!("/v1/sessions/{id}/events"), &id);
        if let Some(response) = refused(&headers) {
            return response;
        }
        let Some((_, events)) = found else { return not_found() };
        assert_eq!(query.get("order").map(String::as_str), Some("asc"), "events are read oldest first");
        let start: usize = query.get("page").map(|p| p.strip_prefix("page_").unwrap().parse().unwrap()).unwrap_or(0);
        let end = (start + PAGE).min(events.len());
        let next_page = (end < events.len()).then(|| format!("page_{end}"));
        axum::Json(json!({"data": events[start..end].to_vec(), "next_page": next_page})).into_response()
    }

    /// `POST /v1/sessions/{id}/events` (`beta.sessions.events.send`): the events it was sent,
    /// answered as `BetaManagedAgentsSendSessionEvents` (each with an id and its time).
    pub async fn send_events_route(State(s): State<Arc<Sessions>>, Path(id): Path<String>, headers: HeaderMap, body: String) -> Response {
        if let Some(response) = refused(&headers) {
            return response;
        }
        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        s.send(format!("POST /v1/sessions/{id}/events"), &id, &headers, body.clone());
        let sent: Vec<Value> = body["events"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| event(9, e["type"].as_str().unwrap_or(""), "2026-11-30T10:01:30Z"))
            .collect();
        axum::Json(json!({"data": sent})).into_response()
    }

    /// `GET /v1/sessions/{id}` as the SDK's `BetaManagedAgentsSession` has it (the checked
    /// fixture, its id, status, times and active seconds changed).
    pub fn session(id: &str, status: &str, active_seconds: f64, updated_at: &str, archived_at: Option<&str>) -> Value {
        fixture("anthropic/session")
            .id(id)
            .status(status)
            .set("title", TITLE)
            .set("stats.active_seconds", active_seconds)
            .set("created_at", "2026-11-30T10:00:00Z")
            .set("updated_at", updated_at)
            .set("archived_at", archived_at)
            .value()
    }

    /// One entry of the session's event list, from the fixture of its type.
    pub fn event(n: u32, kind: &str, at: &str) -> Value {
        let name = match kind {
            "session.status_running" => "running",
            "session.status_rescheduled" => "rescheduled",
            "session.status_terminated" => "terminated",
            "user.message" => "user_message",
            "agent.message" => "agent_message",
            "agent.tool_use" => "agent_tool_use",
            "user.tool_confirmation" => "user_tool_confirmation",
            "user.interrupt" => "user_interrupt",
            "session.error" => "error",
            other => panic!("no fixture for a {other} event"),
        };
        fixture(&format!("anthropic/session_event_{name}")).id(&format!("sevt_{n:03}")).set("processed_at", at).value()
    }

    pub fn idle(n: u32, at: &str, reason: &str) -> Value {
        let event = match reason {
            "requires_action" => {
                fixture("anthropic/session_event_idle_requires_action").set("stop_reason.event_ids", json!([format!("sevt_{:03}", n - 1)]))
            }
            other => fixture("anthropic/session_event_idle").set("stop_reason.type", other),
        };
        event.id(&format!("sevt_{n:03}")).set("processed_at", at).value()
    }

    /// A thin session webhook as Anthropic sends it.
    fn hook(kind: &str, at: &str) -> Value {
        fixture("anthropic/webhook_event")
            .id(&format!("wevt_{}_{}", kind.rsplit('.').next().unwrap(), at.replace([':', '-'], "")))
            .set("created_at", at)
            .set("data.type", kind)
            .set("data.id", SESSION)
            .value()
    }

    pub fn life() -> Life {
        let run = |n: u32| format!("{SESSION}.run{n}");
        let mut events = Vec::new();
        let mut phases = Vec::new();
        // Run 1 starts with a user message, and ends its turn.
        events.extend([event(1, "user.message", "2026-11-30T10:01:00Z"), event(2, "session.status_running", "2026-11-30T10:01:01Z")]);
        phases.push(Phase {
            session: session(SESSION, "running", 1.0, "2026-11-30T10:01:01Z", None),
            list: events.clone(),
            hooks: vec![hook("session.status_run_started", "2026-11-30T10:01:01Z")],
            expect: (run(1), JobState::Running),
        });
        events.extend([event(3, "agent.message", "2026-11-30T10:01:50Z"), idle(4, "2026-11-30T10:02:00Z", "end_turn")]);
        phases.push(Phase {
            session: session(SESSION, "idle", 59.0, "2026-11-30T10:02:00Z", None),
            list: events.clone(),
            hooks: vec![hook("session.status_idled", "2026-11-30T10:02:00Z")],
            expect: (run(1), JobState::Succeeded),
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
            list: events.clone(),
            hooks: vec![hook("session.status_run_started", "2026-11-30T10:03:01Z"), hook("session.status_idled", "2026-11-30T10:04:00Z")],
            expect: (run(2), JobState::NeedsInput),
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
            list: events.clone(),
            hooks: vec![
                hook("session.status_run_started", "2026-11-30T10:05:01Z"),
                hook("session.status_rescheduled", "2026-11-30T10:05:20Z"),
                hook("session.status_run_started", "2026-11-30T10:05:30Z"),
                hook("session.status_idled", "2026-11-30T10:06:00Z"),
            ],
            expect: (run(3), JobState::Succeeded),
        });
        // Archived: the session is terminated with `archived_at` set.
        events.push(event(14, "session.status_terminated", "2026-11-30T10:07:00Z"));
        phases.push(Phase {
            session: session(SESSION, "terminated", 177.0, "2026-11-30T10:07:00Z", Some("2026-11-30T10:07:00Z")),
            list: events.clone(),
            hooks: vec![hook("session.status_terminated", "2026-11-30T10:07:00Z"), hook("session.archived", "2026-11-30T10:07:00Z")],
            expect: (SESSION.to_owned(), JobState::Canceled),
        });
        let label = |n: u32| format!("session {TITLE}, run {n}");
        Life {
            provider: "anthropic",
            key: KEY,
            secret: SECRET,
            session: SESSION,
            never_ran: |id| session(id, "idle", 0.0, "2026-11-30T10:00:00Z", None),
            phases,
            ends: vec![
                End::new(&run(1), JobState::Succeeded, &label(1), "10:02:00"),
                End::new(&run(2), JobState::NeedsInput, &label(2), "10:04:00"),
                End::new(&run(3), JobState::Succeeded, &label(3), "10:06:00"),
                End::new(SESSION, JobState::Canceled, &format!("session {TITLE}"), "10:07:00"),
            ],
            not_a_job: format!("{SESSION}.run4"),
            past_waits_readable: true,
        }
    }
}

// ----- OpenAI's API -----

mod openai {
    use super::*;

    pub const KEY: &str = "sk-proj-standin0123456789";
    pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    pub const SESSION: &str = "sess_6a1f0c9e2b7d4e8f";
    const AGENT: &str = "release-notes";

    fn refused(headers: &HeaderMap) -> Option<Response> {
        if header(headers, "authorization") != format!("Bearer {KEY}") || header(headers, "openai-beta") != "agents=v1" {
            let body = json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
            return Some((StatusCode::UNAUTHORIZED, axum::Json(body)).into_response());
        }
        None
    }

    fn not_found() -> Response {
        let body = json!({"error": {"message": "No session found", "type": "invalid_request_error", "param": null, "code": null}});
        (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
    }

    pub async fn session_route(State(s): State<Arc<Sessions>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
        let found = s.get(format!("/v1/agents/sessions/{id}"), &id);
        if let Some(response) = refused(&headers) {
            return response;
        }
        found.map_or_else(not_found, |(session, _)| axum::Json(session).into_response())
    }

    pub async fn turns_route(
        State(s): State<Arc<Sessions>>,
        Path(id): Path<String>,
        Query(query): Query<HashMap<String, String>>,
        headers: HeaderMap,
    ) -> Response {
        let found = s.get(format!("/v1/agents/sessions/{id}/turns"), &id);
        if let Some(response) = refused(&headers) {
            return response;
        }
        let Some((_, turns)) = found else { return not_found() };
        assert_eq!(query.get("order").map(String::as_str), Some("asc"), "turns are read oldest first");
        let start = match query.get("after") {
            Some(after) => turns.iter().position(|t| t["id"] == after.as_str()).expect("after names a turn") + 1,
            None => 0,
        };
        let end = (start + PAGE).min(turns.len());
        let page = turns[start..end].to_vec();
        // As `SyncCursorPage` has it: the next page is asked for after the last item's id.
        axum::Json(json!({"data": page, "has_more": end < turns.len()})).into_response()
    }

    /// `POST /v1/agents/sessions/{id}/events` (`beta.agents.sessions.events.create`): 202, no
    /// body, as the SDK reads it (`None`).
    pub async fn send_events_route(State(s): State<Arc<Sessions>>, Path(id): Path<String>, headers: HeaderMap, body: String) -> Response {
        if let Some(response) = refused(&headers) {
            return response;
        }
        s.send(format!("POST /v1/agents/sessions/{id}/events"), &id, &headers, serde_json::from_str(&body).unwrap_or(Value::Null));
        StatusCode::ACCEPTED.into_response()
    }

    /// Unix seconds of a time on 2026-11-30 (UTC), "HH:MM:SS".
    fn at(time: &str) -> i64 {
        parse_rfc3339(&format!("2026-11-30T{time}Z")).unwrap() / 1000
    }

    /// `GET /v1/agents/sessions/{id}` as the SDK's `AgentSession` has it (the checked fixture).
    pub fn session(id: &str, status: &str, last_active: &str, required_actions: Value) -> Value {
        let error = if status == "failed" { json!("The session's environment was lost") } else { Value::Null };
        fixture("openai/agent_session")
            .id(id)
            .status(status)
            .set("agent.name", AGENT)
            .set("created_at", at("10:00:00"))
            .set("last_active_at", at(last_active))
            .set("required_actions", required_actions)
            .set("error", error)
            .value()
    }

    /// One turn (`Turn`, whose times are integers).
    pub fn turn(id: &str, status: &str, started: &str, completed: Option<&str>) -> Value {
        fixture("openai/turn")
            .id(id)
            .status(status)
            .set("session_id", SESSION)
            .set("agent_id", "agent_68e2c1d0")
            .set("created_at", at(started))
            .set("started_at", at(started))
            .set("completed_at", completed.map(at))
            .value()
    }

    /// A subagent's turn: part of its root turn, not a job.
    fn subagent_turn(id: &str, started: &str) -> Value {
        let mut t = turn(id, "completed", started, Some(started));
        t["subagent_id"] = json!("subagent_researcher");
        t
    }

    /// An `agent.session.*` webhook as OpenAI sends it (`data` as its SDK type has it).
    fn hook(kind: &str, time: &str) -> Value {
        let mut data = json!({"id": SESSION, "environment_type": "none"});
        if kind == "agent.session.action_required" {
            data = json!({"id": SESSION, "required_action": {"type": "function_call"}});
        }
        json!({"id": format!("evt_{}_{}", kind.rsplit('.').next().unwrap(), time.replace(':', "")), "object": "event", "type": kind, "created_at": at(time), "data": data})
    }

    pub fn life() -> Life {
        let job = |turn: &str| format!("{SESSION}.{turn}");
        let call = json!([{"type": "function_call", "call_id": "call_J8d2", "name": "lookup_changelog", "arguments": {"since": "v2.3"}, "turn_id": "turn_2"}]);
        let mut phases = Vec::new();
        phases.push(Phase {
            session: session(SESSION, "in_progress", "10:01:01", json!([])),
            list: vec![turn("turn_1", "in_progress", "10:01:01", None)],
            hooks: vec![hook("agent.session.in_progress", "10:01:01")],
            expect: (job("turn_1"), JobState::Running),
        });
        let turn_1 = turn("turn_1", "completed", "10:01:01", Some("10:02:00"));
        phases.push(Phase {
            session: session(SESSION, "idle", "10:02:00", json!([])),
            list: vec![turn_1.clone(), subagent_turn("turn_1s", "10:01:30")],
            hooks: vec![hook("agent.session.idle", "10:02:00")],
            expect: (job("turn_1"), JobState::Succeeded),
        });
        // Turn 2 asks for a function call's result.
        phases.push(Phase {
            session: session(SESSION, "requires_action", "10:04:00", call),
            list: vec![turn_1.clone(), subagent_turn("turn_1s", "10:01:30"), turn("turn_2", "waiting", "10:03:01", None)],
            hooks: vec![hook("agent.session.in_progress", "10:03:01"), hook("agent.session.action_required", "10:04:00")],
            expect: (job("turn_2.call_J8d2"), JobState::NeedsInput),
        });
        // The result is given: the same turn goes on and completes.
        let turn_2 = turn("turn_2", "completed", "10:03:01", Some("10:06:00"));
        phases.push(Phase {
            session: session(SESSION, "idle", "10:06:00", json!([])),
            list: vec![turn_1.clone(), subagent_turn("turn_1s", "10:01:30"), turn_2.clone()],
            hooks: vec![hook("agent.session.in_progress", "10:05:00"), hook("agent.session.idle", "10:06:00")],
            expect: (job("turn_2"), JobState::Succeeded),
        });
        phases.push(Phase {
            session: session(SESSION, "failed", "10:07:00", json!([])),
            list: vec![turn_1, subagent_turn("turn_1s", "10:01:30"), turn_2],
            hooks: vec![hook("agent.session.failed", "10:07:00")],
            expect: (SESSION.to_owned(), JobState::Failed),
        });
        let label = |n: u32| format!("agent session {AGENT}, turn {n}");
        Life {
            provider: "openai",
            key: KEY,
            secret: SECRET,
            session: SESSION,
            never_ran: |id| session(id, "idle", "10:00:00", json!([])),
            phases,
            ends: vec![
                End::new(&job("turn_1"), JobState::Succeeded, &label(1), "10:02:00.000"),
                End::new(&job("turn_2.call_J8d2"), JobState::NeedsInput, &label(2), "10:04:00"),
                End::new(&job("turn_2"), JobState::Succeeded, &label(2), "10:06:00.000"),
                End::new(SESSION, JobState::Failed, &format!("agent session {AGENT}"), "10:07:00"),
            ],
            not_a_job: job("turn_1s"),
            past_waits_readable: false,
        }
    }
}

async fn stand_in() -> (Arc<Sessions>, String) {
    let sessions = Arc::new(Sessions::default());
    let router = Router::new()
        .route("/v1/sessions/{id}", get(anthropic::session_route))
        .route("/v1/sessions/{id}/events", get(anthropic::events_route).post(anthropic::send_events_route))
        .route("/v1/agents/sessions/{id}", get(openai::session_route))
        .route("/v1/agents/sessions/{id}/turns", get(openai::turns_route))
        .route("/v1/agents/sessions/{id}/events", axum::routing::post(openai::send_events_route))
        .with_state(sessions.clone());
    (sessions, serve(router).await)
}

/// One phase of a session's life: the session and its list at the end of the phase, the webhooks
/// the phase sends, and which job then ends up in which state.
struct Phase {
    session: Value,
    list: Vec<Value>,
    hooks: Vec<Value>,
    expect: (String, JobState),
}

/// How a job of the session ends: its state, label and `finished_at` (a time on 2026-11-30).
struct End {
    job: String,
    state: JobState,
    label: String,
    finished: String,
}

impl End {
    fn new(job: &str, state: JobState, label: &str, time: &str) -> End {
        let finished = rfc3339(parse_rfc3339(&format!("2026-11-30T{time}Z")).unwrap());
        End { job: job.into(), state, label: label.into(), finished }
    }
}

/// A provider's session life, and what it must leave.
struct Life {
    provider: &'static str,
    key: &'static str,
    secret: &'static str,
    session: &'static str,
    never_ran: fn(&str) -> Value,
    phases: Vec<Phase>,
    /// In the order they notify.
    ends: Vec<End>,
    /// An id that must not become a job (a reschedule, a subagent's turn).
    not_a_job: String,
    /// Whether a wait that is over can still be read afterwards (Anthropic's event list keeps
    /// it; an OpenAI turn that waited and went on shows no trace of the wait).
    past_waits_readable: bool,
}

impl Life {
    /// An engine pointed at the stand-in, tracking the session while it is idle and never ran.
    async fn start(&self) -> (TestApp, Arc<Sessions>) {
        let app = TestApp::spawn().await;
        let (sessions, url) = stand_in().await;
        app.configure(self.provider, &url, Some(self.key), Some(self.secret)).await;
        sessions.set((self.never_ran)(self.session), vec![]);
        app.api.track_job(self.provider, self.session).await;
        app.api.wait_for_state(self.provider, self.session, JobState::Queued).await;
        (app, sessions)
    }

    fn expected_notifications(&self) -> Vec<String> {
        self.ends.iter().map(|e| format!("{} terminal {}", e.job, e.state.as_str())).collect()
    }

    /// What every path must leave: the session and its runs, with their labels and ends.
    async fn assert_the_whole_life(&self, app: &TestApp) {
        assert_eq!(app.outbox_rows(), self.expected_notifications());
        for end in &self.ends {
            let job = app.api.job_now(self.provider, &end.job).await.job;
            assert_eq!(job.state, end.state, "{}: {job:?}", end.job);
            assert_eq!(job.label.as_deref(), Some(end.label.as_str()), "{}", end.job);
            assert_eq!(job.finished_at.as_deref(), Some(end.finished.as_str()), "{}", end.job);
        }
        assert!(app.api.job(self.provider, &self.not_a_job).await.is_none(), "{} is not a job", self.not_a_job);
    }
}

async fn the_life_through_webhooks(life: Life) {
    let (mut app, sessions) = life.start().await;
    let mut delivered = 0;
    for phase in &life.phases {
        sessions.set(phase.session.clone(), phase.list.clone());
        for body in &phase.hooks {
            delivered += 1;
            let outcome = app.sw_deliver(life.provider, life.secret, &format!("msg_{delivered}"), body).await;
            assert!(matches!(outcome, Outcome::Applied | Outcome::Stale), "{outcome:?} for {body}");
        }
        // Each webhook is thin; the engine asks the session at once (no reconcile pass here).
        let (job, state) = &phase.expect;
        app.api.wait_for_state(life.provider, job, *state).await;
    }
    life.assert_the_whole_life(&app).await;
    // A webhook delivered again changes nothing.
    let again = &life.phases[2].hooks.last().unwrap();
    assert_eq!(
        app.sw_deliver(life.provider, life.secret, &format!("msg_{}", 2 + life.phases[2].hooks.len()), again).await,
        Outcome::Duplicate
    );
    assert_eq!(app.outbox_rows(), life.expected_notifications());
    drop(sessions);
    app.shutdown().await;
}

async fn the_same_life_with_every_webhook_lost(life: Life) {
    let (mut app, sessions) = life.start().await;
    for phase in &life.phases {
        sessions.set(phase.session.clone(), phase.list.clone());
        app.api.reconcile().await;
        let (job, state) = &phase.expect;
        assert_eq!(app.api.job_now(life.provider, job).await.job.state, *state, "{job}");
    }
    life.assert_the_whole_life(&app).await;
    let waited = &life.ends[1].job;
    assert_eq!(app.api.job_now(life.provider, waited).await.job.terminal_source, Some(Source::Pull));
    // Finished: nothing of the session is polled again.
    let asked = sessions.requests.lock().unwrap().len();
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.counts.checked, 0, "{report:?}");
    assert_eq!(sessions.requests.lock().unwrap().len(), asked);
    app.shutdown().await;
}

/// Learned all at once: every run and the session end as they did; a wait that is over is
/// notified only where the provider keeps a record of it.
async fn the_whole_life_learned_by_one_poll_after_it(mut life: Life) {
    if !life.past_waits_readable {
        let waits: Vec<String> = life.ends.iter().filter(|e| e.state == JobState::NeedsInput).map(|e| e.job.clone()).collect();
        life.ends.retain(|e| e.state != JobState::NeedsInput);
        life.not_a_job = waits.into_iter().next().expect("the life has a wait");
    }
    let app = TestApp::spawn().await;
    let (sessions, url) = stand_in().await;
    app.configure(life.provider, &url, Some(life.key), Some(life.secret)).await;
    let last = life.phases.last().unwrap();
    sessions.set(last.session.clone(), last.list.clone());
    app.api.track_job(life.provider, life.session).await;
    app.api.wait_for_state(life.provider, life.session, life.ends.last().unwrap().state).await;
    // The runs are merged in the order they ran, in the same transaction as the session.
    life.assert_the_whole_life(&app).await;
}

async fn an_idle_session_that_never_ran_notifies_nothing(life: Life, id: &str, list_path: &str) {
    let app = TestApp::spawn().await;
    let (sessions, url) = stand_in().await;
    app.configure(life.provider, &url, Some(life.key), Some(life.secret)).await;
    sessions.set((life.never_ran)(id), vec![]);
    app.api.track_job(life.provider, id).await;
    let job = app.api.wait_for_state(life.provider, id, JobState::Queued).await;
    assert_eq!(job.job.detail.as_deref(), Some("idle: it has not run yet"));
    app.api.reconcile().await;
    app.api.reconcile().await;
    assert_eq!(app.api.job_now(life.provider, id).await.job.state, JobState::Queued);
    assert!(app.outbox_rows().is_empty());
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 1, "only the session is a job");
    let lists = sessions.requests.lock().unwrap().iter().filter(|r| r.ends_with(list_path)).count();
    // Whether it ran is in its list, read whatever the session's `stats` hold (an empty list: no run).
    assert!(lists > 0, "its list was read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_a_session_life_through_webhooks() {
    the_life_through_webhooks(anthropic::life()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_a_session_life_through_webhooks() {
    the_life_through_webhooks(openai::life()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_the_same_life_with_every_webhook_lost() {
    the_same_life_with_every_webhook_lost(anthropic::life()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_the_same_life_with_every_webhook_lost() {
    the_same_life_with_every_webhook_lost(openai::life()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_the_whole_life_learned_by_one_poll_after_it() {
    the_whole_life_learned_by_one_poll_after_it(anthropic::life()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_the_whole_life_learned_by_one_poll_after_it() {
    the_whole_life_learned_by_one_poll_after_it(openai::life()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_an_idle_session_that_never_ran_notifies_nothing() {
    an_idle_session_that_never_ran_notifies_nothing(anthropic::life(), "sesn_011CZkZnever", "/events").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_an_idle_session_that_never_ran_notifies_nothing() {
    an_idle_session_that_never_ran_notifies_nothing(openai::life(), "sess_never0ran", "/turns").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_a_session_terminated_during_a_run_fails_it() {
    let app = TestApp::spawn().await;
    let (sessions, url) = stand_in().await;
    app.configure("anthropic", &url, Some(anthropic::KEY), Some(anthropic::SECRET)).await;
    let id = "sesn_011CZkZbroken";
    sessions.set(
        anthropic::session(id, "terminated", 30.0, "2026-11-30T10:02:00Z", None),
        vec![
            anthropic::event(1, "user.message", "2026-11-30T10:01:00Z"),
            anthropic::event(2, "session.status_running", "2026-11-30T10:01:01Z"),
            anthropic::event(3, "session.error", "2026-11-30T10:01:59Z"),
            anthropic::event(4, "session.status_terminated", "2026-11-30T10:02:00Z"),
        ],
    );
    app.api.track_job("anthropic", id).await;
    app.api.wait_for_state("anthropic", id, JobState::Failed).await;
    let run = app.api.job_now("anthropic", &format!("{id}.run1")).await.job;
    assert_eq!(run.state, JobState::Failed);
    assert_eq!(run.error.as_deref(), Some("the session was terminated during this run"));
}

/// Every other test's stand-in refuses a request without `OpenAI-Beta: agents=v1` or the key: a
/// refused key shows on the provider, not as a failed session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_a_refused_key_shows_on_the_provider() {
    let app = TestApp::spawn().await;
    let (sessions, url) = stand_in().await;
    app.configure("openai", &url, Some("sk-proj-revoked"), Some(openai::SECRET)).await;
    sessions.set(openai::session(openai::SESSION, "idle", "10:00:00", json!([])), vec![]);
    app.api.track_job("openai", openai::SESSION).await;
    let report = app.api.reconcile().await;
    assert!(report.pass.providers["openai"].contains("refused the API key (401)"), "{report:?}");
    app.api.wait_for_health("openai", HealthStatus::Misconfigured).await;
    assert!(app.outbox_rows().is_empty());
}

/// Cancel on an agent session: an Anthropic run by interrupting its session
/// (`user.interrupt`, with the managed-agents beta header), an OpenAI turn by the session's cancel
/// event (`agent.session.input.cancel`, with `OpenAI-Beta: agents=v1`). Each is sent once; the
/// run or turn then ends `canceled` by the poll that reads the session, through the merge point;
/// the session itself has no cancel (501).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_run_or_turn_is_canceled_by_the_sessions_own_interrupt() {
    let app = TestApp::spawn().await;
    let (sessions, url) = stand_in().await;
    app.configure("anthropic", &url, Some(anthropic::KEY), Some(anthropic::SECRET)).await;
    app.configure("openai", &url, Some(openai::KEY), Some(openai::SECRET)).await;
    let cancel = |provider: &'static str, job: String| {
        let api = &app.api;
        async move {
            let response = api.raw_post(&format!("/api/jobs/{provider}/{job}/cancel"), &json!({})).await;
            (response.status(), response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };

    // Anthropic: run 1 is running; the interrupt makes the session idle, run 1 canceled.
    let (id, run) = (anthropic::SESSION, format!("{}.run1", anthropic::SESSION));
    let running = vec![
        anthropic::event(1, "user.message", "2026-11-30T10:01:00Z"),
        anthropic::event(2, "session.status_running", "2026-11-30T10:01:01Z"),
    ];
    sessions.set(anthropic::session(id, "running", 1.0, "2026-11-30T10:01:01Z", None), running.clone());
    let mut interrupted = running;
    interrupted
        .extend([anthropic::event(3, "user.interrupt", "2026-11-30T10:01:30Z"), anthropic::idle(4, "2026-11-30T10:01:31Z", "end_turn")]);
    sessions
        .after_events
        .lock()
        .unwrap()
        .insert(id.to_owned(), (anthropic::session(id, "idle", 30.0, "2026-11-30T10:01:31Z", None), interrupted));
    app.api.track_job("anthropic", id).await;
    app.api.wait_for_state("anthropic", &run, JobState::Running).await;
    let (status, answer) = cancel("anthropic", id.to_owned()).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "the session itself: {answer}");
    let (status, answer) = cancel("anthropic", run.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let ended = app.api.wait_for_state("anthropic", &run, JobState::Canceled).await;
    assert_eq!(ended.job.terminal_source, Some(Source::Pull));

    // OpenAI: turn 1 is in progress; the cancel event makes it cancelled.
    let (id, turn) = (openai::SESSION, format!("{}.turn_1", openai::SESSION));
    sessions.set(openai::session(id, "in_progress", "10:01:01", json!([])), vec![openai::turn("turn_1", "in_progress", "10:01:01", None)]);
    sessions.after_events.lock().unwrap().insert(
        id.to_owned(),
        (openai::session(id, "idle", "10:01:40", json!([])), vec![openai::turn("turn_1", "cancelled", "10:01:01", Some("10:01:40"))]),
    );
    app.api.track_job("openai", id).await;
    app.api.wait_for_state("openai", &turn, JobState::Running).await;
    let (status, answer) = cancel("openai", turn.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["answer"], "accepted (202 Accepted)");
    app.api.wait_for_state("openai", &turn, JobState::Canceled).await;

    // Each sent once, with its provider's headers and event.
    let sent = sessions.sent.lock().unwrap().clone();
    let paths: Vec<&str> = sent.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [format!("POST /v1/sessions/{}/events", anthropic::SESSION), format!("POST /v1/agents/sessions/{}/events", openai::SESSION)]
    );
    let (_, headers, body) = &sent[0];
    assert_eq!((header(headers, "x-api-key").as_str(), header(headers, "anthropic-version").as_str()), (anthropic::KEY, "2023-06-01"));
    assert_eq!(header(headers, "anthropic-beta"), "managed-agents-2026-04-01");
    assert_eq!(body, &json!({"events": [{"type": "user.interrupt"}]}));
    let (_, headers, body) = &sent[1];
    assert_eq!(header(headers, "authorization"), format!("Bearer {}", openai::KEY));
    assert_eq!(header(headers, "openai-beta"), "agents=v1");
    assert_eq!(body, &json!({"events": [{"type": "agent.session.input.cancel"}]}));
}

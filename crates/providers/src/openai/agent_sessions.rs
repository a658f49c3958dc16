//! OpenAI agent sessions (`OpenAI-Beta: agents=v1`), watched as turns, the same way Anthropic's
//! sessions are watched as runs (see `providers/anthropic.rs`).
//!
//! A session (`GET /v1/agents/sessions/{id}`: `status` `idle`, `in_progress`, `requires_action`,
//! `failed`; `required_actions`) is multi-turn: `idle` means "ready for more input", not "done".
//! Its turns (`GET /v1/agents/sessions/{id}/turns`, cursor pages, oldest first) have their own ids
//! and a `status` of `queued`, `in_progress`, `waiting` (for external input), `completed`,
//! `failed` or `cancelled`. NeverMiss keeps:
//! - the **session job** (the session's id): `queued` while it has no turn, `running` once it has
//!   one, `failed` when the session failed. Polled while it lives, never stuck-alerted.
//! - one **turn job** per root turn, `{session}.{turn}` (labelled "agent session A, turn N"):
//!   `queued`, `running` (also while it waits: answering resumes the same turn), then
//!   `succeeded`, `failed` or `canceled`. A turn still open when the session failed fails with it.
//!   Subagent turns (`subagent_id` set) belong to their root turn and are not jobs.
//! - one **input job** per wait for the user, `{session}.{turn}.{call_id}` (a `function_call`
//!   required action: a tool result is awaited), or `{session}.{turn}.input` for a waiting turn
//!   with no such action (an approval): `needs_input` the first time it is seen, once. An
//!   `environment_connection` action asks the user's executor, not the user: no notification.
//!
//! So a session whose turn 1 completes, turn 2 asks for a tool result and then completes, and
//! which then fails, notifies "succeeded" (turn 1), "needs input" (turn 2's call), "succeeded"
//! (turn 2), "failed" (the session). An idle session that never ran notifies nothing.
//!
//! `agent.session.*` webhooks carry only the session's id (and the action's type): each is a
//! hint for the session job (never a terminal state) and asks for a poll of the session at once;
//! polling any of a session's jobs merges them all, from the same two reads.

use serde::Deserialize;

use super::{unix_secs, ApiError, NAME};
use crate::job::{JobEvent, JobState};
use crate::vocabulary::{Meaning, Table, WhenUnknown};
use crate::FetchError;

/// The beta header the agents API needs (`OpenAI-Beta: agents=v1`, as the SDK sends it).
pub const BETA: (&str, &str) = ("OpenAI-Beta", "agents=v1");
/// Most pages of turns read in one poll (100 turns each).
pub const MAX_TURN_PAGES: usize = 20;

/// What an `agent.session.*` webhook says of the session job: a hint, never a terminal state
/// (which turn ended, and how, is learned by the poll it triggers): `super::WEBHOOK_TYPES`'
/// `ReadAtOnce` entries.
pub fn webhook_state(kind: &str) -> Option<JobState> {
    match super::WEBHOOK_TYPES.get(kind)? {
        Meaning::ReadAtOnce(state) => Some(state),
        _ => None,
    }
}

/// An agent session's `status` (`AgentSession.status`), for the session job: `idle` is "ready
/// for more input", not "done" (a session that never ran stays `queued`).
pub const SESSION_STATUSES: Table = Table {
    provider: super::NAME,
    key: "openai.agent_session.status",
    sdk: "`AgentSession.status`",
    entries: &[
        ("idle", Meaning::State(JobState::Running, None)),
        ("in_progress", Meaning::State(JobState::Running, None)),
        ("requires_action", Meaning::State(JobState::Running, None)),
        ("failed", Meaning::State(JobState::Failed, Some("the session failed"))),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// A turn's `status` (`Turn.status`); `waiting` is still running (its answer resumes it).
pub const TURN_STATUSES: Table = Table {
    provider: super::NAME,
    key: "openai.turn.status",
    sdk: "`Turn.status`",
    entries: &[
        ("queued", Meaning::State(JobState::Queued, None)),
        ("in_progress", Meaning::State(JobState::Running, None)),
        ("waiting", Meaning::State(JobState::Running, None)),
        ("completed", Meaning::State(JobState::Succeeded, None)),
        ("failed", Meaning::State(JobState::Failed, None)),
        ("cancelled", Meaning::State(JobState::Canceled, None)),
    ],
    when_unknown: WhenUnknown::KeepsRunning,
};

/// What joins a session's id to its turn's, and a turn's to its wait's.
pub const SEPARATOR: char = '.';

/// The session id in any of a session's job ids.
pub fn session_of(job_id: &str) -> &str {
    job_id.split(SEPARATOR).next().unwrap_or(job_id)
}

/// Whether a job id is a turn's (`{session}.{turn}`), not the session's nor a wait's.
pub fn is_turn_job(job_id: &str) -> bool {
    job_id.split(SEPARATOR).count() == 2
}

/// The input event that cancels a session's active turn (`SessionInputParamAgentSessionInputCancel`).
pub const CANCEL_EVENT: &str = "agent.session.input.cancel";

/// A turn's job id.
pub fn turn_job_id(session_id: &str, turn_id: &str) -> String {
    format!("{session_id}{SEPARATOR}{turn_id}")
}

/// `GET /v1/agents/sessions/{id}`, the fields NeverMiss reads (`AgentSession` in openai-python).
#[derive(Debug, Deserialize)]
pub struct AgentSession {
    pub id: String,
    pub status: String,
    #[serde(deserialize_with = "unix_secs::ms")]
    pub created_at: i64,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    pub last_active_at: Option<i64>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub required_actions: Vec<RequiredAction>,
    #[serde(default)]
    pub agent: Option<SessionAgent>,
}

#[derive(Debug, Deserialize)]
pub struct SessionAgent {
    #[serde(default)]
    pub name: Option<String>,
}

/// One of a session's `required_actions`.
#[derive(Debug, Deserialize)]
pub struct RequiredAction {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub turn_id: Option<String>,
    #[serde(default)]
    pub call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// One turn (`Turn` in openai-python).
#[derive(Debug, Deserialize)]
pub struct Turn {
    pub id: String,
    pub status: String,
    #[serde(deserialize_with = "unix_secs::ms")]
    pub created_at: i64,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    pub started_at: Option<i64>,
    #[serde(default, deserialize_with = "unix_secs::opt_ms")]
    pub completed_at: Option<i64>,
    #[serde(default)]
    error: Option<ApiError>,
    #[serde(default)]
    pub subagent_id: Option<String>,
}

/// A turn's `status` (`TURN_STATUSES`).
pub fn turn_state(status: &str) -> Option<JobState> {
    match TURN_STATUSES.get(status)? {
        Meaning::State(state, _) => Some(state),
        _ => None,
    }
}

fn name(session: &AgentSession) -> String {
    session.agent.as_ref().and_then(|a| a.name.clone()).filter(|n| !n.is_empty()).unwrap_or_else(|| session.id.clone())
}

fn event(job_id: String, state: JobState, seq: i64, label: String) -> JobEvent {
    JobEvent {
        group: None,
        provider: NAME.into(),
        job_id,
        state,
        seq,
        label: Some(label),
        finished_at: None,
        started_at: None,
        error: None,
        detail: None,
        result: None,
        provider_url: None,
        kind: None,
    }
}

/// Every job a session's poll learns, in the order they are merged: each root turn (and the wait
/// it is in, before it), then the session. `NotFound` when the asked job is not among them.
pub fn session_answer(asked: &str, session: &AgentSession, turns: &[Turn]) -> Result<Vec<JobEvent>, FetchError> {
    Ok(session_status_answer(asked, session, turns)?.events)
}

/// `session_answer`, with the statuses NeverMiss does not know (each keeps its job running).
pub fn session_status_answer(asked: &str, session: &AgentSession, turns: &[Turn]) -> Result<crate::StatusAnswer, FetchError> {
    let mut unknown: Vec<crate::vocabulary::UnknownValue> = Vec::new();
    let failed = session.status == "failed";
    let last_active = session.last_active_at.unwrap_or(session.created_at).max(session.created_at);
    let mut all = Vec::new();
    let mut number = 0;
    for turn in turns.iter().filter(|t| t.subagent_id.is_none()) {
        number += 1;
        // A status NeverMiss does not know keeps the turn running, shown and counted.
        let read = TURN_STATUSES.state(&turn.status, &turn_job_id(&session.id, &turn.id));
        let mut state = read.state;
        let unknown_reason = read.unknown.as_ref().and(read.reason.clone());
        unknown.extend(read.unknown);
        let label = format!("agent session {}, turn {number}", name(session));
        // The waits of this turn, each once.
        let calls: Vec<&RequiredAction> = session
            .required_actions
            .iter()
            .filter(|a| a.kind != "environment_connection" && a.turn_id.as_deref() == Some(turn.id.as_str()))
            .collect();
        let mut waits: Vec<(&str, String)> = calls
            .iter()
            .map(|call| {
                let detail = match call.name.as_deref() {
                    Some(f) => format!("waiting for the result of {f}"),
                    None => format!("waiting for {}", call.kind.replace('_', " ")),
                };
                (call.call_id.as_deref().unwrap_or("input"), detail)
            })
            .collect();
        if turn.status == "waiting" && waits.is_empty() {
            waits.push(("input", "waiting for input".into()));
        }
        for (key, detail) in waits {
            let mut wait =
                event(format!("{}{SEPARATOR}{key}", turn_job_id(&session.id, &turn.id)), JobState::NeedsInput, last_active, label.clone());
            wait.finished_at = Some(last_active);
            wait.started_at = turn.started_at;
            wait.detail = Some(detail);
            all.push(wait);
        }
        let mut error = turn.error.as_ref().and_then(ApiError::line);
        if failed && !state.is_terminal() {
            state = JobState::Failed;
            error = Some("the session failed during this turn".into());
        }
        let seq = [Some(turn.created_at), turn.started_at, turn.completed_at].into_iter().flatten().max().unwrap_or(turn.created_at);
        let seq = if failed && turn.completed_at.is_none() { seq.max(last_active) } else { seq };
        let mut ev = event(turn_job_id(&session.id, &turn.id), state, seq, label);
        ev.started_at = turn.started_at.or(Some(turn.created_at));
        if state.is_terminal() {
            ev.finished_at = Some(turn.completed_at.unwrap_or(last_active));
            ev.error = match state {
                JobState::Failed => Some(error.unwrap_or_else(|| "the turn failed".into())),
                _ => None,
            };
        } else if turn.status == "waiting" {
            ev.detail = Some("waiting for input".into());
        } else if unknown_reason.is_some() {
            ev.detail = unknown_reason;
        }
        all.push(ev);
    }
    let read = SESSION_STATUSES.state(&session.status, &session.id);
    let (state, detail) = match session.status.as_str() {
        _ if read.unknown.is_some() => (read.state, read.reason.clone()),
        "failed" => (JobState::Failed, None),
        "idle" | "in_progress" | "requires_action" if number == 0 => (JobState::Queued, Some("idle: it has not run yet".to_owned())),
        "idle" => (JobState::Running, Some("idle: ready for more input".to_owned())),
        "in_progress" => (JobState::Running, Some("a turn is in progress".to_owned())),
        _ => (JobState::Running, Some("waiting for an action".to_owned())),
    };
    unknown.extend(read.unknown);
    let mut ev = event(session.id.clone(), state, last_active, format!("agent session {}", name(session)));
    ev.detail = detail;
    if state == JobState::Failed {
        ev.finished_at = Some(last_active);
        ev.error = Some(session.error.clone().filter(|e| !e.is_empty()).unwrap_or_else(|| "the session failed".into()));
    }
    all.push(ev);
    if !all.iter().any(|e| e.job_id == asked) {
        return Err(FetchError::NotFound);
    }
    Ok(crate::StatusAnswer { events: all, poll_url: None, unknown })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(status: &str, actions: serde_json::Value) -> AgentSession {
        serde_json::from_value(serde_json::json!({
            "id": "sess_1", "object": "agent.session", "status": status, "created_at": 1_796_032_800,
            "last_active_at": 1_796_033_400.5, "error": if status == "failed" { serde_json::json!("sandbox lost") } else { serde_json::Value::Null },
            "required_actions": actions, "agent": {"id": "agent_1", "name": "triage", "model": "gpt-5"}, "metadata": {}, "vault_ids": []
        }))
        .unwrap()
    }

    fn turn(id: &str, status: &str, completed: Option<i64>) -> Turn {
        serde_json::from_value(serde_json::json!({
            "id": id, "object": "agent.session.turn", "agent_id": "agent_1", "session_id": "sess_1", "status": status,
            "created_at": 1_796_032_900, "started_at": 1_796_032_901, "completed_at": completed,
            "error": if status == "failed" { serde_json::json!({"code": "server_error", "message": "boom"}) } else { serde_json::Value::Null }
        }))
        .unwrap()
    }

    fn states(all: &[JobEvent]) -> Vec<(String, JobState)> {
        all.iter().map(|e| (e.job_id.clone(), e.state)).collect()
    }

    #[test]
    fn webhook_types_are_hints() {
        for kind in ["agent.session.in_progress", "agent.session.idle", "agent.session.action_required", "agent.session.failed"] {
            assert_eq!(webhook_state(kind), Some(JobState::Running), "{kind}");
        }
        assert_eq!(webhook_state("agent.session.created"), Some(JobState::Queued));
        assert_eq!(webhook_state("agent.environment.ready"), None);
    }

    #[test]
    fn turns_waits_and_the_session() {
        let actions = serde_json::json!([
            {"type": "function_call", "call_id": "call_9", "name": "lookup", "arguments": {}, "turn_id": "turn_2"},
            {"type": "environment_connection", "environment_id": "env_1"}
        ]);
        let all = session_answer(
            "sess_1",
            &session("requires_action", actions),
            &[turn("turn_1", "completed", Some(1_796_033_000)), turn("turn_2", "waiting", None)],
        )
        .unwrap();
        assert_eq!(
            states(&all),
            [
                ("sess_1.turn_1".into(), JobState::Succeeded),
                ("sess_1.turn_2.call_9".into(), JobState::NeedsInput),
                ("sess_1.turn_2".into(), JobState::Running),
                ("sess_1".into(), JobState::Running),
            ]
        );
        assert_eq!(all[0].label.as_deref(), Some("agent session triage, turn 1"));
        assert_eq!(all[0].finished_at, Some(1_796_033_000_000));
        assert_eq!(all[1].detail.as_deref(), Some("waiting for the result of lookup"));

        // The session failed while turn 2 ran: the turn fails with it.
        let all =
            session_answer("sess_1.turn_2", &session("failed", serde_json::json!([])), &[turn("turn_2", "in_progress", None)]).unwrap();
        assert_eq!(states(&all), [("sess_1.turn_2".into(), JobState::Failed), ("sess_1".into(), JobState::Failed)]);
        assert_eq!(all[1].error.as_deref(), Some("sandbox lost"));
        // A failed turn says why.
        let all =
            session_answer("sess_1", &session("idle", serde_json::json!([])), &[turn("turn_3", "failed", Some(1_796_033_000))]).unwrap();
        assert_eq!(all[0].error.as_deref(), Some("server_error: boom"));
        // A turn the session does not have; an unknown status.
        assert_eq!(session_answer("sess_1.turn_9", &session("idle", serde_json::json!([])), &[]), Err(FetchError::NotFound));
        // Statuses NeverMiss does not know keep the session and the turn running, shown and counted.
        let answer =
            session_status_answer("sess_1", &session("sleeping", serde_json::json!([])), &[turn("turn_4", "paused", None)]).unwrap();
        assert_eq!(states(&answer.events), [("sess_1.turn_4".into(), JobState::Running), ("sess_1".into(), JobState::Running)]);
        assert!(answer.events[0].detail.as_deref().unwrap().contains("\"paused\""), "{answer:?}");
        assert!(answer.events[1].detail.as_deref().unwrap().contains("\"sleeping\""), "{answer:?}");
        let unknown: Vec<(&str, &str)> = answer.unknown.iter().map(|u| (u.field, u.value.as_str())).collect();
        assert_eq!(unknown, [("turn.status", "paused"), ("agent_session.status", "sleeping")]);
    }

    #[test]
    fn a_session_that_never_ran_and_subagent_turns() {
        let all = session_answer("sess_1", &session("idle", serde_json::json!([])), &[]).unwrap();
        assert_eq!(states(&all), [("sess_1".into(), JobState::Queued)]);
        let mut sub = turn("turn_s", "completed", Some(1_796_033_000));
        sub.subagent_id = Some("subagent_1".into());
        let all = session_answer("sess_1", &session("idle", serde_json::json!([])), &[sub]).unwrap();
        assert_eq!(states(&all), [("sess_1".into(), JobState::Queued)]);
        assert_eq!(session_of("sess_1.turn_2.call_9"), "sess_1");
    }
}

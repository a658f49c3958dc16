//! The runs NeverMiss mis-stated before the providers' own SDKs decided, each driven
//! through a real `nevermiss serve` with payloads built from SDK-checked fixtures
//! (`harness::conformance`): a stand-in serves them (logged for the judge), and webhooks are
//! signed the Standard Webhooks way.
//! - Anthropic runs stopped by `budget_reached` (needs input) or `refusal` (failed) are never
//!   "succeeded"; a stop reason from the future fails the run with it shown, counted once.
//! - A session's runs are read whatever its `stats` hold (no `active_seconds`).
//! - OpenAI turn pages are followed by the last item's id (there is no `last_id`).
//! - Every session-status webhook name makes the engine read the session at once;
//!   `session.deleted` ends the session and its open run, canceled (a 404 alone does not).
//! - fal's `error_type` / `X-Fal-Error-Type` on the response URL fails the job with that reason.
//! - A Replicate training is told apart by what the current type has (no `destination`).
//! - An OpenAI signature entry without `v1,` is accepted, as openai-python accepts it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use nevermiss_engine::api::jobs::TrackRequest;
use nevermiss_engine::store::job::JobState;
use serde_json::{json, Value};

use crate::harness::conformance::{self, fixture, off_spec, Fixture};
use crate::harness::serve_child::{ServeChild, ServeOptions};
use crate::harness::stand_in::serve;
use crate::harness::{signing, wait_until};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const KEY: &str = "sk-standin-0123456789";

/// One answer of the stand-in: status, headers, body, and why it is off the SDKs' spec (if it is).
#[derive(Clone)]
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Value,
    off_spec: Option<&'static str>,
}

fn ok(body: impl Into<Value>) -> Answer {
    Answer { status: 200, headers: Vec::new(), body: body.into(), off_spec: None }
}

/// A provider API stand-in answering by path (and the page cursor, `page` or `after`, if any).
#[derive(Default)]
struct Api {
    answers: Mutex<HashMap<String, Answer>>,
    seen: Mutex<Vec<String>>,
}

impl Api {
    fn set(&self, key: &str, answer: Answer) {
        self.answers.lock().unwrap().insert(key.to_owned(), answer);
    }

    fn remove(&self, key: &str) {
        self.answers.lock().unwrap().remove(key);
    }

    fn seen(&self, path: &str) -> usize {
        self.seen.lock().unwrap().iter().filter(|p| *p == path).count()
    }
}

async fn answer(State(api): State<Arc<Api>>, Query(query): Query<HashMap<String, String>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    api.seen.lock().unwrap().push(path.clone());
    let cursor = query.get("page").map(|p| format!("?page={p}")).or_else(|| query.get("after").map(|a| format!("?after={a}")));
    let key = format!("{path}{}", cursor.unwrap_or_default());
    let Some(a) = api.answers.lock().unwrap().get(&key).cloned() else {
        return (StatusCode::NOT_FOUND, axum::Json(json!({"type": "error", "error": {"type": "not_found_error", "message": "Not found"}})))
            .into_response();
    };
    let mut response = (StatusCode::from_u16(a.status).unwrap(), axum::Json(a.body)).into_response();
    for (name, value) in a.headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    match a.off_spec {
        Some(why) => off_spec(response, why),
        None => response,
    }
}

struct World {
    serve: ServeChild,
    api: Arc<Api>,
    base: String,
    _dir: tempfile::TempDir,
}

/// A stand-in for every provider's API, and a `serve` pointed at it with keys and secrets set
/// (polling on demand only: the interval is an hour).
async fn world() -> World {
    let api = Arc::new(Api::default());
    let base = serve(Router::new().fallback(answer).with_state(api.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = vec![("NEVERMISS_POLL_INTERVAL".to_owned(), "3600".to_owned())];
    for provider in ["ANTHROPIC", "OPENAI", "FAL", "REPLICATE"] {
        env.push((format!("NEVERMISS_{provider}_BASE_URL"), base.clone()));
        env.push((format!("NEVERMISS_{provider}_API_KEY"), KEY.to_owned()));
        env.push((format!("NEVERMISS_{provider}_WEBHOOK_SECRET"), SECRET.to_owned()));
    }
    let serve = ServeChild::start(&ServeOptions {
        data_dir: &dir.path().join("data"),
        log: &dir.path().join("serve.log"),
        receiver_addr: "127.0.0.1:0".parse().unwrap(),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        env,
        rust_log: "warn",
    })
    .await;
    World { serve, api, base, _dir: dir }
}

impl World {
    /// A Standard Webhooks delivery to `serve` (signed as the SDKs sign; `bare`: the signature
    /// entry without its `v1,` prefix); the status and the outcome. Logged for the judge.
    async fn hook(&self, provider: &str, id: &str, body: &Value, bare: bool) -> (StatusCode, Option<String>) {
        let bytes = serde_json::to_vec(body).unwrap();
        let mut headers = signing::standard_webhooks(SECRET, id, signing::now_secs(), &bytes);
        if bare {
            let signature = &mut headers.iter_mut().find(|(n, _)| *n == "webhook-signature").unwrap().1;
            *signature = signature.strip_prefix("v1,").unwrap().to_owned();
        }
        let mut request = self.serve.api.http.post(format!("{}/hooks/{provider}", self.serve.receiver)).body(bytes.clone());
        for (name, value) in &headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        let outcome = answer["outcome"].as_str().map(str::to_owned);
        if matches!(outcome.as_deref(), Some("applied" | "stale" | "duplicate")) {
            conformance::record_sent(provider, &bytes, None);
        }
        (status, outcome)
    }

    async fn track(&self, provider: &str, id: &str, status_url: Option<String>) {
        let request = TrackRequest { provider: provider.into(), job_id: id.into(), label: None, status_url, group: None };
        self.serve.api.track(&request).await;
    }

    async fn state(&self, provider: &str, id: &str) -> nevermiss_engine::store::job::Job {
        self.serve.api.job_now(provider, id).await.job
    }
}

// ----- Anthropic -----

fn session(id: &str, status: &str) -> Fixture {
    fixture("anthropic/session").id(id).status(status)
}

fn running(n: u32, at: &str) -> Value {
    fixture("anthropic/session_event_running").id(&format!("sevt_{n:03}")).set("processed_at", at).value()
}

fn idle(n: u32, at: &str, reason: &str) -> Value {
    fixture("anthropic/session_event_idle").id(&format!("sevt_{n:03}")).set("processed_at", at).set("stop_reason.type", reason).value()
}

fn refused(n: u32, at: &str) -> Value {
    fixture("anthropic/session_event_idle_refusal").id(&format!("sevt_{n:03}")).set("processed_at", at).value()
}

/// The session and its whole event list (one page).
fn serve_session(api: &Api, session: Fixture, events: Vec<Value>, off: Option<&'static str>) {
    let session = session.value();
    let id = session["id"].as_str().unwrap().to_owned();
    api.set(&format!("/v1/sessions/{id}"), ok(session));
    let page = Answer { off_spec: off, ..ok(json!({"data": events, "next_page": null})) };
    api.set(&format!("/v1/sessions/{id}/events"), page);
}

fn webhook(kind: &str, session: &str, at: &str) -> Value {
    fixture("anthropic/webhook_event")
        .id(&format!("wevt_{}_{}", kind.replace('.', "_"), at.replace([':', '-'], "")))
        .set("created_at", at)
        .set("data.type", kind)
        .set("data.id", session)
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_and_refusal_stops_are_never_successes_nor_is_an_unknown_one() {
    let w = world().await;
    // Run 1 is stopped by the budget; after it is raised and a message sent, run 2 is refused.
    let s1 = "sesn_011CZkZAtmR3yMPDzynEDxu7";
    let events = vec![
        running(1, "2026-11-30T10:01:00Z"),
        idle(2, "2026-11-30T10:02:00Z", "budget_reached"),
        running(3, "2026-11-30T10:03:00Z"),
        refused(4, "2026-11-30T10:04:00Z"),
    ];
    serve_session(&w.api, session(s1, "idle").set("updated_at", "2026-11-30T10:04:00Z"), events, None);
    w.track("anthropic", s1, None).await;
    w.serve.api.poll_now("anthropic", s1).await;
    let run1 = w.state("anthropic", &format!("{s1}.run1")).await;
    assert_eq!(run1.state, JobState::NeedsInput, "{run1:?}");
    assert!(run1.error.as_deref().unwrap_or_default().contains("budget"), "{run1:?}");
    let run2 = w.state("anthropic", &format!("{s1}.run2")).await;
    assert_eq!(run2.state, JobState::Failed, "{run2:?}");
    assert!(run2.error.as_deref().unwrap_or_default().contains("refused"), "{run2:?}");

    // A stop reason no SDK has yet: the run failed, the reason shown, counted once.
    let s2 = "sesn_011CZkZAtmR3yMPDzynEDxu8";
    let events = vec![running(1, "2026-11-30T10:01:00Z"), idle(2, "2026-11-30T10:02:00Z", "tool_budget")];
    serve_session(&w.api, session(s2, "idle"), events, Some("a stop reason from the future (tool_budget)"));
    w.track("anthropic", s2, None).await;
    w.serve.api.poll_now("anthropic", s2).await;
    w.serve.api.poll_now("anthropic", s2).await;
    let run = w.state("anthropic", &format!("{s2}.run1")).await;
    assert_eq!(run.state, JobState::Failed, "{run:?}");
    assert!(run.error.as_deref().unwrap_or_default().contains("\"tool_budget\""), "{run:?}");
    let metrics = w.serve.api.metrics().await;
    let counted: Vec<(&str, &str, &str, i64)> =
        metrics.unknown_values.iter().map(|u| (u.provider.as_str(), u.field.as_str(), u.value.as_str(), u.count)).collect();
    assert_eq!(counted, [("anthropic", "session_event.stop_reason", "tool_budget", 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_runs_are_read_whatever_its_stats_hold() {
    let w = world().await;
    let id = "sesn_011CZkZAtmR3yMPDzynEDxu9";
    // `stats.active_seconds` is optional in the SDK: here the session says nothing of it.
    let events = vec![running(1, "2026-11-30T10:01:00Z"), idle(2, "2026-11-30T10:02:00Z", "end_turn")];
    serve_session(&w.api, session(id, "idle").set("stats", json!({})), events, None);
    w.track("anthropic", id, None).await;
    w.serve.api.poll_now("anthropic", id).await;
    assert_eq!(w.state("anthropic", &format!("{id}.run1")).await.state, JobState::Succeeded);
    assert_eq!(w.state("anthropic", id).await.state, JobState::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_status_webhook_name_reads_the_session_at_once() {
    let w = world().await;
    let id = "sesn_011CZkZAtmR3yMPDzynEDxv1";
    serve_session(&w.api, session(id, "idle"), vec![running(1, "2026-11-30T10:01:00Z")], None);
    let path = format!("/v1/sessions/{id}");
    let kinds = [
        "session.created",
        "session.pending",
        "session.running",
        "session.idled",
        "session.requires_action",
        "session.budget_reached",
        "session.archived",
        "session.status_run_started",
        "session.status_idled",
        "session.status_rescheduled",
        "session.status_terminated",
    ];
    for (i, kind) in kinds.iter().enumerate() {
        let reads = w.api.seen(&path);
        let at = format!("2026-11-30T10:{:02}:00Z", 10 + i);
        let (status, outcome) = w.hook("anthropic", &format!("msg_{i}"), &webhook(kind, id, &at), false).await;
        assert_eq!(status, StatusCode::OK, "{kind}");
        assert!(matches!(outcome.as_deref(), Some("applied" | "stale")), "{kind}: {outcome:?}");
        wait_until(&format!("{kind} makes serve read the session"), || async { w.api.seen(&path) > reads }).await;
    }
    // One that says nothing of a session's status is ignored, and reads nothing.
    let (status, outcome) = w.hook("anthropic", "msg_u", &webhook("session.updated", id, "2026-11-30T11:00:00Z"), false).await;
    assert_eq!((status, outcome.as_deref()), (StatusCode::OK, Some("ignored")));
    // One no SDK has yet: ignored too, and counted as a value NeverMiss does not know.
    let (status, outcome) = w.hook("anthropic", "msg_f", &webhook("session.paused", id, "2026-11-30T11:01:00Z"), false).await;
    assert_eq!((status, outcome.as_deref()), (StatusCode::OK, Some("ignored")));
    let metrics = w.serve.api.metrics().await;
    let counted: Vec<(&str, &str, &str, i64)> =
        metrics.unknown_values.iter().map(|u| (u.provider.as_str(), u.field.as_str(), u.value.as_str(), u.count)).collect();
    assert_eq!(counted, [("anthropic", "webhook.type", "session.paused", 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_session_ends_with_its_open_run_canceled_and_a_404_alone_does_not() {
    let w = world().await;
    let deleted = "sesn_011CZkZAtmR3yMPDzynEDxw1";
    let gone = "sesn_011CZkZAtmR3yMPDzynEDxw2";
    for id in [deleted, gone] {
        serve_session(&w.api, session(id, "running"), vec![running(1, "2026-11-30T10:01:00Z")], None);
        w.track("anthropic", id, None).await;
        w.serve.api.poll_now("anthropic", id).await;
        assert_eq!(w.state("anthropic", &format!("{id}.run1")).await.state, JobState::Running);
        // Deleted: it answers 404 from now on.
        w.api.remove(&format!("/v1/sessions/{id}"));
        w.api.remove(&format!("/v1/sessions/{id}/events"));
    }
    let (status, outcome) = w.hook("anthropic", "msg_del", &webhook("session.deleted", deleted, "2026-11-30T10:30:00Z"), false).await;
    assert_eq!((status, outcome.as_deref()), (StatusCode::OK, Some("applied")));
    assert_eq!(w.state("anthropic", deleted).await.state, JobState::Canceled);
    let run = w.state("anthropic", &format!("{deleted}.run1")).await;
    assert_eq!(run.state, JobState::Canceled, "{run:?}");
    // Without the webhook, a 404 is a poll error (a changed key or workspace answers 404 too).
    w.serve.api.poll_now("anthropic", gone).await;
    let job = w.state("anthropic", gone).await;
    assert_eq!(job.state, JobState::Running, "{job:?}");
    assert!(job.poll_error.is_some(), "{job:?}");
}

// ----- OpenAI -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_turn_pages_are_followed_by_the_last_items_id() {
    let w = world().await;
    let id = "sess_68e2c1d0a9f4";
    w.api.set(&format!("/v1/agents/sessions/{id}"), ok(fixture("openai/agent_session").id(id).set("status", "idle")));
    let turn = |n: i64| {
        fixture("openai/turn")
            .id(&format!("turn_{n}"))
            .set("session_id", id)
            .set("created_at", 1764496800 + n * 100)
            .set("started_at", 1764496800 + n * 100)
            .set("completed_at", 1764496850 + n * 100)
            .value()
    };
    // As the API pages them, with `has_more` and no `last_id` (openai-python never reads it).
    let turns = format!("/v1/agents/sessions/{id}/turns");
    w.api.set(&turns, ok(json!({"data": [turn(1), turn(2)], "has_more": true})));
    w.api.set(&format!("{turns}?after=turn_2"), ok(json!({"data": [turn(3)], "has_more": false})));
    w.track("openai", id, None).await;
    w.serve.api.poll_now("openai", id).await;
    for n in 1..=3 {
        assert_eq!(w.state("openai", &format!("{id}.turn_{n}")).await.state, JobState::Succeeded, "turn {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_signature_without_its_v1_prefix_is_accepted() {
    let w = world().await;
    let body = fixture("openai/webhook_event").id("evt_bare_1").set("data.id", "resp_bare1").value();
    assert_eq!(w.hook("openai", "msg_bare", &body, true).await, (StatusCode::OK, Some("applied".to_owned())));
    assert_eq!(w.state("openai", "resp_bare1").await.state, JobState::Succeeded);
}

// ----- fal -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fal_error_type_on_the_response_fails_the_job_with_it() {
    let w = world().await;
    // In the body (with a 504), or in the header only (with a 502): the job failed, not the poll.
    let cases = [
        ("req-timeout", 504, fixture("fal/response_error").value(), "request_timeout: The request timed out"),
        ("req-runner", 502, json!({"detail": "The runner went away"}), "runner_disconnected: The runner went away"),
    ];
    for (id, status, body, expected) in cases {
        let request = format!("/fal-ai/flux/requests/{id}");
        let status_body = fixture("fal/status_completed").set("request_id", id).set("response_url", format!("{}{request}", w.base));
        w.api.set(&format!("{request}/status"), ok(status_body));
        let header = if id == "req-runner" { "runner_disconnected" } else { "request_timeout" };
        w.api.set(&request, Answer { status, headers: vec![("x-fal-error-type", header.to_owned())], body, off_spec: None });
        w.track("fal", id, Some(format!("{}{request}/status", w.base))).await;
        w.serve.api.poll_now("fal", id).await;
        let job = w.state("fal", id).await;
        assert_eq!(job.state, JobState::Failed, "{job:?}");
        assert!(job.error.as_deref().unwrap_or_default().starts_with(expected), "{job:?}");
    }
}

// ----- Replicate -----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicate_training_is_told_apart_by_what_its_type_has() {
    let w = world().await;
    let training = fixture("replicate/training").value();
    assert_eq!(w.hook("replicate", "msg_t", &training, false).await, (StatusCode::OK, Some("applied".to_owned())));
    let job = w.state("replicate", "zz4ibbonubfz7carwiefibzgga").await;
    assert_eq!(job.label.as_deref(), Some("training of stability-ai/sdxl"), "{job:?}");
    let prediction = fixture("replicate/prediction").value();
    assert_eq!(w.hook("replicate", "msg_p", &prediction, false).await, (StatusCode::OK, Some("applied".to_owned())));
    let job = w.state("replicate", "gm3qorzdhgbfurvjtvhg6dckhu").await;
    assert_eq!(job.label.as_deref(), Some("replicate/hello-world"), "{job:?}");
}

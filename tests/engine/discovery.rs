//! Discovery beyond Replicate: with the provider's key set and `<provider>.discover` on, jobs
//! started anywhere are watched: OpenAI batches (`GET /v1/batches`, cursor `after`), Anthropic
//! Message Batches (`GET /v1/messages/batches`, cursor `after_id`) and Anthropic sessions
//! (`GET /v1/sessions`, opaque cursor `page`, archived ones included). Same rules as Replicate's:
//! every job created since discovery was turned on, and of the week before only those still
//! unfinished (never the finished history), pages followed by the API's own cursor (the next page
//! is asked of the same API, never of a URL the answer names), and a job older than the walk's
//! window ends it: the page after it is never asked for. Setting a provider's API key through the
//! API turns its discovery on when the owner never chose.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use nevermiss_engine::metrics::Metrics;
use serde_json::{json, Value};

use crate::harness::conformance::fixture;
use crate::harness::signing::now_secs;
use crate::harness::stand_in::{respond, serve, StandIn};
use crate::harness::TestApp;
use nevermiss_engine::api::settings::OnOff;
use nevermiss_engine::store::job::JobState;

/// A list endpoint: the page stored under `list:<cursor>` (the cursor is the `after` or
/// `after_id` query parameter; empty for the first page).
async fn list_route(State(stand): State<Arc<StandIn>>, Query(query): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    let cursor = query.get("after").or(query.get("after_id")).cloned().unwrap_or_default();
    let answer = stand.take(&format!("list:{cursor}"), &format!("list?cursor={cursor}"), &headers);
    respond(answer, |status| json!({ "error": { "message": format!("status {status}") } })).await
}

/// Anthropic's session list: the page stored under `sessions:<page>` (empty for the first).
async fn sessions_route(State(stand): State<Arc<StandIn>>, Query(query): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    assert_eq!(query.get("include_archived").map(String::as_str), Some("true"), "archived sessions are listed too");
    assert_eq!(headers.get("anthropic-beta").and_then(|v| v.to_str().ok()), Some("managed-agents-2026-04-01"));
    let cursor = query.get("page").cloned().unwrap_or_default();
    let answer = stand.take(&format!("sessions:{cursor}"), &format!("sessions?page={cursor}"), &headers);
    respond(answer, |status| json!({ "type": "error", "error": { "type": "not_found_error", "message": format!("status {status}") } }))
        .await
}

async fn stand_in(path: &str) -> (Arc<StandIn>, String) {
    let stand = StandIn::new();
    let router = Router::new().route(path, get(list_route)).route("/v1/sessions", get(sessions_route)).with_state(stand.clone());
    let url = serve(router).await;
    // Anthropic lists its sessions beside its batches: none, unless a test says otherwise.
    stand.json("sessions:", json!({ "data": [], "next_page": null }));
    (stand, url)
}

/// An OpenAI batch as the list shows it, created `created` (Unix seconds): the checked fixture.
fn openai_batch(id: &str, status: &str, created: i64) -> Value {
    let done = status == "completed";
    fixture("openai/batch")
        .id(id)
        .status(status)
        .set("output_file_id", Value::Null)
        .set("error_file_id", Value::Null)
        .set("created_at", created)
        .set("in_progress_at", if status == "in_progress" { json!(created + 1) } else { Value::Null })
        .set("expires_at", created + 86_400)
        .set("finalizing_at", Value::Null)
        .set("completed_at", if done { json!(created + 2) } else { Value::Null })
        .set("request_counts", json!({ "total": 10, "completed": if done { 10 } else { 0 }, "failed": 0 }))
        .set("metadata", json!({}))
        .value()
}

/// An Anthropic Message Batch as the list shows it, created `created` (Unix seconds): the checked
/// fixture.
fn anthropic_batch(id: &str, status: &str, created: i64) -> Value {
    let at = |secs: i64| chrono::DateTime::from_timestamp(secs, 0).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let ended = status == "ended";
    fixture("anthropic/message_batch")
        .id(id)
        .set("processing_status", status)
        .set(
            "request_counts",
            json!({ "processing": if ended { 0 } else { 5 }, "succeeded": if ended { 5 } else { 0 }, "errored": 0, "canceled": 0, "expired": 0 }),
        )
        .set("ended_at", if ended { json!(at(created + 2)) } else { Value::Null })
        .set("created_at", at(created))
        .set("expires_at", at(created + 86_400))
        .set("results_url", if ended { json!(format!("https://api.anthropic.com/v1/messages/batches/{id}/results")) } else { Value::Null })
        .value()
}

/// A page of OpenAI's list as its SDK's `SyncCursorPage` has it: `data` and `has_more` (the next
/// page is asked for after the last item's id).
fn openai_page(items: Vec<Value>, has_more: bool) -> Value {
    json!({ "data": items, "has_more": has_more })
}

/// A page of Anthropic's list as its SDK's `SyncPage` has it: `data`, `has_more`, `first_id`,
/// `last_id` (the next page is asked for after `last_id`).
fn anthropic_page(items: Vec<Value>, has_more: bool) -> Value {
    let ids: Vec<Value> = items.iter().map(|i| i["id"].clone()).collect();
    json!({ "data": items, "has_more": has_more, "first_id": ids.first(), "last_id": ids.last() })
}

struct Case {
    provider: &'static str,
    path: &'static str,
    batch: fn(&str, &str, i64) -> Value,
    page: fn(Vec<Value>, bool) -> Value,
    running: &'static str,
    done: &'static str,
    ids: [&'static str; 4],
}

async fn discovers(case: Case) {
    let mut app = TestApp::spawn_unconfigured().await;
    let (stand, url) = stand_in(case.path).await;
    app.configure(case.provider, &url, Some("key-for-listing"), None).await;
    let [new_done, new_running, page2_new, old] = case.ids;
    let old_running = format!("{old}_running");
    let later = now_secs() + 5;
    let page = case.page;
    stand.json("list:", page(vec![(case.batch)(new_done, case.done, later + 2), (case.batch)(new_running, case.running, later + 1)], true));
    stand.json(
        &format!("list:{new_running}"),
        page(vec![(case.batch)(page2_new, case.running, later), (case.batch)(old, case.done, later - 3_600)], true),
    );
    // The week before: one still running (taken in), then one older than the week (the end).
    stand.json(&format!("list:{old}"), page(vec![(case.batch)(&old_running, case.running, later - 7_200)], true));
    stand.json(&format!("list:{old_running}"), page(vec![(case.batch)("too-old", case.running, later - 8 * 86_400)], true));
    stand.json("list:too-old", page(vec![(case.batch)("never-read", case.running, later - 9 * 86_400)], false));

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
    assert!(app.api.job(case.provider, old).await.is_none(), "a batch that ended before discovery was turned on was imported");
    assert_eq!(app.api.job_now(case.provider, &old_running).await.job.state, JobState::Running, "one running when it was turned on");
    assert!(app.api.job(case.provider, "too-old").await.is_none(), "a batch from before the week was imported");
    assert!(app.api.job(case.provider, "never-read").await.is_none());
    let paths: Vec<String> = stand.seen().into_iter().map(|s| s.path).filter(|p| p.starts_with("list")).collect();
    let expected = ["", new_running, old, &old_running].map(|cursor| format!("list?cursor={cursor}"));
    assert_eq!(paths, expected, "the walk stops at the first batch older than the week");

    let metrics: Metrics = app.api.metrics().await;
    assert_eq!(metrics.store.jobs_discovered, 4);
    assert_eq!(metrics.store.notifications_enqueued, 1, "one notification, for the finished one");

    // The next listing goes back to the newest batch it saw (a minute before), no further.
    app.api.reconcile().await;
    let paths: Vec<String> = stand.seen().into_iter().map(|s| s.path).filter(|p| p.starts_with("list")).collect();
    assert_eq!(paths[expected.len()..], expected[..2], "the second listing stops at the first batch older than the newest seen");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_batches_are_discovered_from_when_it_is_turned_on() {
    discovers(Case {
        provider: "openai",
        path: "/v1/batches",
        batch: openai_batch,
        page: openai_page,
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
        page: anthropic_page,
        running: "in_progress",
        done: "ended",
        ids: ["msgbatch_new_done", "msgbatch_new_running", "msgbatch_page2", "msgbatch_old"],
    })
    .await;
}

/// An Anthropic session as `GET /v1/sessions` lists it (`BetaManagedAgentsSession`: the checked
/// fixture).
fn anthropic_session(id: &str, status: &str, active_seconds: f64, created: i64, archived: bool) -> Value {
    let at = |secs: i64| chrono::DateTime::from_timestamp(secs, 0).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    fixture("anthropic/session")
        .id(id)
        .status(status)
        .set("title", format!("work {id}"))
        .set("stats", json!({"active_seconds": active_seconds, "duration_seconds": 60.0}))
        .set("created_at", at(created))
        .set("updated_at", at(created + 30))
        .set("archived_at", if archived { json!(at(created + 40)) } else { Value::Null })
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sessions_are_discovered_as_hints_to_poll() {
    let mut app = TestApp::spawn_unconfigured().await;
    let (stand, url) = stand_in("/v1/messages/batches").await;
    app.configure("anthropic", &url, Some("key-for-listing"), None).await;
    stand.json("list:", anthropic_page(vec![], false));
    let later = now_secs() + 5;
    stand.json(
        "sessions:",
        json!({ "data": [anthropic_session("sesn_ran", "terminated", 30.0, later + 2, true), anthropic_session("sesn_never", "idle", 0.0, later + 1, false)], "next_page": "page_2" }),
    );
    stand.json(
        "sessions:page_2",
        json!({ "data": [anthropic_session("sesn_page2", "running", 5.0, later, false), anthropic_session("sesn_old", "idle", 9.0, later - 3_600, false)], "next_page": "page_3" }),
    );
    stand.json(
        "sessions:page_3",
        json!({ "data": [anthropic_session("sesn_too_old", "idle", 0.0, later - 8 * 86_400, false)], "next_page": "page_4" }),
    );

    app.api.put_settings(&json!({ "anthropic.discover": "on" })).await;
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.providers["anthropic"], "ok", "{report:?}");

    // Hints, never an end: an archived session's runs are read by its next poll, not skipped.
    let ran = app.api.job_now("anthropic", "sesn_ran").await.job;
    assert_eq!((ran.state, ran.label.as_deref()), (JobState::Running, Some("session work sesn_ran")));
    let never = app.api.job_now("anthropic", "sesn_never").await.job;
    assert_eq!((never.state, never.detail.as_deref()), (JobState::Queued, Some("idle: its runs are read by the next poll")));
    assert_eq!(app.api.job_now("anthropic", "sesn_page2").await.job.state, JobState::Running, "the second page was followed");
    // A hint is never an end: one of the week before discovery was turned on is taken in.
    assert_eq!(app.api.job_now("anthropic", "sesn_old").await.job.state, JobState::Queued);
    assert!(app.api.job("anthropic", "sesn_too_old").await.is_none(), "a session from before the week was imported");
    let pages: Vec<String> = stand.seen().into_iter().map(|s| s.path).filter(|p| p.starts_with("sessions")).collect();
    assert_eq!(
        pages,
        ["sessions?page=", "sessions?page=page_2", "sessions?page=page_3"],
        "the walk stops at the first session older than the week"
    );
    let metrics: Metrics = app.api.metrics().await;
    assert_eq!(metrics.store.jobs_discovered, 4);
    assert_eq!(metrics.store.notifications_enqueued, 0, "a hint notifies nothing");
    app.shutdown().await;
}

/// An Anthropic session created with `metadata={"nevermiss_group": ...}` joins that group when
/// discovery takes it in, with no `track` (as OpenAI's metadata does); one without stays in none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_session_joins_the_group_its_metadata_names() {
    let mut app = TestApp::spawn_unconfigured().await;
    let (stand, url) = stand_in("/v1/messages/batches").await;
    app.configure("anthropic", &url, Some("key-for-listing"), None).await;
    stand.json("list:", anthropic_page(vec![], false));
    let later = now_secs() + 5;
    let mut tagged = anthropic_session("sesn_tagged", "running", 5.0, later + 1, false);
    tagged["metadata"] = json!({ "nevermiss_group": "agents-sweep", "owner": "ops" });
    stand.json("sessions:", json!({ "data": [tagged, anthropic_session("sesn_plain", "running", 5.0, later, false)], "next_page": null }));

    app.api.put_settings(&json!({ "anthropic.discover": "on" })).await;
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.providers["anthropic"], "ok", "{report:?}");
    assert_eq!(app.api.job_now("anthropic", "sesn_tagged").await.job.group.as_deref(), Some("agents-sweep"));
    assert_eq!(app.api.job_now("anthropic", "sesn_plain").await.job.group, None);
    let group: nevermiss_engine::api::groups::GroupDetail = app.api.get("/api/groups/agents-sweep", reqwest::StatusCode::OK).await;
    assert_eq!(group.jobs.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(), ["sesn_tagged"]);
    app.shutdown().await;
}

/// Reads the live event stream until an event holds every one of `texts`, at most 20 s.
async fn stream_shows(stream: &mut reqwest::Response, texts: &[&str]) -> Result<String, String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = String::new();
    while std::time::Instant::now() < deadline {
        match tokio::time::timeout(std::time::Duration::from_secs(1), stream.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(_) => break,
            Err(_) => {}
        }
        if let Some(event) = seen.split("\n\n").find(|event| texts.iter().all(|t| event.contains(t))) {
            return Ok(event.to_owned());
        }
    }
    Err(seen)
}

/// A listed job NeverMiss knows already as ended, whose listing says what it produced: the event
/// is stale (it moves nothing) but fills in the result, and the job is published to the UI at
/// once, as after a push or a poll that does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_discovered_job_that_fills_in_its_result_is_shown_at_once() {
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let mut app = TestApp::spawn_unconfigured().await;
    let (stand, url) = stand_in("/v1/batches").await;
    app.configure("openai", &url, Some("key-for-listing"), Some(SECRET)).await;
    // Ended by its webhook, which says nothing of what it produced.
    let event = json!({"id": "evt_1", "type": "batch.completed", "created_at": now_secs(), "data": {"id": "batch_described"}});
    app.sw_deliver("openai", SECRET, "wh_1", &event).await;
    let ended = app.api.wait_for_state("openai", "batch_described", JobState::Succeeded).await;
    assert!(ended.job.result.is_none(), "{:?}", ended.job.result);

    let mut stream = app.api.http.get(app.api.url("/api/events")).bearer_auth(&app.api.token).send().await.unwrap();
    let mut listed = openai_batch("batch_described", "completed", now_secs() + 5);
    listed["output_file_id"] = json!("file-described-out");
    stand.json("list:", openai_page(vec![listed], false));
    app.api.put_settings(&json!({"openai.discover": "on"})).await;
    app.api.reconcile().await;
    let shown = stream_shows(&mut stream, &["event: job", "batch_described", "file-described-out"]).await;
    assert!(shown.is_ok(), "the UI was not told of the result the listing filled in: {:?}", shown.err());
    let job = app.api.job_now("openai", "batch_described").await.job;
    assert!(job.result.is_some_and(|r| r.to_column().contains("file-described-out")));
    app.shutdown().await;
}

/// A key set means every job watched: setting a provider's API key through the API (Settings,
/// Get started, `nevermiss secrets set`) turns its discovery on and says so, when the owner never
/// chose; a choice made (off) stays, whatever key is set after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setting_the_api_key_turns_discovery_on_unless_the_owner_chose() {
    use nevermiss_engine::api::setup::SecretsView;
    let mut app = TestApp::spawn_unconfigured().await;
    let (stand, url) = stand_in("/v1/batches").await;
    app.configure("openai", &url, None, None).await;
    let later = now_secs() + 5;
    // Running since an hour before the key was set: taken in by the first listing.
    stand.json("list:", openai_page(vec![openai_batch("batch_before_the_key", "in_progress", later - 3_600)], false));

    let answer: SecretsView = app.api.put("/api/secrets/openai", &json!({"api_key": "sk-set-by-the-owner"}), reqwest::StatusCode::OK).await;
    let note = answer.discovery_note.expect("the answer says discovery was turned on");
    assert!(note.contains("Discovery is on for openai") && note.contains("openai.discover off"), "{note}");
    assert_eq!(app.api.settings().await.providers["openai"].discover, Some(OnOff::On));
    app.api.reconcile().await;
    assert_eq!(app.api.job_now("openai", "batch_before_the_key").await.job.state, JobState::Running);

    // The owner turns it off; a new key later leaves it off, and says nothing of discovery.
    app.api.put_settings(&json!({"openai.discover": "off"})).await;
    let answer: SecretsView = app.api.put("/api/secrets/openai", &json!({"api_key": "sk-a-new-one"}), reqwest::StatusCode::OK).await;
    assert_eq!(answer.discovery_note, None);
    assert_eq!(app.api.settings().await.providers["openai"].discover, Some(OnOff::Off));
    let listed = stand.count("list?cursor=");
    app.api.reconcile().await;
    assert_eq!(stand.count("list?cursor="), listed, "listed with discovery turned off");

    // A provider that cannot list its jobs: a key set says nothing of discovery.
    let answer: SecretsView = app.api.put("/api/secrets/fal", &json!({"api_key": "fal-key"}), reqwest::StatusCode::OK).await;
    assert_eq!(answer.discovery_note, None);
    app.shutdown().await;
}

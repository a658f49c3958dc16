//! The shipped recipes' discovery through a real `nevermiss serve`: with `<name>.discover`
//! on, the account's list is asked at a loopback stand-in of the provider's cloud whose pages are
//! built of the SDK-validated fixtures in the shape of each SDK's list (judged by the SDKs, as
//! every stand-in body is: `stand_in::serve`). Each job created since discovery was turned on is
//! watched with the state its recipe reads, a finished one announced once; an older finished one
//! is not imported, and where the list has pages, the next is asked by the recipe's cursor and the
//! walk stops at the first job older than the week the first listing looks back. A list under the
//! owner's account names it: Fireworks's from the setting (discovery refused before it is set),
//! Hugging Face's from the key's own `whoami`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use nevermiss_engine::api::settings::OnOff;
use nevermiss_engine::store::job::JobState;
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::harness::conformance::fixture;
use crate::harness::serve_child::{free_addr, ServeChild, ServeOptions};
use crate::harness::stand_in::serve;
use crate::harness::wait_until;

/// One shipped recipe's list, as its cloud answers it.
struct Listing {
    name: &'static str,
    /// The list's path (as the recipe asks it, without its query).
    path: &'static str,
    /// The query parameter of the next page's cursor, when the list has pages.
    cursor: Option<&'static str>,
    /// A page of `items`, with the cursor of the next page if any.
    page: fn(Vec<Value>, Option<&str>) -> Value,
    /// A listed job of id `id` created `created` (Unix seconds), running or ended.
    job: fn(id: &str, created: i64, ended: bool) -> Value,
    ids: [&'static str; 3],
    running: JobState,
    ended: JobState,
    /// Settings put with `<name>.discover` on (an account).
    settings: Value,
    /// Who the key is, at `/api/whoami-v2` (Hugging Face), when the list names the account.
    whoami: Option<Value>,
}

fn rfc3339(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[derive(Default)]
struct Pages {
    by_cursor: Mutex<HashMap<String, Value>>,
    asked: Mutex<Vec<String>>,
    param: Mutex<Option<&'static str>>,
}

async fn list(State(pages): State<Arc<Pages>>, Query(query): Query<HashMap<String, String>>) -> Response {
    let param = *pages.param.lock().unwrap();
    let cursor = param.and_then(|p| query.get(p).cloned()).unwrap_or_default();
    pages.asked.lock().unwrap().push(cursor.clone());
    match pages.by_cursor.lock().unwrap().get(&cursor) {
        Some(page) => Json(page.clone()).into_response(),
        None => (axum::http::StatusCode::NOT_FOUND, Json(json!({"error": {"message": "no such page"}}))).into_response(),
    }
}

async fn discovers(listing: Listing) {
    let pages = Arc::new(Pages::default());
    *pages.param.lock().unwrap() = listing.cursor;
    let mut router = Router::new().route(listing.path, get(list)).with_state(pages.clone());
    if let Some(whoami) = listing.whoami.clone() {
        router = router.route("/api/whoami-v2", get(move || async move { Json(whoami) }));
    }
    let base = serve(router).await;
    let dir = TempDir::new().unwrap();
    let upper = listing.name.to_ascii_uppercase();
    let server = ServeChild::start(&ServeOptions {
        data_dir: &dir.path().join("data"),
        log: &dir.path().join("serve.log"),
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: vec![(format!("NEVERMISS_{upper}_API_KEY"), "key-1".into()), (format!("NEVERMISS_{upper}_BASE_URL"), base)],
        rust_log: "info",
    })
    .await;
    let name = listing.name;
    let [running, done, old] = listing.ids;
    let now = nevermiss_engine::store::job::now_ms() / 1000;
    let (job, page) = (listing.job, listing.page);
    match listing.cursor {
        // Pages newest first: the walk asks the second (an older finished job), the third (one
        // older than the week) and no fourth.
        Some(_) => {
            pages
                .by_cursor
                .lock()
                .unwrap()
                .insert(String::new(), page(vec![job(done, now + 20, true), job(running, now + 10, false)], Some("p2")));
            pages.by_cursor.lock().unwrap().insert("p2".into(), page(vec![job(old, now - 3_600, true)], Some("p3")));
            pages.by_cursor.lock().unwrap().insert("p3".into(), page(vec![job(&format!("{old}-8d"), now - 8 * 86_400, true)], Some("p4")));
        }
        // One page, in whatever order the cloud lists it.
        None => {
            let items = vec![job(old, now - 3_600, true), job(running, now + 10, false), job(done, now + 20, true)];
            pages.by_cursor.lock().unwrap().insert(String::new(), page(items, None));
        }
    }

    if listing.settings.as_object().is_some_and(|o| !o.is_empty()) {
        let refused = server.api.refused_settings(&json!({ format!("{name}.discover"): "on" })).await;
        let said = format!("{refused:?}");
        assert!(said.contains(&format!("{name}.account")), "{name}: discovery on before the account: {said}");
    }
    let mut wanted = listing.settings.clone();
    wanted[format!("{name}.discover")] = json!("on");
    let settings = server.api.put_settings(&wanted).await;
    assert_eq!(settings.providers[name].discover, Some(OnOff::On), "{name}: {settings:?}");
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    server.api.wait_for_state(name, done, listing.ended).await;
    assert_eq!(server.api.job_now(name, running).await.job.state, listing.running, "{name}");
    assert!(server.api.job(name, old).await.is_none(), "{name}: a job from before discovery was turned on was imported");
    let asked = pages.asked.lock().unwrap().clone();
    match listing.cursor {
        Some(_) => assert_eq!(asked[..3], [String::new(), "p2".into(), "p3".into()], "{name}: the next pages by the recipe's cursor"),
        None => assert!(!asked.is_empty(), "{name}"),
    }
    assert!(!asked.contains(&"p4".to_owned()), "{name}: the walk went past the first job older than the week");
    let identity = format!("nevermiss:{name}:{done}:terminal");
    wait_until("the discovered end is announced", || async { server.log_text().contains(&identity) }).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_batches_are_discovered_page_by_page() {
    discovers(Listing {
        name: "gemini",
        path: "/v1beta/batches",
        cursor: Some("pageToken"),
        page: |items, next| json!({"operations": items, "nextPageToken": next}),
        job: |id, created, ended| {
            let f = fixture(if ended { "gemini/batch_ended" } else { "gemini/batch" }).set("name", id);
            f.set("metadata.createTime", rfc3339(created)).value()
        },
        ids: ["batches/new-running", "batches/new-done", "batches/old"],
        running: JobState::Queued,
        ended: JobState::Succeeded,
        settings: json!({}),
        whoami: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_agents_are_discovered_page_by_page() {
    discovers(Listing {
        name: "cursor",
        path: "/v0/agents",
        cursor: Some("cursor"),
        page: |items, next| json!({"agents": items, "nextCursor": next}),
        job: |id, created, ended| {
            fixture(if ended { "cursor/agent_ended" } else { "cursor/agent" }).set("id", id).set("createdAt", rfc3339(created)).value()
        },
        ids: ["bc-new-running", "bc-new-done", "bc-old"],
        running: JobState::Queued,
        ended: JobState::Succeeded,
        settings: json!({}),
        whoami: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groq_mistral_and_together_jobs_are_discovered_from_their_one_page_lists() {
    discovers(Listing {
        name: "groq",
        path: "/openai/v1/batches",
        cursor: None,
        page: |items, _| json!({"object": "list", "data": items}),
        job: |id, created, ended| {
            fixture(if ended { "groq/batch_ended" } else { "groq/batch" }).set("id", id).set("created_at", created).value()
        },
        ids: ["batch_new_running", "batch_new_done", "batch_old"],
        running: JobState::Queued,
        ended: JobState::Failed,
        settings: json!({}),
        whoami: None,
    })
    .await;
    discovers(Listing {
        name: "mistral",
        path: "/v1/batch/jobs",
        cursor: None,
        page: |items, _| json!({"object": "list", "data": items, "total": items.len()}),
        job: |id, created, ended| {
            fixture(if ended { "mistral/batch_job_ended" } else { "mistral/batch_job" }).set("id", id).set("created_at", created).value()
        },
        ids: ["b-new-running", "b-new-done", "b-old"],
        running: JobState::Queued,
        ended: JobState::Failed,
        settings: json!({}),
        whoami: None,
    })
    .await;
    discovers(Listing {
        name: "together",
        path: "/v1/fine-tunes",
        cursor: None,
        page: |items, _| json!({"data": items}),
        job: |id, created, ended| {
            fixture(if ended { "together/fine_tune_ended" } else { "together/fine_tune" })
                .set("id", id)
                .set("created_at", rfc3339(created))
                .value()
        },
        ids: ["ft-new-running", "ft-new-done", "ft-old"],
        running: JobState::Queued,
        ended: JobState::Succeeded,
        settings: json!({}),
        whoami: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fireworks_batch_jobs_are_discovered_under_the_account_set() {
    discovers(Listing {
        name: "fireworks",
        path: "/v1/accounts/acme/batchInferenceJobs",
        cursor: Some("pageToken"),
        page: |items, next| json!({"batchInferenceJobs": items, "nextPageToken": next}),
        job: |id, created, ended| {
            fixture("fireworks/batch_inference_job")
                .set("name", id)
                .set("createTime", rfc3339(created))
                .set("state", if ended { "JOB_STATE_COMPLETED" } else { "JOB_STATE_RUNNING" })
                .value()
        },
        ids: [
            "accounts/acme/batchInferenceJobs/bij-new-running",
            "accounts/acme/batchInferenceJobs/bij-new-done",
            "accounts/acme/batchInferenceJobs/bij-old",
        ],
        running: JobState::Running,
        ended: JobState::Succeeded,
        settings: json!({"fireworks.account": "acme"}),
        whoami: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hugging_face_jobs_are_discovered_in_the_namespace_the_key_belongs_to() {
    discovers(Listing {
        name: "huggingface",
        path: "/api/jobs/lhoestq",
        cursor: None,
        page: |items, _| json!(items),
        job: |id, created, ended| {
            let f = fixture(if ended { "huggingface/job_ended" } else { "huggingface/job" });
            f.set("id", id.rsplit('/').next().unwrap()).set("createdAt", rfc3339(created)).value()
        },
        ids: ["lhoestq/hf-new-running", "lhoestq/hf-new-done", "lhoestq/hf-old"],
        running: JobState::Queued,
        ended: JobState::Failed,
        settings: json!({}),
        whoami: Some(json!({"type": "user", "name": "lhoestq"})),
    })
    .await;
}

/// Fireworks lists the jobs of the account set in `fireworks.account` (no call names it): its
/// discovery cannot be turned on before that account is set, nor the account cleared while
/// discovery is on. Each refusal names the field and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fireworks_discovery_is_never_on_without_its_account() {
    let app = crate::harness::app::TestApp::spawn().await;
    let refused = app.api.refused_settings(&json!({"fireworks.discover": "on"})).await;
    let why = refused.errors.as_ref().and_then(|e| e.get("fireworks.discover")).cloned().unwrap_or_default();
    assert!(why.contains("set fireworks.account"), "{refused:?}");

    app.api.put_settings(&json!({"fireworks.discover": "on", "fireworks.account": "acme"})).await;
    let refused = app.api.refused_settings(&json!({"fireworks.account": ""})).await;
    let why = refused.errors.as_ref().and_then(|e| e.get("fireworks.account")).cloned().unwrap_or_default();
    assert!(why.contains("turn fireworks.discover off first"), "{refused:?}");
    assert_eq!(app.engine().services.settings.get("fireworks.account").as_deref(), Some("acme"), "nothing was changed");

    // Both at once: discovery off, then the account cleared.
    app.api.put_settings(&json!({"fireworks.discover": "off", "fireworks.account": ""})).await;
    assert!(!app.engine().services.settings.discovers("fireworks"));
}

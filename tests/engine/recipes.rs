//! Recipes end to end (issue 32): a recipe for an API NeverMiss has never seen, written into a
//! `serve`'s data dir (`providers/acme.toml`), makes a provider of it: a job tracked with it is
//! polled with the API key from its variable, read by the recipe's expressions, moved through the
//! one merge point, and announced exactly once. A broken recipe beside it is refused with its line
//! in the log and stops nothing. The shipped recipes' providers, each in its cloud's format, are
//! driven by `recipe_providers`.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use nevermiss_engine::job::JobState;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::harness::serve_child::{free_addr, ServeChild, ServeOptions};
use crate::harness::stand_in::serve_unjudged;
use crate::harness::wait_until;

/// The stand-in for "Acme": `GET /v1/jobs/{id}` answers the state it is set to, and keeps the
/// `Authorization` header of each poll.
#[derive(Default)]
struct Acme {
    state: Mutex<String>,
    authorizations: Mutex<Vec<String>>,
}

async fn job(State(acme): State<Arc<Acme>>, headers: HeaderMap, Path(id): Path<String>) -> Json<Value> {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    acme.authorizations.lock().unwrap().push(auth);
    let state = acme.state.lock().unwrap().clone();
    let done = state == "DONE";
    Json(json!({
        "id": id,
        "phase": { "name": state },
        "submitted": 1_764_000_000,
        "artifact": if done { json!("https://files.acme.example/out.png") } else { Value::Null },
    }))
}

const RECIPE: &str = r#"
name = "acme"
ids = ["job-"]
base_url = "http://127.0.0.1:9"

[poll]
url = "{base_url}/v1/jobs/{job_id}"
headers = { Authorization = "Bearer {api_key}" }

[read]
state = ".phase.name"
created_at = ".submitted"
result_urls = "[.artifact // empty]"

[states]
WAITING = "queued"
WORKING = "running"
DONE = "succeeded"
BROKE = "failed"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_written_into_the_data_dir_makes_a_provider_whose_job_ends_with_one_notification() {
    let acme = Arc::new(Acme { state: Mutex::new("WORKING".into()), ..Acme::default() });
    let base = serve_unjudged(Router::new().route("/v1/jobs/{id}", get(job)).with_state(acme.clone())).await;

    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    let recipes = data.join("providers");
    std::fs::create_dir_all(&recipes).unwrap();
    std::fs::write(recipes.join("acme.toml"), RECIPE).unwrap();
    std::fs::write(
        recipes.join("broken.toml"),
        RECIPE.replace("name = \"acme\"", "name = \"broken\"").replace("DONE = \"succeeded\"\nBROKE = \"failed\"\n", ""),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let server = ServeChild::start(&ServeOptions {
        data_dir: &data,
        log: &log,
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: vec![("NEVERMISS_ACME_API_KEY".into(), "acme-key-1".into()), ("NEVERMISS_ACME_BASE_URL".into(), base.clone())],
        rust_log: "info",
    })
    .await;

    // The broken recipe is refused with its file and key; the other loads.
    let text = server.log_text();
    assert!(text.contains("broken.toml: states: maps no value to an end"), "{text}");

    let tracked = server.api.raw_post("/api/jobs", &json!({"provider": "acme", "job_id": "job-1"})).await;
    assert_eq!(tracked.status(), StatusCode::CREATED);
    server.api.wait_for_state("acme", "job-1", JobState::Running).await;
    assert!(server.api.raw_post("/api/jobs", &json!({"provider": "broken", "job_id": "job-1"})).await.status() == StatusCode::BAD_REQUEST);

    // A value the recipe's table does not have: the job stays running, and the value is counted.
    *acme.state.lock().unwrap() = "PAUSED".into();
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let metrics = server.api.metrics().await;
    let counted: Vec<(&str, &str, &str)> =
        metrics.unknown_values.iter().map(|u| (u.provider.as_str(), u.field.as_str(), u.value.as_str())).collect();
    assert!(counted.contains(&("acme", "status", "PAUSED")), "{counted:?}");
    assert_eq!(server.api.job_now("acme", "job-1").await.job.state, JobState::Running);

    *acme.state.lock().unwrap() = "DONE".into();
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let done = server.api.wait_for_state("acme", "job-1", JobState::Succeeded).await;
    assert_eq!(done.job.result.map(|r| r.urls), Some(vec!["https://files.acme.example/out.png".to_owned()]));
    assert!(acme.authorizations.lock().unwrap().iter().all(|a| a == "Bearer acme-key-1"), "the key from its variable");

    // Polled again, it stays finished; announced once.
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let identity = "nevermiss:acme:job-1:terminal";
    wait_until("the notification is logged", || async { server.log_text().contains(identity) }).await;
    let shown = server.log_text().lines().filter(|l| l.contains("nevermiss::notification") && l.contains(identity)).count();
    assert_eq!(shown, 1, "one notification");
    server.stop().await;
}

/// `nevermiss providers` lists what a running instance polls: the built-in providers, the shipped
/// recipes and the user's, whether each has its key, and the user's recipes it refused with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nevermiss_providers_lists_each_provider_its_origin_and_the_refused_recipes() {
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("providers")).unwrap();
    std::fs::write(data.join("providers").join("acme.toml"), RECIPE).unwrap();
    std::fs::write(
        data.join("providers").join("typo.toml"),
        RECIPE.replace("[read]", "[read]\ncolour = \"blue\"").replace("\"acme\"", "\"typo\""),
    )
    .unwrap();
    let server = ServeChild::start(&ServeOptions {
        data_dir: &data,
        log: &dir.path().join("serve.log"),
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: vec![("NEVERMISS_ACME_API_KEY".into(), "acme-key-1".into())],
        rust_log: "info",
    })
    .await;
    let out = std::process::Command::new(crate::harness::serve_child::nevermiss_bin())
        .env_remove("NEVERMISS_DATA_DIR")
        .args(["providers", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    let line = |name: &str| {
        stdout.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("{name}: {stdout}")).to_owned()
    };
    assert!(line("acme").contains("API key set") && line("acme").contains("acme.toml"), "{stdout}");
    assert!(line("groq").contains("no API key") && line("groq").contains("shipped recipe"), "{stdout}");
    assert!(line("replicate").contains("built-in"), "{stdout}");
    assert!(stdout.contains("refused: ") && stdout.contains("typo.toml: colour: unknown field"), "{stdout}");
    server.stop().await;
}

//! Recipes end to end: a recipe for an API NeverMiss has never seen, written into a
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
use nevermiss_engine::store::job::JobState;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::harness::serve_child::{free_addr, serve_with_recipe, ServeChild, ServeOptions};
use crate::harness::stand_in::serve_unjudged;
use crate::harness::wait_until;

/// The stand-in for "Acme": `GET /v1/jobs/{id}` answers the state it is set to, and keeps the
/// `Authorization` header of each poll.
#[derive(Default)]
struct Acme {
    state: Mutex<String>,
    authorizations: Mutex<Vec<String>>,
    /// The jobs it no longer keeps (answered 404).
    gone: Mutex<Vec<String>>,
    /// The `X-Org` header of each poll that had one.
    orgs: Mutex<Vec<String>>,
}

async fn job(State(acme): State<Arc<Acme>>, headers: HeaderMap, Path(id): Path<String>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    acme.authorizations.lock().unwrap().push(auth);
    if let Some(org) = headers.get("x-org").and_then(|v| v.to_str().ok()) {
        acme.orgs.lock().unwrap().push(org.to_owned());
    }
    if acme.gone.lock().unwrap().contains(&id) {
        return (StatusCode::NOT_FOUND, Json(json!({"error": "job not found"}))).into_response();
    }
    let state = acme.state.lock().unwrap().clone();
    let done = state == "DONE";
    Json(json!({
        "id": id,
        "phase": { "name": state },
        "submitted": 1_764_000_000,
        "artifact": if done { json!("https://files.acme.example/out.png") } else { Value::Null },
    }))
    .into_response()
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
    assert!(text.contains("broken.toml:") && text.contains(": states: maps no value to an end"), "{text}");

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
    let paused = server.api.job_now("acme", "job-1").await.job;
    assert_eq!(paused.state, JobState::Running);
    assert!(paused.detail.as_deref().is_some_and(|d| d.contains("\"PAUSED\" is one NeverMiss does not know")), "{:?}", paused.detail);

    *acme.state.lock().unwrap() = "DONE".into();
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let done = server.api.wait_for_state("acme", "job-1", JobState::Succeeded).await;
    assert_eq!(done.job.result.map(|r| r.urls), Some(vec!["https://files.acme.example/out.png".to_owned()]));
    assert_eq!(done.job.detail, None, "the note of a value it passed through ends with the state it described");
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
    let acme = Arc::new(Acme { state: Mutex::new("PAUSED".into()), ..Acme::default() });
    let base = serve_unjudged(Router::new().route("/v1/jobs/{id}", get(job)).with_state(acme.clone())).await;
    let server = ServeChild::start(&ServeOptions {
        data_dir: &data,
        log: &dir.path().join("serve.log"),
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: vec![("NEVERMISS_ACME_API_KEY".into(), "acme-key-1".into()), ("NEVERMISS_ACME_BASE_URL".into(), base.clone())],
        rust_log: "info",
    })
    .await;
    let out = crate::harness::serve_child::nevermiss_command()
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
    assert!(stdout.contains("refused: ") && stdout.contains(": read.colour: unknown field"), "{stdout}");

    // `providers test`: one poll of a job nobody tracks, each expression's output on the real
    // answer, the conclusion, and nothing merged.
    let test = |name: &str, job_id: &str| {
        let out = crate::harness::serve_child::nevermiss_command()
            .env_remove("NEVERMISS_DATA_DIR")
            .args(["providers", "test", name, job_id, "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    };
    let (ok, shown) = test("acme", "job-9");
    assert!(ok, "{shown}");
    assert!(shown.contains(&format!("GET {base}/v1/jobs/job-9 -> 200")), "{shown}");
    let line = |key: &str| shown.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{key}: {shown}")).to_owned();
    assert!(line("read.state").contains(".phase.name") && line("read.state").ends_with("\"PAUSED\""), "{shown}");
    assert!(line("read.created_at").ends_with("1764000000"), "{shown}");
    assert!(line("read.result_urls").ends_with("[]"), "{shown}");
    assert!(shown.contains("state running (acme status \"PAUSED\" is not in its table)"), "{shown}");
    assert!(server.api.job("acme", "job-9").await.is_none(), "nothing is merged");
    *acme.state.lock().unwrap() = "DONE".into();
    let (_, shown) = test("acme", "job-9");
    assert!(shown.contains("\"https://files.acme.example/out.png\"") && shown.contains("state succeeded"), "{shown}");
    let (ok, shown) = test("nosuch", "job-9");
    assert!(!ok && shown.contains("unknown provider"), "{shown}");
    server.stop().await;
}

/// A recipe's webhooks, both kinds a recipe can describe: Acme signs hers (an HMAC of the raw body
/// in `X-Acme-Signature: sha256=<hex>`, the delivery id in `X-Acme-Delivery`), so a signed
/// delivery moves the job at once and a resend is a duplicate; Acme Run signs nothing, so its
/// webhook URL carries a token (`/hooks/acme-run/{token}`), and a delivery with the right token
/// is only a hint: its body says "succeeded", yet the job moves only when the poll that follows
/// says so. A wrong or missing token, a wrong signature: 401, counted, nothing moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipes_webhooks_signed_by_hmac_or_proven_by_a_token_in_the_url() {
    use hmac::{Hmac, Mac};
    let acme = Arc::new(Acme { state: Mutex::new("WORKING".into()), ..Acme::default() });
    let base = serve_unjudged(Router::new().route("/v1/jobs/{id}", get(job)).with_state(acme.clone())).await;
    let signed = format!(
        "{RECIPE}\n[webhook]\nverify = \"hmac\"\nheader = \"X-Acme-Signature\"\nprefix = \"sha256=\"\njob_id = \".job\"\n\
         delivery_id_header = \"X-Acme-Delivery\"\nstate = \".phase\"\n"
    );
    let unsigned = RECIPE.replace("name = \"acme\"", "name = \"acme-run\"").replace("ids = [\"job-\"]", "ids = [\"run-\"]")
        + "\n[webhook]\nverify = \"url_token\"\njob_id = \".id\"\n";
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("providers")).unwrap();
    std::fs::write(data.join("providers").join("acme.toml"), signed).unwrap();
    std::fs::write(data.join("providers").join("acme-run.toml"), unsigned).unwrap();
    let server = ServeChild::start(&ServeOptions {
        data_dir: &data,
        log: &dir.path().join("serve.log"),
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: vec![
            ("NEVERMISS_ACME_API_KEY".into(), "acme-key-1".into()),
            ("NEVERMISS_ACME_BASE_URL".into(), base.clone()),
            ("NEVERMISS_ACME_WEBHOOK_SECRET".into(), "hmac-secret".into()),
            ("NEVERMISS_ACME_RUN_API_KEY".into(), "run-key".into()),
            ("NEVERMISS_ACME_RUN_BASE_URL".into(), base),
            ("NEVERMISS_ACME_RUN_WEBHOOK_SECRET".into(), "url-token-7f3a".into()),
        ],
        rust_log: "info",
    })
    .await;
    let http = reqwest::Client::new();
    let post = |path: String, headers: Vec<(&'static str, String)>, body: Value| {
        let mut request = http.post(format!("{}{path}", server.receiver)).body(body.to_string());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap_or_default())
        }
    };
    let sign = |body: &Value| {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"hmac-secret").unwrap();
        mac.update(body.to_string().as_bytes());
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    };

    // Signed: the delivery's state moves the job at once; its resend is a duplicate.
    let body = json!({"job": "job-7", "phase": "WORKING"});
    let headers = vec![("x-acme-signature", sign(&body)), ("x-acme-delivery", "dlv-1".to_owned())];
    let (status, answer) = post("/hooks/acme".into(), headers.clone(), body.clone()).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("applied")), "{answer}");
    server.api.wait_for_state("acme", "job-7", JobState::Running).await;
    let (status, answer) = post("/hooks/acme".into(), headers, body.clone()).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("duplicate")), "{answer}");
    let forged = vec![("x-acme-signature", sign(&json!({"job": "job-7"}))), ("x-acme-delivery", "dlv-2".to_owned())];
    assert_eq!(post("/hooks/acme".into(), forged, body).await.0, StatusCode::UNAUTHORIZED);
    // A signed scheme takes no token in its URL.
    assert_eq!(post("/hooks/acme/hmac-secret".into(), vec![], json!({"job": "job-7"})).await.0, StatusCode::NOT_FOUND);

    // Unsigned, with its token: a hint. The body says succeeded; the poll says running.
    let (status, answer) = post("/hooks/acme-run/url-token-7f3a".into(), vec![], json!({"id": "run-1", "status": "DONE"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let polled = server.api.wait_for_state("acme-run", "run-1", JobState::Running).await;
    assert_eq!(polled.job.state, JobState::Running, "the hint's body moved nothing");
    // A wrong token, no token: refused and counted; a second hint after the end: polled, ended.
    let before = server.api.metrics().await.store.bad_signatures;
    assert_eq!(post("/hooks/acme-run/url-token-7f3b".into(), vec![], json!({"id": "run-1"})).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(post("/hooks/acme-run".into(), vec![], json!({"id": "run-1"})).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(server.api.metrics().await.store.bad_signatures, before + 2);
    *acme.state.lock().unwrap() = "DONE".into();
    let (status, _) = post("/hooks/acme-run/url-token-7f3a".into(), vec![], json!({"id": "run-1", "status": "DONE", "n": 2})).await;
    assert_eq!(status, StatusCode::OK);
    let done = server.api.wait_for_state("acme-run", "run-1", JobState::Succeeded).await;
    assert_eq!(done.job.result.map(|r| r.urls), Some(vec!["https://files.acme.example/out.png".to_owned()]));
    assert!(!server.log_text().contains("url-token-7f3a"), "the token is never logged");
    server.stop().await;
}

/// A provider that forgets a job some time after it ends (RunPod keeps a result 30 minutes): with
/// `not_found = "ended"`, a job last seen running that then answers 404 ended while nothing
/// looked. It ends `ended` (outcome unknown), announced once as what it is, urgent, never a
/// success; a job the provider never had (404 from the first poll) is still an unknown job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_provider_forgot_after_it_was_seen_running_ended_with_its_outcome_unknown() {
    let acme = Arc::new(Acme { state: Mutex::new("WORKING".into()), ..Acme::default() });
    acme.gone.lock().unwrap().push("job-typo".into());
    let base = serve_unjudged(Router::new().route("/v1/jobs/{id}", get(job)).with_state(acme.clone())).await;
    let (_dir, server) = serve_acme(&RECIPE.replace("[read]", "not_found = \"ended\"\n\n[read]"), &base).await;
    for id in ["job-1", "job-typo"] {
        assert_eq!(server.api.raw_post("/api/jobs", &json!({"provider": "acme", "job_id": id})).await.status(), StatusCode::CREATED);
    }
    server.api.wait_for_state("acme", "job-1", JobState::Running).await;
    acme.gone.lock().unwrap().push("job-1".into());
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let ended = server.api.wait_for_state("acme", "job-1", JobState::Ended).await;
    assert!(ended.job.error.as_deref().is_some_and(|e| e.contains("outcome is unknown")), "{:?}", ended.job.error);
    // Terminal: polled again, nothing moves it; announced once, as what it is.
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let identity = "nevermiss:acme:job-1:terminal";
    wait_until("the notification is logged", || async { server.log_text().contains(identity) }).await;
    let lines: Vec<String> =
        server.log_text().lines().filter(|l| l.contains("nevermiss::notification") && l.contains(identity)).map(str::to_owned).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("Ended, outcome unknown"), "{}", lines[0]);
    assert_eq!(server.api.job_now("acme", "job-1").await.job.state, JobState::Ended);
    // Never seen: not ended, a poll error (the usual abandon rule applies).
    let typo = server.api.job_now("acme", "job-typo").await.job;
    assert_eq!(typo.state, JobState::Unknown, "{typo:?}");
    assert!(typo.poll_error.is_some(), "{typo:?}");
    server.stop().await;
}

/// The user's recipes are loaded again when their folder changes, without a restart: a recipe
/// written while `serve` runs becomes a provider whose jobs are polled; a half-saved edit is
/// refused with its line while the version loaded before goes on polling; the fixed edit is
/// polled as it now reads; a removed recipe is no provider any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipes_are_loaded_again_when_their_folder_changes() {
    use nevermiss_engine::api::providers::ProviderList;
    let acme = Arc::new(Acme { state: Mutex::new("WORKING".into()), ..Acme::default() });
    let base = serve_unjudged(Router::new().route("/v1/jobs/{id}", get(job)).with_state(acme.clone())).await;
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    let folder = data.join("providers");
    std::fs::create_dir_all(&folder).unwrap();
    let server = ServeChild::start(&ServeOptions {
        data_dir: &data,
        log: &dir.path().join("serve.log"),
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: vec![("NEVERMISS_ACME_API_KEY".into(), "acme-key-1".into()), ("NEVERMISS_ACME_BASE_URL".into(), base)],
        rust_log: "info",
    })
    .await;
    let list = || async { server.api.get::<ProviderList>("/api/providers", StatusCode::OK).await };
    let has_acme = |l: &ProviderList| l.providers.iter().any(|p| p.name == "acme");
    assert!(!has_acme(&list().await));
    assert_eq!(server.api.raw_post("/api/jobs", &json!({"provider": "acme", "job_id": "job-1"})).await.status(), StatusCode::BAD_REQUEST);

    // Written while it runs: a provider, its job polled.
    std::fs::write(folder.join("acme.toml"), RECIPE).unwrap();
    wait_until("the new recipe is a provider", || async { has_acme(&list().await) }).await;
    assert_eq!(server.api.raw_post("/api/jobs", &json!({"provider": "acme", "job_id": "job-1"})).await.status(), StatusCode::CREATED);
    server.api.wait_for_state("acme", "job-1", JobState::Running).await;

    // A half-saved edit: refused with its line, the last good version still polls.
    std::fs::write(folder.join("acme.toml"), RECIPE.replace("[read]", "[read]\nstate_typo = 1")).unwrap();
    wait_until("the broken edit is refused", || async { !list().await.refused_recipes.is_empty() }).await;
    let refused = list().await;
    assert!(refused.refused_recipes[0].contains("acme.toml") && refused.refused_recipes[0].contains("still in use"), "{refused:?}");
    assert!(has_acme(&refused));

    // Fixed, and reading a text result it did not read before: the job ends as the new version reads.
    std::fs::write(folder.join("acme.toml"), RECIPE.replace("[read]", "[read]\nresult_text = \"\\\"read by version 2\\\"\"")).unwrap();
    wait_until("the fixed edit is loaded", || async { list().await.refused_recipes.is_empty() }).await;
    *acme.state.lock().unwrap() = "DONE".into();
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let done = server.api.wait_for_state("acme", "job-1", JobState::Succeeded).await;
    assert_eq!(done.job.result.and_then(|r| r.text).as_deref(), Some("read by version 2"));

    // Removed: no provider any more; the job it ended stays.
    std::fs::remove_file(folder.join("acme.toml")).unwrap();
    wait_until("the removed recipe is no provider", || async { !has_acme(&list().await) }).await;
    assert_eq!(server.api.job_now("acme", "job-1").await.job.state, JobState::Succeeded);
    server.stop().await;
}

/// Acme's list of the account's jobs (`GET /v1/jobs?page_token=`: the page stored under the
/// token, the first under "") and its cancel call (`POST /v1/jobs/{id}/cancel`, each id kept).
#[derive(Default)]
struct AcmeAccount {
    pages: Mutex<std::collections::HashMap<String, Value>>,
    asked: Mutex<Vec<String>>,
    canceled: Mutex<Vec<String>>,
}

async fn list(
    State(acme): State<Arc<AcmeAccount>>,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Json<Value> {
    let token = query.get("page_token").cloned().unwrap_or_default();
    acme.asked.lock().unwrap().push(token.clone());
    Json(acme.pages.lock().unwrap().get(&token).cloned().unwrap_or_else(|| json!({"jobs": []})))
}

async fn cancel(State(acme): State<Arc<AcmeAccount>>, Path(id): Path<String>) -> axum::response::Response {
    use axum::response::IntoResponse;
    if id == "job-queued" {
        return (StatusCode::CONFLICT, Json(json!({"message": "the job is not cancellable yet"}))).into_response();
    }
    acme.canceled.lock().unwrap().push(id);
    Json(json!({"status": "CANCELLING"})).into_response()
}

/// A recipe's cancel call and its list of the account's jobs, through a real serve: the owner's
/// cancel is sent to the recipe's URL with the poll's key and the provider's answer shown in its
/// words; with `acme.discover` on, the list is walked page by page by the recipe's cursor and
/// stops at the first job older than when discovery was turned on; a listed job is read by the
/// recipe's `[read]` and merged like a polled one (a finished one announced once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipes_cancel_and_discovery_through_a_real_serve() {
    use nevermiss_engine::api::settings::OnOff;
    let acme = Arc::new(AcmeAccount::default());
    let router =
        Router::new().route("/v1/jobs", get(list)).route("/v1/jobs/{id}/cancel", axum::routing::post(cancel)).with_state(acme.clone());
    let base = serve_unjudged(router).await;
    let recipe = RECIPE.replace(
        "[read]",
        "[cancel]\nurl = \"{base_url}/v1/jobs/{job_id}/cancel\"\n\n\
         [discover]\nurl = \"{base_url}/v1/jobs?limit=2\"\njobs = \".jobs\"\njob_id = \".id\"\n\
         next = \".next_page_token\"\ncursor_param = \"page_token\"\n\n[read]",
    );
    let (_dir, server) = serve_acme(&recipe, &base).await;

    // A job id of another form is refused when it is tracked, with what the provider's look like.
    let typo = server.api.raw_post("/api/jobs", &json!({"provider": "acme", "job_id": "jb-1"})).await;
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);
    let said = typo.text().await.unwrap();
    assert!(said.contains("acme job ids are job-..."), "{said}");

    // Discovery, off by default, is offered for the recipe and turned on.
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    assert!(acme.asked.lock().unwrap().is_empty(), "listed with discovery off");
    let now = nevermiss_engine::store::job::now_ms() / 1000;
    let job = |id: &str, state: &str, submitted: i64| json!({"id": id, "phase": {"name": state}, "submitted": submitted});
    acme.pages.lock().unwrap().insert(
        String::new(),
        json!({"jobs": [job("job-running", "WORKING", now + 20), job("job-done", "DONE", now + 30)], "next_page_token": "p2"}),
    );
    acme.pages.lock().unwrap().insert(
        "p2".into(),
        json!({"jobs": [job("job-queued", "WAITING", now + 10), job("job-old", "DONE", now - 3_600)], "next_page_token": "p3"}),
    );
    acme.pages.lock().unwrap().insert("p3".into(), json!({"jobs": [job("job-older", "DONE", now - 7_200)]}));
    let settings = server.api.put_settings(&json!({"acme.discover": "on"})).await;
    assert_eq!(settings.providers["acme"].discover, Some(OnOff::On), "{settings:?}");
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    server.api.wait_for_state("acme", "job-done", JobState::Succeeded).await;
    assert_eq!(server.api.job_now("acme", "job-running").await.job.state, JobState::Running);
    assert_eq!(server.api.job_now("acme", "job-queued").await.job.state, JobState::Queued, "the second page was followed");
    assert!(server.api.job("acme", "job-old").await.is_none(), "a job that ended before discovery was turned on was imported");
    assert!(server.api.job("acme", "job-older").await.is_none());
    assert_eq!(*acme.asked.lock().unwrap(), ["", "p2", "p3"], "the first listing looks back a week, to the list's end");
    let identity = "nevermiss:acme:job-done:terminal";
    wait_until("the discovered end is announced", || async { server.log_text().contains(identity) }).await;

    // Cancel: asked at the recipe's URL; the provider's refusal in its own words.
    let asked = server.api.raw_post("/api/jobs/acme/job-running/cancel", &json!({})).await;
    assert!(asked.status().is_success(), "{:?}", asked.text().await);
    assert_eq!(*acme.canceled.lock().unwrap(), ["job-running"]);
    let refused = server.api.raw_post("/api/jobs/acme/job-queued/cancel", &json!({})).await;
    let status = refused.status();
    let said = refused.text().await.unwrap();
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{said}");
    assert!(said.contains("409") && said.contains("not cancellable yet"), "{said}");
    assert_eq!(server.api.job_now("acme", "job-queued").await.job.state, JobState::Queued, "a cancel is never a state");
    server.stop().await;
}

/// What Settings shows for each provider's secrets: how its webhooks come in (signed, a token in
/// the URL, the platform's keys, none) and the named secrets a recipe takes, which the owner sets
/// there (`PUT /api/secrets/{provider}` `{"named": {...}}`) and the next poll sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipes_named_secrets_and_webhook_intake_are_set_from_settings() {
    let acme = Arc::new(Acme { state: Mutex::new("WORKING".into()), ..Acme::default() });
    let base = serve_unjudged(Router::new().route("/v1/jobs/{id}", get(job)).with_state(acme.clone())).await;
    let recipe = RECIPE
        .replace(
            "headers = { Authorization = \"Bearer {api_key}\" }",
            "headers = { Authorization = \"Bearer {api_key}\", X-Org = \"{secret.org}\" }",
        )
        .replace("[read]", "[webhook]\nverify = \"url_token\"\njob_id = \".id\"\n\n[read]");
    let (_dir, server) = serve_acme(&recipe, &base).await;
    let secrets: Value = server.api.raw_get("/api/secrets").await.json().await.unwrap();
    let intake = |p: &str| secrets["providers"][p]["webhooks"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        [intake("acme"), intake("groq"), intake("fal"), intake("openai")],
        ["url_token", "none", "platform_keys", "signed"].map(String::from),
        "{secrets}"
    );
    assert_eq!(secrets["providers"]["acme"]["named"]["org"]["set"], json!(false), "{secrets}");
    assert_eq!(secrets["providers"]["groq"]["named"], json!({}));

    // Without its named secret the job is a configuration error naming where to set it.
    assert_eq!(server.api.raw_post("/api/jobs", &json!({"provider": "acme", "job_id": "job-1"})).await.status(), StatusCode::CREATED);
    let unset: Value = server.api.raw_post("/api/jobs/acme/job-1/poll", &json!({})).await.json().await.unwrap();
    assert!(unset["reason"].as_str().is_some_and(|r| r.contains("NEVERMISS_ACME_ORG")), "{unset}");
    assert!(acme.orgs.lock().unwrap().is_empty(), "a poll was sent without its secret");

    // A name the recipe does not take is refused next to its field; the one it takes is kept.
    let refused = server.api.raw_put("/api/secrets/acme", &json!({"named": {"orgg": "o-1"}})).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let said: Value = refused.json().await.unwrap();
    assert!(said.to_string().contains("named.orgg") && said.to_string().contains("takes no secret named"), "{said}");
    let set = server.api.raw_put("/api/secrets/acme", &json!({"named": {"org": "org-42"}})).await;
    assert_eq!(set.status(), StatusCode::OK);
    let view: Value = set.json().await.unwrap();
    assert_eq!(view["providers"]["acme"]["named"]["org"]["set"], json!(true), "{view}");
    let _ = server.api.raw_post("/api/jobs/acme/job-1/poll", &json!({})).await;
    server.api.wait_for_state("acme", "job-1", JobState::Running).await;
    assert_eq!(acme.orgs.lock().unwrap().last().map(String::as_str), Some("org-42"));
    server.stop().await;
}

/// A real serve whose data dir holds `recipe` as `providers/acme.toml`, with Acme's key and its
/// stand-in's URL set (the dir lives as long as the first value).
async fn serve_acme(recipe: &str, base: &str) -> (TempDir, ServeChild) {
    let env = vec![("NEVERMISS_ACME_API_KEY".into(), "acme-key-1".into()), ("NEVERMISS_ACME_BASE_URL".into(), base.to_owned())];
    serve_with_recipe("acme.toml", recipe, env).await
}

/// `verify = "header"`: a sender that proves itself with a header the user chose, whose value is
/// the webhook secret (AssemblyAI's `webhook_auth_header_name/value`). The right value is a hint
/// that polls the job at once; a wrong or missing one is refused as a bad signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_proving_itself_with_a_secret_header_makes_its_job_polled() {
    let acme = Arc::new(Acme { state: Mutex::new("DONE".into()), ..Acme::default() });
    let base = serve_unjudged(Router::new().route("/v1/jobs/{id}", get(job)).with_state(acme.clone())).await;
    let recipe = format!("{RECIPE}\n[webhook]\nverify = \"header\"\nheader = \"X-Acme-Auth\"\njob_id = \".id\"\n");
    let env = vec![
        ("NEVERMISS_ACME_API_KEY".to_owned(), "acme-key-1".to_owned()),
        ("NEVERMISS_ACME_BASE_URL".to_owned(), base),
        ("NEVERMISS_ACME_WEBHOOK_SECRET".to_owned(), "hdr-secret-1".to_owned()),
    ];
    let (_dir, server) = serve_with_recipe("acme.toml", &recipe, env).await;
    let hooks = format!("{}/hooks/acme", server.receiver);
    let http = reqwest::Client::new();
    let post = |value: Option<&'static str>| {
        let request = http.post(&hooks).header("content-type", "application/json").body(r#"{"id":"job-7","status":"completed"}"#);
        match value {
            Some(v) => request.header("X-Acme-Auth", v),
            None => request,
        }
        .send()
    };
    assert_eq!(post(Some("not-the-secret")).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(post(None).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert!(server.api.job("acme", "job-7").await.is_none(), "a refused delivery moves nothing");
    assert_eq!(post(Some("hdr-secret-1")).await.unwrap().status(), StatusCode::OK);
    let done = server.api.wait_for_state("acme", "job-7", JobState::Succeeded).await;
    assert_eq!(done.job.terminal_source.map(|s| s.as_str()), Some("pull"), "the poll the hint caused ended it");
    server.stop().await;
}

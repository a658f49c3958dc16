//! The shipped recipes' providers end to end: for each, a real `nevermiss serve` polls a
//! job tracked by its id, with the key from `NEVERMISS_<NAME>_API_KEY`, at a loopback stand-in of
//! its cloud (`NEVERMISS_<NAME>_BASE_URL`) answering in that cloud's documented format. The job
//! moves through its states, a status value the recipe's table does not have is counted and is
//! never a success, and the job ends once with its result or its error, announced once.
//!
//! A cloud that sends webhooks (the recipe's `[webhook]`) is also pushed to (`Push`): a delivery
//! with a wrong signature (or token) is 401 and counted; a signed delivery with a value the table
//! does not have is counted and ignored, never a success; the cloud's delivery about the job's end
//! moves it at once (a URL-token sender's is a hint: the poll it causes moves it); its resend is a
//! duplicate and an older event sent after it is stale, neither changing anything.
//!
//! Every body the stand-in serves is a fixture of `tests/fixtures/<provider>/` that the provider's
//! SDK validates, and is logged for the SDKs' judge (`stand_in::serve`; `make conformance-after`);
//! the unknown value is marked off the SDKs' spec on purpose. So is every webhook body the engine
//! takes (`record_sent`: the manifest names each cloud's webhook model). One helper drives every provider
//! (`drive`); each test says only what differs: the id, the path its cloud is asked, how the key is
//! sent, the fixtures, and what the end must say.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use nevermiss_engine::store::job::{JobState, Source};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::harness::conformance::{fixture, off_spec, record_sent};
use crate::harness::serve_child::ServeChild;
use crate::harness::stand_in::serve;
use crate::harness::wait_until;

/// One shipped recipe's provider, as a test drives it.
struct Cloud {
    /// The provider's name (`gemini`), which names its variables.
    name: &'static str,
    job_id: &'static str,
    /// The path its API is asked for the job, as the provider's SDK asks it.
    path: &'static str,
    /// Where the stand-in is served below its base URL: empty, but where the provider's path is
    /// another's (Together's batches and OpenAI's, `/v1/batches/{id}`), which the judge tells apart
    /// by this prefix (tests/fixtures/manifest.json).
    served_under: &'static str,
    /// The header that carries the key, and its value with `{key}` for the key.
    auth: (&'static str, &'static str),
    /// The fixture the job answers with until it ends, and where its status is in it (dotted).
    running: &'static str,
    status_at: &'static str,
    /// The status values it goes through, each with the state it means.
    steps: Vec<(Value, JobState)>,
    /// A status value the recipe's table does not have (none where the recipe names the states
    /// itself, as Gemini's operations).
    unknown: Option<Value>,
    /// The fixture of its end, the state it means, and what the job must say then.
    ended: &'static str,
    end: JobState,
    error: Option<&'static str>,
    result_text: Option<&'static str>,
    result_urls: &'static [&'static str],
    /// Its webhooks, when its recipe takes them.
    push: Option<Push>,
}

/// How a cloud's webhooks reach NeverMiss (`POST /hooks/{name}`, or `/hooks/{name}/{token}`).
struct Push {
    signing: Signing,
    /// The webhook secret set (`NEVERMISS_<NAME>_WEBHOOK_SECRET`): the key, or the URL's token.
    secret: &'static str,
    /// Its delivery about the job's end.
    ended: Value,
    /// A delivery about an earlier state, sent after the end.
    stale: Value,
    /// A signed delivery with a value the recipe's table does not have, and that value.
    unknown: Option<(Value, &'static str)>,
    /// A hint about a job NeverMiss does not track and cannot poll by that id (a URL-token sender).
    untracked: Option<Value>,
}

/// How a cloud signs its webhooks.
#[derive(Clone, Copy)]
enum Signing {
    /// HMAC-SHA256 of the raw body, `X-Webhook-Signature: sha256=<hex>`, `X-Webhook-ID` (Cursor).
    Hmac,
    /// Standard Webhooks, with a `whsec_` secret (Gemini's project webhooks).
    StandardWebhooks,
    /// Nothing: the token in the webhook URL (RunPod).
    UrlToken,
}

/// Sends `body` to `name`'s hook as its cloud does, as delivery `delivery_id`; `forged` signs it
/// with another secret (or sends another token). The status and the answer.
async fn deliver(server: &ServeChild, name: &str, push: &Push, body: &Value, delivery_id: &str, forged: bool) -> (StatusCode, Value) {
    use crate::harness::signing;
    let raw = body.to_string().into_bytes();
    let mut path = format!("/hooks/{name}");
    let headers: signing::Headers = match push.signing {
        Signing::Hmac => {
            let secret = if forged { "another-secret" } else { push.secret };
            let signature = signing::generic_signature(secret, &raw);
            vec![("x-webhook-signature", signature), ("x-webhook-id", delivery_id.to_owned()), ("x-webhook-event", "statusChange".into())]
        }
        Signing::StandardWebhooks => {
            let other = format!("whsec_{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [7u8; 32]));
            signing::standard_webhooks(if forged { &other } else { push.secret }, delivery_id, signing::now_secs(), &raw)
        }
        Signing::UrlToken => {
            path = format!("/hooks/{name}/{}{}", push.secret, if forged { "x" } else { "" });
            Vec::new()
        }
    };
    let mut request = server.api.http.post(format!("{}{path}", server.receiver)).header("content-type", "application/json").body(raw);
    for (header, value) in headers {
        request = request.header(header, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let answer = response.json::<Value>().await.unwrap_or_default();
    // Every body the engine took (not a forgery) goes to the SDKs' judge, as its cloud's webhook;
    // the value no SDK has says so.
    if status == StatusCode::OK {
        let off_spec = push
            .unknown
            .as_ref()
            .filter(|(unknown, _)| unknown == body)
            .map(|_| "a webhook value no SDK or reference has, to see NeverMiss count it");
        record_sent(name, body.to_string().as_bytes(), off_spec);
    }
    (status, answer)
}

/// The stand-in's state: the answer of the moment (with why it is off the SDKs' spec, if it is),
/// and each request's path and key header.
struct StandIn {
    auth_header: &'static str,
    answer: Mutex<(Value, Option<&'static str>)>,
    /// The cloud no longer keeps the job: 404.
    gone: Mutex<bool>,
    seen: Mutex<Vec<(String, String)>>,
}

async fn answer(State(stand): State<Arc<StandIn>>, uri: Uri, headers: HeaderMap) -> Response {
    let auth = headers.get(stand.auth_header).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    stand.seen.lock().unwrap().push((uri.path().to_owned(), auth));
    if *stand.gone.lock().unwrap() || uri.path().contains(NEVER_WAS) {
        return (StatusCode::NOT_FOUND, Json(json!({"error": "job not found"}))).into_response();
    }
    let (body, why) = stand.answer.lock().unwrap().clone();
    let response = Json(body).into_response();
    match why {
        Some(why) => off_spec(response, why),
        None => response,
    }
}

/// A stand-in of `cloud` answering `first`, and a real `serve` polling it with its key (and its
/// webhook secret, when it takes webhooks). The stand-in, the server, its dir and the key.
async fn start(cloud: &Cloud, first: Value) -> (Arc<StandIn>, ServeChild, TempDir, String) {
    let stand = Arc::new(StandIn {
        auth_header: cloud.auth.0,
        answer: Mutex::new((first, None)),
        gone: Mutex::new(false),
        seen: Mutex::new(Vec::new()),
    });
    let base = serve(Router::new().fallback(answer).with_state(stand.clone())).await;
    let dir = TempDir::new().unwrap();
    let key = format!("{}-key-1", cloud.name);
    let upper = cloud.name.to_ascii_uppercase();
    let mut env = vec![
        (format!("NEVERMISS_{upper}_API_KEY"), key.clone()),
        (format!("NEVERMISS_{upper}_BASE_URL"), format!("{base}{}", cloud.served_under)),
    ];
    if let Some(push) = &cloud.push {
        env.push((format!("NEVERMISS_{upper}_WEBHOOK_SECRET"), push.secret.to_owned()));
    }
    let server = ServeChild::start_in(dir.path(), env).await;
    (stand, server, dir, key)
}

/// Drives `cloud`'s job through a real `serve`, as the module's comment says.
/// What the stand-in answers 404 for: a job id its cloud never had (a typo).
const NEVER_WAS: &str = "-never-was";

async fn drive(cloud: Cloud) {
    let running = |status: &Value| fixture(cloud.running).set(cloud.status_at, status.clone()).value();
    let (stand, server, _dir, key) = start(&cloud, running(&cloud.steps[0].0)).await;
    let (name, id) = (cloud.name, cloud.job_id);

    let tracked = server.api.raw_post("/api/jobs", &json!({"provider": name, "job_id": id})).await;
    assert_eq!(tracked.status(), StatusCode::CREATED, "{name}: {}", tracked.text().await.unwrap_or_default());
    // A job its cloud never had answers 404: an unknown job with the poll's error, never an end
    // (not even for a recipe whose 404 can mean "ended": this one was never seen running).
    let typo = format!("{id}{NEVER_WAS}");
    let tracked = server.api.raw_post("/api/jobs", &json!({"provider": name, "job_id": typo})).await;
    assert_eq!(tracked.status(), StatusCode::CREATED, "{name}: {}", tracked.text().await.unwrap_or_default());
    // Each step: a reconcile pass polls the job and applies the answer before it returns.
    for (status, state) in &cloud.steps {
        stand.answer.lock().unwrap().0 = running(status);
        let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
        assert_eq!(server.api.job_now(name, id).await.job.state, *state, "{name}: {status} means {state:?}");
    }
    let last = cloud.steps.last().unwrap().1;
    let never = server.api.job_now(name, &typo).await.job;
    assert_eq!(never.state, JobState::Unknown, "{name}: a 404 about a job never seen: {never:?}");
    assert!(never.poll_error.is_some(), "{name}: the 404 is shown on the job: {never:?}");

    // A value the table does not have: counted, and the job stays as it was (never a success).
    if let Some(unknown) = &cloud.unknown {
        *stand.answer.lock().unwrap() = (running(unknown), Some("a status value no SDK has, to see NeverMiss count it"));
        let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
        let metrics = server.api.metrics().await;
        let counted =
            metrics.unknown_values.iter().any(|u| u.provider == name && u.field == "status" && Some(u.value.as_str()) == unknown.as_str());
        assert!(counted, "{name}: {unknown} is counted: {:?}", metrics.unknown_values);
        assert_eq!(server.api.job_now(name, id).await.job.state, last, "{name}: an unknown value changes nothing");
    }

    *stand.answer.lock().unwrap() = (fixture(cloud.ended).value(), None);
    let ended = match &cloud.push {
        None => {
            let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
            server.api.wait_for_state(name, id, cloud.end).await.job
        }
        Some(push) => {
            pushed(&server, name, id, push, last, cloud.end).await;
            // The poll the delivery caused brings the result or the error.
            let said = |j: &nevermiss_engine::api::jobs::JobDetail| {
                j.job.error.as_deref() == cloud.error && j.job.result.as_ref().and_then(|r| r.text.as_deref()) == cloud.result_text
            };
            server.api.wait_for_job(name, id, "the poll after the delivery", said).await.job
        }
    };
    assert_eq!(ended.error.as_deref(), cloud.error, "{name}: its error");
    let result = ended.result.unwrap_or_default();
    assert_eq!(result.text.as_deref(), cloud.result_text, "{name}: its result");
    assert_eq!(result.urls, cloud.result_urls.iter().map(|u| u.to_string()).collect::<Vec<_>>(), "{name}: its result's URLs");

    // Polled again, it stays ended; announced once.
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let identity = format!("nevermiss:{name}:{id}:terminal");
    wait_until("the notification is logged", || async { server.log_text().contains(&identity) }).await;
    let shown = server.log_text().lines().filter(|l| l.contains("nevermiss::notification") && l.contains(&identity)).count();
    assert_eq!(shown, 1, "{name}: one notification");
    assert_eq!(server.api.job_now(name, id).await.job.state, cloud.end);

    let expected = (format!("{}{}", cloud.served_under, cloud.path), cloud.auth.1.replace("{key}", &key));
    let seen: Vec<_> = stand.seen.lock().unwrap().iter().filter(|(path, _)| !path.ends_with(NEVER_WAS)).cloned().collect();
    assert!(seen.len() >= cloud.steps.len() + 2, "{name}: polled at each step: {seen:?}");
    assert!(seen.iter().all(|s| *s == expected), "{name}: each poll asks {expected:?}: {seen:?}");
    server.stop().await;
}

/// The push half of `drive`: the job is `last` (unfinished) and its cloud's job has ended.
async fn pushed(server: &ServeChild, name: &str, id: &str, push: &Push, last: JobState, end: JobState) {
    let metrics = server.api.metrics().await;
    let bad_before = metrics.store.bad_signatures;
    // A signed delivery with a value the table does not have: counted, ignored, nothing moves.
    if let Some((body, value)) = &push.unknown {
        let (status, answer) = deliver(server, name, push, body, "dlv-unknown", false).await;
        assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("ignored")), "{name}: {answer}");
        let metrics = server.api.metrics().await;
        let counted = metrics.unknown_values.iter().any(|u| u.provider == name && u.field == "webhook" && u.value == *value);
        assert!(counted, "{name}: the webhook's {value} is counted: {:?}", metrics.unknown_values);
        assert_eq!(server.api.job_now(name, id).await.job.state, last, "{name}: an unknown value changes nothing");
    }
    // A hint about a job NeverMiss does not track, by an id it cannot poll: ignored, no job made.
    if let Some(body) = &push.untracked {
        let (status, answer) = deliver(server, name, push, body, "dlv-untracked", false).await;
        assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("ignored")), "{name}: {answer}");
        let hinted = body["id"].as_str().unwrap();
        assert!(server.api.job(name, hinted).await.is_none(), "{name}: no job {hinted} was made");
    }
    // Forged: 401, counted, nothing moves.
    let (status, answer) = deliver(server, name, push, &push.ended, "dlv-forged", true).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}: {answer}");
    assert_eq!(server.api.metrics().await.store.bad_signatures, bad_before + 1, "{name}: the forgery is counted");
    assert_eq!(server.api.job_now(name, id).await.job.state, last, "{name}: a forgery moves nothing");

    // The cloud's delivery about the end: the job ends at once, without a reconcile pass (a
    // URL-token sender's hint makes the engine poll it, and the poll ends it: the hint is
    // answered with what its poll did, `applied`).
    let (status, answer) = deliver(server, name, push, &push.ended, "dlv-end", false).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("applied")), "{name}: {answer}");
    let ended = server.api.wait_for_state(name, id, end).await.job;
    let source = if matches!(push.signing, Signing::UrlToken) { Source::Pull } else { Source::Push };
    assert_eq!(ended.terminal_source, Some(source), "{name}: ended by {source:?}");

    // Sent again: a duplicate; an older event after it: stale. Neither changes the job.
    let (status, answer) = deliver(server, name, push, &push.ended, "dlv-end", false).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("duplicate")), "{name}: {answer}");
    let (status, answer) = deliver(server, name, push, &push.stale, "dlv-stale", false).await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("stale")), "{name}: {answer}");
    assert_eq!(server.api.job_now(name, id).await.job.state, end, "{name}: nothing moves an ended job");
}

const BEARER: (&str, &str) = ("authorization", "Bearer {key}");

/// Cursor's `statusChange` webhook body (its webhooks page) about the agent of `cursor/agent`.
fn cursor_webhook(status: &str) -> Value {
    json!({
        "event": "statusChange",
        "timestamp": "2026-12-01T10:42:00Z",
        "id": "bc-3a1b9c00-0000-0000-0000-000000000001",
        "status": status,
        "source": {"repository": "https://github.com/your-org/your-repo", "ref": "main"},
        "target": {
            "url": "https://cursor.com/agents?id=bc-3a1b9c00-0000-0000-0000-000000000001",
            "branchName": "cursor/add-readme-1234",
            "prUrl": "https://github.com/your-org/your-repo/pull/1234"
        },
        "summary": "Added README.md with installation instructions and usage examples"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_batch() {
    drive(Cloud {
        name: "gemini",
        job_id: "batches/nm123",
        path: "/v1beta/batches/nm123",
        served_under: "",
        auth: ("x-goog-api-key", "{key}"),
        running: "gemini/batch",
        status_at: "metadata.state",
        steps: vec![(json!("BATCH_STATE_PENDING"), JobState::Queued), (json!("BATCH_STATE_RUNNING"), JobState::Running)],
        unknown: Some(json!("BATCH_STATE_PAUSED")),
        ended: "gemini/batch_ended",
        end: JobState::Succeeded,
        error: None,
        result_text: Some("files/batch-nm123-output"),
        result_urls: &[],
        push: Some(Push {
            signing: Signing::StandardWebhooks,
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            ended: json!({"type": "batch.succeeded", "data": {"id": "batches/nm123"}}),
            stale: json!({"type": "batch.failed", "data": {"id": "batches/nm123"}}),
            unknown: Some((json!({"type": "batch.paused", "data": {"id": "batches/nm123"}}), "batch.paused")),
            untracked: None,
        }),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_video_operation() {
    drive(Cloud {
        name: "gemini",
        job_id: "models/veo-3.0-generate-001/operations/op7",
        path: "/v1beta/models/veo-3.0-generate-001/operations/op7",
        served_under: "",
        auth: ("x-goog-api-key", "{key}"),
        running: "gemini/video_operation",
        status_at: "done",
        steps: vec![(json!(false), JobState::Running)],
        unknown: None,
        ended: "gemini/video_operation_ended",
        end: JobState::Succeeded,
        error: None,
        result_text: None,
        result_urls: &["https://generativelanguage.googleapis.com/v1beta/files/vid7:download?alt=media"],
        push: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groq_batch() {
    drive(Cloud {
        name: "groq",
        job_id: "batch_01",
        path: "/openai/v1/batches/batch_01",
        served_under: "",
        auth: BEARER,
        running: "groq/batch",
        status_at: "status",
        steps: vec![(json!("validating"), JobState::Queued), (json!("in_progress"), JobState::Running)],
        unknown: Some(json!("paused")),
        ended: "groq/batch_ended",
        end: JobState::Failed,
        error: Some("line 3 is not JSON"),
        result_text: None,
        result_urls: &[],
        push: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistral_batch_job() {
    drive(Cloud {
        name: "mistral",
        job_id: "b6d0",
        path: "/v1/batch/jobs/b6d0",
        served_under: "",
        auth: BEARER,
        running: "mistral/batch_job",
        status_at: "status",
        steps: vec![(json!("QUEUED"), JobState::Queued), (json!("RUNNING"), JobState::Running)],
        unknown: Some(json!("PAUSED")),
        ended: "mistral/batch_job_ended",
        end: JobState::Failed,
        error: Some("timeout"),
        result_text: None,
        result_urls: &[],
        push: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn together_fine_tune() {
    drive(Cloud {
        name: "together",
        job_id: "ft-1",
        path: "/v1/fine-tunes/ft-1",
        served_under: "",
        auth: BEARER,
        running: "together/fine_tune",
        status_at: "status",
        steps: vec![(json!("pending"), JobState::Queued), (json!("running"), JobState::Running)],
        unknown: Some(json!("paused")),
        ended: "together/fine_tune_ended",
        end: JobState::Succeeded,
        error: None,
        result_text: Some("me/Llama-3-8b-ft-1"),
        result_urls: &[],
        push: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fireworks_fine_tuning_job() {
    drive(Cloud {
        name: "fireworks",
        job_id: "accounts/acme/supervisedFineTuningJobs/sft-1",
        path: "/v1/accounts/acme/supervisedFineTuningJobs/sft-1",
        served_under: "",
        auth: BEARER,
        running: "fireworks/supervised_fine_tuning_job",
        status_at: "state",
        steps: vec![(json!("JOB_STATE_PENDING"), JobState::Queued), (json!("JOB_STATE_RUNNING"), JobState::Running)],
        unknown: Some(json!("JOB_STATE_HIBERNATING")),
        ended: "fireworks/supervised_fine_tuning_job_ended",
        end: JobState::Failed,
        error: Some("the dataset has no messages field"),
        result_text: None,
        result_urls: &[],
        push: None,
    })
    .await;
}

/// RunPod's job, tracked as `<endpoint>/<job id>`; its webhook is a hint by URL token.
fn runpod() -> Cloud {
    Cloud {
        name: "runpod",
        job_id: "ep1abc/c80ffee4-f315-4e25-a146-0f3d98cf024b-u1",
        path: "/v2/ep1abc/status/c80ffee4-f315-4e25-a146-0f3d98cf024b-u1",
        served_under: "",
        auth: BEARER,
        running: "runpod/status",
        status_at: "status",
        steps: vec![(json!("IN_QUEUE"), JobState::Queued), (json!("IN_PROGRESS"), JobState::Running)],
        unknown: Some(json!("THROTTLED")),
        ended: "runpod/status_ended",
        end: JobState::Failed,
        error: Some("CUDA out of memory"),
        result_text: None,
        result_urls: &[],
        push: Some(Push {
            signing: Signing::UrlToken,
            secret: "rp-url-token-5d2c9a",
            // RunPod's webhook body is its status answer: the job id without its endpoint.
            ended: fixture("runpod/status_ended").value(),
            stale: fixture("runpod/status").status("IN_PROGRESS").value(),
            unknown: None,
            untracked: Some(fixture("runpod/status_ended").id("0ddba11-u1").value()),
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runpod_serverless_job() {
    drive(runpod()).await;
}

/// RunPod forgets a `/run` job 30 minutes after it ends: a job last seen running whose status
/// then answers 404 ended while nothing looked (`poll.not_found = "ended"`), its outcome unknown:
/// one notification that says so, never a success, and nothing moves it after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runpod_job_forgotten_after_it_ran_ended_with_its_outcome_unknown() {
    let cloud = runpod();
    let (stand, server, _dir, _key) = start(&cloud, fixture("runpod/status").status("IN_PROGRESS").value()).await;
    let (name, id) = (cloud.name, cloud.job_id);
    let tracked = server.api.raw_post("/api/jobs", &json!({"provider": name, "job_id": id})).await;
    assert_eq!(tracked.status(), StatusCode::CREATED);
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    assert_eq!(server.api.job_now(name, id).await.job.state, JobState::Running);
    *stand.gone.lock().unwrap() = true;
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let ended = server.api.wait_for_state(name, id, JobState::Ended).await.job;
    assert!(ended.error.as_deref().is_some_and(|e| e.contains("outcome is unknown")), "{:?}", ended.error);
    let _ = server.api.raw_post("/api/reconcile", &json!({})).await;
    let identity = format!("nevermiss:{name}:{id}:terminal");
    wait_until("the notification is logged", || async { server.log_text().contains(&identity) }).await;
    let lines: Vec<String> =
        server.log_text().lines().filter(|l| l.contains("nevermiss::notification") && l.contains(&identity)).map(str::to_owned).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("Ended, outcome unknown"), "{}", lines[0]);
    assert_eq!(server.api.job_now(name, id).await.job.state, JobState::Ended);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huggingface_job() {
    drive(Cloud {
        name: "huggingface",
        job_id: "lhoestq/687fb701029421ae5549d998",
        path: "/api/jobs/lhoestq/687fb701029421ae5549d998",
        served_under: "",
        auth: BEARER,
        running: "huggingface/job",
        status_at: "status.stage",
        steps: vec![(json!("SCHEDULING"), JobState::Queued), (json!("RUNNING"), JobState::Running)],
        unknown: Some(json!("PAUSED")),
        ended: "huggingface/job_ended",
        end: JobState::Failed,
        error: Some("Job failed with exit code: 1"),
        result_text: None,
        result_urls: &[],
        push: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_cloud_agent() {
    drive(Cloud {
        name: "cursor",
        job_id: "bc-3a1b9c00-0000-0000-0000-000000000001",
        path: "/v0/agents/bc-3a1b9c00-0000-0000-0000-000000000001",
        served_under: "",
        auth: BEARER,
        running: "cursor/agent",
        status_at: "status",
        steps: vec![(json!("CREATING"), JobState::Queued), (json!("RUNNING"), JobState::Running)],
        unknown: Some(json!("SUSPENDED")),
        ended: "cursor/agent_ended",
        end: JobState::Succeeded,
        error: None,
        result_text: Some("Added README.md with installation instructions and usage examples"),
        result_urls: &["https://github.com/your-org/your-repo/pull/1234"],
        push: Some(Push {
            signing: Signing::Hmac,
            secret: "cursor-webhook-secret-at-launch",
            ended: cursor_webhook("FINISHED"),
            stale: cursor_webhook("ERROR"),
            unknown: Some((cursor_webhook("SUSPENDED"), "SUSPENDED")),
            untracked: None,
        }),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn together_batch() {
    drive(Cloud {
        name: "together",
        job_id: "5b1d8b2e-94a0-4a7c-9f1e-0c2d7e3a4b5c",
        path: "/v1/batches/5b1d8b2e-94a0-4a7c-9f1e-0c2d7e3a4b5c",
        served_under: "/together",
        auth: BEARER,
        running: "together/batch",
        status_at: "status",
        steps: vec![(json!("VALIDATING"), JobState::Queued), (json!("IN_PROGRESS"), JobState::Running)],
        unknown: Some(json!("PAUSED")),
        ended: "together/batch_ended",
        end: JobState::Succeeded,
        error: None,
        result_text: Some("file-out-1"),
        result_urls: &[],
        push: None,
    })
    .await;
}

//! What a sender, a provider or a device may send, run from outside against a real `nevermiss
//! serve` child process on the suite's store (SQLite, or PostgreSQL in the suite's second run),
//! with a provider stand-in whose answers the attacker shapes:
//! - a JSON value nested far past any stack (a URL-token webhook's body, a RunPod poll answer)
//!   is refused before anything recursive reads it: the delivery kept as rejected, the poll's
//!   error on the job, and the process keeps serving;
//! - job ids `.` and `..`, and ids with such a piece, never reach a provider's URL: a device (or
//!   the owner) is told what ids look like, a pushed one is kept as rejected, and the stand-in of
//!   every shipped provider receives nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use nevermiss_engine::api::devices::DeviceToken;
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::harness::api::ApiClient;
use crate::harness::app::{Backend, SECRET};
use crate::harness::postgres::TestDatabase;
use crate::harness::serve_child::ServeChild;
use crate::harness::signing;
use crate::harness::waiting::wait_for;

/// Every provider NeverMiss ships, built in or as a recipe.
const SHIPPED: &[&str] = &[
    "anthropic",
    "cursor",
    "fal",
    "fireworks",
    "gemini",
    "generic",
    "groq",
    "huggingface",
    "mistral",
    "openai",
    "replicate",
    "runpod",
    "together",
];

const RUNPOD_TOKEN: &str = "runpod-url-token-4d2c9e1f7a";

/// What a `Recorder` answers a request with.
enum Reply {
    /// 200 with these JSON bytes.
    Json(Vec<u8>),
    /// 302 to this URL.
    Redirect(String),
    NotFound,
}

/// A provider stand-in that records every request (method, path and query, headers) and answers
/// each as `answer` says for its path and query.
#[derive(Clone)]
struct Recorder {
    seen: Arc<Mutex<Vec<String>>>,
    answer: Arc<dyn Fn(&str) -> Reply + Send + Sync>,
}

impl Recorder {
    async fn start(answer: impl Fn(&str) -> Reply + Send + Sync + 'static) -> (Recorder, String) {
        async fn any(State(recorder): State<Recorder>, method: Method, uri: Uri, headers: HeaderMap) -> axum::response::Response {
            recorder.seen.lock().unwrap().push(format!("{method} {uri} {headers:?}"));
            let target = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
            match (recorder.answer)(target) {
                Reply::Json(body) => ([("content-type", "application/json")], body).into_response(),
                Reply::Redirect(to) => (StatusCode::FOUND, [("location", to)]).into_response(),
                Reply::NotFound => (StatusCode::NOT_FOUND, "{}").into_response(),
            }
        }
        let recorder = Recorder { seen: Arc::default(), answer: Arc::new(answer) };
        let app = axum::Router::new().fallback(any).with_state(recorder.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (recorder, base)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// A `serve` child on the suite's store with `env`; its database (PostgreSQL) lives as long as it.
async fn serve(dir: &TempDir, mut env: Vec<(String, String)>) -> (ServeChild, Option<TestDatabase>) {
    let database = match Backend::of_this_run() {
        Backend::Sqlite => None,
        Backend::Postgres => Some(TestDatabase::create().await),
    };
    if let Some(database) = &database {
        env.push(("NEVERMISS_DATABASE_URL".into(), database.url.clone()));
    }
    env.push(("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into()));
    (ServeChild::start_in(dir.path(), env).await, database)
}

/// `NEVERMISS_<NAME>_<WHAT>` for `provider`.
fn variable(provider: &str, what: &str) -> String {
    format!("NEVERMISS_{}_{what}", provider.to_ascii_uppercase())
}

fn nested(levels: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(levels), "]".repeat(levels))
}

async fn still_serves(server: &ServeChild) {
    let health = server.api.raw_get("/api/health").await;
    assert_eq!(health.status(), StatusCode::OK, "the engine stopped serving:\n{}", server.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nested_past_the_bound_is_refused_and_the_engine_keeps_serving() {
    // RunPod's status answer for `ep1/job-deep`: a result nested 400,000 levels (800 KB, under the
    // 1 MiB an answer may be).
    let deep_answer = format!(r#"{{"id":"job-deep","status":"COMPLETED","output":{}}}"#, nested(400_000, "1"));
    let (stand_in, base) =
        Recorder::start(
            move |path| if path == "/v2/ep1/status/job-deep" { Reply::Json(deep_answer.clone().into_bytes()) } else { Reply::NotFound },
        )
        .await;
    let dir = tempfile::tempdir().unwrap();
    let env = vec![
        (variable("runpod", "BASE_URL"), base),
        (variable("runpod", "API_KEY"), "rp-key-1".into()),
        (variable("runpod", "WEBHOOK_SECRET"), RUNPOD_TOKEN.into()),
    ];
    let (server, _database) = serve(&dir, env).await;

    // The poll: its error is on the job, said; the process is still there.
    let (status, _) = server.api.track_job("runpod", "ep1/job-deep").await;
    assert_eq!(status, StatusCode::CREATED);
    let job = wait_for("the deep answer's poll error on the job", || async {
        server.api.job("runpod", "ep1/job-deep").await.filter(|d| d.job.poll_error.is_some())
    })
    .await;
    let error = job.job.poll_error.unwrap();
    assert!(error.contains("deeper than 128"), "{error}");
    assert!(!job.job.state.is_terminal(), "a refused answer moves nothing: {:?}", job.job.state);
    still_serves(&server).await;
    // Polled again (each restart polled it and died before): still an error, still serving.
    let again = server.api.poll_now("runpod", "ep1/job-deep").await;
    assert!(!again.polled && again.reason.as_deref().is_some_and(|r| r.contains("deeper than 128")), "{again:?}");
    still_serves(&server).await;

    // A URL-token webhook nested 20,000 levels (40 KB): kept as rejected, the receiver answers.
    let body = format!(r#"{{"id":"job-deep","output":{}}}"#, nested(20_000, "0"));
    let answer = server
        .api
        .http
        .post(format!("{}/hooks/runpod/{RUNPOD_TOKEN}", server.receiver))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the receiver answers");
    assert_eq!(answer.status(), StatusCode::OK, "a real provider is never answered 4xx");
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["outcome"], "rejected", "{answer}");
    // A signed generic delivery as deep: refused with why (the user's own sender is told).
    let body = format!(r#"{{"delivery_id":"d-deep","job_id":"j-deep","state":"succeeded","seq":1,"extra":{}}}"#, nested(20_000, "0"));
    let mut request = server.api.http.post(format!("{}/hooks/generic", server.receiver)).header("content-type", "application/json");
    for (name, value) in signing::generic(SECRET, body.as_bytes()) {
        request = request.header(name, value);
    }
    assert_eq!(request.body(body).send().await.unwrap().status(), StatusCode::BAD_REQUEST);
    still_serves(&server).await;
    let stored = server.api.raw_get("/api/jobs/generic/j-deep").await;
    assert_eq!(stored.status(), StatusCode::NOT_FOUND, "nothing of a refused delivery is merged");
    assert!(stand_in.seen().iter().all(|r| r.contains("/v2/ep1/status/job-deep")), "{:?}", stand_in.seen());
    assert!(server.stop().await, "the engine stops cleanly after all that");
}

/// Ids that climb a URL's path, whole or as a piece.
const CLIMBING: &[&str] = &[".", "..", "../whoami-v2", "../x", "ep1/..", "ep1/../x", "batches/../files", "./x", "a//b", "x/"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_climb_a_path_never_reach_a_providers_url() {
    let (stand_in, base) = Recorder::start(|_| Reply::Json(b"{}".to_vec())).await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = Vec::new();
    for provider in SHIPPED {
        env.push((variable(provider, "BASE_URL"), base.clone()));
        env.push((variable(provider, "API_KEY"), format!("{provider}-owners-key")));
    }
    let (server, _database) = serve(&dir, env).await;
    let device: DeviceToken = server.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let as_device = ApiClient::with_client(server.api.base.clone(), device.token.clone(), server.api.http.clone());

    for provider in SHIPPED {
        for id in CLIMBING {
            for (who, client) in [("a device", &as_device), ("the owner", &server.api)] {
                let answer = client.raw_post("/api/jobs", &json!({"provider": provider, "job_id": id})).await;
                let status = answer.status();
                let text = answer.text().await.unwrap();
                assert_eq!(status, StatusCode::BAD_REQUEST, "{who} tracked {provider} {id:?}: {text}");
                assert!(
                    text.contains("job id") && text.contains("a name"),
                    "{provider} {id:?}: the refusal says what ids look like: {text}"
                );
            }
            let traced = server.api.raw_post(&format!("/api/providers/{provider}/test"), &json!({"job_id": id})).await.status();
            assert_eq!(traced, StatusCode::BAD_REQUEST, "the owner's provider test with {provider} {id:?}");
        }
    }
    // A signed delivery naming such a job: refused with why, no job made.
    for (n, id) in CLIMBING.iter().enumerate() {
        let (status, _) = server.deliver(&format!("d-climb-{n}"), id, "running", 1).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "a pushed job {id:?}");
    }
    // A real id of each is polled, so the stand-in is seen to be reached at all.
    let (status, _) = as_device.track_job("generic", "job-fine").await;
    assert_eq!(status, StatusCode::CREATED);
    // Every climbing id was refused (answered) before this job was tracked: its poll is the later
    // event, so nothing else can still reach the stand-in.
    wait_for("the fine job's poll", || async { stand_in.seen().iter().any(|r| r.contains("job-fine")).then_some(()) }).await;
    let seen = stand_in.seen();
    let climbed: Vec<&String> = seen.iter().filter(|r| !r.contains("job-fine")).collect();
    assert!(climbed.is_empty(), "the stand-in was called with the owner's key for ids that are no names: {climbed:?}");
    let page = server.api.jobs("limit=100").await;
    assert_eq!(page.jobs.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(), ["job-fine"], "only the fine job is kept");
    assert!(server.stop().await);
}

/// A client for a device's live streams: each request its own connection, held while its answer
/// is.
fn stream_client() -> reqwest::Client {
    reqwest::Client::builder().connect_timeout(Duration::from_secs(5)).pool_max_idle_per_host(0).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_holds_its_share_of_streams_and_provider_calls_and_the_owner_always_gets_in() {
    use nevermiss_engine::api::fair_share::{DEVICE_CALL_BURST, DEVICE_CALL_EVERY, STREAMS_PER_DEVICE};
    let (stand_in, base) = Recorder::start(|_| Reply::Json(br#"{"state":"running"}"#.to_vec())).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, _database) = serve(&dir, vec![(variable("generic", "BASE_URL"), base)]).await;
    let device: DeviceToken = server.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;

    // As many live streams as the API has connections: a device gets its share, then 429.
    let http = stream_client();
    let (mut held, mut refused) = (Vec::new(), 0);
    for n in 0..nevermiss_engine::api::fair_share::MAX_API_CONNECTIONS {
        let request = http.get(format!("{}/api/events", server.api.base)).bearer_auth(&device.token).send();
        match tokio::time::timeout(Duration::from_secs(10), request).await {
            Ok(Ok(answer)) if answer.status() == StatusCode::OK => held.push(answer),
            Ok(Ok(answer)) if answer.status() == StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("stream {n} of the device: {other:?}"),
        }
    }
    assert_eq!(held.len(), STREAMS_PER_DEVICE, "{refused} refused");
    // The owner gets in meanwhile, for a call and for a stream of its own.
    let owner = tokio::time::timeout(Duration::from_secs(10), server.api.raw_get("/api/jobs")).await.expect("the owner is locked out");
    assert_eq!(owner.status(), StatusCode::OK);
    let request = http.get(format!("{}/api/events", server.api.base)).bearer_auth(&server.api.token).send();
    let owners_stream = tokio::time::timeout(Duration::from_secs(10), request).await.expect("the owner's stream waits").unwrap();
    assert_eq!(owners_stream.status(), StatusCode::OK);

    // Tracks (each polled at once with the owner's key): a burst, then 429 with when to retry.
    // The share refills one call every DEVICE_CALL_EVERY from the first call on: a machine slow
    // enough (a Windows build under Wine, beside other work) gets that many more in.
    let as_device = ApiClient::with_client(server.api.base.clone(), device.token.clone(), server.api.http.clone());
    let mut statuses = Vec::new();
    let burst_started = std::time::Instant::now();
    for n in 0..DEVICE_CALL_BURST + 10 {
        let answer = as_device.raw_post("/api/jobs", &json!({"provider": "generic", "job_id": format!("job-{n}")})).await;
        let status = answer.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let text = answer.text().await.unwrap();
            assert!(text.contains("try again in"), "{text}");
        }
        statuses.push(status);
    }
    // "Poll now" is the same share.
    let polled = as_device.request(reqwest::Method::POST, "/api/jobs/generic/job-0/poll").send().await.unwrap().status();
    let refills = (burst_started.elapsed().as_secs_f64() / DEVICE_CALL_EVERY.as_secs_f64()) as usize;
    let created = statuses.iter().filter(|s| **s == StatusCode::CREATED).count();
    assert!(statuses[..DEVICE_CALL_BURST as usize].iter().all(|s| *s == StatusCode::CREATED), "{statuses:?}");
    assert!(statuses.iter().all(|s| [StatusCode::CREATED, StatusCode::TOO_MANY_REQUESTS].contains(s)), "{statuses:?}");
    assert!(created <= DEVICE_CALL_BURST as usize + refills, "{statuses:?} with {refills} refills");
    let poll_went_through = polled != StatusCode::TOO_MANY_REQUESTS;
    assert!(!poll_went_through || created < DEVICE_CALL_BURST as usize + refills, "poll now: {polled}, {refills} refills");
    wait_for("the tracked jobs' first polls", || async { (stand_in.seen().len() >= DEVICE_CALL_BURST as usize).then_some(()) }).await;
    // The owner is never limited; its job's poll, after every device call above, is the later
    // event the count is read at.
    let (status, _) = server.api.track_job("generic", "job-owners").await;
    assert_eq!(status, StatusCode::CREATED);
    wait_for("the owner's job's poll", || async { stand_in.seen().iter().any(|r| r.contains("job-owners")).then_some(()) }).await;
    let by_device = stand_in.seen().iter().filter(|r| !r.contains("job-owners")).count();
    assert_eq!(by_device, created + usize::from(poll_went_through), "provider calls the device caused");
    drop(held);
    assert!(server.stop().await);
}

/// Gemini's answers as an attacker shapes them: a status that redirects to another origin, a job
/// list whose every page is empty and names the same next page, a job whose name and error are
/// far longer than the API allows.
fn shaped_gemini(elsewhere: String) -> impl Fn(&str) -> Reply + Send + Sync + 'static {
    move |target: &str| {
        if target.starts_with("/v1beta/batches?") {
            Reply::Json(br#"{"operations":[],"nextPageToken":"same-page"}"#.to_vec())
        } else if target == "/v1beta/batches/redirected" {
            Reply::Redirect(format!("{elsewhere}/collect"))
        } else if target == "/v1beta/batches/long" {
            let answer = json!({
                "name": "batches/long",
                "metadata": {"state": "BATCH_STATE_FAILED", "displayName": "n".repeat(300_000)},
                "error": {"message": "e".repeat(600_000)},
            });
            Reply::Json(answer.to_string().into_bytes())
        } else {
            Reply::NotFound
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_answers_cannot_take_the_key_elsewhere_loop_discovery_or_grow_the_database() {
    let (elsewhere, elsewhere_base) = Recorder::start(|_| Reply::Json(br#"{"metadata":{"state":"BATCH_STATE_SUCCEEDED"}}"#.to_vec())).await;
    let (stand_in, base) = Recorder::start(shaped_gemini(elsewhere_base)).await;
    let dir = tempfile::tempdir().unwrap();
    let env = vec![(variable("gemini", "BASE_URL"), base), (variable("gemini", "API_KEY"), "gemini-owners-key".into())];
    let (server, _database) = serve(&dir, env).await;

    // A redirect to another origin is not followed: the key (x-goog-api-key, which reqwest does
    // not drop as it drops Authorization) never reaches it, and the job says why.
    let (status, _) = server.api.track_job("gemini", "batches/redirected").await;
    assert_eq!(status, StatusCode::CREATED);
    let job = wait_for("the redirected poll's error", || async {
        server.api.job("gemini", "batches/redirected").await.filter(|d| d.job.poll_error.is_some())
    })
    .await;
    assert!(job.job.poll_error.as_deref().is_some_and(|e| e.contains("302")), "{:?}", job.job.poll_error);
    assert!(elsewhere.seen().is_empty(), "the key went to another origin: {:?}", elsewhere.seen());

    // Texts longer than the API allows are kept to their bounds, however often polled.
    let (status, _) = server.api.track_job("gemini", "batches/long").await;
    assert_eq!(status, StatusCode::CREATED);
    let long = server.api.wait_for_state("gemini", "batches/long", nevermiss_engine::store::job::JobState::Failed).await.job;
    assert!(
        long.label.as_deref().is_some_and(|l| l.chars().count() <= nevermiss_engine::store::job::MAX_LABEL),
        "a label of {:?} chars",
        long.label.map(|l| l.len())
    );
    assert!(long.error.as_deref().is_some_and(|e| e.chars().count() <= nevermiss_engine::store::job::MAX_ERROR));
    let kept = serde_json::to_string(&server.api.job_now("gemini", "batches/long").await).unwrap();
    assert!(kept.len() < 20_000, "the job and its timeline keep {} bytes", kept.len());

    // Discovery over pages that name the same next page: the listing stops there, the pass ends.
    let _: Value = server.api.put("/api/settings", &json!({"gemini.discover": "on"}), StatusCode::OK).await;
    let pass = tokio::time::timeout(Duration::from_secs(30), server.api.raw_post("/api/reconcile", &json!({}))).await;
    assert_eq!(pass.expect("the reconcile pass never ended").status(), StatusCode::OK);
    let listings = stand_in.seen().iter().filter(|r| r.contains("/v1beta/batches?")).count();
    assert!((1..=2 * nevermiss_engine::providers::discovery::MAX_PAGES).contains(&listings), "{listings} list calls");
    still_serves(&server).await;
    assert!(server.stop().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_deliveries_hide_credentials_by_shape_and_a_resend_under_a_new_unsigned_id_is_a_duplicate() {
    const CURSOR_SECRET: &str = "cursor-webhook-secret-9b2e";
    let (stand_in, base) = Recorder::start(|target| {
        if target == "/v0/agents/bc-1" {
            Reply::Json(br#"{"id":"bc-1","status":"RUNNING"}"#.to_vec())
        } else {
            Reply::NotFound
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let env = vec![
        (variable("cursor", "BASE_URL"), base),
        (variable("cursor", "API_KEY"), "cursor-owners-key".into()),
        (variable("cursor", "WEBHOOK_SECRET"), CURSOR_SECRET.into()),
    ];
    let (server, _database) = serve(&dir, env).await;
    let jwt = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJ4In0.c2lnbmF0dXJlLXNpZ25hdHVyZQ";
    let body = json!({"event": "statusChange", "id": "bc-1", "status": "RUNNING", "note": "sk-proj-abcdefghijklmnop1234", "x_access_key": "ak-77"})
        .to_string();
    let deliver = |id: &'static str| {
        server
            .api
            .http
            .post(format!("{}/hooks/cursor", server.receiver))
            .header("content-type", "application/json")
            .header("x-webhook-signature", signing::generic_signature(CURSOR_SECRET, body.as_bytes()))
            .header("x-webhook-id", id)
            .header("x-access-key", "abc-header-123")
            .header("x-platform-token-value", jwt)
            .body(body.clone())
            .send()
    };
    let first: Value = deliver("dlv-1").await.unwrap().json().await.unwrap();
    assert_eq!(first["outcome"], "applied", "{first}");
    // The same signed body under another id (the id header is not signed): a resend.
    let again: Value = deliver("dlv-2").await.unwrap().json().await.unwrap();
    assert_eq!(again["outcome"], "duplicate", "{again}");
    wait_for("the delivery's poll", || async { (!stand_in.seen().is_empty()).then_some(()) }).await;
    // The owner's "poll now", asked after both answers (a poll a resend causes is started before
    // its answer), is the later event: the polls seen by its end are the delivery's and its own.
    let polled = server.api.poll_now("cursor", "bc-1").await;
    assert!(polled.polled, "{polled:?}");
    assert_eq!(stand_in.seen().len(), 2, "a resend made the engine poll again: {:?}", stand_in.seen());

    // What is kept: no credential, by name or by shape, in the headers or the body.
    let timeline = server.api.job_now("cursor", "bc-1").await.timeline;
    let delivery_id = timeline.iter().find_map(|e| e.delivery_id.clone()).expect("a delivery on the timeline");
    let path = format!("/api/deliveries/cursor/{}", delivery_id.replace(':', "%3A"));
    let kept: Value = server.api.get(&path, StatusCode::OK).await;
    let text = kept.to_string();
    for secret in ["sk-proj-abcdefghijklmnop1234", "ak-77", "abc-header-123", jwt] {
        assert!(!text.contains(secret), "{secret} is kept: {text}");
    }
    assert!(kept["body"].as_str().is_some_and(|b| b.contains("statusChange")), "the rest of the body is kept: {kept}");
    // A device reads no body unless the owner allows it.
    let device: DeviceToken = server.api.post("/api/devices", &json!({"name": "laptop"}), StatusCode::OK).await;
    let as_device = ApiClient::with_client(server.api.base.clone(), device.token.clone(), server.api.http.clone());
    let seen_by_device: Value = as_device.get(&path, StatusCode::OK).await;
    assert!(!seen_by_device["body"].as_str().unwrap_or_default().contains("statusChange"), "{seen_by_device}");
    let _: Value = server.api.put("/api/settings", &json!({"devices_may_read_bodies": "on"}), StatusCode::OK).await;
    let allowed: Value = as_device.get(&path, StatusCode::OK).await;
    assert!(allowed["body"].as_str().is_some_and(|b| b.contains("statusChange")), "{allowed}");
    assert!(server.stop().await);
}

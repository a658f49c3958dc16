//! The `replicate` provider end to end: a real engine in-process, signed webhooks over real HTTP,
//! and a local stand-in for Replicate's API (`GET /v1/predictions/{id}`,
//! `GET /v1/webhooks/default/secret`, `GET /v1/predictions` pages with a `next` cursor, Bearer
//! tokens) that answers with prediction objects shaped as Replicate documents them, and can be told
//! to fail.

use crate::provider_support;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use nevermiss_engine::providers::ProviderContext;
use nevermiss_engine::secrets::SecretKind;
use provider_support::*;
use serde_json::{json, Value};

const P: &str = "replicate";
const API_KEY: &str = "r8_standin_0123456789abcdef";
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const MODEL: &str = "black-forest-labs/flux-schnell";

/// Replicate's error shape (problem details).
fn error_body(status: u16) -> Value {
    let (title, detail) = match status {
        401 => ("Unauthenticated", "You did not pass a valid authentication token"),
        404 => ("Not found", "The requested resource could not be found."),
        429 => ("Request was throttled.", "Request was throttled. Expected available in 120 seconds."),
        _ => ("Internal server error", "Something went wrong."),
    };
    json!({ "title": title, "detail": detail, "status": status })
}

fn authorized(headers: &HeaderMap) -> bool {
    header(headers, "authorization") == format!("Bearer {API_KEY}")
}

async fn prediction_route(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let answer = stand.take(&id, &format!("/v1/predictions/{id}"), &headers);
    if !authorized(&headers) {
        return (StatusCode::UNAUTHORIZED, axum::Json(error_body(401))).into_response();
    }
    respond(answer, error_body).await
}

async fn secret_route(State(stand): State<Arc<StandIn>>, headers: HeaderMap) -> Response {
    let answer = stand.take("secret", "/v1/webhooks/default/secret", &headers);
    if !authorized(&headers) {
        return (StatusCode::UNAUTHORIZED, axum::Json(error_body(401))).into_response();
    }
    respond(answer, error_body).await
}

/// `GET /v1/predictions[?cursor=...]`: the page stored under `list:<cursor>`.
async fn list_route(
    State(stand): State<Arc<StandIn>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let cursor = query.get("cursor").cloned().unwrap_or_default();
    let answer = stand.take(&format!("list:{cursor}"), "/v1/predictions", &headers);
    if !authorized(&headers) {
        return (StatusCode::UNAUTHORIZED, axum::Json(error_body(401))).into_response();
    }
    respond(answer, error_body).await
}

/// A stand-in for api.replicate.com; returns its state and base URL.
async fn stand_in() -> (Arc<StandIn>, String) {
    let stand = StandIn::new();
    let router = Router::new()
        .route("/v1/predictions", get(list_route))
        .route("/v1/predictions/{id}", get(prediction_route))
        .route("/v1/webhooks/default/secret", get(secret_route))
        .with_state(stand.clone());
    let url = serve(router).await;
    (stand, url)
}

/// A prediction object as Replicate's API reference shows it, in `status`, with the times that
/// status has.
fn prediction(id: &str, status: &str) -> Value {
    let created = "2026-11-30T10:00:00.000000Z";
    let started = matches!(status, "processing" | "succeeded" | "failed" | "canceled").then_some("2026-11-30T10:00:01.500000Z");
    let completed = matches!(status, "succeeded" | "failed" | "canceled" | "aborted").then_some("2026-11-30T10:00:04.000000Z");
    json!({
        "id": id,
        "model": MODEL,
        "version": "5599ed30703defd1d160a25a63321b4dec97101d98b4674bcc56e41f62f35637",
        "input": { "prompt": "an astronaut riding a horse" },
        "logs": if status == "starting" { "" } else { "Using seed: 42\n" },
        "output": if status == "succeeded" { json!(["https://replicate.delivery/xezq/output.webp"]) } else { Value::Null },
        "data_removed": false,
        "error": if status == "failed" { json!("CUDA out of memory") } else { Value::Null },
        "source": "api",
        "status": status,
        "created_at": created,
        "started_at": started,
        "completed_at": completed,
        "urls": {
            "cancel": format!("https://api.replicate.com/v1/predictions/{id}/cancel"),
            "get": format!("https://api.replicate.com/v1/predictions/{id}"),
            "stream": "https://stream.replicate.com/v1/files/abc",
            "web": format!("https://replicate.com/p/{id}")
        },
        "metrics": if status == "succeeded" { json!({ "image_count": 1, "predict_time": 2.5, "total_time": 4.0 }) } else { json!({}) }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_applied_deduplicated_and_replays_refused() {
    let app = App::start().await;
    let (_stand, url) = stand_in().await;
    app.configure(P, &url, None, Some(SECRET)).await;

    assert_eq!(app.deliver(P, SECRET, "msg_1", &prediction("p1", "processing")).await, "applied");
    let job = app.job_now(P, "p1").await;
    assert_eq!(job["state"], "running");
    assert_eq!(job["label"], MODEL);

    let done = prediction("p1", "succeeded");
    assert_eq!(app.deliver(P, SECRET, "msg_2", &done).await, "applied");
    let job = app.job_now(P, "p1").await;
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["terminal_source"], "push");
    assert_eq!(job["detail"], "predicted in 2.5 s");
    assert_eq!(job["finished_at"], "2026-11-30T10:00:04.000Z");

    // Replicate retries the final webhook: same webhook-id, a new timestamp, a new signature.
    let body = serde_json::to_vec(&done).unwrap();
    let (status, answer) = app.hook_at(P, SECRET, "msg_2", now_secs() + 1, &body).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("duplicate")));

    // An intermediate webhook arriving after the end is stale, never an error.
    assert_eq!(app.deliver(P, SECRET, "msg_3", &prediction("p1", "processing")).await, "stale");

    // A correctly signed replay from outside the 5-minute tolerance, and a wrong secret: 401.
    let (status, _) = app.hook_at(P, SECRET, "msg_2", now_secs() - 600, &body).await;
    assert_eq!(status, 401);
    let (status, _) = app.hook_at(P, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_9", now_secs(), &body).await;
    assert_eq!(status, 401);

    // Signed, in a status NeverMiss does not act on: 200 ignored (never a 4xx, which Replicate
    // would retry). Signed but unusable: 200 rejected, the raw request kept.
    let mut odd = prediction("p2", "starting");
    odd["status"] = json!("exploding");
    let (status, answer) = app.hook(P, SECRET, "msg_4", &odd).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("ignored")), "{answer}");
    let mut broken = prediction("p2", "starting");
    broken["created_at"] = json!("yesterday");
    let (status, answer) = app.hook(P, SECRET, "msg_5", &broken).await;
    assert_eq!((status, answer["outcome"].as_str()), (200, Some("rejected")), "{answer}");
    let kept = app.delivery(P, "msg_5").await.expect("the rejected delivery is kept");
    assert_eq!(kept["status"], "rejected");
    assert_eq!(kept["job_id"], "p2");
    assert!(kept["reason"].as_str().unwrap().contains("RFC 3339"), "{kept}");

    assert_eq!(
        app.timeline(P, "p1").await,
        ["push:applied:running", "push:applied:succeeded", "push:duplicate:succeeded", "push:stale:running"]
    );
    let metrics = app.metrics().await;
    assert_eq!(metrics["bad_signatures"], 2, "{metrics}");
    assert_eq!(metrics["duplicates"], 1);
    assert_eq!(metrics["stale"], 1);
    assert_eq!(metrics["rejected"], 1);
    assert_eq!(metrics["ignored"], 1);
    assert_eq!(metrics["applied"], 2);
    assert_eq!(metrics["reconcile_rescues"], 0);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_rescues_a_lost_completion() {
    let app = App::start().await;
    let (stand, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;

    // The start webhook arrives; the completion webhook never does.
    assert_eq!(app.deliver(P, SECRET, "msg_1", &prediction("p1", "processing")).await, "applied");

    // An unchanged prediction polled again is not re-applied.
    stand.json("p1", prediction("p1", "processing"));
    let report = app.reconcile().await;
    assert_eq!((report["checked"].as_u64(), report["applied"].as_u64()), (Some(1), Some(0)), "{report}");
    assert_eq!(report["providers"][P], "ok");

    stand.json("p1", prediction("p1", "succeeded"));
    let report = app.reconcile().await;
    assert_eq!(report["rescues"], 1, "{report}");
    assert_eq!(report["applied"], 1);
    assert_eq!(report["providers"][P], "ok");

    let job = app.job_now(P, "p1").await;
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["terminal_source"], "pull");
    assert_eq!(job["label"], MODEL);
    assert_eq!(job["detail"], "predicted in 2.5 s");
    assert!(job["poll_error"].is_null());
    assert_eq!(app.timeline(P, "p1").await, ["push:applied:running", "pull:applied:succeeded"]);

    // The request was Replicate's: the prediction's URL, a Bearer token.
    let seen = stand.seen();
    assert!(seen.iter().all(|s| s.path == "/v1/predictions/p1"), "{seen:?}");
    assert!(seen.iter().all(|s| header(&s.headers, "authorization") == format!("Bearer {API_KEY}")));

    // The late final webhook changes nothing; a finished job is not polled again.
    assert_eq!(app.deliver(P, SECRET, "msg_2", &prediction("p1", "succeeded")).await, "stale");
    let report = app.reconcile().await;
    assert_eq!(report["checked"], 0, "{report}");

    // A tracked job is polled at once; a failed prediction carries its error.
    stand.json("p2", prediction("p2", "failed"));
    app.track(P, "p2").await;
    let job = app.wait_for_state(P, "p2", "failed").await;
    assert_eq!(job["terminal_source"], "pull");
    assert_eq!(job["error"], "CUDA out of memory");

    let metrics = app.metrics().await;
    assert_eq!(metrics["reconcile_rescues"], 2, "{metrics}");
    assert_eq!(metrics["providers"][P]["status"], "ok");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signing_secret_is_fetched_with_the_api_key() {
    let app = App::start().await;
    let (stand, url) = stand_in().await;
    // An API key, no webhook secret.
    app.configure(P, &url, Some(API_KEY), None).await;
    let body = prediction("p1", "processing");

    // Replicate cannot be asked right now: 503, so the sender retries; nothing stored.
    stand.set("secret", Answer::Status(500));
    let (status, answer) = app.hook(P, SECRET, "msg_1", &body).await;
    assert_eq!(status, 503, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("signing secret"), "{answer}");
    assert!(app.job(P, "p1").await.is_none());
    assert_eq!(stand.count("/v1/webhooks/default/secret"), 1);

    // It can: the secret is fetched once, stored, and used.
    stand.json("secret", json!({ "key": SECRET }));
    assert_eq!(app.deliver(P, SECRET, "msg_1", &body).await, "applied");
    let services = &app.engine().services;
    assert_eq!(services.secrets.get(P, SecretKind::WebhookSecret).as_deref(), Some(SECRET));
    assert_eq!(app.deliver(P, SECRET, "msg_2", &prediction("p1", "succeeded")).await, "applied");
    assert_eq!(stand.count("/v1/webhooks/default/secret"), 2);
    let fetches = stand.seen();
    assert!(fetches.iter().all(|s| header(&s.headers, "authorization") == format!("Bearer {API_KEY}")));

    // A bad signature with the fetched secret is still a bad signature (no refetch).
    let (status, _) = app.hook(P, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_3", &body).await;
    assert_eq!(status, 401);
    assert_eq!(stand.count("/v1/webhooks/default/secret"), 2);

    // The same fetch, for the UI: forget the secret and fetch it again.
    services.secrets.set(P, SecretKind::WebhookSecret, None).unwrap();
    let ctx = ProviderContext::new(services.secrets.clone(), services.settings.clone());
    let fetched = nevermiss_engine::providers::replicate::fetch_signing_secret(&ctx).await.unwrap();
    assert_eq!(fetched, SECRET);
    assert_eq!(services.secrets.get(P, SecretKind::WebhookSecret).as_deref(), Some(SECRET));

    // And through the admin API, as the Settings screen's "Fetch from Replicate" asks for it: the
    // answer says the secret is set, never what it is.
    services.secrets.set(P, SecretKind::WebhookSecret, None).unwrap();
    let answer = app
        .http
        .post(format!("{}/api/secrets/replicate/fetch", app.api))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    assert!(!text.contains(SECRET), "the API never answers a secret");
    let view: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["providers"][P]["webhook_secret"]["set"], true, "{view}");
    assert_eq!(services.secrets.get(P, SecretKind::WebhookSecret).as_deref(), Some(SECRET));

    // A refused key is an error the UI can show.
    services.secrets.set(P, SecretKind::ApiKey, Some("r8_revoked")).unwrap();
    let refused = nevermiss_engine::providers::replicate::fetch_signing_secret(&ctx).await.unwrap_err();
    assert!(refused.to_string().contains("refused the API key (401)"), "{refused}");

    // Neither a secret nor a key: not configured, answered 503 and counted.
    app.configure(P, &url, None, None).await;
    let (status, _) = app.hook(P, SECRET, "msg_4", &body).await;
    assert_eq!(status, 503);
    assert_eq!(app.metrics().await["unconfigured_deliveries"], 1);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_api_key_pauses_the_provider_and_shows() {
    let app = App::start().await;
    let (stand, url) = stand_in().await;
    app.configure(P, &url, Some("r8_revoked"), Some(SECRET)).await;
    stand.json("p1", prediction("p1", "succeeded"));
    assert_eq!(app.deliver(P, SECRET, "msg_1", &prediction("p1", "starting")).await, "applied");

    let report = app.reconcile().await;
    let entry = report["providers"][P].as_str().unwrap();
    assert!(entry.contains("refused the API key (401)"), "{report}");
    let health = app.wait_for_health(P, "misconfigured").await;
    assert!(health["message"].as_str().unwrap().contains("refused the API key"), "{health}");
    assert!(!health["paused_until"].is_null());
    let job = app.job_now(P, "p1").await;
    assert_eq!(job["state"], "queued");
    assert!(job["poll_error"].is_null(), "a key problem is the provider's, not the job's: {job}");
    assert!(app.metrics().await["reconcile_errors"].as_i64().unwrap() >= 1);

    // The user fixes the key; a pass on demand tries again at once.
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    let report = app.reconcile().await;
    assert_eq!(report["providers"][P], "ok", "{report}");
    assert_eq!(report["rescues"], 1);
    assert_eq!(app.job_now(P, "p1").await["terminal_source"], "pull");
    app.wait_for_health(P, "ok").await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_pauses_the_provider_for_its_retry_after() {
    let app = App::start().await;
    let (stand, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    stand.answer_everything(Some(Answer::RateLimited(vec![("retry-after", "120")])));
    assert_eq!(app.deliver(P, SECRET, "msg_1", &prediction("p1", "starting")).await, "applied");
    assert_eq!(app.deliver(P, SECRET, "msg_2", &prediction("p2", "starting")).await, "applied");

    let report = app.reconcile().await;
    assert!(report["providers"][P].as_str().unwrap().contains("rate limited"), "{report}");
    let health = app.wait_for_health(P, "rate_limited").await;
    assert_eq!(pause_of(&health), Duration::from_secs(120), "{health}");
    let asked = stand.count("");
    assert!(asked >= 1);

    // Paused: the next pass does not ask at all.
    let report = app.reconcile().await;
    let entry = report["providers"][P].as_str().unwrap();
    assert!(entry.starts_with("paused until") && entry.contains("rate limited"), "{report}");
    assert_eq!(stand.count(""), asked);
    for id in ["p1", "p2"] {
        let job = app.job_now(P, id).await;
        assert_eq!(job["state"], "queued");
        assert!(job["poll_error"].is_null(), "{job}");
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_keeps_its_reason_and_the_others_go_on() {
    let app = App::start().await;
    let (stand, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    // Quick timeouts for this engine only.
    app.set_setting("provider_timeout_secs", "1").await;
    // "gone" is unknown to the stand-in: 404.
    stand.set("bad", Answer::Garbage);
    stand.set("broken", Answer::Status(500));
    stand.set("slow", Answer::Slow(prediction("slow", "succeeded")));
    stand.json("fine", prediction("fine", "succeeded"));
    for (n, id) in ["gone", "bad", "broken", "slow", "fine"].into_iter().enumerate() {
        assert_eq!(app.deliver(P, SECRET, &format!("msg_{n}"), &prediction(id, "starting")).await, "applied");
    }

    let report = app.reconcile().await;
    assert_eq!(report["providers"][P], "ok", "{report}");
    assert_eq!(report["checked"], 5);
    assert_eq!(report["not_found"], 1);
    assert_eq!(report["rescues"], 1);

    assert_eq!(app.job_now(P, "gone").await["poll_error"], NOT_FOUND);
    assert!(app.job_now(P, "bad").await["poll_error"].as_str().unwrap().contains("malformed"));
    assert_eq!(app.job_now(P, "broken").await["poll_error"], "the provider answered 500");
    assert_eq!(app.job_now(P, "slow").await["poll_error"], "the provider did not answer in time");
    for id in ["gone", "bad", "broken", "slow"] {
        assert_eq!(app.job_now(P, id).await["state"], "queued", "{id}");
    }
    let fine = app.job_now(P, "fine").await;
    assert_eq!((fine["state"].as_str(), fine["terminal_source"].as_str()), (Some("succeeded"), Some("pull")));

    let metrics = app.metrics().await;
    assert_eq!(metrics["jobs_not_found"], 1, "{metrics}");
    assert_eq!(metrics["providers"][P]["status"], "ok");
    app.shutdown().await;
}

// ----- discovery: predictions started elsewhere, found by listing them -----

/// `prediction(id, status)` created `offset_secs` from now (negative: in the past), its other
/// times a little after.
fn listed(id: &str, status: &str, offset_secs: i64) -> Value {
    let at = |extra_ms: i64| {
        (chrono::Utc::now() + chrono::Duration::milliseconds(offset_secs * 1000 + extra_ms))
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    };
    let mut p = prediction(id, status);
    p["created_at"] = json!(at(0));
    if !p["started_at"].is_null() {
        p["started_at"] = json!(at(500));
    }
    if !p["completed_at"].is_null() {
        p["completed_at"] = json!(at(900));
    }
    p
}

/// A page of `GET /v1/predictions`, as Replicate answers it.
fn page(results: Vec<Value>, next: Option<String>) -> Value {
    json!({ "previous": null, "next": next, "results": results })
}

/// `PUT /api/settings` with one setting; the status and the answer.
async fn put_setting(app: &App, key: &str, value: Value) -> (u16, Value) {
    app.put_settings(&json!({ key: value })).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_watches_predictions_started_elsewhere_from_when_it_is_turned_on() {
    let app = App::start().await;
    let (stand, url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), None).await;

    // Off by default: a pass never lists the account's predictions.
    stand.json("list:", page(vec![listed("elsewhere-0", "processing", 5)], None));
    app.reconcile().await;
    assert_eq!(stand.count("/v1/predictions"), 0, "discovery listed predictions while off");
    assert!(app.job(P, "elsewhere-0").await.is_none());

    // Only the providers that can list their jobs take the setting (fal cannot).
    let (status, answer) = put_setting(&app, "fal.discover", json!("on")).await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = put_setting(&app, "replicate.discover", json!("sometimes")).await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = put_setting(&app, "replicate.discover", json!("on")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["providers"][P]["discover"], "on");
    assert!(answer["providers"]["fal"].get("discover").is_none(), "{answer}");

    // Newest first, two pages: three predictions created since discovery was turned on (one of
    // them already finished), then one from yesterday, where listing stops: the third page, older
    // still, is never asked for.
    stand.json(
        "list:",
        page(
            vec![listed("new-running", "processing", 3), listed("new-done", "succeeded", 2)],
            Some(format!("{url}/v1/predictions?cursor=p2")),
        ),
    );
    stand.json(
        "list:p2",
        page(vec![listed("new-queued", "starting", 1), listed("yesterday", "succeeded", -86_400)], Some(format!("{url}/v1/predictions?cursor=p3"))),
    );
    stand.json("list:p3", page(vec![listed("older", "succeeded", -2 * 86_400)], None));
    // The discovered unfinished jobs are then polled like any other.
    stand.json("new-running", listed("new-running", "processing", 3));
    stand.json("new-queued", listed("new-queued", "starting", 1));

    let report = app.reconcile().await;
    assert_eq!(report["providers"][P], "ok", "{report}");
    assert_eq!(stand.count("/v1/predictions"), 2, "pages read: {:?}", stand.seen());
    assert_eq!(app.job_now(P, "new-running").await["state"], "running");
    assert_eq!(app.job_now(P, "new-queued").await["state"], "queued");
    let done = app.job_now(P, "new-done").await;
    assert_eq!(done["state"], "succeeded");
    assert_eq!(done["terminal_source"], "pull");
    assert_eq!(done["label"], MODEL);
    assert!(app.job(P, "yesterday").await.is_none(), "a prediction from before discovery was imported");
    assert!(app.job(P, "older").await.is_none());
    assert!(stand.seen().iter().all(|s| header(&s.headers, "authorization") == format!("Bearer {API_KEY}")));

    let metrics = app.metrics().await;
    assert_eq!(metrics["jobs_discovered"], 3, "{metrics}");
    assert_eq!(metrics["notifications_enqueued"], 1, "one notification, for the finished one: {metrics}");
    // Its end was first learned by polling (the listing); no webhook secret is set here, so no
    // webhook was expected: a completion by polling, not a rescue (contract section 3).
    assert_eq!(metrics["reconcile_rescues"], 0, "{metrics}");
    assert_eq!(metrics["poll_only_completions"], 1, "{metrics}");
    assert_eq!(report["rescues"], 0, "{report}");

    // The next pass lists again (the same predictions, and they changed): nothing is counted or
    // notified twice; the running one finished and is notified once.
    stand.json("new-running", listed("new-running", "succeeded", 3));
    stand.json(
        "list:",
        page(vec![listed("new-running", "succeeded", 3), listed("new-done", "succeeded", 2), listed("yesterday", "succeeded", -86_400)], None),
    );
    app.reconcile().await;
    assert_eq!(app.job_now(P, "new-running").await["state"], "succeeded");
    let metrics = app.metrics().await;
    assert_eq!(metrics["jobs_discovered"], 3, "{metrics}");
    assert_eq!(metrics["notifications_enqueued"], 2, "{metrics}");
    assert_eq!((metrics["reconcile_rescues"].as_i64(), metrics["poll_only_completions"].as_i64()), (Some(0), Some(2)), "{metrics}");
    assert_eq!(app.timeline(P, "new-done").await, ["pull:applied:succeeded"], "listing a finished job twice adds nothing");

    // A discovered job takes its webhooks like any other; the webhook that ends it is no rescue.
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    assert_eq!(app.deliver(P, SECRET, "msg_q1", &listed("new-queued", "processing", 1)).await, "applied");
    assert_eq!(app.deliver(P, SECRET, "msg_q2", &listed("new-queued", "succeeded", 1)).await, "applied");
    let job = app.job_now(P, "new-queued").await;
    assert_eq!(job["terminal_source"], "push");
    let metrics = app.metrics().await;
    assert_eq!(
        (metrics["reconcile_rescues"].as_i64(), metrics["poll_only_completions"].as_i64(), metrics["notifications_enqueued"].as_i64()),
        (Some(0), Some(2), Some(3)),
        "{metrics}"
    );

    // A refused key during listing pauses the provider and shows, as for polling.
    stand.answer_everything(Some(Answer::Status(401)));
    app.reconcile().await;
    let health = app.wait_for_health(P, "misconfigured").await;
    assert!(health["message"].as_str().unwrap_or("").contains("401"), "{health}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_never_follows_a_next_page_to_another_host() {
    let app = App::start().await;
    let (stand, url) = stand_in().await;
    // Another host (another port: another origin) that would see the API key if it were followed.
    let (elsewhere, elsewhere_url) = stand_in().await;
    app.configure(P, &url, Some(API_KEY), None).await;
    let (status, answer) = put_setting(&app, "replicate.discover", json!(true)).await;
    assert_eq!(status, 200, "{answer}");

    stand.json("list:", page(vec![listed("p-1", "processing", 2)], Some(format!("{elsewhere_url}/v1/predictions?cursor=x"))));
    elsewhere.json("list:x", page(vec![listed("p-2", "processing", 1)], None));
    let report = app.reconcile().await;
    assert_eq!(elsewhere.seen().len(), 0, "the API key was sent to another host");
    assert_eq!(report["errors"], 1, "{report}");
    assert!(app.job(P, "p-2").await.is_none());
    app.shutdown().await;
}

//! The `replicate` provider end to end: a real engine in-process, signed webhooks over real HTTP,
//! and a local stand-in for Replicate's API (`GET /v1/predictions/{id}`,
//! `GET /v1/webhooks/default/secret`, `GET /v1/predictions` pages with a `next` cursor, Bearer
//! tokens) that answers with prediction objects shaped as Replicate documents them, and can be told
//! to fail.

use crate::harness;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use harness::conformance::fixture;
use harness::faults::*;
use harness::signing::now_secs;
use harness::stand_in::*;
use harness::TestApp;
use nevermiss_engine::api::settings::{OnOff, SettingsView};
use nevermiss_engine::api::ErrorBody;
use nevermiss_engine::provider_health::HealthStatus;
use nevermiss_engine::providers::ProviderContext;
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::store::job::{JobResult, JobState, Outcome, Source};
use serde_json::{json, Value};

const P: &str = "replicate";
pub(crate) const API_KEY: &str = "r8_standin_0123456789abcdef";
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const MODEL: &str = "black-forest-labs/flux-schnell";

/// Replicate's error shape (problem details).
pub(crate) fn error_body(status: u16) -> Value {
    let (title, detail) = match status {
        401 => ("Unauthenticated", "You did not pass a valid authentication token"),
        404 => ("Not found", "The requested resource could not be found."),
        429 => ("Request was throttled.", "Request was throttled. Expected available in 120 seconds."),
        _ => ("Internal server error", "Something went wrong."),
    };
    json!({ "title": title, "detail": detail, "status": status })
}

pub(crate) fn authorized(headers: &HeaderMap) -> bool {
    header(headers, "authorization") == format!("Bearer {API_KEY}")
}

pub(crate) async fn prediction_route(State(stand): State<Arc<StandIn>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    stand.answer(&id, &format!("/v1/predictions/{id}"), &headers, authorized(&headers), error_body).await
}

async fn secret_route(State(stand): State<Arc<StandIn>>, headers: HeaderMap) -> Response {
    stand.answer("secret", "/v1/webhooks/default/secret", &headers, authorized(&headers), error_body).await
}

/// `GET /v1/predictions[?cursor=...]`: the page stored under `list:<cursor>`.
async fn list_route(
    State(stand): State<Arc<StandIn>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let cursor = query.get("cursor").cloned().unwrap_or_default();
    stand.answer(&format!("list:{cursor}"), "/v1/predictions", &headers, authorized(&headers), error_body).await
}

/// The routes of a stand-in for api.replicate.com.
fn routes() -> Router<Arc<StandIn>> {
    Router::new()
        .route("/v1/predictions", get(list_route))
        .route("/v1/predictions/{id}", get(prediction_route))
        .route("/v1/webhooks/default/secret", get(secret_route))
}

/// A prediction object as Replicate's API reference shows it, in `status`, with the times that
/// status has.
pub(crate) fn prediction(id: &str, status: &str) -> Value {
    let created = "2026-11-30T10:00:00.000000Z";
    let started = matches!(status, "processing" | "succeeded" | "failed" | "canceled").then_some("2026-11-30T10:00:01.500000Z");
    let completed = matches!(status, "succeeded" | "failed" | "canceled" | "aborted").then_some("2026-11-30T10:00:04.000000Z");
    fixture("replicate/prediction")
        .id(id)
        .status(status)
        .set("model", MODEL)
        .set("version", "5599ed30703defd1d160a25a63321b4dec97101d98b4674bcc56e41f62f35637")
        .set("input", json!({ "prompt": "an astronaut riding a horse" }))
        .set("logs", if status == "starting" { "" } else { "Using seed: 42\n" })
        .set("output", if status == "succeeded" { json!(["https://replicate.delivery/xezq/output.webp"]) } else { Value::Null })
        .set("error", if status == "failed" { json!("CUDA out of memory") } else { Value::Null })
        .set("created_at", created)
        .set("started_at", started)
        .set("completed_at", completed)
        .set(
            "urls",
            json!({
                "cancel": format!("https://api.replicate.com/v1/predictions/{id}/cancel"),
                "get": format!("https://api.replicate.com/v1/predictions/{id}"),
                "stream": "https://stream.replicate.com/v1/files/abc",
                "web": format!("https://replicate.com/p/{id}")
            }),
        )
        .set("metrics", if status == "succeeded" { json!({ "image_count": 1, "predict_time": 2.5, "total_time": 4.0 }) } else { json!({}) })
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_applied_deduplicated_and_replays_refused() {
    let (mut app, _stand, _url) = start(P, routes, None, Some(SECRET)).await;

    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &prediction("p1", "processing")).await, Outcome::Applied);
    let job = app.api.job_now(P, "p1").await;
    assert_eq!(job.job.state, JobState::Running);
    assert_eq!(job.job.label.as_deref(), Some(MODEL));

    let done = prediction("p1", "succeeded");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_2", &done).await, Outcome::Applied);
    let job = app.api.job_now(P, "p1").await;
    assert_eq!(job.job.state, JobState::Succeeded);
    assert_eq!(job.job.terminal_source, Some(Source::Push));
    assert_eq!(job.job.detail.as_deref(), Some("predicted in 2.5 s"));
    assert_eq!(job.job.finished_at.as_deref(), Some("2026-11-30T10:00:04.000Z"));

    // Replicate retries the final webhook: same webhook-id, a new timestamp, a new signature.
    let body = serde_json::to_vec(&done).unwrap();
    let (status, answer) = app.sw_hook_at(P, SECRET, "msg_2", now_secs() + 1, &body).await;
    assert_eq!((status, answer.outcome), (StatusCode::from_u16(200).unwrap(), Some(Outcome::Duplicate)));

    // An intermediate webhook arriving after the end is stale, never an error.
    assert_eq!(app.sw_deliver(P, SECRET, "msg_3", &prediction("p1", "processing")).await, Outcome::Stale);

    // A correctly signed replay from outside the 5-minute tolerance, and a wrong secret: 401.
    let (status, _) = app.sw_hook_at(P, SECRET, "msg_2", now_secs() - 600, &body).await;
    assert_eq!(status, 401);
    let (status, _) = app.sw_hook_at(P, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_9", now_secs(), &body).await;
    assert_eq!(status, 401);

    // Signed, in a status NeverMiss does not act on: 200 ignored (never a 4xx, which Replicate
    // would retry). Signed but unusable: 200 rejected, the raw request kept.
    let mut odd = prediction("p2", "starting");
    odd["status"] = json!("exploding");
    let (status, answer) = app.sw_hook(P, SECRET, "msg_4", &odd).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Ignored)), "{answer:?}");
    let mut broken = prediction("p2", "starting");
    broken["created_at"] = json!("yesterday");
    let (status, answer) = app.sw_hook(P, SECRET, "msg_5", &broken).await;
    assert_eq!((status, answer.outcome), (StatusCode::OK, Some(Outcome::Rejected)), "{answer:?}");
    let kept = app.api.delivery(P, "msg_5").await.expect("the rejected delivery is kept");
    assert_eq!(kept.status, "rejected");
    assert_eq!(kept.job_id.as_deref(), Some("p2"));
    assert!(kept.reason.as_deref().unwrap().contains("RFC 3339"), "{kept:?}");

    assert_eq!(
        app.api.timeline(P, "p1").await,
        ["push:applied:running", "push:applied:succeeded", "push:duplicate:succeeded", "push:stale:running"]
    );
    let m = app.api.metrics().await.store;
    assert_eq!(
        (m.bad_signatures, m.duplicates, m.stale, m.rejected, m.ignored, m.applied, m.reconcile_rescues),
        (2, 1, 1, 1, 1, 2, 0),
        "{m:?}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_rescues_a_lost_completion() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;

    // The start webhook arrives; the completion webhook never does.
    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &prediction("p1", "processing")).await, Outcome::Applied);

    // An unchanged prediction polled again is not re-applied.
    stand.json("p1", prediction("p1", "processing"));
    app.api.reconcile_unchanged(P).await;

    stand.json("p1", prediction("p1", "succeeded"));
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.counts.rescues, 1, "{report:?}");
    assert_eq!(report.pass.counts.applied, 1);
    assert_eq!(report.pass.providers[P], "ok");

    let job = app.api.job_ended_by_polling(P, "p1", JobState::Succeeded).await;
    assert_eq!(job.job.label.as_deref(), Some(MODEL));
    assert_eq!(job.job.detail.as_deref(), Some("predicted in 2.5 s"));
    assert!(job.job.poll_error.is_none());
    assert_eq!(app.api.timeline(P, "p1").await, ["push:applied:running", "pull:applied:succeeded"]);

    // The request was Replicate's: the prediction's URL, a Bearer token.
    let seen = stand.seen();
    assert!(seen.iter().all(|s| s.path == "/v1/predictions/p1"), "{seen:?}");
    assert!(seen.iter().all(|s| header(&s.headers, "authorization") == format!("Bearer {API_KEY}")));

    // The late final webhook changes nothing; a finished job is not polled again.
    assert_eq!(app.sw_deliver(P, SECRET, "msg_2", &prediction("p1", "succeeded")).await, Outcome::Stale);
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.counts.checked, 0, "{report:?}");

    // A tracked job is polled at once; a failed prediction carries its error.
    stand.json("p2", prediction("p2", "failed"));
    app.api.track_job(P, "p2").await;
    let job = app.api.wait_for_state(P, "p2", JobState::Failed).await;
    assert_eq!(job.job.terminal_source, Some(Source::Pull));
    assert_eq!(job.job.error.as_deref(), Some("CUDA out of memory"));

    let metrics = app.api.metrics().await;
    assert_eq!(metrics.store.reconcile_rescues, 2, "{metrics:?}");
    assert_eq!(metrics.providers[P].status, HealthStatus::Ok);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signing_secret_is_fetched_with_the_api_key() {
    // An API key, no webhook secret.
    let (mut app, stand, url) = start(P, routes, Some(API_KEY), None).await;
    let body = prediction("p1", "processing");

    // Replicate cannot be asked right now: 503, so the sender retries; nothing stored.
    stand.set("secret", Answer::Status(500));
    let (status, answer) = app.sw_hook(P, SECRET, "msg_1", &body).await;
    assert_eq!(status, 503, "{answer:?}");
    assert!(answer.error.as_deref().unwrap().contains("signing secret"), "{answer:?}");
    assert!(app.api.job(P, "p1").await.is_none());
    assert_eq!(stand.count("/v1/webhooks/default/secret"), 1);

    // It can: the secret is fetched once, stored, and used.
    stand.json("secret", json!({ "key": SECRET }));
    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &body).await, Outcome::Applied);
    let services = &app.engine().services;
    assert_eq!(services.secrets.get(P, SecretKind::WebhookSecret).as_deref(), Some(SECRET));
    assert_eq!(app.sw_deliver(P, SECRET, "msg_2", &prediction("p1", "succeeded")).await, Outcome::Applied);
    assert_eq!(stand.count("/v1/webhooks/default/secret"), 2);
    let fetches = stand.seen();
    assert!(fetches.iter().all(|s| header(&s.headers, "authorization") == format!("Bearer {API_KEY}")));

    // A bad signature with the fetched secret is still a bad signature (no refetch).
    let (status, _) = app.sw_hook(P, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_3", &body).await;
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
    let answer = app.http.post(app.api.url("/api/secrets/replicate/fetch")).bearer_auth(&app.api.token).send().await.unwrap();
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
    let (status, _) = app.sw_hook(P, SECRET, "msg_4", &body).await;
    assert_eq!(status, 503);
    assert_eq!(app.api.metrics().await.store.unconfigured_deliveries, 1);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_api_key_pauses_the_provider_and_shows() {
    let (mut app, stand, url) = start(P, routes, Some("r8_revoked"), Some(SECRET)).await;
    stand.json("p1", prediction("p1", "succeeded"));
    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &prediction("p1", "starting")).await, Outcome::Applied);

    // The user fixes the key; a pass on demand tries again at once.
    let report = refused_key_until_fixed(&app, P, &url, "p1", JobState::Queued, (Some(API_KEY), Some(SECRET))).await;
    assert_eq!(report.pass.counts.rescues, 1);
    assert_eq!(app.api.job_now(P, "p1").await.job.terminal_source, Some(Source::Pull));
    assert!(app.api.metrics().await.store.reconcile_errors >= 1, "the refused pass is counted");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_pauses_the_provider_for_its_retry_after() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;
    stand.answer_everything(Some(Answer::RateLimited(vec![("retry-after", "120")])));
    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &prediction("p1", "starting")).await, Outcome::Applied);
    assert_eq!(app.sw_deliver(P, SECRET, "msg_2", &prediction("p2", "starting")).await, Outcome::Applied);

    rate_limited(&app, &stand, P, Duration::from_secs(120), true, &["p1", "p2"]).await;
    for id in ["p1", "p2"] {
        assert_eq!(app.api.job_now(P, id).await.job.state, JobState::Queued);
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_keeps_its_reason_and_the_others_go_on() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;
    // Quick timeouts for this engine only.
    app.set_setting("provider_timeout_secs", "1").await;
    let faults = JobFaults { gone: "gone", bad: "bad", broken: "broken", slow: "slow", fine: "fine", status: 500 };
    faults.arrange(&stand, prediction("slow", "succeeded"), prediction("fine", "succeeded"));
    for (n, id) in faults.ids().into_iter().enumerate() {
        assert_eq!(app.sw_deliver(P, SECRET, &format!("msg_{n}"), &prediction(id, "starting")).await, Outcome::Applied);
    }

    let report = app.api.reconcile().await;
    assert_eq!(report.pass.providers[P], "ok", "{report:?}");
    assert_eq!(report.pass.counts.checked, 5);
    assert_eq!(report.pass.counts.not_found, 1);
    assert_eq!(report.pass.counts.rescues, 1);
    faults.check_jobs(&app.api, P, JobState::Queued).await;

    let metrics = app.api.metrics().await;
    assert_eq!(metrics.store.jobs_not_found, 1, "{metrics:?}");
    assert_eq!(metrics.providers[P].status, HealthStatus::Ok);
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
    // As the SDK's `SyncCursorURLPage` has it.
    json!({ "next": next, "results": results })
}

/// `PUT /api/settings` with one setting, which must be accepted.
async fn put_setting(app: &TestApp, key: &str, value: Value) -> SettingsView {
    app.api.put_settings(&json!({ key: value })).await
}

/// `PUT /api/settings` with one setting, which must be refused.
async fn refused_setting(app: &TestApp, key: &str, value: Value) -> ErrorBody {
    app.api.refused_settings(&json!({ key: value })).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_watches_predictions_started_elsewhere_from_when_it_is_turned_on() {
    let (mut app, stand, url) = start(P, routes, Some(API_KEY), None).await;

    // Off by default: a pass never lists the account's predictions.
    stand.json("list:", page(vec![listed("elsewhere-0", "processing", 5)], None));
    app.api.reconcile().await;
    assert_eq!(stand.count("/v1/predictions"), 0, "discovery listed predictions while off");
    assert!(app.api.job(P, "elsewhere-0").await.is_none());

    // Only the providers that can list their jobs take the setting (fal cannot).
    refused_setting(&app, "fal.discover", json!("on")).await;
    refused_setting(&app, "replicate.discover", json!("sometimes")).await;
    let answer = put_setting(&app, "replicate.discover", json!("on")).await;
    assert_eq!(answer.providers[P].discover, Some(OnOff::On));
    assert!(answer.providers["fal"].discover.is_none(), "{answer:?}");

    // Newest first: three predictions created since discovery was turned on (one of them already
    // finished), then the week before, whose finished predictions are not imported (the first
    // listing after discovery is turned on looks back a week for those still running).
    stand.json(
        "list:",
        page(
            vec![listed("new-running", "processing", 3), listed("new-done", "succeeded", 2)],
            Some(format!("{url}/v1/predictions?cursor=p2")),
        ),
    );
    stand.json(
        "list:p2",
        page(
            vec![listed("new-queued", "starting", 1), listed("yesterday", "succeeded", -86_400)],
            Some(format!("{url}/v1/predictions?cursor=p3")),
        ),
    );
    stand.json("list:p3", page(vec![listed("older", "succeeded", -2 * 86_400)], None));
    // The discovered unfinished jobs are then polled like any other.
    stand.json("new-running", listed("new-running", "processing", 3));
    stand.json("new-queued", listed("new-queued", "starting", 1));

    let report = app.api.reconcile().await;
    assert_eq!(report.pass.providers[P], "ok", "{report:?}");
    assert_eq!(stand.count("/v1/predictions"), 3, "pages read: {:?}", stand.seen());
    assert_eq!(app.api.job_now(P, "new-running").await.job.state, JobState::Running);
    assert_eq!(app.api.job_now(P, "new-queued").await.job.state, JobState::Queued);
    let done = app.api.job_ended_by_polling(P, "new-done", JobState::Succeeded).await;
    assert_eq!(done.job.label.as_deref(), Some(MODEL));
    assert!(app.api.job(P, "yesterday").await.is_none(), "a prediction from before discovery was imported");
    assert!(app.api.job(P, "older").await.is_none());
    assert!(stand.seen().iter().all(|s| header(&s.headers, "authorization") == format!("Bearer {API_KEY}")));

    let metrics = app.api.metrics().await;
    assert_eq!(metrics.store.jobs_discovered, 3, "{metrics:?}");
    assert_eq!(metrics.store.notifications_enqueued, 1, "one notification, for the finished one: {metrics:?}");
    // Its end was first learned by polling (the listing); no webhook secret is set here, so no
    // webhook was expected: a completion by polling, not a rescue (contract §3).
    assert_eq!(metrics.store.reconcile_rescues, 0, "{metrics:?}");
    assert_eq!(metrics.store.poll_only_completions, 1, "{metrics:?}");
    assert_eq!(report.pass.counts.rescues, 0, "{report:?}");

    // The next pass lists again (the same predictions, and they changed): nothing is counted or
    // notified twice; the running one finished and is notified once.
    stand.json("new-running", listed("new-running", "succeeded", 3));
    stand.json(
        "list:",
        page(
            vec![listed("new-running", "succeeded", 3), listed("new-done", "succeeded", 2), listed("yesterday", "succeeded", -86_400)],
            None,
        ),
    );
    app.api.reconcile().await;
    assert_eq!(app.api.job_now(P, "new-running").await.job.state, JobState::Succeeded);
    let metrics = app.api.metrics().await;
    assert_eq!(metrics.store.jobs_discovered, 3, "{metrics:?}");
    assert_eq!(metrics.store.notifications_enqueued, 2, "{metrics:?}");
    assert_eq!((metrics.store.reconcile_rescues, metrics.store.poll_only_completions), (0, 2), "{metrics:?}");
    assert_eq!(app.api.timeline(P, "new-done").await, ["pull:applied:succeeded"], "listing a finished job twice adds nothing");

    // A discovered job takes its webhooks like any other; the webhook that ends it is no rescue.
    app.configure(P, &url, Some(API_KEY), Some(SECRET)).await;
    assert_eq!(app.sw_deliver(P, SECRET, "msg_q1", &listed("new-queued", "processing", 1)).await, Outcome::Applied);
    assert_eq!(app.sw_deliver(P, SECRET, "msg_q2", &listed("new-queued", "succeeded", 1)).await, Outcome::Applied);
    let job = app.api.job_now(P, "new-queued").await;
    assert_eq!(job.job.terminal_source, Some(Source::Push));
    let metrics = app.api.metrics().await;
    assert_eq!(
        (metrics.store.reconcile_rescues, metrics.store.poll_only_completions, metrics.store.notifications_enqueued),
        (0, 2, 3),
        "{metrics:?}"
    );

    // A refused key during listing pauses the provider and shows, as for polling.
    stand.answer_everything(Some(Answer::Status(401)));
    app.api.reconcile().await;
    let health = app.api.wait_for_health(P, HealthStatus::Misconfigured).await;
    assert!(health.message.as_deref().unwrap_or("").contains("401"), "{health:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_never_follows_a_next_page_to_another_host() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), None).await;
    // Another host (another port: another origin) that would see the API key if it were followed.
    let (elsewhere, elsewhere_url) = stand_in(routes).await;
    put_setting(&app, "replicate.discover", json!(true)).await;

    stand.json("list:", page(vec![listed("p-1", "processing", 2)], Some(format!("{elsewhere_url}/v1/predictions?cursor=x"))));
    elsewhere.json("list:x", page(vec![listed("p-2", "processing", 1)], None));
    let report = app.api.reconcile().await;
    assert_eq!(elsewhere.seen().len(), 0, "the API key was sent to another host");
    assert_eq!(report.pass.counts.errors, 1, "{report:?}");
    assert!(app.api.job(P, "p-2").await.is_none());
    app.shutdown().await;
}

/// What an image prediction produced, and its page on replicate.com, are the same whether its end
/// came by webhook or by polling alone (contract §6); a language model's text too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_and_its_page_are_the_same_by_webhook_and_by_polling() {
    let (mut app, stand, _url) = start(P, routes, Some(API_KEY), Some(SECRET)).await;
    const OUTPUT: &str = "https://replicate.delivery/xezq/output.webp";

    assert_eq!(app.sw_deliver(P, SECRET, "msg_1", &prediction("by-hook", "processing")).await, Outcome::Applied);
    assert_eq!(app.api.job_now(P, "by-hook").await.job.result, None, "a running prediction has produced nothing yet");
    assert_eq!(app.sw_deliver(P, SECRET, "msg_2", &prediction("by-hook", "succeeded")).await, Outcome::Applied);
    stand.json("by-poll", prediction("by-poll", "succeeded"));
    app.api.track_job(P, "by-poll").await;
    let polled = app.api.wait_for_state(P, "by-poll", JobState::Succeeded).await;
    let pushed = app.api.job_now(P, "by-hook").await;
    assert_eq!((pushed.job.terminal_source, polled.job.terminal_source), (Some(Source::Push), Some(Source::Pull)));

    let image = JobResult { text: None, urls: vec![OUTPUT.to_owned()], image: Some(OUTPUT.to_owned()) };
    assert_eq!(pushed.job.result.as_ref(), Some(&image), "{pushed:?}");
    assert_eq!(polled.job.result.as_ref(), Some(&image), "{polled:?}");
    assert_eq!(pushed.job.provider_url.as_deref(), Some("https://replicate.com/p/by-hook"));
    assert_eq!(polled.job.provider_url.as_deref(), Some("https://replicate.com/p/by-poll"));

    // A language model's output (a list of tokens) is its text, both ways.
    let tokens = |id: &str| {
        let mut p = prediction(id, "succeeded");
        p["output"] = json!(["Hello", " Alice", "!"]);
        p
    };
    assert_eq!(app.sw_deliver(P, SECRET, "msg_3", &tokens("text-hook")).await, Outcome::Applied);
    stand.json("text-poll", tokens("text-poll"));
    app.api.track_job(P, "text-poll").await;
    let polled = app.api.wait_for_state(P, "text-poll", JobState::Succeeded).await;
    let pushed = app.api.job_now(P, "text-hook").await;
    let text = JobResult { text: Some("Hello Alice!".into()), urls: vec![], image: None };
    assert_eq!(pushed.job.result.as_ref(), Some(&text));
    assert_eq!(polled.job.result.as_ref(), Some(&text));
    app.shutdown().await;
}

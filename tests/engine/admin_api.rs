//! The admin API (contract §3): the token, the Origin check, job paging and filters, job
//! detail, the live event stream, the UI without a token, and the token file's mode.

use crate::harness;
use nevermiss_engine::store::job::{JobState, Outcome, Source};

use std::collections::HashSet;

use harness::{payload, read_sse_until, TestApp, WAIT};
use nevermiss_engine::api::jobs::JobDetail;
use nevermiss_engine::api::status::Health;
use nevermiss_engine::api::ErrorBody;
use nevermiss_engine::store::jobs::JobPage;
use reqwest::StatusCode;
use serde_json::{json, Value};

const PROTECTED: &[&str] = &["/api/jobs", "/api/metrics", "/api/events", "/api/health", "/api/jobs/generic/x"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_call_needs_the_token() {
    let app = TestApp::spawn().await;
    for path in PROTECTED {
        let url = format!("{}{path}", app.api.base);
        let none = app.http.get(&url).send().await.unwrap();
        assert_eq!(none.status(), StatusCode::UNAUTHORIZED, "{path} without a token");
        assert_eq!(none.headers()["www-authenticate"], "Bearer");

        let wrong = app.http.get(&url).bearer_auth("0".repeat(app.api.token.len())).send().await.unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{path} with a wrong token");

        let prefix = app.http.get(&url).bearer_auth(&app.api.token[..app.api.token.len() - 1]).send().await.unwrap();
        assert_eq!(prefix.status(), StatusCode::UNAUTHORIZED, "{path} with a truncated token");

        let not_bearer = app.http.get(&url).header("authorization", format!("Basic {}", app.api.token)).send().await.unwrap();
        assert_eq!(not_bearer.status(), StatusCode::UNAUTHORIZED, "{path} with another scheme");

        let token_in_query = app.http.get(format!("{url}?token={}", app.api.token)).send().await.unwrap();
        assert_eq!(token_in_query.status(), StatusCode::UNAUTHORIZED, "{path} with the token in the query");
    }
    let post = app
        .http
        .post(format!("{}/api/jobs", app.api.base))
        .json(&json!({ "provider": "generic", "job_id": "sneaky" }))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 0, "an unauthorized call changes nothing");

    // The right token works.
    let health: Health = app.api.get("/api/health", StatusCode::OK).await;
    assert!(health.ok);
    assert!(!health.version.is_empty());
    // The empty list, exactly as on the wire.
    let jobs = app.api.get::<Value>("/api/jobs", StatusCode::OK).await;
    assert_eq!(jobs, json!({ "jobs": [], "next_cursor": null }));
    let metrics = app.api.metrics().await;
    let m = &metrics.store;
    for (key, value) in [
        ("deliveries_total", m.deliveries_total),
        ("applied", m.applied),
        ("duplicates", m.duplicates),
        ("stale", m.stale),
        ("bad_signatures", m.bad_signatures),
        ("rejected", m.rejected),
        ("ignored", m.ignored),
        ("reconcile_passes", m.reconcile_passes),
        ("reconcile_rescues", m.reconcile_rescues),
        ("reconcile_errors", m.reconcile_errors),
        ("stuck_alerts", m.stuck_alerts),
        ("notifications_enqueued", m.notifications_enqueued),
        ("notifications_delivered", m.notifications_delivered),
    ] {
        assert_eq!(value, 0, "{key} in {metrics:?}");
    }
    // The gauges are on the wire even when empty.
    let raw = app.api.get::<Value>("/api/metrics", StatusCode::OK).await;
    assert!(raw["jobs_by_state"].is_object());
    assert!(raw.get("last_reconcile_at").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_even_with_the_token() {
    let app = TestApp::spawn().await;
    for origin in ["https://evil.example", "http://127.0.0.1:1", "null", "http://localhost.evil.example"] {
        for path in ["/api/jobs", "/api/metrics"] {
            let response =
                app.http.get(format!("{}{path}", app.api.base)).bearer_auth(&app.api.token).header("origin", origin).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path} from {origin}");
        }
        let response = app
            .http
            .post(format!("{}/api/jobs", app.api.base))
            .bearer_auth(&app.api.token)
            .header("origin", origin)
            .json(&json!({ "provider": "generic", "job_id": "from-evil" }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "POST from {origin}");
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 0);

    // A foreign Host (DNS rebinding) is refused too.
    let response =
        app.http.get(format!("{}/api/jobs", app.api.base)).bearer_auth(&app.api.token).header("host", "evil.example").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN, "a foreign Host");

    // The app's own origin is accepted.
    let own = app.api.base.clone();
    let response = app.http.get(format!("{own}/api/jobs")).bearer_auth(&app.api.token).header("origin", &own).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "the API's own origin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_paged_newest_first_and_each_is_seen_once() {
    let app = TestApp::spawn().await;
    for i in 0..25 {
        let (status, _) = app.track(&format!("page-{i:02}"), None).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/jobs?limit=10&cursor={c}"),
            None => "/api/jobs?limit=10".to_owned(),
        };
        let page: JobPage = app.api.get(&path, StatusCode::OK).await;
        pages.push(page.jobs.len());
        seen.extend(page.jobs.iter().map(|j| j.job_id.clone()));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages.len() <= 3, "paging does not end: {pages:?}");
    }
    assert_eq!(pages, [10, 10, 5]);
    let expected: Vec<String> = (0..25).rev().map(|i| format!("page-{i:02}")).collect();
    assert_eq!(seen, expected, "newest first, each once");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 25);

    // A page that ends exactly at the last job has no next cursor.
    let page = app.api.jobs("limit=25").await;
    assert_eq!(page.jobs.len(), 25);
    assert!(page.next_cursor.is_none());
    assert_eq!(page.jobs[0].state, JobState::Unknown);
    assert!(page.jobs[0].created_at.ends_with('Z'), "RFC 3339 UTC: {:?}", page.jobs[0]);

    // Each job has the contract's fields on the wire, null or not.
    let raw = app.api.get::<Value>("/api/jobs?limit=25", StatusCode::OK).await;
    let job = &raw["jobs"][0];
    for key in ["provider", "job_id", "label", "state", "seq", "created_at", "updated_at", "finished_at", "terminal_source", "notified_at"]
    {
        assert!(job.get(key).is_some(), "{key} in {job}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_filtered_by_state_provider_and_text() {
    let app = TestApp::spawn().await;
    assert_eq!(app.deliver("d-1", "crawl-1", "running", 1).await, Outcome::Applied);
    assert_eq!(app.deliver("d-2", "crawl-2", "succeeded", 1).await, Outcome::Applied);
    assert_eq!(app.deliver("d-3", "train-1", "succeeded", 1).await, Outcome::Applied);
    let mut labelled = payload("d-4", "train-2", "failed", 1);
    labelled["label"] = json!("nightly 100% crawl");
    assert_eq!(app.deliver_json(&labelled).await, Outcome::Applied);
    let response = app.api.raw_post("/api/jobs", &json!({ "provider": "replicate", "job_id": "pred_abc" })).await;
    assert_eq!(response.status(), StatusCode::CREATED);

    let ids = |page: JobPage| -> Vec<String> { page.jobs.into_iter().map(|j| j.job_id).collect() };
    assert_eq!(ids(app.api.jobs("state=succeeded").await), ["train-1", "crawl-2"]);
    assert_eq!(ids(app.api.jobs("state=running").await), ["crawl-1"]);
    assert_eq!(ids(app.api.jobs("state=unknown").await), ["pred_abc"]);
    assert_eq!(ids(app.api.jobs("state=canceled").await), Vec::<String>::new());
    assert_eq!(ids(app.api.jobs("provider=replicate").await), ["pred_abc"]);
    assert_eq!(ids(app.api.jobs("provider=generic").await).len(), 4);
    assert_eq!(ids(app.api.jobs("q=crawl").await), ["train-2", "crawl-2", "crawl-1"], "job id or label");
    assert_eq!(ids(app.api.jobs("q=train&state=failed").await), ["train-2"]);
    assert_eq!(ids(app.api.jobs("q=100%25").await), ["train-2"], "a literal %");
    assert_eq!(ids(app.api.jobs("q=_").await), ["pred_abc"], "a literal _, not a wildcard");
    assert_eq!(ids(app.api.jobs("q=nothing-like-it").await), Vec::<String>::new());
    assert_eq!(ids(app.api.jobs("state=&provider=&q=").await).len(), 5, "empty filters are no filters");

    let response = app.api.raw_get("/api/jobs?state=exploded").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let longest = "x".repeat(nevermiss_engine::api::jobs::MAX_SEARCH_TERM);
    assert_eq!(ids(app.api.jobs(&format!("q={longest}")).await), Vec::<String>::new(), "the longest term is searched");
    let response = app.api.raw_get(&format!("/api/jobs?q={longest}x")).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST, "a longer one is refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_detail_has_the_timeline_and_an_unknown_job_is_404() {
    let app = TestApp::spawn().await;
    let response = app.api.raw_get("/api/jobs/generic/no-such-job").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    response.json::<ErrorBody>().await.expect("a refusal is an ErrorBody");
    assert_eq!(app.api.raw_get("/api/jobs/nosuchprovider/x").await.status(), StatusCode::NOT_FOUND);

    assert_eq!(app.deliver("d-1", "job 1", "running", 1).await, Outcome::Applied);
    assert_eq!(app.deliver("d-1", "job 1", "running", 1).await, Outcome::Duplicate);
    assert_eq!(app.deliver("d-2", "job 1", "succeeded", 2).await, Outcome::Applied);
    let job: JobDetail = app.api.get("/api/jobs/generic/job%201", StatusCode::OK).await;
    assert_eq!(job.job.job_id, "job 1");
    assert_eq!(job.job.state, JobState::Succeeded);
    let timeline = job.timeline;
    assert_eq!(timeline.len(), 3);
    let outcomes: Vec<Outcome> = timeline.iter().map(|e| e.outcome).collect();
    assert_eq!(outcomes, [Outcome::Applied, Outcome::Duplicate, Outcome::Applied], "oldest first");
    for event in &timeline {
        assert_eq!(event.source, Source::Push);
    }
    assert_eq!(timeline[2].state, Some(JobState::Succeeded));
    assert_eq!(timeline[2].seq, Some(2));
    // Each event has the contract's fields on the wire, null or not.
    let raw = app.api.get::<Value>("/api/jobs/generic/job%201", StatusCode::OK).await;
    for event in raw["timeline"].as_array().unwrap() {
        for key in ["at", "delivery_id", "state", "seq", "outcome"] {
            assert!(event.get(key).is_some(), "{key} in {event}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracking_validates_its_input() {
    let app = TestApp::spawn().await;
    for (body, what) in [
        (json!({ "provider": "nosuchprovider", "job_id": "x" }), "an unknown provider"),
        (json!({ "provider": "generic", "job_id": "   " }), "an empty job id"),
        (json!({ "provider": "generic", "job_id": "x".repeat(513) }), "a job id too long"),
        (json!({ "provider": "generic", "job_id": "x", "label": "l".repeat(201) }), "a label too long"),
        (json!({ "provider": "generic" }), "no job id"),
    ] {
        let response = app.api.raw_post("/api/jobs", &body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{what}");
        let refusal: ErrorBody = response.json().await.unwrap_or_else(|e| panic!("{what}: not an ErrorBody: {e}"));
        assert!(!refusal.error.is_empty(), "{what}");
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_a_delivery_as_it_lands() {
    let app = TestApp::spawn().await;
    let mut stream = app.api.raw_get("/api/events").await;
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(stream.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut buffer = String::new();
    read_sse_until(&mut stream, &mut buffer, "hello", "").await;

    assert_eq!(app.deliver("d-sse", "sse-job", "running", 1).await, Outcome::Applied);
    let data = read_sse_until(&mut stream, &mut buffer, "job", "\"sse-job\"").await;
    let change: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(change["type"], "job");
    assert_eq!(change["job"]["job_id"], "sse-job");
    assert_eq!(change["job"]["state"], "running");

    // Counters moved: a metrics snapshot follows.
    let data = read_sse_until(&mut stream, &mut buffer, "metrics", "\"applied\":1").await;
    let change: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(change["metrics"]["deliveries_total"], 1);

    // A job tracked through the API is announced too.
    let (status, _) = app.track("sse-tracked", None).await;
    assert_eq!(status, StatusCode::CREATED);
    read_sse_until(&mut stream, &mut buffer, "job", "\"sse-tracked\"").await;
    drop(stream);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_is_served_without_a_token() {
    let app = TestApp::spawn().await;
    let response = app.http.get(format!("{}/", app.api.base)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(response.headers().get("content-security-policy").is_some());
    let html = response.text().await.unwrap();
    assert!(html.to_ascii_lowercase().contains("<html"), "an HTML page");
    assert!(!html.contains(&app.api.token), "the page never embeds the token");
    // An unknown path outside /api is not the API's 401.
    let response = app.http.get(format!("{}/api/nope", app.api.base)).bearer_auth(&app.api.token).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_file_is_private_and_stable_across_restarts() {
    use std::os::unix::fs::PermissionsExt;
    let mut app = TestApp::spawn().await;
    let path = app.data_dir.join(nevermiss_engine::data_dir::TOKEN_FILE);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "api-token mode is {:o}", mode & 0o777);
    assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), app.api.token);
    assert!(app.api.token.len() >= 32, "a token long enough not to be guessed");

    let before = app.api.token.clone();
    app.restart().await;
    assert_eq!(app.api.token, before, "the token is created once, then read");
    assert!(app.api.get::<Health>("/api/health", StatusCode::OK).await.ok);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_event_stream_ends_when_the_engine_stops() {
    // A UI tab always holds the event stream open; stopping the engine must end it rather than
    // wait on it (the API server would otherwise keep serving after `shutdown` returned).
    let mut app = TestApp::spawn().await;
    let mut stream = app.api.raw_get("/api/events").await;
    let mut buffer = String::new();
    read_sse_until(&mut stream, &mut buffer, "hello", "").await;
    let api = app.api.base.clone();

    app.shutdown().await;
    // Bounded below the client's own timeout, so only the server can end the stream in time.
    let bound = WAIT / 2;
    let ended = tokio::time::timeout(bound, async {
        loop {
            match stream.chunk().await {
                Ok(Some(_)) => continue,
                Ok(None) => return,
                Err(e) => {
                    assert!(!e.is_timeout(), "the client gave up, not the server: {e}");
                    return;
                }
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the event stream is still open {bound:?} after the engine stopped");
    let after = reqwest::Client::new().get(format!("{api}/api/health")).bearer_auth(&app.api.token).send().await;
    assert!(after.is_err(), "the stopped engine's API still answers: {after:?}");
}

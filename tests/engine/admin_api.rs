//! The admin API (contract section 3): the token, the Origin check, job paging and filters, job
//! detail, the live event stream, the UI without a token, and the token file's mode.

use crate::common;

use std::collections::HashSet;

use common::{payload, TestApp, WAIT};
use reqwest::StatusCode;
use serde_json::{json, Value};

const PROTECTED: &[&str] = &["/api/jobs", "/api/metrics", "/api/events", "/api/health", "/api/jobs/generic/x"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_call_needs_the_token() {
    let app = TestApp::spawn().await;
    for path in PROTECTED {
        let url = format!("{}{path}", app.api);
        let none = app.http.get(&url).send().await.unwrap();
        assert_eq!(none.status(), StatusCode::UNAUTHORIZED, "{path} without a token");
        assert_eq!(none.headers()["www-authenticate"], "Bearer");

        let wrong = app.http.get(&url).bearer_auth("0".repeat(app.token.len())).send().await.unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{path} with a wrong token");

        let prefix = app.http.get(&url).bearer_auth(&app.token[..app.token.len() - 1]).send().await.unwrap();
        assert_eq!(prefix.status(), StatusCode::UNAUTHORIZED, "{path} with a truncated token");

        let not_bearer = app.http.get(&url).header("authorization", format!("Basic {}", app.token)).send().await.unwrap();
        assert_eq!(not_bearer.status(), StatusCode::UNAUTHORIZED, "{path} with another scheme");

        let token_in_query = app.http.get(format!("{url}?token={}", app.token)).send().await.unwrap();
        assert_eq!(token_in_query.status(), StatusCode::UNAUTHORIZED, "{path} with the token in the query");
    }
    let post = app
        .http
        .post(format!("{}/api/jobs", app.api))
        .json(&json!({ "provider": "generic", "job_id": "sneaky" }))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 0, "an unauthorized call changes nothing");

    // The right token works.
    let health = app.api_json("/api/health").await;
    assert_eq!(health["ok"], true);
    assert!(health["version"].is_string());
    let jobs = app.api_json("/api/jobs").await;
    assert_eq!(jobs, json!({ "jobs": [], "next_cursor": null }));
    let metrics = app.metrics().await;
    for key in [
        "deliveries_total", "applied", "duplicates", "stale", "bad_signatures", "rejected", "ignored", "reconcile_passes",
        "reconcile_rescues", "reconcile_errors", "stuck_alerts", "notifications_enqueued", "notifications_delivered",
    ] {
        assert_eq!(metrics[key], 0, "{key} in {metrics}");
    }
    assert!(metrics["jobs_by_state"].is_object());
    assert!(metrics.get("last_reconcile_at").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_even_with_the_token() {
    let app = TestApp::spawn().await;
    for origin in ["https://evil.example", "http://127.0.0.1:1", "null", "http://localhost.evil.example"] {
        for path in ["/api/jobs", "/api/metrics"] {
            let response = app
                .http
                .get(format!("{}{path}", app.api))
                .bearer_auth(&app.token)
                .header("origin", origin)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path} from {origin}");
        }
        let response = app
            .http
            .post(format!("{}/api/jobs", app.api))
            .bearer_auth(&app.token)
            .header("origin", origin)
            .json(&json!({ "provider": "generic", "job_id": "from-evil" }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "POST from {origin}");
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 0);

    // A foreign Host (DNS rebinding) is refused too.
    let response = app
        .http
        .get(format!("{}/api/jobs", app.api))
        .bearer_auth(&app.token)
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN, "a foreign Host");

    // The app's own origin is accepted.
    let own = app.api.clone();
    let response = app.http.get(format!("{own}/api/jobs")).bearer_auth(&app.token).header("origin", &own).send().await.unwrap();
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
        let page = app.api_json(&path).await;
        let jobs = page["jobs"].as_array().unwrap();
        pages.push(jobs.len());
        seen.extend(jobs.iter().map(|j| j["job_id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert!(page["next_cursor"].is_null());
                break;
            }
        }
        assert!(pages.len() <= 3, "paging does not end: {pages:?}");
    }
    assert_eq!(pages, [10, 10, 5]);
    let expected: Vec<String> = (0..25).rev().map(|i| format!("page-{i:02}")).collect();
    assert_eq!(seen, expected, "newest first, each once");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 25);

    // A page that ends exactly at the last job has no next cursor.
    let page = app.api_json("/api/jobs?limit=25").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 25);
    assert!(page["next_cursor"].is_null());

    // Each job has the contract's fields.
    let job = &page["jobs"][0];
    for key in ["provider", "job_id", "label", "state", "seq", "created_at", "updated_at", "finished_at", "terminal_source", "notified_at"] {
        assert!(job.get(key).is_some(), "{key} in {job}");
    }
    assert_eq!(job["state"], "unknown");
    assert!(job["created_at"].as_str().unwrap().ends_with('Z'), "RFC 3339 UTC: {job}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_filtered_by_state_provider_and_text() {
    let app = TestApp::spawn().await;
    assert_eq!(app.deliver("d-1", "crawl-1", "running", 1).await, "applied");
    assert_eq!(app.deliver("d-2", "crawl-2", "succeeded", 1).await, "applied");
    assert_eq!(app.deliver("d-3", "train-1", "succeeded", 1).await, "applied");
    let mut labelled = payload("d-4", "train-2", "failed", 1);
    labelled["label"] = json!("nightly 100% crawl");
    assert_eq!(app.deliver_json(&labelled).await, "applied");
    let response = app.api_post("/api/jobs", &json!({ "provider": "replicate", "job_id": "pred_abc" })).await;
    assert_eq!(response.status(), StatusCode::CREATED);

    let ids = |page: Value| -> Vec<String> {
        page["jobs"].as_array().unwrap().iter().map(|j| j["job_id"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(ids(app.api_json("/api/jobs?state=succeeded").await), ["train-1", "crawl-2"]);
    assert_eq!(ids(app.api_json("/api/jobs?state=running").await), ["crawl-1"]);
    assert_eq!(ids(app.api_json("/api/jobs?state=unknown").await), ["pred_abc"]);
    assert_eq!(ids(app.api_json("/api/jobs?state=canceled").await), Vec::<String>::new());
    assert_eq!(ids(app.api_json("/api/jobs?provider=replicate").await), ["pred_abc"]);
    assert_eq!(ids(app.api_json("/api/jobs?provider=generic").await).len(), 4);
    assert_eq!(ids(app.api_json("/api/jobs?q=crawl").await), ["train-2", "crawl-2", "crawl-1"], "job id or label");
    assert_eq!(ids(app.api_json("/api/jobs?q=train&state=failed").await), ["train-2"]);
    assert_eq!(ids(app.api_json("/api/jobs?q=100%25").await), ["train-2"], "a literal %");
    assert_eq!(ids(app.api_json("/api/jobs?q=_").await), ["pred_abc"], "a literal _, not a wildcard");
    assert_eq!(ids(app.api_json("/api/jobs?q=nothing-like-it").await), Vec::<String>::new());
    assert_eq!(ids(app.api_json("/api/jobs?state=&provider=&q=").await).len(), 5, "empty filters are no filters");

    let response = app.api_get("/api/jobs?state=exploded").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_detail_has_the_timeline_and_an_unknown_job_is_404() {
    let app = TestApp::spawn().await;
    let response = app.api_get("/api/jobs/generic/no-such-job").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.json::<Value>().await.unwrap()["error"].is_string());
    assert_eq!(app.api_get("/api/jobs/nosuchprovider/x").await.status(), StatusCode::NOT_FOUND);

    assert_eq!(app.deliver("d-1", "job 1", "running", 1).await, "applied");
    assert_eq!(app.deliver("d-1", "job 1", "running", 1).await, "duplicate");
    assert_eq!(app.deliver("d-2", "job 1", "succeeded", 2).await, "applied");
    let job = app.api_json("/api/jobs/generic/job%201").await;
    assert_eq!(job["job_id"], "job 1");
    assert_eq!(job["state"], "succeeded");
    let timeline = job["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), 3);
    let outcomes: Vec<&str> = timeline.iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["applied", "duplicate", "applied"], "oldest first");
    for event in timeline {
        assert_eq!(event["source"], "push");
        for key in ["at", "delivery_id", "state", "seq", "outcome"] {
            assert!(event.get(key).is_some(), "{key} in {event}");
        }
    }
    assert_eq!(timeline[2]["state"], "succeeded");
    assert_eq!(timeline[2]["seq"], 2);
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
        let response = app.api_post("/api/jobs", &body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{what}");
        assert!(response.json::<Value>().await.unwrap()["error"].is_string(), "{what}");
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs"), 0);
}

/// Reads server-sent events until one named `event` whose data contains `needle`; bounded.
async fn read_sse_until(response: &mut reqwest::Response, buffer: &mut String, event: &str, needle: &str) -> String {
    let found = tokio::time::timeout(WAIT, async {
        loop {
            // Complete events end with a blank line.
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event:")).map(str::trim);
                let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
                if name == Some(event) && data.contains(needle) {
                    return data;
                }
            }
            match response.chunk().await.expect("the stream stays open") {
                Some(bytes) => buffer.push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n")),
                None => panic!("the event stream ended while waiting for `{event}` with {needle:?}"),
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no `{event}` event with {needle:?} within {WAIT:?}; unparsed: {buffer:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_a_delivery_as_it_lands() {
    let app = TestApp::spawn().await;
    let mut stream = app.api_get("/api/events").await;
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(stream.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut buffer = String::new();
    read_sse_until(&mut stream, &mut buffer, "hello", "").await;

    assert_eq!(app.deliver("d-sse", "sse-job", "running", 1).await, "applied");
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
    let response = app.http.get(format!("{}/", app.api)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(response.headers().get("content-security-policy").is_some());
    let html = response.text().await.unwrap();
    assert!(html.to_ascii_lowercase().contains("<html"), "an HTML page");
    assert!(!html.contains(&app.token), "the page never embeds the token");
    // An unknown path outside /api is not the API's 401.
    let response = app.http.get(format!("{}/api/nope", app.api)).bearer_auth(&app.token).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_file_is_private_and_stable_across_restarts() {
    use std::os::unix::fs::PermissionsExt;
    let mut app = TestApp::spawn().await;
    let path = app.data_dir.join(nevermiss_engine::engine::TOKEN_FILE);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "api-token mode is {:o}", mode & 0o777);
    assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), app.token);
    assert!(app.token.len() >= 32, "a token long enough not to be guessed");

    let before = app.token.clone();
    app.restart().await;
    assert_eq!(app.token, before, "the token is created once, then read");
    assert_eq!(app.api_json("/api/health").await["ok"], true);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_event_stream_ends_when_the_engine_stops() {
    // A UI tab always holds the event stream open; stopping the engine must end it rather than
    // wait on it (the API server would otherwise keep serving after `shutdown` returned).
    let mut app = TestApp::spawn().await;
    let mut stream = app.api_get("/api/events").await;
    let mut buffer = String::new();
    read_sse_until(&mut stream, &mut buffer, "hello", "").await;
    let api = app.api.clone();

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
    let after = reqwest::Client::new().get(format!("{api}/api/health")).bearer_auth(&app.token).send().await;
    assert!(after.is_err(), "the stopped engine's API still answers: {after:?}");
}

//! A typed client for the admin API (svix's `TestClient`): the caller names the status it expects
//! and the type to read the answer as (the API's own types; `ErrorBody` for a refusal). Used
//! alike for an in-process engine, a `nevermiss serve` child and the chaos scenario. Every answer
//! it reads is held to the API's OpenAPI document (`api_document`).

use std::time::Duration;

use nevermiss_engine::api::channels::{Channel, ChannelList, ChannelTestResult};
pub use nevermiss_engine::api::jobs::JobDetail;
use nevermiss_engine::api::jobs::{PollAnswer, TrackRequest};
use nevermiss_engine::api::settings::SettingsView;
use nevermiss_engine::api::setup::SecretsView;
use nevermiss_engine::api::ErrorBody;
use nevermiss_engine::metrics::Metrics;
use nevermiss_engine::provider_health::{HealthStatus, ProviderHealth};
use nevermiss_engine::reconcile::PassReport;
use nevermiss_engine::store::deliveries::StoredDelivery;
use nevermiss_engine::store::job::{Job, JobState, Source};
use nevermiss_engine::store::jobs::JobPage;
use nevermiss_engine::tunnel::self_test::SelfTestReport;
use nevermiss_engine::tunnel::TunnelState;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::waiting::{wait_for, WAIT};

/// The admin API of one running engine: its base URL, its token, one keep-alive client.
#[derive(Clone)]
pub struct ApiClient {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub token: String,
    pub http: reqwest::Client,
}

/// The client every harness uses: bounded, keep-alive, no proxy (loopback only).
pub fn http_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(timeout).pool_idle_timeout(Duration::from_secs(30)).build().unwrap()
}

impl ApiClient {
    pub fn new(base: impl Into<String>, token: impl Into<String>) -> ApiClient {
        ApiClient::with_client(base, token, http_client(WAIT))
    }

    pub fn with_client(base: impl Into<String>, token: impl Into<String>, http: reqwest::Client) -> ApiClient {
        ApiClient { base: base.into(), token: token.into(), http }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request to `path` with the token, not sent yet.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(&self.token)
    }

    /// Sends `method path` (with a JSON body when given); the raw response.
    pub async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> reqwest::Response {
        let mut request = self.request(method.clone(), path);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        super::api_document::checked(&method, path, response).await
    }

    /// Sends `method path`, asserts the status is `expected`, reads the answer as `T`.
    pub async fn call<T: DeserializeOwned>(&self, method: Method, path: &str, body: Option<&Value>, expected: StatusCode) -> T {
        let response = self.send(method.clone(), path, body).await;
        read_as(response, expected, &format!("{method} {path}")).await
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str, expected: StatusCode) -> T {
        self.call(Method::GET, path, None, expected).await
    }

    /// `GET path`: 200 and its answer, or `None` on 404.
    pub async fn get_if_found<T: DeserializeOwned>(&self, path: &str) -> Option<T> {
        let response = self.raw_get(path).await;
        match response.status() {
            StatusCode::NOT_FOUND => None,
            _ => Some(read_as(response, StatusCode::OK, &format!("GET {path}")).await),
        }
    }

    pub async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize, expected: StatusCode) -> T {
        let body = serde_json::to_value(body).unwrap();
        self.call(Method::POST, path, Some(&body), expected).await
    }

    pub async fn put<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize, expected: StatusCode) -> T {
        let body = serde_json::to_value(body).unwrap();
        self.call(Method::PUT, path, Some(&body), expected).await
    }

    pub async fn raw_get(&self, path: &str) -> reqwest::Response {
        self.send(Method::GET, path, None).await
    }

    pub async fn raw_post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.send(Method::POST, path, Some(body)).await
    }

    pub async fn raw_put(&self, path: &str, body: &Value) -> reqwest::Response {
        self.send(Method::PUT, path, Some(body)).await
    }

    // ----- the calls every suite makes -----

    /// `GET /api/jobs/{provider}/{job_id}`: the job and its timeline, `None` on 404.
    pub async fn job(&self, provider: &str, job_id: &str) -> Option<JobDetail> {
        self.get_if_found(&format!("/api/jobs/{provider}/{}", urlencode(job_id))).await
    }

    /// The job, which must exist.
    pub async fn job_now(&self, provider: &str, job_id: &str) -> JobDetail {
        self.job(provider, job_id).await.unwrap_or_else(|| panic!("no job {provider}/{job_id}"))
    }

    /// The job, which must have ended in `state` by polling (the pull path).
    pub async fn job_ended_by_polling(&self, provider: &str, job_id: &str, state: JobState) -> JobDetail {
        let job = self.job_now(provider, job_id).await;
        assert_eq!((job.job.state, job.job.terminal_source), (state, Some(Source::Pull)), "{job:?}");
        job
    }

    /// `GET /api/jobs?{query}` (`query` without the `?`, may be empty).
    pub async fn jobs(&self, query: &str) -> JobPage {
        let path = if query.is_empty() { "/api/jobs".to_owned() } else { format!("/api/jobs?{query}") };
        self.get(&path, StatusCode::OK).await
    }

    /// `POST /api/jobs`: 201 (new) or 200 (already tracked) and the job.
    pub async fn track(&self, request: &TrackRequest) -> (StatusCode, Job) {
        let body = serde_json::to_value(request).unwrap();
        let response = self.send(Method::POST, "/api/jobs", Some(&body)).await;
        let status = response.status();
        assert!(status == StatusCode::CREATED || status == StatusCode::OK, "tracking {body}: {status}");
        (status, read_as(response, status, "POST /api/jobs").await)
    }

    /// Tracks `provider/job_id` with nothing else said.
    pub async fn track_job(&self, provider: &str, job_id: &str) -> (StatusCode, Job) {
        self.track(&TrackRequest { provider: provider.into(), job_id: job_id.into(), ..TrackRequest::default() }).await
    }

    /// `POST /api/jobs/{provider}/{job_id}/poll`.
    pub async fn poll_now(&self, provider: &str, job_id: &str) -> PollAnswer {
        self.post(&format!("/api/jobs/{provider}/{}/poll", urlencode(job_id)), &json!({}), StatusCode::OK).await
    }

    /// `POST /api/reconcile`: one pass now; its report.
    pub async fn reconcile(&self) -> PassReport {
        self.post("/api/reconcile", &json!({}), StatusCode::OK).await
    }

    /// One pass over one tracked job its provider answers unchanged: asked about, not applied
    /// again, the provider `ok`.
    pub async fn reconcile_unchanged(&self, provider: &str) -> PassReport {
        let report = self.reconcile().await;
        assert_eq!((report.pass.counts.checked, report.pass.counts.applied), (1, 0), "{report:?}");
        assert_eq!(report.pass.providers[provider], "ok", "{report:?}");
        report
    }

    /// `GET /api/metrics`.
    pub async fn metrics(&self) -> Metrics {
        self.get("/api/metrics", StatusCode::OK).await
    }

    /// `GET /api/deliveries/{provider}/{delivery_id}`, `None` on 404.
    pub async fn delivery(&self, provider: &str, delivery_id: &str) -> Option<StoredDelivery> {
        self.get_if_found(&format!("/api/deliveries/{provider}/{}", urlencode(delivery_id))).await
    }

    /// `GET /api/settings`.
    pub async fn settings(&self) -> SettingsView {
        self.get("/api/settings", StatusCode::OK).await
    }

    /// `PUT /api/settings` with `changes`, which must be accepted.
    pub async fn put_settings(&self, changes: &Value) -> SettingsView {
        self.put("/api/settings", changes, StatusCode::OK).await
    }

    /// `PUT /api/settings` with `changes`, which must be refused with 400.
    pub async fn refused_settings(&self, changes: &Value) -> ErrorBody {
        self.put("/api/settings", changes, StatusCode::BAD_REQUEST).await
    }

    /// `PUT /api/channels/{name}`, which must be accepted.
    pub async fn put_channel(&self, name: &str, body: &Value) -> Channel {
        self.put(&format!("/api/channels/{name}"), body, StatusCode::OK).await
    }

    /// `PUT /api/channels/{name}`, which must be refused with 400.
    pub async fn refused_channel(&self, name: &str, body: &Value) -> ErrorBody {
        self.put(&format!("/api/channels/{name}"), body, StatusCode::BAD_REQUEST).await
    }

    /// The desktop channel announces every finished job on its own, however many are due at
    /// once (no summary): for the suites that count one notification per job.
    pub async fn never_summarize(&self) -> Channel {
        self.put_channel("desktop", &json!({"kind": "desktop", "summary_after": 0})).await
    }

    /// `GET /api/channels`, the one named.
    pub async fn channel(&self, name: &str) -> Channel {
        let list: ChannelList = self.get("/api/channels", StatusCode::OK).await;
        list.channels.into_iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no channel {name:?}"))
    }

    /// `POST /api/channels/{name}/test`.
    pub async fn test_channel(&self, name: &str) -> ChannelTestResult {
        self.post(&format!("/api/channels/{name}/test"), &json!({}), StatusCode::OK).await
    }

    /// `PUT /api/secrets/{provider}`, which must be accepted.
    pub async fn put_secrets(&self, provider: &str, secrets: &Value) -> SecretsView {
        self.put(&format!("/api/secrets/{provider}"), secrets, StatusCode::OK).await
    }

    /// `GET /api/tunnel`.
    pub async fn tunnel(&self) -> TunnelState {
        self.get("/api/tunnel", StatusCode::OK).await
    }

    /// `POST /api/tunnel/test`: the report.
    pub async fn tunnel_self_test(&self) -> SelfTestReport {
        self.post("/api/tunnel/test", &json!({}), StatusCode::OK).await
    }

    // ----- waits over the API -----

    /// Waits until the job exists and `check` holds for it; returns it.
    pub async fn wait_for_job(&self, provider: &str, job_id: &str, what: &str, check: impl Fn(&JobDetail) -> bool) -> JobDetail {
        wait_for(&format!("{provider}/{job_id}: {what}"), || async { self.job(provider, job_id).await.filter(|job| check(job)) }).await
    }

    /// Waits until a job is in `state`.
    pub async fn wait_for_state(&self, provider: &str, job_id: &str, state: nevermiss_engine::store::job::JobState) -> JobDetail {
        self.wait_for_job(provider, job_id, &format!("state is {state:?}"), |j| j.job.state == state).await
    }

    /// Waits until a job's last poll failed with a reason containing `text`.
    pub async fn wait_for_poll_error(&self, provider: &str, job_id: &str, text: &str) -> JobDetail {
        self.wait_for_job(provider, job_id, &format!("poll_error mentions {text:?}"), |j| {
            j.job.poll_error.as_deref().is_some_and(|e| e.contains(text))
        })
        .await
    }

    /// Waits until the metrics show `provider`'s polling health as `status`; returns that entry.
    pub async fn wait_for_health(&self, provider: &str, status: HealthStatus) -> ProviderHealth {
        wait_for(&format!("{provider}'s polling health is {status:?}"), || async {
            self.metrics().await.providers.get(provider).filter(|h| h.status == status).cloned()
        })
        .await
    }

    /// The outcomes of a job's timeline, oldest first, as `source:outcome:state`.
    pub async fn timeline(&self, provider: &str, job_id: &str) -> Vec<String> {
        self.job_now(provider, job_id).await.timeline.iter().map(timeline_entry).collect()
    }
}

/// One timeline event as `source:outcome:state` (`-` without a state).
pub fn timeline_entry(e: &nevermiss_engine::store::job::TimelineEvent) -> String {
    format!("{}:{}:{}", e.source.as_str(), e.outcome.as_str(), e.state.map_or("-", |s| s.as_str()))
}

/// The length of a paused provider's pause (`paused_until - since`, both taken at the same
/// instant when the pause began).
pub fn pause_of(health: &ProviderHealth) -> Duration {
    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis();
    let until = health.paused_until.as_deref().unwrap_or_else(|| panic!("no paused_until in {health:?}"));
    Duration::from_millis((at(until) - at(&health.since)) as u64)
}

/// Reads a response as `T` after checking its status; the text is in every panic.
pub async fn read_as<T: DeserializeOwned>(response: reqwest::Response, expected: StatusCode, what: &str) -> T {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    assert_eq!(status, expected, "{what} was answered {status}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: the answer is not a {} ({e}): {text}", std::any::type_name::<T>()))
}

/// A path segment, percent-encoded (job ids may hold spaces).
pub fn urlencode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Reads server-sent events until one named `event` whose data contains `needle`; bounded.
pub async fn read_sse_until(response: &mut reqwest::Response, buffer: &mut String, event: &str, needle: &str) -> String {
    let found = tokio::time::timeout(super::WAIT, async {
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

/// A route of the API's table (`/jobs/{provider}/{job_id}`) with each parameter filled in, to call
/// it: `/api/jobs/generic/nm-probe`.
pub fn concrete_route(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').expect("a closed parameter") + open;
        out.push_str(if &rest[open..=close] == "{provider}" { "generic" } else { "nm-probe" });
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    format!("/api{out}")
}

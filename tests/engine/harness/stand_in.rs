//! A local stand-in for a provider's API, programmable per test: what to answer per key (a job
//! id, a route name), an override for everything (401, 429), every request seen; the answer
//! rendered with the provider's own error shape; served on `127.0.0.1:0`. Each provider suite
//! builds its routes on it, shaped as that provider's documentation shows, and starts its tests
//! with `start` (the faults they all play are in `faults`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::app::TestApp;

/// How long the stand-in's slow answer takes: well past the 1 s request timeout the timeout tests
/// configure, well under the harness's own client timeout.
pub const SLOW: Duration = Duration::from_secs(8);

/// The text a job's `poll_error` holds after a 404.
pub const NOT_FOUND: &str = "the provider does not know this job (404)";

/// What a stand-in answers for one job (or for everything, as an override).
#[derive(Debug, Clone)]
pub enum Answer {
    /// 200 with this JSON body.
    Json(Value),
    /// This status with this JSON body.
    JsonStatus(u16, Value),
    /// This status with a provider-shaped error body.
    Status(u16),
    /// 429 with these extra headers (e.g. `retry-after`).
    RateLimited(Vec<(&'static str, &'static str)>),
    /// The JSON body, but only after `SLOW`.
    Slow(Value),
    /// 200 with a body that is not JSON.
    Garbage,
    /// 200 with this JSON body, off the SDKs' spec on purpose (the reason), which the judge lists
    /// instead of failing (`conformance`).
    OffSpec(Value, &'static str),
}

/// One request a stand-in saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: HeaderMap,
}

/// A stand-in's programmable state: answers per key (a job id, or a route name), an optional
/// override for every request, and every request seen.
#[derive(Default)]
pub struct StandIn {
    answers: Mutex<HashMap<String, Answer>>,
    everything: Mutex<Option<Answer>>,
    seen: Mutex<Vec<Seen>>,
}

impl StandIn {
    pub fn new() -> Arc<StandIn> {
        Arc::new(StandIn::default())
    }

    pub fn set(&self, key: &str, answer: Answer) {
        self.answers.lock().unwrap().insert(key.to_owned(), answer);
    }

    pub fn json(&self, key: &str, body: Value) {
        self.set(key, Answer::Json(body));
    }

    /// Every request gets `answer` (e.g. 401, 429) until cleared with `None`.
    pub fn answer_everything(&self, answer: Option<Answer>) {
        *self.everything.lock().unwrap() = answer;
    }

    /// Records a request; returns what to answer for `key` (`None`: 404).
    pub fn take(&self, key: &str, path: &str, headers: &HeaderMap) -> Option<Answer> {
        self.seen.lock().unwrap().push(Seen { path: path.to_owned(), headers: headers.clone() });
        if let Some(answer) = self.everything.lock().unwrap().clone() {
            return Some(answer);
        }
        self.answers.lock().unwrap().get(key).cloned()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests seen whose path ends with `suffix`.
    pub fn count(&self, suffix: &str) -> usize {
        self.seen.lock().unwrap().iter().filter(|s| s.path.ends_with(suffix)).count()
    }
}

impl StandIn {
    /// The route handlers' common step: records the request, refuses it with 401 (in the
    /// provider's error shape) unless `authorized`, else answers what is set for `key`.
    pub async fn answer(
        &self,
        key: &str,
        path: &str,
        headers: &HeaderMap,
        authorized: bool,
        error_body: impl Fn(u16) -> Value,
    ) -> Response {
        let answer = self.take(key, path, headers);
        if !authorized {
            return (StatusCode::UNAUTHORIZED, axum::Json(error_body(401))).into_response();
        }
        respond(answer, error_body).await
    }
}

impl StandIn {
    /// A cancel request for job `id`, recorded as `method_and_path` (`POST /v1/.../cancel`: the
    /// route answers only its own method, so one seen is one made with it); `refusal` is the
    /// provider's answer to a request without the right headers. Answers what is set for
    /// `cancel:{id}`; once that is a 200, the job's own answer becomes what is set for
    /// `canceled:{id}`: the provider flipped the job, and the next poll finds it. Any 2xx is an
    /// acceptance (fal answers 202).
    pub async fn cancel(
        &self,
        id: &str,
        method_and_path: &str,
        headers: &HeaderMap,
        refusal: Option<Response>,
        error_body: impl Fn(u16) -> Value,
    ) -> Response {
        let answer = self.take(&format!("cancel:{id}"), method_and_path, headers);
        if let Some(refused) = refusal {
            return refused;
        }
        if matches!(answer, Some(Answer::Json(_))) || matches!(answer, Some(Answer::JsonStatus(code, _)) if (200..300).contains(&code)) {
            let after = self.answers.lock().unwrap().get(&format!("canceled:{id}")).cloned();
            if let Some(after) = after {
                self.set(id, after);
            }
        }
        respond(answer, error_body).await
    }
}

/// Turns an answer into the HTTP response; `error_body` shapes the provider's error JSON.
pub async fn respond(answer: Option<Answer>, error_body: impl Fn(u16) -> Value) -> Response {
    match answer {
        None => (StatusCode::NOT_FOUND, axum::Json(error_body(404))).into_response(),
        Some(Answer::Json(body)) => axum::Json(body).into_response(),
        Some(Answer::JsonStatus(code, body)) => (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response(),
        Some(Answer::Status(code)) => {
            let status = StatusCode::from_u16(code).unwrap();
            (status, axum::Json(error_body(code))).into_response()
        }
        Some(Answer::RateLimited(headers)) => {
            let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(error_body(429))).into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
        Some(Answer::Slow(body)) => {
            tokio::time::sleep(SLOW).await;
            axum::Json(body).into_response()
        }
        Some(Answer::OffSpec(body, why)) => super::conformance::off_spec(axum::Json(body).into_response(), why),
        Some(Answer::Garbage) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            "{\"id\": \"truncated", // cut off mid-answer
        )
            .into_response(),
    }
}

/// A provider suite's routes over the stand-in's state, shaped as that provider's API.
pub type Routes = fn() -> axum::Router<Arc<StandIn>>;

/// A new stand-in serving `routes`; returns its state and base URL.
pub async fn stand_in(routes: Routes) -> (Arc<StandIn>, String) {
    let stand = StandIn::new();
    let url = serve(routes().with_state(stand.clone())).await;
    (stand, url)
}

/// The start of a provider suite's test: an engine whose `provider` is pointed at a new stand-in
/// serving `routes`, with `api_key` and `webhook_secret` set (or not); returns the engine, the
/// stand-in's state and its base URL.
pub async fn start(provider: &str, routes: Routes, api_key: Option<&str>, webhook_secret: Option<&str>) -> (TestApp, Arc<StandIn>, String) {
    start_on(super::app::Backend::of_this_run(), provider, routes, api_key, webhook_secret).await
}

/// As `start`, on `backend`.
pub async fn start_on(
    backend: super::app::Backend,
    provider: &str,
    routes: Routes,
    api_key: Option<&str>,
    webhook_secret: Option<&str>,
) -> (TestApp, Arc<StandIn>, String) {
    let app = TestApp::spawn_on(backend).await;
    let (stand, url) = stand_in(routes).await;
    app.configure(provider, &url, api_key, webhook_secret).await;
    (app, stand, url)
}

/// Serves `router` on `127.0.0.1:0`; returns its base URL (`http://127.0.0.1:PORT`). Every
/// answer it gives is logged for the SDKs' judge (`conformance::record_served`).
pub async fn serve(router: axum::Router) -> String {
    let router = router.layer(axum::middleware::from_fn(super::conformance::record_served));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    url
}

/// Serves `router` like `serve`, without logging its answers for the SDKs' judge: for an API whose
/// SDK the judge does not hold (a made-up provider a recipe is written for; the recipes' own SDK
/// checks are their unit tests, `providers::recipe`).
pub async fn serve_unjudged(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    url
}

/// The requests a stand-in is answering right now (one that hangs until the engine gives up on
/// it, one whose body drips): each counts from `enter` until its guard is dropped, when the
/// answer ends or the engine hangs up.
#[derive(Default)]
pub struct InFlight(Arc<std::sync::atomic::AtomicI64>);

/// One request in flight, counted while it lives.
pub struct Entered(Arc<std::sync::atomic::AtomicI64>);

impl InFlight {
    pub fn enter(&self) -> Entered {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Entered(self.0.clone())
    }

    /// How many are in flight now.
    pub fn now(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A header's value as text (empty when absent).
pub fn header(headers: &HeaderMap, name: &str) -> String {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
}

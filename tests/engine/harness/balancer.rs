//! A small round-robin HTTP load balancer in front of a fleet's receivers, as a user runs one
//! (nginx, HAProxy, a cloud load balancer): each request (method, path and query, headers, body)
//! goes to the next backend in turn that is not known to be down, and its answer comes back as
//! is. When the chosen backend does not answer (refused, reset, killed mid-request), the request
//! is answered 502 and that backend is skipped for a moment (a passive health check); the sender
//! retries, as senders of webhooks do on a 5xx. Nothing is retried here: a request a backend may
//! have half-handled is the sender's to send again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

/// How long a backend that failed a request is skipped.
const DOWN_FOR: Duration = Duration::from_millis(500);
/// Hop-by-hop headers (RFC 9110 section 7.6.1) and those the client recomputes: not forwarded.
const HOP_BY_HOP: [&str; 8] =
    ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "content-length"];

pub struct Balancer {
    /// `http://127.0.0.1:PORT`, what senders target.
    pub url: String,
    pub stats: Arc<BalancerStats>,
    shutdown: tokio_util::sync::CancellationToken,
}

#[derive(Default)]
pub struct BalancerStats {
    /// Requests forwarded to each backend (answered by it, whatever the status).
    pub answered: Vec<AtomicU64>,
    /// Requests answered 502 because the chosen backend did not answer.
    pub bad_gateway: AtomicU64,
}

struct Shared {
    backends: Vec<String>,
    next: AtomicUsize,
    /// Per backend, until when it is skipped.
    down_until: Mutex<Vec<Option<Instant>>>,
    http: reqwest::Client,
    stats: Arc<BalancerStats>,
}

impl Balancer {
    /// Listens on a free loopback port, forwarding to `backends` (`http://HOST:PORT`).
    pub async fn start(backends: Vec<String>) -> Balancer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let stats =
            Arc::new(BalancerStats { answered: backends.iter().map(|_| AtomicU64::new(0)).collect(), bad_gateway: AtomicU64::new(0) });
        let shared = Arc::new(Shared {
            down_until: Mutex::new(vec![None; backends.len()]),
            backends,
            next: AtomicUsize::new(0),
            http: reqwest::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(64)
                .build()
                .unwrap(),
            stats: stats.clone(),
        });
        let app = axum::Router::new().fallback(forward).with_state(shared);
        let shutdown = tokio_util::sync::CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await.unwrap();
        });
        Balancer { url: format!("http://{addr}"), stats, shutdown }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Shared {
    /// The next backend in turn that is not skipped (or, if all are, the next one).
    fn choose(&self) -> usize {
        let n = self.backends.len();
        let start = self.next.fetch_add(1, Ordering::SeqCst);
        let now = Instant::now();
        let down = self.down_until.lock().unwrap();
        (0..n).map(|i| (start + i) % n).find(|&i| down[i].is_none_or(|until| until <= now)).unwrap_or(start % n)
    }

    fn mark_down(&self, backend: usize) {
        self.down_until.lock().unwrap()[backend] = Some(Instant::now() + DOWN_FOR);
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let backend = shared.choose();
    let (parts, body) = request.into_parts();
    let body: Bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path}", shared.backends[backend]);
    let mut outgoing = shared.http.request(parts.method, url).body(body);
    for (name, value) in &parts.headers {
        if name != "host" && !HOP_BY_HOP.contains(&name.as_str()) {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = match outgoing.send().await {
        Ok(answer) => answer,
        Err(_) => return bad_gateway(&shared, backend),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let body = match answer.bytes().await {
        Ok(body) => body,
        // The backend died while answering: what it did is unknown to the sender.
        Err(_) => return bad_gateway(&shared, backend),
    };
    shared.stats.answered[backend].fetch_add(1, Ordering::SeqCst);
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            response.headers_mut().append(HeaderName::from(name), value.clone());
        }
    }
    response
}

fn bad_gateway(shared: &Shared, backend: usize) -> Response {
    shared.mark_down(backend);
    shared.stats.bad_gateway.fetch_add(1, Ordering::SeqCst);
    (StatusCode::BAD_GATEWAY, "the backend did not answer").into_response()
}

//! The engine's HTTP/1 servers (the receiver and the admin API), bounded: `axum::serve` has no
//! read timeouts and no connection cap, so a client could hold connections (and memory) open
//! forever, and idle connections of one server could take the file descriptors the other needs.
//!
//! Each server gets:
//! - a request head within `Limits::header_read_timeout` (hyper closes the connection otherwise;
//!   this is also how long an idle keep-alive connection is kept);
//! - a request head of at most `MAX_HEAD_BYTES` (hyper answers 431 past it), so no header is held
//!   whole at any size;
//! - at most `Limits::max_connections` open at once: the next connection waits in the OS's accept
//!   queue until one closes;
//! - the peer's address in each request's extensions (`ConnectInfo`), as `axum::serve` gives it.
//!
//! Request bodies are bounded by each server's own rules (the receiver's `read_body`, the API's
//! body timeout and size limit). At shutdown, accepting stops and open connections finish the
//! request in flight.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use tower::ServiceExt;

/// Largest request head read (the request line and every header together).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// What one server allows its clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Which server, for its log lines.
    pub name: &'static str,
    /// Most time a client may take to send a request head, counted from when the server starts
    /// waiting for it.
    pub header_read_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `shutdown`, within `limits`.
pub async fn serve(listener: tokio::net::TcpListener, app: Router, shutdown: tokio_util::sync::CancellationToken, limits: Limits) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).max_buf_size(MAX_HEAD_BYTES);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let mut warned_full = false;
    loop {
        if slots.available_permits() == 0 && !warned_full {
            tracing::warn!(
                server = limits.name,
                max_connections = limits.max_connections,
                "most open connections reached; new ones wait until one closes"
            );
        }
        warned_full = slots.available_permits() == 0;
        let slot = tokio::select! {
            _ = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(server = limits.name, error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = tower::service_fn(move |mut request: axum::http::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            app.clone().oneshot(request)
        });
        let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        let name = limits.name;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(server = name, error = %e, "a connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

//! The receiver: `POST /hooks/{provider}` and nothing else, the only port a tunnel may expose.
//!
//! Order of work for every request, never changed (contract section 2):
//! 1. read the raw body (over 1 MiB: 413, nothing stored);
//! 2. verify the signature on the raw bytes, in constant time (401, counted, nothing else stored
//!    but a masked copy among the last refused requests, with its likely cause: `refusal`);
//! 3. parse. For `generic` (the user's own sender) an unusable payload is 400 with a one-line
//!    reason. A real provider's verified request is never answered 4xx: an event of a kind
//!    NeverMiss does not act on is 200 `ignored`, an unparsable one 200 `rejected`. A rejected
//!    request is kept whole, once per delivery id (a resend answers `duplicate`);
//! 4. dedupe on (provider, delivery id), durably (200 duplicate);
//! 5. merge (200 applied or stale). A 200 is sent only after the commit; storage failure is 503.
//!
//! The receiver faces the internet (through a tunnel), so it runs its own HTTP/1 loop (`serve`)
//! rather than `axum::serve`, which has no read timeouts: a client must send its request head
//! within `HEADER_READ_TIMEOUT` and its body within `BODY_READ_TIMEOUT`, so slow clients cannot
//! hold connections (and memory) open forever.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tracing::Instrument;

use crate::engine::Services;
use crate::job::{now_ms, Outcome};
use crate::merge_point::{self, PushDelivery, RawRequest};
use crate::providers::{Unusable, VerifyError};

/// Largest accepted body.
pub const MAX_BODY: usize = 1024 * 1024;
/// Largest body kept with an accepted delivery (a rejected one is kept whole).
pub const KEPT_BODY: usize = 64 * 1024;
/// Most time a client may take to send a request head, counted from when the server starts
/// waiting for it (so it is also how long an idle keep-alive connection is kept).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most time a client may take to send a body, once its head is read: 408, nothing stored.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Most connections the receiver keeps open at once. Past it, new connections wait in the OS's
/// accept queue until one closes: a flood of idle or slow connections cannot take more memory
/// than this many (each is also cut off by the read timeouts above).
pub const MAX_CONNECTIONS: usize = 1024;
/// Headers whose values are never stored.
const MASKED_HEADERS: &[&str] = &["authorization", "proxy-authorization", "cookie", "x-api-key"];

pub fn router(services: Arc<Services>) -> Router {
    Router::new().route("/hooks/{provider}", post(hook).fallback(method_not_allowed)).fallback(not_found).with_state(services)
}

/// What the receiver answers: `{"outcome": ...}` for a delivery it took, `{"error": ...}` otherwise.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, ts_rs::TS)]
#[ts(export)]
pub struct HookAnswer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub outcome: Option<Outcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub error: Option<String>,
}

fn answer(status: StatusCode, body: HookAnswer) -> Response {
    (status, Json(body)).into_response()
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    answer(status, HookAnswer { outcome: None, error: Some(message.to_string()) })
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not found: the receiver serves only POST /hooks/{provider}")
}

async fn method_not_allowed() -> Response {
    let mut response = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: use POST");
    response.headers_mut().insert(axum::http::header::ALLOW, axum::http::HeaderValue::from_static("POST"));
    response
}

fn storage_unavailable(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "storage failed; answering 503 so the sender retries");
    error(StatusCode::SERVICE_UNAVAILABLE, "storage unavailable, retry later")
}

/// One delivery's story, each step a span under `delivery` (receive, verify, parse, then dedupe,
/// merge and enqueue on the writer thread): `RUST_LOG=nevermiss_engine=debug,nevermiss_store=debug` prints it.
#[tracing::instrument(name = "delivery", skip_all, fields(provider = %provider_name, delivery_id = tracing::field::Empty, job_id = tracing::field::Empty))]
async fn hook(State(services): State<Arc<Services>>, Path(provider_name): Path<String>, request: Request) -> Response {
    let Some(provider) = services.providers.get(&provider_name).cloned() else {
        return unknown_provider(&services, &provider_name, request).await;
    };
    let (parts, body) = request.into_parts();

    // 1. The raw body, bounded.
    let bytes = match read_body(&parts.headers, body).instrument(tracing::debug_span!("receive")).await {
        Ok(bytes) => bytes,
        Err(response) => return response,
    };

    // 2. The signature, on the raw bytes.
    tracing::debug!(bytes = bytes.len(), "received");
    let verified = provider.verify(&parts.headers, &bytes).instrument(tracing::debug_span!("verify")).await;
    tracing::debug!(verified = verified.is_ok(), "verified");
    if let Err(e) = verified {
        let status = match e {
            VerifyError::NotConfigured(_) | VerifyError::BadSecret { .. } | VerifyError::Unavailable(_) => {
                tracing::warn!(provider = provider.name(), "delivery not verified: {e}");
                StatusCode::SERVICE_UNAVAILABLE
            }
            VerifyError::Missing(_) | VerifyError::Invalid | VerifyError::Expired => {
                tracing::debug!(provider = provider.name(), "bad signature: {e}");
                StatusCode::UNAUTHORIZED
            }
        };
        // Kept with its likely cause among the last refused requests (bounded), counted.
        let secret = services.secrets.get(provider.name(), crate::secrets::SecretKind::WebhookSecret);
        let refused = crate::refusal::unverified(
            provider.name(),
            status.as_u16(),
            &e,
            secret.as_deref(),
            provider.secret_format(),
            &parts.headers,
            &bytes,
            chrono::Utc::now().timestamp(),
        );
        let kept = services.store.write(move |tx| merge_point::record_refused(tx, &refused, now_ms())).await;
        services.changes.metrics_changed();
        return match kept {
            Ok(()) => error(status, e),
            Err(store_error) => storage_unavailable(store_error),
        };
    }

    // 3. Parse. A signed event of a kind NeverMiss does not act on is ignored (a real
    // provider's); any other unusable payload is kept whole as a rejected delivery.
    let parsed = match tracing::debug_span!("parse").in_scope(|| provider.parse(&parts.headers, &bytes)) {
        Ok(parsed) => parsed,
        Err(unusable) if unusable.kind == Unusable::Unhandled && !provider.sender_is_users_own() => {
            tracing::debug!(provider = provider.name(), reason = %unusable.reason, "ignored");
            let name = provider.name();
            let kept = services
                .store
                .write(move |tx| {
                    // A type NeverMiss does not know at all (not one it knows and does not act
                    // on) is also counted per type.
                    if let Some(u) = &unusable.unknown {
                        tx.count_unknown_value(u.provider, u.field, &u.value);
                    }
                    merge_point::record_ignored(
                        tx,
                        name,
                        unusable.delivery_id.as_deref(),
                        unusable.job_id.as_deref(),
                        &unusable.reason,
                        now_ms(),
                    )
                })
                .await;
            services.changes.metrics_changed();
            return match kept {
                Ok(()) => answer(StatusCode::OK, HookAnswer { outcome: Some(Outcome::Ignored), error: None }),
                Err(e) => storage_unavailable(e),
            };
        }
        Err(rejection) => {
            let raw = raw_request(&parts.headers, &bytes, MAX_BODY);
            let name = provider.name();
            let reason = rejection.reason.clone();
            let kept = services
                .store
                .write(move |conn| {
                    merge_point::record_rejected(
                        conn,
                        name,
                        rejection.delivery_id.as_deref(),
                        rejection.job_id.as_deref(),
                        &raw,
                        &rejection.reason,
                        now_ms(),
                    )
                })
                .await;
            services.changes.metrics_changed();
            return match kept {
                // The user's own sender is told why; a real provider is never answered 4xx.
                Ok(_) if provider.sender_is_users_own() => error(StatusCode::BAD_REQUEST, reason),
                Ok(outcome) => {
                    tracing::debug!(provider = name, outcome = outcome.as_str(), %reason, "rejected");
                    answer(StatusCode::OK, HookAnswer { outcome: Some(outcome), error: None })
                }
                Err(e) => storage_unavailable(e),
            };
        }
    };

    // 4 and 5. Dedupe and merge, in one transaction, committed before the answer.
    let span = tracing::Span::current();
    span.record("delivery_id", parsed.delivery_id.as_str());
    span.record("job_id", parsed.event.job_id.as_str());
    tracing::debug!(state = parsed.event.state.as_str(), seq = parsed.event.seq, "parsed");
    // A thin delivery (it does not say enough, e.g. which run of a session ended): poll the job
    // right after answering, through reconciliation's usual path.
    let poll_after = provider.poll_after_push(&parsed.event).then(|| (provider.name(), parsed.event.job_id.clone()));
    // The jobs that end with this one (a deleted session's open run), in the same write.
    let ends_with = provider.ends_with_it(&parsed.event);
    let push = PushDelivery { delivery_id: parsed.delivery_id, event: parsed.event, raw: raw_request(&parts.headers, &bytes, KEPT_BODY) };
    let committed = match ends_with {
        // The common case: the push alone (one call on PostgreSQL).
        None => merge_point::push(&services.store, push).await.map(|result| (result, Vec::new())),
        Some(prefix) => {
            let write = move |conn: &mut crate::store::Tx<'_>| {
                let now = now_ms();
                let result = merge_point::accept_push(conn, &push, now)?;
                let ended = match result.outcome {
                    Outcome::Applied => merge_point::end_with(conn, &push.event, &prefix, &push.delivery_id, now)?,
                    _ => Vec::new(),
                };
                Ok((result, ended))
            };
            services.store.write(write).await
        }
    };
    match committed {
        Ok((result, ended)) => {
            if result.first_terminal || ended.iter().any(|m| m.first_terminal) {
                services.outbox.wake();
            }
            for job in ended.into_iter().filter_map(|m| m.job) {
                services.changes.job_changed(job);
            }
            match result.job {
                Some(job) if result.outcome == Outcome::Applied || result.described => services.changes.job_changed(job),
                _ => services.changes.metrics_changed(),
            }
            if let (Some((name, job_id)), Outcome::Applied | Outcome::Stale) = (poll_after, result.outcome) {
                let reconciler = services.reconciler.clone();
                tokio::spawn(
                    async move {
                        if let Err(reason) = reconciler.poll_job(name, &job_id).await {
                            tracing::debug!(provider = name, job_id, reason, "poll after a thin delivery");
                        }
                    }
                    .in_current_span(),
                );
            }
            tracing::debug!(outcome = result.outcome.as_str(), first_terminal = result.first_terminal, "answered");
            answer(StatusCode::OK, HookAnswer { outcome: Some(result.outcome), error: None })
        }
        Err(e) => storage_unavailable(e),
    }
}

/// `/hooks/{name}` for no provider: 404, and kept among the last refused requests (a mistyped
/// webhook URL is a common reason deliveries never arrive).
async fn unknown_provider(services: &Services, name: &str, request: Request) -> Response {
    let message = format!("unknown provider {name:?}");
    let (parts, body) = request.into_parts();
    let bytes = match read_body(&parts.headers, body).await {
        Ok(bytes) => bytes,
        Err(response) => return response,
    };
    let known: Vec<&str> = services.providers.names().collect();
    let refused = crate::refusal::unknown_provider(name, &known, &parts.headers, &bytes, &message);
    if let Err(e) = services.store.write(move |tx| merge_point::record_refused(tx, &refused, now_ms())).await {
        tracing::warn!(error = %e, "cannot keep a refused request");
    }
    error(StatusCode::NOT_FOUND, message)
}

async fn read_body(headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, Response> {
    let too_large = || error(StatusCode::PAYLOAD_TOO_LARGE, format!("body over {} bytes", MAX_BODY));
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY as u64) {
        return Err(too_large());
    }
    let collected = match tokio::time::timeout(BODY_READ_TIMEOUT, collect_limited(body, declared)).await {
        Ok(collected) => collected,
        Err(_) => {
            tracing::debug!("a client was too slow sending its body; answered 408");
            return Err(error(StatusCode::REQUEST_TIMEOUT, format!("the body did not arrive within {} s", BODY_READ_TIMEOUT.as_secs())));
        }
    };
    match collected {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large()),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}"))),
    }
}

/// Reads the body, at most `MAX_BODY`, into one buffer sized from the declared length: a large
/// body is held once, not once in frames and again when they are joined.
async fn collect_limited(body: Body, declared: Option<u64>) -> Result<bytes::Bytes, axum::BoxError> {
    let mut body = Limited::new(body, MAX_BODY);
    let mut buffer = bytes::BytesMut::with_capacity(declared.unwrap_or(0).min(MAX_BODY as u64) as usize);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

/// Serves `app` on `listener` until `shutdown`, like `axum::serve` but with read timeouts: the
/// request head within `HEADER_READ_TIMEOUT` (hyper closes the connection otherwise; this is also
/// the keep-alive idle limit) and the body within `BODY_READ_TIMEOUT` (see `read_body`), and with
/// at most `max_connections` open at once (the next one is accepted when one closes). At
/// shutdown, accepting stops and open connections finish their request in flight.
pub async fn serve(listener: tokio::net::TcpListener, app: Router, shutdown: tokio_util::sync::CancellationToken, max_connections: usize) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections.max(1)));
    let mut warned_full = false;
    loop {
        if slots.available_permits() == 0 && !warned_full {
            tracing::warn!(max_connections, "the receiver has its most open connections; new ones wait until one closes");
        }
        warned_full = slots.available_permits() == 0;
        let slot = tokio::select! {
            _ = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(error = %e, "the receiver cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "receiver connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The request as kept for inspection: headers as JSON with credentials masked, body capped.
pub(crate) fn masked_request(headers: &HeaderMap, body: &[u8], cap: usize) -> RawRequest {
    raw_request(headers, body, cap)
}

fn raw_request(headers: &HeaderMap, body: &[u8], cap: usize) -> RawRequest {
    let mut map = serde_json::Map::new();
    for (name, value) in headers {
        let value = if MASKED_HEADERS.contains(&name.as_str()) {
            "••••".to_owned()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        match map.get_mut(name.as_str()) {
            Some(serde_json::Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            _ => {
                map.insert(name.as_str().to_owned(), serde_json::Value::String(value));
            }
        }
    }
    RawRequest {
        headers_json: serde_json::Value::Object(map).to_string(),
        body: body[..body.len().min(cap)].to_vec(),
        body_truncated: body.len() > cap,
    }
}

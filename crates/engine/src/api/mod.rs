//! The admin API (contract §3), on its own loopback listener: every `/api/` call needs the
//! Bearer token from `<data-dir>/api-token`; requests from a foreign `Origin` or for a foreign
//! `Host` (DNS rebinding) are refused. The web UI's static files at `/` need no token.

pub mod cancel;
pub mod channels;
pub mod devices;
pub mod fair_share;
#[cfg(test)]
mod generated;
pub mod groups;
pub mod handover;
pub mod hub;
pub mod jobs;
pub mod openapi;
pub mod providers;
mod refused;
pub mod settings;
pub mod setup;
pub mod status;
mod stream;
pub mod tunnel;
pub mod ui;

pub use refused::RefusedList;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use ts_rs::TS;

use crate::services::Services;
use crate::store::StoreError;

/// Largest request body the API reads (settings, channels, a track request: a few KiB).
pub const MAX_API_BODY: usize = 256 * 1024;

/// What the API handlers share.
pub struct ApiContext {
    pub services: Arc<Services>,
    pub token: String,
    pub api_addr: SocketAddr,
    /// `--public-api`: this API is a hub's, reachable from other machines (any `Host`; devices
    /// call it with their own tokens).
    pub public: bool,
    /// `--insecure-http`: a hub answers plain HTTP from other machines too (else only loopback
    /// peers, such as a TLS reverse proxy on the same machine, are answered).
    pub insecure_http: bool,
    /// Cancelled when the engine stops: ends the live event streams, which would otherwise keep
    /// the API's graceful shutdown waiting forever (a UI tab always has one open).
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The one-time codes that hand the token to a browser (`handover`).
    pub ui_codes: handover::UiCodes,
    /// The live event streams each device holds (`fair_share`).
    pub streams: fair_share::StreamSlots,
    /// The provider calls each device may still cause (`fair_share`).
    pub device_calls: fair_share::DeviceCalls,
}

pub fn router(ctx: Arc<ApiContext>) -> Router {
    let api = areas()
        .router
        // Any other /api/ path: behind the token too (401 without it), then 404. A route, not
        // only a fallback, so the UI's catch-all asset route never answers for /api/.
        .route("/{*rest}", axum::routing::any(|| async { ApiError::NotFound("no such API call".into()) }))
        .fallback(|| async { ApiError::NotFound("no such API call".into()) })
        .layer(middleware::from_fn_with_state(ctx.clone(), hub::hub_proxy))
        .layer(middleware::from_fn_with_state(ctx.clone(), require_token));
    Router::new()
        .nest("/api", api)
        // Without a token: how a browser gets it and how the CLI checks whom it talks to.
        .merge(handover::open_router())
        .merge(openapi::open_router())
        .merge(ui::router())
        .layer(middleware::from_fn_with_state(ctx.clone(), require_own_origin))
        // A body sent slowly is cut off, as the receiver's is; none is read past the limit.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(crate::receiver::BODY_READ_TIMEOUT))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_API_BODY))
        .with_state(ctx)
}

/// Every area of the API, each with its routes.
fn areas() -> Routes {
    Routes::new()
        .merge(status::router())
        .merge(cancel::router())
        .merge(channels::router())
        .merge(devices::router())
        .merge(hub::router())
        .merge(groups::router())
        .merge(handover::router())
        .merge(jobs::router())
        .merge(providers::router())
        .merge(refused::router())
        .merge(settings::router())
        .merge(setup::router())
        .merge(stream::router())
        .merge(tunnel::router())
}

/// Every route of the API (under `/api`, with its path parameters as `{name}`) and who may call
/// it: what the router is built from, for the check that each answers a device token as it says.
pub fn route_table() -> Vec<(&'static str, Access)> {
    areas().table
}

crate::closed_set::closed_set! {
    /// Who may call a route: the owner (the API token) always; a hub's device (its own token)
    /// only where the route says so.
    pub enum Access {
        /// A device token is refused (403): every route's default.
        OwnerOnly = "owner_only",
        /// A device may call it too: reads of jobs and metrics, a job list's actions (track, poll
        /// now), and a device's own calls.
        DevicesToo = "devices_too",
        /// A device may call it only while the owner allows it (a setting, off by default:
        /// `devices_may_cancel` for cancelling a job); else 403.
        DevicesWhenAllowed = "devices_when_allowed",
    }
}

/// The routes of one area of the API, each recorded with its `Access` as it is added: the router
/// and the table of routes come from the same calls, and a route is closed to devices until it is
/// added with `devices_too`.
pub struct Routes {
    router: Router<Arc<ApiContext>>,
    table: Vec<(&'static str, Access)>,
}

impl Routes {
    pub fn new() -> Routes {
        Routes { router: Router::new(), table: Vec::new() }
    }

    /// A route only the owner may call: a device's token gets 403.
    pub fn owner(mut self, path: &'static str, route: MethodRouter<Arc<ApiContext>>) -> Routes {
        self.router = self.router.route(path, route.route_layer(middleware::from_fn(owner_only)));
        self.table.push((path, Access::OwnerOnly));
        self
    }

    /// A route a hub's devices may call too (see `Access::DevicesToo` for which deserve it).
    pub fn devices_too(mut self, path: &'static str, route: MethodRouter<Arc<ApiContext>>) -> Routes {
        self.router = self.router.route(path, route);
        self.table.push((path, Access::DevicesToo));
        self
    }

    /// A route a hub's devices may call only while `allowed` says the owner allows it (read from
    /// the settings at each call): else a device's token gets 403.
    pub fn devices_when_allowed(
        mut self,
        path: &'static str,
        route: MethodRouter<Arc<ApiContext>>,
        allowed: fn(&crate::settings::Settings) -> bool,
    ) -> Routes {
        let layer = middleware::from_fn(move |request: Request, next: Next| devices_if_allowed(allowed, request, next));
        self.router = self.router.route(path, route.route_layer(layer));
        self.table.push((path, Access::DevicesWhenAllowed));
        self
    }

    pub fn merge(mut self, other: Routes) -> Routes {
        self.router = self.router.merge(other.router);
        self.table.extend(other.table);
        self
    }
}

impl Default for Routes {
    fn default() -> Routes {
        Routes::new()
    }
}

/// Refuses a device's token on an owner's route (`Routes::owner`).
async fn owner_only(request: Request, next: Next) -> Response {
    if let Some(Caller::Device(device)) = request.extensions().get::<Caller>() {
        tracing::debug!(%device, path = request.uri().path(), "a device token was refused a call");
        return ApiError::Forbidden("a device token cannot do this").into_response();
    }
    next.run(request).await
}

/// Refuses a device's token on a route the owner has not opened to devices
/// (`Routes::devices_when_allowed`).
async fn devices_if_allowed(allowed: fn(&crate::settings::Settings) -> bool, request: Request, next: Next) -> Response {
    if let Some(Caller::Device(device)) = request.extensions().get::<Caller>() {
        let settings = request.extensions().get::<Arc<crate::settings::Settings>>();
        if !settings.is_some_and(|s| allowed(s)) {
            tracing::debug!(%device, path = request.uri().path(), "a device token was refused a call its owner has not allowed");
            return ApiError::Forbidden("a device token cannot do this unless the hub's owner allows it").into_response();
        }
    }
    next.run(request).await
}

/// The body of every refusal: one line, and for a form, a reason per refused field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub errors: Option<std::collections::BTreeMap<String, String>>,
}

impl ErrorBody {
    pub fn new(error: impl Into<String>) -> ErrorBody {
        ErrorBody { error: error.into(), errors: None }
    }

    pub fn fields(error: impl Into<String>, errors: std::collections::BTreeMap<String, String>) -> ErrorBody {
        ErrorBody { error: error.into(), errors: Some(errors) }
    }
}

/// Runs a call to the secret store off the async workers (the OS keychain may block on D-Bus).
pub async fn with_secret_store<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(call).await.map_err(|_| ApiError::BadRequest("the secret store stopped".into()))
}

/// The answer when the secret store refused to keep a form's `field`: 503 (the log says why), so
/// the caller tries again; nothing of the form was saved after it.
pub fn secret_not_stored(field: &str) -> Response {
    let errors =
        std::collections::BTreeMap::from([(field.to_owned(), "cannot be stored: the secret store refused it (see the log)".to_owned())]);
    (StatusCode::SERVICE_UNAVAILABLE, Json(ErrorBody::fields("the secret store refused it", errors))).into_response()
}

/// A query string read as `T`, refused as every other bad request is (`400 {"error"}`, JSON),
/// where axum's own `Query` answers a plain-text 400.
pub struct Query<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(ApiError::BadRequest(rejection.body_text())),
        }
    }
}

/// Errors of the admin API, each mapped once to its HTTP answer. Storage details are logged,
/// never returned.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("missing or wrong API token")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(&'static str),
    /// Past a device's share (`fair_share`): answered 429.
    #[error("{0}")]
    TooMany(String),
    #[error("storage unavailable")]
    Storage(#[from] StoreError),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Storage(e) => {
                tracing::error!(error = %e, "admin API: storage error");
                StatusCode::SERVICE_UNAVAILABLE
            }
        };
        let mut response = (status, Json(ErrorBody::new(self.to_string()))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// What a device is shown for a kept body while the owner does not allow devices to read them.
pub const BODY_HIDDEN: &str = "(the body is shown to the hub's owner only: Settings, Devices may read bodies)";

/// Whether `caller` may read kept bodies: the owner always, a device when the owner allows it
/// (`devices_may_read_bodies`).
pub fn may_read_bodies(ctx: &ApiContext, caller: &Caller) -> bool {
    matches!(caller, Caller::Admin) || ctx.services.settings.devices_may_read_bodies()
}

/// Who is calling: the owner (the API token of `<data-dir>/api-token`), or one of a hub's devices
/// (its own token), which may call only the routes that say so (`Routes::devices_too`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Admin,
    Device(String),
}

async fn require_token(State(ctx): State<Arc<ApiContext>>, mut request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim().to_owned())
        .unwrap_or_default();
    if presented.is_empty() {
        return ApiError::Unauthorized.into_response();
    }
    let caller = if bool::from(presented.as_bytes().ct_eq(ctx.token.as_bytes())) {
        Caller::Admin
    } else {
        // A device's token: looked up by its SHA-256 (the token itself is not stored).
        let hash = devices::token_hash(&presented);
        match ctx.services.store.read(move |db| crate::store::channels::device_of_token(db, &hash)).await {
            Ok(Some(device)) => Caller::Device(device),
            Ok(None) => return ApiError::Unauthorized.into_response(),
            Err(e) => return ApiError::Storage(e).into_response(),
        }
    };
    request.extensions_mut().insert(caller);
    // What the owner allows devices (`Routes::devices_when_allowed`), read at each call.
    request.extensions_mut().insert(ctx.services.settings.clone());
    next.run(request).await
}

/// Only the app's own pages may call the API: the `Host` must be a loopback name (no DNS
/// rebinding) and an `Origin`, when sent, must be the API's own address (where the window loads
/// the UI from too).
async fn require_own_origin(State(ctx): State<Arc<ApiContext>>, request: Request, next: Next) -> Response {
    if ctx.public {
        return hub_rules(&ctx, request, next).await;
    }
    let port = ctx.api_addr.port();
    let host_ok =
        request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).is_none_or(|host| is_loopback_host(host, port, ctx.api_addr));
    if !host_ok {
        return ApiError::Forbidden("this API answers only on a loopback host name").into_response();
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !allowed_origin(origin, port, ctx.api_addr) {
            return ApiError::Forbidden("requests from this origin are refused").into_response();
        }
    }
    next.run(request).await
}

/// A hub's API (`--public-api`): any `Host` (tokens decide), an `Origin` only of the host the
/// request is for, and plain HTTP only from loopback peers (a TLS reverse proxy on the same
/// machine) unless `--insecure-http`.
async fn hub_rules(ctx: &ApiContext, request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<axum::extract::ConnectInfo<SocketAddr>>().map(|c| c.0);
    let from_loopback = peer.is_some_and(|p| p.ip().is_loopback());
    if !from_loopback && !ctx.insecure_http {
        return ApiError::Forbidden(
            "plain HTTP from another machine is refused: put TLS in front of the hub (the book's page \"A hub\"), or start it with --insecure-http",
        )
        .into_response();
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        let origin = origin.to_str().unwrap_or("");
        let same = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://")).is_some_and(|o| o == host);
        if !same {
            return ApiError::Forbidden("requests from this origin are refused").into_response();
        }
    }
    next.run(request).await
}

fn is_loopback_host(host: &str, port: u16, addr: SocketAddr) -> bool {
    let own = addr.to_string();
    host == own || [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")].iter().any(|h| h == host)
}

/// The API's own address only. Not `tauri://localhost` nor `http://tauri.localhost`: every Tauri
/// app's pages share those, and this window loads the UI from the API's own address.
fn allowed_origin(origin: &str, port: u16, addr: SocketAddr) -> bool {
    origin.strip_prefix("http://").is_some_and(|host| is_loopback_host(host, port, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let addr: SocketAddr = "127.0.0.1:8788".parse().unwrap();
        assert!(allowed_origin("http://127.0.0.1:8788", 8788, addr));
        assert!(allowed_origin("http://localhost:8788", 8788, addr));
        // Shared by every Tauri app's pages; this window does not use them.
        assert!(!allowed_origin("tauri://localhost", 8788, addr));
        assert!(!allowed_origin("http://tauri.localhost", 8788, addr));
        assert!(!allowed_origin("https://tauri.localhost", 8788, addr));
        assert!(!allowed_origin("http://127.0.0.1:9999", 8788, addr));
        assert!(!allowed_origin("https://evil.example", 8788, addr));
        assert!(!allowed_origin("null", 8788, addr));
        assert!(!is_loopback_host("evil.example:8788", 8788, addr));
    }
}

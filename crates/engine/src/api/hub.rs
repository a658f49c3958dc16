//! `/api/hub`: this app as a device of a NeverMiss hub (contract §5). With a hub URL and
//! a device token (`nevermiss devices add NAME` on the hub prints one), the window shows the
//! hub's jobs and this machine shows the hub's notifications for it, once each.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// The body of `PUT /api/hub`: an empty `url` disconnects; a `token` left out keeps the stored one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct HubInput {
    pub url: String,
    #[serde(default)]
    #[ts(optional)]
    pub token: Option<String>,
}

use std::sync::{Arc, LazyLock};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json};

use super::{Access, ApiContext, ApiError, Caller, ErrorBody, Routes};
use crate::hub_client::{valid_hub_url, HubState};
use crate::secrets::Named;
use crate::settings::HUB_URL;

pub fn router() -> Routes {
    Routes::new().owner("/hub", get(read).put(update))
}

#[utoipa::path(
    get, path = "/api/hub", operation_id = "get_hub", tag = "hub",
    summary = "The hub this instance follows, as a device",
    responses((status = 200, description = "The hub's address and the link's state", body = HubState))
)]
async fn read(State(ctx): State<Arc<ApiContext>>) -> Json<HubState> {
    Json(ctx.services.hub.state().await)
}

#[utoipa::path(
    put, path = "/api/hub", operation_id = "put_hub", tag = "hub",
    summary = "Follow a hub (or stop: an empty url)",
    request_body = HubInput,
    responses(
        (status = 200, description = "The hub's address and the link's state", body = HubState),
        (status = 400, description = "Refused: `errors` names the field", body = super::ErrorBody),
        (status = 503, description = "The secret store refused the token", body = super::ErrorBody),
    )
)]
async fn update(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<HubInput>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    if caller != Caller::Admin {
        return Err(ApiError::Forbidden("a device token cannot do this"));
    }
    let Json(input) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let url = input.url.trim().trim_end_matches('/').to_owned();
    if !url.is_empty() {
        if let Err(reason) = valid_hub_url(&url) {
            let errors = std::collections::BTreeMap::from([("url".to_owned(), reason.to_owned())]);
            return Ok((StatusCode::BAD_REQUEST, Json(ErrorBody::fields("the hub was refused", errors))).into_response());
        }
    }
    if let Some(token) = input.token.as_deref().map(str::trim) {
        let secrets = ctx.services.secrets.clone();
        let value = (!token.is_empty()).then(|| token.to_owned());
        let stored = super::with_secret_store(move || secrets.set_named(&Named::hub_token(), value.as_deref())).await?;
        if let Err(e) = stored {
            tracing::warn!(error = %e, "cannot store the hub's device token");
            return Ok(super::secret_not_stored("token"));
        }
    }
    let before = ctx.services.settings.hub_url().unwrap_or_default();
    ctx.services.settings.set(HUB_URL, &url).await?;
    ctx.services.hub.settings_changed(before != url).await;
    tracing::info!(hub = %url, "hub settings saved");
    Ok(Json(ctx.services.hub.state().await).into_response())
}

/// A forwarded call's body at most (tracking a job sends a few hundred bytes).
const MAX_FORWARDED_BODY: usize = 64 * 1024;

/// The calls the window makes that go to the hub while this app is a hub's device: every route a
/// device may call (`Access::DevicesToo` in the admin API's own route table: the reads of jobs and
/// metrics, a job list's actions; and `Access::DevicesWhenAllowed`, such as cancel, which the hub
/// refuses unless its owner allows it) but those that describe this app itself (`/health`, `/info`)
/// or a device's own stream (`/device/...`). Its own settings, channels and secrets stay its own.
/// Derived from the table the router is built from, so a route opened to devices is forwarded too.
static FORWARDED: LazyLock<matchit::Router<()>> = LazyLock::new(|| {
    let mut routes = matchit::Router::new();
    for (path, access) in super::route_table() {
        if matches!(access, Access::DevicesToo | Access::DevicesWhenAllowed) && !is_this_apps_own(path) {
            routes.insert(path, ()).expect("the admin API's routes are valid matchit patterns (axum's own)");
        }
    }
    routes
});

/// The device-callable routes that are about this app, never the hub's: its health and version,
/// and a device's own notification stream.
fn is_this_apps_own(path: &str) -> bool {
    path == "/health" || path == "/info" || path == "/device" || path.starts_with("/device/")
}

fn forwarded(path: &str) -> bool {
    FORWARDED.at(path).is_ok()
}

/// Forwards those calls of the owner's to the hub, with this device's token, when one is set.
pub async fn hub_proxy(State(ctx): State<Arc<ApiContext>>, request: Request, next: Next) -> Response {
    let admin = request.extensions().get::<Caller>() == Some(&Caller::Admin);
    if !admin || !forwarded(request.uri().path()) {
        return next.run(request).await;
    }
    let Some((hub, token)) = ctx.services.hub.target() else {
        return next.run(request).await;
    };
    let path_and_query = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/").to_owned();
    let mut upstream = ctx.services.hub.http().request(request.method().clone(), format!("{hub}/api{path_and_query}")).bearer_auth(token);
    for name in [header::ACCEPT, header::CONTENT_TYPE] {
        if let Some(value) = request.headers().get(&name) {
            upstream = upstream.header(name, value.clone());
        }
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        match axum::body::to_bytes(request.into_body(), MAX_FORWARDED_BODY).await {
            Ok(body) => upstream = upstream.body(body),
            Err(e) => return ApiError::BadRequest(format!("the request body cannot be read: {e}")).into_response(),
        }
    }
    match upstream.send().await {
        Ok(answer) => {
            let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let content_type = answer.headers().get(reqwest::header::CONTENT_TYPE).cloned();
            let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
            *response.status_mut() = status;
            if let Some(content_type) = content_type.and_then(|v| header::HeaderValue::from_bytes(v.as_bytes()).ok()) {
                response.headers_mut().insert(header::CONTENT_TYPE, content_type);
            }
            response
        }
        Err(e) => (StatusCode::BAD_GATEWAY, Json(ErrorBody::new(format!("the hub cannot be reached: {e}")))).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::forwarded;

    #[test]
    fn a_device_forwards_the_job_calls_a_device_may_make_and_keeps_its_own_settings_and_identity() {
        for path in ["/jobs", "/jobs/generic/j-1", "/jobs/generic/j-1/poll", "/deliveries/generic/d-1", "/metrics", "/metrics/history"] {
            assert!(forwarded(path), "{path} goes to the hub");
        }
        for path in ["/events", "/refused", "/reconcile/passes"] {
            assert!(forwarded(path), "{path} goes to the hub");
        }
        for path in ["/health", "/info", "/device", "/device/notifications", "/device/ack", "/settings", "/channels", "/hub", "/secrets"] {
            assert!(!forwarded(path), "{path} stays this app's own");
        }
        assert!(!forwarded("/jobs/generic/j-1/poll/extra"), "only whole routes match");
    }
}

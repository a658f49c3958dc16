//! The tunnel: its state, a self-test on demand, a restart, the "I updated the webhook URL"
//! acknowledgement, and its secrets (written, never read back: only whether each is set).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use super::{ApiContext, ApiError, Routes};
use crate::tunnel::config::SECRETS;
use crate::tunnel::self_test::SelfTestReport;
use crate::tunnel::TunnelState;

pub fn router() -> Routes {
    Routes::new()
        .owner("/tunnel", get(state))
        .owner("/tunnel/test", post(self_test))
        .owner("/tunnel/restart", post(restart))
        .owner("/tunnel/ack", post(acknowledge))
        .owner("/tunnel/credentials", get(credentials).put(set_credentials))
}

#[utoipa::path(
    get, path = "/api/tunnel", operation_id = "get_tunnel", tag = "tunnel",
    summary = "The tunnel's state and public URL",
    responses((status = 200, description = "The tunnel", body = TunnelState))
)]
async fn state(State(ctx): State<Arc<ApiContext>>) -> Json<TunnelState> {
    Json(ctx.services.tunnel.state())
}

/// Sends a signed test delivery through the tunnel and answers when it is known whether it
/// arrived (200 either way: the report says).
#[utoipa::path(
    post, path = "/api/tunnel/test", operation_id = "test_tunnel", tag = "tunnel",
    summary = "Send a signed test delivery through the tunnel",
    responses((status = 200, description = "Whether it came back, and how long it took", body = SelfTestReport))
)]
async fn self_test(State(ctx): State<Arc<ApiContext>>) -> Json<SelfTestReport> {
    Json(ctx.services.tunnel.self_test().await)
}

#[utoipa::path(
    post, path = "/api/tunnel/restart", operation_id = "restart_tunnel", tag = "tunnel",
    summary = "Restart the tunnel",
    responses((status = 202, description = "Restarting", body = TunnelState))
)]
async fn restart(State(ctx): State<Arc<ApiContext>>) -> Response {
    ctx.services.tunnel.restart();
    (StatusCode::ACCEPTED, Json(ctx.services.tunnel.state())).into_response()
}

#[utoipa::path(
    post, path = "/api/tunnel/ack", operation_id = "ack_tunnel_url", tag = "tunnel",
    summary = "Acknowledge a changed public URL",
    description = "After the providers' webhook settings were updated to it.",
    responses((status = 200, description = "The tunnel", body = TunnelState))
)]
async fn acknowledge(State(ctx): State<Arc<ApiContext>>) -> Json<TunnelState> {
    ctx.services.tunnel.acknowledge_url().await;
    Json(ctx.services.tunnel.state())
}

/// Whether one tunnel secret is set, and where the one in force comes from (never the secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct CredentialState {
    pub set: bool,
    pub source: Option<String>,
}

/// `GET /api/tunnel/credentials`: each tunnel secret by name.
pub type Credentials = BTreeMap<String, CredentialState>;

fn credential_sources(ctx: &ApiContext) -> Credentials {
    SECRETS
        .iter()
        .map(|s| {
            let source = s.source(&ctx.services.secrets);
            (s.name.to_owned(), CredentialState { set: source.is_some(), source: source.map(str::to_owned) })
        })
        .collect()
}

#[utoipa::path(
    get, path = "/api/tunnel/credentials", operation_id = "get_tunnel_credentials", tag = "tunnel",
    summary = "Which tunnel credentials are set (never their values)",
    responses((status = 200, description = "The credentials' status", body = Credentials))
)]
async fn credentials(State(ctx): State<Arc<ApiContext>>) -> Json<Credentials> {
    Json(credential_sources(&ctx))
}

/// `PUT /api/tunnel/credentials {"ngrok_authtoken": "...", "bore_secret": null, ...}`: stores (a
/// string) or forgets (null) each named secret, then restarts the tunnel with them.
#[utoipa::path(
    put, path = "/api/tunnel/credentials", operation_id = "put_tunnel_credentials", tag = "tunnel",
    summary = "Set or forget tunnel credentials",
    request_body(content = BTreeMap<String, Option<String>>, description = "Credential names (`ngrok_authtoken`, `bore_secret`, `cloudflared_token`) to values; null or empty forgets", example = json!({"ngrok_authtoken": "2abc..."})),
    responses((status = 200, description = "The credentials' status", body = Credentials), (status = 400, description = "An unknown name or a value refused", body = super::ErrorBody))
)]
async fn set_credentials(
    State(ctx): State<Arc<ApiContext>>,
    body: Result<Json<BTreeMap<String, Value>>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Credentials>, ApiError> {
    let Json(changes) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let mut accepted = Vec::new();
    for (name, value) in &changes {
        let secret =
            SECRETS.iter().find(|s| s.name == name).ok_or_else(|| ApiError::BadRequest(format!("unknown tunnel secret {name:?}")))?;
        let value = match value {
            Value::Null => None,
            Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            _ => return Err(ApiError::BadRequest(format!("{name} must be a non-empty string, or null to forget it"))),
        };
        accepted.push((secret, value));
    }
    for (secret, value) in accepted {
        secret.set(&ctx.services.secrets, value.as_deref()).map_err(|e| {
            tracing::error!(error = %e, "cannot store a tunnel secret");
            ApiError::BadRequest(format!("cannot store {}: the secret store refused it", secret.name))
        })?;
    }
    ctx.services.tunnel.reconfigure();
    Ok(Json(credential_sources(&ctx)))
}

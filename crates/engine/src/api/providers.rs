//! `GET /api/providers`: every provider this instance knows, where it comes from (built in, a
//! shipped recipe, the user's recipe file) and whether its secrets are set (never their values),
//! and the user's recipes refused at their last load with why (`nevermiss providers` prints it).
//! `POST /api/providers/{name}/test` polls one job and answers what was read, expression by
//! expression, merging nothing (`nevermiss providers test NAME JOB_ID`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::Json;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{ApiContext, ApiError, Routes};
use crate::providers::{PollTrace, SecretKind};
use crate::store::job::{JobKey, JobRef};

pub fn router() -> Routes {
    Routes::new().owner("/providers", get(list)).owner("/providers/{name}/test", post(test))
}

/// One provider as `GET /api/providers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct ProviderEntry {
    pub name: String,
    /// `built-in`, `shipped recipe`, or `recipe <file>`.
    pub origin: String,
    pub api_key_set: bool,
    pub webhook_secret_set: bool,
}

/// `GET /api/providers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct ProviderList {
    pub providers: Vec<ProviderEntry>,
    /// The user's recipes refused at their last load, one line each: the file, the key, what is wrong.
    pub refused_recipes: Vec<String>,
}

#[utoipa::path(
    get, path = "/api/providers", operation_id = "list_providers", tag = "providers",
    summary = "Every provider NeverMiss knows, with what is set up for it",
    responses((status = 200, description = "The providers", body = ProviderList))
)]
async fn list(State(ctx): State<Arc<ApiContext>>) -> Json<ProviderList> {
    let services = &ctx.services;
    let secrets = services.secrets.clone();
    let providers: Vec<(String, String)> = services.providers.list().iter().map(|p| (p.name().to_owned(), p.origin())).collect();
    // The secret store may ask the keychain: off the runtime.
    let providers = tokio::task::spawn_blocking(move || {
        providers
            .into_iter()
            .map(|(name, origin)| ProviderEntry {
                api_key_set: secrets.get(&name, SecretKind::ApiKey).is_some(),
                webhook_secret_set: secrets.get(&name, SecretKind::WebhookSecret).is_some(),
                name,
                origin,
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    Json(ProviderList { providers, refused_recipes: services.providers.refused_recipes() })
}

/// `POST /api/providers/{name}/test`'s body.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
pub struct TestRequest {
    pub job_id: String,
}

/// One poll of one job, shown and not merged: the job's known state (when it is tracked) decides
/// what a 404 means, as it would in a real poll.
#[utoipa::path(
    post, path = "/api/providers/{name}/test", operation_id = "test_provider", tag = "providers",
    summary = "Poll one job and show what was read, expression by expression",
    description = "Merges nothing: for checking a recipe against a real job (`nevermiss providers test NAME JOB_ID`).",
    params(("name" = String, Path, description = "The provider's name")),
    request_body = TestRequest,
    responses((status = 200, description = "What the poll read", body = PollTrace), (status = 400, description = "A bad job id", body = super::ErrorBody), (status = 404, description = "No such provider", body = super::ErrorBody))
)]
async fn test(
    State(ctx): State<Arc<ApiContext>>,
    Path(name): Path<String>,
    body: Result<Json<TestRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<PollTrace>, ApiError> {
    let Json(request) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let job_id = request.job_id.trim().to_owned();
    crate::providers::job_id::is_a_name(&job_id).map_err(|e| ApiError::BadRequest(format!("job_id: {e}")))?;
    let services = &ctx.services;
    let provider = services
        .providers
        .get(&name)
        .ok_or_else(|| ApiError::NotFound(format!("unknown provider {:?}: known are {}", name, services.providers.names().join(", "))))?;
    let (provider_name, id) = (provider.name(), job_id.clone());
    let known = services.store.read(move |conn| crate::store::jobs::poll_target(conn, &JobKey::new(provider_name, &id))).await?;
    let job = known.map(|(job, _)| job).unwrap_or_else(|| JobRef::new(job_id));
    Ok(Json(provider.trace_poll(&job).await))
}

//! `GET /api/providers`: every provider this instance knows, where it comes from (built in, a
//! shipped recipe, the user's recipe file) and whether its secrets are set (never their values),
//! and the user's recipes refused at start with why (`nevermiss providers` prints it).

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::Json;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{ApiContext, Routes};
use crate::secrets::SecretKind;

pub fn router() -> Routes {
    Routes::new().owner("/providers", get(list))
}

/// One provider as `GET /api/providers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct ProviderEntry {
    pub name: String,
    /// `built-in`, `shipped recipe`, or `recipe <file>`.
    pub origin: String,
    pub api_key_set: bool,
    pub webhook_secret_set: bool,
}

/// `GET /api/providers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[ts(export)]
pub struct ProviderList {
    pub providers: Vec<ProviderEntry>,
    /// The user's recipes refused at their last load, one line each: the file, the key, what is wrong.
    pub refused_recipes: Vec<String>,
}

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

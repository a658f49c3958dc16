//! Getting set up: which provider secrets are in force (never the secrets themselves), setting
//! them, and a signed test delivery to the local receiver so a newcomer sees one arrive.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiContext, ApiError, ErrorBody, Routes};
use crate::providers::generic::OwnDelivery;
use crate::providers::SecretKind;
use crate::receiver::HookAnswer;
use crate::secrets;
use crate::store::job::{now_ms, JobState};

/// The longest secret accepted (keys and webhook secrets are far shorter).
pub const MAX_SECRET: usize = 4096;
/// What the UI shows in place of a secret that is set.
pub const MASK: &str = "••••••••";

pub fn router() -> Routes {
    Routes::new()
        .owner("/secrets", get(secret_status))
        .owner("/secrets/{provider}", put(set_secrets))
        .owner("/secrets/replicate/fetch", post(fetch_replicate_secret))
        .owner("/secrets/retry-keychain", post(retry_keychain))
        .owner("/test-delivery", post(test_delivery))
}

/// Whether one secret is in force: never the secret, only that it is there, masked.
#[derive(Debug, Clone, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct SecretStatus {
    pub set: bool,
    /// `MASK` when set, else null.
    pub masked: Option<String>,
    /// Set by the `NEVERMISS_<PROVIDER>_<NAME>` variable, which beats the stored one.
    pub from_env: bool,
    /// Where the secret in force comes from: `env`, `keychain` or `file`.
    pub source: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct ProviderSecrets {
    pub api_key: SecretStatus,
    pub webhook_secret: SecretStatus,
    /// How its webhooks come in: what to set and which URL to paste.
    pub webhooks: crate::providers::WebhookIntake,
    /// The other secrets its calls take (a recipe's `{secret.NAME}`), by name.
    pub named: BTreeMap<String, SecretStatus>,
}

/// `GET /api/secrets` and the answer of `PUT /api/secrets/{provider}`.
#[derive(Debug, Clone, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct SecretsView {
    pub providers: BTreeMap<String, ProviderSecrets>,
    /// Where saved secrets go: `keychain` (the OS keychain) or `file` (a 0600 file in the data dir).
    pub store: String,
    /// Why there is no keychain, when the file is used.
    pub store_note: Option<String>,
    /// Said once, in the answer of the `PUT` that set a provider's API key: that discovery is now
    /// on for it (every job of the account watched), or what it still needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub discovery_note: Option<String>,
}

fn status(ctx: &ApiContext, provider: &str, kind: SecretKind) -> SecretStatus {
    secret_status_of(ctx.services.secrets.source(provider, kind), &secrets::env_var(provider, kind))
}

/// A secret's status from where it comes from and the variable that would set it.
fn secret_status_of(source: Option<&'static str>, variable: &str) -> SecretStatus {
    let set = source.is_some();
    SecretStatus {
        set,
        masked: set.then(|| MASK.to_owned()),
        from_env: std::env::var(variable).is_ok_and(|v| !v.is_empty()),
        source: source.map(str::to_owned),
    }
}

/// The status of each named secret `provider` takes.
fn named_status(ctx: &ApiContext, provider: &dyn crate::providers::Provider) -> BTreeMap<String, SecretStatus> {
    let name = provider.name();
    provider
        .named_secrets()
        .into_iter()
        .map(|secret| {
            let (variable, _) = secrets::provider_secret(name, &secret);
            let status = secret_status_of(ctx.services.secrets.source_provider_secret(name, &secret), &variable);
            (secret, status)
        })
        .collect()
}

fn view(ctx: &ApiContext) -> SecretsView {
    let (store, store_note) = match ctx.services.secrets.backend() {
        secrets::Backend::Keychain => ("keychain", None),
        secrets::Backend::File { reason } => ("file", Some(reason)),
    };
    SecretsView {
        store: store.to_owned(),
        store_note,
        discovery_note: None,
        providers: ctx
            .services
            .providers
            .list()
            .into_iter()
            .map(|provider| {
                let name = provider.name();
                (
                    name.to_owned(),
                    ProviderSecrets {
                        api_key: status(ctx, name, SecretKind::ApiKey),
                        webhook_secret: status(ctx, name, SecretKind::WebhookSecret),
                        webhooks: provider.webhook_intake(),
                        named: named_status(ctx, provider.as_ref()),
                    },
                )
            })
            .collect(),
    }
}

#[utoipa::path(
    get, path = "/api/secrets", operation_id = "get_secrets", tag = "settings",
    summary = "Which secrets are set, per provider (never their values)",
    responses((status = 200, description = "The secrets' status", body = SecretsView))
)]
async fn secret_status(State(ctx): State<Arc<ApiContext>>) -> Json<SecretsView> {
    Json(view(&ctx))
}

/// `POST /api/secrets/retry-keychain`: asks the OS keychain again (after the user unlocked it or
/// set up a login keyring) and answers the secrets' view: `store` is `keychain` if it can be used
/// now, else still `file` with the new `store_note`. Secrets already in the file stay readable.
#[utoipa::path(
    post, path = "/api/secrets/retry-keychain", operation_id = "retry_keychain", tag = "settings",
    summary = "Ask the OS keychain again",
    description = "After it was unlocked or a login keyring set up. While it cannot be used, secrets go to a 0600 `secrets.json` in the data dir and `store_note` says why.",
    responses((status = 200, description = "The secrets' status", body = SecretsView))
)]
async fn retry_keychain(State(ctx): State<Arc<ApiContext>>) -> Json<SecretsView> {
    let secrets = ctx.services.secrets.clone();
    // D-Bus calls block: off the runtime's threads. The view says where secrets go either way.
    let _ = tokio::task::spawn_blocking(move || secrets.retry_keychain()).await;
    Json(view(&ctx))
}

/// `PUT /api/secrets/{provider}` `{"api_key"?: string|null, "webhook_secret"?: string|null}`:
/// a string stores it, null or "" forgets it, a missing field leaves it as it is. All or
/// nothing: 400 with `{"errors": {field: reason}}`.
/// (No TypeScript type is made from it: ts-rs cannot read `deserialize_with`; the UI sends
/// `{"api_key"?: string | null, "webhook_secret"?: string | null}`.)
#[derive(Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretsUpdate {
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Option<String>>,
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<Option<String>>,
    /// The provider's named secrets to set (a string) or forget (null or ""), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub named: BTreeMap<String, Option<String>>,
}

/// Tells a field sent as null (`Some(None)`) from a missing one (`None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Ok(Some(Option::deserialize(d)?))
}

fn check_secret(value: &str) -> Result<(), String> {
    if value.len() > MAX_SECRET {
        return Err(format!("must be at most {MAX_SECRET} characters"));
    }
    if value.chars().any(char::is_control) {
        return Err("must be on one line, without control characters".into());
    }
    if value.trim() != value {
        return Err("must not start or end with spaces".into());
    }
    Ok(())
}

#[utoipa::path(
    put, path = "/api/secrets/{provider}", operation_id = "put_secrets", tag = "settings",
    summary = "Set or forget a provider's secrets",
    description = "A field left out is unchanged; an empty string forgets it. Setting an API key turns discovery on for a provider that lists its jobs, unless the owner chose already: `discovery_note` says so.",
    params(("provider" = String, Path, description = "The provider's name")),
    request_body = SecretsUpdate,
    responses(
        (status = 200, description = "The secrets' status after the change", body = SecretsView),
        (status = 400, description = "Refused: `errors` names each refused field", body = super::ErrorBody),
        (status = 404, description = "No such provider", body = super::ErrorBody),
        (status = 503, description = "The secret store refused it", body = super::ErrorBody),
    )
)]
async fn set_secrets(
    State(ctx): State<Arc<ApiContext>>,
    Path(provider): Path<String>,
    body: Result<Json<SecretsUpdate>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(update) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let Some(adapter) = ctx.services.providers.get(&provider) else {
        return Err(ApiError::NotFound(format!("unknown provider {provider:?}")));
    };
    let takes = adapter.named_secrets();
    let named: Vec<(String, Option<String>)> =
        update.named.into_iter().map(|(name, value)| (name, value.filter(|v| !v.is_empty()))).collect();
    let changes: Vec<(&str, SecretKind, Option<String>)> =
        [("api_key", SecretKind::ApiKey, update.api_key), ("webhook_secret", SecretKind::WebhookSecret, update.webhook_secret)]
            .into_iter()
            .filter_map(|(field, kind, value)| value.map(|v| (field, kind, v.filter(|s| !s.is_empty()))))
            .collect();
    let format = ctx.services.providers.get(&provider).and_then(|p| p.secret_format());
    let errors: BTreeMap<String, String> = changes
        .iter()
        .filter_map(|(field, kind, value)| {
            let value = value.as_deref()?;
            let refused = check_secret(value).err().or_else(|| match (kind, format) {
                // A secret the provider's own SDK could not read is refused now, next to the
                // field, rather than turning every delivery into a 401 that looks like forgery.
                (SecretKind::WebhookSecret, Some(format)) => format.key(value).err().map(|reason| {
                    format!("{reason}: {provider} webhook secrets are read as {}; paste it as {provider} shows it", format.describe())
                }),
                _ => None,
            });
            refused.map(|e| ((*field).to_owned(), e))
        })
        .chain(named.iter().filter_map(|(name, value)| {
            let refused = if !takes.contains(name) {
                Some(format!("{provider} takes no secret named {name:?} (its recipe names: {})", takes.join(", ")))
            } else {
                value.as_deref().and_then(|v| check_secret(v).err())
            };
            refused.map(|e| (format!("named.{name}"), e))
        }))
        .collect();
    if !errors.is_empty() {
        return Ok((StatusCode::BAD_REQUEST, Json(ErrorBody::fields("some secrets were refused", errors))).into_response());
    }
    let key_set = changes.iter().any(|(_, kind, value)| *kind == SecretKind::ApiKey && value.is_some());
    for (field, kind, value) in changes {
        let secrets = ctx.services.secrets.clone();
        let p = provider.clone();
        let stored = super::with_secret_store(move || secrets.set(&p, kind, value.as_deref())).await?;
        if let Err(e) = stored {
            tracing::warn!(provider, field, error = %e, "cannot store a secret");
            return Ok(super::secret_not_stored(field));
        }
    }
    for (name, value) in named {
        let secrets = ctx.services.secrets.clone();
        let p = provider.clone();
        let n = name.clone();
        let stored = super::with_secret_store(move || secrets.set_provider_secret(&p, &n, value.as_deref())).await?;
        if let Err(e) = stored {
            tracing::warn!(provider, name, error = %e, "cannot store a secret");
            return Ok(super::secret_not_stored(&format!("named.{name}")));
        }
    }
    let mut answer = view(&ctx);
    if key_set {
        answer.discovery_note = discover_by_default(&ctx, adapter.as_ref()).await?;
    }
    Ok(Json(answer).into_response())
}

/// A key set means every job watched: discovery turned on for a provider that lists its jobs,
/// unless the owner chose already (`<provider>.discover`); what was done, or what it needs.
async fn discover_by_default(ctx: &ApiContext, provider: &dyn crate::providers::Provider) -> Result<Option<String>, ApiError> {
    let name = provider.name();
    if !provider.can_discover() {
        return Ok(None);
    }
    let account_key = crate::owner_account::setting_key(name);
    if crate::owner_account::discovery_waits(&ctx.services.settings, provider) {
        return Ok(Some(format!(
            "{name} can list your account's jobs, so that one you did not track is watched too: set {account_key} (your {name} account id), then turn on {name}.discover"
        )));
    }
    if !ctx.services.settings.discover_by_default(name).await? {
        return Ok(None);
    }
    Ok(Some(format!(
        "Discovery is on for {name}: every job of this account is watched, wherever it was started, those running now included. For an account you share, turn it off ({name}.discover off)."
    )))
}

/// `POST /api/secrets/replicate/fetch`: asks Replicate for the account's webhook signing secret
/// with the stored API key and keeps it. Answers which secrets are set; never the secret.
#[utoipa::path(
    post, path = "/api/secrets/replicate/fetch", operation_id = "fetch_replicate_secret", tag = "settings",
    summary = "Ask Replicate for its webhook signing secret with the stored API key",
    responses((status = 200, description = "The secrets' status, the signing secret now set", body = SecretsView), (status = 502, description = "Replicate refused or could not be reached", body = super::ErrorBody))
)]
async fn fetch_replicate_secret(State(ctx): State<Arc<ApiContext>>) -> Result<Response, ApiError> {
    let provider_ctx = crate::providers::ProviderContext::new(ctx.services.secrets.clone(), ctx.services.settings.clone());
    match crate::providers::replicate::fetch_signing_secret(&provider_ctx).await {
        Ok(_) => Ok(Json(view(&ctx)).into_response()),
        Err(e) => {
            Ok((StatusCode::BAD_GATEWAY, Json(ErrorBody::new(format!("cannot fetch Replicate's signing secret: {e}")))).into_response())
        }
    }
}

/// What the test delivery did.
#[derive(Debug, Clone, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct TestDelivery {
    pub job_id: String,
    pub delivery_id: String,
    /// The receiver's HTTP status.
    pub status: u16,
    /// The receiver's answer (`{"outcome": ...}` or `{"error": ...}`).
    pub answer: HookAnswer,
}

/// `POST /api/test-delivery`: a generic `succeeded` delivery for a new job, signed with the
/// stored generic webhook secret and posted to this instance's receiver, as a sender would.
#[utoipa::path(
    post, path = "/api/test-delivery", operation_id = "test_delivery", tag = "settings",
    summary = "Send a signed test delivery to this receiver",
    description = "A generic `succeeded` delivery for a new job, signed with the stored generic webhook secret, posted to the receiver as a sender would.",
    responses((status = 200, description = "What the receiver answered", body = TestDelivery), (status = 400, description = "No generic webhook secret is set", body = super::ErrorBody))
)]
async fn test_delivery(State(ctx): State<Arc<ApiContext>>) -> Result<Json<TestDelivery>, ApiError> {
    let Some(secret) = ctx.services.secrets.get("generic", SecretKind::WebhookSecret) else {
        return Err(ApiError::BadRequest("no webhook secret is set for the generic provider: set one in Settings first".into()));
    };
    let stamp = now_ms();
    let job_id = format!("nevermiss-test-{stamp}");
    let delivery_id = format!("test-{stamp}");
    let label = "NeverMiss test delivery";
    let delivery =
        OwnDelivery { delivery_id: &delivery_id, job_id: &job_id, state: JobState::Succeeded, seq: 1, label, finished_at: Some(stamp) };
    let (body, signature) = delivery.signed(&secret);
    let url = format!("{}/hooks/generic", ctx.services.instance.receiver_url);
    let response = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("x-agent-signature", signature)
        .header("user-agent", concat!("NeverMiss/", env!("CARGO_PKG_VERSION"), " test delivery"))
        .timeout(std::time::Duration::from_secs(10))
        .body(body)
        .send()
        .await
        .map_err(|e| ApiError::BadRequest(format!("the receiver at {url} did not answer: {e}")))?;
    let status = response.status().as_u16();
    let answer = response
        .json::<HookAnswer>()
        .await
        .unwrap_or_else(|e| HookAnswer { outcome: None, error: Some(format!("the receiver's answer is not readable: {e}")) });
    Ok(Json(TestDelivery { job_id, delivery_id, status, answer }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_checked() {
        assert!(check_secret("whsec_abc123").is_ok());
        assert!(check_secret(" padded").is_err());
        assert!(check_secret("two\nlines").is_err());
        assert!(check_secret(&"x".repeat(MAX_SECRET + 1)).is_err());
    }

    #[test]
    fn null_and_missing_differ() {
        let u: SecretsUpdate = serde_json::from_str(r#"{"api_key": null}"#).unwrap();
        assert_eq!(u.api_key, Some(None));
        assert_eq!(u.webhook_secret, None);
        let u: SecretsUpdate = serde_json::from_str(r#"{"webhook_secret": "s"}"#).unwrap();
        assert_eq!(u.webhook_secret, Some(Some("s".into())));
    }
}

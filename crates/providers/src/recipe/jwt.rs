//! A recipe's `verify = "jwt"`: the sender signs each delivery with an RS256 JWT (in
//! `Authorization: Bearer <token>`, or the header the recipe names), checked against the
//! platform's key set (a JWKS URL), with the audience and the issuer the recipe names and its
//! expiry (`LEEWAY` either way). Such a token proves only the platform (Google signs every
//! customer's deliveries with the same keys), so the recipe must also prove the account: `account`
//! is a jq expression on `{"claims": <the token's claims>, "body": <the delivery>}` whose value
//! must equal `owner`, a template of the owner's secret (`{secret.NAME}`: a per-owner token set
//! where the job was submitted, or the owner's account id), compared in constant time. A delivery
//! for another account is refused as unverified, as `foreign_account` (contract §7).
//!
//! ```toml
//! [webhook]
//! verify = "jwt"
//! jwks_url = "https://platform.example/.well-known/jwks.json"
//! audience = "{webhook_url}"        # this instance's webhook URL (NEVERMISS_PUBLIC_URL or the
//!                                   # setting tunnel.public_url, then /hooks/NAME), or a text
//! issuer = "https://platform.example"
//! account = ".body.user_metadata.nevermiss"
//! owner = "{secret.owner_token}"    # NEVERMISS_<NAME>_OWNER_TOKEN or the secret store
//! job_id = ".data.id"
//! ```
//!
//! The key set is fetched over HTTPS (http only on loopback, as every URL of a recipe), kept a
//! day, by `kid`; a token whose `kid` the set does not have makes it fetched again, at most once
//! a minute (`MIN_REFRESH`), so forged tokens cannot make NeverMiss hammer the platform.

use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use reqwest::header::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::expression::{self, Expression, Output};
use super::{url_allowed, Piece, Template};
use crate::VerifyError;

/// Accepted clock difference on `exp` and `nbf`, in seconds.
pub const LEEWAY: u64 = 60;
/// Longest a fetched key set is trusted.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Least time between two fetches caused by a token whose key the set does not have.
pub const MIN_REFRESH: Duration = Duration::from_secs(60);
/// With no key set held, least time between two attempts after a failed one (meanwhile
/// deliveries are answered 503 and the sender retries).
pub const FAILED_LOAD_RETRY: Duration = Duration::from_secs(5);
/// Most time a key set's fetch may take (a delivery waits for it).
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// What a refusal names when the token's header is missing.
const TOKEN_HEADER: &str = "the recipe's token header (a JWT)";

/// The audience a token must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// This instance's webhook URL for the provider: its public URL, then `/hooks/<name>`.
    WebhookUrl,
    Text(String),
}

/// `verify = "jwt"`, checked.
#[derive(Debug, Clone)]
pub struct Jwt {
    pub jwks_url: String,
    /// The header that carries the token, lower-case; `authorization` takes `Bearer <token>`.
    pub header: String,
    pub audience: Audience,
    pub issuer: String,
    /// The account the delivery is for, on `{"claims", "body"}`.
    pub account: Expression,
    /// The owner's account or per-owner secret, with at least one secret in it.
    pub owner: Template,
}

/// The fields of `[webhook]` a JWT scheme reads, as written.
pub(super) struct WrittenJwt<'a> {
    pub header: Option<&'a str>,
    pub jwks_url: Option<&'a str>,
    pub audience: Option<&'a str>,
    pub issuer: Option<&'a str>,
    pub account: Option<&'a str>,
    pub owner: Option<&'a str>,
}

impl Jwt {
    /// Checks the scheme's keys; each refusal is `(key, problem)`, the key under `webhook.`.
    pub(super) fn check(w: WrittenJwt<'_>) -> Result<Jwt, (String, String)> {
        let refuse = |key: &str, problem: &str| (format!("webhook.{key}"), problem.to_owned());
        let present = |v: Option<&str>| v.map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        let jwks_url = present(w.jwks_url).ok_or_else(|| refuse("jwks_url", "is missing: write the URL of the sender's key set (JWKS)"))?;
        url_allowed(&jwks_url).map_err(|p| refuse("jwks_url", &p))?;
        let header = match present(w.header) {
            None => "authorization".to_owned(),
            Some(h) if reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_ok() => h.to_ascii_lowercase(),
            Some(_) => return Err(refuse("header", "is not a header's name")),
        };
        let audience = match present(w.audience).as_deref() {
            None => {
                return Err(refuse(
                    "audience",
                    "is missing: write \"{webhook_url}\" (this instance's webhook URL) or the audience the sender names",
                ))
            }
            Some("{webhook_url}") => Audience::WebhookUrl,
            Some(text) if text.contains('{') => return Err(refuse("audience", "takes no placeholder but a whole \"{webhook_url}\"")),
            Some(text) => Audience::Text(text.to_owned()),
        };
        let issuer = present(w.issuer).ok_or_else(|| refuse("issuer", "is missing: write the issuer (iss) the sender's tokens name"))?;
        // The account proof: a JWT proves the platform, never whose delivery it is.
        let no_proof = "a JWT proves only the platform, not your account: write account = \"<jq on .claims or .body giving the account>\" and owner = \"{secret.NAME}\" (your account, or a token you set where the job is submitted)";
        let account = present(w.account).ok_or_else(|| refuse("account", no_proof))?;
        let account = Expression::compile(&account).map_err(|p| ("webhook.account".to_owned(), p))?;
        let owner = present(w.owner).ok_or_else(|| refuse("owner", no_proof))?;
        let owner = Template::parse(&owner).map_err(|p| refuse("owner", &p))?;
        if !owner.0.iter().any(|p| matches!(p, Piece::Secret(_) | Piece::ApiKey)) {
            return Err(refuse(
                "owner",
                "holds no secret: write {secret.NAME}, set by NEVERMISS_<NAME>_<SECRET> or the secret store, never the value itself",
            ));
        }
        if owner.0.iter().any(|p| matches!(p, Piece::JobId | Piece::JobIdPart(_) | Piece::JobIdPath | Piece::BaseUrl)) {
            return Err(refuse("owner", "names a job or a URL: write {secret.NAME}"));
        }
        Ok(Jwt { jwks_url, header, audience, issuer, account, owner })
    }

    /// The token of a request: the header's value (after `Bearer ` for `Authorization`).
    fn token<'a>(&self, headers: &'a HeaderMap) -> Result<&'a str, VerifyError> {
        let value = headers.get(self.header.as_str()).and_then(|v| v.to_str().ok()).map(str::trim).unwrap_or_default();
        let token = if self.header == "authorization" {
            value.get(..7).filter(|p| p.eq_ignore_ascii_case("bearer ")).map(|_| value[7..].trim()).unwrap_or_default()
        } else {
            value
        };
        if token.is_empty() {
            return Err(VerifyError::Missing(TOKEN_HEADER));
        }
        Ok(token)
    }

    /// Checks a request's token: its signature by a key of the set (`keys`, fetched with `http`),
    /// its audience `audience`, issuer and expiry; then that its account is `owner`'s.
    pub async fn verify(
        &self,
        provider: &'static str,
        keys: &KeyCache,
        http: &reqwest::Client,
        audience: &str,
        owner: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), VerifyError> {
        let token = self.token(headers)?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| VerifyError::Invalid)?;
        if header.alg != Algorithm::RS256 {
            return Err(VerifyError::Invalid);
        }
        let key = keys.key(http, &self.jwks_url, header.kid.as_deref()).await?.ok_or(VerifyError::Invalid)?;
        let mut validation = Validation::new(Algorithm::RS256);
        validation.leeway = LEEWAY;
        validation.set_audience(&[audience]);
        validation.set_issuer(&[&self.issuer]);
        validation.set_required_spec_claims(&["exp", "aud", "iss"]);
        // A token not valid yet (`nbf`, with the same leeway) is refused as an expired one is.
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature | jsonwebtoken::errors::ErrorKind::ImmatureSignature => VerifyError::Expired,
            _ => VerifyError::Invalid,
        })?;
        // Whose delivery: the account it names, against the owner's, in constant time.
        let body = serde_json::from_slice::<serde_json::Value>(body).unwrap_or(serde_json::Value::Null);
        let input = serde_json::json!({"claims": claims.claims, "body": body});
        let input = expression::read_json(input.to_string().as_bytes()).map_err(|_| VerifyError::Invalid)?;
        let account = match self.account.run_on(input) {
            Ok(Output::Value(serde_json::Value::String(s))) => s,
            Ok(Output::Value(other)) if !other.is_null() => other.to_string(),
            _ => String::new(),
        };
        let same = bool::from(Sha256::digest(account.as_bytes()).ct_eq(&Sha256::digest(owner.as_bytes())));
        if account.is_empty() || !same {
            let named = if account.is_empty() { "no account".to_owned() } else { "another account".to_owned() };
            return Err(VerifyError::ForeignAccount(format!(
                "signed by {provider}'s platform, but `{}` gave {named}, not the owner's: the platform signs every customer's deliveries with the same keys, so only the owner's are taken (the owner's is set by the recipe's owner, {})",
                self.account.text(),
                self.owner_names()
            )));
        }
        Ok(())
    }

    /// The secrets `owner` reads, as a user sets them.
    fn owner_names(&self) -> String {
        let names: Vec<String> = self
            .owner
            .0
            .iter()
            .filter_map(|p| match p {
                Piece::Secret(name) => Some(format!("{{secret.{name}}}")),
                Piece::ApiKey => Some("{api_key}".to_owned()),
                _ => None,
            })
            .collect();
        names.join(", ")
    }
}

/// The key set in memory, by URL. One fetch at a time (the lock): a burst of deliveries with an
/// unknown `kid` causes one fetch, not one each.
#[derive(Default)]
pub struct KeyCache {
    state: tokio::sync::Mutex<Cached>,
}

#[derive(Default)]
struct Cached {
    url: String,
    keys: Vec<(Option<String>, DecodingKey)>,
    fetched_at: Option<Instant>,
    /// The last fetch attempt, and whether it failed with why.
    last_attempt: Option<Instant>,
    /// The last fetch caused by a `kid` the set held did not have.
    last_refresh: Option<Instant>,
    last_failure: Option<String>,
    /// How many fetches were made (each attempt), for the logs.
    fetches: u64,
}

impl Cached {
    fn find(&self, kid: Option<&str>) -> Option<DecodingKey> {
        match kid {
            Some(kid) => self.keys.iter().find(|(k, _)| k.as_deref() == Some(kid)).map(|(_, key)| key.clone()),
            // A token without `kid`: the set's one key, if it has only one.
            None if self.keys.len() == 1 => Some(self.keys[0].1.clone()),
            None => None,
        }
    }

    fn fresh(&self) -> bool {
        self.fetched_at.is_some_and(|at| at.elapsed() < MAX_AGE)
    }
}

impl KeyCache {
    /// The key `kid` names in the set at `url`: from the set held while it is under a day old,
    /// else after fetching it (again at most once a minute for a `kid` the set does not have).
    /// `Ok(None)`: the set has no such key; `Unavailable` when no set can be had now (503).
    async fn key(&self, http: &reqwest::Client, url: &str, kid: Option<&str>) -> Result<Option<DecodingKey>, VerifyError> {
        let mut cached = self.state.lock().await;
        if cached.url != url {
            *cached = Cached { url: url.to_owned(), ..Cached::default() };
        }
        if cached.fresh() {
            if let Some(key) = cached.find(kid) {
                return Ok(Some(key));
            }
            if cached.last_refresh.is_some_and(|at| at.elapsed() < MIN_REFRESH) {
                return Ok(None);
            }
            cached.last_refresh = Some(Instant::now());
        } else if let (Some(at), Some(reason)) = (cached.last_attempt, &cached.last_failure) {
            if at.elapsed() < FAILED_LOAD_RETRY {
                return Err(VerifyError::Unavailable(reason.clone()));
            }
        }
        cached.last_attempt = Some(Instant::now());
        cached.fetches += 1;
        match fetch(http, url).await {
            Ok(keys) => {
                tracing::debug!(url, keys = keys.len(), fetches = cached.fetches, "fetched a recipe's key set");
                cached.keys = keys;
                cached.fetched_at = Some(Instant::now());
                cached.last_failure = None;
                Ok(cached.find(kid))
            }
            Err(reason) if cached.fresh() => {
                tracing::warn!(url, %reason, "cannot refresh a recipe's key set");
                Ok(None)
            }
            Err(reason) => {
                tracing::warn!(url, %reason, "cannot load a recipe's key set");
                cached.last_failure = Some(reason.clone());
                Err(VerifyError::Unavailable(reason))
            }
        }
    }
}

/// The RSA keys of the JWKS at `url`, each with its `kid`; other kinds of key are skipped.
async fn fetch(http: &reqwest::Client, url: &str) -> Result<Vec<(Option<String>, DecodingKey)>, String> {
    let response =
        http.get(url).timeout(FETCH_TIMEOUT).send().await.map_err(|e| format!("cannot fetch the key set: {}", e.without_url()))?;
    if !response.status().is_success() {
        return Err(format!("the key set answered {}", response.status().as_u16()));
    }
    let bytes = crate::read_answer(response).await.map_err(|e| format!("cannot read the key set: {e}"))?;
    let set: jsonwebtoken::jwk::JwkSet = serde_json::from_slice(&bytes).map_err(|e| format!("the key set is not a JWKS: {e}"))?;
    let keys: Vec<_> = set
        .keys
        .iter()
        .filter(|jwk| matches!(jwk.algorithm, jsonwebtoken::jwk::AlgorithmParameters::RSA(_)))
        .filter_map(|jwk| DecodingKey::from_jwk(jwk).ok().map(|key| (jwk.common.key_id.clone(), key)))
        .collect();
    if keys.is_empty() {
        return Err("the key set has no RSA key".to_owned());
    }
    Ok(keys)
}

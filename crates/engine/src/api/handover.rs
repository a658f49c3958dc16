//! How the owner's token reaches a browser, and how the CLI knows it talks to its own instance,
//! so that the permanent token never travels further than it must:
//! - `POST /api/ui-codes` (the owner only) hands out a one-time code: usable once, for
//!   `UI_CODE_TTL` (60 s), kept in memory only. `nevermiss open` opens `http://API/#code=...`,
//!   and the page exchanges it with `POST /api/ui-codes/redeem {"code"}`, which answers the token
//!   once. So what a browser's command line shows (`ps`) is a code already spent or soon dead.
//! - `GET /api/whoami?challenge=R` answers `{"proof": hex(HMAC-SHA256(token, R "\n" ADDR))}`,
//!   ADDR the address this API listens on (`127.0.0.1:8788`). The CLI sends its token only
//!   after it has computed the same proof with the token it read from the data dir: whatever
//!   else listens on that port (another user's program) learns nothing of the token.
//!
//! The redeem and the whoami need no token (they are how one gets or proves it) and are still
//! behind the Origin and Host checks of every other call (`require_own_origin`): a page of
//! another origin cannot redeem a code. A code is 32 random bytes: it cannot be guessed in its
//! minute.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::{ApiContext, ApiError, Query, Routes};

/// How long a code for the UI may be redeemed.
pub const UI_CODE_TTL: Duration = Duration::from_secs(60);
/// Codes kept at most (the oldest go first): `nevermiss open` run in a loop holds no memory.
const CODES_KEPT: usize = 64;
/// Longest challenge answered.
const MAX_CHALLENGE: usize = 256;

/// The one-time codes handed out and not yet redeemed, with when each stops being valid.
pub struct UiCodes {
    ttl: Duration,
    codes: Mutex<HashMap<String, Instant>>,
}

impl UiCodes {
    /// Codes valid for `ttl` (`UI_CODE_TTL`; tests give another).
    pub fn new(ttl: Duration) -> UiCodes {
        UiCodes { ttl, codes: Mutex::default() }
    }

    /// A new code and how long it is valid.
    pub fn issue(&self) -> (String, Duration) {
        let code = hex::encode(rand::random::<[u8; 32]>());
        let now = Instant::now();
        let mut codes = self.codes.lock().unwrap();
        codes.retain(|_, until| *until > now);
        while codes.len() >= CODES_KEPT {
            let Some(oldest) = codes.iter().min_by_key(|(_, until)| **until).map(|(c, _)| c.clone()) else { break };
            codes.remove(&oldest);
        }
        codes.insert(code.clone(), now + self.ttl);
        (code, self.ttl)
    }

    /// Whether `code` was handed out and is still valid; it is spent either way.
    pub fn redeem(&self, code: &str) -> bool {
        let until = self.codes.lock().unwrap().remove(code);
        until.is_some_and(|until| Instant::now() < until)
    }
}

/// The proof that whoever answers holds `token` and listens at `addr`: hex(HMAC-SHA256(token,
/// challenge "\n" addr)). The CLI computes the same to compare.
pub fn whoami_proof(token: &str, challenge: &str, addr: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(challenge.as_bytes());
    mac.update(b"\n");
    mac.update(addr.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// The owner's call, behind the token: `POST /api/ui-codes`.
pub fn router() -> Routes {
    Routes::new().owner("/ui-codes", post(issue))
}

/// The calls without a token (still behind `require_own_origin`), merged beside `/api`.
pub fn open_router() -> Router<Arc<ApiContext>> {
    Router::new().route("/api/ui-codes/redeem", post(redeem)).route("/api/whoami", get(whoami))
}

/// `POST /api/ui-codes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UiCode {
    pub code: String,
    /// RFC 3339 UTC.
    pub expires_at: String,
}

#[utoipa::path(
    post, path = "/api/ui-codes", operation_id = "issue_ui_code", tag = "access",
    summary = "A one-time code that opens the web UI",
    description = "The code is redeemed once by `POST /api/ui-codes/redeem` before it expires (a browser opened with `#code=` in its URL does so).",
    responses((status = 201, description = "The code and when it expires", body = UiCode))
)]
async fn issue(State(ctx): State<Arc<ApiContext>>) -> (axum::http::StatusCode, Json<UiCode>) {
    let (code, ttl) = ctx.ui_codes.issue();
    let expires_at = chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or_default();
    let expires_at = expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    (axum::http::StatusCode::CREATED, Json(UiCode { code, expires_at }))
}

/// `POST /api/ui-codes/redeem`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Redeem {
    pub code: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Redeemed {
    pub token: String,
}

#[utoipa::path(
    post, path = "/api/ui-codes/redeem", operation_id = "redeem_ui_code", tag = "access", security(()),
    summary = "Trade a one-time code for the API token (no token needed)",
    request_body = Redeem,
    responses((status = 200, description = "The token", body = Redeemed), (status = 400, description = "Not a `{\"code\"}` body", body = super::ErrorBody), (status = 401, description = "Unknown, used or expired code", body = super::ErrorBody))
)]
async fn redeem(
    State(ctx): State<Arc<ApiContext>>,
    body: Result<Json<Redeem>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Redeemed>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if ctx.ui_codes.redeem(body.code.trim()) {
        Ok(Json(Redeemed { token: ctx.token.clone() }))
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// `GET /api/whoami?challenge=R`.
#[derive(Debug, Deserialize)]
struct Challenge {
    challenge: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Proof {
    pub proof: String,
}

#[utoipa::path(
    get, path = "/api/whoami", operation_id = "whoami", tag = "access", security(()),
    summary = "Prove this is the instance that holds the token (no token needed)",
    description = "The proof is hex HMAC-SHA256 under the API token of the challenge, a line break, and the API's address: the CLI checks it before it sends the token anywhere.",
    params(("challenge" = String, Query, description = "1 to 256 characters of the caller's choosing")),
    responses((status = 200, description = "The proof", body = Proof), (status = 400, description = "No challenge, or too long", body = super::ErrorBody))
)]
async fn whoami(State(ctx): State<Arc<ApiContext>>, Query(query): Query<Challenge>) -> Result<Json<Proof>, ApiError> {
    if query.challenge.is_empty() || query.challenge.len() > MAX_CHALLENGE {
        return Err(ApiError::BadRequest(format!("a challenge of 1 to {MAX_CHALLENGE} characters is needed")));
    }
    Ok(Json(Proof { proof: whoami_proof(&ctx.token, &query.challenge, &ctx.api_addr.to_string()) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_works_once() {
        let codes = UiCodes::new(UI_CODE_TTL);
        let (code, ttl) = codes.issue();
        assert_eq!(ttl, UI_CODE_TTL);
        assert!(!codes.redeem("not-a-code"));
        assert!(codes.redeem(&code));
        assert!(!codes.redeem(&code), "a code works once");
    }

    #[test]
    fn an_expired_code_is_refused() {
        let codes = UiCodes::new(Duration::ZERO);
        let (code, _) = codes.issue();
        assert!(!codes.redeem(&code));
    }

    #[test]
    fn codes_kept_are_bounded() {
        let codes = UiCodes::new(UI_CODE_TTL);
        let first = codes.issue().0;
        for _ in 0..CODES_KEPT {
            codes.issue();
        }
        assert!(codes.codes.lock().unwrap().len() <= CODES_KEPT);
        assert!(!codes.redeem(&first), "the oldest went first");
    }

    #[test]
    fn the_proof_binds_the_token_the_challenge_and_the_address() {
        let proof = whoami_proof("t", "r", "127.0.0.1:8788");
        assert_eq!(proof.len(), 64);
        assert_ne!(proof, whoami_proof("u", "r", "127.0.0.1:8788"));
        assert_ne!(proof, whoami_proof("t", "s", "127.0.0.1:8788"));
        assert_ne!(proof, whoami_proof("t", "r", "127.0.0.1:8789"));
        assert_eq!(proof, whoami_proof("t", "r", "127.0.0.1:8788"));
    }
}

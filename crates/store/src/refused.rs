//! The `refused` table: the last requests the receiver refused before parsing them (a bad or
//! missing signature, a timestamp out of tolerance, an unknown provider, a request that could not
//! be verified now), with their headers and body already masked and the likely cause in words.
//! Bounded: each insert trims the table to `KEPT` rows in the same write, so a flood of forged
//! requests never grows it.

use super::sql::{self, params, Db};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::closed_set::closed_set;
use crate::job::rfc3339;

/// How many refused requests are kept.
pub const KEPT: i64 = 200;

closed_set! {
    /// Why the receiver refused a request.
    #[ts(export)]
    pub enum RefusalKind {
        /// A signature header is missing (401).
        MissingHeader = "missing_header",
        /// The signature does not match the webhook secret (401).
        BadSignature = "bad_signature",
        /// The signed timestamp is more than 5 minutes away from now (401).
        Expired = "expired",
        /// No provider has that name (404).
        UnknownProvider = "unknown_provider",
        /// No webhook secret is set for the provider (503, so the sender retries).
        NotConfigured = "not_configured",
        /// The webhook secret set cannot be used as that provider's secret (503).
        BadSecret = "bad_secret",
        /// The keys to verify with cannot be had right now (503).
        Unverifiable = "unverifiable",
        /// Signed by the platform for an account that is not the owner's (401): a scheme that
        /// proves only the platform, such as fal's.
        ForeignAccount = "foreign_account",
    }
}

/// A refused request as it is kept (headers and body already masked, body capped).
#[derive(Debug, Clone)]
pub struct NewRefusal {
    pub provider: String,
    pub status: u16,
    pub kind: RefusalKind,
    /// What the sender was answered.
    pub error: String,
    /// The likely cause, in words.
    pub cause: String,
    pub headers_json: String,
    pub body: Vec<u8>,
    /// The length of the body as received (before the cap).
    pub body_length: usize,
}

/// A refused request, as `GET /api/refused` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct Refusal {
    pub id: i64,
    pub received_at: String,
    /// The provider named in the URL (`/hooks/{provider}`), known or not.
    pub provider: String,
    /// The HTTP status the sender was answered.
    pub status: u16,
    pub kind: RefusalKind,
    /// What the sender was answered.
    pub error: String,
    /// The likely cause, in words.
    pub cause: String,
    /// Header name to value (credentials masked).
    #[ts(type = "Record<string, string>")]
    pub headers: serde_json::Value,
    /// The body as text (invalid UTF-8 replaced, credentials masked), up to the storage cap.
    pub body: String,
    /// The body's length as received, in bytes.
    pub body_length: i64,
    pub body_truncated: bool,
}

/// Keeps a refused request and trims the table to the newest `KEPT`, in the caller's write.
pub fn insert(conn: &dyn Db, r: &NewRefusal, now: i64) -> sql::Result<()> {
    let newest: i64 = conn
        .prepare_cached(
            "INSERT INTO refused (received_at, provider, status, kind, error, cause, headers, body, body_length, body_truncated)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         RETURNING id",
        )?
        .query_row(
            params![
                now,
                r.provider,
                r.status,
                r.kind.as_str(),
                r.error,
                r.cause,
                r.headers_json,
                r.body,
                r.body_length as i64,
                r.body.len() < r.body_length
            ],
            |r| r.get(0),
        )?;
    // Ids only grow (the newest row is never deleted), so the newest KEPT are the top KEPT ids.
    conn.prepare_cached("DELETE FROM refused WHERE id <= $1")?.execute([newest - KEPT])?;
    Ok(())
}

/// The newest `limit` refused requests, newest first.
pub fn newest(conn: &dyn Db, limit: i64) -> sql::Result<Vec<Refusal>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, received_at, provider, status, kind, error, cause, headers, body, body_length, body_truncated
         FROM refused ORDER BY id DESC LIMIT $1",
    )?;
    let rows = stmt.query_map([limit], |row| {
        let kind: String = row.get("kind")?;
        let headers: String = row.get("headers")?;
        let body: Vec<u8> = row.get("body")?;
        Ok(Refusal {
            id: row.get("id")?,
            received_at: rfc3339(row.get("received_at")?),
            provider: row.get("provider")?,
            status: row.get("status")?,
            kind: RefusalKind::parse(&kind).unwrap_or(RefusalKind::BadSignature),
            error: row.get("error")?,
            cause: row.get("cause")?,
            headers: serde_json::from_str(&headers).unwrap_or(serde_json::Value::Null),
            body: String::from_utf8_lossy(&body).into_owned(),
            body_length: row.get("body_length")?,
            body_truncated: row.get("body_truncated")?,
        })
    })?;
    rows.collect()
}

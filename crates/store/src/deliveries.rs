//! The `deliveries` table: every signed request to a hook. An accepted one is the dedupe key
//! (unique on provider and delivery id); a rejected one is kept whole so that nothing is lost.

use super::sql::{self, params, Db, OptionalExtension};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::job::rfc3339;

/// The raw request as kept for inspection (headers already masked, body already capped).
#[derive(Debug, Clone, Default)]
pub struct RawRequest {
    pub headers_json: String,
    pub body: Vec<u8>,
    pub body_truncated: bool,
}

/// Records an accepted delivery; false when (provider, delivery id) was seen already: a duplicate.
pub fn insert_accepted(conn: &dyn Db, provider: &str, delivery_id: &str, job_id: &str, raw: &RawRequest, now: i64) -> sql::Result<bool> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
             VALUES ($1, $2, $3, $4, 'accepted', $5, $6, $7)
             ON CONFLICT (provider, delivery_id) WHERE status = 'accepted' DO NOTHING",
        )?
        .execute(params![provider, delivery_id, job_id, now, raw.headers_json, raw.body, raw.body_truncated])?;
    Ok(inserted == 1)
}

/// A signed request whose payload could not be used, as it is kept: whose it is, the ids that
/// could be read from it, the request itself and why it was rejected.
#[derive(Debug, Clone, Copy)]
pub struct NewRejected<'a> {
    pub provider: &'a str,
    pub delivery_id: Option<&'a str>,
    pub job_id: Option<&'a str>,
    pub raw: &'a RawRequest,
    pub reason: &'a str,
}

/// Keeps a rejected request, with why, once per (provider, delivery id): false when that
/// delivery was kept already (a resend). Without a delivery id it is always kept.
pub fn insert_rejected(conn: &dyn Db, rejected: &NewRejected<'_>, now: i64) -> sql::Result<bool> {
    let NewRejected { provider, delivery_id, job_id, raw, reason } = *rejected;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, reason, headers, body, body_truncated)
             VALUES ($1, $2, $3, $4, 'rejected', $5, $6, $7, $8)
             ON CONFLICT (provider, delivery_id) WHERE status = 'rejected' DO NOTHING",
        )?
        .execute(params![provider, delivery_id, job_id, now, reason, raw.headers_json, raw.body, raw.body_truncated])?;
    Ok(inserted == 1)
}

/// A kept request, as the job detail screen shows it.
#[derive(Debug, Clone, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct StoredDelivery {
    pub provider: String,
    pub delivery_id: Option<String>,
    pub job_id: Option<String>,
    pub received_at: String,
    pub status: String,
    pub reason: Option<String>,
    /// Header name to value (credentials masked).
    #[ts(type = "Record<string, string>")]
    pub headers: serde_json::Value,
    /// The body as text (invalid UTF-8 replaced), as received up to the storage cap.
    pub body: String,
    pub body_truncated: bool,
}

pub fn delivery(conn: &dyn Db, provider: &str, delivery_id: &str) -> sql::Result<Option<StoredDelivery>> {
    conn.prepare_cached(
        "SELECT provider, delivery_id, job_id, received_at, status, reason, headers, body, body_truncated
         FROM deliveries WHERE provider = $1 AND delivery_id = $2 ORDER BY id LIMIT 1",
    )?
    .query_row(params![provider, delivery_id], |row| {
        let headers: String = row.get("headers")?;
        let body: Vec<u8> = row.get("body")?;
        Ok(StoredDelivery {
            provider: row.get("provider")?,
            delivery_id: row.get("delivery_id")?,
            job_id: row.get("job_id")?,
            received_at: rfc3339(row.get("received_at")?),
            status: row.get("status")?,
            reason: row.get("reason")?,
            headers: serde_json::from_str(&headers).unwrap_or(serde_json::Value::Null),
            body: String::from_utf8_lossy(&body).into_owned(),
            body_truncated: row.get("body_truncated")?,
        })
    })
    .optional()
}

/// When the newest kept delivery arrived (ms), if any.
pub fn last_received_at(conn: &dyn Db) -> sql::Result<Option<i64>> {
    conn.query_row("SELECT max(received_at) FROM deliveries", [], |r| r.get(0))
}

/// When one delivery arrived (ms), if it did.
pub fn received_at(conn: &dyn Db, provider: &str, delivery_id: &str) -> sql::Result<Option<i64>> {
    conn.prepare_cached("SELECT received_at FROM deliveries WHERE provider = $1 AND delivery_id = $2")?
        .query_row(params![provider, delivery_id], |r| r.get(0))
        .optional()
}

/// Deletes up to `batch` deliveries received before `cutoff` (ms), oldest first; how many.
pub fn purge_received_before(conn: &dyn Db, cutoff: i64, batch: i64) -> sql::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM deliveries WHERE id IN
           (SELECT id FROM deliveries WHERE received_at < $1 ORDER BY received_at LIMIT $2)",
    )?
    .execute(params![cutoff, batch])
}

//! The `leases` table: a named right held by one process until it expires, for what a fleet of
//! `serve` processes on one database must do one at a time (a provider's reconcile round). The
//! holder renews it while it works and releases it when done; a holder that died simply stops
//! renewing, and the lease is free again when it expires. The rule is in the write itself, as the
//! merge's is: any number of processes may ask at once, the database gives it to one.

use super::sql::{self, params, Db, OptionalExtension};

/// Takes the lease `name` for `holder` until `until` (ms) when it is free, expired at `now`, or
/// already `holder`'s (a renewal). True when `holder` holds it now.
pub fn acquire(conn: &dyn Db, name: &str, holder: &str, now: i64, until: i64) -> sql::Result<bool> {
    conn.prepare_cached(
        "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $4)
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
         WHERE leases.holder = excluded.holder OR leases.expires_at <= $3
         RETURNING holder",
    )?
    .query_row(params![name, holder, now, until], |r| r.get::<_, String>(0))
    .optional()
    .map(|held| held.is_some())
}

/// Gives the lease back at once, if `holder` still holds it.
pub fn release(conn: &dyn Db, name: &str, holder: &str) -> sql::Result<()> {
    conn.prepare_cached("UPDATE leases SET expires_at = 0 WHERE name = $1 AND holder = $2")?.execute(params![name, holder])?;
    Ok(())
}

/// Who holds the lease at `now`, if anyone.
pub fn holder(conn: &dyn Db, name: &str, now: i64) -> sql::Result<Option<String>> {
    conn.prepare_cached("SELECT holder FROM leases WHERE name = $1 AND expires_at > $2")?
        .query_row(params![name, now], |r| r.get(0))
        .optional()
}

//! The `settings` table: key to text value.

use super::sql::{self, params, Db, OptionalExtension};

pub fn get(conn: &dyn Db, key: &str) -> sql::Result<Option<String>> {
    conn.prepare_cached("SELECT value FROM settings WHERE key = $1")?.query_row([key], |r| r.get(0)).optional()
}

pub fn set(conn: &dyn Db, key: &str, value: &str) -> sql::Result<()> {
    conn.prepare_cached("INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value")?
        .execute(params![key, value])?;
    Ok(())
}

/// Every stored setting.
pub fn all(conn: &dyn Db) -> sql::Result<std::collections::HashMap<String, String>> {
    let mut stmt = conn.prepare_cached("SELECT key, value FROM settings")?;
    let rows = stmt.query_map([], |r| Ok((r.get("key")?, r.get("value")?)))?;
    rows.collect()
}

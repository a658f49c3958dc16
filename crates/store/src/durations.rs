//! The `job_durations` table: how long the last succeeded jobs of each kind took, a rolling
//! window of at most `WINDOW` rows per kind. The schema's triggers keep it (SQLite's V12,
//! PostgreSQL's V7, side by side): the first time a job of a known kind succeeds, its duration is
//! added and the kind's oldest rows past the window are deleted in the same statement's
//! transaction, whichever path (a push, a poll, the one-call push function) ended it, so the table
//! never grows past `WINDOW` rows a kind. Retention purges the rows of jobs that ended before the
//! jobs' own retention (`purge_before`). What a window means (usual, slower than usual) is the
//! engine's `expected`.

use std::collections::BTreeMap;

use super::sql::{self, params, Db};

/// The most durations kept per kind (the triggers' `OFFSET 100`).
pub const WINDOW: usize = 100;

/// Every kind's window: its durations (ms), oldest first. At most `WINDOW` per kind, so this
/// reads kinds × `WINDOW` rows at most, however many jobs finished.
pub fn windows(conn: &dyn Db) -> sql::Result<BTreeMap<String, Vec<i64>>> {
    let mut windows: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for row in conn.prepare_cached("SELECT kind, duration_ms FROM job_durations ORDER BY kind, id")?.query([])? {
        windows.entry(row.get("kind")?).or_default().push(row.get("duration_ms")?);
    }
    Ok(windows)
}

/// The windows of some kinds (those of a page of jobs), each kind named even when it has no
/// duration (an empty window).
pub fn windows_of<'k>(conn: &dyn Db, kinds: impl IntoIterator<Item = &'k str>) -> sql::Result<BTreeMap<String, Vec<i64>>> {
    let mut windows: BTreeMap<String, Vec<i64>> = kinds.into_iter().map(|kind| (kind.to_owned(), Vec::new())).collect();
    if windows.is_empty() {
        return Ok(windows);
    }
    let names: Vec<sql::Value> = windows.keys().map(|kind| sql::Value::Text(kind.clone())).collect();
    let placeholders: Vec<String> = (1..=names.len()).map(|n| format!("${n}")).collect();
    let statement = format!("SELECT kind, duration_ms FROM job_durations WHERE kind IN ({}) ORDER BY kind, id", placeholders.join(", "));
    for row in conn.prepare_cached(&statement)?.query(names)? {
        windows.entry(row.get("kind")?).or_default().push(row.get("duration_ms")?);
    }
    Ok(windows)
}

/// One kind's window (ms), oldest first.
pub fn window(conn: &dyn Db, kind: &str) -> sql::Result<Vec<i64>> {
    conn.prepare_cached("SELECT duration_ms FROM job_durations WHERE kind = $1 ORDER BY id")?
        .query_map([kind], |r| r.get("duration_ms"))?
        .collect()
}

/// Removes the durations of jobs that ended before `cutoff` (ms), as retention archives those
/// jobs. Returns how many went.
pub fn purge_before(conn: &dyn Db, cutoff: i64) -> sql::Result<usize> {
    conn.prepare_cached("DELETE FROM job_durations WHERE finished_at < $1")?.execute(params![cutoff])
}

/// How many durations are kept, of every kind.
pub fn count(conn: &dyn Db) -> sql::Result<i64> {
    conn.query_row("SELECT count(*) FROM job_durations", [], |r| r.get(0))
}

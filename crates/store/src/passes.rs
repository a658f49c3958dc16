//! The `reconcile_passes` table: the last thousand reconcile passes, what each did.

use std::collections::BTreeMap;

use super::sql::{self, params, Db};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::job::rfc3339;

/// Passes kept; older ones are deleted as new ones are recorded.
const KEPT: i64 = 1000;

/// What polling did with the jobs it asked about, in one provider's round or a whole pass (the
/// sum of its rounds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, TS, utoipa::ToSchema)]
pub struct PollCounts {
    pub checked: u64,
    pub applied: u64,
    pub rescues: u64,
    pub errors: u64,
    pub not_found: u64,
}

impl PollCounts {
    pub fn add(&mut self, other: &PollCounts) {
        self.checked += other.checked;
        self.applied += other.applied;
        self.rescues += other.rescues;
        self.errors += other.errors;
        self.not_found += other.not_found;
    }
}

/// One pass, as recorded and as the metrics show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct PassSummary {
    pub started_at: String,
    pub duration_ms: u64,
    #[serde(flatten)]
    pub counts: PollCounts,
    /// Per provider that had due jobs: `ok`, or why it was not (fully) polled.
    pub providers: BTreeMap<String, String>,
}

/// Records a pass that started at `started_ms`, keeping the last thousand.
pub fn record(conn: &dyn Db, started_ms: i64, pass: &PassSummary) -> sql::Result<()> {
    conn.prepare_cached(
        "INSERT INTO reconcile_passes (started_at, duration_ms, checked, applied, rescues, errors, not_found, providers)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )?
    .execute(params![
        started_ms,
        pass.duration_ms as i64,
        pass.counts.checked as i64,
        pass.counts.applied as i64,
        pass.counts.rescues as i64,
        pass.counts.errors as i64,
        pass.counts.not_found as i64,
        serde_json::to_string(&pass.providers).unwrap_or_default()
    ])?;
    conn.prepare_cached("DELETE FROM reconcile_passes WHERE id <= (SELECT max(id) - $1 FROM reconcile_passes)")?.execute([KEPT])?;
    Ok(())
}

/// The most recent passes, newest first.
pub fn last(conn: &dyn Db, limit: i64) -> sql::Result<Vec<PassSummary>> {
    let mut stmt = conn.prepare_cached(
        "SELECT started_at, duration_ms, checked, applied, rescues, errors, not_found, providers
         FROM reconcile_passes ORDER BY id DESC LIMIT $1",
    )?;
    let rows = stmt.query_map([limit], |r| {
        let providers: String = r.get("providers")?;
        Ok(PassSummary {
            started_at: rfc3339(r.get("started_at")?),
            duration_ms: r.get::<_, i64>("duration_ms")? as u64,
            counts: PollCounts {
                checked: r.get::<_, i64>("checked")? as u64,
                applied: r.get::<_, i64>("applied")? as u64,
                rescues: r.get::<_, i64>("rescues")? as u64,
                errors: r.get::<_, i64>("errors")? as u64,
                not_found: r.get::<_, i64>("not_found")? as u64,
            },
            providers: serde_json::from_str(&providers).unwrap_or_default(),
        })
    })?;
    rows.collect()
}

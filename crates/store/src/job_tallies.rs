//! What moving a job adds to the jobs' tallies on SQLite: jobs per state (`job_state_counts`),
//! completions per day (`daily_completions`) and the durations of the last succeeded jobs of each
//! kind (`job_durations`). The code that moves a job says what it moved (the merge point after its
//! guarded upsert, `jobs::track`, `jobs::kind_if_unknown`); the writer sums a group's changes of
//! state and completions and writes them once before the group's COMMIT (`Tx`,
//! `counters::add_all`). Until V16 SQLite's triggers did this row by row, which made the upsert a
//! statement SQLite kept a statement journal for (issue 34).
//!
//! PostgreSQL keeps its triggers (statement triggers over the transition tables for the states and
//! completions, its V10; row triggers for the durations, its V7, V8 and V11), which see every
//! writer of a fleet. The rules, the same on both:
//! - a job counts in its state: +1 in the state it enters, -1 in the one it leaves (and -1 when it
//!   is deleted: a trigger on both, as a delete is never on the push path);
//! - a job that finishes counts in the UTC day of its last update: within the SLA when it took at
//!   most `sla_secs` (from the provider's start, else from NeverMiss's first sight of it; a job
//!   first seen already finished only from the provider's start, counted apart without one), and
//!   by pull when polling learned its end;
//! - a success of a known kind adds its duration, measured as the SLA's, when it finishes; a
//!   success whose kind is learned after its end adds it then, measured from the provider's start
//!   (`jobs::kind_if_unknown`); a duration below zero (clocks that disagree) is not added.

use super::sql::{self, params, Db, OptionalExtension, Row};
use super::{durations, Tx};
use crate::job::TERMINAL_RANK;

/// The SLA when no setting says (the engine's default, as PostgreSQL's completions trigger has it).
const DEFAULT_SLA_SECS: i64 = 300;

/// A job's row before a write that may move it: what the tallies need of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Before {
    pub state: String,
    pub rank: i64,
}

/// The job's state and rank as they are now, if it exists (read before the guarded upsert).
pub fn before(conn: &dyn Db, provider: &str, job_id: &str) -> sql::Result<Option<Before>> {
    conn.prepare_cached("SELECT state, rank FROM jobs WHERE provider = $1 AND job_id = $2")?
        .query_row(params![provider, job_id], |r| Ok(Before { state: r.get("state")?, rank: r.get("rank")? }))
        .optional()
}

/// A job's row as an adopted upsert left it (the guarded upsert's `RETURNING`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub state: String,
    pub rank: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub started_at: Option<i64>,
    pub terminal_source: Option<String>,
    pub kind: Option<String>,
}

impl Moved {
    pub fn from_row(row: &Row) -> sql::Result<Moved> {
        Ok(Moved {
            state: row.get("state")?,
            rank: row.get("rank")?,
            created_at: row.get("created_at")?,
            updated_at: row.get("updated_at")?,
            finished_at: row.get("finished_at")?,
            started_at: row.get("started_at")?,
            terminal_source: row.get("terminal_source")?,
            kind: row.get("job_kind")?,
        })
    }
}

/// One finished job in the tally of its day (`daily_completions`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Completion {
    /// The UTC day of its last update, `YYYY-MM-DD`.
    pub day: String,
    pub within_sla: bool,
    pub by_pull: bool,
    pub without_start: bool,
}

/// What an adopted upsert adds (SQLite): its change of state, and, when it finished the job, its
/// completion and its duration. `before`: the job as it was (`None`: the upsert created it).
pub fn adopted(tx: &mut Tx<'_>, before: Option<&Before>, moved: &Moved) -> sql::Result<()> {
    match before {
        None => tx.count_jobs_in_state(&moved.state, 1),
        Some(before) if before.state != moved.state => {
            tx.count_jobs_in_state(&before.state, -1);
            tx.count_jobs_in_state(&moved.state, 1);
        }
        Some(_) => {}
    }
    let finished = moved.rank == TERMINAL_RANK && before.is_none_or(|b| b.rank < TERMINAL_RANK);
    let Some(finished_at) = moved.finished_at.filter(|_| finished) else {
        return Ok(());
    };
    // Seen unfinished: measured from the provider's start, else from NeverMiss's first sight;
    // first seen finished: from the provider's start only.
    let since = match before {
        Some(_) => Some(moved.started_at.unwrap_or(moved.created_at)),
        None => moved.started_at,
    };
    let took = since.map(|since| finished_at - since);
    let sla_ms = 1000 * sla_secs(&**tx)?;
    tx.count_completion(Completion {
        day: utc_day(moved.updated_at),
        within_sla: took.is_some_and(|took| took <= sla_ms),
        by_pull: moved.terminal_source.as_deref() == Some("pull"),
        without_start: since.is_none(),
    });
    if let (Some(kind), Some(took)) = (moved.kind.as_deref(), took) {
        if moved.state == "succeeded" && took >= 0 {
            durations::add(&**tx, kind, moved.updated_at, took)?;
        }
    }
    Ok(())
}

/// A job created unfinished by `jobs::track` (state `unknown`), counted at once (SQLite).
pub fn created(conn: &dyn Db, state: &str) -> sql::Result<()> {
    add_to_state(conn, state, 1)
}

/// Adds `n` to the jobs of `state` at once, in SQLite's one shard (a tally not summed in a group:
/// `jobs::track`, `jobs::archive`).
pub fn add_to_state(conn: &dyn Db, state: &str, n: i64) -> sql::Result<()> {
    conn.prepare_cached(
        "INSERT INTO job_state_counts (state, shard, count) VALUES ($1, 0, $2)
         ON CONFLICT (state, shard) DO UPDATE SET count = job_state_counts.count + excluded.count",
    )?
    .execute(params![state, n])?;
    Ok(())
}

/// A success whose kind `jobs::kind_if_unknown` has just said, after its end: its duration from
/// the provider's start (SQLite; PostgreSQL's V8 and V11 trigger).
pub fn kind_learned_late(conn: &dyn Db, provider: &str, job_id: &str) -> sql::Result<()> {
    let ended = conn
        .prepare_cached(&format!(
            "SELECT job_kind, updated_at, finished_at - started_at AS took FROM jobs
             WHERE provider = $1 AND job_id = $2 AND rank = {TERMINAL_RANK} AND state = 'succeeded'
               AND job_kind IS NOT NULL AND started_at IS NOT NULL"
        ))?
        .query_row(params![provider, job_id], |r| {
            Ok((r.get::<_, String>("job_kind")?, r.get::<_, i64>("updated_at")?, r.get::<_, i64>("took")?))
        })
        .optional()?;
    match ended {
        Some((kind, at, took)) if took >= 0 => durations::add(conn, &kind, at, took),
        _ => Ok(()),
    }
}

/// The SLA in seconds (`sla_secs`, as the completions' rule reads it when a job finishes).
fn sla_secs(conn: &dyn Db) -> sql::Result<i64> {
    let set: Option<Option<i64>> = conn
        .prepare_cached("SELECT CAST(value AS BIGINT) AS secs FROM settings WHERE key = 'sla_secs'")?
        .query_row([], |r| r.get("secs"))
        .optional()?;
    Ok(set.flatten().unwrap_or(DEFAULT_SLA_SECS))
}

/// The UTC day of a time in ms, `YYYY-MM-DD` (SQLite's `date(ms / 1000, 'unixepoch')`).
fn utc_day(ms: i64) -> String {
    chrono::DateTime::from_timestamp(ms.div_euclid(1000), 0).unwrap_or_default().format("%Y-%m-%d").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{jobs, Store};

    /// The writes that move a job outside the merge point count it on SQLite as PostgreSQL's
    /// triggers do: a job tracked (in `unknown`, once however often it is tracked), a success whose
    /// kind is said after its end (its duration from its start, once: a kind is said once), a
    /// deleted job (off its state by the delete trigger, kept).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_outside_the_merge_count_their_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).unwrap();
        let in_state = |counts: &std::collections::BTreeMap<String, i64>, state: &str| counts.get(state).copied().unwrap_or(0);
        let counts = store
            .write(|tx| {
                assert!(jobs::track(tx, "generic", "t-1", Some("one"), None, 1_000)?);
                assert!(!jobs::track(tx, "generic", "t-1", Some("again"), None, 2_000)?);
                assert!(jobs::track(tx, "generic", "t-2", None, None, 3_000)?);
                jobs::count_by_state(tx)
            })
            .await
            .unwrap();
        assert_eq!(in_state(&counts, "unknown"), 2);

        let windows = store
            .write(|tx| {
                tx.execute(
                    "INSERT INTO jobs (provider, job_id, state, rank, created_at, updated_at, finished_at, started_at, terminal_source)
                     VALUES ('generic', 'done', 'succeeded', 3, 5000, 9000, 9000, 4000, 'push'),
                            ('generic', 'failed', 'failed', 3, 5000, 9000, 9000, 4000, 'push')",
                    [],
                )?;
                for job_id in ["done", "done", "failed", "t-1"] {
                    jobs::kind_if_unknown(tx, "generic", job_id, "generic/render", None)?;
                }
                durations::windows(tx)
            })
            .await
            .unwrap();
        assert_eq!(windows, std::collections::BTreeMap::from([("generic/render".to_owned(), vec![5_000])]));

        let counts = store
            .write(|tx| {
                jobs::forget(tx, "generic", "t-2")?;
                jobs::count_by_state(tx)
            })
            .await
            .unwrap();
        assert_eq!(in_state(&counts, "unknown"), 1);
    }

    #[test]
    fn the_day_is_utc_and_whole_seconds() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(86_399_999), "1970-01-01");
        assert_eq!(utc_day(86_400_000), "1970-01-02");
        assert_eq!(utc_day(1_780_000_000_000), "2026-05-28");
    }
}

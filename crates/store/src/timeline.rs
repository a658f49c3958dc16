//! The `job_events` table: each job's timeline, every delivery and every adopted poll with what
//! the merge point (or dedupe before it) did with it, and what retention trims of it.
//!
//! A job's events are found differently per dialect, written side by side: on SQLite an event names
//! its job's row (`job_ref`), or, recorded before its job existed, its provider and job id; on
//! PostgreSQL always its provider and job id.

use super::sql::{self, params, Db, Dialect, OptionalExtension};

use crate::job::{rfc3339, JobEvent, JobKey, JobState, Outcome, Source, TimelineEvent};

/// SQLite: the row of the job named by the parameters `$1` (provider) and `$2` (job id), NULL
/// when there is none.
macro_rules! job_row {
    () => {
        "(SELECT id FROM jobs WHERE provider = $1 AND job_id = $2)"
    };
}

/// The columns that name an event's job, as an INSERT lists them.
macro_rules! job_columns {
    (sqlite) => {
        "job_ref, provider, job_id"
    };
    (postgres) => {
        "provider, job_id"
    };
}

/// Their values, for the job named by `$1` and `$2` (on SQLite its row first).
macro_rules! job_values {
    (sqlite) => {
        concat!(job_row!(), ", $1, $2")
    };
    (postgres) => {
        "$1, $2"
    };
}

/// The events of the job named by `$1` and `$2` (on SQLite: those naming its row, and those
/// recorded before it existed).
macro_rules! of_the_job {
    (sqlite) => {
        concat!("(job_ref = ", job_row!(), " OR (job_ref IS NULL AND provider = $1 AND job_id = $2))")
    };
    (postgres) => {
        "(provider = $1 AND job_id = $2)"
    };
}

/// The statement `$template` (a macro taking the dialect) for `$conn`'s database.
macro_rules! for_dialect {
    ($conn:expr, $template:ident) => {
        match $conn.dialect() {
            Dialect::Sqlite => $template!(sqlite),
            Dialect::Postgres => $template!(postgres),
        }
    };
}

/// Records what happened to one event of a job.
pub fn record(
    conn: &dyn Db,
    ev: &JobEvent,
    source: Source,
    delivery_id: Option<&str>,
    outcome: Outcome,
    detail: Option<&str>,
    now: i64,
) -> sql::Result<()> {
    macro_rules! insert {
        ($d:tt) => {
            concat!(
                "INSERT INTO job_events (",
                job_columns!($d),
                ", at, source, delivery_id, state, seq, outcome, detail) VALUES (",
                job_values!($d),
                ", $3, $4, $5, $6, $7, $8, $9)"
            )
        };
    }
    conn.prepare_cached(for_dialect!(conn, insert))?.execute(params![
        ev.provider,
        ev.job_id,
        now,
        source.as_str(),
        delivery_id,
        ev.state.as_str(),
        ev.seq,
        outcome.as_str(),
        detail
    ])?;
    Ok(())
}

/// Records a request the user made of the provider about a job (a cancel), with the job's state
/// when it was made and what the provider answered: no state change, only the fact.
pub fn record_request(conn: &dyn Db, key: &JobKey, state: JobState, answer: &str, now: i64) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    macro_rules! insert {
        ($d:tt) => {
            concat!(
                "INSERT INTO job_events (",
                job_columns!($d),
                ", at, source, state, outcome, detail) VALUES (",
                job_values!($d),
                ", $3, $4, $5, $6, $7)"
            )
        };
    }
    conn.prepare_cached(for_dialect!(conn, insert))?.execute(params![
        provider,
        job_id,
        now,
        Source::Pull.as_str(),
        state.as_str(),
        Outcome::Requested.as_str(),
        answer
    ])?;
    Ok(())
}

/// Records a signed push whose payload could not be used (no state to show, only why).
pub fn record_rejected(conn: &dyn Db, key: &JobKey, delivery_id: Option<&str>, reason: &str, now: i64) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    macro_rules! insert {
        ($d:tt) => {
            concat!(
                "INSERT INTO job_events (",
                job_columns!($d),
                ", at, source, delivery_id, outcome, detail) VALUES (",
                job_values!($d),
                ", $3, 'push', $4, 'rejected', $5)"
            )
        };
    }
    conn.prepare_cached(for_dialect!(conn, insert))?.execute(params![provider, job_id, now, delivery_id, reason])?;
    Ok(())
}

/// Records a verified event of a kind NeverMiss does not act on, only on the timeline of a job
/// already known (an ignored event never creates a job).
pub fn record_ignored(conn: &dyn Db, key: &JobKey, delivery_id: Option<&str>, reason: &str, now: i64) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    macro_rules! insert {
        ($d:tt) => {
            concat!(
                "INSERT INTO job_events (",
                job_columns!($d),
                ", at, source, delivery_id, outcome, detail) SELECT ",
                job_values!($d),
                ", CAST($3 AS BIGINT), 'push', $4, 'ignored', $5
                 WHERE EXISTS (SELECT 1 FROM jobs WHERE provider = $1 AND job_id = $2)"
            )
        };
    }
    conn.prepare_cached(for_dialect!(conn, insert))?.execute(params![provider, job_id, now, delivery_id, reason])?;
    Ok(())
}

/// A job's timeline, oldest first.
pub fn of_job(conn: &dyn Db, key: &JobKey) -> sql::Result<Vec<TimelineEvent>> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    macro_rules! select {
        ($d:tt) => {
            concat!("SELECT at, source, delivery_id, state, seq, outcome, detail FROM job_events WHERE ", of_the_job!($d), " ORDER BY id")
        };
    }
    let mut stmt = conn.prepare_cached(for_dialect!(conn, select))?;
    let rows = stmt.query_map(params![provider, job_id], |row| {
        let source: String = row.get("source")?;
        let state: Option<String> = row.get("state")?;
        let outcome: String = row.get("outcome")?;
        Ok(TimelineEvent {
            at: rfc3339(row.get("at")?),
            source: Source::parse(&source).unwrap_or(Source::Push),
            delivery_id: row.get("delivery_id")?,
            state: state.as_deref().and_then(JobState::parse),
            seq: row.get("seq")?,
            outcome: Outcome::parse(&outcome).unwrap_or(Outcome::Rejected),
            detail: row.get("detail")?,
        })
    })?;
    rows.collect()
}

/// Reduces one job's timeline to its first event and its terminal one (the applied event that
/// moved it to a terminal state; the last event when there is none). Returns how many were deleted.
pub fn trim_to_first_and_terminal(conn: &dyn Db, key: &JobKey) -> sql::Result<usize> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    macro_rules! delete {
        ($d:tt) => {
            concat!(
                "DELETE FROM job_events WHERE ",
                of_the_job!($d),
                " AND id NOT IN (
                     SELECT min(id) FROM job_events WHERE ",
                of_the_job!($d),
                "
                     UNION ALL
                     SELECT coalesce(max(CASE WHEN outcome = 'applied' AND state IN ('succeeded', 'failed', 'canceled') THEN id END), max(id))
                     FROM job_events WHERE ",
                of_the_job!($d),
                ")"
            )
        };
    }
    conn.prepare_cached(for_dialect!(conn, delete))?.execute(params![provider, job_id])
}

/// Deletes a job's whole timeline (the job is archived). Returns how many events were deleted.
pub fn delete_of_job(conn: &dyn Db, key: &JobKey) -> sql::Result<usize> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    macro_rules! delete {
        ($d:tt) => {
            concat!("DELETE FROM job_events WHERE ", of_the_job!($d))
        };
    }
    conn.prepare_cached(for_dialect!(conn, delete))?.execute(params![provider, job_id])
}

/// One step of the sweep of events that belong to no job (a signed push refused before any job
/// was created, or a late event for an archived job): deletes those among the ids
/// `from_id..from_id + span` recorded before `cutoff` (ms). Returns how many were deleted, and
/// the next `from_id` (the first event after the span), or None when the sweep is done (nothing
/// after, or what follows is younger than the cutoff: ids grow with time).
pub fn purge_orphans_step(conn: &dyn Db, cutoff: i64, from_id: i64, span: i64) -> sql::Result<(usize, Option<i64>)> {
    let deleted = conn
        .prepare_cached(
            "DELETE FROM job_events WHERE id >= $1 AND id < $1 + $2 AND at < $3
             AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.provider = job_events.provider AND j.job_id = job_events.job_id)",
        )?
        .execute(params![from_id, span, cutoff])?;
    // The next event kept after this span (ids left by deletions are skipped at once).
    let next: Option<(i64, i64)> = conn
        .prepare_cached("SELECT id, at FROM job_events WHERE id >= $1 ORDER BY id LIMIT 1")?
        .query_row([from_id + span], |r| Ok((r.get("id")?, r.get("at")?)))
        .optional()?;
    Ok((deleted, next.filter(|&(_, at)| at < cutoff).map(|(id, _)| id)))
}

/// How many events are kept, in all.
pub fn count(conn: &dyn Db) -> sql::Result<i64> {
    conn.query_row("SELECT count(*) FROM job_events", [], |r| r.get(0))
}

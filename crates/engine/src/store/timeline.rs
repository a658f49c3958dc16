//! The `job_events` table: each job's timeline, every delivery and every adopted poll with what
//! the merge point (or dedupe before it) did with it.

use rusqlite::{params, Connection};

use crate::job::{rfc3339, JobEvent, JobState, Outcome, Source, TimelineEvent};

/// Records what happened to one event of a job.
pub fn record(
    conn: &Connection,
    ev: &JobEvent,
    source: Source,
    delivery_id: Option<&str>,
    outcome: Outcome,
    detail: Option<&str>,
    now: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO job_events (provider, job_id, at, source, delivery_id, state, seq, outcome, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
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

/// Records a signed push whose payload could not be used (no state to show, only why).
pub fn record_rejected(conn: &Connection, provider: &str, job_id: &str, delivery_id: Option<&str>, reason: &str, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO job_events (provider, job_id, at, source, delivery_id, outcome, detail)
         VALUES (?1, ?2, ?3, 'push', ?4, 'rejected', ?5)",
    )?
    .execute(params![provider, job_id, now, delivery_id, reason])?;
    Ok(())
}

/// Records a verified event of a kind NeverMiss does not act on, only on the timeline of a job
/// already known (an ignored event never creates a job).
pub fn record_ignored(conn: &Connection, provider: &str, job_id: &str, delivery_id: Option<&str>, reason: &str, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO job_events (provider, job_id, at, source, delivery_id, outcome, detail)
         SELECT ?1, ?2, ?3, 'push', ?4, 'ignored', ?5
         WHERE EXISTS (SELECT 1 FROM jobs WHERE provider = ?1 AND job_id = ?2)",
    )?
    .execute(params![provider, job_id, now, delivery_id, reason])?;
    Ok(())
}

/// A job's timeline, oldest first.
pub fn of_job(conn: &Connection, provider: &str, job_id: &str) -> rusqlite::Result<Vec<TimelineEvent>> {
    let mut stmt = conn.prepare_cached(
        "SELECT at, source, delivery_id, state, seq, outcome, detail FROM job_events
         WHERE provider = ?1 AND job_id = ?2 ORDER BY id",
    )?;
    let rows = stmt.query_map(params![provider, job_id], |row| {
        let source: String = row.get(1)?;
        let state: Option<String> = row.get(3)?;
        let outcome: String = row.get(5)?;
        Ok(TimelineEvent {
            at: rfc3339(row.get(0)?),
            source: Source::parse(&source).unwrap_or(Source::Push),
            delivery_id: row.get(2)?,
            state: state.as_deref().and_then(JobState::parse),
            seq: row.get(4)?,
            outcome: Outcome::parse(&outcome).unwrap_or(Outcome::Rejected),
            detail: row.get(6)?,
        })
    })?;
    rows.collect()
}

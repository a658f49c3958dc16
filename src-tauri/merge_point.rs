//! The one merge point: every observation of a job, pushed or pulled, goes through `merge`.
//!
//! The guard lives in the SQL write itself (`INSERT ... ON CONFLICT DO UPDATE ... WHERE`): a job
//! only moves forward (rank first, then `seq` within the same non-terminal rank) and terminal
//! states are sinks. In the same transaction the first arrival at a terminal state enqueues exactly
//! one outbox row (unique key on the job) and the timeline records the event with its outcome.
//!
//! All functions here run inside the store's writer transaction (see `store::Store::write`).

use rusqlite::{named_params, params, Connection, OptionalExtension};

use crate::job::{Job, JobEvent, Outcome, Source, TERMINAL_RANK};
use crate::store::queries::{self, bump, job_columns, job_from_row};

/// What `merge` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// `Applied` or `Stale`.
    pub outcome: Outcome,
    /// This event moved the job into a terminal state (this happens once per job).
    pub first_terminal: bool,
    /// The job as the write left it, when it was applied (read back by the write itself).
    pub job: Option<Job>,
}

/// A signed delivery whose payload parsed: its dedupe key, its event and the raw request.
#[derive(Debug, Clone)]
pub struct PushDelivery {
    pub delivery_id: String,
    pub event: JobEvent,
    pub raw: RawRequest,
}

/// The raw request as kept for inspection (headers already masked, body already capped).
#[derive(Debug, Clone, Default)]
pub struct RawRequest {
    pub headers_json: String,
    pub body: Vec<u8>,
    pub body_truncated: bool,
}

/// The answer to a push, with the job as it stands after it.
#[derive(Debug, Clone)]
pub struct PushResult {
    pub outcome: Outcome,
    pub first_terminal: bool,
    pub job: Option<Job>,
}

/// The guarded upsert. Creates an unknown job, adopts a forward event, refuses everything else.
/// The caller records the event on the timeline in the same transaction (see `accept_push`).
pub fn merge(conn: &Connection, ev: &JobEvent, source: Source, now: i64) -> rusqlite::Result<Merged> {
    let rank = ev.state.rank();
    let mut upsert = conn.prepare_cached(concat!(
        "INSERT INTO jobs (provider, job_id, label, state, rank, seq, error, detail, created_at, updated_at,
                           finished_at, terminal_source)
         VALUES (:provider, :job_id, :label, :state, :rank, :seq, :error, :detail, :now, :now,
                 CASE WHEN :rank = 3 THEN COALESCE(:finished_at, :now) END,
                 CASE WHEN :rank = 3 THEN :source END)
         ON CONFLICT (provider, job_id) DO UPDATE SET
             state = excluded.state,
             rank = excluded.rank,
             seq = excluded.seq,
             error = excluded.error,
             detail = COALESCE(excluded.detail, jobs.detail),
             updated_at = excluded.updated_at,
             finished_at = excluded.finished_at,
             terminal_source = excluded.terminal_source,
             label = COALESCE(jobs.label, excluded.label)
         WHERE excluded.rank > jobs.rank
            OR (excluded.rank = jobs.rank AND jobs.rank < 3
                AND (jobs.seq IS NULL OR excluded.seq > jobs.seq))
         RETURNING ",
        job_columns!(),
        ", rank"
    ))?;
    let adopted: Option<(i64, Job)> = upsert
        .query_row(
            named_params! {
                ":provider": ev.provider,
                ":job_id": ev.job_id,
                ":label": ev.label,
                ":state": ev.state.as_str(),
                ":rank": rank,
                ":seq": ev.seq,
                ":error": ev.error,
                ":detail": ev.detail,
                ":now": now,
                ":finished_at": ev.finished_at,
                ":source": source.as_str(),
            },
            // The rank follows the job's 15 columns.
            |row| Ok((row.get(15)?, job_from_row(row)?)),
        )
        .optional()?;

    let outcome = if adopted.is_some() { Outcome::Applied } else { Outcome::Stale };
    let first_terminal = adopted.as_ref().map(|(rank, _)| *rank) == Some(TERMINAL_RANK);
    if first_terminal {
        let enqueued = conn.prepare_cached(
            "INSERT INTO outbox (provider, job_id, kind, state, created_at, next_attempt_at)
             VALUES (?1, ?2, 'terminal', ?3, ?4, ?4)
             ON CONFLICT (provider, job_id, kind) DO NOTHING",
        )?
        .execute(params![ev.provider, ev.job_id, ev.state.as_str(), now])?;
        bump(conn, "notifications_enqueued", enqueued as i64)?;
        // A reconcile rescue (contract: a terminal state first learned by polling).
        if source == Source::Pull {
            bump(conn, "reconcile_rescues", 1)?;
        }
    } else if outcome == Outcome::Stale && ev.label.is_some() {
        // A label is a description, not a state: a stale event may still name an unnamed job.
        conn.prepare_cached("UPDATE jobs SET label = ?3 WHERE provider = ?1 AND job_id = ?2 AND label IS NULL")?
            .execute(params![ev.provider, ev.job_id, ev.label])?;
    }
    Ok(Merged { outcome, first_terminal, job: adopted.map(|(_, job)| job) })
}

/// A push: dedupe on (provider, delivery id) durably, then merge.
pub fn accept_push(conn: &Connection, push: &PushDelivery, now: i64) -> rusqlite::Result<PushResult> {
    let ev = &push.event;
    bump(conn, "deliveries_total", 1)?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
             VALUES (?1, ?2, ?3, ?4, 'accepted', ?5, ?6, ?7)
             ON CONFLICT (provider, delivery_id) WHERE status = 'accepted' DO NOTHING",
        )?
        .execute(params![
            ev.provider,
            push.delivery_id,
            ev.job_id,
            now,
            push.raw.headers_json,
            push.raw.body,
            push.raw.body_truncated
        ])?;
    if inserted == 0 {
        bump(conn, "duplicates", 1)?;
        record_event(conn, ev, Source::Push, Some(&push.delivery_id), Outcome::Duplicate, None, now)?;
        return Ok(PushResult { outcome: Outcome::Duplicate, first_terminal: false, job: None });
    }
    let merged = merge(conn, ev, Source::Push, now)?;
    bump(conn, merged.outcome.as_str(), 1)?;
    record_event(conn, ev, Source::Push, Some(&push.delivery_id), merged.outcome, event_detail(ev), now)?;
    // Only a change is published; a duplicate or a stale event leaves the job as it was.
    Ok(PushResult { outcome: merged.outcome, first_terminal: merged.first_terminal, job: merged.job })
}

/// A poll answer from reconciliation. Only adopted polls enter the timeline: a job polled every
/// minute for hours would otherwise bury its deliveries under identical "stale" rows.
pub fn accept_poll(conn: &Connection, ev: &JobEvent, now: i64) -> rusqlite::Result<PushResult> {
    let merged = merge(conn, ev, Source::Pull, now)?;
    if merged.outcome == Outcome::Applied {
        record_event(conn, ev, Source::Pull, None, merged.outcome, event_detail(ev), now)?;
    }
    conn.prepare_cached(
        "UPDATE jobs SET last_polled_at = ?3, next_poll_at = ?3, poll_error = NULL, poll_failures = 0
         WHERE provider = ?1 AND job_id = ?2",
    )?
    .execute(params![ev.provider, ev.job_id, now])?;
    let job = queries::job(conn, &ev.provider, &ev.job_id)?;
    Ok(PushResult {
        outcome: merged.outcome,
        first_terminal: merged.first_terminal,
        job,
    })
}

/// A signed request whose payload could not be used: kept whole as a rejected delivery, so
/// nothing is lost, and noted on the job's timeline when the job id could be read.
pub fn record_rejected(
    conn: &Connection,
    provider: &str,
    delivery_id: Option<&str>,
    job_id: Option<&str>,
    raw: &RawRequest,
    reason: &str,
    now: i64,
) -> rusqlite::Result<()> {
    bump(conn, "deliveries_total", 1)?;
    bump(conn, "rejected", 1)?;
    conn.prepare_cached(
        "INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, reason, headers, body, body_truncated)
         VALUES (?1, ?2, ?3, ?4, 'rejected', ?5, ?6, ?7, ?8)",
    )?
    .execute(params![provider, delivery_id, job_id, now, reason, raw.headers_json, raw.body, raw.body_truncated])?;
    if let Some(job_id) = job_id {
        conn.prepare_cached(
            "INSERT INTO job_events (provider, job_id, at, source, delivery_id, outcome, detail)
             VALUES (?1, ?2, ?3, 'push', ?4, 'rejected', ?5)",
        )?
        .execute(params![provider, job_id, now, delivery_id, reason])?;
    }
    Ok(())
}

/// A request with a missing or wrong signature: counted, nothing else stored.
pub fn count_bad_signature(conn: &Connection) -> rusqlite::Result<()> {
    bump(conn, "deliveries_total", 1)?;
    bump(conn, "bad_signatures", 1)
}

/// Starts watching a job. Returns whether it was new; a label given for a known job replaces its
/// label. The job's state is left alone: only events move it.
/// `poll_url` is where to poll when the provider's API cannot be derived from the id.
pub fn track(
    conn: &Connection,
    provider: &str,
    job_id: &str,
    label: Option<&str>,
    poll_url: Option<&str>,
    now: i64,
) -> rusqlite::Result<(bool, Option<Job>)> {
    let created = conn
        .prepare_cached(
            "INSERT INTO jobs (provider, job_id, label, poll_url, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
             ON CONFLICT (provider, job_id) DO NOTHING",
        )?
        .execute(params![provider, job_id, label, poll_url, now])?
        == 1;
    if !created {
        conn.prepare_cached(
            "UPDATE jobs SET label = COALESCE(?3, label), poll_url = COALESCE(?4, poll_url), next_poll_at = 0
             WHERE provider = ?1 AND job_id = ?2",
        )?
        .execute(params![provider, job_id, label, poll_url])?;
    }
    Ok((created, queries::job(conn, provider, job_id)?))
}

fn event_detail(ev: &JobEvent) -> Option<&str> {
    ev.error.as_deref().or(ev.detail.as_deref())
}

fn record_event(
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

//! The store's reads (jobs, timelines, metrics, settings) and its small shared writes (counters,
//! settings). The guarded job write is not here: it is `merge_point`.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::job::{rfc3339, Job, JobState, Outcome, Source, TimelineEvent};

/// Adds `n` to a counter (counters only grow; they are kept since the data dir was created), and
/// to the counter's bucket for the current UTC hour. Inside the store's writer the additions of
/// a whole group are summed and written once, in the same transaction, just before its COMMIT
/// (a write that fails takes its additions back with it).
pub fn bump(conn: &Connection, name: &str, n: i64) -> rusqlite::Result<()> {
    if n != 0 && !super::pending_counters::add(name, n) {
        write_counter(conn, name, n)?;
    }
    Ok(())
}

/// Writes one counter addition now.
pub(super) fn write_counter(conn: &Connection, name: &str, n: i64) -> rusqlite::Result<()> {
    if n != 0 {
        conn.prepare_cached(
            "INSERT INTO counters (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
        )?
        .execute(params![name, n])?;
        let hour = crate::job::now_ms() / 3_600_000;
        conn.prepare_cached(
            "INSERT INTO counter_hours (hour, name, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (hour, name) DO UPDATE SET value = value + excluded.value",
        )?
        .execute(params![hour, name, n])?;
    }
    Ok(())
}

/// The columns `job_from_row` reads, in its order (a macro, so that SQL text can `concat!` it).
macro_rules! job_columns {
    () => {
        "provider, job_id, label, state, seq, error, created_at, updated_at, finished_at, terminal_source, notified_at, id, detail, last_polled_at, poll_error"
    };
}
pub(crate) use job_columns;

const JOB_COLUMNS: &str = job_columns!();

/// A job from a row of `job_columns!()`.
pub(crate) fn job_from_row(row: &Row) -> rusqlite::Result<Job> {
    let state: String = row.get(3)?;
    let terminal_source: Option<String> = row.get(9)?;
    Ok(Job {
        provider: row.get(0)?,
        job_id: row.get(1)?,
        label: row.get(2)?,
        state: JobState::parse(&state).unwrap_or(JobState::Unknown),
        seq: row.get(4)?,
        error: row.get(5)?,
        created_at: rfc3339(row.get(6)?),
        updated_at: rfc3339(row.get(7)?),
        finished_at: row.get::<_, Option<i64>>(8)?.map(rfc3339),
        terminal_source: terminal_source.as_deref().and_then(parse_source),
        notified_at: row.get::<_, Option<i64>>(10)?.map(rfc3339),
        detail: row.get(12)?,
        last_polled_at: row.get::<_, Option<i64>>(13)?.map(rfc3339),
        poll_error: row.get(14)?,
    })
}

fn parse_source(s: &str) -> Option<Source> {
    match s {
        "push" => Some(Source::Push),
        "pull" => Some(Source::Pull),
        _ => None,
    }
}

fn parse_outcome(s: &str) -> Outcome {
    match s {
        "applied" => Outcome::Applied,
        "duplicate" => Outcome::Duplicate,
        "stale" => Outcome::Stale,
        _ => Outcome::Rejected,
    }
}

pub fn job(conn: &Connection, provider: &str, job_id: &str) -> rusqlite::Result<Option<Job>> {
    conn.prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE provider = ?1 AND job_id = ?2"))?
        .query_row(params![provider, job_id], job_from_row)
        .optional()
}

/// Filters of `GET /api/jobs`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JobFilter {
    pub state: Option<String>,
    pub provider: Option<String>,
    pub q: Option<String>,
    pub limit: Option<u32>,
    /// Opaque to clients: the row id of the last job of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, TS)]
#[ts(export, export_to = "../ui/src/generated/")]
pub struct JobPage {
    pub jobs: Vec<Job>,
    pub next_cursor: Option<String>,
}

pub const MAX_PAGE: u32 = 500;

/// Jobs newest first, one page at a time (keyset paging: as cheap on page 1,000 as on page 1).
pub fn list_jobs(conn: &Connection, filter: &JobFilter) -> rusqlite::Result<JobPage> {
    let limit = filter.limit.unwrap_or(100).clamp(1, MAX_PAGE) as i64;
    let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE 1 = 1");
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(state) = filter.state.as_deref().filter(|s| !s.is_empty()) {
        sql.push_str(" AND state = ?");
        args.push(state.to_owned().into());
    }
    if let Some(provider) = filter.provider.as_deref().filter(|s| !s.is_empty()) {
        sql.push_str(" AND provider = ?");
        args.push(provider.to_owned().into());
    }
    if let Some(q) = filter.q.as_deref().filter(|s| !s.is_empty()) {
        let pattern = format!("%{}%", q.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        sql.push_str(" AND (job_id LIKE ? ESCAPE '\\' OR label LIKE ? ESCAPE '\\')");
        args.push(pattern.clone().into());
        args.push(pattern.into());
    }
    if let Some(cursor) = filter.cursor.as_deref().and_then(|c| c.parse::<i64>().ok()) {
        sql.push_str(" AND id < ?");
        args.push(cursor.into());
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    args.push((limit + 1).into());

    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
    let mut jobs = Vec::new();
    let mut last_id = None;
    let mut more = false;
    while let Some(row) = rows.next()? {
        if jobs.len() as i64 == limit {
            more = true;
            break;
        }
        jobs.push(job_from_row(row)?);
        last_id = Some(row.get::<_, i64>(11)?);
    }
    Ok(JobPage {
        jobs,
        next_cursor: if more { last_id.map(|id| id.to_string()) } else { None },
    })
}

/// A job's timeline, oldest first.
pub fn timeline(conn: &Connection, provider: &str, job_id: &str) -> rusqlite::Result<Vec<TimelineEvent>> {
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
            source: parse_source(&source).unwrap_or(Source::Push),
            delivery_id: row.get(2)?,
            state: state.as_deref().and_then(JobState::parse),
            seq: row.get(4)?,
            outcome: parse_outcome(&outcome),
            detail: row.get(6)?,
        })
    })?;
    rows.collect()
}

/// A kept request, as the job detail screen shows it.
#[derive(Debug, Clone, Serialize, Deserialize, TS)]
#[ts(export, export_to = "../ui/src/generated/")]
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

pub fn delivery(conn: &Connection, provider: &str, delivery_id: &str) -> rusqlite::Result<Option<StoredDelivery>> {
    conn.prepare_cached(
        "SELECT provider, delivery_id, job_id, received_at, status, reason, headers, body, body_truncated
         FROM deliveries WHERE provider = ?1 AND delivery_id = ?2 ORDER BY id LIMIT 1",
    )?
    .query_row(params![provider, delivery_id], |row| {
        let headers: String = row.get(6)?;
        let body: Vec<u8> = row.get(7)?;
        Ok(StoredDelivery {
            provider: row.get(0)?,
            delivery_id: row.get(1)?,
            job_id: row.get(2)?,
            received_at: rfc3339(row.get(3)?),
            status: row.get(4)?,
            reason: row.get(5)?,
            headers: serde_json::from_str(&headers).unwrap_or(serde_json::Value::Null),
            body: String::from_utf8_lossy(&body).into_owned(),
            body_truncated: row.get(8)?,
        })
    })
    .optional()
}

/// `GET /api/metrics` (contract section 3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
#[ts(export, export_to = "../ui/src/generated/")]
pub struct Metrics {
    /// Every request to a known provider's hook that got as far as its signature:
    /// applied + duplicates + stale + rejected + bad_signatures.
    pub deliveries_total: i64,
    pub applied: i64,
    pub duplicates: i64,
    pub stale: i64,
    pub bad_signatures: i64,
    pub rejected: i64,
    pub reconcile_passes: i64,
    pub reconcile_rescues: i64,
    pub reconcile_errors: i64,
    pub stuck_alerts: i64,
    pub notifications_enqueued: i64,
    pub notifications_delivered: i64,
    /// Deliveries for a provider with no webhook secret configured (answered 503 so they retry).
    pub unconfigured_deliveries: i64,
    /// Jobs first learned by listing a provider's jobs (discovery), not by a webhook or `track`.
    pub jobs_discovered: i64,
    pub notifications_pending: i64,
    pub jobs_by_state: BTreeMap<String, i64>,
    pub last_reconcile_at: Option<String>,
    /// Unfinished jobs the provider answered 404 for at the last poll.
    pub jobs_not_found: i64,
    /// The last reconcile pass: when, how long, what it did.
    #[ts(type = "{ started_at: string, duration_ms: number, checked: number, applied: number, rescues: number, errors: number, not_found: number, providers: Record<string, string> } | null")]
    pub last_pass: Option<serde_json::Value>,
    /// Completions per UTC day (the last 14 days that had any): within the SLA, and by pull.
    pub completions_by_day: Vec<DailyCompletions>,
    /// Each provider's polling health (filled in by the reconciler, not the store).
    pub providers: BTreeMap<String, crate::reconcile::ProviderHealth>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
#[ts(export, export_to = "../ui/src/generated/")]
pub struct DailyCompletions {
    pub day: String,
    pub finished: i64,
    pub within_sla: i64,
    pub by_pull: i64,
}

/// The text a 404 leaves in `poll_error`.
pub fn not_found_reason() -> String {
    crate::providers::FetchError::NotFound.to_string()
}

pub fn metrics(conn: &Connection) -> rusqlite::Result<Metrics> {
    let mut m = Metrics::default();
    let mut stmt = conn.prepare_cached("SELECT name, value FROM counters")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let name: String = row.get(0)?;
        let value: i64 = row.get(1)?;
        let slot = match name.as_str() {
            "deliveries_total" => &mut m.deliveries_total,
            "applied" => &mut m.applied,
            "duplicates" => &mut m.duplicates,
            "stale" => &mut m.stale,
            "bad_signatures" => &mut m.bad_signatures,
            "rejected" => &mut m.rejected,
            "reconcile_passes" => &mut m.reconcile_passes,
            "reconcile_rescues" => &mut m.reconcile_rescues,
            "reconcile_errors" => &mut m.reconcile_errors,
            "stuck_alerts" => &mut m.stuck_alerts,
            "notifications_enqueued" => &mut m.notifications_enqueued,
            "notifications_delivered" => &mut m.notifications_delivered,
            "unconfigured_deliveries" => &mut m.unconfigured_deliveries,
            "jobs_discovered" => &mut m.jobs_discovered,
            _ => continue,
        };
        *slot = value;
    }
    for state in JobState::ALL {
        m.jobs_by_state.insert(state.as_str().to_owned(), 0);
    }
    let mut stmt = conn.prepare_cached("SELECT state, count FROM job_state_counts")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        m.jobs_by_state.insert(row.get(0)?, row.get(1)?);
    }
    m.notifications_pending = conn
        .prepare_cached("SELECT count(*) FROM outbox WHERE delivered_at IS NULL")?
        .query_row([], |r| r.get(0))?;
    m.last_reconcile_at = setting(conn, "last_reconcile_at")?
        .and_then(|v| v.parse::<i64>().ok())
        .map(rfc3339);
    m.jobs_not_found = conn
        .prepare_cached("SELECT count(*) FROM jobs INDEXED BY jobs_unfinished WHERE rank < 3 AND poll_error = ?1")?
        .query_row([not_found_reason()], |r| r.get(0))?;
    m.last_pass = last_passes(conn, 1)?.into_iter().next();
    let mut stmt = conn.prepare_cached(
        "SELECT day, finished, within_sla, by_pull FROM daily_completions ORDER BY day DESC LIMIT 14",
    )?;
    m.completions_by_day = stmt
        .query_map([], |r| {
            Ok(DailyCompletions {
                day: r.get(0)?,
                finished: r.get(1)?,
                within_sla: r.get(2)?,
                by_pull: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    m.completions_by_day.reverse();
    Ok(m)
}

/// The most recent reconcile passes, newest first.
pub fn last_passes(conn: &Connection, limit: i64) -> rusqlite::Result<Vec<serde_json::Value>> {
    let mut stmt = conn.prepare_cached(
        "SELECT started_at, duration_ms, checked, applied, rescues, errors, not_found, providers
         FROM reconcile_passes ORDER BY id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit], |r| {
        let providers: String = r.get(7)?;
        Ok(serde_json::json!({
            "started_at": rfc3339(r.get(0)?),
            "duration_ms": r.get::<_, i64>(1)?,
            "checked": r.get::<_, i64>(2)?,
            "applied": r.get::<_, i64>(3)?,
            "rescues": r.get::<_, i64>(4)?,
            "errors": r.get::<_, i64>(5)?,
            "not_found": r.get::<_, i64>(6)?,
            "providers": serde_json::from_str::<serde_json::Value>(&providers).unwrap_or_default(),
        }))
    })?;
    rows.collect()
}

/// Counter values per UTC hour since `since_hour` (hours since the epoch), for charts.
pub fn counter_hours(conn: &Connection, since_hour: i64) -> rusqlite::Result<Vec<(i64, String, i64)>> {
    let mut stmt = conn.prepare_cached("SELECT hour, name, value FROM counter_hours WHERE hour >= ?1 ORDER BY hour")?;
    let rows = stmt.query_map([since_hour], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect()
}

pub fn setting(conn: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT value FROM settings WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()
}

pub fn set_setting(conn: &Connection, key: &str, value: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])?;
    Ok(())
}

/// An unfinished job, as reconciliation sees it.
#[derive(Debug, Clone)]
pub struct Unfinished {
    pub job: crate::providers::JobRef,
    pub created_at: i64,
    pub poll_failures: i64,
}

/// Unfinished jobs of one provider that are due for a poll, longest waiting first. Reads only the
/// partial index of unfinished jobs, so its cost does not grow with the number of finished ones.
pub fn unfinished_jobs(conn: &Connection, provider: &str, now: i64, limit: i64) -> rusqlite::Result<Vec<Unfinished>> {
    let mut stmt = conn.prepare_cached(
        "SELECT job_id, poll_url, created_at, poll_failures FROM jobs INDEXED BY jobs_unfinished
         WHERE provider = ?1 AND rank < 3 AND next_poll_at <= ?2 ORDER BY next_poll_at LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![provider, now, limit], |row| {
        Ok(Unfinished {
            job: crate::providers::JobRef {
                job_id: row.get(0)?,
                poll_url: row.get(1)?,
            },
            created_at: row.get(2)?,
            poll_failures: row.get(3)?,
        })
    })?;
    rows.collect()
}

//! The `jobs` table: reads (one job, pages of jobs, the unfinished ones due for a poll, counts)
//! and every named write to a job other than the guarded merge itself (`merge_point::merge`):
//! tracking, a label for an unnamed job, a poll's bookkeeping, the notified mark, and retention's
//! side: the finished jobs whose timeline is due for trimming, and archiving old finished jobs.

use super::sql::{self, params, Db, Dialect, OptionalExtension, Row, Value};
use super::{fold, search_index};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::job::{rfc3339, AbandonReason, Job, JobKey, JobRef, JobResult, JobState, PollErrorKind, Source, TERMINAL_RANK};

/// The columns `job_from_row` reads (a macro, so that SQL text can `concat!` it).
macro_rules! job_columns {
    () => {
        "provider, job_id, label, state, seq, error, created_at, updated_at, finished_at, terminal_source, notified_at, id, detail, last_polled_at, poll_error, poll_error_kind, abandoned_at, abandoned_reason, group_name, result, provider_url, job_kind, started_at"
    };
}
pub(crate) use job_columns;

const JOB_COLUMNS: &str = job_columns!();

/// `JOB_COLUMNS`, each named `jobs.<column>` (a search joins the jobs to an index of its own).
fn qualified_job_columns() -> &'static str {
    static QUALIFIED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    QUALIFIED.get_or_init(|| JOB_COLUMNS.split(", ").map(|c| format!("jobs.{c}")).collect::<Vec<_>>().join(", "))
}

/// The `state` column of a row (a value this build does not know reads as `unknown`).
fn state_of(row: &Row) -> sql::Result<JobState> {
    let state: String = row.get("state")?;
    Ok(JobState::parse(&state).unwrap_or(JobState::Unknown))
}

/// A job from a row that has the columns of `job_columns!()`, read by name (so a query may return
/// them in any order, and more besides).
pub fn job_from_row(row: &Row) -> sql::Result<Job> {
    let terminal_source: Option<String> = row.get("terminal_source")?;
    let poll_error_kind: Option<String> = row.get("poll_error_kind")?;
    let abandoned_reason: Option<String> = row.get("abandoned_reason")?;
    let result: Option<String> = row.get("result")?;
    Ok(Job {
        provider: row.get("provider")?,
        job_id: row.get("job_id")?,
        label: row.get("label")?,
        state: state_of(row)?,
        seq: row.get("seq")?,
        error: row.get("error")?,
        created_at: rfc3339(row.get("created_at")?),
        updated_at: rfc3339(row.get("updated_at")?),
        finished_at: row.get::<_, Option<i64>>("finished_at")?.map(rfc3339),
        terminal_source: terminal_source.as_deref().and_then(Source::parse),
        notified_at: row.get::<_, Option<i64>>("notified_at")?.map(rfc3339),
        detail: row.get("detail")?,
        last_polled_at: row.get::<_, Option<i64>>("last_polled_at")?.map(rfc3339),
        poll_error: row.get("poll_error")?,
        poll_error_kind: poll_error_kind.as_deref().and_then(PollErrorKind::parse),
        abandoned_at: row.get::<_, Option<i64>>("abandoned_at")?.map(rfc3339),
        abandoned_reason: abandoned_reason.as_deref().and_then(AbandonReason::parse),
        group: row.get("group_name")?,
        result: result.as_deref().and_then(JobResult::from_column),
        provider_url: row.get("provider_url")?,
        kind: row.get("job_kind")?,
        started_at: row.get::<_, Option<i64>>("started_at")?.map(rfc3339),
        // From the kind's history, not the row: `durations`, filled by whoever shows the job.
        expected_ms: None,
    })
}

pub fn job(conn: &dyn Db, key: &JobKey) -> sql::Result<Option<Job>> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE provider = $1 AND job_id = $2"))?
        .query_row(params![provider, job_id], job_from_row)
        .optional()
}

/// The jobs of `keys` that exist, in one query (in no particular order).
pub fn jobs_of(conn: &dyn Db, keys: &[(&str, &str)]) -> sql::Result<Vec<Job>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let of_keys = sql::job_key_in_json(conn.dialect(), 1);
    conn.prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE {of_keys}"))?
        .query_map(params![sql::json_batch(&keys)?], job_from_row)?
        .collect()
}

/// Whether a job is known at all.
pub fn exists(conn: &dyn Db, key: &JobKey) -> sql::Result<bool> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached("SELECT 1 FROM jobs WHERE provider = $1 AND job_id = $2")?
        .query_row(params![provider, job_id], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// Filters of `GET /api/jobs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct JobFilter {
    pub state: Option<String>,
    pub provider: Option<String>,
    pub q: Option<String>,
    /// The jobs of one group.
    pub group: Option<String>,
    pub limit: Option<u32>,
    /// Opaque to clients: the row id of the last job of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    pub next_cursor: Option<String>,
}

pub const MAX_PAGE: u32 = 500;

/// The job search's pattern: what the user typed, anywhere in the id, the label or the group, its
/// `%`, `_` and `\` taken literally, folded (`fold`: Unicode's lowercase, "ß" as "ss", "ς" as
/// "σ") as the columns are in the query, on both databases alike. The tests of the store run the
/// same searches on both.
fn search_pattern(folded: &str) -> String {
    format!("%{}%", folded.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"))
}

const POSTGRES_FOLDED_JOB_ID: &str = fold::postgres_fold!("jobs.job_id");
const POSTGRES_FOLDED_LABEL: &str = fold::postgres_fold!("jobs.label");
const POSTGRES_FOLDED_GROUP: &str = fold::postgres_fold!("jobs.group_name");

/// How many of the newest jobs (of the other filters) PostgreSQL's search reads before it asks its
/// index: a term that many jobs hold fills its page among them, whatever the plan.
const POSTGRES_NEWEST_FIRST: i64 = 2_000;

/// Which jobs a page's query reads.
#[derive(Clone, Copy, PartialEq)]
enum Candidates {
    /// Every job, newest first (no search, or a short term in no index: one holding a line break).
    All,
    /// The jobs the search index names (`search_index`): SQLite's walked newest first (its
    /// trigrams, or its short terms for one or two characters); PostgreSQL's after the newest
    /// `POSTGRES_NEWEST_FIRST` jobs, its index of sequences asked range by range of row ids, newest
    /// first, in one statement planned for its term (`Db::rows_planned_now`), its folded texts read
    /// newest first for a term the index has nothing of.
    Indexed,
    /// The jobs waiting for the index.
    Pending,
}

/// A page's query of `candidates` and its parameters.
fn page_query(dialect: Dialect, filter: &JobFilter, folded: Option<&str>, candidates: Candidates, limit: i64) -> (String, Vec<Value>) {
    let mut args: Vec<Value> = Vec::new();
    let mut bind = |value: Value| {
        args.push(value);
        format!("${}", args.len())
    };
    let mut filters = String::new();
    for (column, value) in [("state", &filter.state), ("provider", &filter.provider), ("group_name", &filter.group)] {
        if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
            filters.push_str(&format!(" AND jobs.{column} = {}", bind(Value::Text(value.to_owned()))));
        }
    }
    if let Some(cursor) = filter.cursor.as_deref().and_then(|c| c.parse::<i64>().ok()) {
        filters.push_str(&format!(" AND jobs.id < {}", bind(Value::Integer(cursor))));
    }
    // The search's own check of a job (a candidate the index named, or any job).
    let pattern = folded.map(|folded| bind(Value::Text(search_pattern(folded))));
    let matches = match (&pattern, dialect) {
        (None, _) => String::new(),
        (Some(pattern), Dialect::Sqlite) => {
            let f = fold::SQLITE_FUNCTION;
            format!(
                " AND ({f}(jobs.job_id) LIKE {pattern} ESCAPE '\\' OR {f}(jobs.label) LIKE {pattern} ESCAPE '\\'
                       OR {f}(jobs.group_name) LIKE {pattern} ESCAPE '\\')"
            )
        }
        (Some(pattern), Dialect::Postgres) => format!(
            " AND ({POSTGRES_FOLDED_JOB_ID} LIKE {pattern} ESCAPE '\\' OR {POSTGRES_FOLDED_LABEL} LIKE {pattern} ESCAPE '\\'
                   OR {POSTGRES_FOLDED_GROUP} LIKE {pattern} ESCAPE '\\')"
        ),
    };
    let page = bind(Value::Integer(limit + 1));
    let columns = qualified_job_columns();
    let sql = match (candidates, dialect) {
        (Candidates::All, _) => format!("SELECT {columns} FROM jobs WHERE 1 = 1{filters}{matches} ORDER BY jobs.id DESC LIMIT {page}"),
        (Candidates::Pending, _) => format!(
            "SELECT {columns} FROM jobs WHERE jobs.id IN (SELECT job FROM job_search_pending){filters}{matches}
             ORDER BY jobs.id DESC LIMIT {page}"
        ),
        (Candidates::Indexed, Dialect::Sqlite) => {
            let folded = folded.unwrap_or_default();
            let (table, terms) = match search_index::sqlite_trigrams(folded) {
                Some(trigrams) => ("job_search", trigrams),
                None => ("job_search_short", search_index::sqlite_short_term(folded)),
            };
            let terms = bind(Value::Text(terms));
            format!(
                "SELECT {columns} FROM {table} CROSS JOIN jobs ON jobs.id = {table}.rowid
                 WHERE {table} MATCH {terms}{filters}{matches} ORDER BY {table}.rowid DESC LIMIT {page}"
            )
        }
        (Candidates::Indexed, Dialect::Postgres) => {
            // A job not waiting for the index has its folded text there as it is now: matching
            // `job_search.folded` is the search's own check (no column folded again by ICU, the
            // costly part). The jobs waiting are the `Pending` query's. The candidates are taken as
            // an array (`= ANY`): as a subquery (`IN`) the planner joined them by reading the
            // jobs' primary key backwards from the newest, half a million rows for an old job.
            let pattern = pattern.unwrap_or_default();
            let not_pending = "NOT EXISTS (SELECT 1 FROM job_search_pending p WHERE p.job = s.id)";
            // The newest jobs first, read newest first until the page is full: without other
            // filters a range of `job_search`'s rows, else each of the newest jobs looked up.
            let found = match filters.is_empty() {
                true => format!(
                    "SELECT s.id FROM job_search s WHERE s.id >= (SELECT min(id) FROM newest) AND s.folded LIKE {pattern} ESCAPE '\\'
                       AND {not_pending} ORDER BY s.id DESC LIMIT {page}"
                ),
                false => format!(
                    "SELECT n.id FROM newest n CROSS JOIN LATERAL (
                         SELECT 1 FROM job_search s WHERE s.id = n.id AND s.folded LIKE {pattern} ESCAPE '\\' AND {not_pending} OFFSET 0) m"
                ),
            };
            // Older jobs, when the newest did not fill the page: from the index of sequences
            // (`search_index`), one range of row ids at a time, newest first, until the page is
            // full (each range's matches sorted alone: `OFFSET 0` keeps the planner from reading
            // the primary key backwards with the index's function in its filter); else (a term
            // holding a line break in each of its pairs) newest first.
            let grams = search_index::postgres_term_grams(folded.unwrap_or_default());
            let older = match grams.is_empty() {
                false => {
                    let grams = bind(Value::Text(serde_json::json!(grams).to_string()));
                    let join = if filters.is_empty() { "" } else { " JOIN jobs ON jobs.id = s.id" };
                    format!(
                        "SELECT m.id FROM generate_series(nevermiss_search_range((SELECT min(id) FROM newest) - 1), 0, -1) r (id_range)
                         CROSS JOIN LATERAL (
                             SELECT id FROM (
                                 SELECT s.id FROM job_search s{join}
                                 WHERE nevermiss_search_grams(s.id, s.folded)
                                       @> nevermiss_search_keys(r.id_range, ARRAY(SELECT json_array_elements_text({grams}::text::json)))
                                   AND s.id < (SELECT min(id) FROM newest) AND s.folded LIKE {pattern} ESCAPE '\\' AND {not_pending}{filters}
                                 OFFSET 0) in_range
                             ORDER BY id DESC LIMIT {page}) m
                         WHERE (SELECT count(*) FROM found) < {page}
                         LIMIT {page}"
                    )
                }
                true => format!(
                    "SELECT s.id FROM job_search s JOIN jobs ON jobs.id = s.id
                     WHERE s.folded LIKE {pattern} ESCAPE '\\' AND {not_pending}{filters} AND s.id < (SELECT min(id) FROM newest)
                       AND (SELECT count(*) FROM found) < {page}
                     ORDER BY s.id DESC LIMIT {page}"
                ),
            };
            format!(
                "WITH newest AS MATERIALIZED (
                     SELECT jobs.id FROM jobs WHERE 1 = 1{filters} ORDER BY jobs.id DESC LIMIT {POSTGRES_NEWEST_FIRST}),
                 found AS MATERIALIZED ({found}),
                 older AS MATERIALIZED ({older})
                 SELECT {columns} FROM jobs
                 WHERE jobs.id = ANY (ARRAY(SELECT id FROM found UNION ALL SELECT id FROM older))
                   AND NOT EXISTS (SELECT 1 FROM job_search_pending p WHERE p.job = jobs.id){filters}
                 ORDER BY jobs.id DESC LIMIT {page}"
            )
        }
    };
    (sql, args)
}

/// Jobs newest first, one page at a time (keyset paging: as cheap on page 1,000 as on page 1).
/// A search (`q`) reads the jobs the search index names and the jobs waiting for it
/// (`search_index`, `Candidates::Indexed`), the two pages
/// merged; on SQLite a short term holding a line break (in neither index) reads the jobs newest first.
pub fn list(conn: &dyn Db, filter: &JobFilter) -> sql::Result<JobPage> {
    let limit = filter.limit.unwrap_or(100).clamp(1, MAX_PAGE) as i64;
    let folded = filter.q.as_deref().filter(|q| !q.is_empty()).map(fold::fold);
    // PostgreSQL's index table holds the folded texts too: a term neither index holds is matched
    // there, cheaper than folding every job's columns.
    let indexed = folded.as_deref().is_some_and(|f| {
        conn.dialect() == Dialect::Postgres || f.chars().count() >= search_index::INDEXED_TERM || search_index::short_term_indexed(f)
    });
    let run = |candidates| {
        let (sql, args) = page_query(conn.dialect(), filter, folded.as_deref(), candidates, limit);
        match candidates {
            // Which way into PostgreSQL's index is best depends on the term.
            Candidates::Indexed => conn.query_planned_now(&sql, args),
            _ => conn.prepare_cached(&sql)?.query(args),
        }
    };
    let rows = match indexed {
        false => run(Candidates::All)?,
        true => {
            // Both pages newest first: merged, a job in both (renamed since it was indexed) once.
            let mut rows = run(Candidates::Indexed)?;
            rows.extend(run(Candidates::Pending)?);
            let mut keyed = rows.into_iter().map(|row| Ok((row.get::<_, i64>("id")?, row))).collect::<sql::Result<Vec<_>>>()?;
            keyed.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
            keyed.dedup_by_key(|(id, _)| *id);
            keyed.into_iter().map(|(_, row)| row).collect()
        }
    };
    let mut jobs = Vec::new();
    let mut last_id = None;
    let mut more = false;
    for row in &rows {
        if jobs.len() as i64 == limit {
            more = true;
            break;
        }
        jobs.push(job_from_row(row)?);
        last_id = Some(row.get::<_, i64>("id")?);
    }
    Ok(JobPage { jobs, next_cursor: if more { last_id.map(|id| id.to_string()) } else { None } })
}

/// An unfinished job, as reconciliation sees it.
#[derive(Debug, Clone)]
pub struct Unfinished {
    pub job: JobRef,
    pub created_at: i64,
    pub poll_failures: i64,
}

/// Unfinished jobs of one provider that are due for a poll, longest waiting first. Reads only the
/// partial index of unfinished jobs, so its cost does not grow with the number of finished ones.
/// Abandoned jobs are not due (their `next_poll_at` is pushed past any `now`, so the index range
/// does not even reach them).
pub fn unfinished_due(conn: &dyn Db, provider: &str, now: i64, limit: i64) -> sql::Result<Vec<Unfinished>> {
    let unfinished = sql::indexed_by(conn.dialect(), sql::IndexHint::JobsUnfinished);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT job_id, poll_url, state, created_at, poll_failures FROM jobs{unfinished}
         WHERE provider = $1 AND rank < {TERMINAL_RANK} AND next_poll_at <= $2 AND abandoned_at IS NULL
         ORDER BY next_poll_at LIMIT $3"
    ))?;
    let rows = stmt.query_map(params![provider, now, limit], |row| {
        Ok(Unfinished {
            job: JobRef { job_id: row.get("job_id")?, poll_url: row.get("poll_url")?, state: state_of(row)? },
            created_at: row.get("created_at")?,
            poll_failures: row.get("poll_failures")?,
        })
    })?;
    rows.collect()
}

/// Whether `provider` has an unfinished job polling still watches (not abandoned).
pub fn any_unfinished(conn: &dyn Db, provider: &str) -> sql::Result<bool> {
    let unfinished = sql::indexed_by(conn.dialect(), sql::IndexHint::JobsUnfinished);
    let found: Option<i64> = conn
        .prepare_cached(&format!(
            "SELECT 1 FROM jobs{unfinished} WHERE provider = $1 AND rank < {TERMINAL_RANK} AND abandoned_at IS NULL LIMIT 1"
        ))?
        .query_row(params![provider], |r| r.get(0))
        .optional()?;
    Ok(found.is_some())
}

/// One job as reconciliation polls it, and how many polls of it failed in a row.
pub fn poll_target(conn: &dyn Db, key: &JobKey) -> sql::Result<Option<(JobRef, i64)>> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached("SELECT poll_url, state, poll_failures FROM jobs WHERE provider = $1 AND job_id = $2")?
        .query_row(params![provider, job_id], |r| {
            Ok((JobRef { job_id: job_id.to_owned(), poll_url: r.get("poll_url")?, state: state_of(r)? }, r.get("poll_failures")?))
        })
        .optional()
}

/// Unfinished jobs of `provider` created before `cutoff` (ms): the stuck ones, with their state.
/// An abandoned job already had its one alert: it is not also stuck.
pub fn unfinished_since_before(conn: &dyn Db, provider: &str, cutoff: i64) -> sql::Result<Vec<(String, JobState)>> {
    let unfinished = sql::indexed_by(conn.dialect(), sql::IndexHint::JobsUnfinished);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT job_id, state FROM jobs{unfinished}
         WHERE provider = $1 AND rank < {TERMINAL_RANK} AND created_at < $2 AND abandoned_at IS NULL"
    ))?;
    let rows = stmt.query_map(params![provider, cutoff], |r| {
        let state: String = r.get("state")?;
        Ok((r.get("job_id")?, JobState::parse(&state).unwrap_or(JobState::Unknown)))
    })?;
    rows.collect()
}

/// An unfinished job as the lateness alerts see it: its kind, and since when it runs (the
/// provider's start, else when NeverMiss first heard of it: as its duration is measured,
/// `durations`), and when NeverMiss first heard of it (what the fixed stuck threshold counts from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    pub job_id: String,
    pub state: JobState,
    pub kind: Option<String>,
    pub since: i64,
    pub created_at: i64,
}

/// Unfinished jobs of `provider` that started or that NeverMiss first heard of before `cutoff`
/// (ms), not abandoned (an abandoned job already had its one alert): those that may be late, by
/// either rule.
pub fn running_before(conn: &dyn Db, provider: &str, cutoff: i64) -> sql::Result<Vec<Running>> {
    let unfinished = sql::indexed_by(conn.dialect(), sql::IndexHint::JobsUnfinished);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT job_id, state, job_kind, COALESCE(started_at, created_at) AS since, created_at FROM jobs{unfinished}
         WHERE provider = $1 AND rank < {TERMINAL_RANK} AND (created_at < $2 OR started_at < $2) AND abandoned_at IS NULL"
    ))?;
    let rows = stmt.query_map(params![provider, cutoff], |r| {
        let state: String = r.get("state")?;
        Ok(Running {
            job_id: r.get("job_id")?,
            state: JobState::parse(&state).unwrap_or(JobState::Unknown),
            kind: r.get("job_kind")?,
            since: r.get("since")?,
            created_at: r.get("created_at")?,
        })
    })?;
    rows.collect()
}

/// How many jobs run now and how many wait to start (queued or not yet known).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunningAndWaiting {
    pub running: i64,
    pub waiting: i64,
}

/// The running and waiting counts, from the per-state counts the store keeps.
pub fn running_and_waiting(conn: &dyn Db) -> sql::Result<RunningAndWaiting> {
    conn.query_row(
        "SELECT CAST(coalesce(sum(CASE WHEN state = 'running' THEN count END), 0) AS BIGINT) AS running,
                CAST(coalesce(sum(CASE WHEN state IN ('queued', 'unknown') THEN count END), 0) AS BIGINT) AS waiting
         FROM job_state_counts",
        [],
        |r| Ok(RunningAndWaiting { running: r.get("running")?, waiting: r.get("waiting")? }),
    )
}

/// Jobs per state, every state present (0 when none).
pub fn count_by_state(conn: &dyn Db) -> sql::Result<std::collections::BTreeMap<String, i64>> {
    let mut counts: std::collections::BTreeMap<String, i64> = JobState::ALL.iter().map(|state| (state.as_str().to_owned(), 0)).collect();
    for row in conn.prepare_cached("SELECT state, CAST(sum(count) AS BIGINT) AS count FROM job_state_counts GROUP BY state")?.query([])? {
        counts.insert(row.get("state")?, row.get("count")?);
    }
    Ok(counts)
}

// ----- named writes -----

/// Starts watching a job: creates it (state unknown), or for a known job replaces its label and
/// poll URL when given and makes it due for a poll now, with a clean slate: its failures are
/// forgotten and, if polling had given up on it, it is polled again (the user may have given the
/// status URL it lacked). Returns whether it was created. The state is left alone: only events
/// move it, through the merge point.
pub fn track(conn: &dyn Db, key: &JobKey, label: Option<&str>, poll_url: Option<&str>, now: i64) -> sql::Result<bool> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    let created = conn
        .prepare_cached(
            "INSERT INTO jobs (provider, job_id, label, poll_url, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)
             ON CONFLICT (provider, job_id) DO NOTHING",
        )?
        .execute(params![provider, job_id, label, poll_url, now])?
        == 1;
    if !created {
        conn.prepare_cached(
            "UPDATE jobs SET label = COALESCE($3, label), poll_url = COALESCE($4, poll_url), next_poll_at = 0,
                 poll_failures = 0, poll_failing_since = NULL, abandoned_at = NULL, abandoned_reason = NULL
             WHERE provider = $1 AND job_id = $2",
        )?
        .execute(params![provider, job_id, label, poll_url])?;
    }
    Ok(created)
}

/// Names a job that has no label yet (a label is a description, not a state: a stale event may
/// still name an unnamed job).
/// Where to poll a job from now on, learned by a poll (e.g. a Replicate id that is a training).
pub fn remember_poll_url(conn: &dyn Db, key: &JobKey, poll_url: &str) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached("UPDATE jobs SET poll_url = $3 WHERE provider = $1 AND job_id = $2")?
        .execute(params![provider, job_id, poll_url])?;
    Ok(())
}

/// Notes what a job produced and its page on the provider's site where they are not known yet
/// (a result is a description, like a label: an event too late to move the job, e.g. the poll
/// that reads a thin webhook's job, may still say what it produced). Returns whether it noted
/// anything.
pub fn describe_if_undescribed(conn: &dyn Db, key: &JobKey, result: Option<&str>, provider_url: Option<&str>) -> sql::Result<bool> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    if result.is_none() && provider_url.is_none() {
        return Ok(false);
    }
    let changed = conn
        .prepare_cached(
            // Typed, as PostgreSQL cannot infer a parameter's type from `IS NOT NULL` alone.
            "UPDATE jobs SET result = COALESCE(result, CAST($3 AS TEXT)), provider_url = COALESCE(provider_url, CAST($4 AS TEXT))
             WHERE provider = $1 AND job_id = $2
               AND ((result IS NULL AND CAST($3 AS TEXT) IS NOT NULL) OR (provider_url IS NULL AND CAST($4 AS TEXT) IS NOT NULL))",
        )?
        .execute(params![provider, job_id, result, provider_url])?;
    Ok(changed == 1)
}

pub fn name_if_unnamed(conn: &dyn Db, key: &JobKey, label: &str) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached("UPDATE jobs SET label = $3 WHERE provider = $1 AND job_id = $2 AND label IS NULL")?
        .execute(params![provider, job_id, label])?;
    Ok(())
}

/// Says the kind of a job of no known kind (a stale event may still say it, as it may name an
/// unnamed job), with the provider's start it tells when none is known, finished or not: a
/// success whose kind comes after its end adds its duration then (SQLite V13, PostgreSQL V8),
/// measured from that start. A job's kind, once known, is kept.
pub fn kind_if_unknown(conn: &dyn Db, key: &JobKey, kind: &str, started_at: Option<i64>) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached(
        "UPDATE jobs SET job_kind = $3, started_at = COALESCE(started_at, CAST($4 AS BIGINT))
         WHERE provider = $1 AND job_id = $2 AND job_kind IS NULL",
    )?
    .execute(params![provider, job_id, kind, started_at])?;
    Ok(())
}

/// Notes the provider's start time of an unfinished job when it is earlier than the one known (a
/// stale event may still say when the job started). A finished job's start is left alone: its
/// SLA was counted when it finished.
pub fn note_started_at(conn: &dyn Db, key: &JobKey, started_at: i64) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached(&format!(
        "UPDATE jobs SET started_at = $3 WHERE provider = $1 AND job_id = $2 AND rank < {TERMINAL_RANK}
         AND (started_at IS NULL OR started_at > $3)"
    ))?
    .execute(params![provider, job_id, started_at])?;
    Ok(())
}

/// A poll of the job answered: it is due again at the next pass, its failures forgotten (and, if
/// polling had given up on it, it can be polled after all: it is polled again).
pub fn poll_succeeded(conn: &dyn Db, key: &JobKey, now: i64) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached(
        "UPDATE jobs SET last_polled_at = $3, next_poll_at = $3, poll_error = NULL, poll_error_kind = NULL, poll_failures = 0,
                         poll_failing_since = NULL, abandoned_at = NULL, abandoned_reason = NULL
         WHERE provider = $1 AND job_id = $2",
    )?
    .execute(params![provider, job_id, now])?;
    Ok(())
}

/// A poll of the job failed (`failures` in a row now): why, and when to try again. Returns since
/// when its polls have been failing (the first failure of the current run of failures).
pub fn poll_failed(
    conn: &dyn Db,
    key: &JobKey,
    now: i64,
    kind: PollErrorKind,
    reason: &str,
    failures: i64,
    next_poll_at: i64,
) -> sql::Result<i64> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    conn.prepare_cached(
        "UPDATE jobs SET last_polled_at = $3, poll_error_kind = $4, poll_error = $5, poll_failures = $6, next_poll_at = $7,
                         poll_failing_since = COALESCE(poll_failing_since, $3)
         WHERE provider = $1 AND job_id = $2
         RETURNING poll_failing_since",
    )?
    .query_row(params![provider, job_id, now, kind.as_str(), reason, failures, next_poll_at], |r| r.get(0))
    .optional()
    .map(|since| since.unwrap_or(now))
}

/// When an abandoned job would be polled again: never (past any `now`, so the due range of the
/// unfinished index does not reach it).
const NEVER: i64 = i64::MAX;

/// Polling gives up on an unfinished job, once: marks it abandoned (`reason`), out of the due
/// set. Returns its state when this call abandoned it (`None` if it was finished, unknown, or
/// abandoned already), so the caller enqueues its one alert in the same transaction.
pub fn abandon(conn: &dyn Db, key: &JobKey, reason: AbandonReason, now: i64) -> sql::Result<Option<JobState>> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    let state: Option<String> = conn
        .prepare_cached(&format!(
            "UPDATE jobs SET abandoned_at = $3, abandoned_reason = $4, next_poll_at = $5
             WHERE provider = $1 AND job_id = $2 AND rank < {TERMINAL_RANK} AND abandoned_at IS NULL
             RETURNING state"
        ))?
        .query_row(params![provider, job_id, now, reason.as_str(), NEVER], |r| r.get(0))
        .optional()?;
    Ok(state.map(|s| JobState::parse(&s).unwrap_or(JobState::Unknown)))
}

/// The jobs' ends were announced (their terminal notifications delivered), each if not marked
/// already, in one statement.
pub fn mark_notified(conn: &dyn Db, keys: &[(&str, &str)], now: i64) -> sql::Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let of_keys = sql::job_key_in_json(conn.dialect(), 1);
    conn.prepare_cached(&format!("UPDATE jobs SET notified_at = $2 WHERE {of_keys} AND notified_at IS NULL"))?
        .execute(params![sql::json_batch(&keys)?, now])?;
    Ok(())
}

/// Stops watching a job (the owner's `untrack`): removes it, its timeline and its notifications,
/// delivered or not; its deliveries stay, as the sender's record. The per-state counts drop it (the
/// delete trigger). Returns the job as it was; `None` when it is not tracked.
pub fn untrack(conn: &dyn Db, key: &JobKey) -> sql::Result<Option<Job>> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    let Some(job) = job(conn, key)? else { return Ok(None) };
    conn.prepare_cached("DELETE FROM outbox WHERE provider = $1 AND job_id = $2")?.execute(params![provider, job_id])?;
    forget(conn, key)?;
    Ok(Some(job))
}

/// Removes a job and its timeline (the tunnel self-test's own probe job); nothing when absent.
pub fn forget(conn: &dyn Db, key: &JobKey) -> sql::Result<()> {
    let (provider, job_id) = (key.provider.as_str(), key.id.as_str());
    super::timeline::delete_of_job(conn, key)?;
    conn.prepare_cached("DELETE FROM jobs WHERE provider = $1 AND job_id = $2")?.execute(params![provider, job_id])?;
    Ok(())
}

// ----- retention -----

/// A finished job retention acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub id: i64,
    pub provider: String,
    pub job_id: String,
    pub state: String,
}

fn finished_from_row(r: &Row) -> sql::Result<Finished> {
    Ok(Finished { id: r.get("id")?, provider: r.get("provider")?, job_id: r.get("job_id")?, state: r.get("state")? })
}

/// Up to `limit` finished jobs whose end NeverMiss learned before `cutoff` (ms: `terminal_at`,
/// the database's copy of a finished job's `updated_at`, which nothing changes after its end) and
/// whose timeline is not trimmed yet, oldest end first. Reads only the index of finished jobs.
pub fn untrimmed_finished_before(conn: &dyn Db, cutoff: i64, limit: i64) -> sql::Result<Vec<Finished>> {
    let finished = sql::indexed_by(conn.dialect(), sql::IndexHint::JobsFinished);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id, provider, job_id, state FROM jobs{finished}
         WHERE rank = {TERMINAL_RANK} AND timeline_trimmed = 0 AND terminal_at < $1 ORDER BY terminal_at LIMIT $2"
    ))?;
    let rows = stmt.query_map(params![cutoff, limit], finished_from_row)?;
    rows.collect()
}

/// Marks a job's timeline as trimmed (events that come after stay until the job is archived).
pub fn mark_timeline_trimmed(conn: &dyn Db, id: i64) -> sql::Result<()> {
    conn.prepare_cached("UPDATE jobs SET timeline_trimmed = 1 WHERE id = $1")?.execute([id])?;
    Ok(())
}

/// Up to `limit` finished jobs whose end NeverMiss learned before `cutoff` (ms) and that have no
/// side effect still waiting for delivery: the ones to archive.
pub fn archivable_before(conn: &dyn Db, cutoff: i64, limit: i64) -> sql::Result<Vec<Finished>> {
    let finished = sql::indexed_by(conn.dialect(), sql::IndexHint::JobsFinished);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id, provider, job_id, state FROM jobs{finished}
         WHERE rank = {TERMINAL_RANK} AND timeline_trimmed IN (0, 1) AND terminal_at < $1
           AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.provider = jobs.provider AND o.job_id = jobs.job_id
                           AND o.delivered_at IS NULL)
         LIMIT $2"
    ))?;
    let rows = stmt.query_map(params![cutoff, limit], finished_from_row)?;
    rows.collect()
}

/// Removes a finished job from the hot table (the caller removes its timeline and outbox rows in
/// the same write). The per-state counts keep it: `jobs_by_state` counts every job NeverMiss has
/// seen finish, archived or not (only finished jobs are archived, so the unfinished states, the
/// gauges of what runs now, are untouched).
pub fn archive(conn: &dyn Db, job: &Finished) -> sql::Result<bool> {
    let deleted = conn.prepare_cached(&format!("DELETE FROM jobs WHERE id = $1 AND rank = {TERMINAL_RANK}"))?.execute([job.id])?;
    if deleted == 1 {
        // The delete trigger took it off its state's count: put it back.
        conn.prepare_cached(
            "INSERT INTO job_state_counts (state, shard, count) VALUES ($1, 0, 1)
             ON CONFLICT (state, shard) DO UPDATE SET count = job_state_counts.count + 1",
        )?
        .execute([&job.state])?;
    }
    Ok(deleted == 1)
}

/// How many jobs the hot table holds.
pub fn count(conn: &dyn Db) -> sql::Result<i64> {
    conn.query_row("SELECT count(*) FROM jobs", [], |r| r.get(0))
}

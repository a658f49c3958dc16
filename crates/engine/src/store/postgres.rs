//! The store's rules on PostgreSQL, for a fleet of `serve` processes on one database (issue 12).
//!
//! What is here: a bounded connection pool with timeouts; the schema as numbered migrations
//! recorded in `schema_migrations` (applied under an advisory lock, so processes starting together
//! migrate once; a database newer than this build is refused); and the push path of the merge
//! point: dedupe on (provider, delivery id) by a unique index, the guarded upsert
//! (`store::guard::POSTGRES_UPSERT`, the same rule as SQLite's), the outbox row on its unique key,
//! the timeline and the counters, all in one transaction. Any number of writers, in any number of
//! processes, may run it at once: PostgreSQL serializes them on the rows themselves.
//!
//! Not yet (the rest of issue 12): the engine running on it (`serve --database`), reads for the
//! admin API, the reconcile lease, the outbox claim (`FOR UPDATE SKIP LOCKED`), LISTEN/NOTIFY.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use deadpool_postgres::Transaction;
use tokio_postgres::NoTls;

use super::counters::Counter;
use super::deliveries::RawRequest;
use super::guard::POSTGRES_UPSERT;
use super::outbox::Kind;
use crate::job::{JobEvent, JobState, Outcome, Source, TERMINAL_RANK};

/// The schema, as numbered migrations (append only; a released one is never edited).
const MIGRATIONS: &[&str] = &[
    // 1: jobs, deliveries, job_events, outbox, counters.
    r#"
    CREATE TABLE jobs (
        id              BIGSERIAL PRIMARY KEY,
        provider        TEXT NOT NULL,
        job_id          TEXT NOT NULL,
        label           TEXT,
        state           TEXT NOT NULL,
        rank            INTEGER NOT NULL,
        seq             BIGINT,
        error           TEXT,
        detail          TEXT,
        created_at      BIGINT NOT NULL,
        updated_at      BIGINT NOT NULL,
        finished_at     BIGINT,
        terminal_source TEXT,
        started_at      BIGINT,
        notified_at     BIGINT,
        poll_url        TEXT,
        last_polled_at  BIGINT,
        next_poll_at    BIGINT NOT NULL DEFAULT 0,
        poll_failures   INTEGER NOT NULL DEFAULT 0,
        poll_error      TEXT,
        UNIQUE (provider, job_id)
    );
    CREATE INDEX jobs_unfinished ON jobs (provider, next_poll_at) WHERE rank < 3;

    CREATE TABLE deliveries (
        id             BIGSERIAL PRIMARY KEY,
        provider       TEXT NOT NULL,
        delivery_id    TEXT,
        job_id         TEXT,
        received_at    BIGINT NOT NULL,
        status         TEXT NOT NULL CHECK (status IN ('accepted', 'rejected')),
        reason         TEXT,
        headers        TEXT NOT NULL,
        body           BYTEA NOT NULL,
        body_truncated BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE UNIQUE INDEX deliveries_dedupe ON deliveries (provider, delivery_id) WHERE status = 'accepted';

    CREATE TABLE job_events (
        id          BIGSERIAL PRIMARY KEY,
        provider    TEXT NOT NULL,
        job_id      TEXT NOT NULL,
        at          BIGINT NOT NULL,
        source      TEXT NOT NULL,
        delivery_id TEXT,
        state       TEXT,
        seq         BIGINT,
        outcome     TEXT NOT NULL,
        detail      TEXT
    );
    CREATE INDEX job_events_by_job ON job_events (provider, job_id, id);

    CREATE TABLE outbox (
        id              BIGSERIAL PRIMARY KEY,
        provider        TEXT NOT NULL,
        job_id          TEXT NOT NULL,
        kind            TEXT NOT NULL,
        state           TEXT,
        created_at      BIGINT NOT NULL,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        delivered_at    BIGINT,
        last_error      TEXT,
        UNIQUE (provider, job_id, kind)
    );
    CREATE INDEX outbox_pending ON outbox (next_attempt_at) WHERE delivered_at IS NULL;

    CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    "#,
];

/// The schema version this build knows.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The advisory lock key under which migrations run (any constant shared by every process).
const MIGRATION_LOCK: i64 = 0x6e65_7665_726d_6973; // "nevermis"

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("the database URL is not valid: {0}")]
    Url(String),
    /// The database cannot be reached or answered an error: the caller answers 503 (the sender
    /// retries), never a lost 200.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    #[error("the database's schema is version {found}, newer than this NeverMiss knows ({known}): upgrade NeverMiss, or point it at another database")]
    NewerSchema { found: i32, known: i32 },
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> PgError {
        PgError::Unavailable(e.to_string())
    }
}

impl From<deadpool_postgres::PoolError> for PgError {
    fn from(e: deadpool_postgres::PoolError) -> PgError {
        PgError::Unavailable(e.to_string())
    }
}

/// How a pool is bounded.
#[derive(Debug, Clone, Copy)]
pub struct PoolLimits {
    pub max_connections: usize,
    /// How long a request waits for a free connection, or for a new one to open.
    pub wait: Duration,
}

impl Default for PoolLimits {
    fn default() -> PoolLimits {
        PoolLimits { max_connections: 16, wait: Duration::from_secs(5) }
    }
}

/// A job as the push path leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub state: JobState,
    pub seq: Option<i64>,
    pub finished_at: Option<i64>,
    pub terminal_source: Option<Source>,
}

/// What a push did (as `merge_point::PushResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    pub outcome: Outcome,
    pub first_terminal: bool,
}

/// A pool on one PostgreSQL database, its schema migrated.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
}

impl PgStore {
    /// Connects (`postgres://USER@HOST:PORT/DB`), then migrates or refuses a newer schema.
    pub async fn connect(url: &str, limits: PoolLimits) -> Result<PgStore, PgError> {
        let config = tokio_postgres::Config::from_str(url).map_err(|e| PgError::Url(e.to_string()))?;
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(limits.max_connections)
            .wait_timeout(Some(limits.wait))
            .create_timeout(Some(limits.wait))
            .recycle_timeout(Some(limits.wait))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| PgError::Url(e.to_string()))?;
        let store = PgStore { pool };
        store.migrate().await?;
        Ok(store)
    }

    /// Applies the migrations this database lacks, one transaction each, under an advisory lock.
    async fn migrate(&self) -> Result<(), PgError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)")
            .await?;
        let found: i32 = tx.query_one("SELECT COALESCE(max(version), 0) FROM schema_migrations", &[]).await?.get(0);
        if found > SCHEMA_VERSION {
            return Err(PgError::NewerSchema { found, known: SCHEMA_VERSION });
        }
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.batch_execute(sql).await?;
            let version = index as i32 + 1;
            tx.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", &[&version, &crate::job::now_ms()])
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The schema version recorded in the database.
    pub async fn schema_version(&self) -> Result<i32, PgError> {
        let client = self.pool.get().await?;
        Ok(client.query_one("SELECT COALESCE(max(version), 0) FROM schema_migrations", &[]).await?.get(0))
    }

    /// A push: dedupe on (provider, delivery id), then the guarded merge, its outbox row, the
    /// timeline and the counters, in one transaction (the push path of `merge_point::accept_push`).
    pub async fn accept_push(&self, delivery_id: &str, ev: &JobEvent, raw: &RawRequest, now: i64) -> Result<Pushed, PgError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        count(&tx, Counter::DeliveriesTotal, 1).await?;
        let first_seen = tx
            .query_opt(
                "INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
                 VALUES ($1, $2, $3, $4, 'accepted', $5, $6, $7)
                 ON CONFLICT (provider, delivery_id) WHERE status = 'accepted' DO NOTHING
                 RETURNING id",
                &[&ev.provider, &delivery_id, &ev.job_id, &now, &raw.headers_json, &raw.body, &raw.body_truncated],
            )
            .await?
            .is_some();
        let pushed = if first_seen {
            let pushed = merge(&tx, ev, Source::Push, now).await?;
            count(&tx, Counter::from(pushed.outcome), 1).await?;
            pushed
        } else {
            count(&tx, Counter::Duplicates, 1).await?;
            Pushed { outcome: Outcome::Duplicate, first_terminal: false }
        };
        tx.execute(
            "INSERT INTO job_events (provider, job_id, at, source, delivery_id, state, seq, outcome, detail)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[&ev.provider, &ev.job_id, &now, &Source::Push.as_str(), &delivery_id, &ev.state.as_str(), &ev.seq, &pushed.outcome.as_str(), &ev.detail],
        )
        .await?;
        tx.commit().await?;
        Ok(pushed)
    }

    /// A job as it stands, `None` when unknown.
    pub async fn job(&self, provider: &str, job_id: &str) -> Result<Option<JobRow>, PgError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt("SELECT state, seq, finished_at, terminal_source FROM jobs WHERE provider = $1 AND job_id = $2", &[&provider, &job_id])
            .await?;
        Ok(row.map(|r| JobRow {
            state: JobState::parse(r.get::<_, &str>(0)).unwrap_or(JobState::Unknown),
            seq: r.get(1),
            finished_at: r.get(2),
            terminal_source: r.get::<_, Option<&str>>(3).and_then(Source::parse),
        }))
    }

    /// A counter's value (0 when never counted).
    pub async fn counter(&self, counter: Counter) -> Result<i64, PgError> {
        let client = self.pool.get().await?;
        let row = client.query_opt("SELECT value FROM counters WHERE name = $1", &[&counter.as_str()]).await?;
        Ok(row.map_or(0, |r| r.get(0)))
    }

    /// `SELECT count(*) ...` or any one-integer query (tests and benchmarks read with it).
    pub async fn count_rows(&self, sql: &str) -> Result<i64, PgError> {
        let client = self.pool.get().await?;
        Ok(client.query_one(sql, &[]).await?.get(0))
    }
}

/// The guarded upsert (see `store::guard`), and the outbox row when this event is the job's first
/// terminal state.
async fn merge(tx: &Transaction<'_>, ev: &JobEvent, source: Source, now: i64) -> Result<Pushed, PgError> {
    let rank = ev.state.rank() as i32;
    let terminal_rank = TERMINAL_RANK as i32;
    let adopted = tx
        .query_opt(
            POSTGRES_UPSERT,
            &[
                &ev.provider,
                &ev.job_id,
                &ev.label,
                &ev.state.as_str(),
                &rank,
                &ev.seq,
                &ev.error,
                &ev.detail,
                &now,
                &ev.finished_at,
                &source.as_str(),
                &terminal_rank,
                &ev.started_at,
            ],
        )
        .await?;
    let first_terminal = adopted.as_ref().map(|r| r.get::<_, i32>(0)) == Some(terminal_rank);
    if first_terminal {
        let added = tx
            .execute(
                "INSERT INTO outbox (provider, job_id, kind, state, created_at, next_attempt_at)
                 VALUES ($1, $2, $3, $4, $5, $5)
                 ON CONFLICT (provider, job_id, kind) DO NOTHING",
                &[&ev.provider, &ev.job_id, &Kind::Terminal.as_str(), &ev.state.as_str(), &now],
            )
            .await?;
        count(tx, Counter::NotificationsEnqueued, added as i64).await?;
    }
    let outcome = if adopted.is_some() { Outcome::Applied } else { Outcome::Stale };
    Ok(Pushed { outcome, first_terminal })
}

/// Adds to a counter in the caller's transaction.
async fn count(tx: &Transaction<'_>, counter: Counter, n: i64) -> Result<(), PgError> {
    if n != 0 {
        tx.execute(
            "INSERT INTO counters (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value",
            &[&counter.as_str(), &n],
        )
        .await?;
    }
    Ok(())
}

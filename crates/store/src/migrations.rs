//! The schema, as numbered migrations applied in order and recorded in SQLite's `user_version`.
//! Append only: a released migration is never edited.

use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: jobs, deliveries, timeline, outbox, settings, counters.
    r#"
    CREATE TABLE jobs (
        id              INTEGER PRIMARY KEY,
        provider        TEXT NOT NULL,
        job_id          TEXT NOT NULL,
        label           TEXT,
        state           TEXT NOT NULL DEFAULT 'unknown',
        rank            INTEGER NOT NULL DEFAULT 0,
        seq             INTEGER,
        error           TEXT,
        created_at      INTEGER NOT NULL,
        updated_at      INTEGER NOT NULL,
        finished_at     INTEGER,
        terminal_source TEXT,
        notified_at     INTEGER,
        detail          TEXT,
        -- Where to poll, when the provider's API cannot be derived from the id (fal's status_url).
        poll_url        TEXT,
        last_polled_at  INTEGER,
        next_poll_at    INTEGER NOT NULL DEFAULT 0,
        poll_failures   INTEGER NOT NULL DEFAULT 0,
        poll_error      TEXT,
        UNIQUE (provider, job_id)
    );
    -- Reconciliation reads only this: its size is the number of unfinished jobs, not the history.
    CREATE INDEX jobs_unfinished ON jobs (provider, next_poll_at) WHERE rank < 3;
    CREATE INDEX jobs_by_state ON jobs (state, id);
    CREATE INDEX jobs_by_provider ON jobs (provider, id);

    CREATE TABLE job_state_counts (state TEXT PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN
        INSERT INTO job_state_counts (state, count) VALUES (NEW.state, 1)
            ON CONFLICT (state) DO UPDATE SET count = count + 1;
    END;
    CREATE TRIGGER jobs_count_update AFTER UPDATE OF state ON jobs WHEN OLD.state <> NEW.state BEGIN
        UPDATE job_state_counts SET count = count - 1 WHERE state = OLD.state;
        INSERT INTO job_state_counts (state, count) VALUES (NEW.state, 1)
            ON CONFLICT (state) DO UPDATE SET count = count + 1;
    END;
    CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN
        UPDATE job_state_counts SET count = count - 1 WHERE state = OLD.state;
    END;

    -- Every signed request to a hook: the dedupe key, and the raw request for inspection.
    CREATE TABLE deliveries (
        id             INTEGER PRIMARY KEY,
        provider       TEXT NOT NULL,
        delivery_id    TEXT,
        job_id         TEXT,
        received_at    INTEGER NOT NULL,
        status         TEXT NOT NULL CHECK (status IN ('accepted', 'rejected')),
        reason         TEXT,
        headers        TEXT NOT NULL,
        body           BLOB NOT NULL,
        body_truncated INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX deliveries_dedupe ON deliveries (provider, delivery_id) WHERE status = 'accepted';
    CREATE INDEX deliveries_received ON deliveries (received_at);

    -- Each job's timeline: every push and every adopted pull, with what the merge point did.
    CREATE TABLE job_events (
        id          INTEGER PRIMARY KEY,
        provider    TEXT NOT NULL,
        job_id      TEXT NOT NULL,
        at          INTEGER NOT NULL,
        source      TEXT NOT NULL,
        delivery_id TEXT,
        state       TEXT,
        seq         INTEGER,
        outcome     TEXT NOT NULL,
        detail      TEXT
    );
    CREATE INDEX job_events_by_job ON job_events (provider, job_id, id);

    -- Side effects, enqueued in the transaction that caused them; one per job and kind.
    CREATE TABLE outbox (
        id              INTEGER PRIMARY KEY,
        provider        TEXT NOT NULL,
        job_id          TEXT NOT NULL,
        kind            TEXT NOT NULL,
        state           TEXT,
        created_at      INTEGER NOT NULL,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        delivered_at    INTEGER,
        last_error      TEXT,
        UNIQUE (provider, job_id, kind)
    );
    CREATE INDEX outbox_pending ON outbox (next_attempt_at) WHERE delivered_at IS NULL;

    -- One row per reconcile pass: when, how long, what it did.
    CREATE TABLE reconcile_passes (
        id          INTEGER PRIMARY KEY,
        started_at  INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        checked     INTEGER NOT NULL,
        applied     INTEGER NOT NULL,
        rescues     INTEGER NOT NULL,
        errors      INTEGER NOT NULL,
        not_found   INTEGER NOT NULL,
        providers   TEXT NOT NULL
    );

    CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    -- The same counters per UTC hour, for charts over time.
    CREATE TABLE counter_hours (
        hour  INTEGER NOT NULL,
        name  TEXT NOT NULL,
        value INTEGER NOT NULL,
        PRIMARY KEY (hour, name)
    ) WITHOUT ROWID;

    -- Completions per UTC day: how many, how many within the SLA in force then, how many by pull.
    CREATE TABLE daily_completions (
        day        TEXT PRIMARY KEY,
        finished   INTEGER NOT NULL,
        within_sla INTEGER NOT NULL,
        by_pull    INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TRIGGER jobs_completion_on_update AFTER UPDATE OF rank ON jobs
    WHEN NEW.rank = 3 AND OLD.rank < 3 BEGIN
        INSERT INTO daily_completions (day, finished, within_sla, by_pull)
        VALUES (date(NEW.updated_at / 1000, 'unixepoch'), 1,
                NEW.finished_at - NEW.created_at
                  <= 1000 * COALESCE((SELECT CAST(value AS INTEGER) FROM settings WHERE key = 'sla_secs'), 300),
                NEW.terminal_source = 'pull')
        ON CONFLICT (day) DO UPDATE SET finished = finished + 1,
            within_sla = within_sla + excluded.within_sla, by_pull = by_pull + excluded.by_pull;
    END;
    CREATE TRIGGER jobs_completion_on_insert AFTER INSERT ON jobs WHEN NEW.rank = 3 BEGIN
        INSERT INTO daily_completions (day, finished, within_sla, by_pull)
        VALUES (date(NEW.updated_at / 1000, 'unixepoch'), 1, 1, NEW.terminal_source = 'pull')
        ON CONFLICT (day) DO UPDATE SET finished = finished + 1,
            within_sla = within_sla + 1, by_pull = by_pull + excluded.by_pull;
    END;
    "#,
    // 2: the kind of a job's last poll failure, typed (the words stay in poll_error).
    r#"
    ALTER TABLE jobs ADD COLUMN poll_error_kind TEXT;
    UPDATE jobs SET poll_error_kind = 'not_found' WHERE poll_error = 'the provider does not know this job (404)';
    "#,
    // 3: jobs polling gave up on ("abandoned": when and why), and since when a job's polls have
    // been failing (the start of its current run of failures; a job failing now counts from its
    // last poll).
    r#"
    ALTER TABLE jobs ADD COLUMN abandoned_at INTEGER;
    ALTER TABLE jobs ADD COLUMN abandoned_reason TEXT;
    ALTER TABLE jobs ADD COLUMN poll_failing_since INTEGER;
    UPDATE jobs SET poll_failing_since = last_polled_at WHERE poll_failures > 0;
    "#,
    // 4: the SLA measured from the provider's own start time, and retention of finished jobs.
    // `started_at`: when the provider says the job was created (ms), the earliest one known; NULL
    // when no event carried one. `timeline_trimmed`: the finished job's timeline was reduced to
    // its first and terminal events. A job first seen already finished with no start time is
    // counted in `without_start`, never within (or outside) the SLA.
    r#"
    ALTER TABLE jobs ADD COLUMN started_at INTEGER;
    ALTER TABLE jobs ADD COLUMN timeline_trimmed INTEGER NOT NULL DEFAULT 0;
    -- Retention reads only finished jobs, oldest end first: those to trim, then those to archive.
    -- A finished job's updated_at is when NeverMiss learned its end (terminal states are sinks).
    CREATE INDEX jobs_finished ON jobs (timeline_trimmed, updated_at) WHERE rank = 3;

    ALTER TABLE daily_completions ADD COLUMN without_start INTEGER NOT NULL DEFAULT 0;
    DROP TRIGGER jobs_completion_on_update;
    DROP TRIGGER jobs_completion_on_insert;
    -- Seen unfinished: measured from the provider's start, else from when NeverMiss first heard.
    CREATE TRIGGER jobs_completion_on_update AFTER UPDATE OF rank ON jobs
    WHEN NEW.rank = 3 AND OLD.rank < 3 BEGIN
        INSERT INTO daily_completions (day, finished, within_sla, by_pull, without_start)
        VALUES (date(NEW.updated_at / 1000, 'unixepoch'), 1,
                NEW.finished_at - COALESCE(NEW.started_at, NEW.created_at)
                  <= 1000 * COALESCE((SELECT CAST(value AS INTEGER) FROM settings WHERE key = 'sla_secs'), 300),
                NEW.terminal_source = 'pull', 0)
        ON CONFLICT (day) DO UPDATE SET finished = finished + 1,
            within_sla = within_sla + excluded.within_sla, by_pull = by_pull + excluded.by_pull;
    END;
    -- First seen already finished: measured from the provider's start when it gave one, else
    -- counted apart (NeverMiss cannot know how long it took).
    CREATE TRIGGER jobs_completion_on_insert AFTER INSERT ON jobs WHEN NEW.rank = 3 BEGIN
        INSERT INTO daily_completions (day, finished, within_sla, by_pull, without_start)
        VALUES (date(NEW.updated_at / 1000, 'unixepoch'), 1,
                NEW.started_at IS NOT NULL AND NEW.finished_at - NEW.started_at
                  <= 1000 * COALESCE((SELECT CAST(value AS INTEGER) FROM settings WHERE key = 'sla_secs'), 300),
                NEW.terminal_source = 'pull', NEW.started_at IS NULL)
        ON CONFLICT (day) DO UPDATE SET finished = finished + 1, within_sla = within_sla + excluded.within_sla,
            by_pull = by_pull + excluded.by_pull, without_start = without_start + excluded.without_start;
    END;
    "#,
    // 5: a rejected delivery is kept once per (provider, delivery id): a resend is a duplicate,
    // not a second row; and the last refused requests (bad signature, too old, unknown provider,
    // unverifiable), masked, with their likely cause, trimmed to a cap in the write that adds one.
    r#"
    DELETE FROM deliveries WHERE status = 'rejected' AND delivery_id IS NOT NULL AND id NOT IN
        (SELECT min(id) FROM deliveries WHERE status = 'rejected' AND delivery_id IS NOT NULL
         GROUP BY provider, delivery_id);
    CREATE UNIQUE INDEX deliveries_rejected_once ON deliveries (provider, delivery_id) WHERE status = 'rejected';

    CREATE TABLE refused (
        id             INTEGER PRIMARY KEY,
        received_at    INTEGER NOT NULL,
        provider       TEXT NOT NULL,
        status         INTEGER NOT NULL,
        kind           TEXT NOT NULL,
        error          TEXT NOT NULL,
        cause          TEXT NOT NULL,
        headers        TEXT NOT NULL,
        body           BLOB NOT NULL,
        body_length    INTEGER NOT NULL,
        body_truncated INTEGER NOT NULL DEFAULT 0
    );
    "#,
    // 6: what a fleet of `serve` processes on one database shares out (on SQLite, one process
    // holds them all): leases (one reconcile round of a provider at a time, a dead holder's lease
    // expiring), and which process claimed an outbox row for delivery.
    r#"
    CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID;
    ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
    "#,
    // 7: every tally in shards, as a fleet's PostgreSQL keeps them (a row per key and shard,
    // summed when read). SQLite's one writer uses shard 0 alone: its triggers are unchanged.
    r#"
    ALTER TABLE counters ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
    CREATE UNIQUE INDEX counters_by_shard ON counters (name, shard);
    ALTER TABLE counter_hours ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
    CREATE UNIQUE INDEX counter_hours_by_shard ON counter_hours (hour, name, shard);
    ALTER TABLE job_state_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
    CREATE UNIQUE INDEX job_state_counts_by_shard ON job_state_counts (state, shard);
    ALTER TABLE daily_completions ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
    CREATE UNIQUE INDEX daily_completions_by_shard ON daily_completions (day, shard);
    "#,
    // 8: channels (contract section 5). Every notification target is a named channel; the
    // outbox holds one row per channel, subject and kind. The desktop channel takes over the
    // "notify on" setting; the rows so far were the desktop's. SQLite cannot drop a table's
    // UNIQUE constraint, so the outbox is rebuilt with the channel in its key.
    r#"
    CREATE TABLE channels (
        name          TEXT PRIMARY KEY,
        kind          TEXT NOT NULL,
        enabled       INTEGER NOT NULL DEFAULT 1,
        outcomes      TEXT NOT NULL DEFAULT ',succeeded,failed,canceled,stuck,needs_input,',
        summary_after INTEGER NOT NULL DEFAULT 5,
        quiet_from    INTEGER,
        quiet_to      INTEGER,
        quiet_urgent  INTEGER NOT NULL DEFAULT 1,
        config        TEXT NOT NULL DEFAULT '{}',
        token_sha256  TEXT UNIQUE,
        created_at    INTEGER NOT NULL,
        last_error    TEXT,
        last_error_at INTEGER,
        last_ok_at    INTEGER,
        last_seen_at  INTEGER
    ) WITHOUT ROWID;
    INSERT INTO channels (name, kind, outcomes, created_at)
    VALUES ('desktop', 'desktop',
            coalesce((SELECT ',' || replace(value, ' ', '') || ',' FROM settings WHERE key = 'notify_on'),
                     ',succeeded,failed,canceled,stuck,needs_input,'),
            CAST(strftime('%s', 'now') AS INTEGER) * 1000);
    DELETE FROM settings WHERE key = 'notify_on';

    -- What a row is about (one per channel and subject), then where its delivery stands.
    CREATE TABLE outbox_by_channel (
        id              INTEGER PRIMARY KEY,
        channel         TEXT NOT NULL,
        provider        TEXT NOT NULL,
        job_id          TEXT NOT NULL,
        kind            TEXT NOT NULL,
        state           TEXT,
        created_at      INTEGER NOT NULL,
        claimed_by      TEXT,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        delivered_at    INTEGER,
        last_error      TEXT,
        UNIQUE (channel, provider, job_id, kind)
    );
    INSERT INTO outbox_by_channel (id, channel, provider, job_id, kind, state, created_at, claimed_by,
                                   attempts, next_attempt_at, delivered_at, last_error)
        SELECT id, 'desktop', provider, job_id, kind, state, created_at, claimed_by, attempts,
               next_attempt_at, delivered_at, last_error FROM outbox;
    DROP TABLE outbox;
    ALTER TABLE outbox_by_channel RENAME TO outbox;
    CREATE INDEX outbox_pending ON outbox (next_attempt_at) WHERE delivered_at IS NULL;
    CREATE INDEX outbox_by_subject ON outbox (provider, job_id);
    CREATE INDEX outbox_pending_by_channel ON outbox (channel, id) WHERE delivered_at IS NULL;
    "#,
    // 9: a channel's backoff is the channel's: while it fails, its rows wait together for its
    // next attempt (`retry_at`), after `outage_attempts` failed attempts in a row.
    r#"
    ALTER TABLE channels ADD COLUMN outage_attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE channels ADD COLUMN retry_at INTEGER;
    "#,
];

/// Brings the schema up to date. Refuses a database written by a newer NeverMiss.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let current: usize = conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? as usize;
    if current > MIGRATIONS.len() {
        return Err(rusqlite::Error::InvalidParameterName(format!(
            "the database is at schema version {current}, newer than this NeverMiss ({}); upgrade NeverMiss",
            MIGRATIONS.len()
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (index + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database written with the first schema (with a job in it) is brought up to date in place
    /// by whatever migrations follow it, its data kept, and opening it again changes
    /// nothing; a database from a newer NeverMiss is refused.
    #[test]
    fn an_older_database_is_upgraded_in_place_and_a_newer_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute(
                "INSERT INTO jobs (provider, job_id, state, rank, created_at, updated_at) VALUES ('replicate', 'p1', 'running', 2, 1, 1)",
                [],
            )
            .unwrap();
        }
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn).unwrap();
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version as usize, MIGRATIONS.len());
        migrate(&mut conn).unwrap();
        let state: String = conn.query_row("SELECT state FROM jobs WHERE job_id = 'p1'", [], |r| r.get(0)).unwrap();
        assert_eq!(state, "running");

        conn.pragma_update(None, "user_version", MIGRATIONS.len() as i64 + 1).unwrap();
        let refused = migrate(&mut conn).unwrap_err().to_string();
        assert!(refused.contains("newer than this NeverMiss"), "{refused}");
    }
}

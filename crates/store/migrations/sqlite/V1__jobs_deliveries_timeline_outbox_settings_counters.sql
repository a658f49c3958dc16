-- jobs, deliveries, timeline, outbox, settings, counters.
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
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 1;

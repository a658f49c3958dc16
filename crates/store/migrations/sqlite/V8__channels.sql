-- channels (contract section 5). Every notification target is a named channel; the
-- outbox holds one row per channel, subject and kind. The desktop channel takes over the
-- "notify on" setting; the rows so far were the desktop's. SQLite cannot drop a table's
-- UNIQUE constraint, so the outbox is rebuilt with the channel in its key.
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
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 8;

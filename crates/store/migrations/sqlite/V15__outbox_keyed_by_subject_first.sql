-- The outbox's one unique key in the order its subject is looked up by: (provider, job id, kind,
-- channel) instead of (channel, provider, job id, kind), so that the same index answers "this
-- job's rows" and `outbox_by_subject`, a second index keyed by the providers' random job ids, goes.
-- A job's first terminal state wrote a leaf page of each of the two for nearly every finished job
-- (a group of deliveries dirtied about 19 of its ~107 WAL pages in them at 64 connections, issue
-- 34, BENCHMARKS.md session 19); now of one. `ON CONFLICT (channel, provider, job_id, kind)`
-- names the same columns, which is all SQLite asks of a conflict target. SQLite cannot reorder a
-- table's UNIQUE constraint, so the table is rebuilt (as V8 did), ids kept.
-- PostgreSQL keeps its outbox as it is (its push path enqueues in sets: V10).
CREATE TABLE outbox_keyed_by_subject (
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
    UNIQUE (provider, job_id, kind, channel)
);
INSERT INTO outbox_keyed_by_subject (id, channel, provider, job_id, kind, state, created_at, claimed_by,
                                     attempts, next_attempt_at, delivered_at, last_error)
SELECT id, channel, provider, job_id, kind, state, created_at, claimed_by,
       attempts, next_attempt_at, delivered_at, last_error FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_keyed_by_subject RENAME TO outbox;
CREATE INDEX outbox_pending ON outbox (next_attempt_at) WHERE delivered_at IS NULL;
CREATE INDEX outbox_pending_by_channel ON outbox (channel, id) WHERE delivered_at IS NULL;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 15;

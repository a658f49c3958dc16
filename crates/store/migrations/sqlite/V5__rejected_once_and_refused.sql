-- a rejected delivery is kept once per (provider, delivery id): a resend is a duplicate,
-- not a second row; and the last refused requests (bad signature, too old, unknown provider,
-- unverifiable), masked, with their likely cause, trimmed to a cap in the write that adds one.
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
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 5;

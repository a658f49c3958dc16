-- what a fleet of `serve` processes on one database shares out (on SQLite, one process
-- holds them all): leases (one reconcile round of a provider at a time, a dead holder's lease
-- expiring), and which process claimed an outbox row for delivery.
CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID;
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 6;

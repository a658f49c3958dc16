-- A channel's backoff is the channel's: while it fails, its rows wait together for its next
-- attempt (`retry_at`), after `outage_attempts` failed attempts in a row.
ALTER TABLE channels ADD COLUMN outage_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN retry_at INTEGER;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 9;

-- jobs polling gave up on ("abandoned": when and why), and since when a job's polls have
-- been failing (the start of its current run of failures; a job failing now counts from its
-- last poll).
ALTER TABLE jobs ADD COLUMN abandoned_at INTEGER;
ALTER TABLE jobs ADD COLUMN abandoned_reason TEXT;
ALTER TABLE jobs ADD COLUMN poll_failing_since INTEGER;
UPDATE jobs SET poll_failing_since = last_polled_at WHERE poll_failures > 0;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 3;

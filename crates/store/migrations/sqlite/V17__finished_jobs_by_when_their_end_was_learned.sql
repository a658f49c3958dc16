-- `terminal_at`: when NeverMiss learned a job's end, its `updated_at` once it is finished
-- (terminal states are sinks, and nothing sets `updated_at` after the end), NULL before. Retention
-- reads finished jobs by it, on both databases in one text: PostgreSQL's V12 made it so that a
-- running job's update is a HOT update there (its index of finished jobs no longer names
-- `updated_at`). Here it is computed when read (a virtual column), and the index is V4's, by it.
ALTER TABLE jobs ADD COLUMN terminal_at INTEGER GENERATED ALWAYS AS (CASE WHEN rank = 3 THEN updated_at END) VIRTUAL;
DROP INDEX jobs_finished;
CREATE INDEX jobs_finished ON jobs (timeline_trimmed, terminal_at) WHERE rank = 3;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 17;

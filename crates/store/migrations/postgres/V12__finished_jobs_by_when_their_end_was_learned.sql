-- Retention's index of finished jobs without the time of every update (issue 34). V1's
-- `jobs_finished (timeline_trimmed, updated_at) WHERE rank = 3` named `updated_at`, which every
-- adopted event sets; PostgreSQL counts an index's columns for every row whatever the index's
-- predicate, so no update of a job was a HOT update (a new row version in the same page, the
-- indexes left as they are): each one wrote an entry in all seven indexes of `jobs`, the running
-- ones' too. `terminal_at` is when NeverMiss learned the job's end: its `updated_at` once it is
-- finished (terminal states are sinks, and nothing sets `updated_at` after the end), NULL before.
-- The database computes it, so every writer (the guarded upsert, the push function, an older
-- build of the fleet) keeps it right, and an update that leaves a job's rank as it was (a running
-- job's next event, a finished job's notification) changes no indexed column: a HOT update when
-- its page has room, hence the fill factor (the table is rewritten once by this file, with it).
ALTER TABLE jobs SET (fillfactor = 80);
ALTER TABLE jobs ADD COLUMN terminal_at BIGINT GENERATED ALWAYS AS (CASE WHEN rank = 3 THEN updated_at END) STORED;
DROP INDEX jobs_finished;
CREATE INDEX jobs_finished ON jobs (timeline_trimmed, terminal_at) WHERE rank = 3;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (12, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

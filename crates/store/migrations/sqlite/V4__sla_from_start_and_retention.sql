-- the SLA measured from the provider's own start time, and retention of finished jobs.
-- `started_at`: when the provider says the job was created (ms), the earliest one known; NULL
-- when no event carried one. `timeline_trimmed`: the finished job's timeline was reduced to
-- its first and terminal events. A job first seen already finished with no start time is
-- counted in `without_start`, never within (or outside) the SLA.
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
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 4;

-- Expected durations (issue 23): each job's kind, as its provider names it (`replicate/prediction/
-- <model>`, `openai/response/<model>`, `anthropic/message_batch`, ...; NULL when nothing says),
-- and the durations of the last 100 succeeded jobs of each kind: a rolling window, trimmed by the
-- same trigger that adds to it, so it never grows past 100 rows a kind (`store::durations::WINDOW`),
-- and purged by retention with the jobs (`durations::purge_before`).
ALTER TABLE jobs ADD COLUMN job_kind TEXT;
CREATE TABLE job_durations (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL,
    finished_at INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL
);
CREATE INDEX job_durations_by_kind ON job_durations (kind, id);
CREATE INDEX job_durations_by_end ON job_durations (finished_at);
-- A job's duration is measured as the SLA's is (V4): a job seen unfinished from the provider's
-- start, else from when NeverMiss first heard of it; a job first seen already finished only from
-- the provider's start (without one, NeverMiss cannot know how long it took). Only successes of a
-- known kind count; a duration below zero (clocks that disagree) does not.
CREATE TRIGGER jobs_duration_on_update AFTER UPDATE OF rank ON jobs
WHEN NEW.rank = 3 AND OLD.rank < 3 AND NEW.state = 'succeeded' AND NEW.job_kind IS NOT NULL
     AND NEW.finished_at - COALESCE(NEW.started_at, NEW.created_at) >= 0 BEGIN
    INSERT INTO job_durations (kind, finished_at, duration_ms)
    VALUES (NEW.job_kind, NEW.updated_at, NEW.finished_at - COALESCE(NEW.started_at, NEW.created_at));
    DELETE FROM job_durations WHERE kind = NEW.job_kind
        AND id <= (SELECT id FROM job_durations WHERE kind = NEW.job_kind ORDER BY id DESC LIMIT 1 OFFSET 100);
END;
CREATE TRIGGER jobs_duration_on_insert AFTER INSERT ON jobs
WHEN NEW.rank = 3 AND NEW.state = 'succeeded' AND NEW.job_kind IS NOT NULL
     AND NEW.started_at IS NOT NULL AND NEW.finished_at - NEW.started_at >= 0 BEGIN
    INSERT INTO job_durations (kind, finished_at, duration_ms)
    VALUES (NEW.job_kind, NEW.updated_at, NEW.finished_at - NEW.started_at);
    DELETE FROM job_durations WHERE kind = NEW.job_kind
        AND id <= (SELECT id FROM job_durations WHERE kind = NEW.job_kind ORDER BY id DESC LIMIT 1 OFFSET 100);
END;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 12;

-- A success whose kind is learned after it ended (an OpenAI response first heard of by its thin
-- webhook, whose follow-up read names the model) adds its duration once its kind is said, as V12's
-- triggers do for a kind known at the end: measured from the provider's start only, as for a job
-- first seen finished (the stale event that says the kind tells that start too:
-- `jobs::kind_if_unknown`). A kind once known is kept, so this fires once per job.
CREATE TRIGGER jobs_duration_on_late_kind AFTER UPDATE OF job_kind ON jobs
WHEN OLD.job_kind IS NULL AND NEW.job_kind IS NOT NULL AND NEW.rank = 3 AND NEW.state = 'succeeded'
     AND NEW.started_at IS NOT NULL AND NEW.finished_at - NEW.started_at >= 0 BEGIN
    INSERT INTO job_durations (kind, finished_at, duration_ms)
    VALUES (NEW.job_kind, NEW.updated_at, NEW.finished_at - NEW.started_at);
    DELETE FROM job_durations WHERE kind = NEW.job_kind
        AND id <= (SELECT id FROM job_durations WHERE kind = NEW.job_kind ORDER BY id DESC LIMIT 1 OFFSET 100);
END;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 13;

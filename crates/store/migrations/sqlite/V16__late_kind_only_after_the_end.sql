-- A success whose kind is learned after it ended (V13) is a job that had ended before the update
-- that says its kind: a job that ends and says its kind in the same update is measured by V12's
-- `jobs_duration_on_update` alone. Until this file that update fired both triggers, and the job's
-- duration was added twice (PostgreSQL's V11 is the same change).
DROP TRIGGER jobs_duration_on_late_kind;
CREATE TRIGGER jobs_duration_on_late_kind AFTER UPDATE OF job_kind ON jobs
WHEN OLD.job_kind IS NULL AND NEW.job_kind IS NOT NULL AND OLD.rank = 3 AND NEW.state = 'succeeded'
     AND NEW.started_at IS NOT NULL AND NEW.finished_at - NEW.started_at >= 0 BEGIN
    INSERT INTO job_durations (kind, finished_at, duration_ms)
    VALUES (NEW.job_kind, NEW.updated_at, NEW.finished_at - NEW.started_at);
    DELETE FROM job_durations WHERE kind = NEW.job_kind
        AND id <= (SELECT id FROM job_durations WHERE kind = NEW.job_kind ORDER BY id DESC LIMIT 1 OFFSET 100);
END;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 16;

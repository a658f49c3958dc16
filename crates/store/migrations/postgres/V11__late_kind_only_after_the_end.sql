-- A success whose kind is learned after it ended (V8) is a job that had ended before the update
-- that says its kind: a job that ends and says its kind in the same update is measured by V7's
-- `jobs_duration_on_update` alone. Until this file that update fired both triggers, and the job's
-- duration was added twice. SQLite's V16 is the same change.
DROP TRIGGER jobs_duration_on_late_kind ON jobs;
CREATE TRIGGER jobs_duration_on_late_kind AFTER UPDATE OF job_kind ON jobs
    FOR EACH ROW WHEN (OLD.job_kind IS NULL AND NEW.job_kind IS NOT NULL AND OLD.rank = 3 AND NEW.state = 'succeeded'
                       AND NEW.started_at IS NOT NULL)
    EXECUTE FUNCTION nevermiss_record_duration();

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (11, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

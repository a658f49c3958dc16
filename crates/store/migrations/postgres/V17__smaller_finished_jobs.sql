-- What a finished job keeps, smaller. A job's timeline is found by its key alone, so that B-tree
-- deduplication keeps the key once for all of a job's events (two for a finished job once its
-- deliveries' days are over): the key with the event's id (V1's `job_events_by_job`) held it once
-- an event, 86 bytes each at a million jobs. A job's events are sorted by id after the lookup (a
-- few rows; `timeline::of_job`).
CREATE INDEX job_events_of_job ON job_events (provider, job_id);
DROP INDEX job_events_by_job;

-- The jobs' pages filled to 90% (V12: 80%): room on each for the updates of its running jobs
-- that change no indexed column (written in place, HOT), while a finished job, which stays where
-- it was written, takes 189 bytes of its page rather than 212. New pages only; nothing is moved.
ALTER TABLE jobs SET (fillfactor = 90);

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (17, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

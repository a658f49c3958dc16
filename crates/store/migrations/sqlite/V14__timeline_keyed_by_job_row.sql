-- Each timeline event names its job's row (`jobs.id`) as well as its provider and id, and a job's
-- timeline is found by that row id. A job's row id grows with its creation, so the jobs that are
-- running, the ones whose events arrive, are the newest and their events are added at the end of
-- the index: a group of deliveries writes a few of its pages, where the index on (provider, job id),
-- keyed by the providers' random ids, dirtied a page of its own for nearly every delivery (issue
-- 21: +13% deliveries a second at 64 connections, BENCHMARKS.md session 12). An event of a job
-- that does not exist (a refused push naming an unknown job) has none, and is found by its
-- provider and job id, as before.
-- PostgreSQL keeps its events keyed by provider and job id (store/src/timeline.rs says why).
ALTER TABLE job_events ADD COLUMN job_ref INTEGER;
UPDATE job_events SET job_ref = (SELECT j.id FROM jobs j WHERE j.provider = job_events.provider AND j.job_id = job_events.job_id);
DROP INDEX job_events_by_job;
CREATE INDEX job_events_by_job_ref ON job_events (job_ref, id) WHERE job_ref IS NOT NULL;
CREATE INDEX job_events_of_no_job ON job_events (provider, job_id, id) WHERE job_ref IS NULL;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 14;

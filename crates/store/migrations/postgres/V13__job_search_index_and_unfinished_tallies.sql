-- The job search from an index, as SQLite's V18: each job's folded id, label and group (the store's
-- fold, `fold::postgres_fold!`, on lines of one text) in `job_search`, whose trigrams a GIN index
-- of `pg_trgm` holds. Written off the delivery's path, in batches (`search_index`): a job inserted,
-- renamed, regrouped or deleted only leaves its row id in `job_search_pending` (by
-- `nevermiss_jobs_changed`), which the search reads as well until the batch has taken it.
-- `pg_trgm` ships with PostgreSQL (its contrib modules, trusted: a database owner may create it);
-- where it cannot be created the search stays correct and reads every job, and `serve`'s log says
-- so at each start (`migrations::migrate_postgres`).
CREATE TABLE job_search (id BIGINT PRIMARY KEY, folded TEXT NOT NULL);
INSERT INTO job_search (id, folded)
    SELECT id, translate(replace(lower(job_id COLLATE "und-x-icu"), 'ß', 'ss'), 'ς', 'σ') || E'\n' ||
               coalesce(translate(replace(lower(label COLLATE "und-x-icu"), 'ß', 'ss'), 'ς', 'σ'), '') || E'\n' ||
               coalesce(translate(replace(lower(group_name COLLATE "und-x-icu"), 'ß', 'ss'), 'ς', 'σ'), '')
    FROM jobs;
CREATE TABLE job_search_pending (job BIGINT PRIMARY KEY);
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'pg_trgm cannot be created here (%): the job search reads every job', SQLERRM;
END $$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        -- Written in batches into the index's pending list, which the batch then merges into the
        -- index at once (`gin_clean_pending_list`: sorted, several times cheaper than row by row),
        -- so that no search reads a long pending list.
        EXECUTE 'CREATE INDEX job_search_trigrams ON job_search USING gin (folded gin_trgm_ops)';
    END IF;
END $$;

-- The Metrics screen's figures about unfinished jobs, kept as counts (on the writer's shard, as
-- `job_state_counts`) rather than counted at each read: unfinished jobs polling has given up on
-- (`abandoned`), unfinished jobs the provider answered 404 for and not yet abandoned
-- (`not_found`). They move in `nevermiss_jobs_changed` (the push path's file). (Notifications not
-- yet delivered are counted from their partial index, `outbox_pending`: as many as wait, however
-- many jobs are kept; a count kept by a trigger on the outbox cost the push path 4%.)
CREATE TABLE unfinished_counts (name TEXT NOT NULL, shard BIGINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (name, shard));
INSERT INTO unfinished_counts (name, shard, count) VALUES
    ('abandoned', 0, (SELECT count(*) FROM jobs WHERE rank < 3 AND abandoned_at IS NOT NULL)),
    ('not_found', 0, (SELECT count(*) FROM jobs WHERE rank < 3 AND abandoned_at IS NULL AND poll_error_kind = 'not_found'));

-- Which of the jobs' counts a job is in, if any.
CREATE FUNCTION nevermiss_unfinished_count(p_rank BIGINT, p_abandoned_at BIGINT, p_poll_error_kind TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_rank < 3 AND p_abandoned_at IS NOT NULL THEN 'abandoned'
                WHEN p_rank < 3 AND p_poll_error_kind = 'not_found' THEN 'not_found' END
$$;

-- The groups of the newest grouped jobs (`groups::list`), read newest first without reading the
-- jobs of no group.
CREATE INDEX jobs_grouped ON jobs (id) WHERE group_name IS NOT NULL;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (13, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

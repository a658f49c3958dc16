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
        -- Written in batches: each row straight into the index (no pending list for every search
        -- to read).
        EXECUTE 'CREATE INDEX job_search_trigrams ON job_search USING gin (folded gin_trgm_ops) WITH (fastupdate = off)';
    END IF;
END $$;

-- The Metrics screen's figures about unfinished jobs and notifications, kept as counts (on the
-- writer's shard, as `job_state_counts`) rather than counted at each read: unfinished jobs polling
-- has given up on (`abandoned`), unfinished jobs the provider answered 404 for and not yet
-- abandoned (`not_found`), notifications not yet delivered (`pending_notifications`). The jobs'
-- counts move in `nevermiss_jobs_changed` (the push path's file), the notifications' below.
CREATE TABLE unfinished_counts (name TEXT NOT NULL, shard BIGINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (name, shard));
INSERT INTO unfinished_counts (name, shard, count) VALUES
    ('abandoned', 0, (SELECT count(*) FROM jobs WHERE rank < 3 AND abandoned_at IS NOT NULL)),
    ('not_found', 0, (SELECT count(*) FROM jobs WHERE rank < 3 AND abandoned_at IS NULL AND poll_error_kind = 'not_found')),
    ('pending_notifications', 0, (SELECT count(*) FROM outbox WHERE delivered_at IS NULL));

-- Which of the jobs' counts a job is in, if any.
CREATE FUNCTION nevermiss_unfinished_count(p_rank BIGINT, p_abandoned_at BIGINT, p_poll_error_kind TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_rank < 3 AND p_abandoned_at IS NOT NULL THEN 'abandoned'
                WHEN p_rank < 3 AND p_poll_error_kind = 'not_found' THEN 'not_found' END
$$;

-- A notification enqueued undelivered, delivered (or made undelivered again), or deleted undelivered (row by row: they are
-- one per channel and job end, not one per delivery).
CREATE FUNCTION nevermiss_count_pending_notifications() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO unfinished_counts AS u (name, shard, count)
    VALUES ('pending_notifications', nevermiss_shard(),
            CASE WHEN TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.delivered_at IS NULL) THEN 1 ELSE -1 END)
    ON CONFLICT (name, shard) DO UPDATE SET count = u.count + excluded.count;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_pending_enqueued AFTER INSERT ON outbox
    FOR EACH ROW WHEN (NEW.delivered_at IS NULL) EXECUTE FUNCTION nevermiss_count_pending_notifications();
CREATE TRIGGER outbox_pending_delivered AFTER UPDATE OF delivered_at ON outbox
    FOR EACH ROW WHEN ((OLD.delivered_at IS NULL) <> (NEW.delivered_at IS NULL)) EXECUTE FUNCTION nevermiss_count_pending_notifications();
CREATE TRIGGER outbox_pending_deleted AFTER DELETE ON outbox
    FOR EACH ROW WHEN (OLD.delivered_at IS NULL) EXECUTE FUNCTION nevermiss_count_pending_notifications();

-- The groups of the newest grouped jobs (`groups::list`), read newest first without reading the
-- jobs of no group.
CREATE INDEX jobs_grouped ON jobs (id) WHERE group_name IS NOT NULL;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (13, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

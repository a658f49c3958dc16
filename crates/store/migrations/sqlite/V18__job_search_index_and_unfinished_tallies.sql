-- The job search from an index: every trigram of each job's folded id, label and group
-- (`nevermiss_fold`, the store's fold), in a contentless FTS5 table keyed by the job's row id. Only
-- which rows hold a trigram is kept (`detail = none`): a search asks for the rows holding every
-- trigram of its folded term, newest first, and checks each against the term itself
-- (`jobs::list`). The index is written off the delivery's path, in batches (`search_index`): a job
-- inserted, renamed, regrouped or deleted only leaves its row id in `job_search_pending`, which the
-- search reads as well until the batch has taken it.
CREATE VIRTUAL TABLE job_search USING fts5(
    folded_id, folded_label, folded_group,
    tokenize = 'trigram case_sensitive 1', detail = none, content = '', contentless_delete = 1);
INSERT INTO job_search (rowid, folded_id, folded_label, folded_group)
    SELECT id, nevermiss_fold(job_id), nevermiss_fold(label), nevermiss_fold(group_name) FROM jobs;
-- (A trigger's own `OR IGNORE` gives way to the conflict rule of the statement that fires it, an
-- upsert's among them: each trigger looks before it inserts.)
CREATE TABLE job_search_pending (job INTEGER PRIMARY KEY);
CREATE TRIGGER jobs_search_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO job_search_pending (job) SELECT NEW.id WHERE NOT EXISTS (SELECT 1 FROM job_search_pending WHERE job = NEW.id);
END;
CREATE TRIGGER jobs_search_update AFTER UPDATE OF label, group_name ON jobs
WHEN OLD.label IS NOT NEW.label OR OLD.group_name IS NOT NEW.group_name BEGIN
    INSERT INTO job_search_pending (job) SELECT NEW.id WHERE NOT EXISTS (SELECT 1 FROM job_search_pending WHERE job = NEW.id);
END;
CREATE TRIGGER jobs_search_delete AFTER DELETE ON jobs BEGIN
    INSERT INTO job_search_pending (job) SELECT OLD.id WHERE NOT EXISTS (SELECT 1 FROM job_search_pending WHERE job = OLD.id);
END;

-- The Metrics screen's figures about unfinished jobs, kept as counts rather than counted at each
-- read: unfinished jobs polling has given up on (`abandoned`), unfinished jobs the provider
-- answered 404 for and not yet abandoned (`not_found`); a job is in at most one. (Notifications
-- not yet delivered are counted from their partial index, `outbox_pending`: as many as wait,
-- however many jobs are kept, as on PostgreSQL.)
CREATE TABLE unfinished_counts (name TEXT PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO unfinished_counts (name, count) VALUES
    ('abandoned', (SELECT count(*) FROM jobs WHERE rank < 3 AND abandoned_at IS NOT NULL)),
    ('not_found', (SELECT count(*) FROM jobs WHERE rank < 3 AND abandoned_at IS NULL AND poll_error_kind = 'not_found'));
CREATE TRIGGER jobs_unfinished_count_insert AFTER INSERT ON jobs
WHEN NEW.rank < 3 AND (NEW.abandoned_at IS NOT NULL OR NEW.poll_error_kind = 'not_found') BEGIN
    UPDATE unfinished_counts SET count = count + 1
    WHERE name = CASE WHEN NEW.abandoned_at IS NOT NULL THEN 'abandoned' ELSE 'not_found' END;
END;
CREATE TRIGGER jobs_unfinished_count_update AFTER UPDATE OF rank, abandoned_at, poll_error_kind ON jobs
WHEN (CASE WHEN OLD.rank < 3 AND OLD.abandoned_at IS NOT NULL THEN 'abandoned'
           WHEN OLD.rank < 3 AND OLD.poll_error_kind = 'not_found' THEN 'not_found' END)
  IS NOT (CASE WHEN NEW.rank < 3 AND NEW.abandoned_at IS NOT NULL THEN 'abandoned'
               WHEN NEW.rank < 3 AND NEW.poll_error_kind = 'not_found' THEN 'not_found' END) BEGIN
    UPDATE unfinished_counts SET count = count - 1
    WHERE name = CASE WHEN OLD.rank < 3 AND OLD.abandoned_at IS NOT NULL THEN 'abandoned'
                      WHEN OLD.rank < 3 AND OLD.poll_error_kind = 'not_found' THEN 'not_found' END;
    UPDATE unfinished_counts SET count = count + 1
    WHERE name = CASE WHEN NEW.rank < 3 AND NEW.abandoned_at IS NOT NULL THEN 'abandoned'
                      WHEN NEW.rank < 3 AND NEW.poll_error_kind = 'not_found' THEN 'not_found' END;
END;
CREATE TRIGGER jobs_unfinished_count_delete AFTER DELETE ON jobs
WHEN OLD.rank < 3 AND (OLD.abandoned_at IS NOT NULL OR OLD.poll_error_kind = 'not_found') BEGIN
    UPDATE unfinished_counts SET count = count - 1
    WHERE name = CASE WHEN OLD.abandoned_at IS NOT NULL THEN 'abandoned' ELSE 'not_found' END;
END;
-- The groups of the newest grouped jobs (`groups::list`), read newest first without reading the
-- jobs of no group.
CREATE INDEX jobs_grouped ON jobs (id) WHERE group_name IS NOT NULL;

-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 18;

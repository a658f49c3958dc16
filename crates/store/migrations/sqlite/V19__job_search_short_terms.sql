-- The job search's index of short terms (one or two characters, which have no trigram): each
-- job's distinct one- and two-character sequences of its folded id, label and group, as words
-- (`search_index::short_grams`, the hex of each sequence: `nevermiss_short_grams`), in a
-- contentless FTS5 table keyed by the job's row id; a term of one or two characters is its own
-- word, so the rows holding it are read newest first from its entry alone (before, the jobs were
-- read newest first until a page was full: every job for a term few hold). Written with
-- `job_search`, by the same batches (`job_search_pending`).
CREATE VIRTUAL TABLE job_search_short USING fts5(
    grams, tokenize = 'ascii', detail = none, content = '', contentless_delete = 1);
INSERT INTO job_search_short (rowid, grams) SELECT id, nevermiss_short_grams(job_id, label, group_name) FROM jobs;

PRAGMA user_version = 19;

-- the kind of a job's last poll failure, typed (the words stay in poll_error).
ALTER TABLE jobs ADD COLUMN poll_error_kind TEXT;
UPDATE jobs SET poll_error_kind = 'not_found' WHERE poll_error = 'the provider does not know this job (404)';
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 2;

-- What a finished job produced, bounded (an excerpt and links, never whole outputs), as JSON text
-- `{"text", "urls", "image"}`, and the job's page on the provider's own site (contract section 6).
-- Both leave with the job's row when retention archives it.
ALTER TABLE jobs ADD COLUMN result TEXT;
ALTER TABLE jobs ADD COLUMN provider_url TEXT;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 10;

-- Jobs as the user thinks of them: a job may belong to a group (a sweep, a batch per shard),
-- whose end is announced once (`store::groups`). `job_groups` keeps, per group, how many members
-- it had when its end was last announced: a group that gains a job afterwards announces again
-- when that one ends.
ALTER TABLE jobs ADD COLUMN group_name TEXT;
CREATE INDEX jobs_by_group ON jobs (group_name, id) WHERE group_name IS NOT NULL;
CREATE TABLE job_groups (
    name            TEXT PRIMARY KEY,
    announced_total INTEGER NOT NULL DEFAULT 0,
    announced_at    INTEGER
) WITHOUT ROWID;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 11;

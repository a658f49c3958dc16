-- every tally in shards, as a fleet's PostgreSQL keeps them (a row per key and shard,
-- summed when read). SQLite's one writer uses shard 0 alone: its triggers are unchanged.
ALTER TABLE counters ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX counters_by_shard ON counters (name, shard);
ALTER TABLE counter_hours ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX counter_hours_by_shard ON counter_hours (hour, name, shard);
ALTER TABLE job_state_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX job_state_counts_by_shard ON job_state_counts (state, shard);
ALTER TABLE daily_completions ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX daily_completions_by_shard ON daily_completions (day, shard);
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 7;

-- The jobs' tallies (jobs per state, completions per day, the durations of a kind) written by the
-- code that moves a job (`store::job_tallies`, called by the merge point, `jobs::track` and
-- `jobs::kind_if_unknown`) instead of by triggers on every row (issue 34). A trigger made the
-- guarded upsert a statement SQLite may have to undo half-way: it kept a statement journal for
-- it, a copy of every page the upsert touched, on every delivery, and ran the trigger programs,
-- two statements for each change of state. The writer now sums a group's changes of state and
-- its completions and writes them once before the group's COMMIT, as it does the counters.
-- A delete still takes its job off its state's count by trigger (`jobs_count_delete`: a delete
-- is never on the push path). PostgreSQL keeps its statement triggers (its V10), which already
-- run once per statement over the group's rows.
DROP TRIGGER jobs_count_insert;
DROP TRIGGER jobs_count_update;
DROP TRIGGER jobs_completion_on_update;
DROP TRIGGER jobs_completion_on_insert;
DROP TRIGGER jobs_duration_on_update;
DROP TRIGGER jobs_duration_on_insert;
DROP TRIGGER jobs_duration_on_late_kind;
-- The version older NeverMiss builds read (they refuse a file newer than they know), set in
-- this migration's own transaction.
PRAGMA user_version = 16;

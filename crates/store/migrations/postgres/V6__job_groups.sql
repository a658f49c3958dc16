-- Jobs as the user thinks of them: groups, as SQLite's V11. The row of `job_groups` is also the
-- lock that serializes the ends of one group's members across the fleet (`store::groups`).
ALTER TABLE jobs ADD COLUMN group_name TEXT;
CREATE INDEX jobs_by_group ON jobs (group_name, id) WHERE group_name IS NOT NULL;
CREATE TABLE job_groups (
    name            TEXT PRIMARY KEY,
    announced_total BIGINT NOT NULL DEFAULT 0,
    announced_at    BIGINT
);

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (6, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

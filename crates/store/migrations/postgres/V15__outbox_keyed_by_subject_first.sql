-- The outbox's one unique key in the order its subject is looked up by, as SQLite's V15: (provider,
-- job id, kind, channel) instead of (channel, provider, job id, kind), so that the same index
-- answers "this job's rows" and `outbox_by_subject` goes: 42 bytes a notification at a million
-- jobs (`tools/scale-bench`). `ON CONFLICT (channel, provider, job_id, kind)` names the same
-- columns, which is all PostgreSQL asks of a conflict target.
ALTER TABLE outbox ADD CONSTRAINT outbox_subject_kind_channel UNIQUE (provider, job_id, kind, channel);
ALTER TABLE outbox DROP CONSTRAINT outbox_channel_subject_kind;
DROP INDEX outbox_by_subject;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (15, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

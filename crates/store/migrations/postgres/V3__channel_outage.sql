-- A channel's backoff is the channel's, as SQLite's V9.
ALTER TABLE channels ADD COLUMN outage_attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE channels ADD COLUMN retry_at BIGINT;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (3, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

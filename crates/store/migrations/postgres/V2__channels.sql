-- channels (contract section 5), as SQLite's migration 8: one outbox row per channel,
-- subject and kind; the desktop channel takes over the "notify on" setting.
CREATE TABLE channels (
    name          TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    enabled       BIGINT NOT NULL DEFAULT 1,
    outcomes      TEXT NOT NULL DEFAULT ',succeeded,failed,canceled,stuck,needs_input,',
    summary_after BIGINT NOT NULL DEFAULT 5,
    quiet_from    BIGINT,
    quiet_to      BIGINT,
    quiet_urgent  BIGINT NOT NULL DEFAULT 1,
    config        TEXT NOT NULL DEFAULT '{}',
    token_sha256  TEXT UNIQUE,
    created_at    BIGINT NOT NULL,
    last_error    TEXT,
    last_error_at BIGINT,
    last_ok_at    BIGINT,
    last_seen_at  BIGINT
);
INSERT INTO channels (name, kind, outcomes, created_at)
VALUES ('desktop', 'desktop',
        coalesce((SELECT ',' || replace(value, ' ', '') || ',' FROM settings WHERE key = 'notify_on'),
                 ',succeeded,failed,canceled,stuck,needs_input,'),
        (extract(epoch FROM now()) * 1000)::BIGINT);
DELETE FROM settings WHERE key = 'notify_on';
ALTER TABLE outbox ADD COLUMN channel TEXT NOT NULL DEFAULT 'desktop';
ALTER TABLE outbox ALTER COLUMN channel DROP DEFAULT;
ALTER TABLE outbox DROP CONSTRAINT outbox_provider_job_id_kind_key;
ALTER TABLE outbox ADD CONSTRAINT outbox_channel_subject_kind UNIQUE (channel, provider, job_id, kind);
CREATE INDEX outbox_by_subject ON outbox (provider, job_id);
CREATE INDEX outbox_pending_by_channel ON outbox (channel, id) WHERE delivered_at IS NULL;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (2, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

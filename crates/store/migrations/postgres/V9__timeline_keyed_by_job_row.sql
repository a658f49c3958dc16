-- SQLite's V14: each timeline event names its job's row (`jobs.id`), and a job's timeline is found
-- by it. Row ids grow with the jobs' creation, so the events of the running jobs, the newest, are
-- added at the end of the index instead of at the place of the provider's random job id (a page
-- of its own for nearly every delivery). An event of a job that does not exist has none, and is
-- found by its provider and job id, as before.
ALTER TABLE job_events ADD COLUMN job_ref BIGINT;
UPDATE job_events e SET job_ref = j.id FROM jobs j WHERE j.provider = e.provider AND j.job_id = e.job_id;
DROP INDEX job_events_by_job;
CREATE INDEX job_events_by_job_ref ON job_events (job_ref, id) WHERE job_ref IS NOT NULL;
CREATE INDEX job_events_of_no_job ON job_events (provider, job_id, id) WHERE job_ref IS NULL;

-- The push function again (V8), its signature and row the same, so replaced in place: its
-- timeline row names the job's row. What it does is otherwise V8's.
CREATE OR REPLACE FUNCTION nevermiss_push(
    -- The job's columns, numbered as the guarded upsert's parameters (store/guard.rs) 1 to 13.
    -- A new job column goes here, in the upsert's INSERT columns and VALUES, and in its SET
    -- (the guard test checks the SET and the rule against guard.rs), and in `push::CALL`.
    p_provider TEXT, p_job_id TEXT, p_label TEXT, p_state TEXT, p_rank BIGINT, p_seq BIGINT, p_error TEXT,
    p_detail TEXT, p_now BIGINT, p_finished_at BIGINT, p_source TEXT, p_terminal_rank BIGINT, p_started_at BIGINT,
    -- The delivery: its id, the request as kept, and the detail its timeline row shows.
    p_delivery_id TEXT, p_headers TEXT, p_body BYTEA, p_body_truncated BIGINT, p_event_detail TEXT,
    -- The group the sender names (`groups::join`), or NULL.
    p_group TEXT,
    -- What the job produced (its bounded JSON, `JobResult::to_column`) and its page on the
    -- provider's site: the guarded upsert's parameters 14 and 15.
    p_result TEXT, p_provider_url TEXT,
    -- The job's kind (`job_kind`): the guarded upsert's parameter 16.
    p_kind TEXT)
RETURNS TABLE (push_outcome TEXT, push_first_terminal BOOLEAN, push_channels TEXT[], push_job jobs, push_changes TEXT,
               push_described BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
    v_shard          BIGINT := pg_backend_pid() % 16;
    v_adopted        jobs;
    v_outcome        TEXT;
    v_first_terminal BOOLEAN := false;
    v_channels       TEXT[] := '{}';
    v_names          TEXT[];
    v_values         BIGINT[];
    v_group          TEXT;
    v_members        TEXT;
    v_announced      BIGINT;
    v_total          BIGINT;
    v_running        BIGINT;
    v_group_channels TEXT[] := '{}';
    v_announced_alone BOOLEAN;
    v_described      BOOLEAN := false;
BEGIN
    -- Dedupe (deliveries::insert_accepted).
    INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
    VALUES (p_provider, p_delivery_id, p_job_id, p_now, 'accepted', p_headers, p_body, p_body_truncated)
    ON CONFLICT (provider, delivery_id) WHERE status = 'accepted' DO NOTHING;
    IF NOT FOUND THEN
        v_outcome := 'duplicate';
    ELSE
        -- The guarded upsert (guard.rs's POSTGRES_UPSERT).
        INSERT INTO jobs (provider, job_id, label, state, rank, seq, error, detail, created_at, updated_at,
                          finished_at, terminal_source, started_at, result, provider_url, job_kind)
        VALUES (p_provider, p_job_id, p_label, p_state, p_rank, p_seq, p_error, p_detail, p_now, p_now,
                CASE WHEN p_rank = p_terminal_rank THEN COALESCE(p_finished_at, p_now) END,
                CASE WHEN p_rank = p_terminal_rank THEN p_source END, p_started_at, p_result, p_provider_url, p_kind)
        ON CONFLICT (provider, job_id) DO UPDATE SET
            started_at = LEAST(jobs.started_at, excluded.started_at),
            state = excluded.state,
            rank = excluded.rank,
            seq = excluded.seq,
            error = excluded.error,
            detail = COALESCE(excluded.detail, jobs.detail),
            updated_at = excluded.updated_at,
            finished_at = excluded.finished_at,
            terminal_source = excluded.terminal_source,
            label = COALESCE(jobs.label, excluded.label),
            result = COALESCE(excluded.result, jobs.result),
            provider_url = COALESCE(excluded.provider_url, jobs.provider_url),
            job_kind = COALESCE(jobs.job_kind, excluded.job_kind)
        WHERE excluded.rank > jobs.rank
             OR (excluded.rank = jobs.rank AND jobs.rank < p_terminal_rank AND (jobs.seq IS NULL OR excluded.seq > jobs.seq))
        RETURNING * INTO v_adopted;
        IF FOUND THEN
            v_outcome := 'applied';
            v_first_terminal := v_adopted.rank = p_terminal_rank;
        ELSE
            -- A stale event still names an unnamed job, says the kind of a job of no known kind
            -- (with its start when none is known, finished or not: V8) and tells an earlier start
            -- (jobs::name_if_unnamed, jobs::kind_if_unknown, jobs::note_started_at).
            v_outcome := 'stale';
            IF p_label IS NOT NULL THEN
                UPDATE jobs SET label = p_label WHERE provider = p_provider AND job_id = p_job_id AND label IS NULL;
            END IF;
            IF p_kind IS NOT NULL THEN
                UPDATE jobs SET job_kind = p_kind, started_at = COALESCE(started_at, p_started_at)
                WHERE provider = p_provider AND job_id = p_job_id AND job_kind IS NULL;
            END IF;
            IF p_started_at IS NOT NULL THEN
                UPDATE jobs SET started_at = p_started_at
                WHERE provider = p_provider AND job_id = p_job_id AND rank < p_terminal_rank
                  AND (started_at IS NULL OR started_at > p_started_at);
            END IF;
            -- A late answer fills in what is missing of the job's result and page
            -- (jobs::describe_if_undescribed): the job changed without moving.
            IF p_result IS NOT NULL OR p_provider_url IS NOT NULL THEN
                UPDATE jobs SET result = COALESCE(result, p_result), provider_url = COALESCE(provider_url, p_provider_url)
                WHERE provider = p_provider AND job_id = p_job_id
                  AND ((result IS NULL AND p_result IS NOT NULL) OR (provider_url IS NULL AND p_provider_url IS NOT NULL))
                RETURNING * INTO v_adopted;
                v_described := FOUND;
            END IF;
        END IF;
        -- The group the sender names, for a job in none yet (groups::join).
        IF p_group IS NOT NULL THEN
            UPDATE jobs SET group_name = p_group WHERE provider = p_provider AND job_id = p_job_id AND group_name IS NULL;
            IF FOUND AND v_outcome = 'applied' THEN
                v_adopted.group_name := p_group;
            END IF;
        END IF;
        v_group := v_adopted.group_name;
        -- A grouped job's own notification follows `group_members` (groups::MemberNotifications):
        -- `failures` (the default) announces a failure or a request for input, `every` all, `group`
        -- none.
        v_announced_alone := v_first_terminal;
        IF v_first_terminal AND v_group IS NOT NULL THEN
            v_members := coalesce((SELECT value FROM settings WHERE key = 'group_members'), 'failures');
            v_announced_alone := v_members = 'every' OR (v_members = 'failures' AND p_state IN ('failed', 'needs_input'));
        END IF;
        -- The first terminal state: one outbox row per channel that announces it (outbox::enqueue).
        IF v_announced_alone THEN
            WITH added AS (
                INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, next_attempt_at)
                SELECT c.name, p_provider, p_job_id, 'terminal', p_state, p_now, p_now FROM channels c
                WHERE c.enabled = 1 AND c.outcomes LIKE '%,' || p_state || ',%'
                ON CONFLICT (channel, provider, job_id, kind) DO NOTHING
                RETURNING channel)
            SELECT coalesce(array_agg(channel ORDER BY channel), '{}') INTO v_channels FROM added;
        END IF;
        -- A group's end (groups::member_ended): its row taken (locked until this call's commit)
        -- before its members are counted, so that two processes ending its last two jobs at once
        -- are serialized and one of them announces it; once per member count.
        IF v_first_terminal AND v_group IS NOT NULL THEN
            INSERT INTO job_groups (name) VALUES (v_group)
            ON CONFLICT (name) DO UPDATE SET name = excluded.name
            RETURNING announced_total INTO v_announced;
            SELECT count(*), count(CASE WHEN rank < p_terminal_rank THEN 1 END) INTO v_total, v_running
            FROM jobs WHERE group_name = v_group;
            IF v_running = 0 AND v_total > v_announced THEN
                UPDATE job_groups SET announced_total = v_total, announced_at = p_now WHERE name = v_group;
                WITH added AS (
                    INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, next_attempt_at)
                    SELECT c.name, 'group', v_group || '@' || v_total, 'group_end', NULL, p_now, p_now FROM channels c
                    WHERE c.enabled = 1
                    ON CONFLICT (channel, provider, job_id, kind) DO NOTHING
                    RETURNING channel)
                SELECT coalesce(array_agg(channel ORDER BY channel), '{}') INTO v_group_channels FROM added;
            END IF;
        END IF;
    END IF;

    -- The timeline (timeline::record): a duplicate without detail; the job's row named (V9).
    INSERT INTO job_events (job_ref, provider, job_id, at, source, delivery_id, state, seq, outcome, detail)
    VALUES ((SELECT id FROM jobs WHERE provider = p_provider AND job_id = p_job_id),
            p_provider, p_job_id, p_now, p_source, p_delivery_id, p_state, p_seq, v_outcome,
            CASE WHEN v_outcome = 'duplicate' THEN NULL ELSE p_event_detail END);

    -- The tallies (counters::add_all), in the order of their names as the store's writes take
    -- their rows (bytewise), so that two writes on one shard never wait for each other in turn.
    v_names := ARRAY['deliveries_total', CASE WHEN v_outcome = 'duplicate' THEN 'duplicates' ELSE v_outcome END];
    v_values := ARRAY[1, 1]::BIGINT[];
    v_channels := v_channels || v_group_channels;
    IF cardinality(v_channels) > 0 THEN
        v_names := v_names || 'notifications_enqueued'::TEXT || ARRAY(SELECT 'channel.' || c || '.enqueued' FROM unnest(v_channels) c);
        v_values := v_values || cardinality(v_channels)::BIGINT || array_fill(1::BIGINT, ARRAY[cardinality(v_channels)]);
    END IF;
    -- Summed per name: a channel that got a job's row and its group's end counts two at once.
    INSERT INTO counters AS c (name, shard, value)
    SELECT t.name, v_shard, sum(t.value) FROM unnest(v_names, v_values) AS t(name, value) GROUP BY t.name ORDER BY t.name COLLATE "C"
    ON CONFLICT (name, shard) DO UPDATE SET value = c.value + excluded.value;
    INSERT INTO counter_hours AS h (hour, name, shard, value)
    SELECT p_now / 3600000, t.name, v_shard, sum(t.value) FROM unnest(v_names, v_values) AS t(name, value) GROUP BY t.name ORDER BY t.name COLLATE "C"
    ON CONFLICT (hour, name, shard) DO UPDATE SET value = h.value + excluded.value;

    push_outcome := v_outcome;
    push_first_terminal := v_first_terminal;
    push_channels := v_channels;
    push_job := v_adopted;
    push_changes := current_setting('nevermiss.changes', true);
    push_described := v_described;
    RETURN NEXT;
END $$;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (9, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

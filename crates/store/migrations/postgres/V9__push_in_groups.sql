-- The push path in groups (issue 34): the deliveries a `serve` process has waiting are applied in
-- one call and one transaction, `nevermiss_push_group` over arrays (one element per delivery),
-- so that a group costs one round trip and one commit (one WAL flush) however many it holds, as
-- SQLite's writer commits its groups. Each delivery does what V8's `nevermiss_push` did (the
-- dedupe, the guarded upsert, the stale path's naming, the outbox rows of a first terminal state,
-- a group's end, the timeline row) and is answered with its own row (`push_index`: its place in
-- the arrays, from 1). What changes:
-- - The deliveries are taken in one order, (provider, job id) bytewise and then their place in the
--   arrays (so one job's deliveries in the order they came): every group locks the rows of `jobs`
--   (and their dedupe keys, a delivery id naming one job) in the same order, and two groups of
--   two processes never wait on each other in a cycle.
-- - The tallies: the `counters` and `counter_hours` rows are summed per group and written once at
--   its end (they were written per delivery), in the order of their names. And the group claims a
--   shard of the tallies of its own for its transaction (`nevermiss_claim_shard`: 64 shards, 16
--   to 79, none of which any other writer uses, each held by a transaction-level advisory lock),
--   which the triggers' tallies (jobs per state, completions per day) use too while it is held:
--   two groups never write the same tally row, so they never wait on one another's, whatever
--   states their jobs move between (with the connection's shard, two groups moving jobs between
--   the same states in the opposite order would deadlock). Other writes keep the connection's
--   shard (0 to 15).
-- - The change feed's payloads of the whole group are answered once, on a row of their own
--   (`push_index` 0), read after the last delivery.
-- The single-delivery function is dropped: one delivery alone is a group of one (the store runs a
-- failed group again one delivery at a time, so that a delivery that fails undoes only itself).

-- The states a grouped job's own end is announced for under `group_members = failures` (the
-- default): a failure, and a request for input. One place for the list (a new terminal state that
-- is announced like a failure joins it here).
CREATE FUNCTION nevermiss_announced_like_a_failure(p_state TEXT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE AS $$ SELECT p_state IN ('failed', 'needs_input') $$;

-- The tallies' shard of this transaction: the one it claimed (`nevermiss_claim_shard`), else the
-- connection's, as before.
CREATE FUNCTION nevermiss_shard() RETURNS BIGINT
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('nevermiss.shard', true), '')::BIGINT, pg_backend_pid() % 16)
$$;

-- Claims a shard of the tallies for this transaction alone, from a random one on: the first of
-- the 64 whose advisory lock is free (held until the commit), else waits for one (a 65th group at
-- once across the fleet; it holds no row yet, so its wait is in no cycle).
CREATE FUNCTION nevermiss_claim_shard() RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    v_from  INT := floor(random() * 64)::INT;
    v_shard INT;
BEGIN
    FOR k IN 0..63 LOOP
        v_shard := 16 + (v_from + k) % 64;
        -- 0x6e6d ("nm"): the tallies' locks, (key, shard).
        IF pg_try_advisory_xact_lock(28269, v_shard) THEN
            PERFORM set_config('nevermiss.shard', v_shard::TEXT, true);
            RETURN v_shard;
        END IF;
    END LOOP;
    v_shard := 16 + v_from;
    PERFORM pg_advisory_xact_lock(28269, v_shard);
    PERFORM set_config('nevermiss.shard', v_shard::TEXT, true);
    RETURN v_shard;
END $$;

-- V1's tally triggers, on the transaction's shard.
CREATE OR REPLACE FUNCTION nevermiss_count_states() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine BIGINT := nevermiss_shard();
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO job_state_counts AS c (state, shard, count) VALUES (OLD.state, mine, -1)
            ON CONFLICT (state, shard) DO UPDATE SET count = c.count - 1;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO job_state_counts AS c (state, shard, count) VALUES (NEW.state, mine, 1)
            ON CONFLICT (state, shard) DO UPDATE SET count = c.count + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION nevermiss_count_completion() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sla_ms  BIGINT := 1000 * COALESCE((SELECT CAST(value AS BIGINT) FROM settings WHERE key = 'sla_secs'), 300);
    on_day  TEXT := to_char(to_timestamp(NEW.updated_at / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD');
    mine    BIGINT := nevermiss_shard();
    within  BIGINT;
    unknown BIGINT := 0;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        within := CASE WHEN NEW.finished_at - COALESCE(NEW.started_at, NEW.created_at) <= sla_ms THEN 1 ELSE 0 END;
    ELSE
        within := CASE WHEN NEW.started_at IS NOT NULL AND NEW.finished_at - NEW.started_at <= sla_ms THEN 1 ELSE 0 END;
        unknown := CASE WHEN NEW.started_at IS NULL THEN 1 ELSE 0 END;
    END IF;
    INSERT INTO daily_completions AS d (day, shard, finished, within_sla, by_pull, without_start)
    VALUES (on_day, mine, 1, within, CASE WHEN NEW.terminal_source = 'pull' THEN 1 ELSE 0 END, unknown)
    ON CONFLICT (day, shard) DO UPDATE SET finished = d.finished + 1, within_sla = d.within_sla + excluded.within_sla,
        by_pull = d.by_pull + excluded.by_pull, without_start = d.without_start + excluded.without_start;
    RETURN NULL;
END $$;

DROP FUNCTION nevermiss_push(TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, TEXT, TEXT, BIGINT, BIGINT, TEXT, BIGINT, BIGINT,
                             TEXT, TEXT, BYTEA, BIGINT, TEXT, TEXT, TEXT, TEXT, TEXT);

CREATE FUNCTION nevermiss_push_group(
    -- Per delivery, one element each: the job's columns, numbered as the guarded upsert's
    -- parameters (store/guard.rs) 1 to 13 (the source and the terminal rank, the same for every
    -- delivery, are single values). A new job column goes here, in the upsert's INSERT columns
    -- and VALUES, and in its SET (the guard test checks the SET and the rule against guard.rs),
    -- and in `push::CALL`.
    p_provider TEXT[], p_job_id TEXT[], p_label TEXT[], p_state TEXT[], p_rank BIGINT[], p_seq BIGINT[], p_error TEXT[],
    p_detail TEXT[], p_now BIGINT[], p_finished_at BIGINT[], p_source TEXT, p_terminal_rank BIGINT, p_started_at BIGINT[],
    -- The delivery: its id, the request as kept, and the detail its timeline row shows.
    p_delivery_id TEXT[], p_headers TEXT[], p_body BYTEA[], p_body_truncated BIGINT[], p_event_detail TEXT[],
    -- The group the sender names (`groups::join`), or NULL.
    p_group TEXT[],
    -- What the job produced and its page (the guarded upsert's 14 and 15), its kind (16).
    p_result TEXT[], p_provider_url TEXT[], p_kind TEXT[])
RETURNS TABLE (push_index BIGINT, push_outcome TEXT, push_first_terminal BOOLEAN, push_channels TEXT[], push_job jobs,
               push_changes TEXT, push_described BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
    v_shard          BIGINT := nevermiss_claim_shard();
    i                BIGINT;
    d_provider       TEXT;
    d_job_id         TEXT;
    d_label          TEXT;
    d_state          TEXT;
    d_rank           BIGINT;
    d_seq            BIGINT;
    d_now            BIGINT;
    d_started_at     BIGINT;
    d_group          TEXT;
    d_result         TEXT;
    d_provider_url   TEXT;
    d_kind           TEXT;
    v_adopted        jobs;
    v_outcome        TEXT;
    v_first_terminal BOOLEAN;
    v_channels       TEXT[];
    v_group          TEXT;
    v_members        TEXT;
    v_announced      BIGINT;
    v_total          BIGINT;
    v_running        BIGINT;
    v_group_channels TEXT[];
    v_announced_alone BOOLEAN;
    v_described      BOOLEAN;
    -- The group's tallies, one element per addition: summed per name (and hour) at the end.
    t_hours          BIGINT[] := '{}';
    t_names          TEXT[] := '{}';
    t_values         BIGINT[] := '{}';
BEGIN
    FOR i IN
        SELECT t.ord FROM unnest(p_provider, p_job_id) WITH ORDINALITY AS t(provider, job_id, ord)
        ORDER BY t.provider COLLATE "C", t.job_id COLLATE "C", t.ord
    LOOP
        d_provider := p_provider[i];
        d_job_id := p_job_id[i];
        d_label := p_label[i];
        d_state := p_state[i];
        d_rank := p_rank[i];
        d_seq := p_seq[i];
        d_now := p_now[i];
        d_started_at := p_started_at[i];
        d_group := p_group[i];
        d_result := p_result[i];
        d_provider_url := p_provider_url[i];
        d_kind := p_kind[i];
        v_adopted := NULL;
        v_first_terminal := false;
        v_channels := '{}';
        v_group_channels := '{}';
        v_described := false;

        -- Dedupe (deliveries::insert_accepted).
        INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
        VALUES (d_provider, p_delivery_id[i], d_job_id, d_now, 'accepted', p_headers[i], p_body[i], p_body_truncated[i])
        ON CONFLICT (provider, delivery_id) WHERE status = 'accepted' DO NOTHING;
        IF NOT FOUND THEN
            v_outcome := 'duplicate';
        ELSE
            -- The guarded upsert (guard.rs's POSTGRES_UPSERT).
            INSERT INTO jobs (provider, job_id, label, state, rank, seq, error, detail, created_at, updated_at,
                              finished_at, terminal_source, started_at, result, provider_url, job_kind)
            VALUES (d_provider, d_job_id, d_label, d_state, d_rank, d_seq, p_error[i], p_detail[i], d_now, d_now,
                    CASE WHEN d_rank = p_terminal_rank THEN COALESCE(p_finished_at[i], d_now) END,
                    CASE WHEN d_rank = p_terminal_rank THEN p_source END, d_started_at, d_result, d_provider_url, d_kind)
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
                -- A stale event still names an unnamed job, says the kind of a job of no known
                -- kind (with its start when none is known) and tells an earlier start
                -- (jobs::name_if_unnamed, jobs::kind_if_unknown, jobs::note_started_at).
                v_outcome := 'stale';
                IF d_label IS NOT NULL THEN
                    UPDATE jobs SET label = d_label WHERE provider = d_provider AND job_id = d_job_id AND label IS NULL;
                END IF;
                IF d_kind IS NOT NULL THEN
                    UPDATE jobs SET job_kind = d_kind, started_at = COALESCE(started_at, d_started_at)
                    WHERE provider = d_provider AND job_id = d_job_id AND job_kind IS NULL;
                END IF;
                IF d_started_at IS NOT NULL THEN
                    UPDATE jobs SET started_at = d_started_at
                    WHERE provider = d_provider AND job_id = d_job_id AND rank < p_terminal_rank
                      AND (started_at IS NULL OR started_at > d_started_at);
                END IF;
                -- A late answer fills in what is missing of the job's result and page
                -- (jobs::describe_if_undescribed): the job changed without moving.
                IF d_result IS NOT NULL OR d_provider_url IS NOT NULL THEN
                    UPDATE jobs SET result = COALESCE(result, d_result), provider_url = COALESCE(provider_url, d_provider_url)
                    WHERE provider = d_provider AND job_id = d_job_id
                      AND ((result IS NULL AND d_result IS NOT NULL) OR (provider_url IS NULL AND d_provider_url IS NOT NULL))
                    RETURNING * INTO v_adopted;
                    v_described := FOUND;
                END IF;
            END IF;
            -- The group the sender names, for a job in none yet (groups::join).
            IF d_group IS NOT NULL THEN
                UPDATE jobs SET group_name = d_group WHERE provider = d_provider AND job_id = d_job_id AND group_name IS NULL;
                IF FOUND AND v_outcome = 'applied' THEN
                    v_adopted.group_name := d_group;
                END IF;
            END IF;
            v_group := v_adopted.group_name;
            -- A grouped job's own notification follows `group_members` (groups::MemberNotifications):
            -- `failures` (the default) announces a failure or a request for input, `every` all,
            -- `group` none.
            v_announced_alone := v_first_terminal;
            IF v_first_terminal AND v_group IS NOT NULL THEN
                v_members := coalesce((SELECT value FROM settings WHERE key = 'group_members'), 'failures');
                v_announced_alone := v_members = 'every' OR (v_members = 'failures' AND nevermiss_announced_like_a_failure(d_state));
            END IF;
            -- The first terminal state: one outbox row per channel that announces it (outbox::enqueue).
            IF v_announced_alone THEN
                WITH added AS (
                    INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, next_attempt_at)
                    SELECT c.name, d_provider, d_job_id, 'terminal', d_state, d_now, d_now FROM channels c
                    WHERE c.enabled = 1 AND c.outcomes LIKE '%,' || d_state || ',%'
                    ON CONFLICT (channel, provider, job_id, kind) DO NOTHING
                    RETURNING channel)
                SELECT coalesce(array_agg(channel ORDER BY channel), '{}') INTO v_channels FROM added;
            END IF;
            -- A group's end (groups::member_ended): its row taken (locked until the commit) before
            -- its members are counted, so that two processes ending its last two jobs at once are
            -- serialized and one of them announces it; once per member count.
            IF v_first_terminal AND v_group IS NOT NULL THEN
                INSERT INTO job_groups (name) VALUES (v_group)
                ON CONFLICT (name) DO UPDATE SET name = excluded.name
                RETURNING announced_total INTO v_announced;
                SELECT count(*), count(CASE WHEN rank < p_terminal_rank THEN 1 END) INTO v_total, v_running
                FROM jobs WHERE group_name = v_group;
                IF v_running = 0 AND v_total > v_announced THEN
                    UPDATE job_groups SET announced_total = v_total, announced_at = d_now WHERE name = v_group;
                    WITH added AS (
                        INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, next_attempt_at)
                        SELECT c.name, 'group', v_group || '@' || v_total, 'group_end', NULL, d_now, d_now FROM channels c
                        WHERE c.enabled = 1
                        ON CONFLICT (channel, provider, job_id, kind) DO NOTHING
                        RETURNING channel)
                    SELECT coalesce(array_agg(channel ORDER BY channel), '{}') INTO v_group_channels FROM added;
                END IF;
            END IF;
        END IF;

        -- The timeline (timeline::record): a duplicate without detail.
        INSERT INTO job_events (provider, job_id, at, source, delivery_id, state, seq, outcome, detail)
        VALUES (d_provider, d_job_id, d_now, p_source, p_delivery_id[i], d_state, d_seq, v_outcome,
                CASE WHEN v_outcome = 'duplicate' THEN NULL ELSE p_event_detail[i] END);

        -- The tallies of this delivery (counters::add_all), added up below.
        v_channels := v_channels || v_group_channels;
        t_hours := t_hours || ARRAY[d_now / 3600000, d_now / 3600000];
        t_names := t_names || ARRAY['deliveries_total', CASE WHEN v_outcome = 'duplicate' THEN 'duplicates' ELSE v_outcome END];
        t_values := t_values || ARRAY[1, 1]::BIGINT[];
        IF cardinality(v_channels) > 0 THEN
            t_hours := t_hours || array_fill(d_now / 3600000, ARRAY[cardinality(v_channels) + 1]);
            t_names := t_names || 'notifications_enqueued'::TEXT || ARRAY(SELECT 'channel.' || c || '.enqueued' FROM unnest(v_channels) c);
            t_values := t_values || cardinality(v_channels)::BIGINT || array_fill(1::BIGINT, ARRAY[cardinality(v_channels)]);
        END IF;

        push_index := i;
        push_outcome := v_outcome;
        push_first_terminal := v_first_terminal;
        push_channels := v_channels;
        push_job := v_adopted;
        push_changes := NULL;
        push_described := v_described;
        RETURN NEXT;
    END LOOP;

    -- The group's tallies, once, summed per name (and hour), in the order of their names as the
    -- store's writes take their rows (bytewise), on the group's own shard.
    INSERT INTO counters AS c (name, shard, value)
    SELECT t.name, v_shard, sum(t.value) FROM unnest(t_names, t_values) AS t(name, value) GROUP BY t.name ORDER BY t.name COLLATE "C"
    ON CONFLICT (name, shard) DO UPDATE SET value = c.value + excluded.value;
    INSERT INTO counter_hours AS h (hour, name, shard, value)
    SELECT t.hour, t.name, v_shard, sum(t.value) FROM unnest(t_hours, t_names, t_values) AS t(hour, name, value)
    GROUP BY t.hour, t.name ORDER BY t.hour, t.name COLLATE "C"
    ON CONFLICT (hour, name, shard) DO UPDATE SET value = h.value + excluded.value;

    -- The change feed's payloads of the whole group (announced after the commit).
    push_index := 0;
    push_outcome := NULL;
    push_first_terminal := NULL;
    push_channels := NULL;
    push_job := NULL;
    push_changes := current_setting('nevermiss.changes', true);
    push_described := NULL;
    RETURN NEXT;
END $$;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (9, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

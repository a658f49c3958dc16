-- The push path's server-side functions, their current text, installed (CREATE OR REPLACE) each
-- time the schema is brought up to date, after the numbered files (`migrations::migrate_postgres`):
-- a change to them is made here, never by copying them into a new numbered file. The tables and
-- types they use are the numbered files'. What each is, and why it is so, in `docs/src` (the data
-- page) and above each; `guard.rs`'s tests hold `nevermiss_push_group`'s upsert to the rule.
--
-- The numbered files V6 to V10 hold the earlier texts, as they were applied (their checksums are
-- recorded); V10's is the one this file started from.

-- The jobs a statement inserted, updated or deleted (its transition tables `new_rows` and
-- `old_rows`): jobs per state (a state's count moves with an insert, a delete, or an update that
-- changes it), completions per day (a job inserted finished, or updated from unfinished to
-- finished: its duration measured from the provider's start, else, for an update, from its first
-- sight; inserted without a start, counted apart), the unfinished jobs given up on or not found
-- (`unfinished_counts`: a job's name for it, `nevermiss_unfinished_count`, left and entered), the
-- jobs the search index must take again (`job_search_pending`), and the change feed's payload
-- of each job inserted or updated (recorded for the commit).
CREATE OR REPLACE FUNCTION nevermiss_jobs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_states   TEXT[];
    v_deltas   BIGINT[];
    v_finished nevermiss_finished[];
    v_change   TEXT;
    v_pending  TEXT;
    v_names    TEXT[];
    v_moves    BIGINT[];
    v_search   BIGINT[];
BEGIN
    -- What the statement changed, read once: the states left (-1) and entered (+1), the jobs that
    -- finished, the change feed's payloads.
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.state), array_fill(1::BIGINT, ARRAY[count(*)::INT]),
               array_agg(ROW(n.updated_at, n.finished_at, n.started_at, n.terminal_source)::nevermiss_finished) FILTER (WHERE n.rank = 3),
               string_agg(json_build_object('from', current_setting('application_name'), 'provider', n.provider, 'job_id', n.job_id)::text,
                          E'\n'),
               array_agg(c.now) FILTER (WHERE c.now IS NOT NULL),
               array_fill(1::BIGINT, ARRAY[count(*) FILTER (WHERE c.now IS NOT NULL)::INT]),
               array_agg(n.id)
        INTO v_states, v_deltas, v_finished, v_change, v_names, v_moves, v_search
        FROM new_rows n CROSS JOIN LATERAL (SELECT nevermiss_unfinished_count(n.rank, n.abandoned_at, n.poll_error_kind) AS now) c;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(o.state), array_fill(-1::BIGINT, ARRAY[count(*)::INT]),
               array_agg(c.was) FILTER (WHERE c.was IS NOT NULL),
               array_fill(-1::BIGINT, ARRAY[count(*) FILTER (WHERE c.was IS NOT NULL)::INT]),
               array_agg(o.id)
        INTO v_states, v_deltas, v_names, v_moves, v_search
        FROM old_rows o CROSS JOIN LATERAL (SELECT nevermiss_unfinished_count(o.rank, o.abandoned_at, o.poll_error_kind) AS was) c;
    ELSE
        SELECT array_agg(o.state) FILTER (WHERE o.state <> n.state) || array_agg(n.state) FILTER (WHERE o.state <> n.state),
               array_fill(-1::BIGINT, ARRAY[count(*) FILTER (WHERE o.state <> n.state)::INT])
                   || array_fill(1::BIGINT, ARRAY[count(*) FILTER (WHERE o.state <> n.state)::INT]),
               array_agg(ROW(n.updated_at, n.finished_at, COALESCE(n.started_at, n.created_at), n.terminal_source)::nevermiss_finished)
                   FILTER (WHERE n.rank = 3 AND o.rank < 3),
               string_agg(json_build_object('from', current_setting('application_name'), 'provider', n.provider, 'job_id', n.job_id)::text,
                          E'\n'),
               array_agg(c.was) FILTER (WHERE c.was IS NOT NULL AND c.was IS DISTINCT FROM c.now)
                   || array_agg(c.now) FILTER (WHERE c.now IS NOT NULL AND c.was IS DISTINCT FROM c.now),
               array_fill(-1::BIGINT, ARRAY[count(*) FILTER (WHERE c.was IS NOT NULL AND c.was IS DISTINCT FROM c.now)::INT])
                   || array_fill(1::BIGINT, ARRAY[count(*) FILTER (WHERE c.now IS NOT NULL AND c.was IS DISTINCT FROM c.now)::INT]),
               array_agg(n.id) FILTER (WHERE o.label IS DISTINCT FROM n.label OR o.group_name IS DISTINCT FROM n.group_name)
        INTO v_states, v_deltas, v_finished, v_change, v_names, v_moves, v_search
        FROM old_rows o JOIN new_rows n ON n.id = o.id CROSS JOIN LATERAL (SELECT nevermiss_unfinished_count(o.rank, o.abandoned_at, o.poll_error_kind) AS was, nevermiss_unfinished_count(n.rank, n.abandoned_at, n.poll_error_kind) AS now) c;
    END IF;
    -- The jobs whose searched texts the search index must take again (inserted, renamed,
    -- regrouped, deleted), for its next batch (`search_index`).
    IF cardinality(v_search) > 0 THEN
        INSERT INTO job_search_pending (job) SELECT j FROM unnest(v_search) AS j ORDER BY j ON CONFLICT DO NOTHING;
    END IF;
    -- The unfinished jobs given up on or not found, each name's change summed, on the shard.
    IF cardinality(v_names) > 0 THEN
        INSERT INTO unfinished_counts AS u (name, shard, count)
        SELECT e.name, nevermiss_shard(), sum(e.move) FROM unnest(v_names, v_moves) AS e(name, move)
        GROUP BY e.name HAVING sum(e.move) <> 0 ORDER BY e.name COLLATE "C"
        ON CONFLICT (name, shard) DO UPDATE SET count = u.count + excluded.count;
    END IF;
    -- Each state's change of count, summed, on the transaction's shard, in the order of the
    -- states. (Written here rather than in functions of their own: a call costs more than the
    -- statement.)
    IF v_states IS NOT NULL THEN
        INSERT INTO job_state_counts AS c (state, shard, count)
        SELECT e.state, nevermiss_shard(), sum(e.delta) FROM unnest(v_states, v_deltas) AS e(state, delta)
        GROUP BY e.state HAVING sum(e.delta) <> 0 ORDER BY e.state COLLATE "C"
        ON CONFLICT (state, shard) DO UPDATE SET count = c.count + excluded.count;
    END IF;
    -- The finished jobs in the day they finished (UTC), on the transaction's shard: within the
    -- SLA, learned by polling, and without a known start.
    IF v_finished IS NOT NULL THEN
        INSERT INTO daily_completions AS d (day, shard, finished, within_sla, by_pull, without_start)
        SELECT to_char(to_timestamp(f.updated_at / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD'), nevermiss_shard(), count(*),
               sum(CASE WHEN f.finished_at - f.since
                             <= 1000 * COALESCE((SELECT CAST(value AS BIGINT) FROM settings WHERE key = 'sla_secs'), 300)
                        THEN 1 ELSE 0 END),
               sum(CASE WHEN f.terminal_source = 'pull' THEN 1 ELSE 0 END),
               sum(CASE WHEN f.since IS NULL THEN 1 ELSE 0 END)
        FROM unnest(v_finished) AS f
        GROUP BY 1 ORDER BY 1
        ON CONFLICT (day, shard) DO UPDATE SET finished = d.finished + excluded.finished,
            within_sla = d.within_sla + excluded.within_sla, by_pull = d.by_pull + excluded.by_pull,
            without_start = d.without_start + excluded.without_start;
    END IF;
    IF v_change IS NOT NULL THEN
        v_pending := current_setting('nevermiss.changes', true);
        PERFORM set_config('nevermiss.changes',
                           CASE WHEN coalesce(v_pending, '') = '' THEN v_change ELSE v_pending || E'\n' || v_change END, true);
    END IF;
    RETURN NULL;
END $$;

-- A group of deliveries in one call, set by set: each statement runs once for the whole group
-- (run delivery by delivery, the executor's start and end of each statement took about a fifth
-- of the database's time). Same rule as the guarded upsert (store/guard.rs's test holds this
-- upsert to it).
--
-- One job may be named by several deliveries of a group, and an upsert cannot touch one row twice:
-- the group is taken in rounds, a delivery's round being its place among the group's deliveries of
-- its job (1 for the first; most groups have one round). A round's statements see what the rounds
-- before it did, so each delivery meets its job as if the deliveries were taken one by one. In a
-- round:
-- 1. the dedupe: the round's deliveries INSERTed at once, the ones that were new kept (`v_first`);
-- 2. the guarded upsert of the new ones, in the order (provider, job id) bytewise, so that two
--    groups lock their jobs in one order (an upsert whose guard refuses still locks the job's row:
--    every later statement of the round finds its rows locked already);
-- 3. the stale ones' naming, kind, start and description, each one UPDATE;
-- 4. the group each new delivery names, for a job in none yet;
-- 5. the outbox rows of each first terminal state announced on its own (`group_members`);
-- 6. a group's end, one grouped first terminal state after the other (they are few).
-- Then, for the whole group: the timeline's rows (provider, job id, then the order of arrival),
-- the tallies summed per name and hour, and the answers. When two members of one group end in one
-- round, the group's end is answered with the first of them, at its time. The jobs' own tallies
-- and change feed are `nevermiss_jobs_changed`'s, once per statement.
CREATE OR REPLACE FUNCTION nevermiss_push_group(
    -- Per delivery, one element each: the job's columns, numbered as the guarded upsert's
    -- parameters (store/guard.rs) 1 to 13 (the source and the terminal rank, the same for every
    -- delivery, are single values). A new job column goes here, in `nevermiss_push_delivery`, in
    -- the upsert's INSERT columns and SELECT, and in its SET (the guard test checks the SET and
    -- the rule against guard.rs), and in `push::CALL`.
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
-- Its statements (and its triggers') planned once per connection: with arrays for parameters,
-- PostgreSQL would otherwise plan most of them again at each call (a custom plan's estimate
-- never looks worse than the generic one's); 5-18% more deliveries a second in pgbench.
SET plan_cache_mode = force_generic_plan
LANGUAGE plpgsql AS $$
DECLARE
    v_shard     BIGINT := nevermiss_claim_shard();
    v_members   TEXT := coalesce((SELECT value FROM settings WHERE key = 'group_members'), 'failures');
    -- How long a group's end waits before it is sent, read at the call's first group end.
    v_group_grace BIGINT;
    -- The group's deliveries, in the order (provider, job id, arrival).
    v_d         nevermiss_push_delivery[];
    v_rounds    BIGINT;
    -- A round's: the deliveries that were new; the jobs the upsert adopted; the stale ones that
    -- described their job; the adopted jobs that joined a group (as each row is now).
    v_first     BIGINT[];
    v_applied   jobs[];
    v_described jobs[];
    v_joined    jobs[];
    v_stale     BOOLEAN;
    -- A round's outbox rows: (provider, job id, channel), a job's own; (ord, channel) a group's end.
    o_provider  TEXT[];
    o_job_id    TEXT[];
    o_channel   TEXT[];
    g_ord       BIGINT[];
    g_channel   TEXT[];
    v_ending    RECORD;
    v_announced BIGINT;
    v_total     BIGINT;
    v_running   BIGINT;
    v_added     TEXT[];
    -- Every delivery's answer, round after round.
    v_answers   nevermiss_push_answer[] := '{}';
BEGIN
    SELECT array_agg(ROW(t.ord, t.round, t.provider, t.job_id, t.label, t.state, t.rank, t.seq, t.error, t.detail, t.now,
                         t.finished_at, t.started_at, t.delivery_id, t.headers, t.body, t.body_truncated, t.event_detail,
                         t.group_name, t.result, t.provider_url, t.kind)::nevermiss_push_delivery
                     ORDER BY t.provider COLLATE "C", t.job_id COLLATE "C", t.ord)
    INTO v_d
    FROM (SELECT u.*, row_number() OVER (PARTITION BY u.provider, u.job_id ORDER BY u.ord) AS round
          FROM unnest(p_provider, p_job_id, p_label, p_state, p_rank, p_seq, p_error, p_detail, p_now, p_finished_at, p_started_at,
                      p_delivery_id, p_headers, p_body, p_body_truncated, p_event_detail, p_group, p_result, p_provider_url, p_kind)
               WITH ORDINALITY AS u(provider, job_id, label, state, rank, seq, error, detail, now, finished_at, started_at,
                                    delivery_id, headers, body, body_truncated, event_detail, group_name, result, provider_url, kind, ord)
         ) AS t;
    SELECT max(d.round) INTO v_rounds FROM unnest(v_d) AS d;

    FOR r IN 1..coalesce(v_rounds, 0) LOOP
        -- 1. Dedupe (deliveries::insert_accepted).
        WITH added AS (
            INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
            SELECT d.provider, d.delivery_id, d.job_id, d.now, 'accepted', d.headers, d.body, d.body_truncated
            FROM unnest(v_d) AS d WHERE d.round = r ORDER BY d.provider COLLATE "C", d.job_id COLLATE "C"
            ON CONFLICT (provider, delivery_id) WHERE status = 'accepted' DO NOTHING
            RETURNING provider, delivery_id, job_id)
        SELECT coalesce(array_agg(d.ord), '{}') INTO v_first
        FROM unnest(v_d) AS d JOIN added a ON a.provider = d.provider AND a.delivery_id = d.delivery_id AND a.job_id = d.job_id
        WHERE d.round = r;

        -- 2. The guarded upsert (guard.rs's POSTGRES_UPSERT).
        WITH adopted AS (
            INSERT INTO jobs (provider, job_id, label, state, rank, seq, error, detail, created_at, updated_at,
                              finished_at, terminal_source, started_at, result, provider_url, job_kind)
            SELECT d.provider, d.job_id, d.label, d.state, d.rank, d.seq, d.error, d.detail, d.now, d.now,
                   CASE WHEN d.rank = p_terminal_rank THEN COALESCE(d.finished_at, d.now) END,
                   CASE WHEN d.rank = p_terminal_rank THEN p_source END, d.started_at, d.result, d.provider_url, d.kind
            FROM unnest(v_d) AS d WHERE d.ord = ANY (v_first) ORDER BY d.provider COLLATE "C", d.job_id COLLATE "C"
            ON CONFLICT (provider, job_id) DO UPDATE SET
                started_at = LEAST(jobs.started_at, excluded.started_at),
                state = excluded.state,
                rank = excluded.rank,
                seq = excluded.seq,
                error = excluded.error,
                detail = CASE WHEN excluded.state = jobs.state THEN COALESCE(excluded.detail, jobs.detail) ELSE excluded.detail END,
                updated_at = excluded.updated_at,
                finished_at = excluded.finished_at,
                terminal_source = excluded.terminal_source,
                label = COALESCE(jobs.label, excluded.label),
                result = COALESCE(excluded.result, jobs.result),
                provider_url = COALESCE(excluded.provider_url, jobs.provider_url),
                job_kind = COALESCE(jobs.job_kind, excluded.job_kind)
            WHERE excluded.rank > jobs.rank
                 OR (excluded.rank = jobs.rank AND jobs.rank < p_terminal_rank AND (jobs.seq IS NULL OR excluded.seq > jobs.seq))
            RETURNING jobs)
        SELECT coalesce(array_agg(a.jobs), '{}') INTO v_applied FROM adopted a;

        -- 3. A stale event still names an unnamed job, says the kind of a job of no known kind
        -- (with its start when none is known), tells an earlier start (jobs::name_if_unnamed,
        -- jobs::kind_if_unknown, jobs::note_started_at) and fills in what is missing of the job's
        -- result and page (jobs::describe_if_undescribed): the job changed without moving.
        v_described := '{}';
        SELECT exists (SELECT 1 FROM unnest(v_d) AS d WHERE d.ord = ANY (v_first)
                         AND (d.label IS NOT NULL OR d.kind IS NOT NULL OR d.started_at IS NOT NULL OR d.result IS NOT NULL
                              OR d.provider_url IS NOT NULL)
                         AND NOT EXISTS (SELECT 1 FROM unnest(v_applied) AS a WHERE a.provider = d.provider AND a.job_id = d.job_id))
        INTO v_stale;
        IF v_stale THEN
            UPDATE jobs SET label = d.label
            FROM unnest(v_d) AS d
            WHERE d.ord = ANY (v_first) AND d.label IS NOT NULL AND jobs.provider = d.provider AND jobs.job_id = d.job_id
              AND jobs.label IS NULL AND NOT EXISTS (SELECT 1 FROM unnest(v_applied) AS a WHERE a.provider = d.provider AND a.job_id = d.job_id);
            UPDATE jobs SET job_kind = d.kind, started_at = COALESCE(jobs.started_at, d.started_at)
            FROM unnest(v_d) AS d
            WHERE d.ord = ANY (v_first) AND d.kind IS NOT NULL AND jobs.provider = d.provider AND jobs.job_id = d.job_id
              AND jobs.job_kind IS NULL AND NOT EXISTS (SELECT 1 FROM unnest(v_applied) AS a WHERE a.provider = d.provider AND a.job_id = d.job_id);
            UPDATE jobs SET started_at = d.started_at
            FROM unnest(v_d) AS d
            WHERE d.ord = ANY (v_first) AND d.started_at IS NOT NULL AND jobs.provider = d.provider AND jobs.job_id = d.job_id
              AND jobs.rank < p_terminal_rank AND (jobs.started_at IS NULL OR jobs.started_at > d.started_at)
              AND NOT EXISTS (SELECT 1 FROM unnest(v_applied) AS a WHERE a.provider = d.provider AND a.job_id = d.job_id);
            WITH filled AS (
                UPDATE jobs AS j SET result = COALESCE(j.result, d.result), provider_url = COALESCE(j.provider_url, d.provider_url)
                FROM unnest(v_d) AS d
                WHERE d.ord = ANY (v_first) AND (d.result IS NOT NULL OR d.provider_url IS NOT NULL)
                  AND j.provider = d.provider AND j.job_id = d.job_id
                  AND ((j.result IS NULL AND d.result IS NOT NULL) OR (j.provider_url IS NULL AND d.provider_url IS NOT NULL))
                  AND NOT EXISTS (SELECT 1 FROM unnest(v_applied) AS a WHERE a.provider = d.provider AND a.job_id = d.job_id)
                RETURNING j)
            SELECT coalesce(array_agg(f.j), '{}') INTO v_described FROM filled f;
        END IF;

        -- 4. The group the sender names, for a job in none yet (groups::join).
        v_joined := '{}';
        IF EXISTS (SELECT 1 FROM unnest(v_d) AS d WHERE d.ord = ANY (v_first) AND d.group_name IS NOT NULL) THEN
            WITH joined AS (
                UPDATE jobs AS j SET group_name = d.group_name
                FROM unnest(v_d) AS d
                WHERE d.ord = ANY (v_first) AND d.group_name IS NOT NULL AND j.provider = d.provider AND j.job_id = d.job_id
                  AND j.group_name IS NULL
                RETURNING j)
            SELECT coalesce(array_agg(x.j), '{}') INTO v_joined FROM joined x;
            -- An adopted job is answered as it is now, in its group.
            SELECT coalesce(array_agg(coalesce((SELECT g FROM unnest(v_joined) AS g WHERE g.id = a.id), a)), '{}') INTO v_applied
            FROM unnest(v_applied) AS a;
        END IF;

        -- 5. The first terminal states: one outbox row per channel that announces one
        -- (outbox::enqueue), unless its job is in a group that announces only its end
        -- (`group_members`: `failures`, the default, announces a failure or a request for input,
        -- `every` all, `group` none).
        o_provider := '{}'; o_job_id := '{}'; o_channel := '{}';
        g_ord := '{}'; g_channel := '{}';
        IF EXISTS (SELECT 1 FROM unnest(v_applied) AS a WHERE a.rank = p_terminal_rank) THEN
            WITH added AS (
                INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, next_attempt_at)
                SELECT c.name, d.provider, d.job_id, 'terminal', d.state, d.now, d.now
                FROM unnest(v_d) AS d
                JOIN unnest(v_applied) AS a ON a.provider = d.provider AND a.job_id = d.job_id
                JOIN channels c ON c.enabled = 1 AND c.outcomes LIKE '%,' || d.state || ',%'
                WHERE d.ord = ANY (v_first) AND a.rank = p_terminal_rank
                  AND (a.group_name IS NULL OR v_members = 'every'
                       OR (v_members = 'failures' AND nevermiss_announced_like_a_failure(d.state)))
                ORDER BY c.name, d.provider COLLATE "C", d.job_id COLLATE "C"
                ON CONFLICT (channel, provider, job_id, kind) DO NOTHING
                RETURNING provider, job_id, channel)
            SELECT coalesce(array_agg(provider), '{}'), coalesce(array_agg(job_id), '{}'), coalesce(array_agg(channel), '{}')
            INTO o_provider, o_job_id, o_channel FROM added;

            -- 6. A group's end (groups::member_ended): its row taken (locked until the commit) before
            -- its members are counted, so that two processes ending its last two jobs at once are
            -- serialized and one of them announces it; once per member count.
            FOR v_ending IN
                SELECT d.ord, d.now, a.group_name FROM unnest(v_d) AS d
                JOIN unnest(v_applied) AS a ON a.provider = d.provider AND a.job_id = d.job_id
                WHERE d.ord = ANY (v_first) AND a.rank = p_terminal_rank AND a.group_name IS NOT NULL
                ORDER BY d.provider COLLATE "C", d.job_id COLLATE "C"
            LOOP
                INSERT INTO job_groups (name) VALUES (v_ending.group_name)
                ON CONFLICT (name) DO UPDATE SET name = excluded.name
                RETURNING announced_total INTO v_announced;
                SELECT count(*), count(CASE WHEN rank < p_terminal_rank THEN 1 END) INTO v_total, v_running
                FROM jobs WHERE group_name = v_ending.group_name;
                IF v_running = 0 AND v_total > v_announced THEN
                    UPDATE job_groups SET announced_total = v_total, announced_at = v_ending.now WHERE name = v_ending.group_name;
                    -- (groups::end_grace_ms: key and default.)
                    IF v_group_grace IS NULL THEN
                        v_group_grace := 1000 * greatest(0, coalesce((SELECT CAST(value AS BIGINT) FROM settings WHERE key = 'group_end_grace_secs'), 60));
                    END IF;
                    WITH added AS (
                        INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, next_attempt_at)
                        SELECT c.name, 'group', v_ending.group_name || '@' || v_total, 'group_end', NULL, v_ending.now, v_ending.now + v_group_grace
                        FROM channels c WHERE c.enabled = 1
                        ON CONFLICT (channel, provider, job_id, kind) DO NOTHING
                        RETURNING channel)
                    SELECT coalesce(array_agg(channel ORDER BY channel), '{}') INTO v_added FROM added;
                    g_ord := g_ord || array_fill(v_ending.ord, ARRAY[cardinality(v_added)]);
                    g_channel := g_channel || v_added;
                END IF;
            END LOOP;
        END IF;

        -- The round's answers: its own channels, then its group's.
        SELECT v_answers || coalesce(array_agg(ROW(
                   d.ord,
                   CASE WHEN NOT d.ord = ANY (v_first) THEN 'duplicate' WHEN a.id IS NOT NULL THEN 'applied' ELSE 'stale' END,
                   coalesce(a.rank = p_terminal_rank, false),
                   coalesce(ARRAY(SELECT o.c FROM unnest(o_provider, o_job_id, o_channel) AS o(p, j, c)
                                  WHERE o.p = d.provider AND o.j = d.job_id ORDER BY o.c), '{}')
                     || coalesce(ARRAY(SELECT g.c FROM unnest(g_ord, g_channel) AS g(o, c) WHERE g.o = d.ord), '{}'),
                   CASE WHEN a.id IS NOT NULL THEN a ELSE s END,
                   s.id IS NOT NULL)::nevermiss_push_answer), '{}')
        INTO v_answers
        FROM unnest(v_d) AS d
        LEFT JOIN unnest(v_applied) AS a ON d.ord = ANY (v_first) AND a.provider = d.provider AND a.job_id = d.job_id
        LEFT JOIN unnest(v_described) AS s ON d.ord = ANY (v_first) AND s.provider = d.provider AND s.job_id = d.job_id
        WHERE d.round = r;
    END LOOP;

    -- The timeline (timeline::record), in the order of arrival: a duplicate without detail.
    INSERT INTO job_events (provider, job_id, at, source, delivery_id, state, seq, outcome, detail)
    SELECT d.provider, d.job_id, d.now, p_source, d.delivery_id, d.state, d.seq, x.outcome,
           CASE WHEN x.outcome = 'duplicate' THEN NULL ELSE d.event_detail END
    FROM unnest(v_d) WITH ORDINALITY AS d JOIN unnest(v_answers) AS x ON x.ord = d.ord
    ORDER BY d.ordinality;

    -- The group's tallies (counters::add_all), once, summed per name (and hour), in the order of
    -- their names as the store's writes take their rows (bytewise), on the group's own shard.
    WITH added(hour, name, value) AS (
        SELECT d.now / 3600000, n.name, n.value
        FROM unnest(v_d) AS d JOIN unnest(v_answers) AS x ON x.ord = d.ord
        CROSS JOIN LATERAL (
            VALUES ('deliveries_total', 1::BIGINT), (CASE WHEN x.outcome = 'duplicate' THEN 'duplicates' ELSE x.outcome END, 1::BIGINT)
            UNION ALL SELECT 'notifications_enqueued', cardinality(x.channels)::BIGINT WHERE cardinality(x.channels) > 0
            UNION ALL SELECT 'channel.' || c || '.enqueued', 1::BIGINT FROM unnest(x.channels) AS c
        ) AS n(name, value)),
    by_name AS (
        INSERT INTO counters AS c (name, shard, value)
        SELECT a.name, v_shard, sum(a.value) FROM added a GROUP BY a.name ORDER BY a.name COLLATE "C"
        ON CONFLICT (name, shard) DO UPDATE SET value = c.value + excluded.value)
    INSERT INTO counter_hours AS h (hour, name, shard, value)
    SELECT a.hour, a.name, v_shard, sum(a.value) FROM added a GROUP BY a.hour, a.name ORDER BY a.hour, a.name COLLATE "C"
    ON CONFLICT (hour, name, shard) DO UPDATE SET value = h.value + excluded.value;

    RETURN QUERY SELECT x.ord, x.outcome, x.first_terminal, x.channels, x.job, NULL::TEXT, x.described FROM unnest(v_answers) AS x;
    -- The change feed's payloads of the whole group (announced after the commit).
    RETURN QUERY SELECT 0::BIGINT, NULL::TEXT, NULL::BOOLEAN, NULL::TEXT[], NULL::jobs, current_setting('nevermiss.changes', true), NULL::BOOLEAN;
END $$;

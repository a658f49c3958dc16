-- The job search's one index on PostgreSQL: each job's distinct one- and two-character sequences
-- of its folded texts (as V14's, `search_index::short_grams`), each prefixed by the job's range of
-- 65,536 row ids (`nevermiss_search_range`), under one GIN index. A search walks the ranges
-- newest first and stops once its page is full (`jobs::list`): a term that many old jobs hold and
-- no new one reads one range's matches, not all of them (a GIN index gives its matches in no
-- order: V14's index read 111,111 of them for a term held by one job in nine). A term of one or two
-- characters asks for its own sequence, a longer one for some of its pairs
-- (`search_index::postgres_term_grams`), its matches then checked against `folded`. The trigrams'
-- index of V13 (`pg_trgm`) is no longer used: no extension is needed.
CREATE FUNCTION nevermiss_search_range(id BIGINT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT id >> 16 $$;

-- A job's keys: its sequences, each as `<range> <sequence>`.
CREATE FUNCTION nevermiss_search_grams(id BIGINT, folded TEXT) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT nevermiss_search_range(id) || ' ' || gram), '{}') FROM (
        SELECT substr(folded, at, 1) FROM generate_series(1, length(folded)) at
        UNION ALL
        SELECT substr(folded, at, 2) FROM generate_series(1, length(folded) - 1) at) grams (gram)
    WHERE strpos(gram, E'\n') = 0
$$;

-- A search's keys in one range: each of its sequences as the jobs' keys are written.
CREATE FUNCTION nevermiss_search_keys(id_range BIGINT, grams TEXT[]) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT array(SELECT id_range || ' ' || gram FROM unnest(grams) gram)
$$;

CREATE INDEX job_search_grams ON job_search USING gin (nevermiss_search_grams(id, folded));
DROP INDEX job_search_short;
DROP FUNCTION nevermiss_short_grams(TEXT);
DROP INDEX IF EXISTS job_search_trigrams;

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (16, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

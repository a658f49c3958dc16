-- The job search's index of short terms (one or two characters, which have no trigram), as
-- SQLite's V19: each job's distinct one- and two-character sequences of its folded texts
-- (`job_search.folded`, the three texts on lines of their own: no sequence holding a line break;
-- `search_index::short_grams`), under a GIN index of the array they make; a term of one or two
-- characters asks for the rows whose array holds it (`@>`). No `pg_trgm` needed: made everywhere.
CREATE FUNCTION nevermiss_short_grams(folded TEXT) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT gram), '{}') FROM (
        SELECT substr(folded, at, 1) FROM generate_series(1, length(folded)) at
        UNION ALL
        SELECT substr(folded, at, 2) FROM generate_series(1, length(folded) - 1) at) grams (gram)
    WHERE strpos(gram, E'\n') = 0
$$;
CREATE INDEX job_search_short ON job_search USING gin (nevermiss_short_grams(folded));

-- The version older NeverMiss builds read (see V1), in this migration's own transaction.
INSERT INTO schema_migrations (version, applied_at) VALUES (14, (extract(epoch FROM now()) * 1000)::BIGINT)
    ON CONFLICT (version) DO NOTHING;

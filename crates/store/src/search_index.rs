//! The job search's index, so that a search reads the jobs that hold its term rather than every
//! job: SQLite's FTS5 tables `job_search` (every trigram of each job's folded id, label and group,
//! `fold`) and `job_search_short` (their one- and two-character sequences); PostgreSQL's
//! `job_search` (the folded texts) under one GIN index of those sequences by range of row ids.
//!
//! It is written off the delivery's path: a changed job leaves its row id in `job_search_pending`,
//! and `catch_up` indexes those in batches (the engine's `search_index::run`). Until then a search
//! reads the pending jobs as well (`jobs::list`), so its answers never wait for the index.

use super::fold;
use super::sql::{self, params, Db, Dialect, OptionalExtension};

/// How many characters a folded term needs for SQLite's search to start from the trigrams' index;
/// a shorter one (one or two characters: no trigram) starts from the index of short terms.
pub const INDEXED_TERM: usize = 3;

/// The index of short terms: each job's distinct one- and two-character sequences of its folded
/// id, label and group (never across two of them). One rule, written once per database, side by
/// side:
/// - SQLite: `sqlite_short_grams` (the connection's `nevermiss_short_grams(job_id, label,
///   group_name)`, each sequence as the hex of its UTF-8, a word of the `ascii` tokenizer: every
///   character of a sequence kept, none taken as a separator; UTF-8 is a prefix code, so no one
///   character's word is a two characters' word) into the contentless FTS5 table
///   `job_search_short` (V19), asked with `sqlite_short_term` for a term of one or two characters;
/// - PostgreSQL: `nevermiss_search_grams(id, folded)` (V16, SQL over `job_search.folded`, whose
///   lines are the three texts: no sequence holding a line break), each sequence prefixed by the
///   job's range of row ids, under the GIN index `job_search_grams`; every term is asked for by
///   `postgres_term_grams`, range by range, newest first.
pub fn short_grams(folded: &str) -> Vec<&str> {
    let bounds: Vec<usize> = folded.char_indices().map(|(at, _)| at).chain(std::iter::once(folded.len())).collect();
    let ones = bounds.windows(2).map(|w| &folded[w[0]..w[1]]);
    let twos = bounds.windows(3).map(|w| &folded[w[0]..w[2]]);
    ones.chain(twos).filter(|gram| !gram.contains('\n')).collect()
}

/// Whether a folded term shorter than `INDEXED_TERM` is in the index of short terms: one or two
/// characters, no line break (a term holding one is checked against the jobs newest first).
pub fn short_term_indexed(folded: &str) -> bool {
    (1..INDEXED_TERM).contains(&folded.chars().count()) && !folded.contains('\n')
}

/// The sequences PostgreSQL's search asks `job_search_grams` for, in each range of row ids, to
/// find the jobs that may hold a folded term (each then checked against its folded texts): a term
/// of one or two characters, itself; a longer one, its pairs that do not overlap (from its start,
/// and its last pair), enough to rule out most jobs while each key read costs little. Empty when
/// the term holds nothing the index has (a line break in each of its pairs).
pub fn postgres_term_grams(folded: &str) -> Vec<String> {
    match folded.chars().count() {
        _ if short_term_indexed(folded) => vec![folded.to_owned()],
        0..INDEXED_TERM => Vec::new(),
        _ => spaced_sequences(folded, 2).into_iter().filter(|pair| !pair.contains('\n')).collect(),
    }
}

/// The words SQLite's `job_search_short` holds of a job's texts (each folded here): its short
/// sequences' hex, distinct, separated by spaces.
pub fn sqlite_short_grams<'a>(texts: impl IntoIterator<Item = Option<&'a str>>) -> String {
    let folded: Vec<String> = texts.into_iter().flatten().map(fold::fold).collect();
    let mut words: Vec<String> = folded.iter().flat_map(|text| short_grams(text)).map(hex::encode).collect();
    words.sort_unstable();
    words.dedup();
    words.join(" ")
}

/// SQLite's query of `job_search_short` for a folded term of one or two characters (its one word).
pub fn sqlite_short_term(folded: &str) -> String {
    format!("\"{}\"", hex::encode(folded))
}

/// The name SQLite's connections know `sqlite_short_grams` by.
pub const SQLITE_SHORT_GRAMS: &str = "nevermiss_short_grams";

/// Registers `nevermiss_short_grams(text, ...)` on a SQLite connection (NULLs skipped).
pub fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        SQLITE_SHORT_GRAMS,
        -1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC | FunctionFlags::SQLITE_INNOCUOUS,
        |ctx| {
            let texts: Vec<Option<String>> = (0..ctx.len()).map(|i| ctx.get(i)).collect::<rusqlite::Result<_>>()?;
            Ok(sqlite_short_grams(texts.iter().map(|t| t.as_deref())))
        },
    )
}

/// Jobs indexed per write. SQLite's batch holds its one writer while it is written (20-32 us a
/// job, both FTS5 tables), so it is small: 2,000 a write held deliveries up to 64 ms, and
/// loadgen's p99 at 64 connections was 14.0-14.3 ms against 12.1-12.7 with 250 (throughput 2%
/// lower, BENCHMARKS.md). PostgreSQL's batch merges its GIN index's pending list at once, sorted: larger.
pub const fn batch_of(dialect: Dialect) -> i64 {
    match dialect {
        Dialect::Sqlite => 250,
        Dialect::Postgres => 2_000,
    }
}

/// The text PostgreSQL's index holds of a job: its three folded columns on lines of their own
/// (a term with no line break cannot match across two).
pub const POSTGRES_SEARCH_TEXT: &str = concat!(
    fold::postgres_fold!("job_id"),
    " || E'\\n' || coalesce(",
    fold::postgres_fold!("label"),
    ", '') || E'\\n' || coalesce(",
    fold::postgres_fold!("group_name"),
    ", '')"
);

/// SQLite's index query for a folded term: the trigrams that cover it end to end without
/// overlapping (and its last one), each quoted (FTS5's `"..."`, a quote doubled), all required. The
/// index keeps which rows hold a trigram, not where, so its answer is a superset that the search
/// then narrows to the term itself; fewer trigrams (a third of them) make a superset as good for
/// that, and a third of the index read. None for a term under `INDEXED_TERM` characters.
pub fn sqlite_trigrams(folded: &str) -> Option<String> {
    if folded.chars().count() < INDEXED_TERM {
        return None;
    }
    let trigrams = spaced_sequences(folded, INDEXED_TERM);
    Some(trigrams.iter().map(|t| format!("\"{}\"", t.replace('"', "\"\""))).collect::<Vec<_>>().join(" AND "))
}

/// The sequences of `length` characters that cover a term of at least that many end to end
/// without overlapping, and its last one, sorted, each once: the part of a term an index of such
/// sequences is asked for (SQLite's trigrams, PostgreSQL's pairs).
fn spaced_sequences(folded: &str, length: usize) -> Vec<String> {
    let chars: Vec<char> = folded.chars().collect();
    let last = chars.len() - length;
    let starts = (0..last).step_by(length).chain(std::iter::once(last));
    let mut sequences: Vec<String> = starts.map(|at| chars[at..at + length].iter().collect()).collect();
    sequences.sort();
    sequences.dedup();
    sequences
}

/// Indexes up to `batch_of` pending jobs (their texts as they are now; a deleted job's entry
/// removed) and returns how many it took. On PostgreSQL two processes of a fleet take different
/// jobs (`SKIP LOCKED`).
pub fn catch_up(conn: &dyn Db) -> sql::Result<usize> {
    let ids: Vec<i64> = match conn.dialect() {
        Dialect::Sqlite => {
            let ids: Vec<i64> = conn
                .prepare_cached("SELECT job FROM job_search_pending ORDER BY job LIMIT $1")?
                .query_map([batch_of(conn.dialect())], |r| r.get("job"))?
                .collect::<sql::Result<_>>()?;
            if !ids.is_empty() {
                conn.prepare_cached(&format!("DELETE FROM job_search_pending WHERE {}", sql::id_in_json(Dialect::Sqlite, "job", 1)))?
                    .execute([sql::json_batch(&ids)?])?;
            }
            ids
        }
        Dialect::Postgres => conn
            .prepare_cached(
                "DELETE FROM job_search_pending WHERE job IN (
                     SELECT job FROM job_search_pending ORDER BY job LIMIT $1 FOR UPDATE SKIP LOCKED)
                 RETURNING job",
            )?
            .query_map([batch_of(conn.dialect())], |r| r.get("job"))?
            .collect::<sql::Result<_>>()?,
    };
    if ids.is_empty() {
        return Ok(0);
    }
    let batch = sql::json_batch(&ids)?;
    match conn.dialect() {
        Dialect::Sqlite => {
            let f = fold::SQLITE_FUNCTION;
            conn.prepare_cached(&format!("DELETE FROM job_search WHERE {}", sql::id_in_json(Dialect::Sqlite, "rowid", 1)))?
                .execute(params![batch])?;
            conn.prepare_cached(&format!(
                "INSERT INTO job_search (rowid, folded_id, folded_label, folded_group)
                 SELECT id, {f}(job_id), {f}(label), {f}(group_name) FROM jobs WHERE {}",
                sql::id_in_json(Dialect::Sqlite, "id", 1)
            ))?
            .execute(params![batch])?;
            conn.prepare_cached(&format!("DELETE FROM job_search_short WHERE {}", sql::id_in_json(Dialect::Sqlite, "rowid", 1)))?
                .execute(params![batch])?;
            conn.prepare_cached(&format!(
                "INSERT INTO job_search_short (rowid, grams) SELECT id, {SQLITE_SHORT_GRAMS}(job_id, label, group_name) FROM jobs WHERE {}",
                sql::id_in_json(Dialect::Sqlite, "id", 1)
            ))?
            .execute(params![batch])?;
        }
        Dialect::Postgres => {
            conn.prepare_cached(&format!("DELETE FROM job_search WHERE {}", sql::id_in_json(Dialect::Postgres, "id", 1)))?
                .execute(params![batch])?;
            conn.prepare_cached(&format!(
                "INSERT INTO job_search (id, folded) SELECT id, {POSTGRES_SEARCH_TEXT} FROM jobs WHERE {}",
                sql::id_in_json(Dialect::Postgres, "id", 1)
            ))?
            .execute(params![batch])?;
            // The batch's entries, gathered in the GIN index's pending list, merged into it sorted.
            conn.prepare_cached(
                "SELECT gin_clean_pending_list(to_regclass('job_search_grams')) WHERE to_regclass('job_search_grams') IS NOT NULL",
            )?
            .query([])?;
        }
    }
    Ok(ids.len())
}

/// How many jobs wait for the index.
pub fn pending(conn: &dyn Db) -> sql::Result<i64> {
    conn.prepare_cached("SELECT count(*) FROM job_search_pending")?.query_row([], |r| r.get(0))
}

/// Whether any job waits for the index (read before a write is asked of the writer: an idle
/// instance writes nothing).
pub fn any_pending(conn: &dyn Db) -> sql::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM job_search_pending LIMIT 1")?.query_row([], |_| Ok(())).optional().map(|found| found.is_some())
}

#[cfg(test)]
mod tests {
    use super::{postgres_term_grams, short_grams, sqlite_short_grams, sqlite_short_term, sqlite_trigrams};

    #[test]
    fn a_texts_short_terms_are_its_one_and_two_character_sequences_never_across_two_texts() {
        assert_eq!(short_grams("über\nab"), ["ü", "b", "e", "r", "a", "b", "üb", "be", "er", "ab"]);
        assert_eq!(short_grams("a"), ["a"]);
        assert_eq!(short_grams("").len(), 0);
        // Folded, hex, distinct, sorted; a job's three texts, a missing one skipped.
        assert_eq!(sqlite_short_grams([Some("Ab"), None, Some("b")]), "61 6162 62");
        assert_eq!(sqlite_short_grams([Some("ẞ")]), "73 7373");
        assert_eq!(sqlite_short_grams([Some("日")]), "e697a5");
        assert_eq!(sqlite_short_term("ab"), r#""6162""#);
    }

    #[test]
    fn postgres_asks_for_a_short_term_itself_and_for_a_longer_ones_pairs_that_do_not_overlap() {
        assert_eq!(postgres_term_grams("j"), ["j"]);
        assert_eq!(postgres_term_grams("j1"), ["j1"]);
        assert_eq!(postgres_term_grams("j10"), ["10", "j1"]);
        assert_eq!(postgres_term_grams("abcde"), ["ab", "cd", "de"]);
        assert_eq!(postgres_term_grams("abab"), ["ab"]);
        assert_eq!(postgres_term_grams("日本語"), ["日本", "本語"]);
        assert!(postgres_term_grams("a\nb").is_empty());
        assert_eq!(postgres_term_grams("ab\ncd"), ["ab", "cd"]);
        assert!(postgres_term_grams("").is_empty());
    }

    #[test]
    fn a_terms_trigrams_are_each_quoted_once_and_a_short_term_has_none() {
        assert_eq!(sqlite_trigrams("abcab").as_deref(), Some(r#""abc" AND "cab""#));
        assert_eq!(sqlite_trigrams("abcdefg").as_deref(), Some(r#""abc" AND "def" AND "efg""#));
        assert_eq!(sqlite_trigrams("abcabc").as_deref(), Some(r#""abc""#));
        assert_eq!(sqlite_trigrams(r#"a"b"#).as_deref(), Some(r#""a""b""#));
        assert_eq!(sqlite_trigrams("日本語").as_deref(), Some(r#""日本語""#));
        assert_eq!(sqlite_trigrams("ab"), None);
    }
}

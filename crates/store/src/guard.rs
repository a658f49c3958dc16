//! The merge's one rule, written once per dialect, side by side, so a reader sees they are the
//! same: a job only moves forward (rank first, then `seq` within the same non-terminal rank) and
//! a terminal state is a sink. The rule is the `WHERE` of the guarded upsert itself
//! (`INSERT ... ON CONFLICT (provider, job_id) DO UPDATE ... WHERE <rule> RETURNING ...`): no `if`
//! before the write decides anything, so the database alone serializes any number of writers,
//! threads of one process (SQLite) or `serve` processes of a fleet (PostgreSQL).
//!
//! The two statements differ only where the dialects do: how a parameter is written (`?n`, and
//! `$n` with its type, as PostgreSQL cannot infer the type of a parameter compared with another),
//! and the earliest start (SQLite's two-argument `min()` is NULL when either is; PostgreSQL's
//! `LEAST` skips NULLs). Both number their parameters the same way: 1 provider, 2 job id, 3
//! label, 4 state, 5 rank, 6 seq, 7 error, 8 detail (a note of the state it came with: kept while the job stays in that state, gone with it), 9 now, 10 finished at, 11 source, 12 the
//! terminal rank, 13 started at, 14 the result (JSON text: a later event's result replaces an earlier one only when
//! the event is adopted, and an adopted event without one keeps what was known), 15 the provider's
//! page (the same), 16 the job's kind (kept once known, as a label is); both return the job's columns (`job_columns!()`) and its `rank`, read by name.

use super::jobs::job_columns;

/// The rule, with the terminal rank as the dialect's parameter.
macro_rules! forward_only {
    ($terminal_rank:literal) => {
        concat!(
            "excluded.rank > jobs.rank
             OR (excluded.rank = jobs.rank AND jobs.rank < ",
            $terminal_rank,
            " AND (jobs.seq IS NULL OR excluded.seq > jobs.seq))"
        )
    };
}

/// What an adopted event sets, beside its earliest start (the same in both dialects).
macro_rules! adopted {
    () => {
        "state = excluded.state,
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
         job_kind = COALESCE(jobs.job_kind, excluded.job_kind)"
    };
}

/// SQLite.
pub const SQLITE_UPSERT: &str = concat!(
    "INSERT INTO jobs (provider, job_id, label, state, rank, seq, error, detail, created_at, updated_at,
                       finished_at, terminal_source, started_at, result, provider_url, job_kind)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9,
             CASE WHEN ?5 = ?12 THEN COALESCE(?10, ?9) END,
             CASE WHEN ?5 = ?12 THEN ?11 END, ?13, ?14, ?15, ?16)
     ON CONFLICT (provider, job_id) DO UPDATE SET
         started_at = COALESCE(min(jobs.started_at, excluded.started_at), jobs.started_at, excluded.started_at),
",
    adopted!(),
    "
     WHERE ",
    forward_only!("?12"),
    "
     RETURNING ",
    job_columns!(),
    ", rank"
);

/// PostgreSQL.
pub const POSTGRES_UPSERT: &str = concat!(
    "INSERT INTO jobs (provider, job_id, label, state, rank, seq, error, detail, created_at, updated_at,
                       finished_at, terminal_source, started_at, result, provider_url, job_kind)
     VALUES ($1, $2, $3, $4, $5::BIGINT, $6::BIGINT, $7, $8, $9::BIGINT, $9::BIGINT,
             CASE WHEN $5::BIGINT = $12::BIGINT THEN COALESCE($10::BIGINT, $9::BIGINT) END,
             CASE WHEN $5::BIGINT = $12::BIGINT THEN $11::TEXT END, $13::BIGINT, $14::TEXT, $15::TEXT, $16::TEXT)
     ON CONFLICT (provider, job_id) DO UPDATE SET
         started_at = LEAST(jobs.started_at, excluded.started_at),
",
    adopted!(),
    "
     WHERE ",
    forward_only!("$12::BIGINT"),
    "
     RETURNING ",
    job_columns!(),
    ", rank"
);

/// The push path's own copy, in the server-side function `nevermiss_push_group` (PostgreSQL, a
/// group of deliveries per call: `postgres/push_path.sql`, installed after the numbered files):
/// the same upsert with the function's parameter names. It cannot name this file's text, so the
/// test below holds it to the same rule and the same adopted columns.
#[cfg(test)]
const POSTGRES_PUSH_FUNCTION: &str = crate::migrations::POSTGRES_PUSH_PATH;

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// The text between `from` (its first occurrence after the job upsert's conflict clause) and
    /// `to`, whitespace made single.
    fn after_conflict(statement: &str, from: &str, to: &str) -> String {
        let upsert = statement.find("ON CONFLICT (provider, job_id) DO UPDATE SET").expect("the job upsert");
        let at = upsert + statement[upsert..].find(from).expect(from) + from.len();
        let end = at + statement[at..].find(to).expect(to);
        words(&statement[at..end])
    }

    /// `nevermiss_push_group` (`postgres/push_path.sql`) carries the same rule, and sets the same columns on an
    /// adopted event, as the guarded upsert: the rule is written once per dialect.
    #[test]
    fn the_push_function_carries_the_same_rule_and_sets_the_same_columns() {
        let rule = |statement: &str, param: &str| after_conflict(statement, "WHERE ", "RETURNING").replace(param, "T");
        assert_eq!(rule(POSTGRES_PUSH_FUNCTION, "p_terminal_rank"), rule(POSTGRES_UPSERT, "$12::BIGINT"));
        let set = |statement: &str| after_conflict(statement, "DO UPDATE SET", "WHERE ");
        assert_eq!(set(POSTGRES_PUSH_FUNCTION), set(POSTGRES_UPSERT));
        assert!(set(POSTGRES_UPSERT).contains(&words(adopted!())), "{}", set(POSTGRES_UPSERT));
    }

    /// The three upserts insert the same columns (a new job column, such as the kind, is in each).
    #[test]
    fn the_three_upserts_insert_the_same_columns() {
        let columns = |statement: &str| {
            let at = statement.find("INSERT INTO jobs (").expect("the job upsert") + "INSERT INTO jobs (".len();
            words(&statement[at..at + statement[at..].find(')').expect("the column list")])
        };
        let sqlite = columns(SQLITE_UPSERT);
        assert_eq!(columns(POSTGRES_UPSERT), sqlite);
        assert_eq!(columns(POSTGRES_PUSH_FUNCTION), sqlite);
        assert!(sqlite.ends_with("result, provider_url, job_kind"), "{sqlite}");
    }

    /// The rule's text is in both statements, whole and the same but for the parameter.
    #[test]
    fn both_dialects_carry_the_same_rule() {
        let rule = |statement: &str, param: &str| {
            let at = statement.find("WHERE ").expect("a guard") + "WHERE ".len();
            let end = statement.find("RETURNING").expect("a returning");
            statement[at..end].replace(param, "T").split_whitespace().collect::<Vec<_>>().join(" ")
        };
        let sqlite = rule(SQLITE_UPSERT, "?12");
        assert_eq!(sqlite, rule(POSTGRES_UPSERT, "$12::BIGINT"));
        assert_eq!(
            sqlite,
            "excluded.rank > jobs.rank OR (excluded.rank = jobs.rank AND jobs.rank < T AND (jobs.seq IS NULL OR excluded.seq > jobs.seq))"
        );
    }
}

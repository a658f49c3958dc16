//! The schema: numbered SQL files, one folder per dialect (`crates/store/migrations/sqlite`,
//! `crates/store/migrations/postgres`), embedded at build time and applied in order by refinery,
//! which records each applied file, with its checksum, in `refinery_schema_history` (a file
//! edited after it was applied is refused). Append only: a released migration is never edited.
//!
//! Before refinery, NeverMiss kept its own record: SQLite's `PRAGMA user_version`, PostgreSQL's
//! `schema_migrations`. Each file still writes that record in its own transaction, so that an
//! older build refuses a database newer than it knows; and a database made before refinery (that
//! record at N, no history) gets files 1..N recorded as applied without running them (the
//! baseline), then the rest run. A database newer than this build is refused.

use refinery::{Runner, Target};
use rusqlite::Connection;

use crate::sql::DbError;

mod sqlite_files {
    refinery::embed_migrations!("migrations/sqlite");
}

mod postgres_files {
    refinery::embed_migrations!("migrations/postgres");
}

/// refinery's record of the applied files (its default name).
pub const HISTORY: &str = "refinery_schema_history";

/// The advisory lock a fleet's processes take around PostgreSQL's migrations, so that processes
/// starting together migrate once (any constant shared by every process).
const POSTGRES_LOCK: i64 = 0x6e65_7665_726d_6973; // "nevermis"

/// The SQLite schema version this build knows (its last file).
pub fn sqlite_version() -> i64 {
    last_version(&sqlite_files::migrations::runner())
}

/// The PostgreSQL schema version this build knows (its last file).
pub fn postgres_version() -> i64 {
    last_version(&postgres_files::migrations::runner())
}

/// The PostgreSQL files' SQL, in order with their versions: for tests that build a database as the
/// code before refinery did.
pub fn postgres_files() -> Vec<(i64, String)> {
    let runner = postgres_files::migrations::runner();
    let mut files: Vec<_> =
        runner.get_migrations().iter().map(|m| (i64::from(m.version()), m.sql().unwrap_or_default().to_owned())).collect();
    files.sort();
    files
}

fn last_version(runner: &Runner) -> i64 {
    runner.get_migrations().iter().map(|m| i64::from(m.version())).max().unwrap_or(0)
}

/// What opening a database found: the version this build knows, the old record's (SQLite's
/// `user_version`, PostgreSQL's `schema_migrations`), and refinery's last applied file, if it
/// has a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found {
    known: i64,
    recorded: i64,
    history: Option<i64>,
}

/// What to do before refinery runs the files this database lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Record files 1..=N as applied without running them: the database was made before refinery.
    Baseline(i64),
    /// refinery's history is the truth (or the database is empty).
    Run,
}

/// Validates what was found: a database newer than this build is refused.
fn plan(found: Found) -> Result<Plan, DbError> {
    let newest = found.recorded.max(found.history.unwrap_or(0));
    if newest > found.known {
        return Err(DbError::Schema(format!(
            "the database is at schema version {newest}, newer than this NeverMiss ({}); upgrade NeverMiss",
            found.known
        )));
    }
    Ok(match found.history {
        None if found.recorded > 0 => Plan::Baseline(found.recorded),
        _ => Plan::Run,
    })
}

fn baseline_target(version: i64) -> Result<Target, DbError> {
    let version = version.try_into().map_err(|_| DbError::Schema(format!("schema version {version} is out of range")))?;
    Ok(Target::FakeVersion(version))
}

/// Says what migrating did: an upgrade at info level, a new database's schema made (the first
/// start) at debug level only.
fn report_migrated(database: &str, applied: usize, found: Found) {
    let from = found.history.unwrap_or(found.recorded);
    if from == 0 {
        tracing::debug!(applied, version = found.known, "a new {database} schema made");
    } else {
        tracing::info!(applied, from, version = found.known, "the {database} schema migrated");
    }
}

/// Brings a SQLite file's schema up to date, each file in its own transaction. Refuses a
/// database written by a newer NeverMiss.
pub fn migrate(conn: &mut Connection) -> Result<(), DbError> {
    // The schema calls the store's fold and short terms (the search index, V18 and V19).
    super::fold::register(conn)?;
    let runner = sqlite_files::migrations::runner();
    let recorded: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let has_history: bool =
        conn.query_row("SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1", [HISTORY], |r| r.get(0))?;
    let history = match has_history {
        true => runner.get_last_applied_migration(conn)?.map(|m| i64::from(m.version())),
        false => None,
    };
    let found = Found { known: last_version(&runner), recorded, history };
    if let Plan::Baseline(version) = plan(found)? {
        sqlite_files::migrations::runner().set_target(baseline_target(version)?).run(conn)?;
        tracing::info!(version, "the SQLite schema's history recorded (made before refinery)");
    }
    let report = runner.run(conn)?;
    if !report.applied_migrations().is_empty() {
        report_migrated("SQLite", report.applied_migrations().len(), found);
    }
    Ok(())
}

/// Brings a PostgreSQL database's schema up to date: every file it lacks in one transaction,
/// under an advisory lock held by this connection for the whole of it (so processes starting
/// together migrate once). Refuses a database written by a newer NeverMiss. The connection is
/// the caller's to close afterwards (that releases the lock too, should the unlock fail).
pub async fn migrate_postgres(client: &mut tokio_postgres::Client) -> Result<(), DbError> {
    client.execute("SELECT pg_advisory_lock($1)", &[&POSTGRES_LOCK]).await?;
    let migrated = migrate_postgres_locked(client).await;
    let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&POSTGRES_LOCK]).await;
    migrated?;
    unlocked?;
    Ok(())
}

async fn migrate_postgres_locked(client: &mut tokio_postgres::Client) -> Result<(), DbError> {
    let runner = postgres_files::migrations::runner().set_grouped(true);
    let exists = "SELECT to_regclass($1) IS NOT NULL";
    let recorded: i64 = match client.query_one(exists, &[&"schema_migrations"]).await?.get::<_, bool>(0) {
        true => client.query_one("SELECT COALESCE(max(version), 0) FROM schema_migrations", &[]).await?.get(0),
        false => 0,
    };
    let history = match client.query_one(exists, &[&HISTORY]).await?.get::<_, bool>(0) {
        true => runner.get_last_applied_migration_async(client).await?.map(|m| i64::from(m.version())),
        false => None,
    };
    let found = Found { known: last_version(&runner), recorded, history };
    if let Plan::Baseline(version) = plan(found)? {
        postgres_files::migrations::runner().set_target(baseline_target(version)?).run_async(client).await?;
        tracing::info!(version, "the PostgreSQL schema's history recorded (made before refinery)");
    }
    let report = runner.run_async(client).await?;
    if !report.applied_migrations().is_empty() {
        report_migrated("PostgreSQL", report.applied_migrations().len(), found);
    }
    install_push_path(client).await?;
    Ok(())
}

/// The push path's server-side functions, their current text (one file: a change to them is made
/// there, not copied into a numbered file), installed after the numbered files.
pub const POSTGRES_PUSH_PATH: &str = include_str!("../postgres/push_path.sql");

/// Installs `POSTGRES_PUSH_PATH` (`CREATE OR REPLACE`) when the database holds another text of it,
/// in one transaction, and marks the text installed (its MD5, as the comment of
/// `nevermiss_jobs_changed`): a start with the same text replaces nothing.
async fn install_push_path(client: &mut tokio_postgres::Client) -> Result<(), DbError> {
    let (installed, wanted): (Option<String>, String) = {
        let row = client
            .query_one(
                "SELECT obj_description('nevermiss_jobs_changed()'::regprocedure, 'pg_proc'), 'push path ' || md5($1)",
                &[&POSTGRES_PUSH_PATH],
            )
            .await?;
        (row.get(0), row.get(1))
    };
    if installed.as_deref() == Some(wanted.as_str()) {
        return Ok(());
    }
    let tx = client.transaction().await?;
    tx.batch_execute(POSTGRES_PUSH_PATH).await?;
    tx.batch_execute(&format!("COMMENT ON FUNCTION nevermiss_jobs_changed() IS '{wanted}'")).await?;
    tx.commit().await?;
    tracing::info!("the PostgreSQL push path's functions installed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files' SQL, in order, as the code before refinery applied them.
    fn sqlite_sql() -> Vec<String> {
        let runner = sqlite_files::migrations::runner();
        let mut files: Vec<_> = runner.get_migrations().iter().map(|m| (m.version(), m.sql().unwrap().to_owned())).collect();
        files.sort();
        files.into_iter().map(|(_, sql)| sql).collect()
    }

    /// What NeverMiss before refinery did (its `migrate`, verbatim but for the SQL's source): each
    /// migration in its own transaction, the version in `user_version`; here up to `version`.
    fn migrate_as_before_refinery(conn: &mut Connection, version: usize) {
        for (index, sql) in sqlite_sql().iter().enumerate().take(version) {
            let tx = conn.transaction().unwrap();
            tx.execute_batch(sql).unwrap();
            tx.pragma_update(None, "user_version", (index + 1) as i64).unwrap();
            tx.commit().unwrap();
        }
    }

    /// The schema as SQLite prints it, refinery's own table left out.
    fn schema(conn: &Connection) -> Vec<String> {
        let mut statement = conn
            .prepare("SELECT type || ' ' || name || ': ' || COALESCE(sql, '') FROM sqlite_master WHERE name <> ?1 ORDER BY type, name")
            .unwrap();
        statement.query_map([HISTORY], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    }

    fn history(conn: &Connection) -> Vec<i64> {
        let mut statement = conn.prepare(&format!("SELECT version FROM {HISTORY} ORDER BY version")).unwrap();
        statement.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    }

    fn user_version(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
    }

    /// The SQLite files' versions, in order (numbers reserved by work not merged may be missing).
    fn sqlite_file_versions() -> Vec<i64> {
        let mut versions: Vec<i64> = sqlite_files::migrations::runner().get_migrations().iter().map(|m| i64::from(m.version())).collect();
        versions.sort();
        versions
    }

    #[test]
    fn the_files_are_numbered_from_one_the_first_eight_as_the_versions_before_refinery() {
        let versions = sqlite_file_versions();
        assert_eq!(versions[..9], [1, 2, 3, 4, 5, 6, 7, 8, 9], "the first nine SQLite files");
        assert_eq!(versions.last().copied(), Some(sqlite_version()));
        assert!(sqlite_version() >= 11, "groups are SQLite's V11");
        assert!(postgres_version() >= 6, "groups are PostgreSQL's V4, the push function V6");
    }

    /// Released schemas data dirs are at, made by refinery: SQLite's V9 (the first refinery
    /// release), V12 (job kinds and durations) and V13 (the last one released: a duration of a
    /// kind learned late).
    const RELEASED_SQLITE: [i64; 3] = [9, 12, 13];

    /// A data dir made by a released build (refinery, to V9, V12 or V13) with a job, a delivery,
    /// a notification and timeline events in it takes the newer files and keeps its rows, and ends
    /// with the very schema a fresh file has. Its events name their job's row from V14 on (one of
    /// a job that does not exist names none).
    #[test]
    fn a_file_made_by_the_released_schema_takes_the_newer_files_and_keeps_its_rows() {
        for released in RELEASED_SQLITE {
            a_file_made_at_takes_the_newer_files_and_keeps_its_rows(released);
        }
    }

    fn a_file_made_at_takes_the_newer_files_and_keeps_its_rows(released_version: i64) {
        let dir = tempfile::tempdir().unwrap();
        let fresh = {
            let mut conn = Connection::open(dir.path().join("fresh.db")).unwrap();
            migrate(&mut conn).unwrap();
            schema(&conn)
        };
        let path = dir.path().join("released.db");
        {
            let mut conn = Connection::open(&path).unwrap();
            let released = i32::try_from(released_version).unwrap();
            sqlite_files::migrations::runner().set_target(Target::Version(released)).run(&mut conn).unwrap();
            assert_eq!(user_version(&conn), released_version);
            conn.execute_batch(
                "INSERT INTO jobs (provider, job_id, state, rank, created_at, updated_at) VALUES ('replicate', 'p1', 'running', 2, 1, 2);
                 INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
                     VALUES ('replicate', 'd1', 'p1', 2, 'accepted', '{}', x'7b7d', 0);
                 INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, next_attempt_at)
                     VALUES ('desktop', 'replicate', 'p1', 'terminal', 'succeeded', 2, 2);
                 INSERT INTO job_events (provider, job_id, at, source, delivery_id, state, seq, outcome)
                     VALUES ('replicate', 'p1', 2, 'push', 'd1', 'running', 1, 'applied'),
                            ('replicate', 'unknown', 3, 'push', 'd2', NULL, NULL, 'rejected');",
            )
            .unwrap();
        }
        let mut conn = Connection::open(&path).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(history(&conn), sqlite_file_versions());
        assert_eq!(user_version(&conn), sqlite_version());
        assert_eq!(schema(&conn), fresh);
        let kept: (String, Option<String>, i64, i64) = conn
            .query_row(
                "SELECT state, group_name, (SELECT count(*) FROM deliveries), (SELECT count(*) FROM outbox) FROM jobs WHERE job_id = 'p1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(kept, ("running".to_owned(), None, 1, 1), "from V{released_version}");
        let events: Vec<(String, Option<i64>)> = conn
            .prepare("SELECT job_id, job_ref FROM job_events ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let p1: i64 = conn.query_row("SELECT id FROM jobs WHERE job_id = 'p1'", [], |r| r.get(0)).unwrap();
        assert_eq!(events, [("p1".to_owned(), Some(p1)), ("unknown".to_owned(), None)], "from V{released_version}");
    }

    /// A fresh file gets every migration, its history and its `user_version`; opening it again
    /// changes nothing.
    #[test]
    fn a_fresh_file_is_migrated_and_its_version_recorded_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("fresh.db")).unwrap();
        migrate(&mut conn).unwrap();
        let current = sqlite_version();
        assert_eq!(history(&conn), sqlite_file_versions());
        assert_eq!(user_version(&conn), current);
        let before = schema(&conn);
        migrate(&mut conn).unwrap();
        assert_eq!((schema(&conn), history(&conn)), (before, sqlite_file_versions()));
    }

    /// A file made by the code before refinery, at each of its versions, with a job in it (and,
    /// from version 5, a refused request): refinery takes it over (files 1..N recorded, not run
    /// again), migrates the rest, keeps the rows, and ends with the very schema a fresh file has.
    #[test]
    fn a_file_made_before_refinery_at_any_version_is_taken_over_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = {
            let mut conn = Connection::open(dir.path().join("fresh.db")).unwrap();
            migrate(&mut conn).unwrap();
            schema(&conn)
        };
        for version in 1..=8 {
            let path = dir.path().join(format!("at-{version}.db"));
            {
                let mut conn = Connection::open(&path).unwrap();
                migrate_as_before_refinery(&mut conn, version);
                conn.execute(
                    "INSERT INTO jobs (provider, job_id, state, rank, created_at, updated_at) VALUES ('replicate', 'p1', 'running', 2, 1, 1)",
                    [],
                )
                .unwrap();
                if version >= 5 {
                    conn.execute(
                        "INSERT INTO refused (received_at, provider, status, kind, error, cause, headers, body, body_length)
                         VALUES (1, 'replicate', 401, 'bad_signature', 'e', 'c', '{}', x'00', 1)",
                        [],
                    )
                    .unwrap();
                }
            }
            let mut conn = Connection::open(&path).unwrap();
            migrate(&mut conn).unwrap_or_else(|e| panic!("from version {version}: {e}"));
            assert_eq!(history(&conn), sqlite_file_versions(), "from version {version}");
            assert_eq!(user_version(&conn), sqlite_version(), "from version {version}");
            assert_eq!(schema(&conn), fresh, "from version {version}");
            let state: String = conn.query_row("SELECT state FROM jobs WHERE job_id = 'p1'", [], |r| r.get(0)).unwrap();
            assert_eq!(state, "running", "from version {version}");
            let refused: i64 = conn.query_row("SELECT count(*) FROM refused", [], |r| r.get(0)).unwrap();
            assert_eq!(refused, i64::from(version >= 5), "from version {version}");
            migrate(&mut conn).unwrap();
            assert_eq!(history(&conn), sqlite_file_versions());
        }
    }

    /// A file from a newer NeverMiss is refused, whichever record says so; an applied file
    /// that was edited since is refused too.
    #[test]
    fn a_newer_or_edited_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let newer_build_of_before = dir.path().join("user-version.db");
        {
            let mut conn = Connection::open(&newer_build_of_before).unwrap();
            migrate_as_before_refinery(&mut conn, 8);
            conn.pragma_update(None, "user_version", sqlite_version() + 1).unwrap();
        }
        let refused = migrate(&mut Connection::open(&newer_build_of_before).unwrap()).unwrap_err().to_string();
        let expected = format!("version {}, newer than this NeverMiss ({})", sqlite_version() + 1, sqlite_version());
        assert!(refused.contains(&expected), "{refused}");

        let mut conn = Connection::open(dir.path().join("history.db")).unwrap();
        migrate(&mut conn).unwrap();
        conn.execute(&format!("INSERT INTO {HISTORY} SELECT 99, 'later', applied_on, checksum FROM {HISTORY} WHERE version = 8"), [])
            .unwrap();
        let refused = migrate(&mut conn).unwrap_err().to_string();
        assert!(refused.contains("version 99, newer than this NeverMiss"), "{refused}");

        conn.execute(&format!("DELETE FROM {HISTORY} WHERE version = 99"), []).unwrap();
        conn.execute(&format!("UPDATE {HISTORY} SET checksum = '1' WHERE version = 3"), []).unwrap();
        let refused = migrate(&mut conn).unwrap_err().to_string();
        assert!(refused.contains("different"), "{refused}");
    }

    #[test]
    fn the_plan_baselines_a_database_made_before_refinery_and_refuses_a_newer_one() {
        let found = |recorded, history| Found { known: 8, recorded, history };
        assert_eq!(plan(found(0, None)).unwrap(), Plan::Run);
        assert_eq!(plan(found(5, None)).unwrap(), Plan::Baseline(5));
        assert_eq!(plan(found(8, Some(8))).unwrap(), Plan::Run);
        assert_eq!(plan(found(6, Some(6))).unwrap(), Plan::Run);
        assert!(plan(found(9, None)).is_err());
        assert!(plan(found(8, Some(9))).is_err());
    }
}

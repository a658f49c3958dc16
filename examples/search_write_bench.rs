//! Benchmark: what the job search's index and the counts kept at write (SQLite's V18, PostgreSQL's
//! V13 and `nevermiss_jobs_changed`) cost on the write path, against the same schema without them,
//! in the same run.
//!
//! A store holding 100,000 finished jobs of history is copied for every run; into it, 64 writers
//! push new jobs through the merge point as the receiver does (`queued`, `running`, `succeeded`:
//! three deliveries a job, one new job row, one end announced). Two variants, the first of a round
//! alternating: `kept` (the schema as migrated, with the engine's indexer writing the search index
//! beside the writers, its last batch inside the time) and `without` (the triggers of the search
//! index's queue and of the counts dropped; on PostgreSQL the GIN index dropped and
//! `nevermiss_jobs_changed` as V10 wrote it). Prints µs a job per run, and each
//! round's `kept / without`.
//!
//!     cargo run --release -p nevermiss-engine --example search_write_bench -- [--jobs 3000] [--rounds 3]
//!         [--postgres postgres://user@host:port/]   (databases made and dropped there)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nevermiss_engine::merge_point::{self, PushDelivery};
use nevermiss_engine::search_index;
use nevermiss_engine::store::deliveries::RawRequest;
use nevermiss_engine::store::job::{now_ms, JobEvent, JobState};
use nevermiss_engine::store::sql::params;
use nevermiss_engine::store::Store;

const HISTORY: i64 = 100_000;
const WRITERS: usize = 64;

struct Args {
    jobs: usize,
    rounds: usize,
    postgres: Option<String>,
}

fn args() -> Args {
    let mut a = Args { jobs: 3_000, rounds: 3, postgres: None };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        match (pair[0].as_str(), pair.get(1)) {
            ("--jobs", Some(v)) => a.jobs = v.parse().expect("a number"),
            ("--rounds", Some(v)) => a.rounds = v.parse().expect("a number"),
            ("--postgres", Some(v)) => a.postgres = Some(v.clone()),
            _ => panic!("usage: search_write_bench [--jobs N] [--rounds N] [--postgres postgres://user@host:port/]"),
        }
    }
    a
}

/// The history: finished jobs with labels, one in ten in a group (the same rows on both databases).
async fn load_history(store: &Store) {
    let series = match store.dialect() {
        nevermiss_engine::store::sql::Dialect::Sqlite => "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $1)",
        nevermiss_engine::store::sql::Dialect::Postgres => "WITH n(i) AS (SELECT generate_series(0, $1::BIGINT - 1))",
    };
    let sql = format!(
        "{series} INSERT INTO jobs (provider, job_id, label, state, rank, seq, created_at, updated_at, finished_at, terminal_source, group_name)
         SELECT 'generic', 'h' || i, 'render history ' || i, 'succeeded', 3, 3, $2 + i, $2 + i + 60000, $2 + i + 60000, 'push',
                CASE WHEN i % 10 = 1 THEN 'sweep-' || (i / 200) END FROM n"
    );
    let now = now_ms() - 86_400_000;
    store.write(move |tx| tx.execute(&sql, params![HISTORY, now]).map(drop)).await.unwrap();
    search_index::catch_up(store).await.unwrap();
}

fn events(run: usize, i: usize) -> [JobEvent; 3] {
    let job_id = format!("r{run}-job-{i:06}");
    let with = |state, seq| JobEvent { label: Some(format!("render gamma {i}")), ..JobEvent::new("generic", &job_id, state, seq) };
    [with(JobState::Queued, 1), with(JobState::Running, 2), with(JobState::Succeeded, 3)]
}

/// µs a job, `WRITERS` writers at once; with `index`, the engine's indexer beside them (every
/// second, and once more at the end: its time counts).
async fn write_path(store: Arc<Store>, run: usize, jobs: usize, index: bool) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let done = tokio_util::sync::CancellationToken::new();
    let indexer = index.then(|| tokio::spawn(search_index::run((*store).clone(), done.clone())));
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (store, next) = (store.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= jobs {
                        return;
                    }
                    for (n, event) in events(run, i).into_iter().enumerate() {
                        let push = PushDelivery { delivery_id: format!("d-{run}-{i}-{n}"), event, raw: RawRequest::default() };
                        merge_point::push(&store, push).await.expect("the write commits");
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    if let Some(indexer) = indexer {
        done.cancel();
        indexer.await.unwrap();
        search_index::catch_up(&store).await.unwrap();
    }
    started.elapsed().as_secs_f64() * 1e6 / jobs as f64
}

/// Which variant runs first alternates round by round.
fn order(round: usize) -> [bool; 2] {
    if round % 2 == 1 {
        [false, true]
    } else {
        [true, false]
    }
}

const SQLITE_WITHOUT: &str = "
    DROP TRIGGER jobs_search_insert; DROP TRIGGER jobs_search_update; DROP TRIGGER jobs_search_delete;
    DROP TRIGGER jobs_unfinished_count_insert; DROP TRIGGER jobs_unfinished_count_update; DROP TRIGGER jobs_unfinished_count_delete;";

/// `nevermiss_jobs_changed` as V10 wrote it (before the counts).
fn postgres_jobs_changed_of_v10() -> String {
    const V10: &str = include_str!("../crates/store/migrations/postgres/V10__push_group_set_based.sql");
    let start = V10.find("CREATE FUNCTION nevermiss_jobs_changed").expect("V10's function");
    let end = start + V10[start..].find("END $$;").expect("its end") + "END $$;".len();
    V10[start..end].replacen("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
}

async fn sqlite_rounds(a: &Args) {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("history.db");
    {
        let store = Store::open(&template).unwrap();
        load_history(&store).await;
        assert!(store.close());
        let conn = rusqlite::Connection::open(&template).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
    }
    println!("SQLite, {} jobs a run on {HISTORY} finished, {WRITERS} writers: µs a job", a.jobs);
    let mut run = 0;
    for round in 1..=a.rounds {
        let mut figures = [0.0; 2];
        for without in order(round) {
            run += 1;
            let path = dir.path().join(format!("run-{run}.db"));
            std::fs::copy(&template, &path).unwrap();
            if without {
                let conn = rusqlite::Connection::open(&path).unwrap();
                conn.execute_batch(SQLITE_WITHOUT).unwrap();
            }
            let store = Arc::new(Store::open(&path).unwrap());
            figures[without as usize] = write_path(store.clone(), run, a.jobs, !without).await;
            Arc::try_unwrap(store).ok().expect("the last handle").close();
            std::fs::remove_file(&path).ok();
        }
        println!("  round {round}: kept {:.1}, without {:.1}, kept / without {:.3}", figures[0], figures[1], figures[0] / figures[1]);
    }
}

async fn postgres_rounds(a: &Args, base: &str) {
    let (admin, connection) = tokio_postgres::connect(&format!("{base}postgres"), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    admin.batch_execute("DROP DATABASE IF EXISTS bench_history").await.unwrap();
    admin.batch_execute("CREATE DATABASE bench_history").await.unwrap();
    {
        let store = Store::connect(&format!("{base}bench_history"), Default::default(), "bench").await.unwrap();
        load_history(&store).await;
    }
    println!("PostgreSQL, {} jobs a run on {HISTORY} finished, {WRITERS} writers: µs a job", a.jobs);
    let mut run = 0;
    for round in 1..=a.rounds {
        let mut figures = [0.0; 2];
        for without in order(round) {
            run += 1;
            let name = format!("bench_run_{run}");
            // The template's connections close shortly after its pool is dropped.
            let mut tries = 0;
            while let Err(e) = admin.batch_execute(&format!("CREATE DATABASE {name} TEMPLATE bench_history")).await {
                tries += 1;
                assert!(tries < 100, "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let url = format!("{base}{name}");
            if without {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(connection);
                client.batch_execute(&format!("DROP INDEX job_search_grams; {}", postgres_jobs_changed_of_v10())).await.unwrap();
            }
            let store = Arc::new(Store::connect(&url, Default::default(), "bench").await.unwrap());
            let counts: bool = store
                .read(|db| {
                    db.query_row(
                        "SELECT prosrc LIKE '%unfinished_counts%' FROM pg_proc WHERE proname = 'nevermiss_jobs_changed'",
                        [],
                        |r| r.get(0),
                    )
                })
                .await
                .unwrap();
            assert_eq!(counts, !without, "the variant's function");
            figures[without as usize] = write_path(store.clone(), run, a.jobs, !without).await;
            drop(store);
            tokio::time::sleep(Duration::from_millis(300)).await;
            admin.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)")).await.unwrap();
        }
        println!("  round {round}: kept {:.1}, without {:.1}, kept / without {:.3}", figures[0], figures[1], figures[0] / figures[1]);
    }
    admin.batch_execute("DROP DATABASE bench_history WITH (FORCE)").await.unwrap();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    sqlite_rounds(&a).await;
    if let Some(base) = a.postgres.clone() {
        postgres_rounds(&a, &base).await;
    }
}

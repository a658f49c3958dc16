//! Benchmark: every read the Jobs, job and Metrics screens make, at 1,000 jobs and at 1,000,000,
//! on SQLite and on PostgreSQL: each read's median of 15 calls and its growth (the large store's
//! median over the small one's, in the same run).
//!
//! The jobs are written by SQL in batches through the store's own writer, so the schema's
//! triggers keep its tallies as they do for the receiver (jobs per state, completions per day,
//! unfinished jobs not found or abandoned, the jobs waiting for the search index), then indexed
//! for the search by the engine's indexer (`search_index::catch_up`, timed): 60% ended (succeeded, one in six
//! failed), 40% still running or queued, ids like `j123456-r4567`, labels like `render gamma
//! 123456`, one job in ten in a group of 20, a timeline event each and a second (its end) for each
//! ended job, a delivered notification per ended job, a few unfinished ones not found or abandoned; on PostgreSQL then `VACUUM ANALYZE`, as
//! autovacuum does after a bulk load. What is read is what the API's
//! handlers read (the store's part: `jobs::list` with the expected windows, `jobs::job` and its
//! timeline, `groups::list`, and the Metrics screen's figures), on the store's reader.
//!
//!     cargo run --release -p nevermiss-engine --example scale_bench -- [--sizes 1000,1000000]
//!         [--postgres postgres://user@host:port/]   (databases `scale_<size>` there, made empty)
//!         [--keep DIR]   (SQLite's files kept in DIR/scale_<size>/, a data dir `serve` opens)
//!         [--no-sqlite]  (PostgreSQL's runs alone; its databases are left loaded)
//!         [--loaded]     (the databases read as an earlier run left them, not loaded again)
//!
//! After the reads, the bytes a job of each table and index (SQLite's `dbstat`, PostgreSQL's
//! `pg_relation_size`), largest first.
//!
//! `tools/scale-bench` runs it on SQLite and on a throwaway PostgreSQL cluster.

use std::time::Instant;

use nevermiss_engine::expected;
use nevermiss_engine::store::job::JobKey;
use nevermiss_engine::store::jobs::{self, JobFilter};
use nevermiss_engine::store::sql::{params, Db, Dialect};
use nevermiss_engine::store::{channels, counters, groups, metrics, timeline, Store};

const CALLS: usize = 15;
const BATCH: i64 = 20_000;
/// The jobs' times: one a minute, so that a million spans about two years.
const BASE_MS: i64 = 1_700_000_000_000;

struct Args {
    sizes: Vec<i64>,
    postgres: Option<String>,
    keep: Option<std::path::PathBuf>,
    sqlite: bool,
    loaded: bool,
}

fn args() -> Args {
    let mut a = Args { sizes: vec![1_000, 1_000_000], postgres: None, keep: None, sqlite: true, loaded: false };
    let mut argv = std::env::args().skip(1);
    while let Some(name) = argv.next() {
        let value = if name == "--no-sqlite" || name == "--loaded" { None } else { argv.next() };
        match (name.as_str(), value) {
            ("--sizes", Some(v)) => a.sizes = v.split(',').map(|s| s.trim().parse().expect("a size")).collect(),
            ("--postgres", Some(v)) => a.postgres = Some(v),
            ("--keep", Some(v)) => a.keep = Some(v.into()),
            ("--no-sqlite", None) => a.sqlite = false,
            ("--loaded", None) => a.loaded = true,
            _ => panic!(
                "usage: scale_bench [--sizes 1000,1000000] [--postgres postgres://user@host:port/] [--keep DIR] [--no-sqlite] [--loaded]"
            ),
        }
    }
    a
}

/// The columns of job `i`, as SQL over the integer `i` (the same text on both databases).
const JOB_ROWS: &str = "
    SELECT CASE i % 4 WHEN 0 THEN 'replicate' WHEN 1 THEN 'runpod' WHEN 2 THEN 'generic' ELSE 'fal' END AS provider,
           'j' || i || '-r' || ((i * 7919) % 100003) AS job_id,
           'render ' || CASE i % 8 WHEN 0 THEN 'alpha' WHEN 1 THEN 'beta' WHEN 2 THEN 'gamma' WHEN 3 THEN 'delta'
                                   WHEN 4 THEN 'epsilon' WHEN 5 THEN 'zeta' WHEN 6 THEN 'eta' ELSE 'theta' END || ' ' || i AS label,
           CASE WHEN i % 10 < 5 THEN 'succeeded' WHEN i % 10 = 5 THEN 'failed' WHEN i % 10 = 9 THEN 'queued' ELSE 'running' END AS state,
           CASE WHEN i % 10 < 6 THEN 3 WHEN i % 10 = 9 THEN 1 ELSE 2 END AS rank,
           $3 + i * 60000 AS created_at,
           $3 + i * 60000 + CASE WHEN i % 10 < 6 THEN 90000 ELSE 1000 END AS updated_at,
           CASE WHEN i % 10 < 6 THEN $3 + i * 60000 + 90000 END AS finished_at,
           CASE WHEN i % 10 < 6 THEN CASE WHEN i % 7 = 0 THEN 'pull' ELSE 'push' END END AS terminal_source,
           CASE WHEN i % 10 >= 6 AND i % 997 = 3 THEN 'not_found' END AS poll_error_kind,
           CASE WHEN i % 10 >= 6 AND i % 991 = 5 THEN $3 + i * 60000 + 5000 END AS abandoned_at,
           CASE WHEN i % 10 >= 6 AND i % 991 = 5 THEN 'not_found' END AS abandoned_reason,
           CASE WHEN i % 10 = 1 THEN 'sweep-' || (i / 200) END AS group_name";

fn series(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "WITH RECURSIVE n(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $2)",
        Dialect::Postgres => "WITH n(i) AS (SELECT generate_series($1::BIGINT, $2::BIGINT - 1))",
    }
}

fn insert_jobs(dialect: Dialect) -> String {
    format!(
        "{series}, r AS ({JOB_ROWS} FROM n)
         INSERT INTO jobs (provider, job_id, label, state, rank, seq, created_at, updated_at, finished_at, terminal_source,
                           next_poll_at, poll_error_kind, poll_error, abandoned_at, abandoned_reason, group_name)
         SELECT provider, job_id, label, state, rank, 1, created_at, updated_at, finished_at, terminal_source,
                updated_at + 60000, poll_error_kind, CASE WHEN poll_error_kind IS NOT NULL THEN 'the provider has no such job' END,
                abandoned_at, abandoned_reason, group_name FROM r",
        series = series(dialect)
    )
}

/// A job's first timeline event and, for an ended job, the one that ended it (what a finished job
/// keeps once its deliveries' days are over; keyed by the job's row on SQLite, as the merge point
/// writes it), and a delivered notification for each ended job.
fn insert_events(dialect: Dialect) -> [String; 2] {
    let job_ref = match dialect {
        Dialect::Sqlite => ("job_ref, ", "j.id, "),
        Dialect::Postgres => ("", ""),
    };
    [
        format!(
            "{series}, r AS ({JOB_ROWS} FROM n)
             INSERT INTO job_events ({c}provider, job_id, at, source, delivery_id, state, seq, outcome)
             SELECT {v}r.provider, r.job_id, CASE e.k WHEN 1 THEN r.created_at ELSE r.updated_at END, 'push', 'd' || e.k || r.job_id,
                    CASE e.k WHEN 1 THEN 'queued' ELSE r.state END, e.k, 'applied'
             FROM r JOIN jobs j ON j.provider = r.provider AND j.job_id = r.job_id CROSS JOIN (SELECT 1 AS k UNION ALL SELECT 2) e
             WHERE e.k = 1 OR r.rank = 3",
            series = series(dialect),
            c = job_ref.0,
            v = job_ref.1
        ),
        format!(
            "{series}, r AS ({JOB_ROWS} FROM n)
             INSERT INTO outbox (channel, provider, job_id, kind, state, created_at, attempts, next_attempt_at, delivered_at)
             SELECT 'desktop', provider, job_id, 'terminal', state, updated_at, 1, updated_at, updated_at + 20 FROM r WHERE rank = 3",
            series = series(dialect)
        ),
    ]
}

async fn load(store: &Store, size: i64) {
    let dialect = store.dialect();
    let mut from = 0;
    while from < size {
        let to = (from + BATCH).min(size);
        let (jobs_sql, [events_sql, outbox_sql]) = (insert_jobs(dialect), insert_events(dialect));
        store
            .write(move |tx| {
                tx.execute(&jobs_sql, params![from, to, BASE_MS])?;
                tx.execute(&events_sql, params![from, to, BASE_MS])?;
                tx.execute(&outbox_sql, params![from, to, BASE_MS])?;
                Ok(())
            })
            .await
            .unwrap();
        from = to;
    }
    store
        .write(|tx| {
            tx.execute("INSERT INTO job_groups (name) SELECT DISTINCT group_name FROM jobs WHERE group_name IS NOT NULL", [])?;
            Ok(())
        })
        .await
        .unwrap();
}

/// What autovacuum does after a bulk load (statistics, the search index's pending list merged),
/// done at once.
async fn vacuum(url: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute("VACUUM ANALYZE").await.unwrap();
}

/// A read the screens make: how many rows it found.
type ReadFn = Box<dyn Fn(&dyn Db) -> usize + Send + Sync>;

struct Read {
    name: &'static str,
    run: ReadFn,
}

fn page(filter: JobFilter) -> impl Fn(&dyn Db) -> usize + Send + Sync {
    move |db| {
        let page = jobs::list(db, &filter).unwrap();
        expected::windows_of(db, &page.jobs).unwrap();
        page.jobs.len()
    }
}

fn search(q: &str) -> impl Fn(&dyn Db) -> usize + Send + Sync {
    page(JobFilter { q: Some(q.to_owned()), limit: Some(50), ..Default::default() })
}

fn reads(size: i64, cursor: Option<String>) -> Vec<Read> {
    let middle = size / 2 + 7; // a running job
    let id = format!("j{middle}-r{}", (middle * 7919) % 100_003);
    let provider = ["replicate", "runpod", "generic", "fal"][(middle % 4) as usize].to_owned();
    let r = |name, run: ReadFn| Read { name, run };
    vec![
        r("first page (50)", Box::new(page(JobFilter { limit: Some(50), ..Default::default() }))),
        r("state filter: running", Box::new(page(JobFilter { state: Some("running".into()), limit: Some(50), ..Default::default() }))),
        r("provider filter", Box::new(page(JobFilter { provider: Some("runpod".into()), limit: Some(50), ..Default::default() }))),
        r("page 20 by cursor", Box::new(page(JobFilter { cursor, limit: Some(50), ..Default::default() }))),
        r("search: matches nothing", Box::new(search("nothing-like-it"))),
        r("search: one id", Box::new(search(&id))),
        r("search: a label's word", Box::new(search("Gamma"))),
        r("search: old jobs' words", Box::new(search("beta 1"))),
        r("search: 3 letters, old", Box::new(search("j10"))),
        r("search: 2 letters, none", Box::new(search("qz"))),
        r("search: 2 letters, many", Box::new(search("j1"))),
        r("search: 1 letter, none", Box::new(search("q"))),
        r("search: 1 letter, many", Box::new(search("z"))),
        r(
            "one job and its timeline",
            Box::new(move |db| {
                let job = jobs::job(db, &JobKey::new(&provider, &id)).unwrap().expect("the job");
                timeline::of_job(db, &JobKey::new(&job.provider, &job.job_id)).unwrap().len()
            }),
        ),
        r("groups (50)", Box::new(|db| groups::list(db, 50).unwrap().len())),
        r(
            "metrics",
            Box::new(|db| {
                channels::all(db).unwrap();
                counters::of_unknown_values(db).unwrap();
                let m = metrics::read(db).unwrap();
                (m.jobs_not_found + m.jobs_abandoned) as usize
            }),
        ),
    ]
}

/// The cursor of page 20 (50 a page).
async fn cursor_of_page_20(store: &Store) -> Option<String> {
    store
        .read(|db| {
            let mut filter = JobFilter { limit: Some(50), ..Default::default() };
            for _ in 0..19 {
                filter.cursor = jobs::list(db, &filter)?.next_cursor;
            }
            Ok(filter.cursor)
        })
        .await
        .unwrap()
}

/// Median ms of `CALLS` calls, and what the read found (on a blocking thread: the store's
/// blocking reader, timed around the read alone).
fn median(store: &Store, read: &Read) -> (f64, usize) {
    let run = &read.run;
    let mut times = Vec::with_capacity(CALLS);
    let mut found = 0;
    for _ in 0..CALLS {
        let started = Instant::now();
        found = store.read_blocking(|db| Ok(run(db))).unwrap();
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    times.sort_by(f64::total_cmp);
    (times[CALLS / 2], found)
}

async fn disk_bytes(store: &Store, path: Option<&std::path::Path>) -> u64 {
    match path {
        Some(path) => {
            let wal = path.with_extension("db-wal");
            std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) + std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
        }
        None => {
            store.read(|db| db.query_row("SELECT pg_database_size(current_database())", [], |r| r.get::<_, i64>(0))).await.unwrap() as u64
        }
    }
}

async fn measure(
    label: &str,
    store: Store,
    size: i64,
    path: Option<&std::path::Path>,
    url: Option<&str>,
    loaded: bool,
) -> Vec<(&'static str, f64, usize)> {
    let started = Instant::now();
    if !loaded {
        load(&store, size).await;
    }
    let loaded = started.elapsed();
    // The engine's indexer takes the new jobs in batches, as it does a second after they come.
    let indexing = Instant::now();
    nevermiss_engine::search_index::catch_up(&store).await.unwrap();
    let indexed = indexing.elapsed();
    if let Some(url) = url {
        vacuum(url).await;
    }
    let cursor = cursor_of_page_20(&store).await;
    let reader = store.clone();
    let figures = tokio::task::spawn_blocking(move || {
        reads(size, cursor)
            .into_iter()
            .map(|read| {
                let (ms, found) = median(&reader, &read);
                (read.name, ms, found)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let disk = disk_bytes(&store, path).await;
    println!(
        "{label}, {size} jobs: loaded in {:.1} s, indexed for the search in {:.1} s ({:.1} µs a job), {:.0} MB on disk ({:.0} B a job)",
        loaded.as_secs_f64(),
        indexed.as_secs_f64(),
        indexed.as_secs_f64() * 1e6 / size as f64,
        disk as f64 / 1e6,
        disk as f64 / size as f64
    );
    space(&store, size).await;
    store.close();
    figures
}

/// The bytes a job of each table and index, largest first (SQLite's pages by `dbstat`, an FTS5
/// table's shadow tables under its name; PostgreSQL's relations, a table's TOAST in its own).
async fn space(store: &Store, size: i64) {
    let sql = match store.dialect() {
        Dialect::Sqlite => {
            "SELECT CASE WHEN name LIKE 'job_search_short_%' THEN 'job_search_short (FTS5)'
                         WHEN name LIKE 'job_search_%' AND name <> 'job_search_pending' THEN 'job_search (FTS5)'
                         ELSE name END AS what, sum(pgsize) AS bytes
             FROM dbstat GROUP BY what ORDER BY bytes DESC"
        }
        Dialect::Postgres => {
            "SELECT c.relname::TEXT AS what, (pg_relation_size(c.oid) + CASE WHEN c.reltoastrelid <> 0
                     THEN pg_total_relation_size(c.reltoastrelid) ELSE 0 END)::BIGINT AS bytes
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 'm') ORDER BY bytes DESC"
        }
    };
    let rows: Vec<(String, i64)> = store
        .read(move |db| db.prepare_cached(sql)?.query_map([], |r| Ok((r.get::<_, String>("what")?, r.get::<_, i64>("bytes")?)))?.collect())
        .await
        .unwrap();
    let total: i64 = rows.iter().map(|(_, b)| b).sum();
    let shown: Vec<String> =
        rows.iter().filter(|(_, b)| *b * 100 >= total).map(|(name, b)| format!("{name} {:.0}", *b as f64 / size as f64)).collect();
    println!("  bytes a job by table and index (over 1% of {:.0}): {}", total as f64 / size as f64, shown.join(", "));
}

fn report(label: &str, sizes: &[i64], runs: &[Vec<(&'static str, f64, usize)>]) {
    print!("\n{label}: median ms of {CALLS} calls\n{:<28}", "read");
    for size in sizes {
        print!(" {:>12}", format!("{size} jobs"));
    }
    println!(" {:>8}", "growth");
    for (i, (name, _, _)) in runs[0].iter().enumerate() {
        print!("{name:<28}");
        for run in runs {
            print!(" {:>12}", format!("{:.3} ({})", run[i].1, run[i].2));
        }
        let growth = runs.last().unwrap()[i].1 / runs[0][i].1;
        println!(" {growth:>7.1}x");
    }
}

#[tokio::main]
async fn main() {
    let args = args();
    let mut sqlite_runs = Vec::new();
    for &size in args.sizes.iter().filter(|_| args.sqlite) {
        let dir = tempfile::tempdir().unwrap();
        let dir = match &args.keep {
            Some(keep) => keep.join(format!("scale_{size}")),
            None => dir.path().to_owned(),
        };
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nevermiss.db");
        let store = Store::open(&path).unwrap();
        sqlite_runs.push(measure("SQLite", store, size, Some(&path), None, args.loaded).await);
    }
    if args.sqlite {
        report("SQLite", &args.sizes, &sqlite_runs);
    }
    if let Some(url) = &args.postgres {
        let mut runs = Vec::new();
        for &size in &args.sizes {
            let url = format!("{url}scale_{size}");
            let store = Store::connect(&url, Default::default(), "bench").await.unwrap();
            runs.push(measure("PostgreSQL", store, size, None, Some(&url), args.loaded).await);
        }
        report("PostgreSQL", &args.sizes, &runs);
    }
}

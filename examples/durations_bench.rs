//! Benchmark: what groups and expected durations cost, on the write path and on the
//! reconcile pass's lateness alerts, with 100,000 finished jobs of history, against today in the
//! same run.
//!
//! - **Write path**: fresh copies of one SQLite store already holding the history (100,000
//!   finished jobs of 50 kinds, so every kind's window is full), fed through the merge point as
//!   the receiver feeds it (`queued`, `running`, `succeeded` per job) by 64 writers at once, in
//!   four variants alternating: today (no kind, no group), with kinds (each success adds to its
//!   kind's window and trims it, in the schema's trigger), with groups (20 jobs a group: each end
//!   takes the group's row and counts its members), and both.
//! - **Lateness pass**: on the store with the history and 1,000 running jobs of those kinds, the
//!   store work of one pass of the alerts, steady state (every alert due already raised): today's
//!   (the unfinished jobs past the fixed threshold, each alert enqueued once) against the pass
//!   with expected durations (every kind's window read and its figures computed, the unfinished
//!   jobs that may be late by either rule, each judged by `expected::lateness`). Also
//!   `GET /api/groups`'s query (`groups::list`) over 5,000 groups.
//!
//!     cargo run --release -p nevermiss-engine --example durations_bench [-- --history 100000 --jobs 2000 --rounds 3]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nevermiss_engine::expected::{self, Expected};
use nevermiss_engine::merge_point::{accept_push, PushDelivery};
use nevermiss_engine::store::deliveries::RawRequest;
use nevermiss_engine::store::job::{now_ms, JobEvent, JobState};
use nevermiss_engine::store::outbox::{self, Kind, Subject};
use nevermiss_engine::store::{durations, groups, jobs, Store};

const KINDS: usize = 50;
const RUNNING: usize = 1_000;
const WRITERS: usize = 64;
const GROUP_SIZE: usize = 20;

struct Args {
    history: usize,
    jobs: usize,
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args { history: 100_000, jobs: 2_000, rounds: 3 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse().ok());
        match (pair[0].as_str(), value) {
            ("--history", Some(v)) => a.history = v,
            ("--jobs", Some(v)) => a.jobs = v,
            ("--rounds", Some(v)) => a.rounds = v,
            _ => panic!("usage: durations_bench [--history N] [--jobs N] [--rounds N]"),
        }
    }
    a
}

fn kind(i: usize) -> String {
    format!("replicate/prediction/owner/model-{:02}", i % KINDS)
}

/// A store holding `history` finished jobs of `KINDS` kinds (their durations in the windows, by
/// the schema's trigger) and `RUNNING` running ones, started an hour ago; a group per 20 finished.
async fn history_store(path: &std::path::Path, history: usize) {
    let store = Store::open(path).unwrap();
    let now = now_ms();
    store
        .write(move |tx| {
            for i in 0..history {
                let started = now - 3_600_000 - (i as i64 % 600) * 1_000;
                tx.execute(
                    "INSERT INTO jobs (provider, job_id, state, rank, seq, created_at, updated_at, finished_at, terminal_source,
                                       started_at, job_kind, group_name)
                     VALUES ('replicate', $1, 'succeeded', 3, 3, $2, $3, $3, 'push', $2, $4, $5)",
                    nevermiss_engine::store::sql::params![
                        format!("h{i:08}"),
                        started,
                        started + 60_000 + (i as i64 % 97) * 1_000,
                        kind(i),
                        format!("history-{}", i / GROUP_SIZE)
                    ],
                )?;
            }
            for i in 0..RUNNING {
                tx.execute(
                    "INSERT INTO jobs (provider, job_id, state, rank, seq, created_at, updated_at, started_at, job_kind)
                     VALUES ('replicate', $1, 'running', 2, 2, $2, $2, $2, $3)",
                    nevermiss_engine::store::sql::params![format!("r{i:08}"), now - 3_600_000, kind(i)],
                )?;
            }
            Ok(())
        })
        .await
        .unwrap();
    assert!(store.close());
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Today,
    Kinds,
    Groups,
    Both,
}

impl Variant {
    const ALL: [Variant; 4] = [Variant::Today, Variant::Kinds, Variant::Groups, Variant::Both];

    fn name(self) -> &'static str {
        match self {
            Variant::Today => "today (no kind, no group)",
            Variant::Kinds => "with kinds (durations)",
            Variant::Groups => "with groups",
            Variant::Both => "kinds and groups",
        }
    }
}

fn events(i: usize, variant: Variant) -> [JobEvent; 3] {
    let job_id = format!("p{i:08}");
    let with = |state, seq| JobEvent {
        kind: matches!(variant, Variant::Kinds | Variant::Both).then(|| kind(i)),
        group: matches!(variant, Variant::Groups | Variant::Both).then(|| format!("sweep-{}", i / GROUP_SIZE)),
        started_at: Some(now_ms() - 60_000),
        ..JobEvent::new("replicate", &job_id, state, seq)
    };
    [with(JobState::Queued, 1), with(JobState::Running, 2), with(JobState::Succeeded, 3)]
}

/// µs per finished job, 64 writers at once, on a copy of the history store.
async fn write_path(template: &std::path::Path, jobs: usize, variant: Variant) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    std::fs::copy(template, &path).unwrap();
    let store = Arc::new(Store::open(&path).unwrap());
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (store, next) = (store.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= jobs {
                        return;
                    }
                    for (n, event) in events(i, variant).into_iter().enumerate() {
                        let push = PushDelivery { delivery_id: format!("d-{i}-{n}"), event, raw: RawRequest::default() };
                        store.write(move |tx| accept_push(tx, &push, now_ms())).await.expect("the write commits");
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    started.elapsed().as_secs_f64() * 1e6 / jobs as f64
}

/// Today's pass: the unfinished jobs past the fixed threshold, each alert enqueued (once).
async fn pass_today(store: &Store, cutoff: i64) -> u64 {
    store
        .write(move |tx| {
            let mut raised = 0;
            for (job_id, state) in jobs::unfinished_since_before(tx, "replicate", cutoff)? {
                raised += !outbox::enqueue(tx, Kind::Stuck, &Subject::job("replicate", &job_id), Some(state), now_ms())?.is_empty() as u64;
            }
            Ok(raised)
        })
        .await
        .unwrap()
}

/// The pass with expected durations: every kind's window read and its figures computed, then the
/// jobs that may be late by either rule, each judged by `expected::lateness`.
async fn pass_with_durations(store: &Store, stuck_cutoff: i64) -> u64 {
    let windows = store.read(durations::windows).await.unwrap();
    let kinds: std::collections::BTreeMap<String, Expected> =
        windows.iter().filter_map(|(kind, d)| Some((kind.clone(), Expected::of(d)?))).collect();
    let shortest = kinds.values().filter_map(|e| e.slow_after_ms).min().unwrap_or(i64::MAX);
    store
        .write(move |tx| {
            let now = now_ms();
            let mut raised = 0;
            for job in jobs::running_before(tx, "replicate", stuck_cutoff.max(now.saturating_sub(shortest)))? {
                let Some(alert) = expected::lateness(&job, job.kind.as_deref().and_then(|k| kinds.get(k)), stuck_cutoff, now) else {
                    continue;
                };
                raised += !outbox::enqueue(tx, alert, &Subject::job("replicate", &job.job_id), Some(job.state), now)?.is_empty() as u64;
            }
            Ok(raised)
        })
        .await
        .unwrap()
}

/// `groups::list` as it was before this change, for the comparison: the names, then per group its
/// counts per state and its member running longest (two queries each). Returns how many groups.
fn list_query_per_group(db: &dyn nevermiss_engine::store::sql::Db, limit: i64) -> nevermiss_engine::store::sql::Result<usize> {
    let names: Vec<String> = db
        .prepare_cached("SELECT group_name FROM jobs WHERE group_name IS NOT NULL GROUP BY group_name ORDER BY max(id) DESC LIMIT $1")?
        .query_map([limit], |r| r.get("group_name"))?
        .collect::<nevermiss_engine::store::sql::Result<_>>()?;
    for name in &names {
        db.prepare_cached(
            "SELECT state, count(*) AS jobs, min(created_at) AS started_at, max(finished_at) AS finished_at
             FROM jobs WHERE group_name = $1 GROUP BY state",
        )?
        .query([name])?;
        db.prepare_cached(
            "SELECT provider, job_id, label, created_at FROM jobs WHERE group_name = $1 AND rank < 3 ORDER BY created_at, id LIMIT 1",
        )?
        .query([name])?;
    }
    Ok(names.len())
}

fn mean(samples: &[Duration]) -> f64 {
    samples.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / samples.len() as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("history.db");
    let built = Instant::now();
    history_store(&template, a.history).await;
    println!(
        "history: {} finished jobs of {KINDS} kinds, {RUNNING} running ones, one group per {GROUP_SIZE} finished (built in {:.1} s)",
        a.history,
        built.elapsed().as_secs_f64()
    );

    println!();
    println!(
        "write path: {} finished jobs per variant (3 events each), {WRITERS} writers, {} rounds, the variants alternating",
        a.jobs, a.rounds
    );
    println!("| round | {} |", Variant::ALL.map(Variant::name).join(" | "));
    println!("|---|---|---|---|---|");
    // A round not counted: the first store copy also warms the page cache.
    write_path(&template, a.jobs / 4, Variant::Today).await;
    let mut totals = [0.0; 4];
    for round in 1..=a.rounds {
        let mut row = Vec::new();
        for (v, variant) in Variant::ALL.into_iter().enumerate() {
            let us = write_path(&template, a.jobs, variant).await;
            totals[v] += us;
            row.push(format!("{us:.0} µs/job"));
        }
        println!("| {round} | {} |", row.join(" | "));
    }
    let base = totals[0];
    println!(
        "| mean, ×today | {} |",
        totals.iter().map(|t| format!("{:.0} µs (×{:.2})", t / a.rounds as f64, t / base)).collect::<Vec<_>>().join(" | ")
    );

    println!();
    let store = Store::open(&template).unwrap();
    let stuck_cutoff = now_ms() - 1_800_000;
    // The alerts due, raised once (the steady state after: each pass finds them raised).
    let (first_today, first_durations) = (pass_today(&store, stuck_cutoff).await, pass_with_durations(&store, stuck_cutoff).await);
    let passes = 20;
    let (mut today, mut with) = (Vec::new(), Vec::new());
    for _ in 0..passes {
        let t = Instant::now();
        assert_eq!(pass_today(&store, stuck_cutoff).await, 0);
        today.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(pass_with_durations(&store, stuck_cutoff).await, 0);
        with.push(t.elapsed());
    }
    let window_rows = store.read(durations::count).await.unwrap();
    println!("lateness pass ({RUNNING} running jobs, {} finished, {window_rows} durations kept; first pass raised {first_today} stuck, then {first_durations} more), {passes} passes alternating:", a.history);
    println!("| pass | mean | best |");
    println!("|---|---|---|");
    let best = |s: &[Duration]| s.iter().min().unwrap().as_secs_f64() * 1e3;
    println!("| today (fixed threshold) | {:.2} ms | {:.2} ms |", mean(&today), best(&today));
    println!("| with expected durations | {:.2} ms | {:.2} ms |", mean(&with), best(&with));
    println!("ratio with / today: mean ×{:.2}, best ×{:.2}", mean(&with) / mean(&today), best(&with) / best(&today));

    let (mut list, mut before) = (Vec::new(), Vec::new());
    for _ in 0..passes {
        let t = Instant::now();
        let one = store.read(|db| groups::list(db, 100)).await.unwrap();
        list.push(t.elapsed());
        let t = Instant::now();
        let per_group = store.read(|db| list_query_per_group(db, 100)).await.unwrap();
        before.push(t.elapsed());
        assert_eq!((one.len(), per_group), (100, 100));
    }
    println!();
    println!("GET /api/groups (the 100 newest of {} groups), {passes} times alternating:", a.history / GROUP_SIZE);
    println!("| query | mean | best |");
    println!("|---|---|---|");
    println!("| before: 1 + 2 per group | {:.2} ms | {:.2} ms |", mean(&before), best(&before));
    println!("| now: one aggregate query | {:.2} ms | {:.2} ms |", mean(&list), best(&list));
    println!("ratio now / before: mean ×{:.2}, best ×{:.2}", mean(&list) / mean(&before), best(&list) / best(&before));
}

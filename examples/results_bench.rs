//! Benchmark: what keeping a job's result adds per finished job, against the same
//! jobs without one, in one run. Each variant is a fresh SQLite store (WAL, durable commits, the
//! store's group-commit writer), fed through the merge point as the receiver feeds it: per job a
//! `queued`, a `running` and a terminal event, the terminal one carrying (or not) a result of the
//! size a Replicate image prediction or a language model's answer gives (an excerpt of 300
//! characters, 2 output URLs, the image) and its provider page. Printed: the database's bytes per
//! finished job (after a checkpoint), the bytes the two columns hold, and the time per finished
//! job, written one after another (each write's commit awaited) and by 64 writers at once.
//!
//!     cargo run --release -p nevermiss-engine --example results_bench [-- --jobs 2000 --rounds 3]

use std::sync::Arc;
use std::time::{Duration, Instant};

use nevermiss_engine::merge_point::{accept_push, PushDelivery};
use nevermiss_engine::store::deliveries::RawRequest;
use nevermiss_engine::store::job::{JobEvent, JobResult, JobState};
use nevermiss_engine::store::Store;

struct Args {
    jobs: usize,
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args { jobs: 2_000, rounds: 3 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse().ok());
        match (pair[0].as_str(), value) {
            ("--jobs", Some(v)) => a.jobs = v,
            ("--rounds", Some(v)) => a.rounds = v,
            _ => panic!("usage: results_bench [--jobs N] [--rounds N]"),
        }
    }
    a
}

/// A result as large as the bounds let a typical one be: a 300-character excerpt, two output
/// URLs and the first image, through the same bounding the providers use.
fn typical_result(i: usize) -> Option<JobResult> {
    let text = "An astronaut riding a horse on the moon, photorealistic, golden hour. ".repeat(8);
    let urls = (0..2).map(|n| format!("https://replicate.delivery/xezq/{i:08}/out-{n}.webp")).collect::<Vec<_>>();
    let image = urls[0].clone();
    nevermiss_engine::providers::result::bounded(Some(&text), urls, Some(&image))
}

fn events(i: usize, with_result: bool) -> [JobEvent; 3] {
    let job_id = format!("p{i:08}");
    let end = JobEvent {
        result: if with_result { typical_result(i) } else { None },
        provider_url: with_result.then(|| format!("https://replicate.com/p/{job_id}")),
        ..JobEvent::new("replicate", &job_id, JobState::Succeeded, 3)
    };
    [JobEvent::new("replicate", &job_id, JobState::Queued, 1), JobEvent::new("replicate", &job_id, JobState::Running, 2), end]
}

async fn push(store: &Store, delivery_id: String, event: JobEvent) {
    let push =
        PushDelivery { delivery_id, event, raw: RawRequest { headers_json: "{}".into(), body: b"{}".to_vec(), body_truncated: false } };
    store.write(move |tx| accept_push(tx, &push, nevermiss_engine::store::job::now_ms())).await.expect("the write commits");
}

struct Measured {
    sequential: Duration,
    concurrent: Duration,
    bytes_per_job: f64,
    column_bytes_per_job: f64,
}

async fn run(jobs: usize, with_result: bool) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let store = Store::open(&path).unwrap();
    // One after another: each write's commit awaited (the receiver's latency).
    let half = jobs / 2;
    let started = Instant::now();
    for i in 0..half {
        for (n, event) in events(i, with_result).into_iter().enumerate() {
            push(&store, format!("d-{i}-{n}"), event).await;
        }
    }
    let sequential = started.elapsed();
    // 64 writers at once (the group commit's throughput).
    let store = Arc::new(store);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(half));
    let started = Instant::now();
    let writers: Vec<_> = (0..64)
        .map(|_| {
            let (store, next) = (store.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= jobs {
                        return;
                    }
                    for (n, event) in events(i, with_result).into_iter().enumerate() {
                        push(&store, format!("d-{i}-{n}"), event).await;
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let concurrent = started.elapsed();
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
    conn.execute_batch("VACUUM").unwrap();
    let size = std::fs::metadata(&path).unwrap().len() as f64;
    let columns: i64 = conn
        .query_row("SELECT coalesce(sum(length(result)), 0) + coalesce(sum(length(provider_url)), 0) FROM jobs", [], |r| r.get(0))
        .unwrap();
    Measured {
        sequential: sequential / half as u32,
        concurrent: concurrent / (jobs - half) as u32,
        bytes_per_job: size / jobs as f64,
        column_bytes_per_job: columns as f64 / jobs as f64,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    println!("{} finished jobs per variant (3 events each), {} rounds, the variants alternating", a.jobs, a.rounds);
    println!("| round | variant | db bytes/job | result+page bytes/job | µs/job, one at a time | µs/job, 64 writers |");
    println!("|---|---|---|---|---|---|");
    let mut totals = [(0.0, 0.0, 0.0); 2];
    for round in 1..=a.rounds {
        for (v, with_result) in [false, true].into_iter().enumerate() {
            let m = run(a.jobs, with_result).await;
            let name = if with_result { "with result" } else { "without (today)" };
            println!(
                "| {round} | {name} | {:.0} | {:.0} | {:.0} | {:.0} |",
                m.bytes_per_job,
                m.column_bytes_per_job,
                m.sequential.as_secs_f64() * 1e6,
                m.concurrent.as_secs_f64() * 1e6
            );
            totals[v].0 += m.bytes_per_job;
            totals[v].1 += m.sequential.as_secs_f64() * 1e6;
            totals[v].2 += m.concurrent.as_secs_f64() * 1e6;
        }
    }
    let r = a.rounds as f64;
    let ([b0, s0, c0], [b1, s1, c1]) =
        ([totals[0].0 / r, totals[0].1 / r, totals[0].2 / r], [totals[1].0 / r, totals[1].1 / r, totals[1].2 / r]);
    println!();
    println!("mean: {b0:.0} → {b1:.0} bytes/job (+{:.0}, ×{:.2}); one at a time {s0:.0} → {s1:.0} µs/job (×{:.2}); 64 writers {c0:.0} → {c1:.0} µs/job (×{:.2})", b1 - b0, b1 / b0, s1 / s0, c1 / c0);
}

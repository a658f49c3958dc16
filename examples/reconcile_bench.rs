//! Benchmark: one reconcile pass over 1,000 unfinished jobs, with no finished jobs in the
//! database and then with 1,000,000 finished ones. The pass reads only the partial index of
//! unfinished jobs, so the two should cost about the same. Prints both and their ratio.
//!
//!     cargo run --release --no-default-features --example reconcile_bench [-- --finished 1000000 --unfinished 1000 --passes 5]
//!
//! The provider is a local stand-in for the generic status API that answers `running` for every
//! job (so every pass polls all of them). Traffic stays on 127.0.0.1.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Path;
use axum::routing::get;
use axum::{Json, Router};
use nevermiss_engine::channels::desktop::LogNotifier;
use nevermiss_engine::data_dir::DATABASE_FILE;
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::store::Store;
use serde_json::json;

struct Args {
    finished: u64,
    unfinished: u64,
    passes: u32,
}

fn args() -> Args {
    let mut a = Args { finished: 1_000_000, unfinished: 1_000, passes: 5 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse().ok());
        match (pair[0].as_str(), value) {
            ("--finished", Some(v)) => a.finished = v,
            ("--unfinished", Some(v)) => a.unfinished = v,
            ("--passes", Some(v)) => a.passes = v as u32,
            _ => panic!("usage: reconcile_bench [--finished N] [--unfinished N] [--passes N]"),
        }
    }
    a
}

/// Fills the database directly (as a long history would have), in large transactions.
fn seed(path: &std::path::Path, finished: u64, unfinished: u64) {
    let store = Store::open(path).expect("the store opens");
    let mut conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "synchronous", "OFF").unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let day = 86_400_000;
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO jobs (provider, job_id, state, rank, seq, created_at, updated_at, finished_at, terminal_source, notified_at)
                 VALUES ('generic', ?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?6)",
            )
            .unwrap();
        for i in 0..finished {
            let at = now - 30 * day + (i as i64 % (30 * day));
            insert.execute(rusqlite::params![format!("done-{i}"), "succeeded", 3, 3, at, at + 60_000, "push"]).unwrap();
        }
        for i in 0..unfinished {
            insert
                .execute(rusqlite::params![format!("open-{i}"), "running", 2, 2, now, Option::<i64>::None, Option::<String>::None])
                .unwrap();
        }
    }
    tx.commit().unwrap();
    drop(conn);
    store.close();
}

async fn stand_in() -> String {
    let app = Router::new()
        .route("/jobs/{id}", get(|Path(id): Path<String>| async move { Json(json!({"jobId": id, "state": "running", "seq": 2})) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Mean and best pass time, and the time of the unfinished-jobs query alone.
async fn measure(label: &str, finished: u64, args: &Args, provider_url: &str) -> (Duration, Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    seed(&dir.path().join(DATABASE_FILE), finished, args.unfinished);
    eprintln!("{label}: seeded {finished} finished + {} unfinished jobs in {:.1?}", args.unfinished, started.elapsed());

    let engine = Engine::start(EngineConfig::local(dir.path()), Arc::new(LogNotifier)).await.unwrap();
    engine.services.settings.set("generic.base_url", provider_url).await.unwrap();
    engine.services.secrets.set("generic", SecretKind::ApiKey, Some("bench")).unwrap();
    let reconciler = engine.services.reconciler.clone();
    reconciler.run_pass().await.unwrap(); // warm-up
    let mut times = Vec::new();
    for _ in 0..args.passes {
        let t = Instant::now();
        let report = reconciler.run_pass().await.unwrap();
        times.push(t.elapsed());
        assert_eq!(report.pass.counts.checked, args.unfinished, "every unfinished job is polled each pass");
    }
    let query = {
        let t = Instant::now();
        let now = chrono::Utc::now().timestamp_millis() + 1;
        for _ in 0..20 {
            engine.store().read(move |conn| nevermiss_engine::store::jobs::unfinished_due(conn, "generic", now, 5_000)).await.unwrap();
        }
        t.elapsed() / 20
    };
    engine.shutdown().await;
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    let best = *times.iter().min().unwrap();
    (mean, best, query)
}

#[tokio::main]
async fn main() {
    let args = args();
    let url = stand_in().await;
    let (base_mean, base_best, base_query) = measure("baseline", 0, &args, &url).await;
    let (big_mean, big_best, big_query) = measure("history", args.finished, &args, &url).await;
    println!("reconcile pass over {} unfinished jobs ({} passes each, release build)", args.unfinished, args.passes);
    println!("{:<28} {:>12} {:>12} {:>16}", "finished jobs in database", "mean pass", "best pass", "due-jobs query");
    println!("{:<28} {:>12.1?} {:>12.1?} {:>16.2?}", 0, base_mean, base_best, base_query);
    println!("{:<28} {:>12.1?} {:>12.1?} {:>16.2?}", args.finished, big_mean, big_best, big_query);
    println!(
        "ratio (history / baseline): mean pass {:.2}, best pass {:.2}, query {:.2}",
        big_mean.as_secs_f64() / base_mean.as_secs_f64(),
        big_best.as_secs_f64() / base_best.as_secs_f64(),
        big_query.as_secs_f64() / base_query.as_secs_f64()
    );
}

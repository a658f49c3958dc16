//! Benchmarks that print (never assert), for BENCHMARKS.md:
//! - `memory`: RSS of a `nevermiss serve` child (VmRSS/VmHWM from /proc/PID/status) with a seeded
//!   history of up to 100,000 jobs and 1,000,000 deliveries, at a few history sizes;
//! - `latency`: time from a terminal delivery's 200 to its notifier call, p50/p99, in-process;
//! - `retention`: a steady load over simulated days, written through the merge point with 30%
//!   duplicates and stale events, each day followed by the engine's retention purge, showing the
//!   rows of every table, the database and the WAL level off (`--days 28 --jobs-per-day 2500
//!   --delivery-days 7 --job-days 14`; `--deliveries-only` purges deliveries only, as retention once did).
//!
//! ```sh
//! cargo build --release --no-default-features --bin nevermiss --example reliability_bench
//! target/release/examples/reliability_bench [memory|latency|retention|all] [--bin target/release/nevermiss]
//! ```
//!
//! Traffic stays on 127.0.0.1.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nevermiss_engine::data_dir::DATABASE_FILE;
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::notification::Message;
use nevermiss_engine::notification::{Notification, Notifier, NotifyError};
use nevermiss_engine::providers::generic;
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::store::Store;
use serde_json::{json, Value};

const SECRET: &str = "bench-secret";
const DAY: i64 = 86_400_000;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Fills `jobs` finished jobs and `deliveries` accepted deliveries (spread over the jobs, received
/// `age_ms` ago or later) directly, in one transaction, as a long history would have.
fn seed(path: &Path, first_job: u64, jobs: u64, deliveries: u64, received_at: impl Fn(u64) -> i64) {
    let store = Store::open(path).expect("the store opens");
    let mut conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "synchronous", "OFF").unwrap();
    let now = now_ms();
    let tx = conn.transaction().unwrap();
    {
        let mut job = tx
            .prepare(
                "INSERT INTO jobs (provider, job_id, label, state, rank, seq, created_at, updated_at, finished_at, terminal_source, notified_at)
                 VALUES ('generic', ?1, 'seeded', 'succeeded', 3, 3, ?2, ?2, ?2, 'push', ?2)",
            )
            .unwrap();
        for i in first_job..first_job + jobs {
            job.execute(rusqlite::params![format!("job-{i}"), now - 30 * DAY]).unwrap();
        }
        let mut delivery = tx
            .prepare(
                "INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
                 VALUES ('generic', ?1, ?2, ?3, 'accepted', ?4, ?5, 0)",
            )
            .unwrap();
        let headers = r#"{"content-type":"application/json","x-agent-signature":"sha256=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","user-agent":"bench"}"#;
        for d in 0..deliveries {
            let job_id = format!("job-{}", first_job + d % jobs.max(1));
            let body =
                format!(r#"{{"deliveryId":"seed-{first_job}-{d}","jobId":"{job_id}","state":"running","seq":2,"label":"seeded history"}}"#);
            delivery.execute(rusqlite::params![format!("seed-{first_job}-{d}"), job_id, received_at(d), headers, body.as_bytes()]).unwrap();
        }
    }
    tx.commit().unwrap();
    drop(conn);
    store.close();
}

fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        / 1024
}

async fn memory(bin: &Path) {
    println!("\n## memory of `nevermiss serve` (MB) by history size");
    println!("{:>9} {:>11} {:>10} {:>14} {:>10} {:>10}", "jobs", "deliveries", "db MB", "RSS at start", "RSS after", "peak RSS");
    for (jobs, deliveries) in [(0u64, 0u64), (10_000, 100_000), (50_000, 500_000), (100_000, 1_000_000)] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(DATABASE_FILE);
        let now = now_ms();
        seed(&db, 0, jobs, deliveries, |d| now - (d as i64 % (6 * DAY)));
        let db_mb = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0) / 1_048_576;
        let mut child = Command::new(bin)
            .args(["serve", "--data-dir"])
            .arg(dir.path())
            .args(["--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0"])
            .env("NEVERMISS_SECRET_STORE", "file")
            .env("NEVERMISS_GENERIC_WEBHOOK_SECRET", SECRET)
            .env("RUST_LOG", "warn")
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the nevermiss binary starts (pass --bin)");
        let pid = child.id();
        let instance: Value = loop {
            if let Ok(bytes) = std::fs::read(dir.path().join("instance.json")) {
                if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                    if v["pid"].as_u64() == Some(pid as u64) {
                        break v;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let at_start = proc_status(pid, "VmRSS:");
        // Use it: the busiest read paths, a reconcile pass, and 2,000 deliveries.
        let (api, receiver) = (instance["api_url"].as_str().unwrap().to_owned(), instance["receiver_url"].as_str().unwrap().to_owned());
        let token = std::fs::read_to_string(dir.path().join("api-token")).unwrap();
        let http = reqwest::Client::new();
        for path in
            ["/api/metrics", "/api/jobs?limit=200", "/api/jobs?q=job-9", "/api/metrics/history?hours=2160", "/api/jobs/generic/job-1"]
        {
            for _ in 0..5 {
                let _ = http.get(format!("{api}{path}")).bearer_auth(token.trim()).send().await.unwrap().bytes().await;
            }
        }
        let _ = http.post(format!("{api}/api/reconcile")).bearer_auth(token.trim()).send().await.unwrap().bytes().await;
        let sends = (0..16).map(|c| {
            let (http, receiver) = (http.clone(), receiver.clone());
            async move {
                for i in 0..125 {
                    let body =
                        json!({"deliveryId": format!("live-{c}-{i}"), "jobId": format!("live-{c}-{i}"), "state": "succeeded", "seq": 1})
                            .to_string();
                    let sig = generic::sign(SECRET.as_bytes(), body.as_bytes());
                    let _ = http.post(format!("{receiver}/hooks/generic")).header("x-agent-signature", sig).body(body).send().await;
                }
            }
        });
        futures_util::future::join_all(sends).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = proc_status(pid, "VmRSS:");
        let peak = proc_status(pid, "VmHWM:");
        println!("{jobs:>9} {deliveries:>11} {db_mb:>10} {at_start:>14} {after:>10} {peak:>10}");
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        let _ = child.wait();
    }
}

/// Records when each job's notification was delivered.
#[derive(Default)]
struct Stamps(Mutex<HashMap<String, Instant>>);

#[async_trait]
impl Notifier for Stamps {
    async fn notify(&self, m: &Message<'_>) -> Result<(), NotifyError> {
        // A summary tells of each job it covers at once.
        let covered: Vec<&Notification> = match m {
            Message::One(n) => vec![n],
            Message::Summary(s) => s.notifications.iter().collect(),
            Message::Test { .. } => Vec::new(),
        };
        for n in covered {
            if let Some((_, job_id)) = n.job() {
                self.0.lock().unwrap().entry(job_id.to_owned()).or_insert_with(Instant::now);
            }
        }
        Ok(())
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn latency() {
    let dir = tempfile::tempdir().unwrap();
    let stamps = Arc::new(Stamps::default());
    let engine = Engine::start(EngineConfig::local(dir.path()), stamps.clone()).await.unwrap();
    engine.services.secrets.set("generic", SecretKind::WebhookSecret, Some(SECRET)).unwrap();
    let receiver = format!("http://{}/hooks/generic", engine.receiver_addr);
    println!("\n## time from a terminal delivery's 200 to its notifier call (in-process, durable commits)");
    println!("{:>12} {:>8} {:>10} {:>10} {:>10}", "connections", "jobs", "p50 ms", "p99 ms", "max ms");
    for connections in [1usize, 16] {
        let per = 2000 / connections;
        let answered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let sends = (0..connections).map(|c| {
            let (receiver, answered) = (receiver.clone(), answered.clone());
            async move {
                let http = reqwest::Client::new();
                for i in 0..per {
                    let job = format!("lat-{connections}-{c}-{i}");
                    let body = json!({"deliveryId": format!("{job}-d"), "jobId": job, "state": "succeeded", "seq": 1}).to_string();
                    let sig = generic::sign(SECRET.as_bytes(), body.as_bytes());
                    let response = http.post(&receiver).header("x-agent-signature", sig).body(body).send().await.unwrap();
                    assert_eq!(response.status(), 200);
                    answered.lock().unwrap().insert(job, Instant::now());
                }
            }
        });
        futures_util::future::join_all(sends).await;
        let total = per * connections;
        let deadline = Instant::now() + Duration::from_secs(60);
        while stamps.0.lock().unwrap().keys().filter(|k| k.starts_with(&format!("lat-{connections}-"))).count() < total {
            assert!(Instant::now() < deadline, "notifications did not all arrive");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let stamps = stamps.0.lock().unwrap();
        let mut ms: Vec<f64> = answered
            .lock()
            .unwrap()
            .iter()
            .map(|(job, at)| {
                let notified = stamps[job];
                // Negative when the notifier ran before the client had read its 200.
                if notified >= *at {
                    (notified - *at).as_secs_f64() * 1000.0
                } else {
                    -((*at - notified).as_secs_f64() * 1000.0)
                }
            })
            .collect();
        ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{connections:>12} {total:>8} {:>10.2} {:>10.2} {:>10.2}",
            percentile(&ms, 0.5),
            percentile(&ms, 0.99),
            ms.last().unwrap()
        );
    }
    engine.shutdown().await;

    // A backlog: 2,000 finished jobs whose notifications wait (the outbox's gate closed, as at a
    // desktop start before the window is up), then all let go at once. Each is shown, then marked
    // delivered durably before the next is shown (a crash repeats at most one).
    let dir = tempfile::tempdir().unwrap();
    let stamps = Arc::new(Stamps::default());
    let mut config = EngineConfig::local(dir.path());
    config.notifications_gated = true;
    let engine = Engine::start(config, stamps.clone()).await.unwrap();
    engine.services.secrets.set("generic", SecretKind::WebhookSecret, Some(SECRET)).unwrap();
    let receiver = format!("http://{}/hooks/generic", engine.receiver_addr);
    let backlog = 2000usize;
    let sends = (0..16).map(|c| {
        let receiver = receiver.clone();
        async move {
            let http = reqwest::Client::new();
            for i in 0..backlog / 16 {
                let job = format!("backlog-{c}-{i}");
                let body = json!({"deliveryId": format!("{job}-d"), "jobId": job, "state": "succeeded", "seq": 1}).to_string();
                let sig = generic::sign(SECRET.as_bytes(), body.as_bytes());
                let response = http.post(&receiver).header("x-agent-signature", sig).body(body).send().await.unwrap();
                assert_eq!(response.status(), 200);
            }
        }
    });
    futures_util::future::join_all(sends).await;
    let started = Instant::now();
    engine.services.outbox.open_gate();
    let deadline = started + Duration::from_secs(300);
    loop {
        let delivered: i64 = engine
            .store()
            .read(|c| c.query_row("SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL", [], |r| r.get(0)))
            .await
            .unwrap();
        if delivered as usize == backlog {
            break;
        }
        assert!(Instant::now() < deadline, "the backlog was not delivered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    println!(
        "\n## a backlog of {backlog} notifications, shown and marked one by one: {:.2} s, {:.0} notifications/s",
        took.as_secs_f64(),
        backlog as f64 / took.as_secs_f64()
    );
    engine.shutdown().await;
}

/// One simulated day of webhooks through the merge point, as the receiver hands them to it, each
/// at its own time of that day: `jobs` jobs of 20 deliveries each, 30% of them duplicates (a
/// retried delivery id) or stale (an older state, or a state after the end): per job `queued`,
/// 12 `running` with a growing seq, its end, 3 duplicates and 3 stale events. Then every
/// notification is marked delivered, as the dispatcher does. Returns the counts by outcome.
async fn simulate_day(store: &Store, day: u64, day_start: i64, jobs: u64) -> HashMap<&'static str, u64> {
    use nevermiss_engine::merge_point::{self, PushDelivery};
    use nevermiss_engine::store::deliveries::RawRequest;
    use nevermiss_engine::store::job::{JobEvent, JobState};
    let per_job = 20u64;
    let spacing = DAY / (jobs * per_job) as i64;
    let headers = r#"{"content-type":"application/json","x-agent-signature":"sha256=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","user-agent":"bench"}"#;
    // (delivery suffix, state, seq): the applied ones in order, with duplicates and stale ones between.
    let mut script: Vec<(String, JobState, i64)> = vec![("d1".into(), JobState::Queued, 1)];
    for seq in 2..=13 {
        script.push((format!("d{seq}"), JobState::Running, seq));
        match seq {
            3 | 7 => script.push((format!("d{seq}"), JobState::Running, seq)), // duplicate
            5 => script.push(("s2".into(), JobState::Running, 2)),             // stale
            9 => script.push(("s4".into(), JobState::Running, 4)),             // stale
            _ => {}
        }
    }
    script.push(("d14".into(), JobState::Succeeded, 14));
    script.push(("d14".into(), JobState::Succeeded, 14)); // duplicate of the end
    script.push(("s15".into(), JobState::Running, 15)); // stale: after the end
    assert_eq!(script.len() as u64, per_job);

    let mut writes = Vec::new();
    let chunk = 100u64; // jobs per write closure (the store groups writes anyway)
    for first in (0..jobs).step_by(chunk as usize) {
        let store = store.clone();
        let script = script.clone();
        writes.push(tokio::spawn(async move {
            store
                .write(move |tx| {
                    let mut outcomes: HashMap<&'static str, u64> = HashMap::new();
                    for j in first..(first + chunk).min(jobs) {
                        let job_id = format!("day{day}-job{j}");
                        for (k, (suffix, state, seq)) in script.iter().enumerate() {
                            let delivery_id = format!("{job_id}-{suffix}");
                            let body = json!({"deliveryId": delivery_id, "jobId": job_id, "state": state.as_str(), "seq": seq, "label": "bench job"}).to_string();
                            let push = PushDelivery {
                                delivery_id,
                                event: JobEvent { label: Some("bench job".into()), ..JobEvent::new("generic", &job_id, *state, *seq) },
                                raw: RawRequest { headers_json: headers.to_owned(), body: body.into_bytes(), body_truncated: false },
                            };
                            let at = day_start + ((j * per_job + k as u64) as i64) * spacing;
                            let outcome = merge_point::accept_push(tx, &push, at)?.outcome;
                            *outcomes.entry(outcome.as_str()).or_default() += 1;
                        }
                    }
                    Ok(outcomes)
                })
                .await
                .unwrap()
        }));
    }
    let mut outcomes: HashMap<&'static str, u64> = HashMap::new();
    for write in writes {
        for (k, v) in write.await.unwrap() {
            *outcomes.entry(k).or_default() += v;
        }
    }
    // The dispatcher delivers every notification by the end of the day.
    let delivered_at = day_start + DAY - 1;
    loop {
        let n = store
            .write(move |tx| {
                let due = nevermiss_engine::store::outbox::claim(tx, "bench", i64::MAX, i64::MAX, 1000)?;
                for row in &due {
                    nevermiss_engine::store::outbox::mark_delivered(tx, row.id, delivered_at)?;
                }
                Ok(due.len())
            })
            .await
            .unwrap();
        if n == 0 {
            break;
        }
    }
    outcomes
}

/// Simulated days of a steady load, each written at its own (past) time and followed by the
/// engine's retention purge as of the end of that day (`retention::purge`, what the engine runs
/// hourly). With `--deliveries-only`, only deliveries are purged, as retention once did.
async fn retention(args: &[String]) {
    use nevermiss_engine::retention::{self, Policy, Sweep};
    let value = |name: &str, default: u64| -> u64 {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let days = value("--days", 28);
    let jobs = value("--jobs-per-day", 2_500);
    let policy = Policy { delivery_days: value("--delivery-days", 7) as i64, job_days: value("--job-days", 14) as i64 };
    let deliveries_only = args.iter().any(|a| a == "--deliveries-only");

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(DATABASE_FILE);
    let store = Store::open(&db).unwrap();
    let start = now_ms() - days as i64 * DAY;
    println!(
        "\n## retention: {} deliveries a day ({jobs} jobs x 20: 70% applied, 15% duplicates, 15% stale), {days} days; purge after each day{}",
        jobs * 20,
        if deliveries_only { ": deliveries only (as retention once did)".to_owned() } else { format!(" (deliveries {} d, finished jobs {} d)", policy.delivery_days, policy.job_days) }
    );
    println!(
        "{:>4} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "day", "deliveries", "events", "jobs", "outbox", "db MB", "wal MB", "purge s", "day s"
    );
    let mut sweep = Sweep::default();
    for day in 0..days {
        let day_start = start + day as i64 * DAY;
        let began = Instant::now();
        let outcomes = simulate_day(&store, day, day_start, jobs).await;
        if day == 0 {
            println!("     (outcomes of a day: {outcomes:?})");
        }
        let purge_began = Instant::now();
        let end_of_day = day_start + DAY;
        if deliveries_only {
            let cutoff = end_of_day - policy.delivery_days * DAY;
            while store.write(move |tx| nevermiss_engine::store::deliveries::purge_received_before(tx, cutoff, 1000)).await.unwrap() > 0 {}
        } else {
            retention::purge(&store, policy, end_of_day, &mut sweep).await.unwrap();
        }
        let purge_secs = purge_began.elapsed().as_secs_f64();
        let (deliveries, events, job_rows, outbox_rows): (i64, i64, i64, i64) = store
            .read(|c| {
                c.query_row(
                    "SELECT (SELECT count(*) FROM deliveries), (SELECT count(*) FROM job_events), (SELECT count(*) FROM jobs), (SELECT count(*) FROM outbox)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
            })
            .await
            .unwrap();
        let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
        let wal = std::fs::metadata(dir.path().join("nevermiss.db-wal")).map(|m| m.len()).unwrap_or(0);
        println!(
            "{:>4} {deliveries:>10} {events:>10} {job_rows:>10} {outbox_rows:>8} {:>8.1} {:>8.1} {purge_secs:>8.2} {:>9.1}",
            day + 1,
            size as f64 / 1_048_576.0,
            wal as f64 / 1_048_576.0,
            began.elapsed().as_secs_f64()
        );
    }
    let metrics = store.read(nevermiss_engine::store::metrics::read).await.unwrap();
    println!(
        "counters after {days} days: deliveries_total {} applied {} duplicates {} stale {} notifications {} / {}; jobs_by_state succeeded {}",
        metrics.deliveries_total,
        metrics.applied,
        metrics.duplicates,
        metrics.stale,
        metrics.notifications_enqueued,
        metrics.notifications_delivered,
        metrics.jobs_by_state.get("succeeded").copied().unwrap_or(0)
    );
    tokio::task::spawn_blocking(move || store.close()).await.unwrap();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map(String::as_str).unwrap_or("all").to_owned();
    let bin: PathBuf = args
        .iter()
        .position(|a| a == "--bin")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/release/nevermiss"));
    if what == "memory" || what == "all" {
        memory(&bin).await;
    }
    if what == "latency" || what == "all" {
        latency().await;
    }
    if what == "retention" || what == "all" {
        retention(&args).await;
    }
}

//! Receiver benchmark: the same signed `generic` deliveries, sent over N keep-alive connections,
//! to (a) a bare axum handler that only answers `{"outcome":"applied"}`, (b) the floors: the same
//! handler with one durable write of the body per request, on SQLite (`durable`) or PostgreSQL
//! (`pgfloor`), and (c) a real `nevermiss serve` (durable commits: SQLite WAL, synchronous=FULL,
//! or PostgreSQL with `--database`), in one run.
//!
//! ```text
//! cargo build --release --no-default-features --bin nevermiss --example loadgen
//! target/release/examples/loadgen --bin target/release/nevermiss --connections 1,16,64 --seconds 5
//! ```
//!
//! Each connection is a task with its own HTTP/1.1 client (one kept-alive connection) that sends
//! its pre-generated, pre-signed requests back to back. The mix, per job: `queued` seq 1,
//! `running` seq 2 and 3, `succeeded` (or `failed`) seq 4; ~10% of deliveries are re-sent later
//! with the same `deliveryId` (duplicates) and ~5% of jobs get a late `running` event with a new
//! id after their terminal state (stale). A connection interleaves a few jobs at a time and a job's
//! events stay on one connection, in order, so the outcome of every request is known in advance
//! and checked against what NeverMiss answers.
//!
//! Traffic goes to 127.0.0.1 only (or to `--target`, an already running instance).

use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use serde_json::{json, Value};

use nevermiss_engine::providers::generic;

#[derive(Debug, Parser)]
#[command(name = "loadgen", about = "Receiver throughput: bare axum handler vs `nevermiss serve` (durable commits)")]
struct Args {
    /// The nevermiss binary to start as `nevermiss serve`
    #[arg(long = "bin", value_name = "PATH", default_value = "target/release/nevermiss")]
    bin: PathBuf,

    /// Bench an already running instance (its receiver base URL, like http://127.0.0.1:8787)
    /// instead of starting one; it must have the same generic webhook secret. Several (a fleet,
    /// comma-separated) share the connections in turn.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    target: Vec<String>,

    /// Start the instances on this PostgreSQL database (`serve --database`) instead of SQLite
    #[arg(long, value_name = "URL")]
    database: Option<String>,

    /// How many instances to start (more than one needs --database: a fleet); the connections
    /// are shared among them in turn
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    processes: u64,

    /// Connection counts, one step each
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 16, 64])]
    connections: Vec<usize>,

    /// Which targets to measure, of bare, durable (the SQLite floor), pgfloor (the PostgreSQL
    /// floor, on --floor-database or else --database) and nevermiss
    #[arg(long, value_delimiter = ',', default_values_t = vec!["bare".to_string(), "durable".to_string(), "nevermiss".to_string()])]
    targets: Vec<String>,

    /// The PostgreSQL database of the `pgfloor` target [default: --database]
    #[arg(long, value_name = "URL")]
    floor_database: Option<String>,

    /// How the NeverMiss target is named in the results (and in the `result` lines)
    #[arg(long, value_name = "NAME")]
    label: Option<String>,

    /// Measured seconds per step (1 to 120)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=120))]
    seconds: u64,

    /// Warm-up seconds before each measured step, same connections (0 to 30)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=30))]
    warmup: u64,

    /// Most requests pre-generated for one measured step (a step stops early if they run out)
    #[arg(long, default_value_t = 400_000, value_parser = clap::value_parser!(u64).range(100..=5_000_000))]
    max_requests: u64,

    /// Fraction of deliveries re-sent later with the same deliveryId
    #[arg(long, default_value_t = 0.10)]
    duplicates: f64,

    /// Fraction of jobs that get a late, stale progress event after their terminal state
    #[arg(long, default_value_t = 0.05)]
    stale: f64,

    /// The generic webhook secret the requests are signed with (given to the started instance)
    #[arg(long, env = "NEVERMISS_GENERIC_WEBHOOK_SECRET", hide_env_values = true, default_value = "loadgen-secret")]
    secret: String,

    /// Where the started instance's temporary data dir is created [default: the OS temp dir]
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,

    /// Seed of the request mix
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

// ---------------------------------------------------------------------------------------------
// The workload.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    Duplicate,
    Stale,
}

impl Outcome {
    fn index(self) -> usize {
        self as usize
    }
    fn from_answer(body: &[u8]) -> Option<Outcome> {
        match body {
            br#"{"outcome":"applied"}"# => Some(Outcome::Applied),
            br#"{"outcome":"duplicate"}"# => Some(Outcome::Duplicate),
            br#"{"outcome":"stale"}"# => Some(Outcome::Stale),
            _ => {
                let v: Value = serde_json::from_slice(body).ok()?;
                match v.get("outcome")?.as_str()? {
                    "applied" => Some(Outcome::Applied),
                    "duplicate" => Some(Outcome::Duplicate),
                    "stale" => Some(Outcome::Stale),
                    _ => None,
                }
            }
        }
    }
}

/// One pre-signed request and the answer NeverMiss must give it.
#[derive(Clone)]
struct Req {
    body: Bytes,
    signature: HeaderValue,
    expect: Outcome,
}

struct Mix {
    secret: Vec<u8>,
    duplicates: f64,
    stale: f64,
}

/// Jobs a connection has in flight at once (their events interleave).
const JOBS_IN_FLIGHT: usize = 4;

impl Mix {
    fn sign(&self, body: Vec<u8>, expect: Outcome) -> Req {
        let signature = generic::sign(&self.secret, &body);
        Req { signature: HeaderValue::from_str(&signature).expect("a hex signature is a valid header"), body: Bytes::from(body), expect }
    }

    /// `count` requests for one connection; ids start with `prefix` so every step, target and
    /// warm-up is a fresh set of jobs and deliveries.
    fn connection(&self, prefix: &str, count: usize, rng: &mut StdRng) -> Vec<Req> {
        struct Job {
            n: usize,
            step: u8,
            failed: bool,
            late: bool,
        }
        let mut out: Vec<Req> = Vec::with_capacity(count);
        let mut active: VecDeque<Job> = VecDeque::new();
        // (send when out.len() reaches this, the original request)
        let mut resend: VecDeque<(usize, Req)> = VecDeque::new();
        let (mut jobs, mut deliveries) = (0usize, 0usize);
        while out.len() < count {
            if let Some((due, _)) = resend.front() {
                if *due <= out.len() {
                    let (_, original) = resend.pop_front().unwrap();
                    out.push(Req { expect: Outcome::Duplicate, ..original });
                    continue;
                }
            }
            while active.len() < JOBS_IN_FLIGHT {
                active.push_back(Job { n: jobs, step: 0, failed: rng.random_bool(0.2), late: rng.random_bool(self.stale) });
                jobs += 1;
            }
            let mut job = active.pop_front().unwrap();
            job.step += 1;
            let delivery_id = format!("{prefix}-d{deliveries}");
            deliveries += 1;
            let job_id = format!("{prefix}-j{}", job.n);
            let (body, expect) = match job.step {
                1 => (
                    json!({"deliveryId": delivery_id, "jobId": job_id, "state": "queued", "seq": 1,
                           "label": format!("loadgen job {}", job.n), "error": null}),
                    Outcome::Applied,
                ),
                2 | 3 => (json!({"deliveryId": delivery_id, "jobId": job_id, "state": "running", "seq": job.step}), Outcome::Applied),
                4 if job.failed => (
                    json!({"deliveryId": delivery_id, "jobId": job_id, "state": "failed", "seq": 4,
                           "finishedAt": "2026-11-30T10:00:00Z", "error": "CUDA out of memory"}),
                    Outcome::Applied,
                ),
                4 => (
                    json!({"deliveryId": delivery_id, "jobId": job_id, "state": "succeeded", "seq": 4,
                           "finishedAt": "2026-11-30T10:00:00Z"}),
                    Outcome::Applied,
                ),
                // The late progress event of a job that already finished.
                _ => (json!({"deliveryId": delivery_id, "jobId": job_id, "state": "running", "seq": 3}), Outcome::Stale),
            };
            let req = self.sign(serde_json::to_vec(&body).unwrap(), expect);
            if rng.random_bool(self.duplicates) {
                let due = out.len() + 1 + rng.random_range(1..=6);
                let at = resend.partition_point(|(d, _)| *d <= due);
                resend.insert(at, (due, req.clone()));
            }
            out.push(req);
            let done = job.step >= 5 || (job.step == 4 && !job.late);
            if !done {
                active.push_back(job);
            }
        }
        out
    }
}

/// The requests of one step: per connection, a warm-up set and a measured set.
struct StepLoad {
    warmup: Vec<Arc<Vec<Req>>>,
    measured: Vec<Arc<Vec<Req>>>,
    built_in: Duration,
}

fn build_step(mix: &Mix, args: &Args, run_id: &str, target_tag: &str, connections: usize) -> StepLoad {
    let started = Instant::now();
    let per_conn = (args.max_requests as usize).div_ceil(connections);
    // The warm-up is short; a quarter of a step's budget is plenty.
    let warm_per_conn = if args.warmup == 0 { 0 } else { (per_conn / 4).max(50) };
    let mut rng = StdRng::seed_from_u64(args.seed ^ (connections as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut set = |phase: &str, n: usize| -> Vec<Arc<Vec<Req>>> {
        (0..connections)
            .map(|c| Arc::new(mix.connection(&format!("lg{run_id}-{target_tag}-c{connections}-{phase}-k{c}"), n, &mut rng)))
            .collect()
    };
    let warmup = set("w", warm_per_conn);
    let measured = set("m", per_conn);
    StepLoad { warmup, measured, built_in: started.elapsed() }
}

// ---------------------------------------------------------------------------------------------
// Sending.

#[derive(Default)]
struct Tally {
    requests: u64,
    non_200: u64,
    transport_errors: u64,
    first_error: Option<String>,
    /// applied, duplicate, stale as answered
    answered: [u64; 3],
    unknown_outcome: u64,
    /// applied, duplicate, stale as expected for the requests sent
    expected: [u64; 3],
    mismatches: u64,
    latencies_us: Vec<u32>,
    ran_out: bool,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.requests += other.requests;
        self.non_200 += other.non_200;
        self.transport_errors += other.transport_errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        for i in 0..3 {
            self.answered[i] += other.answered[i];
            self.expected[i] += other.expected[i];
        }
        self.unknown_outcome += other.unknown_outcome;
        self.mismatches += other.mismatches;
        self.latencies_us.extend(other.latencies_us);
        self.ran_out |= other.ran_out;
    }
    fn errors(&self) -> u64 {
        self.non_200 + self.transport_errors
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client builds")
}

/// Sends `reqs` back to back on `client` until they run out or `deadline` passes.
async fn run_connection(client: reqwest::Client, url: Arc<str>, reqs: Arc<Vec<Req>>, deadline: Instant) -> (Tally, Instant) {
    let mut t = Tally { latencies_us: Vec::with_capacity(reqs.len()), ..Tally::default() };
    let mut finished = true;
    for req in reqs.iter() {
        if Instant::now() >= deadline {
            finished = false;
            break;
        }
        let started = Instant::now();
        let sent = client
            .post(&*url)
            .header(CONTENT_TYPE, "application/json")
            .header(generic::SIGNATURE_HEADER, req.signature.clone())
            .body(req.body.clone())
            .send()
            .await;
        let answer = match sent {
            Ok(response) => {
                let status = response.status();
                response.bytes().await.map(|body| (status, body))
            }
            Err(e) => Err(e),
        };
        t.latencies_us.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
        t.requests += 1;
        t.expected[req.expect.index()] += 1;
        match answer {
            Ok((status, body)) if status == reqwest::StatusCode::OK => match Outcome::from_answer(&body) {
                Some(outcome) => {
                    t.answered[outcome.index()] += 1;
                    if outcome != req.expect {
                        t.mismatches += 1;
                    }
                }
                None => t.unknown_outcome += 1,
            },
            Ok((status, body)) => {
                t.non_200 += 1;
                t.first_error.get_or_insert_with(|| format!("{status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)])));
            }
            Err(e) => {
                t.transport_errors += 1;
                t.first_error.get_or_insert_with(|| format!("transport: {e}"));
            }
        }
    }
    t.ran_out = finished && !reqs.is_empty();
    (t, Instant::now())
}

/// Runs one phase over all connections; returns the merged tally and the elapsed time.
/// Connection `k` sends to `urls[k % urls.len()]` (a fleet shares the connections in turn).
async fn run_phase(clients: &[reqwest::Client], urls: &[Arc<str>], sets: &[Arc<Vec<Req>>], seconds: u64) -> (Tally, Duration) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let tasks: Vec<_> = clients
        .iter()
        .zip(sets)
        .enumerate()
        .map(|(k, (client, reqs))| tokio::spawn(run_connection(client.clone(), urls[k % urls.len()].clone(), reqs.clone(), deadline)))
        .collect();
    let mut total = Tally::default();
    let mut last = start;
    for task in tasks {
        let (tally, ended) = task.await.expect("a connection task does not panic");
        last = last.max(ended);
        total.merge(tally);
    }
    (total, last - start)
}

struct StepResult {
    target: &'static str,
    connections: usize,
    tally: Tally,
    elapsed: Duration,
    settle: Option<Duration>,
    /// Share of the machine's CPU used by other processes during the measured phase.
    other_cpu: Option<f64>,
    /// CPU time the started instance spent per answered request (µs), when one was started.
    server_cpu_us: Option<f64>,
}

impl StepResult {
    fn rate(&self) -> f64 {
        self.tally.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn percentile_ms(&self, p: f64) -> f64 {
        let l = &self.tally.latencies_us;
        if l.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * l.len() as f64).ceil() as usize;
        l[rank.clamp(1, l.len()) - 1] as f64 / 1000.0
    }
}

async fn bench(target: &'static str, urls: &[String], load: &StepLoad, warmup: u64, seconds: u64, child: Option<u32>) -> StepResult {
    let connections = load.measured.len();
    let clients: Vec<_> = (0..connections).map(|_| client()).collect();
    let urls: Vec<Arc<str>> = urls.iter().map(|url| Arc::from(url.as_str())).collect();
    if warmup > 0 {
        let (warm, _) = run_phase(&clients, &urls, &load.warmup, warmup).await;
        if warm.errors() > 0 {
            eprintln!(
                "  warm-up of {target} at {connections} connections: {} errors (first: {})",
                warm.errors(),
                warm.first_error.as_deref().unwrap_or("?")
            );
        }
    }
    let before = CpuSnapshot::take(child);
    let (mut tally, elapsed) = run_phase(&clients, &urls, &load.measured, seconds).await;
    let after = CpuSnapshot::take(child);
    let other_cpu = before.as_ref().zip(after.as_ref()).map(|(a, b)| a.other_share(b));
    let server_cpu_us = match (child, before.zip(after)) {
        (Some(_), Some((a, b))) if tally.requests > 0 && !BASELINES.contains(&target) => Some(a.child_cpu_us(&b) / tally.requests as f64),
        _ => None,
    };
    tally.latencies_us.sort_unstable();
    StepResult { target, connections, tally, elapsed, settle: None, other_cpu, server_cpu_us }
}

/// CPU time of the whole machine, of this process and of the started instance (Linux `/proc`),
/// to tell whether something else competed for the cores during a step.
struct CpuSnapshot {
    busy: u64,
    total: u64,
    ours: u64,
    child: u64,
}

impl CpuSnapshot {
    fn take(child: Option<u32>) -> Option<CpuSnapshot> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
        if cpu.len() < 8 {
            return None;
        }
        // user nice system idle iowait irq softirq steal; interrupt time is left out (it is
        // mostly this benchmark's own loopback traffic, and no process is charged for it).
        let busy = cpu[0] + cpu[1] + cpu[2] + cpu[7];
        let process = |path: String| -> Option<u64> {
            let text = std::fs::read_to_string(path).ok()?;
            let fields: Vec<&str> = text[text.rfind(')')? + 2..].split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        };
        let child = child.and_then(|pid| process(format!("/proc/{pid}/stat"))).unwrap_or(0);
        let ours = process("/proc/self/stat".into())? + child;
        Some(CpuSnapshot { busy, total: cpu.iter().take(8).sum(), ours, child })
    }

    /// CPU time of the started instance between the two snapshots, in µs (clock ticks are 10 ms
    /// on Linux, so a step of a few seconds measures it to a percent or so).
    fn child_cpu_us(&self, later: &CpuSnapshot) -> f64 {
        let ticks_per_second = 100.0;
        later.child.saturating_sub(self.child) as f64 * 1e6 / ticks_per_second
    }

    /// Busy time of other processes (and of a hypervisor's steal) over the machine's capacity.
    fn other_share(&self, later: &CpuSnapshot) -> f64 {
        let total = later.total.saturating_sub(self.total).max(1) as f64;
        let busy = later.busy.saturating_sub(self.busy) as f64;
        let ours = later.ours.saturating_sub(self.ours) as f64;
        ((busy - ours).max(0.0) / total).min(1.0)
    }
}

// ---------------------------------------------------------------------------------------------
// The targets: two baselines and NeverMiss.

/// The baselines' names in the results; any other target is a NeverMiss instance.
const BASELINES: [&str; 3] = ["bare", "durable", "pgfloor"];
/// The floors: a baseline that commits each body durably before answering.
const FLOORS: [&str; 2] = ["durable", "pgfloor"];

/// What a baseline does with a request's body before it answers 200 `{"outcome":"applied"}`.
enum Keep {
    /// Nothing (`bare`).
    Nothing,
    /// Appends it to a table of a SQLite file through NeverMiss's own store (WAL,
    /// synchronous=FULL, the same group-commit writer): `durable`, the SQLite floor.
    Sqlite(nevermiss_engine::store::Store),
    /// One autocommitted INSERT of it on a pool of `PG_FLOOR_CONNECTIONS` connections
    /// (tokio-postgres and deadpool, as the store): `pgfloor`, the PostgreSQL floor.
    Postgres(deadpool_postgres::Pool),
}

/// The PostgreSQL floor's pool size: NeverMiss's default pool (`PoolLimits::default()`).
const PG_FLOOR_CONNECTIONS: usize = 16;

/// A baseline handler: reads the body fully, keeps it as its `Keep` says, and answers 200
/// `{"outcome":"applied"}`. It runs on its own multi-threaded runtime (as many workers as
/// `nevermiss serve` gets), apart from the clients.
///
/// The floors (`durable`, `pgfloor`) are the least any handler that answers only after a durable
/// commit must do on that database: they show how much of the gap is the database and the write
/// path rather than NeverMiss's own work.
struct Bare {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _data_dir: Option<tempfile::TempDir>,
}

/// The PostgreSQL floor's table (on the benchmark's database, beside NeverMiss's tables).
const PG_FLOOR_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS loadgen_floor (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body BYTEA NOT NULL)";
const PG_FLOOR_INSERT: &str = "INSERT INTO loadgen_floor (body) VALUES ($1)";

enum Kind<'a> {
    Bare,
    Durable,
    PgFloor(&'a str),
}

impl Bare {
    fn start(kind: Kind<'_>) -> anyhow::Result<Bare> {
        let data_dir = if matches!(kind, Kind::Durable) { Some(tempfile::tempdir()?) } else { None };
        let sqlite = match &data_dir {
            Some(dir) => Some(nevermiss_engine::store::Store::open(&dir.path().join("durable.db"))?),
            None => None,
        };
        let pg_config = match kind {
            Kind::PgFloor(url) => Some(url.parse::<tokio_postgres::Config>().context("the floor's database URL")?),
            _ => None,
        };
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("bare-server".into()).spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .thread_name("bare-worker")
                .enable_all()
                .build()
                .expect("the bare server's runtime starts");
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                    Ok(listener) => listener,
                    Err(e) => {
                        let _ = addr_tx.send(Err(anyhow::Error::from(e)));
                        return;
                    }
                };
                let keep = match (sqlite, pg_config) {
                    (Some(store), _) => {
                        store
                            .write(|c| c.execute_batch("CREATE TABLE raw (id INTEGER PRIMARY KEY, body BLOB NOT NULL)"))
                            .await
                            .expect("the durable baseline's table is created");
                        Keep::Sqlite(store)
                    }
                    (None, Some(config)) => match pg_floor_pool(config).await {
                        Ok(pool) => Keep::Postgres(pool),
                        Err(e) => {
                            let _ = addr_tx.send(Err(e));
                            return;
                        }
                    },
                    (None, None) => Keep::Nothing,
                };
                let keep = Arc::new(keep);
                let _ = addr_tx.send(Ok(listener.local_addr().expect("a bound listener has an address")));
                let app = Router::new().route(
                    "/hooks/generic",
                    post(move |body: Bytes| async move {
                        let kept = match &*keep {
                            Keep::Nothing => {
                                std::hint::black_box(&body);
                                Ok(())
                            }
                            Keep::Sqlite(store) => store
                                .write(move |c| c.execute("INSERT INTO raw (body) VALUES (?1)", [&body[..]]))
                                .await
                                .map(drop)
                                .map_err(|e| e.to_string()),
                            Keep::Postgres(pool) => pg_floor_insert(pool, &body).await,
                        };
                        match kept {
                            Ok(()) => (StatusCode::OK, Json(json!({"outcome": "applied"}))),
                            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": e}))),
                        }
                    }),
                );
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
        })?;
        let addr = addr_rx.recv().context("the bare server thread stopped")??;
        Ok(Bare { addr, stop: Some(stop), thread: Some(thread), _data_dir: data_dir })
    }

    fn url(&self) -> String {
        format!("http://{}/hooks/generic", self.addr)
    }
}

/// The PostgreSQL floor's pool, its table made.
async fn pg_floor_pool(config: tokio_postgres::Config) -> anyhow::Result<deadpool_postgres::Pool> {
    use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
    let manager = Manager::from_config(config, tokio_postgres::NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    let pool = Pool::builder(manager).max_size(PG_FLOOR_CONNECTIONS).runtime(Runtime::Tokio1).build()?;
    pool.get().await.context("the floor's database")?.batch_execute(PG_FLOOR_TABLE).await.context("the floor's table")?;
    Ok(pool)
}

/// The floor's one autocommitted INSERT (its statement prepared once per connection).
async fn pg_floor_insert(pool: &deadpool_postgres::Pool, body: &[u8]) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let insert = client.prepare_cached(PG_FLOOR_INSERT).await.map_err(|e| e.to_string())?;
    client.execute(&insert, &[&body]).await.map(drop).map_err(|e| e.to_string())
}

impl Drop for Bare {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A `nevermiss serve` child with a fresh data dir, killed (SIGTERM) and removed on drop.
struct Instance {
    child: Child,
    data_dir: tempfile::TempDir,
    receiver_url: String,
    api_url: String,
    token: String,
}

impl Instance {
    fn start(bin: &Path, secret: &str, work_dir: Option<&Path>, database: Option<&str>) -> anyhow::Result<Instance> {
        if !bin.is_file() {
            bail!(
                "{} does not exist: build it with `cargo build --release --no-default-features --bin nevermiss` or pass --bin",
                bin.display()
            );
        }
        let mut builder = tempfile::Builder::new();
        builder.prefix("nevermiss-loadgen-");
        let data_dir = match work_dir {
            Some(dir) => builder.tempdir_in(dir),
            None => builder.tempdir(),
        }
        .context("cannot create the temporary data dir")?;
        let log = std::fs::File::create(data_dir.path().join("serve.log"))?;
        let mut command = Command::new(bin);
        // Nothing from this shell's NeverMiss settings (a tunnel, another data dir) leaks in, and
        // no desktop notification is attempted.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("NEVERMISS_") {
                command.env_remove(&key);
            }
        }
        command
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env("NEVERMISS_GENERIC_WEBHOOK_SECRET", secret)
            .env("NEVERMISS_TUNNEL", "none")
            .env("RUST_LOG", "warn")
            .envs(database.map(|url| ("NEVERMISS_DATABASE_URL", url)))
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = command.spawn().with_context(|| format!("cannot start {}", bin.display()))?;
        let mut instance = Instance { child, data_dir, receiver_url: String::new(), api_url: String::new(), token: String::new() };
        let info_path = instance.data_dir.path().join("instance.json");
        let started = Instant::now();
        loop {
            if let Some(status) = instance.child.try_wait()? {
                bail!("nevermiss serve exited at start ({status}):\n{}", instance.log_tail());
            }
            if let Ok(text) = std::fs::read_to_string(&info_path) {
                if let Ok(info) = serde_json::from_str::<Value>(&text) {
                    let field = |name: &str| info.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
                    instance.receiver_url = field("receiver_url");
                    instance.api_url = field("api_url");
                    if !instance.receiver_url.is_empty() {
                        break;
                    }
                }
            }
            if started.elapsed() > Duration::from_secs(20) {
                bail!("nevermiss serve did not write instance.json within 20 s:\n{}", instance.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        instance.token =
            std::fs::read_to_string(instance.data_dir.path().join("api-token")).map(|t| t.trim().to_owned()).unwrap_or_default();
        Ok(instance)
    }

    fn url(&self) -> String {
        format!("{}/hooks/generic", self.receiver_url)
    }

    fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.data_dir.path().join("serve.log")) {
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    async fn metrics(&self) -> anyhow::Result<Value> {
        let answer = client()
            .get(format!("{}/api/metrics", self.api_url))
            .bearer_auth(&self.token)
            .send()
            .await?
            .error_for_status()?
            .json::<Value>()
            .await?;
        Ok(answer)
    }

    /// Waits until the outbox has delivered every notification the step enqueued (so the next
    /// step does not share the machine with a backlog); returns how long that took.
    async fn settle(&self) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            match self.metrics().await {
                Ok(m) if m.get("notifications_pending").and_then(Value::as_i64) == Some(0) => return Some(started.elapsed()),
                Ok(_) => {}
                Err(e) => {
                    eprintln!("  cannot read metrics: {e}");
                    return None;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// SIGTERM (through `kill`), then wait for the graceful stop (SIGKILL after 20 s).
    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("nevermiss serve did not stop within 20 s of SIGTERM; killing it");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop();
        // The TempDir field removes the data dir after this.
    }
}

// ---------------------------------------------------------------------------------------------
// Output.

fn print_results(results: &[StepResult], nevermiss_name: &str) {
    println!();
    println!(
        "| {:<9} | {:>5} | {:>8} | {:>6} | {:>12} | {:>7} | {:>7} | {:>6} |",
        "target", "conns", "requests", "secs", "deliveries/s", "p50 ms", "p99 ms", "errors"
    );
    println!("|{:-<11}|{:->7}|{:->10}|{:->8}|{:->14}|{:->9}|{:->9}|{:->8}|", "", "", "", "", "", "", "", "");
    for r in results {
        println!(
            "| {:<9} | {:>5} | {:>8} | {:>6.2} | {:>12.0} | {:>7.2} | {:>7.2} | {:>6} |",
            r.target,
            r.connections,
            r.tally.requests,
            r.elapsed.as_secs_f64(),
            r.rate(),
            r.percentile_ms(50.0),
            r.percentile_ms(99.0),
            r.tally.errors()
        );
    }

    // Each floor measured in this run, and NeverMiss's ratio to it and to the bare handler.
    let mut connection_counts: Vec<usize> = results.iter().map(|r| r.connections).collect();
    connection_counts.dedup();
    for floor in FLOORS {
        if !results.iter().any(|r| r.target == floor) {
            continue;
        }
        println!();
        println!(
            "| {:>5} | {:>12} | {:>12} | {:>12} | {:>15} | {:>14} | {:>17} | {:>7} |",
            "conns",
            "bare/s",
            format!("{floor}/s"),
            format!("{nevermiss_name}/s"),
            "nevermiss/bare",
            format!("{floor}/bare"),
            format!("nevermiss/{floor}"),
            "p99 ms"
        );
        println!("|{:->7}|{:->14}|{:->14}|{:->14}|{:->17}|{:->16}|{:->19}|{:->9}|", "", "", "", "", "", "", "", "");
        for &c in &connection_counts {
            let bare = results.iter().find(|r| r.connections == c && r.target == "bare");
            let floor = results.iter().find(|r| r.connections == c && r.target == floor);
            let nm = results.iter().find(|r| r.connections == c && !BASELINES.contains(&r.target));
            if let (Some(bare), Some(floor), Some(nm)) = (bare, floor, nm) {
                println!(
                    "| {:>5} | {:>12.0} | {:>12.0} | {:>12.0} | {:>14.1}% | {:>13.1}% | {:>16.1}% | {:>7.2} |",
                    c,
                    bare.rate(),
                    floor.rate(),
                    nm.rate(),
                    nm.rate() / bare.rate() * 100.0,
                    floor.rate() / bare.rate() * 100.0,
                    nm.rate() / floor.rate() * 100.0,
                    nm.percentile_ms(99.0)
                );
            }
        }
    }

    println!();
    println!(
        "| {:>5} | {:>8} | {:>9} | {:>6} | {:>22} | {:>10} |",
        "conns", "applied", "duplicate", "stale", "expected (a/d/s)", "settled in"
    );
    println!("|{:->7}|{:->10}|{:->11}|{:->8}|{:->24}|{:->12}|", "", "", "", "", "", "");
    for r in results.iter().filter(|r| !BASELINES.contains(&r.target)) {
        let t = &r.tally;
        let expected = format!("{}/{}/{}", t.expected[0], t.expected[1], t.expected[2]);
        let settle = r.settle.map(|d| format!("{:.2} s", d.as_secs_f64())).unwrap_or_else(|| "-".into());
        println!(
            "| {:>5} | {:>8} | {:>9} | {:>6} | {:>22} | {:>10} |",
            r.connections, t.answered[0], t.answered[1], t.answered[2], expected, settle
        );
    }
}

// ---------------------------------------------------------------------------------------------

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().thread_name("loadgen-client").enable_all().build().expect("the client runtime starts");
    // On Ctrl-C the run is dropped, which stops the started instance and removes its data dir.
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = run(args) => outcome,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    if args.connections.is_empty() || args.connections.iter().any(|&c| c == 0 || c > 1024) {
        bail!("--connections takes counts from 1 to 1024, like 1,16,64");
    }
    if !(0.0..=1.0).contains(&args.duplicates) || !(0.0..=1.0).contains(&args.stale) {
        bail!("--duplicates and --stale are fractions between 0 and 1");
    }
    let mix = Mix { secret: args.secret.as_bytes().to_vec(), duplicates: args.duplicates, stale: args.stale };
    let run_id = format!("{:08x}", rand::random::<u32>());

    let wanted = |target: &str| args.targets.iter().any(|t| t == target);
    let bare = Bare::start(Kind::Bare)?;
    let durable = if wanted("durable") { Some(Bare::start(Kind::Durable)?) } else { None };
    let pgfloor = match (wanted("pgfloor"), args.floor_database.as_deref().or(args.database.as_deref())) {
        (false, _) => None,
        (true, Some(url)) => Some(Bare::start(Kind::PgFloor(url))?),
        (true, None) => bail!("the pgfloor target needs --floor-database or --database"),
    };
    if args.processes > 1 && args.database.is_none() {
        bail!("--processes above 1 needs --database: SQLite has one engine per data dir");
    }
    let mut instances = Vec::new();
    let (nevermiss_name, nevermiss_urls): (&'static str, Vec<String>) = if args.target.is_empty() {
        for _ in 0..args.processes {
            let started = Instance::start(&args.bin, &args.secret, args.work_dir.as_deref(), args.database.as_deref())?;
            eprintln!(
                "nevermiss serve: pid {}, receiver {}, data dir {}, {}",
                started.child.id(),
                started.receiver_url,
                started.data_dir.path().display(),
                if args.database.is_some() { "on PostgreSQL" } else { "on SQLite" }
            );
            instances.push(started);
        }
        let name = match (&args.label, args.database.is_some(), args.processes) {
            (Some(label), _, _) => &*label.clone().leak(),
            (None, false, _) => "nevermiss",
            (None, true, 1) => "pg-1",
            (None, true, _) => "pg-fleet",
        };
        (name, instances.iter().map(Instance::url).collect())
    } else {
        ("target", args.target.iter().map(|t| format!("{}/hooks/generic", t.trim_end_matches('/'))).collect())
    };
    let instance = instances.first();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    eprintln!(
        "{cores} cores; bare handler at {}; {}s warm-up + {}s per step; duplicates {:.0}%, stale jobs {:.0}%",
        bare.url(),
        args.warmup,
        args.seconds,
        args.duplicates * 100.0,
        args.stale * 100.0
    );

    let mut results = Vec::new();
    for &connections in &args.connections {
        // The identical load for both targets: the same requests, in the same order per
        // connection. The bare handler ignores ids, so only the instance needs them fresh.
        let load = build_step(&mix, &args, &run_id, "s", connections);
        eprintln!(
            "step: {connections} connections, {} requests ready (signed in {:.2} s, not measured)",
            load.measured.iter().map(|s| s.len()).sum::<usize>(),
            load.built_in.as_secs_f64()
        );
        let targets = [
            ("bare", Some(vec![bare.url()])),
            ("durable", durable.as_ref().map(|b| vec![b.url()])),
            ("pgfloor", pgfloor.as_ref().map(|b| vec![b.url()])),
            (nevermiss_name, Some(nevermiss_urls.clone())),
        ];
        for (name, urls) in targets {
            let selected = if BASELINES.contains(&name) { name } else { "nevermiss" };
            let Some(urls) = urls.filter(|_| wanted(selected)) else { continue };
            let child = instance.map(|i| i.child.id());
            let mut result = bench(name, &urls, &load, args.warmup, args.seconds, child).await;
            if !BASELINES.contains(&name) {
                if let Some(instance) = instance {
                    result.settle = instance.settle().await;
                }
            }
            eprintln!(
                "  {:<9} {:>5} conns: {:>8} requests, {:>8.0}/s, {} errors, other processes {}{}{}",
                name,
                connections,
                result.tally.requests,
                result.rate(),
                result.tally.errors(),
                result.other_cpu.map(|s| format!("{:.0}% CPU", s * 100.0)).unwrap_or_else(|| "?".into()),
                result.server_cpu_us.map(|us| format!(", instance CPU {us:.0} µs per request")).unwrap_or_default(),
                if result.tally.ran_out { " (ran out of pre-generated requests before the time was up)" } else { "" }
            );
            results.push(result);
        }
    }

    print_results(&results, nevermiss_name);

    // Every answer 200, and NeverMiss's outcomes as the mix predicts.
    let mut ok = true;
    println!();
    for r in &results {
        let t = &r.tally;
        if t.errors() > 0 {
            ok = false;
            println!(
                "{} at {} connections: {} non-200 answers, {} transport errors (first: {})",
                r.target,
                r.connections,
                t.non_200,
                t.transport_errors,
                t.first_error.as_deref().unwrap_or("?")
            );
        }
        if !BASELINES.contains(&r.target) && (t.mismatches > 0 || t.unknown_outcome > 0) {
            ok = false;
            println!(
                "{} at {} connections: {} answers differ from the expected outcome, {} without an outcome",
                r.target, r.connections, t.mismatches, t.unknown_outcome
            );
        }
    }
    let busy: Vec<String> = results
        .iter()
        .filter(|r| r.other_cpu.is_some_and(|s| s > 0.10))
        .map(|r| format!("{} at {} ({:.0}%)", r.target, r.connections, r.other_cpu.unwrap_or(0.0) * 100.0))
        .collect();
    if !busy.is_empty() {
        println!("warning: other processes used over 10% of the machine's CPU during {}: those figures are not clean", busy.join(", "));
    }
    // One line per measured target, for scripts (tools/fleet-bench sums up its runs from them):
    // `result <label> <target> <connections> <deliveries/s> <p99 ms> <errors>` (a NeverMiss
    // outcome other than the expected one is an error too).
    for r in &results {
        let t = &r.tally;
        let wrong = if BASELINES.contains(&r.target) { 0 } else { t.mismatches + t.unknown_outcome };
        println!(
            "result {nevermiss_name} {} {} {:.0} {:.2} {}",
            r.target,
            r.connections,
            r.rate(),
            r.percentile_ms(99.0),
            t.errors() + wrong
        );
    }
    let total: u64 = results.iter().map(|r| r.tally.requests).sum();
    if ok {
        println!("all {total} measured answers were 200; every {nevermiss_name} outcome (applied/duplicate/stale) was the expected one");
    }
    if let Some(instance) = instance {
        match instance.metrics().await {
            Ok(m) => {
                let get = |k: &str| m.get(k).and_then(Value::as_i64).unwrap_or(-1);
                println!(
                    "{nevermiss_name} metrics (warm-ups included): deliveries_total {}, applied {}, duplicates {}, stale {}, \
                     bad_signatures {}, rejected {}, notifications delivered {}/{}",
                    get("deliveries_total"),
                    get("applied"),
                    get("duplicates"),
                    get("stale"),
                    get("bad_signatures"),
                    get("rejected"),
                    get("notifications_delivered"),
                    get("notifications_enqueued")
                );
            }
            Err(e) => println!("cannot read {nevermiss_name} metrics: {e}"),
        }
        let log = instance.log_tail();
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
        if !warnings.is_empty() {
            println!("{nevermiss_name} logged warnings (last lines):\n{}", warnings.join("\n"));
        }
    }
    for mut instance in instances {
        instance.stop();
    }
    drop(bare);
    drop(durable);
    drop(pgfloor);
    Ok(ok)
}

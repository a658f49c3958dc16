//! The chaos scenario shared by `chaos.rs`, `crash.rs` and `fleet_chaos.rs`: thousands of jobs
//! from the built-in simulated provider (duplicates, reordering, delays, drops, failures,
//! cancels) through real `nevermiss serve` children, plus a sender of badly signed deliveries,
//! over many connections; every job tracked through `POST /api/jobs` (so the dropped ones are
//! known) and reconciled until NeverMiss agrees with the provider. Optionally a child is killed
//! with SIGKILL at random moments and restarted on the same data dir and ports.
//!
//! It runs on one of two topologies (`Scenario::fleet`):
//! - one `serve` on its SQLite file, the senders straight at its receiver;
//! - a fleet: N `serve` processes on one PostgreSQL cluster (each its own data dir, log and
//!   ports), a round-robin load balancer (`balancer`) in front of their receivers, which the
//!   senders target; the user's API calls spread across the N admin APIs.
//!
//! Then the end conditions are checked from the database (the SQLite file read-only, or the
//! PostgreSQL database through a `Store` of its own), the API and the children's logs; see
//! `Outcome::check_common` and the suites.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nevermiss_engine::metrics::Metrics;
use nevermiss_engine::simulator::{Simulator, SimulatorConfig};
use nevermiss_engine::store::postgres::PoolLimits;
use nevermiss_engine::store::sql::{self, Db};
use nevermiss_engine::store::Store;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::api::ApiClient;
use super::app::open_db;
use super::balancer::Balancer;
use super::postgres::PgCluster;
use super::serve_child::{free_addr, ServeChild, ServeOptions};
use super::signing::generic_signature;

pub const SECRET: &str = "chaos-webhook-secret";
pub const API_KEY: &str = "chaos-status-api-key";
/// Written to a child's log between two processes' output.
pub const RESTART_MARKER: &str = "=== nevermiss-test: restarted after SIGKILL ";
/// How long the whole scenario may take to converge before the test fails (at least: a larger
/// run is given more, see `run`).
const CONVERGE_WAIT: Duration = Duration::from_secs(240);
/// Connections of the badly signing sender (so also: at most this many of its requests are in
/// flight when a child is killed).
const BAD_CONNECTIONS: u64 = 16;

pub struct Scenario {
    pub jobs: u64,
    /// SIGKILL and restart a server (of the fleet: one picked at random) this many times while
    /// the jobs run.
    pub kills: u32,
    /// Badly signed deliveries sent alongside.
    pub bad_signatures: u64,
    pub seed: u64,
    /// `None`: one `serve` on its SQLite file. `Some(n)`: a fleet of `n` on one PostgreSQL,
    /// behind a load balancer.
    pub fleet: Option<usize>,
    /// How long each job runs at the provider (picked in this range).
    pub job_duration: (Duration, Duration),
    /// While the jobs run, the user asks each server for a reconcile round about this often (a
    /// dashboard or a cron job on each, not in step); `None`: only once they have all finished.
    pub reconcile_every: Option<Duration>,
}

/// Jobs of 50 to 400 ms: all of them finished about when the last one started.
pub const SHORT_JOBS: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(400));

/// The number of jobs: `NEVERMISS_CHAOS_JOBS` when set (`make soak` raises it), else `default`.
pub fn jobs_from_env(default: u64) -> u64 {
    std::env::var("NEVERMISS_CHAOS_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Where the checks read what NeverMiss stored.
pub enum Database {
    /// The one server's SQLite file, in this data dir (opened read-only for each read).
    Sqlite(PathBuf),
    /// The fleet's database, through a store of the test's own.
    Postgres { cluster: PgCluster, store: Store },
}

impl Database {
    /// `f` on a connection; `None` when the database cannot be read.
    pub async fn try_read<T, F>(&self, f: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Db) -> sql::Result<T> + Send + 'static,
    {
        match self {
            Database::Sqlite(data_dir) => {
                let conn = std::panic::catch_unwind(|| open_db(data_dir)).ok()?;
                f(&conn).ok()
            }
            Database::Postgres { store, .. } => store.read(f).await.ok(),
        }
    }

    /// `f` on a connection; panics with the error.
    pub async fn read<T, F>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(&dyn Db) -> sql::Result<T> + Send + 'static,
    {
        match self {
            Database::Sqlite(data_dir) => {
                let conn = open_db(data_dir);
                f(&conn).unwrap_or_else(|e| panic!("reading the SQLite file: {e}"))
            }
            Database::Postgres { store, cluster } => {
                store.read(f).await.unwrap_or_else(|e| panic!("reading PostgreSQL: {e}\n{}", cluster.log()))
            }
        }
    }

    /// A one-integer query (`SELECT count(*) ...`).
    pub async fn count(&self, sql: &'static str) -> i64 {
        self.read(move |db| db.query_row(sql, [], |r| r.get(0))).await
    }

    /// Each generic job's (state, seq) as stored.
    pub async fn job_states(&self) -> HashMap<String, (String, i64)> {
        self.read(|db| {
            db.prepare_cached("SELECT job_id, state, coalesce(seq, -1) FROM jobs WHERE provider = 'generic'")?
                .query_map([], |r| Ok((r.get::<_, String>(0)?, (r.get::<_, String>(1)?, r.get::<_, i64>(2)?))))?
                .collect()
        })
        .await
    }
}

/// One SIGKILL: which server, and the notifications (identities) still pending in the outbox
/// when it died, with those the killed process had claimed.
pub struct Kill {
    pub server: usize,
    pub pending: Vec<String>,
    pub claimed_by_killed: Vec<String>,
}

/// What a run produced, for the suites to check.
pub struct Outcome {
    pub temp: tempfile::TempDir,
    pub database: Database,
    /// Each server's data dir and log (one log per server, across its restarts).
    pub data_dirs: Vec<PathBuf>,
    pub logs: Vec<PathBuf>,
    pub jobs: u64,
    pub kills: u32,
    pub truth: HashMap<String, (String, i64)>,
    pub sim: Simulator,
    pub bad_sent_answered: u64,
    /// The kills, in order.
    pub kill_log: Vec<Kill>,
    pub metrics: Metrics,
    pub elapsed: Duration,
    /// The load balancer of a fleet.
    pub balancer: Option<Balancer>,
    /// The running servers at the end (stopped cleanly by `finish`).
    pub servers: Vec<ServeChild>,
}

/// One server's place: fixed data dir, log and ports (a restarted server comes back on them).
struct Slot {
    data_dir: PathBuf,
    log: PathBuf,
    receiver_addr: SocketAddr,
    api_addr: SocketAddr,
    child: Mutex<Option<ServeChild>>,
    /// Its API at its fixed address; the token is set once the first process wrote it.
    api: Mutex<ApiClient>,
}

struct Shared {
    slots: Vec<Slot>,
    env: Vec<(String, String)>,
    /// The next slot an API call goes to (round robin).
    next_api: AtomicUsize,
}

impl Shared {
    async fn start(&self, i: usize) -> ServeChild {
        let slot = &self.slots[i];
        let child = ServeChild::start(&ServeOptions {
            data_dir: &slot.data_dir,
            log: &slot.log,
            receiver_addr: slot.receiver_addr,
            api_addr: slot.api_addr,
            env: self.env.clone(),
            rust_log: "info",
        })
        .await;
        slot.api.lock().await.token = child.api.token.clone();
        child
    }

    /// The next server's API, in turn.
    async fn next_api(&self) -> ApiClient {
        let i = self.next_api.fetch_add(1, Ordering::SeqCst) % self.slots.len();
        self.slots[i].api.lock().await.clone()
    }

    /// An API call that tolerates the server being down (it is, between a kill and a restart).
    async fn try_post(&self, path: &str, body: &Value) -> Option<(u16, Value)> {
        let api = self.next_api().await;
        try_post_to(&api, path, body).await
    }

    /// A GET to the servers in turn until one answers.
    async fn try_get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Option<T> {
        for _ in 0..self.slots.len() {
            let api = self.next_api().await;
            let Ok(response) = api.request(Method::GET, path).send().await else { continue };
            if response.status().is_success() {
                if let Ok(answer) = response.json().await {
                    return Some(answer);
                }
            }
        }
        None
    }
}

async fn try_post_to(api: &ApiClient, path: &str, body: &Value) -> Option<(u16, Value)> {
    let response = api.request(Method::POST, path).json(body).timeout(Duration::from_secs(120)).send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.unwrap_or(Value::Null)))
}

fn sign(body: &[u8]) -> String {
    generic_signature(SECRET, body)
}

/// Runs the scenario to convergence, reports it as `name` and checks what holds with or without
/// crashes (`Outcome::check_common`).
pub async fn run_checked(name: &str, scenario: Scenario) -> Outcome {
    let outcome = run(scenario).await;
    outcome.report(name);
    outcome.check_common().await;
    outcome
}

/// Runs the scenario to convergence. Panics (with what is missing) if it does not converge.
async fn run(scenario: Scenario) -> Outcome {
    let started = Instant::now();
    let temp = tempfile::tempdir().unwrap();
    let servers = scenario.fleet.unwrap_or(1);
    assert!(servers >= 1);
    let cluster = scenario.fleet.map(|_| PgCluster::start());
    // Ports picked up front: a restarted server comes back on the same ones, as senders expect.
    let slots: Vec<Slot> = (0..servers)
        .map(|i| {
            let (data_dir, log) = match scenario.fleet {
                None => (temp.path().join("data"), temp.path().join("serve.log")),
                Some(_) => (temp.path().join(format!("data-{i}")), temp.path().join(format!("serve-{i}.log"))),
            };
            let api_addr = free_addr();
            Slot {
                data_dir,
                log,
                receiver_addr: free_addr(),
                api_addr,
                child: Mutex::new(None),
                api: Mutex::new(ApiClient::with_client(
                    format!("http://{api_addr}"),
                    "",
                    reqwest::Client::builder().no_proxy().pool_max_idle_per_host(64).build().unwrap(),
                )),
            }
        })
        .collect();
    let balancer = match scenario.fleet {
        None => None,
        Some(_) => Some(Balancer::start(slots.iter().map(|s| format!("http://{}", s.receiver_addr)).collect()).await),
    };
    // Where the provider (and the hostile sender) send webhooks: the one receiver, or the balancer.
    let target_url = match &balancer {
        None => format!("http://{}", slots[0].receiver_addr),
        Some(balancer) => balancer.url.clone(),
    };

    let n = scenario.jobs;
    // Its jobs begin once the servers are up (`begin`), so the user tracks them as they come.
    // Started before, a slow start (seconds under Wine) piled them into one burst of webhooks
    // and tracking calls, answered after the provider's retries had run out.
    let sim = Simulator::bind(SimulatorConfig {
        target_url: target_url.clone(),
        secret: SECRET.into(),
        api_key: API_KEY.into(),
        jobs: Some(n),
        // All jobs started within about 4 s.
        new_job_every: Duration::from_micros((4_000_000 / n.max(1)).max(200)),
        job_duration: scenario.job_duration,
        duplicate_rate: 0.2,
        reorder_rate: 0.15,
        delay_rate: 0.2,
        max_delay: Duration::from_millis(300),
        drop_rate: 0.1,
        fail_rate: 0.2,
        cancel_rate: 0.1,
        seed: scenario.seed,
        job_prefix: format!("chaos{}", scenario.seed),
    })
    .await
    .unwrap();

    let mut env = vec![
        ("NEVERMISS_GENERIC_WEBHOOK_SECRET".to_owned(), SECRET.to_owned()),
        ("NEVERMISS_GENERIC_API_KEY".to_owned(), API_KEY.to_owned()),
        ("NEVERMISS_GENERIC_BASE_URL".to_owned(), sim.base_url.clone()),
        ("NEVERMISS_POLL_INTERVAL".to_owned(), "5".to_owned()),
    ];
    if let Some(cluster) = &cluster {
        env.push(("NEVERMISS_DATABASE_URL".to_owned(), cluster.url.clone()));
    }
    let shared = Arc::new(Shared { slots, env, next_api: AtomicUsize::new(0) });
    // The fleet starts at once (its processes migrate the database once between them).
    let first = futures_util::future::join_all((0..servers).map(|i| shared.start(i))).await;
    for (slot, child) in shared.slots.iter().zip(first) {
        *slot.child.lock().await = Some(child);
    }
    // One notification per job is what the scenario counts: no summaries of a burst.
    shared.slots[0].api.lock().await.clone().never_summarize().await;
    sim.begin();
    let database = match cluster {
        None => Database::Sqlite(shared.slots[0].data_dir.clone()),
        Some(cluster) => {
            let store =
                Store::connect(&cluster.url, PoolLimits::default(), "test").await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.log()));
            Database::Postgres { cluster, store }
        }
    };
    let done = Arc::new(AtomicBool::new(false));

    // The user: tracks each job as soon as the provider has it (retrying while a server is down).
    let tracker = {
        let (shared, truth, done) = (shared.clone(), sim.truth_handle(), done.clone());
        tokio::spawn(async move {
            let mut tracked: HashSet<String> = HashSet::new();
            loop {
                let ids: Vec<String> = truth.lock().unwrap().keys().filter(|id| !tracked.contains(*id)).cloned().collect();
                let calls = ids.iter().map(|id| {
                    let shared = shared.clone();
                    async move {
                        let body = json!({"provider": "generic", "job_id": id});
                        matches!(shared.try_post("/api/jobs", &body).await, Some((200 | 201, _)))
                    }
                });
                let results = futures_util::future::join_all(calls).await;
                for (id, ok) in ids.into_iter().zip(results) {
                    if ok {
                        tracked.insert(id);
                    }
                }
                if done.load(Ordering::SeqCst) && tracked.len() as u64 == n {
                    return tracked.len();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // A hostile sender: badly signed deliveries over 16 connections at once. Counted when the
    // receiver answered them (401); while the server is down they are simply not delivered (a
    // refused connection, or the balancer's 502).
    let bad_answered = Arc::new(AtomicU64::new(0));
    let bad_sender = {
        let (answered, total) = (bad_answered.clone(), scenario.bad_signatures);
        let url = format!("{target_url}/hooks/generic");
        tokio::spawn(async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let next = Arc::new(AtomicU64::new(0));
            let workers = (0..BAD_CONNECTIONS).map(|_| {
                let (client, url, next, answered) = (client.clone(), url.clone(), next.clone(), answered.clone());
                async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= total {
                            return;
                        }
                        let body =
                            json!({"deliveryId": format!("bad-{i}"), "jobId": format!("bad-job-{i}"), "state": "succeeded", "seq": 1})
                                .to_string();
                        let mut signature = sign(body.as_bytes());
                        // The right signature with its last digit changed.
                        let last = if signature.ends_with('0') { "1" } else { "0" };
                        signature.replace_range(signature.len() - 1.., last);
                        let sent = client.post(&url).header("x-agent-signature", signature).body(body).send().await;
                        match sent {
                            Ok(r) if r.status() == reqwest::StatusCode::UNAUTHORIZED => {
                                answered.fetch_add(1, Ordering::SeqCst);
                            }
                            // Not answered by a receiver (the balancer's 502), or its storage was
                            // unavailable (503: nothing kept or counted, "retry later"; a fleet's
                            // pool waits out under load): not answered, as a refused connection.
                            Ok(r)
                                if r.status() == reqwest::StatusCode::BAD_GATEWAY
                                    || r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE =>
                            {
                                tokio::time::sleep(Duration::from_millis(50)).await
                            }
                            Ok(r) => panic!("a bad signature was answered {}", r.status()),
                            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            });
            futures_util::future::join_all(workers).await;
        })
    };

    // The user asking each server for a round, while the jobs run: each on its own, unsynchronized
    // with the others (a cron job or a dashboard per server).
    let askers: Vec<_> = match scenario.reconcile_every {
        None => Vec::new(),
        Some(every) => (0..servers)
            .map(|i| {
                let (shared, done) = (shared.clone(), done.clone());
                let mut rng = rand::rngs::StdRng::seed_from_u64(scenario.seed ^ (i as u64 + 1));
                tokio::spawn(async move {
                    let everything = json!({});
                    while !done.load(Ordering::SeqCst) {
                        tokio::time::sleep(every.mul_f64(rng.random_range(0.5..1.5))).await;
                        let api = shared.slots[i].api.lock().await.clone();
                        try_post_to(&api, "/api/reconcile", &everything).await;
                    }
                })
            })
            .collect(),
    };

    // The crash: SIGKILL at random moments while the jobs run, then a restart on the same data
    // dir and ports.
    let mut rng = rand::rngs::StdRng::seed_from_u64(scenario.seed ^ 0x5eed);
    let mut kill_log: Vec<Kill> = Vec::new();
    for k in 0..scenario.kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(400..1800))).await;
        let i = rng.random_range(0..servers);
        let slot = &shared.slots[i];
        let server = slot.child.lock().await.take().expect("a server runs");
        let pid = server.pid();
        server.kill9();
        // What was pending in the outbox at the kill (the process is gone: for it, this is
        // final), and which of it the killed process had claimed.
        let node = std::fs::read_to_string(slot.data_dir.join("node-id")).unwrap_or_default().trim().to_owned();
        let rows = database
            .try_read(|db| {
                db.prepare_cached("SELECT provider, job_id, kind, coalesce(claimed_by, '') FROM outbox WHERE delivered_at IS NULL")?
                    .query_map([], |r| {
                        let identity =
                            format!("nevermiss:{}:{}:{}", r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?);
                        Ok((identity, r.get::<_, String>(3)?))
                    })?
                    .collect::<sql::Result<Vec<(String, String)>>>()
            })
            .await
            .unwrap_or_default();
        let claimed_by_killed: Vec<String> = rows.iter().filter(|(_, by)| *by == node).map(|(id, _)| id.clone()).collect();
        let pending: Vec<String> = rows.into_iter().map(|(id, _)| id).collect();
        eprintln!(
            "crash {}: SIGKILL to server {i} (pid {pid}) at {:.1?} ({}), {} notifications pending ({} claimed by it)",
            k + 1,
            started.elapsed(),
            nevermiss_engine::store::job::rfc3339(nevermiss_engine::store::job::now_ms()),
            pending.len(),
            claimed_by_killed.len()
        );
        kill_log.push(Kill { server: i, pending, claimed_by_killed });
        // A marker in its log: what follows is the next process's.
        let mut file = std::fs::OpenOptions::new().append(true).open(&slot.log).unwrap();
        std::io::Write::write_all(&mut file, format!("{}{}\n", RESTART_MARKER, k + 1).as_bytes()).unwrap();
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..500))).await;
        let restarted = shared.start(i).await;
        eprintln!("crash {}: server {i} restarted as pid {} at {:.1?}", k + 1, restarted.pid(), started.elapsed());
        *slot.child.lock().await = Some(restarted);
    }

    // The provider finishes every job; the user keeps reconciling until NeverMiss agrees (on a
    // fleet, asking every server at once: their rounds contend for the provider's lease).
    // The bound grows with the run (`make soak` runs 20,000 jobs: on a fleet on this machine,
    // about 15 ms of processing each).
    let converge_wait = CONVERGE_WAIT.max(Duration::from_millis(15 * n));
    let deadline = Instant::now() + converge_wait;
    while sim.stats.jobs_finished.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "the simulated provider did not finish its {n} jobs");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done.store(true, Ordering::SeqCst);
    let tracked = tokio::time::timeout(converge_wait, tracker).await.expect("every job was tracked").unwrap();
    assert_eq!(tracked as u64, n);
    bad_sender.await.unwrap();
    for asker in askers {
        asker.await.unwrap();
    }
    let truth: HashMap<String, (String, i64)> = sim.truth().into_iter().map(|j| (j.job_id, (j.state.as_str().to_owned(), j.seq))).collect();
    assert_eq!(truth.len() as u64, n);
    let mut passes = 0;
    loop {
        let mut apis = Vec::new();
        for slot in &shared.slots {
            apis.push(slot.api.lock().await.clone());
        }
        let everything = json!({});
        futures_util::future::join_all(apis.iter().map(|api| try_post_to(api, "/api/reconcile", &everything))).await;
        passes += 1;
        let seen = database.job_states().await;
        let wrong: Vec<String> = truth
            .iter()
            .filter(|(id, t)| seen.get(*id) != Some(*t))
            .take(5)
            .map(|(id, t)| format!("{id}: provider {t:?}, NeverMiss {:?}", seen.get(id)))
            .collect();
        if wrong.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "NeverMiss did not agree with the provider after {passes} passes: {wrong:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every webhook the provider will ever send has been answered: those not dropped, each copy
    // of those duplicated, each acknowledged once.
    let stats = &sim.stats;
    loop {
        let expected = 3 * n - stats.webhooks_dropped.load(Ordering::SeqCst) + stats.webhooks_duplicated.load(Ordering::SeqCst);
        let acknowledged = stats.acknowledged.lock().unwrap().len() as u64;
        if acknowledged >= expected {
            break;
        }
        assert!(Instant::now() < deadline, "the provider's webhooks were not all acknowledged ({acknowledged} of {expected})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And every notification has gone out.
    loop {
        let delivered = shared.try_get::<Metrics>("/api/metrics").await.map(|m| m.store.notifications_delivered);
        if delivered == Some(n as i64) {
            break;
        }
        assert!(Instant::now() < deadline, "notifications delivered: {delivered:?} of {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics: Metrics = shared.try_get("/api/metrics").await.expect("metrics");
    let mut running = Vec::new();
    for slot in &shared.slots {
        running.push(slot.child.lock().await.take().expect("every server runs at the end"));
    }
    Outcome {
        temp,
        database,
        data_dirs: shared.slots.iter().map(|s| s.data_dir.clone()).collect(),
        logs: shared.slots.iter().map(|s| s.log.clone()).collect(),
        jobs: n,
        kills: scenario.kills,
        truth,
        sim,
        bad_sent_answered: bad_answered.load(Ordering::SeqCst),
        kill_log,
        metrics,
        elapsed: started.elapsed(),
        balancer,
        servers: running,
    }
}

fn rank(state: &str) -> i64 {
    match state {
        "unknown" => 0,
        "queued" => 1,
        "running" => 2,
        "succeeded" | "failed" | "canceled" => 3,
        other => panic!("unknown state {other:?} on a timeline"),
    }
}

/// What the notifier's log lines say after the kills (`Outcome::check_notified_at_least_once`).
pub struct Notified {
    /// Per identity, how many times it was shown, all processes together.
    pub shown: HashMap<String, usize>,
    /// Identities pending in the outbox at some kill.
    pub pending_at_kills: HashSet<String>,
    pub pending_total: usize,
    /// Showings beyond the first, all identities together.
    pub repeats: usize,
    /// The messages a killed process showed whose notifications were shown again after it: one
    /// send it could not mark before it died (a summary is one message, however many it covers).
    pub repeated_messages: usize,
}

impl Outcome {
    pub fn stat(&self, value: &AtomicU64) -> u64 {
        value.load(Ordering::SeqCst)
    }

    /// What holds with or without crashes, on one server or a fleet.
    pub async fn check_common(&self) {
        let db = &self.database;
        // 1. Every job's state equals the provider's truth (checked at convergence; again here).
        let seen = db.job_states().await;
        for (id, truth) in &self.truth {
            assert_eq!(seen.get(id), Some(truth), "job {id}");
        }

        // 2. No job ever moved backwards: its applied events, in order, never go down in rank,
        // and within one non-terminal rank their seq only goes up; at most one terminal event is
        // applied; the last applied event is the job's state.
        let events: Vec<(String, String, i64)> = db
            .read(|db| {
                db.prepare_cached(
                    "SELECT job_id, state, seq FROM job_events WHERE provider = 'generic' AND outcome = 'applied' ORDER BY id",
                )?
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))?
                .collect()
            })
            .await;
        let mut timelines: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
        for (job, state, seq) in events {
            timelines.entry(job).or_default().push((state, seq));
        }
        for (job, events) in &timelines {
            for pair in events.windows(2) {
                let ((a, sa), (b, sb)) = (&pair[0], &pair[1]);
                assert!(rank(b) >= rank(a), "{job} moved backwards: {a} then {b} ({events:?})");
                if rank(a) == rank(b) {
                    assert!(rank(a) < 3, "{job} left a terminal state: {events:?}");
                    assert!(sb > sa, "{job}: seq did not go up within {a}: {events:?}");
                }
            }
            let last = events.last().unwrap();
            assert_eq!(Some(&(last.0.clone(), last.1)), seen.get(job), "{job}: the last applied event is its state");
        }
        for id in self.truth.keys() {
            assert!(timelines.contains_key(id), "{id} has applied events on its timeline");
        }

        // 3. Exactly one terminal outbox row per finished job (all of them are), each delivered;
        // no stuck alerts for jobs this short.
        assert_eq!(db.count("SELECT count(*) FROM outbox WHERE kind = 'terminal'").await, self.jobs as i64);
        assert_eq!(
            db.count("SELECT count(*) FROM (SELECT 1 FROM outbox WHERE kind = 'terminal' GROUP BY provider, job_id HAVING count(*) > 1) AS twice")
                .await,
            0
        );
        assert_eq!(db.count("SELECT count(*) FROM outbox WHERE kind = 'terminal' AND delivered_at IS NULL").await, 0);
        assert_eq!(db.count("SELECT count(*) FROM outbox WHERE kind = 'stuck'").await, 0);
        assert_eq!((self.metrics.store.notifications_enqueued as u64), self.jobs);
        assert_eq!((self.metrics.store.notifications_delivered as u64), self.jobs);
        assert_eq!(db.count("SELECT count(*) FROM jobs WHERE rank = 3 AND notified_at IS NULL").await, 0);

        // 4. Nothing signed badly was stored; nothing was rejected (the provider sends only
        // well-formed payloads).
        assert_eq!(db.count("SELECT count(*) FROM deliveries WHERE delivery_id LIKE 'bad-%'").await, 0);
        assert_eq!(db.count("SELECT count(*) FROM jobs WHERE job_id LIKE 'bad-job-%'").await, 0);
        assert_eq!((self.metrics.store.rejected as u64), 0);
        if self.kills == 0 {
            assert_eq!((self.metrics.store.bad_signatures as u64), self.bad_sent_answered, "every 401 counted once");
        } else {
            // A bad signature counted (committed) just before a SIGKILL was never answered: at
            // most the 16 in flight per kill.
            let counted = self.metrics.store.bad_signatures as u64;
            assert!(
                (self.bad_sent_answered..=self.bad_sent_answered + BAD_CONNECTIONS * self.kills as u64).contains(&counted),
                "bad_signatures {counted}, answered {}",
                self.bad_sent_answered
            );
        }

        // 5. Every delivery the receiver acknowledged is stored (a 200 means it is on disk).
        let acknowledged: HashSet<String> = self.sim.stats.acknowledged.lock().unwrap().iter().cloned().collect();
        let stored: HashSet<String> = db
            .read(|db| {
                db.prepare_cached("SELECT delivery_id FROM deliveries WHERE provider = 'generic' AND status = 'accepted'")?
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect()
            })
            .await;
        let lost: Vec<&String> = acknowledged.difference(&stored).take(5).collect();
        assert!(lost.is_empty(), "acknowledged with a 200 but not stored: {lost:?}");
        // The counters add up: each stored delivery was applied or stale once; each other signed
        // request to the hook was a duplicate.
        let accepted = stored.len() as u64;
        assert_eq!((self.metrics.store.applied as u64) + (self.metrics.store.stale as u64), accepted, "{:?}", self.metrics);
        assert_eq!(
            (self.metrics.store.deliveries_total as u64),
            accepted + (self.metrics.store.duplicates as u64) + (self.metrics.store.bad_signatures as u64),
            "{:?}",
            self.metrics
        );
        let rescues = db.count("SELECT count(*) FROM jobs WHERE terminal_source = 'pull'").await as u64;
        assert_eq!((self.metrics.store.reconcile_rescues as u64), rescues);
    }

    /// The log notifier's lines, per notification identity, across every child's stderr.
    pub fn notifier_lines(&self) -> HashMap<String, usize> {
        let mut lines = HashMap::new();
        for process in self.notifier_lines_per_server().into_iter().flatten() {
            for (identity, shown) in process {
                *lines.entry(identity).or_default() += shown;
            }
        }
        lines
    }

    /// Per server, the log notifier's lines per identity in each process's part of its log
    /// (split at the restart markers): index 0 is its first process.
    pub fn notifier_lines_per_server(&self) -> Vec<Vec<HashMap<String, usize>>> {
        self.logs.iter().map(|log| notifier_lines_per_process(log)).collect()
    }

    /// The one server's `notifier_lines_per_server`.
    pub fn notifier_lines_per_process(&self) -> Vec<HashMap<String, usize>> {
        assert_eq!(self.logs.len(), 1, "one server");
        notifier_lines_per_process(&self.logs[0])
    }

    /// At least once in delivery: every finished job's notification is in some process's log,
    /// and each notification pending at a kill went out after it: in a later process of the
    /// killed server (the next start delivers what the outbox still holds for it), or by another
    /// server of the fleet.
    pub fn check_notified_at_least_once(&self) -> Notified {
        let per_server = self.notifier_lines_per_server();
        let shown = self.notifier_lines();
        let mut repeats = 0;
        for id in self.truth.keys() {
            let identity = format!("nevermiss:generic:{id}:terminal");
            let times = shown.get(&identity).copied().unwrap_or(0);
            assert!(times >= 1, "{identity} was never notified");
            repeats += times - 1;
        }
        let mut pending_at_kills = HashSet::new();
        let mut pending_total = 0;
        for (k, kill) in self.kill_log.iter().enumerate() {
            // The killed process's part of its server's log is the one this kill ended.
            let part = self.kill_log[..k].iter().filter(|earlier| earlier.server == kill.server).count();
            pending_total += kill.pending.len();
            for identity in &kill.pending {
                let later = per_server[kill.server][part + 1..].iter().any(|p| p.contains_key(identity));
                let elsewhere = per_server
                    .iter()
                    .enumerate()
                    .filter(|(s, _)| *s != kill.server)
                    .any(|(_, parts)| parts.iter().any(|p| p.contains_key(identity)));
                assert!(
                    later || elsewhere,
                    "{identity} was pending at kill {} (server {}) and never notified after it",
                    k + 1,
                    kill.server
                );
                pending_at_kills.insert(identity.clone());
            }
        }
        // In each killed process's part of its log, the messages (lines) that cover a notification
        // shown more than once.
        let mut repeated_messages = 0;
        for (k, kill) in self.kill_log.iter().enumerate() {
            let part = self.kill_log[..k].iter().filter(|earlier| earlier.server == kill.server).count();
            let messages = notifier_messages_per_process(&self.logs[kill.server]);
            repeated_messages += messages[part]
                .iter()
                .filter(|covered| covered.iter().any(|identity| shown.get(identity).copied().unwrap_or(0) > 1))
                .count();
        }
        Notified { shown, pending_at_kills, pending_total, repeats, repeated_messages }
    }

    /// How many times the servers answered 503 because their storage was unavailable (their
    /// logs' "storage failed" lines): the sender retries those.
    pub fn storage_failures(&self) -> usize {
        self.logs
            .iter()
            .map(|log| std::fs::read_to_string(log).unwrap_or_default().lines().filter(|l| l.contains("storage failed")).count())
            .sum()
    }

    /// The recorded reconcile rounds as (started_at ms, duration_ms, providers), by start.
    pub async fn reconcile_rounds(&self) -> Vec<(i64, i64, String)> {
        let mut rounds: Vec<(i64, i64, String)> = self
            .database
            .read(|db| {
                db.prepare_cached("SELECT started_at, duration_ms, providers FROM reconcile_passes ORDER BY id")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .await;
        rounds.sort();
        rounds
    }

    pub fn report(&self, name: &str) {
        let s = &self.sim.stats;
        let balancer = match &self.balancer {
            None => String::new(),
            Some(b) => format!(
                "; balancer: {:?} answered per server, {} answered 502",
                b.stats.answered.iter().map(|a| a.load(Ordering::SeqCst)).collect::<Vec<_>>(),
                b.stats.bad_gateway.load(Ordering::SeqCst)
            ),
        };
        eprintln!(
            "{name}: {} jobs on {} server(s), {} kills in {:.1?}; provider sent {} webhooks ({} dropped, {} duplicated, {} delayed, {} reordered, {} retried), {} status requests; bad signatures answered {}{balancer}; storage unavailable (503) {} times; NeverMiss: {:?}",
            self.jobs,
            self.logs.len(),
            self.kills,
            self.elapsed,
            self.stat(&s.webhooks_sent),
            self.stat(&s.webhooks_dropped),
            self.stat(&s.webhooks_duplicated),
            self.stat(&s.webhooks_delayed),
            self.stat(&s.webhooks_reordered),
            self.stat(&s.webhooks_retried),
            self.stat(&s.status_requests),
            self.bad_sent_answered,
            self.storage_failures(),
            self.metrics
        );
    }

    /// Stops the servers cleanly.
    pub async fn finish(mut self) {
        let stops = self.servers.drain(..).map(|server| server.stop());
        for (i, clean) in futures_util::future::join_all(stops).await.into_iter().enumerate() {
            assert!(clean, "server {i} stops cleanly");
        }
        let _ = Path::new(&self.temp.path());
    }
}

/// The log notifier's lines per identity in each process's part of one log (split at the
/// restart markers): index 0 is the first process.
/// Per process (split at the restart markers), each notifier line's identities: one message, a
/// summary's covering several.
fn notifier_messages_per_process(log: &Path) -> Vec<Vec<Vec<String>>> {
    let log = String::from_utf8_lossy(&std::fs::read(log).unwrap()).into_owned();
    let mut parts = vec![Vec::new()];
    for line in log.lines() {
        if line.starts_with(RESTART_MARKER) {
            parts.push(Vec::new());
        } else {
            let covered = super::serve_child::notified_identities(line);
            if !covered.is_empty() {
                parts.last_mut().unwrap().push(covered);
            }
        }
    }
    parts
}

fn notifier_lines_per_process(log: &Path) -> Vec<HashMap<String, usize>> {
    let log = String::from_utf8_lossy(&std::fs::read(log).unwrap()).into_owned();
    let mut parts = vec![HashMap::new()];
    for line in log.lines() {
        if line.starts_with(RESTART_MARKER) {
            parts.push(HashMap::new());
        } else {
            // A summary's line stands for each notification it covers too.
            for identity in super::serve_child::notified_identities(line) {
                *parts.last_mut().unwrap().entry(identity).or_default() += 1;
            }
        }
    }
    parts
}

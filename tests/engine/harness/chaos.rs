//! The chaos scenario shared by `chaos.rs` and `crash.rs`: thousands of jobs from the built-in
//! simulated provider (duplicates, reordering, delays, drops, failures, cancels) through a real
//! `nevermiss serve` child, plus a sender of badly signed deliveries, over many connections; every
//! job tracked through `POST /api/jobs` (so the dropped ones are known) and reconciled until
//! NeverMiss agrees with the provider. Optionally the child is killed with SIGKILL at random
//! moments and restarted on the same data dir and ports.
//!
//! Then the end conditions are checked from the real SQLite file (read-only), the API and the
//! child's log; see `Outcome::check_common` and the two suites.



use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nevermiss_engine::metrics::Metrics;
use nevermiss_engine::simulator::{Simulator, SimulatorConfig};
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::api::ApiClient;
use super::app::{count, open_db};
use super::serve_child::{free_addr, ServeChild, ServeOptions};
use super::signing::generic_signature;

pub const SECRET: &str = "chaos-webhook-secret";
pub const API_KEY: &str = "chaos-status-api-key";
/// Written to the log between two processes' output.
pub const RESTART_MARKER: &str = "=== nevermiss-test: restarted after SIGKILL ";
/// How long the whole scenario may take to converge before the test fails.
const CONVERGE_WAIT: Duration = Duration::from_secs(240);

pub struct Scenario {
    pub jobs: u64,
    /// SIGKILL and restart the server this many times while the jobs run.
    pub kills: u32,
    /// Badly signed deliveries sent alongside.
    pub bad_signatures: u64,
    pub seed: u64,
}

/// The number of jobs: `NEVERMISS_CHAOS_JOBS` when set (`make soak` raises it), else `default`.
pub fn jobs_from_env(default: u64) -> u64 {
    std::env::var("NEVERMISS_CHAOS_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What a run produced, for the suites to check.
pub struct Outcome {
    pub temp: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub jobs: u64,
    pub kills: u32,
    pub truth: HashMap<String, (String, i64)>,
    pub sim: Simulator,
    pub bad_sent_answered: u64,
    /// Per kill, the notifications (identities) still pending in the outbox when it died.
    pub pending_at_kills: Vec<Vec<String>>,
    pub metrics: Metrics,
    pub elapsed: Duration,
    /// The running server at the end (stopped cleanly by `finish`).
    pub server: Option<ServeChild>,
}

struct Shared {
    server: Mutex<Option<ServeChild>>,
    options: (PathBuf, PathBuf, SocketAddr, SocketAddr, Vec<(String, String)>),
    /// The API at its fixed address; the token is set once the first server wrote it.
    api: Mutex<ApiClient>,
}

impl Shared {
    async fn start(&self) -> ServeChild {
        let (data_dir, log, receiver_addr, api_addr, env) = &self.options;
        ServeChild::start(&ServeOptions {
            data_dir,
            log,
            receiver_addr: *receiver_addr,
            api_addr: *api_addr,
            env: env.clone(),
            rust_log: "info",
        })
        .await
    }

    /// An API call that tolerates the server being down (it is, between a kill and a restart).
    async fn try_post(&self, path: &str, body: &Value) -> Option<(u16, Value)> {
        let api = self.api.lock().await.clone();
        let response = api
            .request(Method::POST, path)
            .json(body)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.unwrap_or(Value::Null)))
    }

    async fn try_get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Option<T> {
        let api = self.api.lock().await.clone();
        let response = api.request(Method::GET, path).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json().await.ok()
    }
}

fn sign(body: &[u8]) -> String {
    generic_signature(SECRET, body)
}

/// Runs the scenario to convergence, reports it as `name` and checks what holds with or without
/// crashes (`Outcome::check_common`).
pub async fn run_checked(name: &str, scenario: Scenario) -> Outcome {
    let outcome = run(scenario).await;
    outcome.report(name);
    outcome.check_common();
    outcome
}

/// Runs the scenario to convergence. Panics (with what is missing) if it does not converge.
async fn run(scenario: Scenario) -> Outcome {
    let started = Instant::now();
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let log = temp.path().join("serve.log");
    // Ports picked up front: a restarted server comes back on the same ones, as senders expect.
    let (receiver_addr, api_addr) = (free_addr(), free_addr());

    let n = scenario.jobs;
    let sim = Simulator::start(SimulatorConfig {
        target_url: format!("http://{receiver_addr}"),
        secret: SECRET.into(),
        api_key: API_KEY.into(),
        jobs: Some(n),
        // All jobs started within about 4 s, each running 50 to 400 ms.
        new_job_every: Duration::from_micros((4_000_000 / n.max(1)).max(200)),
        job_duration: (Duration::from_millis(50), Duration::from_millis(400)),
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

    let env = vec![
        ("NEVERMISS_GENERIC_WEBHOOK_SECRET".to_owned(), SECRET.to_owned()),
        ("NEVERMISS_GENERIC_API_KEY".to_owned(), API_KEY.to_owned()),
        ("NEVERMISS_GENERIC_BASE_URL".to_owned(), sim.base_url.clone()),
        ("NEVERMISS_POLL_INTERVAL".to_owned(), "5".to_owned()),
    ];
    let shared = Arc::new(Shared {
        server: Mutex::new(None),
        options: (data_dir.clone(), log.clone(), receiver_addr, api_addr, env),
        api: Mutex::new(ApiClient::with_client(
            format!("http://{api_addr}"),
            "",
            reqwest::Client::builder().pool_max_idle_per_host(64).build().unwrap(),
        )),
    });
    let first = shared.start().await;
    shared.api.lock().await.token = first.api.token.clone();
    *shared.server.lock().await = Some(first);
    let done = Arc::new(AtomicBool::new(false));

    // The user: tracks each job as soon as the provider has it (retrying while the server is down).
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
    // receiver answered them (401); while the server is down they are simply not delivered.
    let bad_answered = Arc::new(AtomicU64::new(0));
    let bad_sender = {
        let (answered, total) = (bad_answered.clone(), scenario.bad_signatures);
        let url = format!("http://{receiver_addr}/hooks/generic");
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let next = Arc::new(AtomicU64::new(0));
            let workers = (0..16).map(|_| {
                let (client, url, next, answered) = (client.clone(), url.clone(), next.clone(), answered.clone());
                async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= total {
                            return;
                        }
                        let body = json!({"deliveryId": format!("bad-{i}"), "jobId": format!("bad-job-{i}"), "state": "succeeded", "seq": 1}).to_string();
                        let mut signature = sign(body.as_bytes());
                        // The right signature with its last digit changed.
                        let last = if signature.ends_with('0') { "1" } else { "0" };
                        signature.replace_range(signature.len() - 1.., last);
                        let sent = client.post(&url).header("x-agent-signature", signature).body(body).send().await;
                        match sent {
                            Ok(r) if r.status() == reqwest::StatusCode::UNAUTHORIZED => {
                                answered.fetch_add(1, Ordering::SeqCst);
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

    // The crash: SIGKILL at random moments while the jobs run, then a restart on the same ports.
    let mut rng = rand::rngs::StdRng::seed_from_u64(scenario.seed ^ 0x5eed);
    let mut pending_at_kills: Vec<Vec<String>> = Vec::new();
    for k in 0..scenario.kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(400..1800))).await;
        let server = shared.server.lock().await.take().expect("a server runs");
        let pid = server.pid();
        server.kill9();
        // What was pending in the outbox at the kill (the process is gone: this is final).
        let pending: Vec<String> = match std::panic::catch_unwind(|| open_db(&data_dir)) {
            Ok(db) => {
                let mut stmt = db.prepare("SELECT provider, job_id, kind FROM outbox WHERE delivered_at IS NULL").unwrap();
                let rows = stmt.query_map([], |r| Ok(format!("nevermiss:{}:{}:{}", r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)));
                rows.unwrap().map(Result::unwrap).collect()
            }
            Err(_) => Vec::new(),
        };
        eprintln!(
            "crash {}: SIGKILL to pid {pid} at {:.1?}, {} notifications pending",
            k + 1,
            started.elapsed(),
            pending.len()
        );
        pending_at_kills.push(pending);
        // A marker in the shared log: what follows is the next process's.
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut file, format!("{}{}\n", RESTART_MARKER, k + 1).as_bytes()).unwrap();
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..500))).await;
        let restarted = shared.start().await;
        eprintln!("crash {}: restarted as pid {} at {:.1?}", k + 1, restarted.pid(), started.elapsed());
        *shared.server.lock().await = Some(restarted);
    }

    // The provider finishes every job; the user keeps reconciling until NeverMiss agrees.
    let deadline = Instant::now() + CONVERGE_WAIT;
    while sim.stats.jobs_finished.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "the simulated provider did not finish its {n} jobs");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done.store(true, Ordering::SeqCst);
    let tracked = tokio::time::timeout(CONVERGE_WAIT, tracker).await.expect("every job was tracked").unwrap();
    assert_eq!(tracked as u64, n);
    bad_sender.await.unwrap();
    let truth: HashMap<String, (String, i64)> =
        sim.truth().into_iter().map(|j| (j.job_id, (j.state.as_str().to_owned(), j.seq))).collect();
    assert_eq!(truth.len() as u64, n);
    let mut passes = 0;
    loop {
        let _ = shared.try_post("/api/reconcile", &json!({})).await;
        passes += 1;
        let db = open_db(&data_dir);
        let seen = job_states(&db);
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
    let server = shared.server.lock().await.take();
    Outcome {
        temp,
        data_dir,
        log,
        jobs: n,
        kills: scenario.kills,
        truth,
        sim,
        bad_sent_answered: bad_answered.load(Ordering::SeqCst),
        pending_at_kills,
        metrics,
        elapsed: started.elapsed(),
        server,
    }
}

/// Each generic job's (state, seq) as stored.
fn job_states(db: &rusqlite::Connection) -> HashMap<String, (String, i64)> {
    let mut stmt = db.prepare("SELECT job_id, state, coalesce(seq, -1) FROM jobs WHERE provider = 'generic'").unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, (r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))).unwrap();
    rows.map(Result::unwrap).collect()
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

impl Outcome {
    pub fn db(&self) -> rusqlite::Connection {
        open_db(&self.data_dir)
    }

    pub fn stat(&self, value: &AtomicU64) -> u64 {
        value.load(Ordering::SeqCst)
    }

    /// What holds with or without crashes.
    pub fn check_common(&self) {
        let db = self.db();
        // 1. Every job's state equals the provider's truth (checked at convergence; again here).
        let seen = job_states(&db);
        for (id, truth) in &self.truth {
            assert_eq!(seen.get(id), Some(truth), "job {id}");
        }

        // 2. No job ever moved backwards: its applied events, in order, never go down in rank,
        // and within one non-terminal rank their seq only goes up; at most one terminal event is
        // applied; the last applied event is the job's state.
        let mut stmt = db
            .prepare("SELECT job_id, state, seq FROM job_events WHERE provider = 'generic' AND outcome = 'applied' ORDER BY id")
            .unwrap();
        let mut timelines: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?))).unwrap() {
            let (job, state, seq) = row.unwrap();
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
        assert_eq!(count(&db, "SELECT count(*) FROM outbox WHERE kind = 'terminal'"), self.jobs as i64);
        assert_eq!(
            count(&db, "SELECT count(*) FROM (SELECT 1 FROM outbox WHERE kind = 'terminal' GROUP BY provider, job_id HAVING count(*) > 1)"),
            0
        );
        assert_eq!(count(&db, "SELECT count(*) FROM outbox WHERE kind = 'terminal' AND delivered_at IS NULL"), 0);
        assert_eq!(count(&db, "SELECT count(*) FROM outbox WHERE kind = 'stuck'"), 0);
        assert_eq!((self.metrics.store.notifications_enqueued as u64), self.jobs);
        assert_eq!((self.metrics.store.notifications_delivered as u64), self.jobs);
        assert_eq!(count(&db, "SELECT count(*) FROM jobs WHERE rank = 3 AND notified_at IS NULL"), 0);

        // 4. Nothing signed badly was stored; nothing was rejected (the provider sends only
        // well-formed payloads).
        assert_eq!(count(&db, "SELECT count(*) FROM deliveries WHERE delivery_id LIKE 'bad-%'"), 0);
        assert_eq!(count(&db, "SELECT count(*) FROM jobs WHERE job_id LIKE 'bad-job-%'"), 0);
        assert_eq!((self.metrics.store.rejected as u64), 0);
        if self.kills == 0 {
            assert_eq!((self.metrics.store.bad_signatures as u64), self.bad_sent_answered, "every 401 counted once");
        } else {
            // A bad signature counted (committed) just before a SIGKILL was never answered: at
            // most the 16 in flight per kill.
            let counted = self.metrics.store.bad_signatures as u64;
            assert!(
                (self.bad_sent_answered..=self.bad_sent_answered + 16 * self.kills as u64).contains(&counted),
                "bad_signatures {counted}, answered {}",
                self.bad_sent_answered
            );
        }

        // 5. Every delivery the receiver acknowledged is stored (a 200 means it is on disk).
        let acknowledged: HashSet<String> = self.sim.stats.acknowledged.lock().unwrap().iter().cloned().collect();
        let mut stmt = db.prepare("SELECT delivery_id FROM deliveries WHERE provider = 'generic' AND status = 'accepted'").unwrap();
        let stored: HashSet<String> = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect();
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
        let rescues = count(&db, "SELECT count(*) FROM jobs WHERE terminal_source = 'pull'") as u64;
        assert_eq!((self.metrics.store.reconcile_rescues as u64), rescues);
    }

    /// The log notifier's lines, per notification identity, across every child's stderr.
    pub fn notifier_lines(&self) -> HashMap<String, usize> {
        let log = String::from_utf8_lossy(&std::fs::read(&self.log).unwrap()).into_owned();
        let mut lines = HashMap::new();
        for line in log.lines().filter(|l| l.contains("nevermiss::notification")) {
            if let Some(rest) = line.split("identity=").nth(1) {
                let identity = rest.split_whitespace().next().unwrap().to_owned();
                *lines.entry(identity).or_default() += 1;
            }
        }
        lines
    }

    /// The log notifier's lines per identity, in each process's part of the log (split at the
    /// restart markers): index 0 is the first process.
    pub fn notifier_lines_per_process(&self) -> Vec<HashMap<String, usize>> {
        let log = String::from_utf8_lossy(&std::fs::read(&self.log).unwrap()).into_owned();
        let mut parts = vec![HashMap::new()];
        for line in log.lines() {
            if line.starts_with(RESTART_MARKER) {
                parts.push(HashMap::new());
            } else if line.contains("nevermiss::notification") {
                if let Some(rest) = line.split("identity=").nth(1) {
                    let identity = rest.split_whitespace().next().unwrap().to_owned();
                    *parts.last_mut().unwrap().entry(identity).or_default() += 1;
                }
            }
        }
        parts
    }

    pub fn report(&self, name: &str) {
        let s = &self.sim.stats;
        eprintln!(
            "{name}: {} jobs, {} kills in {:.1?}; provider sent {} webhooks ({} dropped, {} duplicated, {} delayed, {} reordered, {} retried), {} status requests; bad signatures answered {}; NeverMiss: {:?}",
            self.jobs,
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
            self.metrics
        );
    }

    /// Stops the last server cleanly.
    pub async fn finish(mut self) {
        if let Some(server) = self.server.take() {
            assert!(server.stop().await, "the last server stops cleanly");
        }
        let _ = Path::new(&self.data_dir);
    }
}

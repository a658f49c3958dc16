//! A simulated provider, for the demo and the tests. It speaks the generic contract from both
//! sides: it runs jobs with random durations, sends their signed webhooks to a receiver with
//! configurable duplicate, reorder, delay and drop rates (retrying, as real senders do, when the
//! receiver does not answer 2xx), and serves the status API that reconciliation polls.
//! Everything it creates is labelled as a simulation.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::providers::generic;
use crate::store::job::{now_ms, rfc3339, JobState};

/// How the simulated provider behaves.
#[derive(Debug, Clone)]
pub struct SimulatorConfig {
    /// Base URL of the receiver to send webhooks to (`{target}/hooks/generic`), e.g. the tunnel's.
    pub target_url: String,
    /// The webhook secret it signs with.
    pub secret: String,
    /// The API key its status API expects as a Bearer token.
    pub api_key: String,
    /// Jobs to run in all; `None` runs until stopped.
    pub jobs: Option<u64>,
    /// A new job starts this often.
    pub new_job_every: Duration,
    /// Each job runs for a random time in this range.
    pub job_duration: (Duration, Duration),
    pub duplicate_rate: f64,
    pub reorder_rate: f64,
    pub delay_rate: f64,
    pub max_delay: Duration,
    pub drop_rate: f64,
    pub fail_rate: f64,
    pub cancel_rate: f64,
    /// Same seed, same jobs and same faults (up to the scheduler's timing).
    pub seed: u64,
    pub job_prefix: String,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        SimulatorConfig {
            target_url: String::new(),
            secret: String::new(),
            api_key: String::new(),
            jobs: None,
            new_job_every: Duration::from_secs(3),
            job_duration: (Duration::from_secs(5), Duration::from_secs(40)),
            duplicate_rate: 0.2,
            reorder_rate: 0.1,
            delay_rate: 0.2,
            max_delay: Duration::from_secs(5),
            drop_rate: 0.1,
            fail_rate: 0.15,
            cancel_rate: 0.05,
            seed: rand::random(),
            job_prefix: "sim".into(),
        }
    }
}

/// What the simulator did, to compare with what NeverMiss saw.
#[derive(Debug, Default, Serialize)]
pub struct SimulatorStats {
    pub jobs_started: AtomicU64,
    pub jobs_finished: AtomicU64,
    pub webhooks_sent: AtomicU64,
    pub webhooks_dropped: AtomicU64,
    pub webhooks_duplicated: AtomicU64,
    pub webhooks_delayed: AtomicU64,
    pub webhooks_reordered: AtomicU64,
    pub webhooks_retried: AtomicU64,
    pub status_requests: AtomicU64,
    /// The delivery ids the receiver acknowledged with a 2xx, in order (a copy twice if it was
    /// acknowledged twice): what NeverMiss promised to have kept.
    #[serde(skip)]
    pub acknowledged: Mutex<Vec<String>>,
}

/// A job's true state, as the simulated provider knows it.
#[derive(Debug, Clone, Serialize)]
pub struct TrueJob {
    #[serde(rename = "jobId")]
    pub job_id: String,
    pub state: JobState,
    pub seq: i64,
    #[serde(rename = "finishedAt")]
    pub finished_at: Option<String>,
    pub label: String,
    pub error: Option<String>,
}

/// Every job the simulated provider has started, by id.
pub type Truth = Arc<Mutex<HashMap<String, TrueJob>>>;

pub struct Simulator {
    /// The status API's base URL (what `NEVERMISS_GENERIC_BASE_URL` should be).
    pub base_url: String,
    pub stats: Arc<SimulatorStats>,
    truth: Truth,
    shutdown: CancellationToken,
    /// Lets the job driver start (`begin`).
    go: Arc<tokio::sync::Notify>,
}

impl Simulator {
    /// Starts the status API on `127.0.0.1:0` and the job driver.
    pub async fn start(config: SimulatorConfig) -> std::io::Result<Simulator> {
        let simulator = Simulator::bind(config).await?;
        simulator.begin();
        Ok(simulator)
    }

    /// Starts the status API on `127.0.0.1:0`; the jobs (and their webhooks) wait for `begin`:
    /// the receiver they go to can be started first, on the status API's URL.
    pub async fn bind(config: SimulatorConfig) -> std::io::Result<Simulator> {
        let truth: Truth = Arc::default();
        let stats = Arc::new(SimulatorStats::default());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let shutdown = CancellationToken::new();
        let api = Router::new().route("/jobs/{job_id}", get(status)).route("/truth", get(all_truth)).with_state(StatusApi {
            truth: truth.clone(),
            stats: stats.clone(),
            api_key: config.api_key.clone(),
        });
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, api).with_graceful_shutdown(stop.cancelled_owned()).await;
        });
        let go = Arc::new(tokio::sync::Notify::new());
        let (waiting, stop) = (go.clone(), shutdown.clone());
        let (driver_truth, driver_stats) = (truth.clone(), stats.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = waiting.notified() => drive(config, driver_truth, driver_stats, stop).await,
            }
        });
        Ok(Simulator { base_url, stats, truth, shutdown, go })
    }

    /// The provider starts its jobs (once; later calls do nothing).
    pub fn begin(&self) {
        self.go.notify_one();
    }

    /// The live table of true states (shared with the simulator).
    pub fn truth_handle(&self) -> Truth {
        self.truth.clone()
    }

    /// Every job's true state now.
    pub fn truth(&self) -> Vec<TrueJob> {
        self.truth.lock().unwrap().values().cloned().collect()
    }

    pub fn stop(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[derive(Clone)]
struct StatusApi {
    truth: Truth,
    stats: Arc<SimulatorStats>,
    api_key: String,
}

async fn status(State(api): State<StatusApi>, headers: HeaderMap, Path(job_id): Path<String>) -> Response {
    api.stats.status_requests.fetch_add(1, Ordering::Relaxed);
    let authorized = headers.get("authorization").and_then(|v| v.to_str().ok()).is_some_and(|v| v == format!("Bearer {}", api.api_key));
    if !authorized {
        return (StatusCode::UNAUTHORIZED, Json(json!({ "error": "bad API key" }))).into_response();
    }
    match api.truth.lock().unwrap().get(&job_id) {
        Some(job) => Json(job.clone()).into_response(),
        None => (StatusCode::NOT_FOUND, Json(json!({ "error": "no such job" }))).into_response(),
    }
}

async fn all_truth(State(api): State<StatusApi>) -> Json<Vec<TrueJob>> {
    Json(api.truth.lock().unwrap().values().cloned().collect())
}

async fn drive(config: SimulatorConfig, truth: Truth, stats: Arc<SimulatorStats>, shutdown: CancellationToken) {
    let config = Arc::new(config);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("the HTTP client builds");
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut n = 0u64;
    loop {
        if config.jobs.is_some_and(|total| n >= total) {
            return;
        }
        n += 1;
        let job_seed = rng.random();
        tokio::spawn(run_job(n, job_seed, config.clone(), truth.clone(), stats.clone(), http.clone(), shutdown.clone()));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(config.new_job_every) => {}
        }
    }
}

async fn run_job(
    n: u64,
    seed: u64,
    config: Arc<SimulatorConfig>,
    truth: Truth,
    stats: Arc<SimulatorStats>,
    http: reqwest::Client,
    shutdown: CancellationToken,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let job_id = format!("{}-{n}-{:06x}", config.job_prefix, seed & 0xff_ffff);
    let label = format!("simulated job {n}");
    let (min, max) = config.job_duration;
    let total = if max > min { rng.random_range(min..=max) } else { min };
    let roll: f64 = rng.random();
    let (end, error) = if roll < config.fail_rate {
        (JobState::Failed, Some("simulated failure: out of memory".to_owned()))
    } else if roll < config.fail_rate + config.cancel_rate {
        (JobState::Canceled, None)
    } else {
        (JobState::Succeeded, None)
    };
    let steps = [(JobState::Queued, total / 5), (JobState::Running, total * 4 / 5), (end, Duration::ZERO)];
    stats.jobs_started.fetch_add(1, Ordering::Relaxed);
    for (index, (state, wait_after)) in steps.into_iter().enumerate() {
        let seq = index as i64 + 1;
        let finished_at = state.is_terminal().then(|| rfc3339(now_ms()));
        let job = TrueJob {
            job_id: job_id.clone(),
            state,
            seq,
            finished_at: finished_at.clone(),
            label: label.clone(),
            error: if state.is_terminal() { error.clone() } else { None },
        };
        truth.lock().unwrap().insert(job_id.clone(), job.clone());
        if state.is_terminal() {
            stats.jobs_finished.fetch_add(1, Ordering::Relaxed);
        }
        let delivery_id = format!("{job_id}-d{seq}");
        let body = json!({
            "deliveryId": delivery_id,
            "jobId": job.job_id,
            "state": state.as_str(),
            "seq": seq,
            "finishedAt": finished_at,
            "label": label,
            "error": job.error,
        })
        .to_string();
        let faults = Faults::roll(&mut rng, &config, wait_after);
        tokio::spawn(deliver(delivery_id, body, faults, config.clone(), stats.clone(), http.clone(), shutdown.clone()));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait_after) => {}
        }
    }
}

/// What happens to one webhook on its way.
struct Faults {
    drop: bool,
    copies: u32,
    delay: Duration,
}

impl Faults {
    fn roll(rng: &mut StdRng, config: &SimulatorConfig, until_next: Duration) -> Faults {
        let drop = rng.random_bool(config.drop_rate.clamp(0.0, 1.0));
        let copies = if rng.random_bool(config.duplicate_rate.clamp(0.0, 1.0)) { 2 } else { 1 };
        let mut delay = Duration::ZERO;
        if rng.random_bool(config.delay_rate.clamp(0.0, 1.0)) && !config.max_delay.is_zero() {
            delay = rng.random_range(Duration::ZERO..=config.max_delay);
        }
        if rng.random_bool(config.reorder_rate.clamp(0.0, 1.0)) {
            // Held back until after the next transition's webhook.
            delay = delay.max(until_next + Duration::from_millis(rng.random_range(50..500)));
        }
        Faults { drop, copies, delay }
    }
}

async fn deliver(
    delivery_id: String,
    body: String,
    faults: Faults,
    config: Arc<SimulatorConfig>,
    stats: Arc<SimulatorStats>,
    http: reqwest::Client,
    shutdown: CancellationToken,
) {
    if faults.drop {
        stats.webhooks_dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if !faults.delay.is_zero() {
        stats.webhooks_delayed.fetch_add(1, Ordering::Relaxed);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(faults.delay) => {}
        }
    }
    if faults.copies > 1 {
        stats.webhooks_duplicated.fetch_add(1, Ordering::Relaxed);
    }
    let signature = generic::sign(config.secret.as_bytes(), body.as_bytes());
    let url = format!("{}/hooks/generic", config.target_url.trim_end_matches('/'));
    for _ in 0..faults.copies {
        // Retry until a 2xx, as real senders do, with a growing pause; give up after 8 tries.
        for attempt in 0..8u32 {
            let sent = http
                .post(&url)
                .header("content-type", "application/json")
                .header(generic::SIGNATURE_HEADER, &signature)
                .body(body.clone())
                .send()
                .await;
            stats.webhooks_sent.fetch_add(1, Ordering::Relaxed);
            if sent.is_ok_and(|r| r.status().is_success()) {
                stats.acknowledged.lock().unwrap().push(delivery_id.clone());
                break;
            }
            stats.webhooks_retried.fetch_add(1, Ordering::Relaxed);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(200 * 2u64.pow(attempt))) => {}
            }
        }
    }
}

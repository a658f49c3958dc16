//! Property tests of the merge point: whatever order, duplication or loss the network inflicts on a
//! job's deliveries, the job ends where its in-order history says, each delivery's outcome is the
//! one the contract's rule gives, and a finished job has exactly one outbox row.
//!
//! Two drivers: the push path of the merge point called directly, on each store (one suite, two
//! stores: `accept_push` through `Store::write` on a real SQLite file and on a real PostgreSQL
//! cluster; fast, sequential, every outcome checked against a model), and the
//! real receiver over HTTP with concurrent batches (end state and the single outbox row and
//! notification checked).

use crate::harness;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use harness::{payload, sign, terminal_identity, wait_until, TestApp};
use nevermiss_engine::merge_point::{accept_push, PushDelivery};
use nevermiss_engine::store::deliveries::RawRequest;
use nevermiss_engine::store::job::{JobEvent, JobKey, JobState, Outcome, TERMINAL_RANK};
use nevermiss_engine::store::postgres::PoolLimits;
use nevermiss_engine::store::Store;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::StatusCode;

/// One event of a job's in-order history: its delivery number, state and seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    index: usize,
    state: JobState,
    seq: i64,
}

/// A valid history: some `queued` updates, some `running` updates, then exactly one terminal
/// state; `seq` strictly increasing (with gaps).
fn history() -> impl Strategy<Value = Vec<Step>> {
    let terminal = prop_oneof![Just(JobState::Succeeded), Just(JobState::Failed), Just(JobState::Canceled)];
    (0usize..=2, 0usize..=4, terminal, prop::collection::vec(1i64..=5, 7)).prop_map(|(queued, running, terminal, gaps)| {
        let states = std::iter::repeat_n(JobState::Queued, queued)
            .chain(std::iter::repeat_n(JobState::Running, running))
            .chain(std::iter::once(terminal));
        let mut seq = 0;
        states
            .enumerate()
            .map(|(index, state)| {
                seq += gaps[index];
                Step { index, state, seq }
            })
            .collect()
    })
}

/// A history and the order its deliveries arrive in: every delivery at least once, some
/// resent (same delivery id), all shuffled.
fn full_scenario() -> impl Strategy<Value = (Vec<Step>, Vec<usize>)> {
    history()
        .prop_flat_map(|h| {
            let n = h.len();
            (Just(h), prop::collection::vec(0..n, 0..=n))
        })
        .prop_flat_map(|(h, resent)| {
            let mut sends: Vec<usize> = (0..h.len()).collect();
            sends.extend(resent);
            (Just(h), Just(sends).prop_shuffle())
        })
}

/// A history and an arrival order where deliveries may also be lost (the terminal one too).
fn lossy_scenario() -> impl Strategy<Value = (Vec<Step>, Vec<usize>)> {
    full_scenario()
        .prop_flat_map(|(h, sends)| {
            let n = h.len();
            (Just(h), Just(sends), prop::collection::vec(prop::bool::weighted(0.7), n))
        })
        .prop_map(|(h, sends, kept)| {
            let sends = sends.into_iter().filter(|&i| kept[i]).collect();
            (h, sends)
        })
}

/// The contract's rule, applied to the model: (rank, seq, state) of the job, `None` before any
/// event.
#[derive(Debug, Default)]
struct Model {
    current: Option<Step>,
    seen: HashSet<usize>,
}

impl Model {
    fn apply(&mut self, step: Step) -> Outcome {
        if !self.seen.insert(step.index) {
            return Outcome::Duplicate;
        }
        let adopt = match self.current {
            None => true,
            Some(cur) => {
                let (rank, cur_rank) = (step.state.rank(), cur.state.rank());
                rank > cur_rank || (rank == cur_rank && cur_rank < TERMINAL_RANK && step.seq > cur.seq)
            }
        };
        if adopt {
            self.current = Some(step);
            Outcome::Applied
        } else {
            Outcome::Stale
        }
    }
}

fn config(cases: u32) -> Config {
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// A job's end as a store keeps it: (state, seq, finished, terminal source set), its outbox rows
/// and its timeline entries.
type End = (Option<(JobState, Option<i64>, bool, bool)>, i64, i64);

/// One delivery through the push path: its outcome and whether it finished the job.
async fn push(store: &Store, push: PushDelivery) -> Result<(Outcome, bool), String> {
    let now = nevermiss_engine::store::job::now_ms();
    let result = store.write(move |conn| accept_push(conn, &push, now)).await.map_err(|e| e.to_string())?;
    Ok((result.outcome, result.first_terminal))
}

async fn end(store: &Store, job_id: &str) -> Result<End, String> {
    let id = job_id.to_owned();
    store
        .read(move |conn| {
            let job = nevermiss_engine::store::jobs::job(conn, &JobKey::new("generic", &id))?;
            let outbox: i64 = conn.query_row("SELECT count(*) FROM outbox WHERE job_id = $1", [&id], |r| r.get(0))?;
            let events: i64 = conn.query_row("SELECT count(*) FROM job_events WHERE job_id = $1", [&id], |r| r.get(0))?;
            Ok((job.map(|j| (j.state, j.seq, j.finished_at.is_some(), j.terminal_source.is_some())), outbox, events))
        })
        .await
        .map_err(|e| e.to_string())
}

/// Sends `sends` one by one through the push path and checks each outcome and the end state.
async fn run_direct(store: &Store, job_id: &str, history: &[Step], sends: &[usize]) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    for &i in sends {
        let step = history[i];
        let push = PushDelivery {
            delivery_id: format!("{job_id}/d-{i}"),
            event: JobEvent::new("generic", job_id, step.state, step.seq),
            raw: RawRequest::default(),
        };
        let (outcome, first_terminal) =
            self::push(store, push).await.map_err(|e| TestCaseError::fail(format!("store write failed: {e}")))?;
        let expected = model.apply(step);
        prop_assert_eq!(outcome, expected, "delivery {} ({:?})", i, step);
        prop_assert_eq!(first_terminal, expected == Outcome::Applied && step.state.is_terminal());
    }

    // The in-order history's end state, over the deliveries that arrived: its latest one.
    let expected_end = sends.iter().copied().max().map(|i| history[i]);
    prop_assert_eq!(model.current, expected_end, "the model itself");
    let (job, outbox_rows, events) = end(store, job_id).await.map_err(|e| TestCaseError::fail(format!("store read failed: {e}")))?;
    prop_assert_eq!(events, sends.len() as i64, "every delivery is on the timeline");
    match expected_end {
        None => prop_assert!(job.is_none()),
        Some(end) => {
            let (state, seq, finished, terminal_source) = job.ok_or_else(|| TestCaseError::fail("the job is missing"))?;
            prop_assert_eq!(state, end.state);
            prop_assert_eq!(seq, Some(end.seq));
            prop_assert_eq!(finished, end.state.is_terminal());
            prop_assert_eq!(terminal_source, end.state.is_terminal());
            prop_assert_eq!(outbox_rows, end.state.is_terminal() as i64, "one outbox row exactly when finished");
        }
    }
    Ok(())
}

fn run_property(
    store: &Store,
    runtime: &tokio::runtime::Runtime,
    cases: u32,
    strategy: impl Strategy<Value = (Vec<Step>, Vec<usize>)>,
    name: &str,
) {
    let next_job = AtomicUsize::new(0);
    let mut runner = TestRunner::new(config(cases));
    runner
        .run(&strategy, |(history, sends)| {
            // Every case (and every shrinking step) has a job of its own in the one database.
            let job_id = format!("{name}-{}", next_job.fetch_add(1, Ordering::Relaxed));
            runtime.block_on(run_direct(store, &job_id, &history, &sends))
        })
        .unwrap();
}

fn direct_property(cases: u32, strategy: impl Strategy<Value = (Vec<Step>, Vec<usize>)>, name: &str) {
    let dir = tempfile::TempDir::new().unwrap();
    let store = Store::open(&dir.path().join("nevermiss.db")).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    run_property(&store, &runtime, cases, strategy, name);
    drop(runtime);
    store.close();
}

/// The same property on PostgreSQL: the rule written in its dialect (`store::guard`) keeps the
/// same model.
fn postgres_property(cases: u32, strategy: impl Strategy<Value = (Vec<Step>, Vec<usize>)>, name: &str) {
    let cluster = harness::postgres::PgCluster::start();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let store = runtime
        .block_on(Store::connect(&cluster.url, PoolLimits::default(), "property"))
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.log()));
    run_property(&store, &runtime, cases, strategy, name);
}

#[test]
fn any_arrival_order_of_a_full_history_ends_at_its_terminal_state() {
    direct_property(64, full_scenario(), "full");
}

#[test]
fn with_lost_deliveries_the_job_ends_at_the_latest_that_arrived() {
    direct_property(64, lossy_scenario(), "lossy");
}

#[test]
fn postgres_any_arrival_order_of_a_full_history_ends_at_its_terminal_state() {
    postgres_property(64, full_scenario(), "full");
}

#[test]
fn postgres_with_lost_deliveries_the_job_ends_at_the_latest_that_arrived() {
    postgres_property(64, lossy_scenario(), "lossy");
}

/// The same property through the real receiver, with deliveries sent in concurrent batches (so
/// their order at the merge point is the scheduler's): the job ends in its history's terminal
/// state with one outbox row and one notification.
#[test]
fn through_the_receiver_with_concurrent_batches() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let app = Arc::new(runtime.block_on(TestApp::spawn()));
    let next_job = AtomicUsize::new(0);
    let finished = std::sync::Mutex::new(Vec::new());
    let strategy = (full_scenario(), prop::collection::vec(1usize..=4, 16));
    let mut runner = TestRunner::new(config(24));
    runner
        .run(&strategy, |((history, sends), batch_sizes)| {
            let job_id = format!("http-{}", next_job.fetch_add(1, Ordering::Relaxed));
            let app = app.clone();
            let terminal = *history.last().unwrap();
            runtime.block_on(async {
                let mut rest = &sends[..];
                let mut batches = batch_sizes.iter().cycle();
                while !rest.is_empty() {
                    let size = (*batches.next().unwrap()).min(rest.len());
                    let (batch, tail) = rest.split_at(size);
                    rest = tail;
                    let mut tasks = tokio::task::JoinSet::new();
                    for &i in batch {
                        let step = history[i];
                        let body =
                            serde_json::to_vec(&payload(&format!("{job_id}/d-{i}"), &job_id, step.state.as_str(), step.seq)).unwrap();
                        let (http, url) = (app.http.clone(), format!("{}/hooks/generic", app.receiver));
                        tasks.spawn(async move {
                            let response = http.post(url).header("x-agent-signature", sign(&body)).body(body).send().await.unwrap();
                            (response.status(), response.text().await.unwrap_or_default())
                        });
                    }
                    while let Some(answer) = tasks.join_next().await {
                        let (status, body) = answer.unwrap();
                        prop_assert_eq!(status, StatusCode::OK, "{}", body);
                    }
                }
                let job = app.job(&job_id).await.ok_or_else(|| TestCaseError::fail("the job is missing"))?;
                prop_assert_eq!(job.job.state, terminal.state);
                prop_assert_eq!(job.job.seq, Some(terminal.seq));
                prop_assert_eq!(app.count(&format!("SELECT count(*) FROM outbox WHERE job_id = '{job_id}'")), 1);
                let duplicates = (sends.len() - history.len()) as i64;
                prop_assert_eq!(
                    app.count(&format!("SELECT count(*) FROM job_events WHERE job_id = '{job_id}' AND outcome = 'duplicate'")),
                    duplicates
                );
                Ok(())
            })?;
            finished.lock().unwrap().push(job_id);
            Ok(())
        })
        .unwrap();

    let jobs = finished.into_inner().unwrap();
    runtime.block_on(async {
        wait_until("every finished job is notified", || async { jobs.iter().all(|j| app.notifier.count(&terminal_identity(j)) >= 1) })
            .await;
        assert_eq!(app.api.metrics().await.store.notifications_enqueued, jobs.len() as i64);
        for j in &jobs {
            assert_eq!(app.notifier.count(&terminal_identity(j)), 1, "{j}: exactly one notification");
        }
    });
}

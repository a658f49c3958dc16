//! Chaos: thousands of jobs (`NEVERMISS_CHAOS_JOBS`, default 2,000) from the simulated provider
//! through a real `nevermiss serve`, with duplicates, reordering, delays, drops, failures and
//! cancels, plus badly signed deliveries, over many concurrent connections (see
//! `chaos_support`). At the end: every job's state is the provider's truth, no job ever moved
//! backwards, exactly one terminal outbox row per job (and one notification, with no crash), and
//! the counters equal what was sent.

use crate::harness::chaos;

use std::sync::atomic::Ordering;

use chaos::{jobs_from_env, run_checked, Scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_flaky_jobs_end_as_the_provider_says_with_one_side_effect_each() {
    let scenario = Scenario {
        jobs: jobs_from_env(2000),
        kills: 0,
        bad_signatures: 500,
        seed: 20261130,
        fleet: None,
        job_duration: chaos::SHORT_JOBS,
        reconcile_every: None,
    };
    let outcome = run_checked("chaos", scenario).await;

    // With no crash, the counters equal what was sent. Each copy the provider sent and saw
    // acknowledged reached the receiver once; a failed attempt (retried) may or may not have.
    let stats = &outcome.sim.stats;
    let acknowledged = stats.acknowledged.lock().unwrap().len() as u64;
    let retried = stats.webhooks_retried.load(Ordering::SeqCst);
    let duplicated = stats.webhooks_duplicated.load(Ordering::SeqCst);
    let total = outcome.metrics.store.deliveries_total as u64;
    let bad = outcome.bad_sent_answered;
    assert!(bad > 0, "bad signatures were sent and answered");
    assert!(
        (acknowledged + bad..=acknowledged + bad + retried).contains(&total),
        "deliveries_total {total}: {acknowledged} acknowledged + {bad} bad signatures (+ at most {retried} retried)"
    );
    let duplicates = outcome.metrics.store.duplicates as u64;
    assert!(
        (duplicated..=duplicated + retried).contains(&duplicates),
        "duplicates {duplicates}: the provider sent {duplicated} twice (+ at most {retried} retried)"
    );
    assert!(duplicated > 0 && stats.webhooks_dropped.load(Ordering::SeqCst) > 0, "the faults really happened");
    assert!((outcome.metrics.store.reconcile_rescues as u64) > 0, "some jobs were rescued by polling (their webhooks were dropped)");

    // One notification per finished job, in the record and (no crash here) in delivery too.
    let lines = outcome.notifier_lines();
    for id in outcome.truth.keys() {
        let identity = format!("nevermiss:generic:{id}:terminal");
        assert_eq!(lines.get(&identity).copied(), Some(1), "{identity} notified once");
    }
    assert_eq!(lines.len() as u64, outcome.jobs);
    outcome.finish().await;
}

//! Fleet chaos: the chaos run (see `harness::chaos`) on a fleet: a real PostgreSQL cluster, three
//! `nevermiss serve` processes on it (each its own data dir, log and ports), a round-robin load
//! balancer in front of their receivers spreading the provider's flaky webhooks (duplicates,
//! reordering, delays, drops) and the badly signed deliveries across all three, the user's calls
//! spread across the three admin APIs, and one of the three killed with SIGKILL mid-run and
//! restarted on its data dir and ports. The fleet is one system, so what holds for one server
//! holds for the three together:
//! - every job ends in the provider's state and never moved backwards;
//! - exactly one terminal outbox row per finished job, delivered once in the record;
//! - one notification per finished job across the three logs: the one a SIGKILL interrupted
//!   between showing and marking may be shown again by the restarted process (at most one per
//!   kill, and only one that was pending at the kill), as in the crash suite;
//! - the counters equal what was sent, allowing for what the kill left unanswered;
//! - one reconcile round of a provider at a time across the fleet (`reconcile_passes`: no two
//!   rounds overlap in time).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::harness::chaos;

use chaos::{jobs_from_env, run_checked, Outcome, Scenario};

const SERVERS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_one_killed_every_job_ends_as_the_provider_says_with_one_side_effect_each() {
    let scenario = Scenario {
        jobs: jobs_from_env(300),
        kills: 1,
        bad_signatures: 200,
        seed: 20261202,
        fleet: Some(SERVERS),
        job_duration: chaos::SHORT_JOBS,
        reconcile_every: Some(Duration::from_millis(500)),
    };
    let outcome = run_checked("fleet chaos", scenario).await;

    // The stream was spread across the three receivers.
    let balancer = outcome.balancer.as_ref().expect("a fleet has a balancer");
    for (i, answered) in balancer.stats.answered.iter().enumerate() {
        assert!(answered.load(Ordering::SeqCst) > 0, "server {i} received part of the stream");
    }

    // The counters equal what was sent. Each copy the provider saw acknowledged reached a
    // receiver once; a failed attempt (retried: refused, a 502 from the balancer) may or may
    // not have been counted before its process died. The bad signatures counted are bounded in
    // `check_common` (at most those in flight at the kill more than were answered).
    let stats = &outcome.sim.stats;
    let store = &outcome.metrics.store;
    let acknowledged = stats.acknowledged.lock().unwrap().len() as u64;
    let retried = stats.webhooks_retried.load(Ordering::SeqCst);
    let duplicated = stats.webhooks_duplicated.load(Ordering::SeqCst);
    let (total, bad) = (store.deliveries_total as u64, store.bad_signatures as u64);
    assert!(outcome.bad_sent_answered > 0, "bad signatures were sent and answered");
    assert!(
        (acknowledged + bad..=acknowledged + bad + retried).contains(&total),
        "deliveries_total {total}: {acknowledged} acknowledged + {bad} bad signatures (+ at most {retried} retried)"
    );
    let duplicates = store.duplicates as u64;
    assert!(
        (duplicated..=duplicated + retried).contains(&duplicates),
        "duplicates {duplicates}: the provider sent {duplicated} twice (+ at most {retried} retried)"
    );
    assert!(duplicated > 0 && stats.webhooks_dropped.load(Ordering::SeqCst) > 0, "the faults really happened");
    assert!(store.reconcile_rescues > 0, "some jobs were rescued by polling (their webhooks were dropped)");

    // One notification per finished job across the three logs. The killed server's log has a
    // part per process; a notification pending at the kill went out after it.
    let parts = outcome.notifier_lines_per_server();
    for kill in &outcome.kill_log {
        let kills_of_it = outcome.kill_log.iter().filter(|k| k.server == kill.server).count();
        assert_eq!(parts[kill.server].len(), kills_of_it + 1, "one part of server {}'s log per process", kill.server);
    }
    let notified = outcome.check_notified_at_least_once();
    assert_eq!(
        notified.shown.len() as u64,
        outcome.jobs,
        "only the jobs' terminal notifications: {:?}",
        notified.shown.keys().take(5).collect::<Vec<_>>()
    );
    let claimed_by_killed: std::collections::HashSet<&String> = outcome.kill_log.iter().flat_map(|k| &k.claimed_by_killed).collect();
    for (identity, &shown) in &notified.shown {
        if shown > 1 {
            // Shown by the killed process and not yet marked when it died: it was pending, and
            // the killed process held it.
            assert!(
                notified.pending_at_kills.contains(identity) && claimed_by_killed.contains(identity),
                "{identity} shown {shown} times, but it was not held by a killed process"
            );
        }
    }
    // Each message is marked right after it is shown, before the next is shown: a kill repeats
    // at most one (a summary, when many came due at once, is one message covering several).
    assert!(
        notified.repeated_messages <= outcome.kills as usize,
        "{} messages repeated ({} notifications) for {} kills",
        notified.repeated_messages,
        notified.repeats,
        outcome.kills
    );
    eprintln!(
        "fleet chaos: {} notifications pending at the kill ({} held by the killed process), all delivered after it; {} shown twice",
        notified.pending_total,
        claimed_by_killed.len(),
        notified.repeats
    );

    check_one_round_at_a_time(&outcome).await;
    outcome.finish().await;
}

/// Rounds contended for: jobs running 2 to 10 s (so some are due for polling at most rounds), the
/// user asking all three servers for a round at once every 200 ms while they run, and their own
/// timers; one server killed mid-run (perhaps holding the lease: its restart, the same node,
/// takes it back). The recorded rounds never overlap, and they were the fleet's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reconcile_round_of_a_provider_at_a_time_across_the_fleet() {
    let scenario = Scenario {
        jobs: 200,
        kills: 1,
        bad_signatures: 20,
        seed: 20261203,
        fleet: Some(SERVERS),
        job_duration: (Duration::from_secs(2), Duration::from_secs(10)),
        reconcile_every: Some(Duration::from_millis(200)),
    };
    let outcome = run_checked("fleet rounds", scenario).await;
    let rounds = check_one_round_at_a_time(&outcome).await;
    assert!(rounds >= 5, "only {rounds} rounds had work: not a contest");
    let logged = rounds_logged(&outcome);
    assert!(logged.iter().filter(|&&n| n > 0).count() >= 2, "the rounds were run by more than one process: {logged:?}");
    outcome.finish().await;
}

/// Per server, the reconcile rounds its log records.
fn rounds_logged(outcome: &Outcome) -> Vec<usize> {
    outcome
        .logs
        .iter()
        .map(|log| {
            let text = std::fs::read_to_string(log).unwrap();
            // `reconcile round provider=...`, not `reconcile round failed` or `... over budget`.
            text.lines().filter(|l| l.contains("reconcile round provider=")).count()
        })
        .collect()
}

/// No two recorded reconcile rounds of the provider overlap in time: each started at or after
/// the previous one ended (every round here is the `generic` provider's).
async fn check_one_round_at_a_time(outcome: &Outcome) -> usize {
    let rounds = outcome.reconcile_rounds().await;
    assert!(!rounds.is_empty(), "reconcile rounds were recorded");
    for (_, _, providers) in &rounds {
        let providers: serde_json::Map<String, serde_json::Value> = serde_json::from_str(providers).unwrap();
        assert_eq!(providers.keys().collect::<Vec<_>>(), ["generic"], "one provider's round per row");
    }
    for pair in rounds.windows(2) {
        let ((a_start, a_duration, _), (b_start, b_duration, _)) = (&pair[0], &pair[1]);
        assert!(
            *b_start >= a_start + a_duration,
            "two rounds overlap: one from {a_start} for {a_duration} ms, another from {b_start} for {b_duration} ms ({} rounds)",
            rounds.len()
        );
    }
    // Each recorded round is logged by the process that ran it (after its row is committed: a
    // kill in between leaves a row without its line).
    let ran = rounds_logged(outcome);
    let logged: usize = ran.iter().sum();
    assert!((logged..=logged + outcome.kills as usize).contains(&rounds.len()), "{} rounds recorded, {ran:?} logged", rounds.len());
    eprintln!("fleet: {} reconcile rounds, none overlapping; logged per server: {ran:?}", rounds.len());
    rounds.len()
}

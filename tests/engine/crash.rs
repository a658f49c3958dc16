//! Crash: the chaos run (see `chaos_support`) while the `nevermiss serve` child is killed with
//! SIGKILL at random moments and restarted on the same data dir and ports; the simulated
//! provider retries what was not acknowledged, as real senders do. What the design promises, and
//! so what is asserted:
//! - nothing acknowledged is lost: a 200 is sent only after the commit reached the disk, so every
//!   delivery that got one is in the deliveries table;
//! - every job still ends in the provider's state, and never moved backwards;
//! - the side effect is exactly once in the record (one outbox row per finished job, delivered
//!   once: `notifications_delivered` equals the finished jobs) and at least once in delivery:
//!   the notifications pending at a kill go out after the restart; one that was shown but not
//!   yet marked when the process died may be shown again (its identity makes the repeat replace
//!   the first on the desktop), so log lines per identity are >= 1, not == 1.

use crate::harness::chaos;

use chaos::{jobs_from_env, run_checked, Scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_three_times_nothing_acknowledged_is_lost_and_every_job_is_notified() {
    let scenario = Scenario {
        jobs: jobs_from_env(1500),
        kills: 3,
        bad_signatures: 300,
        seed: 20261201,
        fleet: None,
        job_duration: chaos::SHORT_JOBS,
        reconcile_every: None,
    };
    let outcome = run_checked("crash", scenario).await;

    // At least once in delivery: every finished job's notification is in some process's log;
    // those pending at a kill were notified by a later process (the next start delivers what
    // the outbox still holds).
    let per_process = outcome.notifier_lines_per_process();
    assert_eq!(per_process.len() as u32, outcome.kills + 1, "one part of the log per process");
    let notified = outcome.check_notified_at_least_once();
    let (pending_total, repeats) = (notified.pending_total, notified.repeats);
    eprintln!(
        "crash: {pending_total} notifications pending at the kills, all delivered after a restart; {repeats} shown twice (at-least-once)"
    );
    outcome.finish().await;
}

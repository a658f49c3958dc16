//! The pull path end to end, against the built-in simulated provider (which speaks the generic
//! contract from both sides): with every webhook dropped, jobs still reach their true terminal
//! state through polling, each counted as a rescue and notified exactly once; push and pull
//! racing on the same job give one side effect; 404 and a refused key are visible; stuck jobs
//! alert once; a new polling interval applies without a restart. Each test runs on both stores
//! (SQLite, and a database of its own on PostgreSQL: `name::sqlite`, `name::postgres`).

use crate::harness;
use nevermiss_engine::store::job::{JobState, Source};

use std::collections::HashMap;
use std::time::Duration;

use harness::{on_both_stores, terminal_identity, wait_until, TestApp, SECRET};
use nevermiss_engine::provider_health::HealthStatus;
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::reconcile::PassReport;
use nevermiss_engine::simulator::{Simulator, SimulatorConfig};
use serde_json::json;

const API_KEY: &str = "simulated-provider-key";

fn quick_jobs(app: &TestApp, jobs: u64, drop_rate: f64, seed: u64) -> SimulatorConfig {
    SimulatorConfig {
        target_url: app.receiver.clone(),
        secret: harness::SECRET.into(),
        api_key: API_KEY.into(),
        jobs: Some(jobs),
        new_job_every: Duration::from_millis(20),
        job_duration: (Duration::from_millis(100), Duration::from_millis(600)),
        duplicate_rate: 0.3,
        reorder_rate: 0.2,
        delay_rate: 0.2,
        max_delay: Duration::from_millis(300),
        drop_rate,
        fail_rate: 0.3,
        cancel_rate: 0.1,
        seed,
        job_prefix: format!("sim{seed}"),
    }
}

async fn point_at(app: &TestApp, sim: &Simulator, api_key: &str) {
    app.set_setting("generic.base_url", &sim.base_url).await;
    app.set_secret("generic", SecretKind::ApiKey, Some(api_key));
}

async fn reconcile(app: &TestApp) -> PassReport {
    app.api.reconcile().await
}

fn truth_states(sim: &Simulator) -> HashMap<String, JobState> {
    sim.truth().into_iter().map(|j| (j.job_id, j.state)).collect()
}

async fn states(app: &TestApp, ids: impl Iterator<Item = &String>) -> HashMap<String, JobState> {
    let mut out = HashMap::new();
    for id in ids {
        out.insert(id.clone(), app.job_state(id).await);
    }
    out
}

on_both_stores!(spawn_on,
async fn every_webhook_dropped_still_every_job_ends_by_polling(app) {
    let sim = Simulator::start(quick_jobs(&app, 12, 1.0, 11)).await.unwrap();
    point_at(&app, &sim, API_KEY).await;

    wait_until("the simulated provider finished its 12 jobs", || async {
        sim.stats.jobs_finished.load(std::sync::atomic::Ordering::Relaxed) == 12
    })
    .await;
    assert_eq!(sim.stats.webhooks_sent.load(std::sync::atomic::Ordering::Relaxed), 0, "every webhook was dropped");
    let truth = truth_states(&sim);
    assert_eq!(truth.len(), 12);

    // The user tracks the jobs (no webhook will ever tell NeverMiss about them).
    for id in truth.keys() {
        let (status, _) = app.track(id, None).await;
        assert_eq!(status, 201);
    }
    // Tracking polls each job at once; a pass now polls whatever is still unfinished.
    let report = reconcile(&app).await;
    assert_eq!(report.pass.counts.errors, 0, "{report:?}");

    wait_until("every job reached its true state", || async { states(&app, truth.keys()).await == truth }).await;
    assert_eq!(app.api.metrics().await.store.reconcile_rescues, 12);
    for id in truth.keys() {
        let job = app.job(id).await.unwrap();
        assert_eq!(job.job.terminal_source, Some(Source::Pull), "{job:?}");
    }
    wait_until("12 notifications", || async { app.notifier.total() == 12 }).await;
    // A second pass finds nothing to do and changes nothing.
    let again = reconcile(&app).await;
    assert_eq!(again.pass.counts.checked, 0, "finished jobs are not polled again: {again:?}");
    for id in truth.keys() {
        assert_eq!(app.notifier.count(&terminal_identity(id)), 1, "exactly one notification for {id}");
    }
    assert_eq!(app.api.metrics().await.store.reconcile_rescues, 12);
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 12);
});

on_both_stores!(spawn_on,
async fn flaky_webhooks_and_polling_agree_with_the_truth(app) {
    let mut config = quick_jobs(&app, 30, 0.4, 23);
    config.job_duration = (Duration::from_millis(300), Duration::from_millis(1500));
    let sim = Simulator::start(config).await.unwrap();
    point_at(&app, &sim, API_KEY).await;

    // Track every job as soon as it exists, while the webhooks (some lost, some twice, some late)
    // come in, and keep polling until the provider is done.
    let tracked = std::sync::Mutex::new(std::collections::HashSet::new());
    wait_until("all 30 jobs tracked and finished at the provider", || async {
        for id in truth_states(&sim).into_keys() {
            let new = tracked.lock().unwrap().insert(id.clone());
            if new {
                app.track(&id, None).await;
            }
        }
        reconcile(&app).await;
        tracked.lock().unwrap().len() == 30 && sim.stats.jobs_finished.load(std::sync::atomic::Ordering::Relaxed) == 30
    })
    .await;
    let truth = truth_states(&sim);
    wait_until("NeverMiss agrees with the provider on every job", || async {
        reconcile(&app).await;
        states(&app, truth.keys()).await == truth
    })
    .await;

    // One side effect per job, whichever path got there first; pull completions are the rescues.
    wait_until("30 notifications", || async { app.notifier.total() == 30 }).await;
    let mut by_pull = 0;
    for id in truth.keys() {
        assert_eq!(app.notifier.count(&terminal_identity(id)), 1, "{id}");
        let job = app.job(id).await.unwrap();
        match job.job.terminal_source {
            Some(Source::Pull) => by_pull += 1,
            Some(Source::Push) => {}
            other => panic!("{id} ended by {other:?}"),
        }
    }
    assert_eq!(app.api.metrics().await.store.reconcile_rescues, by_pull);
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE kind = 'terminal'"), 30);
});

on_both_stores!(spawn_on,
async fn push_and_pull_racing_on_the_same_jobs_give_one_side_effect_each(app) {
    // The provider knows 20 finished jobs; no webhook is sent by the simulator itself.
    let mut config = quick_jobs(&app, 20, 1.0, 31);
    config.job_duration = (Duration::ZERO, Duration::ZERO);
    config.new_job_every = Duration::from_millis(1);
    let sim = Simulator::start(config).await.unwrap();
    point_at(&app, &sim, API_KEY).await;
    wait_until("20 finished jobs", || async { sim.stats.jobs_finished.load(std::sync::atomic::Ordering::Relaxed) == 20 }).await;

    let truth = sim.truth();
    let races = truth.iter().map(|job| {
        let app = &app;
        async move {
            let body = json!({"deliveryId": format!("{}-push", job.job_id), "jobId": job.job_id,
                              "state": job.state.as_str(), "seq": job.seq});
            // Track (which polls at once), a webhook, and a full pass, all at the same moment.
            tokio::join!(app.track(&job.job_id, None), app.deliver_json(&body), reconcile(app));
        }
    });
    futures_util::future::join_all(races).await;

    wait_until("20 notifications", || async { app.notifier.total() == 20 }).await;
    for job in &truth {
        assert_eq!(app.job_state(&job.job_id).await, job.state);
        assert_eq!(app.notifier.count(&terminal_identity(&job.job_id)), 1);
    }
    assert_eq!(app.count("SELECT count(*) FROM outbox"), 20);
    assert_eq!(app.api.metrics().await.store.notifications_enqueued, 20);
});

on_both_stores!(spawn_on,
async fn unknown_jobs_and_refused_keys_are_visible(app) {
    let sim = Simulator::start(quick_jobs(&app, 1, 1.0, 41)).await.unwrap();
    point_at(&app, &sim, API_KEY).await;

    app.track("ghost-job", Some("never existed")).await;
    let report = reconcile(&app).await;
    assert!(report.pass.counts.not_found >= 1 || app.job("ghost-job").await.unwrap().job.poll_error.is_some(), "{report:?}");
    wait_until("the 404 shows on the job", || async {
        app.job("ghost-job").await.unwrap().job.poll_error.as_deref().is_some_and(|e| e.contains("404"))
    })
    .await;
    assert_eq!(app.api.metrics().await.store.jobs_not_found, 1);
    assert_eq!(app.job_state("ghost-job").await, JobState::Unknown, "a 404 does not invent a state");

    // A wrong API key: the provider is shown as misconfigured, and its jobs are not hammered.
    app.set_secret("generic", SecretKind::ApiKey, Some("wrong-key"));
    app.track("another-job", None).await;
    let before = sim.stats.status_requests.load(std::sync::atomic::Ordering::Relaxed);
    let report = reconcile(&app).await;
    assert!(report.pass.providers["generic"].contains("refused"), "{report:?}");
    let metrics = app.api.metrics().await;
    assert_eq!(metrics.providers["generic"].status, HealthStatus::Misconfigured, "{metrics:?}");
    let asked = sim.stats.status_requests.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(asked <= 2, "after a refused key the provider's other jobs wait (asked {asked} times)");
});

on_both_stores!(spawn_on,
async fn a_stuck_job_alerts_once(app) {
    app.deliver("s-1", "slow-job", "running", 1).await;
    // Age the job past the default 30-minute threshold, as if it had started long ago.
    let store = app.engine().services.store.clone();
    store.write(|tx| tx.execute("UPDATE jobs SET created_at = created_at - 3600000 WHERE job_id = 'slow-job'", [])).await.unwrap();

    let report = reconcile(&app).await;
    assert_eq!(report.stuck_alerts, 1, "{report:?}");
    let stuck = "nevermiss:generic:slow-job:stuck";
    wait_until("the stuck alert is delivered", || async { app.notifier.count(stuck) == 1 }).await;
    let again = reconcile(&app).await;
    assert_eq!(again.stuck_alerts, 0);
    assert_eq!(app.api.metrics().await.store.stuck_alerts, 1);
    assert_eq!(app.notifier.count(stuck), 1);
    // When it does finish, it still gets its one terminal notification.
    app.deliver("s-2", "slow-job", "succeeded", 2).await;
    wait_until("the terminal notification", || async { app.notifier.count(&terminal_identity("slow-job")) == 1 }).await;
});

on_both_stores!(spawn_on,
async fn a_new_polling_interval_applies_without_a_restart(app) {
    let body = app.api.refused_settings(&json!({"poll_interval_secs": 2})).await;
    assert!(body.errors.as_ref().unwrap()["poll_interval_secs"].contains("at least 5"), "{body:?}");

    // A pass is a provider's round that had something to do: one unfinished job gives one.
    app.deliver("i-1", "interval-job", "running", 1).await;
    let passes_before = app.api.metrics().await.store.reconcile_passes;
    let settings = app.api.put_settings(&json!({"poll_interval_secs": 5})).await;
    assert_eq!(settings.poll_interval_secs, 5);
    // The default interval is 60 s: a pass within the 30 s wait can only come from the new one.
    wait_until("a scheduled pass at the new interval", || async {
        app.api.metrics().await.store.reconcile_passes > passes_before
    })
    .await;
    let _ = SECRET;
});

//! A fleet: `nevermiss serve --database postgres://...` processes on one real PostgreSQL cluster
//! are one system (contract §5). Deliveries spread across them dedupe and merge as one;
//! each finished job notifies once across the fleet; one process sees what another wrote, live;
//! the database stopped mid-run is a 503 (never a 200) and the senders' retries then apply.

use crate::harness;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::fleet::{deliver_as_a_sender, Fleet};
use harness::nginx::Nginx;
use harness::serve_child::free_addr;
use harness::{read_sse_until, terminal_identity, wait_for};
use nevermiss_engine::store::sql::Dialect;
use reqwest::StatusCode;
use tokio::sync::Barrier;

const JOBS: usize = 20;
const DELIVERIES_PER_JOB: usize = 20;

/// The fleet's notifier lines once `expected` are shown and every outbox row is marked delivered
/// (bounded): a row is shown before it is marked, so none is shown after that.
async fn settled_notifications(fleet: &Fleet, expected: usize) -> HashMap<String, usize> {
    wait_for("every notification shown and marked", || async {
        let unmarked = fleet.count("SELECT count(*) FROM outbox WHERE delivered_at IS NULL").await;
        (unmarked == 0 && fleet.notifier_lines().values().sum::<usize>() >= expected).then_some(())
    })
    .await;
    fleet.notifier_lines()
}

/// Seed 000's read-then-write design gave up to 6 side effects per job here: 20 terminal
/// deliveries of each of 20 jobs, sent at the same instant across three processes, give 20.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_terminal_deliveries_of_twenty_jobs_at_once_across_three_processes_notify_once_each() {
    let fleet = Fleet::start(3, Vec::new()).await;
    let start = Arc::new(Barrier::new(JOBS * DELIVERIES_PER_JOB));
    let receivers = fleet.receiver_urls();
    let mut sends = Vec::new();
    for job in 0..JOBS {
        for delivery in 0..DELIVERIES_PER_JOB {
            let (http, receivers, start) = (fleet.servers[0].api.http.clone(), receivers.clone(), start.clone());
            sends.push(tokio::spawn(async move {
                let job_id = format!("fleet-{job}");
                let state = ["succeeded", "failed", "canceled"][delivery % 3];
                start.wait().await;
                let delivery_id = format!("{job_id}/d-{delivery}");
                deliver_as_a_sender(&http, &receivers, job + delivery, (&delivery_id, &job_id, state, delivery as i64)).await
            }));
        }
    }
    // A busy process may answer 503 (no connection of its pool free in time): the sender sends
    // again, and that is all it costs. A retry whose first attempt did commit is a duplicate.
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    let mut unavailable = 0;
    for send in sends {
        let (answers, answer) = send.await.unwrap();
        unavailable += answers.len() - 1;
        *outcomes.entry(answer.outcome.map_or("none", |o| o.as_str()).to_owned()).or_default() += 1;
    }
    eprintln!("{unavailable} answers were 503 and sent again; outcomes {outcomes:?}");
    assert_eq!(outcomes.get("applied"), Some(&JOBS), "{outcomes:?}");
    let stale_or_repeated = outcomes.get("stale").unwrap_or(&0) + outcomes.get("duplicate").unwrap_or(&0);
    assert_eq!(stale_or_repeated, JOBS * (DELIVERIES_PER_JOB - 1), "{outcomes:?}");

    let lines = settled_notifications(&fleet, JOBS).await;
    assert_eq!(lines.len(), JOBS, "{lines:?}");
    for job in 0..JOBS {
        let identity = terminal_identity(&format!("fleet-{job}"));
        assert_eq!(lines.get(&identity), Some(&1), "{identity} shown once across the fleet: {lines:?}");
    }
    assert_eq!(fleet.count("SELECT count(*) FROM outbox").await, JOBS as i64);
    assert_eq!(fleet.count("SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL").await, JOBS as i64);
    // Every process answers the same counters: they are the database's.
    let total = (JOBS * DELIVERIES_PER_JOB) as i64;
    let repeated = *outcomes.get("duplicate").unwrap_or(&0) as i64;
    for server in &fleet.servers {
        let metrics = server.api.metrics().await.store;
        assert_eq!(
            (metrics.deliveries_total, metrics.applied, metrics.stale, metrics.duplicates),
            (total + repeated, JOBS as i64, total - JOBS as i64 - repeated, repeated)
        );
        assert_eq!((metrics.notifications_enqueued, metrics.notifications_delivered), (JOBS as i64, JOBS as i64));
    }
}

/// A delivery to one process is on another's live event stream at once (LISTEN/NOTIFY), and
/// the other's metrics snapshot follows; a setting changed through one is in force on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_shows_live_what_another_wrote() {
    let fleet = Fleet::start(2, Vec::new()).await;
    let (writer, watcher) = (&fleet.servers[0], &fleet.servers[1]);
    // Each says it is on PostgreSQL, under a name of its own.
    let info = |server: &harness::serve_child::ServeChild| {
        let api = server.api.clone();
        async move { api.get::<nevermiss_engine::api::status::Info>("/api/info", StatusCode::OK).await }
    };
    let (writer_info, watcher_info) = (info(writer).await, info(watcher).await);
    assert_eq!((writer_info.database, watcher_info.database), (Dialect::Postgres, Dialect::Postgres));
    assert_ne!(writer_info.node, watcher_info.node);
    let mut stream = watcher.api.raw_get("/api/events").await;
    assert_eq!(stream.status(), StatusCode::OK);
    let mut buffer = String::new();
    read_sse_until(&mut stream, &mut buffer, "hello", "").await;
    // The watcher's feed is listening once it has said so (its first "something changed").
    read_sse_until(&mut stream, &mut buffer, "metrics", "").await;

    let (status, _) = writer.deliver("live-1", "live-job", "running", 1).await;
    assert_eq!(status, StatusCode::OK);
    let data = read_sse_until(&mut stream, &mut buffer, "job", "\"live-job\"").await;
    let change: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_eq!(change["job"]["state"], "running");
    read_sse_until(&mut stream, &mut buffer, "metrics", "\"applied\":1").await;

    // A setting changed through one process is in force on the others.
    let saved = writer.api.put_settings(&serde_json::json!({"sla_secs": 123})).await;
    assert_eq!(saved.sla_secs, 123);
    wait_for("the setting in force on the other process", || async {
        let seen: nevermiss_engine::api::settings::SettingsView = watcher.api.get("/api/settings", StatusCode::OK).await;
        (seen.sla_secs == 123).then_some(())
    })
    .await;
}

/// The database stopped for 10 seconds mid-run: every delivery answered meanwhile is a 503,
/// never a 200; the processes keep running, and once it is back the senders' retries apply,
/// each finished job notified once, nothing acknowledged lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_stopped_for_ten_seconds_is_503_then_the_retries_apply() {
    const OUTAGE_JOBS: usize = 30;
    let fleet = Fleet::start(3, Vec::new()).await;
    // Senders: each job's running then succeeded delivery, sent again while answered 503, to the
    // processes in turn; every answer is kept with when it came.
    let senders: Vec<_> = (0..OUTAGE_JOBS)
        .map(|job| {
            let (http, receivers) = (fleet.servers[0].api.http.clone(), fleet.receiver_urls());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(400 * job as u64)).await;
                let job_id = format!("outage-{job}");
                let mut answers = Vec::new();
                for (seq, state) in [(1, "running"), (2, "succeeded")] {
                    let delivery_id = format!("{job_id}/{state}");
                    answers.extend(deliver_as_a_sender(&http, &receivers, job, (&delivery_id, &job_id, state, seq)).await.0);
                }
                answers
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(3)).await;
    fleet.cluster.stop();
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let restarting = Instant::now();
    fleet.cluster.restart();

    let mut during = HashMap::new();
    for sender in senders {
        for (at, status) in sender.await.unwrap() {
            if at > stopped && at < restarting {
                *during.entry(status.as_u16()).or_insert(0usize) += 1;
            }
        }
    }
    assert!(during.get(&503).copied().unwrap_or(0) > 0, "deliveries were answered during the outage: {during:?}");
    assert_eq!(during.get(&200), None, "a 200 while the database was down would be a lost acknowledgement: {during:?}");

    // Every acknowledged delivery is there, every job finished, each notified once.
    assert_eq!(fleet.count("SELECT count(*) FROM deliveries WHERE status = 'accepted'").await, 2 * OUTAGE_JOBS as i64);
    assert_eq!(fleet.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'").await, OUTAGE_JOBS as i64);
    let lines = settled_notifications(&fleet, OUTAGE_JOBS).await;
    for job in 0..OUTAGE_JOBS {
        let identity = terminal_identity(&format!("outage-{job}"));
        assert_eq!(lines.get(&identity), Some(&1), "{identity}: {lines:?}");
    }
    // The processes lived through it.
    for server in &fleet.servers {
        assert_eq!(server.api.raw_get("/api/health").await.status(), StatusCode::OK);
    }
}

/// The README's example: nginx with `examples/fleet/nginx.conf` in front of three processes.
/// Deliveries go through it to the fleet; one process is SIGKILLed midway: its share goes to the
/// others (nginx sends a failed POST on, which dedupe makes safe), and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_the_example_nginx_configuration_a_killed_process_loses_nothing() {
    const PROXIED_JOBS: usize = 30;
    let mut fleet = Fleet::start(3, Vec::new()).await;
    let nginx = Nginx::start_example(free_addr(), &fleet.receivers()).await;
    let http = reqwest::Client::new();
    for job in 0..PROXIED_JOBS {
        if job == PROXIED_JOBS / 3 {
            // Killed with nothing claimed (a row it had claimed would wait out its claim, a
            // minute, before another process shows it: the chaos suite covers that).
            wait_for("the outbox empty before the kill", || async {
                (fleet.count("SELECT count(*) FROM outbox WHERE delivered_at IS NULL").await == 0).then_some(())
            })
            .await;
            fleet.servers.remove(0).kill9();
        }
        let job_id = format!("proxied-{job}");
        for (seq, state) in [(1, "running"), (2, "succeeded")] {
            let (status, answer) = harness::tunnel::deliver_to(&http, &nginx.url, &format!("{job_id}/{state}"), &job_id, state, seq).await;
            assert_eq!(status, StatusCode::OK, "{job_id} {state}: {answer:?}\n{}", nginx.log());
        }
    }
    // Only webhooks pass: the admin API is not behind it.
    assert_eq!(http.get(format!("{}/api/health", nginx.url)).send().await.unwrap().status(), StatusCode::NOT_FOUND);

    assert_eq!(fleet.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'").await, PROXIED_JOBS as i64);
    let lines = settled_notifications(&fleet, PROXIED_JOBS).await;
    for job in 0..PROXIED_JOBS {
        let identity = terminal_identity(&format!("proxied-{job}"));
        assert_eq!(lines.get(&identity), Some(&1), "{identity}: {lines:?}");
    }
}

/// Another process's change makes each process read its settings again (`Settings::reload`): a
/// setting this process writes meanwhile stays in force, whichever of the two finishes first (a
/// reload that had read the table before the write committed used to put its older copy over it,
/// and a provider's base URL set just before a pass was not there for the pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_written_while_the_settings_are_read_again_stays_in_force() {
    let app = harness::TestApp::spawn().await;
    let settings = &app.engine().services.settings;
    for i in 0..300 {
        let key = format!("race_{i}.base_url");
        let (reloaded, written) = tokio::join!(settings.reload(), settings.set(&key, "http://127.0.0.1:9"));
        reloaded.unwrap();
        written.unwrap();
        assert_eq!(settings.get(&key).as_deref(), Some("http://127.0.0.1:9"), "write {i} lost by the reload beside it");
    }
}

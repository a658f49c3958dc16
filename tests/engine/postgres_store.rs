//! The store's rules on PostgreSQL (`store::postgres`), on a real throwaway cluster: migrations
//! versioned like SQLite's and a newer schema refused; three pools (three `serve` processes'
//! worth of connections) pushing 20 terminal deliveries for each of 20 jobs at the same instant
//! leave exactly 20 side effects; the database stopped mid-run answers errors (the receiver's 503),
//! never a lost acknowledgement, and the same pool recovers when it comes back.

use std::sync::Arc;

use nevermiss_engine::merge_point::{self, accept_push, Merged, PushDelivery};
use nevermiss_engine::search_index;
use nevermiss_engine::store::counters::{self, Counter};
use nevermiss_engine::store::deliveries::RawRequest;
use nevermiss_engine::store::job::{now_ms, JobEvent, JobKey, JobState, Outcome};
use nevermiss_engine::store::postgres::{FleetChange, PoolLimits};
use nevermiss_engine::store::push::PushCall;
use nevermiss_engine::store::{jobs, Store, StoreError};
use tokio::sync::Barrier;

use crate::harness::postgres::PgCluster;

const JOBS: usize = 20;
const DELIVERIES_PER_JOB: usize = 20;
const PROCESSES: usize = 3;

fn event(job_id: &str, state: JobState, seq: i64) -> JobEvent {
    JobEvent::new("generic", job_id, state, seq)
}

async fn connect(cluster: &PgCluster, max_connections: usize, node: &str) -> Store {
    let limits = PoolLimits { max_connections, ..PoolLimits::default() };
    Store::connect(&cluster.url, limits, node).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.log()))
}

/// A delivery through the merge point's push path, as the receiver sends it (on PostgreSQL, one
/// call of `nevermiss_push`).
async fn push(store: &Store, delivery_id: &str, event: JobEvent) -> Result<Merged, StoreError> {
    let push = PushDelivery { delivery_id: delivery_id.to_owned(), event, raw: RawRequest::default() };
    merge_point::push(store, push).await
}

/// A one-integer query (`SELECT count(*) ...`).
async fn count(store: &Store, sql: &'static str) -> i64 {
    store.read(move |db| db.query_row(sql, [], |r| r.get(0))).await.unwrap()
}

async fn counter(store: &Store, counter: Counter) -> i64 {
    store.read(move |db| counters::all(db)).await.unwrap().get(&counter).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_versioned_and_a_newer_schema_is_refused() {
    let schema_version = nevermiss_engine::store::migrations::postgres_version();
    // Files are numbered by who reserved them, so a branch may lack a lower one: count the files.
    let files = nevermiss_engine::store::migrations::postgres_files().len() as i64;
    let cluster = PgCluster::start();
    // Three processes starting at once migrate once.
    let (a, b, c) = tokio::join!(connect(&cluster, 2, "a"), connect(&cluster, 2, "b"), connect(&cluster, 2, "c"));
    for store in [&a, &b, &c] {
        assert_eq!(count(store, "SELECT max(version) FROM schema_migrations").await, schema_version);
    }
    assert_eq!(count(&a, "SELECT count(*) FROM schema_migrations").await, files);
    assert_eq!(count(&a, "SELECT count(*) FROM refinery_schema_history").await, files);

    // A later NeverMiss migrated this database further: this one refuses it, saying so.
    let client = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls).await.unwrap();
    let (client, connection) = client;
    tokio::spawn(connection);
    client.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, 0)", &[&(schema_version + 4)]).await.unwrap();
    match Store::connect(&cluster.url, PoolLimits::default(), "newer").await {
        Err(e @ StoreError::Open { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&format!("version {}", schema_version + 4)) && text.contains("upgrade NeverMiss"), "{text}");
        }
        Err(other) => panic!("the wrong error: {other}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
}

/// A database made by a released build (refinery, PostgreSQL's files 1 to 3), with a running
/// job and a kept delivery in it: the newer files (groups V4, results V5, the push function V6 and
/// after) apply, the rows are kept, and a delivery pushed through the new function ends the old
/// job, joins it to a group and announces the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_made_by_the_released_schema_takes_the_newer_files_and_keeps_its_rows() {
    a_database_made_at_takes_the_newer_files_and_keeps_its_rows(3).await;
}

/// The same from the last released file, V8 (a duration of a kind learned late): what today's
/// fleets' databases are at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_made_by_the_last_released_schema_takes_the_newer_files_and_keeps_its_rows() {
    a_database_made_at_takes_the_newer_files_and_keeps_its_rows(8).await;
}

async fn a_database_made_at_takes_the_newer_files_and_keeps_its_rows(released_version: i32) {
    mod released {
        refinery::embed_migrations!("../store/migrations/postgres");
    }
    let cluster = PgCluster::start();
    let (mut client, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    released::migrations::runner().set_target(refinery::Target::Version(released_version)).run_async(&mut client).await.unwrap();
    client
        .batch_execute(
            "INSERT INTO jobs (provider, job_id, state, rank, seq, created_at, updated_at) VALUES ('generic', 'old', 'running', 2, 1, 1, 1);
             INSERT INTO deliveries (provider, delivery_id, job_id, received_at, status, headers, body, body_truncated)
                 VALUES ('generic', 'old/d-0', 'old', 1, 'accepted', '{}', '\\x7b7d', 0);
             INSERT INTO job_events (provider, job_id, at, source, delivery_id, state, seq, outcome)
                 VALUES ('generic', 'old', 1, 'push', 'old/d-0', 'running', 1, 'applied'),
                        ('generic', 'later', 1, 'push', 'later/d-0', NULL, NULL, 'rejected');",
        )
        .await
        .unwrap();
    assert_eq!(client.query_one("SELECT max(version) FROM refinery_schema_history", &[]).await.unwrap().get::<_, i32>(0), released_version);

    let store = connect(&cluster, 2, "upgraded").await;
    let version = nevermiss_engine::store::migrations::postgres_version();
    assert_eq!(count(&store, "SELECT CAST(max(version) AS BIGINT) FROM refinery_schema_history").await, version);
    let kept = store.read(|db| jobs::job(db, &JobKey::new("generic", "old"))).await.unwrap().expect("the job made by the released build");
    assert_eq!((kept.state, kept.group, kept.result), (JobState::Running, None, None));
    assert_eq!(count(&store, "SELECT count(*) FROM deliveries WHERE job_id = 'old'").await, 1);

    let mut end = event("old", JobState::Succeeded, 5);
    end.group = Some("after-upgrade".into());
    let pushed = push(&store, "old/d-1", end).await.unwrap();
    assert_eq!((pushed.outcome, pushed.first_terminal), (Outcome::Applied, true));
    assert_eq!(pushed.job.and_then(|j| j.group).as_deref(), Some("after-upgrade"));
    assert_eq!(count(&store, "SELECT count(*) FROM outbox WHERE kind = 'group_end' AND job_id = 'after-upgrade@1'").await, 1);
    // A job's timeline holds the old events with the new ones, an event recorded before its job
    // existed included.
    push(&store, "later/d-1", event("later", JobState::Running, 1)).await.unwrap();
    for (job, outcomes) in [("old", ["applied", "applied"]), ("later", ["rejected", "applied"])] {
        let timeline = store.read(move |db| nevermiss_engine::store::timeline::of_job(db, &JobKey::new("generic", job))).await.unwrap();
        assert_eq!(timeline.iter().map(|e| e.outcome.as_str()).collect::<Vec<_>>(), outcomes, "{job}");
    }
}

/// A database made by NeverMiss before refinery (its own runner: `schema_migrations`, every
/// migration in one transaction), at today's version 2, with a job in it: two processes starting
/// at once take it over (versions 1 and 2 recorded in refinery's history, not run again, the later
/// ones run), the job
/// is kept and the schema works; a history newer than this build is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_made_before_refinery_is_taken_over_and_keeps_its_rows() {
    use nevermiss_engine::store::migrations;

    let cluster = PgCluster::start();
    let (mut client, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let tx = client.transaction().await.unwrap();
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
        .await
        .unwrap();
    // The old runner knew versions 1 and 2; the takeover then runs what came after them.
    for (version, sql) in migrations::postgres_files().into_iter().filter(|(version, _)| *version <= 2) {
        // The old runner wrote the row after the SQL; the files now write it themselves (ON
        // CONFLICT DO NOTHING), so here it goes first, in the same transaction.
        tx.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", &[&version, &now_ms()]).await.unwrap();
        tx.batch_execute(&sql).await.unwrap();
    }
    tx.commit().await.unwrap();
    client
        .batch_execute(
            "INSERT INTO jobs (provider, job_id, state, rank, created_at, updated_at) VALUES ('generic', 'before', 'running', 2, 1, 1)",
        )
        .await
        .unwrap();

    let (a, b) = tokio::join!(connect(&cluster, 2, "a"), connect(&cluster, 2, "b"));
    let version = migrations::postgres_version();
    let files = migrations::postgres_files().len() as i64;
    assert_eq!(count(&b, "SELECT count(*) FROM refinery_schema_history").await, files);
    assert_eq!(count(&b, "SELECT max(version) FROM refinery_schema_history").await, version);
    assert_eq!(count(&a, "SELECT count(*) FROM schema_migrations").await, files);
    let kept = a.read(|db| jobs::job(db, &JobKey::new("generic", "before"))).await.unwrap().expect("the job made before refinery");
    assert_eq!(kept.state, JobState::Running);
    let pushed = push(&a, "after/d-1", event("before", JobState::Succeeded, 5)).await.unwrap();
    assert_eq!((pushed.outcome, pushed.first_terminal), (Outcome::Applied, true));
    assert_eq!(count(&b, "SELECT count(*) FROM outbox WHERE job_id = 'before'").await, 1);

    client
        .batch_execute(&format!(
            "INSERT INTO refinery_schema_history SELECT {}, 'later', applied_on, checksum FROM refinery_schema_history WHERE version = {version}",
            version + 1
        ))
        .await
        .unwrap();
    match Store::connect(&cluster.url, PoolLimits::default(), "newer").await {
        Err(e @ StoreError::Open { .. }) => assert!(e.to_string().contains(&format!("version {}, newer", version + 1)), "{e}"),
        Err(other) => panic!("the wrong error: {other}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
}

/// Seed 000's read-then-write merge gave up to 6 side effects per job here; the guard in the
/// write gives one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_jobs_each_finished_twenty_times_at_once_across_three_processes_notify_twenty_times() {
    let cluster = PgCluster::start();
    let mut processes = Vec::new();
    for process in 0..PROCESSES {
        processes.push(connect(&cluster, 8, &format!("process-{process}")).await);
    }
    let start = Arc::new(Barrier::new(JOBS * DELIVERIES_PER_JOB));
    let mut tasks = Vec::new();
    for job in 0..JOBS {
        for delivery in 0..DELIVERIES_PER_JOB {
            let store = processes[(job + delivery) % PROCESSES].clone();
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                let job_id = format!("job-{job}");
                // Different terminal states and sequence numbers: whichever lands first wins.
                let state = [JobState::Succeeded, JobState::Failed, JobState::Canceled][delivery % 3];
                let ev = event(&job_id, state, delivery as i64);
                start.wait().await;
                push(&store, &format!("{job_id}/d-{delivery}"), ev).await
            }));
        }
    }
    let mut first_terminals = 0;
    let mut applied = 0;
    for task in tasks {
        let pushed = task.await.unwrap().unwrap_or_else(|e| panic!("a push failed: {e}\n{}", cluster.log()));
        first_terminals += usize::from(pushed.first_terminal);
        applied += usize::from(pushed.outcome == Outcome::Applied);
    }
    let store = &processes[0];
    assert_eq!(first_terminals, JOBS, "one first terminal state per job");
    assert_eq!(applied, JOBS, "every other terminal delivery is stale: a terminal state is a sink");
    assert_eq!(count(store, "SELECT count(*) FROM outbox").await, JOBS as i64, "exactly one side effect per job");
    assert_eq!(count(store, "SELECT count(*) FROM jobs WHERE rank = 3").await, JOBS as i64);
    assert_eq!(count(store, "SELECT count(*) FROM deliveries").await, (JOBS * DELIVERIES_PER_JOB) as i64);
    let total = (JOBS * DELIVERIES_PER_JOB) as i64;
    assert_eq!(counter(store, Counter::DeliveriesTotal).await, total);
    assert_eq!(counter(store, Counter::Applied).await, JOBS as i64);
    assert_eq!(counter(store, Counter::Stale).await, total - JOBS as i64);
    assert_eq!(counter(store, Counter::NotificationsEnqueued).await, JOBS as i64);
    // The per-state counts the triggers keep (PL/pgSQL beside SQLite's).
    let by_state = store.read(|db| jobs::count_by_state(db)).await.unwrap();
    let finished: i64 = ["succeeded", "failed", "canceled"].iter().map(|s| by_state[*s]).sum();
    assert_eq!(finished, JOBS as i64, "{by_state:?}");

    // Every delivery sent again, through another process: duplicates, nothing else.
    for job in 0..JOBS {
        let job_id = format!("job-{job}");
        let again =
            push(&processes[(job + 1) % PROCESSES], &format!("{job_id}/d-0"), event(&job_id, JobState::Succeeded, 0)).await.unwrap();
        assert_eq!(again.outcome, Outcome::Duplicate);
    }
    assert_eq!(counter(store, Counter::Duplicates).await, JOBS as i64);
    assert_eq!(count(store, "SELECT count(*) FROM outbox").await, JOBS as i64);
}

/// Groups across a fleet: 12 groups of three jobs, each job of a group ended by another process
/// at the same instant (the group's last two or three ends race each other): each group's end is
/// enqueued exactly once, because its row in `job_groups` serializes the counting. With a plain
/// count and no lock, two processes each saw the other's job still running and none announced,
/// or both saw none running and both did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_end_is_enqueued_once_when_its_last_jobs_end_at_once_across_three_processes() {
    const GROUPS: usize = 12;
    let cluster = PgCluster::start();
    let mut processes = Vec::new();
    for process in 0..PROCESSES {
        processes.push(connect(&cluster, 4, &format!("process-{process}")).await);
    }
    let start = Arc::new(Barrier::new(GROUPS * PROCESSES));
    let mut tasks = Vec::new();
    for group in 0..GROUPS {
        for (member, store) in processes.iter().enumerate() {
            let store = store.clone();
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                let job_id = format!("g{group}-m{member}");
                let mut running = event(&job_id, JobState::Running, 1);
                running.group = Some(format!("group-{group}"));
                push(&store, &format!("{job_id}/run"), running).await?;
                start.wait().await;
                push(&store, &format!("{job_id}/end"), event(&job_id, JobState::Succeeded, 2)).await
            }));
        }
    }
    for task in tasks {
        task.await.unwrap().unwrap_or_else(|e| panic!("a push failed: {e}\n{}", cluster.log()));
    }
    let store = &processes[0];
    assert_eq!(count(store, "SELECT count(*) FROM outbox WHERE kind = 'group_end'").await, GROUPS as i64, "one end per group");
    assert_eq!(count(store, "SELECT count(DISTINCT job_id) FROM outbox WHERE kind = 'group_end'").await, GROUPS as i64);
    assert_eq!(count(store, "SELECT count(*) FROM job_groups WHERE announced_total = 3").await, GROUPS as i64);
    // The members' successes are quiet (the default `group_members = failures`).
    assert_eq!(count(store, "SELECT count(*) FROM outbox WHERE kind = 'terminal'").await, 0);
}

/// Pushes `deliveries` while the group before them is held in flight (a row it must update is
/// locked by another client), so that they all wait together and go as the next group; their
/// answers, in the order given.
async fn pushed_together(
    cluster: &PgCluster,
    store: &Store,
    tag: &str,
    deliveries: Vec<(String, JobEvent)>,
) -> Vec<Result<Merged, StoreError>> {
    let (mut locker, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let lock = locker.transaction().await.unwrap();
    lock.execute("SELECT 1 FROM jobs WHERE job_id = 'blocker' FOR UPDATE", &[]).await.unwrap();
    let blocked = {
        let store = store.clone();
        let seq = now_ms();
        let tag = tag.to_owned();
        tokio::spawn(async move { push(&store, &format!("{tag}/blocker"), event("blocker", JobState::Running, seq)).await })
    };
    // The blocker's group waits for the lock: the one place in flight is taken.
    let (watcher, connection) = tokio_postgres::connect(&cluster.url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    for _ in 0..200 {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'nevermiss/groups' AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let tasks: Vec<_> = deliveries
        .into_iter()
        .map(|(delivery_id, ev)| {
            let store = store.clone();
            tokio::spawn(async move { push(&store, &delivery_id, ev).await })
        })
        .collect();
    // Every one of them is in the queue well before this.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    lock.commit().await.unwrap();
    assert_eq!(blocked.await.unwrap().unwrap().outcome, Outcome::Applied);
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// Deliveries that wait together are applied in one call and one transaction (the rows they
/// write carry the one transaction's id), each answered with its own outcome (applied, stale,
/// duplicate; a first terminal state with its channel); a delivery PostgreSQL refuses (a NUL in a
/// label) fails alone: its group runs again one delivery at a time, the others are applied, and
/// the tallies count exactly them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_waiting_together_commit_as_one_group_and_a_refused_one_fails_alone() {
    let cluster = PgCluster::start();
    // A pool of 4: one group in flight at a time (`postgres::groups_in_flight`).
    let store = connect(&cluster, 4, "groups").await;
    store
        .write(|tx| {
            tx.execute("INSERT INTO channels (name, kind, outcomes, created_at) VALUES ('ops', 'webhook', ',succeeded,failed,', 0)", [])
        })
        .await
        .unwrap();
    push(&store, "seed/known", event("known", JobState::Running, 5)).await.unwrap();
    push(&store, "seed/blocker", event("blocker", JobState::Running, 1)).await.unwrap();

    for (tag, refused) in [("one", false), ("two", true)] {
        let before = counter(&store, Counter::DeliveriesTotal).await;
        let mut deliveries = vec![
            (format!("{tag}/new"), event(&format!("{tag}-new"), JobState::Running, 1)),
            (format!("{tag}/stale"), event("known", JobState::Running, 3)),
            ("seed/known".to_owned(), event("known", JobState::Running, 5)),
            (format!("{tag}/ok"), event(&format!("{tag}-ok"), JobState::Succeeded, 1)),
            (format!("{tag}/ko"), event(&format!("{tag}-ko"), JobState::Failed, 1)),
        ];
        for k in 0..10 {
            deliveries.push((format!("{tag}/many-{k}"), event(&format!("{tag}-many-{k}"), JobState::Running, 1)));
        }
        if refused {
            let mut bad = event(&format!("{tag}-bad"), JobState::Running, 1);
            bad.label = Some("a NUL \0 in a label".into());
            deliveries.insert(7, (format!("{tag}/bad"), bad));
        }
        let count_of = deliveries.len();
        let answers = pushed_together(&cluster, &store, tag, deliveries.clone()).await;
        for ((delivery_id, ev), answer) in deliveries.iter().zip(&answers) {
            if ev.job_id.ends_with("-bad") {
                assert!(answer.is_err(), "{delivery_id}: {answer:?}");
                continue;
            }
            let answer = answer.as_ref().unwrap_or_else(|e| panic!("{delivery_id}: {e}\n{}", cluster.log()));
            let expected = match delivery_id.as_str() {
                "seed/known" => Outcome::Duplicate,
                d if d.ends_with("/stale") => Outcome::Stale,
                _ => Outcome::Applied,
            };
            assert_eq!(answer.outcome, expected, "{delivery_id}");
            assert_eq!(answer.first_terminal, ev.state.rank() == 3, "{delivery_id}");
            if expected == Outcome::Applied {
                let job = answer.job.as_ref().expect("an applied delivery's job");
                assert_eq!((job.job_id.as_str(), job.state), (ev.job_id.as_str(), ev.state), "{delivery_id}");
            }
        }
        let kept = count_of as i64 - 1 - i64::from(refused);
        let sql = format!("SELECT count(*) FROM deliveries WHERE delivery_id LIKE '{tag}/%' AND delivery_id <> '{tag}/blocker'");
        assert_eq!(store.read(move |db| db.query_row(&sql, [], |r| r.get::<_, i64>(0))).await.unwrap(), kept);
        let sql = format!(
            "SELECT count(DISTINCT CAST(CAST(xmin AS TEXT) AS BIGINT)) FROM deliveries WHERE delivery_id LIKE '{tag}/%' AND delivery_id <> '{tag}/blocker'"
        );
        let transactions = store.read(move |db| db.query_row(&sql, [], |r| r.get::<_, i64>(0))).await.unwrap();
        if refused {
            assert_eq!(transactions, kept, "run again one by one, each in its own transaction");
            let sql = format!("SELECT count(*) FROM jobs WHERE job_id = '{tag}-bad'");
            assert_eq!(store.read(move |db| db.query_row(&sql, [], |r| r.get::<_, i64>(0))).await.unwrap(), 0);
        } else {
            assert_eq!(transactions, 1, "one group, one transaction");
        }
        // The blocker's delivery and every delivery answered (the refused one is not counted).
        assert_eq!(counter(&store, Counter::DeliveriesTotal).await - before, 1 + count_of as i64 - i64::from(refused));
        let sql = format!("SELECT count(DISTINCT job_id) FROM outbox WHERE channel = 'ops' AND job_id IN ('{tag}-ok', '{tag}-ko')");
        assert_eq!(store.read(move |db| db.query_row(&sql, [], |r| r.get::<_, i64>(0))).await.unwrap(), 2);
    }
    assert!(!cluster.log().contains("deadlock detected"), "{}", cluster.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_is_an_error_never_a_lost_acknowledgement_and_the_pool_recovers() {
    let cluster = PgCluster::start();
    let limits = PoolLimits { max_connections: 4, wait: std::time::Duration::from_secs(2), ..PoolLimits::default() };
    let store = Store::connect(&cluster.url, limits, "outage").await.unwrap();
    let ok = push(&store, "d-1", event("outage", JobState::Running, 1)).await.unwrap();
    assert_eq!(ok.outcome, Outcome::Applied);

    cluster.stop();
    let during = push(&store, "d-2", event("outage", JobState::Succeeded, 2)).await;
    assert!(matches!(&during, Err(StoreError::Db(e)) if e.is_unavailable()), "{during:?}");

    cluster.restart();
    // The sender retries the same delivery: it applies now, once.
    let mut retried = None;
    for _ in 0..50 {
        match push(&store, "d-2", event("outage", JobState::Succeeded, 2)).await {
            Ok(pushed) => {
                retried = Some(pushed);
                break;
            }
            Err(StoreError::Db(e)) if e.is_unavailable() => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            Err(other) => panic!("{other}"),
        }
    }
    let retried = retried.unwrap_or_else(|| panic!("the pool did not recover\n{}", cluster.log()));
    assert_eq!((retried.outcome, retried.first_terminal), (Outcome::Applied, true));
    let job = store.read(|db| jobs::job(db, &JobKey::new("generic", "outage"))).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(count(&store, "SELECT count(*) FROM outbox").await, 1);
}

/// Enqueues a terminal outbox row for each of `jobs` finished jobs, through the merge point.
async fn finish_jobs(store: &Store, jobs: usize) {
    for job in 0..jobs {
        let job_id = format!("claim-{job}");
        push(store, &format!("{job_id}/done"), event(&job_id, JobState::Succeeded, 1)).await.unwrap();
    }
}

/// Three processes claiming the same due rows at once: each row is claimed by exactly one, and a
/// dead claimer's rows go to another once its claim expires (its own restart takes them back at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_outbox_row_is_claimed_by_one_process_of_the_fleet() {
    let cluster = PgCluster::start();
    let mut processes = Vec::new();
    for process in 0..PROCESSES {
        processes.push(connect(&cluster, 4, &format!("claimer-{process}")).await);
    }
    finish_jobs(&processes[0], 60).await;
    let now = now_ms();
    let start = Arc::new(Barrier::new(PROCESSES));
    let claims = processes.iter().map(|store| {
        let (store, start) = (store.clone(), start.clone());
        async move {
            start.wait().await;
            let node = store.node().to_owned();
            let mut mine: Vec<i64> = Vec::new();
            // Claims without delivering until a claim brings nothing new (its own rows come
            // back to it: a claimer takes back what it holds).
            loop {
                let batch = store.write({
                    let node = node.clone();
                    move |tx| nevermiss_engine::store::outbox::claim(tx, &node, now, now + 60_000, 7)
                });
                let before = mine.len();
                for due in batch.await.unwrap() {
                    if !mine.contains(&due.id) {
                        mine.push(due.id);
                    }
                }
                if mine.len() == before {
                    return mine;
                }
            }
        }
    });
    let claimed: Vec<Vec<i64>> = futures_util::future::join_all(claims).await;
    let mut all: Vec<i64> = claimed.iter().flatten().copied().collect();
    all.sort_unstable();
    let total = all.len();
    all.dedup();
    assert_eq!(total, all.len(), "a row was claimed by two processes: {claimed:?}");
    assert_eq!(all.len(), 60, "every due row was claimed");

    // The first claimer dies: nobody else takes its rows before the claim expires, anyone after.
    let dead = &processes[0];
    let other = &processes[1];
    let node = other.node().to_owned();
    let before_expiry = other
        .write({
            let node = node.clone();
            move |tx| nevermiss_engine::store::outbox::claim(tx, &node, now + 1_000, now + 61_000, 100)
        })
        .await
        .unwrap();
    assert!(before_expiry.iter().all(|due| claimed[1].contains(&due.id)), "only its own rows");
    let after_expiry =
        other.write(move |tx| nevermiss_engine::store::outbox::claim(tx, &node, now + 61_000, now + 121_000, 100)).await.unwrap();
    assert_eq!(after_expiry.len(), 60, "the expired claims (and its own) are taken over");
    // The dead one restarted (same node name): what it claimed before is due to it at once.
    let restarted = connect(&cluster, 2, dead.node()).await;
    let node = restarted.node().to_owned();
    let again =
        restarted.write(move |tx| nevermiss_engine::store::outbox::claim(tx, &node, now + 61_500, now + 121_500, 100)).await.unwrap();
    assert!(again.is_empty(), "its rows were taken over by another process meanwhile: {again:?}");
}

/// One lease holder at a time; a renewal keeps it; an expired lease (a dead holder) is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_has_one_holder_and_a_dead_holders_lease_expires() {
    use nevermiss_engine::store::leases;
    let cluster = PgCluster::start();
    let (a, b) = (connect(&cluster, 2, "a").await, connect(&cluster, 2, "b").await);
    let take = |store: &Store, at: i64| {
        let node = store.node().to_owned();
        let store = store.clone();
        async move { store.write(move |tx| leases::acquire(tx, "reconcile/generic", &node, at, at + 15_000)).await.unwrap() }
    };
    let t = 1_000_000;
    let (first_a, first_b) = tokio::join!(take(&a, t), take(&b, t));
    assert!(first_a ^ first_b, "exactly one of two processes asking at once holds it ({first_a}, {first_b})");
    let (holder, other) = if first_a { (&a, &b) } else { (&b, &a) };
    assert!(take(holder, t + 5_000).await, "the holder renews it");
    assert!(!take(other, t + 15_000).await, "renewed: still held at the first expiry");
    assert!(take(other, t + 20_000).await, "expired: the other takes it");
    assert!(!take(holder, t + 21_000).await, "the old holder has lost it");
    let node = other.node().to_owned();
    other.write(move |tx| leases::release(tx, "reconcile/generic", &node)).await.unwrap();
    assert!(take(holder, t + 22_000).await, "released: free at once");
}

/// A write by one process reaches the others' change feed; a process's own writes do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleets_change_feed_tells_each_process_what_the_others_wrote() {
    let cluster = PgCluster::start();
    let (a, b) = (connect(&cluster, 2, "feed-a").await, connect(&cluster, 2, "feed-b").await);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut seen_by_b = b.watch_others(shutdown.clone()).expect("PostgreSQL has a change feed");
    let mut seen_by_a = a.watch_others(shutdown.clone()).expect("PostgreSQL has a change feed");
    // Each feed first says "something may have changed" once it listens.
    let wait = std::time::Duration::from_secs(10);
    assert_eq!(tokio::time::timeout(wait, seen_by_b.recv()).await.unwrap(), Some(FleetChange::Missed));
    assert_eq!(tokio::time::timeout(wait, seen_by_a.recv()).await.unwrap(), Some(FleetChange::Missed));

    push(&a, "feed/d-1", event("feed-job", JobState::Succeeded, 1)).await.unwrap();
    let mut jobs = Vec::new();
    let mut counters = 0;
    let deadline = tokio::time::Instant::now() + wait;
    while jobs.is_empty() || counters == 0 {
        match tokio::time::timeout_at(deadline, seen_by_b.recv()).await {
            Ok(Some(FleetChange::Job { provider, job_id })) => jobs.push((provider, job_id)),
            Ok(Some(FleetChange::Counters)) => counters += 1,
            other => panic!("the feed of b ended or said nothing: {other:?} (jobs {jobs:?}, counters {counters})"),
        }
    }
    assert_eq!(jobs, vec![("generic".to_owned(), "feed-job".to_owned())]);
    // A setting b writes reaches a, and it is the first thing a hears after listening: a's own
    // job and counters, committed before it, are not in a's feed (notifications come in commit order).
    b.write(|tx| nevermiss_engine::store::settings::set(tx, "sla_secs", "120")).await.unwrap();
    assert_eq!(tokio::time::timeout(wait, seen_by_a.recv()).await.unwrap(), Some(FleetChange::Settings), "a heard its own write");
    shutdown.cancel();
}

/// Every query of the store that the receiver, reconcile and fleet suites do not reach runs on
/// PostgreSQL too and gives what SQLite gives: the timeline's ignored and rejected entries,
/// refused requests, passes, polling's bookkeeping, job pages and filters, and retention (trim,
/// archive, purges) end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_query_runs_on_postgres() {
    use nevermiss_engine::retention::{purge, Policy, Sweep};
    use nevermiss_engine::store::job::{AbandonReason, PollErrorKind, Source};
    use nevermiss_engine::store::jobs::JobFilter;
    use nevermiss_engine::store::passes::{self, PassSummary};
    use nevermiss_engine::store::refused::{self, NewRefusal, RefusalKind};
    use nevermiss_engine::store::{deliveries, outbox, settings, timeline};

    let cluster = PgCluster::start();
    let store = connect(&cluster, 2, "queries").await;
    const DAY: i64 = 86_400_000;
    let now = now_ms();
    let long_ago = now - 200 * DAY;

    // A job finished long ago, with progress events: retention trims then archives it.
    for (i, (state, seq)) in
        [(JobState::Queued, 1), (JobState::Running, 2), (JobState::Running, 3), (JobState::Succeeded, 4)].into_iter().enumerate()
    {
        let push = PushDelivery { delivery_id: format!("old/d-{i}"), event: event("old", state, seq), raw: RawRequest::default() };
        store.write(move |tx| accept_push(tx, &push, long_ago + i as i64)).await.unwrap();
    }
    // Its notification was delivered long ago.
    let node = store.node().to_owned();
    let claimed = store.write(move |tx| outbox::claim(tx, &node, long_ago + 10, long_ago + 20, 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let id = claimed[0].id;
    assert!(store.write(move |tx| outbox::mark_delivered(tx, id, long_ago + 30)).await.unwrap());

    // A running job, polled and failing, then abandoned; one ignored and one rejected delivery.
    push(&store, "live/d-1", event("live", JobState::Running, 1)).await.unwrap();
    store
        .write(move |tx| {
            jobs::track(tx, &JobKey::new("generic", "tracked"), Some("a label"), Some("https://example.invalid/status"), now)?;
            jobs::remember_poll_url(tx, &JobKey::new("generic", "tracked"), "https://example.invalid/v2")?;
            jobs::note_started_at(tx, &JobKey::new("generic", "live"), now - 1_000)?;
            let since = jobs::poll_failed(tx, &JobKey::new("generic", "tracked"), now, PollErrorKind::NotFound, "404", 1, now + 5_000)?;
            assert_eq!(since, now);
            timeline::record_ignored(tx, &JobKey::new("generic", "live"), Some("d-ignored"), "an event it does not use", now)?;
            timeline::record_rejected(tx, &JobKey::new("generic", "live"), Some("d-rejected"), "unknown state", now)?;
            settings::set(tx, "sla_secs", "600")?;
            refused::insert(
                tx,
                &NewRefusal {
                    provider: "generic".into(),
                    status: 401,
                    kind: RefusalKind::BadSignature,
                    error: "bad signature".into(),
                    cause: "the secret differs".into(),
                    headers_json: "{}".into(),
                    body: b"{}".to_vec(),
                    body_length: 2,
                },
                now,
            )?;
            passes::record(tx, now, &PassSummary { duration_ms: 12, ..PassSummary::default() })
        })
        .await
        .unwrap();
    let (due, target, stuck, not_found) = store
        .read(move |db| {
            Ok((
                jobs::unfinished_due(db, "generic", now + 10_000, 10)?,
                jobs::poll_target(db, &JobKey::new("generic", "tracked"))?,
                jobs::unfinished_since_before(db, "generic", now + 60_000)?,
                nevermiss_engine::store::metrics::unfinished_counts(db)?.not_found,
            ))
        })
        .await
        .unwrap();
    assert_eq!(due.len(), 2, "{due:?}");
    assert_eq!(target.map(|(job, failures)| (job.poll_url, failures)), Some((Some("https://example.invalid/v2".into()), 1)));
    assert_eq!(stuck.len(), 2);
    assert_eq!(not_found, 1);
    let abandoned =
        store.write(move |tx| jobs::abandon(tx, &JobKey::new("generic", "tracked"), AbandonReason::NotFound, now)).await.unwrap();
    assert_eq!(abandoned, Some(JobState::Unknown));
    let (timeline, page, filtered, refusals, last_passes, metrics) = store
        .read(|db| {
            Ok((
                timeline::of_job(db, &JobKey::new("generic", "live"))?,
                jobs::list(db, &JobFilter { limit: Some(2), ..JobFilter::default() })?,
                jobs::list(db, &JobFilter { q: Some("label".into()), state: Some("unknown".into()), ..JobFilter::default() })?,
                refused::newest(db, 10)?,
                passes::last(db, 5)?,
                nevermiss_engine::store::metrics::read(db)?,
            ))
        })
        .await
        .unwrap();
    let outcomes: Vec<&str> = timeline.iter().map(|e| e.outcome.as_str()).collect();
    assert_eq!(outcomes, ["applied", "ignored", "rejected"]);
    assert_eq!(timeline[0].source, Source::Push);
    assert_eq!((page.jobs.len(), page.next_cursor.is_some()), (2, true));
    assert_eq!(filtered.jobs.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(), ["tracked"]);
    assert_eq!((refusals.len(), refusals[0].status, refusals[0].kind), (1, 401, RefusalKind::BadSignature));
    assert_eq!(last_passes[0].duration_ms, 12);
    assert_eq!((metrics.jobs_abandoned, metrics.notifications_pending, metrics.notifications_delivered), (1, 0, 1));
    assert_eq!(metrics.completions_by_day.iter().map(|d| d.finished).sum::<i64>(), 1);
    assert_eq!(metrics.jobs_by_state["succeeded"], 1);
    let (kept, counted) = store
        .read(|db| {
            Ok((nevermiss_engine::store::metrics::unfinished_counts(db)?, nevermiss_engine::store::metrics::unfinished_counted(db)?))
        })
        .await
        .unwrap();
    assert_eq!(kept, counted, "the counts kept at write are the counts");

    // Retention: the old job's deliveries purged, its timeline trimmed, then the job archived;
    // the live ones kept; the per-state counts keep the archived job.
    let mut sweep = Sweep::default();
    let purged = purge(&store, Policy { delivery_days: 7, job_days: 90 }, now, &mut sweep).await.unwrap();
    let (old_job, old_events, old_deliveries, kept_jobs, by_state) = store
        .read(|db| {
            Ok((
                jobs::job(db, &JobKey::new("generic", "old"))?,
                db.query_row("SELECT count(*) FROM job_events WHERE job_id = 'old'", [], |r| r.get::<_, i64>(0))?,
                deliveries::received_at(db, "generic", "old/d-0")?,
                jobs::count(db)?,
                jobs::count_by_state(db)?,
            ))
        })
        .await
        .unwrap();
    assert!(old_job.is_none(), "archived: {purged:?}");
    assert_eq!((old_events, old_deliveries), (0, None), "{purged:?}");
    assert_eq!(kept_jobs, 2);
    assert_eq!(by_state["succeeded"], 1, "an archived job still counts in its final state");

    // A batch bound as one JSON parameter (the dispatcher's) names exactly its jobs: quotes, a
    // backslash and letters beyond ASCII in a key, a key twice, a key of no job.
    const TRICKY: &str = "it's \"quoted\" \\ über/ジョブ";
    push(&store, "tricky/d-1", event(TRICKY, JobState::Succeeded, 1)).await.unwrap();
    let found = store
        .write(move |tx| {
            jobs::mark_notified(tx, &[("generic", TRICKY), ("generic", "absent")], now)?;
            jobs::jobs_of(tx, &[("generic", TRICKY), ("generic", TRICKY), ("generic", "absent")])
        })
        .await
        .unwrap();
    assert_eq!(found.iter().map(|j| (j.job_id.as_str(), j.notified_at.is_some())).collect::<Vec<_>>(), [(TRICKY, true)]);
    let live = store.read(|db| jobs::job(db, &JobKey::new("generic", "live"))).await.unwrap().unwrap();
    assert_eq!(live.notified_at, None);
}

/// `sslmode=require`: TLS, its certificate verified (against `sslrootcert`, the CA that signed
/// it); a certificate no trusted CA signed is refused, saying so; the default (`prefer`) to the
/// same server stays plain, as libpq's does with a server it cannot verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_used_and_verified_when_the_url_asks_for_it() {
    let cluster = PgCluster::start_tls();
    let ca = cluster.ca.clone().unwrap();
    let encrypted = |store: Store| async move {
        store
            .read(|db| db.query_row("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", [], |r| r.get::<_, bool>(0)))
            .await
            .unwrap()
    };

    let verified = format!("{}?sslmode=verify-full&sslrootcert={}", cluster.url, ca.display());
    let store = Store::connect(&verified, PoolLimits::default(), "tls").await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.log()));
    assert!(encrypted(store.clone()).await, "the connection is encrypted");
    push(&store, "tls/d-1", event("tls-job", JobState::Succeeded, 1)).await.unwrap();

    let unverifiable = format!("{}?sslmode=require", cluster.url);
    let refused =
        Store::connect(&unverifiable, PoolLimits { wait: std::time::Duration::from_secs(3), ..PoolLimits::default() }, "tls").await;
    let text = refused.err().expect("a certificate no trusted CA signed is refused").to_string();
    assert!(text.to_lowercase().contains("certificate"), "{text}");

    let plain = Store::connect(&cluster.url, PoolLimits::default(), "plain").await.unwrap();
    assert!(!encrypted(plain).await, "prefer (the default) stays plain");
}

/// The job search answers the same on both databases: it folds case by Unicode's rules (`store::fold`:
/// the default lowercase, "ß" as "ss", "ς" as "σ", no language's own rules) and takes `%`, `_` and
/// `\` literally. PostgreSQL's own `LIKE` is case-sensitive: before the search was written per
/// dialect, "sdxl" found "SDXL render" on SQLite and nothing on PostgreSQL; before `fold` both
/// folded ASCII only, and "über" did not find "Über".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_search_answers_the_same_on_both_databases() {
    use nevermiss_engine::store::jobs::JobFilter;
    use nevermiss_engine::store::sql::Dialect;

    let cluster = PgCluster::start();
    let postgres = connect(&cluster, 2, "search").await;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::open(&dir.path().join("nevermiss.db")).unwrap();
    let labelled = [
        ("j-1", "SDXL render"),
        ("j-2", "sdxl upscale"),
        ("j-3", "50% done"),
        ("j-4", "500 done"),
        ("j-5", "sd_xl"),
        ("j-6", "sdXxl"),
        ("j-7", r"C:\runs\a"),
        ("j-8", "Über-run"),
        ("j-9", "über-run"),
        ("MIXED-Case-Id", "no label match"),
        ("j-10", "Straße"),
        ("j-11", "STRASSE"),
        ("j-12", "ΟΔΟΣ"),
        ("j-13", "İstanbul"),
        ("j-14", "ılık"),
        ("j-15", "Привет мир"),
        ("j-16", "日本語のジョブ"),
        ("j-17", "ẞ-Test"),
        ("j-18", "مرحبا"),
        ("ÉTÉ-42", "no label match"),
        ("j-19", r#"say "hi" now"#),
    ];
    // Grouped jobs are found by their group's name too; a label given again is searched anew.
    let grouped = [("j-3", "Nightly-Sweep"), ("j-4", "nightly-sweep")];
    let relabelled = [("j-2", "renamed thing")];
    let searches: &[(&str, &[&str])] = &[
        ("sdxl", &["j-1"]),
        ("SDXL", &["j-1"]),
        ("50%", &["j-3"]),
        ("sd_xl", &["j-5"]),
        (r"\runs", &["j-7"]),
        // Every alphabet with case, either way.
        ("über", &["j-8", "j-9"]),
        ("ÜBER", &["j-8", "j-9"]),
        ("mixed-case", &["MIXED-Case-Id"]),
        ("été-42", &["ÉTÉ-42"]),
        ("привет", &["j-15"]),
        ("ПРИВЕТ МИР", &["j-15"]),
        // German: "ß" is "ss", and the capital "ẞ" with it.
        ("straße", &["j-10", "j-11"]),
        ("strasse", &["j-10", "j-11"]),
        ("ẞ", &["j-10", "j-11", "j-17"]),
        // Greek: the final sigma is a sigma.
        ("σ", &["j-12"]),
        ("οδοσ", &["j-12"]),
        ("ΟΔΟΣ", &["j-12"]),
        // Turkish is not tailored: "İ" is "i" and a combining dot, "I" is "i" (never "ı").
        ("İstanbul", &["j-13"]),
        ("i\u{307}stanbul", &["j-13"]),
        ("istanbul", &[]),
        ("ı", &["j-14"]),
        ("ILIK", &[]),
        // Scripts without case, as they are.
        ("日本語", &["j-16"]),
        ("مرحبا", &["j-18"]),
        ("none of these", &[]),
        ("nightly-sw", &["j-3", "j-4"]),
        ("renamed", &["j-2"]),
        ("upscale", &[]),
        (r#""hi""#, &["j-19"]),
        // One or two characters (no trigram: the index of short terms), rare ones: at a text's
        // start or end, letters beyond ASCII, folded, `LIKE`'s and FTS5's own characters, never
        // across two texts (an id's end and a label's start).
        ("-1", &["j-1", "j-10", "j-11", "j-12", "j-13", "j-14", "j-15", "j-16", "j-17", "j-18", "j-19"]),
        ("É", &["ÉTÉ-42"]),
        ("é-", &["ÉTÉ-42"]),
        ("ID", &["MIXED-Case-Id"]),
        ("c:", &["j-7"]),
        (r"\a", &["j-7"]),
        ("W", &["j-19", "j-3", "j-4"]),
        ("\"", &["j-19"]),
        ("%", &["j-3"]),
        ("_", &["j-5"]),
        ("ς", &["j-12"]),
        ("İ", &["j-13"]),
        ("ブ", &["j-16"]),
        ("語", &["j-16"]),
        ("1s", &[]),
        ("qz", &[]),
    ];
    // Jobs enough that PostgreSQL's search reads its index for the older ones (the labelled jobs
    // are the oldest), and pages of one search to walk.
    const FILLERS: usize = 2_100;
    for store in [&sqlite, &postgres] {
        store
            .write(move |tx| {
                for (job_id, label) in labelled {
                    jobs::track(tx, &JobKey::new("generic", job_id), Some(label), None, now_ms())?;
                }
                for (job_id, group) in grouped {
                    tx.execute("UPDATE jobs SET group_name = $2 WHERE job_id = $1", [job_id, group])?;
                }
                for i in 0..FILLERS {
                    // On PostgreSQL the fillers' row ids span three ranges of its index (65,536 ids
                    // each) and leave one empty, which its search walks newest first.
                    if tx.dialect() == Dialect::Postgres && (i == 0 || i == FILLERS / 2) {
                        let next_id = if i == 0 { 70_000 } else { 200_000 };
                        tx.execute(&format!("ALTER TABLE jobs ALTER COLUMN id RESTART WITH {next_id}"), [])?;
                    }
                    jobs::track(tx, &JobKey::new("replicate", format!("filler{i:05}")), Some("a plain job"), None, now_ms())?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
    let stores = [&sqlite, &postgres];
    // Not indexed yet: the search reads the jobs waiting for the index, page after page.
    walk_fillers(stores, FILLERS).await;
    // Indexed, then one job renamed: its old text is in the index, its new one waits.
    for store in stores {
        search_index::catch_up(store).await.unwrap();
        store
            .write(move |tx| {
                for (job_id, label) in relabelled {
                    jobs::track(tx, &JobKey::new("generic", job_id), Some(label), None, now_ms())?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
    check_searches(stores, searches).await;
    // Everything indexed.
    for store in stores {
        search_index::catch_up(store).await.unwrap();
        assert_eq!(store.read(nevermiss_engine::store::search_index::pending).await.unwrap(), 0);
    }
    check_searches(stores, searches).await;
    walk_fillers(stores, FILLERS).await;
    // Short terms many jobs hold, page after page: every filler ("fi"), and every filler then
    // every labelled job whose id holds a "j" ("J").
    let fillers: Vec<String> = (0..FILLERS).rev().map(|i| format!("filler{i:05}")).collect();
    walk_search(stores, "fi", &fillers).await;
    let labelled_js = (1..=19).rev().map(|i| format!("j-{i}"));
    walk_search(stores, "J", &fillers.iter().cloned().chain(labelled_js).collect::<Vec<_>>()).await;
    // With another filter: the newest jobs of that filter, then the older ones by range.
    for (q, provider, expected) in [
        ("-1", "generic", &["j-19", "j-18", "j-17", "j-16", "j-15", "j-14", "j-13", "j-12", "j-11", "j-10", "j-1"][..]),
        (
            "r0001",
            "replicate",
            &[
                "filler00019",
                "filler00018",
                "filler00017",
                "filler00016",
                "filler00015",
                "filler00014",
                "filler00013",
                "filler00012",
                "filler00011",
                "filler00010",
            ][..],
        ),
        ("plain", "generic", &[][..]),
    ] {
        for (store, name) in stores.into_iter().zip(["SQLite", "PostgreSQL"]) {
            let filter = JobFilter { q: Some(q.into()), provider: Some(provider.into()), ..JobFilter::default() };
            let page = store.read(move |db| jobs::list(db, &filter)).await.unwrap();
            let found: Vec<String> = page.jobs.into_iter().map(|j| j.job_id).collect();
            assert_eq!(found, expected, "{name}'s answer to {q:?} among {provider}'s jobs");
        }
    }
}

/// Each search's answer, on both databases (SQLite, then PostgreSQL), sorted.
async fn check_searches(stores: [&Store; 2], searches: &[(&str, &[&str])]) {
    use nevermiss_engine::store::jobs::JobFilter;
    for &(q, expected) in searches {
        let mut answers = Vec::new();
        for store in stores {
            let filter = JobFilter { q: Some(q.to_owned()), ..JobFilter::default() };
            let page = store.read(move |db| jobs::list(db, &filter)).await.unwrap();
            let mut found: Vec<String> = page.jobs.into_iter().map(|j| j.job_id).collect();
            found.sort();
            answers.push(found);
        }
        assert_eq!(answers[0], expected, "SQLite's answer to {q:?}");
        assert_eq!(answers[1], expected, "PostgreSQL's answer to {q:?}");
    }
}

/// One search's pages, newest first, each job once, on both databases alike.
async fn walk_fillers(stores: [&Store; 2], fillers: usize) {
    let newest_first: Vec<String> = (0..fillers).rev().map(|i| format!("filler{i:05}")).collect();
    walk_search(stores, "FILLER", &newest_first).await;
}

/// The pages of a search for `q`, walked on both databases: the jobs `newest_first`, each once.
async fn walk_search(stores: [&Store; 2], q: &str, newest_first: &[String]) {
    use nevermiss_engine::store::jobs::JobFilter;
    let mut walks = Vec::new();
    for store in stores {
        let mut filter = JobFilter { q: Some(q.into()), limit: Some(300), ..JobFilter::default() };
        let mut walked: Vec<String> = Vec::new();
        loop {
            let page = store.read({
                let filter = filter.clone();
                move |db| jobs::list(db, &filter)
            });
            let page = page.await.unwrap();
            walked.extend(page.jobs.into_iter().map(|j| j.job_id));
            match page.next_cursor {
                Some(cursor) => filter.cursor = Some(cursor),
                None => break,
            }
        }
        walks.push(walked);
    }
    assert_eq!(walks[0], newest_first, "SQLite's pages of {q:?}");
    assert_eq!(walks[1], newest_first, "PostgreSQL's pages of {q:?}");
}

/// The Metrics screen's counts of unfinished jobs (not found, abandoned) and of notifications not
/// yet delivered are kept at write by the schema on both databases; after each kind of write they
/// equal the same figures counted over the tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unfinished_counts_kept_at_write_are_the_counts_on_both_databases() {
    use nevermiss_engine::store::job::{AbandonReason, PollErrorKind};
    use nevermiss_engine::store::metrics::{unfinished_counted, unfinished_counts, UnfinishedCounts};
    use nevermiss_engine::store::outbox::{self, Kind, Subject};

    let cluster = PgCluster::start();
    let postgres = connect(&cluster, 2, "counts").await;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::open(&dir.path().join("nevermiss.db")).unwrap();
    for store in [&sqlite, &postgres] {
        let counts = || async { store.read(|db| Ok((unfinished_counts(db)?, unfinished_counted(db)?))).await.unwrap() };
        let now = now_ms();
        let steps: Vec<(&str, UnfinishedCounts)> = vec![
            ("three tracked", UnfinishedCounts::default()),
            ("two not found", UnfinishedCounts { not_found: 2, ..Default::default() }),
            ("one of them abandoned", UnfinishedCounts { not_found: 1, abandoned: 1, ..Default::default() }),
            // Its end is announced on the desktop channel (every store has it).
            ("the abandoned one ends by webhook", UnfinishedCounts { not_found: 1, pending_notifications: 1, ..Default::default() }),
            ("a poll finds the other", UnfinishedCounts { pending_notifications: 1, ..Default::default() }),
            ("a stuck alert enqueued", UnfinishedCounts { pending_notifications: 2, ..Default::default() }),
            ("one notification delivered", UnfinishedCounts { pending_notifications: 1, ..Default::default() }),
        ];
        for (i, (step, expected)) in steps.into_iter().enumerate() {
            match i {
                0 => {
                    store
                        .write(move |tx| {
                            for id in ["a", "b", "c"] {
                                jobs::track(tx, &JobKey::new("generic", id), None, None, now)?;
                            }
                            Ok(())
                        })
                        .await
                        .unwrap();
                }
                1 => {
                    store
                        .write(move |tx| {
                            for id in ["a", "b"] {
                                jobs::poll_failed(tx, &JobKey::new("generic", id), now, PollErrorKind::NotFound, "404", 1, now + 5_000)?;
                            }
                            Ok(())
                        })
                        .await
                        .unwrap();
                }
                2 => {
                    store.write(move |tx| jobs::abandon(tx, &JobKey::new("generic", "a"), AbandonReason::NotFound, now)).await.unwrap();
                }
                3 => {
                    push(store, "a/1", event("a", JobState::Succeeded, 1)).await.unwrap();
                }
                4 => {
                    store.write(move |tx| jobs::poll_succeeded(tx, &JobKey::new("generic", "b"), now)).await.unwrap();
                }
                5 => {
                    let subject = Subject::Job { provider: "generic".into(), job_id: "c".into() };
                    store.write(move |tx| outbox::enqueue(tx, Kind::Stuck, &subject, None, now)).await.unwrap();
                }
                _ => {
                    store
                        .write(move |tx| {
                            let id: i64 = tx.query_row("SELECT min(id) FROM outbox WHERE delivered_at IS NULL", [], |r| r.get(0))?;
                            outbox::mark_delivered(tx, id, now)
                        })
                        .await
                        .unwrap();
                }
            }
            let (kept, counted) = counts().await;
            assert_eq!(kept, counted, "{:?}, after {step}: kept at write, then counted", store.dialect());
            assert_eq!(kept, expected, "{:?}, after {step}", store.dialect());
        }
    }
}

/// The push path in one call of `nevermiss_push_group` leaves what the same path statement by
/// statement (`accept_push` in a write, as SQLite runs it) leaves, delivery by delivery and with
/// every delivery in one group: the same deliveries at the same times, on three databases of one
/// cluster, answer the same and give the same jobs, timeline, kept requests, outbox rows (per
/// channel: one announces failures only) and tallies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_and_statement_by_statement_leave_the_same_rows() {
    let cluster = PgCluster::start();
    let limits = PoolLimits { max_connections: 2, ..PoolLimits::default() };
    let one_call = Store::connect(&cluster.create_database("one_call"), limits, "one-call").await.unwrap();
    let statements = Store::connect(&cluster.create_database("statements"), limits, "statements").await.unwrap();
    // And SQLite's writer, its own triggers keeping the jobs' tallies: the same rows.
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::open(&dir.path().join("nevermiss.db")).unwrap();
    for store in [&one_call, &statements, &sqlite] {
        store
            .write(|tx| tx.execute("INSERT INTO channels (name, kind, outcomes, created_at) VALUES ('ops', 'webhook', ',failed,', 0)", []))
            .await
            .unwrap();
    }
    let with = |job_id: &str, state: JobState, seq: i64, f: &dyn Fn(&mut JobEvent)| {
        let mut ev = event(job_id, state, seq);
        f(&mut ev);
        ev
    };
    let deliveries: Vec<(&str, JobEvent, Outcome, bool)> = vec![
        ("d1", with("a", JobState::Queued, 1, &|e| e.label = Some("A".into())), Outcome::Applied, false),
        ("d1", with("a", JobState::Queued, 1, &|e| e.label = Some("A".into())), Outcome::Duplicate, false),
        ("d2", with("a", JobState::Running, 2, &|e| e.started_at = Some(1_000)), Outcome::Applied, false),
        ("d3", with("a", JobState::Running, 2, &|e| e.label = Some("B".into())), Outcome::Stale, false),
        ("d4", event("b", JobState::Running, 5), Outcome::Applied, false),
        (
            "d5",
            with("b", JobState::Running, 4, &|e| {
                e.label = Some("named late".into());
                e.started_at = Some(500);
            }),
            Outcome::Stale,
            false,
        ),
        ("d6", with("a", JobState::Succeeded, 3, &|e| e.finished_at = Some(9_000)), Outcome::Applied, true),
        (
            "d7",
            with("b", JobState::Failed, 6, &|e| {
                e.error = Some("boom".into());
                e.detail = Some("step 3".into());
            }),
            Outcome::Applied,
            true,
        ),
        ("d8", with("a", JobState::Failed, 9, &|e| e.error = Some("too late".into())), Outcome::Stale, false),
        ("d9", with("c", JobState::Succeeded, 1, &|e| e.label = Some("C".into())), Outcome::Applied, true),
        ("d6", with("a", JobState::Succeeded, 3, &|e| e.finished_at = Some(9_000)), Outcome::Duplicate, false),
        // A group of two: a success kept quiet, a failure announced, the group's end once; a job
        // stays in its first group; a late answer fills in a page (described, not moved).
        ("g1", with("g-1", JobState::Running, 1, &|e| e.group = Some("sweep".into())), Outcome::Applied, false),
        ("g2", with("g-2", JobState::Running, 1, &|e| e.group = Some("sweep".into())), Outcome::Applied, false),
        ("g3", with("g-2", JobState::Running, 2, &|e| e.group = Some("another".into())), Outcome::Applied, false),
        ("g4", with("g-1", JobState::Succeeded, 3, &|e| e.provider_url = Some("https://example.com/g-1".into())), Outcome::Applied, true),
        ("g5", with("g-2", JobState::Failed, 3, &|e| e.error = Some("oom".into())), Outcome::Applied, true),
        ("g6", with("g-2", JobState::Failed, 2, &|e| e.provider_url = Some("https://example.com/g-2".into())), Outcome::Stale, false),
        // Kinds and durations: one seen running (measured from its start), one first heard
        // finished with its start (measured), one without (not measured), a failure (not
        // measured); a kind, once known, is kept; a stale event tells a kind not known yet.
        (
            "k1",
            with("k-1", JobState::Running, 1, &|e| {
                e.kind = Some("generic/render".into());
                e.started_at = Some(1_764_000_000_000)
            }),
            Outcome::Applied,
            false,
        ),
        (
            "k2",
            with("k-1", JobState::Succeeded, 2, &|e| {
                e.kind = Some("generic/other".into());
                e.finished_at = Some(1_764_000_060_000)
            }),
            Outcome::Applied,
            true,
        ),
        (
            "k3",
            with("k-2", JobState::Succeeded, 1, &|e| {
                e.kind = Some("generic/render".into());
                e.started_at = Some(1_764_000_000_000);
                e.finished_at = Some(1_764_000_030_000)
            }),
            Outcome::Applied,
            true,
        ),
        ("k4", with("k-3", JobState::Succeeded, 1, &|e| e.kind = Some("generic/render".into())), Outcome::Applied, true),
        ("k5", with("k-4", JobState::Running, 1, &|e| e.started_at = Some(1_764_000_000_000)), Outcome::Applied, false),
        ("k6", with("k-4", JobState::Failed, 2, &|e| e.kind = Some("generic/render".into())), Outcome::Applied, true),
        ("k7", with("k-5", JobState::Running, 2, &|_| {}), Outcome::Applied, false),
        ("k8", with("k-5", JobState::Running, 1, &|e| e.kind = Some("generic/late".into())), Outcome::Stale, false),
        // A job that ends and says its kind in the same event: one duration (PostgreSQL's V11,
        // SQLite's V16).
        ("k9", with("k-6", JobState::Running, 1, &|e| e.started_at = Some(1_764_000_000_000)), Outcome::Applied, false),
        (
            "k10",
            with("k-6", JobState::Succeeded, 2, &|e| {
                e.kind = Some("generic/render".into());
                e.finished_at = Some(1_764_000_020_000)
            }),
            Outcome::Applied,
            true,
        ),
    ];
    let raw = RawRequest { headers_json: r#"{"content-type":"application/json"}"#.into(), body: b"{}".to_vec(), body_truncated: false };
    let in_one_group = deliveries.clone();
    let mut one_by_one = Vec::new();
    for (n, (delivery_id, ev, outcome, first_terminal)) in deliveries.into_iter().enumerate() {
        let now = 1_764_000_000_000 + n as i64 * 1_000;
        let detail = ev.error.as_deref().or(ev.detail.as_deref()).map(str::to_owned);
        let call = PushCall { delivery_id, event: &ev, raw: &raw, event_detail: detail.as_deref(), now };
        let called = one_call.push_in_one_call(call).await.unwrap_or_else(|e| panic!("{delivery_id}: {e}\n{}", cluster.log()));
        let push = PushDelivery { delivery_id: delivery_id.to_owned(), event: ev, raw: raw.clone() };
        let local = push.clone();
        let stepped = statements.write(move |tx| accept_push(tx, &push, now)).await.unwrap();
        let on_sqlite = sqlite.write(move |tx| accept_push(tx, &local, now)).await.unwrap();
        assert_eq!(
            (on_sqlite.outcome, on_sqlite.first_terminal, &on_sqlite.job, on_sqlite.described),
            (stepped.outcome, stepped.first_terminal, &stepped.job, stepped.described),
            "{delivery_id} on SQLite"
        );
        assert_eq!((called.outcome, called.first_terminal), (outcome, first_terminal), "{delivery_id}");
        assert_eq!(
            (stepped.outcome, stepped.first_terminal, &stepped.job),
            (called.outcome, called.first_terminal, &called.job),
            "{delivery_id}"
        );
        assert_eq!(
            called.job.is_some(),
            outcome == Outcome::Applied || called.described,
            "{delivery_id}: the job comes back when applied (or described)"
        );
        assert_eq!(stepped.described, called.described, "{delivery_id}");
        one_by_one.push(called);
    }
    // The same deliveries in one group, one call: a job named again is taken in a later round of
    // the group (V10), so each delivery meets its job as one by one, and answers the same.
    let grouped = Store::connect(&cluster.create_database("grouped"), limits, "grouped").await.unwrap();
    grouped
        .write(|tx| tx.execute("INSERT INTO channels (name, kind, outcomes, created_at) VALUES ('ops', 'webhook', ',failed,', 0)", []))
        .await
        .unwrap();
    let details: Vec<Option<String>> = in_one_group.iter().map(|(_, ev, _, _)| ev.error.clone().or(ev.detail.clone())).collect();
    let calls: Vec<PushCall<'_>> = in_one_group
        .iter()
        .zip(&details)
        .enumerate()
        .map(|(n, ((delivery_id, ev, _, _), detail))| PushCall {
            delivery_id,
            event: ev,
            raw: &raw,
            event_detail: detail.as_deref(),
            now: 1_764_000_000_000 + n as i64 * 1_000,
        })
        .collect();
    let answers = grouped.push_group_in_one_call(&calls).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.log()));
    assert_eq!(answers.len(), one_by_one.len());
    for (((delivery_id, ..), alone), together) in in_one_group.iter().zip(&one_by_one).zip(&answers) {
        assert_eq!(together, alone, "{delivery_id} in one group");
    }
    let queries = [
        "SELECT provider, job_id, label, state, rank, seq, error, detail, created_at, updated_at, finished_at, terminal_source,
                notified_at, started_at, group_name, result, provider_url, job_kind FROM jobs ORDER BY job_id",
        // In the order of the deliveries (a group writes its rows round by round).
        "SELECT kind, finished_at, duration_ms FROM job_durations ORDER BY finished_at, kind",
        "SELECT name, announced_total, announced_at FROM job_groups ORDER BY name",
        "SELECT provider, job_id, at, source, delivery_id, state, seq, outcome, detail FROM job_events ORDER BY at, id",
        "SELECT provider, delivery_id, job_id, received_at, status, headers, body, body_truncated FROM deliveries ORDER BY received_at",
        "SELECT channel, provider, job_id, kind, state, created_at, next_attempt_at, attempts FROM outbox ORDER BY channel, job_id",
        "SELECT name, CAST(sum(value) AS BIGINT) AS value FROM counters GROUP BY name ORDER BY name",
        // The hour of each addition: the delivery's on the one call, the commit's on SQLite's path.
        "SELECT name, CAST(sum(value) AS BIGINT) AS value FROM counter_hours GROUP BY name ORDER BY name",
        "SELECT state, CAST(sum(count) AS BIGINT) AS count FROM job_state_counts GROUP BY state HAVING sum(count) <> 0 ORDER BY state",
        "SELECT day, CAST(sum(finished) AS BIGINT) AS f, CAST(sum(within_sla) AS BIGINT) AS w, CAST(sum(by_pull) AS BIGINT) AS p,
                CAST(sum(without_start) AS BIGINT) AS u FROM daily_completions GROUP BY day",
    ];
    for sql in queries {
        let called = one_call.read(move |db| db.rows(sql, &[])).await.unwrap();
        let stepped = statements.read(move |db| db.rows(sql, &[])).await.unwrap();
        let together = grouped.read(move |db| db.rows(sql, &[])).await.unwrap();
        let local = sqlite.read(move |db| db.rows(sql, &[])).await.unwrap();
        assert!(!called.is_empty(), "{sql}: no rows");
        assert_eq!(called, stepped, "{sql}");
        assert_eq!(together, called, "{sql}: in one group");
        assert_eq!(local, stepped, "{sql}: on SQLite");
    }
    // What the rows say, beyond their being the same.
    assert_eq!(
        count(&one_call, "SELECT count(*) FROM outbox WHERE kind = 'group_end' AND job_id = 'sweep@2'").await,
        2,
        "one end, per channel"
    );
    assert_eq!(count(&one_call, "SELECT count(*) FROM outbox WHERE job_id IN ('g-1', 'g-2')").await, 2, "the failure alone, per channel");
    assert_eq!(count(&one_call, "SELECT count(*) FROM jobs WHERE group_name = 'sweep'").await, 2);
    assert_eq!(
        count(&one_call, "SELECT count(*) FROM job_durations WHERE duration_ms = 20000").await,
        1,
        "a job that ends and says its kind at once is measured once"
    );
    assert_eq!(count(&one_call, "SELECT count(*) FROM jobs WHERE provider_url IS NOT NULL").await, 2);
    assert_eq!(count(&one_call, "SELECT min(hour) FROM counter_hours").await, 1_764_000_000_000 / 3_600_000);
    assert_eq!(count(&one_call, "SELECT max(hour) FROM counter_hours").await, 1_764_000_000_000 / 3_600_000);
    assert_eq!(
        count(&one_call, "SELECT count(*) FROM outbox WHERE channel = 'ops' AND job_id IN ('a', 'b', 'c')").await,
        1,
        "ops announces b's failure only"
    );
    assert_eq!(count(&one_call, "SELECT count(*) FROM outbox WHERE channel = 'desktop' AND job_id IN ('a', 'b', 'c')").await, 3);
    assert_eq!(counter(&one_call, Counter::Duplicates).await, 2);
    // a, b and c's four, then g-2's failure and the group's end on both channels, then the k
    // jobs' five ends on the desktop and k-4's failure on ops.
    assert_eq!(counter(&one_call, Counter::NotificationsEnqueued).await, 4 + 2 + 2 + 6);
    let b = one_call.read(|db| jobs::job(db, &JobKey::new("generic", "b"))).await.unwrap().unwrap();
    assert_eq!((b.label.as_deref(), b.error.as_deref()), (Some("named late"), Some("boom")));
    // k-1 measured from its start (60 s), k-2 from the start it came with (30 s), k-6 once (20 s);
    // k-3 and k-4 not.
    let window = one_call.read(|db| nevermiss_engine::store::durations::windows(db)).await.unwrap();
    assert_eq!(window, std::collections::BTreeMap::from([("generic/render".to_owned(), vec![60_000, 30_000, 20_000])]));
    let kinds = one_call
        .read(|db| db.rows("SELECT job_id, job_kind FROM jobs WHERE job_id LIKE 'k-%' ORDER BY job_id", &[]))
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>("job_id").unwrap(), r.get::<_, Option<String>>("job_kind").unwrap()))
        .collect::<Vec<_>>();
    let render = Some("generic/render".to_owned());
    assert_eq!(
        kinds,
        [
            ("k-1".to_owned(), render.clone()),
            ("k-2".to_owned(), render.clone()),
            ("k-3".to_owned(), render.clone()),
            ("k-4".to_owned(), render.clone()),
            ("k-5".to_owned(), Some("generic/late".to_owned())),
            ("k-6".to_owned(), render),
        ],
        "a kind once known is kept; a stale event tells one not known"
    );
}

/// A commit that fails under the one call (`fail_next_commits`, as a server gone at COMMIT)
/// leaves nothing: no kept request, no job, no tally; the sender's retry is then the first
/// delivery, applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_of_the_one_call_leaves_nothing_and_the_retry_applies() {
    let cluster = PgCluster::start();
    let store = connect(&cluster, 2, "failing").await;
    store.fail_next_commits(1);
    let failed = push(&store, "fail/d-1", event("fail-job", JobState::Succeeded, 1)).await;
    assert!(matches!(&failed, Err(StoreError::Db(e)) if e.is_unavailable()), "{failed:?}");
    assert_eq!(store.commits_left_to_fail(), 0);
    for table in ["deliveries", "jobs", "job_events", "outbox", "counters"] {
        assert_eq!(count(&store, Box::leak(format!("SELECT count(*) FROM {table}").into_boxed_str())).await, 0, "{table}");
    }
    let retried = push(&store, "fail/d-1", event("fail-job", JobState::Succeeded, 1)).await.unwrap();
    assert_eq!((retried.outcome, retried.first_terminal), (Outcome::Applied, true));
    assert_eq!(retried.job.map(|job| job.state), Some(JobState::Succeeded));
    assert_eq!(count(&store, "SELECT count(*) FROM outbox").await, 1);
    assert_eq!(counter(&store, Counter::DeliveriesTotal).await, 1);
}

/// A running job's next event changes no indexed column of `jobs` (V12: the index of finished
/// jobs is by `terminal_at`, no longer by `updated_at`, which every adopted event sets), so
/// PostgreSQL writes it as a HOT update, from the push function and from the guarded upsert
/// alike; an event that moves the job's rank is not one, and the end sets `terminal_at` to the
/// end's `updated_at`. Before V12 none of these updates was a HOT one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_jobs_next_event_is_a_hot_update() {
    const MOVES: [(JobState, i64); 5] =
        [(JobState::Queued, 1), (JobState::Running, 2), (JobState::Running, 3), (JobState::Running, 4), (JobState::Succeeded, 5)];
    let cluster = PgCluster::start();
    let store = connect(&cluster, 2, "hot").await;
    for (n, (state, seq)) in MOVES.into_iter().enumerate() {
        let pushed = push(&store, &format!("hot/d-{n}"), event("pushed", state, seq)).await.unwrap();
        assert_eq!(pushed.outcome, Outcome::Applied);
    }
    // Polled, in one transaction: the guarded upsert, and the connection's count of HOT updates
    // not yet reported (it holds its earlier transactions' too: the difference is this one's).
    let polled_hot = store
        .write(|tx| {
            const HOT: &str = "SELECT pg_stat_get_xact_tuples_hot_updated('jobs'::regclass)";
            let before = tx.query_row(HOT, [], |r| r.get::<_, i64>(0))?;
            for (state, seq) in MOVES {
                merge_point::merge(tx, &event("polled", state, seq), nevermiss_engine::store::job::Source::Pull, now_ms() + seq)?;
            }
            Ok(tx.query_row(HOT, [], |r| r.get::<_, i64>(0))? - before)
        })
        .await
        .unwrap();
    assert_eq!(polled_hot, 2, "the two running-to-running updates of the polled job");

    // The push calls ran on the pool's connections: their counts reach the statistics view once
    // those connections report them (within a second or so of going idle).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (updates, hot) = loop {
        let (updates, hot) = store
            .read(|db| {
                db.query_row("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'jobs'", [], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })
            })
            .await
            .unwrap();
        if updates >= 8 || std::time::Instant::now() > deadline {
            break (updates, hot);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!((updates, hot), (8, 4), "four updates of each job, the two running-to-running ones HOT");

    let ends: Vec<(String, bool)> = store
        .read(|db| {
            let mut stmt = db.prepare_cached("SELECT job_id, terminal_at = updated_at AS learned FROM jobs ORDER BY job_id")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, String>("job_id")?, r.get::<_, bool>("learned")?)))?;
            rows.collect()
        })
        .await
        .unwrap();
    assert_eq!(ends, [("polled".to_owned(), true), ("pushed".to_owned(), true)]);
}

/// `GET /api/groups`'s one aggregate query answers the same on both databases: each group's
/// counts per state, its first start, its end once none runs, and the member running longest
/// (the first created of its unfinished members, the lower id on a tie), newest group first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_progress_answers_the_same_on_both_databases() {
    use nevermiss_engine::store::groups;

    let cluster = PgCluster::start();
    let postgres = connect(&cluster, 2, "groups").await;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::open(&dir.path().join("nevermiss.db")).unwrap();
    // (job, group, created at, state)
    let members = [
        ("a-1", "alpha", 1_000, JobState::Succeeded),
        ("a-2", "alpha", 2_000, JobState::Running),
        ("a-3", "alpha", 1_500, JobState::Queued),
        ("a-4", "alpha", 1_500, JobState::Failed),
        ("b-1", "beta", 5_000, JobState::Succeeded),
        ("b-2", "beta", 4_000, JobState::Canceled),
        ("c-1", "gamma", 3_000, JobState::Running),
    ];
    for store in [&sqlite, &postgres] {
        store
            .write(move |tx| {
                for (n, (job_id, group, created, state)) in members.into_iter().enumerate() {
                    let ev = JobEvent { finished_at: state.is_terminal().then_some(10_000 + n as i64), ..event(job_id, state, 1) };
                    merge_point::merge(tx, &ev, nevermiss_engine::store::job::Source::Push, created)?;
                    groups::join(tx, &JobKey::new("generic", job_id), group)?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
    let on = |store: &Store| {
        let store = store.clone();
        async move { store.read(|db| Ok((groups::list(db, 10)?, groups::list(db, 2)?, groups::summary(db, "beta")?))).await.unwrap() }
    };
    let (sqlite_answer, postgres_answer) = (on(&sqlite).await, on(&postgres).await);
    assert_eq!(sqlite_answer, postgres_answer);
    let (all, two, beta) = sqlite_answer;
    let names: Vec<&str> = all.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["gamma", "beta", "alpha"], "newest group first");
    assert_eq!(two.len(), 2);
    let alpha = &all[2];
    assert_eq!((alpha.total, alpha.running, alpha.by_state["failed"]), (4, 2, 1));
    assert_eq!(alpha.slowest_running.as_ref().map(|m| m.job_id.as_str()), Some("a-3"), "the first created unfinished member");
    assert_eq!((alpha.finished_at.as_deref(), alpha.duration_ms), (None, None), "not ended while members run");
    let beta = beta.unwrap();
    assert_eq!((beta.total, beta.running, beta.slowest_running.as_ref()), (2, 0, None));
    assert_eq!(beta.duration_ms, Some(10_005 - 4_000), "from its first start to its last end");
}

/// Where no extension can be created (a role that may create tables but not extensions, as on
/// some managed servers), the schema is brought up to date with the search's index (it needs
/// none), and the search answers the same, before and after its batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_extensions_the_schema_migrates_with_the_search_index() {
    use nevermiss_engine::store::jobs::JobFilter;

    let cluster = PgCluster::start();
    let owner_url = cluster.create_database("limited");
    let (client, connection) = tokio_postgres::connect(&owner_url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute("CREATE ROLE tables_only LOGIN; GRANT USAGE, CREATE ON SCHEMA public TO tables_only").await.unwrap();
    let url = format!("postgres://tables_only@127.0.0.1:{}/limited", cluster.port);
    let store = Store::connect(&url, PoolLimits::default(), "limited").await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.log()));
    let indexes: (bool, bool) = client
        .query_one("SELECT to_regclass('job_search_trigrams') IS NOT NULL, to_regclass('job_search_grams') IS NOT NULL", &[])
        .await
        .map(|row| (row.get(0), row.get(1)))
        .unwrap();
    assert_eq!(indexes, (false, true), "the index of sequences by range, no trigrams' index left");
    store
        .write(|tx| {
            for (job_id, label) in [("a-1", "Straße render"), ("a-2", "other"), ("a-3", "STRASSE upscale")] {
                jobs::track(tx, &JobKey::new("generic", job_id), Some(label), None, now_ms())?;
            }
            Ok(())
        })
        .await
        .unwrap();
    // Waiting for the index, then indexed; a term with a trigram and a short one ("ẞ" is "ss").
    for _ in 0..2 {
        for q in ["strasse", "ẞ"] {
            let filter = JobFilter { q: Some(q.into()), ..JobFilter::default() };
            let page = store.read(move |db| jobs::list(db, &filter)).await.unwrap();
            assert_eq!(page.jobs.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(), ["a-3", "a-1"], "{q}");
        }
        search_index::catch_up(&store).await.unwrap();
    }
}

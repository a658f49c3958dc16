//! Groups: a sweep of jobs heard as one. Twenty jobs of one group end in random order,
//! some by webhook and some by polling a stand-in of the generic status API: the group's end is
//! one notification (exactly once in the outbox, on SQLite and on PostgreSQL, and with the
//! process killed half way), the members' own successes are quiet and their failures are not
//! (the default `group_members = failures`), and a group that gains a job after its end ends
//! again when that one does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::routing::get;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::app::Backend;
use crate::harness::serve_child::{free_addr, ServeChild, ServeOptions};
use crate::harness::waiting::wait_until;
use crate::harness::TestApp;
use nevermiss_engine::api::groups::{GroupDetail, GroupList};

const GROUP: &str = "sweep-7";
const JOBS: usize = 20;

/// The generic status API's stand-in: each job's answer, set by the test.
type Answers = Arc<Mutex<HashMap<String, Value>>>;

async fn status_api(answers: Answers) -> String {
    async fn by_id(State(answers): State<Answers>, Path(id): Path<String>) -> axum::response::Response {
        use axum::response::IntoResponse;
        match answers.lock().unwrap().get(&id).cloned() {
            Some(answer) => axum::Json(answer).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = axum::Router::new().route("/jobs/{id}", get(by_id)).with_state(answers);
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

fn job_id(i: usize) -> String {
    format!("shard-{i:02}")
}

/// How each job ends: its state (two of twenty fail) and whether polling finds it (every third).
fn plan(seed: u64) -> Vec<(String, &'static str, bool)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut plan: Vec<(String, &'static str, bool)> =
        (0..JOBS).map(|i| (job_id(i), if i == 3 || i == 11 { "failed" } else { "succeeded" }, i % 3 == 0)).collect();
    plan.shuffle(&mut rng);
    plan
}

fn group_identity(total: usize) -> String {
    format!("nevermiss:group:{GROUP}@{total}:group_end")
}

async fn group_of(api: &crate::harness::api::ApiClient) -> GroupDetail {
    api.get(&format!("/api/groups/{GROUP}"), StatusCode::OK).await
}

/// In process, on each store: the group's end is one notification naming the counts; the
/// members' successes are quiet, their failures are announced at once; the API lists the group
/// and filters jobs by it; a job that joins after the end makes a second end when it ends.
async fn twenty_jobs_end_in_random_order_and_the_group_is_heard_once(backend: Backend) {
    let answers: Answers = Arc::default();
    let base = status_api(answers.clone()).await;
    let mut app = TestApp::spawn_on(backend).await;
    app.configure("generic", &base, Some("key"), Some(crate::harness::app::SECRET)).await;
    // The end at once: its grace is a test of its own.
    app.set_setting("group_end_grace_secs", "0").await;

    // Half tracked with the group, half put in it by their first webhook's `group`.
    for i in 0..JOBS {
        let id = job_id(i);
        if i % 2 == 0 {
            let request = json!({"provider": "generic", "job_id": id, "group": format!(" {GROUP} ")});
            let _: Value = app.api.post("/api/jobs", &request, StatusCode::CREATED).await;
        } else {
            let body = json!({"deliveryId": format!("{id}-run"), "jobId": id, "state": "running", "seq": 1, "group": GROUP});
            assert_eq!(app.deliver_json(&body).await.as_str(), "applied");
        }
    }
    let listed: GroupList = app.api.get("/api/groups", StatusCode::OK).await;
    let sweep = listed.groups.iter().find(|g| g.name == GROUP).expect("the group is listed");
    assert_eq!((sweep.total, sweep.running, sweep.finished_at.as_deref()), (JOBS as i64, JOBS as i64, None));
    assert!(sweep.slowest_running.is_some());

    for (n, (id, state, by_polling)) in plan(7).into_iter().enumerate() {
        if by_polling {
            answers.lock().unwrap().insert(id.clone(), json!({"jobId": id, "state": state, "seq": 5}));
            let polled = app.api.poll_now("generic", &id).await;
            assert!(polled.polled, "{id}: {:?}", polled.reason);
        } else {
            let body = json!({"deliveryId": format!("{id}-end"), "jobId": id, "state": state, "seq": 5});
            assert_eq!(app.deliver_json(&body).await.as_str(), "applied");
            if n % 4 == 0 {
                assert_eq!(app.deliver_json(&body).await.as_str(), "duplicate");
            }
        }
        if n + 1 < JOBS {
            assert_eq!(app.notifier.count(&group_identity(JOBS)), 0, "announced before its last job ended");
        }
    }
    wait_until("the group's end is shown", || {
        let held = app.notifier.count(&group_identity(JOBS)) == 1;
        async move { held }
    })
    .await;
    // The members: the two failures at once, no success.
    wait_until("the failures are shown", || {
        let held = ["shard-03", "shard-11"].iter().all(|id| app.notifier.count(&crate::harness::app::terminal_identity(id)) == 1);
        async move { held }
    })
    .await;
    for i in (0..JOBS).filter(|i| *i != 3 && *i != 11) {
        assert_eq!(app.notifier.count(&crate::harness::app::terminal_identity(&job_id(i))), 0, "a grouped success is quiet");
    }
    let shown = app.notifier.shown();
    let (title, body) = shown.iter().find(|(title, _)| title.starts_with(GROUP)).expect("the group's notification");
    assert!(title.starts_with(&format!("{GROUP} done: 18 succeeded, 2 failed")), "{title}");
    assert!(body.contains("20 jobs"), "{body}");

    let group = group_of(&app.api).await;
    assert_eq!((group.group.total, group.group.running, group.jobs.len()), (JOBS as i64, 0, JOBS));
    assert_eq!((group.group.by_state["succeeded"], group.group.by_state["failed"]), (18, 2));
    assert!(group.group.finished_at.is_some() && group.group.duration_ms.is_some());
    let filtered = app.api.jobs(&format!("group={GROUP}&limit=500")).await;
    assert_eq!(filtered.jobs.len(), JOBS);
    assert!(filtered.jobs.iter().all(|j| j.group.as_deref() == Some(GROUP)));

    // A late member: the group ends again when it ends, and only then.
    let body = json!({"deliveryId": "late-run", "jobId": "late", "state": "running", "seq": 1, "group": GROUP});
    assert_eq!(app.deliver_json(&body).await.as_str(), "applied");
    // A job stays in its first group.
    let elsewhere = json!({"deliveryId": "late-run-2", "jobId": "late", "state": "running", "seq": 2, "group": "another"});
    assert_eq!(app.deliver_json(&elsewhere).await.as_str(), "applied");
    assert_eq!(app.notifier.count(&group_identity(JOBS + 1)), 0);
    let body = json!({"deliveryId": "late-end", "jobId": "late", "state": "succeeded", "seq": 3});
    assert_eq!(app.deliver_json(&body).await.as_str(), "applied");
    wait_until("the grown group's end is shown", || {
        let held = app.notifier.count(&group_identity(JOBS + 1)) == 1;
        async move { held }
    })
    .await;
    assert_eq!(app.notifier.count(&group_identity(JOBS)), 1, "the first end is not repeated");
    let group_ends = app.count("SELECT count(*) FROM outbox WHERE kind = 'group_end'");
    assert_eq!(group_ends, 2, "one row per end, for the one channel");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_jobs_end_in_random_order_and_the_group_is_heard_once_on_sqlite() {
    twenty_jobs_end_in_random_order_and_the_group_is_heard_once(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_jobs_end_in_random_order_and_the_group_is_heard_once_on_postgres() {
    twenty_jobs_end_in_random_order_and_the_group_is_heard_once(Backend::Postgres).await;
}

/// Every member announced on its own too (`group_members = every`), none (`group`); and a
/// bad setting or group name is refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_members_own_notifications_follow_the_setting() {
    let app = TestApp::spawn().await;
    app.set_setting("group_end_grace_secs", "0").await;
    let refused = app.api.refused_settings(&json!({"group_members": "sometimes"})).await;
    assert!(refused.errors.as_ref().is_some_and(|e| e["group_members"].contains("group, failures, every")), "{refused:?}");
    let too_long = "g".repeat(101);
    let answer = app.api.raw_post("/api/jobs", &json!({"provider": "generic", "job_id": "x", "group": too_long})).await;
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    assert!(answer.text().await.unwrap().contains("group"));

    for (setting, group) in [("every", "loud"), ("group", "quiet")] {
        app.api.put_settings(&json!({"group_members": setting})).await;
        for (i, state) in ["succeeded", "failed"].iter().enumerate() {
            let id = format!("{group}-{i}");
            let body = json!({"deliveryId": format!("{id}-end"), "jobId": id, "state": state, "seq": 1, "group": group});
            assert_eq!(app.deliver_json(&body).await.as_str(), "applied");
        }
        let identity = format!("nevermiss:group:{group}@2:group_end");
        wait_until("the group's end is shown", || {
            let held = app.notifier.count(&identity) == 1;
            async move { held }
        })
        .await;
        let members: Vec<usize> =
            (0..2).map(|i| app.notifier.count(&crate::harness::app::terminal_identity(&format!("{group}-{i}")))).collect();
        assert_eq!(members, if setting == "every" { vec![1, 1] } else { vec![0, 0] }, "group_members = {setting}");
    }
}

/// A real `serve` on SQLite, SIGKILLed when half the group has ended, restarted on the same data
/// dir: the rest end by webhook and by polling, and the group's end is in the outbox once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_ends_once_across_a_kill_half_way() {
    let answers: Answers = Arc::default();
    let base = status_api(answers.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let log = dir.path().join("serve.log");
    let options = ServeOptions {
        data_dir: &data_dir,
        log: &log,
        receiver_addr: free_addr(),
        api_addr: free_addr(),
        env: vec![
            ("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), crate::harness::app::SECRET.into()),
            ("NEVERMISS_GENERIC_BASE_URL".into(), base.clone()),
            ("NEVERMISS_GENERIC_API_KEY".into(), "key".into()),
        ],
        rust_log: "info",
    };
    let mut child = ServeChild::start(&options).await;
    child.api.put_settings(&json!({"group_end_grace_secs": 0})).await;
    for i in 0..JOBS {
        let request = json!({"provider": "generic", "job_id": job_id(i), "group": GROUP});
        let _: Value = child.api.post("/api/jobs", &request, StatusCode::CREATED).await;
    }
    for (n, (id, state, by_polling)) in plan(11).into_iter().enumerate() {
        if n == JOBS / 2 {
            child.kill9();
            child = ServeChild::start(&options).await;
        }
        if by_polling {
            answers.lock().unwrap().insert(id.clone(), json!({"jobId": id, "state": state, "seq": 5}));
            let polled = child.api.poll_now("generic", &id).await;
            assert!(polled.polled, "{id}: {:?}", polled.reason);
        } else {
            let (status, answer) = child.deliver(&format!("{id}-end"), &id, state, 5).await;
            assert_eq!((status, answer.outcome.map(|o| o.as_str())), (StatusCode::OK, Some("applied")), "{id}");
        }
    }
    let group = group_of(&child.api).await;
    assert_eq!((group.group.running, group.group.by_state["succeeded"], group.group.by_state["failed"]), (0, 18, 2));
    let db = child.db();
    let ends: Vec<String> = db
        .prepare("SELECT job_id FROM outbox WHERE kind = 'group_end'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(ends, [format!("{GROUP}@{JOBS}")], "one end, for the desktop channel");
    wait_until("the group's end is shown", || {
        let held = child.log_text().contains(&group_identity(JOBS));
        async move { held }
    })
    .await;
    assert!(child.stop().await);
}

/// A sweep started one job after another: its first job fails before the second is known. The
/// group's end waits its grace (`group_end_grace_secs`); the second job joins meanwhile, so that
/// end is dropped when it comes due, and the second's end announces the group once, counting both.
/// Without a job joining, the end is sent once its grace is over, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_end_waits_for_the_jobs_still_joining() {
    let mut app = TestApp::spawn().await;
    app.set_setting("group_end_grace_secs", "2").await;
    let deliver = |id: &str, state: &str, seq: i64, group: Option<&str>| {
        let mut body = json!({"deliveryId": format!("{id}-{seq}"), "jobId": id, "state": state, "seq": seq});
        if let Some(group) = group {
            body["group"] = json!(group);
        }
        body
    };
    assert_eq!(app.deliver_json(&deliver("sweep-a-1", "failed", 1, Some("sweep-a"))).await.as_str(), "applied");
    let first = "nevermiss:group:sweep-a@1:group_end";
    // Enqueued, due only once its grace is over (the row says when), and not shown yet.
    let due_after_grace = "SELECT count(*) FROM outbox WHERE job_id = 'sweep-a@1' AND next_attempt_at >= created_at + 2000";
    assert_eq!(app.count(due_after_grace), 1, "the group's end is not held for its grace");
    assert_eq!(app.notifier.count(first), 0, "announced before its grace was over");
    assert_eq!(app.deliver_json(&deliver("sweep-a-2", "running", 1, Some("sweep-a"))).await.as_str(), "applied");
    // Once due, that end is settled unsent: the job that joined overtook it.
    wait_until("the overtaken group's end is settled", || {
        let settled = app.count("SELECT count(*) FROM outbox WHERE job_id = 'sweep-a@1' AND delivered_at IS NOT NULL") == 1;
        async move { settled }
    })
    .await;
    assert_eq!(app.notifier.count(first), 0, "the end of one job was announced while a second had joined");
    assert_eq!(app.deliver_json(&deliver("sweep-a-2", "succeeded", 2, None)).await.as_str(), "applied");
    let both = "nevermiss:group:sweep-a@2:group_end";
    wait_until("the group's end, counting both, is shown", || {
        let held = app.notifier.count(both) == 1;
        async move { held }
    })
    .await;
    let shown = app.notifier.shown();
    let (title, _) = shown.iter().find(|(title, _)| title.starts_with("sweep-a")).expect("the group's notification");
    assert!(title.starts_with("sweep-a done: 1 failed, 1 succeeded"), "{title}");
    assert_eq!(shown.iter().filter(|(title, _)| title.starts_with("sweep-a")).count(), 1, "{shown:?}");
    app.shutdown().await;
}

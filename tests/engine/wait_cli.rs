//! `nevermiss wait` against a real `nevermiss serve`: it tracks the job, blocks on the event
//! stream until the job ends, prints the final state and exits with the contract's code (0
//! succeeded, 10 failed, 11 canceled, 124 timed out, 69 no running instance).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::harness::serve_child::{child_path, nevermiss_command, ServeChild, ServeOptions};
use crate::harness::{wait_until, SECRET};

async fn serve(dir: &Path) -> ServeChild {
    ServeChild::start(&ServeOptions {
        data_dir: &dir.join("data"),
        log: &dir.join("serve.log"),
        receiver_addr: "127.0.0.1:0".parse().unwrap(),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        env: vec![("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into())],
        rust_log: "info",
    })
    .await
}

/// `nevermiss wait ARGS... --data-dir DIR`, started now, its output captured.
fn start_wait_with(data_dir: &Path, args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::from(nevermiss_command())
        .arg("wait")
        .args(args)
        .arg("--data-dir")
        .arg(child_path(data_dir))
        .env_remove("NEVERMISS_API_ADDR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("nevermiss wait starts")
}

/// `nevermiss wait generic JOB [--timeout SECS]` on the data dir, started now.
fn start_wait(data_dir: &Path, job_id: &str, timeout: Option<u64>) -> tokio::process::Child {
    let secs = timeout.map(|s| s.to_string());
    let mut args = vec!["generic", job_id];
    if let Some(secs) = secs.as_deref() {
        args.extend(["--timeout", secs]);
    }
    start_wait_with(data_dir, &args)
}

async fn deliver(child: &ServeChild, delivery_id: &str, job_id: &str, state: &str) {
    let (status, answer) = child.deliver(delivery_id, job_id, state, 1).await;
    assert_eq!(status, 200, "{answer:?}");
}

/// Waits for the job to be tracked (the waiter is subscribed by then), then ends it.
async fn end_job_while_waited(child: &ServeChild, job_id: &str, state: &str) {
    wait_until(&format!("{job_id} is tracked"), || async {
        child.api.raw_get(&format!("/api/jobs/generic/{job_id}")).await.status() == 200
    })
    .await;
    deliver(child, &format!("d-{job_id}"), job_id, state).await;
}

async fn finished(waiter: tokio::process::Child) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(Duration::from_secs(60), waiter.wait_with_output()).await.expect("wait exits").unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).trim().to_owned(), String::from_utf8_lossy(&out.stderr).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_with_the_final_state_s_code() {
    let dir = tempfile::tempdir().unwrap();
    let child = serve(dir.path()).await;
    let data_dir = dir.path().join("data");

    for (job_id, state, code) in [("w-ok", "succeeded", 0), ("w-bad", "failed", 10), ("w-stop", "canceled", 11)] {
        let waiter = start_wait(&data_dir, job_id, None);
        end_job_while_waited(&child, job_id, state).await;
        let (exit, stdout, stderr) = finished(waiter).await;
        assert_eq!(exit, Some(code), "{job_id}: stdout {stdout:?} stderr {stderr:?}");
        assert_eq!(stdout, state, "the final state is printed");
    }

    // Already finished: answers at once with the same code.
    let (exit, stdout, _) = finished(start_wait(&data_dir, "w-ok", None)).await;
    assert_eq!((exit, stdout.as_str()), (Some(0), "succeeded"));

    // Never finishes: 124 after the timeout, and the job is tracked (polling watches it).
    let (exit, _, stderr) = finished(start_wait(&data_dir, "w-slow", Some(1))).await;
    assert_eq!(exit, Some(124), "{stderr}");
    assert_eq!(child.api.raw_get("/api/jobs/generic/w-slow").await.status(), 200, "wait tracked the job");

    // The job is untracked while waited for: 1, saying so (not a wait that never ends).
    let waiter = start_wait(&data_dir, "w-gone", None);
    wait_until("w-gone is tracked", || async { child.api.raw_get("/api/jobs/generic/w-gone").await.status() == 200 }).await;
    assert_eq!(child.api.raw_post("/api/jobs/generic/w-gone/untrack", &serde_json::json!({})).await.status(), 200);
    let (exit, _, stderr) = finished(waiter).await;
    assert_eq!(exit, Some(1), "{stderr}");
    assert!(stderr.contains("was untracked while waited for"), "{stderr}");

    // The instance stops while a waiter waits: 69.
    let waiter = start_wait(&data_dir, "w-orphan", None);
    wait_until("w-orphan is tracked", || async { child.api.raw_get("/api/jobs/generic/w-orphan").await.status() == 200 }).await;
    assert!(child.stop().await);
    let (exit, _, stderr) = finished(waiter).await;
    assert_eq!(exit, Some(69), "{stderr}");

    // No instance at all: 69 with one line.
    let (exit, _, stderr) = finished(start_wait(&data_dir, "w-none", None)).await;
    assert_eq!(exit, Some(69), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// `nevermiss wait --group NAME [--timeout SECS] [--json]` on the data dir, started now.
fn start_wait_group(data_dir: &Path, group: &str, extra: &[&str]) -> tokio::process::Child {
    let mut args = vec!["--group", group];
    args.extend(extra);
    start_wait_with(data_dir, &args)
}

/// `wait --group`: blocks while any job of the group runs, prints one line per job, and exits 0
/// when all succeeded, 10 when any failed, 11 when any was canceled and none failed, 124 on
/// timeout; `--json` prints the group and its jobs; a group with no job is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_group_exits_with_the_groups_code() {
    let dir = tempfile::tempdir().unwrap();
    let child = serve(dir.path()).await;
    let data_dir = dir.path().join("data");

    let cases: [(&str, [&str; 3], i32); 3] = [
        ("all-ok", ["succeeded", "succeeded", "succeeded"], 0),
        ("one-failed", ["succeeded", "canceled", "failed"], 10),
        ("one-canceled", ["succeeded", "canceled", "succeeded"], 11),
    ];
    for (group, states, code) in cases {
        for i in 0..3 {
            let request = serde_json::json!({"provider": "generic", "job_id": format!("{group}-{i}"), "group": group});
            let _: serde_json::Value = child.api.post("/api/jobs", &request, reqwest::StatusCode::CREATED).await;
        }
        let mut waiter = start_wait_group(&data_dir, group, &[]);
        for (i, state) in states.iter().enumerate() {
            // Paced, so that most ends reach a waiter already on the stream; while a job of the
            // group runs, the waiter has not exited.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(waiter.try_wait().unwrap().is_none(), "{group}: wait --group exited before its job {i} ended");
            deliver(&child, &format!("d-{group}-{i}"), &format!("{group}-{i}"), state).await;
        }
        let (exit, stdout, stderr) = finished(waiter).await;
        assert_eq!(exit, Some(code), "{group}: stdout {stdout:?} stderr {stderr:?}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 3, "one line per job: {stdout}");
        for (i, state) in states.iter().enumerate() {
            assert!(lines[i].starts_with(state) && lines[i].contains(&format!("{group}-{i}")), "{}", lines[i]);
        }
    }

    // --json: the group and its jobs, for scripts.
    let (exit, stdout, _) = finished(start_wait_group(&data_dir, "one-failed", &["--json"])).await;
    let detail: serde_json::Value = serde_json::from_str(&stdout).expect("--json prints JSON");
    assert_eq!(
        (exit, detail["name"].as_str(), detail["total"].as_i64(), detail["jobs"].as_array().map(Vec::len)),
        (Some(10), Some("one-failed"), Some(3), Some(3))
    );

    // A job still running: 124 after the timeout.
    let request = serde_json::json!({"provider": "generic", "job_id": "slow-0", "group": "slow"});
    let _: serde_json::Value = child.api.post("/api/jobs", &request, reqwest::StatusCode::CREATED).await;
    let (exit, _, stderr) = finished(start_wait_group(&data_dir, "slow", &["--timeout", "1"])).await;
    assert_eq!(exit, Some(124), "{stderr}");
    assert!(stderr.contains("1 of 1 jobs still running"), "{stderr}");

    // No job in it: an error that says so.
    let (exit, _, stderr) = finished(start_wait_group(&data_dir, "nobody", &[])).await;
    assert_eq!(exit, Some(1), "{stderr}");
    assert!(stderr.contains("no job is in this group"), "{stderr}");
}

//! One delivery's story in the debug log: a real `nevermiss serve` at `RUST_LOG=nevermiss_engine=debug,nevermiss_store=debug`
//! takes one signed delivery of a finished job; its log lines, found by the delivery id the
//! `delivery` span carries, tell each step in order (received, verified, parsed, deduped, merged,
//! enqueued, answered), and the notification's `deliver` span names the job.

use crate::harness::serve_child::{ServeChild, ServeOptions};
use crate::harness::{wait_until, SECRET};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_delivery_is_one_story_of_spans_in_the_debug_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let child = ServeChild::start(&ServeOptions {
        data_dir: &dir.path().join("data"),
        log: &log,
        receiver_addr: "127.0.0.1:0".parse().unwrap(),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        env: vec![("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into())],
        rust_log: "nevermiss_engine=debug,nevermiss_store=debug,nevermiss=info",
    })
    .await;
    let (status, answer) = child.deliver("d-story-1", "job-story", "succeeded", 1).await;
    assert_eq!(status, 200, "{answer:?}");

    let steps = ["received", "verified", "parsed", "deduped", "merged", "enqueued", "answered"];
    wait_until("the notification's deliver line is logged", || async {
        child.log_text().contains("deliver{channel=desktop identity=nevermiss:generic:job-story:terminal")
    })
    .await;
    let text = child.log_text();
    let story: Vec<&str> = text.lines().filter(|l| l.contains("delivery{provider=generic")).collect();
    let mut at = 0;
    for step in steps {
        let found = story[at..]
            .iter()
            .position(|l| l.contains(&format!(": {step}")))
            .unwrap_or_else(|| panic!("no `{step}` line after the earlier steps in the delivery's story:\n{}", story.join("\n")));
        at += found + 1;
    }
    let merge = story.iter().find(|l| l.contains(": merged")).unwrap();
    assert!(merge.contains("merge{") && merge.contains("job_id=job-story") && merge.contains("outcome=\"applied\""), "{merge}");
    let enqueue = story.iter().find(|l| l.contains(": enqueued")).unwrap();
    assert!(enqueue.contains("merge{") && enqueue.contains("enqueue{"), "the enqueue is inside the merge: {enqueue}");
    assert!(child.stop().await, "serve stops on SIGTERM");
}

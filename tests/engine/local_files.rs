//! The data dir is the user's alone, checked on a real `nevermiss serve` child:
//! - a new data dir is 0700 and every file the engine wrote in it (the database, its `-wal` and
//!   `-shm` after a write, the API token, the node id, `instance.json`, the lock, the file secret
//!   store) is 0600: no other local user can read the jobs, the token or the secrets;
//! - an existing data dir left open by an older version (0755, files 0644, a `-wal` and `-shm`
//!   left by a killed run) is closed at start: 0700 and 0600, said once in the log.
//!
//! Run against the Windows build under Wine (`make windows-test`), the same steps: the files are
//! there and each got its owner-only ACL without an error, and an existing data dir is said to
//! be closed once; the modes are not checked (Wine keeps no ACL to read back: the book's
//! development/windows.md).
#![cfg(unix)]

use crate::harness;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use harness::serve_child::{free_addr, skipped_under_wrapper, ServeChild, ServeOptions};
use reqwest::Method;
use serde_json::json;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

/// Every entry of `dir` with its mode, sorted by name.
fn modes(dir: &Path) -> Vec<(String, u32)> {
    let mut all: Vec<(String, u32)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), mode(&e.path())))
        .collect();
    all.sort();
    all
}

async fn start(data_dir: &Path, log: &Path) -> ServeChild {
    ServeChild::start(&ServeOptions { data_dir, log, receiver_addr: free_addr(), api_addr: free_addr(), env: Vec::new(), rust_log: "info" })
        .await
}

/// A write to the database (a tracked job) and a secret in the file store.
async fn write_something(serve: &ServeChild) {
    let tracked =
        serve.api.request(Method::POST, "/api/jobs").json(&json!({"provider": "generic", "job_id": "modes-1"})).send().await.unwrap();
    assert!(tracked.status().is_success(), "{}", tracked.status());
    let secret =
        serve.api.request(Method::PUT, "/api/secrets/generic").json(&json!({"webhook_secret": "modes-secret"})).send().await.unwrap();
    assert!(secret.status().is_success(), "setting a secret: {}", secret.status());
}

fn assert_private(data_dir: &Path, log: &str) {
    let files = modes(data_dir);
    for name in
        ["nevermiss.db", "nevermiss.db-wal", "nevermiss.db-shm", "api-token", "node-id", "instance.json", "engine.lock", "secrets.json"]
    {
        assert!(files.iter().any(|(n, _)| n == name), "{name} is not in the data dir: {files:?}");
    }
    // Windows (the app under Wine): each of them was given its owner-only ACL without an error.
    assert!(!log.contains("cannot make a data dir file private"), "{log}");
    if skipped_under_wrapper(
        "the data dir's and its files' owner-only ACLs",
        "Wine keeps no ACL: it maps a DACL to the file's Unix mode bits and reads one back from them, with Everyone allowed to read",
    ) {
        return;
    }
    assert_eq!(mode(data_dir), 0o700, "the data dir");
    let open: Vec<&(String, u32)> = files.iter().filter(|(_, m)| m & 0o077 != 0).collect();
    assert!(open.is_empty(), "files other users can read: {open:?} (all: {files:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_data_dir_and_its_files_are_the_users_alone() {
    let root = tempfile::tempdir().unwrap();
    let data_dir = root.path().join("data");
    let serve = start(&data_dir, &root.path().join("serve.log")).await;
    write_something(&serve).await;

    assert_private(&data_dir, &serve.log_text());
    assert!(serve.stop().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_data_dir_open_to_others_is_closed_at_start() {
    let root = tempfile::tempdir().unwrap();
    let data_dir = root.path().join("data");
    let log = root.path().join("serve.log");
    // A run as an older version left it: killed (the -wal and -shm stay), then opened up.
    let first = start(&data_dir, &log).await;
    write_something(&first).await;
    first.kill9();
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, _) in modes(&data_dir) {
        std::fs::set_permissions(data_dir.join(name), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let opened = modes(&data_dir);
    assert!(opened.iter().any(|(n, _)| n == "nevermiss.db-wal"), "the killed run left its WAL: {opened:?}");

    let second = start(&data_dir, &log).await;
    let text = second.log_text();
    assert_private(&data_dir, &text);
    assert_eq!(text.matches("the data dir was open to other users").count(), 1, "said once: {text}");
    assert!(second.stop().await);
}

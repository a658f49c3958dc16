//! Where a real `nevermiss serve` child keeps its data, on the OS it is built for (the Linux
//! build, or the Windows build under Wine: `make windows-test`):
//! - a data dir whose path has spaces and characters outside ASCII works end to end: a signed
//!   delivery is applied, the job read back, its notification in the log (the desktop channel of
//!   a session without a desktop, said once at start, never failing), the database and the secret
//!   file written there, a clean stop;
//! - without `--data-dir`, the OS's own data dir: `$XDG_DATA_HOME/nevermiss` on Linux,
//!   `%APPDATA%\nevermiss` (the roaming application data folder) on Windows;
//! - a tunnel program is started as a child from the path it is given, on Windows without its
//!   `.exe` (as a user writes it), and its exit is reported with its status and last words.

use std::path::{Path, PathBuf};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::serve_child::{child_path, free_addr, nevermiss_bin, wrapper, ServeChild, ServeOptions};
use crate::harness::tunnel::wait_for_state_within;
use crate::harness::{wait_until, SECRET};

fn options<'a>(data_dir: &'a Path, log: &'a Path, env: Vec<(String, String)>) -> ServeOptions<'a> {
    let mut env = env;
    env.push(("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into()));
    ServeOptions { data_dir, log, receiver_addr: free_addr(), api_addr: free_addr(), env, rust_log: "info" }
}

/// A delivery applied and its job read back through the API.
async fn one_job_end_to_end(serve: &ServeChild, job_id: &str) {
    let (status, answer) = serve.deliver(&format!("{job_id}-d1"), job_id, "succeeded", 1).await;
    assert_eq!(status, 200, "{answer:?}");
    let job: Value = serve.api.get(&format!("/api/jobs/generic/{job_id}"), StatusCode::OK).await;
    assert_eq!(job["state"], "succeeded", "{job}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_with_spaces_and_non_ascii_characters_works() {
    let root = tempfile::tempdir().unwrap();
    let data_dir = root.path().join("Données de l’été ✓ 日本").join("never miss");
    let log = root.path().join("serve.log");
    let serve = ServeChild::start(&options(&data_dir, &log, Vec::new())).await;
    one_job_end_to_end(&serve, "job-ünïcode").await;
    let secret = serve.api.request(Method::PUT, "/api/secrets/generic").json(&json!({"webhook_secret": "s3cret-é"})).send().await.unwrap();
    assert!(secret.status().is_success(), "setting a secret: {}", secret.status());
    for file in ["nevermiss.db", "secrets.json", "api-token", "instance.json"] {
        assert!(data_dir.join(file).is_file(), "{file} is not in {}", data_dir.display());
    }
    // Without a desktop in the child's session (the harness gives it no D-Bus session bus; Wine
    // has no toast notifier) the job's notification goes to the log, once, and the desktop
    // channel never fails: said once at start.
    wait_until("the job's notification is in the log", || async {
        serve.log_text().contains("identity=nevermiss:generic:job-ünïcode:terminal")
    })
    .await;
    let text = serve.log_text();
    assert_eq!(text.matches("no desktop notifications in this session").count(), 1, "{text}");
    assert!(!text.contains("channel failing"), "{text}");
    assert_eq!(text.matches("identity=nevermiss:generic:job-ünïcode:terminal").count(), 1, "{text}");
    // The engine names the data dir as it was given.
    assert!(text.contains("never miss") && text.contains("Données de l’été ✓ 日本"), "{text}");
    assert!(serve.stop().await, "serve stops cleanly");
    assert!(!data_dir.join("instance.json").exists(), "a clean stop removes instance.json");
}

/// The OS's data dir as the test sees it, and what the child gets in its environment for it.
fn os_data_dir(home: &Path) -> (PathBuf, Vec<(String, String)>) {
    if wrapper().is_none() {
        // Linux: the XDG data home, here one of the test's own.
        return (home.join("nevermiss"), vec![("XDG_DATA_HOME".into(), home.to_str().unwrap().into())]);
    }
    // Wine: %APPDATA% is the prefix's C:\users\<user>\AppData\Roaming (its folder, whatever the
    // environment says: Windows programs ask for the known folder).
    let prefix = std::env::var_os("WINEPREFIX").map(PathBuf::from).expect("WINEPREFIX is set under Wine (tools/windows)");
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    (prefix.join("drive_c").join("users").join(user).join("AppData").join("Roaming").join("nevermiss"), Vec::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_data_dir_serve_uses_the_os_data_dir() {
    let root = tempfile::tempdir().unwrap();
    let (data_dir, env) = os_data_dir(&root.path().join("home"));
    // Under Wine the folder is the prefix's, shared by runs: this test's alone, made afresh.
    let _ = std::fs::remove_dir_all(&data_dir);
    let log = root.path().join("serve.log");
    let serve = ServeChild::start_on_the_os_data_dir(&options(&data_dir, &log, env)).await;
    one_job_end_to_end(&serve, "job-os-dir").await;
    assert!(data_dir.join("nevermiss.db").is_file(), "the database is in {}", data_dir.display());
    let text = serve.log_text();
    let said = if wrapper().is_some() { "\\AppData\\Roaming\\nevermiss" } else { "/home/nevermiss" };
    assert!(text.contains(&format!("{said} ")) || text.contains(&format!("{said}\n")), "the data dir named in the log: {text}");
    assert!(serve.stop().await, "serve stops cleanly");
    if wrapper().is_some() {
        std::fs::remove_dir_all(&data_dir).unwrap();
    }
}

fn link_or_copy(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_program_is_started_by_its_path_and_its_exit_reported() {
    // The app's own binary stands for cloudflared: started with cloudflared's arguments, it
    // refuses them (`tunnel` is no command of nevermiss) and exits with status 2.
    let root = tempfile::tempdir().unwrap();
    let programs = root.path().join("tunnel programs é");
    std::fs::create_dir_all(&programs).unwrap();
    let bin = nevermiss_bin();
    if wrapper().is_some() {
        link_or_copy(&bin, &programs.join("cloudflared.exe"));
        // Wine's missing DLL (tools/windows) goes beside every program it runs.
        let dll = bin.with_file_name("bcryptprimitives.dll");
        if dll.is_file() {
            link_or_copy(&dll, &programs.join("bcryptprimitives.dll"));
        }
    } else {
        link_or_copy(&bin, &programs.join("cloudflared"));
    }
    // Named without `.exe` on Windows too.
    let path = child_path(&programs.join("cloudflared")).into_string().unwrap();
    let (data_dir, log) = (root.path().join("data"), root.path().join("serve.log"));
    let env = vec![("NEVERMISS_TUNNEL".into(), "cloudflared".into()), ("NEVERMISS_CLOUDFLARED_PATH".into(), path)];
    let serve = ServeChild::start(&options(&data_dir, &log, env)).await;
    let st = wait_for_state_within(&serve.api, "cloudflared's exit is reported", std::time::Duration::from_secs(60), |st| {
        st.last_error.as_deref().is_some_and(|e| e.contains("cloudflared exited"))
    })
    .await;
    let error = st.last_error.unwrap();
    assert!(error.contains("exit status 2") && error.contains("tunnel"), "{error}");
    assert!(serve.stop().await, "serve stops cleanly, its tunnel program with it");
}

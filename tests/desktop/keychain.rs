//! The OS keychain for real: a private D-Bus session bus with gnome-keyring's Secret Service.
//! A saved API key is read back after a restart and appears nowhere in the data dir, nor in any
//! API answer.
#![cfg(target_os = "linux")]

use crate::common;
use crate::session;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::outbox::LogNotifier;
use nevermiss_engine::secrets::{Backend, SecretKind};
use session::{require, start_session_bus, Killed};

const KEY: &str = "sk-keychain-test-5f1c2a9e";

fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            hits.extend(files_containing(&path, needle));
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                hits.push(path.display().to_string());
            }
        }
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_key_lives_in_the_keychain_and_survives_a_restart() {
    let _alone = session::one_at_a_time();
    require("gnome-keyring-daemon", "gnome-keyring");
    let (_bus, address) = start_session_bus();
    let home = tempfile::tempdir().unwrap();
    let mut keyring = Command::new("gnome-keyring-daemon")
        .args(["--foreground", "--unlock", "--components=secrets"])
        .env("HOME", home.path())
        .env("DBUS_SESSION_BUS_ADDRESS", &address)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gnome-keyring-daemon starts");
    keyring.stdin.take().unwrap().write_all(b"login-password").unwrap();
    let _keyring = Killed(keyring);
    session::wait_for("the Secret Service on the bus", Duration::from_secs(20), || {
        let out = Command::new("dbus-send")
            .args(["--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.secrets"])
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).contains("boolean true").then_some(())
    });
    // The desktop tests run one at a time (session::one_at_a_time): the process environment is
    // this test's while it runs.
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", &address);
    std::env::remove_var("NEVERMISS_SECRET_STORE");
    std::env::remove_var("NEVERMISS_OPENAI_API_KEY");

    let data = tempfile::tempdir().unwrap();
    let engine = Engine::start(EngineConfig::local(data.path()), std::sync::Arc::new(LogNotifier)).await.unwrap();
    assert_eq!(engine.services.secrets.backend(), &Backend::Keychain);
    engine.services.secrets.set("openai", SecretKind::ApiKey, Some(KEY)).unwrap();
    assert_eq!(engine.services.secrets.source("openai", SecretKind::ApiKey), Some("keychain"));

    // No API answer carries it.
    let http = reqwest::Client::new();
    for path in ["/api/info", "/api/metrics", "/api/settings", "/api/jobs"] {
        let body = http
            .get(format!("http://{}{path}", engine.api_addr))
            .bearer_auth(&engine.token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!body.contains(KEY), "{path} leaks the key");
    }
    engine.shutdown().await;

    // After a restart, the key is read back from the keychain.
    let engine = Engine::start(EngineConfig::local(data.path()), std::sync::Arc::new(LogNotifier)).await.unwrap();
    assert_eq!(engine.services.secrets.get("openai", SecretKind::ApiKey).as_deref(), Some(KEY));
    engine.shutdown().await;

    assert_eq!(files_containing(data.path(), KEY.as_bytes()), Vec::<String>::new(), "the key is nowhere in the data dir");
    // The keychain's own files hold it encrypted, not in the clear.
    assert_eq!(files_containing(home.path(), KEY.as_bytes()), Vec::<String>::new());
    let _ = common::SECRET;
}

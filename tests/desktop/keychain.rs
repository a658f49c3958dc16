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

use nevermiss_engine::channels::desktop::LogNotifier;
use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::secrets::Backend;
use session::{require, start_session_bus, Killed};

const KEY: &str = "sk-keychain-test-5f1c2a9e";

/// The Secret Service's well-known name on the bus.
const SECRET_SERVICE: &str = "org.freedesktop.secrets";

/// What both keychain tests start from: alone (the process environment is theirs while they run),
/// the programs they need, a private session bus (and its address) and an empty HOME for the
/// keyring daemon.
fn keychain_session() -> (std::sync::MutexGuard<'static, ()>, Killed, String, tempfile::TempDir) {
    let alone = session::one_at_a_time();
    require("gnome-keyring-daemon", "gnome-keyring");
    require("dbus-send", "dbus-bin");
    let (bus, address) = start_session_bus();
    (alone, bus, address, tempfile::tempdir().unwrap())
}

/// gnome-keyring-daemon serving the Secret Service on the bus at `address`, with `home` as its
/// HOME and, when given, its own runtime dir. `unlock`: started as a login session starts it,
/// the login password on stdin, so the login keyring is there, unlocked; else with none.
fn start_keyring(address: &str, home: &Path, runtime_dir: Option<&Path>, unlock: bool) -> Killed {
    let mut command = Command::new("gnome-keyring-daemon");
    command.arg("--foreground");
    if unlock {
        command.arg("--unlock");
    }
    command
        .arg("--components=secrets")
        .env("HOME", home)
        .env("DBUS_SESSION_BUS_ADDRESS", address)
        .stdin(if unlock { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(dir) = runtime_dir {
        command.env("XDG_RUNTIME_DIR", dir);
    }
    let mut child = command.spawn().expect("gnome-keyring-daemon starts");
    if unlock {
        child.stdin.take().unwrap().write_all(b"login-password").unwrap();
    }
    Killed(child)
}

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
    let (_alone, _bus, address, home) = keychain_session();
    let _keyring = start_keyring(&address, home.path(), None, true);
    session::wait_for_bus_name(&address, SECRET_SERVICE);
    // The desktop tests run one at a time (session::one_at_a_time): the process environment is
    // this test's while it runs.
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", &address);
    std::env::remove_var("NEVERMISS_SECRET_STORE");
    std::env::remove_var("NEVERMISS_OPENAI_API_KEY");

    let data = tempfile::tempdir().unwrap();
    let engine = Engine::start(EngineConfig::local(data.path()), std::sync::Arc::new(LogNotifier)).await.unwrap();
    assert_eq!(engine.services.secrets.backend(), Backend::Keychain);
    engine.services.secrets.set("openai", SecretKind::ApiKey, Some(KEY)).unwrap();
    assert_eq!(engine.services.secrets.source("openai", SecretKind::ApiKey), Some("keychain"));

    // No API answer carries it.
    let http = reqwest::Client::new();
    for path in ["/api/info", "/api/metrics", "/api/settings", "/api/jobs"] {
        let body =
            http.get(format!("http://{}{path}", engine.api_addr)).bearer_auth(&engine.token).send().await.unwrap().text().await.unwrap();
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

/// A `nevermiss serve` child on the given bus, with a clean environment; its stderr goes to `log`.
fn serve_on_bus(data_dir: &Path, log: &Path, address: &str) -> Killed {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nevermiss"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NEVERMISS_") {
            command.env_remove(&name);
        }
    }
    let child = command
        .args(["serve", "--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("DBUS_SESSION_BUS_ADDRESS", address)
        .env("NEVERMISS_TUNNEL", "none")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("nevermiss serve starts");
    Killed(child)
}

/// The unique bus name owning the Secret Service, if any (asking does not activate one).
fn secret_service_owner(address: &str) -> Option<String> {
    let out = Command::new("dbus-send")
        .args([
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetNameOwner",
            "string:org.freedesktop.secrets",
        ])
        .env("DBUS_SESSION_BUS_ADDRESS", address)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().find_map(|l| l.trim().strip_prefix("string \"")?.strip_suffix('"').map(str::to_owned))
}

/// Whether the Secret Service on `address` has a default collection (the login keyring), and
/// whether it answers as unlocked (`Some(true)`) once it is on the bus.
fn default_collection(address: &str) -> Option<bool> {
    let send = |args: &[&str]| {
        let out = Command::new("dbus-send")
            .args(["--print-reply", "--dest=org.freedesktop.secrets"])
            .args(args)
            .env("DBUS_SESSION_BUS_ADDRESS", address)
            .output()
            .expect("dbus-send runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let alias = send(&["/org/freedesktop/secrets", "org.freedesktop.Secret.Service.ReadAlias", "string:default"]);
    let path = alias.lines().find_map(|l| l.trim().strip_prefix("object path \"")?.strip_suffix('"').map(str::to_owned))?;
    if path == "/" {
        return None;
    }
    let locked = send(&[&path, "org.freedesktop.DBus.Properties.Get", "string:org.freedesktop.Secret.Collection", "string:Locked"]);
    Some(locked.contains("boolean false"))
}

/// A Secret Service that is there (D-Bus activated, answering) but has no default collection, as
/// on a first login before the keyring is set up: the app starts anyway, keeps secrets in the
/// 0600 file and says why (once in the log, and in `store_note`); once the user has set up a
/// login keyring, `POST /api/secrets/retry-keychain` moves new secrets to the keychain. A secret
/// that is simply not set logs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keychain_without_a_login_collection_falls_back_to_the_file_until_retried() {
    let (_alone, _bus, address, home) = keychain_session();
    let runtime_dir = tempfile::tempdir().unwrap();
    // No --unlock and an empty HOME: the daemon serves the Secret Service with no login keyring.
    let keyring = start_keyring(&address, home.path(), Some(runtime_dir.path()), false);
    session::wait_for_bus_name(&address, SECRET_SERVICE);
    assert_eq!(default_collection(&address), None, "the keyring starts with no default collection");

    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("serve.log");
    let serve = serve_on_bus(data.path(), &log, &address);
    let pid = serve.0.id() as u64;
    let instance: serde_json::Value = session::wait_for("the server's instance.json", Duration::from_secs(60), || {
        let bytes = std::fs::read(data.path().join("instance.json")).ok()?;
        let instance: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        (instance["pid"].as_u64() == Some(pid)).then_some(instance)
    });
    let api = instance["api_url"].as_str().unwrap().to_owned();
    let token = std::fs::read_to_string(data.path().join("api-token")).unwrap().trim().to_owned();
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, body: Option<serde_json::Value>| {
        let mut request = http.request(method, format!("{api}{path}")).bearer_auth(&token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let text = response.text().await.unwrap();
            assert_eq!(status, 200, "{text}");
            serde_json::from_str::<serde_json::Value>(&text).unwrap()
        }
    };

    // Started, on the file, saying why.
    let view = call(reqwest::Method::GET, "/api/secrets", None).await;
    assert_eq!(view["store"], "file", "{view}");
    let note = view["store_note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("no default collection"), "the UI is told why: {view}");
    // A secret saved now is kept, in the file.
    let view = call(reqwest::Method::PUT, "/api/secrets/generic", Some(serde_json::json!({ "webhook_secret": "file-kept-secret" }))).await;
    assert_eq!(view["providers"]["generic"]["webhook_secret"]["source"], "file", "{view}");
    let file = std::fs::read_to_string(data.path().join("secrets.json")).unwrap();
    assert!(file.contains("file-kept-secret"));

    // The user sets up the login keyring: the Secret Service comes back with it unlocked (as the
    // login session starts it, with the password; the bus and the app stay the same).
    // Calls to the Secret Service while it has no owner would D-Bus-activate another daemon:
    // the next calls wait until the new one owns the name.
    let old_owner = secret_service_owner(&address).expect("the first daemon owns the Secret Service");
    drop(keyring);
    // Its own runtime dir: the killed daemon's control socket is left behind in the first one.
    let runtime_dir = tempfile::tempdir().unwrap();
    let _unlocked = start_keyring(&address, home.path(), Some(runtime_dir.path()), true);
    session::wait_for("the new daemon to own the Secret Service", Duration::from_secs(20), || {
        secret_service_owner(&address).filter(|owner| *owner != old_owner).map(|_| ())
    });
    session::wait_for("the login keyring as the default collection, unlocked", Duration::from_secs(20), || {
        (default_collection(&address) == Some(true)).then_some(())
    });

    // Asked to, the app tries the keychain again and uses it from now on.
    let view = call(reqwest::Method::POST, "/api/secrets/retry-keychain", None).await;
    assert_eq!(view["store"], "keychain", "{view}");
    assert!(view["store_note"].is_null(), "{view}");
    assert_eq!(view["providers"]["generic"]["webhook_secret"]["source"], "file", "the file's secret stays in force: {view}");
    let view = call(reqwest::Method::PUT, "/api/secrets/openai", Some(serde_json::json!({ "api_key": KEY }))).await;
    assert_eq!(view["providers"]["openai"]["api_key"]["source"], "keychain", "{view}");
    assert_eq!(files_containing(data.path(), KEY.as_bytes()), Vec::<String>::new(), "the key is in the keychain only");
    // Reading every secret that is not set (each provider's) is normal, and logs nothing.
    call(reqwest::Method::GET, "/api/secrets", None).await;

    let log_text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(log_text.matches("the OS keychain cannot be used").count(), 1, "the fallback is said once: {log_text}");
    assert!(log_text.contains("no default collection"), "with its reason: {log_text}");
    assert!(!log_text.contains("No matching credential"), "an unset secret logs nothing: {log_text}");
    assert!(!log_text.contains(KEY) && !log_text.contains("file-kept-secret"), "no secret in the log");
    drop(serve);
}

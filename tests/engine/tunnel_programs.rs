//! cloudflared and the ngrok agent, run as child processes by the supervisor: URL discovery from
//! their local endpoints (and cloudflared's stderr as the fallback), what they are given (only the
//! receiver's address; tokens in the environment, never on the command line), restarts after they
//! die or stop answering, and one-line reasons for a missing binary or a refused token. All against
//! stand-ins (see `harness::tunnel_programs`); the real programs only when present on PATH and
//! `NEVERMISS_TEST_ONLINE=1` says the internet may be used (ngrok also needs a token then): else
//! the engine's build script compiles them as ignored, with the reason, so they count as skips
//! in libtest's closing line, never as passes (crates/engine/build.rs).
//!
//! The stand-ins' public URLs are not reachable from here, so these tests turn the automatic
//! self-test off (`tunnel.self_test = off`): no request ever leaves loopback.

use crate::harness;

use std::time::Duration;

use harness::tunnel::*;
use harness::tunnel_programs::{on_path, Mode, StandIn};
use harness::TestApp;
use nevermiss_engine::api::status::Info;
use nevermiss_engine::tunnel::config::TunnelKind;
use nevermiss_engine::tunnel::self_test::SelfTestOutcome;
use nevermiss_engine::tunnel::{Status, TunnelState};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The bound for a tunnel that must be noticed as silent (six failed health checks, 5 s apart).
const SILENT_WAIT: Duration = Duration::from_secs(120);

fn argv(run: &Value) -> Vec<String> {
    run["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect()
}

fn flag_value(argv: &[String], flag: &str) -> Option<String> {
    argv.iter().position(|a| a == flag).and_then(|i| argv.get(i + 1)).cloned()
}

fn env_has(names: &[&str]) -> bool {
    names.iter().any(|n| std::env::var(n).is_ok_and(|v| !v.is_empty()))
}

/// An engine whose tunnel is cloudflared, a stand-in in `mode` (no self-test).
async fn with_cloudflared(mode: Mode) -> (TestApp, StandIn) {
    let stand_in = StandIn::cloudflared(mode);
    let app = TestApp::spawn().await;
    configure(&app, json!({ "tunnel": "cloudflared", "tunnel.cloudflared_path": stand_in.path(), "tunnel.self_test": "off" })).await;
    (app, stand_in)
}

#[tokio::test]
async fn cloudflared_quick_tunnel_url_from_the_metrics_server_and_a_restart_after_it_dies() {
    let (mut app, stand_in) = with_cloudflared(Mode::Normal).await;

    let (st, url) = wait_up_as(&app, TunnelKind::Cloudflared, "https://", "-stand-in.trycloudflare.com").await;
    assert_eq!(st.webhook_urls["replicate"], format!("{url}/hooks/replicate"));
    assert!(!st.self_test_automatic);
    assert!(st.self_test.is_none(), "no self-test was sent: {st:?}");
    assert_eq!(app.api.get::<Info>("/api/info", StatusCode::OK).await.public_url, Some(url.clone()));

    // The command line: a quick tunnel to the receiver (never the admin API), metrics on loopback.
    let run = stand_in.last_run();
    let args = argv(&run);
    assert_eq!(args[0], "tunnel");
    assert!(args.contains(&"--no-autoupdate".to_owned()), "{args:?}");
    assert_eq!(flag_value(&args, "--url").as_deref(), Some(app.receiver.as_str()), "{args:?}");
    assert!(!args.iter().any(|a| a.contains(&app.api.base.replace("http://", ""))), "the admin API is never forwarded: {args:?}");
    assert!(flag_value(&args, "--metrics").unwrap().starts_with("127.0.0.1:"), "{args:?}");
    assert!(!args.contains(&"run".to_owned()));
    assert!(run["token"].is_null(), "no TUNNEL_TOKEN for a quick tunnel");

    // It dies: the supervisor starts a new one, whose URL is new and flagged.
    stand_in.kill_last();
    let st = wait_up(&app, Some(&url)).await;
    let url2 = public_url(&st);
    assert!(st.restarts >= 1, "{st:?}");
    assert!(st.url_changed, "{st:?}");
    assert_eq!(st.previous_url.as_deref(), Some(&*url));
    assert!(st.notice.as_deref().unwrap().contains("update the webhook URL at the provider"), "{st:?}");
    assert!(st.last_error.as_deref().unwrap().contains("cloudflared exited"), "{st:?}");
    assert_one_line(st.last_error.as_deref(), "died");
    assert!(stand_in.runs().len() >= 2, "a second cloudflared runs");
    assert_eq!(app.api.get::<Info>("/api/info", StatusCode::OK).await.public_url, Some(url2.clone()));

    app.shutdown().await;
}

#[tokio::test]
async fn cloudflared_without_a_metrics_server_is_read_from_stderr() {
    let (mut app, stand_in) = with_cloudflared(Mode::StderrOnly).await;
    let st = wait_up(&app, None).await;
    let url = public_url(&st);
    assert!(url.ends_with("-stand-in.trycloudflare.com"), "{url}");
    // Only the process is watched then: killed, it is restarted.
    stand_in.kill_last();
    let st = wait_up(&app, Some(&url)).await;
    assert!(st.restarts >= 1, "{st:?}");
    app.shutdown().await;
}

#[tokio::test]
async fn cloudflared_named_tunnel_gets_its_token_in_the_environment_only() {
    const TOKEN: &str = "eyJhIjoic3RhbmQtaW4tbmFtZWQtdHVubmVsLXRva2VuIn0";
    if env_has(&["NEVERMISS_CLOUDFLARED_TOKEN", "NEVERMISS_CLOUDFLARED_HOSTNAME"]) {
        eprintln!("skipped: NEVERMISS_CLOUDFLARED_TOKEN/HOSTNAME are set in this environment and beat the test's own");
        return;
    }
    let stand_in = StandIn::cloudflared(Mode::Normal);
    let mut app = TestApp::spawn().await;
    let credentials = set_credentials(&app, json!({ "cloudflared_token": TOKEN })).await;
    assert!(credentials["cloudflared_token"].set);
    configure(
        &app,
        json!({
            "tunnel": "cloudflared",
            "tunnel.cloudflared_path": stand_in.path(),
            "tunnel.cloudflared_hostname": "hooks.example.test",
            "tunnel.self_test": "off",
        }),
    )
    .await;
    let st = wait_up(&app, None).await;
    assert_eq!(st.public_url.as_deref(), Some("https://hooks.example.test"));
    let run = stand_in.last_run();
    let args = argv(&run);
    assert!(args.contains(&"run".to_owned()), "{args:?}");
    assert_eq!(flag_value(&args, "--url").as_deref(), Some(app.receiver.as_str()), "{args:?}");
    assert!(!args.iter().any(|a| a.contains(TOKEN)), "the token is never on the command line: {args:?}");
    assert_eq!(run["token"], TOKEN, "the token is in TUNNEL_TOKEN");
    assert!(!serde_json::to_string(&st).unwrap().contains(TOKEN) && !serde_json::to_string(&credentials).unwrap().contains(TOKEN));
    app.shutdown().await;
}

#[tokio::test]
async fn a_missing_cloudflared_is_one_line_and_not_retried_until_the_setting_changes() {
    let mut app = TestApp::spawn().await;
    configure(
        &app,
        json!({ "tunnel": "cloudflared", "tunnel.cloudflared_path": "/nonexistent/nevermiss-test/cloudflared", "tunnel.self_test": "off" }),
    )
    .await;
    let st = wait_down_for_user(&app, "the missing binary is reported", "not found").await;
    assert!(st.last_error.as_deref().unwrap().contains("NEVERMISS_CLOUDFLARED_PATH"), "{st:?}");
    assert!(st.warning.as_deref().unwrap().contains("down"));
    let restarts = st.restarts;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(state(&app).await.restarts, restarts, "no restart loop");

    // Pointed at a program: it starts at once.
    let stand_in = StandIn::cloudflared(Mode::Normal);
    configure(&app, json!({ "tunnel.cloudflared_path": stand_in.path() })).await;
    wait_up(&app, None).await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_refused_cloudflared_token_is_retried_with_backoff() {
    let (mut app, _stand_in) = with_cloudflared(Mode::BadToken).await;
    let st = wait_for_state(&app, "the refusal is reported and retried", |st| st.status == Status::Down && st.restarts >= 2).await;
    assert_one_line(st.last_error.as_deref(), "refused token");
    assert!(st.last_error.as_deref().unwrap().contains("not valid"), "{st:?}");
    assert_backing_off(&app, &st).await;
    app.shutdown().await;
}

#[tokio::test]
async fn cloudflared_that_stops_answering_is_restarted() {
    let (mut app, stand_in) = with_cloudflared(Mode::GoesSilent).await;
    let url = public_url(&wait_up(&app, None).await);
    // Alive but silent: noticed by the health check of `/ready`, then restarted (a new stand-in
    // that goes silent again, so the state is looked at right after the restart).
    let st =
        wait_for_state_within(&app.api, "the silent tunnel is restarted", SILENT_WAIT, |st| st.restarts >= 1 && st.last_error.is_some())
            .await;
    let reason = st.last_error.as_deref().unwrap();
    assert!(reason.contains("cloudflared") && (reason.contains("metrics") || reason.contains("/ready")), "{reason}");
    assert_one_line(st.last_error.as_deref(), "silent");
    eventually_within("a second cloudflared runs", harness::WAIT, || async { stand_in.runs().len() >= 2 }).await;
    wait_up(&app, Some(&url)).await;
    app.shutdown().await;
}

// ----- the ngrok agent -----

const NGROK_TOKEN: &str = "2stand_in_ngrok_authtoken_1234567890";

fn ngrok_env_token() -> bool {
    env_has(&["NEVERMISS_NGROK_AUTHTOKEN", "NGROK_AUTHTOKEN"])
}

async fn use_ngrok(app: &TestApp, stand_in: &StandIn) {
    configure(app, json!({ "tunnel": "ngrok", "tunnel.ngrok_path": stand_in.path(), "tunnel.self_test": "off" })).await;
}

/// An engine whose tunnel is the ngrok agent, a stand-in in `mode` (no self-test), given a token.
async fn with_ngrok(mode: Mode) -> (TestApp, StandIn) {
    let stand_in = StandIn::ngrok(mode);
    let app = TestApp::spawn().await;
    set_credentials(&app, json!({ "ngrok_authtoken": NGROK_TOKEN })).await;
    use_ngrok(&app, &stand_in).await;
    (app, stand_in)
}

#[tokio::test]
async fn ngrok_agent_url_from_its_local_api_and_a_restart_after_it_dies() {
    let (mut app, stand_in) = with_ngrok(Mode::Normal).await;

    let (_, url) = wait_up_as(&app, TunnelKind::Ngrok, "https://", ".ngrok-free.app").await;

    let run = stand_in.last_run();
    let args = argv(&run);
    assert_eq!(args[0], "http");
    assert_eq!(args[1], app.receiver, "only the receiver is forwarded: {args:?}");
    assert!(flag_value(&args, "--config").is_some(), "{args:?}");
    assert!(!args.iter().any(|a| a.contains(NGROK_TOKEN)), "the token is never on the command line: {args:?}");
    if !ngrok_env_token() {
        assert_eq!(run["token"], NGROK_TOKEN, "the token is in NGROK_AUTHTOKEN");
    }
    // The agent's local API is moved off 4040 by our config file.
    let config = std::fs::read_to_string(args.iter().rev().find(|a| a.ends_with("tunnel-ngrok.yml")).unwrap()).unwrap();
    assert!(config.contains("web_addr: 127.0.0.1:") && !config.contains(NGROK_TOKEN), "{config}");

    stand_in.kill_last();
    let st = wait_up(&app, Some(&url)).await;
    assert!(st.restarts >= 1, "{st:?}");
    assert!(st.url_changed);
    assert!(st.last_error.as_deref().unwrap().contains("ngrok exited"), "{st:?}");

    // A reserved domain: passed as --domain, and the URL is it.
    if std::env::var("NEVERMISS_NGROK_DOMAIN").is_err() {
        configure(&app, json!({ "tunnel.ngrok_domain": "nevermiss-test.ngrok.app" })).await;
        let st = wait_for_state(&app, "the tunnel is up on its domain", |st| {
            st.status == Status::Up && st.public_url.as_deref() == Some("https://nevermiss-test.ngrok.app")
        })
        .await;
        assert_eq!(st.webhook_urls["generic"], "https://nevermiss-test.ngrok.app/hooks/generic");
        assert_eq!(flag_value(&argv(&stand_in.last_run()), "--domain").as_deref(), Some("nevermiss-test.ngrok.app"));
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_refused_ngrok_token_is_one_line_without_the_token() {
    let (mut app, _stand_in) = with_ngrok(Mode::BadToken).await;
    let st = wait_for_state(&app, "the refused token is reported", |st| st.status == Status::Down && st.last_error.is_some()).await;
    assert_one_line(st.last_error.as_deref(), "refused token");
    let reason = st.last_error.as_deref().unwrap();
    assert!(reason.contains("authentication failed") && reason.contains("ERR_NGROK_105"), "{reason}");
    assert!(!serde_json::to_string(&st).unwrap().contains(NGROK_TOKEN), "the token never shows: {st:?}");
    assert!(st.retrying);
    app.shutdown().await;
}

#[tokio::test]
async fn ngrok_without_a_token_waits_for_one() {
    if ngrok_env_token() {
        eprintln!("skipped: an ngrok token is set in this environment");
        return;
    }
    let has_agent_config = directories::BaseDirs::new()
        .is_some_and(|d| d.config_dir().join("ngrok/ngrok.yml").is_file() || d.config_local_dir().join("ngrok/ngrok.yml").is_file());
    if has_agent_config {
        eprintln!("skipped: this machine's ngrok config file may hold a token");
        return;
    }
    let stand_in = StandIn::ngrok(Mode::Normal);
    let mut app = TestApp::spawn().await;
    use_ngrok(&app, &stand_in).await;
    wait_down_for_user(&app, "the missing token is reported", "auth token").await;
    assert!(stand_in.runs().is_empty(), "the agent is not started without a token");

    // Given one: up.
    set_credentials(&app, json!({ "ngrok_authtoken": NGROK_TOKEN })).await;
    wait_up(&app, None).await;
    app.shutdown().await;
}

#[tokio::test]
async fn ngrok_that_stops_listing_the_tunnel_is_restarted() {
    let (mut app, _stand_in) = with_ngrok(Mode::GoesSilent).await;
    wait_up(&app, None).await;
    let st =
        wait_for_state_within(&app.api, "the silent agent is restarted", SILENT_WAIT, |st| st.restarts >= 1 && st.last_error.is_some())
            .await;
    let reason = st.last_error.as_deref().unwrap();
    assert!(reason.contains("no longer lists the tunnel"), "{reason}");
    assert!(reason.contains("stand-in went silent"), "the agent's own last error is kept: {reason}");
    app.shutdown().await;
}

// ----- the real programs, when they are here -----

/// An engine whose tunnel is the real `program` found on PATH (with the automatic self-test);
/// returns it once the tunnel is up (a real start over the internet: within two minutes).
async fn real_tunnel_up(program: &str) -> (TestApp, TunnelState) {
    let path = on_path(program).unwrap_or_else(|| panic!("{program} is on PATH (the build found it there)"));
    let app = TestApp::spawn().await;
    let path_setting = format!("tunnel.{program}_path");
    configure(&app, json!({ "tunnel": program, path_setting: path.to_str().unwrap() })).await;
    let up = format!("the real {program} tunnel is up");
    let st = wait_for_state_within(&app.api, &up, Duration::from_secs(120), |st| st.status == Status::Up).await;
    (app, st)
}

#[tokio::test]
#[cfg_attr(
    nevermiss_no_cloudflared_online,
    ignore = "needs cloudflared on PATH and the internet: set NEVERMISS_TEST_ONLINE=1 (and install cloudflared) to run a real quick tunnel"
)]
async fn real_cloudflared_quick_tunnel() {
    let (mut app, st) = real_tunnel_up("cloudflared").await;
    assert!(public_url(&st).ends_with(".trycloudflare.com"));
    let st =
        wait_for_state_within(&app.api, "the self-test through Cloudflare", Duration::from_secs(120), |st| st.self_test.is_some()).await;
    eprintln!("real cloudflared self-test: {:?}", st.self_test);
    app.shutdown().await;
}

#[tokio::test]
#[cfg_attr(
    nevermiss_no_ngrok_online,
    ignore = "needs the ngrok agent on PATH and the internet: set NEVERMISS_TEST_ONLINE=1 (with NGROK_AUTHTOKEN) to run it"
)]
async fn real_ngrok_online() {
    assert!(
        ngrok_env_token(),
        "NEVERMISS_TEST_ONLINE=1 runs ngrok's online test, which needs an account: set NGROK_AUTHTOKEN or NEVERMISS_NGROK_AUTHTOKEN"
    );
    let (mut app, st) = real_tunnel_up("ngrok").await;
    eprintln!("real ngrok URL: {}", public_url(&st));
    let report = self_test(&app).await;
    assert_eq!(report.outcome, SelfTestOutcome::Passed, "{report:?}");
    app.shutdown().await;
}

//! The real desktop window under Xvfb: `nevermiss` with no command opens a window titled
//! NeverMiss whose process also runs the engine (its receiver answers a signed delivery).
//! A screenshot is kept in `test-artifacts/desktop-window.png`.
#![cfg(all(feature = "desktop", target_os = "linux"))]

mod session;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use session::{start_xvfb, wait_for, Killed};

#[test]
fn the_window_opens_with_the_engine_inside() {
    let (_xvfb, display) = start_xvfb();
    let data_dir = tempfile::tempdir().unwrap();
    std::fs::write(data_dir.path().join("secrets.json"), r#"{"generic.webhook_secret":"window-test"}"#).unwrap();
    let app = Killed(
        Command::new(env!("CARGO_BIN_EXE_nevermiss"))
            .args(["--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data_dir.path())
            .env("DISPLAY", &display)
            .env("NO_AT_BRIDGE", "1")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("NEVERMISS_GENERIC_WEBHOOK_SECRET")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nevermiss starts"),
    );

    // The engine runs in the window's own process.
    let instance: serde_json::Value = wait_for("instance.json", Duration::from_secs(60), || {
        let bytes = std::fs::read(data_dir.path().join("instance.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    });
    assert_eq!(instance["pid"].as_u64(), Some(app.0.id() as u64));

    // A window titled NeverMiss is on the screen.
    wait_for("a window titled NeverMiss", Duration::from_secs(60), || {
        let out = Command::new("xwininfo").args(["-root", "-tree"]).env("DISPLAY", &display).output().ok()?;
        String::from_utf8_lossy(&out.stdout).contains("\"NeverMiss\"").then_some(())
    });

    // Its receiver takes a signed delivery.
    let body = r#"{"deliveryId":"w-1","jobId":"window-job","state":"succeeded","seq":1}"#;
    let signature = nevermiss::providers::generic::sign(b"window-test", body.as_bytes());
    let receiver = instance["receiver_url"].as_str().unwrap().to_owned();
    let answer = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            reqwest::Client::new()
                .post(format!("{receiver}/hooks/generic"))
                .header("X-Agent-Signature", signature)
                .body(body)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        })
    })
    .join()
    .unwrap();
    assert_eq!(answer, r#"{"outcome":"applied"}"#);

    // Let the page draw the job, then keep a screenshot.
    std::thread::sleep(Duration::from_secs(2));
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("desktop-window.png");
    let status = Command::new("import")
        .args(["-window", "root"])
        .arg(&shot)
        .env("DISPLAY", &display)
        .status();
    match status {
        Ok(s) if s.success() => assert!(std::fs::metadata(&shot).unwrap().len() > 0),
        _ => eprintln!("no screenshot: ImageMagick's `import` is missing (run `make deps`)"),
    }
}

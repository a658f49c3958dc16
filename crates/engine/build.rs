fn main() {
    // Release builds embed the web UI from ui/dist (api/ui.rs): build again when it is rebuilt, or
    // appears after a first build without it. Debug builds read ui/dist at run time instead, so a
    // UI rebuild costs no Rust rebuild there; but rust-embed decides at compile time whether the
    // folder is there at all (`allow_missing`): a debug build made before the first UI build
    // would never find it, so it too is built again once ui/dist appears.
    let dist = std::path::Path::new("../../ui/dist").is_dir();
    if std::env::var("PROFILE").as_deref() == Ok("release") && dist {
        println!("cargo:rerun-if-changed=../../ui/dist");
    } else if !dist {
        println!("cargo:rerun-if-changed=../../ui");
    }
    println!("cargo:rerun-if-changed=build.rs");
    online_tunnel_tests();
}

/// The tunnel tests that run the real cloudflared and ngrok through the internet
/// (tests/engine/tunnel_programs.rs, `real_*`) need the program on PATH and
/// `NEVERMISS_TEST_ONLINE=1`. Otherwise they are compiled as ignored, with the reason, so libtest
/// counts them as skips, never as passes: `cfg(nevermiss_no_cloudflared_online)`,
/// `cfg(nevermiss_no_ngrok_online)`.
fn online_tunnel_tests() {
    println!("cargo::rustc-check-cfg=cfg(nevermiss_no_cloudflared_online)");
    println!("cargo::rustc-check-cfg=cfg(nevermiss_no_ngrok_online)");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=NEVERMISS_TEST_ONLINE");
    let online = std::env::var("NEVERMISS_TEST_ONLINE").as_deref() == Ok("1");
    let mut watch_path = false;
    for (program, cfg) in [("cloudflared", "nevermiss_no_cloudflared_online"), ("ngrok", "nevermiss_no_ngrok_online")] {
        match on_path(program) {
            // The program itself: its removal is noticed.
            Some(path) => println!("cargo:rerun-if-changed={}", path.display()),
            None => watch_path = true,
        }
        if !online || on_path(program).is_none() {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
    if watch_path {
        // Absent: build again when a directory of PATH changes (it may be installed there).
        if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths).filter(|d| d.is_dir()) {
                println!("cargo:rerun-if-changed={}", dir.display());
            }
        }
    }
}

fn on_path(program: &str) -> Option<std::path::PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join(program)).find(|p| p.is_file())
}

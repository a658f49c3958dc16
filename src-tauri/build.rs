fn main() {
    // The window's configuration (tauri.conf.json) and icons. The window grants its page no
    // capabilities (`app > security > capabilities` is empty) and the project has no
    // capabilities directory: the pattern names where one would be (nothing watches it: a
    // missing watched path is dirty at every build). Without it, tauri-build watches the missing
    // `./capabilities`, and each `cargo test` compiled this crate again.
    #[cfg(feature = "desktop")]
    {
        // Windows: the program's icon (its resource file) from an .ico made of icon.png; the Linux
        // package keeps its PNGs (tauri.conf.json).
        let windows = tauri_build::WindowsAttributes::new().window_icon_path("src-tauri/icons/icon.ico");
        let attributes =
            tauri_build::Attributes::new().capabilities_path_pattern("./src-tauri/capabilities/**/*").windows_attributes(windows);
        if let Err(error) = tauri_build::try_build(attributes) {
            panic!("tauri-build: {error:#}");
        }
    }
    browser_test_tools();
}

/// tests/ui_e2e drives Debian's Chromium with Node.js. Where either is missing the test is
/// compiled as ignored (`cfg(nevermiss_no_browser)`, with the reason), so libtest counts it as a
/// skip, never as a pass; under `CI=true` it is not ignored, and a missing browser fails the run.
fn browser_test_tools() {
    const CHROMIUM: &str = "/usr/bin/chromium";
    println!("cargo::rustc-check-cfg=cfg(nevermiss_no_browser)");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=PATH");
    let chromium = std::path::Path::new(CHROMIUM);
    // The tool itself when it is there (its removal is noticed), else where it would appear.
    println!("cargo:rerun-if-changed={}", if chromium.exists() { CHROMIUM } else { "/usr/bin" });
    let node = on_path("node");
    watch(node.as_deref());
    let mut missing = Vec::new();
    if !chromium.exists() {
        missing.push(CHROMIUM);
    }
    if node.is_none() {
        missing.push("node");
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if !missing.is_empty() && !ci {
        println!("cargo:rustc-cfg=nevermiss_no_browser");
        println!(
            "cargo:warning=tests/ui_e2e is ignored: {} absent (`make deps-test` installs them; under CI=true it fails instead)",
            missing.join(" and ")
        );
    }
}

fn on_path(program: &str) -> Option<std::path::PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// Build again when the program changes or goes, or, when it is absent, when a directory of
/// PATH changes (it may be installed there).
fn watch(found: Option<&std::path::Path>) {
    match found {
        Some(path) => println!("cargo:rerun-if-changed={}", path.display()),
        None => {
            if let Some(paths) = std::env::var_os("PATH") {
                for dir in std::env::split_paths(&paths).filter(|d| d.is_dir()) {
                    println!("cargo:rerun-if-changed={}", dir.display());
                }
            }
        }
    }
}

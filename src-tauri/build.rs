fn main() {
    // The web UI is embedded from ui/dist (api/ui.rs): build again when it is (re)built, or
    // appears after a first `cargo build` without it.
    if std::path::Path::new("ui/dist").is_dir() {
        println!("cargo:rerun-if-changed=ui/dist");
    } else {
        println!("cargo:rerun-if-changed=ui");
    }
    #[cfg(feature = "desktop")]
    tauri_build::build();
}

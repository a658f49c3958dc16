fn main() {
    // Release builds embed the web UI from ui/dist (api/ui.rs): build again when it is rebuilt, or
    // appears after a first build without it. Debug builds read ui/dist at run time instead, so a
    // UI rebuild costs no Rust rebuild there.
    if std::env::var("PROFILE").as_deref() == Ok("release") {
        if std::path::Path::new("../../ui/dist").is_dir() {
            println!("cargo:rerun-if-changed=../../ui/dist");
        } else {
            println!("cargo:rerun-if-changed=../../ui");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

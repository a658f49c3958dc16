fn main() {
    // The window's configuration (tauri.conf.json) and icons.
    #[cfg(feature = "desktop")]
    tauri_build::build();
}

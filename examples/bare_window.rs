//! A bare Tauri window (its one embedded static page, no engine): the baseline `window_bench` measures
//! NeverMiss's window against.
//!
//!     cargo build --example bare_window

fn main() {
    tauri::Builder::default()
        .setup(|app| {
            // The app's own embedded page (tauri.conf.json's frontendDist), nothing else.
            tauri::WebviewWindowBuilder::new(app, "main", tauri::WebviewUrl::App("index.html".into()))
                .title("NeverMiss")
                .inner_size(1180.0, 760.0)
                .build()?;
            Ok(())
        })
        .run(tauri::generate_context!())
        .expect("the bare window runs");
}

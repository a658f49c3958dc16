//! The desktop shell (Tauri v2): a window onto the web UI that the engine's admin API serves on
//! loopback, with the API token in the URL fragment. The engine runs in this process (started by
//! the caller); the shell only hosts it.

use anyhow::Context;
use tauri::{WebviewUrl, WebviewWindowBuilder};

use crate::engine::Engine;

/// Opens the window and runs until it is closed; then stops the engine.
pub fn run(runtime: tokio::runtime::Runtime, engine: Engine) -> anyhow::Result<()> {
    tauri::async_runtime::set(runtime.handle().clone());
    let ui_url: tauri::Url = format!("http://{}/#token={}", engine.api_addr, engine.token)
        .parse()
        .context("the UI address is not a URL")?;
    let app = tauri::Builder::default()
        .setup(move |app| {
            WebviewWindowBuilder::new(app, "main", WebviewUrl::External(ui_url))
                .title("NeverMiss")
                .inner_size(1180.0, 760.0)
                .min_inner_size(720.0, 480.0)
                .build()?;
            Ok(())
        })
        .build(tauri::generate_context!())
        .context("cannot start the window")?;
    tracing::info!("window open; closing it stops NeverMiss");
    let exit_code = app.run_return(|_app, _event| {});
    runtime.block_on(engine.shutdown());
    if exit_code != 0 {
        anyhow::bail!("the window closed with exit code {exit_code}");
    }
    Ok(())
}

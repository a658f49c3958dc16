//! The desktop shell (Tauri v2): starts the engine in this process, then opens a window onto the
//! web UI that the engine's admin API serves on loopback, with the API token in the URL fragment.
//! The shell only hosts: everything the window shows comes from the engine over HTTP and SSE.

use anyhow::Context;
use tauri::{WebviewUrl, WebviewWindowBuilder};

use crate::engine::{Engine, EngineConfig};

pub fn run(config: EngineConfig) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let engine = runtime.block_on(Engine::start(config, crate::outbox::default_notifier()))?;
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

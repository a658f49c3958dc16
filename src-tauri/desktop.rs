//! The desktop shell (Tauri v2): a window onto the web UI that the engine's admin API serves on
//! loopback (the API token handed over in the URL fragment; the page is granted no Tauri IPC at
//! all, `app.security.capabilities` is empty: the UI needs nothing native), a tray that keeps
//! NeverMiss running when the window is closed, one instance only, optional launch at login, and notifications that
//! open the app on their job when clicked. The engine runs in this process, started by the
//! caller; the shell only hosts it.

use std::sync::Arc;

use anyhow::Context;
use tauri::menu::{CheckMenuItem, Menu, MenuItem, PredefinedMenuItem};
use tauri::tray::{MouseButton, TrayIconBuilder, TrayIconEvent};
use tauri::{AppHandle, Manager, RunEvent, WebviewUrl, WebviewWindowBuilder, WindowEvent};
use tauri_plugin_autostart::ManagerExt;

use nevermiss_engine::channels::desktop::OpenJob;
use nevermiss_engine::engine::Engine;

const MAIN: &str = "main";

/// The UI's address, on a job if one is given.
fn ui_url(engine: &Engine, job: Option<(&str, &str)>) -> String {
    ui_url_at(engine.api_addr, &engine.token, job)
}

use nevermiss_engine::api::ui::ui_url as ui_url_at;

/// Shows the window (creating it again if it was closed), on a job if one is given.
fn show(app: &AppHandle, url: Option<String>) {
    if let Some(window) = app.get_webview_window(MAIN) {
        if let Some(url) = url.and_then(|u| u.parse().ok()) {
            let _ = window.navigate(url);
        }
        let _ = window.unminimize();
        let _ = window.show();
        let _ = window.set_focus();
    }
}

/// "3 running · 1 waiting", from the job counts kept by the store.
fn tray_status(services: &nevermiss_engine::services::Services) -> String {
    let counts = services.store.read_blocking(nevermiss_engine::store::jobs::running_and_waiting).unwrap_or_default();
    match (counts.running, counts.waiting) {
        (0, 0) => "No job running".to_owned(),
        (running, waiting) => format!("{running} running · {waiting} waiting"),
    }
}

/// "Webhooks: https://…" or why they cannot reach this machine.
fn tray_tunnel(services: &nevermiss_engine::services::Services) -> String {
    let state = services.tunnel.state();
    match (&state.public_url, &state.warning) {
        (Some(url), None) => format!("Webhooks: {url}"),
        (Some(url), Some(_)) => format!("Webhooks: {url} (check the tunnel)"),
        (None, _) if state.status == nevermiss_engine::tunnel::Status::Off => "Webhooks: local only (no tunnel)".to_owned(),
        (None, _) => format!("Tunnel down: {}", state.last_error.unwrap_or_default()),
    }
}

/// The running engine and whatever must live as long as it (the demo's simulator).
struct Running<K> {
    engine: Engine,
    _keep: K,
}

/// Runs the app until Quit (closing the window only hides it), then stops the engine.
///
/// `start` starts the engine (and whatever must live beside it). It is called only once this
/// process is known to be the one instance: a second launch hands over to the first (which shows
/// its window) and exits before starting anything.
pub fn run<K, F>(runtime: tokio::runtime::Runtime, open_job: Arc<OpenJob>, start: F) -> anyhow::Result<()>
where
    K: Send + 'static,
    F: FnOnce() -> anyhow::Result<(Engine, K)> + Send + 'static,
{
    tauri::async_runtime::set(runtime.handle().clone());
    let running: Arc<std::sync::Mutex<Option<Running<K>>>> = Arc::default();
    let running_in_setup = running.clone();
    // Why the engine did not start (the data dir in use by a `serve`, a port taken): said on
    // stderr as one line by the caller, not as a panic of the setup hook.
    let start_error: Arc<std::sync::Mutex<Option<anyhow::Error>>> = Arc::default();
    let start_error_in_setup = start_error.clone();

    let app = tauri::Builder::default()
        // First, so a second launch hands over to this one and exits before doing anything.
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| show(app, None)))
        .plugin(tauri_plugin_autostart::init(tauri_plugin_autostart::MacosLauncher::LaunchAgent, None))
        .setup(move |app| {
            let (engine, keep) = match start() {
                Ok(started) => started,
                Err(e) => {
                    *start_error_in_setup.lock().unwrap() = Some(e);
                    app.handle().exit(1);
                    return Ok(());
                }
            };
            let start_url: tauri::Url = ui_url(&engine, None).parse()?;
            let job_url_base = (engine.api_addr, engine.token.clone());
            let (services, stopped) = (engine.services.clone(), engine.shutdown_token());
            *running_in_setup.lock().unwrap() = Some(Running { engine, _keep: keep });
            WebviewWindowBuilder::new(app, MAIN, WebviewUrl::External(start_url))
                .title("NeverMiss")
                .inner_size(1180.0, 760.0)
                .min_inner_size(720.0, 480.0)
                // No theme of its own: the title bar follows the OS's light or dark mode, and
                // so does the page inside (WebKitGTK passes it on as `prefers-color-scheme`).
                .theme(None)
                .build()?;

            let handle = app.handle().clone();
            open_job.set(move |provider, job_id| {
                let (addr, token) = &job_url_base;
                let url = ui_url_at(*addr, token, Some((provider, job_id)));
                let app = handle.clone();
                let _ = handle.run_on_main_thread(move || show(&app, Some(url)));
            });
            // A notification's "Open result" and "Open on provider" open the system's browser
            // (web links only: a result's URLs are http or https, see `nevermiss_engine::result`).
            open_job.set_url_opener(|url| {
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return;
                }
                if let Err(e) = open::that_detached(url) {
                    tracing::warn!(error = %e, "cannot open a browser for a notification's link");
                }
            });
            // Only now may notifications be shown (those left pending by the last run first):
            // each one's "Open" has a window to open.
            services.outbox.open_gate();

            let open = MenuItem::with_id(app, "open", "Open NeverMiss", true, None::<&str>)?;
            let status = MenuItem::with_id(app, "status", tray_status(&services), false, None::<&str>)?;
            let tunnel = MenuItem::with_id(app, "tunnel", tray_tunnel(&services), false, None::<&str>)?;
            let at_login = CheckMenuItem::with_id(
                app,
                "autostart",
                "Launch at login",
                true,
                app.autolaunch().is_enabled().unwrap_or(false),
                None::<&str>,
            )?;
            let quit = MenuItem::with_id(app, "quit", "Quit NeverMiss", true, None::<&str>)?;
            let separator = PredefinedMenuItem::separator(app)?;
            let menu = Menu::with_items(app, &[&status, &tunnel, &separator, &open, &at_login, &separator, &quit])?;
            // The tray says, at a glance, what is running and whether webhooks can reach us.
            tauri::async_runtime::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stopped.cancelled() => return,
                        _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
                    }
                    let _ = status.set_text(tray_status(&services));
                    let _ = tunnel.set_text(tray_tunnel(&services));
                }
            });
            let mut tray = TrayIconBuilder::with_id("nevermiss")
                .tooltip("NeverMiss: watching your jobs")
                .menu(&menu)
                .show_menu_on_left_click(false)
                .on_menu_event(move |app, event| match event.id().as_ref() {
                    "open" => show(app, None),
                    "autostart" => {
                        let autolaunch = app.autolaunch();
                        let enable = !autolaunch.is_enabled().unwrap_or(false);
                        let changed = if enable { autolaunch.enable() } else { autolaunch.disable() };
                        if let Err(e) = changed {
                            tracing::warn!(error = %e, "cannot change launch at login");
                        }
                        let _ = at_login.set_checked(autolaunch.is_enabled().unwrap_or(false));
                    }
                    "quit" => app.exit(0),
                    _ => {}
                })
                .on_tray_icon_event(|tray, event| {
                    if let TrayIconEvent::Click { button: MouseButton::Left, .. } = event {
                        show(tray.app_handle(), None);
                    }
                });
            if let Some(icon) = app.default_window_icon() {
                tray = tray.icon(icon.clone());
            }
            if let Err(e) = tray.build(app) {
                // A desktop without a tray host still has the window.
                tracing::warn!(error = %e, "no tray icon");
            }
            Ok(())
        })
        .on_window_event(|window, event| {
            // Closing the window keeps NeverMiss receiving and polling, in the tray.
            if let WindowEvent::CloseRequested { api, .. } = event {
                if window.label() == MAIN {
                    api.prevent_close();
                    let _ = window.hide();
                }
            }
        })
        .build(tauri::generate_context!())
        .context("cannot start the window")?;
    tracing::info!("window open; closing it keeps NeverMiss in the tray, Quit stops it");
    let exit_code = app.run_return(|_app, event| match &event {
        // The last window went away (it is only hidden): keep running in the tray.
        RunEvent::ExitRequested { code: None, api, .. } => api.prevent_exit(),
        // macOS: a click on the Dock icon while the window is hidden shows it again.
        #[cfg(target_os = "macos")]
        RunEvent::Reopen { has_visible_windows: false, .. } => show(_app, None),
        _ => {}
    });
    if let Some(running) = running.lock().unwrap().take() {
        runtime.block_on(running.engine.shutdown());
    }
    if let Some(e) = start_error.lock().unwrap().take() {
        return Err(e);
    }
    if exit_code != 0 {
        anyhow::bail!("the app stopped with exit code {exit_code}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ui_url_names_the_job_in_the_fragment() {
        let addr = "127.0.0.1:8788".parse().unwrap();
        assert_eq!(super::ui_url_at(addr, "t", None), "http://127.0.0.1:8788/#token=t");
        assert_eq!(super::ui_url_at(addr, "t", Some(("fal", "a/b"))), "http://127.0.0.1:8788/#token=t&view=/jobs/fal/a%2Fb");
    }
}

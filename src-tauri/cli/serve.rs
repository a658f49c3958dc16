//! The commands that run the engine: the desktop app, `serve` and `demo`, and the stop signal.

use std::net::SocketAddr;

use nevermiss_engine::engine::{Engine, EngineConfig};

use super::args::{DemoArgs, Options};
use super::runtime;

/// Whether a window can be shown: on Linux and the BSDs an X11 or Wayland display is named (a
/// server over SSH has none); Windows and macOS always have their own.
#[cfg(feature = "desktop")]
fn has_display() -> bool {
    if cfg!(any(windows, target_os = "macos")) {
        return true;
    }
    std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
}

pub(super) fn demo(options: Options, args: DemoArgs) -> anyhow::Result<()> {
    use nevermiss_engine::providers::SecretKind;
    use nevermiss_engine::simulator::{Simulator, SimulatorConfig};

    let runtime = runtime()?;
    let mut config = options.engine_config()?;
    config.data_dir = config.data_dir.join(super::args::DEMO_DIR);
    let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
    config.receiver_addr = options.receiver_addr.unwrap_or(any_port);
    config.api_addr = options.api_addr.unwrap_or(any_port);
    config.poll_interval_override = Some(options.poll_interval.unwrap_or(10));
    config.simulation = true;
    #[cfg(feature = "desktop")]
    let windowed = !args.headless && has_display();
    #[cfg(not(feature = "desktop"))]
    let windowed = false;
    // With a window, notifications wait for it (they open their job when clicked).
    config.notifications_gated = windowed;
    let open_job = std::sync::Arc::new(nevermiss_engine::channels::desktop::OpenJob::default());
    let engine = runtime.block_on(Engine::start(config, nevermiss_engine::channels::desktop::desktop_notifier(open_job.clone())))?;
    let simulator = runtime.block_on(async {
        let services = &engine.services;
        for kind in [SecretKind::WebhookSecret, SecretKind::ApiKey] {
            if services.secrets.get("generic", kind).is_none() {
                services.secrets.set("generic", kind, Some(&hex::encode(rand::random::<[u8; 16]>())))?;
            }
        }
        let simulator = Simulator::start(SimulatorConfig {
            target_url: format!("http://{}", engine.receiver_addr),
            secret: services.secrets.get("generic", SecretKind::WebhookSecret).unwrap_or_default(),
            api_key: services.secrets.get("generic", SecretKind::ApiKey).unwrap_or_default(),
            jobs: args.jobs,
            new_job_every: std::time::Duration::from_secs(args.every.max(1)),
            duplicate_rate: args.duplicate_rate,
            reorder_rate: args.reorder_rate,
            delay_rate: args.delay_rate,
            drop_rate: args.drop_rate,
            job_prefix: "sim".into(),
            ..SimulatorConfig::default()
        })
        .await?;
        services.settings.set("generic.base_url", &simulator.base_url).await?;
        anyhow::Ok(simulator)
    })?;
    // Like a user who tracks each job when launching it: even a job whose every webhook is lost
    // is known, and reconciliation rescues it.
    let (services, truth, stop) = (engine.services.clone(), simulator.truth_handle(), engine.shutdown_token());
    runtime.spawn(async move {
        let mut known = std::collections::HashSet::new();
        loop {
            let started: Vec<_> = truth.lock().unwrap().values().map(|j| (j.job_id.clone(), j.label.clone())).collect();
            for (job_id, label) in started {
                if known.insert(job_id.clone()) {
                    let key = nevermiss_engine::store::job::JobKey::new("generic", job_id);
                    let tracked = services
                        .store
                        .write(move |conn| {
                            nevermiss_engine::merge_point::track(
                                conn,
                                &key,
                                Some(&label),
                                None,
                                None,
                                nevermiss_engine::store::job::now_ms(),
                            )
                        })
                        .await;
                    match tracked {
                        Ok((_, Some(job))) => services.changes.job_changed(job),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "demo: cannot track a simulated job"),
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
        }
    });
    eprintln!(
        "SIMULATION: a simulated provider runs jobs and sends flaky webhooks to http://{}/hooks/generic (drop {:.0}%, duplicate {:.0}%, reorder {:.0}%, delay {:.0}%).\nUI: http://{}/#token={}",
        engine.receiver_addr,
        args.drop_rate * 100.0,
        args.duplicate_rate * 100.0,
        args.reorder_rate * 100.0,
        args.delay_rate * 100.0,
        engine.api_addr,
        engine.token
    );
    #[cfg(feature = "desktop")]
    if windowed {
        return crate::desktop::run(runtime, open_job, move || Ok((engine, simulator)));
    }
    drop(open_job); // no window, nothing to open on a click
    runtime.block_on(async {
        wait_for_stop_signal().await;
        simulator.stop();
        engine.shutdown().await;
    });
    Ok(())
}

#[cfg(feature = "desktop")]
pub(super) fn run_desktop(options: Options) -> anyhow::Result<()> {
    if !has_display() {
        eprintln!("no display (DISPLAY and WAYLAND_DISPLAY are unset): running the engine without a window, as `nevermiss serve`");
        return runtime()?.block_on(serve(options, None, false, false));
    }
    let runtime = runtime()?;
    let open_job = std::sync::Arc::new(nevermiss_engine::channels::desktop::OpenJob::default());
    let notifier = nevermiss_engine::channels::desktop::desktop_notifier(open_job.clone());
    let mut config = options.engine_config()?;
    // Notifications wait for the window: the shell opens the gate once a click can open it.
    config.notifications_gated = true;
    let handle = runtime.handle().clone();
    crate::desktop::run(runtime, open_job, move || Ok((handle.block_on(Engine::start(config, notifier))?, ())))
}

#[cfg(not(feature = "desktop"))]
pub(super) fn run_desktop(options: Options) -> anyhow::Result<()> {
    eprintln!("this build has no window (built without the `desktop` feature): running the engine as `nevermiss serve`");
    runtime()?.block_on(serve(options, None, false, false))
}

pub(super) async fn serve(options: Options, database: Option<String>, public_api: bool, insecure_http: bool) -> anyhow::Result<()> {
    // Before the engine writes instance.json: a SIGTERM right after start is a clean stop too.
    let stop = stop_signal();
    let config =
        EngineConfig { database_url: database.filter(|url| !url.trim().is_empty()), public_api, insecure_http, ..options.engine_config()? };
    let engine = Engine::start(config, nevermiss_engine::channels::desktop::default_notifier()).await?;
    eprintln!(
        "NeverMiss is running. Webhooks: http://{}/hooks/<provider>  UI: http://{}/#token=…  (Ctrl-C stops)",
        engine.receiver_addr, engine.api_addr
    );
    stop.await;
    engine.shutdown().await;
    Ok(())
}

async fn wait_for_stop_signal() {
    stop_signal().await
}

/// Installs the SIGINT and SIGTERM handlers (Windows: its console events) at once (not at the first poll) and returns the wait
/// for either. Called inside the runtime.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler installs");
        let mut interrupt = signal(SignalKind::interrupt()).expect("a SIGINT handler installs");
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = term.recv() => {}
            }
        }
    }
    // Windows: Ctrl-C and Ctrl-Break, and the console's close, a logoff or a shutdown.
    #[cfg(windows)]
    {
        use tokio::signal::windows::{ctrl_break, ctrl_c};
        let mut interrupt = ctrl_c().expect("a Ctrl-C handler installs");
        let mut brk = ctrl_break().expect("a Ctrl-Break handler installs");
        let closed = crate::console_events::closed();
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = brk.recv() => {}
                _ = closed => {}
            }
        }
    }
    #[cfg(not(any(unix, windows)))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

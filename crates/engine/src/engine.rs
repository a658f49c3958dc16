//! Start-up and shutdown of the engine: the data dir, the store, the two listeners (receiver and
//! admin API), and the background tasks (outbox, reconcile, metrics stream, retention, tunnel). The engine
//! knows nothing of Tauri: the desktop shell and `nevermiss serve` start it the same way, and so do
//! the tests, on `127.0.0.1:0`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiContext};
use crate::changes::Changes;
use crate::job::now_ms;
use crate::outbox::{Notifier, Outbox};
use crate::providers::{ProviderContext, Providers};
use crate::reconcile::Reconciler;
use crate::receiver;
use crate::secrets::{self, Secrets};
use crate::settings::Settings;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};
use crate::tunnel::{Tunnel, TunnelDeps};

pub const TOKEN_FILE: &str = "api-token";
pub const INSTANCE_FILE: &str = "instance.json";
pub const DATABASE_FILE: &str = "nevermiss.db";
/// How often old deliveries are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Where the engine lives and listens. Built by the CLI from options, variables and defaults.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub receiver_addr: SocketAddr,
    pub api_addr: SocketAddr,
    /// `--poll-interval` / `NEVERMISS_POLL_INTERVAL`, which beat the stored setting.
    pub poll_interval_override: Option<u64>,
    /// Jobs come from the built-in simulated provider (`nevermiss demo`); shown everywhere.
    pub simulation: bool,
    /// Most connections the receiver keeps open at once (`receiver::MAX_CONNECTIONS`).
    pub max_receiver_connections: usize,
    /// Notifications wait until the host says it is ready (`Outbox::open_gate`): the desktop
    /// shell, once a click on one can open its window, so that those left pending by the last run
    /// are clickable too. Off for `serve` (no clicks) and by default.
    pub notifications_gated: bool,
}

impl EngineConfig {
    /// Loopback on ports the OS picks, stored settings in force: how tests and tools start one.
    pub fn local(data_dir: impl Into<PathBuf>) -> EngineConfig {
        let any_port: SocketAddr = "127.0.0.1:0".parse().expect("a literal address parses");
        EngineConfig {
            data_dir: data_dir.into(),
            receiver_addr: any_port,
            api_addr: any_port,
            poll_interval_override: None,
            simulation: false,
            max_receiver_connections: receiver::MAX_CONNECTIONS,
            notifications_gated: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("data dir {path} is not writable: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    #[error("cannot listen on {addr} for the {what}: {reason}")]
    Listen { what: &'static str, addr: SocketAddr, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Secrets(#[from] secrets::SecretError),
}

/// How a running instance can be reached; written to `<data-dir>/instance.json` for the CLI.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceInfo {
    pub pid: u32,
    pub api_url: String,
    pub receiver_url: String,
    /// The tunnel's public URL, when one runs.
    pub public_url: Option<String>,
    pub data_dir: PathBuf,
    #[serde(default)]
    pub simulation: bool,
}

/// What the receiver, the API and the background tasks share.
pub struct Services {
    pub store: Store,
    pub providers: Providers,
    pub changes: Arc<Changes>,
    pub outbox: Arc<Outbox>,
    pub reconciler: Arc<Reconciler>,
    pub settings: Arc<Settings>,
    pub secrets: Arc<Secrets>,
    pub instance: InstanceInfo,
    /// The public URL's tunnel (its `public_url()` is the live one; `instance.public_url` is not).
    pub tunnel: Arc<Tunnel>,
}

impl Services {
    /// METRICS: the store's counters and gauges, with each provider's polling health.
    pub async fn metrics(&self) -> Result<Metrics, StoreError> {
        let store = self.store.read(crate::store::metrics::read).await?;
        Ok(Metrics { store, providers: self.reconciler.health() })
    }
}

/// A running engine.
pub struct Engine {
    pub receiver_addr: SocketAddr,
    pub api_addr: SocketAddr,
    pub token: String,
    pub services: Arc<Services>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Engine {
    pub async fn start(config: EngineConfig, notifier: Arc<dyn Notifier>) -> Result<Engine, StartError> {
        let data_dir = prepare_data_dir(&config.data_dir)?;
        let token = load_or_create_token(&data_dir)?;
        let receiver_listener = bind("receiver", config.receiver_addr).await?;
        let api_listener = bind("admin API", config.api_addr).await?;
        let receiver_addr = receiver_listener.local_addr().expect("a bound listener has an address");
        let api_addr = api_listener.local_addr().expect("a bound listener has an address");

        let store = Store::open(&data_dir.join(DATABASE_FILE))?;
        let settings = Arc::new(Settings::load(store.clone()).await?);
        let secrets = Arc::new(Secrets::open(&data_dir)?);
        let providers = Providers::builtin(&ProviderContext::new(secrets.clone(), settings.clone()));
        let changes = Changes::new();
        let outbox = Outbox::new(store.clone(), notifier, settings.clone(), changes.clone(), config.notifications_gated);
        let reconciler = Reconciler::new(
            store.clone(),
            providers.clone(),
            settings.clone(),
            changes.clone(),
            outbox.clone(),
            config.poll_interval_override,
        );
        let instance = InstanceInfo {
            pid: std::process::id(),
            api_url: format!("http://{api_addr}"),
            receiver_url: format!("http://{receiver_addr}"),
            public_url: None,
            data_dir: data_dir.clone(),
            simulation: config.simulation,
        };
        let tunnel = Tunnel::new(TunnelDeps {
            settings: settings.clone(),
            secrets: secrets.clone(),
            store: store.clone(),
            changes: changes.clone(),
            receiver_addr,
            data_dir: data_dir.clone(),
            providers: providers.names().map(str::to_owned).collect(),
            on_url: Some(Box::new({
                let instance = instance.clone();
                move |url: Option<&str>| {
                    let instance = InstanceInfo { public_url: url.map(str::to_owned), ..instance.clone() };
                    write_instance_file(&instance);
                }
            })),
        });
        let services = Arc::new(Services {
            store: store.clone(),
            providers,
            changes: changes.clone(),
            outbox: outbox.clone(),
            reconciler: reconciler.clone(),
            settings,
            secrets,
            instance: instance.clone(),
            tunnel: tunnel.clone(),
        });

        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        let receiver_app = receiver::router(services.clone());
        // The receiver faces the internet: its own loop, with read timeouts (see `receiver::serve`).
        tasks.push(tokio::spawn(receiver::serve(
            receiver_listener,
            receiver_app,
            shutdown.clone(),
            config.max_receiver_connections,
        )));
        let api_app = api::router(Arc::new(ApiContext {
            services: services.clone(),
            token: token.clone(),
            api_addr,
            shutdown: shutdown.clone(),
        }));
        tasks.push(serve("admin API", api_listener, api_app, shutdown.clone()));
        tasks.push(tokio::spawn(outbox.run(shutdown.clone())));
        tasks.push(tokio::spawn(reconciler.run(shutdown.clone())));
        let for_metrics = services.clone();
        tasks.push(tokio::spawn(changes.publish_metrics(
            move || {
                let services = for_metrics.clone();
                async move { services.metrics().await }
            },
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(purge_old_deliveries(services.clone(), shutdown.clone())));

        write_instance_file(&instance);
        // After the file is written: the tunnel rewrites it with each new public URL.
        tasks.push(tokio::spawn(tunnel.run(shutdown.clone())));
        tasks.push(tokio::spawn(crate::tunnel::down_alert::watch(
            services.tunnel.clone(),
            store.clone(),
            services.settings.clone(),
            services.outbox.clone(),
            shutdown.clone(),
        )));
        tracing::info!(receiver = %receiver_addr, api = %api_addr, data_dir = %data_dir.display(), "NeverMiss engine started");
        Ok(Engine {
            receiver_addr,
            api_addr,
            token,
            services,
            shutdown,
            tasks,
        })
    }

    pub fn store(&self) -> &Store {
        &self.services.store
    }

    /// A token that is cancelled when the engine stops (for tasks that live beside it).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops accepting, lets in-flight requests finish, stops the tasks and closes the store.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        // Only our own: another instance may have started on this data dir since.
        let instance_file = self.services.instance.data_dir.join(INSTANCE_FILE);
        let ours = std::fs::read(&instance_file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<InstanceInfo>(&bytes).ok())
            .is_some_and(|i| i.pid == self.services.instance.pid && i.api_url == self.services.instance.api_url);
        if ours {
            let _ = std::fs::remove_file(&instance_file);
        }
        let store = self.services.store.clone();
        drop(self.services);
        tokio::task::spawn_blocking(move || store.close()).await.ok();
        tracing::info!("NeverMiss engine stopped");
    }
}

fn write_instance_file(instance: &InstanceInfo) {
    let instance_json = serde_json::to_vec_pretty(instance).expect("instance info serializes");
    // Whole or not at all: a CLI reading it during start-up never sees half a file.
    if let Err(e) = secrets::write_private(&instance.data_dir.join(INSTANCE_FILE), &instance_json) {
        tracing::warn!(error = %e, "cannot write {INSTANCE_FILE}; the CLI will use the default API address");
    }
}

fn prepare_data_dir(dir: &Path) -> Result<PathBuf, StartError> {
    let err = |source| StartError::DataDir { path: dir.to_owned(), source };
    std::fs::create_dir_all(dir).map_err(err)?;
    // Prove we can write here before anything else is started.
    let probe = dir.join(".write-test");
    std::fs::write(&probe, b"").map_err(err)?;
    let _ = std::fs::remove_file(&probe);
    Ok(dir.to_owned())
}

/// The admin API token: created on first start (0600), then read from the file.
fn load_or_create_token(dir: &Path) -> Result<String, StartError> {
    let path = dir.join(TOKEN_FILE);
    let err = |source| StartError::DataDir { path: path.clone(), source };
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => return Ok(token.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let token = hex::encode(rand::random::<[u8; 32]>());
    secrets::write_private(&path, token.as_bytes()).map_err(err)?;
    Ok(token)
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr).await.map_err(|e| StartError::Listen {
        what,
        addr,
        reason: match e.kind() {
            std::io::ErrorKind::AddrInUse => "address already in use (is NeverMiss already running?)".into(),
            std::io::ErrorKind::AddrNotAvailable => "address not available on this machine".into(),
            std::io::ErrorKind::PermissionDenied => "permission denied".into(),
            _ => e.to_string(),
        },
    })
}

fn serve(what: &'static str, listener: TcpListener, app: axum::Router, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "the {what} stopped");
        }
    })
}

/// Deletes deliveries older than the retention (at least 7 days), in small batches so the writer
/// is never held for long.
async fn purge_old_deliveries(services: Arc<Services>, shutdown: CancellationToken) {
    loop {
        let cutoff = now_ms() - services.settings.delivery_retention_days() * 86_400_000;
        loop {
            let deleted = services
                .store
                .write(move |tx| crate::store::deliveries::purge_received_before(tx, cutoff, 1000))
                .await;
            match deleted {
                Ok(0) => break,
                Ok(n) => tracing::debug!(deleted = n, "purged old deliveries"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot purge old deliveries");
                    break;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(PURGE_EVERY) => {}
        }
    }
}

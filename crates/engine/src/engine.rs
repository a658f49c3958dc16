//! Start-up and shutdown of the engine: the data dir, the store, the two listeners (receiver and
//! admin API), and the background tasks (outbox, reconcile, metrics stream, retention, tunnel). The engine
//! knows nothing of Tauri: the desktop shell and `nevermiss serve` start it the same way, and so do
//! the tests, on `127.0.0.1:0`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiContext};
use crate::changes::Changes;
use crate::channels::senders::Channels;
use crate::data_dir::{DATABASE_FILE, INSTANCE_FILE, LOCK_FILE, NODE_FILE, TOKEN_FILE};
use crate::extra_ca::ExtraRoots;
use crate::hub_client::HubClient;
use crate::notification::Notifier;
use crate::outbox::Outbox;
use crate::providers::{ProviderContext, Providers};
use crate::receiver;
use crate::reconcile::{Reconciler, ReconcilerDeps};
use crate::secrets::{self, Secrets};
use crate::services::{InstanceInfo, Services};
use crate::settings::Settings;
use crate::store::job::JobKey;
use crate::store::postgres::{FleetChange, PoolLimits};
use crate::store::{Store, StoreError};
use crate::tunnel::{Tunnel, TunnelDeps};

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
    /// Most bytes of request bodies the receiver holds at once (`receiver::BODIES_IN_FLIGHT`).
    pub receiver_body_budget: usize,
    /// Notifications wait until the host says it is ready (`Outbox::open_gate`): the desktop
    /// shell, once a click on one can open its window, so that those left pending by the last run
    /// are clickable too. Off for `serve` (no clicks) and by default.
    pub notifications_gated: bool,
    /// `serve --database` / `NEVERMISS_DATABASE_URL`: a PostgreSQL database shared by a fleet of
    /// `serve` processes (contract §5). `None`: SQLite in the data dir.
    pub database_url: Option<String>,
    /// `serve --public-api`: the admin API may listen on a non-loopback address, as a hub that
    /// other machines' apps connect to with device tokens (contract §5).
    pub public_api: bool,
    /// `serve --insecure-http`: a hub answers plain HTTP from other machines (else put TLS in front).
    pub insecure_http: bool,
    /// The unit of a failed notification's retry backoff (`outbox::RETRY_UNIT`, 1 s: retries after
    /// 2, 4, 8 s ...); tests shorten it.
    pub notify_retry_unit: std::time::Duration,
    /// How long a one-time code for the web UI may be redeemed (`api::handover::UI_CODE_TTL`,
    /// 60 s); tests shorten it.
    pub ui_code_ttl: std::time::Duration,
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
            receiver_body_budget: receiver::BODIES_IN_FLIGHT,
            notifications_gated: false,
            database_url: None,
            public_api: false,
            insecure_http: false,
            notify_retry_unit: crate::outbox::RETRY_UNIT,
            ui_code_ttl: crate::api::handover::UI_CODE_TTL,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("data dir {path} is not writable: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    /// Another engine (a `serve` or the desktop app) holds the data dir's lock.
    #[error("the data dir {} is in use by another NeverMiss ({}); stop it first, or use another data dir", .data_dir.display(), describe_other(.pid, .other))]
    InUse {
        data_dir: PathBuf,
        /// The pid written in the lock file by its holder, when it got that far.
        pid: Option<u32>,
        /// What the running one wrote in `instance.json`, when it is its own (boxed: the error
        /// stays small on the common path).
        other: Option<Box<InstanceInfo>>,
    },
    #[error("address {addr} for the {what} is not a loopback address: the admin API answers on loopback only (127.0.0.1 or [::1]), unless `serve --public-api` makes it a hub's")]
    NotLoopback { what: &'static str, addr: SocketAddr },
    #[error("cannot listen on {addr} for the {what}: {reason}")]
    Listen { what: &'static str, addr: SocketAddr, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Secrets(#[from] secrets::SecretError),
}

/// "pid 1234, API http://127.0.0.1:8788, receiver http://127.0.0.1:8787", or as much as is known.
fn describe_other(pid: &Option<u32>, other: &Option<Box<InstanceInfo>>) -> String {
    match (other, pid) {
        (Some(i), _) => format!("pid {}, API {}, receiver {}", i.pid, i.api_url, i.receiver_url),
        (None, Some(pid)) => format!("pid {pid}, still starting: its ports are not known yet"),
        (None, None) => "pid not known yet: it is still starting".to_owned(),
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
    /// The data dir's lock (`LOCK_FILE`), released when the engine is dropped or the process ends.
    lock: DataDirLock,
}

impl Engine {
    pub async fn start(config: EngineConfig, notifier: Arc<dyn Notifier>) -> Result<Engine, StartError> {
        // The admin API is loopback only (contract §3): refused before anything happens.
        if !config.api_addr.ip().is_loopback() && !config.public_api {
            return Err(StartError::NotLoopback { what: "admin API", addr: config.api_addr });
        }
        // First: one engine per data dir. Nothing in it is touched before the lock is ours.
        let lock = DataDirLock::acquire(&config.data_dir)?;
        let data_dir = config.data_dir.clone();
        let token = load_or_create_token(&data_dir)?;
        let receiver_listener = bind("receiver", config.receiver_addr).await?;
        let api_listener = bind("admin API", config.api_addr).await?;
        let receiver_addr = receiver_listener.local_addr().expect("a bound listener has an address");
        let api_addr = api_listener.local_addr().expect("a bound listener has an address");

        let node = load_or_create_node(&data_dir)?;
        let database = config.database_url.is_none().then(|| data_dir.join(DATABASE_FILE));
        // Owner-only: the database made 0600 before SQLite makes its -wal and -shm
        // with the same mode, and whatever an older version left open to others set so.
        if let Some(db) = &database {
            crate::data_dir::create_private_database(db).map_err(|source| StartError::DataDir { path: db.clone(), source })?;
        }
        crate::data_dir::make_files_private(&data_dir, database.as_deref());
        let store = match &config.database_url {
            Some(url) => Store::connect(url, PoolLimits::default(), &node).await?,
            None => Store::open(&data_dir.join(DATABASE_FILE))?.on_node(&node),
        };
        // Once SQLite has opened it (WAL mode: -wal and -shm exist now), the three are 0600.
        crate::data_dir::make_files_private(&data_dir, database.as_deref());
        let settings = Arc::new(Settings::load(store.clone()).await?);
        let secrets = Arc::new(Secrets::open(&data_dir)?);
        let provider_ctx = ProviderContext::new(secrets.clone(), settings.clone());
        let shipped = crate::providers::recipe::shipped(&provider_ctx);
        let providers =
            Providers::builtin(&provider_ctx).with(shipped.into_iter().map(|r| Arc::new(r) as Arc<dyn crate::providers::Provider>));
        // The user's recipes (`<data-dir>/providers/*.toml`), loaded again when they change: a
        // broken one is said in the log and never stops the others.
        let recipes_dir = config.data_dir.join(crate::providers::recipe::RECIPES_DIR);
        crate::recipe_files::load(&recipes_dir, &provider_ctx, &providers);
        // Every secret read once now, off the runtime: the webhook path then never waits on D-Bus.
        {
            let secrets = secrets.clone();
            let mut services: Vec<&'static str> = providers.names();
            services.extend(crate::tunnel::config::SECRETS.iter().map(|s| s.service));
            if let Err(e) = tokio::task::spawn_blocking(move || secrets.warm(&services)).await {
                tracing::warn!(error = %e, "the secrets could not be read ahead; they are read when first needed");
            }
        }
        let changes = Changes::new();
        let extra_roots = ExtraRoots::from_env();
        notifier.attach(&crate::notification::EngineAccess {
            settings: settings.clone(),
            api_url: format!("http://{api_addr}"),
            token: token.clone(),
        });
        let hub = HubClient::new(settings.clone(), secrets.clone(), notifier.clone(), &extra_roots);
        let channels = Channels::new(notifier, secrets.clone(), settings.clone(), format!("http://{api_addr}"), extra_roots);
        let outbox = Outbox::new(store.clone(), channels, changes.clone(), config.notifications_gated, config.notify_retry_unit);
        let reconciler = Reconciler::new(ReconcilerDeps {
            store: store.clone(),
            providers: providers.clone(),
            settings: settings.clone(),
            changes: changes.clone(),
            outbox: outbox.clone(),
            interval_override: config.poll_interval_override,
        });
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
            providers: providers.clone(),
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
            providers: providers.clone(),
            changes: changes.clone(),
            outbox: outbox.clone(),
            reconciler: reconciler.clone(),
            settings,
            secrets,
            instance: instance.clone(),
            tunnel: tunnel.clone(),
            hub: hub.clone(),
        });

        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        let receiver_app = receiver::router(services.clone(), receiver::BodyBudget::new(config.receiver_body_budget));
        // The receiver faces the internet: its own loop, with read timeouts (see `receiver::serve`).
        tasks.push(tokio::spawn(receiver::serve(receiver_listener, receiver_app, shutdown.clone(), config.max_receiver_connections)));
        let api_app = api::router(Arc::new(ApiContext {
            services: services.clone(),
            token: token.clone(),
            api_addr,
            public: config.public_api,
            insecure_http: config.insecure_http,
            shutdown: shutdown.clone(),
            ui_codes: api::handover::UiCodes::new(config.ui_code_ttl),
            streams: Default::default(),
            device_calls: Default::default(),
        }));
        tasks.push(serve_api(api_listener, api_app, shutdown.clone()));
        tasks.push(tokio::spawn(outbox.run(shutdown.clone())));
        tasks.push(tokio::spawn(hub.run(shutdown.clone())));
        tasks.push(tokio::spawn(reconciler.clone().run(shutdown.clone())));
        tasks.push(tokio::spawn(crate::recipe_files::watch(
            recipes_dir,
            provider_ctx.clone(),
            providers,
            reconciler,
            changes.clone(),
            shutdown.clone(),
        )));
        let for_metrics = services.clone();
        tasks.push(tokio::spawn(changes.publish_metrics(
            move || {
                let services = for_metrics.clone();
                async move { services.metrics().await }
            },
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(crate::retention::run(store.clone(), services.settings.clone(), shutdown.clone())));
        tasks.push(tokio::spawn(crate::search_index::run(store.clone(), shutdown.clone())));
        if let Some(others) = store.watch_others(shutdown.clone()) {
            tasks.push(tokio::spawn(relay_fleet_changes(others, services.clone())));
        }

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
        Ok(Engine { receiver_addr, api_addr, token, services, shutdown, tasks, lock })
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
        // Last: the data dir is free for another engine only once this one is done with it.
        drop(self.lock);
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

/// The exclusive lock on a data dir: an OS file lock (`flock` on Unix, `LockFileEx` on Windows) on
/// `<data-dir>/engine.lock`, which holds the holder's pid. Held as long as this value lives; the
/// OS drops it when the process ends, even by SIGKILL, so a crash never leaves a stale lock.
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    /// Creates the data dir if needed and takes its lock, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, StartError> {
        use std::io::{Read, Seek, Write};
        let err = |source| StartError::DataDir { path: dir.to_owned(), source };
        // The user's alone: 0700, and set so if it was not (`crate::data_dir`).
        crate::data_dir::create_private_dir(dir).map_err(err)?;
        // Opening it for writing also proves the data dir is writable.
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(dir.join(LOCK_FILE)).map_err(err)?;
        #[cfg(windows)]
        crate::data_dir::make_private(&dir.join(LOCK_FILE)).map_err(err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let pid = file.read_to_string(&mut text).ok().and_then(|_| text.trim().parse::<u32>().ok());
                let other = std::fs::read(dir.join(INSTANCE_FILE))
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<InstanceInfo>(&bytes).ok())
                    // A file left by a killed predecessor names a process that is gone.
                    .filter(|i| pid.is_none_or(|pid| pid == i.pid))
                    .map(Box::new);
                return Err(StartError::InUse { data_dir: dir.to_owned(), pid, other });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(err(e)),
        }
        // Ours: say whose it is, for the next one that finds it taken.
        file.set_len(0).map_err(err)?;
        file.rewind().map_err(err)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(err)?;
        Ok(DataDirLock { _file: file })
    }
}

/// The admin API token: created on first start (0600), then read from the file.
/// The other processes' changes (a fleet on PostgreSQL), here too: a job as it stands now on the
/// live stream, a fresh metrics snapshot, the settings as they are now.
async fn relay_fleet_changes(mut others: tokio::sync::mpsc::Receiver<FleetChange>, services: Arc<Services>) {
    while let Some(change) = others.recv().await {
        match change {
            // Read only when someone watches: a fleet's every delivery is announced to every
            // other process, and the read would be a query per delivery per process for nobody.
            FleetChange::Job { .. } if !services.changes.watched() => services.changes.metrics_changed(),
            FleetChange::Job { provider, job_id } => {
                let (p, j) = (provider.clone(), job_id.clone());
                match services.store.read(move |db| crate::store::jobs::job(db, &JobKey::new(&p, &j))).await {
                    Ok(Some(job)) => services.changes.job_changed(job),
                    Ok(None) => services.changes.job_untracked(&provider, &job_id),
                    Err(e) => tracing::debug!(error = %e, "cannot read a job another process changed"),
                }
            }
            FleetChange::Counters => services.changes.metrics_changed(),
            FleetChange::Settings | FleetChange::Missed => {
                let interval = services.reconciler.interval();
                if let Err(e) = services.settings.reload().await {
                    tracing::warn!(error = %e, "cannot read the settings another process changed");
                }
                // Only a new interval restarts the timers (a round's own bookkeeping is a setting
                // too, written by every round of every process).
                if services.reconciler.interval() != interval {
                    services.reconciler.interval_changed();
                }
                services.changes.metrics_changed();
            }
        }
    }
}

fn load_or_create_token(dir: &Path) -> Result<String, StartError> {
    load_or_create(dir, TOKEN_FILE, || hex::encode(rand::random::<[u8; 32]>()))
}

fn load_or_create_node(dir: &Path) -> Result<String, StartError> {
    load_or_create(dir, NODE_FILE, || hex::encode(rand::random::<[u8; 8]>()))
}

/// The file's text, or `new()` written to it (owner-only) when it is missing or empty.
fn load_or_create(dir: &Path, file: &str, new: impl FnOnce() -> String) -> Result<String, StartError> {
    let path = dir.join(file);
    let err = |source| StartError::DataDir { path: path.clone(), source };
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => return Ok(token.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let value = new();
    secrets::write_private(&path, value.as_bytes()).map_err(err)?;
    Ok(value)
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

/// The admin API's server: the receiver's read timeouts with a connection cap of its own
/// (`http_server`); its bodies are bounded in the router (`api::router`).
fn serve_api(listener: TcpListener, app: axum::Router, shutdown: CancellationToken) -> JoinHandle<()> {
    let limits = crate::http_server::Limits {
        name: "admin API",
        header_read_timeout: receiver::HEADER_READ_TIMEOUT,
        max_connections: crate::api::fair_share::MAX_API_CONNECTIONS,
    };
    tokio::spawn(crate::http_server::serve(listener, app, shutdown, limits))
}

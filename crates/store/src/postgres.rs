//! The store on PostgreSQL, for a fleet of `serve` processes on one database (contract §5,
//! `--database`): a bounded pool with timeouts; the schema migrated on connecting (`migrations`:
//! the files of `migrations/postgres`, SQLite's schema table for table in PostgreSQL's words,
//! applied under an advisory lock so processes starting together migrate once; a database newer
//! than this build is refused); each write as its own transaction, run again when PostgreSQL
//! asks for it, and a pushed delivery as one call (`push`); the change feed announced after the
//! commits, in batches (`announce_changes`). The queries are the store's own (`sql` translates
//! their text).

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::sync::CancellationToken;

use super::push::{self, PushCall, Pushed, Waiting, MAX_GROUP};
use super::sql::{self, Db, DbError, PgDb};
use super::{counters, migrations, StoreError, Tx, WriteFn};

/// How many rows each tally (counters, jobs per state, completions per day) is spread over, so
/// that concurrent writers seldom wait on the same row (see `counters::add_all`). The triggers
/// pick theirs by the connection (`pg_backend_pid() % 16`).
const SHARDS: i64 = 16;

/// How many times a write PostgreSQL asked to retry (deadlock, serialization) is run again.
const RETRIES: usize = 8;

/// How a pool is bounded.
#[derive(Debug, Clone, Copy)]
pub struct PoolLimits {
    pub max_connections: usize,
    /// How long a request waits for a free connection, or for a new one to open.
    pub wait: Duration,
    /// How many groups of pushed deliveries are in flight at once (`push_groups`); `None`: an
    /// eighth of the pool.
    pub push_groups: Option<usize>,
}

impl Default for PoolLimits {
    fn default() -> PoolLimits {
        PoolLimits { max_connections: 16, wait: Duration::from_secs(5), push_groups: None }
    }
}

/// A pool on one PostgreSQL database, its schema migrated.
pub(super) struct PgBackend {
    pool: Pool,
    /// For the change feed's own connection (`watch_others`).
    config: tokio_postgres::Config,
    /// TLS, when the URL asks for it (`sslmode=require`).
    tls: Option<MakeRustlsConnect>,
    /// `nevermiss/<node>`: how this process's writes are named in the change feed.
    application_name: String,
    handle: Handle,
    /// Commits still to fail (`Store::fail_next_commits`).
    pub(super) failing_commits: Arc<AtomicUsize>,
    /// To the announcer (`announce_changes`): the change feed's payloads of committed writes.
    announcements: mpsc::UnboundedSender<String>,
    /// To the pusher (`push_groups`): the pushed deliveries waiting for their group.
    pushes: mpsc::UnboundedSender<Queued>,
    /// What applies a group (`push_group`: one given whole).
    pusher: Pusher,
}

/// Unavailable, with the error's causes (a pool's "error performing TLS handshake" says why only
/// in its source: "invalid peer certificate: UnknownIssuer").
fn unavailable(e: impl std::error::Error) -> DbError {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    DbError::Unavailable(text)
}

impl PgBackend {
    /// Connects (`postgres://USER@HOST:PORT/DB`), then migrates or refuses a newer schema.
    pub(super) async fn connect(url: &str, limits: PoolLimits, node: &str) -> Result<PgBackend, StoreError> {
        let open = |source: DbError| StoreError::Open { path: redacted(url).into(), source };
        let (mut config, tls, limits) = parse_url(url, limits).map_err(open)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(limits.wait);
        }
        let application_name = format!("nevermiss/{node}");
        config.application_name(&application_name);
        // Every statement is short and bounded, so neither JIT nor parallel workers pay: the job
        // search's walk by range of row ids is planned at a total cost above `jit_above_cost` (it
        // stops early; the planner does not count on that), where compiling it took 300 ms for a
        // read of 2, and its newest jobs were read by two workers, 8-10 ms to start them for a
        // read of 1 (BENCHMARKS.md, reads at a million jobs).
        let options = config.get_options().unwrap_or_default();
        config.options(format!("{options} -c jit=off -c max_parallel_workers_per_gather=0"));
        let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let manager = match &tls {
            Some(tls) => Manager::from_config(config.clone(), tls.clone(), manager_config),
            None => Manager::from_config(config.clone(), NoTls, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(limits.max_connections)
            .wait_timeout(Some(limits.wait))
            .create_timeout(Some(limits.wait))
            .recycle_timeout(Some(limits.wait))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| open(unavailable(e)))?;
        let (announcements, to_announce) = mpsc::unbounded_channel();
        tokio::spawn(announce_changes(pool.clone(), to_announce));
        let failing_commits = Arc::new(AtomicUsize::new(0));
        let (pushes, waiting) = mpsc::unbounded_channel();
        let pusher = Pusher { pool: pool.clone(), failing_commits: failing_commits.clone(), announcements: announcements.clone() };
        tokio::spawn(push_groups(pusher.clone(), waiting, limits.push_groups.unwrap_or_else(|| groups_in_flight(limits.max_connections))));
        let backend =
            PgBackend { pool, config, tls, application_name, handle: Handle::current(), failing_commits, announcements, pushes, pusher };
        backend.migrate().await.map_err(open)?;
        Ok(backend)
    }

    /// Migrates on a connection of its own (`migrations::migrate_postgres`), closed afterwards:
    /// its advisory lock goes with it, whatever happened.
    async fn migrate(&self) -> Result<(), DbError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let mut client = deadpool_postgres::Object::take(client);
        migrations::migrate_postgres(&mut client).await
    }

    /// Runs a write in its own transaction (on a blocking thread), again when PostgreSQL asks.
    pub(super) fn write_blocking<T, F: WriteFn<T>>(&self, mut f: F) -> Result<T, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.write_once(&mut f) {
                Err(e) if e.is_retryable() && attempt < RETRIES => {
                    tracing::debug!(error = %e, attempt, "write retried");
                    continue;
                }
                other => return other.map_err(StoreError::Db),
            }
        }
    }

    fn write_once<T, F: WriteFn<T>>(&self, f: &mut F) -> sql::Result<T> {
        let mut client = self.handle.block_on(self.pool.get()).map_err(unavailable)?;
        let tx = self.handle.block_on(client.transaction())?;
        let db = PgDb { client: &tx, handle: self.handle.clone() };
        let mut write = Tx::new(&db);
        let value = f(&mut write)?;
        counters::add_all(&db, write.counted.into_iter(), crate::job::now_ms(), rand::random_range(0..SHARDS))?;
        let changes = (&db as &dyn Db).query_row(PENDING_CHANGES, [], |r| r.get::<_, Option<String>>("changes"))?;
        if self.failing_commits.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(DbError::Unavailable("the commit failed (injected by Store::fail_next_commits)".into()));
        }
        self.handle.block_on(tx.commit())?;
        announce(&self.announcements, changes);
        Ok(value)
    }

    /// A pushed delivery, applied in the next group (`push_groups`) and answered after the
    /// group's commit with what was done with it.
    pub(super) async fn push(&self, call: &PushCall<'_>) -> Result<Pushed, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.pushes.send(Queued { waiting: Waiting::from(*call), answer }).map_err(|_| StoreError::WriterGone)?;
        answered.await.map_err(|_| StoreError::WriterGone)?.map_err(StoreError::Db)
    }

    /// Deliveries applied as one group now (`Store::push_group_in_one_call`).
    pub(super) async fn push_group(&self, calls: &[PushCall<'_>]) -> Result<Vec<Pushed>, StoreError> {
        let group: Vec<Waiting> = calls.iter().map(|call| Waiting::from(*call)).collect();
        self.pusher.push_retried(&group).await.map_err(StoreError::Db)
    }

    pub(super) fn read_blocking<T>(&self, f: impl FnOnce(&dyn Db) -> sql::Result<T>) -> Result<T, StoreError> {
        let client = self.handle.block_on(self.pool.get()).map_err(unavailable)?;
        let db = PgDb { client: &client, handle: self.handle.clone() };
        Ok(f(&db)?)
    }
}

/// What a transaction's triggers recorded for the change feed (see migration V6), one payload a
/// line: read before its commit, announced after it.
const PENDING_CHANGES: &str = "SELECT current_setting('nevermiss.changes', true) AS changes";

/// Announces a batch of the change feed's payloads, each its own notification, in one
/// transaction (a NOTIFY transaction's commit waits for the one before it: one per batch).
const ANNOUNCE: &str = "SELECT pg_notify('nevermiss_changes', payload) FROM unnest($1::TEXT[]) AS payload";

/// Most payloads one announcement carries.
const ANNOUNCE_BATCH: usize = 4096;

/// Hands a committed transaction's payloads to the announcer (`announce_changes`).
fn announce(announcements: &mpsc::UnboundedSender<String>, changes: Option<String>) {
    if let Some(changes) = changes.filter(|c| !c.is_empty()) {
        let _ = announcements.send(changes);
    }
}

/// A pushed delivery waiting for its group, and where its answer goes.
pub(super) struct Queued {
    waiting: Waiting,
    answer: oneshot::Sender<sql::Result<Pushed>>,
}

/// How many groups of pushed deliveries a process has in flight at once, each on a connection of
/// its pool: an eighth of the pool (the rest for reads, the dispatcher and reconciliation), at
/// least one, at most eight. While they are in flight the next group gathers: fewer groups in
/// flight make larger groups, and V10's call costs less per delivery the larger its group (one
/// `serve` at 64 connections, BENCHMARKS.md: 0.39-0.43 of the floor with one or two in flight,
/// 0.32-0.35 with four, the default of the pool of 16 before).
fn groups_in_flight(max_connections: usize) -> usize {
    (max_connections / 8).clamp(1, 8)
}

/// Fewest deliveries a group starts with while another group is in flight: with fewer waiting it
/// waits for more, or for a group in flight to end. A call costs about 1 ms whatever its group's
/// size plus 0.07 ms a delivery (BENCHMARKS.md, session 21), and a place in flight taken at once
/// by whatever was waiting made groups of 14 on average at 64 connections; one `serve` at 64
/// connections, five alternating pairs: 0.448 -> 0.518 of the floor, p99 20-25 -> 17-20 ms (8 and
/// 16 measured within a run of 12; BENCHMARKS.md, sessions 22-23).
const FEWEST_BESIDE_ANOTHER: usize = 12;
const _: () = assert!(FEWEST_BESIDE_ANOTHER <= MAX_GROUP);

/// The pusher: takes the first waiting delivery and waits for a place in flight; then takes every
/// delivery waiting meanwhile (up to `push::MAX_GROUP`) into one group, applied in one call and
/// one transaction (`push::run_group`) on a task of its own. Beside another group in flight, a
/// group starts with at least `FEWEST_BESIDE_ANOTHER` deliveries or once none is in flight
/// (`gather`).
async fn push_groups(pusher: Pusher, waiting: mpsc::UnboundedReceiver<Queued>, in_flight: usize) {
    run_in_groups(waiting, in_flight, move |group| {
        let pusher = pusher.clone();
        async move { pusher.push_group(group).await }
    })
    .await
}

/// The grouping of `push_groups`, whatever a group's items and its run: groups of what `waiting`
/// gives, `in_flight` at most running at once, each run by `run` on a task of its own.
async fn run_in_groups<T, R, F>(mut waiting: mpsc::UnboundedReceiver<T>, in_flight: usize, run: R)
where
    T: Send + 'static,
    R: Fn(Vec<T>) -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let places = Arc::new(Semaphore::new(in_flight));
    let ended = Arc::new(tokio::sync::Notify::new());
    while let Some(first) = waiting.recv().await {
        let Ok(place) = places.clone().acquire_owned().await else { return };
        let group = gather(first, &mut waiting, || places.available_permits() + 1 < in_flight, &ended).await;
        let (running, ended) = (run(group), ended.clone());
        tokio::spawn(async move {
            running.await;
            drop(place);
            ended.notify_waiters();
        });
    }
}

/// A group from `first` and what is waiting: everything waiting, up to `push::MAX_GROUP`; and,
/// while `others_in_flight`, more as it comes until it holds `FEWEST_BESIDE_ANOTHER` or a group in
/// flight ends (`ended`).
async fn gather<T>(
    first: T,
    waiting: &mut mpsc::UnboundedReceiver<T>,
    others_in_flight: impl Fn() -> bool,
    ended: &tokio::sync::Notify,
) -> Vec<T> {
    let mut group = vec![first];
    loop {
        while group.len() < MAX_GROUP {
            match waiting.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        // Listening before looking, so that a group ending in between is not missed.
        let an_end = ended.notified();
        tokio::pin!(an_end);
        an_end.as_mut().enable();
        if group.len() >= FEWEST_BESIDE_ANOTHER || !others_in_flight() {
            return group;
        }
        tokio::select! {
            next = waiting.recv() => match next {
                Some(next) => group.push(next),
                None => return group,
            },
            _ = an_end => {}
        }
    }
}

/// What a group's task needs of the backend.
#[derive(Clone)]
struct Pusher {
    pool: Pool,
    failing_commits: Arc<AtomicUsize>,
    announcements: mpsc::UnboundedSender<String>,
}

impl Pusher {
    /// Applies a group and answers each of its deliveries. A group the database refused (an error
    /// of PostgreSQL's own, not one to retry) runs again one delivery at a time, each in its own
    /// transaction: the delivery that fails is answered its error and undoes only itself, the
    /// others are applied. An unreachable database fails the whole group (each answered so).
    async fn push_group(&self, group: Vec<Queued>) {
        let (waiting, answers): (Vec<Waiting>, Vec<_>) = group.into_iter().map(|q| (q.waiting, q.answer)).unzip();
        match self.push_retried(&waiting).await {
            Ok(pushed) => {
                for (answer, pushed) in answers.into_iter().zip(pushed) {
                    let _ = answer.send(Ok(pushed));
                }
            }
            Err(DbError::Postgres(e)) if waiting.len() > 1 && e.code().is_some() => {
                tracing::debug!(error = %e, deliveries = waiting.len(), "a group was refused; its deliveries run one at a time");
                for (one, answer) in waiting.iter().zip(answers) {
                    let alone = self.push_retried(std::slice::from_ref(one)).await.map(|mut pushed| pushed.remove(0));
                    let _ = answer.send(alone);
                }
            }
            Err(e) if answers.len() == 1 => {
                if let Some(answer) = answers.into_iter().next() {
                    let _ = answer.send(Err(e));
                }
            }
            Err(e) => {
                let text = e.to_string();
                for answer in answers {
                    let _ = answer.send(Err(DbError::Unavailable(text.clone())));
                }
            }
        }
    }

    /// One group's call, run again when PostgreSQL asks for it (a deadlock, a serialization
    /// failure).
    async fn push_retried(&self, group: &[Waiting]) -> sql::Result<Vec<Pushed>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.push_once(group).await {
                Err(e) if e.is_retryable() && attempt < RETRIES => {
                    tracing::debug!(error = %e, attempt, "push retried");
                    continue;
                }
                other => return other,
            }
        }
    }

    /// One group's call, autocommitted. With a commit to fail (`Store::fail_next_commits`), the
    /// call runs in a transaction that is rolled back.
    async fn push_once(&self, group: &[Waiting]) -> sql::Result<Vec<Pushed>> {
        let mut client = self.pool.get().await.map_err(unavailable)?;
        if self.failing_commits.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err() {
            let (pushed, changes) = push::run_group(&client, group).await?;
            announce(&self.announcements, changes);
            return Ok(pushed);
        }
        let tx = client.transaction().await?;
        push::run_group(&tx, group).await?;
        tx.rollback().await?;
        Err(DbError::Unavailable("the commit failed (injected by Store::fail_next_commits)".into()))
    }
}

/// The announcer: sends the payloads committed transactions recorded, in the order of their
/// commits, each once per batch (a job changed by ten writes meanwhile is announced once), in one
/// transaction per batch: while one is in flight the next gathers. A process that dies between a
/// commit and its announcement leaves the other processes' live views a change behind (what they
/// show is read from the database, so their next read or restart has it); a failed announcement
/// is logged and dropped likewise.
async fn announce_changes(pool: Pool, mut announcements: mpsc::UnboundedReceiver<String>) {
    while let Some(first) = announcements.recv().await {
        let mut batch: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut lines = vec![first];
        while batch.len() < ANNOUNCE_BATCH {
            for payload in lines.iter().flat_map(|l| l.lines()) {
                if seen.insert(payload.to_owned()) {
                    batch.push(payload.to_owned());
                }
            }
            lines.clear();
            match announcements.try_recv() {
                Ok(more) => lines.push(more),
                Err(_) => break,
            }
        }
        let sent = async {
            let client = pool.get().await.map_err(unavailable)?;
            let statement = client.prepare_cached(ANNOUNCE).await?;
            client.execute(&statement, &[&batch]).await?;
            Ok::<_, DbError>(())
        };
        if let Err(e) = sent.await {
            tracing::debug!(error = %e, payloads = batch.len(), "the change feed's announcement failed; the other processes catch up on their next read");
        }
    }
}

impl PgBackend {
    /// The fleet's change feed (`LISTEN nevermiss_changes`, fed by triggers on `jobs`,
    /// `counters` and `settings`), the changes of this process left out: on a connection of its
    /// own, opened again (with a pause) whenever it is lost, until `shutdown`. After a reconnect,
    /// `FleetChange::Missed` (anything may have changed meanwhile).
    pub(super) fn watch_others(&self, shutdown: CancellationToken) -> mpsc::Receiver<FleetChange> {
        let (sender, changes) = mpsc::channel(1024);
        let (config, tls, own) = (self.config.clone(), self.tls.clone(), self.application_name.clone());
        self.handle.spawn(async move {
            let mut first = true;
            while !shutdown.is_cancelled() {
                if !first {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
                first = false;
                if let Err(e) = listen(&config, tls.as_ref(), &own, &sender, &shutdown).await {
                    tracing::debug!(error = %e, "the fleet's change feed was lost; listening again");
                }
                if sender.is_closed() {
                    return;
                }
            }
        });
        changes
    }
}

/// One connection's life of the change feed.
async fn listen(
    config: &tokio_postgres::Config,
    tls: Option<&MakeRustlsConnect>,
    own: &str,
    sender: &mpsc::Sender<FleetChange>,
    shutdown: &CancellationToken,
) -> Result<(), tokio_postgres::Error> {
    match tls {
        Some(tls) => {
            let (client, connection) = config.connect(tls.clone()).await?;
            relay_notifications(client, connection, own, sender, shutdown).await
        }
        None => {
            let (client, connection) = config.connect(NoTls).await?;
            relay_notifications(client, connection, own, sender, shutdown).await
        }
    }
}

/// LISTENs on `client` and forwards each other process's change until `shutdown` or the loss of
/// the connection (driven here).
async fn relay_notifications<S, T>(
    client: tokio_postgres::Client,
    mut connection: tokio_postgres::Connection<S, T>,
    own: &str,
    sender: &mpsc::Sender<FleetChange>,
    shutdown: &CancellationToken,
) -> Result<(), tokio_postgres::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (messages_in, mut messages) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = futures_util::StreamExt::next(&mut stream).await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    if messages_in.send(n.payload().to_owned()).is_err() {
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    });
    client.batch_execute("LISTEN nevermiss_changes").await?;
    // Whatever changed while the feed was down.
    let _ = sender.send(FleetChange::Missed).await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            payload = messages.recv() => {
                let Some(payload) = payload else { break };
                let Ok(change) = serde_json::from_str::<FeedChange>(&payload) else { continue };
                if change.from == own {
                    continue;
                }
                let change = match (change.provider, change.job_id, change.settings) {
                    (Some(provider), Some(job_id), _) => FleetChange::Job { provider, job_id },
                    (_, _, Some(true)) => FleetChange::Settings,
                    _ => FleetChange::Counters,
                };
                if sender.send(change).await.is_err() {
                    break;
                }
            }
        }
    }
    drop(client);
    driver.abort();
    match driver.await {
        Ok(Err(e)) => Err(e),
        _ => Ok(()),
    }
}

/// A change-feed payload (see `nevermiss_announce` in the schema).
#[derive(serde::Deserialize)]
struct FeedChange {
    from: String,
    provider: Option<String>,
    job_id: Option<String>,
    settings: Option<bool>,
}

/// What another process of the fleet changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetChange {
    Job {
        provider: String,
        job_id: String,
    },
    Counters,
    Settings,
    /// The feed was down for a while: anything may have changed.
    Missed,
}

/// The URL as tokio-postgres reads it, the TLS it asks for, and the pool's bounds.
///
/// `sslmode=require` (and libpq's `verify-ca` and `verify-full`, which is what is done anyway) is
/// TLS whose certificate is verified against the Mozilla roots and, when given, `sslrootcert` (a
/// PEM file of the CAs that signed the server's certificate, as libpq names it). Otherwise plain:
/// `disable`, and `prefer`, the default (a local server's self-signed certificate would fail it).
/// NeverMiss's own parameters bound the pool: `pool_max_size` (connections, 1 to 1,000),
/// `pool_timeout_secs` (the wait for a connection, 1 to 300) and `push_groups` (groups of pushed
/// deliveries in flight at once, 1 to 64), beating `limits`.
fn parse_url(url: &str, limits: PoolLimits) -> Result<(tokio_postgres::Config, Option<MakeRustlsConnect>, PoolLimits), DbError> {
    let invalid = |what: String| DbError::Schema(format!("the database URL is not valid: {what}"));
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = Vec::new();
    let mut root_cert = None;
    let mut limits = limits;
    let bounded = |name: &str, value: &str, range: std::ops::RangeInclusive<u64>| {
        value
            .parse::<u64>()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| invalid(format!("{name} must be a whole number from {} to {}, not {value:?}", range.start(), range.end())))
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslrootcert", path)) => root_cert = Some(path.to_owned()),
            Some(("sslmode", "verify-ca" | "verify-full")) => kept.push("sslmode=require".to_owned()),
            Some(("pool_max_size", n)) => limits.max_connections = bounded("pool_max_size", n, 1..=1000)? as usize,
            Some(("pool_timeout_secs", n)) => limits.wait = Duration::from_secs(bounded("pool_timeout_secs", n, 1..=300)?),
            Some(("push_groups", n)) => limits.push_groups = Some(bounded("push_groups", n, 1..=64)? as usize),
            _ => kept.push(pair.to_owned()),
        }
    }
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    let config = tokio_postgres::Config::from_str(&url).map_err(|e| invalid(e.to_string()))?;
    if config.get_ssl_mode() != tokio_postgres::config::SslMode::Require {
        return Ok((config, None, limits));
    }
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(path) = root_cert {
        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(&path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| invalid(format!("sslrootcert {path}: {e}")))?;
        for cert in certs {
            roots.add(cert).map_err(|e| invalid(format!("sslrootcert {path}: {e}")))?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((config, Some(MakeRustlsConnect::new(tls)), limits))
}

/// The URL without its password, for messages.
fn redacted(url: &str) -> String {
    match url.split_once("://").and_then(|(scheme, rest)| Some((scheme, rest.split_once('@')?))) {
        Some((scheme, (user_info, host))) => {
            let user = user_info.split_once(':').map_or(user_info, |(user, _password)| user);
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str) -> Result<(tokio_postgres::Config, bool, PoolLimits), String> {
        parse_url(url, PoolLimits::default()).map(|(config, tls, limits)| (config, tls.is_some(), limits)).map_err(|e| e.to_string())
    }

    #[test]
    fn a_url_gives_its_tls_and_pool_bounds_and_keeps_the_rest_for_postgres() {
        let (config, tls, limits) =
            parsed("postgres://me:secret@db.internal:6543/nm?application_name=x&pool_max_size=4&pool_timeout_secs=9&push_groups=3")
                .unwrap();
        assert_eq!((config.get_dbname(), config.get_ports()), (Some("nm"), &[6543][..]));
        assert!(!tls, "prefer, the default, is plain");
        assert_eq!((limits.max_connections, limits.wait, limits.push_groups), (4, Duration::from_secs(9), Some(3)));

        let (config, tls, limits) = parsed("postgres://me@db.internal/nm?sslmode=verify-full").unwrap();
        assert!(tls && config.get_ssl_mode() == tokio_postgres::config::SslMode::Require);
        assert_eq!(limits.max_connections, PoolLimits::default().max_connections);
        assert!(!parsed("postgres://me@db.internal/nm?sslmode=disable").unwrap().1);

        for bad in [
            "?pool_max_size=0",
            "?pool_timeout_secs=many",
            "?push_groups=0",
            "?sslmode=require&sslrootcert=/nonexistent/ca.pem",
            "?no_such_option=1",
        ] {
            let error = parsed(&format!("postgres://me@db.internal/nm{bad}")).unwrap_err();
            assert!(error.contains("not valid"), "{bad}: {error}");
        }
    }

    /// Beside a group in flight, a group waits until it holds `FEWEST_BESIDE_ANOTHER` deliveries
    /// or no other group is in flight; alone, it takes what is waiting at once. Polled by hand: a
    /// group that waits is a future that is not ready, whatever the time.
    #[test]
    fn a_group_beside_another_waits_for_enough_deliveries_or_for_the_others_end() {
        use futures_util::FutureExt;
        use std::sync::atomic::AtomicBool;
        let (deliver, mut waiting) = mpsc::unbounded_channel::<usize>();
        let (others, ended) = (AtomicBool::new(false), tokio::sync::Notify::new());
        let others_in_flight = || others.load(Ordering::SeqCst);

        (2..=4).for_each(|i| deliver.send(i).unwrap());
        let alone = gather(1, &mut waiting, others_in_flight, &ended).now_or_never();
        assert_eq!(alone, Some(vec![1, 2, 3, 4]), "alone: at once, with what was waiting");

        others.store(true, Ordering::SeqCst);
        (2..FEWEST_BESIDE_ANOTHER).for_each(|i| deliver.send(i).unwrap());
        {
            let mut beside = std::pin::pin!(gather(1, &mut waiting, others_in_flight, &ended));
            assert_eq!(beside.as_mut().now_or_never(), None, "beside another, fewer than {FEWEST_BESIDE_ANOTHER} wait");
            deliver.send(FEWEST_BESIDE_ANOTHER).unwrap();
            let enough = (1..=FEWEST_BESIDE_ANOTHER).collect::<Vec<_>>();
            assert_eq!(beside.as_mut().now_or_never(), Some(enough), "enough: it starts");
        }

        deliver.send(2).unwrap();
        let mut few = std::pin::pin!(gather(1, &mut waiting, others_in_flight, &ended));
        assert_eq!(few.as_mut().now_or_never(), None, "too few beside another");
        ended.notify_waiters();
        assert_eq!(few.as_mut().now_or_never(), None, "a group ended, but another is still in flight");
        others.store(false, Ordering::SeqCst);
        ended.notify_waiters();
        assert_eq!(few.as_mut().now_or_never(), Some(vec![1, 2]), "none in flight: it starts with what it has");
    }

    /// The pusher's places: a group runs at once beside none, and a group waiting beside one in
    /// flight starts when that one ends (its end wakes the waiting group).
    #[tokio::test]
    async fn a_waiting_group_starts_when_the_group_in_flight_ends() {
        let (deliver, waiting) = mpsc::unbounded_channel::<usize>();
        let (started, mut groups) = mpsc::unbounded_channel::<Vec<usize>>();
        let release = Arc::new(Semaphore::new(0));
        let gate = release.clone();
        tokio::spawn(run_in_groups(waiting, 2, move |group| {
            let (started, gate) = (started.clone(), gate.clone());
            async move {
                started.send(group).unwrap();
                gate.acquire().await.unwrap().forget();
            }
        }));
        deliver.send(1).unwrap();
        assert_eq!(next_group(&mut groups).await, vec![1], "alone: at once");
        (2..=4).for_each(|i| deliver.send(i).unwrap());
        release.add_permits(1);
        assert_eq!(next_group(&mut groups).await, vec![2, 3, 4], "the group in flight ended: the waiting one starts");
    }

    async fn next_group(groups: &mut mpsc::UnboundedReceiver<Vec<usize>>) -> Vec<usize> {
        tokio::time::timeout(Duration::from_secs(10), groups.recv()).await.expect("a group started").unwrap()
    }

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(redacted("postgres://me:secret@db.internal/nm"), "postgres://me@db.internal/nm");
        assert_eq!(redacted("postgres://db.internal/nm"), "postgres://db.internal/nm");
    }
}

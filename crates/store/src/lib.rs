//! The store: SQLite (one file, the embedded default) or PostgreSQL (a fleet of `serve`
//! processes on one database), behind one API. Every query is written once (`sql`); what differs
//! is written per dialect, side by side: the schema (`migrations`, `postgres`) and the merge's
//! guard (`guard`).
//!
//! On SQLite one writer thread commits concurrent writes in groups (one fsync for many; a write is
//! a closure, run again under a savepoint if another write of its group failed) and a pool of
//! readers never blocks it. On PostgreSQL each write is its own transaction, retried on a deadlock
//! or serialization failure.
//!
//! The bottom layer: with the types it stores (`job`, `closed_set!`), it depends on no other crate
//! of the workspace. Its queries are grouped by table, one module each; the guarded job upsert is
//! the engine's `merge_point`.

pub mod closed_set;
pub mod job;

pub mod channels;
pub mod counters;
pub mod deliveries;
pub mod durations;
pub mod fold;
pub mod groups;
pub mod guard;
pub mod jobs;
pub mod leases;
pub mod metrics;
pub mod migrations;
pub mod outbox;
pub mod passes;
pub mod postgres;
pub mod push;
pub mod refused;
pub mod search_index;
pub mod settings;
pub mod sql;
pub mod sqlite_memory;
pub mod timeline;

use counters::{ChannelTally, Counter, Tally};
use postgres::{FleetChange, PoolLimits};
use sql::{Db, DbError, Dialect};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{mpsc, oneshot};

/// At most this many writes share one transaction.
const MAX_GROUP: usize = 512;
/// Writes waiting for the writer; callers wait (backpressure) when it is full.
const QUEUE: usize = 8192;
const READERS_KEPT: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("the write was not committed (the database is unavailable)")]
    WriterGone,
    #[error("cannot open the database at {path}: {source}")]
    Open { path: PathBuf, source: DbError },
    #[error("database task failed: {0}")]
    Task(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Db(e.into())
    }
}

/// A write's handle on the database: the connection inside the write's transaction (it derefs to
/// `Db`), and the counter additions this write makes, added explicitly by the writer's code
/// (`tx.count(..)`). On SQLite the additions of a whole group are summed and written once just
/// before its COMMIT; a write that fails takes its additions back with it.
pub struct Tx<'c> {
    db: &'c dyn Db,
    counted: Vec<(Tally, i64)>,
}

impl<'c> Tx<'c> {
    fn new(db: &'c dyn Db) -> Tx<'c> {
        Tx { db, counted: Vec::new() }
    }

    /// Adds `n` to `counter` when this write commits.
    pub fn count(&mut self, counter: Counter, n: i64) {
        if n != 0 {
            self.counted.push((Tally::Counter(counter), n));
        }
    }

    /// Adds 1 to the times `provider`'s `field` held `value`, one NeverMiss does not know.
    pub fn count_unknown_value(&mut self, provider: &str, field: &str, value: &str) {
        self.counted.push((Tally::UnknownValue(provider.to_owned(), field.to_owned(), value.to_owned()), 1));
    }

    /// Adds `n` to one of `channel`'s tallies when this write commits.
    pub fn count_channel(&mut self, channel: &str, tally: ChannelTally, n: i64) {
        if n != 0 {
            self.counted.push((Tally::Channel(channel.to_owned(), tally), n));
        }
    }
}

impl<'c> std::ops::Deref for Tx<'c> {
    type Target = dyn Db + 'c;

    fn deref(&self) -> &(dyn Db + 'c) {
        self.db
    }
}

/// A write's queries run on its transaction (`&mut Tx` is a `&dyn Db`).
impl Db for Tx<'_> {
    fn dialect(&self) -> Dialect {
        self.db.dialect()
    }

    fn run(&self, sql: &str, params: &[sql::ValueRef<'_>]) -> sql::Result<usize> {
        self.db.run(sql, params)
    }

    fn rows(&self, sql: &str, params: &[sql::ValueRef<'_>]) -> sql::Result<Vec<sql::Row>> {
        self.db.rows(sql, params)
    }

    fn rows_planned_now(&self, sql: &str, params: &[sql::ValueRef<'_>]) -> sql::Result<Vec<sql::Row>> {
        self.db.rows_planned_now(sql, params)
    }

    fn execute_batch(&self, sql: &str) -> sql::Result<()> {
        self.db.execute_batch(sql)
    }
}

/// What a write is: a closure over the write's transaction, that may run more than once.
pub trait WriteFn<T>: FnMut(&mut Tx<'_>) -> sql::Result<T> + Send + 'static {}
impl<T, F: FnMut(&mut Tx<'_>) -> sql::Result<T> + Send + 'static> WriteFn<T> for F {}

/// A queued write: run (perhaps twice, see the module's comment), then answered once.
trait PendingWrite: Send {
    /// Runs the write and keeps its result and counter additions, replacing an earlier run's;
    /// true when it succeeded.
    fn run(&mut self, db: &dyn Db) -> bool;
    /// The counter additions of the kept run (none when it failed).
    fn counted(&self) -> &[(Tally, i64)];
    /// Answers the caller with the kept result, or with the group's commit failure.
    fn finish(self: Box<Self>, committed: Result<(), String>);
}

type WriteOp = Box<dyn PendingWrite>;

struct Write<T, F> {
    f: F,
    /// The caller's span, entered while the write runs on the writer thread: a delivery's merge
    /// and enqueue log lines carry the delivery's fields.
    span: tracing::Span,
    result: Option<sql::Result<T>>,
    counted: Vec<(Tally, i64)>,
    done: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> PendingWrite for Write<T, F>
where
    T: Send + 'static,
    F: WriteFn<T>,
{
    fn run(&mut self, db: &dyn Db) -> bool {
        let _in_caller_span = self.span.enter();
        let mut tx = Tx::new(db);
        let result = (self.f)(&mut tx);
        let ok = result.is_ok();
        self.counted = if ok { tx.counted } else { Vec::new() };
        self.result = Some(result);
        ok
    }

    fn counted(&self) -> &[(Tally, i64)] {
        &self.counted
    }

    fn finish(self: Box<Self>, committed: Result<(), String>) {
        let outcome = match (self.result, committed) {
            (Some(Ok(value)), Ok(())) => Ok(value),
            (Some(Err(e)), _) => Err(StoreError::Db(e)),
            (Some(Ok(_)), Err(e)) => Err(StoreError::Task(format!("commit failed: {e}"))),
            (None, Err(e)) => Err(StoreError::Task(format!("not run: {e}"))),
            (None, Ok(())) => Err(StoreError::Task("not run".into())),
        };
        let _ = self.done.send(outcome);
    }
}

#[derive(Clone)]
pub struct Store {
    inner: Arc<Backend>,
    /// This process's name among a fleet's (`leases`, outbox claims).
    node: Arc<str>,
}

enum Backend {
    Sqlite(Sqlite),
    Postgres(Arc<postgres::PgBackend>),
}

struct Sqlite {
    path: PathBuf,
    writes: mpsc::Sender<WriteOp>,
    readers: Mutex<Vec<Connection>>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Commits still to fail (`fail_next_commits`), shared with the writer thread.
    failing_commits: Arc<AtomicUsize>,
}

impl Store {
    /// Opens (creating if needed) the SQLite database file and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let open_err = |source: DbError| StoreError::Open { path: path.to_owned(), source };
        let mut conn = Connection::open(path).map_err(|e| open_err(e.into()))?;
        configure(&conn).map_err(|e| open_err(e.into()))?;
        migrations::migrate(&mut conn).map_err(open_err)?;

        let (writes, queue) = mpsc::channel(QUEUE);
        let failing_commits = Arc::new(AtomicUsize::new(0));
        let writer_thread = std::thread::Builder::new()
            .name("nevermiss-db-writer".into())
            .spawn({
                let failing_commits = failing_commits.clone();
                let path = path.to_owned();
                move || run_writer(conn, &path, queue, failing_commits)
            })
            .map_err(|e| StoreError::Task(e.to_string()))?;
        Ok(Store {
            node: Arc::from("local"),
            inner: Arc::new(Backend::Sqlite(Sqlite {
                path: path.to_owned(),
                writes,
                readers: Mutex::new(Vec::new()),
                writer_thread: Mutex::new(Some(writer_thread)),
                failing_commits,
            })),
        })
    }

    /// Connects to a PostgreSQL database (`postgres://USER@HOST:PORT/DB`) through a bounded
    /// pool, and brings its schema up to date (or refuses a newer one). `node` is this process's
    /// name among the fleet's (unique per process, the same across its restarts).
    pub async fn connect(url: &str, limits: PoolLimits, node: &str) -> Result<Store, StoreError> {
        let backend = postgres::PgBackend::connect(url, limits, node).await?;
        Ok(Store { inner: Arc::new(Backend::Postgres(Arc::new(backend))), node: Arc::from(node) })
    }

    /// The same store, named `node` (see `connect`).
    pub fn on_node(self, node: &str) -> Store {
        Store { node: Arc::from(node), ..self }
    }

    /// This process's name among a fleet's.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The live changes other processes of a fleet make, until `shutdown` (PostgreSQL only; a
    /// SQLite file has one engine, this one).
    pub fn watch_others(&self, shutdown: tokio_util::sync::CancellationToken) -> Option<tokio::sync::mpsc::Receiver<FleetChange>> {
        match &*self.inner {
            Backend::Sqlite(_) => None,
            Backend::Postgres(pg) => Some(pg.watch_others(shutdown)),
        }
    }

    /// Which database this store is on.
    pub fn dialect(&self) -> Dialect {
        match &*self.inner {
            Backend::Sqlite(_) => Dialect::Sqlite,
            Backend::Postgres(_) => Dialect::Postgres,
        }
    }

    fn failing_commits(&self) -> &AtomicUsize {
        match &*self.inner {
            Backend::Sqlite(sqlite) => &sqlite.failing_commits,
            Backend::Postgres(pg) => &pg.failing_commits,
        }
    }

    /// Fault injection, for tests and chaos runs: the next `n` commits fail as they do when the
    /// disk is full or failing (`SQLITE_IOERR`) or the server goes away at COMMIT: their writes
    /// have run, the transaction is rolled back, and every write it held is answered with the
    /// commit failure. Nothing else changes; the commit after those succeeds again.
    pub fn fail_next_commits(&self, n: usize) {
        self.failing_commits().store(n, Ordering::SeqCst);
    }

    /// How many of the commits `fail_next_commits` asked to fail have not failed yet.
    pub fn commits_left_to_fail(&self) -> usize {
        self.failing_commits().load(Ordering::SeqCst)
    }

    /// Runs `f` in a write transaction; returns its result once it is durably committed.
    /// If `f` fails, its own changes are rolled back and the rest of the group is unaffected.
    /// `f` may run twice (when another write of its group fails, or PostgreSQL asks for a retry):
    /// only its last run counts, so it must do nothing outside the database that a second run
    /// would repeat.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: WriteFn<T>,
    {
        match &*self.inner {
            Backend::Sqlite(sqlite) => {
                let (done, answer) = oneshot::channel();
                let op: WriteOp = Box::new(Write { f, span: tracing::Span::current(), result: None, counted: Vec::new(), done });
                sqlite.writes.send(op).await.map_err(|_| StoreError::WriterGone)?;
                answer.await.map_err(|_| StoreError::WriterGone)?
            }
            Backend::Postgres(pg) => {
                let (pg, span) = (pg.clone(), tracing::Span::current());
                tokio::task::spawn_blocking(move || span.in_scope(|| pg.write_blocking(f)))
                    .await
                    .map_err(|e| StoreError::Task(e.to_string()))?
            }
        }
    }

    /// A pushed delivery on PostgreSQL, applied with the others waiting in one call and one
    /// transaction (`push`: the server-side function of migration V10), natively async; durably
    /// committed when it answers. SQLite runs the push
    /// path in its writer's group instead (`write`, the engine's `merge_point::accept_push`):
    /// on SQLite this answers an error and writes nothing.
    pub async fn push_in_one_call(&self, call: push::PushCall<'_>) -> Result<push::Pushed, StoreError> {
        match &*self.inner {
            Backend::Sqlite(_) => {
                Err(StoreError::Task("on SQLite a push is a write of the writer's group (merge_point::accept_push)".into()))
            }
            Backend::Postgres(pg) => pg.push(&call).await,
        }
    }

    /// Deliveries applied as one group in one call now, as the pusher applies those waiting
    /// together (`push_in_one_call`), without its queue: what it did with each, in the order
    /// given (a test's or a benchmark's group of a chosen make-up). PostgreSQL only, as
    /// `push_in_one_call`.
    pub async fn push_group_in_one_call(&self, calls: &[push::PushCall<'_>]) -> Result<Vec<push::Pushed>, StoreError> {
        match &*self.inner {
            Backend::Sqlite(_) => {
                Err(StoreError::Task("on SQLite a push is a write of the writer's group (merge_point::accept_push)".into()))
            }
            Backend::Postgres(pg) => pg.push_group(calls).await,
        }
    }

    /// Runs `f` on a read-only connection, off the async threads. Readers see committed data
    /// and never block the writer.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Db) -> sql::Result<T> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.read_blocking(f)).await.map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// `read`, on the calling thread (which must not be one of the runtime's async threads).
    pub fn read_blocking<T>(&self, f: impl FnOnce(&dyn Db) -> sql::Result<T>) -> Result<T, StoreError> {
        match &*self.inner {
            Backend::Sqlite(sqlite) => sqlite.read_blocking(f),
            Backend::Postgres(pg) => pg.read_blocking(f),
        }
    }

    /// Stops the writer once this is the last handle, after the writes already queued, and
    /// waits for it. Returns false (and lets the writer stop with the last handle) otherwise.
    pub fn close(self) -> bool {
        let handle = match &*self.inner {
            Backend::Sqlite(sqlite) => sqlite.writer_thread.lock().unwrap().take(),
            Backend::Postgres(_) => None,
        };
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => {
                drop(inner);
                if let Some(handle) = handle {
                    let _ = handle.join();
                }
                true
            }
            Err(_) => false,
        }
    }
}

impl Sqlite {
    fn read_blocking<T>(&self, f: impl FnOnce(&dyn Db) -> sql::Result<T>) -> Result<T, StoreError> {
        let conn = self.readers.lock().unwrap().pop();
        let conn = match conn {
            Some(conn) => conn,
            None => {
                let conn = Connection::open_with_flags(&self.path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
                conn.busy_timeout(Duration::from_secs(5))?;
                fold::register(&conn)?;
                keep_plans(&conn)?;
                conn
            }
        };
        let result = f(&conn);
        let mut readers = self.readers.lock().unwrap();
        if readers.len() < READERS_KEPT {
            readers.push(conn);
        }
        Ok(result?)
    }
}

/// Prepared statements kept per connection. rusqlite keeps 16; the writer alone runs more than
/// that in turn (the push path's, the dispatcher's, the scheduler's), and a statement pushed out
/// is compiled again at its next use (the jobs' upsert with its triggers is the costliest).
const STATEMENTS_KEPT: usize = 128;

/// A connection's compiled statements, kept and run as compiled: `STATEMENTS_KEPT` of them, and
/// SQLite's query-planner stability guarantee, without which a statement whose `LIMIT` is a
/// parameter (the dispatcher's claim, the scheduler's due jobs, every page of a list) is compiled
/// again at every run (SQLite lets the bound value choose the plan: `sqlite3ExprIsInteger` marks
/// the parameter, binding it expires the statement; 2% of the writer's samples at 64 connections).
fn keep_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(5))?;
    fold::register(conn)?;
    keep_plans(conn)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL in WAL mode: every COMMIT syncs the log, so a 200 means the delivery is on disk.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Each write runs under its own savepoint; with the default (a temp file) SQLite copies the
    // pages a savepoint changes to disk. In memory instead: the same durability (the WAL and its
    // fsync are untouched), a third of the bytes written per delivery.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -16384)?; // 16 MiB of page cache for the writer
                                                     // Checkpoint every 8,192 WAL pages (32 MiB at 4 KiB) rather than SQLite's 1,000: a delivery
                                                     // dirties 5-6 pages, so the default checkpointed (copying pages back and syncing the database
                                                     // file, on the writer's thread) every ~170 deliveries. Measured with loadgen, alternating
                                                     // runs: +17-19% deliveries/s at 16 and 64 connections. The WAL file is cut back to 64 MiB
                                                     // after a checkpoint if a long read ever let it grow past that.
                                                     // (The writer's automatic checkpoint is then turned off by its `Checkpointer`, which runs
                                                     // them on a thread of its own; 8,192 stays if that thread cannot start.)
    conn.pragma_update(None, "wal_autocheckpoint", 8192)?;
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    Ok(())
}

fn run_writer(conn: Connection, path: &Path, mut queue: mpsc::Receiver<WriteOp>, failing_commits: Arc<AtomicUsize>) {
    let checkpoints = Checkpointer::start(&conn, path);
    let mut group: Vec<WriteOp> = Vec::with_capacity(MAX_GROUP);
    while let Some(first) = queue.blocking_recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(op) => group.push(op),
                Err(_) => break,
            }
        }
        if let Some(checkpoints) = &checkpoints {
            checkpoints.catch_up(&conn);
        }
        commit_group(&conn, &mut group, &failing_commits);
        if let Some(checkpoints) = &checkpoints {
            checkpoints.committed();
        }
    }
    if let Some(checkpoints) = checkpoints {
        checkpoints.stop();
    }
    tracing::debug!("database writer stopped");
}

/// WAL pages past which the writer finishes a checkpoint itself (32 MiB at 4 KiB pages).
const WAL_PAGES_BEFORE_CATCH_UP: i64 = 8192;

/// The checkpoints, off the writer's thread. SQLite's automatic checkpoint runs inside the COMMIT
/// that crosses `wal_autocheckpoint` pages: that group (and every write queued behind it) waits
/// while the checkpoint copies the WAL's pages into the database file and syncs it. Here a thread
/// of its own, on a connection of its own, runs a PASSIVE checkpoint after commits (a few at a
/// time), concurrently with the writer; a busy writer keeps adding frames, so the WAL starts over
/// only when a checkpoint has copied all of them: when the WAL passes
/// `WAL_PAGES_BEFORE_CATCH_UP`, the writer, between two groups, checkpoints the few pages the
/// thread has not copied yet, and its next group starts the WAL over.
struct Checkpointer {
    wake: std::sync::mpsc::SyncSender<()>,
    catch_up: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// Turns the writer's automatic checkpoint off and starts the thread; `None` (the automatic
    /// checkpoint kept) if its connection cannot be opened.
    fn start(writer: &Connection, path: &Path) -> Option<Checkpointer> {
        let conn = Connection::open(path).ok()?;
        conn.busy_timeout(Duration::from_secs(5)).ok()?;
        conn.pragma_update(None, "synchronous", "FULL").ok()?;
        let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
        let catch_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("nevermiss-db-checkpoint".into())
            .spawn({
                let catch_up = catch_up.clone();
                move || {
                    while woken.recv().is_ok() {
                        // Commits a few milliseconds apart share one checkpoint.
                        std::thread::sleep(Duration::from_millis(20));
                        while woken.try_recv().is_ok() {}
                        let began = std::time::Instant::now();
                        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))) {
                            Ok((log, copied)) => {
                                tracing::debug!(target: "nevermiss_store::writer", log, copied,
                                    checkpoint_us = began.elapsed().as_micros() as u64, "checkpointed");
                                if log >= WAL_PAGES_BEFORE_CATCH_UP {
                                    catch_up.store(true, Ordering::Release);
                                }
                            }
                            Err(e) => tracing::debug!(error = %e, "checkpoint failed; the next one tries again"),
                        }
                    }
                }
            })
            .ok()?;
        let checkpoints = Checkpointer { wake, catch_up, thread };
        if writer.pragma_update(None, "wal_autocheckpoint", 0).is_err() {
            checkpoints.stop();
            return None;
        }
        Some(checkpoints)
    }

    /// After a group's commit: the thread checkpoints soon.
    fn committed(&self) {
        let _ = self.wake.try_send(());
    }

    /// Before a group: when the WAL has grown past its bound, the writer checkpoints what the
    /// thread has not copied yet (its next write then starts the WAL over).
    fn catch_up(&self, writer: &Connection) {
        if self.catch_up.swap(false, Ordering::AcqRel) {
            let began = std::time::Instant::now();
            let done = writer.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)));
            tracing::debug!(target: "nevermiss_store::writer", ?done, catch_up_us = began.elapsed().as_micros() as u64, "caught up");
        }
    }

    fn stop(self) {
        drop(self.wake);
        let _ = self.thread.join();
    }
}

fn commit_group(conn: &Connection, group: &mut Vec<WriteOp>, failing_commits: &AtomicUsize) {
    let committed = run_group(conn, group, failing_commits).map_err(|e| e.to_string());
    if let Err(reason) = &committed {
        tracing::error!(error = %reason, "commit failed; the group's writes are answered as failed");
        let _ = conn.execute_batch("ROLLBACK");
    }
    for op in group.drain(..) {
        op.finish(committed.clone());
    }
}

/// Runs the group's writes in one transaction and commits it: first without savepoints; if a
/// write fails, rolled back and run again with a savepoint around each write.
fn run_group(conn: &Connection, group: &mut [WriteOp], failing_commits: &AtomicUsize) -> sql::Result<()> {
    let began = std::time::Instant::now();
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let mut all_ok = true;
    for op in group.iter_mut() {
        if !op.run(conn) {
            all_ok = false;
            break;
        }
    }
    if !all_ok {
        conn.prepare_cached("ROLLBACK")?.execute([])?;
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        for op in group.iter_mut() {
            run_under_savepoint(conn, op.as_mut())?;
        }
    }
    counters::add_all(conn, group.iter().flat_map(|op| op.counted().iter().cloned()), crate::job::now_ms(), 0)?;
    if failing_commits.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some("disk I/O error (injected by Store::fail_next_commits)".into()),
        )
        .into());
    }
    let ran = began.elapsed();
    conn.prepare_cached("COMMIT")?.execute([])?;
    // Where a group's time goes (`RUST_LOG=nevermiss_store::writer=debug`): its writes' statements,
    // then the COMMIT (the WAL's frames and its fsync; the checkpoints are the `Checkpointer`'s,
    // logged under the same target).
    tracing::debug!(target: "nevermiss_store::writer", writes = group.len(), all_ok, run_us = ran.as_micros() as u64,
        commit_us = (began.elapsed() - ran).as_micros() as u64, "group committed");
    Ok(())
}

/// Runs one write under its own savepoint, undoing its changes (and its counter additions) if it
/// fails; the failure stays in the write's result.
fn run_under_savepoint(conn: &Connection, op: &mut dyn PendingWrite) -> sql::Result<()> {
    conn.prepare_cached("SAVEPOINT op")?.execute([])?;
    if !op.run(conn) {
        conn.prepare_cached("ROLLBACK TO op")?.execute([])?;
    }
    conn.prepare_cached("RELEASE op")?.execute([])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobKey;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A statement whose `LIMIT` is a parameter runs as compiled on the store's connections; on a
    /// plain connection SQLite compiles it again each time the parameter is bound.
    #[test]
    fn a_kept_statement_with_a_limit_parameter_is_not_compiled_again() {
        let recompiled = |conn: &Connection| {
            conn.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2), (3)").unwrap();
            for limit in [1, 2, 3, 1] {
                let mut statement = conn.prepare_cached("SELECT x FROM t ORDER BY x LIMIT ?1").unwrap();
                assert_eq!(statement.query_map([limit], |r| r.get::<_, i64>(0)).unwrap().count(), limit as usize);
            }
            conn.prepare_cached("SELECT x FROM t ORDER BY x LIMIT ?1").unwrap().get_status(rusqlite::StatementStatus::RePrepare)
        };
        assert!(recompiled(&Connection::open_in_memory().unwrap()) >= 3, "the control: SQLite's default recompiles");
        let kept = Connection::open_in_memory().unwrap();
        keep_plans(&kept).unwrap();
        assert_eq!(recompiled(&kept), 0);
    }

    fn counter(conn: &dyn Db, counter: Counter) -> i64 {
        counters::all(conn).unwrap().get(&counter).copied().unwrap_or(0)
    }

    /// A batch bound as one JSON parameter (`sql::id_in_json`, `sql::job_key_in_json`) reaches
    /// every row it names and no other: keys with quotes, a backslash and letters beyond ASCII, a
    /// key twice, keys of no job; rows settled once, counted per channel.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_in_one_json_parameter_reaches_exactly_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).unwrap();
        const NAMES: [&str; 3] = ["plain", "it's \"quoted\" \\ here", "über/ジョブ"];
        let ids = store
            .write(|tx| {
                let mut ids = Vec::new();
                for (n, name) in NAMES.iter().enumerate() {
                    tx.execute(
                        "INSERT INTO jobs (provider, job_id, state, rank, created_at, updated_at, finished_at, terminal_source)
                         VALUES ('generic', $1, 'succeeded', 3, $2, $2, $2, 'push')",
                        sql::params![*name, n as i64],
                    )?;
                    for channel in ["desktop", "ops"] {
                        ids.push(tx.query_row(
                            "INSERT INTO outbox (channel, provider, job_id, kind, created_at, next_attempt_at)
                             VALUES ($1, 'generic', $2, 'terminal', 0, 0) RETURNING id",
                            sql::params![channel, *name],
                            |r| r.get::<_, i64>("id"),
                        )?);
                    }
                }
                Ok(ids)
            })
            .await
            .unwrap();
        let (settled, again, found) = store
            .write(move |tx| {
                let settled = outbox::settle(tx, &[ids[2], ids[3], ids[5], ids[3], 999_999], 7, ChannelTally::Delivered)?;
                let again = outbox::settle(tx, &[ids[2], ids[3]], 8, ChannelTally::Delivered)?;
                jobs::mark_notified(tx, &[("generic", NAMES[1]), ("generic", NAMES[2]), ("generic", "absent"), ("other", "plain")], 42)?;
                let found =
                    jobs::jobs_of(tx, &[("generic", NAMES[1]), ("generic", NAMES[2]), ("generic", NAMES[2]), ("generic", "absent")])?;
                Ok((settled, again, found))
            })
            .await
            .unwrap();
        assert_eq!((settled, again), (3, 0));
        let mut named: Vec<(String, bool)> = found.iter().map(|j| (j.job_id.clone(), j.notified_at.is_some())).collect();
        named.sort();
        assert_eq!(named, [(NAMES[1].to_owned(), true), (NAMES[2].to_owned(), true)]);
        let plain = store.read(|db| jobs::job(db, &JobKey::new("generic", "plain"))).await.unwrap().unwrap();
        assert_eq!(plain.notified_at, None);
        let tallies = store.read(|db| db.rows("SELECT name, value FROM counters ORDER BY name", &[])).await.unwrap();
        let tallies: Vec<(String, i64)> = tallies.iter().map(|r| (r.get("name").unwrap(), r.get("value").unwrap())).collect();
        assert!(tallies.contains(&("notifications_delivered".to_owned(), 3)), "{tallies:?}");
        assert!(tallies.contains(&("channel.desktop.delivered".to_owned(), 1)), "{tallies:?}");
        assert!(tallies.contains(&("channel.ops.delivered".to_owned(), 2)), "{tallies:?}");
    }

    /// Twenty writes queued behind a slow one share a group; the one that fails after changing
    /// the database takes only its own changes (and counter additions) back, the others commit,
    /// each once, though the group ran twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_undoes_only_itself_and_its_group_commits_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).unwrap();
        store.write(|c| c.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY)")).await.unwrap();

        // Holds the writer so that what follows queues up into one group.
        let slow = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .write(|_| {
                        std::thread::sleep(Duration::from_millis(200));
                        Ok(())
                    })
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;

        let runs = Arc::new(AtomicUsize::new(0));
        let mut writes = Vec::new();
        for k in 0..20i64 {
            let store = store.clone();
            let runs = runs.clone();
            writes.push(tokio::spawn(async move {
                store
                    .write(move |c| {
                        runs.fetch_add(1, Ordering::SeqCst);
                        c.execute("INSERT INTO t (k) VALUES ($1)", [k])?;
                        c.count(Counter::Applied, 1);
                        if k == 7 {
                            // Changed the database and counted, then failed.
                            c.execute("INSERT INTO t (k) VALUES ($1)", [k])?;
                        }
                        Ok(k)
                    })
                    .await
            }));
        }
        slow.await.unwrap().unwrap();
        let mut failed = Vec::new();
        for (k, write) in writes.into_iter().enumerate() {
            match write.await.unwrap() {
                Ok(value) => assert_eq!(value, k as i64),
                Err(StoreError::Db(_)) => failed.push(k),
                Err(e) => panic!("write {k} failed for another reason: {e}"),
            }
        }
        assert_eq!(failed, vec![7], "only the failing write fails");

        let (keys, counted) = store
            .read(|c| {
                let keys: Vec<i64> =
                    c.prepare_cached("SELECT k FROM t ORDER BY k")?.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
                Ok((keys, counter(c, Counter::Applied)))
            })
            .await
            .unwrap();
        let expected: Vec<i64> = (0..20).filter(|&k| k != 7).collect();
        assert_eq!(keys, expected, "the failed write's row is gone, every other write's row is there");
        assert_eq!(counted, 19, "counter additions of the failed write, and of the first run, are not kept");
        // The failure made the group run again (with savepoints): more runs than writes.
        assert!(runs.load(Ordering::SeqCst) > 20, "the group was not run a second time");
    }

    /// The writer's automatic checkpoint is off (the `Checkpointer` runs them): 100 MiB of WAL
    /// frames written through the writer leave a WAL file near its bound of
    /// `WAL_PAGES_BEFORE_CATCH_UP` pages, not 100 MiB, and every write is there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_checkpoints_off_the_writers_thread_keep_the_wal_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = Store::open(&path).unwrap();
        store.write(|c| c.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, n INTEGER NOT NULL, b BLOB NOT NULL)")).await.unwrap();
        // 400 writes of a 256 KiB blob over four rows: ~26,000 WAL frames, a database of ~1 MiB.
        for n in 0..400i64 {
            store
                .write(move |c| c.execute("INSERT OR REPLACE INTO t (k, n, b) VALUES ($1, $2, randomblob(262144))", [n % 4, n]))
                .await
                .unwrap();
        }
        let wal = std::fs::metadata(dir.path().join("t.db-wal")).unwrap().len();
        let bound = (WAL_PAGES_BEFORE_CATCH_UP as u64 + 2048) * 4096;
        assert!(wal < bound, "the WAL grew to {wal} bytes (bound {bound})");
        let last: Vec<i64> = store.read(|c| c.rows("SELECT n FROM t ORDER BY k", &[])?.iter().map(|r| r.get(0)).collect()).await.unwrap();
        assert_eq!(last, vec![396, 397, 398, 399]);
    }

    /// With no failure a group runs once: each write's closure is called exactly once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_run_once_when_none_fails() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).unwrap();
        store.write(|c| c.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY)")).await.unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let writes: Vec<_> = (0..50i64)
            .map(|k| {
                let store = store.clone();
                let runs = runs.clone();
                tokio::spawn(async move {
                    store
                        .write(move |c| {
                            runs.fetch_add(1, Ordering::SeqCst);
                            c.execute("INSERT INTO t (k) VALUES ($1)", [k])
                        })
                        .await
                })
            })
            .collect();
        for write in writes {
            write.await.unwrap().unwrap();
        }
        assert_eq!(runs.load(Ordering::SeqCst), 50);
        let rows: i64 = store.read(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))).await.unwrap();
        assert_eq!(rows, 50);
    }
}

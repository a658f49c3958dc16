//! The SQLite store: one file, WAL, durable commits, one writer thread that commits concurrent
//! writes in groups (one fsync for many), and a pool of readers that never block it.
//!
//! A write is a closure run inside the writer's transaction under its own savepoint; its result
//! is handed back only after the group's COMMIT has reached the disk.

mod migrations;
mod pending_counters;
pub mod queries;

use std::path::{Path, PathBuf};
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
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("the write was not committed (the database is unavailable)")]
    WriterGone,
    #[error("cannot open the database at {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database task failed: {0}")]
    Task(String),
}

type Completion = Box<dyn FnOnce(Result<(), String>) + Send>;
type WriteOp = Box<dyn FnOnce(&Connection) -> (bool, Completion) + Send>;

#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writes: mpsc::Sender<WriteOp>,
    readers: Mutex<Vec<Connection>>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Store {
    /// Opens (creating if needed) the database file and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let open_err = |source| StoreError::Open {
            path: path.to_owned(),
            source,
        };
        let mut conn = Connection::open(path).map_err(open_err)?;
        configure(&conn).map_err(open_err)?;
        migrations::migrate(&mut conn).map_err(open_err)?;

        let (writes, queue) = mpsc::channel(QUEUE);
        let writer_thread = std::thread::Builder::new()
            .name("nevermiss-db-writer".into())
            .spawn(move || run_writer(conn, queue))
            .map_err(|e| StoreError::Task(e.to_string()))?;
        Ok(Store {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                writes,
                readers: Mutex::new(Vec::new()),
                writer_thread: Mutex::new(Some(writer_thread)),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `f` in the writer's transaction; returns its result once it is durably committed.
    /// If `f` fails, its own changes are rolled back and the rest of the group is unaffected.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (done, answer) = oneshot::channel();
        let op: WriteOp = Box::new(move |conn| {
            let result = f(conn);
            let ok = result.is_ok();
            let completion: Completion = Box::new(move |committed| {
                let outcome = match (result, committed) {
                    (Ok(value), Ok(())) => Ok(value),
                    (Err(e), _) => Err(StoreError::Sqlite(e)),
                    (Ok(_), Err(e)) => Err(StoreError::Task(format!("commit failed: {e}"))),
                };
                let _ = done.send(outcome);
            });
            (ok, completion)
        });
        self.inner
            .writes
            .send(op)
            .await
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Runs `f` on a read-only connection, off the async threads. Readers see committed data
    /// and never block the writer (WAL).
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.read_blocking(f))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    pub fn read_blocking<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let conn = self.inner.readers.lock().unwrap().pop();
        let conn = match conn {
            Some(conn) => conn,
            None => {
                let conn = Connection::open_with_flags(
                    &self.inner.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                conn.busy_timeout(Duration::from_secs(5))?;
                conn
            }
        };
        let result = f(&conn);
        let mut readers = self.inner.readers.lock().unwrap();
        if readers.len() < READERS_KEPT {
            readers.push(conn);
        }
        Ok(result?)
    }

    /// Stops the writer once this is the last handle, after the writes already queued, and
    /// waits for it. Returns false (and lets the writer stop with the last handle) otherwise.
    pub fn close(self) -> bool {
        let handle = self.inner.writer_thread.lock().unwrap().take();
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

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL in WAL mode: every COMMIT syncs the log, so a 200 means the delivery is on disk.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Each write runs under its own savepoint; with the default (a temp file) SQLite copies the
    // pages a savepoint changes to disk. In memory instead: the same durability (the WAL and its
    // fsync are untouched), a third of the bytes written per delivery.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -16384)?; // 16 MiB of page cache for the writer
    Ok(())
}

fn run_writer(conn: Connection, mut queue: mpsc::Receiver<WriteOp>) {
    pending_counters::enable();
    let mut group: Vec<WriteOp> = Vec::with_capacity(MAX_GROUP);
    while let Some(first) = queue.blocking_recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(op) => group.push(op),
                Err(_) => break,
            }
        }
        commit_group(&conn, &mut group);
    }
    tracing::debug!("database writer stopped");
}

fn commit_group(conn: &Connection, group: &mut Vec<WriteOp>) {
    let mut completions = Vec::with_capacity(group.len());
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let reason = e.to_string();
        tracing::error!(error = %reason, "cannot begin a write transaction");
        // Never run outside a transaction: dropping the writes answers each of them with an error.
        group.clear();
        return;
    }
    for op in group.drain(..) {
        if let Err(e) = conn.execute_batch("SAVEPOINT op") {
            tracing::error!(error = %e, "cannot open a savepoint; the write is answered as failed");
            drop(op);
            continue;
        }
        let counted_before = pending_counters::mark();
        let (ok, completion) = op(conn);
        let end = if ok {
            conn.execute_batch("RELEASE op")
        } else {
            pending_counters::rewind(counted_before);
            conn.execute_batch("ROLLBACK TO op; RELEASE op")
        };
        if let Err(e) = end {
            tracing::error!(error = %e, "savepoint failed");
        }
        completions.push(completion);
    }
    let committed = pending_counters::flush(conn)
        .and_then(|()| conn.execute_batch("COMMIT"))
        .map_err(|e| e.to_string());
    if let Err(reason) = &committed {
        tracing::error!(error = %reason, "commit failed; the group's writes are answered as failed");
        let _ = conn.execute_batch("ROLLBACK");
    }
    for completion in completions {
        completion(committed.clone());
    }
}


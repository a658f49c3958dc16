//! `store::sqlite_memory`: once configured, SQLite takes its memory from the program's global
//! allocator. This binary's allocator records what is asked of it: the largest block, and the
//! bytes live. A 32 MiB blob made and measured inside SQLite (never copied out to Rust) must show
//! up there, and every block SQLite frees must be given back with the size it was taken with
//! (the live bytes come back to where they were once the connection is closed).
//!
//! One test in a binary of its own: SQLite takes the configuration only before its first use in
//! the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use nevermiss_store::sqlite_memory::use_global_allocator;
use rusqlite::Connection;

struct Recording;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicIsize = AtomicIsize::new(0);

fn taken(size: usize) {
    LARGEST.fetch_max(size, Ordering::Relaxed);
    LIVE.fetch_add(size as isize, Ordering::Relaxed);
}

fn given_back(size: usize) {
    LIVE.fetch_sub(size as isize, Ordering::Relaxed);
}

// SAFETY: every call is System's, with the same layout; the counters only watch.
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let block = System.alloc(layout);
        if !block.is_null() {
            taken(layout.size());
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        given_back(layout.size());
        System.dealloc(block, layout)
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = System.realloc(block, layout, new_size);
        if !moved.is_null() {
            given_back(layout.size());
            taken(new_size);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Recording = Recording;

const BLOB: i64 = 32 << 20;

#[test]
fn sqlite_takes_its_memory_from_the_global_allocator_and_gives_every_block_back() {
    // SAFETY: the first SQLite call of this process, on the only test's thread.
    unsafe { use_global_allocator() }.expect("SQLite takes the configuration before its first use");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    // SQLite's first use (its global state), then the level the test comes back to.
    drop(Connection::open(&path).unwrap());
    let live_before = LIVE.load(Ordering::Relaxed);
    assert!(LARGEST.load(Ordering::Relaxed) < BLOB as usize);

    let db = Connection::open(&path).unwrap();
    let length: i64 = db.query_row("SELECT length(randomblob(?1))", [BLOB], |row| row.get(0)).unwrap();
    assert_eq!(length, BLOB);
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest >= BLOB as usize,
        "SQLite's blob of {BLOB} bytes came from elsewhere: the largest block asked of the global allocator was {largest}"
    );

    // Blocks grown in place or moved (a string built by concatenation, xRealloc), pages, an index.
    let text: i64 = db
        .query_row(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
             SELECT length(group_concat(printf('%08d', i), '')) FROM n",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(text, 800_000);
    db.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
         CREATE INDEX t_body ON t (body);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
         INSERT INTO t (body) SELECT hex(randomblob(64)) FROM n;",
    )
    .unwrap();
    let check: String = db.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
    assert_eq!(check, "ok");
    let rows: i64 = db.query_row("SELECT count(*) FROM t WHERE body > ''", [], |row| row.get(0)).unwrap();
    assert_eq!(rows, 20_000);
    drop(db);

    let drift = LIVE.load(Ordering::Relaxed) - live_before;
    assert!(drift.abs() < 64 << 10, "{drift} bytes not given back (or given back twice) once the connection closed");

    // In use now: SQLite refuses to be configured again, and says so.
    let refused = unsafe { use_global_allocator() }.expect_err("SQLite is in use");
    assert!(refused.to_string().contains("SQLITE_CONFIG_MALLOC"), "{refused}");
}

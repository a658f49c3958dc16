//! `store::sqlite_page_cache`: once installed, SQLite's page cache passes on only the truncations
//! that may drop a page. Commits whose inserts split pages (random keys, as the dedupe index's)
//! skip their truncation, and what every connection reads stays what was written; a transaction
//! that grew the file and was rolled back has its truncation passed on (its pages past the end are
//! dropped: a page kept there would be read back, stale, once the file grows again).
//!
//! One binary of its own: SQLite takes the configuration only before its first use in the process.

use nevermiss_store::sqlite_page_cache::{skip_needless_truncations, truncations};
use rusqlite::{params, Connection};

fn open(path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "cache_size", -16384).unwrap();
    conn
}

/// A key that lands anywhere in the index (a splitmix of `n`).
fn key(n: u64) -> String {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("{:016x}-delivery", z ^ (z >> 31))
}

fn sum_of(conn: &Connection) -> (i64, i64) {
    conn.query_row("SELECT count(*), coalesce(sum(length(body) + n), 0) FROM t", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap()
}

#[test]
fn only_truncations_that_may_drop_a_page_are_passed_on() {
    // SAFETY: first thing in this binary's one test; no connection opened yet.
    unsafe { skip_needless_truncations() }.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let writer = open(&path);
    writer
        .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, n INTEGER NOT NULL, body BLOB NOT NULL)")
        .unwrap();

    // Groups of inserts at random places of the index, each group one commit.
    let (mut rows, mut sum) = (0i64, 0i64);
    let before = truncations();
    for group in 0..400u64 {
        writer.execute_batch("BEGIN IMMEDIATE").unwrap();
        for i in 0..20u64 {
            let n = (group * 20 + i) as i64;
            let body = vec![b'x'; 200 + (n % 50) as usize];
            writer.execute("INSERT INTO t (k, n, body) VALUES (?1, ?2, ?3)", params![key(group * 20 + i), n, body]).unwrap();
            rows += 1;
            sum += body.len() as i64 + n;
        }
        writer.execute_batch("COMMIT").unwrap();
    }
    let after = truncations();
    assert!(after.0 - before.0 >= 300, "commits after page splits skip their truncation: {before:?} -> {after:?}");
    assert_eq!(sum_of(&writer), (rows, sum));

    // A transaction that grows the file by far, rolled back: its pages past the end are dropped.
    let pages: i64 = writer.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let passed = truncations().1;
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    for n in 0..2_000u64 {
        writer.execute("INSERT INTO t (k, n, body) VALUES (?1, 0, zeroblob(3000))", params![format!("rolled back {n}")]).unwrap();
    }
    writer.execute_batch("ROLLBACK").unwrap();
    assert!(truncations().1 > passed, "the rollback's truncation is passed on");
    assert_eq!(writer.query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0)).unwrap(), pages);

    // The file grows again over the same page numbers, with other content: each connection reads
    // what was written, the writer (its cache) as a fresh connection (the file).
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    for n in 0..2_000u64 {
        let body = vec![b'y'; 2_500];
        writer.execute("INSERT INTO t (k, n, body) VALUES (?1, ?2, ?3)", params![format!("kept {n}"), n as i64, body]).unwrap();
        rows += 1;
        sum += 2_500 + n as i64;
    }
    writer.execute_batch("COMMIT").unwrap();
    assert_eq!(sum_of(&writer), (rows, sum));
    let reader = open(&path);
    assert_eq!(sum_of(&reader), (rows, sum));
    let bytes_of = |conn: &Connection| -> Vec<u8> {
        conn.query_row("SELECT group_concat(hex(substr(body, 1, 4)), '') FROM t WHERE k LIKE 'kept %'", [], |r| r.get::<_, String>(0))
            .unwrap()
            .into_bytes()
    };
    assert_eq!(bytes_of(&writer), bytes_of(&reader));
    let check: String = writer.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
}

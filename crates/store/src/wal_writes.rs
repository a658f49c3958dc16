//! The WAL's frames of a commit written to the file in a few system calls, not two per frame.
//!
//! SQLite writes each frame of a commit with two `pwrite` calls, its 24-byte header and its page,
//! so a group commit of 100 pages is 200 calls, each of which takes the file's lock, looks up and
//! dirties one or two page-cache folios (a 4,120-byte frame straddles two): 14% of the writer
//! thread (BENCHMARKS.md, "Session 20"). This is a VFS of SQLite's own kind, a shim over the
//! default one (`unix` on Linux), that keeps the frames SQLite appends to a WAL file in a buffer
//! and writes them out in one `pwrite` (of up to 120 KiB: see `MOST_PER_WRITE`) when the commit frame is complete, before SQLite syncs the
//! file and publishes the commit in the WAL index: what readers see and what reaches the disk is
//! unchanged, only the number of calls.
//!
//! The buffer is written out before anything that must see the file as SQLite wrote it: a write
//! elsewhere than at its end (SQLite rewriting a frame of the same transaction), a read, a sync,
//! the file's size, a truncation, a file control, the close; and once it holds 1 MiB (a
//! transaction that spills its cache writes frames before its commit). A failed write out fails
//! the call that caused it, so SQLite rolls the transaction back as for any failed write. Files
//! other than a WAL (the database, its journals) are the default VFS's own, untouched: the shim
//! swaps the methods of WAL files only, and its file object is the default VFS's with a few more
//! bytes after it (the WAL file's own methods and buffer).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The VFS's name, for `Connection::open_with_flags_and_vfs`.
pub const VFS: &str = "nevermiss-wal-writes";
const VFS_NAME: &CStr = c"nevermiss-wal-writes";

/// A WAL frame's header (`WAL_FRAME_HDRSIZE` in SQLite): its bytes 4 to 8 are the database's
/// size in pages after a commit frame, 0 in the others.
const FRAME_HEADER: usize = 24;
/// The buffer is written out once it holds this much.
const MOST_BUFFERED: usize = 1 << 20;
/// The most one write of the default VFS takes: `unix`'s `seekAndWrite` masks a write's length
/// with 0x1ffff (SQLite never writes more than a 64 KiB page and its header), so a longer one
/// would be cut short (and reported as SQLITE_FULL).
const MOST_PER_WRITE: usize = 120 << 10;

/// The default VFS, which the shim's files are opened by.
static DEFAULT_VFS: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(null_mut());

/// Registers the VFS (once in the process; not as the default) and returns its name. `None` if
/// SQLite has no default VFS or refused the registration: the caller opens its connections with
/// the default VFS then.
pub fn vfs() -> Option<&'static str> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let registered = *REGISTERED.get_or_init(|| unsafe { register() });
    registered.then_some(VFS)
}

unsafe fn register() -> bool {
    // `sqlite3_vfs_find` initializes SQLite first.
    let default = ffi::sqlite3_vfs_find(std::ptr::null());
    if default.is_null() {
        return false;
    }
    DEFAULT_VFS.store(default, Ordering::Release);
    let mut shim = *default;
    shim.szOsFile = extra_offset(&*default) as c_int + std::mem::size_of::<Extra>() as c_int;
    shim.zName = VFS_NAME.as_ptr();
    shim.pNext = null_mut();
    shim.xOpen = Some(x_open);
    // SQLite keeps the pointer for the life of the process.
    let shim = Box::leak(Box::new(shim));
    ffi::sqlite3_vfs_register(shim, 0) == ffi::SQLITE_OK
}

/// Where a file object's extra bytes start: after the default VFS's own, 8-aligned.
fn extra_offset(default: &ffi::sqlite3_vfs) -> usize {
    (default.szOsFile as usize).next_multiple_of(8)
}

/// What a WAL file carries after the default VFS's file object.
#[repr(C)]
struct Extra {
    /// The default VFS's methods for this file (its own `pMethods`, replaced by `WAL_METHODS`).
    methods: *const ffi::sqlite3_io_methods,
    buffer: *mut Buffer,
}

/// Bytes SQLite wrote at `start`, not yet in the file.
#[derive(Default)]
struct Buffer {
    start: i64,
    bytes: Vec<u8>,
    /// The header just buffered was a commit frame's: its page is the commit's last write.
    commit_page_next: bool,
}

unsafe extern "C" fn x_open(
    _shim: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let default = DEFAULT_VFS.load(Ordering::Acquire);
    let Some(open) = (*default).xOpen else { return ffi::SQLITE_CANTOPEN };
    let rc = open(default, name, file, flags, out_flags);
    if rc != ffi::SQLITE_OK || flags & ffi::SQLITE_OPEN_WAL == 0 || (*file).pMethods.is_null() {
        return rc;
    }
    extra(file).write(Extra { methods: (*file).pMethods, buffer: Box::into_raw(Box::default()) });
    (*file).pMethods = &WAL_METHODS;
    rc
}

unsafe fn extra(file: *mut ffi::sqlite3_file) -> *mut Extra {
    file.cast::<u8>().add(extra_offset(&*DEFAULT_VFS.load(Ordering::Acquire))).cast()
}

/// The default VFS's methods of a WAL file.
unsafe fn methods<'a>(file: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    &*(*extra(file)).methods
}

unsafe fn buffer<'a>(file: *mut ffi::sqlite3_file) -> &'a mut Buffer {
    &mut *(*extra(file)).buffer
}

/// Writes the buffer out (emptied even when the write fails: SQLite fails the transaction).
unsafe fn write_out(file: *mut ffi::sqlite3_file) -> c_int {
    let buffer = buffer(file);
    if buffer.bytes.is_empty() {
        return ffi::SQLITE_OK;
    }
    let Some(write) = methods(file).xWrite else { return ffi::SQLITE_IOERR_WRITE };
    let mut rc = ffi::SQLITE_OK;
    let mut offset = buffer.start;
    for chunk in buffer.bytes.chunks(MOST_PER_WRITE) {
        rc = write(file, chunk.as_ptr().cast(), chunk.len() as c_int, offset);
        if rc != ffi::SQLITE_OK {
            break;
        }
        offset += chunk.len() as i64;
    }
    buffer.bytes.clear();
    buffer.commit_page_next = false;
    rc
}

unsafe extern "C" fn x_write(file: *mut ffi::sqlite3_file, data: *const c_void, amount: c_int, offset: i64) -> c_int {
    let Ok(length) = usize::try_from(amount) else { return ffi::SQLITE_IOERR_WRITE };
    let bytes = std::slice::from_raw_parts(data.cast::<u8>(), length);
    let buffer = buffer(file);
    let end = buffer.start + buffer.bytes.len() as i64;
    if !buffer.bytes.is_empty() && offset != end {
        let rc = write_out(file);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    let buffer = self::buffer(file);
    if buffer.bytes.is_empty() {
        buffer.start = offset;
    }
    buffer.bytes.extend_from_slice(bytes);
    let commit_page = std::mem::take(&mut buffer.commit_page_next);
    if length == FRAME_HEADER {
        buffer.commit_page_next = bytes[4..8] != [0, 0, 0, 0];
    }
    if commit_page || buffer.bytes.len() >= MOST_BUFFERED {
        return write_out(file);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_read(file: *mut ffi::sqlite3_file, data: *mut c_void, amount: c_int, offset: i64) -> c_int {
    let rc = write_out(file);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods(file).xRead {
        Some(read) => read(file, data, amount, offset),
        None => ffi::SQLITE_IOERR_READ,
    }
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let rc = write_out(file);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods(file).xSync {
        Some(sync) => sync(file, flags),
        None => ffi::SQLITE_IOERR_FSYNC,
    }
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    let rc = write_out(file);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods(file).xTruncate {
        Some(truncate) => truncate(file, size),
        None => ffi::SQLITE_IOERR_TRUNCATE,
    }
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    let rc = write_out(file);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods(file).xFileSize {
        Some(file_size) => file_size(file, size),
        None => ffi::SQLITE_IOERR_FSTAT,
    }
}

unsafe extern "C" fn x_file_control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    let rc = write_out(file);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods(file).xFileControl {
        Some(file_control) => file_control(file, op, arg),
        None => ffi::SQLITE_NOTFOUND,
    }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    let written = write_out(file);
    let methods = methods(file);
    drop(Box::from_raw((*extra(file)).buffer));
    // The default VFS's close expects its own methods in place (SQLite clears them after it).
    (*file).pMethods = methods;
    let closed = match methods.xClose {
        Some(close) => close(file),
        None => ffi::SQLITE_OK,
    };
    if written != ffi::SQLITE_OK {
        written
    } else {
        closed
    }
}

/// The rest are the default VFS's, as they are.
macro_rules! as_the_default {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*), $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> $ret {
            match methods(file).$method {
                Some(method) => method(file $(, $arg)*),
                None => $missing,
            }
        }
    };
}

as_the_default!(x_lock, xLock, (level: c_int), c_int, ffi::SQLITE_OK);
as_the_default!(x_unlock, xUnlock, (level: c_int), c_int, ffi::SQLITE_OK);
as_the_default!(x_check_reserved_lock, xCheckReservedLock, (out: *mut c_int), c_int, ffi::SQLITE_OK);
as_the_default!(x_sector_size, xSectorSize, (), c_int, 4096);
as_the_default!(x_device_characteristics, xDeviceCharacteristics, (), c_int, 0);
as_the_default!(x_shm_map, xShmMap, (page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void), c_int, ffi::SQLITE_IOERR_SHMMAP);
as_the_default!(x_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int), c_int, ffi::SQLITE_IOERR_SHMLOCK);
as_the_default!(x_shm_unmap, xShmUnmap, (delete: c_int), c_int, ffi::SQLITE_OK);
as_the_default!(x_unfetch, xUnfetch, (offset: i64, page: *mut c_void), c_int, ffi::SQLITE_OK);

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    if let Some(barrier) = methods(file).xShmBarrier {
        barrier(file)
    }
}

/// No memory map of a WAL file (SQLite maps only the database): the page is read instead.
unsafe extern "C" fn x_fetch(file: *mut ffi::sqlite3_file, offset: i64, amount: c_int, out: *mut *mut c_void) -> c_int {
    match methods(file).xFetch {
        Some(fetch) => {
            let rc = write_out(file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            fetch(file, offset, amount, out)
        }
        None => {
            *out = null_mut();
            ffi::SQLITE_OK
        }
    }
}

static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Connection, OpenFlags};

    fn open(path: &std::path::Path, shim: bool) -> Connection {
        let conn = if shim {
            Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs().expect("the VFS registers")).unwrap()
        } else {
            Connection::open(path).unwrap()
        };
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 0;").unwrap();
        conn
    }

    /// A SELECT of `n` random bodies of `bytes` bytes each (in hexadecimal).
    fn rows(n: i64, bytes: i64) -> String {
        format!("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) SELECT hex(randomblob({bytes})) FROM n")
    }

    fn wal_size(path: &std::path::Path) -> u64 {
        std::fs::metadata(path.with_extension("db-wal")).map(|m| m.len()).unwrap_or(0)
    }

    /// Each commit on the shim, read at once by a connection of the default VFS (from the WAL
    /// frames the shim wrote: nothing is checkpointed), and the file grows by whole frames.
    #[test]
    fn every_commit_is_in_the_wal_before_a_reader_of_the_default_vfs_looks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shim.db");
        let writer = open(&path, true);
        writer.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL); CREATE INDEX t_body ON t (body);").unwrap();
        let reader = open(&path, false);
        let page = 4096 + FRAME_HEADER as u64;
        for i in 1..=200_i64 {
            let before = wal_size(&path);
            writer.execute(&format!("INSERT INTO t (body) {}", rows(i % 7 + 1, 200)), []).unwrap();
            let after = wal_size(&path);
            assert!(after == 0 || (after - 32) % page == 0, "the WAL holds whole frames: {after} bytes");
            assert!(after > before, "commit {i} wrote its frames");
            let seen: i64 = reader.query_row("SELECT max(id) FROM t", [], |r| r.get(0)).unwrap();
            let written: i64 = writer.query_row("SELECT max(id) FROM t", [], |r| r.get(0)).unwrap();
            assert_eq!(seen, written, "commit {i} is visible to the other connection");
        }
        let check: String = reader.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
    }

    /// A transaction larger than the buffer and than its page cache (frames written before the
    /// commit, some written again in place), then the file read back by the default VFS alone.
    #[test]
    fn a_transaction_that_spills_its_cache_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill.db");
        let writer = open(&path, true);
        writer
            .execute_batch(&format!(
                "PRAGMA cache_size = 20;
                 CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
                 CREATE INDEX t_body ON t (body);
                 BEGIN;
                 INSERT INTO t (body) {};
                 UPDATE t SET body = body || 'x' WHERE id % 3 = 0;
                 DELETE FROM t WHERE id % 5 = 0;
                 COMMIT;",
                rows(6000, 300)
            ))
            .unwrap();
        assert!(wal_size(&path) > 2 * MOST_BUFFERED as u64, "the transaction is larger than the buffer");
        let (count, marked): (i64, i64) = writer
            .query_row("SELECT count(*), sum(body LIKE '%x') FROM t", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        let reader = open(&path, false);
        let seen: (i64, i64) =
            reader.query_row("SELECT count(*), sum(body LIKE '%x') FROM t", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        assert_eq!(seen, (count, marked));
        assert_eq!(count, 4800);
        let check: String = reader.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
        drop(reader);
        drop(writer);
        // Closed (the last connection checkpoints and removes the WAL), opened again.
        let again = open(&path, false);
        let after: i64 = again.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(after, 4800);
    }

    /// A rolled-back transaction leaves nothing a reader sees, and the next commit is whole.
    #[test]
    fn a_rolled_back_transaction_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollback.db");
        let writer = open(&path, true);
        writer.execute_batch("PRAGMA cache_size = 20; CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);").unwrap();
        writer
            .execute_batch(&format!("BEGIN; INSERT INTO t (body) {}; ROLLBACK;", rows(3000, 500)))
            .unwrap();
        writer.execute("INSERT INTO t (body) VALUES ('kept')", []).unwrap();
        let reader = open(&path, false);
        let bodies: Vec<String> =
            reader.prepare("SELECT body FROM t").unwrap().query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        assert_eq!(bodies, vec!["kept".to_string()]);
    }

    #[test]
    fn the_name_is_the_one_registered() {
        assert_eq!(vfs(), Some(VFS));
        assert_eq!(VFS_NAME.to_str().unwrap(), VFS);
        let found = unsafe { ffi::sqlite3_vfs_find(VFS_NAME.as_ptr() as *const c_char) };
        assert!(!found.is_null());
    }
}

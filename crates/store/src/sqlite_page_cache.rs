//! SQLite's own page cache, without a scan of every cached page at each commit.
//!
//! At the end of every transaction SQLite's pager asks its page cache to drop the pages past the
//! end of the database (`xTruncate`). SQLite's default cache (`pcache1`) knows only the largest
//! page number it has seen since its last truncation, and when that is far past the end it scans
//! its whole hash table: every page it holds. And the b-tree's balance, when it swaps two new
//! pages' numbers, passes one of them through a temporary number, the page of SQLite's lock byte
//! (1 GiB into the file: page 262,145 at 4 KiB), which leaves that largest number far past the
//! end of any file under 1 GiB. So a commit whose inserts split a page or two (the dedupe index's
//! random keys, nearly every group) scanned the writer's whole cache, about 4,000 pages: 5-7% of
//! the writer's time at 64 connections (issue 34, BENCHMARKS.md "Session 24"; SQLite 3.50 and
//! 3.54 alike).
//!
//! This is the same `pcache1`, wrapped (SQLite's documented `SQLITE_CONFIG_PCACHE2`): each cache
//! also keeps an upper bound of the page numbers it holds, leaving out the temporary number while
//! no page holds it, and a truncation that this bound says has nothing to drop is not passed on.
//! Every other call, and every truncation that may drop a page, is `pcache1`'s own. The bound is
//! conservative: every page number a fetch returned or a page was moved to since the last
//! truncation passed on (after it, every page is below its limit), whatever was dropped since.

use std::os::raw::{c_int, c_uint};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use rusqlite::ffi;

/// SQLite's lock byte (`PENDING_BYTE`): its page is the temporary number of `balance_nonroot`.
const PENDING_BYTE: u32 = 0x4000_0000;

/// `pcache1`'s methods, taken before ours replace them.
static INNER: OnceLock<Methods> = OnceLock::new();

struct Methods(ffi::sqlite3_pcache_methods2);

// SAFETY: functions, and `pcache1`'s argument (unused by it), never written after they are kept.
unsafe impl Send for Methods {}
unsafe impl Sync for Methods {}

/// Truncations not passed on, and passed on, in the whole process (for tests and benchmarks).
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static PASSED: AtomicU64 = AtomicU64::new(0);

/// Why SQLite kept its own page cache.
#[derive(Debug, thiserror::Error)]
#[error("SQLite refused SQLITE_CONFIG_PCACHE2 (result code {code}): it was already in use, and keeps its own page cache")]
pub struct AlreadyInUse {
    code: c_int,
}

/// SQLite's page cache, wrapped as above.
///
/// # Safety
/// As `sqlite_memory::use_global_allocator`: call it first thing in `main`, before any thread
/// starts and before any connection is opened. Called later, SQLite refuses it (`AlreadyInUse`)
/// and keeps its cache, which is harmless.
pub unsafe fn skip_needless_truncations() -> Result<(), AlreadyInUse> {
    let mut inner: ffi::sqlite3_pcache_methods2 = std::mem::zeroed();
    let code = ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETPCACHE2, &mut inner as *mut ffi::sqlite3_pcache_methods2);
    if code != ffi::SQLITE_OK {
        return Err(AlreadyInUse { code });
    }
    if INNER.set(Methods(inner)).is_err() {
        // Installed already: ours are the methods in use.
        return Ok(());
    }
    let methods = ffi::sqlite3_pcache_methods2 {
        iVersion: 1,
        pArg: inner.pArg,
        xInit: inner.xInit,
        xShutdown: inner.xShutdown,
        xCreate: Some(x_create),
        xCachesize: Some(x_cachesize),
        xPagecount: Some(x_pagecount),
        xFetch: Some(x_fetch),
        xUnpin: Some(x_unpin),
        xRekey: Some(x_rekey),
        xTruncate: Some(x_truncate),
        xDestroy: Some(x_destroy),
        xShrink: Some(x_shrink),
    };
    // SQLite copies the methods: a local is enough.
    match ffi::sqlite3_config(ffi::SQLITE_CONFIG_PCACHE2, &methods as *const ffi::sqlite3_pcache_methods2) {
        ffi::SQLITE_OK => Ok(()),
        code => Err(AlreadyInUse { code }),
    }
}

/// Truncations this process did not pass on, and passed on.
pub fn truncations() -> (u64, u64) {
    (SKIPPED.load(Ordering::Relaxed), PASSED.load(Ordering::Relaxed))
}

/// One cache: `pcache1`'s, and what ours knows of it. SQLite calls a cache's methods from one
/// connection at a time; the atomics only spare the reasoning.
struct Cache {
    inner: *mut ffi::sqlite3_pcache,
    /// The temporary page number for this page size.
    temporary: u32,
    /// At least every page number held, but the temporary one.
    bound: AtomicU32,
    /// Pages moved to the temporary number and not moved away yet.
    temporary_held: AtomicU32,
}

fn methods() -> &'static ffi::sqlite3_pcache_methods2 {
    &INNER.get().expect("the wrapped cache is installed only after pcache1's methods are kept").0
}

unsafe fn cache<'c>(p: *mut ffi::sqlite3_pcache) -> &'c Cache {
    &*p.cast::<Cache>()
}

unsafe extern "C" fn x_create(page_size: c_int, extra: c_int, purgeable: c_int) -> *mut ffi::sqlite3_pcache {
    let inner = (methods().xCreate.expect("pcache1 has xCreate"))(page_size, extra, purgeable);
    if inner.is_null() {
        return inner;
    }
    let temporary = u32::try_from(page_size).ok().filter(|&size| size > 0).map_or(u32::MAX, |size| PENDING_BYTE / size + 1);
    let cache = Box::new(Cache { inner, temporary, bound: AtomicU32::new(0), temporary_held: AtomicU32::new(0) });
    Box::into_raw(cache).cast()
}

unsafe extern "C" fn x_cachesize(p: *mut ffi::sqlite3_pcache, pages: c_int) {
    (methods().xCachesize.expect("pcache1 has xCachesize"))(cache(p).inner, pages)
}

unsafe extern "C" fn x_pagecount(p: *mut ffi::sqlite3_pcache) -> c_int {
    (methods().xPagecount.expect("pcache1 has xPagecount"))(cache(p).inner)
}

unsafe extern "C" fn x_fetch(p: *mut ffi::sqlite3_pcache, key: c_uint, create: c_int) -> *mut ffi::sqlite3_pcache_page {
    let cache = cache(p);
    let page = (methods().xFetch.expect("pcache1 has xFetch"))(cache.inner, key, create);
    if !page.is_null() {
        cache.bound.fetch_max(key, Ordering::Relaxed);
    }
    page
}

unsafe extern "C" fn x_unpin(p: *mut ffi::sqlite3_pcache, page: *mut ffi::sqlite3_pcache_page, discard: c_int) {
    (methods().xUnpin.expect("pcache1 has xUnpin"))(cache(p).inner, page, discard)
}

unsafe extern "C" fn x_rekey(p: *mut ffi::sqlite3_pcache, page: *mut ffi::sqlite3_pcache_page, old: c_uint, new: c_uint) {
    let cache = cache(p);
    (methods().xRekey.expect("pcache1 has xRekey"))(cache.inner, page, old, new);
    if old == cache.temporary && cache.temporary_held.load(Ordering::Relaxed) > 0 {
        cache.temporary_held.fetch_sub(1, Ordering::Relaxed);
    }
    if new == cache.temporary {
        cache.temporary_held.fetch_add(1, Ordering::Relaxed);
    } else {
        cache.bound.fetch_max(new, Ordering::Relaxed);
    }
}

unsafe extern "C" fn x_truncate(p: *mut ffi::sqlite3_pcache, limit: c_uint) {
    let cache = cache(p);
    let bound = cache.bound.load(Ordering::Relaxed);
    if bound < limit && cache.temporary_held.load(Ordering::Relaxed) == 0 {
        // Every page held is below the limit: nothing to drop.
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    PASSED.fetch_add(1, Ordering::Relaxed);
    (methods().xTruncate.expect("pcache1 has xTruncate"))(cache.inner, limit);
    cache.bound.store(bound.min(limit.saturating_sub(1)), Ordering::Relaxed);
    if cache.temporary >= limit {
        cache.temporary_held.store(0, Ordering::Relaxed);
    }
}

unsafe extern "C" fn x_destroy(p: *mut ffi::sqlite3_pcache) {
    let cache = Box::from_raw(p.cast::<Cache>());
    (methods().xDestroy.expect("pcache1 has xDestroy"))(cache.inner);
}

unsafe extern "C" fn x_shrink(p: *mut ffi::sqlite3_pcache) {
    if let Some(shrink) = methods().xShrink {
        shrink(cache(p).inner)
    }
}

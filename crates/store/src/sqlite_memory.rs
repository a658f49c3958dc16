//! SQLite's memory from the program's own allocator.
//!
//! By default SQLite takes its memory from the C library's `malloc`. A program that chose a faster
//! global allocator (the `nevermiss` binary uses mimalloc) gives SQLite the same one here, through
//! SQLite's documented hook (`SQLITE_CONFIG_MALLOC`). Measured in BENCHMARKS.md ("Session 20"):
//! SQLite's writer thread spent about a tenth of its time in glibc's `malloc` and `free`.
//!
//! The store crate does not pick the allocator: it routes SQLite to Rust's global allocator,
//! whatever the program set with `#[global_allocator]`. A Rust deallocation needs the size, and
//! SQLite's `xFree` and `xSize` get only the pointer, so each block carries its size in 8 bytes
//! in front of it (as SQLite's own default allocator does where `malloc_usable_size` is missing);
//! 8 is also the alignment SQLite asks of its allocator.

use std::alloc::{alloc, dealloc, realloc, Layout};
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;

use rusqlite::ffi;

/// Bytes in front of each block: its size, as a `usize`.
const HEADER: usize = 8;
/// SQLite needs 8-byte alignment (`sqlite3_mem_methods`).
const ALIGN: usize = 8;

/// Why SQLite kept its own allocator.
#[derive(Debug, thiserror::Error)]
#[error("SQLite refused SQLITE_CONFIG_MALLOC (result code {code}): it was already in use, and keeps its own allocator")]
pub struct AlreadyInUse {
    code: c_int,
}

/// SQLite's memory from Rust's global allocator.
///
/// # Safety
/// SQLite can be configured only before it is first used, and `sqlite3_config` is not thread
/// safe: call this first thing in `main`, before any thread starts and before any connection is
/// opened. Called later, SQLite refuses it (`AlreadyInUse`) and keeps its defaults, which is
/// harmless; called while another thread opens a connection, it races.
pub unsafe fn use_global_allocator() -> Result<(), AlreadyInUse> {
    let methods = ffi::sqlite3_mem_methods {
        xMalloc: Some(x_malloc),
        xFree: Some(x_free),
        xRealloc: Some(x_realloc),
        xSize: Some(x_size),
        xRoundup: Some(x_roundup),
        xInit: Some(x_init),
        xShutdown: Some(x_shutdown),
        pAppData: null_mut(),
    };
    // SQLite copies the methods: a local is enough.
    match ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &methods as *const ffi::sqlite3_mem_methods) {
        ffi::SQLITE_OK => Ok(()),
        code => Err(AlreadyInUse { code }),
    }
}

fn layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(HEADER)?, ALIGN).ok()
}

unsafe extern "C" fn x_malloc(size: c_int) -> *mut c_void {
    let Some(layout) = usize::try_from(size).ok().and_then(layout) else { return null_mut() };
    let block = alloc(layout);
    if block.is_null() {
        return null_mut();
    }
    block.cast::<usize>().write(layout.size() - HEADER);
    block.add(HEADER).cast()
}

/// The block's start and the size its caller asked for.
unsafe fn block_of(memory: *mut c_void) -> (*mut u8, usize) {
    let block = memory.cast::<u8>().sub(HEADER);
    (block, block.cast::<usize>().read())
}

unsafe extern "C" fn x_free(memory: *mut c_void) {
    if memory.is_null() {
        return;
    }
    let (block, size) = block_of(memory);
    dealloc(block, Layout::from_size_align_unchecked(size + HEADER, ALIGN));
}

/// SQLite never calls it with a null pointer or a size of 0 (`sqlite3Realloc` handles both).
unsafe extern "C" fn x_realloc(memory: *mut c_void, size: c_int) -> *mut c_void {
    let Some(new) = usize::try_from(size).ok().and_then(layout) else { return null_mut() };
    let (block, old) = block_of(memory);
    let block = realloc(block, Layout::from_size_align_unchecked(old + HEADER, ALIGN), new.size());
    if block.is_null() {
        return null_mut();
    }
    block.cast::<usize>().write(new.size() - HEADER);
    block.add(HEADER).cast()
}

unsafe extern "C" fn x_size(memory: *mut c_void) -> c_int {
    if memory.is_null() {
        return 0;
    }
    c_int::try_from(block_of(memory).1).unwrap_or(c_int::MAX)
}

/// Sizes are rounded up to the alignment, as SQLite's default allocator does.
unsafe extern "C" fn x_roundup(size: c_int) -> c_int {
    size.saturating_add(7) & !7
}

unsafe extern "C" fn x_init(_: *mut c_void) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_shutdown(_: *mut c_void) {}

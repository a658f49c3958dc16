// No console window on Windows release builds of the desktop app.
#![cfg_attr(all(not(debug_assertions), feature = "desktop"), windows_subsystem = "windows")]

//! The `nevermiss` program: the command line (`cli`) and the desktop shell (`desktop`, behind the
//! default `desktop` feature) around the engine crate, `nevermiss_engine`.

mod cli;
#[cfg(test)]
mod cli_book;
#[cfg(windows)]
mod console_events;
#[cfg(feature = "desktop")]
mod desktop;

/// mimalloc for every allocation of the program, SQLite's included (`main`): measured against
/// glibc's malloc in BENCHMARKS.md ("Session 20").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // SAFETY: first thing in `main`: no other thread yet, no SQLite connection opened.
    if let Err(refused) = unsafe { nevermiss_engine::store::sqlite_memory::use_global_allocator() } {
        // Not reachable from here (nothing used SQLite before): SQLite keeps glibc's malloc.
        eprintln!("nevermiss: {refused}");
    }
    cli::main()
}

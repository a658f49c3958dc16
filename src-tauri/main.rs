// No console window on Windows release builds of the desktop app.
#![cfg_attr(all(not(debug_assertions), feature = "desktop"), windows_subsystem = "windows")]

//! The `nevermiss` program: the command line (`cli`) and the desktop shell (`desktop`, behind the
//! default `desktop` feature) around the engine crate, `nevermiss_engine`.

mod cancel;
mod cli;
#[cfg(test)]
mod cli_book;
#[cfg(feature = "desktop")]
mod desktop;
mod wait;

fn main() -> std::process::ExitCode {
    cli::main()
}

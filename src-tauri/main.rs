// No console window on Windows release builds of the desktop app.
#![cfg_attr(all(not(debug_assertions), feature = "desktop"), windows_subsystem = "windows")]

fn main() -> std::process::ExitCode {
    nevermiss::cli::main()
}

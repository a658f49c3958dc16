//! Windows: closing `serve`'s console window, logging off and shutting down stop it as Ctrl-C
//! does (the engine's clean stop: the outbox's marks, the store closed, `instance.json` removed).
//!
//! Tokio's console handlers answer Ctrl-C and Ctrl-Break. For a close (and a logoff or shutdown)
//! Windows ends the process as soon as the handler returns, and at the latest about 5 seconds
//! after the event: this handler tells `serve` to stop and then holds the event until the
//! process ends, which `serve` returning from `main` does once its engine has stopped.

use std::sync::{Once, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use windows_sys::core::BOOL;
use windows_sys::Win32::System::Console::{SetConsoleCtrlHandler, CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT};

/// Longer than Windows waits for a close (5 s), shorter than its shutdown timeout (20 s).
const HOLD: Duration = Duration::from_secs(15);

fn closing() -> &'static Notify {
    static CLOSING: OnceLock<Notify> = OnceLock::new();
    CLOSING.get_or_init(Notify::new)
}

unsafe extern "system" fn handler(event: u32) -> BOOL {
    match event {
        CTRL_CLOSE_EVENT | CTRL_LOGOFF_EVENT | CTRL_SHUTDOWN_EVENT => {
            // A permit kept if nothing waits yet: the stop is never lost.
            closing().notify_one();
            std::thread::sleep(HOLD);
            1
        }
        // Ctrl-C and Ctrl-Break: the next handler's (tokio's).
        _ => 0,
    }
}

/// Installs the handler (once; after tokio's, so it is asked first) and returns the wait for a
/// close, logoff or shutdown event.
pub fn closed() -> impl std::future::Future<Output = ()> {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: a handler with the signature Windows calls, for the life of the process.
        if unsafe { SetConsoleCtrlHandler(Some(handler), 1) } == 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "cannot watch the console's close: closing it ends NeverMiss without a clean stop");
        }
    });
    closing().notified()
}

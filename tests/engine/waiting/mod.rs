//! The one bounded wait every integration test uses.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

/// The bound of every wait: generous, because a loaded 2-core CI machine is slow, and a wait
/// only takes this long when something is broken.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `check` until it holds, at most `WAIT`; panics naming `what` otherwise.
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if check().await {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {WAIT:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

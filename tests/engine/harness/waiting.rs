//! The bounded waits every integration test uses.

use std::future::Future;
use std::time::{Duration, Instant};

/// The bound of every wait: generous, because a loaded 2-core CI machine is slow, and a wait
/// only takes this long when something is broken.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `check` until it holds, at most `WAIT`; panics naming `what` otherwise.
pub async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually(what, WAIT, Duration::from_millis(25), check).await
}

/// Polls `check` until it holds, at most `bound`, every `every`.
pub async fn eventually<F, Fut>(what: &str, bound: Duration, every: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + bound;
    loop {
        if check().await {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {bound:?} waiting until {what}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `find` until it answers something, at most `WAIT`; returns it.
pub async fn wait_for<T, F, Fut>(what: &str, mut find: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(found) = find().await {
            return found;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {WAIT:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

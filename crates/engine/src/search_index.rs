//! Keeps the job search's index up to date (`store::search_index`): every second, the jobs
//! inserted, renamed, regrouped or deleted since are indexed, a batch a write, until none waits.
//! A search never waits for it: it reads the waiting jobs as well.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::{search_index, Store};

/// How often the waiting jobs are indexed.
pub const INDEX_EVERY: Duration = Duration::from_secs(1);

/// Indexes every waiting job, a batch a write; returns how many.
pub async fn catch_up(store: &Store) -> Result<usize, crate::store::StoreError> {
    let mut indexed = 0;
    if !store.read(search_index::any_pending).await? {
        return Ok(0);
    }
    loop {
        let taken = store.write(|tx| search_index::catch_up(tx)).await?;
        indexed += taken;
        if taken < search_index::batch_of(store.dialect()) as usize {
            return Ok(indexed);
        }
    }
}

/// `catch_up` at start and then every `INDEX_EVERY`, until `shutdown`.
pub async fn run(store: Store, shutdown: CancellationToken) {
    loop {
        if let Err(e) = catch_up(&store).await {
            tracing::warn!(error = %e, "the job search's index cannot be written now; its jobs are searched without it meanwhile");
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(INDEX_EVERY) => {}
        }
    }
}

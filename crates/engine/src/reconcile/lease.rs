//! A fleet's round lease: one process at a time polls a provider (`store::leases`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::job::now_ms;
use crate::store::{self, Store, StoreError};

/// How long a round's lease lasts unless renewed; it is renewed every third of that while the
/// round runs, so a process that dies mid-round holds it at most this long.
const ROUND_LEASE: Duration = Duration::from_secs(15);

/// A provider's round lease (`store::leases`), renewed in the background while held.
pub(super) struct RoundLease {
    store: Store,
    name: String,
    /// Tells the renewal to stop after its write in flight, if any (a renewal cut off mid-write
    /// could still commit after the release and hold the lease again).
    stop: CancellationToken,
    renewal: tokio::task::JoinHandle<()>,
}

impl RoundLease {
    /// The lease of `provider`'s rounds, if no other process holds it.
    pub(super) async fn take(store: &Store, provider: &str) -> Result<Option<RoundLease>, StoreError> {
        let name = format!("reconcile/{provider}");
        let held = acquire_lease(store, &name).await?;
        if !held {
            return Ok(None);
        }
        let stop = CancellationToken::new();
        let renewal = tokio::spawn({
            let (store, name, stop) = (store.clone(), name.clone(), stop.clone());
            async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(ROUND_LEASE / 3) => {}
                    }
                    match acquire_lease(&store, &name).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(lease = %name, "the round's lease was taken by another process (this one was too slow to renew it)");
                            return;
                        }
                        Err(e) => tracing::warn!(lease = %name, error = %e, "cannot renew the round's lease"),
                    }
                }
            }
        });
        Ok(Some(RoundLease { store: store.clone(), name, stop, renewal }))
    }

    pub(super) async fn release(self) {
        self.stop.cancel();
        let _ = self.renewal.await;
        let (name, node) = (self.name, self.store.node().to_owned());
        if let Err(e) = self.store.write(move |tx| store::leases::release(tx, &name, &node)).await {
            tracing::warn!(error = %e, "cannot release the round's lease; it expires by itself");
        }
    }
}

async fn acquire_lease(store: &Store, name: &str) -> Result<bool, StoreError> {
    let (name, node) = (name.to_owned(), store.node().to_owned());
    store
        .write(move |tx| {
            let now = now_ms();
            store::leases::acquire(tx, &name, &node, now, now + ROUND_LEASE.as_millis() as i64)
        })
        .await
}

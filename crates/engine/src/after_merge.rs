//! What follows a committed merge, written once for the receiver, polling and discovery: the
//! outbox woken when the job first ended, and the job published (to the UI, the devices, a fleet)
//! when it changed. Apart from the merge point, so that it stays a store-only write.

use crate::changes::Changes;
use crate::merge_point::Merged;
use crate::outbox::Outbox;

/// Tells the outbox and the change feed what `merged` did; returns whether the job was published.
pub fn after_commit(merged: Merged, outbox: &Outbox, changes: &Changes) -> bool {
    if merged.first_terminal {
        outbox.wake();
    }
    let changed = merged.changed();
    match merged.job {
        Some(job) if changed => {
            changes.job_changed(job);
            true
        }
        _ => false,
    }
}

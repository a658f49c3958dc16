//! Counter additions gathered during one group commit of the writer thread, written once per
//! counter just before the COMMIT (instead of two upserts per addition per write).

use std::cell::RefCell;

use rusqlite::Connection;

thread_local! {
    /// `Some` on the writer thread only: the additions of the group in progress, in order.
    static PENDING: RefCell<Option<Vec<(String, i64)>>> = const { RefCell::new(None) };
}

/// Makes this thread (the writer) gather counter additions.
pub(super) fn enable() {
    PENDING.with(|p| *p.borrow_mut() = Some(Vec::new()));
}

/// Gathers an addition; false when this thread does not gather (write it now instead).
pub(super) fn add(name: &str, n: i64) -> bool {
    PENDING.with(|p| match p.borrow_mut().as_mut() {
        Some(pending) => {
            pending.push((name.to_owned(), n));
            true
        }
        None => false,
    })
}

/// Where the gathered additions stand (before a write).
pub(super) fn mark() -> usize {
    PENDING.with(|p| p.borrow().as_ref().map_or(0, Vec::len))
}

/// Takes back what a failed write added.
pub(super) fn rewind(mark: usize) {
    PENDING.with(|p| {
        if let Some(pending) = p.borrow_mut().as_mut() {
            pending.truncate(mark);
        }
    });
}

/// Writes the gathered additions, summed per counter, and starts over.
pub(super) fn flush(conn: &Connection) -> rusqlite::Result<()> {
    let pending = PENDING.with(|p| p.borrow_mut().as_mut().map(std::mem::take).unwrap_or_default());
    let mut sums: Vec<(String, i64)> = Vec::new();
    for (name, n) in pending {
        match sums.iter_mut().find(|(existing, _)| *existing == name) {
            Some((_, sum)) => *sum += n,
            None => sums.push((name, n)),
        }
    }
    for (name, n) in sums {
        super::queries::write_counter(conn, &name, n)?;
    }
    Ok(())
}

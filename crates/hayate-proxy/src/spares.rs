//! Buffers a worker's thread keeps for its next requests.
//!
//! A request's upstream head lives from the wake-up that read the request
//! to the one that read its response, so with a hundred requests in flight
//! a hundred heads are: more of one size than glibc's per-thread cache
//! keeps (7 chunks), and the rest took the allocator's slow path both ways
//! (`_int_malloc`, `unlink_chunk`, `malloc_consolidate`: 3.1-3.5 % of the
//! CPU of case P, 2.1-2.4 % with heads kept here). Read buffers (8 KiB)
//! are past that cache's size limit whatever their number.

use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread's kept items, in a `thread_local!`.
pub(crate) type Spares<T> = RefCell<Vec<T>>;

/// One of the items `spares` keeps, if any.
pub(crate) fn take<T: 'static>(spares: &'static LocalKey<Spares<T>>) -> Option<T> {
    spares.with(|s| s.borrow_mut().pop())
}

/// Keeps `item` in `spares`, unless `max` are kept already (then it is
/// dropped).
pub(crate) fn keep<T: 'static>(spares: &'static LocalKey<Spares<T>>, item: T, max: usize) {
    spares.with(|s| {
        let mut kept = s.borrow_mut();
        if kept.len() < max {
            kept.push(item);
        }
    });
}

/// How many `spares` keeps (tests).
#[cfg(test)]
pub(crate) fn count<T: 'static>(spares: &'static LocalKey<Spares<T>>) -> usize {
    spares.with(|s| s.borrow().len())
}

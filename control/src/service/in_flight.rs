//! The sessions some task of this process is creating or ending right now.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use policy::SessionId;

/// A set of sessions that some task of this process is working on.
#[derive(Default, Clone)]
pub(super) struct InFlight(Arc<Mutex<HashSet<SessionId>>>);

impl InFlight {
    /// Marks `id`; `None` when another task already holds it. The mark goes when the
    /// returned guard is dropped, on every path out of the task; the guard owns its
    /// share of the set, so it can move into a spawned task.
    pub(super) fn mark(&self, id: SessionId) -> Option<InFlightGuard> {
        // The set's lock is released before a guard exists: a guard's drop takes it.
        let inserted = lock_set(&self.0).insert(id);
        inserted.then(|| InFlightGuard(Arc::clone(&self.0), id))
    }

    pub(super) fn contains(&self, id: &SessionId) -> bool {
        lock_set(&self.0).contains(id)
    }
}

fn lock_set(set: &Mutex<HashSet<SessionId>>) -> std::sync::MutexGuard<'_, HashSet<SessionId>> {
    // The set is consistent after any panic (single insert/remove calls).
    set.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes its id from an [`InFlight`] set when dropped.
pub(super) struct InFlightGuard(Arc<Mutex<HashSet<SessionId>>>, SessionId);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        lock_set(&self.0).remove(&self.1);
    }
}

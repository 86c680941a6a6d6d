//! The gateway's reading of wall-clock time in seconds, and a session's [`InputClock`]:
//! a leaf every module may use without reaching up to the shared state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The time of a session's last input (seconds since the Unix epoch; 0: none yet),
/// shared by its open terminals on this gateway.
#[derive(Debug, Clone, Default)]
pub struct InputClock(pub(crate) Arc<AtomicU64>);

impl InputClock {
    /// Records input now: one relaxed atomic store.
    #[inline]
    pub fn touch(&self) {
        self.0.store(now(), Ordering::Relaxed);
    }

    /// The last input time, 0 when none.
    pub fn last(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

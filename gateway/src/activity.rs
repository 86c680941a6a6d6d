//! When each session was last typed into on this gateway (profiles'
//! `idle_timeout_seconds`), kept for the reports to control.
//!
//! Only input counts: the terminal's frame reader ([`crate::ws::frames`])
//! touches the session's [`InputClock`] for each ttyd input message (command `'0'`),
//! never for output, resizes, the first JSON message or pings. A touch is one relaxed
//! atomic store of the current second: no lock, no allocation. The lock of
//! [`Activity`] is taken once per terminal opened and once per report, never across
//! an await.
//!
//! The activity reporter (`services/reporter.rs`) sends what moved since its last
//! report to control.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use policy::SessionId;

pub use crate::clock::InputClock;

/// Most entries in one report: well inside control's default body bound (64 KiB at
/// about 50 bytes an entry).
pub const MAX_BATCH: usize = 500;

/// One session's clock and what control was last told of it.
struct Entry {
    clock: InputClock,
    reported: u64,
}

/// Every session's [`InputClock`] on this gateway.
#[derive(Default)]
pub struct Activity {
    sessions: Mutex<HashMap<SessionId, Entry>>,
}

impl Activity {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Entry>> {
        // Plain data: a panic elsewhere leaves nothing half-written.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The clock of session `id`, shared by all its terminals (taken once per terminal).
    pub fn clock(&self, id: SessionId) -> InputClock {
        self.lock()
            .entry(id)
            .or_insert_with(|| Entry {
                clock: InputClock::default(),
                reported: 0,
            })
            .clock
            .clone()
    }

    /// The sessions whose last input moved since control last took a report, with
    /// that time. Sessions with no open terminal and nothing left to report are
    /// forgotten.
    pub fn pending(&self) -> Vec<(SessionId, u64)> {
        let mut sessions = self.lock();
        let mut out = Vec::new();
        sessions.retain(|id, e| {
            let last = e.clock.last();
            if last > e.reported {
                out.push((*id, last));
                return true;
            }
            // Only this map holds the clock: no terminal of the session is open here.
            Arc::strong_count(&e.clock.0) > 1
        });
        out
    }

    /// Notes that control took these times.
    pub fn reported(&self, sent: &[(SessionId, u64)]) {
        let mut sessions = self.lock();
        for (id, at) in sent {
            if let Some(e) = sessions.get_mut(id) {
                e.reported = e.reported.max(*at);
            }
        }
    }

    /// Sessions this gateway keeps a clock for.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it keeps none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> SessionId {
        SessionId::from_random([n; 10])
    }

    #[test]
    fn terminals_of_one_session_share_a_clock_and_only_moves_are_reported() {
        let a = Activity::default();
        let (t1, t2) = (a.clock(id(1)), a.clock(id(1)));
        let _other = a.clock(id(2));
        assert!(a.pending().is_empty(), "no input, nothing to report");
        t2.touch();
        assert_eq!(t1.last(), t2.last());
        let p = a.pending();
        assert_eq!(p, vec![(id(1), t1.last())]);
        // Not taken by control: reported again.
        assert_eq!(a.pending(), p);
        a.reported(&p);
        assert!(a.pending().is_empty());
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn a_session_with_no_open_terminal_is_forgotten_after_its_last_report() {
        let a = Activity::default();
        let t = a.clock(id(1));
        t.touch();
        drop(t);
        let p = a.pending();
        assert_eq!(p.len(), 1, "the last input is still reported");
        assert_eq!(a.len(), 1);
        a.reported(&p);
        assert!(a.pending().is_empty());
        assert!(a.is_empty());
    }
}

//! How many terminals are open on each session now, as the gateways say.
//!
//! Each gateway reports, every activity interval, the sessions it has terminals open
//! on (and a zero for each that had some at its previous report). A gateway's numbers
//! count while they are younger than three of its intervals, so a gateway that stops
//! (crash, scale-down) stops counting by itself. Kept in memory only: after a restart
//! of control the next reports rebuild it within one interval.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use policy::SessionId;

/// Reports older than this many of their gateway's intervals no longer count.
const FRESH_INTERVALS: u32 = 3;

#[derive(Default)]
struct Inner {
    /// Gateway → until when its reports count.
    gateways: HashMap<String, Instant>,
    /// (gateway, session) → open terminals, as of the gateway's last report of it.
    open: HashMap<(String, SessionId), u32>,
    /// Gateway → the share-link viewers it has open, as of its last report (each
    /// report names them all).
    viewers: HashMap<String, Vec<Viewers>>,
}

/// The viewers one gateway has open on one share link.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Viewers {
    /// The session watched.
    pub session: SessionId,
    /// The share's id.
    pub share: String,
    /// Viewers open.
    pub open: u32,
    /// The `sub`s of the signed-in ones.
    #[serde(default)]
    pub subs: Vec<String>,
}

/// The gateways' live terminal counts.
#[derive(Default)]
pub struct LiveTerminals(Mutex<Inner>);

impl LiveTerminals {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records one report of `gateway`, which reports every `every`.
    pub fn record(&self, gateway: &str, every: Duration, counts: &[(SessionId, u32)]) {
        let now = Instant::now();
        let mut inner = self.lock();
        inner
            .gateways
            .insert(gateway.to_owned(), now + every * FRESH_INTERVALS);
        for (id, n) in counts {
            let key = (gateway.to_owned(), *id);
            if *n == 0 {
                inner.open.remove(&key);
            } else {
                inner.open.insert(key, *n);
            }
        }
        // Gateways gone quiet take their numbers with them.
        let stale: Vec<String> = inner
            .gateways
            .iter()
            .filter(|(_, until)| **until < now)
            .map(|(g, _)| g.clone())
            .collect();
        for g in stale {
            inner.gateways.remove(&g);
            inner.open.retain(|(og, _), _| *og != g);
            inner.viewers.remove(&g);
        }
    }

    /// Records the share-link viewers `gateway` has open now (all of them).
    pub fn record_viewers(&self, gateway: &str, viewers: Vec<Viewers>) {
        self.lock().viewers.insert(gateway.to_owned(), viewers);
    }

    /// Viewers of `share` on `session` over every gateway that reports, and the
    /// signed-in ones' `sub`s (sorted, once each).
    pub fn viewers(&self, session: &SessionId, share: &str) -> (u32, Vec<String>) {
        let now = Instant::now();
        let inner = self.lock();
        let mut open = 0;
        let mut subs = Vec::new();
        for (g, list) in &inner.viewers {
            if inner.gateways.get(g).is_none_or(|until| *until < now) {
                continue;
            }
            for v in list
                .iter()
                .filter(|v| v.session == *session && v.share == share)
            {
                open += v.open;
                subs.extend(v.subs.iter().cloned());
            }
        }
        subs.sort();
        subs.dedup();
        (open, subs)
    }

    /// Terminals open on `id` over every gateway that reports; `None` when no gateway
    /// has reported recently (nothing is known).
    pub fn count(&self, id: &SessionId) -> Option<u32> {
        let now = Instant::now();
        let inner = self.lock();
        let mut known = false;
        let mut total = 0u32;
        for (g, until) in &inner.gateways {
            if *until < now {
                continue;
            }
            known = true;
            total += inner.open.get(&(g.clone(), *id)).copied().unwrap_or(0);
        }
        known.then_some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> SessionId {
        SessionId::from_random([n; 10])
    }

    #[test]
    fn counts_add_up_over_gateways_zeros_clear_and_quiet_gateways_stop_counting() {
        let live = LiveTerminals::default();
        assert_eq!(live.count(&id(1)), None, "no gateway has reported");
        let long = Duration::from_secs(60);
        live.record("g1", long, &[(id(1), 2)]);
        live.record("g2", long, &[(id(1), 1), (id(2), 1)]);
        assert_eq!(live.count(&id(1)), Some(3));
        assert_eq!(live.count(&id(2)), Some(1));
        assert_eq!(live.count(&id(3)), Some(0), "known gateways, none open");
        live.record("g2", long, &[(id(1), 0)]);
        assert_eq!(live.count(&id(1)), Some(2));
        // A gateway whose reports are older than three of its intervals.
        live.record("g3", Duration::from_millis(1), &[(id(2), 5)]);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(live.count(&id(2)), Some(1), "g3 went quiet");
        live.record("g1", long, &[]);
        assert_eq!(live.count(&id(2)), Some(1));
    }

    #[test]
    fn viewers_add_up_over_gateways_and_each_report_replaces_the_last() {
        let live = LiveTerminals::default();
        let long = Duration::from_secs(60);
        let v = |share: &str, open, subs: &[&str]| Viewers {
            session: id(1),
            share: share.into(),
            open,
            subs: subs.iter().map(|s| s.to_string()).collect(),
        };
        live.record("g1", long, &[]);
        live.record("g2", long, &[]);
        live.record_viewers("g1", vec![v("a", 2, &["bob"]), v("b", 1, &[])]);
        live.record_viewers("g2", vec![v("a", 1, &["carol", "bob"])]);
        assert_eq!(
            live.viewers(&id(1), "a"),
            (3, vec!["bob".into(), "carol".into()])
        );
        live.record_viewers("g2", vec![]);
        assert_eq!(live.viewers(&id(1), "a"), (2, vec!["bob".into()]));
        assert_eq!(live.viewers(&id(1), "c"), (0, vec![]));
    }
}

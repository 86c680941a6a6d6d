//! How many terminals are open on each session and for each user now, as the gateways
//! say.
//!
//! Each gateway reports, at least every activity interval and soon after its counts
//! change, the sessions and users it has terminals open for (and a zero for each that
//! had some at its previous report). A gateway's numbers count while they are younger
//! than three of its intervals, so a gateway that stops (crash, scale-down) stops
//! counting by itself. Kept in memory only: after a restart of control the next
//! reports rebuild it within one interval.
//!
//! The answer to a report is [`Elsewhere`] (its wire shape in `policy::reports`): what every *other* live gateway has open.
//! Each gateway adds it to its own counts when it admits a terminal, so the terminal
//! limits hold over the deployment without a call to control per terminal.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use policy::{SessionId, Sub};

pub use policy::reports::{Elsewhere, SessionOpen, ShareOpen, ShareViewers as Viewers, UserOpen};

/// Reports older than this many of their gateway's intervals no longer count.
const FRESH_INTERVALS: u32 = 3;

#[derive(Default)]
struct Inner {
    /// Gateway → until when its reports count.
    gateways: HashMap<String, Instant>,
    /// (gateway, session) → open terminals, as of the gateway's last report of it.
    open: HashMap<(String, SessionId), u32>,
    /// (gateway, user) → open terminals, as of the gateway's last report of them.
    users: HashMap<(String, Sub), u32>,
    /// Gateway → the share-link viewers it has open, as of its last report (each
    /// report names them all).
    viewers: HashMap<String, Vec<Viewers>>,
    /// Replica (the host and listener a gateway process serves) → the process that
    /// reports for it now.
    replicas: HashMap<String, String>,
    /// Processes whose replica a newer process took, → until when they count: their
    /// reports still count, but never take the replica back.
    displaced: HashMap<String, Instant>,
}

impl Inner {
    /// Drops everything `gateway` reported.
    fn forget(&mut self, gateway: &str) {
        self.gateways.remove(gateway);
        self.open.retain(|(g, _), _| g != gateway);
        self.users.retain(|(g, _), _| g != gateway);
        self.viewers.remove(gateway);
    }
}

/// The gateways' live terminal counts.
#[derive(Default)]
pub struct LiveTerminals {
    inner: Mutex<Inner>,
    /// Woken after every report.
    changed: tokio::sync::Notify,
}

impl LiveTerminals {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits, at most `within`, until no gateway reports a terminal open on `id`
    /// (or none reports at all); `false` when some were still open then.
    pub async fn closed_everywhere(&self, id: &SessionId, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the look, so a report in between is not missed.
            changed.as_mut().enable();
            if self.count(id).is_none_or(|n| n == 0) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return false;
            }
        }
    }

    /// Records one report of `gateway`, which reports at least every `every`: its
    /// open terminals per session and per user (a zero clears an entry). The first
    /// report of a process for a `replica` another process reported for drops that
    /// one's numbers at once: a gateway restarted after a crash (or upgraded) must not
    /// find the terminals of its dead predecessor counted against its reconnecting
    /// users for three intervals.
    pub fn record(
        &self,
        gateway: &str,
        replica: Option<&str>,
        every: Duration,
        counts: &[(SessionId, u32)],
        users: &[(Sub, u32)],
    ) {
        let now = Instant::now();
        let until = now + every * FRESH_INTERVALS;
        let mut inner = self.lock();
        if let Some(d) = inner.displaced.get_mut(gateway) {
            *d = until;
        } else if let Some(replica) = replica {
            let before = inner
                .replicas
                .insert(replica.to_owned(), gateway.to_owned());
            if let Some(old) = before.filter(|old| old != gateway) {
                let old_until = inner.gateways.get(&old).copied().unwrap_or(now);
                inner.forget(&old);
                inner.displaced.insert(old, old_until);
            }
        }
        inner.gateways.insert(gateway.to_owned(), until);
        for (id, n) in counts {
            let key = (gateway.to_owned(), *id);
            if *n == 0 {
                inner.open.remove(&key);
            } else {
                inner.open.insert(key, *n);
            }
        }
        for (sub, n) in users {
            let key = (gateway.to_owned(), sub.clone());
            if *n == 0 {
                inner.users.remove(&key);
            } else {
                inner.users.insert(key, *n);
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
            inner.forget(&g);
            inner.replicas.retain(|_, holder| *holder != g);
        }
        inner.displaced.retain(|_, until| *until >= now);
        drop(inner);
        self.changed.notify_waiters();
    }

    /// What every live gateway but `gateway` has open, summed (sorted, so answers are
    /// comparable).
    pub fn elsewhere(&self, gateway: &str) -> Elsewhere {
        let now = Instant::now();
        let inner = self.lock();
        let counts = |g: &String| g != gateway && inner.gateways.get(g).is_some_and(|u| *u >= now);
        let mut users: HashMap<&Sub, u32> = HashMap::new();
        for ((g, sub), n) in &inner.users {
            if counts(g) {
                *users.entry(sub).or_default() += n;
            }
        }
        let mut sessions: HashMap<SessionId, u32> = HashMap::new();
        for ((g, id), n) in &inner.open {
            if counts(g) {
                *sessions.entry(*id).or_default() += n;
            }
        }
        let mut viewers: HashMap<(SessionId, &str), u32> = HashMap::new();
        for (g, list) in &inner.viewers {
            if counts(g) {
                for v in list.iter().filter(|v| v.open > 0) {
                    *viewers.entry((v.session, v.share.as_str())).or_default() += v.open;
                }
            }
        }
        let mut out = Elsewhere {
            users: users
                .into_iter()
                .map(|(sub, open)| UserOpen {
                    sub: sub.clone(),
                    open,
                })
                .collect(),
            sessions: sessions
                .into_iter()
                .map(|(session, open)| SessionOpen { session, open })
                .collect(),
            viewers: viewers
                .into_iter()
                .map(|((session, share), open)| ShareOpen {
                    session,
                    share: share.to_owned(),
                    open,
                })
                .collect(),
        };
        out.users.sort_by(|a, b| a.sub.cmp(&b.sub));
        out.sessions.sort_by_key(|s| s.session);
        out.viewers
            .sort_by(|a, b| (a.session, &a.share).cmp(&(b.session, &b.share)));
        out
    }

    /// Records the share-link viewers `gateway` has open now (all of them).
    pub fn record_viewers(&self, gateway: &str, viewers: Vec<Viewers>) {
        self.lock().viewers.insert(gateway.to_owned(), viewers);
    }

    /// Viewers of `share` on `session` over every gateway that reports, and the
    /// signed-in ones' `sub`s (sorted, once each).
    pub fn viewers(&self, session: &SessionId, share: &str) -> (u32, Vec<String>) {
        self.viewers_of(session, Some(share))
    }

    /// Viewers of every share link of `session`, as [`LiveTerminals::viewers`].
    pub fn session_viewers(&self, session: &SessionId) -> (u32, Vec<String>) {
        self.viewers_of(session, None)
    }

    fn viewers_of(&self, session: &SessionId, share: Option<&str>) -> (u32, Vec<String>) {
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
                .filter(|v| v.session == *session && share.is_none_or(|s| v.share == s))
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
        live.record("g1", None, long, &[(id(1), 2)], &[]);
        live.record("g2", None, long, &[(id(1), 1), (id(2), 1)], &[]);
        assert_eq!(live.count(&id(1)), Some(3));
        assert_eq!(live.count(&id(2)), Some(1));
        assert_eq!(live.count(&id(3)), Some(0), "known gateways, none open");
        live.record("g2", None, long, &[(id(1), 0)], &[]);
        assert_eq!(live.count(&id(1)), Some(2));
        // A gateway whose reports are older than three of its intervals.
        live.record("g3", None, Duration::from_millis(1), &[(id(2), 5)], &[]);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(live.count(&id(2)), Some(1), "g3 went quiet");
        live.record("g1", None, long, &[], &[]);
        assert_eq!(live.count(&id(2)), Some(1));
    }

    #[tokio::test]
    async fn an_end_waits_for_the_reports_that_its_terminals_closed_and_no_longer() {
        let live = std::sync::Arc::new(LiveTerminals::default());
        let long = Duration::from_secs(60);
        assert!(
            live.closed_everywhere(&id(1), long).await,
            "nothing reported"
        );
        live.record("g1", None, long, &[(id(1), 2)], &[]);
        live.record("g2", None, long, &[(id(1), 1)], &[]);
        let waiter = {
            let live = std::sync::Arc::clone(&live);
            tokio::spawn(async move { live.closed_everywhere(&id(1), long).await })
        };
        live.record("g1", None, long, &[(id(1), 0)], &[]);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "g2 still has one open");
        live.record("g2", None, long, &[(id(1), 0)], &[]);
        assert!(waiter.await.unwrap(), "closed on both");
        live.record("g1", None, long, &[(id(2), 1)], &[]);
        assert!(
            !live
                .closed_everywhere(&id(2), Duration::from_millis(20))
                .await,
            "still open when the wait ran out"
        );
    }

    #[test]
    fn a_gateway_is_answered_what_the_other_live_gateways_have_open() {
        let live = LiveTerminals::default();
        let long = Duration::from_secs(60);
        let alice = Sub::parse("alice").unwrap();
        let bob = Sub::parse("bob").unwrap();
        live.record("g1", None, long, &[(id(1), 3)], &[(alice.clone(), 3)]);
        live.record(
            "g2",
            None,
            long,
            &[(id(1), 1), (id(2), 1)],
            &[(alice.clone(), 1), (bob.clone(), 1)],
        );
        live.record_viewers(
            "g2",
            vec![Viewers {
                session: id(1),
                share: "s".into(),
                open: 2,
                subs: vec![],
            }],
        );
        let to_g1 = live.elsewhere("g1");
        assert_eq!(
            to_g1.users,
            vec![
                UserOpen {
                    sub: alice.clone(),
                    open: 1
                },
                UserOpen {
                    sub: bob.clone(),
                    open: 1
                }
            ]
        );
        assert_eq!(
            to_g1.sessions,
            vec![
                SessionOpen {
                    session: id(1),
                    open: 1
                },
                SessionOpen {
                    session: id(2),
                    open: 1
                }
            ]
        );
        assert_eq!(
            to_g1.viewers,
            vec![ShareOpen {
                session: id(1),
                share: "s".into(),
                open: 2
            }]
        );
        // A gateway that knows nobody else hears of nothing, not of its own.
        let to_g2 = live.elsewhere("g2");
        assert_eq!(
            (to_g2.users.len(), to_g2.users[0].open, to_g2.viewers.len()),
            (1, 3, 0)
        );
        assert_eq!(
            live.elsewhere("g3").users.len(),
            2,
            "a new gateway hears of both"
        );
        // Zeros clear, and a quiet gateway's numbers stop counting.
        live.record("g2", None, long, &[], &[(bob.clone(), 0)]);
        assert_eq!(live.elsewhere("g1").users.len(), 1);
        live.record("g1", None, Duration::from_millis(1), &[], &[]);
        std::thread::sleep(Duration::from_millis(10));
        live.record("g2", None, long, &[], &[]);
        assert_eq!(live.elsewhere("g2"), Elsewhere::default(), "g1 went quiet");
    }

    #[test]
    fn a_new_process_on_a_replica_drops_its_predecessors_numbers_at_once() {
        let live = LiveTerminals::default();
        let long = Duration::from_secs(60);
        let alice = Sub::parse("alice").unwrap();
        let here = Some("host-a/127.0.0.1:8080");
        live.record("old", here, long, &[(id(1), 5)], &[(alice.clone(), 5)]);
        live.record("other", Some("host-b/127.0.0.1:8080"), long, &[], &[]);
        assert_eq!(live.count(&id(1)), Some(5));
        // Killed and restarted: the new process's first report takes the replica.
        live.record("new", here, long, &[(id(1), 1)], &[(alice.clone(), 1)]);
        assert_eq!(live.count(&id(1)), Some(1));
        assert_eq!(live.elsewhere("other").users[0].open, 1);
        // An old process still draining after an upgrade counts again when it reports,
        // but never takes the replica back.
        live.record("old", here, long, &[(id(1), 2)], &[(alice.clone(), 2)]);
        assert_eq!(live.count(&id(1)), Some(3));
        live.record("new", here, long, &[], &[]);
        assert_eq!(live.count(&id(1)), Some(3), "both still count");
        assert_eq!(live.elsewhere("new").users[0].open, 2);
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
        live.record("g1", None, long, &[], &[]);
        live.record("g2", None, long, &[], &[]);
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

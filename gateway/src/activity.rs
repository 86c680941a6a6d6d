//! When each session was last typed into on this gateway, and the batched reports of
//! it to control (profiles' `idle_timeout_seconds`).
//!
//! Only input counts: the terminal's frame reader ([`crate::proxy`]'s `ws_frames`)
//! touches the session's [`InputClock`] for each ttyd input message (command `'0'`),
//! never for output, resizes, the first JSON message or pings. A touch is one relaxed
//! atomic store of the current second: no lock, no allocation. The lock of
//! [`Activity`] is taken once per terminal opened and once per report, never across
//! an await.
//!
//! [`ActivityReporter`] sends what moved since the last report every
//! `gateway.activity_report_ms` in one `POST /v1/activity` (split into bounded
//! batches). A report control does not take is tried again at the next interval; a
//! control that is down never holds up a terminal. Beside it, the open terminals go to
//! `POST /v1/terminals` soon after they change, and control's answer feeds the
//! deployment-wide terminal limits ([`crate::terminals`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use policy::SessionId;

use crate::state::{now, Gateway};

/// Most entries in one report: well inside control's default body bound (64 KiB at
/// about 50 bytes an entry).
pub const MAX_BATCH: usize = 500;

/// The time of a session's last input (seconds since the Unix epoch; 0: none yet),
/// shared by its open terminals on this gateway.
#[derive(Debug, Clone, Default)]
pub struct InputClock(Arc<AtomicU64>);

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

/// Reports are fresh for this many intervals (`gateway.activity_report_ms`): control
/// stops counting a gateway whose last report is older, and a gateway stops counting
/// control's last answer when it is older (control down: each gateway falls back to
/// its own counts).
pub const FRESH_INTERVALS: u32 = 3;

/// Most users in one terminal report: a `sub` is up to 128 bytes, about 150 an entry;
/// with [`MAX_BATCH`] sessions that stays inside control's default body bound.
pub const MAX_USER_BATCH: usize = 200;

/// Reports input times and audit lines to control every `gateway.activity_report_ms`,
/// and the open terminals soon after they change (and at least as often).
pub struct ActivityReporter(pub Arc<Gateway>);

#[async_trait]
impl BackgroundService for ActivityReporter {
    async fn start(&self, shutdown: ShutdownWatch) {
        // Names this process in its reports (a restarted gateway is another).
        let mut random = [0u8; 8];
        let me: String = match getrandom::getrandom(&mut random) {
            Ok(()) => random.iter().map(|b| format!("{b:02x}")).collect(),
            Err(_) => format!("pid-{}", std::process::id()),
        };
        // Where this process serves, the same for the process that replaces it after a
        // crash or an upgrade: control then drops this one's counts at once rather
        // than holding its users' places for three intervals.
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let replica = format!("{}/{}", hostname.trim(), self.0.config.gateway.listen);
        // Two loops, so a slow input or audit report never delays a terminal count.
        tokio::join!(
            report_activity(&self.0, &me, shutdown.clone()),
            report_terminals(&self.0, (&me, &replica), shutdown),
        );
    }
}

/// Every interval: the audit lines waiting, then the input times that moved.
async fn report_activity(g: &Gateway, me: &str, mut shutdown: ShutdownWatch) {
    let every = Duration::from_millis(g.config.gateway.activity_report_ms);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    let mut audit = crate::audit::Outbox::open();
    let mut audit_failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        match audit.flush(&g.control, me).await {
            Ok(()) if std::mem::take(&mut audit_failing) => {
                tracing::info!("audit lines reach control again");
            }
            Ok(()) => {}
            Err(e) => {
                if !std::mem::replace(&mut audit_failing, true) {
                    tracing::warn!(error = %e, waiting = audit.len(), dropped = audit.dropped(), "cannot send audit lines to control; retrying every interval");
                }
            }
        }
        let pending = g.activity.pending();
        for batch in pending.chunks(MAX_BATCH) {
            match g.control.report_input(batch).await {
                Ok(()) => {
                    g.activity.reported(batch);
                    if std::mem::take(&mut failing) {
                        tracing::info!("input reports reach control again");
                    }
                }
                Err(e) => {
                    // Kept as pending: the next interval sends them again.
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(error = %e, "cannot report input times to control; retrying every interval");
                    }
                    break;
                }
            }
        }
    }
}

/// Sends the open terminals within `gateway.terminal_report_ms` of a change, and every
/// `gateway.activity_report_ms` regardless (which also tells control this gateway is
/// there), and keeps control's answer — the other gateways' counts — for
/// [`FRESH_INTERVALS`] intervals from when the report left.
async fn report_terminals(g: &Gateway, me: (&str, &str), mut shutdown: ShutdownWatch) {
    let every = Duration::from_millis(g.config.gateway.activity_report_ms);
    let soon = Duration::from_millis(g.config.gateway.terminal_report_ms).min(every);
    // A quiet gateway reports every this many ticks: never later than `every`.
    let regular = (every.as_millis() / soon.as_millis().max(1)).max(1);
    let mut tick = tokio::time::interval(soon);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported = Reported::default();
    // The change count last sent, and ticks since.
    let mut sent: Option<u64> = None;
    let mut quiet = 0u128;
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        quiet += 1;
        let changes = g.terminals.changes();
        if sent == Some(changes) && quiet < regular {
            g.count_elsewhere();
            continue;
        }
        (sent, quiet) = (Some(changes), 0);
        let left = std::time::Instant::now();
        match send_terminals(g, me, every, &mut reported).await {
            Ok(answer) => {
                if let Some(elsewhere) = answer {
                    g.terminals
                        .learn_elsewhere(elsewhere, left + every * FRESH_INTERVALS);
                }
                if std::mem::take(&mut failing) {
                    tracing::info!("terminal counts reach control again");
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "cannot report open terminals to control; limits count only this gateway's terminals once its last answer is {FRESH_INTERVALS} intervals old");
                }
            }
        }
        g.count_elsewhere();
    }
}

/// The sessions and users reported open last time: each gets a zero once it has none.
#[derive(Default)]
struct Reported {
    sessions: HashSet<SessionId>,
    users: HashSet<String>,
}

/// Sends the open terminals per session and per user, with a zero for each that had
/// some at the previous report; keeps what was reported open (all of the previous ones
/// too when control did not take the report, so their zeros are sent later). Returns
/// control's answer to the last batch. `me`: this process and its replica.
async fn send_terminals(
    g: &Gateway,
    me: (&str, &str),
    every: Duration,
    reported: &mut Reported,
) -> Result<Option<crate::terminals::Elsewhere>, crate::control_client::Unavailable> {
    let sessions_now = g.terminals.per_session();
    let users_now = g.terminals.per_user();
    let mut sessions: Vec<(SessionId, u32)> =
        sessions_now.iter().map(|(id, n)| (*id, *n)).collect();
    sessions.extend(
        reported
            .sessions
            .iter()
            .filter(|id| !sessions_now.contains_key(id))
            .map(|id| (*id, 0)),
    );
    let mut users: Vec<(&str, u32)> = users_now.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    users.extend(
        reported
            .users
            .iter()
            .filter(|s| !users_now.contains_key(*s))
            .map(|s| (s.as_str(), 0)),
    );
    // At least one report, empty or not: it tells control this gateway is there.
    let batches = sessions
        .len()
        .div_ceil(MAX_BATCH)
        .max(users.len().div_ceil(MAX_USER_BATCH))
        .max(1);
    // Every batch names all viewers: each report replaces the gateway's last.
    let viewers = g.terminals.viewers();
    let mut answer = None;
    for i in 0..batches {
        let part = |len: usize, size: usize| (i * size).min(len)..((i + 1) * size).min(len);
        let s = &sessions[part(sessions.len(), MAX_BATCH)];
        let u = &users[part(users.len(), MAX_USER_BATCH)];
        match g
            .control
            .report_terminals(me.0, me.1, every, s, u, &viewers)
            .await
        {
            Ok(a) => answer = a,
            Err(e) => {
                reported.sessions.extend(sessions_now.into_keys());
                reported.users.extend(users_now.into_keys());
                return Err(e);
            }
        }
    }
    reported.sessions = sessions_now.into_keys().collect();
    reported.users = users_now.into_keys().collect();
    Ok(answer)
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

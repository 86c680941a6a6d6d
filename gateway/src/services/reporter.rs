//! Reports to control: input times and audit lines every `gateway.activity_report_ms`
//! in one `POST /v1/activity` (split into bounded batches), and the open terminals to
//! `POST /v1/terminals` soon after they change; control's answer feeds the
//! deployment-wide terminal limits ([`crate::terminals`]). A report control does not
//! take is tried again at the next interval; a control that is down never holds up a
//! terminal.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use policy::SessionId;

use crate::activity::{Activity, MAX_BATCH};
use crate::control_client::ControlClient;
use crate::metrics::Metrics;
use crate::terminals::Terminals;

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
pub struct ActivityReporter {
    /// Every session's input clock.
    pub activity: Arc<Activity>,
    /// The open terminals, and what control answers of the other gateways'.
    pub terminals: Arc<Terminals>,
    /// Control's internal API.
    pub control: ControlClient,
    /// Where the other gateways' counts are shown.
    pub metrics: Arc<Metrics>,
    /// `gateway.listen`: with the host's name, names this replica.
    pub listen: String,
    /// `gateway.activity_report_ms`.
    pub activity_report_ms: u64,
    /// `gateway.terminal_report_ms`.
    pub terminal_report_ms: u64,
}

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
        let replica = format!("{}/{}", hostname.trim(), self.listen);
        // Two loops, so a slow input or audit report never delays a terminal count.
        tokio::join!(
            report_activity(self, &me, shutdown.clone()),
            report_terminals(self, (&me, &replica), shutdown),
        );
    }
}

impl ActivityReporter {
    /// Shows the other gateways' counts as admission sees them now.
    pub fn count_elsewhere(&self) {
        let m = &self.metrics;
        let (terminals, viewers, fresh) = match self.terminals.elsewhere_totals() {
            Some((t, v)) => (t, v, 1),
            None => (0, 0, 0),
        };
        m.elsewhere_terminals
            .set(i64::try_from(terminals).unwrap_or(i64::MAX));
        m.elsewhere_viewers
            .set(i64::try_from(viewers).unwrap_or(i64::MAX));
        m.elsewhere_fresh.set(fresh);
    }
}

/// Every interval: the audit lines waiting, then the input times that moved.
async fn report_activity(r: &ActivityReporter, me: &str, mut shutdown: ShutdownWatch) {
    let every = Duration::from_millis(r.activity_report_ms);
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
        match audit.flush(&r.control, me).await {
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
        let pending = r.activity.pending();
        for batch in pending.chunks(MAX_BATCH) {
            match r.control.report_input(batch).await {
                Ok(()) => {
                    r.activity.reported(batch);
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
async fn report_terminals(r: &ActivityReporter, me: (&str, &str), mut shutdown: ShutdownWatch) {
    let every = Duration::from_millis(r.activity_report_ms);
    let soon = Duration::from_millis(r.terminal_report_ms).min(every);
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
        let changes = r.terminals.changes();
        if sent == Some(changes) && quiet < regular {
            r.count_elsewhere();
            continue;
        }
        (sent, quiet) = (Some(changes), 0);
        let left = std::time::Instant::now();
        match send_terminals(r, me, every, &mut reported).await {
            Ok(answer) => {
                if let Some(elsewhere) = answer {
                    r.terminals
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
        r.count_elsewhere();
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
    r: &ActivityReporter,
    me: (&str, &str),
    every: Duration,
    reported: &mut Reported,
) -> Result<Option<crate::terminals::Elsewhere>, crate::control_client::Unavailable> {
    let sessions_now = r.terminals.per_session();
    let users_now = r.terminals.per_user();
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
    let viewers = r.terminals.viewers();
    let mut answer = None;
    for i in 0..batches {
        let part = |len: usize, size: usize| (i * size).min(len)..((i + 1) * size).min(len);
        let s = &sessions[part(sessions.len(), MAX_BATCH)];
        let u = &users[part(users.len(), MAX_USER_BATCH)];
        match r
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

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

use crate::activity::MAX_BATCH;
use crate::state::Gateway;

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

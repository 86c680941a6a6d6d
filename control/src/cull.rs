//! The culler: ends running sessions whose profile's `idle_timeout_seconds` or
//! `max_lifetime_seconds` has run out (design §4, lifecycle).
//!
//! Once a second it reads the active sessions from the store and asks
//! `policy::lifetime` whether each running one is due; a due session is ended by
//! [`Sessions::end_if_due`], which decides again inside the store's write, so an input
//! reported in between keeps it. The loop only decides (a store write each); every
//! container is stopped on a task of its own, so a slow stop never delays the next
//! end or the next look. When no profile sets either limit the culler does not run at
//! all.
//!
//! It starts looking two report intervals (`gateway.activity_report_ms`) after control
//! starts: gateways send again what a control that was down did not take, and a
//! session typed into meanwhile must not be judged on the stale time first.

use std::time::Duration;

use crate::model::SessionState;
use crate::service::{now, Sessions};

/// How often the culler looks. Deadlines are whole seconds.
const INTERVAL: Duration = Duration::from_secs(1);

/// Ends sessions whose profile's limits ran out, until `shutdown` fires.
pub async fn run(sessions: Sessions, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    if !sessions
        .profiles()
        .values()
        .any(|p| p.lifetime_limits().is_limited())
    {
        return;
    }
    // Reports that gateways could not deliver while control was down arrive within
    // one report interval of its start: none is judged idle before they can.
    let grace = Duration::from_millis(
        sessions
            .config()
            .gateway
            .activity_report_ms
            .saturating_mul(2),
    ) + INTERVAL;
    tokio::select! {
        _ = tokio::time::sleep(grace) => {}
        _ = shutdown.changed() => return,
    }
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => pass(&sessions),
            _ = shutdown.changed() => return,
        }
    }
}

/// One look: starts the end of every running session that is due now.
fn pass(sessions: &Sessions) {
    let active = match sessions.store().list_active(None) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "cull: cannot read the store; the next look tries again");
            return;
        }
    };
    let t = now();
    for s in active {
        let due = s.state == SessionState::Running
            && !sessions.is_being_ended(&s.id)
            && sessions.deadline(&s).is_some_and(|d| t >= d.at);
        if !due {
            continue;
        }
        if let Err(e) = sessions.end_if_due(&s.id) {
            tracing::warn!(session = %s.id, error = %e.message, "cull: the end could not be recorded; the next look tries again");
        }
    }
}

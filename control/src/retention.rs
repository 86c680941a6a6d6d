//! Recordings' retention (design §8 "Retention"): every `control.recordings_prune_ms`
//! control reads what `control.recordings_dir` holds, asks `policy::retention::prune`
//! which recordings go — older than `recordings_keep_days`, then the oldest while a
//! user or the deployment is over its cap — removes them and writes an audit line for
//! each (`recording pruned`, with the session, its owner, the bytes and the key that
//! decided). With none of the three set it does not run.
//!
//! A recording's age is when control stored it (the file's modification time); its
//! owner is its session's, from the store's active or ended sessions; a recording
//! whose session record is gone counts towards the deployment's cap only.

use std::time::Duration;

use crate::recordings::StoredRecording;
use crate::service::{now, Sessions};
use policy::retention::{prune, KeptRecording, RetentionRules};

/// The deployment's rules, from `[control]`.
pub fn rules(sessions: &Sessions) -> RetentionRules {
    let c = &sessions.config().control;
    RetentionRules {
        keep_days: c.recordings_keep_days,
        max_total_bytes: c.recordings_max_total_bytes,
        max_user_bytes: c.recordings_max_user_bytes,
    }
}

/// Applies the rules every `control.recordings_prune_ms`, until `shutdown` fires.
pub async fn run(sessions: Sessions, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    if rules(&sessions) == RetentionRules::default() {
        return;
    }
    let every = Duration::from_millis(sessions.config().control.recordings_prune_ms);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let c = sessions.clone();
                // Reading a directory and removing files: off the runtime's threads.
                if let Err(e) = tokio::task::spawn_blocking(move || pass(&c)).await {
                    tracing::warn!(error = %e, "recordings' retention pass failed");
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Who owns each stored recording's session, as far as the store remembers.
fn kept(sessions: &Sessions, stored: &[StoredRecording]) -> Vec<KeptRecording> {
    let store = sessions.store();
    stored
        .iter()
        .map(|r| {
            let owner = match store.get(&r.session) {
                Ok(Some(s)) => Some(s.owner),
                _ => store.get_ended(&r.session).ok().flatten().map(|s| s.owner),
            };
            KeptRecording {
                owner: owner.map(|o| o.to_string()),
                bytes: r.bytes,
                stored_at: r.stored_at,
            }
        })
        .collect()
}

/// One pass: removes what the rules say goes. Returns how many were removed.
pub fn pass(sessions: &Sessions) -> usize {
    let recordings = sessions.recordings();
    let stored = recordings.scan();
    let kept = kept(sessions, &stored);
    let mut removed = 0;
    for (i, why) in prune(&kept, rules(sessions), now()) {
        let (r, k) = (&stored[i], &kept[i]);
        match recordings.remove(r) {
            Ok(()) => {
                removed += 1;
                tracing::info!(
                    target: "audit",
                    session = %r.session,
                    sub = k.owner.as_deref().unwrap_or("-"),
                    recording = %r.name,
                    bytes = r.bytes,
                    stored_at = r.stored_at,
                    reason = why.as_str(),
                    "recording pruned"
                );
            }
            Err(e) => {
                tracing::warn!(session = %r.session, recording = %r.name, error = %e, "cannot remove a recording; the next pass tries again");
            }
        }
    }
    removed
}

/// What the recordings hold, for the console (`GET /v1/retention`).
#[derive(Debug)]
pub struct Usage {
    /// Recordings kept.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// When the oldest was stored, seconds since the Unix epoch.
    pub oldest_stored_at: Option<u64>,
    /// `control.recordings_keep_days` (0: no age limit).
    pub keep_days: u64,
    /// `control.recordings_max_total_bytes` (0: no cap).
    pub max_total_bytes: u64,
    /// `control.recordings_max_user_bytes` (0: no cap).
    pub max_user_bytes: u64,
    /// Per owner, the largest first (`-`: a session no record is left of).
    pub users: Vec<UserUsage>,
}

/// One owner's recordings.
#[derive(Debug)]
pub struct UserUsage {
    /// The owner's `sub`.
    pub sub: String,
    /// Recordings kept.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// What the recordings hold now, and the rules that keep them.
pub fn usage(sessions: &Sessions) -> Usage {
    let stored = sessions.recordings().scan();
    let kept = kept(sessions, &stored);
    let rules = rules(sessions);
    let mut users: std::collections::BTreeMap<&str, UserUsage> = Default::default();
    for k in &kept {
        let sub = k.owner.as_deref().unwrap_or("-");
        let u = users.entry(sub).or_insert_with(|| UserUsage {
            sub: sub.to_owned(),
            files: 0,
            bytes: 0,
        });
        u.files += 1;
        u.bytes += k.bytes;
    }
    let mut users: Vec<UserUsage> = users.into_values().collect();
    users.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.sub.cmp(&b.sub)));
    Usage {
        files: kept.len(),
        bytes: kept.iter().map(|k| k.bytes).sum(),
        oldest_stored_at: kept.iter().map(|k| k.stored_at).min(),
        keep_days: rules.keep_days,
        max_total_bytes: rules.max_total_bytes,
        max_user_bytes: rules.max_user_bytes,
        users,
    }
}

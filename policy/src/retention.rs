//! How long recordings are kept (design §8 "Retention"): which of the kept recordings
//! control removes, and why — by age (`control.recordings_keep_days`), then the
//! oldest first while the deployment (`control.recordings_max_total_bytes`) or one
//! user (`control.recordings_max_user_bytes`) holds more than its cap.

/// The deployment's rules; 0 turns a rule off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionRules {
    /// Recordings older than this many days go.
    pub keep_days: u64,
    /// All recordings together stay within this many bytes.
    pub max_total_bytes: u64,
    /// One user's recordings (those of the sessions they own) stay within this many bytes.
    pub max_user_bytes: u64,
}

/// One kept recording, as the decision sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptRecording {
    /// The owner of its session (`sub`), or `None` when no record of it is left:
    /// such a recording counts towards the deployment's cap only.
    pub owner: Option<String>,
    /// Bytes on disk.
    pub bytes: u64,
    /// When control stored it, seconds since the Unix epoch.
    pub stored_at: u64,
}

/// Why a recording goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneReason {
    /// Older than `keep_days`.
    Age,
    /// Its owner's recordings are over `max_user_bytes`; the oldest go first.
    UserCap,
    /// All recordings are over `max_total_bytes`; the oldest go first.
    TotalCap,
}

impl PruneReason {
    /// The audit line's `reason`, and the configuration key that decided it.
    pub fn as_str(self) -> &'static str {
        match self {
            PruneReason::Age => "recordings_keep_days",
            PruneReason::UserCap => "recordings_max_user_bytes",
            PruneReason::TotalCap => "recordings_max_total_bytes",
        }
    }
}

const DAY: u64 = 24 * 60 * 60;

/// Which of `kept` go at `now` (seconds) and why, as indexes into `kept`, each once.
/// Age is judged first; the caps then count only what is left, oldest first (ties by
/// index, so the answer does not depend on the order a directory was read in beyond
/// the times themselves). A user's cap is applied before the deployment's, so one
/// user filling the disk loses their own recordings before anyone else's.
pub fn prune(kept: &[KeptRecording], rules: RetentionRules, now: u64) -> Vec<(usize, PruneReason)> {
    let mut gone: Vec<Option<PruneReason>> = vec![None; kept.len()];
    if rules.keep_days > 0 {
        let oldest_kept = now.saturating_sub(rules.keep_days.saturating_mul(DAY));
        for (i, r) in kept.iter().enumerate() {
            if r.stored_at < oldest_kept {
                gone[i] = Some(PruneReason::Age);
            }
        }
    }
    let mut by_age: Vec<usize> = (0..kept.len()).collect();
    by_age.sort_by_key(|&i| (kept[i].stored_at, i));
    if rules.max_user_bytes > 0 {
        let mut held: std::collections::BTreeMap<&str, u64> = Default::default();
        for (i, r) in kept.iter().enumerate() {
            if let (None, Some(owner)) = (gone[i], &r.owner) {
                *held.entry(owner).or_default() += r.bytes;
            }
        }
        for &i in &by_age {
            let Some(owner) = kept[i].owner.as_deref() else {
                continue;
            };
            let Some(total) = held.get_mut(owner) else {
                continue;
            };
            if gone[i].is_none() && *total > rules.max_user_bytes {
                *total -= kept[i].bytes;
                gone[i] = Some(PruneReason::UserCap);
            }
        }
    }
    if rules.max_total_bytes > 0 {
        let mut total: u64 = (0..kept.len())
            .filter(|&i| gone[i].is_none())
            .map(|i| kept[i].bytes)
            .sum();
        for &i in &by_age {
            if total <= rules.max_total_bytes {
                break;
            }
            if gone[i].is_none() {
                total -= kept[i].bytes;
                gone[i] = Some(PruneReason::TotalCap);
            }
        }
    }
    gone.into_iter()
        .enumerate()
        .filter_map(|(i, why)| Some((i, why?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(owner: &str, bytes: u64, stored_at: u64) -> KeptRecording {
        KeptRecording {
            owner: (!owner.is_empty()).then(|| owner.to_string()),
            bytes,
            stored_at,
        }
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn no_rule_keeps_everything() {
        let kept = [rec("alice", 1 << 30, 0), rec("", 1, NOW)];
        assert!(prune(&kept, RetentionRules::default(), NOW).is_empty());
    }

    #[test]
    fn age_removes_what_is_older_than_keep_days_and_nothing_younger() {
        let rules = RetentionRules {
            keep_days: 30,
            ..Default::default()
        };
        let kept = [
            rec("alice", 10, NOW - 30 * DAY - 1),
            rec("alice", 10, NOW - 30 * DAY),
            rec("bob", 10, NOW),
        ];
        assert_eq!(prune(&kept, rules, NOW), [(0, PruneReason::Age)]);
    }

    #[test]
    fn a_users_cap_removes_their_oldest_until_under_and_spares_others() {
        let rules = RetentionRules {
            max_user_bytes: 100,
            ..Default::default()
        };
        let kept = [
            rec("alice", 60, NOW - 5),
            rec("bob", 500, NOW - 9),
            rec("alice", 60, NOW - 1),
            rec("alice", 60, NOW - 7),
            rec("", 900, NOW - 20),
        ];
        // Alice holds 180: her oldest (index 3) then the next (index 0) go, 60 left.
        // Bob's one recording is over the cap by itself, and goes; the orphan counts
        // towards no user.
        assert_eq!(
            prune(&kept, rules, NOW),
            [
                (0, PruneReason::UserCap),
                (1, PruneReason::UserCap),
                (3, PruneReason::UserCap)
            ]
        );
    }

    #[test]
    fn the_total_cap_removes_the_oldest_of_anyone_counting_only_what_age_left() {
        let rules = RetentionRules {
            keep_days: 1,
            max_total_bytes: 100,
            ..Default::default()
        };
        let kept = [
            rec("alice", 50, NOW - 2 * DAY),
            rec("bob", 50, NOW - 30),
            rec("", 50, NOW - 40),
            rec("alice", 50, NOW - 10),
        ];
        // Index 0 goes by age; 150 remain, the oldest of them (index 2) goes: 100.
        assert_eq!(
            prune(&kept, rules, NOW),
            [(0, PruneReason::Age), (2, PruneReason::TotalCap)]
        );
    }

    #[test]
    fn equal_times_go_in_index_order_and_huge_settings_do_not_overflow() {
        let rules = RetentionRules {
            keep_days: u64::MAX,
            max_total_bytes: 10,
            max_user_bytes: u64::MAX,
        };
        let kept = [rec("a", 10, 5), rec("b", 10, 5)];
        assert_eq!(prune(&kept, rules, NOW), [(0, PruneReason::TotalCap)]);
    }
}

//! When a session ends by itself: after a profile's `idle_timeout_seconds` without
//! input on any of its terminals, or at its `max_lifetime_seconds`.
//!
//! Only input counts as activity: output, pings and open terminals do not, so a
//! terminal printing a clock forever does not keep its session alive. The gateway
//! reports when a user last typed (`last_input`); a session nobody ever typed into is
//! idle from its creation.

/// A profile's limits on a session's life, seconds; `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LifetimeLimits {
    /// End after this long without input.
    pub idle_timeout: Option<u64>,
    /// End this long after creation, whatever happens.
    pub max_lifetime: Option<u64>,
}

/// Why a session ends by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndCause {
    /// No input for the idle timeout.
    Idle,
    /// The maximum lifetime was reached.
    MaxLifetime,
}

impl EndCause {
    /// Stable name: the first word of the session's `end_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndCause::Idle => "idle",
            EndCause::MaxLifetime => "max_lifetime",
        }
    }
}

/// When, and why, a session will end by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// Seconds since the Unix epoch.
    pub at: u64,
    /// What ends it then.
    pub cause: EndCause,
}

impl LifetimeLimits {
    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.idle_timeout.is_some() || self.max_lifetime.is_some()
    }

    /// The earlier of the idle deadline (`idle_timeout` after the later of creation and
    /// the last input) and the lifetime deadline (`max_lifetime` after creation); on a
    /// tie the lifetime, which no input can move. `None` when no limit is set.
    pub fn deadline(&self, created_at: u64, last_input: Option<u64>) -> Option<Deadline> {
        let idle = self.idle_timeout.map(|t| Deadline {
            at: created_at.max(last_input.unwrap_or(0)).saturating_add(t),
            cause: EndCause::Idle,
        });
        let lifetime = self.max_lifetime.map(|t| Deadline {
            at: created_at.saturating_add(t),
            cause: EndCause::MaxLifetime,
        });
        match (idle, lifetime) {
            (Some(i), Some(l)) => Some(if i.at < l.at { i } else { l }),
            (i, l) => i.or(l),
        }
    }

    /// Whether a session created at `created_at`, last typed into at `last_input`, is
    /// due to end at `now`, and why.
    pub fn due(&self, created_at: u64, last_input: Option<u64>, now: u64) -> Option<EndCause> {
        self.deadline(created_at, last_input)
            .filter(|d| now >= d.at)
            .map(|d| d.cause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000;

    fn limits(idle: Option<u64>, max: Option<u64>) -> LifetimeLimits {
        LifetimeLimits {
            idle_timeout: idle,
            max_lifetime: max,
        }
    }

    #[test]
    fn without_limits_a_session_never_ends_by_itself() {
        let l = LifetimeLimits::default();
        assert!(!l.is_limited());
        assert_eq!(l.deadline(T0, None), None);
        assert_eq!(l.due(T0, Some(T0), u64::MAX), None);
    }

    #[test]
    fn a_session_never_typed_into_is_idle_from_its_creation() {
        let l = limits(Some(60), None);
        assert_eq!(l.due(T0, None, T0 + 59), None);
        assert_eq!(l.due(T0, None, T0 + 60), Some(EndCause::Idle));
    }

    #[test]
    fn input_moves_the_idle_deadline() {
        let l = limits(Some(60), None);
        assert_eq!(l.due(T0, Some(T0 + 50), T0 + 100), None);
        assert_eq!(l.due(T0, Some(T0 + 50), T0 + 110), Some(EndCause::Idle));
        assert_eq!(
            l.deadline(T0, Some(T0 + 50)),
            Some(Deadline {
                at: T0 + 110,
                cause: EndCause::Idle
            })
        );
    }

    #[test]
    fn input_from_before_creation_does_not_shorten_the_idle_deadline() {
        // A report about an earlier session, or a clock behind: creation still counts.
        let l = limits(Some(60), None);
        assert_eq!(l.due(T0, Some(T0 - 1000), T0 + 59), None);
    }

    #[test]
    fn input_never_moves_the_lifetime_deadline() {
        let l = limits(Some(60), Some(300));
        assert_eq!(l.due(T0, Some(T0 + 290), T0 + 299), None);
        assert_eq!(
            l.due(T0, Some(T0 + 290), T0 + 300),
            Some(EndCause::MaxLifetime)
        );
        assert_eq!(
            limits(None, Some(300)).due(T0, Some(T0 + 299), T0 + 300),
            Some(EndCause::MaxLifetime)
        );
    }

    #[test]
    fn the_earlier_deadline_wins_and_a_tie_is_the_lifetime() {
        let l = limits(Some(60), Some(300));
        assert_eq!(l.deadline(T0, None).map(|d| d.cause), Some(EndCause::Idle));
        assert_eq!(
            l.deadline(T0, Some(T0 + 240)),
            Some(Deadline {
                at: T0 + 300,
                cause: EndCause::MaxLifetime
            })
        );
        assert_eq!(l.deadline(T0, Some(T0 + 250)).map(|d| d.at), Some(T0 + 300));
    }

    #[test]
    fn huge_limits_saturate_instead_of_wrapping() {
        let l = limits(Some(u64::MAX), Some(u64::MAX));
        assert_eq!(l.due(T0, Some(u64::MAX), u64::MAX - 1), None);
        assert_eq!(l.deadline(T0, None).map(|d| d.at), Some(u64::MAX));
    }

    #[test]
    fn causes_have_stable_names() {
        assert_eq!(EndCause::Idle.as_str(), "idle");
        assert_eq!(EndCause::MaxLifetime.as_str(), "max_lifetime");
    }
}

//! Session quotas as a pure function of the current counts.

/// Configured limits on running-or-starting sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Sessions one user may hold at once.
    pub per_user: u32,
    /// Sessions the whole deployment may hold at once.
    pub global: u32,
}

/// Which limit was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaScope {
    /// The user's own limit.
    User,
    /// The deployment-wide limit.
    Global,
}

/// A create that would exceed a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{scope:?} session quota of {limit} reached")]
pub struct QuotaExceeded {
    /// Which limit.
    pub scope: QuotaScope,
    /// Its value.
    pub limit: u32,
}

impl QuotaLimits {
    /// May one more session be created, given the user's and the deployment's current
    /// counts of sessions that hold resources (`creating`, `running`, `stopping`)?
    pub fn check(&self, user_active: u32, global_active: u32) -> Result<(), QuotaExceeded> {
        if user_active >= self.per_user {
            return Err(QuotaExceeded {
                scope: QuotaScope::User,
                limit: self.per_user,
            });
        }
        if global_active >= self.global {
            return Err(QuotaExceeded {
                scope: QuotaScope::Global,
                limit: self.global,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_nth_plus_one_is_refused() {
        let q = QuotaLimits {
            per_user: 3,
            global: 10,
        };
        assert!(q.check(2, 2).is_ok());
        assert_eq!(q.check(3, 3).unwrap_err().scope, QuotaScope::User);
        assert_eq!(q.check(0, 10).unwrap_err().scope, QuotaScope::Global);
    }

    #[test]
    fn zero_limits_refuse_everything() {
        assert!(QuotaLimits {
            per_user: 0,
            global: 5
        }
        .check(0, 0)
        .is_err());
        assert!(QuotaLimits {
            per_user: 5,
            global: 0
        }
        .check(0, 0)
        .is_err());
    }

    proptest! {
        #[test]
        fn admitting_until_refused_never_exceeds_either_limit(per_user in 0u32..20, global in 0u32..40, users in 1usize..6, order in proptest::collection::vec(0usize..6, 0..200)) {
            let q = QuotaLimits { per_user, global };
            let mut counts = vec![0u32; users];
            let mut total = 0u32;
            for u in order {
                let u = u % users;
                if q.check(counts[u], total).is_ok() {
                    counts[u] += 1;
                    total += 1;
                }
            }
            prop_assert!(total <= global);
            prop_assert!(counts.iter().all(|&c| c <= per_user));
        }

        #[test]
        fn check_agrees_with_the_definition(per_user in any::<u32>(), global in any::<u32>(), u in any::<u32>(), g in any::<u32>()) {
            let q = QuotaLimits { per_user, global };
            prop_assert_eq!(q.check(u, g).is_ok(), u < per_user && g < global);
        }
    }
}

//! Access decisions: may this principal do this to that session?
//!
//! A session the caller does not own and a session that does not exist produce the
//! **same** refusal, so ids cannot be probed.

use crate::feed::Route;
use crate::identity::Principal;
use crate::refusal::Refusal;
use crate::terminal_access::{by_route, AdmittedAs};

/// What the caller wants to do with a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Open its terminal (page, token or websocket upgrade).
    OpenTerminal,
    /// Read its record.
    Read,
    /// End it.
    End,
    /// Nudge its terminal to repaint.
    Redraw,
    /// Create, list or revoke its read-only share links.
    Share,
    /// Invite, list or remove its peers (users who co-drive it).
    Invite,
    /// Create a new session (no owner yet).
    Create,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead; `as_admin` is true when only the admin role made it so.
    Allow {
        /// Allowed by the admin role rather than by ownership.
        as_admin: bool,
    },
    /// Refuse: [`Refusal::NOT_FOUND`] or [`Refusal::LOCKED`].
    Deny(Refusal),
}

impl Decision {
    /// Whether the decision allows.
    pub fn is_allow(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

/// Decides `action` by `principal` on a session owned by `owner` (`None`: no such
/// session, or — for [`Action::OpenTerminal`] — no running session). `locked` is
/// whether the principal's user is locked.
pub fn decide(
    principal: &Principal,
    owner: Option<&str>,
    locked: bool,
    action: Action,
) -> Decision {
    if locked {
        return Decision::Deny(Refusal::LOCKED);
    }
    if action == Action::Create {
        return Decision::Allow { as_admin: false };
    }
    match owner {
        Some(owner) if owner == principal.sub.as_str() => Decision::Allow { as_admin: false },
        Some(_) if principal.admin => Decision::Allow { as_admin: true },
        _ => Decision::Deny(Refusal::NOT_FOUND),
    }
}

/// Decides whether `principal` may open the terminal of `route` (`None`: unknown, or
/// not running). A Docker session is its owner's (or an admin's); a target is open to
/// the users and roles it lists (and admins). Everyone else, like an unknown id, gets
/// [`Refusal::NOT_FOUND`]. The rule is `terminal_access::by_route`'s.
pub fn decide_terminal(principal: &Principal, route: Option<&Route>, locked: bool) -> Decision {
    if locked {
        return Decision::Deny(Refusal::LOCKED);
    }
    let p = principal;
    match route.and_then(|r| by_route(p.sub.as_str(), p.admin, &p.roles, r)) {
        Some(AdmittedAs::Admin) => Decision::Allow { as_admin: true },
        Some(_) => Decision::Allow { as_admin: false },
        None => Decision::Deny(Refusal::NOT_FOUND),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Sub;

    fn who(sub: &str, admin: bool) -> Principal {
        Principal {
            sub: Sub::parse(sub).unwrap(),
            admin,
            roles: Vec::new(),
            expires_at: 0,
            issued_at: 0,
            jti: None,
        }
    }

    const ALL: [Action; 6] = [
        Action::OpenTerminal,
        Action::Read,
        Action::End,
        Action::Redraw,
        Action::Share,
        Action::Invite,
    ];

    #[test]
    fn owner_is_allowed_every_action() {
        for a in ALL {
            assert_eq!(
                decide(&who("alice", false), Some("alice"), false, a),
                Decision::Allow { as_admin: false }
            );
        }
    }

    #[test]
    fn non_owner_and_unknown_get_the_identical_refusal() {
        for a in ALL {
            let other = decide(&who("bob", false), Some("alice"), false, a);
            let unknown = decide(&who("bob", false), None, false, a);
            assert_eq!(other, Decision::Deny(Refusal::NOT_FOUND));
            assert_eq!(other, unknown);
        }
    }

    #[test]
    fn admin_may_act_on_others_but_unknown_stays_404() {
        assert_eq!(
            decide(&who("root", true), Some("alice"), false, Action::End),
            Decision::Allow { as_admin: true }
        );
        assert_eq!(
            decide(&who("root", true), None, false, Action::End),
            Decision::Deny(Refusal::NOT_FOUND)
        );
    }

    #[test]
    fn locked_user_is_refused_even_on_own_session_and_create() {
        for a in ALL.into_iter().chain([Action::Create]) {
            assert_eq!(
                decide(&who("alice", true), Some("alice"), true, a),
                Decision::Deny(Refusal::LOCKED)
            );
        }
    }

    #[test]
    fn owner_match_is_exact_not_prefix_or_case() {
        assert!(!decide(&who("alice", false), Some("alice2"), false, Action::Read).is_allow());
        assert!(!decide(&who("alice", false), Some("Alice"), false, Action::Read).is_allow());
        assert!(!decide(&who("ali", false), Some("alice"), false, Action::Read).is_allow());
    }

    fn target(users: &[&str], roles: &[&str]) -> Route {
        let mut r = Route::container(crate::SessionId::from_random([7; 10]), "", "");
        r.target = Some(crate::feed::TargetAccess {
            users: users.iter().map(|u| u.to_string()).collect(),
            roles: roles.iter().map(|u| u.to_string()).collect(),
            credential: None,
        });
        r
    }

    #[test]
    fn a_target_opens_for_its_users_and_roles_and_looks_unknown_to_everyone_else() {
        let t = target(&["alice"], &["ops"]);
        let mut carol = who("carol", false);
        assert_eq!(
            decide_terminal(&who("alice", false), Some(&t), false),
            Decision::Allow { as_admin: false }
        );
        assert_eq!(
            decide_terminal(&carol, Some(&t), false),
            decide_terminal(&carol, None, false)
        );
        assert_eq!(
            decide_terminal(&carol, Some(&t), false),
            Decision::Deny(Refusal::NOT_FOUND)
        );
        carol.roles = vec!["ops".into()];
        assert!(decide_terminal(&carol, Some(&t), false).is_allow());
        assert_eq!(
            decide_terminal(&carol, Some(&t), true),
            Decision::Deny(Refusal::LOCKED)
        );
        assert_eq!(
            decide_terminal(&who("root", true), Some(&t), false),
            Decision::Allow { as_admin: true }
        );
        // A target never opens by ownership, even for a sub equal to its empty owner.
        assert!(!decide_terminal(&who("bob", false), Some(&target(&[], &[])), false).is_allow());
    }

    #[test]
    fn a_session_route_is_decided_by_its_owner() {
        let r = Route::container(crate::SessionId::from_random([8; 10]), "alice", "c1");
        assert!(decide_terminal(&who("alice", false), Some(&r), false).is_allow());
        assert_eq!(
            decide_terminal(&who("bob", false), Some(&r), false),
            Decision::Deny(Refusal::NOT_FOUND)
        );
    }
}

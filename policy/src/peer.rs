//! Peers: users a Docker session's owner invites to co-drive it — the owner's writable
//! terminal, for a bounded time, revocable at any time.
//!
//! Control keeps the invitations on the session's record and publishes them on its
//! route ([`PeerGrant`]), so every gateway decides a peer's terminal locally and closes
//! it as soon as the feed drops the grant. To anyone not invited, the session stays the
//! one [`Refusal::NOT_FOUND`] of an unknown id.

use crate::feed::{PeerGrant, Route};
use crate::identity::{Principal, Sub};
use crate::refusal::Refusal;

/// Shortest and longest life of an invitation, seconds (1 minute – 24 hours).
pub const TTL_RANGE: std::ops::RangeInclusive<u64> = 60..=24 * 3600;
/// Most peers one session holds at once.
pub const MAX_PEERS: usize = 16;

/// The `X-Termgate-User` a peer's terminal carries to ttyd: `peer:<sub>`.
pub fn terminal_user(sub: &str) -> String {
    format!("peer:{sub}")
}

/// Checks an invitation of `sub` to a session owned by `owner`: a profile that allows
/// peers (`enabled`), a valid user name that is not the owner's, and `ttl_seconds`
/// within `min_ttl..=`[`TTL_RANGE`]'s end (`min_ttl` is [`TTL_RANGE`]'s start but in a
/// test build). Returns the parsed `sub`.
pub fn check_request(
    enabled: bool,
    owner: &str,
    sub: &str,
    ttl_seconds: u64,
    min_ttl: u64,
) -> Result<Sub, Refusal> {
    if !enabled {
        return Err(Refusal::PEERS_OFF);
    }
    let sub = Sub::parse(sub).ok_or(Refusal::INVALID_PEER)?;
    if sub.as_str() == owner {
        return Err(Refusal::INVALID_PEER.with_message("the owner cannot be their own peer"));
    }
    if ttl_seconds < min_ttl || ttl_seconds > *TTL_RANGE.end() {
        return Err(Refusal::INVALID_PEER);
    }
    Ok(sub)
}

/// The unexpired grant of `sub` on `route` at `now`, if any (never on a target).
pub fn grant_of<'a>(route: &'a Route, sub: &str, now: u64) -> Option<&'a PeerGrant> {
    if route.target.is_some() {
        return None;
    }
    grant_in(&route.peers, sub, now)
}

/// The unexpired grant of `sub` among `peers` at `now`, if any.
pub fn grant_in<'a>(peers: &'a [PeerGrant], sub: &str, now: u64) -> Option<&'a PeerGrant> {
    peers.iter().find(|g| g.sub == sub && g.expires_at > now)
}

/// Whether `principal` may open the terminal of `route` (`None`: unknown or not
/// running) as a peer at `now`. `locked`: the principal is locked; `owner_locked`: the
/// session's owner is. Returns the grant that admits them.
///
/// A locked peer is [`Refusal::LOCKED`]; everything else that does not admit — no
/// grant, an expired or revoked one, another user's grant, a locked owner — is the
/// [`Refusal::NOT_FOUND`] of an unknown session.
pub fn decide_peer<'a>(
    principal: &Principal,
    route: Option<&'a Route>,
    locked: bool,
    owner_locked: bool,
    now: u64,
) -> Result<&'a PeerGrant, Refusal> {
    if locked {
        return Err(Refusal::LOCKED);
    }
    let route = route.ok_or(Refusal::NOT_FOUND)?;
    if owner_locked || route.owner == principal.sub.as_str() {
        return Err(Refusal::NOT_FOUND);
    }
    grant_of(route, principal.sub.as_str(), now).ok_or(Refusal::NOT_FOUND)
}

/// Whether a peer terminal of `sub` open on `route` may stay open on `next` (`None`:
/// the route is gone) at `now`: the same terminal, and a grant still unexpired.
pub fn may_stay(route: &Route, next: Option<&Route>, sub: &str, now: u64) -> bool {
    next.is_some_and(|n| route.same_terminal(n) && grant_of(n, sub, now).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SessionId;

    fn who(sub: &str) -> Principal {
        Principal {
            sub: Sub::parse(sub).unwrap(),
            admin: false,
            roles: Vec::new(),
            expires_at: 0,
            issued_at: 0,
            jti: None,
        }
    }

    fn route(peers: &[(&str, u64)]) -> Route {
        let mut r = Route::container(SessionId::from_random([3; 10]), "alice", "c1");
        r.peers = peers
            .iter()
            .map(|(s, e)| PeerGrant {
                sub: (*s).into(),
                expires_at: *e,
            })
            .collect();
        r
    }

    #[test]
    fn an_invited_peer_is_admitted_until_the_grant_expires() {
        let r = route(&[("bob", 100)]);
        let g = decide_peer(&who("bob"), Some(&r), false, false, 99).unwrap();
        assert_eq!(g.sub, "bob");
        assert_eq!(
            decide_peer(&who("bob"), Some(&r), false, false, 100),
            Err(Refusal::NOT_FOUND)
        );
    }

    #[test]
    fn another_sub_a_revoked_grant_and_an_unknown_session_look_alike() {
        let r = route(&[("bob", 100)]);
        let unknown = decide_peer(&who("carol"), None, false, false, 1);
        assert_eq!(unknown, Err(Refusal::NOT_FOUND));
        assert_eq!(
            decide_peer(&who("carol"), Some(&r), false, false, 1),
            unknown
        );
        assert_eq!(
            decide_peer(&who("bobby"), Some(&r), false, false, 1),
            unknown
        );
        assert_eq!(
            decide_peer(&who("bob"), Some(&route(&[])), false, false, 1),
            unknown
        );
    }

    #[test]
    fn a_locked_peer_never_and_a_locked_owner_shares_nothing() {
        let r = route(&[("bob", 100)]);
        assert_eq!(
            decide_peer(&who("bob"), Some(&r), true, false, 1),
            Err(Refusal::LOCKED)
        );
        assert_eq!(
            decide_peer(&who("bob"), Some(&r), false, true, 1),
            Err(Refusal::NOT_FOUND)
        );
    }

    #[test]
    fn a_target_or_the_owner_is_never_a_peer() {
        let mut r = route(&[("bob", 100), ("alice", 100)]);
        assert!(decide_peer(&who("alice"), Some(&r), false, false, 1).is_err());
        r.target = Some(crate::feed::TargetAccess {
            users: Vec::new(),
            roles: Vec::new(),
            credential: None,
        });
        assert!(decide_peer(&who("bob"), Some(&r), false, false, 1).is_err());
    }

    #[test]
    fn a_peer_terminal_stays_only_while_its_grant_does() {
        let r = route(&[("bob", 100), ("carol", 100)]);
        assert!(may_stay(&r, Some(&r), "bob", 1));
        let without_bob = route(&[("carol", 100)]);
        assert!(!may_stay(&r, Some(&without_bob), "bob", 1));
        assert!(may_stay(&r, Some(&without_bob), "carol", 1));
        assert!(!may_stay(&r, Some(&r), "bob", 100));
        assert!(!may_stay(&r, None, "bob", 1));
        let mut moved = r.clone();
        moved.container = "c2".into();
        assert!(!may_stay(&r, Some(&moved), "bob", 1));
    }

    #[test]
    fn an_invitation_is_checked() {
        let min = *TTL_RANGE.start();
        assert_eq!(
            check_request(false, "alice", "bob", 3600, min),
            Err(Refusal::PEERS_OFF)
        );
        assert_eq!(
            check_request(true, "alice", "bob", 3600, min)
                .unwrap()
                .as_str(),
            "bob"
        );
        let bad = |sub, ttl| {
            check_request(true, "alice", sub, ttl, min)
                .unwrap_err()
                .code
        };
        assert_eq!(bad("alice", 3600), "invalid_peer");
        assert_eq!(bad("", 3600), "invalid_peer");
        assert_eq!(bad("bad name", 3600), "invalid_peer");
        assert_eq!(bad("bob", 59), "invalid_peer");
        assert_eq!(bad("bob", 86_401), "invalid_peer");
        assert!(check_request(true, "alice", "bob", 1, 1).is_ok());
        assert_eq!(terminal_user("bob"), "peer:bob");
    }
}

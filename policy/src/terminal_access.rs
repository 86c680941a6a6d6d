//! The one rule of a terminal: who may open it ([`admit`]) and whether one open may stay
//! open ([`still_allowed`]).
//!
//! The gateway's admission and control's terminal check (`GET /v1/authz`) both admit
//! through [`admit`]; control's re-check of a front proxy's terminal (`grant::recheck`)
//! and the gateway's registry of open terminals both judge through [`still_allowed`];
//! a revocation's why becomes a [`CloseReason`] by one `From`. [`cases`] is one table
//! of cases every one of those call sites is tested against.

use crate::close::CloseReason;
use crate::feed::{PeerGrant, Route, ShareGrant, TargetAccess};
use crate::identity::{Principal, Sub};
use crate::refusal::Refusal;
use crate::revocation::{CredentialId, Fingerprint, RevokedWhy};
use crate::session_id::SessionId;

/// How a terminal was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmittedAs {
    /// The Docker session's owner.
    Owner,
    /// An admin, on someone else's terminal.
    Admin,
    /// A user a target's list (users or roles) allows.
    Allowed,
    /// A user the owner invited, until the invitation's end (seconds since the epoch).
    Peer {
        /// When the invitation lapses.
        until: u64,
    },
    /// A share link's viewer (read-only).
    Viewer,
}

impl AdmittedAs {
    /// The reason on the wire and in audit lines: `owner`, `admin`, `allowed`, `peer`,
    /// `share`.
    pub fn as_str(&self) -> &'static str {
        match self {
            AdmittedAs::Owner => "owner",
            AdmittedAs::Admin => "admin",
            AdmittedAs::Allowed => "allowed",
            AdmittedAs::Peer { .. } => "peer",
            AdmittedAs::Viewer => "share",
        }
    }

    /// When a peer's invitation lapses; `None` for anyone else.
    pub fn peer_until(&self) -> Option<u64> {
        match self {
            AdmittedAs::Peer { until } => Some(*until),
            _ => None,
        }
    }
}

impl From<RevokedWhy> for CloseReason {
    /// Why a terminal opened with a revoked credential closes.
    fn from(why: RevokedWhy) -> CloseReason {
        match why {
            RevokedWhy::SignedOut => CloseReason::SignedOut,
            RevokedWhy::Revoked => CloseReason::TokenRevoked,
        }
    }
}

/// Whether the route itself lets `sub` (with `admin` and `roles`) open its terminal: a
/// Docker session its owner (or an admin), a target the users and roles it lists (or an
/// admin). `None`: not by the route (a peer's invitation is judged apart).
pub fn by_route(sub: &str, admin: bool, roles: &[String], route: &Route) -> Option<AdmittedAs> {
    match &route.target {
        Some(t) if t.allows(sub, roles) => Some(AdmittedAs::Allowed),
        None if route.owner == sub => Some(AdmittedAs::Owner),
        _ if admin => Some(AdmittedAs::Admin),
        _ => None,
    }
}

/// Decides whether `principal` may open the terminal of `route` (`None`: unknown, or not
/// running) at `now`: by the route ([`by_route`]), else as a peer (`policy::peer`).
/// `locked`: the principal's user is locked; `owner_locked` asks whether the session's
/// owner is (only when the route alone does not admit). A locked user is
/// [`Refusal::LOCKED`]; everyone else refused gets the [`Refusal::NOT_FOUND`] of an
/// unknown id. The outer `Err` is `owner_locked`'s own.
pub fn admit<E>(
    principal: &Principal,
    route: Option<&Route>,
    locked: bool,
    now: u64,
    owner_locked: impl FnOnce(&str) -> Result<bool, E>,
) -> Result<Result<AdmittedAs, Refusal>, E> {
    let sub = principal.sub.as_str();
    let by_route = route
        .filter(|_| !locked)
        .and_then(|r| by_route(sub, principal.admin, &principal.roles, r));
    if let Some(admitted) = by_route {
        return Ok(Ok(admitted));
    }
    let refusal = if locked {
        Refusal::LOCKED
    } else {
        Refusal::NOT_FOUND
    };
    let owner_locked = match route {
        Some(r) => owner_locked(&r.owner)?,
        None => false,
    };
    Ok(
        crate::peer::decide_peer(principal, route, locked, owner_locked, now)
            .map(|g| AdmittedAs::Peer {
                until: g.expires_at,
            })
            .map_err(|_| refusal),
    )
}

/// How an open terminal was opened, as far as keeping it open goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened<'a> {
    /// By the route itself: its owner, an admin, a target's list.
    Own,
    /// As a peer of `owner`'s session, the invitation ending at `until` (as last known).
    Peer {
        /// The session's owner.
        owner: &'a str,
        /// When the invitation lapses.
        until: u64,
    },
    /// Through `owner`'s share link `share`, which ends at `until`.
    Viewer {
        /// The session's owner.
        owner: &'a str,
        /// The link's id.
        share: &'a str,
        /// When the link expires.
        until: u64,
    },
}

/// One open terminal.
#[derive(Debug, Clone, Copy)]
pub struct Open<'a> {
    /// Its user (empty: an anonymous viewer, who holds no credential).
    pub sub: &'a str,
    /// Admitted with the admin role.
    pub admin: bool,
    /// The user's roles.
    pub roles: &'a [String],
    /// What names its credential for revocation.
    pub credential: CredentialId<'a>,
    /// When its credential expires, where that closes it.
    pub expires_at: Option<u64>,
    /// How it was opened.
    pub opened: Opened<'a>,
}

/// What became of the session's route.
#[derive(Debug, Clone, Copy)]
pub enum RouteNow<'a> {
    /// Nothing about it changed.
    Unchanged,
    /// Gone, or another terminal now (another container, owner or ttyd).
    Moved,
    /// The same terminal; a target's users and roles are now these.
    TargetNow(&'a TargetAccess),
    /// The same terminal; this share link is no longer on it.
    ShareGone(&'a str),
    /// The same terminal, as its route now says (judged whole).
    Is(&'a Route),
}

/// The state an open terminal is judged against.
#[derive(Clone, Copy)]
pub struct Now<'a> {
    /// The session's route.
    pub route: RouteNow<'a>,
    /// Whether a user is locked.
    pub locked: &'a dyn Fn(&str) -> bool,
    /// Why a credential is revoked, if it is.
    pub revoked: &'a dyn Fn(&CredentialId<'_>) -> Option<RevokedWhy>,
    /// The time credentials' expiry is judged at (`None`: not judged).
    pub tokens_at: Option<u64>,
    /// The time invitations and share links lapse at (`None`: not judged).
    pub links_at: Option<u64>,
}

/// Whether the terminal `open` may stay open in the state `now`, or why it closes. In
/// order: the credential (revoked), the user (locked), the credential's expiry, the
/// route, then how it was opened: by the route, the invitation (and its owner's lock),
/// the share link (and its owner's lock).
pub fn still_allowed(open: &Open<'_>, now: &Now<'_>) -> Result<(), CloseReason> {
    if !open.sub.is_empty() {
        if let Some(why) = (now.revoked)(&open.credential) {
            return Err(why.into());
        }
    }
    if (now.locked)(open.sub) {
        return Err(CloseReason::UserLocked);
    }
    if let (Some(at), Some(expires_at)) = (now.tokens_at, open.expires_at) {
        if at >= expires_at {
            return Err(CloseReason::TokenExpired);
        }
    }
    let lapsed = |until: u64| now.links_at.is_some_and(|at| at >= until);
    match now.route {
        RouteNow::Moved => return Err(CloseReason::RouteRemoved),
        RouteNow::TargetNow(access) if !open.admin && !access.allows(open.sub, open.roles) => {
            return Err(CloseReason::AccessRemoved)
        }
        _ => {}
    }
    match (open.opened, now.route) {
        (Opened::Own, RouteNow::Is(r)) => match by_route(open.sub, open.admin, open.roles, r) {
            Some(_) => Ok(()),
            None if r.target.is_some() => Err(CloseReason::AccessRemoved),
            None => Err(CloseReason::RouteRemoved),
        },
        (Opened::Own, _) => Ok(()),
        (Opened::Peer { owner, .. }, _) if (now.locked)(owner) => Err(CloseReason::PeerRemoved),
        (Opened::Peer { .. }, RouteNow::Is(r)) => {
            let at = now.links_at.unwrap_or(0);
            if r.owner == open.sub || crate::peer::grant_of(r, open.sub, at).is_none() {
                Err(CloseReason::PeerRemoved)
            } else {
                Ok(())
            }
        }
        (Opened::Peer { until, .. }, _) if lapsed(until) => Err(CloseReason::PeerRemoved),
        (Opened::Peer { .. }, _) => Ok(()),
        (Opened::Viewer { owner, .. }, _) if (now.locked)(owner) => Err(CloseReason::ShareEnded),
        (Opened::Viewer { share, .. }, RouteNow::ShareGone(gone)) if gone == share => {
            Err(CloseReason::ShareEnded)
        }
        (Opened::Viewer { share, .. }, RouteNow::Is(r))
            if !r.shares.iter().any(|s| s.id == share) =>
        {
            Err(CloseReason::ShareEnded)
        }
        (Opened::Viewer { until, .. }, _) if lapsed(until) => Err(CloseReason::ShareEnded),
        (Opened::Viewer { .. }, _) => Ok(()),
    }
}

/// One case of the shared table: a principal asking for a session's terminal, and the
/// same principal's terminal, opened as `opened`, judged in the same state.
#[derive(Debug, Clone)]
pub struct Case {
    /// What it shows.
    pub name: &'static str,
    /// Who asks.
    pub principal: Principal,
    /// The session's route (`None`: ended).
    pub route: Option<Route>,
    /// The users locked.
    pub locked: &'static [&'static str],
    /// The principal's credential was signed out.
    pub signed_out: bool,
    /// The time, seconds since the epoch.
    pub now: u64,
    /// What [`admit`] decides: the reason's name, or the refusal's code. `None`: the
    /// credential itself is refused before access is decided.
    pub admit: Option<Result<&'static str, &'static str>>,
    /// How the terminal judged by [`still_allowed`] was opened.
    pub opened: CaseOpened,
    /// What [`still_allowed`] decides for it.
    pub still: Result<(), CloseReason>,
}

/// How a case's open terminal was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseOpened {
    /// By the route.
    Own,
    /// As a peer.
    Peer,
    /// Through the case's share link [`CASE_SHARE`].
    Viewer,
}

/// The container of the cases' session (a full id, as a grant needs).
pub const CASE_CONTAINER: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// The id of the cases' share link.
pub const CASE_SHARE: &str = "s1";
/// The credential every case's principal presents.
pub const CASE_TOKEN: &[u8] = b"h.p.s";

impl Case {
    /// Whether `sub` is locked in this case.
    pub fn is_locked(&self, sub: &str) -> bool {
        self.locked.contains(&sub)
    }

    /// What names the case's credential.
    pub fn credential(&self) -> CredentialId<'_> {
        CredentialId::of(CASE_TOKEN, &self.principal)
    }

    /// Why the case's credential is revoked, if it is.
    pub fn revoked(&self, id: &CredentialId<'_>) -> Option<RevokedWhy> {
        (self.signed_out && id.fingerprint == Fingerprint::of(CASE_TOKEN))
            .then_some(RevokedWhy::SignedOut)
    }

    /// The case's terminal, as [`still_allowed`] takes it (credentials expire).
    pub fn open(&self) -> Open<'_> {
        let owner = "alice";
        Open {
            sub: self.principal.sub.as_str(),
            admin: self.principal.admin,
            roles: &self.principal.roles,
            credential: self.credential(),
            expires_at: Some(self.principal.expires_at),
            opened: match self.opened {
                CaseOpened::Own => Opened::Own,
                CaseOpened::Peer => Opened::Peer {
                    owner,
                    until: PEER_UNTIL,
                },
                CaseOpened::Viewer => Opened::Viewer {
                    owner,
                    share: CASE_SHARE,
                    until: PEER_UNTIL,
                },
            },
        }
    }

    /// The case's [`admit`] with its locks, as a name or a refusal's code.
    pub fn admit_named(&self) -> Result<&'static str, &'static str> {
        let never: Result<_, std::convert::Infallible> = admit(
            &self.principal,
            self.route.as_ref(),
            self.is_locked(self.principal.sub.as_str()),
            self.now,
            |owner| Ok(self.is_locked(owner)),
        );
        named(never.unwrap_or_else(|e| match e {}))
    }
}

/// An admission as a table names it: the reason, or the refusal's code.
pub fn named(r: Result<AdmittedAs, Refusal>) -> Result<&'static str, &'static str> {
    r.map(|a| a.as_str()).map_err(|r| r.code)
}

/// When the cases' invitation and share link lapse.
const PEER_UNTIL: u64 = 1_000;

/// The shared table: owner, admin, another user, a target's user, a peer before and
/// after the invitation's end, a peer whose owner is locked, a share link's viewer, a
/// locked user, a signed-out credential, an ended session.
pub fn cases() -> Vec<Case> {
    let who = |sub: &str, admin: bool| Principal {
        sub: Sub::parse(sub).unwrap_or_else(|| unreachable!("a valid name")),
        admin,
        roles: vec!["ops".into()],
        expires_at: 2_000,
        issued_at: 100,
        jti: Some("j1".into()),
    };
    let id = SessionId::from_random([9; 10]);
    let mut session = Route::container(id, "alice", CASE_CONTAINER);
    session.peers = vec![PeerGrant {
        sub: "bob".into(),
        expires_at: PEER_UNTIL,
    }];
    session.shares = vec![ShareGrant {
        id: CASE_SHARE.into(),
        hash: "0".repeat(64),
        expires_at: PEER_UNTIL,
        max_viewers: None,
        signed_in: false,
    }];
    let mut target = Route::container(id, "", "");
    target.target = Some(TargetAccess {
        users: vec!["carol".into()],
        roles: Vec::new(),
        credential: None,
    });
    let case = |name, sub, admin, opened, admit, still| Case {
        name,
        principal: who(sub, admin),
        route: Some(session.clone()),
        locked: &[],
        signed_out: false,
        now: 500,
        admit: Some(admit),
        opened,
        still,
    };
    use CaseOpened::{Own, Peer, Viewer};
    let removed = Err(CloseReason::RouteRemoved);
    vec![
        case("owner", "alice", false, Own, Ok("owner"), Ok(())),
        case("admin", "root", true, Own, Ok("admin"), Ok(())),
        case(
            "other user",
            "carol",
            false,
            Own,
            Err("session_not_found"),
            removed,
        ),
        Case {
            route: Some(target.clone()),
            ..case(
                "a target's user",
                "carol",
                false,
                Own,
                Ok("allowed"),
                Ok(()),
            )
        },
        case("peer", "bob", false, Peer, Ok("peer"), Ok(())),
        Case {
            now: PEER_UNTIL,
            ..case(
                "peer after the invitation's end",
                "bob",
                false,
                Peer,
                Err("session_not_found"),
                Err(CloseReason::PeerRemoved),
            )
        },
        Case {
            locked: &["alice"],
            ..case(
                "peer whose owner is locked",
                "bob",
                false,
                Peer,
                Err("session_not_found"),
                Err(CloseReason::PeerRemoved),
            )
        },
        case(
            "a link's viewer",
            "dave",
            false,
            Viewer,
            Err("session_not_found"),
            Ok(()),
        ),
        Case {
            locked: &["alice"],
            ..case(
                "locked user",
                "alice",
                false,
                Own,
                Err("user_locked"),
                Err(CloseReason::UserLocked),
            )
        },
        Case {
            signed_out: true,
            admit: None,
            ..case(
                "signed out",
                "alice",
                false,
                Own,
                Ok("owner"),
                Err(CloseReason::SignedOut),
            )
        },
        Case {
            route: None,
            ..case(
                "ended session",
                "alice",
                false,
                Own,
                Err("session_not_found"),
                removed,
            )
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(case: &Case, route: RouteNow<'_>) -> Result<(), CloseReason> {
        let locked = |s: &str| case.is_locked(s);
        let revoked = |id: &CredentialId<'_>| case.revoked(id);
        still_allowed(
            &case.open(),
            &Now {
                route,
                locked: &locked,
                revoked: &revoked,
                tokens_at: Some(case.now),
                links_at: Some(case.now),
            },
        )
    }

    #[test]
    fn the_table_through_admit_and_still_allowed() {
        for case in cases() {
            if let Some(expected) = case.admit {
                assert_eq!(case.admit_named(), expected, "{}", case.name);
            }
            let route = case.route.as_ref().map_or(RouteNow::Moved, RouteNow::Is);
            assert_eq!(judge(&case, route), case.still, "{}", case.name);
        }
    }

    #[test]
    fn the_table_through_the_grant_recheck() {
        let revoked = |case: &Case| {
            let mut set = crate::revocation::RevocationSet::new();
            if case.signed_out {
                set.insert(&crate::revocation::Revocation::SignIn {
                    fingerprint: Fingerprint::of(CASE_TOKEN),
                    sub: case.principal.sub.as_str().into(),
                    expires_at: 2_000,
                });
            }
            set
        };
        // A front proxy is granted a Docker session's own or peer terminal only.
        for case in cases().into_iter().filter(|c| {
            c.opened != CaseOpened::Viewer && c.route.as_ref().is_none_or(|r| r.target.is_none())
        }) {
            let id = case
                .route
                .as_ref()
                .map_or(SessionId::from_random([9; 10]), |r| r.session);
            let grant = crate::grant::Grant::new(id, CASE_CONTAINER, &case.principal, CASE_TOKEN);
            let grant = match case.opened {
                CaseOpened::Peer => grant.as_peer(),
                _ => grant,
            };
            let got = crate::grant::recheck(
                &grant,
                case.route.as_ref(),
                case.is_locked(case.principal.sub.as_str()),
                case.is_locked("alice"),
                &revoked(&case),
                case.now,
                true,
            );
            assert_eq!(got, case.still, "{}", case.name);
        }
    }

    #[test]
    fn unchanged_routes_lapse_by_the_clock_and_events_close_only_their_own() {
        let case = &cases()[4];
        assert_eq!(case.name, "peer");
        let nobody = |_: &str| false;
        let none = |_: &CredentialId<'_>| None;
        let mut now = Now {
            route: RouteNow::Unchanged,
            locked: &nobody,
            revoked: &none,
            tokens_at: None,
            links_at: Some(PEER_UNTIL),
        };
        assert_eq!(
            still_allowed(&case.open(), &now),
            Err(CloseReason::PeerRemoved)
        );
        now.links_at = None;
        assert_eq!(still_allowed(&case.open(), &now), Ok(()));
        now.tokens_at = Some(2_000);
        assert_eq!(
            still_allowed(&case.open(), &now),
            Err(CloseReason::TokenExpired)
        );
        now.tokens_at = None;
        now.route = RouteNow::Moved;
        assert_eq!(
            still_allowed(&case.open(), &now),
            Err(CloseReason::RouteRemoved)
        );
        let viewer = &cases()[7];
        now.route = RouteNow::ShareGone("other");
        assert_eq!(still_allowed(&viewer.open(), &now), Ok(()));
        now.route = RouteNow::ShareGone(CASE_SHARE);
        assert_eq!(
            still_allowed(&viewer.open(), &now),
            Err(CloseReason::ShareEnded)
        );
        let narrowed = TargetAccess {
            users: Vec::new(),
            roles: Vec::new(),
            credential: None,
        };
        now.route = RouteNow::TargetNow(&narrowed);
        assert_eq!(
            still_allowed(&cases()[3].open(), &now),
            Err(CloseReason::AccessRemoved)
        );
        assert_eq!(still_allowed(&cases()[1].open(), &now), Ok(()), "admin");
    }

    #[test]
    fn a_revocations_why_names_its_close_reason() {
        assert_eq!(
            CloseReason::from(RevokedWhy::SignedOut),
            CloseReason::SignedOut
        );
        assert_eq!(
            CloseReason::from(RevokedWhy::Revoked),
            CloseReason::TokenRevoked
        );
        assert_eq!(AdmittedAs::Viewer.as_str(), "share");
        assert_eq!(AdmittedAs::Peer { until: 1 }.peer_until(), Some(1));
    }
}

//! Terminal grants: what control's terminal check (`GET /v1/authz`) hands a front proxy
//! for one allowed websocket of a Docker session, so that the terminal can be closed
//! later although termgate carries none of its bytes (docs/front-proxies.md "Behind a
//! front proxy").
//!
//! The check hands the proxy a one-use handle for the grant, which reaches the ttyd
//! pool (as a second `arg`, or in the header the pool's `-H` names); the pool's
//! `ttyd-attach` exchanges it with control for the grant before it attaches and then
//! keeps asking about the grant (`GET /v1/grant`, long-polled); when the answer is a
//! [`CloseReason`] it ends its `docker attach`, ttyd closes the websocket and the proxy the
//! browser's connection.
//!
//! A grant is `g1.<container>.<seal>`: the container in the clear (the pool attaches to
//! it), and an HS256 seal under a key only control holds over everything
//! [`recheck`] needs to judge the terminal again — the session, its container, the
//! user, their roles and admin flag, and what names their credential for revocation
//! (fingerprint, `jti`, `iat`) and when it expires. It never holds the credential.
//! Control keeps no per-terminal state: a restarted control judges an old grant alike.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::close::CloseReason;
use crate::feed::Route;
use crate::identity::{KeyError, Principal, Sub};
use crate::revocation::{CredentialId, Fingerprint, RevocationSet};
use crate::session_id::SessionId;
use crate::terminal_access::{still_allowed, Now, Open, Opened, RouteNow};

/// The version prefix of every grant.
pub const PREFIX: &str = "g1";

/// Longest grant accepted (a sealed grant of the longest user, roles and `jti` is far
/// below it).
pub const MAX_LEN: usize = 4096;

/// What a grant records of the terminal it allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The session.
    pub session: SessionId,
    /// Its container, the pool's `arg`.
    pub container: String,
    /// The verified user.
    pub sub: String,
    /// Whether they are an admin.
    #[serde(default)]
    pub admin: bool,
    /// Their roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Their credential's fingerprint (a sign-out names it).
    pub fingerprint: Fingerprint,
    /// Its `jti` (an admin's revocation names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// Its `iat` (0 without one).
    #[serde(default)]
    pub issued_at: u64,
    /// Its expiry, seconds since the Unix epoch.
    pub expires_at: u64,
    /// Opened as a peer the owner invited: it stays open while the invitation lasts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub peer: bool,
}

impl Grant {
    /// The grant of `who` (verified from `token`) on the terminal of `session` in
    /// `container`.
    pub fn new(session: SessionId, container: &str, who: &Principal, token: &[u8]) -> Grant {
        Grant {
            session,
            container: container.to_owned(),
            sub: who.sub.as_str().to_owned(),
            admin: who.admin,
            roles: who.roles.clone(),
            fingerprint: Fingerprint::of(token),
            jti: who.jti.clone(),
            issued_at: who.issued_at,
            expires_at: who.expires_at,
            peer: false,
        }
    }

    /// The same grant, for a peer's terminal (`policy::peer`).
    pub fn as_peer(self) -> Grant {
        Grant { peer: true, ..self }
    }
}

/// Judges a grant's terminal again, now: `route` is the session's route (`None`: not
/// running), `locked` whether its user is locked, `owner_locked` whether the session's
/// owner is (a peer's terminal closes with them), `revoked` the revocations in force.
/// The rule is [`still_allowed`]'s, on the route if it still runs the grant's container.
pub fn recheck(
    grant: &Grant,
    route: Option<&Route>,
    locked: bool,
    owner_locked: bool,
    revoked: &RevocationSet,
    now: u64,
    close_on_expiry: bool,
) -> Result<(), CloseReason> {
    let route =
        route.filter(|r| r.session == grant.session && r.arg() == Some(grant.container.as_str()));
    let open = Open {
        sub: &grant.sub,
        admin: grant.admin,
        roles: &grant.roles,
        credential: CredentialId {
            fingerprint: grant.fingerprint,
            whole: None,
            sub: &grant.sub,
            jti: grant.jti.as_deref(),
            issued_at: grant.issued_at,
        },
        expires_at: close_on_expiry.then_some(grant.expires_at),
        opened: match (grant.peer, route) {
            (true, Some(r)) => Opened::Peer {
                owner: &r.owner,
                until: u64::MAX,
            },
            _ => Opened::Own,
        },
    };
    let is_locked = |sub: &str| {
        if sub == grant.sub {
            locked
        } else {
            owner_locked
        }
    };
    let revoked = |id: &CredentialId<'_>| revoked.check(id);
    still_allowed(
        &open,
        &Now {
            route: route.map_or(RouteNow::Moved, RouteNow::Is),
            locked: &is_locked,
            revoked: &revoked,
            tokens_at: Some(now),
            links_at: Some(now),
        },
    )?;
    // A grant names a valid user (control sealed it from a verified token).
    Sub::parse(&grant.sub)
        .map(|_| ())
        .ok_or(CloseReason::AccessRemoved)
}

/// Why a presented grant is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantError {
    /// Not `g1.<container>.<seal>`, too long, or its container is not 64 hex digits.
    Malformed,
    /// The seal does not verify, or its container differs from the clear one.
    Forged,
}

impl GrantError {
    /// Stable name for refusals and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            GrantError::Malformed => "grant_malformed",
            GrantError::Forged => "grant_invalid",
        }
    }
}

/// Seals and opens grants under control's grant key.
pub struct GrantSealer {
    encode: EncodingKey,
    decode: DecodingKey,
}

impl std::fmt::Debug for GrantSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrantSealer(<redacted>)")
    }
}

impl GrantSealer {
    /// A sealer with `key` (control's random grant key, 32 bytes).
    pub fn new(key: &[u8]) -> Result<GrantSealer, KeyError> {
        let bad = |e: jsonwebtoken::errors::Error| KeyError::BadSigningKey(e.to_string());
        Ok(GrantSealer {
            encode: EncodingKey::from_secret(key).map_err(bad)?,
            decode: DecodingKey::from_secret(key).map_err(bad)?,
        })
    }

    /// The grant's text: `g1.<container>.<seal>`.
    pub fn seal(&self, grant: &Grant) -> String {
        // A struct of strings and numbers always serialises.
        let seal = jsonwebtoken::encode(&Header::new(Algorithm::HS256), grant, &self.encode)
            .unwrap_or_default();
        format!("{PREFIX}.{}.{seal}", grant.container)
    }

    /// The grant a text names, if it is well formed and sealed by this key.
    pub fn open(&self, text: &str) -> Result<Grant, GrantError> {
        if text.len() > MAX_LEN {
            return Err(GrantError::Malformed);
        }
        let rest = text
            .strip_prefix(PREFIX)
            .and_then(|r| r.strip_prefix('.'))
            .ok_or(GrantError::Malformed)?;
        let (container, seal) = rest.split_once('.').ok_or(GrantError::Malformed)?;
        if !is_container_id(container) {
            return Err(GrantError::Malformed);
        }
        let mut v = Validation::new(Algorithm::HS256);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        v.validate_aud = false;
        let grant = jsonwebtoken::decode::<Grant>(seal, &self.decode, &v)
            .map_err(|_| GrantError::Forged)?
            .claims;
        if grant.container != container {
            return Err(GrantError::Forged);
        }
        Ok(grant)
    }
}

/// A full container id: 64 lowercase hex digits (what `ttyd-attach` accepts).
pub fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::{TargetAccess, TtydAddress};
    use crate::revocation::Revocation;

    const C: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn id() -> SessionId {
        SessionId::from_random([7; 10])
    }

    fn who(sub: &str, admin: bool) -> Principal {
        Principal {
            sub: Sub::parse(sub).unwrap(),
            admin,
            roles: vec!["ops".into()],
            expires_at: 2_000,
            issued_at: 1_000,
            jti: Some("j1".into()),
        }
    }

    fn grant(sub: &str) -> Grant {
        Grant::new(id(), C, &who(sub, false), b"tok")
    }

    #[test]
    fn a_grant_opens_only_under_its_key_and_with_its_own_container() {
        let sealer = GrantSealer::new(&[1; 32]).unwrap();
        let g = grant("alice");
        let text = sealer.seal(&g);
        assert!(text.starts_with(&format!("g1.{C}.")));
        assert!(!text.contains("tok"), "the credential is never in a grant");
        assert_eq!(sealer.open(&text), Ok(g.clone()));
        assert_eq!(
            GrantSealer::new(&[2; 32]).unwrap().open(&text),
            Err(GrantError::Forged)
        );
        let other = "f".repeat(64);
        let swapped = text.replacen(C, &other, 1);
        assert_eq!(sealer.open(&swapped), Err(GrantError::Forged));
        for bad in ["", "g1", "g2.x.y", "g1.abc.def", &"g1.".repeat(2000)] {
            assert_eq!(sealer.open(bad), Err(GrantError::Malformed), "{bad:.20}");
        }
        let tampered = format!("{}x", &text[..text.len() - 1]);
        assert_eq!(sealer.open(&tampered), Err(GrantError::Forged));
    }

    #[test]
    fn recheck_closes_for_every_reason_the_gateway_closes_for() {
        let g = grant("alice");
        let route = Route::container(id(), "alice", C);
        let none = RevocationSet::new();
        assert_eq!(
            recheck(&g, Some(&route), false, false, &none, 1_500, true),
            Ok(())
        );
        assert_eq!(
            recheck(&g, None, false, false, &none, 1_500, true),
            Err(CloseReason::RouteRemoved)
        );
        let recreated = Route::container(id(), "alice", "e".repeat(64));
        assert_eq!(
            recheck(&g, Some(&recreated), false, false, &none, 1_500, true),
            Err(CloseReason::RouteRemoved)
        );
        let given_away = Route::container(id(), "bob", C);
        assert_eq!(
            recheck(&g, Some(&given_away), false, false, &none, 1_500, true),
            Err(CloseReason::RouteRemoved)
        );
        assert_eq!(
            recheck(&g, Some(&route), true, false, &none, 1_500, true),
            Err(CloseReason::UserLocked)
        );
        assert_eq!(
            recheck(&g, Some(&route), false, false, &none, 2_000, true),
            Err(CloseReason::TokenExpired)
        );
        assert_eq!(
            recheck(&g, Some(&route), false, false, &none, 2_000, false),
            Ok(())
        );

        let mut signed_out = RevocationSet::new();
        signed_out.insert(&Revocation::SignIn {
            fingerprint: Fingerprint::of(b"tok"),
            sub: "alice".into(),
            expires_at: 2_000,
        });
        assert_eq!(
            recheck(&g, Some(&route), false, false, &signed_out, 1_500, true),
            Err(CloseReason::SignedOut)
        );
        let other_sign_in = Grant::new(id(), C, &who("alice", false), b"other");
        assert_eq!(
            recheck(
                &other_sign_in,
                Some(&route),
                false,
                false,
                &signed_out,
                1_500,
                true
            ),
            Ok(()),
            "signing out one browser leaves the other's terminal open"
        );
        let mut by_jti = RevocationSet::new();
        by_jti.insert(&Revocation::Token {
            jti: "j1".into(),
            expires_at: 2_000,
        });
        assert_eq!(
            recheck(&g, Some(&route), false, false, &by_jti, 1_500, true),
            Err(CloseReason::TokenRevoked)
        );
        let mut before = RevocationSet::new();
        before.insert(&Revocation::IssuedBefore {
            sub: "alice".into(),
            before: 1_001,
            expires_at: 2_000,
        });
        assert_eq!(
            recheck(&g, Some(&route), false, false, &before, 1_500, true),
            Err(CloseReason::TokenRevoked)
        );
    }

    #[test]
    fn an_admin_keeps_another_users_terminal_and_a_target_is_never_granted() {
        let admin = Grant::new(id(), C, &who("root", true), b"t");
        let route = Route::container(id(), "alice", C);
        let none = RevocationSet::new();
        assert_eq!(
            recheck(&admin, Some(&route), false, false, &none, 1, true),
            Ok(())
        );
        let mut target = Route::container(id(), "", "");
        target.upstream = Some(TtydAddress {
            addrs: vec!["10.0.0.5:7681".into()],
            base_path: String::new(),
        });
        target.target = Some(TargetAccess {
            users: vec!["alice".into()],
            roles: Vec::new(),
            credential: None,
        });
        assert_eq!(
            recheck(&grant("alice"), Some(&target), false, false, &none, 1, true),
            Err(CloseReason::RouteRemoved)
        );
    }

    #[test]
    fn a_peers_grant_lasts_as_its_invitation_does_and_closes_with_the_owner() {
        let g = grant("bob").as_peer();
        let sealer = GrantSealer::new(&[1; 32]).unwrap();
        assert_eq!(
            sealer.open(&sealer.seal(&g)),
            Ok(g.clone()),
            "sealed with it"
        );
        let mut route = Route::container(id(), "alice", C);
        let none = RevocationSet::new();
        let no_invitation = recheck(&g, Some(&route), false, false, &none, 1_500, true);
        assert_eq!(no_invitation, Err(CloseReason::PeerRemoved));
        route.peers = vec![crate::feed::PeerGrant {
            sub: "bob".into(),
            expires_at: 1_600,
        }];
        assert_eq!(
            recheck(&g, Some(&route), false, false, &none, 1_500, true),
            Ok(())
        );
        assert_eq!(
            recheck(&g, Some(&route), false, false, &none, 1_600, true),
            Err(CloseReason::PeerRemoved),
            "the invitation lapsed"
        );
        assert_eq!(
            recheck(&g, Some(&route), false, true, &none, 1_500, true),
            Err(CloseReason::PeerRemoved),
            "the owner locked"
        );
        assert_eq!(
            recheck(&g, Some(&route), true, false, &none, 1_500, true),
            Err(CloseReason::UserLocked),
            "the peer locked"
        );
        // Not a peer's grant: bob's own credential on alice's session is not hers.
        assert_eq!(
            recheck(
                &grant("bob"),
                Some(&route),
                false,
                false,
                &none,
                1_500,
                true
            ),
            Err(CloseReason::RouteRemoved)
        );
    }
}

//! Revoked credentials: sign-ins signed out, tokens an admin revoked, and a user's
//! tokens issued before a time. Control records them and feeds them to every gateway
//! on the route feed; both refuse a revoked token and close what it opened.
//!
//! A sign-in is named by the [`Fingerprint`] of the token its cookie carries (a hash,
//! never the token), so a gateway tells a revoked cookie apart without keeping any
//! token, and control never needs the cookie itself to revoke it. The hash leaves the
//! signature out: another spelling of the same signature is the same token.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::identity::Principal;

/// How long a revocation (or a sign-in record) is kept past its token's expiry and the
/// verifier's clock leeway: room for the clocks of control and the gateways to disagree.
pub const KEEP_PAST_LEEWAY_SECS: u64 = 120;

/// When an entry naming tokens that expire at `expires_at` may be forgotten, for a
/// verifier that tolerates `leeway_secs` of clock skew (`auth.leeway_seconds`): until
/// then such a token may still verify.
pub fn keep_until(expires_at: u64, leeway_secs: u64) -> u64 {
    expires_at
        .saturating_add(leeway_secs)
        .saturating_add(KEEP_PAST_LEEWAY_SECS)
}

/// The latest `exp` a token issued at `issued_at` can carry and still pass the
/// verifier's lifetime check (`auth.max_token_lifetime_seconds`, with the leeway).
pub fn latest_exp(issued_at: u64, max_lifetime_secs: u64, leeway_secs: u64) -> u64 {
    issued_at
        .saturating_add(max_lifetime_secs)
        .saturating_add(leeway_secs)
}

/// The first 128 bits of the SHA-256 of a token's signing input: names a sign-in
/// without its secret.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fingerprint([u8; 16]);

impl Fingerprint {
    /// The fingerprint sign-ins and revocations recorded before the signing input named
    /// tokens had: the hash of the token's bytes as presented. Checked beside
    /// [`Fingerprint::of`] so that what was signed out before stays signed out.
    pub fn of_whole_token(token: &[u8]) -> Fingerprint {
        let digest = Sha256::digest(token);
        let mut out = [0u8; 16];
        out.copy_from_slice(&digest[..16]);
        Fingerprint(out)
    }

    /// The fingerprint of `token`: the hash of its signing input (`header.payload`, the
    /// first two dot-separated parts; bytes with fewer dots whole). The signature is
    /// left out because it can be spelled more than one way (an ECDSA `(r, n - s)`, a
    /// base64url last character differing in unused bits): each spelling would
    /// otherwise be a sign-in of its own that no sign-out names.
    pub fn of(token: &[u8]) -> Fingerprint {
        let second_dot = token
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'.')
            .nth(1)
            .map(|(i, _)| i);
        let input = second_dot.and_then(|i| token.get(..i)).unwrap_or(token);
        let digest = Sha256::digest(input);
        let mut out = [0u8; 16];
        out.copy_from_slice(&digest[..16]);
        Fingerprint(out)
    }

    /// Parses 32 lowercase hex digits.
    pub fn parse(s: &str) -> Option<Fingerprint> {
        if s.len() != 32 {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let hex = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            };
            out[i] = hex(pair[0])? << 4 | hex(pair[1])?;
        }
        Some(Fingerprint(out))
    }

    /// The sign-in's public id: the first 16 hex digits (shown in lists, never enough
    /// to find the token).
    pub fn id(&self) -> String {
        self.to_string()[..16].to_owned()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Fingerprint::parse(&s).ok_or_else(|| serde::de::Error::custom("invalid fingerprint"))
    }
}

/// One revocation, as control stores and feeds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Revocation {
    /// A sign-in was signed out: the token with this fingerprint is refused.
    SignIn {
        /// The sign-in's token.
        fingerprint: Fingerprint,
        /// Its user (to close their terminals and audit).
        sub: String,
        /// When its token expires: the entry goes some time after.
        expires_at: u64,
    },
    /// An admin revoked a token by its `jti`.
    Token {
        /// The token's id.
        jti: String,
        /// When the token expires: its `exp`, or the latest a token verifying when it
        /// was revoked may carry. The entry goes some time after.
        expires_at: u64,
    },
    /// Every token of `sub` issued before `before` (without `iat`: every token).
    IssuedBefore {
        /// The user.
        sub: String,
        /// Seconds since the Unix epoch.
        before: u64,
        /// When the entry goes: no token issued before `before` lives past it.
        expires_at: u64,
    },
}

/// Why an admin's revocation is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevocationError {
    /// The expiry given for the token is already past: the entry would be forgotten
    /// while a token whose real `exp` was mistyped still verifies.
    #[error(
        "expires_at ({expires_at}) is in the past: give the token's exp, or leave expires_at out to keep the revocation as long as any token may live"
    )]
    ExpiresAtPast {
        /// The expiry given, seconds since the Unix epoch.
        expires_at: u64,
    },
}

impl Revocation {
    /// An admin's revocation of the token `jti` at `now`: kept until `expires_at`, the
    /// token's own `exp` when the admin knows it, otherwise until `latest_exp`, the
    /// latest `exp` a token verifying now may carry (see [`latest_exp`]).
    pub fn of_token(
        jti: String,
        expires_at: Option<u64>,
        now: u64,
        latest_exp: u64,
    ) -> Result<Revocation, RevocationError> {
        let expires_at = match expires_at {
            Some(at) if at < now => return Err(RevocationError::ExpiresAtPast { expires_at: at }),
            Some(at) => at,
            None => latest_exp,
        };
        Ok(Revocation::Token { jti, expires_at })
    }

    /// When the tokens it names expire, seconds since the Unix epoch.
    pub fn expires_at(&self) -> u64 {
        match self {
            Revocation::SignIn { expires_at, .. }
            | Revocation::Token { expires_at, .. }
            | Revocation::IssuedBefore { expires_at, .. } => *expires_at,
        }
    }

    /// When the entry may be forgotten, for a verifier with `leeway_secs` of leeway.
    pub fn forget_at(&self, leeway_secs: u64) -> u64 {
        keep_until(self.expires_at(), leeway_secs)
    }

    /// The key one entry is stored and replaced under: a second revocation of the same
    /// thing replaces the first (a later `issued_before` of one user widens it).
    pub fn key(&self) -> String {
        match self {
            Revocation::SignIn { fingerprint, .. } => format!("f/{fingerprint}"),
            Revocation::Token { jti, .. } => format!("j/{jti}"),
            Revocation::IssuedBefore { sub, .. } => format!("b/{sub}"),
        }
    }

    /// Whether a credential (its principal and fingerprint) falls under this entry.
    pub fn covers(&self, who: &CredentialId<'_>) -> bool {
        match self {
            Revocation::SignIn { fingerprint, .. } => {
                *fingerprint == who.fingerprint || Some(*fingerprint) == who.whole
            }
            Revocation::Token { jti, .. } => who.jti == Some(jti.as_str()),
            Revocation::IssuedBefore { sub, before, .. } => {
                who.sub == sub && who.issued_at < *before
            }
        }
    }

    /// Why a credential it covers is refused: the close frame's and the refusal's reason.
    pub fn why(&self) -> RevokedWhy {
        match self {
            Revocation::SignIn { .. } => RevokedWhy::SignedOut,
            Revocation::Token { .. } | Revocation::IssuedBefore { .. } => RevokedWhy::Revoked,
        }
    }
}

/// Why a credential is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokedWhy {
    /// Its sign-in was signed out (here, on another gateway, or "everywhere").
    SignedOut,
    /// An admin revoked the token, or every token of its user issued before a time.
    Revoked,
}

/// What names a credential for revocation: its fingerprint, user, `jti` and `iat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialId<'a> {
    /// The token's fingerprint.
    pub fingerprint: Fingerprint,
    /// Its fingerprint as sign-ins recorded before [`Fingerprint::of`] left the
    /// signature out named it ([`Fingerprint::of_whole_token`]), when the token is at
    /// hand.
    pub whole: Option<Fingerprint>,
    /// Its `sub`.
    pub sub: &'a str,
    /// Its `jti`.
    pub jti: Option<&'a str>,
    /// Its `iat` (0 without one).
    pub issued_at: u64,
}

impl<'a> CredentialId<'a> {
    /// The id of `token`, verified as `who`.
    pub fn of(token: &[u8], who: &'a Principal) -> Self {
        CredentialId {
            fingerprint: Fingerprint::of(token),
            whole: Some(Fingerprint::of_whole_token(token)),
            sub: who.sub.as_str(),
            jti: who.jti.as_deref(),
            issued_at: who.issued_at,
        }
    }
}

/// Every revocation in force, indexed for the check each request makes. Each entry
/// keeps when its tokens expire; [`RevocationSet::prune`] decides, with the leeway,
/// when it goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevocationSet {
    sign_ins: HashMap<Fingerprint, u64>,
    tokens: HashMap<String, u64>,
    /// `sub` → (before, expires at).
    before: HashMap<String, (u64, u64)>,
}

impl RevocationSet {
    /// An empty set.
    pub fn new() -> Self {
        RevocationSet::default()
    }

    /// Adds (or widens) one entry.
    pub fn insert(&mut self, r: &Revocation) {
        let expires_at = r.expires_at();
        match r {
            Revocation::SignIn { fingerprint, .. } => {
                self.sign_ins.insert(*fingerprint, expires_at);
            }
            Revocation::Token { jti, .. } => {
                self.tokens.insert(jti.clone(), expires_at);
            }
            Revocation::IssuedBefore { sub, before, .. } => {
                let e = self.before.entry(sub.clone()).or_insert((0, 0));
                *e = (e.0.max(*before), e.1.max(expires_at));
            }
        }
    }

    /// Replaces the whole set (a feed reset).
    pub fn replace(&mut self, all: &[Revocation]) {
        *self = RevocationSet::default();
        all.iter().for_each(|r| self.insert(r));
    }

    /// Why `who` is refused, if a revocation covers it.
    pub fn check(&self, who: &CredentialId<'_>) -> Option<RevokedWhy> {
        if self.sign_ins.contains_key(&who.fingerprint)
            || who.whole.is_some_and(|w| self.sign_ins.contains_key(&w))
        {
            return Some(RevokedWhy::SignedOut);
        }
        if who.jti.is_some_and(|j| self.tokens.contains_key(j)) {
            return Some(RevokedWhy::Revoked);
        }
        match self.before.get(who.sub) {
            Some((before, _)) if who.issued_at < *before => Some(RevokedWhy::Revoked),
            _ => None,
        }
    }

    /// Whether nothing is revoked (the per-request check then costs nothing).
    pub fn is_empty(&self) -> bool {
        self.sign_ins.is_empty() && self.tokens.is_empty() && self.before.is_empty()
    }

    /// Entries in force.
    pub fn len(&self) -> usize {
        self.sign_ins.len() + self.tokens.len() + self.before.len()
    }

    /// Forgets the entries whose tokens can no longer verify at `now`, for a verifier
    /// with `leeway_secs` of leeway (`auth.leeway_seconds`): an expired token verifies
    /// for that long still.
    pub fn prune(&mut self, now: u64, leeway_secs: u64) {
        let keep = |expires_at: &u64| keep_until(*expires_at, leeway_secs) > now;
        self.sign_ins.retain(|_, e| keep(e));
        self.tokens.retain(|_, e| keep(e));
        self.before.retain(|_, (_, e)| keep(e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id<'a>(token: &[u8], sub: &'a str, jti: Option<&'a str>, iat: u64) -> CredentialId<'a> {
        CredentialId {
            fingerprint: Fingerprint::of(token),
            whole: Some(Fingerprint::of_whole_token(token)),
            sub,
            jti,
            issued_at: iat,
        }
    }

    #[test]
    fn a_sign_out_recorded_under_the_whole_tokens_hash_still_refuses_it() {
        let token = b"aaa.bbb.ccc";
        let mut set = RevocationSet::new();
        set.insert(&Revocation::SignIn {
            fingerprint: Fingerprint::of_whole_token(token),
            sub: "alice".into(),
            expires_at: 10_000,
        });
        assert_eq!(
            set.check(&id(token, "alice", None, 1)),
            Some(RevokedWhy::SignedOut)
        );
        let r = Revocation::SignIn {
            fingerprint: Fingerprint::of_whole_token(token),
            sub: "alice".into(),
            expires_at: 10_000,
        };
        assert!(r.covers(&id(token, "alice", None, 1)));
        assert_eq!(set.check(&id(b"aaa.bbb.ddd", "alice", None, 1)), None);
    }

    #[test]
    fn fingerprints_round_trip_through_hex_and_refuse_anything_else() {
        let f = Fingerprint::of(b"a.b.c");
        let text = f.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(Fingerprint::parse(&text), Some(f));
        assert_eq!(f.id(), text[..16]);
        for bad in [
            "",
            "zz",
            &text[..31],
            &text.to_uppercase(),
            &format!("{text}0"),
        ] {
            assert_eq!(Fingerprint::parse(bad), None, "{bad:?}");
        }
        assert_ne!(Fingerprint::of(b"a.b.c"), Fingerprint::of(b"a.c.c"));
        assert_ne!(Fingerprint::of(b"a.b.c"), Fingerprint::of(b"b.b.c"));
        assert_eq!(
            Fingerprint::of(b"a.b.c"),
            Fingerprint::of(b"a.b.d"),
            "the signature is no part of it"
        );
    }

    #[test]
    fn a_signed_out_sign_in_refuses_its_token_only() {
        let mut set = RevocationSet::new();
        assert!(set.is_empty());
        set.insert(&Revocation::SignIn {
            fingerprint: Fingerprint::of(b"t1"),
            sub: "alice".into(),
            expires_at: 1000,
        });
        assert_eq!(
            set.check(&id(b"t1", "alice", None, 5)),
            Some(RevokedWhy::SignedOut)
        );
        assert_eq!(set.check(&id(b"t2", "alice", None, 5)), None);
    }

    #[test]
    fn a_revoked_jti_and_an_issued_before_refuse_what_they_name() {
        let mut set = RevocationSet::new();
        set.insert(&Revocation::Token {
            jti: "j1".into(),
            expires_at: 1000,
        });
        set.insert(&Revocation::IssuedBefore {
            sub: "bob".into(),
            before: 500,
            expires_at: 2000,
        });
        assert_eq!(
            set.check(&id(b"x", "carol", Some("j1"), 0)),
            Some(RevokedWhy::Revoked)
        );
        assert_eq!(set.check(&id(b"x", "carol", Some("j2"), 0)), None);
        assert_eq!(
            set.check(&id(b"x", "bob", None, 499)),
            Some(RevokedWhy::Revoked)
        );
        assert_eq!(
            set.check(&id(b"x", "bob", None, 0)),
            Some(RevokedWhy::Revoked),
            "no iat: issued before any time"
        );
        assert_eq!(set.check(&id(b"x", "bob", None, 500)), None);
        // A later cut-off of the same user widens it; an earlier one never narrows it.
        set.insert(&Revocation::IssuedBefore {
            sub: "bob".into(),
            before: 100,
            expires_at: 2000,
        });
        assert!(set.check(&id(b"x", "bob", None, 499)).is_some());
    }

    #[test]
    fn entries_are_kept_through_the_configured_leeway_and_forgotten_after_it_and_a_margin() {
        let mut set = RevocationSet::new();
        let r = Revocation::SignIn {
            fingerprint: Fingerprint::of(b"t1"),
            sub: "alice".into(),
            expires_at: 1000,
        };
        set.insert(&r);
        // The largest leeway the configuration allows: the token verifies until 1300.
        let leeway = 300;
        set.prune(1000 + leeway, leeway);
        assert_eq!(set.len(), 1, "kept through the verifier's leeway");
        set.prune(1000 + leeway + KEEP_PAST_LEEWAY_SECS - 1, leeway);
        assert_eq!(set.len(), 1, "and a margin for clocks that disagree");
        set.prune(1000 + leeway + KEEP_PAST_LEEWAY_SECS, leeway);
        assert!(set.is_empty());
        assert_eq!(r.forget_at(leeway), 1000 + leeway + KEEP_PAST_LEEWAY_SECS);
        assert!(r.covers(&id(b"t1", "alice", None, 0)));
        assert!(!r.covers(&id(b"t2", "alice", None, 0)));
    }

    #[test]
    fn a_jti_revocation_refuses_an_expiry_already_past_and_takes_the_tokens_own() {
        let now = 1000;
        // A token issued now may live 600 s, and 300 s more of leeway.
        let latest = latest_exp(now, 600, 300);
        assert_eq!(latest, 1900);
        let past = Revocation::of_token("j1".into(), Some(now - 1), now, latest);
        assert_eq!(
            past,
            Err(RevocationError::ExpiresAtPast {
                expires_at: now - 1
            })
        );
        assert!(past.unwrap_err().to_string().starts_with("expires_at "));
        assert_eq!(
            Revocation::of_token("j1".into(), Some(latest - 1), now, latest),
            Ok(Revocation::Token {
                jti: "j1".into(),
                expires_at: latest - 1
            }),
            "the token's own exp, as given"
        );
        assert_eq!(
            Revocation::of_token("j1".into(), None, now, latest),
            Ok(Revocation::Token {
                jti: "j1".into(),
                expires_at: latest
            }),
            "unknown: the latest a token verifying now may carry"
        );
    }

    #[test]
    fn revocations_keep_their_layout_on_the_feed() {
        let r = Revocation::IssuedBefore {
            sub: "bob".into(),
            before: 5,
            expires_at: 9,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"issued_before","sub":"bob","before":5,"expires_at":9}"#
        );
        assert_eq!(serde_json::from_str::<Revocation>(&text).unwrap(), r);
        assert_eq!(r.key(), "b/bob");
    }
}

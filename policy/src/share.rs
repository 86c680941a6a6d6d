//! Live read-only share links: the link's token, what a profile allows, and the
//! decision to admit a viewer.
//!
//! A link is `/v/<token>`, the token being `<session id>-<32 hex digits>`: the session
//! it watches and 128 random bits. Control keeps only the token's SHA-256 (a
//! [`ShareGrant`] on the session's route), so neither the store nor the route feed can
//! give a link away, and a guess must hit a 128-bit secret. Every way a token can fail —
//! malformed, tampered, unknown, revoked, expired, its owner locked — is the one
//! [`Refusal::PAGE_NOT_FOUND`] of an unknown path: a link tells nothing it does not grant.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::feed::{Route, ShareGrant};
use crate::refusal::Refusal;
use crate::session_id::SessionId;

/// Who may open a session's share links (a profile's `shares`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareMode {
    /// Anyone with the link, signed in or not.
    Anyone,
    /// Anyone with the link who is signed in (a valid termgate token).
    #[default]
    SignedIn,
    /// No share links.
    Off,
}

impl ShareMode {
    /// Parses the configuration spelling: `anyone`, `signed-in` or `off`.
    pub fn parse(s: &str) -> Option<ShareMode> {
        match s {
            "anyone" => Some(ShareMode::Anyone),
            "signed-in" => Some(ShareMode::SignedIn),
            "off" => Some(ShareMode::Off),
            _ => None,
        }
    }
}

/// Shortest and longest life of a share link, seconds.
pub const TTL_RANGE: std::ops::RangeInclusive<u64> = 1..=7 * 24 * 3600;
/// Largest `max_viewers` a link may ask for.
pub const MAX_VIEWERS: u32 = 1000;
/// Hex digits of the secret in a token (128 bits).
const SECRET_HEX: usize = 32;

/// A share link's token, parsed: only the one spelling is accepted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ShareToken {
    session: SessionId,
    secret: [u8; SECRET_HEX / 2],
}

impl fmt::Debug for ShareToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret: debug output ends up in logs.
        f.debug_struct("ShareToken")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for ShareToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-", self.session)?;
        self.secret.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl ShareToken {
    /// A token for `session` from 16 random bytes.
    pub fn from_random(session: SessionId, secret: [u8; 16]) -> ShareToken {
        ShareToken { session, secret }
    }

    /// Parses `<session id>-<32 lowercase hex digits>`; anything else is `None`.
    pub fn parse(s: &str) -> Option<ShareToken> {
        let (id, hex) = s.split_once('-')?;
        let session = SessionId::parse(id).ok()?;
        if hex.len() != SECRET_HEX {
            return None;
        }
        let digit = |b: u8| match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        };
        let mut secret = [0u8; SECRET_HEX / 2];
        for (slot, pair) in secret.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            *slot = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(ShareToken { session, secret })
    }

    /// The session it watches.
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The SHA-256 of the whole token, lowercase hex: what control keeps.
    pub fn hash(&self) -> String {
        let digest = Sha256::digest(self.to_string().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The share's public id: the first 16 hex digits of [`ShareToken::hash`].
    pub fn id(&self) -> String {
        self.hash()[..16].to_owned()
    }

    /// The grant a route carries for this token.
    pub fn grant(&self, expires_at: u64, max_viewers: Option<u32>, mode: ShareMode) -> ShareGrant {
        let hash = self.hash();
        ShareGrant {
            id: hash[..16].to_owned(),
            hash,
            expires_at,
            max_viewers,
            signed_in: mode != ShareMode::Anyone,
        }
    }
}

/// Checks a request for a new link: `ttl_seconds` in [`TTL_RANGE`], `max_viewers`
/// 1–[`MAX_VIEWERS`], and a profile that allows links.
pub fn check_request(
    mode: ShareMode,
    ttl_seconds: u64,
    max_viewers: Option<u32>,
) -> Result<(), Refusal> {
    if mode == ShareMode::Off {
        return Err(Refusal::SHARES_OFF);
    }
    if !TTL_RANGE.contains(&ttl_seconds) || max_viewers.is_some_and(|m| m == 0 || m > MAX_VIEWERS) {
        return Err(Refusal::INVALID_SHARE);
    }
    Ok(())
}

/// Whether `token` admits a viewer to `route` (`None`: the session is unknown or not
/// running) at `now`. `owner_locked`: the session's owner is locked; `signed_in`: the
/// viewer presented a valid termgate token. Returns the grant that admits them.
///
/// Everything that makes the link worthless is [`Refusal::PAGE_NOT_FOUND`]; only a
/// valid link asks for a sign-in ([`Refusal::UNAUTHENTICATED`]).
pub fn decide_view<'a>(
    route: Option<&'a Route>,
    token: &ShareToken,
    now: u64,
    owner_locked: bool,
    signed_in: bool,
) -> Result<&'a ShareGrant, Refusal> {
    let route = route
        .filter(|r| r.session == token.session && r.arg().is_some())
        .ok_or(Refusal::PAGE_NOT_FOUND)?;
    let hash = token.hash();
    let grant = route
        .shares
        .iter()
        .find(|g| constant_time_eq(g.hash.as_bytes(), hash.as_bytes()))
        .filter(|g| now < g.expires_at && !owner_locked)
        .ok_or(Refusal::PAGE_NOT_FOUND)?;
    if route.unreachable {
        return Err(Refusal::HOST_UNAVAILABLE);
    }
    if grant.signed_in && !signed_in {
        return Err(Refusal::UNAUTHENTICATED
            .with_message("sign in to watch this terminal: the link is for signed-in users"));
    }
    Ok(grant)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(n: u8) -> SessionId {
        SessionId::from_random([n; 10])
    }

    fn token(n: u8) -> ShareToken {
        ShareToken::from_random(sid(1), [n; 16])
    }

    fn route_with(grants: Vec<ShareGrant>) -> Route {
        let mut r = Route::container(sid(1), "alice", "c0ffee");
        r.shares = grants;
        r
    }

    #[test]
    fn a_token_round_trips_and_only_its_one_spelling_parses() {
        let t = token(0xab);
        let s = t.to_string();
        assert_eq!(s.len(), SessionId::LEN + 1 + SECRET_HEX);
        assert_eq!(ShareToken::parse(&s), Some(t));
        let upper = s.to_uppercase();
        let near_misses = [
            &s[..s.len() - 1],
            &format!("{s}0"),
            &s.replace('-', "_"),
            &upper,
            &format!("{}-{}", sid(1), "g".repeat(SECRET_HEX)),
            &format!("{}{}", sid(1), "a".repeat(SECRET_HEX + 1)),
            "",
            "-",
        ];
        for bad in near_misses {
            assert_eq!(ShareToken::parse(bad), None, "{bad:?}");
        }
        assert!(!format!("{t:?}").contains(&s[SessionId::LEN + 1..]));
    }

    #[test]
    fn a_valid_link_admits_and_every_worthless_one_is_the_404_of_an_unknown_path() {
        let t = token(7);
        let route = route_with(vec![t.grant(1000, None, ShareMode::Anyone)]);
        assert_eq!(
            decide_view(Some(&route), &t, 999, false, false).unwrap().id,
            t.id()
        );
        let tampered = {
            let mut s = t.to_string();
            let last = if s.ends_with('0') { "1" } else { "0" };
            s.replace_range(s.len() - 1.., last);
            ShareToken::parse(&s).unwrap()
        };
        let other_session = ShareToken::from_random(sid(2), [7; 16]);
        let not_found = |r: Result<&ShareGrant, Refusal>| r.unwrap_err() == Refusal::PAGE_NOT_FOUND;
        assert!(not_found(decide_view(
            Some(&route),
            &tampered,
            999,
            false,
            false
        )));
        assert!(not_found(decide_view(
            Some(&route),
            &other_session,
            999,
            false,
            false
        )));
        assert!(
            not_found(decide_view(Some(&route), &t, 1000, false, false)),
            "expired"
        );
        assert!(
            not_found(decide_view(Some(&route), &t, 999, true, true)),
            "owner locked"
        );
        assert!(
            not_found(decide_view(None, &t, 999, false, false)),
            "session ended"
        );
        assert!(
            not_found(decide_view(
                Some(&route_with(vec![])),
                &t,
                999,
                false,
                false
            )),
            "revoked"
        );
        let mut target = route.clone();
        target.container.clear();
        assert!(not_found(decide_view(Some(&target), &t, 999, false, false)));
    }

    #[test]
    fn a_signed_in_link_asks_for_a_sign_in_only_once_the_link_is_valid() {
        let t = token(9);
        let route = route_with(vec![t.grant(1000, Some(2), ShareMode::SignedIn)]);
        let r = decide_view(Some(&route), &t, 10, false, false).unwrap_err();
        assert_eq!((r.status, r.code), (401, "unauthenticated"));
        assert!(decide_view(Some(&route), &t, 10, false, true).is_ok());
    }

    #[test]
    fn requests_are_checked_against_the_mode_and_the_bounds() {
        assert_eq!(
            check_request(ShareMode::Off, 600, None),
            Err(Refusal::SHARES_OFF)
        );
        assert!(check_request(ShareMode::SignedIn, 600, Some(3)).is_ok());
        for (ttl, max) in [
            (0, None),
            (7 * 24 * 3600 + 1, None),
            (600, Some(0)),
            (600, Some(1001)),
        ] {
            assert_eq!(
                check_request(ShareMode::Anyone, ttl, max),
                Err(Refusal::INVALID_SHARE)
            );
        }
        assert_eq!(ShareMode::parse("signed-in"), Some(ShareMode::SignedIn));
        assert_eq!(ShareMode::parse("Anyone"), None);
    }

    #[test]
    fn routes_say_which_shares_went() {
        let (a, b) = (
            token(1).grant(9, None, ShareMode::Anyone),
            token(2).grant(9, None, ShareMode::Anyone),
        );
        let before = route_with(vec![a.clone(), b.clone()]);
        let after = route_with(vec![b]);
        assert_eq!(before.shares_gone(&after), vec![a.id]);
        assert!(after.shares_gone(&before).is_empty());
        assert!(
            before.same_terminal(&after),
            "the owner's terminals stay open"
        );
    }
}

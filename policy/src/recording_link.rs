//! Links to one recording: the link's token, the checks of a request for one, and the
//! decision to play it.
//!
//! A link is `/r/<token>`, the token 64 lowercase hex digits (256 random bits). Control
//! keeps only the token's SHA-256 ([`RecordingToken::hash`]) and shows the link's id
//! ([`RecordingToken::id`], the hash's first 16 digits) in lists, logs and the audit
//! trail; the token is answered once, when the link is made. Every way a link can fail
//! — malformed, unknown, revoked, expired, its owner locked, its profile now `off` — is
//! the one [`Refusal::PAGE_NOT_FOUND`] of an unknown path.

use std::fmt;
use std::ops::RangeInclusive;

use sha2::{Digest, Sha256};

use crate::refusal::Refusal;
use crate::share::ShareMode;

/// Shortest and longest life of a recording link, seconds (60 s to 30 days).
pub const TTL_RANGE: RangeInclusive<u64> = 60..=30 * 24 * 3600;
/// A link's life when the request names none: 7 days.
pub const DEFAULT_TTL: u64 = 7 * 24 * 3600;
/// Random bytes in a token.
const SECRET_BYTES: usize = 32;

/// A recording link's token, parsed: 64 lowercase hex digits, nothing else.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RecordingToken([u8; SECRET_BYTES]);

impl fmt::Debug for RecordingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret: debug output ends up in logs.
        write!(f, "RecordingToken(<id {}>)", self.id())
    }
}

impl fmt::Display for RecordingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl RecordingToken {
    /// A token from 32 random bytes.
    pub fn from_random(secret: [u8; SECRET_BYTES]) -> RecordingToken {
        RecordingToken(secret)
    }

    /// Parses 64 lowercase hex digits; anything else is `None`.
    pub fn parse(s: &str) -> Option<RecordingToken> {
        if s.len() != SECRET_BYTES * 2 {
            return None;
        }
        let digit = |b: u8| match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        };
        let mut secret = [0u8; SECRET_BYTES];
        for (slot, pair) in secret.iter_mut().zip(s.as_bytes().chunks_exact(2)) {
            *slot = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(RecordingToken(secret))
    }

    /// The SHA-256 of the token's text, lowercase hex: what control keeps.
    pub fn hash(&self) -> String {
        let digest = Sha256::digest(self.to_string().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The link's public id: the first 16 hex digits of [`RecordingToken::hash`].
    pub fn id(&self) -> String {
        link_id(&self.hash())
    }
}

/// The public id of the link whose token hashes to `hash`.
pub fn link_id(hash: &str) -> String {
    hash.get(..16).unwrap_or(hash).to_owned()
}

/// Whether `s` may be a link's id (16 lowercase hex digits): anything else names no
/// link, and is answered as an unknown one.
pub fn valid_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The narrower of two modes: `off` < `signed-in` < `anyone`.
pub fn narrower(a: ShareMode, b: ShareMode) -> ShareMode {
    let rank = |m: ShareMode| match m {
        ShareMode::Off => 0,
        ShareMode::SignedIn => 1,
        ShareMode::Anyone => 2,
    };
    if rank(a) <= rank(b) {
        a
    } else {
        b
    }
}

/// Checks a request for a new link to a recording of a session whose profile allows
/// `profile`: links at all, a `mode` of `anyone` or `signed-in` no wider than the
/// profile's, and `ttl_seconds` within `ttl` (normally [`TTL_RANGE`]).
pub fn check_request(
    profile: ShareMode,
    mode: ShareMode,
    ttl_seconds: u64,
    ttl: &RangeInclusive<u64>,
) -> Result<(), Refusal> {
    if profile == ShareMode::Off {
        return Err(Refusal::RECORDING_LINKS_OFF);
    }
    if mode == ShareMode::Off || narrower(mode, profile) != mode {
        return Err(Refusal::INVALID_RECORDING_LINK.with_message(
            "mode must be \"anyone\" or \"signed-in\", and no wider than the profile's recording_links",
        ));
    }
    if !ttl.contains(&ttl_seconds) {
        return Err(Refusal::INVALID_RECORDING_LINK.with_message(format!(
            "ttl_seconds must be {}-{}",
            ttl.start(),
            ttl.end()
        )));
    }
    Ok(())
}

/// Whether a link plays its recording at `now`: `mode` is the narrower of the link's
/// and its profile's now ([`narrower`]), `signed_in` whether the viewer presented a
/// valid termgate credential of a user who is not locked.
///
/// Everything that makes the link worthless is [`Refusal::PAGE_NOT_FOUND`]; only a
/// valid `signed-in` link asks an anonymous viewer to sign in
/// ([`Refusal::UNAUTHENTICATED`]).
pub fn decide_recording_view(
    mode: ShareMode,
    signed_in: bool,
    expires_at: u64,
    revoked: bool,
    owner_locked: bool,
    now: u64,
) -> Result<(), Refusal> {
    if revoked || owner_locked || now >= expires_at || mode == ShareMode::Off {
        return Err(Refusal::PAGE_NOT_FOUND);
    }
    if mode == ShareMode::SignedIn && !signed_in {
        return Err(Refusal::UNAUTHENTICATED
            .with_message("sign in to watch this recording: the link is for signed-in users"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_only_its_one_spelling_parses() {
        let t = RecordingToken::from_random([0xab; 32]);
        let s = t.to_string();
        assert_eq!(s.len(), 64);
        assert_eq!(RecordingToken::parse(&s), Some(t));
        for bad in [
            &s[..63],
            &format!("{s}0"),
            &s.to_uppercase(),
            &format!("{}g", &s[..63]),
            &format!("{}-", &s[..63]),
            "",
        ] {
            assert_eq!(RecordingToken::parse(bad), None, "{bad:?}");
        }
        assert!(!format!("{t:?}").contains(&s));
        assert_eq!(t.id().len(), 16);
        assert!(t.hash().starts_with(&t.id()));
        assert!(valid_id(&t.id()));
        assert!(!valid_id(&s) && !valid_id("ABCDEF0123456789") && !valid_id("../x"));
        assert_ne!(t.hash(), s, "the hash is not the token");
    }

    #[test]
    fn requests_are_checked_against_the_profile_and_the_bounds() {
        let (on, off, signed) = (ShareMode::Anyone, ShareMode::Off, ShareMode::SignedIn);
        assert_eq!(
            check_request(off, signed, 600, &TTL_RANGE),
            Err(Refusal::RECORDING_LINKS_OFF)
        );
        assert!(check_request(on, on, 600, &TTL_RANGE).is_ok());
        assert!(check_request(on, signed, DEFAULT_TTL, &TTL_RANGE).is_ok());
        assert!(check_request(signed, signed, 60, &TTL_RANGE).is_ok());
        let invalid = |r: Result<(), Refusal>| r.unwrap_err().code == "invalid_recording_link";
        assert!(invalid(check_request(signed, on, 600, &TTL_RANGE)), "wider");
        assert!(invalid(check_request(on, off, 600, &TTL_RANGE)), "off");
        assert!(invalid(check_request(on, on, 59, &TTL_RANGE)));
        assert!(invalid(check_request(on, on, 30 * 86400 + 1, &TTL_RANGE)));
        assert!(check_request(on, on, 1, &(1..=10)).is_ok());
    }

    #[test]
    fn a_valid_link_plays_and_every_worthless_one_is_the_404_of_an_unknown_path() {
        let (any, signed) = (ShareMode::Anyone, ShareMode::SignedIn);
        assert!(decide_recording_view(any, false, 100, false, false, 99).is_ok());
        assert!(decide_recording_view(signed, true, 100, false, false, 99).is_ok());
        for (mode, expires, revoked, locked, now) in [
            (any, 100, false, false, 100),
            (any, 100, true, false, 1),
            (any, 100, false, true, 1),
            (ShareMode::Off, 100, false, false, 1),
            (signed, 100, true, false, 1),
        ] {
            assert_eq!(
                decide_recording_view(mode, true, expires, revoked, locked, now),
                Err(Refusal::PAGE_NOT_FOUND)
            );
        }
        let r = decide_recording_view(signed, false, 100, false, false, 1).unwrap_err();
        assert_eq!((r.status, r.code), (401, "unauthenticated"));
        assert_eq!(narrower(any, signed), signed);
        assert_eq!(narrower(ShareMode::Off, any), ShareMode::Off);
    }
}

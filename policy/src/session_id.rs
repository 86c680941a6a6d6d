//! Session ids: a validated newtype with one strict spelling.
//!
//! An id is exactly [`SessionId::LEN`] characters of the lowercase base32 alphabet
//! `a-z2-7` (80 random bits). Anything else — other lengths, upper case, padding,
//! separators, percent-encodings — is rejected before any lookup, so a path trick can
//! never become a different session.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A session's id, valid by construction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId([u8; SessionId::LEN]);

/// Why a string is not a session id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    /// Wrong number of bytes.
    #[error("session id must be {expected} characters, got {got}", expected = SessionId::LEN)]
    Length {
        /// Bytes received.
        got: usize,
    },
    /// A byte outside `a-z2-7`.
    #[error("session id may contain only a-z and 2-7 (byte {position} is not)")]
    Character {
        /// Zero-based index of the first bad byte.
        position: usize,
    },
}

impl SessionId {
    /// Length of every session id, in characters.
    pub const LEN: usize = 16;

    /// Parses the one accepted spelling of a session id.
    pub fn parse(s: &str) -> Result<Self, SessionIdError> {
        Self::parse_bytes(s.as_bytes())
    }

    /// Parses raw bytes (for example a path segment that may not be UTF-8).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, SessionIdError> {
        if bytes.len() != Self::LEN {
            return Err(SessionIdError::Length { got: bytes.len() });
        }
        let mut id = [0u8; Self::LEN];
        for (position, (&b, slot)) in bytes.iter().zip(id.iter_mut()).enumerate() {
            if !ALPHABET.contains(&b) {
                return Err(SessionIdError::Character { position });
            }
            *slot = b;
        }
        Ok(SessionId(id))
    }

    /// Builds an id from 10 random bytes (80 bits → 16 base32 characters).
    /// The caller supplies the randomness, which keeps this crate free of I/O.
    pub fn from_random(bytes: [u8; 10]) -> Self {
        let mut bits: u128 = 0;
        for b in bytes {
            bits = (bits << 8) | u128::from(b);
        }
        let mut id = [0u8; Self::LEN];
        for (i, slot) in id.iter_mut().enumerate() {
            let shift = 5 * (Self::LEN - 1 - i);
            *slot = ALPHABET[((bits >> shift) & 0x1f) as usize];
        }
        SessionId(id)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Every byte is from ALPHABET, which is ASCII.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.as_str())
    }
}

impl FromStr for SessionId {
    type Err = SessionIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        SessionId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::share;
    use proptest::prelude::*;

    #[test]
    fn from_random_round_trips_through_parse() {
        let id = SessionId::from_random([0xff, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(id.as_str().len(), SessionId::LEN);
        assert_eq!(SessionId::parse(id.as_str()), Ok(id));
    }

    #[test]
    fn all_zero_and_all_one_bits_map_to_alphabet_ends() {
        assert_eq!(SessionId::from_random([0; 10]).as_str(), "aaaaaaaaaaaaaaaa");
        assert_eq!(
            SessionId::from_random([0xff; 10]).as_str(),
            "7777777777777777"
        );
    }

    #[test]
    fn parse_rejects_every_near_miss() {
        let good = "abcdefghijk234mn";
        assert!(SessionId::parse(good).is_ok());
        for bad in [
            "",
            "abcdefghijk234m",
            "abcdefghijk234mnn",
            "Abcdefghijk234mn",
            "abcdefghijk234m0",
            "abcdefghijk234m1",
            "abcdefghijk234m8",
            "abcdefghijk234m.",
            "abcdefghijk234m/",
            "abcdefghijk234m%",
            "abcdefghijk234m\0",
            "../../../../etc/",
            "abcdefghijk234mé",
        ] {
            assert!(SessionId::parse(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            SessionId::parse("short"),
            Err(SessionIdError::Length { got: 5 })
        );
        assert_eq!(
            SessionId::parse("aaaaaaaaaaaaaaaA"),
            Err(SessionIdError::Character { position: 15 })
        );
    }

    #[test]
    fn deserialize_validates() {
        assert!(serde_json::from_str::<SessionId>("\"aaaaaaaaaaaaaaaa\"").is_ok());
        assert!(serde_json::from_str::<SessionId>("\"AAAAAAAAAAAAAAAA\"").is_err());
    }

    /// The documented rule, written without `ALPHABET` or `parse` so that a mistake in
    /// either cannot hide in the oracle: 16 bytes, each `a-z` or `2-7`.
    fn is_valid_id(s: &str) -> bool {
        s.len() == 16
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
    }

    /// Characters just outside the alphabet (`1` and `8` border `2-7`, `` ` `` and `{`
    /// border `a-z`), upper case, separators, encodings, NUL and non-ASCII.
    const OUTSIDE: &[char] = &[
        '0', '1', '8', '9', '`', '{', 'A', 'Q', 'Z', '.', '-', '_', '/', '%', '=', '+', ' ', '\0',
        'é',
    ];

    /// Valid ids and their near misses in about equal measure: random bytes almost never
    /// spell an id, so they cannot tell an exact parser from a lax one.
    fn id_candidates() -> impl Strategy<Value = String> {
        // Compiled once: a `&str` strategy recompiles its regex for every value.
        let over_alphabet =
            |len: usize| proptest::string::string_regex(&format!("[a-z2-7]{{{len}}}")).unwrap();
        let valid = || over_alphabet(SessionId::LEN);
        prop_oneof![
            4 => valid(),
            1 => over_alphabet(SessionId::LEN - 1),
            1 => over_alphabet(SessionId::LEN + 1),
            2 => (valid(), any::<prop::sample::Index>(), prop::sample::select(OUTSIDE)).prop_map(
                |(s, at, c)| {
                    let mut chars: Vec<char> = s.chars().collect();
                    let at = at.index(chars.len());
                    chars[at] = c;
                    chars.into_iter().collect()
                }
            ),
            2 => (valid(), any::<prop::sample::Index>()).prop_map(|(s, at)| {
                let mut bytes = s.into_bytes();
                let at = at.index(bytes.len());
                if bytes[at].is_ascii_lowercase() {
                    bytes[at].make_ascii_uppercase();
                } else {
                    // A digit has no upper case: shout the whole id instead.
                    bytes.make_ascii_uppercase();
                }
                String::from_utf8(bytes).unwrap()
            }),
        ]
    }

    #[test]
    fn the_id_generator_hits_both_accepted_and_refused_ids() {
        let accepted = share(id_candidates(), 10_000, |s| SessionId::parse(s).is_ok());
        eprintln!(
            "session id candidates: {:.1}% accepted, {:.1}% refused",
            accepted * 100.0,
            (1.0 - accepted) * 100.0
        );
        assert!((0.1..=0.9).contains(&accepted), "{accepted}");
    }

    proptest! {
        // Each near-miss character is about 1% of cases: enough cases that each shows up.
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn parse_accepts_exactly_the_alphabet_at_the_right_length(s in id_candidates()) {
            let parsed = SessionId::parse(&s);
            prop_assert_eq!(parsed.is_ok(), is_valid_id(&s), "{:?} -> {:?}", s, parsed);
            if let Ok(id) = parsed {
                prop_assert_eq!(id.as_str(), s.as_str());
                prop_assert_eq!(id.to_string().parse::<SessionId>(), Ok(id));
            }
        }
    }

    proptest! {
        /// Random bytes almost never spell an id; this guards against panics and
        /// against accepting what is not UTF-8 lower-case base32.
        #[test]
        fn parse_bytes_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let ok = SessionId::parse_bytes(&bytes).is_ok();
            let expected = std::str::from_utf8(&bytes).is_ok_and(is_valid_id);
            prop_assert_eq!(ok, expected);
        }

        #[test]
        fn every_random_id_parses_back(bytes in any::<[u8; 10]>()) {
            let id = SessionId::from_random(bytes);
            prop_assert_eq!(SessionId::parse(id.as_str()), Ok(id));
        }

        #[test]
        fn distinct_randomness_gives_distinct_ids(a in any::<[u8; 10]>(), b in any::<[u8; 10]>()) {
            prop_assume!(a != b);
            prop_assert_ne!(SessionId::from_random(a), SessionId::from_random(b));
        }
    }
}

//! Who is calling: a validated subject and the principal a verified token proves.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A user's subject: 1–128 characters of `[A-Za-z0-9._@-]`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Sub(String);

impl Sub {
    /// Longest accepted subject.
    pub const MAX_LEN: usize = 128;

    /// Validates a subject.
    pub fn parse(s: &str) -> Option<Sub> {
        let ok = !s.is_empty()
            && s.len() <= Self::MAX_LEN
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'));
        ok.then(|| Sub(s.to_owned()))
    }

    /// The subject as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Sub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Sub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sub({})", self.0)
    }
}

impl<'de> Deserialize<'de> for Sub {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Sub::parse(&s).ok_or_else(|| serde::de::Error::custom("invalid sub"))
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Who.
    pub sub: Sub,
    /// Whether the token carries the configured admin role.
    pub admin: bool,
    /// Every role the token carries (targets may be allowed by role).
    pub roles: Vec<String>,
    /// Token expiry, seconds since the Unix epoch.
    pub expires_at: u64,
    /// When the token was issued (`iat`), seconds since the Unix epoch; 0 without
    /// one. Revoking a user's tokens "issued before" a time compares against it.
    pub issued_at: u64,
    /// The token's `jti`, by which an admin may revoke it.
    pub jti: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_accepts_the_documented_alphabet_only() {
        for ok in ["alice", "a", "bob@example.com", "x.y_z-1", &"a".repeat(128)] {
            assert!(Sub::parse(ok).is_some(), "{ok}");
        }
        for bad in [
            "",
            " alice",
            "al ice",
            "alice/",
            "ålice",
            "a\0",
            &"a".repeat(129),
            "a:b",
            "a+b",
        ] {
            assert!(Sub::parse(bad).is_none(), "{bad:?}");
        }
    }
}

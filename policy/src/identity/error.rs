//! Why key material or a token is refused, and the size limits those refusals name.

/// Tokens longer than this are refused before any parsing.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Smallest accepted HS256 secret, in bytes (RFC 7518 §3.2: at least the hash size).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// Key material that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The HS256 secret is too short to be safe.
    #[error("HS256 secret is {got} bytes; at least {min} are required", min = MIN_HS256_SECRET_BYTES)]
    SecretTooShort {
        /// Bytes supplied.
        got: usize,
    },
    /// A PEM key is neither RSA, P-256/P-384 EC nor Ed25519.
    #[error("public key #{index} is not an RSA, EC or Ed25519 public key in PEM form")]
    UnsupportedPem {
        /// Position in the configured list.
        index: usize,
    },
    /// The JWKS document does not parse.
    #[error("JWKS document is not valid: {0}")]
    BadJwks(String),
    /// A JWKS key lacks what is needed to use it.
    #[error("JWKS key #{index}: {reason}")]
    BadJwk {
        /// Position in the document.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// No usable key at all.
    #[error("no verification key configured")]
    NoKeys,
    /// Two keys claim the same `kid`.
    #[error("key id {0:?} is used by more than one key")]
    DuplicateKid(String),
    /// A signing key that cannot sign.
    #[error("signing key is not usable: {0}")]
    BadSigningKey(String),
}

/// Why a token was refused. [`TokenError::reason`] is the stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Longer than [`MAX_TOKEN_BYTES`].
    #[error("token is larger than {max} bytes", max = MAX_TOKEN_BYTES)]
    Oversized,
    /// Not a compact JWS (three base64url parts, JSON header and payload, UTF-8).
    #[error("token is malformed: {0}")]
    Malformed(&'static str),
    /// The header's `alg` is not one the configured keys allow (includes `none`).
    #[error("algorithm {0:?} is not allowed")]
    AlgorithmNotAllowed(String),
    /// The header names a `kid` no configured key has.
    #[error("unknown key id {0:?}")]
    UnknownKid(String),
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
    /// `exp` is past, beyond the leeway.
    #[error("token expired")]
    Expired,
    /// `nbf` is in the future, beyond the leeway.
    #[error("token is not valid yet")]
    NotYetValid,
    /// `iss` differs from the configured issuer.
    #[error("wrong issuer")]
    WrongIssuer,
    /// `aud` does not contain the configured audience.
    #[error("wrong audience")]
    WrongAudience,
    /// A required claim is absent.
    #[error("required claim {0:?} is missing")]
    MissingClaim(&'static str),
    /// A claim has the wrong type.
    #[error("claim {0:?} has the wrong type")]
    InvalidClaim(&'static str),
    /// `sub` is not 1–128 characters of `[A-Za-z0-9._@-]`.
    #[error("sub must be 1-128 characters of A-Z a-z 0-9 . _ @ -")]
    InvalidSub,
    /// The token lives longer than the configured maximum lifetime.
    #[error("token lifetime exceeds the allowed maximum")]
    LifetimeTooLong,
    /// The sign-in this token belongs to was signed out.
    #[error("this sign-in was signed out")]
    SignedOut,
    /// An admin revoked the token (by its `jti`, or every token of its user issued
    /// before a time).
    #[error("this token was revoked")]
    Revoked,
}

impl From<crate::revocation::RevokedWhy> for TokenError {
    fn from(why: crate::revocation::RevokedWhy) -> Self {
        match why {
            crate::revocation::RevokedWhy::SignedOut => TokenError::SignedOut,
            crate::revocation::RevokedWhy::Revoked => TokenError::Revoked,
        }
    }
}

impl TokenError {
    /// Stable reason code for logs, metrics and tests.
    pub fn reason(&self) -> &'static str {
        match self {
            TokenError::Oversized => "oversized",
            TokenError::Malformed(_) => "malformed",
            TokenError::AlgorithmNotAllowed(_) => "algorithm_not_allowed",
            TokenError::UnknownKid(_) => "unknown_kid",
            TokenError::BadSignature => "bad_signature",
            TokenError::Expired => "expired",
            TokenError::LifetimeTooLong => "lifetime_too_long",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::WrongIssuer => "wrong_issuer",
            TokenError::WrongAudience => "wrong_audience",
            TokenError::MissingClaim(_) => "missing_claim",
            TokenError::InvalidClaim(_) => "invalid_claim",
            TokenError::InvalidSub => "invalid_sub",
            TokenError::SignedOut => "signed_out",
            TokenError::Revoked => "revoked",
        }
    }
}

//! Identity: who is calling, proven by a JWT.
//!
//! A [`Verifier`] is built once from key material (an HS256 secret, PEM public keys,
//! or a JWKS document) and then checks tokens against a caller-supplied `now`. The
//! algorithm allow-list is derived from the key family — never `none`, never an HMAC
//! check with a public key — and every refusal carries a stable reason code
//! ([`TokenError::reason`]) that logs and metrics use.
//!
//! Signature checking is delegated to `jsonwebtoken`; header parsing, key selection
//! and every claim rule are done here so each refusal has a precise reason.

use std::collections::BTreeSet;
use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// Tokens longer than this are refused before any parsing.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Smallest accepted HS256 secret, in bytes (RFC 7518 §3.2: at least the hash size).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

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

/// The token of an `Authorization` header value with the `Bearer` scheme (in any case),
/// without surrounding whitespace. Other schemes and an empty token are `None`: the
/// caller then has no bearer credential at all.
pub fn bearer(header_value: &[u8]) -> Option<&[u8]> {
    let value = header_value.trim_ascii();
    let (scheme, token) = value.split_at(value.iter().position(|b| *b == b' ')?);
    let token = token.trim_ascii();
    (scheme.eq_ignore_ascii_case(b"bearer") && !token.is_empty()).then_some(token)
}

/// The values of the cookie `name` in one `Cookie` header value, in order: each pair
/// whose name is exactly `name`, whitespace around the pair ignored, its value as sent
/// (an empty value is `b""`); a pair without `=` is no cookie.
fn cookie_values<'a, 'n>(
    header_value: &'a [u8],
    name: &'n str,
) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
    header_value.split(|b| *b == b';').filter_map(move |pair| {
        pair.trim_ascii()
            .strip_prefix(name.as_bytes())?
            .strip_prefix(b"=")
    })
}

/// The value of the cookie `name` in one `Cookie` header value: the first pair whose
/// name is exactly `name` (see [`cookie_values`]).
pub fn cookie<'a>(header_value: &'a [u8], name: &str) -> Option<&'a [u8]> {
    cookie_values(header_value, name).next()
}

/// Whether the `Cookie` header values carry the cookie `name` with two different
/// values (in one header or across several). Which one counts would be a guess, and a
/// proxy in front may guess differently, so such a request is refused like a repeated
/// `Authorization` header. The same value twice is no ambiguity.
pub fn session_cookie_is_ambiguous<'a>(
    cookie_headers: impl IntoIterator<Item = &'a [u8]>,
    name: &str,
) -> bool {
    let mut first: Option<&[u8]> = None;
    for value in cookie_headers {
        for v in cookie_values(value, name) {
            match first {
                None => first = Some(v),
                Some(f) if f != v => return true,
                Some(_) => {}
            }
        }
    }
    false
}

/// A PEM public key, optionally named by `kid`.
#[derive(Clone, PartialEq, Eq)]
pub struct PemKey {
    /// Key id that tokens name in their header; `None` matches tokens without `kid`
    /// (and tokens whose `kid` no configured key claims are refused).
    pub kid: Option<String>,
    /// The PEM text (SPKI `PUBLIC KEY`, or PKCS#1 `RSA PUBLIC KEY`).
    pub pem: Vec<u8>,
}

impl fmt::Debug for PemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PemKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// Where verification keys come from.
#[derive(Clone)]
pub enum KeyMaterial {
    /// A shared HS256 secret.
    Hs256Secret(Vec<u8>),
    /// PEM public keys (RS256, ES256 or EdDSA, told apart by the key itself).
    PemPublicKeys(Vec<PemKey>),
    /// A JWKS document (`{"keys":[…]}`); keys are chosen by `kid`.
    Jwks(Vec<u8>),
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyMaterial::Hs256Secret(_) => f.write_str("Hs256Secret(<redacted>)"),
            KeyMaterial::PemPublicKeys(keys) => f.debug_tuple("PemPublicKeys").field(keys).finish(),
            KeyMaterial::Jwks(_) => f.write_str("Jwks(..)"),
        }
    }
}

/// Claim rules other than the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierSettings {
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Required member of `aud`, when set.
    pub audience: Option<String>,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// The `roles` entry that grants admin.
    pub admin_role: String,
    /// Longest accepted token lifetime, seconds: `exp - iat`, or `exp - now` without
    /// `iat`. `None`: unbounded.
    pub max_lifetime_secs: Option<u64>,
}

impl Default for VerifierSettings {
    fn default() -> Self {
        VerifierSettings {
            issuer: None,
            audience: None,
            leeway_secs: 30,
            admin_role: "admin".into(),
            max_lifetime_secs: None,
        }
    }
}

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

struct VerifyingKey {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// Checks tokens. Build once at start; share freely (it is immutable).
pub struct Verifier {
    keys: Vec<VerifyingKey>,
    allowed: BTreeSet<&'static str>,
    settings: VerifierSettings,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("keys", &self.keys.len())
            .field("allowed", &self.allowed)
            .field("settings", &self.settings)
            .finish()
    }
}

fn alg_name(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::HS256 => "HS256",
        Algorithm::RS256 => "RS256",
        Algorithm::ES256 => "ES256",
        Algorithm::ES384 => "ES384",
        Algorithm::EdDSA => "EdDSA",
        _ => "other",
    }
}

fn alg_from_name(name: &str) -> Option<Algorithm> {
    match name {
        "HS256" => Some(Algorithm::HS256),
        "RS256" => Some(Algorithm::RS256),
        "ES256" => Some(Algorithm::ES256),
        "ES384" => Some(Algorithm::ES384),
        "EdDSA" => Some(Algorithm::EdDSA),
        _ => None,
    }
}

/// Classifies a PEM public key by trying each family; `jsonwebtoken` checks the key's
/// own algorithm identifier, so an RSA key never loads as EC and vice versa.
fn pem_key(pem: &[u8]) -> Option<(Algorithm, DecodingKey)> {
    if let Ok(k) = DecodingKey::from_rsa_pem(pem) {
        return Some((Algorithm::RS256, k));
    }
    if let Ok(k) = DecodingKey::from_ec_pem(pem) {
        // The curve decides the algorithm; P-384 keys sign ES384.
        let text = String::from_utf8_lossy(pem);
        let der = text
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<String>();
        let der = base64::engine::general_purpose::STANDARD
            .decode(der.trim())
            .unwrap_or_default();
        // OID 1.3.132.0.34 (secp384r1) = 06 05 2b 81 04 00 22
        let p384 = der
            .windows(7)
            .any(|w| w == [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22]);
        return Some((
            if p384 {
                Algorithm::ES384
            } else {
                Algorithm::ES256
            },
            k,
        ));
    }
    if let Ok(k) = DecodingKey::from_ed_pem(pem) {
        return Some((Algorithm::EdDSA, k));
    }
    None
}

fn jwk_key(index: usize, jwk: &jsonwebtoken::jwk::Jwk) -> Result<VerifyingKey, KeyError> {
    let bad = |reason: &str| KeyError::BadJwk {
        index,
        reason: reason.to_owned(),
    };
    let alg = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return Err(bad("unsupported EC curve")),
        },
        AlgorithmParameters::OctetKeyPair(okp) => match okp.curve {
            EllipticCurve::Ed25519 => Algorithm::EdDSA,
            _ => return Err(bad("unsupported OKP curve")),
        },
        // A symmetric key in a published key set would let anyone holding the set sign.
        AlgorithmParameters::OctetKey(_) => {
            return Err(bad("symmetric keys are not accepted in JWKS"))
        }
        _ => return Err(bad("unsupported key type")),
    };
    if let Some(declared) = jwk.common.key_algorithm {
        use jsonwebtoken::jwk::KeyAlgorithm as KA;
        let declared = match declared {
            KA::RS256 => Algorithm::RS256,
            KA::ES256 => Algorithm::ES256,
            KA::ES384 => Algorithm::ES384,
            KA::EdDSA => Algorithm::EdDSA,
            _ => return Err(bad("unsupported alg")),
        };
        if declared != alg {
            return Err(bad("declared alg does not match the key type"));
        }
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|e| bad(&e.to_string()))?;
    Ok(VerifyingKey {
        kid: jwk.common.key_id.clone(),
        alg,
        key,
    })
}

#[derive(Deserialize)]
struct RawHeader {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

impl Verifier {
    /// Builds a verifier from key material; refuses unusable or ambiguous keys.
    pub fn new(material: &KeyMaterial, settings: VerifierSettings) -> Result<Self, KeyError> {
        let keys = match material {
            KeyMaterial::Hs256Secret(secret) => {
                if secret.len() < MIN_HS256_SECRET_BYTES {
                    return Err(KeyError::SecretTooShort { got: secret.len() });
                }
                let key = DecodingKey::from_secret(secret)
                    .map_err(|e| KeyError::BadSigningKey(e.to_string()))?;
                vec![VerifyingKey {
                    kid: None,
                    alg: Algorithm::HS256,
                    key,
                }]
            }
            KeyMaterial::PemPublicKeys(pems) => pems
                .iter()
                .enumerate()
                .map(|(index, p)| {
                    let (alg, key) = pem_key(&p.pem).ok_or(KeyError::UnsupportedPem { index })?;
                    Ok(VerifyingKey {
                        kid: p.kid.clone(),
                        alg,
                        key,
                    })
                })
                .collect::<Result<Vec<_>, KeyError>>()?,
            KeyMaterial::Jwks(doc) => {
                let set: JwkSet =
                    serde_json::from_slice(doc).map_err(|e| KeyError::BadJwks(e.to_string()))?;
                set.keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| jwk_key(i, k))
                    .collect::<Result<Vec<_>, KeyError>>()?
            }
        };
        if keys.is_empty() {
            return Err(KeyError::NoKeys);
        }
        let mut kids = BTreeSet::new();
        for kid in keys.iter().filter_map(|k| k.kid.as_deref()) {
            if !kids.insert(kid) {
                return Err(KeyError::DuplicateKid(kid.to_owned()));
            }
        }
        let allowed = keys.iter().map(|k| alg_name(k.alg)).collect();
        Ok(Verifier {
            keys,
            allowed,
            settings,
        })
    }

    /// The algorithms this verifier accepts, derived from its keys.
    pub fn allowed_algorithms(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.allowed.iter().copied()
    }

    /// A verifier of an identity provider's published key set (its `jwks_uri`): keys
    /// this crate cannot use (encryption keys, other algorithms) are left out rather
    /// than refusing the whole set, since the provider publishes for many clients.
    pub fn from_provider_jwks(doc: &[u8]) -> Result<Self, KeyError> {
        let set: JwkSet =
            serde_json::from_slice(doc).map_err(|e| KeyError::BadJwks(e.to_string()))?;
        let mut kids = BTreeSet::new();
        let keys: Vec<VerifyingKey> = set
            .keys
            .iter()
            .enumerate()
            .filter(|(_, k)| {
                !matches!(
                    k.common.public_key_use,
                    Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
                )
            })
            .filter_map(|(i, k)| jwk_key(i, k).ok())
            // A kid claimed twice is ambiguous: keep the first.
            .filter(|k| k.kid.as_ref().is_none_or(|kid| kids.insert(kid.clone())))
            .collect();
        if keys.is_empty() {
            return Err(KeyError::NoKeys);
        }
        let allowed = keys.iter().map(|k| alg_name(k.alg)).collect();
        Ok(Verifier {
            keys,
            allowed,
            settings: VerifierSettings::default(),
        })
    }

    /// The claims of a token whose signature verifies, no claim checked: for an ID
    /// token, whose claims `crate::oidc::check_id_token` checks by its own rules.
    pub fn verify_signature(
        &self,
        token: &[u8],
    ) -> Result<serde_json::Map<String, serde_json::Value>, TokenError> {
        self.signed_claims(token)
    }

    /// Verifies a token at time `now` (seconds since the Unix epoch).
    pub fn verify(&self, token: &[u8], now: u64) -> Result<Principal, TokenError> {
        let claims = self.signed_claims(token)?;
        self.check_claims(&claims, now)
    }

    fn signed_claims(
        &self,
        token: &[u8],
    ) -> Result<serde_json::Map<String, serde_json::Value>, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::Oversized);
        }
        let token = std::str::from_utf8(token).map_err(|_| TokenError::Malformed("not UTF-8"))?;
        let mut parts = token.split('.');
        let (Some(header_b64), Some(_payload), Some(_signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed("not three dot-separated parts"));
        };
        let header_json = URL_SAFE_NO_PAD
            .decode(header_b64)
            .map_err(|_| TokenError::Malformed("header is not base64url"))?;
        let header: RawHeader = serde_json::from_slice(&header_json)
            .map_err(|_| TokenError::Malformed("header is not a JWS header"))?;
        if header.crit.is_some() {
            // No critical extensions are understood, so none may be required (RFC 7515 §4.1.11).
            return Err(TokenError::Malformed("crit header is not supported"));
        }
        let alg = match alg_from_name(&header.alg) {
            Some(alg) if self.allowed.contains(alg_name(alg)) => alg,
            _ => return Err(TokenError::AlgorithmNotAllowed(header.alg)),
        };

        let hmac = alg == Algorithm::HS256;
        let candidates: Vec<&VerifyingKey> = match header.kid.as_deref() {
            // A single shared secret has no key id to choose by.
            _ if hmac => self.keys.iter().collect(),
            Some(kid) => {
                let key = self
                    .keys
                    .iter()
                    .find(|k| k.kid.as_deref() == Some(kid))
                    .ok_or_else(|| TokenError::UnknownKid(kid.to_owned()))?;
                if key.alg != alg {
                    return Err(TokenError::AlgorithmNotAllowed(header.alg));
                }
                vec![key]
            }
            None => self.keys.iter().filter(|k| k.alg == alg).collect(),
        };

        let mut validation = Validation::new(alg);
        // Claims are checked below, against the caller's clock, with precise reasons.
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;

        let mut last = TokenError::BadSignature;
        let claims = candidates.iter().find_map(|k| {
            match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
                token,
                &k.key,
                &validation,
            ) {
                Ok(data) => Some(data.claims),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind as K;
                    last = match e.kind() {
                        K::Base64(_) | K::Json(_) | K::Utf8(_) | K::InvalidToken => {
                            TokenError::Malformed("payload is not a JSON object")
                        }
                        _ => TokenError::BadSignature,
                    };
                    None
                }
            }
        });
        claims.ok_or(last)
    }

    fn check_claims(
        &self,
        claims: &serde_json::Map<String, serde_json::Value>,
        now: u64,
    ) -> Result<Principal, TokenError> {
        let leeway = self.settings.leeway_secs;
        let exp = match claims.get("exp") {
            None => return Err(TokenError::MissingClaim("exp")),
            Some(v) => numeric_date(v).ok_or(TokenError::InvalidClaim("exp"))?,
        };
        if now >= exp.saturating_add(leeway) {
            return Err(TokenError::Expired);
        }
        if let Some(max) = self.settings.max_lifetime_secs {
            // A long-lived token that leaks stays useful to whoever holds it; bound it.
            let issued = match claims.get("iat") {
                None => now,
                Some(v) => numeric_date(v).ok_or(TokenError::InvalidClaim("iat"))?,
            };
            if exp.saturating_sub(issued) > max.saturating_add(leeway) {
                return Err(TokenError::LifetimeTooLong);
            }
        }
        if let Some(v) = claims.get("nbf") {
            let nbf = numeric_date(v).ok_or(TokenError::InvalidClaim("nbf"))?;
            if now.saturating_add(leeway) < nbf {
                return Err(TokenError::NotYetValid);
            }
        }
        if let Some(want) = &self.settings.issuer {
            match claims.get("iss") {
                None => return Err(TokenError::MissingClaim("iss")),
                Some(serde_json::Value::String(iss)) if iss == want => {}
                Some(serde_json::Value::String(_)) => return Err(TokenError::WrongIssuer),
                Some(_) => return Err(TokenError::InvalidClaim("iss")),
            }
        }
        if let Some(want) = &self.settings.audience {
            let ok = match claims.get("aud") {
                None => return Err(TokenError::MissingClaim("aud")),
                Some(serde_json::Value::String(a)) => a == want,
                Some(serde_json::Value::Array(list)) => {
                    if !list.iter().all(|a| a.is_string()) {
                        return Err(TokenError::InvalidClaim("aud"));
                    }
                    list.iter().any(|a| a.as_str() == Some(want))
                }
                Some(_) => return Err(TokenError::InvalidClaim("aud")),
            };
            if !ok {
                return Err(TokenError::WrongAudience);
            }
        }
        let sub = match claims.get("sub") {
            None => return Err(TokenError::MissingClaim("sub")),
            Some(serde_json::Value::String(s)) => Sub::parse(s).ok_or(TokenError::InvalidSub)?,
            Some(_) => return Err(TokenError::InvalidSub),
        };
        let roles = match claims.get("roles") {
            None => Vec::new(),
            Some(serde_json::Value::Array(roles)) => roles
                .iter()
                .map(|r| r.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()
                .ok_or(TokenError::InvalidClaim("roles"))?,
            Some(_) => return Err(TokenError::InvalidClaim("roles")),
        };
        let issued_at = match claims.get("iat") {
            None => 0,
            Some(v) => numeric_date(v).ok_or(TokenError::InvalidClaim("iat"))?,
        };
        let jti = match claims.get("jti") {
            None => None,
            Some(serde_json::Value::String(j)) if !j.is_empty() && j.len() <= 256 => {
                Some(j.clone())
            }
            Some(_) => return Err(TokenError::InvalidClaim("jti")),
        };
        Ok(Principal {
            sub,
            admin: roles.contains(&self.settings.admin_role),
            roles,
            expires_at: exp,
            issued_at,
            jti,
        })
    }
}

/// A NumericDate as RFC 7519 allows it; fractions are truncated, negatives refused.
fn numeric_date(v: &serde_json::Value) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    let f = v.as_f64()?;
    (f.is_finite() && f >= 0.0 && f < u64::MAX as f64).then_some(f as u64)
}

/// Claims of a token that termgate issues (dev sign-in and tests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// Subject.
    pub sub: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// Issued at.
    pub iat: u64,
    /// Issuer.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub iss: Option<String>,
    /// Audience.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub aud: Option<String>,
    /// Roles.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub roles: Vec<String>,
    /// Token id: the gateway gives each sign-in's token its own, so that sign-ins made
    /// with the same sign-in link are told apart.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub jti: Option<String>,
    /// Sign-in id: random for each sign-in the gateway makes, so that two sign-ins
    /// with the same token in the same second still get tokens of their own.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sid: Option<String>,
}

/// Signs tokens with a private key or the HS256 secret.
pub struct Signer {
    alg: Algorithm,
    kid: Option<String>,
    key: EncodingKey,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("alg", &alg_name(self.alg))
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer for an HS256 secret.
    pub fn hs256(secret: &[u8]) -> Result<Self, KeyError> {
        if secret.len() < MIN_HS256_SECRET_BYTES {
            return Err(KeyError::SecretTooShort { got: secret.len() });
        }
        let key =
            EncodingKey::from_secret(secret).map_err(|e| KeyError::BadSigningKey(e.to_string()))?;
        Ok(Signer {
            alg: Algorithm::HS256,
            kid: None,
            key,
        })
    }

    /// A signer for a PEM private key (RSA → RS256, P-256 EC → ES256, Ed25519 → EdDSA).
    pub fn from_private_pem(pem: &[u8], kid: Option<String>) -> Result<Self, KeyError> {
        let (alg, key) = if let Ok(k) = EncodingKey::from_rsa_pem(pem) {
            (Algorithm::RS256, k)
        } else if let Ok(k) = EncodingKey::from_ec_pem(pem) {
            (Algorithm::ES256, k)
        } else if let Ok(k) = EncodingKey::from_ed_pem(pem) {
            (Algorithm::EdDSA, k)
        } else {
            return Err(KeyError::BadSigningKey(
                "not an RSA, P-256 EC or Ed25519 private key in PEM form".into(),
            ));
        };
        Ok(Signer { alg, kid, key })
    }

    /// Signs claims into a compact JWT.
    pub fn sign(&self, claims: &TokenClaims) -> Result<String, KeyError> {
        self.sign_claims(claims)
    }

    /// Signs any claims (`nbf`, say, which termgate never issues but verifies) into a
    /// compact JWT: for tests of what other issuers send.
    pub fn sign_claims<C: Serialize>(&self, claims: &C) -> Result<String, KeyError> {
        let mut header = Header::new(self.alg);
        header.kid = self.kid.clone();
        jsonwebtoken::encode(&header, claims, &self.key)
            .map_err(|e| KeyError::BadSigningKey(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_takes_the_token_of_the_bearer_scheme_only() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bEaReR abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"  Bearer   abc  "), Some(&b"abc"[..]));
        for refused in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearer    ",
            b"",
            b"Basic abc",
            b"Bearerabc",
            b"Bearer\tabc",
            b"Token abc",
        ] {
            assert_eq!(
                bearer(refused),
                None,
                "{:?}",
                String::from_utf8_lossy(refused)
            );
        }
    }

    #[test]
    fn cookie_takes_the_first_pair_of_the_exact_name() {
        let header = b"a=1; termgate_sessionx=no;  termgate_session=yes ;termgate_session=late";
        assert_eq!(cookie(header, "termgate_session"), Some(b"yes".as_slice()));
        assert_eq!(cookie(header, "a"), Some(b"1".as_slice()));
        assert_eq!(cookie(b"x=", "x"), Some(b"".as_slice()));
        for absent in [
            b"".as_slice(),
            b"termgate_session",
            b"xtermgate_session=no",
            b"termgate_session_2=no",
            b"a=termgate_session=no",
        ] {
            assert_eq!(
                cookie(absent, "termgate_session"),
                None,
                "{}",
                String::from_utf8_lossy(absent)
            );
        }
    }

    #[test]
    fn two_different_session_cookies_are_ambiguous_and_the_same_one_twice_is_not() {
        let amb = |headers: &[&str]| {
            session_cookie_is_ambiguous(headers.iter().map(|h| h.as_bytes()), "sid")
        };
        assert!(amb(&["sid=a; sid=b"]));
        assert!(amb(&["sid=a", "x=1; sid=b"]));
        assert!(amb(&["sid=a; sid="]));
        assert!(amb(&["sid=a; sid=a; sid=b"]));
        assert!(!amb(&[]));
        assert!(!amb(&["sid=a"]));
        assert!(!amb(&["sid=a; sid=a"]));
        assert!(!amb(&["sid=a", " sid=a "]));
        // Other names, however similar, are other cookies.
        assert!(!amb(&["sid=a; sid2=b; xsid=c; sid =d; SID=e"]));
    }

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

    #[test]
    fn numeric_dates_refuse_negative_and_non_numbers() {
        assert_eq!(numeric_date(&serde_json::json!(10)), Some(10));
        assert_eq!(numeric_date(&serde_json::json!(10.9)), Some(10));
        assert_eq!(numeric_date(&serde_json::json!(-1)), None);
        assert_eq!(numeric_date(&serde_json::json!("10")), None);
    }

    #[test]
    fn short_hs256_secret_is_refused() {
        assert_eq!(
            Verifier::new(
                &KeyMaterial::Hs256Secret(vec![1; 31]),
                VerifierSettings::default()
            )
            .unwrap_err(),
            KeyError::SecretTooShort { got: 31 }
        );
    }

    #[test]
    fn key_material_debug_never_shows_the_secret() {
        let dbg = format!(
            "{:?}",
            KeyMaterial::Hs256Secret(b"super-secret-value".to_vec())
        );
        assert!(!dbg.contains("super-secret"), "{dbg}");
    }
}

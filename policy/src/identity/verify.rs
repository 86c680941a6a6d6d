//! Verification: key material, the claim rules, and the [`Verifier`] that checks a
//! token's signature and claims.

use std::collections::BTreeSet;
use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::error::{KeyError, TokenError, MAX_TOKEN_BYTES, MIN_HS256_SECRET_BYTES};
use super::principal::{Principal, Sub};

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
    /// Whether a high-S ECDSA signature is refused: for tokens clients present, which
    /// name sign-ins; not for a provider's ID token, which no client hands in.
    low_s_only: bool,
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

pub(super) fn alg_name(alg: Algorithm) -> &'static str {
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
            low_s_only: true,
        })
    }

    /// The algorithms this verifier accepts, derived from its keys.
    pub fn allowed_algorithms(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.allowed.iter().copied()
    }

    /// A verifier of an identity provider's published key set (its `jwks_uri`): keys
    /// this crate cannot use (encryption keys, other algorithms) are left out rather
    /// than refusing the whole set, since the provider publishes for many clients. It
    /// accepts either spelling of an ECDSA signature: the ID tokens it checks come from
    /// the provider's token endpoint, never from a client, and providers need not sign
    /// low-S.
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
            low_s_only: false,
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

    /// Whether a token expiring at `exp` is still accepted at `now`: the one claim whose
    /// check a token that verified once can fail later (the others only turn from
    /// refused to accepted as time passes, or do not depend on it).
    pub fn unexpired_at(&self, exp: u64, now: u64) -> bool {
        now < exp.saturating_add(self.settings.leeway_secs)
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
        let (Some(header_b64), Some(_payload), Some(signature), None) =
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

        if self.low_s_only && super::ecdsa::is_high_s(alg, signature) {
            // `(r, n - s)` verifies wherever `(r, s)` does: accepting both would let
            // anyone re-spell a token without its key.
            return Err(TokenError::BadSignature);
        }

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
        if !self.unexpired_at(exp, now) {
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

#[cfg(test)]
mod tests {
    use super::*;

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

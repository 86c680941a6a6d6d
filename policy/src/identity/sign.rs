//! Signing: the claims termgate issues and the [`Signer`] that signs them.

use std::fmt;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};

use super::error::{KeyError, MIN_HS256_SECRET_BYTES};
use super::verify::alg_name;

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
    /// compact JWT: for tests of what other issuers send. An ECDSA signature is given
    /// its low-S spelling, the only one verification accepts.
    pub fn sign_claims<C: Serialize>(&self, claims: &C) -> Result<String, KeyError> {
        let mut header = Header::new(self.alg);
        header.kid = self.kid.clone();
        let token = jsonwebtoken::encode(&header, claims, &self.key)
            .map_err(|e| KeyError::BadSigningKey(e.to_string()))?;
        super::ecdsa::low_s(self.alg, token)
            .ok_or_else(|| KeyError::BadSigningKey("ECDSA signature is not r || s".into()))
    }
}

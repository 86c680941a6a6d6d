//! Tokens already verified, kept so that a client's next request with the same token
//! costs a lookup rather than a signature check and a parse of its claims (as Envoy's
//! `jwt_authn` keeps its verified tokens).
//!
//! The verifier is fixed for the process's life, so a token that verified once verifies
//! again, with the same principal, until it expires: expiry is the one check that turns
//! an accepted token into a refused one (`Verifier::unexpired_at`), and it is made
//! again on every hit. Only tokens that verified are kept, so a client cannot fill the
//! table with tokens of its own making; revocation is checked after, per request, as
//! before.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use policy::{Principal, TokenError, Verifier};

/// How many verified tokens are kept at most: past it, the expired ones are dropped,
/// and if that frees nothing the table starts again empty.
pub const KEPT: usize = 4096;

/// A [`Verifier`] with the tokens it has accepted.
pub struct VerifiedTokens {
    verifier: Verifier,
    kept: Mutex<HashMap<Box<[u8]>, Principal>>,
    cap: usize,
}

impl VerifiedTokens {
    /// Keeps at most [`KEPT`] tokens that `verifier` accepted.
    pub fn new(verifier: Verifier) -> Self {
        Self::with_capacity(verifier, KEPT)
    }

    /// Keeps at most `cap` tokens.
    pub fn with_capacity(verifier: Verifier, cap: usize) -> Self {
        VerifiedTokens {
            verifier,
            kept: Mutex::new(HashMap::new()),
            cap: cap.max(1),
        }
    }

    /// The principal of `token` at `now`, as [`Verifier::verify`] answers it.
    pub fn verify(&self, token: &[u8], now: u64) -> Result<Principal, TokenError> {
        if let Some(p) = self.lock().get(token) {
            if self.verifier.unexpired_at(p.expires_at, now) {
                return Ok(p.clone());
            }
        }
        let principal = self.verifier.verify(token, now)?;
        let mut kept = self.lock();
        if kept.len() >= self.cap && !kept.contains_key(token) {
            kept.retain(|_, p| self.verifier.unexpired_at(p.expires_at, now));
            if kept.len() >= self.cap {
                kept.clear();
            }
        }
        kept.insert(token.into(), principal.clone());
        Ok(principal)
    }

    /// Tokens kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no token is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Box<[u8]>, Principal>> {
        // A panic while the table was held leaves it whole (one insert or removal).
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::{KeyMaterial, Signer, TokenClaims};

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn verifier() -> Verifier {
        Verifier::new(
            &KeyMaterial::Hs256Secret(SECRET.to_vec()),
            Default::default(),
        )
        .unwrap()
    }

    fn token(sub: &str, exp: u64) -> Vec<u8> {
        let claims = TokenClaims {
            sub: sub.into(),
            exp,
            iat: 1_000,
            iss: None,
            aud: None,
            roles: vec!["dev".into()],
            jti: None,
            sid: None,
        };
        let signer = Signer::hs256(SECRET).unwrap();
        signer.sign(&claims).unwrap().into_bytes()
    }

    #[test]
    fn a_kept_token_answers_as_the_verifier_does_until_it_expires() {
        let v = VerifiedTokens::new(verifier());
        let t = token("alice", 2_000);
        let first = v.verify(&t, 1_500).unwrap();
        assert_eq!(v.len(), 1);
        // The verifier's leeway (30 s) holds for a kept token too.
        let again = v.verify(&t, 2_029).unwrap();
        assert_eq!(again, first);
        assert_eq!(again, verifier().verify(&t, 2_029).unwrap());
        // Expired: refused as the verifier refuses it, kept or not.
        assert_eq!(v.verify(&t, 2_030), Err(TokenError::Expired));
        assert_eq!(verifier().verify(&t, 2_030), Err(TokenError::Expired));
    }

    #[test]
    fn only_tokens_that_verify_are_kept() {
        let v = VerifiedTokens::new(verifier());
        let mut forged = token("alice", 2_000);
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        for bad in [&b"not a token"[..], &forged[..], &token("bob", 1_200)[..]] {
            assert!(v.verify(bad, 1_500).is_err());
        }
        assert!(v.is_empty());
    }

    #[test]
    fn the_table_stays_within_its_bound() {
        let v = VerifiedTokens::with_capacity(verifier(), 3);
        let soon = token("soon", 1_600);
        v.verify(&soon, 1_500).unwrap();
        for sub in ["a", "b"] {
            v.verify(&token(sub, 9_000), 1_500).unwrap();
        }
        assert_eq!(v.len(), 3);
        // Full: the expired one goes first.
        v.verify(&token("c", 9_000), 1_700).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v.verify(&soon, 1_700), Err(TokenError::Expired));
        // Full of unexpired ones: it starts again, and every token still verifies.
        v.verify(&token("d", 9_000), 1_700).unwrap();
        assert_eq!(v.len(), 1);
        for sub in ["a", "b", "c", "d"] {
            assert_eq!(
                v.verify(&token(sub, 9_000), 1_700).unwrap().sub.as_str(),
                sub
            );
        }
        assert!(v.len() <= 3);
    }
}

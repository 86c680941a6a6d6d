//! The command-line client signed in through the browser (`termgate login URL`): the
//! decisions of the hand-off, without I/O.
//!
//! The client listens on a loopback port, draws a `state` and a PKCE verifier, and
//! opens the gateway's `/cli-login` page with the port, the state and the verifier's
//! S256 challenge in the fragment. The page, signed in by its cookie, asks the user;
//! on Allow the gateway mints a *code* ([`CliCode::mint`], [`CodeSealer::seal`]): the
//! browser sign-in's user, roles, expiry and `jti`, the challenge, a sign-in id drawn
//! now and an expiry [`CODE_TTL_SECS`] away, sealed with HMAC-SHA256 under a key
//! derived from the signing key, so any replica opens it and none keeps it. The
//! browser carries it to the client's port, and the client posts it with its verifier
//! ([`CodeSealer::redeem`]: sealed here, unexpired, made for this verifier).
//!
//! The token a code is exchanged for is a function of the code alone
//! ([`CliCode::claims`]), so its sign-in has the same fingerprint however often the
//! code is presented: control records a code's sign-in once and refuses the second,
//! on whichever replica it arrives. That is what makes a code single-use without a
//! store of codes.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::identity::{KeyError, Principal, TokenClaims};
use crate::oidc::pkce_challenge;
use crate::refusal::Refusal;

/// How long a code may travel from the browser to the client and back to the gateway.
pub const CODE_TTL_SECS: u64 = 60;

/// The longest code accepted: a sealed code is a few hundred bytes; anything much
/// longer was not made here.
const MAX_CODE_BYTES: usize = 4096;

/// Why a step of the hand-off was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CliLoginError {
    /// The challenge is not an S256 challenge (43 base64url characters).
    #[error("the challenge is not an S256 PKCE challenge")]
    BadChallenge,
    /// The code was not sealed by this deployment, or was altered.
    #[error("the code is not valid")]
    Invalid,
    /// The code, or the sign-in it was made from, expired.
    #[error("the code expired")]
    Expired,
    /// The verifier presented is not the one the code's challenge was made from.
    #[error("the code was not made for this verifier")]
    VerifierMismatch,
}

impl From<CliLoginError> for Refusal {
    fn from(e: CliLoginError) -> Refusal {
        match e {
            CliLoginError::BadChallenge => Refusal::CLI_CHALLENGE_INVALID,
            CliLoginError::Invalid => Refusal::CLI_CODE_INVALID,
            CliLoginError::Expired => Refusal::CLI_CODE_EXPIRED,
            CliLoginError::VerifierMismatch => Refusal::CLI_VERIFIER_MISMATCH,
        }
    }
}

/// What a code carries: everything the client's token will say, and what the code
/// itself is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CliCode {
    /// The user the browser is signed in as.
    pub sub: String,
    /// The browser sign-in's roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// When the client's sign-in ends: when the browser's does.
    pub until: u64,
    /// The browser sign-in's `jti`: revoking that token ends this sign-in too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// When the code was minted, the client token's `iat`.
    pub iat: u64,
    /// The client sign-in's own id, drawn when the code was minted.
    pub sid: String,
    /// The S256 challenge of the client's verifier.
    pub challenge: String,
    /// When the code stops being accepted.
    pub exp: u64,
}

/// Whether `c` is spelled as an S256 challenge: base64url, unpadded, of 32 bytes.
pub fn challenge_ok(c: &str) -> bool {
    c.len() == 43
        && URL_SAFE_NO_PAD
            .decode(c)
            .is_ok_and(|bytes| bytes.len() == 32)
}

/// Whether `v` is spelled as a PKCE verifier (RFC 7636: 43–128 unreserved characters).
fn verifier_ok(v: &str) -> bool {
    (43..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

impl CliCode {
    /// The code for the signed-in `browser`, bound to `challenge`, with the sign-in id
    /// `sid` (the caller draws it: this crate has no randomness).
    pub fn mint(
        browser: &Principal,
        challenge: &str,
        sid: String,
        now: u64,
    ) -> Result<CliCode, CliLoginError> {
        if !challenge_ok(challenge) {
            return Err(CliLoginError::BadChallenge);
        }
        Ok(CliCode {
            sub: browser.sub.to_string(),
            roles: browser.roles.clone(),
            until: browser.expires_at,
            jti: browser.jti.clone(),
            iat: now,
            sid,
            challenge: challenge.to_owned(),
            exp: now + CODE_TTL_SECS,
        })
    }

    /// The claims of the client's token, the same every time for one code.
    pub fn claims(&self, iss: Option<String>, aud: Option<String>) -> TokenClaims {
        TokenClaims {
            sub: self.sub.clone(),
            exp: self.until,
            iat: self.iat,
            iss,
            aud,
            roles: self.roles.clone(),
            jti: self.jti.clone(),
            sid: Some(self.sid.clone()),
        }
    }
}

/// Seals and opens codes (HS256 over the code's JSON).
pub struct CodeSealer {
    encode: EncodingKey,
    decode: DecodingKey,
}

impl std::fmt::Debug for CodeSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CodeSealer(<redacted>)")
    }
}

impl CodeSealer {
    /// A sealer whose key is derived from `secret` (the gateway's signing key): every
    /// replica derives the same key, and it is neither the signing key nor the flow
    /// cookie's, so a code passes for nothing else and nothing else for a code.
    pub fn new(secret: &[u8]) -> Result<CodeSealer, KeyError> {
        let mut h = Sha256::new();
        h.update(b"termgate cli sign-in code v1\0");
        h.update(secret);
        let key = h.finalize();
        let bad = |e: jsonwebtoken::errors::Error| KeyError::BadSigningKey(e.to_string());
        Ok(CodeSealer {
            encode: EncodingKey::from_secret(&key).map_err(bad)?,
            decode: DecodingKey::from_secret(&key).map_err(bad)?,
        })
    }

    /// The code as the browser carries it.
    pub fn seal(&self, code: &CliCode) -> String {
        // Serialising a struct of strings and numbers cannot fail.
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), code, &self.encode).unwrap_or_default()
    }

    /// The code `sealed` names, if it was sealed here, has not expired at `now`, and
    /// was made for `verifier`. Whether it was used already is control's to say.
    pub fn redeem(&self, sealed: &str, verifier: &str, now: u64) -> Result<CliCode, CliLoginError> {
        if sealed.len() > MAX_CODE_BYTES {
            return Err(CliLoginError::Invalid);
        }
        let mut v = Validation::new(Algorithm::HS256);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        v.validate_aud = false;
        let code = jsonwebtoken::decode::<CliCode>(sealed, &self.decode, &v)
            .map_err(|_| CliLoginError::Invalid)?
            .claims;
        if now >= code.exp || now >= code.until {
            return Err(CliLoginError::Expired);
        }
        if !verifier_ok(verifier)
            || !constant_time_eq(
                pkce_challenge(verifier).as_bytes(),
                code.challenge.as_bytes(),
            )
        {
            return Err(CliLoginError::VerifierMismatch);
        }
        Ok(code)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Sub;

    const NOW: u64 = 1_700_000_000;
    const SECRET: &[u8] = b"a signing secret of 32 bytes, or more";
    const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

    fn browser() -> Principal {
        Principal {
            sub: Sub::parse("alice").unwrap(),
            admin: true,
            roles: vec!["admin".into()],
            expires_at: NOW + 3600,
            issued_at: NOW - 10,
            jti: Some("j1".into()),
        }
    }

    fn sealed(sealer: &CodeSealer) -> String {
        let code = CliCode::mint(&browser(), &pkce_challenge(VERIFIER), "s1".into(), NOW).unwrap();
        sealer.seal(&code)
    }

    #[test]
    fn a_code_is_redeemed_with_its_verifier_for_the_browsers_user_until_the_browsers_end() {
        let sealer = CodeSealer::new(SECRET).unwrap();
        let code = sealer.redeem(&sealed(&sealer), VERIFIER, NOW + 5).unwrap();
        let claims = code.claims(Some("iss".into()), None);
        assert_eq!(claims.sub, "alice");
        assert_eq!(claims.roles, ["admin"]);
        assert_eq!((claims.iat, claims.exp), (NOW, NOW + 3600));
        assert_eq!(claims.jti.as_deref(), Some("j1"));
        assert_eq!(claims.sid.as_deref(), Some("s1"));
        assert_eq!(claims.iss.as_deref(), Some("iss"));
    }

    #[test]
    fn one_code_always_makes_the_same_claims() {
        // Control refuses a second sign-in of the same token: that is the code's single
        // use, and it holds only while a code's token is the same every time.
        let sealer = CodeSealer::new(SECRET).unwrap();
        let s = sealed(&sealer);
        let a = sealer.redeem(&s, VERIFIER, NOW + 1).unwrap();
        let b = sealer.redeem(&s, VERIFIER, NOW + 50).unwrap();
        assert_eq!(a.claims(None, None), b.claims(None, None));
    }

    #[test]
    fn a_wrong_or_malformed_verifier_is_refused() {
        let sealer = CodeSealer::new(SECRET).unwrap();
        let s = sealed(&sealer);
        let other = "x".repeat(43);
        for bad in [
            other.as_str(),
            "",
            "short",
            &format!("{VERIFIER} "),
            &"a".repeat(129),
        ] {
            assert_eq!(
                sealer.redeem(&s, bad, NOW),
                Err(CliLoginError::VerifierMismatch),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_expired_code_or_one_outliving_its_browser_sign_in_is_refused() {
        let sealer = CodeSealer::new(SECRET).unwrap();
        let s = sealed(&sealer);
        assert!(sealer.redeem(&s, VERIFIER, NOW + CODE_TTL_SECS - 1).is_ok());
        assert_eq!(
            sealer.redeem(&s, VERIFIER, NOW + CODE_TTL_SECS),
            Err(CliLoginError::Expired)
        );
        let mut short = browser();
        short.expires_at = NOW + 10;
        let code = CliCode::mint(&short, &pkce_challenge(VERIFIER), "s".into(), NOW).unwrap();
        assert_eq!(
            sealer.redeem(&sealer.seal(&code), VERIFIER, NOW + 10),
            Err(CliLoginError::Expired)
        );
    }

    #[test]
    fn a_code_of_another_key_altered_or_not_a_code_is_invalid() {
        let sealer = CodeSealer::new(SECRET).unwrap();
        let elsewhere = sealed(&CodeSealer::new(b"another secret of thirty-two bytes!!").unwrap());
        assert_eq!(
            sealer.redeem(&elsewhere, VERIFIER, NOW),
            Err(CliLoginError::Invalid)
        );
        let s = sealed(&sealer);
        let (head, rest) = s.split_once('.').unwrap();
        let (payload, sig) = rest.split_once('.').unwrap();
        let mut claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        claims["sub"] = "mallory".into();
        let forged = format!(
            "{head}.{}.{sig}",
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        for bad in [
            forged.as_str(),
            "",
            "a.b.c",
            &"a".repeat(MAX_CODE_BYTES + 1),
        ] {
            assert_eq!(
                sealer.redeem(bad, VERIFIER, NOW),
                Err(CliLoginError::Invalid)
            );
        }
    }

    #[test]
    fn a_session_token_signed_with_the_key_itself_is_not_a_code() {
        let signer = crate::identity::Signer::hs256(SECRET).unwrap();
        let token = signer
            .sign(
                &CliCode::mint(&browser(), &pkce_challenge(VERIFIER), "s".into(), NOW)
                    .unwrap()
                    .claims(None, None),
            )
            .unwrap();
        let sealer = CodeSealer::new(SECRET).unwrap();
        assert_eq!(
            sealer.redeem(&token, VERIFIER, NOW),
            Err(CliLoginError::Invalid)
        );
    }

    #[test]
    fn only_an_s256_challenge_is_minted_for() {
        assert!(challenge_ok(&pkce_challenge(VERIFIER)));
        for bad in [
            "",
            "abc",
            &"a".repeat(44),
            &format!("{}=", &"a".repeat(42)),
            &"+".repeat(43),
        ] {
            assert!(!challenge_ok(bad), "{bad:?}");
            assert_eq!(
                CliCode::mint(&browser(), bad, "s".into(), NOW),
                Err(CliLoginError::BadChallenge)
            );
        }
    }
}

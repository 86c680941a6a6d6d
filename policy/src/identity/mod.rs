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
//!
//! `principal.rs` holds who a token proves ([`Sub`], [`Principal`]), `credential.rs`
//! where a request carries it ([`bearer`], [`cookie`]), `error.rs` why a key or token is
//! refused, `verify.rs` the [`Verifier`], `sign.rs` the [`Signer`] and `ecdsa.rs` the
//! one spelling of an ECDSA signature both accept.

mod credential;
mod ecdsa;
mod error;
mod principal;
mod sign;
mod verify;

pub use credential::{bearer, cookie, session_cookie_is_ambiguous};
pub use error::{KeyError, TokenError, MAX_TOKEN_BYTES, MIN_HS256_SECRET_BYTES};
pub use principal::{Principal, Sub};
pub use sign::{Signer, TokenClaims};
pub use verify::{KeyMaterial, PemKey, Verifier, VerifierSettings};

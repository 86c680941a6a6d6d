//! OpenID Connect sign-in: the decisions of the authorization code flow, without I/O.
//!
//! The gateway runs the flow (`gateway/src/oidc.rs`): it redirects the browser to the
//! provider with a fresh `state`, `nonce` and PKCE verifier kept in a short-lived signed
//! cookie ([`FlowSealer`]), and on the callback exchanges the code and verifies the ID
//! token. What is decided here:
//!
//! - the flow cookie: sealed with HMAC-SHA256 under a key derived from the gateway's
//!   signing key (every replica shares it), bound to an expiry ([`FlowSealer::open`]);
//! - the callback: `state` equal to the cookie's ([`check_callback`]), an `iss`
//!   parameter (RFC 9207), when present, equal to the configured issuer;
//! - the ID token's claims after its signature verified ([`check_id_token`]): `iss`,
//!   `aud` containing the client (and `azp` equal to it when several audiences), `exp`,
//!   `iat`, `nonce`;
//! - who the user becomes ([`SignInRules::grant`]): `sub` from the configured claim (the
//!   provider's own `sub` unless the configuration opted in to a claim people can change,
//!   [`is_mutable_claim`]; `email` only when the provider says it verified it), admin
//!   from a claim's value, allowed e-mail domains and groups, and a session that ends no
//!   later than the ID token.
//!
//! Every refusal is an [`OidcError`] with a stable code, answered as a
//! [`Refusal`].

use std::fmt::Write as _;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::identity::{KeyError, Sub};
use crate::refusal::Refusal;

/// How long a sign-in may take between the redirect to the provider and the callback.
pub const FLOW_TTL_SECS: u64 = 600;

/// Why a sign-in through the identity provider was refused. [`OidcError::code`] is
/// the stable code of the page the browser is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcError {
    /// No flow cookie, or one that does not verify (tampered, another key).
    #[error("the sign-in cookie is missing or not valid")]
    FlowMissing,
    /// The flow cookie is older than [`FLOW_TTL_SECS`].
    #[error("the sign-in took too long")]
    FlowExpired,
    /// The callback's `state` differs from the flow cookie's.
    #[error("the callback's state does not match this browser's sign-in")]
    StateMismatch,
    /// This flow's callback was already used (a replayed code).
    #[error("this sign-in was already used")]
    Replayed,
    /// The provider answered the authorization request with an error.
    #[error("the identity provider refused: {0}")]
    ProviderRefused(String),
    /// The callback lacks `code` or `state`, or has them twice.
    #[error("the callback is malformed: {0}")]
    BadCallback(&'static str),
    /// The callback names another issuer (RFC 9207), or the ID token does.
    #[error("the answer comes from another issuer")]
    WrongIssuer,
    /// The provider did not exchange the code (already used, another client's, expired).
    #[error("the identity provider did not accept the code: {0}")]
    CodeRejected(String),
    /// The ID token does not verify (signature, unknown key, malformed).
    #[error("the ID token is not valid: {0}")]
    InvalidIdToken(String),
    /// The ID token is for another client.
    #[error("the ID token was issued to another client")]
    WrongAudience,
    /// The ID token's nonce differs from this browser's sign-in.
    #[error("the ID token's nonce does not match this browser's sign-in")]
    NonceMismatch,
    /// The ID token is expired (or issued in the future).
    #[error("the ID token is expired")]
    Expired,
    /// The claim configured as the user name is missing or not a valid user name.
    #[error("the claim {0:?} is missing or not a valid user name (1-128 of A-Z a-z 0-9 . _ @ -)")]
    BadSubject(String),
    /// The user name is the `email` claim and the provider does not say it verified the
    /// address (`email_verified` absent or not `true`).
    #[error("the identity provider has not verified this account's e-mail address, which would be its user name here")]
    EmailUnverified,
    /// The user's e-mail domain or groups are not allowed here.
    #[error("this account is not allowed here: {0}")]
    NotAllowed(&'static str),
    /// The provider could not be reached or answered nonsense.
    #[error("the identity provider is unavailable: {0}")]
    ProviderUnavailable(String),
}

impl OidcError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.refusal_base().code
    }

    fn refusal_base(&self) -> Refusal {
        match self {
            OidcError::FlowMissing => Refusal::OIDC_FLOW_MISSING,
            OidcError::FlowExpired => Refusal::OIDC_FLOW_EXPIRED,
            OidcError::StateMismatch => Refusal::OIDC_STATE_MISMATCH,
            OidcError::Replayed => Refusal::OIDC_REPLAYED,
            OidcError::ProviderRefused(_) => Refusal::OIDC_PROVIDER_REFUSED,
            OidcError::BadCallback(_) => Refusal::OIDC_BAD_CALLBACK,
            OidcError::WrongIssuer => Refusal::OIDC_WRONG_ISSUER,
            OidcError::CodeRejected(_) => Refusal::OIDC_CODE_REJECTED,
            OidcError::InvalidIdToken(_) => Refusal::OIDC_INVALID_ID_TOKEN,
            OidcError::WrongAudience => Refusal::OIDC_WRONG_AUDIENCE,
            OidcError::NonceMismatch => Refusal::OIDC_NONCE_MISMATCH,
            OidcError::Expired => Refusal::OIDC_ID_TOKEN_EXPIRED,
            OidcError::BadSubject(_) => Refusal::OIDC_BAD_SUBJECT,
            OidcError::EmailUnverified => Refusal::OIDC_EMAIL_UNVERIFIED,
            OidcError::NotAllowed(_) => Refusal::OIDC_NOT_ALLOWED,
            OidcError::ProviderUnavailable(_) => Refusal::OIDC_PROVIDER_UNAVAILABLE,
        }
    }
}

impl From<&OidcError> for Refusal {
    fn from(e: &OidcError) -> Refusal {
        e.refusal_base().with_message(e.to_string())
    }
}

/// What a sign-in in progress keeps in the browser's flow cookie.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// The `state` sent to the provider (CSRF on the callback).
    pub state: String,
    /// The `nonce` sent to the provider (ID token replay).
    pub nonce: String,
    /// The PKCE code verifier (RFC 7636); the provider got its S256 challenge.
    pub verifier: String,
    /// When the flow cookie stops being accepted, seconds since the Unix epoch.
    pub exp: u64,
}

impl Flow {
    /// A new flow from 32 random bytes each for state, nonce and verifier (the caller
    /// draws them: this crate has no randomness).
    pub fn new(random: [[u8; 32]; 3], now: u64) -> Flow {
        Flow {
            state: URL_SAFE_NO_PAD.encode(random[0]),
            nonce: URL_SAFE_NO_PAD.encode(random[1]),
            verifier: URL_SAFE_NO_PAD.encode(random[2]),
            exp: now + FLOW_TTL_SECS,
        }
    }

    /// The PKCE S256 challenge of this flow's verifier.
    pub fn challenge(&self) -> String {
        pkce_challenge(&self.verifier)
    }
}

/// The S256 code challenge of a PKCE verifier: base64url(SHA-256(verifier)).
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Seals and opens flow cookies (HS256 over the flow's JSON).
pub struct FlowSealer {
    encode: EncodingKey,
    decode: DecodingKey,
}

impl std::fmt::Debug for FlowSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlowSealer(<redacted>)")
    }
}

impl FlowSealer {
    /// A sealer whose key is derived from `secret` (the gateway's signing key): every
    /// replica derives the same key, and it is never the signing key itself, so a flow
    /// cookie can never pass for a session token.
    pub fn new(secret: &[u8]) -> Result<FlowSealer, KeyError> {
        let mut h = Sha256::new();
        h.update(b"termgate oidc flow cookie v1\0");
        h.update(secret);
        let key = h.finalize();
        let bad = |e: jsonwebtoken::errors::Error| KeyError::BadSigningKey(e.to_string());
        Ok(FlowSealer {
            encode: EncodingKey::from_secret(&key).map_err(bad)?,
            decode: DecodingKey::from_secret(&key).map_err(bad)?,
        })
    }

    /// The cookie value of a flow.
    pub fn seal(&self, flow: &Flow) -> String {
        // Serialising a struct of strings and a number cannot fail.
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), flow, &self.encode).unwrap_or_default()
    }

    /// The flow of a cookie value, if it verifies and has not expired at `now`.
    pub fn open(&self, cookie: &str, now: u64) -> Result<Flow, OidcError> {
        if cookie.len() > 2048 {
            return Err(OidcError::FlowMissing);
        }
        let mut v = Validation::new(Algorithm::HS256);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        v.validate_aud = false;
        let flow = jsonwebtoken::decode::<Flow>(cookie, &self.decode, &v)
            .map_err(|_| OidcError::FlowMissing)?
            .claims;
        if now >= flow.exp {
            return Err(OidcError::FlowExpired);
        }
        Ok(flow)
    }
}

/// The parameters of a callback (`/auth/callback?…`), parsed strictly.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Callback {
    /// `code`.
    pub code: Option<String>,
    /// `state`.
    pub state: Option<String>,
    /// `iss` (RFC 9207).
    pub iss: Option<String>,
    /// `error`.
    pub error: Option<String>,
    /// `error_description`.
    pub error_description: Option<String>,
}

impl Callback {
    /// Parses a query string; a parameter given twice or not percent-decodable is
    /// refused (two `state`s are two answers to one question).
    pub fn parse(query: &str) -> Result<Callback, OidcError> {
        let mut c = Callback::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v).ok_or(OidcError::BadCallback("undecodable parameter"))?;
            let slot = match k {
                "code" => &mut c.code,
                "state" => &mut c.state,
                "iss" => &mut c.iss,
                "error" => &mut c.error,
                "error_description" => &mut c.error_description,
                _ => continue,
            };
            if slot.replace(v).is_some() {
                return Err(OidcError::BadCallback("a parameter is repeated"));
            }
        }
        Ok(c)
    }
}

/// Checks a callback against this browser's flow and the configured issuer; the code
/// to exchange.
pub fn check_callback<'a>(
    callback: &'a Callback,
    flow: &Flow,
    issuer: &str,
) -> Result<&'a str, OidcError> {
    let state = callback
        .state
        .as_deref()
        .ok_or(OidcError::BadCallback("no state"))?;
    if !constant_time_eq(state.as_bytes(), flow.state.as_bytes()) {
        return Err(OidcError::StateMismatch);
    }
    if callback.iss.as_deref().is_some_and(|iss| iss != issuer) {
        // RFC 9207: the answer came from another provider (mix-up).
        return Err(OidcError::WrongIssuer);
    }
    if let Some(error) = &callback.error {
        let mut what = error.clone();
        if let Some(d) = &callback.error_description {
            let _ = write!(what, ": {d}");
        }
        what.truncate(300);
        return Err(OidcError::ProviderRefused(what));
    }
    callback
        .code
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or(OidcError::BadCallback("no code"))
}

/// What an ID token must say, besides its signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdTokenExpectations<'a> {
    /// The provider's issuer, exactly.
    pub issuer: &'a str,
    /// This client's id.
    pub client_id: &'a str,
    /// The flow's nonce.
    pub nonce: &'a str,
    /// Seconds since the Unix epoch.
    pub now: u64,
    /// Clock skew tolerated on `exp` and `iat`.
    pub leeway: u64,
}

/// Checks the claims of an ID token whose signature verified (OpenID Connect Core
/// §3.1.3.7); its `exp`.
pub fn check_id_token(
    claims: &Map<String, Value>,
    want: &IdTokenExpectations<'_>,
) -> Result<u64, OidcError> {
    if claims.get("iss").and_then(Value::as_str) != Some(want.issuer) {
        return Err(OidcError::WrongIssuer);
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.as_str()],
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
        _ => return Err(OidcError::WrongAudience),
    };
    if !audiences.contains(&want.client_id) {
        return Err(OidcError::WrongAudience);
    }
    let azp = claims.get("azp").and_then(Value::as_str);
    if (audiences.len() > 1 || azp.is_some()) && azp != Some(want.client_id) {
        // Several audiences: the token must say it was issued to this client.
        return Err(OidcError::WrongAudience);
    }
    let date = |name: &'static str| {
        claims
            .get(name)
            .and_then(Value::as_u64)
            .ok_or_else(|| OidcError::InvalidIdToken(format!("{name} is missing")))
    };
    let exp = date("exp")?;
    if want.now >= exp.saturating_add(want.leeway) {
        return Err(OidcError::Expired);
    }
    let iat = date("iat")?;
    if iat > want.now.saturating_add(want.leeway) {
        return Err(OidcError::Expired);
    }
    match claims.get("nonce").and_then(Value::as_str) {
        Some(n) if constant_time_eq(n.as_bytes(), want.nonce.as_bytes()) => Ok(exp),
        _ => Err(OidcError::NonceMismatch),
    }
}

/// The claim that names the provider's user for good: its `sub`, which the provider
/// never reassigns and its users never choose.
pub const STABLE_CLAIM: &str = "sub";

/// Whether a claim other than the provider's `sub` would name the termgate user:
/// `preferred_username`, `email`, `upn`, … are claims a user (a profile page, a
/// self-service sign-up) or the provider's administrators can set, so whoever sets one to
/// `alice` becomes alice here. The configuration takes one only with an explicit opt-in.
pub fn is_mutable_claim(claim: &str) -> bool {
    claim != STABLE_CLAIM
}

/// Who may sign in and who they become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInRules {
    /// The claim that becomes termgate's `sub`: [`STABLE_CLAIM`] unless the
    /// configuration opted in to another; `email` only with `email_verified: true`.
    pub sub_claim: String,
    /// A claim (string or array of strings) whose value grants admin.
    pub admin_claim: Option<String>,
    /// The values of `admin_claim` that grant admin.
    pub admin_values: Vec<String>,
    /// E-mail domains allowed to sign in (the `email` claim, verified); empty: any.
    pub allowed_email_domains: Vec<String>,
    /// Groups allowed to sign in (any one of them in `groups_claim`); empty: any.
    pub allowed_groups: Vec<String>,
    /// The claim listing the user's groups.
    pub groups_claim: String,
    /// Longest session a sign-in gives, seconds.
    pub session_max_secs: u64,
}

/// A signed-in user, as the gateway will write it into its own session token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The user.
    pub sub: Sub,
    /// Whether the admin claim says so.
    pub admin: bool,
    /// When the session ends: the ID token's `exp` or the configured maximum, the
    /// earlier.
    pub exp: u64,
}

/// The strings of a claim that is a string or an array of strings.
fn strings(claims: &Map<String, Value>, name: &str) -> Vec<String> {
    match claims.get(name) {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

impl SignInRules {
    /// Decides who the holder of these verified ID token claims becomes.
    pub fn grant(
        &self,
        claims: &Map<String, Value>,
        id_token_exp: u64,
        now: u64,
    ) -> Result<Grant, OidcError> {
        let sub = claims
            .get(&self.sub_claim)
            .and_then(Value::as_str)
            .and_then(Sub::parse)
            .ok_or_else(|| OidcError::BadSubject(self.sub_claim.clone()))?;
        if self.sub_claim == "email" && claims.get("email_verified") != Some(&Value::Bool(true)) {
            // The address names the user: one the provider did not check is one anybody
            // could have typed.
            return Err(OidcError::EmailUnverified);
        }
        if !self.allowed_email_domains.is_empty() {
            let email = claims.get("email").and_then(Value::as_str).unwrap_or("");
            // A provider that lets users type any address marks it unverified.
            let verified = claims.get("email_verified").and_then(Value::as_bool) != Some(false);
            let domain = email.rsplit_once('@').map(|(_, d)| d.to_ascii_lowercase());
            let ok = verified
                && domain.is_some_and(|d| {
                    self.allowed_email_domains
                        .iter()
                        .any(|a| a.eq_ignore_ascii_case(&d))
                });
            if !ok {
                return Err(OidcError::NotAllowed(
                    "the e-mail address is not in an allowed domain",
                ));
            }
        }
        if !self.allowed_groups.is_empty() {
            let groups = strings(claims, &self.groups_claim);
            if !groups.iter().any(|g| self.allowed_groups.contains(g)) {
                return Err(OidcError::NotAllowed("not a member of an allowed group"));
            }
        }
        let admin = self.admin_claim.as_deref().is_some_and(|c| {
            strings(claims, c)
                .iter()
                .any(|v| self.admin_values.contains(v))
        });
        Ok(Grant {
            sub,
            admin,
            exp: id_token_exp.min(now.saturating_add(self.session_max_secs)),
        })
    }
}

/// Percent-decodes a query value (`+` is a space); `None` for bad escapes or non-UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `application/x-www-form-urlencoded` of name/value pairs (also a query string).
pub fn form_encode(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode_into(&mut out, k);
        out.push('=');
        encode_into(&mut out, v);
    }
    out
}

fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;

//! The `[auth]` section: token verification, the session cookie and OIDC sign-in.

use std::path::PathBuf;

use serde::Deserialize;

use super::defaults;

/// `[auth]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Required `iss` claim.
    #[serde(default)]
    pub issuer: Option<String>,
    /// Required member of the `aud` claim. Required unless `allow_any_audience`.
    #[serde(default)]
    pub audience: Option<String>,
    /// Accept tokens whatever their `aud` (only when `audience` is unset): a token
    /// minted for another service would then open terminals here.
    #[serde(default)]
    pub allow_any_audience: bool,
    /// Longest accepted token lifetime (`exp - iat`, or `exp - now` without `iat`),
    /// seconds.
    #[serde(default = "defaults::max_token_lifetime")]
    pub max_token_lifetime_seconds: u64,
    /// Clock skew tolerated on `exp` and `nbf`, seconds.
    #[serde(default = "defaults::leeway")]
    pub leeway_seconds: u64,
    /// Role in the `roles` claim that grants admin.
    #[serde(default = "defaults::admin_role")]
    pub admin_role: String,
    /// File holding the HS256 secret (at least 32 bytes). One of this, `public_keys`
    /// or `jwks_file`.
    #[serde(default)]
    pub hs256_secret_file: Option<PathBuf>,
    /// PEM public keys (RS256, ES256, EdDSA).
    #[serde(default)]
    pub public_keys: Vec<PublicKeyConfig>,
    /// A JWKS document; keys are chosen by `kid`.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// PEM private key for `termgate-control token` when verification uses public keys.
    #[serde(default)]
    pub signing_key_file: Option<PathBuf>,
    /// `kid` written into tokens signed with `signing_key_file`.
    #[serde(default)]
    pub signing_key_id: Option<String>,
    /// Name of the session cookie.
    #[serde(default = "defaults::cookie_name")]
    pub cookie_name: String,
    /// Lifetime of tokens printed by `termgate-control token`, seconds.
    #[serde(default = "defaults::token_ttl")]
    pub token_ttl_seconds: u64,
    /// Sign-in through an OpenID Connect provider; unset: tokens only.
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
}

/// `[auth.oidc]`: the gateway signs people in through an OpenID Connect provider
/// (authorization code flow with PKCE) and issues its own session token.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer; discovery reads `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    /// This application's client id at the provider.
    pub client_id: String,
    /// File holding the client secret; unset: a public client (PKCE only).
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// How the secret is sent to the token endpoint: `client_secret_basic` or
    /// `client_secret_post`.
    #[serde(default = "defaults::oidc_auth_method")]
    pub token_endpoint_auth_method: String,
    /// The callback URL registered at the provider: `<public origin>/auth/callback`.
    pub redirect_url: String,
    /// Scopes requested; must include `openid`.
    #[serde(default = "defaults::oidc_scopes")]
    pub scopes: Vec<String>,
    /// The ID token claim that becomes termgate's user name (`sub`). Anything but the
    /// provider's `sub` needs `allow_mutable_sub_claim`.
    #[serde(default = "defaults::oidc_sub_claim")]
    pub sub_claim: String,
    /// Takes a `sub_claim` other than `sub` (`preferred_username`, `email`, …): a claim
    /// users or the provider's admins can change, so whoever sets it to a name becomes
    /// that user. `email` is then taken only with `email_verified: true`.
    #[serde(default)]
    pub allow_mutable_sub_claim: bool,
    /// A claim (string or array) whose value among `admin_values` grants admin.
    #[serde(default)]
    pub admin_claim: Option<String>,
    /// Values of `admin_claim` that grant admin.
    #[serde(default)]
    pub admin_values: Vec<String>,
    /// E-mail domains allowed to sign in; empty: any.
    #[serde(default)]
    pub allowed_email_domains: Vec<String>,
    /// Groups allowed to sign in (any one, in `groups_claim`); empty: any.
    #[serde(default)]
    pub allowed_groups: Vec<String>,
    /// The claim listing the user's groups.
    #[serde(default = "defaults::oidc_groups_claim")]
    pub groups_claim: String,
    /// Longest session one sign-in gives (never past the ID token's `exp`), seconds.
    #[serde(default = "defaults::oidc_session_max")]
    pub session_max_seconds: u64,
    /// Name on the sign-in button; empty: the issuer's host.
    #[serde(default)]
    pub display_name: String,
    /// Bound on every call to the provider (discovery, token, keys), milliseconds.
    #[serde(default = "defaults::oidc_timeout_ms")]
    pub timeout_ms: u64,
    /// PEM certificates trusted for the provider's https besides the system's roots
    /// (a provider behind a private CA).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// One `[[auth.public_keys]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicKeyConfig {
    /// PEM file.
    pub file: PathBuf,
    /// Key id tokens name in their header.
    #[serde(default)]
    pub kid: Option<String>,
}

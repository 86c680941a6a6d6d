//! The rules for `[auth.oidc]`: the provider, the callback, the rules for who may sign
//! in, and the client secret.

use super::common::read_secret;
use crate::model::Config;
use crate::secret::Secret;

/// `[auth.oidc]`: a provider URL and a callback that can work, a way for the gateway to
/// sign its own sessions, rules that can be met; the client secret, when set.
pub(super) fn check(
    c: &Config,
    can_sign: bool,
    err: &mut impl FnMut(&str, String),
) -> Option<Secret> {
    let o = c.auth.oidc.as_ref()?;
    // A part that reads no key (dockgate) cannot tell; the gateway and control do.
    if !can_sign && c.part.reads("auth.hs256_secret_file") {
        err(
            "auth.oidc",
            "the gateway signs the sessions of people who sign in with the provider: set auth.hs256_secret_file, or auth.signing_key_file next to public keys".into(),
        );
    }
    check_oidc_url("auth.oidc.issuer", &o.issuer, err);
    if let Some(rest) = check_oidc_url("auth.oidc.redirect_url", &o.redirect_url, err) {
        let path = rest.find('/').map_or("", |i| &rest[i..]);
        if path != "/auth/callback" {
            err(
                "auth.oidc.redirect_url",
                format!("must be the gateway's public origin followed by /auth/callback (got path {path:?})"),
            );
        }
    }
    if o.client_id.is_empty() {
        err("auth.oidc.client_id", "must not be empty".into());
    }
    if !["client_secret_basic", "client_secret_post"]
        .contains(&o.token_endpoint_auth_method.as_str())
    {
        err(
            "auth.oidc.token_endpoint_auth_method",
            "must be client_secret_basic or client_secret_post".into(),
        );
    }
    if !o.scopes.iter().any(|s| s == "openid") {
        err("auth.oidc.scopes", "must include \"openid\"".into());
    }
    if let Some(bad) = o.scopes.iter().find(|s| {
        s.is_empty()
            || s.bytes()
                .any(|b| !b.is_ascii_graphic() || b == b'"' || b == b'\\')
    }) {
        err("auth.oidc.scopes", format!("{bad:?} is not a scope token"));
    }
    if o.sub_claim.is_empty() {
        err("auth.oidc.sub_claim", "must not be empty".into());
    } else if policy::oidc::is_mutable_claim(&o.sub_claim) && !o.allow_mutable_sub_claim {
        err(
            "auth.oidc.sub_claim",
            format!(
                "{:?} is a claim users or the provider's administrators can change, and whoever sets it to another user's name signs in as that user: keep the default \"sub\" (the provider's stable id), or set auth.oidc.allow_mutable_sub_claim = true if this provider never lets anyone choose it",
                o.sub_claim
            ),
        );
    }
    match (&o.admin_claim, o.admin_values.is_empty()) {
        (Some(_), true) => err(
            "auth.oidc.admin_values",
            "required with auth.oidc.admin_claim: the values that grant admin".into(),
        ),
        (None, false) => err(
            "auth.oidc.admin_claim",
            "required with auth.oidc.admin_values: the claim they are read from".into(),
        ),
        _ => {}
    }
    if let Some(d) = o
        .allowed_email_domains
        .iter()
        .find(|d| d.is_empty() || d.contains('@'))
    {
        err(
            "auth.oidc.allowed_email_domains",
            format!("{d:?} is not a domain (write example.com, without @)"),
        );
    }
    if o.session_max_seconds == 0 || o.session_max_seconds > c.auth.max_token_lifetime_seconds {
        err(
            "auth.oidc.session_max_seconds",
            format!(
                "must be 1 to auth.max_token_lifetime_seconds ({}): longer sessions would be refused",
                c.auth.max_token_lifetime_seconds
            ),
        );
    }
    if !(100..=60_000).contains(&o.timeout_ms) {
        err("auth.oidc.timeout_ms", "must be 100 to 60000".into());
    }
    if let Some(ca) = &o.ca_file {
        let path = c.resolve(ca);
        match std::fs::read_to_string(&path) {
            Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => {}
            Ok(_) => err(
                "auth.oidc.ca_file",
                format!("{} holds no PEM certificate", path.display()),
            ),
            Err(e) => err(
                "auth.oidc.ca_file",
                format!("cannot read {}: {e}", path.display()),
            ),
        }
    }
    o.client_secret_file
        .as_ref()
        .and_then(|f| read_secret(c, f, "auth.oidc.client_secret_file", err))
}

/// An `https://` URL, or `http://` to a loopback host (tests, a provider on the same
/// machine); the part after the scheme.
fn check_oidc_url<'a>(
    key: &str,
    url: &'a str,
    err: &mut impl FnMut(&str, String),
) -> Option<&'a str> {
    let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        _ => {
            err(key, format!("{url:?} must start with https://"));
            return None;
        }
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let loopback = matches!(name, "localhost" | "127.0.0.1" | "[::1]");
    if host.is_empty() || url.contains(['?', '#', ' ']) {
        err(
            key,
            format!("{url:?} is not a plain URL (no query or fragment)"),
        );
        return None;
    }
    if !https && !loopback {
        err(
            key,
            format!("{url:?} must use https:// (plain http only to a loopback host)"),
        );
        return None;
    }
    Some(rest)
}

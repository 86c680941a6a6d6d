//! The rules for `[auth]`: how tokens are verified and signed, the cookie, lifetimes
//! and audience; also the verifier and signer the section describes.

use policy::{KeyMaterial, PemKey, Signer, Verifier, VerifierSettings};

use super::common::read_secret;
use crate::model::Config;
use crate::secret::Secret;

/// Checks `[auth]`; returns the verification key material and the signing key, each
/// when it could be read and is usable.
pub(super) fn check(
    c: &Config,
    err: &mut impl FnMut(&str, String),
) -> (Option<KeyMaterial>, Option<Secret>) {
    let a = &c.auth;
    if a.leeway_seconds > 300 {
        err("auth.leeway_seconds", "must be at most 300".into());
    }
    if a.admin_role.is_empty() {
        err("auth.admin_role", "must not be empty".into());
    }
    if a.cookie_name.is_empty()
        || !a
            .cookie_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        err(
            "auth.cookie_name",
            "must be 1 or more characters of A-Z a-z 0-9 _ -".into(),
        );
    }
    if a.token_ttl_seconds == 0 {
        err("auth.token_ttl_seconds", "must be positive".into());
    }
    let sources = [
        a.hs256_secret_file.is_some(),
        !a.public_keys.is_empty(),
        a.jwks_file.is_some(),
    ];
    let verification = match sources.iter().filter(|s| **s).count() {
        0 => {
            err(
                "auth",
                "set exactly one of hs256_secret_file, public_keys or jwks_file".into(),
            );
            None
        }
        1 => read_key_material(c, err),
        _ => {
            err(
                "auth",
                "hs256_secret_file, public_keys and jwks_file are exclusive; set exactly one"
                    .into(),
            );
            None
        }
    };
    match (&c.auth.audience, c.auth.allow_any_audience) {
        (Some(_), false) | (None, true) => {}
        (None, false) => err(
            "auth.audience",
            "required: tokens minted for other services would open terminals here (set auth.allow_any_audience = true to accept that)".into(),
        ),
        (Some(_), true) => err(
            "auth.allow_any_audience",
            "contradicts auth.audience; set one of them".into(),
        ),
    }
    if c.auth.max_token_lifetime_seconds == 0 {
        err("auth.max_token_lifetime_seconds", "must be positive".into());
    }
    if c.auth.token_ttl_seconds > c.auth.max_token_lifetime_seconds {
        err(
            "auth.token_ttl_seconds",
            format!(
                "{} exceeds auth.max_token_lifetime_seconds ({}): such tokens would be refused",
                c.auth.token_ttl_seconds, c.auth.max_token_lifetime_seconds
            ),
        );
    }
    if let Some(material) = &verification {
        let key = match material {
            KeyMaterial::Hs256Secret(_) => "auth.hs256_secret_file",
            KeyMaterial::PemPublicKeys(_) => "auth.public_keys",
            KeyMaterial::Jwks(_) => "auth.jwks_file",
        };
        if let Err(e) = Verifier::new(material, verifier_settings(c)) {
            err(key, e.to_string());
        }
    }
    let signing = match (&verification, &c.auth.signing_key_file) {
        (_, Some(file)) => read_secret(c, file, "auth.signing_key_file", err).and_then(|pem| {
            match Signer::from_private_pem(pem.expose(), c.auth.signing_key_id.clone()) {
                Ok(_) => Some(pem),
                Err(e) => {
                    err("auth.signing_key_file", e.to_string());
                    None
                }
            }
        }),
        (Some(KeyMaterial::Hs256Secret(s)), None) => Some(Secret::new(s.clone())),
        _ => None,
    };
    (verification, signing)
}

/// The verifier settings `[auth]` describes.
pub(crate) fn verifier_settings(c: &Config) -> VerifierSettings {
    VerifierSettings {
        issuer: c.auth.issuer.clone(),
        audience: c.auth.audience.clone(),
        leeway_secs: c.auth.leeway_seconds,
        admin_role: c.auth.admin_role.clone(),
        max_lifetime_secs: Some(c.auth.max_token_lifetime_seconds),
    }
}

impl Config {
    /// The verifier `[auth]` describes.
    pub fn verifier(&self) -> Result<Verifier, policy::KeyError> {
        Verifier::new(&self.secrets().verification, verifier_settings(self))
    }

    /// The signer for `termgate-control token`, when the configuration has a private key.
    pub fn signer(&self) -> Option<Signer> {
        let s = self.secrets().signing.as_ref()?;
        match (&self.auth.signing_key_file, &self.secrets().verification) {
            (Some(_), _) => {
                Signer::from_private_pem(s.expose(), self.auth.signing_key_id.clone()).ok()
            }
            (None, KeyMaterial::Hs256Secret(_)) => Signer::hs256(s.expose()).ok(),
            _ => None,
        }
    }
}

fn read_key_material(c: &Config, err: &mut impl FnMut(&str, String)) -> Option<KeyMaterial> {
    let a = &c.auth;
    if let Some(f) = &a.hs256_secret_file {
        return read_secret(c, f, "auth.hs256_secret_file", err)
            .map(|s| KeyMaterial::Hs256Secret(s.expose().to_vec()));
    }
    if let Some(f) = &a.jwks_file {
        return read_secret(c, f, "auth.jwks_file", err)
            .map(|s| KeyMaterial::Jwks(s.expose().to_vec()));
    }
    let mut keys = Vec::new();
    for (i, k) in a.public_keys.iter().enumerate() {
        let pem = read_secret(c, &k.file, &format!("auth.public_keys[{i}].file"), err)?;
        keys.push(PemKey {
            kid: k.kid.clone(),
            pem: pem.expose().to_vec(),
        });
    }
    Some(KeyMaterial::PemPublicKeys(keys))
}

use std::fmt;

use policy::KeyMaterial;

/// Bytes read from a secret file. `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        Secret(bytes)
    }

    /// The secret's bytes. Do not log them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<redacted {} bytes>)", self.0.len())
    }
}

/// Key material and tokens loaded from the files the configuration names.
#[derive(Clone, Debug)]
pub struct Secrets {
    /// What verifies user tokens.
    pub verification: KeyMaterial,
    /// What signs tokens for `termgate-control token`: the HS256 secret, or the PEM
    /// private key of `auth.signing_key_file`. `None` when only public keys exist.
    pub signing: Option<Secret>,
    /// The token gateways present to control's route feed.
    pub service_token: Option<Secret>,
    /// The OpenID Connect client secret (`auth.oidc.client_secret_file`).
    pub oidc_client_secret: Option<Secret>,
}

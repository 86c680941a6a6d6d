//! Semantic checks after deserialisation; every problem names its key.
//!
//! One module per configuration section holds that section's rules; `validate` runs
//! them in a fixed order, so the same configuration always reports the same errors.

mod auth;
mod common;
mod control;
mod docker;
mod gateway;
mod oidc;
mod pki;
mod profiles;
mod quota;
mod store;
mod targets;

use crate::error::ConfigError;
use crate::model::Config;
use crate::secret::Secrets;

/// Checks every section in a fixed order, collecting each problem in `errors`, and
/// stores the secrets read on the way in `c.secrets` when the verification key is usable.
pub(crate) fn validate(c: &mut Config, errors: &mut Vec<ConfigError>) {
    let mut err = |key: &str, msg: String| errors.push(ConfigError::new(key, msg));

    instance(c, &mut err);
    let (verification, signing) = auth::check(c, &mut err);
    let oidc_client_secret = oidc::check(c, signing.is_some(), &mut err);
    gateway::check(c, &mut err);
    let service_token = control::check(c, &mut err);
    docker::check(c, &mut err);
    pki::check(c, &mut err);
    store::check(c, &mut err);
    quota::check(c, &mut err);
    targets::check(c, &mut err);
    profiles::check(c, &mut err);

    if let Some(verification) = verification {
        c.secrets = Some(Secrets {
            verification,
            signing,
            service_token,
            oidc_client_secret,
        });
    }
}

/// Checks the top-level `instance` name.
fn instance(c: &Config, err: &mut impl FnMut(&str, String)) {
    if !common::is_name(&c.instance, 32) {
        err(
            "instance",
            "must be 1-32 characters of a-z, 0-9 and -, starting with a letter or digit".into(),
        );
    }
}

//! The rules for `[control]`: listeners, the Docker endpoint, limits and intervals, and
//! the service token.

use super::common::{check_addr, positive, read_secret, within};
use crate::model::Config;
use crate::secret::Secret;

/// Smallest accepted service token, bytes.
const MIN_SERVICE_TOKEN_BYTES: usize = 16;

/// Checks `[control]`; returns the service token, when set, readable and long enough.
pub(super) fn check(c: &Config, err: &mut impl FnMut(&str, String)) -> Option<Secret> {
    let k = &c.control;
    check_addr("control.listen", &k.listen, err);
    check_addr("control.admin_listen", &k.admin_listen, err);
    if let Some(addr) = &k.tls_listen {
        check_addr("control.tls_listen", addr, err);
        if k.tls_cert_file.is_none() || k.tls_key_file.is_none() {
            err(
                "control.tls_listen",
                "needs control.tls_cert_file and control.tls_key_file: the certificate served on it".into(),
            );
        }
    }
    if let Some(h) = &k.docker_host {
        if !(h.starts_with("unix://") || h.starts_with("tcp://") || h.starts_with("http://")) {
            err(
                "control.docker_host",
                "must start with unix://, tcp:// or http://".into(),
            );
        }
    }
    positive(
        "control.docker_timeout_seconds",
        k.docker_timeout_seconds,
        err,
    );
    within(
        "control.max_body_bytes",
        k.max_body_bytes,
        1024,
        16 << 20,
        err,
    );
    if k.max_recording_bytes < 4096 {
        err(
            "control.max_recording_bytes",
            format!("must be at least 4096, got {}", k.max_recording_bytes),
        );
    }
    if !(100..=86_400_000).contains(&k.recordings_prune_ms) {
        err(
            "control.recordings_prune_ms",
            format!(
                "must be between 100 and 86400000, got {}",
                k.recordings_prune_ms
            ),
        );
    }
    let to = &k.authz_sign_in_url;
    let absolute = to.starts_with("https://") || to.starts_with("http://");
    if !(absolute || to.starts_with('/') && !to.starts_with("//"))
        || to.contains(['?', '#'])
        || to.bytes().any(|b| b.is_ascii_control() || b == b' ')
    {
        err(
            "control.authz_sign_in_url",
            format!("must be a path starting with one / or an http(s):// URL, without query or fragment, got {to:?}"),
        );
    }
    positive(
        "control.reconcile_interval_seconds",
        k.reconcile_interval_seconds,
        err,
    );
    positive("control.history_per_user", k.history_per_user as u64, err);
    k.service_token_file.as_ref().and_then(|f| {
        let t = read_secret(c, f, "control.service_token_file", err)?;
        if t.expose().len() < MIN_SERVICE_TOKEN_BYTES {
            err(
                "control.service_token_file",
                format!("token must be at least {MIN_SERVICE_TOKEN_BYTES} bytes"),
            );
            return None;
        }
        Some(t)
    })
}

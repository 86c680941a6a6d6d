//! The rules for the certificates termgate's parts present to each other: `pki.ca_file`,
//! control's `tls_cert_file`/`tls_key_file` and the gateway's `client_cert_file`/
//! `client_key_file`, each pair whole or absent, each file readable and parsed.

use std::path::PathBuf;

use super::common::check_readable;
use crate::model::Config;
use crate::pki;

/// Checks `[pki]` and the two certificate pairs.
pub(super) fn check(c: &Config, err: &mut impl FnMut(&str, String)) {
    if let Some(ca) = &c.pki.ca_file {
        if c.part.reads("pki.ca_file") {
            if let Err(e) = pki::load_roots(&c.resolve(ca), "pki.ca_file") {
                err("pki.ca_file", format!("{}: {}", e.path, e.why));
            }
        }
    }
    pair(
        c,
        ("control.tls_cert_file", &c.control.tls_cert_file),
        ("control.tls_key_file", &c.control.tls_key_file),
        err,
    );
    pair(
        c,
        ("gateway.client_cert_file", &c.gateway.client_cert_file),
        ("gateway.client_key_file", &c.gateway.client_key_file),
        err,
    );
}

fn pair(
    c: &Config,
    (cert_key, cert): (&str, &Option<PathBuf>),
    (key_key, key): (&str, &Option<PathBuf>),
    err: &mut impl FnMut(&str, String),
) {
    match (cert, key) {
        (None, None) => {}
        (Some(_), None) => err(key_key, format!("required with {cert_key}")),
        (None, Some(_)) => err(cert_key, format!("required with {key_key}")),
        (Some(cert), Some(key)) => {
            if !c.part.reads(cert_key) {
                return;
            }
            let mut readable = true;
            for (k, f) in [(cert_key, cert), (key_key, key)] {
                let mut failed = false;
                check_readable(c, f, k, &mut |k: &str, m: String| {
                    failed = true;
                    err(k, m)
                });
                readable &= !failed;
            }
            if readable {
                if let Err(e) =
                    pki::Certificate::load(&c.resolve(cert), &c.resolve(key), cert_key, key_key)
                {
                    err(&e.key, format!("{}: {}", e.path, e.why));
                }
            }
        }
    }
}

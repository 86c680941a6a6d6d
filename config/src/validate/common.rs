//! Small checks shared by the sections' rules: secret and readable files, addresses,
//! numeric ranges and names.

use std::net::SocketAddr;
use std::path::Path;

use crate::model::Config;
use crate::secret::Secret;

/// Reads a secret file; trailing whitespace (the newline editors add) is dropped.
pub(super) fn read_secret(
    c: &Config,
    file: &Path,
    key: &str,
    err: &mut impl FnMut(&str, String),
) -> Option<Secret> {
    if !c.part.reads(key) {
        return None;
    }
    let path = c.resolve(file);
    match std::fs::read(&path) {
        Ok(mut bytes) => {
            while bytes.last().is_some_and(|b| b.is_ascii_whitespace()) {
                bytes.pop();
            }
            if bytes.is_empty() {
                err(key, format!("{} is empty", path.display()));
                return None;
            }
            Some(Secret::new(bytes))
        }
        Err(e) => {
            err(key, format!("cannot read {}: {e}", path.display()));
            None
        }
    }
}

pub(super) fn check_readable(
    c: &Config,
    file: &Path,
    key: &str,
    err: &mut impl FnMut(&str, String),
) {
    if !c.part.reads(key) {
        return;
    }
    let path = c.resolve(file);
    if let Err(e) = std::fs::File::open(&path) {
        err(key, format!("cannot read {}: {e}", path.display()));
    }
}

pub(super) fn check_addr(key: &str, v: &str, err: &mut impl FnMut(&str, String)) {
    if v.parse::<SocketAddr>().is_err() {
        err(
            key,
            format!("{v:?} is not an address such as 127.0.0.1:8080"),
        );
    }
}

pub(super) fn positive(key: &str, v: u64, err: &mut impl FnMut(&str, String)) {
    if v == 0 {
        err(key, "must be positive".into());
    }
}

pub(super) fn within(
    key: &str,
    v: usize,
    min: usize,
    max: usize,
    err: &mut impl FnMut(&str, String),
) {
    if v < min || v > max {
        err(key, format!("must be between {min} and {max}, got {v}"));
    }
}

pub(super) fn is_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

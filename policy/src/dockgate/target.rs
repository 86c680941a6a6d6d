//! The request target, read once as Docker reads it: the method, the optional
//! `/v1.NN` prefix, the decoded path segments and the query; and the two forms of
//! reference a path may name an object by.

use std::fmt;

use super::denied::{deny, Denied, Reason};
use super::limits::{MAX_API_MINOR, MAX_TARGET_LEN, MIN_API_MINOR};

/// The HTTP methods Docker's API routes (its CORS `OPTIONS` aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`.
    Head,
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `DELETE`.
    Delete,
}

impl Method {
    /// From the request line, case-sensitively (Docker's router matches it exactly).
    pub fn parse(s: &str) -> Option<Method> {
        match s {
            "GET" => Some(Method::Get),
            "HEAD" => Some(Method::Head),
            "POST" => Some(Method::Post),
            "PUT" => Some(Method::Put),
            "DELETE" => Some(Method::Delete),
            _ => None,
        }
    }

    /// The request-line spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Docker API version `1.NN` from a `/v1.NN` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    minor: u8,
}

impl ApiVersion {
    /// `1.minor`, when within [`MIN_API_MINOR`]..=[`MAX_API_MINOR`].
    pub fn new(minor: u8) -> Option<ApiVersion> {
        (MIN_API_MINOR..=MAX_API_MINOR)
            .contains(&minor)
            .then_some(ApiVersion { minor })
    }

    /// The minor number.
    pub fn minor(self) -> u8 {
        self.minor
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

/// A request as [`normalize`] read it: what `decide` judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The method.
    pub method: Method,
    /// The `/v1.NN` prefix, if any (kept: the binary forwards the target as it came).
    pub version: Option<ApiVersion>,
    /// The decoded path segments after the version, e.g. `["containers", "<id>", "attach"]`.
    pub segments: Vec<String>,
    /// The decoded query pairs, in order, each key once.
    pub query: Vec<(String, String)>,
}

impl Asked {
    /// The value of query parameter `key`.
    pub fn query_value(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The decoded path, version included, for messages and logs.
    pub fn path(&self) -> String {
        let mut p = String::new();
        if let Some(v) = self.version {
            p.push_str(&format!("/v{v}"));
        }
        for s in &self.segments {
            p.push('/');
            p.push_str(s);
        }
        p
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes once (`+` as a space when `plus_is_space`, as in Go's query
/// parsing); refuses invalid escapes, non-UTF-8 and control bytes.
fn decode(raw: &[u8], plus_is_space: bool, reason: Reason, what: &str) -> Result<String, Denied> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        match b {
            b'%' => {
                let pair = raw
                    .get(i + 1)
                    .and_then(|h| hex(*h))
                    .zip(raw.get(i + 2).and_then(|l| hex(*l)));
                let Some((h, l)) = pair else {
                    return Err(deny(reason, format!("invalid percent-escape in {what}")));
                };
                out.push((h << 4) | l);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    if out.iter().any(|b| *b < 0x20 || *b == 0x7f) {
        return Err(deny(reason, format!("control byte in {what}")));
    }
    String::from_utf8(out).map_err(|_| deny(reason, format!("{what} is not UTF-8")))
}

/// Whether a decoded first segment is one Docker routes as a version (`v[0-9.]+`).
fn looks_like_version(seg: &str) -> bool {
    seg.len() > 1
        && seg.starts_with('v')
        && seg[1..].bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

fn parse_version(seg: &str) -> Result<ApiVersion, Denied> {
    let unsupported = || {
        deny(
            Reason::UnsupportedVersion,
            format!("API version {seg:?} is not one of 1.{MIN_API_MINOR} to 1.{MAX_API_MINOR}"),
        )
    };
    let minor = seg.strip_prefix("v1.").ok_or_else(unsupported)?;
    // Two digits, no leading zero: the one spelling of each version in range.
    if minor.len() != 2 || minor.starts_with('0') {
        return Err(unsupported());
    }
    minor
        .parse::<u8>()
        .ok()
        .and_then(ApiVersion::new)
        .ok_or_else(unsupported)
}

fn parse_query(raw: &[u8]) -> Result<Vec<(String, String)>, Denied> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for piece in raw.split(|b| *b == b'&') {
        if piece.is_empty() {
            continue;
        }
        if piece.contains(&b';') {
            return Err(deny(Reason::BadQuery, "';' in the query"));
        }
        let (k, v) = match piece.iter().position(|b| *b == b'=') {
            Some(i) => (&piece[..i], &piece[i + 1..]),
            None => (piece, &[][..]),
        };
        let k = decode(k, true, Reason::BadQuery, "a query key")?;
        let v = decode(v, true, Reason::BadQuery, "a query value")?;
        if k.is_empty() {
            return Err(deny(Reason::BadQuery, "empty query key"));
        }
        if pairs.iter().any(|(seen, _)| *seen == k) {
            return Err(deny(
                Reason::BadQuery,
                format!("query key {k:?} given twice"),
            ));
        }
        pairs.push((k, v));
    }
    Ok(pairs)
}

/// Reads a request line's method and raw target once, as Docker will.
pub fn normalize(method: &str, raw_target: &[u8]) -> Result<Asked, Denied> {
    let method = Method::parse(method).ok_or_else(|| {
        deny(
            Reason::MethodNotAllowed,
            format!("method {method:?} is not routed"),
        )
    })?;
    let bad = |m: &str| deny(Reason::BadTarget, m.to_owned());
    if raw_target.len() > MAX_TARGET_LEN {
        return Err(bad("target too long"));
    }
    if raw_target.first() != Some(&b'/') {
        return Err(bad("target must be a path starting with /"));
    }
    if raw_target.iter().any(|b| !(0x21..=0x7e).contains(b)) {
        return Err(bad("space, control or non-ASCII byte in target"));
    }
    if raw_target.contains(&b'#') {
        return Err(bad("'#' in target"));
    }
    let (path, query) = match raw_target.iter().position(|b| *b == b'?') {
        Some(i) => (&raw_target[..i], &raw_target[i + 1..]),
        None => (raw_target, &[][..]),
    };
    let mut segments = Vec::new();
    for raw in path[1..].split(|b| *b == b'/') {
        if raw.is_empty() {
            return Err(bad("empty path segment (// or a trailing /)"));
        }
        let seg = decode(raw, false, Reason::BadTarget, "a path segment")?;
        if seg.contains('/') {
            return Err(bad("encoded '/' in a path segment"));
        }
        if seg == "." || seg == ".." {
            return Err(bad("'.' or '..' path segment"));
        }
        segments.push(seg);
    }
    let version = match segments.first() {
        Some(first) if looks_like_version(first) => {
            let v = parse_version(first)?;
            segments.remove(0);
            if segments.is_empty() {
                return Err(bad("nothing after the version"));
            }
            Some(v)
        }
        _ => None,
    };
    Ok(Asked {
        method,
        version,
        segments,
        query: parse_query(query)?,
    })
}

/// What Docker allows for names, as control's `check_ref`.
pub fn is_plain_ref(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.len() <= 255
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// A full container id: no name or prefix for Docker to resolve otherwise.
pub(super) fn is_full_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

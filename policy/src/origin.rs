//! Origin rules for the websocket upgrade (cross-site websocket hijacking).
//!
//! Browsers attach cookies to cross-site websocket handshakes, so when the credential
//! is a cookie the `Origin` header must be present and on the allow-list. A bearer
//! header cannot be attached by another site, but an `Origin`, when present, must still
//! be allowed. Matching is on the exact scheme, host and port after normalisation
//! (lower-case scheme and host, default port made explicit); `null`, paths, user
//! info, trailing dots and anything not ASCII are refused.

use std::fmt;

use crate::refusal::Refusal;

/// An origin: scheme, host and port.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    scheme: &'static str,
    host: String,
    port: u16,
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Origin({self})")
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// Why an origin string does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed origin: {0}")]
pub struct OriginParseError(&'static str);

impl Origin {
    /// Parses `scheme://host[:port]` with scheme `http` or `https`.
    pub fn parse(s: &str) -> Result<Origin, OriginParseError> {
        if !s.is_ascii() {
            return Err(OriginParseError("not ASCII"));
        }
        let lower = s.to_ascii_lowercase();
        let (scheme, rest, default_port) = if let Some(rest) = lower.strip_prefix("https://") {
            ("https", rest, 443)
        } else if let Some(rest) = lower.strip_prefix("http://") {
            ("http", rest, 80)
        } else {
            return Err(OriginParseError("scheme must be http or https"));
        };
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or(OriginParseError("unclosed IPv6 bracket"))?;
            if addr.is_empty()
                || !addr
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
            {
                return Err(OriginParseError("bad IPv6 address"));
            }
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or(OriginParseError("junk after host"))?,
                ),
            };
            (format!("[{addr}]"), port)
        } else {
            match rest.split_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (rest.to_owned(), None),
            }
        };
        if !host.starts_with('[') {
            let labels_ok = !host.is_empty()
                && host.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            if !labels_ok {
                return Err(OriginParseError("bad host"));
            }
        }
        let port = match port {
            None => default_port,
            Some(p) => {
                if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(OriginParseError("bad port"));
                }
                match p.parse::<u16>() {
                    Ok(0) | Err(_) => return Err(OriginParseError("bad port")),
                    Ok(n) => n,
                }
            }
        };
        Ok(Origin { scheme, host, port })
    }
}

/// Where the request's credential came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialSource {
    /// The session cookie (a browser sends it cross-site too).
    Cookie,
    /// An `Authorization: Bearer` header (set by a program, not by another site).
    Bearer,
}

/// Why an Origin was refused. All map to HTTP 403.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OriginDenied {
    /// Cookie credential without an Origin header.
    #[error("Origin header is required")]
    Missing,
    /// The opaque origin `null` (sandboxed frames, file: pages, redirects).
    #[error("Origin null is not allowed")]
    Null,
    /// Not a parseable origin, or several of them.
    #[error("Origin header is malformed")]
    Malformed,
    /// A well-formed origin that is not on the allow-list.
    #[error("Origin is not allowed")]
    NotAllowed,
}

impl OriginDenied {
    /// Stable reason code: the code of its `Refusal`.
    pub fn reason(&self) -> &'static str {
        Refusal::from(*self).code
    }
}

impl From<OriginDenied> for Refusal {
    fn from(denied: OriginDenied) -> Self {
        match denied {
            OriginDenied::Missing => Refusal::ORIGIN_MISSING,
            OriginDenied::Null => Refusal::ORIGIN_NULL,
            OriginDenied::Malformed => Refusal::ORIGIN_MALFORMED,
            OriginDenied::NotAllowed => Refusal::ORIGIN_NOT_ALLOWED,
        }
    }
}

/// The allow-list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginPolicy {
    allowed: Vec<Origin>,
}

impl OriginPolicy {
    /// An allow-list of parsed origins.
    pub fn new(allowed: Vec<Origin>) -> Self {
        OriginPolicy { allowed }
    }

    /// Checks the raw `Origin` header value (`None` when absent).
    pub fn check(
        &self,
        header: Option<&[u8]>,
        source: CredentialSource,
    ) -> Result<(), OriginDenied> {
        let Some(raw) = header else {
            return match source {
                CredentialSource::Cookie => Err(OriginDenied::Missing),
                CredentialSource::Bearer => Ok(()),
            };
        };
        let text = std::str::from_utf8(raw).map_err(|_| OriginDenied::Malformed)?;
        if text.eq_ignore_ascii_case("null") {
            return Err(OriginDenied::Null);
        }
        let origin = Origin::parse(text).map_err(|_| OriginDenied::Malformed)?;
        if self.allowed.contains(&origin) {
            Ok(())
        } else {
            Err(OriginDenied::NotAllowed)
        }
    }
}

#[cfg(test)]
mod tests;

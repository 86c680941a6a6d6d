//! The gateway's public routes (design §2), parsed strictly from the raw request path.
//!
//! Only these exist: `/healthz`, `/` and the UI's assets, `/auth/session`, the
//! command-line client's browser sign-in (`/cli-login`, `/auth/cli/code`,
//! `/auth/cli/token`), `/api/*`,
//! `/s/<id>/`, `/s/<id>/token`, `/s/<id>/ws`, and a share link's `/v/<token>`,
//! `/v/<token>/`, `/v/<token>/token`, `/v/<token>/ws`, and a recording link's `/r/<token>` and
//! `/r/<token>/cast`. Percent-encodings, backslashes, control
//! bytes and non-ASCII are refused outright (no route needs them, and decoding them is
//! where path tricks live); empty and dot segments are refused; everything else that
//! does not match exactly is not found. The query string is not part of the path.

use crate::recording_link::RecordingToken;
use crate::refusal::Refusal;
use crate::session_id::SessionId;
use crate::share::ShareToken;

/// Which part of ttyd a terminal request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalPart {
    /// `/s/<id>/` — ttyd's page.
    Page,
    /// `/s/<id>/token` — ttyd's credential endpoint.
    Token,
    /// `/s/<id>/ws` — the websocket.
    Ws,
}

impl TerminalPart {
    /// The path ttyd serves this part at.
    pub fn upstream_path(&self) -> &'static str {
        match self {
            TerminalPart::Page => "/",
            TerminalPart::Token => "/token",
            TerminalPart::Ws => "/ws",
        }
    }
}

/// A recognised public route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublicRoute<'a> {
    /// `/healthz`.
    Health,
    /// `/` (`""`) or `/assets/<name>`.
    Asset(&'a str),
    /// `/auth/session`.
    AuthSession,
    /// `/auth/<step>`: sign-in through the identity provider (404 without `[auth.oidc]`).
    Oidc(OidcStep),
    /// The command-line client signed in through the browser (`crate::cli_login`).
    CliLogin(CliLoginStep),
    /// `/admin`: the admin console, for admins only (everyone else gets the 404 of
    /// an unknown path).
    Admin,
    /// `/api/<rest>`: forwarded to control as `/v1/<rest>`.
    Api(&'a str),
    /// `/s/<id>/…`.
    Terminal {
        /// The session.
        id: SessionId,
        /// Which part of ttyd.
        part: TerminalPart,
    },
    /// `/v/<token>` (the viewer's page, `part` `None`) and `/v/<token>/…` (the
    /// read-only terminal's parts): a share link. A malformed token is not found.
    Share {
        /// The link's token, parsed.
        token: ShareToken,
        /// Which part of the read-only ttyd; `None`: the viewer's own page.
        part: Option<TerminalPart>,
    },
    /// `/r/<token>` (the player's page, `cast` false) and `/r/<token>/cast` (the
    /// recording itself): a recording link. A malformed token is not found.
    Recording {
        /// The link's token, parsed.
        token: RecordingToken,
        /// The recording's bytes rather than the page.
        cast: bool,
    },
}

/// A step of the sign-in through the identity provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OidcStep {
    /// `/auth/providers`: whether the page offers "Sign in with …".
    Providers,
    /// `/auth/login`: redirects to the provider.
    Login,
    /// `/auth/callback`: the provider's answer.
    Callback,
    /// `/auth/logout`: a POST (from an allowed Origin) clears the session, then the
    /// provider's end of session; a GET only shows a form that posts.
    Logout,
}

/// A step of the command-line client's sign-in through the browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliLoginStep {
    /// `/cli-login`: the page that asks the signed-in user to allow it.
    Page,
    /// `/auth/cli/code`: the page's Allow, a code for the client (POST, signed in).
    Code,
    /// `/auth/cli/token`: the client's exchange of the code (POST).
    Token,
}

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// 400: the path contains something no route has (encodings, control bytes, …).
    BadRequest(&'static str),
    /// 404: well-formed but not a route.
    NotFound,
}

impl From<PathError> for Refusal {
    fn from(e: PathError) -> Self {
        match e {
            PathError::BadRequest(why) => Refusal::BAD_PATH.with_message(why),
            PathError::NotFound => Refusal::PAGE_NOT_FOUND,
        }
    }
}

fn segment_ok(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

/// First segments of control's `/v1/` paths that only gateways (and, for `authz`, a
/// proxy in front of ttyd; for `grant`, a ttyd pool) may call.
pub const INTERNAL_API: &[&str] = &[
    "routes",
    "healthz",
    "authz",
    "grant",
    "activity",
    "terminals",
    "recordings",
    "recording-links",
];

/// Classifies a raw request path (without the query string).
pub fn classify(raw: &[u8]) -> Result<PublicRoute<'_>, PathError> {
    if raw.first() != Some(&b'/') {
        return Err(PathError::BadRequest("path must start with /"));
    }
    if raw.len() > 1024 {
        return Err(PathError::BadRequest("path too long"));
    }
    if let Some(b) = raw.iter().find(|b| !(0x21..=0x7e).contains(*b)) {
        return Err(PathError::BadRequest(if *b >= 0x80 {
            "non-ASCII byte in path"
        } else {
            "control byte in path"
        }));
    }
    if raw.contains(&b'%') {
        return Err(PathError::BadRequest(
            "percent-encoding is not accepted in paths",
        ));
    }
    if raw.contains(&b'\\') {
        return Err(PathError::BadRequest("backslash in path"));
    }
    // All bytes are printable ASCII from here on.
    let path = std::str::from_utf8(raw).map_err(|_| PathError::BadRequest("path is not UTF-8"))?;
    match path {
        "/healthz" => return Ok(PublicRoute::Health),
        "/" => return Ok(PublicRoute::Asset("")),
        "/auth/session" => return Ok(PublicRoute::AuthSession),
        "/auth/providers" => return Ok(PublicRoute::Oidc(OidcStep::Providers)),
        "/auth/login" => return Ok(PublicRoute::Oidc(OidcStep::Login)),
        "/auth/callback" => return Ok(PublicRoute::Oidc(OidcStep::Callback)),
        "/auth/logout" => return Ok(PublicRoute::Oidc(OidcStep::Logout)),
        "/admin" => return Ok(PublicRoute::Admin),
        "/cli-login" => return Ok(PublicRoute::CliLogin(CliLoginStep::Page)),
        "/auth/cli/code" => return Ok(PublicRoute::CliLogin(CliLoginStep::Code)),
        "/auth/cli/token" => return Ok(PublicRoute::CliLogin(CliLoginStep::Token)),
        _ => {}
    }
    if let Some(name) = path.strip_prefix("/assets/") {
        return if segment_ok(name) && !name.starts_with('.') {
            Ok(PublicRoute::Asset(name))
        } else {
            Err(PathError::NotFound)
        };
    }
    if let Some(rest) = path.strip_prefix("/api/") {
        let first = rest.split('/').next().unwrap_or_default();
        // Control's internal endpoints (the route feed, lookups, its health) are for
        // gateways only and are never routed from the outside.
        let internal = INTERNAL_API.contains(&first);
        return if !internal && rest.split('/').all(segment_ok) {
            Ok(PublicRoute::Api(rest))
        } else {
            Err(PathError::NotFound)
        };
    }
    if let Some(rest) = path.strip_prefix("/s/") {
        let (id, part) = rest.split_once('/').ok_or(PathError::NotFound)?;
        let id = SessionId::parse(id).map_err(|_| PathError::NotFound)?;
        let part = match part {
            "" => TerminalPart::Page,
            "token" => TerminalPart::Token,
            "ws" => TerminalPart::Ws,
            _ => return Err(PathError::NotFound),
        };
        return Ok(PublicRoute::Terminal { id, part });
    }
    if let Some(rest) = path.strip_prefix("/v/") {
        let (token, part) = match rest.split_once('/') {
            None => (rest, None),
            Some((token, "")) => (token, Some(TerminalPart::Page)),
            Some((token, "token")) => (token, Some(TerminalPart::Token)),
            Some((token, "ws")) => (token, Some(TerminalPart::Ws)),
            Some(_) => return Err(PathError::NotFound),
        };
        let token = ShareToken::parse(token).ok_or(PathError::NotFound)?;
        return Ok(PublicRoute::Share { token, part });
    }
    if let Some(rest) = path.strip_prefix("/r/") {
        let (token, cast) = match rest.split_once('/') {
            None => (rest, false),
            Some((token, "cast")) => (token, true),
            Some(_) => return Err(PathError::NotFound),
        };
        let token = RecordingToken::parse(token).ok_or(PathError::NotFound)?;
        return Ok(PublicRoute::Recording { token, cast });
    }
    Err(PathError::NotFound)
}

#[cfg(test)]
mod tests;

//! The gateway's public routes (DESIGN §2), parsed strictly from the raw request path.
//!
//! Only these exist: `/healthz`, `/` and the UI's assets, `/auth/session`, `/api/*`,
//! `/s/<id>/`, `/s/<id>/token`, `/s/<id>/ws`. Percent-encodings, backslashes, control
//! bytes and non-ASCII are refused outright (no route needs them, and decoding them is
//! where path tricks live); empty and dot segments are refused; everything else that
//! does not match exactly is not found. The query string is not part of the path.

use crate::session_id::SessionId;

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
    /// `/api/<rest>`: forwarded to control as `/v1/<rest>`.
    Api(&'a str),
    /// `/s/<id>/…`.
    Terminal {
        /// The session.
        id: SessionId,
        /// Which part of ttyd.
        part: TerminalPart,
    },
}

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// 400: the path contains something no route has (encodings, control bytes, …).
    BadRequest(&'static str),
    /// 404: well-formed but not a route.
    NotFound,
}

fn segment_ok(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

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
        return if rest.split('/').all(segment_ok) {
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
    Err(PathError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ID: &str = "abcdefghijk234mn";

    fn term(part: TerminalPart) -> Result<PublicRoute<'static>, PathError> {
        Ok(PublicRoute::Terminal {
            id: SessionId::parse(ID).unwrap(),
            part,
        })
    }

    #[test]
    fn the_public_routes_are_recognised() {
        assert_eq!(classify(b"/healthz"), Ok(PublicRoute::Health));
        assert_eq!(classify(b"/"), Ok(PublicRoute::Asset("")));
        assert_eq!(
            classify(b"/assets/app.js"),
            Ok(PublicRoute::Asset("app.js"))
        );
        assert_eq!(classify(b"/auth/session"), Ok(PublicRoute::AuthSession));
        assert_eq!(classify(b"/api/sessions"), Ok(PublicRoute::Api("sessions")));
        assert_eq!(
            classify(format!("/api/sessions/{ID}/redraw").as_bytes()),
            Ok(PublicRoute::Api("sessions/abcdefghijk234mn/redraw"))
        );
        assert_eq!(
            classify(format!("/s/{ID}/").as_bytes()),
            term(TerminalPart::Page)
        );
        assert_eq!(
            classify(format!("/s/{ID}/token").as_bytes()),
            term(TerminalPart::Token)
        );
        assert_eq!(
            classify(format!("/s/{ID}/ws").as_bytes()),
            term(TerminalPart::Ws)
        );
    }

    #[test]
    fn tricks_never_reach_a_terminal_route() {
        for p in [
            format!("/s/{ID}/ws/"),
            format!("/s/{ID}/wsx"),
            format!("/s/{ID}/w"),
            format!("/s/{ID}//ws"),
            format!("/s/{ID}/./ws"),
            format!("/s/{ID}/../x/ws"),
            format!("/s/{ID}"),
            format!("/S/{ID}/ws"),
            format!("/s/{}/ws", ID.to_uppercase()),
            format!("//s/{ID}/ws"),
            format!("/s/{ID}/token/.."),
            format!("/s/{ID}/ws;x"),
            "/s/../../etc/passwd".into(),
            "/s//ws".into(),
        ] {
            assert_eq!(classify(p.as_bytes()), Err(PathError::NotFound), "{p}");
        }
    }

    #[test]
    fn encodings_nul_and_backslashes_are_bad_requests() {
        for p in [
            format!("/s/{ID}%2fws"),
            format!("/s/{ID}/%77s"),
            format!("/s/%2e%2e/{ID}/ws"),
            format!("/s/{ID}/ws%00"),
            format!("/s/{ID}\\ws"),
            "/api/sessions%2F..".into(),
        ] {
            assert!(
                matches!(classify(p.as_bytes()), Err(PathError::BadRequest(_))),
                "{p}"
            );
        }
        assert!(matches!(classify(b"/s/\0"), Err(PathError::BadRequest(_))));
        assert!(matches!(
            classify("/s/é".as_bytes()),
            Err(PathError::BadRequest(_))
        ));
        assert!(matches!(classify(b"s/x"), Err(PathError::BadRequest(_))));
        assert!(matches!(classify(b"/a b"), Err(PathError::BadRequest(_))));
    }

    #[test]
    fn api_and_asset_paths_refuse_dot_and_empty_segments() {
        for p in [
            "/api/",
            "/api/sessions/",
            "/api//sessions",
            "/api/../v1/routes",
            "/api/./sessions",
            "/assets/",
            "/assets/../x",
            "/assets/.hidden",
            "/assets/a/b",
        ] {
            assert_eq!(classify(p.as_bytes()), Err(PathError::NotFound), "{p}");
        }
    }

    #[test]
    fn unknown_paths_are_not_found() {
        for p in [
            "/index.html",
            "/ws",
            "/token",
            "/v1/routes",
            "/healthz/",
            "/auth/session/",
            "/auth",
            "/metrics",
        ] {
            assert_eq!(classify(p.as_bytes()), Err(PathError::NotFound), "{p}");
        }
    }

    proptest! {
        #[test]
        fn classify_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = classify(&raw);
        }

        #[test]
        fn a_terminal_route_always_has_the_exact_canonical_form(s in "/[a-z0-9/._%-]{0,40}") {
            if let Ok(PublicRoute::Terminal { id, part }) = classify(s.as_bytes()) {
                let canonical = format!("/s/{id}{}", match part { TerminalPart::Page => "/", TerminalPart::Token => "/token", TerminalPart::Ws => "/ws" });
                prop_assert_eq!(s, canonical);
            }
        }
    }
}

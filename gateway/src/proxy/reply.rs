//! Writing the gateway's own answers: JSON, or for a refusal to a browser navigating to
//! a page an HTML error page that says the same thing; and which refusal a failure to
//! proxy amounts to.

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use pingora::{Error, ErrorSource, ErrorType, Result};
use policy::Refusal;

use super::headers::header;
use super::upstream::Upstream;
use crate::ui;

/// A JSON answer written by the gateway itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Json {
    status: u16,
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
}

impl Json {
    /// An answer with this status and body.
    pub fn new(status: u16, body: Vec<u8>) -> Self {
        Json {
            status,
            body,
            headers: Vec::new(),
        }
    }

    /// A 200 with `value` as its body.
    pub fn ok(value: &serde_json::Value) -> Self {
        // A JSON value always serialises.
        Json::new(200, serde_json::to_vec(value).unwrap_or_default())
    }

    /// The same answer with one more header.
    pub fn with_header(mut self, name: &'static str, value: String) -> Self {
        self.headers.push((name, value));
        self
    }

    /// A refusal in the JSON shape of design §2.
    pub fn refusal(r: &Refusal) -> Self {
        Json::new(r.status, r.body())
    }
}

/// Writes a JSON answer, never cached.
pub(super) async fn json(session: &mut Session, json: Json) -> Result<()> {
    let mut h = ResponseHeader::build(json.status, Some(4 + json.headers.len()))?;
    h.insert_header("Content-Type", "application/json")?;
    h.insert_header("Content-Length", json.body.len().to_string())?;
    h.insert_header("Cache-Control", "no-store")?;
    for (k, v) in json.headers {
        h.append_header(k, v)?;
    }
    session.write_response_header(Box::new(h), false).await?;
    session
        .write_response_body(Some(Bytes::from(json.body)), true)
        .await
}

/// A redirect the gateway answers itself, with the cookies it sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Redirect {
    pub location: String,
    pub cookies: Vec<String>,
}

/// Writes a 303 to `to.location`, setting its cookies; never cached.
pub(super) async fn redirect(session: &mut Session, to: Redirect) -> Result<()> {
    let mut h = ResponseHeader::build(303, Some(3 + to.cookies.len()))?;
    h.insert_header("Location", to.location)?;
    h.insert_header("Content-Length", "0")?;
    h.insert_header("Cache-Control", "no-store")?;
    for c in to.cookies {
        h.append_header("Set-Cookie", c)?;
    }
    session.write_response_header(Box::new(h), true).await
}

/// Answers a refusal. A refused websocket handshake ends its connection (RFC 6455
/// §4.1: the client fails it anyway); kept alive, a flood of them would hold one idle
/// connection each.
pub(crate) async fn refuse(session: &mut Session, refusal: &Refusal) -> Result<()> {
    if session.req_header().headers.contains_key("upgrade") {
        session.set_keepalive(None);
    }
    self::refusal(session, refusal).await
}

/// Writes a refusal: an HTML page for a browser navigating, the JSON shape otherwise.
pub(super) async fn refusal(session: &mut Session, r: &Refusal) -> Result<()> {
    if wants_html(session.req_header()) {
        let back = (r.code == Refusal::UNAUTHENTICATED.code)
            .then(|| session.req_header().uri.path().to_owned())
            .filter(|p| ui::returns_after_sign_in(p));
        ui::error_page(session, r.status, r.code, &r.message, back.as_deref()).await?;
        return Ok(());
    }
    json(session, Json::refusal(r)).await
}

/// A browser navigating to a page (not a script, not a websocket) gets an HTML error
/// page; everything else gets the JSON shape. Both say the same thing.
fn wants_html(req: &RequestHeader) -> bool {
    req.method == "GET"
        && header(req, "upgrade").is_none()
        && !req.uri.path().starts_with("/api/")
        && header(req, "accept").is_some_and(|a| a.windows(9).any(|w| w == b"text/html"))
}

/// Control answered, but with a certificate that fails the check against `pki.ca_file`
/// (another CA, another host's name) or a TLS handshake that fails otherwise: a bad
/// gateway (502), not an outage to wait out like a control that does not answer (503).
/// The same code, so that clients treat both as control being out of reach.
const CONTROL_UNTRUSTED: Refusal = Refusal {
    status: 502,
    code: "control_unavailable",
    message: std::borrow::Cow::Borrowed(
        "the control service could not be verified (its TLS certificate was refused); the operator must fix the deployment's certificates",
    ),
};

/// The refusal a failure to proxy amounts to; `None` when the client is the one that
/// failed, so there is nobody to answer.
pub(super) fn failure(e: &Error, upstream: Option<&Upstream>) -> Option<Refusal> {
    let from_upstream = e.esource() == &ErrorSource::Upstream;
    Some(match (e.etype(), upstream) {
        (ErrorType::HTTPStatus(413), _) => Refusal::BODY_TOO_LARGE,
        (ErrorType::HTTPStatus(s), _) if *s >= 400 => Refusal {
            status: *s,
            ..Refusal::REQUEST_FAILED
        },
        (
            ErrorType::ConnectTimedout | ErrorType::WriteTimedout | ErrorType::ReadTimedout,
            Some(Upstream::Control(_)),
        ) if from_upstream => Refusal::CONTROL_TIMEOUT,
        (ErrorType::TLSHandshakeFailure | ErrorType::InvalidCert, Some(Upstream::Control(_)))
            if from_upstream =>
        {
            CONTROL_UNTRUSTED
        }
        (_, Some(Upstream::Control(_))) if from_upstream => Refusal::CONTROL_UNAVAILABLE,
        (_, Some(Upstream::Ttyd(_))) if from_upstream => Refusal::TERMINAL_UNAVAILABLE,
        _ if e.esource() == &ErrorSource::Downstream => return None,
        _ => Refusal::PROXY_ERROR,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(etype: ErrorType, source: ErrorSource) -> Box<Error> {
        match source {
            ErrorSource::Upstream => Error::new_up(etype),
            ErrorSource::Downstream => Error::new_down(etype),
            _ => Error::new_in(etype),
        }
    }

    #[test]
    fn failures_map_to_the_refusals_of_their_side() {
        let control = Upstream::Control(super::super::ControlCall {
            path: "/v1/sessions".into(),
            timeout: std::time::Duration::from_secs(2),
            answer_within: std::time::Duration::from_secs(12),
            viewer: None,
        });
        let ttyd = Upstream::Ttyd(super::super::TtydRequest {
            part: policy::TerminalPart::Ws,
            arg: Some("c".into()),
            address: None,
            credential: None,
            auth_token: None,
            record: Default::default(),
        });
        let refused = |e: &Error, u: Option<&Upstream>| failure(e, u).map(|r| (r.status, r.code));
        let too_large = error(ErrorType::HTTPStatus(413), ErrorSource::Internal);
        assert_eq!(
            refused(&too_large, Some(&control)),
            Some((413, "body_too_large"))
        );
        let status = error(ErrorType::HTTPStatus(431), ErrorSource::Internal);
        assert_eq!(refused(&status, None), Some((431, "error")));
        let up = error(ErrorType::ConnectRefused, ErrorSource::Upstream);
        assert_eq!(
            refused(&up, Some(&control)),
            Some((503, "control_unavailable"))
        );
        assert_eq!(
            refused(&up, Some(&ttyd)),
            Some((502, "terminal_unavailable"))
        );
        for slow in [
            ErrorType::ConnectTimedout,
            ErrorType::WriteTimedout,
            ErrorType::ReadTimedout,
        ] {
            let hung = error(slow.clone(), ErrorSource::Upstream);
            assert_eq!(
                refused(&hung, Some(&control)),
                Some((504, "control_timeout")),
                "{slow:?}"
            );
            assert_eq!(
                refused(&hung, Some(&ttyd)),
                Some((502, "terminal_unavailable"))
            );
        }
        for untrusted in [ErrorType::TLSHandshakeFailure, ErrorType::InvalidCert] {
            let refused_cert = error(untrusted.clone(), ErrorSource::Upstream);
            assert_eq!(
                refused(&refused_cert, Some(&control)),
                Some((502, "control_unavailable")),
                "{untrusted:?}"
            );
            assert_eq!(
                refused(&refused_cert, Some(&ttyd)),
                Some((502, "terminal_unavailable"))
            );
        }
        let slow_browser = error(ErrorType::WriteTimedout, ErrorSource::Downstream);
        assert_eq!(refused(&slow_browser, Some(&control)), None);
        let down = error(ErrorType::ReadError, ErrorSource::Downstream);
        assert_eq!(refused(&down, Some(&ttyd)), None);
        let other = error(ErrorType::InternalError, ErrorSource::Internal);
        assert_eq!(refused(&other, Some(&ttyd)), Some((502, "proxy_error")));
    }

    #[test]
    fn only_page_navigations_get_html() {
        let req = |method: &str, path: &str, headers: &[(&str, &str)]| {
            let mut r = RequestHeader::build(method, path.as_bytes(), None).unwrap();
            for (k, v) in headers {
                r.append_header(k.to_string(), *v).unwrap();
            }
            r
        };
        let html = [("Accept", "text/html,application/xhtml+xml")];
        assert!(wants_html(&req("GET", "/s/x/", &html)));
        assert!(!wants_html(&req("POST", "/s/x/", &html)));
        assert!(!wants_html(&req("GET", "/api/sessions", &html)));
        assert!(!wants_html(&req(
            "GET",
            "/s/x/ws",
            &[html[0], ("Upgrade", "websocket")]
        )));
        assert!(!wants_html(&req("GET", "/s/x/", &[("Accept", "*/*")])));
    }
}

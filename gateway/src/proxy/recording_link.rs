//! A recording link (`/r/<token>`): the player's page once control says the link
//! plays for this viewer, and the recording itself (`/r/<token>/cast`), streamed from
//! control's `/v1/recording-links/<token>` through Pingora with the service token.
//!
//! A termgate credential is optional: with a valid one (of a user who is not locked)
//! the viewer is named to control as `X-Termgate-Viewer`, and a `signed-in` link
//! requires it. Control decides (`policy::recording_link::decide_recording_view`) and
//! audits every play. The token is logged nowhere: the access line names the link's
//! id (`/r/<link …>`).

use std::time::Duration;

use pingora::proxy::Session;
use policy::recording_link::RecordingToken;
use policy::Refusal;

use super::credential::{authenticate, credential};
use super::headers::header;
use super::outcome::{Allowed, Denied, Next};
use super::upstream::{ControlCall, Upstream};
use crate::state::Gateway;

/// Admits `/r/<token>` (`cast` false: the page) or `/r/<token>/cast`.
pub(super) async fn recording(
    g: &Gateway,
    session: &mut Session,
    token: RecordingToken,
    cast: bool,
) -> Result<Allowed, Denied> {
    let link = Some(token.id());
    let req = session.req_header();
    let declares_body = header(req, "transfer-encoding").is_some()
        || header(req, "content-length").is_some_and(|v| v.trim_ascii() != b"0");
    if req.method != "GET" && req.method != "HEAD" {
        return Err(Denied {
            share: link,
            ..Refusal::METHOD_NOT_ALLOWED
                .with_message("recording links accept GET only")
                .into()
        });
    }
    if declares_body {
        return Err(Denied {
            share: link,
            ..Refusal::BODY_NOT_ALLOWED.into()
        });
    }
    let viewer = match credential(session.req_header(), &g.config.auth.cookie_name) {
        None => None,
        Some(presented) => match authenticate(g, session, Some(presented)).await {
            Ok(v) if !g.routes.is_locked(v.principal.sub.as_str()) => Some(v.principal),
            // A refused or locked sign-in watches as anyone would.
            _ => None,
        },
    };
    let sub = viewer.as_ref().map(|p| p.sub.to_string());
    if !cast {
        return match g.control.recording_link(&token, sub.as_deref()).await {
            Ok(Ok(())) => Ok(Allowed {
                principal: viewer,
                share: link,
                ..Allowed::new("recording_link", Next::RecordingPage)
            }),
            Ok(Err(refusal)) => Err(Denied {
                share: link,
                ..Denied::of(refusal, viewer)
            }),
            Err(e) => {
                tracing::warn!(link = ?link, error = %e, "recording link check failed");
                Err(Denied {
                    share: link,
                    ..Denied::of(Refusal::CONTROL_UNAVAILABLE, viewer)
                })
            }
        };
    }
    let service = g
        .config
        .secrets()
        .service_token
        .as_ref()
        .map(|t| String::from_utf8_lossy(t.expose()).into_owned());
    let timeout = Duration::from_millis(g.config.gateway.control_timeout_ms);
    let call = ControlCall {
        path: format!("/v1/recording-links/{token}"),
        timeout,
        answer_within: timeout,
        viewer: sub,
    };
    Ok(Allowed {
        principal: viewer,
        // control's bearer for this call: the service token, never the viewer's.
        token: service,
        share: link,
        ..Allowed::new("recording_link", Next::Proxy(Upstream::Control(call)))
    })
}

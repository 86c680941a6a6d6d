//! Who may call each endpoint: the one table `route` reads before any handler runs,
//! so that every endpoint's credential is checked in one place, by its class.
//!
//! The order of the checks is the API's: a path no endpoint has is a 404 whoever
//! asks (no credential is looked at), a known endpoint checks its credential next
//! (401), and only then does its handler look at the method (405), the ids in its
//! path (404) and the body. The two exceptions are told here: `/v1/authz` and
//! `/v1/grant` judge their own credentials after the method, and a recording link's
//! session id is read before the user's token.

use hyper::Method;

use super::http::{no_such_endpoint, session_id};
use crate::error::ApiError;

/// The credential an endpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// None: `/v1/healthz`.
    Public,
    /// The service token (the gateways): the route feed, their reports, recording
    /// uploads, their audit lines, recording links played.
    Service,
    /// `POST /v1/signins`: the service token, its absence answered as the endpoint
    /// this is not to a user (404); the body's own token is then the user's.
    GatewaySignIn,
    /// A user's bearer token, of a user who is not locked.
    User,
    /// `/v1/authz`: a front proxy's check of the request it holds. The credential is
    /// the user's own, as the client sent it (a bearer header or the sign-in cookie),
    /// judged by the check in the gateway's order: path, method, credential, Origin.
    FrontProxy,
    /// `GET /v1/grant`: the pool's watch of a terminal's grant. The credential is the
    /// grant (`X-Termgate-Grant`) or its one-use handle (`X-Termgate-Handle`), judged
    /// after the method.
    Grant,
}

/// The class of the endpoint `segments` (a `/v1/` path's) and `method` name, or the
/// refusal answered before any credential is looked at: no such endpoint, or (a
/// recording link's path) no such session.
pub(super) fn access(segments: &[&str], method: &Method) -> Result<Access, ApiError> {
    Ok(match segments {
        ["healthz"] => Access::Public,
        ["routes"] | ["routes", _] | ["activity"] | ["terminals"] | ["recordings", _, _] => {
            Access::Service
        }
        ["recording-links", _, ..] => Access::Service,
        ["audit"] if method == Method::POST => Access::Service,
        ["signins"] if method == Method::POST => Access::GatewaySignIn,
        ["authz", ..] => Access::FrontProxy,
        ["grant"] => Access::Grant,
        ["sessions", id, "recordings", _, "links"]
        | ["sessions", id, "recordings", _, "links", _] => {
            session_id(id)?;
            Access::User
        }
        ["profiles" | "retention" | "revocations" | "audit" | "history"]
        | ["signins", ..]
        | ["users"]
        | ["users", _, "lock"]
        | ["sessions"]
        | ["sessions", _]
        | ["sessions", _, "redraw" | "recordings" | "shares" | "peers"]
        | ["sessions", _, "recordings" | "shares" | "peers", _]
        | ["targets"]
        | ["targets", _]
        | ["workspaces" | "shared-workspaces" | "secrets", ..] => Access::User,
        _ => return Err(no_such_endpoint()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(path: &str, method: Method) -> Result<Access, &'static str> {
        let segments: Vec<&str> = path.split('/').collect();
        access(&segments, &method).map_err(|e| e.code)
    }

    #[test]
    fn each_endpoint_has_its_credential_and_unknown_paths_none() {
        let id = "a".repeat(16);
        let get = Method::GET;
        assert_eq!(class("healthz", Method::DELETE), Ok(Access::Public));
        assert_eq!(class("routes", get.clone()), Ok(Access::Service));
        assert_eq!(class("audit", Method::POST), Ok(Access::Service));
        assert_eq!(class("audit", get.clone()), Ok(Access::User));
        assert_eq!(class("retention", get.clone()), Ok(Access::User));
        assert_eq!(class("signins", Method::POST), Ok(Access::GatewaySignIn));
        assert_eq!(class("signins/x/y", Method::POST), Ok(Access::User));
        assert_eq!(
            class("recording-links/t/check", get.clone()),
            Ok(Access::Service)
        );
        assert_eq!(class("authz/s/x/ws", Method::PUT), Ok(Access::FrontProxy));
        assert_eq!(class("grant", Method::POST), Ok(Access::Grant));
        assert_eq!(class("secrets/a/b/c", get.clone()), Ok(Access::User));
        for unknown in [
            "nothing",
            "routes/a/b",
            "recording-links",
            "recordings/a",
            "users/a",
            "sessions/a/b",
            "sessions/a/recordings/b/c",
            "targets/a/b",
        ] {
            let found = class(unknown, get.clone());
            assert_eq!(found, Err(no_such_endpoint().code), "{unknown}");
        }
        let links = format!("sessions/{id}/recordings/r/links");
        assert_eq!(class(&links, get.clone()), Ok(Access::User));
        assert_eq!(
            class("sessions/bad/recordings/r/links", get),
            Err(ApiError::NOT_FOUND.code)
        );
    }
}

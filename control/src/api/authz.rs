//! `GET /v1/authz`: the terminal check for a reverse proxy that keeps its own place in
//! front of ttyd (nginx `auth_request`; design §2, "Behind nginx").
//!
//! The proxy asks with the original request's URI, method and `Origin`, and passes the
//! user's credential on (a bearer header, or the sign-in cookie). The answer is the one
//! the gateway would reach for the same request — the same `policy` verifier, Origin
//! rule and `decide_terminal` on the route from the store — and, when allowed, where
//! the terminal's ttyd listens and the exact path and query to send it, so that no
//! client-chosen `arg` ever reaches ttyd.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request};
use policy::feed::{parse_addr, Route, TtydAddr};
use policy::{CredentialSource, Decision, PathError, PublicRoute, Refusal, TerminalPart};

use super::{empty, not_allowed, Reply};
use crate::error::ApiError;
use crate::service::Control;

/// What the proxy tells about the request it holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuthzRequest<'a> {
    /// The original request target, path and query (`X-Original-URI`).
    pub uri: Option<&'a [u8]>,
    /// The original method (`X-Original-Method`), when the proxy sends it.
    pub method: Option<&'a [u8]>,
    /// The original `Origin` header.
    pub origin: Option<&'a [u8]>,
    /// The `Authorization` header.
    pub authorization: Option<&'a [u8]>,
    /// Every `Cookie` header.
    pub cookies: &'a [&'a [u8]],
}

/// An allowed terminal request: where it goes and what is sent there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The ttyd to connect to: `unix:/path` or `host:port`.
    pub upstream: String,
    /// The path and query to request from that ttyd (`/ws?arg=<container>` for a Docker
    /// session's websocket); the client's own query is never part of it.
    pub uri: String,
    /// ttyd's `arg`: the container of a Docker session; `None` for a target.
    pub arg: Option<String>,
    /// The verified user, for ttyd's `-H X-Termgate-User`.
    pub user: String,
    /// Why it was allowed: `owner`, `admin` or `allowed` (a target's list).
    pub reason: &'static str,
}

/// Spreads requests over a pool of several ttyd addresses.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The credential of a request: a bearer header wins over the cookie named
/// `cookie_name`; never the query. The same rule as the gateway's.
fn credential<'a>(
    req: &AuthzRequest<'a>,
    cookie_name: &str,
) -> Option<(&'a [u8], CredentialSource)> {
    if let Some(token) = req.authorization.and_then(policy::identity::bearer) {
        return Some((token, CredentialSource::Bearer));
    }
    let token = req
        .cookies
        .iter()
        .find_map(|value| policy::identity::cookie(value, cookie_name))?;
    Some((token, CredentialSource::Cookie))
}

/// The terminal a URI names: `/s/<id>/`, `/s/<id>/token` or `/s/<id>/ws`, parsed as
/// strictly as the gateway parses it; the query is ignored.
fn terminal(uri: &[u8]) -> Result<(policy::SessionId, TerminalPart), Refusal> {
    let path = uri.split(|b| *b == b'?').next().unwrap_or_default();
    match policy::classify(path) {
        Ok(PublicRoute::Terminal { id, part }) => Ok((id, part)),
        Err(PathError::BadRequest(why)) => Err(Refusal::BAD_PATH.with_message(why)),
        // Anything else behind the proxy's terminal location names no terminal.
        Ok(_) | Err(PathError::NotFound) => Err(Refusal::NOT_FOUND),
    }
}

impl Control {
    /// Decides a terminal request held by a proxy, in the gateway's order: the path,
    /// the method, the credential, the Origin (websocket only), then the route and
    /// `policy::decide_terminal`. Non-owner and unknown are the same
    /// [`Refusal::NOT_FOUND`]; nothing about the route is told to anyone refused.
    pub fn authorize(&self, req: &AuthzRequest<'_>) -> Result<Grant, Refusal> {
        let uri = req
            .uri
            .ok_or_else(|| Refusal::BAD_PATH.with_message("X-Original-URI is required"))?;
        let (id, part) = terminal(uri)?;
        if req.method.is_some_and(|m| m != b"GET" && m != b"HEAD") {
            return Err(Refusal::METHOD_NOT_ALLOWED.with_message("terminals accept GET only"));
        }
        let (token, source) =
            credential(req, &self.config().auth.cookie_name).ok_or(Refusal::UNAUTHENTICATED)?;
        let principal = self.verify(token).map_err(|e| {
            tracing::info!(target: "audit", session = %id, decision = "deny", reason = e.reason(), "authz: token refused");
            Refusal::from(&e)
        })?;
        let sub = principal.sub.as_str();
        if part == TerminalPart::Ws {
            self.origins().check(req.origin, source).map_err(|e| {
                tracing::info!(target: "audit", session = %id, sub, decision = "deny", reason = e.reason(), "authz: origin refused");
                Refusal::from(e)
            })?;
        }
        let locked = self.is_locked(&principal.sub)?;
        let lookup = self.route(&id)?;
        let route = lookup.as_ref().map(|l| &l.route);
        let as_admin = match policy::decide_terminal(&principal, route, locked) {
            Decision::Allow { as_admin } => as_admin,
            Decision::Deny(refusal) => {
                tracing::info!(target: "audit", session = %id, sub, decision = "deny", reason = refusal.code, "authz");
                return Err(refusal);
            }
        };
        let route = route.ok_or(Refusal::NOT_FOUND)?;
        if route.unreachable {
            return Err(Refusal::HOST_UNAVAILABLE);
        }
        if route
            .target
            .as_ref()
            .is_some_and(|t| t.credential.is_some())
        {
            // A basic-auth target's token goes into the websocket's first message, which
            // only the gateway rewrites; a proxy cannot sign in to that ttyd.
            return Err(Refusal::TARGET_MISCONFIGURED
                .with_message("this terminal's ttyd expects a credential only the gateway adds"));
        }
        let upstream = self.upstream_of(route).ok_or_else(|| {
            // Under the target this line had before the module moved into `api`.
            tracing::error!(session = %id, "authz: the route names no usable ttyd address");
            Refusal::TERMINAL_UNAVAILABLE
        })?;
        let reason = match (as_admin, route.target.is_some()) {
            (true, _) => "admin",
            (false, true) => "allowed",
            (false, false) => "owner",
        };
        tracing::info!(target: "audit", session = %id, sub, decision = "allow", reason, "authz");
        Ok(Grant {
            upstream,
            uri: ttyd_uri(route, part),
            arg: route.arg().map(str::to_owned),
            user: sub.to_owned(),
            reason,
        })
    }

    /// The ttyd a route's terminal is at: the route's own address, or the deployment's
    /// pool (`gateway.ttyd_upstreams`, else `ttyd.socket`), as the gateway picks it.
    fn upstream_of(&self, route: &Route) -> Option<String> {
        let key = NEXT.fetch_add(1, Ordering::Relaxed);
        if let Some(address) = &route.upstream {
            return Some(match address.pick(key)? {
                TtydAddr::Unix(path) => format!("unix:{path}"),
                TtydAddr::Tcp(addr) => addr.to_owned(),
            });
        }
        let pool = &self.config().gateway.ttyd_upstreams;
        if pool.is_empty() {
            let socket = self.config().resolve(&self.config().ttyd.socket);
            return Some(format!("unix:{}", socket.to_str()?));
        }
        let i = usize::try_from(key % pool.len() as u64).ok()?;
        let addr = pool.get(i)?;
        parse_addr(addr).ok().map(|_| addr.clone())
    }
}

/// The path and query sent to ttyd: its base path and the part's path, and for a
/// Docker session's websocket `arg=<container>` — exactly what the gateway sends.
fn ttyd_uri(route: &Route, part: TerminalPart) -> String {
    let base = route.upstream.as_ref().map_or("", |a| a.base_path.as_str());
    let path = part.upstream_path();
    match (part, route.arg()) {
        (TerminalPart::Ws, Some(arg)) => format!("{base}{path}?arg={arg}"),
        _ => format!("{base}{path}"),
    }
}

/// `GET` or `HEAD /v1/authz`; other methods are refused before anything else.
pub(super) fn handle(control: Arc<Control>, req: Request<Incoming>) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    if method != Method::GET && method != Method::HEAD {
        return Err(not_allowed());
    }
    authz(&control, &req)
}

/// `GET /v1/authz`: a proxy's terminal check (nginx `auth_request`). 200 with the
/// grant in `X-Termgate-*` headers and no body, or the refusal as everywhere else; a
/// 401 carries `WWW-Authenticate`, which nginx passes on.
fn authz(control: &Control, req: &Request<Incoming>) -> Result<Reply, ApiError> {
    let h = req.headers();
    let one = |name: &str| h.get(name).map(HeaderValue::as_bytes);
    let cookies: Vec<&[u8]> = h
        .get_all(hyper::header::COOKIE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    let asked = AuthzRequest {
        uri: one("x-original-uri"),
        method: one("x-original-method"),
        origin: one("origin"),
        authorization: one("authorization"),
        cookies: &cookies,
    };
    let grant = control.authorize(&asked)?;
    let mut reply = empty(200);
    let headers = reply.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        // Every value comes from the store or a verified token; one that is not a valid
        // header value fails the request rather than being altered.
        let v = HeaderValue::from_str(value).map_err(|_| ApiError::INTERNAL)?;
        headers.insert(name, v);
        Ok::<(), ApiError>(())
    };
    set("x-termgate-upstream", &grant.upstream)?;
    set("x-termgate-uri", &grant.uri)?;
    set("x-termgate-user", &grant.user)?;
    set("x-termgate-reason", grant.reason)?;
    if let Some(arg) = &grant.arg {
        set("x-termgate-arg", arg)?;
    }
    set("cache-control", "no-store")?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::feed::{TargetAccess, TtydAddress};
    use policy::SessionId;

    fn id() -> SessionId {
        SessionId::from_random([3; 10])
    }

    #[test]
    fn the_uri_names_a_terminal_and_its_query_is_ignored() {
        let s = id();
        let ws = format!("/s/{s}/ws?arg=evil");
        assert_eq!(terminal(ws.as_bytes()), Ok((s, TerminalPart::Ws)));
        let page = format!("/s/{s}/");
        assert_eq!(terminal(page.as_bytes()), Ok((s, TerminalPart::Page)));
        assert_eq!(terminal(b"/api/sessions"), Err(Refusal::NOT_FOUND));
        assert_eq!(terminal(b"/s/short/ws"), Err(Refusal::NOT_FOUND));
        let encoded = format!("/s/{s}/%77s");
        assert_eq!(terminal(encoded.as_bytes()).unwrap_err().code, "bad_path");
    }

    #[test]
    fn only_the_routes_arg_reaches_ttyd_and_only_on_the_websocket() {
        let docker = Route::container(id(), "alice", "c0ffee");
        assert_eq!(ttyd_uri(&docker, TerminalPart::Ws), "/ws?arg=c0ffee");
        assert_eq!(ttyd_uri(&docker, TerminalPart::Page), "/");
        assert_eq!(ttyd_uri(&docker, TerminalPart::Token), "/token");
        let mut target = Route::container(id(), "", "");
        target.upstream = Some(TtydAddress {
            addrs: vec!["10.0.0.5:7681".into()],
            base_path: "/lab".into(),
        });
        target.target = Some(TargetAccess {
            users: vec!["alice".into()],
            roles: Vec::new(),
            credential: None,
        });
        assert_eq!(ttyd_uri(&target, TerminalPart::Ws), "/lab/ws");
    }

    #[test]
    fn bearer_wins_and_the_cookie_is_matched_by_its_exact_name() {
        let cookies: [&[u8]; 2] = [b"a=1; termgate_session2=x", b"termgate_session=tok"];
        let req = AuthzRequest {
            cookies: &cookies,
            ..AuthzRequest::default()
        };
        assert_eq!(
            credential(&req, "termgate_session"),
            Some((&b"tok"[..], CredentialSource::Cookie))
        );
        let req = AuthzRequest {
            authorization: Some(b"Bearer bt"),
            cookies: &cookies,
            ..AuthzRequest::default()
        };
        assert_eq!(
            credential(&req, "termgate_session"),
            Some((&b"bt"[..], CredentialSource::Bearer))
        );
        let none: [&[u8]; 1] = [b"xtermgate_session=y"];
        let req = AuthzRequest {
            authorization: Some(b"Basic abc"),
            cookies: &none,
            ..AuthzRequest::default()
        };
        assert_eq!(credential(&req, "termgate_session"), None);
    }
}

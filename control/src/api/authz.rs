//! `GET /v1/authz`: the terminal check for a reverse proxy that keeps its own place in
//! front of ttyd (docs/front-proxies.md "Behind a front proxy"): nginx `auth_request`, Caddy
//! `forward_auth`, Traefik `forwardAuth` and Envoy `ext_authz` (HTTP service).
//!
//! Each proxy names the original request its own way, and one decision serves them
//! all: nginx sends `X-Original-URI`/`X-Original-Method`, Caddy and Traefik
//! `X-Forwarded-Uri`/`X-Forwarded-Method`, and Envoy asks at `/v1/authz` followed by
//! the original path, with the original method. The user's credential comes as the
//! client sent it (a bearer header, or the sign-in cookie). The answer is the one the
//! gateway would reach for the same request — the same `policy` verifier, Origin rule
//! and `decide_terminal` on the route from the store — and, when allowed, where the
//! terminal's ttyd listens and the exact path and query to send it, so that no
//! client-chosen `arg` ever reaches ttyd. A Docker session's websocket also gets a
//! one-use handle for the pool, which `GET /v1/grant` exchanges for the terminal's
//! sealed grant (`policy::grant`) and then judges again until the terminal must close. Refusals: 401 (a 302 to sign in for a browser's page
//! navigation), 403, and the same 404 for another user's session as for an unknown id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request};
use policy::feed::{parse_addr, Route, TtydAddr};
use policy::terminal_access::{admit, AdmittedAs};
use policy::{CredentialSource, PathError, Principal, PublicRoute, Refusal, TerminalPart};

use super::http::{empty, not_allowed, Reply};
use crate::error::ApiError;
use crate::service::{Control, Grants};

/// What the proxy tells about the request it holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuthzRequest<'a> {
    /// The original request target, path and query (`X-Original-URI`, `X-Forwarded-Uri`,
    /// or Envoy's path after `/v1/authz`).
    pub uri: Option<&'a [u8]>,
    /// The original method (`X-Original-Method`, `X-Forwarded-Method`, Envoy's own),
    /// when the proxy sends it.
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
pub struct Allowed {
    /// The ttyd to connect to: `unix:/path` or `host:port`.
    pub upstream: String,
    /// The path to request from that ttyd (its base path and the part's).
    pub path: String,
    /// The query to send with it: `arg=<container>&arg=<handle>` for a Docker
    /// session's websocket, else empty; the client's own query is never part of it.
    pub query: String,
    /// ttyd's `arg`: the container of a Docker session; `None` for a target.
    pub arg: Option<String>,
    /// A Docker session's websocket: the one-use handle the pool exchanges for the
    /// terminal's sealed grant.
    pub handle: Option<String>,
    /// The verified user, for ttyd's `-H X-Termgate-User`.
    pub user: String,
    /// Why it was allowed: `owner`, `admin`, `allowed` (a target's list) or `peer`.
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

/// The access decision of a terminal request: `policy::terminal_access::admit`, the
/// owner's lock read (from the store) only when the route alone does not admit. A user
/// the owner invited opens it as a peer, as through the gateway; to anyone else it
/// stays unknown. The outer `Err` is the lock read's.
fn decide(
    principal: &Principal,
    route: Option<&Route>,
    locked: bool,
    now: u64,
    owner_locked: impl FnOnce(&str) -> Result<bool, ApiError>,
) -> Result<Result<AdmittedAs, Refusal>, ApiError> {
    admit(principal, route, locked, now, owner_locked)
}

/// Decides a terminal request held by a proxy, in the gateway's order: the path,
/// the method, the credential, the Origin (websocket only), then the route and
/// `policy::terminal_access::admit`. Non-owner and unknown are the same
/// [`Refusal::NOT_FOUND`]; nothing about the route is told to anyone refused.
pub fn authorize(grants: &Grants, req: &AuthzRequest<'_>) -> Result<Allowed, Refusal> {
    let uri = req
        .uri
        .ok_or_else(|| Refusal::BAD_PATH.with_message("X-Original-URI is required"))?;
    let (id, part) = terminal(uri)?;
    if req.method.is_some_and(|m| m != b"GET" && m != b"HEAD") {
        return Err(Refusal::METHOD_NOT_ALLOWED.with_message("terminals accept GET only"));
    }
    let (token, source) =
        credential(req, &grants.config().auth.cookie_name).ok_or(Refusal::UNAUTHENTICATED)?;
    let principal = grants.verify(token).map_err(|e| {
        tracing::info!(target: "audit", session = %id, decision = "deny", reason = e.reason(), "authz: token refused");
        Refusal::from(&e)
    })?;
    let sub = principal.sub.as_str();
    if part == TerminalPart::Ws {
        grants.origins().check(req.origin, source).map_err(|e| {
            tracing::info!(target: "audit", session = %id, sub, decision = "deny", reason = e.reason(), "authz: origin refused");
            Refusal::from(e)
        })?;
    }
    let locked = grants.is_locked(&principal.sub)?;
    let lookup = grants.route(&id)?;
    let route = lookup.as_ref().map(|l| &l.route);
    let admitted = match decide(&principal, route, locked, crate::service::now(), |owner| {
        grants.owner_locked(owner)
    })? {
        Ok(admitted) => admitted,
        Err(refusal) => {
            tracing::info!(target: "audit", session = %id, sub, decision = "deny", reason = refusal.code, "authz");
            return Err(refusal);
        }
    };
    let peer = admitted.peer_until().is_some();
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
    let upstream = upstream_of(grants, route).ok_or_else(|| {
        // Under the target this line had before the module moved into `api`.
        tracing::error!(session = %id, "authz: the route names no usable ttyd address");
        Refusal::TERMINAL_UNAVAILABLE
    })?;
    let reason = admitted.as_str();
    let handle = match (part, route.arg()) {
        (TerminalPart::Ws, Some(container)) => {
            let grant = grants.grant(id, container, &principal, token, peer)?;
            Some(grants.grant_handle(&grant)?)
        }
        _ => None,
    };
    tracing::info!(target: "audit", session = %id, sub, decision = "allow", reason, "authz");
    Ok(Allowed {
        upstream,
        path: ttyd_path(route, part),
        query: ttyd_query(route, part, handle.as_deref()),
        arg: route.arg().map(str::to_owned),
        handle,
        // ttyd (`-H`) is told who types: the peer, never the owner.
        user: if peer {
            policy::peer::terminal_user(sub)
        } else {
            sub.to_owned()
        },
        reason,
    })
}

/// The ttyd a route's terminal is at: the route's own address, or the deployment's
/// pool (`gateway.ttyd_upstreams`, else `ttyd.socket`), as the gateway picks it.
fn upstream_of(grants: &Grants, route: &Route) -> Option<String> {
    let key = NEXT.fetch_add(1, Ordering::Relaxed);
    if let Some(address) = &route.upstream {
        return Some(match address.pick(key)? {
            TtydAddr::Unix(path) => format!("unix:{path}"),
            TtydAddr::Tcp(addr) => addr.to_owned(),
            // A front proxy holds no gateway certificate: a pool on another host is
            // opened through a gateway only.
            TtydAddr::Tls(_) => return None,
        });
    }
    let pool = &grants.config().gateway.ttyd_upstreams;
    if pool.is_empty() {
        let socket = grants.config().resolve(&grants.config().ttyd.socket);
        return Some(format!("unix:{}", socket.to_str()?));
    }
    let i = usize::try_from(key % pool.len() as u64).ok()?;
    let addr = pool.get(i)?;
    parse_addr(addr).ok().map(|_| addr.clone())
}

/// The path sent to ttyd: its base path and the part's path, as the gateway sends it.
fn ttyd_path(route: &Route, part: TerminalPart) -> String {
    let base = route.upstream.as_ref().map_or("", |a| a.base_path.as_str());
    format!("{base}{}", part.upstream_path())
}

/// The query sent to ttyd: for a Docker session's websocket `arg=<container>`, as the
/// gateway sends it, then the grant's handle as a second `arg` (`ttyd-attach
/// <container> <handle>`); nothing otherwise. Both are hex, URL-safe as they are, and
/// short: ttyd drops a query argument of 252 bytes or more, and every one after it.
fn ttyd_query(route: &Route, part: TerminalPart, handle: Option<&str>) -> String {
    match (part, route.arg(), handle) {
        (TerminalPart::Ws, Some(arg), Some(handle)) => format!("arg={arg}&arg={handle}"),
        (TerminalPart::Ws, Some(arg), None) => format!("arg={arg}"),
        _ => String::new(),
    }
}

/// How a proxy that dials by address spells an upstream (Caddy: `unix//path`).
fn dial(upstream: &str) -> String {
    match upstream.strip_prefix("unix:") {
        Some(path) => format!("unix/{path}"),
        None => upstream.to_owned(),
    }
}

/// `/v1/authz` (nginx, Caddy, Traefik: `GET` or `HEAD`) and `/v1/authz/<original
/// path>` (Envoy, with the original method, judged as the terminal's own method is).
pub(super) fn handle(
    control: Arc<Control>,
    req: Request<Incoming>,
    rest: &[&str],
) -> Result<Reply, ApiError> {
    let method = req.method().clone();
    if rest.is_empty() && method != Method::GET && method != Method::HEAD {
        return Err(not_allowed());
    }
    authz(&control, &req, !rest.is_empty())
}

/// The check: 200 with the answer in `X-Termgate-*` headers and no body, or the
/// refusal as everywhere else. A 401 carries `WWW-Authenticate` (nginx passes it on);
/// for a browser's page navigation it is a 302 to `control.authz_sign_in_url`.
fn authz(control: &Control, req: &Request<Incoming>, envoy: bool) -> Result<Reply, ApiError> {
    let h = req.headers();
    let one = |name: &str| h.get(name).map(HeaderValue::as_bytes);
    let cookies: Vec<&[u8]> = h
        .get_all(hyper::header::COOKIE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    // Envoy names the original request by the check's own path and method; the others
    // by headers, nginx's first (the snippet sets it; a client's X-Forwarded-Uri through
    // nginx never wins over it).
    let envoy_uri = req
        .uri()
        .path_and_query()
        .and_then(|pq| pq.as_str().strip_prefix("/v1/authz"))
        .map(str::as_bytes);
    let (uri, method) = if envoy {
        (envoy_uri, Some(req.method().as_str().as_bytes()))
    } else {
        (
            one("x-original-uri").or_else(|| one("x-forwarded-uri")),
            one("x-original-method").or_else(|| one("x-forwarded-method")),
        )
    };
    let asked = AuthzRequest {
        uri,
        method,
        origin: one("origin"),
        authorization: one("authorization"),
        cookies: &cookies,
    };
    let allowed = match authorize(&control.grants, &asked) {
        Ok(allowed) => allowed,
        Err(refusal) if refusal.status == 401 && is_page_navigation(h) => {
            return Ok(sign_in(control, uri.unwrap_or(b"/")));
        }
        Err(refusal) => return Err(refusal),
    };
    let mut reply = empty(200);
    let headers = reply.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        // Every value comes from the store or a verified token; one that is not a valid
        // header value fails the request rather than being altered.
        let v = HeaderValue::from_str(value).map_err(|_| ApiError::INTERNAL)?;
        headers.insert(name, v);
        Ok::<(), ApiError>(())
    };
    let uri = match allowed.query.as_str() {
        "" => allowed.path.clone(),
        q => format!("{}?{q}", allowed.path),
    };
    set("x-termgate-upstream", &allowed.upstream)?;
    set("x-termgate-dial", &dial(&allowed.upstream))?;
    set("x-termgate-uri", &uri)?;
    set("x-termgate-path", &allowed.path)?;
    set("x-termgate-user", &allowed.user)?;
    set("x-termgate-reason", allowed.reason)?;
    // Caddy and Traefik copy named headers only when present; every one is answered so
    // that a client's copy never stands in for a missing one.
    let kind = if allowed.handle.is_some() {
        "attach"
    } else {
        "plain"
    };
    set("x-termgate-kind", kind)?;
    set("x-termgate-arg", allowed.arg.as_deref().unwrap_or(""))?;
    set("x-termgate-handle", allowed.handle.as_deref().unwrap_or(""))?;
    set("cache-control", "no-store")?;
    Ok(reply)
}

/// Whether a request is a browser's page navigation, the one kind a missing credential
/// answers with a redirect to sign in: it accepts HTML, asks for no upgrade, and is no
/// script's request (`X-Requested-With`, `Sec-Fetch-Mode` other than `navigate`).
fn is_page_navigation(h: &hyper::HeaderMap) -> bool {
    let has = |name: &str| h.contains_key(name);
    let accepts_html = h.get_all(hyper::header::ACCEPT).iter().any(|v| {
        v.as_bytes()
            .windows(9)
            .any(|w| w.eq_ignore_ascii_case(b"text/html"))
    });
    let navigates = h
        .get("sec-fetch-mode")
        .is_none_or(|m| m.as_bytes().eq_ignore_ascii_case(b"navigate"));
    accepts_html && navigates && !has("upgrade") && !has("x-requested-with")
}

/// The 302 to sign in, with the terminal's path (never its query) to come back to.
fn sign_in(control: &Control, uri: &[u8]) -> Reply {
    let path = uri.split(|b| *b == b'?').next().unwrap_or_default();
    let next: String = url_encode(path);
    let to = &control.config().control.authz_sign_in_url;
    let mut reply = empty(302);
    if let Ok(v) = HeaderValue::from_str(&format!("{to}?next={next}")) {
        reply.headers_mut().insert(hyper::header::LOCATION, v);
    }
    reply
        .headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    reply
}

/// Percent-encodes everything but unreserved characters and `/`.
fn url_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET /v1/grant?wait=<seconds>` with the grant in `X-Termgate-Grant`: the pool's
/// `ttyd-attach` asks whether its terminal may stay open. 200 `{"open":true}` when it
/// may (after up to `wait` seconds, at most 60, with no change that ends it); 410 with
/// the reason's code (`route_removed`, `user_locked`, `signed_out`, …) as soon as it
/// may not; 403 `grant_invalid` for a grant not sealed here. With `X-Termgate-Handle`
/// instead, the handle is exchanged once for its grant, answered as
/// `{"open":true,"grant":"…"}`. Needs no other credential: a grant only ever learns
/// whether its own terminal is still allowed.
pub(super) async fn grant(
    control: Arc<Control>,
    req: Request<Incoming>,
) -> Result<Reply, ApiError> {
    if req.method() != Method::GET {
        return Err(not_allowed());
    }
    let wait = super::http::query_param(&req, "wait")
        .unwrap_or("0")
        .parse::<u64>()
        .map_err(|_| ApiError::INVALID_QUERY.with_message("wait must be seconds"))?;
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let (text, redeemed) = match (header("x-termgate-grant"), header("x-termgate-handle")) {
        (Some(grant), _) => (grant.to_owned(), false),
        (None, Some(handle)) => (control.grants.redeem_handle(handle)?, true),
        (None, None) => return Err(Refusal::GRANT_INVALID),
    };
    let wait = std::time::Duration::from_secs(wait.min(MAX_GRANT_WAIT));
    match control.grants.watch_grant(&text, wait).await? {
        None if redeemed => Ok(super::http::json(
            200,
            &serde_json::json!({ "open": true, "grant": text }),
        )),
        None => Ok(super::http::json(200, &serde_json::json!({ "open": true }))),
        Some(lapse) => Err(Refusal {
            status: 410,
            code: lapse.as_str(),
            message: lapse.sentence().into(),
        }),
    }
}

/// Longest a grant watcher may ask to wait, seconds.
const MAX_GRANT_WAIT: u64 = 60;

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
        assert_eq!(ttyd_path(&docker, TerminalPart::Ws), "/ws");
        assert_eq!(ttyd_query(&docker, TerminalPart::Ws, None), "arg=c0ffee");
        assert_eq!(
            ttyd_query(&docker, TerminalPart::Ws, Some("h0123")),
            "arg=c0ffee&arg=h0123"
        );
        assert_eq!(ttyd_path(&docker, TerminalPart::Page), "/");
        assert_eq!(ttyd_query(&docker, TerminalPart::Page, Some("g")), "");
        assert_eq!(ttyd_path(&docker, TerminalPart::Token), "/token");
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
        assert_eq!(ttyd_path(&target, TerminalPart::Ws), "/lab/ws");
        assert_eq!(ttyd_query(&target, TerminalPart::Ws, None), "");
    }

    #[test]
    fn control_admits_as_the_shared_table_says() {
        for case in policy::terminal_access::cases() {
            let Some(expected) = case.admit else { continue };
            let locked = case.is_locked(case.principal.sub.as_str());
            let got = decide(
                &case.principal,
                case.route.as_ref(),
                locked,
                case.now,
                |owner| Ok(case.is_locked(owner)),
            )
            .unwrap();
            assert_eq!(
                policy::terminal_access::named(got),
                expected,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn caddy_dials_a_unix_socket_as_unix_slash_slash() {
        assert_eq!(dial("unix:/run/tg/ttyd.sock"), "unix//run/tg/ttyd.sock");
        assert_eq!(dial("10.0.0.5:7681"), "10.0.0.5:7681");
    }

    #[test]
    fn only_a_browsers_page_navigation_is_sent_to_sign_in() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = hyper::HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_static(v));
            }
            h
        };
        let page = [("accept", "text/html,application/xhtml+xml,*/*;q=0.8")];
        assert!(is_page_navigation(&headers(&page)));
        assert!(is_page_navigation(&headers(&[
            page[0],
            ("sec-fetch-mode", "navigate")
        ])));
        assert!(!is_page_navigation(&headers(&[("accept", "*/*")])));
        assert!(!is_page_navigation(&headers(&[
            page[0],
            ("upgrade", "websocket")
        ])));
        assert!(!is_page_navigation(&headers(&[
            page[0],
            ("x-requested-with", "XMLHttpRequest")
        ])));
        assert!(!is_page_navigation(&headers(&[
            page[0],
            ("sec-fetch-mode", "cors")
        ])));
    }

    #[test]
    fn the_return_path_is_percent_encoded() {
        assert_eq!(url_encode(b"/s/abc/"), "/s/abc/");
        assert_eq!(url_encode(b"/s/a b&c"), "/s/a%20b%26c");
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

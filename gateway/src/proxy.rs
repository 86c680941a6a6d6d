//! The request path, as a row of Pingora phases that reads like DESIGN §2:
//! parse the path → authenticate → check Origin → look the route up → decide → rewrite
//! → proxy. Each phase calls a pure function from `policy` for its decision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::lb::{selection::RoundRobin, LoadBalancer};
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorType, Result};
use policy::feed::Route;
use policy::{
    Action, CredentialSource, Decision, Denial, PathError, Principal, PublicRoute, SessionId,
    TerminalPart,
};

use crate::routes::Lookup;
use crate::state::{now, Gateway};
use crate::terminals::{LimitHit, Ticket};
use crate::ui;

/// Where ttyd is.
pub enum TtydUpstream {
    /// A unix socket (single host).
    Unix(String),
    /// Internal addresses, balanced with health checks.
    Tcp(Arc<LoadBalancer<RoundRobin>>),
}

/// The gateway's `ProxyHttp`.
pub struct Proxy {
    /// Shared state.
    pub g: Arc<Gateway>,
    /// The ttyd pool.
    pub ttyd: TtydUpstream,
    /// Address of control.
    pub control_addr: String,
}

/// Where an allowed request goes.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// control, at this path and query.
    Control(String),
    /// ttyd, for this container and part.
    Ttyd {
        /// Container id (ttyd's `arg`).
        container: String,
        /// Page, token or websocket.
        part: TerminalPart,
    },
}

/// Per-request state.
pub struct Ctx {
    request_id: u64,
    started: Instant,
    principal: Option<Principal>,
    token: Option<String>,
    session: Option<SessionId>,
    upstream: Option<Upstream>,
    decision: &'static str,
    reason: &'static str,
    terminal_request: bool,
    ticket: Option<Ticket>,
    /// The browser's socket has been handed to the ticket (after the 101).
    downstream_attached: bool,
    body_bytes: usize,
    bytes_up: u64,
    bytes_down: u64,
}

static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

/// How long a failed authentication past `auth_failures_per_minute` waits for its 429.
const REFUSAL_PAUSE: Duration = Duration::from_millis(100);

/// Answers a JSON error and returns `Ok(true)` (request handled).
async fn reply_json(
    session: &mut Session,
    status: u16,
    body: Vec<u8>,
    extra: &[(&'static str, String)],
) -> Result<bool> {
    let mut h = ResponseHeader::build(status, Some(4 + extra.len()))?;
    h.insert_header("Content-Type", "application/json")?;
    h.insert_header("Content-Length", body.len().to_string())?;
    h.insert_header("Cache-Control", "no-store")?;
    for (k, v) in extra {
        h.append_header(*k, v.as_str())?;
    }
    session.write_response_header(Box::new(h), false).await?;
    session
        .write_response_body(Some(Bytes::from(body)), true)
        .await?;
    Ok(true)
}

async fn reply_error(
    session: &mut Session,
    ctx: &mut Ctx,
    status: u16,
    code: &'static str,
    message: &str,
) -> Result<bool> {
    ctx.decision = "deny";
    ctx.reason = code;
    if wants_html(session.req_header()) {
        return crate::ui::error_page(session, status, code, message).await;
    }
    reply_json(
        session,
        status,
        policy::ErrorBody::new(code, message).to_json(),
        &[],
    )
    .await
}

/// A browser navigating to a page (not a script, not a websocket) gets an HTML error
/// page; everything else gets the JSON shape. Both say the same thing.
fn wants_html(req: &RequestHeader) -> bool {
    req.method == "GET"
        && header(req, "upgrade").is_none()
        && !req.uri.path().starts_with("/api/")
        && header(req, "accept").is_some_and(|a| a.windows(9).any(|w| w == b"text/html"))
}

fn header<'a>(req: &'a RequestHeader, name: &str) -> Option<&'a [u8]> {
    req.headers.get(name).map(|v| v.as_bytes())
}

/// The token of an `Authorization: Bearer` header.
fn bearer(req: &RequestHeader) -> Option<&[u8]> {
    let v = header(req, "authorization")?.trim_ascii();
    (v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ")).then(|| v[7..].trim_ascii())
}

/// The credential of a request: a bearer header wins over the cookie. Never the query.
fn credential(req: &RequestHeader, cookie_name: &str) -> Option<(Vec<u8>, CredentialSource)> {
    if let Some(token) = bearer(req) {
        return Some((token.to_vec(), CredentialSource::Bearer));
    }
    for value in req.headers.get_all("cookie") {
        for pair in value.as_bytes().split(|b| *b == b';') {
            let pair = pair.trim_ascii();
            if let Some(rest) = pair.strip_prefix(cookie_name.as_bytes()) {
                if let Some(token) = rest.strip_prefix(b"=") {
                    return Some((token.to_vec(), CredentialSource::Cookie));
                }
            }
        }
    }
    None
}

/// The client's address, the key of the failed-authentication limit: the peer, or
/// behind a configured trusted proxy the address it forwards (unix-socket clients share
/// one key).
fn client_ip(session: &Session, trusted: &policy::TrustedProxies) -> std::net::IpAddr {
    let peer = session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    if trusted.is_empty() {
        return peer;
    }
    let forwarded = session
        .req_header()
        .headers
        .get_all("x-forwarded-for")
        .into_iter()
        .map(|v| v.as_bytes());
    trusted.client(peer, forwarded)
}

impl Proxy {
    /// Authenticates the request, answering 401/429 itself on failure.
    async fn authenticate(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
    ) -> Result<Option<(Principal, CredentialSource)>> {
        let g = &self.g;
        let Some((token, source)) = credential(session.req_header(), &g.config.auth.cookie_name)
        else {
            crate::metrics::Metrics::inc(&g.metrics.auth_failures, "missing");
            reply_error(
                session,
                ctx,
                401,
                "unauthenticated",
                "sign in first: no token or session cookie",
            )
            .await?;
            return Ok(None);
        };
        Ok(self.verify(session, ctx, token).await?.map(|p| (p, source)))
    }

    /// Verifies a presented token. Only failures count against the client's address:
    /// past `auth_failures_per_minute` a failure is answered 429 instead of 401, and a
    /// valid token is never refused by that limit (one address may be many users behind
    /// a proxy).
    async fn verify(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        token: Vec<u8>,
    ) -> Result<Option<Principal>> {
        let g = &self.g;
        match g.verifier.verify(&token, now()) {
            Ok(p) => {
                ctx.token = String::from_utf8(token).ok();
                Ok(Some(p))
            }
            Err(e) => {
                crate::metrics::Metrics::inc(&g.metrics.auth_failures, e.reason());
                let ip = client_ip(session, &g.trusted_proxies);
                let failures = g.auth_failures.observe(&ip, 1);
                let limit = isize::try_from(g.config.gateway.auth_failures_per_minute)
                    .unwrap_or(isize::MAX);
                tracing::info!(target: "audit", decision = "deny", reason = e.reason(), client = %ip, "token refused");
                if failures > limit {
                    // A short pause before the refusal throttles each guessing
                    // connection to a few attempts a second without costing CPU, so a
                    // flood cannot slow everyone else down.
                    tokio::time::sleep(REFUSAL_PAUSE).await;
                    reply_error(
                        session,
                        ctx,
                        429,
                        "too_many_failures",
                        "too many failed sign-ins from this address; wait a minute",
                    )
                    .await?;
                } else {
                    let msg = format!("token refused: {}", e.reason());
                    reply_error(session, ctx, 401, "unauthenticated", &msg).await?;
                    ctx.reason = e.reason();
                }
                Ok(None)
            }
        }
    }

    /// The route of a session: cache, or one bounded lookup at control.
    async fn route(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        id: &SessionId,
        sub: &str,
    ) -> Result<Option<Option<Route>>> {
        let g = &self.g;
        match g.routes.get(id) {
            Lookup::Hit(r) => Ok(Some(Some(r))),
            Lookup::Negative => Ok(Some(None)),
            Lookup::Miss => {
                let limit = isize::try_from(g.config.gateway.lookup_misses_per_minute)
                    .unwrap_or(isize::MAX);
                if g.lookups.observe(&sub, 1) > limit {
                    // Past the limit, unknown ids are not asked about; they get the
                    // answer an unknown id gets, so the limit tells nothing apart.
                    return Ok(Some(None));
                }
                match g.control.lookup(id).await {
                    Ok(l) => {
                        g.routes
                            .learn(*id, l.route, l.owner_locked, l.rev, &l.epoch);
                        // The cache's view after learning: an answer older than what
                        // the feed already said was dropped, and the feed knows better.
                        Ok(Some(match g.routes.get(id) {
                            Lookup::Hit(r) => Some(r),
                            Lookup::Negative | Lookup::Miss => None,
                        }))
                    }
                    Err(e) => {
                        tracing::warn!(session = %id, error = %e, "route lookup failed");
                        reply_error(
                            session,
                            ctx,
                            503,
                            "control_unavailable",
                            "the control service is not answering; try again shortly",
                        )
                        .await?;
                        Ok(None)
                    }
                }
            }
        }
    }

    async fn terminal(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        id: SessionId,
        part: TerminalPart,
    ) -> Result<bool> {
        let g = Arc::clone(&self.g);
        ctx.terminal_request = true;
        ctx.session = Some(id);
        let method = &session.req_header().method;
        if method != "GET" && method != "HEAD" {
            return reply_error(
                session,
                ctx,
                405,
                "method_not_allowed",
                "terminals accept GET only",
            )
            .await;
        }
        let req = session.req_header();
        let declares_body = header(req, "transfer-encoding").is_some()
            || header(req, "content-length").is_some_and(|v| v.trim_ascii() != b"0");
        if declares_body {
            // ttyd never needs a request body; nothing unexpected is relayed to it.
            return reply_error(
                session,
                ctx,
                400,
                "body_not_allowed",
                "terminal requests carry no body",
            )
            .await;
        }
        let Some((principal, source)) = self.authenticate(session, ctx).await? else {
            return Ok(true);
        };
        ctx.principal = Some(principal.clone());
        if part == TerminalPart::Ws {
            if let Err(denied) = g
                .origins
                .check(header(session.req_header(), "origin"), source)
            {
                return reply_error(session, ctx, 403, denied.reason(), &denied.to_string()).await;
            }
        }
        let sub = principal.sub.as_str();
        let Some(route) = self.route(session, ctx, &id, sub).await? else {
            return Ok(true);
        };
        let locked = g.routes.is_locked(sub);
        match policy::decide(
            &principal,
            route.as_ref().map(|r| r.owner.as_str()),
            locked,
            Action::OpenTerminal,
        ) {
            Decision::Deny(d) => {
                let Denial {
                    status,
                    code,
                    message,
                } = d;
                reply_error(session, ctx, status, code, message).await
            }
            Decision::Allow { as_admin } => {
                let Some(route) = route else {
                    return reply_error(
                        session,
                        ctx,
                        404,
                        Denial::NOT_FOUND.code,
                        Denial::NOT_FOUND.message,
                    )
                    .await;
                };
                if part == TerminalPart::Ws {
                    let expires = g
                        .config
                        .gateway
                        .close_on_token_expiry
                        .then_some(principal.expires_at);
                    let credential =
                        g.credential_key(ctx.token.as_deref().unwrap_or_default().as_bytes());
                    match g.terminals.admit(id, sub, expires, credential) {
                        Ok(t) => {
                            // Re-check after taking the slot: a revocation applied to
                            // the cache before this point is seen here; one applied
                            // after it finds the slot registered and closes it.
                            let still = matches!(g.routes.get(&id), Lookup::Hit(r) if r == route);
                            if !still || g.routes.is_locked(sub) {
                                drop(t);
                                let d = if still {
                                    Denial::LOCKED
                                } else {
                                    Denial::NOT_FOUND
                                };
                                return reply_error(session, ctx, d.status, d.code, d.message)
                                    .await;
                            }
                            ctx.ticket = Some(t)
                        }
                        Err(LimitHit::User) => {
                            return reply_error(
                                session,
                                ctx,
                                429,
                                "too_many_terminals",
                                "you have too many open terminals",
                            )
                            .await
                        }
                        Err(LimitHit::Session) => {
                            return reply_error(
                                session,
                                ctx,
                                429,
                                "too_many_terminals",
                                "this session has too many open terminals",
                            )
                            .await
                        }
                    }
                }
                ctx.decision = "allow";
                ctx.reason = if as_admin { "admin" } else { "owner" };
                ctx.upstream = Some(Upstream::Ttyd {
                    container: route.container,
                    part,
                });
                Ok(false)
            }
        }
    }

    async fn api(&self, session: &mut Session, ctx: &mut Ctx, rest: &str) -> Result<bool> {
        let g = Arc::clone(&self.g);
        let Some((principal, source)) = self.authenticate(session, ctx).await? else {
            return Ok(true);
        };
        let req = session.req_header();
        let unsafe_method = !matches!(req.method.as_str(), "GET" | "HEAD" | "OPTIONS");
        if source == CredentialSource::Cookie && unsafe_method {
            // Defence in depth next to SameSite=Strict: a cookie-borne change must come
            // from an allowed page.
            if let Err(denied) = g.origins.check(header(req, "origin"), source) {
                return reply_error(session, ctx, 403, denied.reason(), &denied.to_string()).await;
            }
        }
        let declared = header(req, "content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > g.config.gateway.max_body_bytes) {
            return reply_error(
                session,
                ctx,
                413,
                "body_too_large",
                "request body is too large",
            )
            .await;
        }
        let query = req.uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        ctx.principal = Some(principal);
        ctx.decision = "allow";
        ctx.reason = "api";
        ctx.upstream = Some(Upstream::Control(format!("/v1/{rest}{query}")));
        Ok(false)
    }

    /// `/auth/session`: GET who am I, POST sign in (sets the cookie), DELETE sign out.
    async fn auth_session(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let g = Arc::clone(&self.g);
        let method = session.req_header().method.as_str().to_owned();
        if let Some(origin) = header(session.req_header(), "origin") {
            // A sign-in posted from another site would log the victim into the attacker's account.
            if let Err(denied) = g.origins.check(Some(origin), CredentialSource::Cookie) {
                return reply_error(session, ctx, 403, denied.reason(), &denied.to_string()).await;
            }
        }
        let cookie = &g.config.auth.cookie_name;
        let secure = if g.secure_cookie { "; Secure" } else { "" };
        match method.as_str() {
            "DELETE" => {
                ctx.decision = "allow";
                ctx.reason = "sign_out";
                // Signing out also closes the terminals this credential opened here.
                if let Some((token, _)) = credential(session.req_header(), cookie) {
                    let n = g.terminals.close_credential(g.credential_key(&token));
                    if n > 0 {
                        tracing::info!(target: "audit", closed = n, reason = "signed_out", "live terminals closed");
                        g.count_closed(crate::terminals::CloseReason::SignedOut, n);
                    }
                }
                let clear =
                    format!("{cookie}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{secure}");
                reply_json(
                    session,
                    200,
                    br#"{"signed_in":false}"#.to_vec(),
                    &[("Set-Cookie", clear)],
                )
                .await
            }
            "GET" => {
                let Some((p, _)) = self.authenticate(session, ctx).await? else {
                    return Ok(true);
                };
                ctx.decision = "allow";
                ctx.reason = "whoami";
                let body = serde_json::json!({"sub": p.sub.as_str(), "admin": p.admin, "expires_at": p.expires_at});
                reply_json(
                    session,
                    200,
                    serde_json::to_vec(&body).unwrap_or_default(),
                    &[],
                )
                .await
            }
            "POST" => {
                let token = match bearer(session.req_header()).map(<[u8]>::to_vec) {
                    Some(t) => t,
                    _ => match self.read_body(session, 16 * 1024).await {
                        Ok(body) => match serde_json::from_slice::<SignIn>(&body) {
                            Ok(s) => s.token.into_bytes(),
                            Err(e) => {
                                return reply_error(
                                    session,
                                    ctx,
                                    400,
                                    "invalid_json",
                                    &format!("expected {{\"token\": \"…\"}}: {e}"),
                                )
                                .await
                            }
                        },
                        Err(413) => {
                            return reply_error(
                                session,
                                ctx,
                                413,
                                "body_too_large",
                                "request body is too large",
                            )
                            .await
                        }
                        Err(_) => {
                            return reply_error(
                                session,
                                ctx,
                                400,
                                "bad_body",
                                "could not read the request body",
                            )
                            .await
                        }
                    },
                };
                let Some(p) = self.verify(session, ctx, token).await? else {
                    return Ok(true);
                };
                ctx.decision = "allow";
                ctx.reason = "sign_in";
                ctx.principal = Some(p.clone());
                let max_age = p.expires_at.saturating_sub(now());
                let token = ctx.token.take().unwrap_or_default();
                let set = format!("{cookie}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}");
                let body = serde_json::json!({"sub": p.sub.as_str(), "admin": p.admin, "expires_at": p.expires_at});
                tracing::info!(target: "audit", sub = %p.sub, decision = "allow", reason = "sign_in", "signed in");
                reply_json(
                    session,
                    200,
                    serde_json::to_vec(&body).unwrap_or_default(),
                    &[("Set-Cookie", set)],
                )
                .await
            }
            _ => {
                reply_error(
                    session,
                    ctx,
                    405,
                    "method_not_allowed",
                    "use GET, POST or DELETE",
                )
                .await
            }
        }
    }

    /// Reads a small request body; `Err(413)` when it is larger than `limit`.
    async fn read_body(
        &self,
        session: &mut Session,
        limit: usize,
    ) -> std::result::Result<Vec<u8>, u16> {
        let mut body = Vec::new();
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > limit {
                        return Err(413);
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(body),
                Err(_) => return Err(400),
            }
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            request_id: REQUEST_IDS.fetch_add(1, Ordering::Relaxed),
            started: Instant::now(),
            principal: None,
            token: None,
            session: None,
            upstream: None,
            decision: "none",
            reason: "",
            terminal_request: false,
            ticket: None,
            downstream_attached: false,
            body_bytes: 0,
            bytes_up: 0,
            bytes_down: 0,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let header_bytes: usize = session
            .req_header()
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum();
        if header_bytes > self.g.config.gateway.max_request_header_bytes {
            return reply_error(
                session,
                ctx,
                431,
                "headers_too_large",
                "request headers are too large",
            )
            .await;
        }
        let path = session.req_header().uri.path().to_owned();
        match policy::classify(path.as_bytes()) {
            Err(PathError::BadRequest(why)) => {
                reply_error(session, ctx, 400, "bad_path", why).await
            }
            Err(PathError::NotFound) => {
                reply_error(session, ctx, 404, "not_found", "no such page").await
            }
            Ok(PublicRoute::Health) => {
                ctx.decision = "allow";
                reply_json(session, 200, br#"{"status":"ok"}"#.to_vec(), &[]).await
            }
            Ok(PublicRoute::Asset(name)) => {
                ctx.decision = "allow";
                ui::serve(session, name).await
            }
            Ok(PublicRoute::AuthSession) => self.auth_session(session, ctx).await,
            Ok(PublicRoute::Api(rest)) => {
                let rest = rest.to_owned();
                self.api(session, ctx, &rest).await
            }
            Ok(PublicRoute::Terminal { id, part }) => self.terminal(session, ctx, id, part).await,
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let mut peer = match &ctx.upstream {
            Some(Upstream::Control(_)) => {
                let mut p = HttpPeer::new(self.control_addr.as_str(), false, String::new());
                p.options.read_timeout = Some(Duration::from_secs(60));
                p
            }
            Some(Upstream::Ttyd { .. }) => match &self.ttyd {
                TtydUpstream::Unix(path) => HttpPeer::new_uds(path, false, String::new())?,
                TtydUpstream::Tcp(lb) => {
                    let backend =
                        lb.select(&ctx.request_id.to_le_bytes(), 256)
                            .ok_or_else(|| {
                                Error::explain(
                                    ErrorType::ConnectNoRoute,
                                    "no healthy ttyd upstream",
                                )
                            })?;
                    HttpPeer::new(backend, false, String::new())
                }
            },
            None => {
                return Err(Error::explain(
                    ErrorType::InternalError,
                    "no upstream chosen",
                ))
            }
        };
        peer.options.connection_timeout = Some(Duration::from_millis(
            self.g.config.gateway.control_timeout_ms,
        ));
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        up: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        // Nothing the client says about identity reaches an upstream.
        let drop: Vec<_> = up
            .headers
            .keys()
            .filter(|k| {
                let k = k.as_str();
                k == "cookie" || k == "authorization" || k.starts_with("x-termgate-")
            })
            .cloned()
            .collect();
        for k in drop {
            up.remove_header(&k);
        }
        match ctx.upstream.as_ref() {
            Some(Upstream::Ttyd { container, part }) => {
                let target = match part {
                    TerminalPart::Ws => format!("/ws?arg={container}"),
                    other => other.upstream_path().to_owned(),
                };
                up.set_uri(
                    target.parse().map_err(|_| {
                        Error::explain(ErrorType::InternalError, "bad upstream uri")
                    })?,
                );
                if *part != TerminalPart::Ws {
                    up.remove_header("upgrade");
                    up.remove_header("connection");
                }
                if let Some(p) = &ctx.principal {
                    up.insert_header("X-Termgate-User", p.sub.as_str())?;
                }
            }
            Some(Upstream::Control(path)) => {
                up.set_uri(
                    path.parse().map_err(|_| {
                        Error::explain(ErrorType::InternalError, "bad upstream uri")
                    })?,
                );
                up.remove_header("upgrade");
                up.remove_header("connection");
                if let Some(t) = &ctx.token {
                    up.insert_header("Authorization", format!("Bearer {t}"))?;
                }
            }
            None => {
                return Err(Error::explain(
                    ErrorType::InternalError,
                    "no upstream chosen",
                ))
            }
        }
        Ok(())
    }

    async fn connected_to_upstream(
        &self,
        _session: &mut Session,
        _reused: bool,
        _peer: &HttpPeer,
        fd: std::os::unix::io::RawFd,
        _digest: Option<&pingora::protocols::Digest>,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(t) = &ctx.ticket {
            t.attach_upstream(fd).map_err(|e| {
                Error::because(
                    ErrorType::InternalError,
                    "cannot keep the upstream socket for enforcement",
                    e,
                )
            })?;
        }
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(b) = body {
            ctx.bytes_up += b.len() as u64;
            if matches!(ctx.upstream, Some(Upstream::Control(_))) {
                ctx.body_bytes += b.len();
                if ctx.body_bytes > self.g.config.gateway.max_body_bytes {
                    return Err(Error::explain(
                        ErrorType::HTTPStatus(413),
                        "request body is too large",
                    ));
                }
            }
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        resp.insert_header("X-Request-Id", ctx.request_id.to_string())?;
        if ctx.terminal_request {
            resp.insert_header("X-Content-Type-Options", "nosniff")?;
            resp.insert_header("Referrer-Policy", "no-referrer")?;
            resp.insert_header("Content-Security-Policy", "frame-ancestors 'self'")?;
            resp.insert_header("Cache-Control", "no-store")?;
        }
        Ok(())
    }

    fn response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        _end: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        if let Some(b) = body {
            ctx.bytes_down += b.len() as u64;
        }
        if !ctx.downstream_attached {
            // The first bytes after the upgrade: the 101 has been written, so a close
            // frame from enforcement can no longer land inside the response head.
            if let Some(t) = &ctx.ticket {
                ctx.downstream_attached = true;
                let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
                if let (false, Some(stream)) = (tls, session.as_downstream().stream()) {
                    t.attach_downstream(stream.id());
                }
            }
        }
        Ok(None)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let (status, code, message) = match (e.etype(), &ctx.upstream) {
            (ErrorType::HTTPStatus(413), _) => (413, "body_too_large", "request body is too large"),
            (ErrorType::HTTPStatus(s), _) if *s >= 400 => (*s, "error", "request failed"),
            (_, Some(Upstream::Control(_))) if e.esource() == &pingora::ErrorSource::Upstream => (
                503,
                "control_unavailable",
                "the control service is not answering; try again shortly",
            ),
            (_, Some(Upstream::Ttyd { .. })) if e.esource() == &pingora::ErrorSource::Upstream => (
                502,
                "terminal_unavailable",
                "the terminal service is not answering",
            ),
            _ => match e.esource() {
                pingora::ErrorSource::Downstream => (0, "client_error", ""),
                _ => (502, "proxy_error", "the request could not be proxied"),
            },
        };
        ctx.reason = code;
        if status > 0 && session.response_written().is_none() {
            let _ = reply_json(
                session,
                status,
                policy::ErrorBody::new(code, message).to_json(),
                &[],
            )
            .await;
        }
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let sub = ctx
            .principal
            .as_ref()
            .map(|p| p.sub.as_str())
            .unwrap_or("-");
        let session_id = ctx
            .session
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into());
        let closed = ctx
            .ticket
            .as_ref()
            .and_then(|t| t.closed())
            .map(|r| r.as_str())
            .unwrap_or("");
        tracing::info!(
            target: "access",
            request_id = ctx.request_id,
            method = %session.req_header().method,
            path = %session.req_header().uri.path(),
            sub,
            session = %session_id,
            decision = ctx.decision,
            reason = ctx.reason,
            status,
            bytes_up = ctx.bytes_up,
            bytes_down = ctx.bytes_down,
            duration_ms = ctx.started.elapsed().as_millis() as u64,
            closed_by = closed,
            error = e.map(|e| e.to_string()).unwrap_or_default(),
            "request"
        );
        if ctx.terminal_request {
            tracing::info!(target: "audit", request_id = ctx.request_id, sub, session = %session_id, decision = ctx.decision, reason = ctx.reason, status, "terminal access");
            let m = &self.g.metrics;
            crate::metrics::Metrics::inc(
                &m.upgrades,
                if ctx.decision == "allow" {
                    "allow"
                } else {
                    ctx.reason
                },
            );
            m.bytes
                .get_or_create(&crate::metrics::Label { kind: "up" })
                .inc_by(ctx.bytes_up);
            m.bytes
                .get_or_create(&crate::metrics::Label { kind: "down" })
                .inc_by(ctx.bytes_down);
        }
        ctx.ticket = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> RequestHeader {
        let mut r = RequestHeader::build("GET", b"/s/x/ws", None).unwrap();
        for (k, v) in headers {
            r.append_header(k.to_string(), *v).unwrap();
        }
        r
    }

    #[test]
    fn bearer_wins_over_cookie_and_the_cookie_is_found_among_others() {
        let r = req(&[
            ("Cookie", "a=1; termgate_session=tok; b=2"),
            ("Authorization", "Bearer bt"),
        ]);
        assert_eq!(
            credential(&r, "termgate_session"),
            Some((b"bt".to_vec(), CredentialSource::Bearer))
        );
        let r = req(&[("Cookie", "a=1; termgate_session=tok; b=2")]);
        assert_eq!(
            credential(&r, "termgate_session"),
            Some((b"tok".to_vec(), CredentialSource::Cookie))
        );
    }

    #[test]
    fn similarly_named_cookies_and_other_schemes_are_not_credentials() {
        let r = req(&[
            ("Cookie", "termgate_session2=x; xtermgate_session=y"),
            ("Authorization", "Basic abc"),
        ]);
        assert_eq!(credential(&r, "termgate_session"), None);
    }
}

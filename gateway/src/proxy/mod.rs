//! The request path, as a row of Pingora phases that reads like design §2:
//! parse the path → authenticate → check Origin → look the route up → decide → rewrite
//! → proxy. Each phase calls a pure function from `policy` for its decision.
//!
//! The handlers ([`admission`] for terminals, [`api`] for the API and sign-in) answer
//! with values: what an allowed request does next, or the [`Refusal`] of a refused one.
//! Only [`ProxyHttp::request_filter`] writes those answers (through [`reply`]) and
//! records the decision for the logs — or, for a terminal mounted in another Pingora
//! proxy ([`crate::module`]), [`mounted`], through the same steps.

mod admission;
mod api;
mod credential;
pub(crate) mod mounted;
mod reply;
mod sign_in;
mod terminal;
mod upstream;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorType, Result};
use policy::{Principal, PublicRoute, Refusal, SessionId, TerminalPart};

pub use upstream::{ControlCall, TtydRequest, TtydUpstream, Upstream};

use crate::metrics::{Label, Metrics};
use crate::state::Gateway;
use crate::terminals::Ticket;
use crate::ui;
use crate::ws::{first_message, frames};
use reply::Json;

/// The gateway's `ProxyHttp`.
pub struct Proxy {
    /// Shared state.
    pub g: Arc<Gateway>,
    /// The ttyd pool.
    pub ttyd: TtydUpstream,
    /// Address of control.
    pub control_addr: String,
    /// Hooks that only debug builds honour, for tests.
    pub hooks: TestHooks,
}

/// Test hooks, read from the environment by debug builds only (release builds always
/// have none).
#[derive(Debug, Default, Clone, Copy)]
pub struct TestHooks {
    /// `TERMGATE_TEST_BODY_FILTER_DELAY_MS`: an await in `request_body_filter` before a
    /// terminal's upgrade, which makes Pingora's end-of-body race (cloudflare/pingora#946)
    /// near-certain on its own upgrade path.
    pub body_filter_delay: Option<Duration>,
    /// `TERMGATE_TEST_PINGORA_TUNNEL=1`: terminals take Pingora's own upgrade path
    /// (which shows cloudflare/pingora#946) instead of the gateway's tunnel.
    pub pingora_tunnel: bool,
    /// `TERMGATE_TEST_RECORD_ALL=1`: every terminal websocket is recorded (output), a
    /// target's too, so benchmarks compare the same ttyd recorded and not.
    pub record_all: bool,
}

impl TestHooks {
    /// The hooks set in the environment of a debug build; none in a release build.
    pub fn from_env() -> Self {
        if !cfg!(debug_assertions) {
            return TestHooks::default();
        }
        TestHooks {
            body_filter_delay: std::env::var("TERMGATE_TEST_BODY_FILTER_DELAY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_millis),
            pingora_tunnel: std::env::var("TERMGATE_TEST_PINGORA_TUNNEL").is_ok_and(|v| v == "1"),
            record_all: std::env::var("TERMGATE_TEST_RECORD_ALL").is_ok_and(|v| v == "1"),
        }
    }
}

/// What the gateway decided about a request, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing yet (the request failed before a decision).
    None,
    /// Allowed: answered here or proxied.
    Allow,
    /// Refused.
    Deny,
}

impl Decision {
    /// The name logs and metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::None => "none",
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }
}

/// An allowed request: why it was allowed (for the logs), what happens next, and what
/// admission learnt of it; `request_filter` alone keeps these in `Ctx`.
struct Allowed {
    reason: &'static str,
    next: Next,
    /// The verified caller.
    principal: Option<Principal>,
    /// The verified token, passed on to control as a bearer header.
    token: Option<String>,
    /// A terminal websocket's slot among the open terminals.
    ticket: Option<Ticket>,
    /// The share link a viewer came through (its id, never its token).
    share: Option<String>,
}

impl Allowed {
    /// Allowed for `reason`, with nothing learnt of the caller.
    fn new(reason: &'static str, next: Next) -> Self {
        Allowed {
            reason,
            next,
            principal: None,
            token: None,
            ticket: None,
            share: None,
        }
    }
}

/// A refused request: the refusal to answer, and what the access and audit lines keep
/// of it.
struct Denied {
    refusal: Refusal,
    /// A finer reason than the refusal's code (why a token was refused); empty: none.
    reason: &'static str,
    /// The caller, when verified before the refusal.
    principal: Option<Principal>,
    /// The share link a viewer came through, when known before the refusal.
    share: Option<String>,
}

impl Denied {
    /// `refusal`, of a caller verified before it.
    fn of(refusal: Refusal, principal: Option<Principal>) -> Self {
        Denied {
            principal,
            ..Denied::from(refusal)
        }
    }
}

impl From<Refusal> for Denied {
    fn from(refusal: Refusal) -> Self {
        Denied {
            refusal,
            reason: "",
            principal: None,
            share: None,
        }
    }
}

/// What an allowed request does next.
enum Next {
    /// Goes on to an upstream.
    Proxy(Upstream),
    /// Is answered here with JSON.
    Reply(Json),
    /// Is answered with an embedded asset of the sessions page.
    Asset(String),
    /// Is answered with the admin console's page.
    AdminPage,
    /// Is answered with a redirect (sign-in through the identity provider).
    Redirect(reply::Redirect),
    /// Is answered with a share link's viewer page.
    ViewerPage,
}

/// Per-request state.
pub struct Ctx {
    request_id: u64,
    started: Instant,
    principal: Option<Principal>,
    /// The verified token, passed on to control as a bearer header.
    token: Option<String>,
    session: Option<SessionId>,
    upstream: Option<Upstream>,
    decision: Decision,
    reason: &'static str,
    terminal_request: bool,
    ticket: Option<Ticket>,
    /// The browser's socket has been handed to the ticket (after the 101).
    downstream_attached: bool,
    body_bytes: usize,
    /// A `ttyd -c` target's first message, until its token is written into it.
    first_message: Option<first_message::Pending>,
    /// The frame headers of a terminal websocket's upward bytes, read to bound each
    /// frame's size (`gateway.max_ws_frame_bytes`).
    frames: Option<frames::FrameSizes>,
    bytes_up: u64,
    bytes_down: u64,
    /// The terminal left Pingora for the gateway's own tunnel, which logs it.
    tunnelled: bool,
    /// Why the gateway's own tunnel could not open, for the access line.
    error: Option<String>,
    /// The share link a viewer came through (its id, never its token).
    share: Option<String>,
}

/// What the access line says of the request itself.
struct RequestLine {
    method: String,
    path: String,
    status: u16,
}

static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

/// The raw bytes of a request header, if present.
fn header<'a>(req: &'a RequestHeader, name: &str) -> Option<&'a [u8]> {
    req.headers.get(name).map(|v| v.as_bytes())
}

/// The size of the request's headers, as counted against `max_request_header_bytes`.
fn header_bytes(req: &RequestHeader) -> usize {
    req.headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum()
}

/// Tags an answer with its request id, and a terminal's with strict headers.
fn decorate(resp: &mut ResponseHeader, ctx: &Ctx) -> Result<()> {
    resp.insert_header("X-Request-Id", ctx.request_id.to_string())?;
    if ctx.terminal_request {
        resp.insert_header("X-Content-Type-Options", "nosniff")?;
        resp.insert_header("Referrer-Policy", "no-referrer")?;
        resp.insert_header("Content-Security-Policy", "frame-ancestors 'self'")?;
        resp.insert_header("Cache-Control", "no-store")?;
    }
    Ok(())
}

/// Answers a failure to proxy with the refusal it amounts to; whether the connection
/// may be reused.
async fn answer_failure(session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
    let Some(refusal) = reply::failure(e, ctx.upstream.as_ref()) else {
        ctx.reason = "client_error";
        return FailToProxy {
            error_code: 0,
            can_reuse_downstream: false,
        };
    };
    ctx.reason = refusal.code;
    if session.response_written().is_none() {
        if let Err(write) = reply::json(session, Json::refusal(&refusal)).await {
            tracing::debug!(error = %write, "could not answer a failure to proxy");
        }
    }
    FailToProxy {
        error_code: refusal.status,
        can_reuse_downstream: false,
    }
}

impl Proxy {
    /// The context left to Pingora once a terminal has gone to its own tunnel.
    fn new_ctx_tunnelled(&self) -> Ctx {
        Ctx {
            tunnelled: true,
            ..self.new_ctx()
        }
    }

    /// What every request's head must be, whatever its route: within
    /// `max_request_header_bytes`, one copy of the headers that must be unique, and one
    /// session cookie.
    fn check_head(&self, req: &RequestHeader) -> Result<(), Refusal> {
        let g = &self.g;
        if header_bytes(req) > g.config.gateway.max_request_header_bytes {
            return Err(Refusal::HEADERS_TOO_LARGE);
        }
        // One copy each, or the request means different things to different readers
        // (a proxy in front may read the other copy).
        for once in ["host", "authorization", "content-length"] {
            if req.headers.get_all(once).iter().nth(1).is_some() {
                return Err(Refusal::BAD_HEADERS);
            }
        }
        let cookies = req
            .headers
            .get_all("cookie")
            .into_iter()
            .map(|v| v.as_bytes());
        if policy::identity::session_cookie_is_ambiguous(cookies, &g.config.auth.cookie_name) {
            return Err(Refusal::BAD_HEADERS);
        }
        Ok(())
    }

    /// Admits a request for a terminal's page, token or websocket (design §2 steps 2–5).
    async fn admit_terminal(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        id: SessionId,
        part: TerminalPart,
    ) -> Result<Allowed, Denied> {
        ctx.terminal_request = true;
        ctx.session = Some(id);
        admission::terminal(&self.g, session, id, part).await
    }

    /// Parses the path and hands the request to the handler of its route.
    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Allowed, Denied> {
        let g = &self.g;
        self.check_head(session.req_header())?;
        let req = session.req_header();
        let upgrade = req.headers.contains_key("upgrade");
        // The request target as sent: the parsed URI makes a path even of a target
        // that is none (`GET s/x HTTP/1.1` reads as `/`).
        let raw = req.raw_path();
        let path = raw[..raw.iter().position(|b| *b == b'?').unwrap_or(raw.len())].to_vec();
        let route = policy::classify(&path).map_err(Refusal::from)?;
        if upgrade
            && !matches!(
                route,
                PublicRoute::Terminal {
                    part: TerminalPart::Ws,
                    ..
                } | PublicRoute::Share {
                    part: Some(TerminalPart::Ws),
                    ..
                }
            )
        {
            return Err(Refusal::BAD_UPGRADE.into());
        }
        match route {
            PublicRoute::Health => Ok(Allowed::new(
                "",
                Next::Reply(Json::new(200, br#"{"status":"ok"}"#.to_vec())),
            )),
            PublicRoute::Asset(name) => Ok(Allowed::new("", Next::Asset(name.to_owned()))),
            PublicRoute::AuthSession => api::auth_session(g, session).await,
            PublicRoute::Oidc(step) => sign_in::step(g, session, step).await,
            PublicRoute::Admin => admission::admin_page(g, session).await,
            PublicRoute::Api(rest) => api::api(g, session, rest).await,
            PublicRoute::Terminal { id, part } => self.admit_terminal(session, ctx, id, part).await,
            PublicRoute::Share { token, part } => {
                ctx.session = Some(token.session());
                ctx.terminal_request = part.is_some();
                admission::share(g, session, token, part).await
            }
        }
    }

    /// Carries out what an allowed request does next; whether it was answered here
    /// (`false`: it goes on to its upstream through Pingora).
    async fn go_on(&self, session: &mut Session, ctx: &mut Ctx, next: Next) -> Result<bool> {
        match next {
            Next::Proxy(upstream) => return self.proceed(session, ctx, upstream).await,
            Next::Reply(json) => reply::json(session, json).await?,
            Next::Asset(name) => {
                ui::serve(session, &name).await?;
            }
            Next::AdminPage => {
                ui::serve_admin(session).await?;
            }
            Next::Redirect(to) => reply::redirect(session, to).await?,
            Next::ViewerPage => {
                ui::serve_viewer(session).await?;
            }
        }
        Ok(true)
    }

    /// Sends an allowed request on to `upstream`: a terminal websocket through the
    /// gateway's own tunnel (answered here: `true`), anything else through Pingora
    /// (`false`).
    async fn proceed(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        mut upstream: Upstream,
    ) -> Result<bool> {
        if let Upstream::Ttyd(t) = &mut upstream {
            if self.hooks.record_all && t.record.is_off() {
                t.record = policy::feed::Recording::Output;
            }
        }
        if let Upstream::Ttyd(TtydRequest {
            auth_token: Some(token),
            ..
        }) = &upstream
        {
            ctx.first_message = Some(first_message::Pending::new(token.clone()));
        }
        let ws = matches!(
            &upstream,
            Upstream::Ttyd(TtydRequest {
                part: TerminalPart::Ws,
                ..
            })
        );
        if let Upstream::Ttyd(TtydRequest {
            part: TerminalPart::Ws,
            arg,
            ..
        }) = &upstream
        {
            // A Docker session's typing keeps it alive (idle_timeout_seconds);
            // a viewer's never reaches it.
            let clock = arg
                .as_ref()
                .and(ctx.session)
                .filter(|_| ctx.share.is_none());
            let clock = clock.map(|id| self.g.activity.clock(id));
            ctx.frames = Some(frames::FrameSizes::new(clock));
        }
        let recorded = matches!(&upstream, Upstream::Ttyd(t) if !t.record.is_off());
        ctx.upstream = Some(upstream);
        let own_tunnel = ws && !self.hooks.pingora_tunnel && terminal::eligible(session);
        if ws && recorded && !own_tunnel {
            // Only the gateway's own tunnel records (the test hook's Pingora
            // path cannot): refused rather than carried unrecorded.
            ctx.decision = Decision::Deny;
            ctx.reason = Refusal::RECORDING_UNAVAILABLE.code;
            reply::refusal(session, &Refusal::RECORDING_UNAVAILABLE).await?;
            return Ok(true);
        }
        if own_tunnel {
            if let Err(e) = terminal::open(self, session, ctx).await {
                ctx.reason = "";
                let failed = answer_failure(session, &e, ctx).await;
                tracing::debug!(error = %e, status = failed.error_code, "terminal tunnel failed to open");
                ctx.error = Some(e.to_string());
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// The peer of the upstream chosen in `ctx`, bounded in connecting.
    fn peer(&self, ctx: &Ctx) -> Result<Box<HttpPeer>> {
        let upstream = ctx.upstream.as_ref().ok_or_else(no_upstream)?;
        let mut peer = upstream.peer(&self.control_addr, &self.ttyd, ctx.request_id)?;
        if peer.options.connection_timeout.is_none() {
            peer.options.connection_timeout = Some(Duration::from_millis(
                self.g.config.gateway.control_timeout_ms,
            ));
        }
        Ok(Box::new(peer))
    }

    /// Writes the request's access line (and a terminal's audit line and metrics) with
    /// `status`, and frees its terminal slot: the request has ended.
    fn log_request(&self, session: &Session, ctx: &mut Ctx, status: u16, error: Option<&str>) {
        let line = RequestLine {
            method: session.req_header().method.to_string(),
            path: session.req_header().uri.path().to_owned(),
            status,
        };
        log(&self.g.metrics, &line, error, ctx);
        // The slot is freed when the request ends, not when the context is dropped.
        ctx.ticket = None;
    }
}

/// Keeps what admission learnt of an allowed request in `ctx`; what it does next.
fn keep_allowed(ctx: &mut Ctx, allowed: Allowed) -> Next {
    ctx.decision = Decision::Allow;
    ctx.reason = allowed.reason;
    ctx.principal = allowed.principal;
    ctx.token = allowed.token;
    ctx.ticket = allowed.ticket;
    ctx.share = allowed.share;
    allowed.next
}

/// Keeps what the access and audit lines say of a refused request in `ctx`; the
/// refusal to answer.
fn keep_denied(ctx: &mut Ctx, denied: Denied) -> Refusal {
    ctx.decision = Decision::Deny;
    // A handler may give a finer reason (why a token was refused).
    ctx.reason = if denied.reason.is_empty() {
        denied.refusal.code
    } else {
        denied.reason
    };
    ctx.principal = denied.principal;
    ctx.share = denied.share;
    denied.refusal
}

/// Answers a refusal. A refused websocket handshake ends its connection (RFC 6455
/// §4.1: the client fails it anyway); kept alive, a flood of them would hold one idle
/// connection each.
pub(crate) async fn refuse(session: &mut Session, refusal: &Refusal) -> Result<()> {
    if session.req_header().headers.contains_key("upgrade") {
        session.set_keepalive(None);
    }
    reply::refusal(session, refusal).await
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = Ctx;

    /// A fresh request: numbered, timed, nothing decided.
    fn new_ctx(&self) -> Ctx {
        Ctx {
            request_id: REQUEST_IDS.fetch_add(1, Ordering::Relaxed),
            started: Instant::now(),
            principal: None,
            token: None,
            session: None,
            upstream: None,
            decision: Decision::None,
            reason: "",
            terminal_request: false,
            ticket: None,
            downstream_attached: false,
            body_bytes: 0,
            first_message: None,
            frames: None,
            bytes_up: 0,
            bytes_down: 0,
            tunnelled: false,
            error: None,
            share: None,
        }
    }

    /// The head has been read whole: its deadline stops (`gateway.header_timeout_ms`).
    async fn early_request_filter(&self, session: &mut Session, _ctx: &mut Ctx) -> Result<()> {
        crate::head_deadline::head_done(session);
        Ok(())
    }

    /// Admits or refuses the request; answers it here unless it goes to an upstream.
    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        match self.admit(session, ctx).await {
            Ok(allowed) => {
                let next = keep_allowed(ctx, allowed);
                self.go_on(session, ctx, next).await
            }
            Err(denied) => {
                let refusal = keep_denied(ctx, denied);
                refuse(session, &refusal).await?;
                Ok(true)
            }
        }
    }

    /// Picks the peer of the chosen upstream.
    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        self.peer(ctx)
    }

    /// Rewrites the request for its upstream, with no identity but the verified one.
    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        up: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let upstream = ctx.upstream.as_ref().ok_or_else(no_upstream)?;
        upstream::prepare(up, upstream, ctx.principal.as_ref(), ctx.token.as_deref())
    }

    /// Hands a terminal websocket's upstream socket to its slot, so enforcement can cut
    /// it; a websocket whose socket cannot be kept is refused.
    async fn connected_to_upstream(
        &self,
        _session: &mut Session,
        _reused: bool,
        _peer: &HttpPeer,
        fd: std::os::unix::io::RawFd,
        _digest: Option<&pingora::protocols::Digest>,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let unenforceable = |cause| {
            Error::because(
                ErrorType::InternalError,
                "cannot keep the upstream socket for enforcement",
                cause,
            )
        };
        match (&ctx.ticket, &ctx.upstream) {
            (Some(t), _) => t.attach_upstream(fd).map_err(unenforceable),
            (
                None,
                Some(Upstream::Ttyd(TtydRequest {
                    part: TerminalPart::Ws,
                    ..
                })),
            ) => Err(unenforceable(std::io::Error::other(
                "the terminal websocket holds no slot",
            ))),
            (None, _) => Ok(()),
        }
    }

    /// Counts bytes up, bounds each websocket frame up a terminal and the body of API
    /// calls.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let (Some(delay), Some(_)) = (self.hooks.body_filter_delay, ctx.frames.as_ref()) {
            if ctx.bytes_up == 0 {
                tokio::time::sleep(delay).await;
            }
        }
        if ctx.frames.is_some() || ctx.first_message.is_some() {
            if let Some(b) = body.take() {
                // The same checks as a terminal's own tunnel makes.
                let max = self.g.config.gateway.max_ws_frame_bytes;
                *body = match terminal::upward(ctx, &b, max) {
                    Ok(Some(std::borrow::Cow::Owned(out))) => Some(Bytes::from(out)),
                    Ok(Some(std::borrow::Cow::Borrowed(_))) => Some(b),
                    Ok(None) => Some(Bytes::new()),
                    Err(why) => return Err(Error::explain(ErrorType::InvalidHTTPHeader, why)),
                };
            }
        }
        if let Some(b) = body {
            ctx.bytes_up += b.len() as u64;
            if matches!(ctx.upstream, Some(Upstream::Control(_))) {
                ctx.body_bytes += b.len();
                if ctx.body_bytes > self.g.config.gateway.max_body_bytes {
                    // Answered as `Refusal::BODY_TOO_LARGE` by `fail_to_proxy`.
                    return Err(Error::explain(
                        ErrorType::HTTPStatus(413),
                        "request body is too large",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Tags every answer with its request id, and terminal answers with strict headers.
    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        decorate(resp, ctx)
    }

    /// Counts bytes down; after the upgrade, hands the browser's socket to the slot.
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

    /// Answers a failure to proxy with the refusal it amounts to, in the JSON shape.
    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        answer_failure(session, e, ctx).await
    }

    /// Writes the access log line, and for terminals the audit line and metrics.
    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        if ctx.tunnelled {
            // The connection left Pingora; its tunnel logs the terminal when it ends.
            return;
        }
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let error = e.map(|e| e.to_string()).or_else(|| ctx.error.take());
        self.log_request(session, ctx, status, error.as_deref());
        crate::head_deadline::request_done(session);
    }
}

fn no_upstream() -> Box<Error> {
    Error::explain(ErrorType::InternalError, "no upstream chosen")
}

/// The access log line; for terminals also the audit line and metrics.
fn log(metrics: &Metrics, line: &RequestLine, error: Option<&str>, ctx: &Ctx) {
    let status = line.status;
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
    let decision = ctx.decision.as_str();
    // A share link's path is its token: the access line names the share instead.
    let path = match (&ctx.share, line.path.starts_with("/v/")) {
        (Some(share), true) => format!("/v/<share {share}>"),
        (None, true) => "/v/<token>".to_owned(),
        (_, false) => line.path.clone(),
    };
    tracing::info!(
        target: "access",
        request_id = ctx.request_id,
        method = %line.method,
        path = %path,
        sub,
        session = %session_id,
        decision,
        reason = ctx.reason,
        status,
        bytes_up = ctx.bytes_up,
        bytes_down = ctx.bytes_down,
        duration_ms = ctx.started.elapsed().as_millis() as u64,
        closed_by = closed,
        error = error.unwrap_or_default(),
        "request"
    );
    if let (Some(share), true) = (&ctx.share, ctx.terminal_request) {
        tracing::info!(target: "audit", request_id = ctx.request_id, viewer = sub, session = %session_id, share = %share, decision, reason = ctx.reason, status, "share view");
    }
    if ctx.terminal_request {
        tracing::info!(target: "audit", request_id = ctx.request_id, sub, session = %session_id, decision, reason = ctx.reason, status, "terminal access");
        let outcome = if ctx.decision == Decision::Allow {
            "allow"
        } else {
            ctx.reason
        };
        Metrics::inc(&metrics.upgrades, outcome);
        metrics
            .bytes
            .get_or_create(&Label { kind: "up" })
            .inc_by(ctx.bytes_up);
        metrics
            .bytes
            .get_or_create(&Label { kind: "down" })
            .inc_by(ctx.bytes_down);
    }
}

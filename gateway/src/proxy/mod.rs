//! The request path, as a row of Pingora phases that reads like design §2:
//! parse the path → authenticate → check Origin → look the route up → decide → rewrite
//! → proxy. Each phase calls a pure function from `policy` for its decision.
//!
//! The handlers ([`admission`] for terminals, [`api`] for the API and sign-in) answer
//! with values ([`outcome`]): what an allowed request does next, or the [`Refusal`](policy::Refusal)
//! of a refused one. Only [`ProxyHttp::request_filter`] writes those answers (through
//! [`reply`], in [`flow`]) and records the decision for the logs ([`request_log`]) — or,
//! for a terminal mounted in another Pingora proxy (the library's `Module`),
//! [`mounted`], through the same steps.
//!
//! - [`parts`]: `Proxy` and what it is made of;
//! - [`ctx`]: the per-request state, and where a terminal is;
//! - [`headers`]: reading a request's head, and the checks every head passes.

mod admission;
mod api;
mod cli_login;
mod credential;
mod ctx;
mod flow;
mod headers;
pub(crate) mod mounted;
mod outcome;
mod parts;
mod recording_link;
mod reply;
mod request_log;
mod sign_in;
mod terminal;
mod upstream;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, Result};

pub use ctx::{Ctx, Decision};
pub use parts::{Proxy, TestHooks};
pub(crate) use reply::refuse;
pub use upstream::{ControlCall, TtydRequest, TtydUpstream, Upstream};

use flow::answer_failure;
use upstream::no_upstream;

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = Ctx;

    /// A fresh request: numbered, timed, nothing decided.
    fn new_ctx(&self) -> Ctx {
        Ctx::new()
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
                let next = ctx.keep_allowed(allowed, &self.g.activity);
                self.go_on(session, ctx, next).await
            }
            Err(denied) => {
                let refusal = ctx.keep_denied(denied);
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
        ctx.attach_upstream(fd)
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
        self.check_body_up(body, ctx).await
    }

    /// Tags every answer with its request id, and terminal answers with strict headers.
    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        ctx.decorate(resp)
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
        ctx.attach_downstream(session);
        Ok(None)
    }

    /// Answers a failure to proxy with the refusal it amounts to, in the JSON shape.
    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        answer_failure(session, e, ctx).await
    }

    /// What Pingora's own error lines say of a request: a share or recording link's
    /// path is its token, so those name the route only.
    fn request_summary(&self, session: &Session, _ctx: &Ctx) -> String {
        let req = session.req_header();
        let path = req.uri.path();
        let shown = if path.starts_with("/v/") {
            "/v/<token>"
        } else if path.starts_with("/r/") {
            "/r/<token>"
        } else {
            return session.as_ref().request_summary();
        };
        format!("{} {shown}", req.method)
    }

    /// Writes the access log line, and for terminals the audit line and metrics.
    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        if ctx.terminal.is_tunnelled() {
            // The connection left Pingora; its tunnel logs the terminal when it ends.
            return;
        }
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let error = e.map(|e| e.to_string()).or_else(|| ctx.error.take());
        self.log_request(session, ctx, status, error.as_deref());
        crate::head_deadline::request_done(session);
    }
}

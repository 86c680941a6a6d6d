//! A request's way through the gateway's `request_filter`: its route's handler asked
//! ([`Proxy::admit`]), and what it allowed carried out — answered here, sent through the
//! gateway's own tunnel, or left to Pingora for its upstream; and the checks of the
//! bytes a request sends up.

use std::time::Duration;

use bytes::Bytes;
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, Session};
use pingora::{Error, ErrorType, Result};
use policy::{PublicRoute, Refusal, SessionId, TerminalPart};

use super::ctx::{Ctx, Decision, Terminal};
use super::headers::check_head;
use super::outcome::{Allowed, Denied, Next};
use super::parts::Proxy;
use super::reply::{self, Json};
use super::request_log::{log, RequestLine};
use super::upstream::{no_upstream, TtydRequest, Upstream};
use super::{admission, api, cli_login, recording_link, sign_in, terminal};
use crate::ui;

/// Answers a failure to proxy with the refusal it amounts to; whether the connection
/// may be reused.
pub(super) async fn answer_failure(session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
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
    /// Admits a request for a terminal's page, token or websocket (design §2 steps 2–5).
    pub(super) async fn admit_terminal(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        id: SessionId,
        part: TerminalPart,
    ) -> Result<Allowed, Denied> {
        ctx.terminal = Terminal::Requested;
        ctx.session = Some(id);
        admission::terminal(&self.g, session, id, part).await
    }

    /// Parses the path and hands the request to the handler of its route.
    pub(super) async fn admit(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
    ) -> Result<Allowed, Denied> {
        let g = &self.g;
        check_head(g, session.req_header())?;
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
            PublicRoute::CliLogin(step) => cli_login::step(g, session, step).await,
            PublicRoute::Admin => admission::admin_page(g, session).await,
            PublicRoute::Api(rest) => api::api(g, session, rest).await,
            PublicRoute::Terminal { id, part } => self.admit_terminal(session, ctx, id, part).await,
            PublicRoute::Share { token, part } => {
                ctx.session = Some(token.session());
                if part.is_some() {
                    ctx.terminal = Terminal::Requested;
                }
                admission::share(g, session, token, part).await
            }
            PublicRoute::Recording { token, cast } => {
                recording_link::recording(g, session, token, cast).await
            }
        }
    }

    /// Carries out what an allowed request does next; whether it was answered here
    /// (`false`: it goes on to its upstream through Pingora).
    pub(super) async fn go_on(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        next: Next,
    ) -> Result<bool> {
        match next {
            Next::Proxy(upstream) => return self.proceed(session, ctx, upstream).await,
            Next::Reply(json) => reply::json(session, json).await?,
            Next::Asset(name) => {
                ui::serve(session, &name, self.g.player.as_ref()).await?;
            }
            Next::AdminPage => {
                ui::serve_admin(session).await?;
            }
            Next::Redirect(to) => reply::redirect(session, to).await?,
            Next::ViewerPage => {
                ui::serve_viewer(session).await?;
            }
            Next::RecordingPage => {
                ui::serve_recording(session).await?;
            }
            Next::SignOutPage => {
                ui::serve_sign_out(session).await?;
            }
            Next::CliLoginPage => {
                ui::serve_cli_login(session).await?;
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
        let ws = matches!(
            &upstream,
            Upstream::Ttyd(TtydRequest {
                part: TerminalPart::Ws,
                ..
            })
        );
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
    pub(super) fn peer(&self, ctx: &Ctx) -> Result<Box<HttpPeer>> {
        let upstream = ctx.upstream.as_ref().ok_or_else(no_upstream)?;
        let pools = self.g.pool_tls.as_deref();
        let mut peer = upstream.peer(&self.control_addr, &self.ttyd, pools, ctx.request_id)?;
        if peer.options.connection_timeout.is_none() {
            peer.options.connection_timeout = Some(Duration::from_millis(
                self.g.config.gateway.control_timeout_ms,
            ));
        }
        Ok(Box::new(peer))
    }

    /// Counts bytes up, bounds each websocket frame up a terminal and the body of API
    /// calls.
    pub(super) async fn check_body_up(
        &self,
        body: &mut Option<Bytes>,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let (Some(delay), Some(_)) = (self.hooks.body_filter_delay, ctx.terminal.admitted()) {
            if ctx.bytes_up == 0 {
                tokio::time::sleep(delay).await;
            }
        }
        if ctx.terminal.admitted().is_some() {
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

    /// Writes the request's access line (and a terminal's audit line and metrics) with
    /// `status`, and frees its terminal slot: the request has ended.
    pub(super) fn log_request(
        &self,
        session: &Session,
        ctx: &mut Ctx,
        status: u16,
        error: Option<&str>,
    ) {
        let line = RequestLine {
            method: session.req_header().method.to_string(),
            path: session.req_header().uri.path().to_owned(),
            status,
        };
        log(&self.g.metrics, &line, error, ctx);
        // The slot is freed when the request ends, not when the context is dropped.
        ctx.terminal.free_slot();
    }
}

//! A terminal mounted in another Pingora proxy (the library's `Module`): the gateway's own
//! head checks, admission, tunnel and upstream rewrite, for a request whose path the
//! embedding proxy has stripped of its own prefix. Only the terminal routes exist here.

use pingora::prelude::HttpPeer;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use policy::{PublicRoute, Refusal, SessionId, TerminalPart};

use super::ctx::{Ctx, Decision};
use super::headers::check_head;
use super::outcome::{Allowed, Denied, Next};
use super::parts::Proxy;
use super::reply::refuse;
use super::terminal;
use super::upstream::{self, no_upstream};

/// A terminal request admitted by [`Proxy::admit_mounted`], waiting for
/// [`Proxy::serve_mounted`]. Holds what admission learnt, and for a websocket its slot
/// among the open terminals (freed if it is dropped unserved).
pub(crate) struct Admitted {
    ctx: Ctx,
    next: Next,
    /// The session asked for.
    pub(crate) session: SessionId,
    /// Page, token or websocket.
    pub(crate) part: TerminalPart,
}

impl Admitted {
    /// The verified user.
    pub(crate) fn sub(&self) -> Option<&str> {
        self.ctx.principal.as_ref().map(|p| p.sub.as_str())
    }
}

impl Proxy {
    /// Admits a terminal request at `path` (`/s/<id>/`, `/s/<id>/token` or
    /// `/s/<id>/ws`, the embedding proxy's prefix removed; a query is ignored), or
    /// says why not. A refusal is logged here, as the gateway logs its own.
    pub(crate) async fn admit_mounted(
        &self,
        session: &mut Session,
        path: &[u8],
    ) -> std::result::Result<Admitted, Refusal> {
        let mut ctx = Ctx::new();
        match self.mounted_admission(session, &mut ctx, path).await {
            Ok((id, part, allowed)) => Ok(Admitted {
                next: ctx.keep_allowed(allowed, &self.g.activity),
                ctx,
                session: id,
                part,
            }),
            Err(denied) => {
                let refusal = ctx.keep_denied(denied);
                self.log_request(session, &mut ctx, refusal.status, None);
                Err(refusal)
            }
        }
    }

    /// The checks of [`Proxy::admit_mounted`]: the head as every request's, the path
    /// one of a terminal's, an upgrade only on its websocket, then the terminal's own
    /// admission.
    async fn mounted_admission(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        path: &[u8],
    ) -> std::result::Result<(SessionId, TerminalPart, Allowed), Denied> {
        check_head(&self.g, session.req_header())?;
        let path = &path[..path.iter().position(|b| *b == b'?').unwrap_or(path.len())];
        let PublicRoute::Terminal { id, part } = policy::classify(path).map_err(Refusal::from)?
        else {
            return Err(Refusal::PAGE_NOT_FOUND.into());
        };
        if part != TerminalPart::Ws && session.req_header().headers.contains_key("upgrade") {
            return Err(Refusal::BAD_UPGRADE.into());
        }
        let allowed = self.admit_terminal(session, ctx, id, part).await?;
        Ok((id, part, allowed))
    }

    /// Serves an admitted terminal request. `None`: answered here — the websocket's
    /// tunnel runs (or why it could not open was answered). `Some(peer)`: the page or
    /// the token, for the embedding proxy to send to `peer`; the session's request head
    /// has been rewritten into the one ttyd gets (`upstream::prepare`).
    pub(crate) async fn serve_mounted(
        &self,
        session: &mut Session,
        admitted: Admitted,
    ) -> Result<Option<Box<HttpPeer>>> {
        let Admitted {
            mut ctx,
            next,
            part,
            ..
        } = admitted;
        if part == TerminalPart::Ws && !terminal::eligible(session) {
            // Only the gateway's own tunnel carries a terminal here: the embedding
            // proxy's body filters are not termgate's.
            ctx.decision = Decision::Deny;
            ctx.reason = Refusal::BAD_UPGRADE.code;
            refuse(session, &Refusal::BAD_UPGRADE).await?;
            self.log_request(session, &mut ctx, Refusal::BAD_UPGRADE.status, None);
            return Ok(None);
        }
        if self.go_on(session, &mut ctx, next).await? {
            if !ctx.terminal.is_tunnelled() {
                let status = session.response_written().map_or(0, |r| r.status.as_u16());
                let error = ctx.error.take();
                self.log_request(session, &mut ctx, status, error.as_deref());
            }
            return Ok(None);
        }
        if part == TerminalPart::Ws {
            return Err(Error::explain(
                ErrorType::InternalError,
                "a mounted terminal websocket must take the gateway's own tunnel",
            ));
        }
        let peer = self.peer(&ctx)?;
        // Logged under the path the client asked for; the embedding proxy answers it.
        self.log_request(session, &mut ctx, 0, None);
        let to = ctx.upstream.as_ref().ok_or_else(no_upstream)?;
        upstream::prepare(
            session.req_header_mut(),
            to,
            ctx.principal.as_ref(),
            ctx.token.as_deref(),
        )?;
        Ok(Some(peer))
    }
}

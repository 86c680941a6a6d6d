//! Per-request state (`Ctx`): what admission learnt and the access line says, and for a
//! terminal where it is ([`Terminal`]) — an admitted websocket's slot and what is read of
//! its bytes ([`TerminalCtx`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use policy::{Principal, Refusal, SessionId, TerminalPart};

use super::outcome::{Allowed, Denied, Next};
use super::upstream::{TtydRequest, Upstream};
use crate::activity::Activity;
use crate::terminals::Ticket;
use crate::ws::{first_message, frames};

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

/// Per-request state.
pub struct Ctx {
    pub(super) request_id: u64,
    pub(super) started: Instant,
    pub(super) principal: Option<Principal>,
    /// The verified token, passed on to control as a bearer header.
    pub(super) token: Option<String>,
    pub(super) session: Option<SessionId>,
    pub(super) upstream: Option<Upstream>,
    pub(super) decision: Decision,
    pub(super) reason: &'static str,
    pub(super) body_bytes: usize,
    pub(super) bytes_up: u64,
    pub(super) bytes_down: u64,
    /// Why the gateway's own tunnel could not open, for the access line.
    pub(super) error: Option<String>,
    /// The share link a viewer came through (its id, never its token).
    pub(super) share: Option<String>,
    /// Whether the request is a terminal's, and where its terminal is.
    pub(super) terminal: Terminal,
}

/// Where a request's terminal is. It only moves forward:
///
/// - `Absent` or `Requested` is set from the route, before admission decides;
/// - `Requested` → `Admitted` when admission gives a websocket its slot
///   ([`Ctx::keep_allowed`]), the one place a [`TerminalCtx`] is built;
/// - `Admitted` → `Attached` on Pingora's own upgrade path, at the first bytes after
///   the `101` ([`Ctx::attach_downstream`]);
/// - `Admitted` → the gateway's own tunnel: the context moves into the tunnel (still
///   `Admitted` there) and Pingora keeps a fresh `Tunnelled` one ([`Ctx::tunnelled`]);
/// - `Admitted` or `Attached` → `Requested` when the request ends and its slot is freed
///   ([`Terminal::free_slot`]), after its lines are written.
pub(super) enum Terminal {
    /// Not a terminal's request: the API, sign-in, pages and assets, a share link's
    /// viewer page.
    Absent,
    /// A terminal's page, token or websocket (a share link's too), with no slot held:
    /// not yet admitted, refused, or not a websocket. Its answers get strict headers, and
    /// it leaves the terminal's audit line and metrics.
    Requested,
    /// A websocket admitted, holding its slot: on Pingora's session until the `101`, or
    /// in the gateway's own tunnel.
    Admitted(TerminalCtx),
    /// A websocket on Pingora's own upgrade path, after the `101`: the browser's socket
    /// is handed to the slot.
    Attached(TerminalCtx),
    /// The terminal left Pingora for the gateway's own tunnel, which logs it: what
    /// Pingora keeps of the request.
    Tunnelled,
}

/// An admitted terminal websocket: its slot and what is read of its bytes going up.
/// Built once, from the admission's [`Allowed`].
pub(super) struct TerminalCtx {
    /// Its slot among the open terminals, freed when the request ends.
    pub(super) ticket: Ticket,
    /// A `ttyd -c` target's first message, until its token is written into it.
    pub(super) first_message: Option<first_message::Pending>,
    /// The frame headers of the websocket's upward bytes, read to bound each frame's
    /// size (`gateway.max_ws_frame_bytes`).
    pub(super) frames: frames::FrameSizes,
}

impl TerminalCtx {
    /// The state of a websocket admitted with `ticket` to go on as `next`. A Docker
    /// session's typing keeps it alive (idle_timeout_seconds): its input touches the
    /// session's clock in `activity`; a viewer's never reaches it.
    fn new(
        ticket: Ticket,
        next: &Next,
        session: Option<SessionId>,
        viewer: bool,
        activity: &Activity,
    ) -> Self {
        let ttyd = match next {
            Next::Proxy(Upstream::Ttyd(t)) => Some(t),
            _ => None,
        };
        let first_message = ttyd
            .and_then(|t| t.auth_token.as_ref())
            .map(|token| first_message::Pending::new(token.clone()));
        let clock = ttyd
            .and_then(|t| t.arg.as_ref())
            .and(session)
            .filter(|_| !viewer);
        let clock = clock.map(|id| activity.clock(id));
        TerminalCtx {
            ticket,
            first_message,
            frames: frames::FrameSizes::new(clock),
        }
    }
}

impl Terminal {
    /// A terminal's request on this context: strict headers, the audit line, metrics.
    pub(super) fn requested(&self) -> bool {
        matches!(
            self,
            Terminal::Requested | Terminal::Admitted(_) | Terminal::Attached(_)
        )
    }

    /// The admitted websocket, on either path.
    pub(super) fn admitted(&self) -> Option<&TerminalCtx> {
        match self {
            Terminal::Admitted(t) | Terminal::Attached(t) => Some(t),
            _ => None,
        }
    }

    /// The admitted websocket, on either path.
    pub(super) fn admitted_mut(&mut self) -> Option<&mut TerminalCtx> {
        match self {
            Terminal::Admitted(t) | Terminal::Attached(t) => Some(t),
            _ => None,
        }
    }

    /// The websocket's slot among the open terminals.
    pub(super) fn ticket(&self) -> Option<&Ticket> {
        self.admitted().map(|t| &t.ticket)
    }

    /// Whether the terminal left Pingora for the gateway's own tunnel.
    pub(super) fn is_tunnelled(&self) -> bool {
        matches!(self, Terminal::Tunnelled)
    }

    /// The request has ended: its slot is freed (`Admitted` or `Attached` →
    /// `Requested`).
    pub(super) fn free_slot(&mut self) {
        if self.admitted().is_some() {
            *self = Terminal::Requested;
        }
    }
}

static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

impl Ctx {
    /// A fresh request: numbered, timed, nothing decided.
    pub(super) fn new() -> Ctx {
        Ctx {
            request_id: REQUEST_IDS.fetch_add(1, Ordering::Relaxed),
            started: Instant::now(),
            principal: None,
            token: None,
            session: None,
            upstream: None,
            decision: Decision::None,
            reason: "",
            body_bytes: 0,
            bytes_up: 0,
            bytes_down: 0,
            error: None,
            share: None,
            terminal: Terminal::Absent,
        }
    }

    /// The context left to Pingora once a terminal has gone to its own tunnel.
    pub(super) fn tunnelled() -> Ctx {
        Ctx {
            terminal: Terminal::Tunnelled,
            ..Ctx::new()
        }
    }

    /// Keeps what admission learnt of an allowed request; what it does next. A
    /// websocket's slot makes it `Admitted`, with its [`TerminalCtx`].
    pub(super) fn keep_allowed(&mut self, allowed: Allowed, activity: &Activity) -> Next {
        self.decision = Decision::Allow;
        self.reason = allowed.reason;
        self.principal = allowed.principal;
        self.token = allowed.token;
        self.share = allowed.share;
        if let Some(ticket) = allowed.ticket {
            let viewer = self.share.is_some();
            let t = TerminalCtx::new(ticket, &allowed.next, self.session, viewer, activity);
            self.terminal = Terminal::Admitted(t);
        }
        allowed.next
    }

    /// Keeps what the access and audit lines say of a refused request; the refusal to
    /// answer.
    pub(super) fn keep_denied(&mut self, denied: Denied) -> Refusal {
        self.decision = Decision::Deny;
        // A handler may give a finer reason (why a token was refused).
        self.reason = if denied.reason.is_empty() {
            denied.refusal.code
        } else {
            denied.reason
        };
        self.principal = denied.principal;
        self.share = denied.share;
        denied.refusal
    }

    /// Tags an answer with its request id, and a terminal's with strict headers.
    pub(super) fn decorate(&self, resp: &mut ResponseHeader) -> Result<()> {
        resp.insert_header("X-Request-Id", self.request_id.to_string())?;
        if self.terminal.requested() {
            // Static values: a `&str` value is copied into a new header value each time.
            use http::HeaderValue as V;
            resp.insert_header("X-Content-Type-Options", V::from_static("nosniff"))?;
            resp.insert_header("Referrer-Policy", V::from_static("no-referrer"))?;
            let csp = V::from_static("frame-ancestors 'self'");
            resp.insert_header("Content-Security-Policy", csp)?;
            resp.insert_header("Cache-Control", V::from_static("no-store"))?;
        }
        Ok(())
    }

    /// Hands a terminal websocket's upstream socket to its slot, so enforcement can cut
    /// it; a websocket whose socket cannot be kept is refused.
    pub(super) fn attach_upstream(&self, fd: std::os::unix::io::RawFd) -> Result<()> {
        let unenforceable = |cause| {
            Error::because(
                ErrorType::InternalError,
                "cannot keep the upstream socket for enforcement",
                cause,
            )
        };
        match (self.terminal.ticket(), &self.upstream) {
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

    /// On Pingora's own upgrade path, at the first bytes after the upgrade: the 101 has
    /// been written, so a close frame from enforcement can no longer land inside the
    /// response head; the browser's socket is handed to the slot (`Admitted` →
    /// `Attached`, once).
    pub(super) fn attach_downstream(&mut self, session: &Session) {
        let Terminal::Admitted(t) = &self.terminal else {
            return;
        };
        let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
        if let (false, Some(stream)) = (tls, session.as_downstream().stream()) {
            t.ticket.attach_downstream(stream.id());
        }
        if let Terminal::Admitted(t) = std::mem::replace(&mut self.terminal, Terminal::Requested) {
            self.terminal = Terminal::Attached(t);
        }
    }
}

//! Live terminals and their enforcement.
//!
//! Every open terminal websocket holds a [`Ticket`]. When access ends — its route is
//! removed, its owner changes, its user is locked, or its token expires — the terminal
//! is closed, whether or not bytes are flowing:
//!
//! - a terminal in the gateway's own tunnel is woken ([`Ticket::hand_to_tunnel`]): the
//!   tunnel, the one writer of the browser's socket, writes the close frame between two
//!   of the ttyd's frames and ends. Nothing else writes on that socket, so no close
//!   frame lands inside a frame, and nothing of the ttyd's follows it;
//! - a terminal on Pingora's upgrade path has its upstream socket shut down (a duplicate
//!   of the descriptor taken at connect time, valid for as long as the ticket lives),
//!   after a close frame written on the browser's socket where one can be.
//!
//! The limits (terminals per user, per session, viewers per share link) hold over every
//! gateway replica: control answers each report of this gateway's counts with what the
//! others have open ([`Elsewhere`]), and admission adds that to this gateway's own
//! count in the same locked step, without asking control. Counts that went stale (no
//! answer for a while: control down) stop counting, and each gateway falls back to its
//! own.

use std::collections::HashMap;
use std::net::Shutdown;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use policy::feed::{PeerGrant, TargetAccess};
use policy::revocation::{CredentialId, Fingerprint, Revocation, RevokedWhy};
use policy::terminal_access::{still_allowed, Now, Open, Opened, RouteNow};
use policy::{Principal, SessionId};

pub use policy::reports::ShareViewers;
use tokio::sync::Notify;

/// Why a terminal was refused a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    /// The user has too many open terminals.
    User,
    /// The session has too many open terminals.
    Session,
    /// The share link has its `max_viewers` open.
    Viewers,
}

pub use policy::close::CloseReason;

struct Live {
    session: SessionId,
    sub: String,
    /// The roles and admin flag it was admitted with: a target that narrows its list
    /// closes the terminals no longer allowed.
    roles: Vec<String>,
    admin: bool,
    /// Fingerprint of the credential that opened it (see [`Terminals::admit`]).
    credential: Fingerprint,
    /// That credential's `jti` and `iat`: an admin's revocation names them.
    jti: Option<Box<str>>,
    issued_at: u64,
    expires_at: Option<u64>,
    /// Our duplicate of the upstream socket (Pingora's upgrade path).
    upstream: Option<socket2::Socket>,
    /// Our duplicate of the browser's socket, once the upgrade has been answered
    /// (Pingora's upgrade path on a plain-text listener: under TLS no frame can be
    /// written from outside the session).
    downstream: Option<socket2::Socket>,
    /// Set for a terminal in the gateway's own tunnel: wakes it to close.
    tunnel: Option<Arc<Notify>>,
    closed: Option<CloseReason>,
    /// Set for a share-link viewer: what it watches through.
    view: Option<View>,
    /// Set for a peer's terminal on another user's session.
    peer: Option<Peer>,
}

impl Live {
    /// Whether this terminal may stay open in `now` (`policy::terminal_access`).
    fn judge(&self, now: &Now<'_>) -> Result<(), CloseReason> {
        let opened = match (&self.peer, &self.view) {
            (Some(p), _) => Opened::Peer {
                owner: &p.owner,
                until: p.until,
            },
            (None, Some(v)) => Opened::Viewer {
                owner: &v.owner,
                share: &v.share,
                until: v.share_expires_at,
            },
            (None, None) => Opened::Own,
        };
        let open = Open {
            sub: &self.sub,
            admin: self.admin,
            roles: &self.roles,
            credential: CredentialId {
                fingerprint: self.credential,
                whole: None,
                sub: &self.sub,
                jti: self.jti.as_deref(),
                issued_at: self.issued_at,
            },
            expires_at: self.expires_at,
            opened,
        };
        still_allowed(&open, now)
    }
}

/// The state after one event: only what it changed differs from when terminals opened.
fn after<'a>(
    route: RouteNow<'a>,
    locked: &'a dyn Fn(&str) -> bool,
    revoked: &'a dyn Fn(&CredentialId<'_>) -> Option<RevokedWhy>,
) -> Now<'a> {
    Now {
        route,
        locked,
        revoked,
        tokens_at: None,
        links_at: None,
    }
}

/// No user locked, no credential revoked: the state of an event that is neither.
fn nobody(_: &str) -> bool {
    false
}

fn nothing(_: &CredentialId<'_>) -> Option<RevokedWhy> {
    None
}

/// The clock at `now`: what lapses by itself (credentials, invitations, links).
fn at(now: u64, tokens: bool) -> Now<'static> {
    Now {
        tokens_at: tokens.then_some(now),
        links_at: (!tokens).then_some(now),
        ..after(RouteNow::Unchanged, &nobody, &nothing)
    }
}

/// What a peer's terminal is open through.
struct Peer {
    /// The session's owner: locking them closes their peers' terminals too.
    owner: String,
    /// When the invitation lapses (moved by a new one, see [`Terminals::sync_peers`]).
    until: u64,
}

/// What a share-link viewer watches through.
struct View {
    share: String,
    /// The watched session's owner: locking them closes their viewers too.
    owner: String,
    /// When the link expires (a signed-in viewer's token may end it earlier, through
    /// `expires_at`).
    share_expires_at: u64,
}

/// A viewer asking for a slot on a share link.
pub struct ViewerRequest<'a> {
    /// The session watched.
    pub session: SessionId,
    /// The share's id.
    pub share: &'a str,
    /// The session's owner.
    pub owner: &'a str,
    /// When the link expires.
    pub share_expires_at: u64,
    /// Most viewers the link admits at once, here.
    pub max_viewers: Option<u32>,
    /// The signed-in viewer, if any, and when their token expires (if enforced).
    pub viewer: Option<(&'a Principal, Option<u64>)>,
    /// Fingerprint of the viewer's credential (the default without one).
    pub credential: Fingerprint,
}
/// What the other gateways have open, as control last answered this one's report
/// ([`policy::reports::Elsewhere`]), by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Elsewhere {
    /// Terminals per user (viewers not counted).
    pub users: HashMap<String, u32>,
    /// Terminals per session (viewers not counted).
    pub sessions: HashMap<SessionId, u32>,
    /// Viewers per share link: (session, share).
    pub viewers: HashMap<(SessionId, String), u32>,
}

impl From<policy::reports::Elsewhere> for Elsewhere {
    fn from(e: policy::reports::Elsewhere) -> Self {
        Elsewhere {
            users: e
                .users
                .into_iter()
                .map(|u| (u.sub.as_str().to_owned(), u.open))
                .collect(),
            sessions: e
                .sessions
                .into_iter()
                .map(|s| (s.session, s.open))
                .collect(),
            viewers: e
                .viewers
                .into_iter()
                .map(|v| ((v.session, v.share), v.open))
                .collect(),
        }
    }
}

impl Elsewhere {
    /// Terminals and viewers in all.
    pub fn totals(&self) -> (u64, u64) {
        let terminals = self.users.values().map(|n| u64::from(*n)).sum();
        let viewers = self.viewers.values().map(|n| u64::from(*n)).sum();
        (terminals, viewers)
    }
}

#[derive(Default)]
struct Inner {
    live: HashMap<u64, Live>,
    per_user: HashMap<String, u32>,
    per_session: HashMap<SessionId, u32>,
    /// The other gateways' counts, and until when they count.
    elsewhere: Elsewhere,
    elsewhere_until: Option<Instant>,
}

impl Inner {
    /// The other gateways' counts while they are fresh at `now`; none after.
    fn elsewhere(&self, now: Instant) -> Option<&Elsewhere> {
        self.elsewhere_until
            .is_some_and(|until| now < until)
            .then_some(&self.elsewhere)
    }
}

/// The registry of open terminals.
pub struct Terminals {
    inner: Mutex<Inner>,
    next: AtomicU64,
    /// Bumped whenever a slot is taken or freed: the reporter sends counts soon after.
    changes: AtomicU64,
    max_per_user: u32,
    max_per_session: u32,
}

/// A terminal's slot; dropping it frees the slot.
pub struct Ticket {
    registry: Arc<Terminals>,
    id: u64,
}

impl Terminals {
    /// A registry with the given limits.
    pub fn new(max_per_user: u32, max_per_session: u32) -> Arc<Self> {
        Arc::new(Terminals {
            inner: Mutex::new(Inner::default()),
            next: AtomicU64::new(1),
            changes: AtomicU64::new(0),
            max_per_user,
            max_per_session,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for a terminal of `who` on `session`; `expires_at` closes it then.
    /// `credential` identifies the token that opened it (its fingerprint, never the
    /// token), so that signing that token out closes it. The limits count this gateway's
    /// terminals and, while fresh, the other gateways' ([`Terminals::learn_elsewhere`]).
    pub fn admit(
        self: &Arc<Self>,
        session: SessionId,
        who: &Principal,
        expires_at: Option<u64>,
        credential: Fingerprint,
    ) -> Result<Ticket, LimitHit> {
        self.admit_as(session, who, expires_at, credential, None)
    }

    /// [`Terminals::admit`], marked a peer's from its first moment when `peer` is
    /// given: a route change can never find it unmarked.
    fn admit_as(
        self: &Arc<Self>,
        session: SessionId,
        who: &Principal,
        expires_at: Option<u64>,
        credential: Fingerprint,
        peer: Option<Peer>,
    ) -> Result<Ticket, LimitHit> {
        let sub = who.sub.as_str();
        let now = Instant::now();
        let mut inner = self.lock();
        let (user_elsewhere, session_elsewhere) = inner.elsewhere(now).map_or((0, 0), |e| {
            (
                e.users.get(sub).copied().unwrap_or(0),
                e.sessions.get(&session).copied().unwrap_or(0),
            )
        });
        let user_here = inner.per_user.get(sub).copied().unwrap_or(0);
        if user_here.saturating_add(user_elsewhere) >= self.max_per_user {
            return Err(LimitHit::User);
        }
        let session_here = inner.per_session.get(&session).copied().unwrap_or(0);
        if session_here.saturating_add(session_elsewhere) >= self.max_per_session {
            return Err(LimitHit::Session);
        }
        *inner.per_user.entry(sub.to_owned()).or_default() += 1;
        *inner.per_session.entry(session).or_default() += 1;
        self.changes.fetch_add(1, Ordering::Relaxed);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        inner.live.insert(
            id,
            Live {
                session,
                sub: sub.to_owned(),
                roles: who.roles.clone(),
                admin: who.admin,
                credential,
                jti: who.jti.as_deref().map(Box::from),
                issued_at: who.issued_at,
                expires_at,
                upstream: None,
                downstream: None,
                tunnel: None,
                closed: None,
                view: None,
                peer,
            },
        );
        Ok(Ticket {
            registry: Arc::clone(self),
            id,
        })
    }

    /// Takes a slot for a share-link viewer. Viewers count against their link's
    /// `max_viewers`, not against the owner's or the session's terminal limits (they
    /// must never keep the owner out); an anonymous viewer's `sub` is empty.
    pub fn admit_viewer(self: &Arc<Self>, req: &ViewerRequest<'_>) -> Result<Ticket, LimitHit> {
        let now = Instant::now();
        let mut inner = self.lock();
        let here = inner
            .live
            .values()
            .filter(|l| {
                l.session == req.session
                    && l.closed.is_none()
                    && l.view.as_ref().is_some_and(|v| v.share == req.share)
            })
            .count();
        let elsewhere = inner.elsewhere(now).map_or(0, |e| {
            e.viewers
                .get(&(req.session, req.share.to_owned()))
                .copied()
                .unwrap_or(0)
        });
        let open = here.saturating_add(elsewhere as usize);
        if req.max_viewers.is_some_and(|m| open >= m as usize) {
            return Err(LimitHit::Viewers);
        }
        self.changes.fetch_add(1, Ordering::Relaxed);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (sub, roles, expires_at, jti, issued_at) = match req.viewer {
            Some((p, expires)) => (
                p.sub.to_string(),
                p.roles.clone(),
                expires,
                p.jti.as_deref().map(Box::from),
                p.issued_at,
            ),
            None => (String::new(), Vec::new(), None, None, 0),
        };
        inner.live.insert(
            id,
            Live {
                session: req.session,
                sub,
                roles,
                admin: false,
                credential: req.credential,
                jti,
                issued_at,
                expires_at,
                upstream: None,
                downstream: None,
                tunnel: None,
                closed: None,
                view: Some(View {
                    share: req.share.to_owned(),
                    owner: req.owner.to_owned(),
                    share_expires_at: req.share_expires_at,
                }),
                peer: None,
            },
        );
        Ok(Ticket {
            registry: Arc::clone(self),
            id,
        })
    }

    /// Takes a slot for a peer's terminal on `session` (owned by `owner`), counted like
    /// any terminal of theirs and of the session's ([`Terminals::admit`]); it closes
    /// when their invitation lapses at `peer_until`.
    pub fn admit_peer(
        self: &Arc<Self>,
        session: SessionId,
        who: &Principal,
        expires_at: Option<u64>,
        credential: Fingerprint,
        owner: &str,
        peer_until: u64,
    ) -> Result<Ticket, LimitHit> {
        let peer = Peer {
            owner: owner.to_owned(),
            until: peer_until,
        };
        self.admit_as(session, who, expires_at, credential, Some(peer))
    }

    /// Judges the peer terminals of `session` again on its peers now (`peers`, from its
    /// new route) at `now`: a peer without an unexpired grant is closed; the others
    /// keep their terminals until their grant's (possibly new) end. The owner's
    /// terminals are not peers' and stay. Returns how many closed.
    pub fn sync_peers(&self, session: &SessionId, peers: &[PeerGrant], now: u64) -> usize {
        {
            let mut inner = self.lock();
            for l in inner.live.values_mut().filter(|l| l.session == *session) {
                let sub = &l.sub;
                if let Some(p) = l.peer.as_mut() {
                    p.until = policy::peer::grant_in(peers, sub, now).map_or(0, |g| g.expires_at);
                }
            }
        }
        self.close_expired_peers(now)
    }

    /// Closes peer terminals whose invitation lapsed at `now`.
    pub fn close_expired_peers(&self, now: u64) -> usize {
        let now = at(now, false);
        self.close_where(&now, |_, why| why == CloseReason::PeerRemoved)
    }

    /// The viewers open on each share link (links with none are left out).
    pub fn viewers(&self) -> Vec<ShareViewers> {
        let inner = self.lock();
        let mut out: Vec<ShareViewers> = Vec::new();
        for l in inner.live.values().filter(|l| l.closed.is_none()) {
            let Some(v) = &l.view else { continue };
            let entry = match out
                .iter_mut()
                .position(|e| e.session == l.session && e.share == v.share)
            {
                Some(i) => &mut out[i],
                None => {
                    out.push(ShareViewers {
                        session: l.session,
                        share: v.share.clone(),
                        open: 0,
                        subs: Vec::new(),
                    });
                    out.last_mut().expect("just pushed")
                }
            };
            entry.open += 1;
            if !l.sub.is_empty() && !entry.subs.contains(&l.sub) {
                entry.subs.push(l.sub.clone());
            }
        }
        out.iter_mut().for_each(|e| e.subs.sort());
        out
    }

    /// Closes the viewers of one share link (revoked).
    pub fn close_share(&self, session: &SessionId, share: &str) -> usize {
        let now = after(RouteNow::ShareGone(share), &nobody, &nothing);
        self.close_where(&now, |l, _| l.session == *session)
    }

    /// Closes viewers whose share link expired at `now`.
    pub fn close_expired_views(&self, now: u64) -> usize {
        let now = at(now, false);
        self.close_where(&now, |_, why| why == CloseReason::ShareEnded)
    }

    /// Open terminals.
    pub fn open(&self) -> usize {
        self.lock().live.len()
    }

    /// A number that moves whenever a slot is taken or freed.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// Takes the other gateways' counts from control's answer; they count until
    /// `until` (or the next answer).
    pub fn learn_elsewhere(&self, elsewhere: Elsewhere, until: Instant) {
        let mut inner = self.lock();
        inner.elsewhere = elsewhere;
        inner.elsewhere_until = Some(until);
    }

    /// The other gateways' terminals and viewers in all, while their counts are fresh
    /// (`None`: this gateway counts only its own).
    pub fn elsewhere_totals(&self) -> Option<(u64, u64)> {
        self.lock().elsewhere(Instant::now()).map(Elsewhere::totals)
    }

    /// Open terminals per user, viewers not counted (users with none are left out).
    pub fn per_user(&self) -> HashMap<String, u32> {
        self.lock()
            .per_user
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(sub, n)| (sub.clone(), *n))
            .collect()
    }

    /// Open terminals per session, viewers not counted (sessions with none are left
    /// out).
    pub fn per_session(&self) -> HashMap<SessionId, u32> {
        self.lock()
            .per_session
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(id, n)| (*id, *n))
            .collect()
    }

    /// The one way enforcement closes terminals: each open terminal `which` picks that the
    /// access rule, judged at `now`, no longer allows closes with the rule's own reason
    /// (a locked owner's peer as `peer_removed`, their viewer as `share_ended`, as
    /// control's `/v1/grant` says).
    fn close_where(&self, now: &Now<'_>, which: impl Fn(&Live, CloseReason) -> bool) -> usize {
        let mut inner = self.lock();
        let mut n = 0;
        for live in inner.live.values_mut().filter(|l| l.closed.is_none()) {
            let Err(reason) = live.judge(now) else {
                continue;
            };
            if !which(live, reason) {
                continue;
            }
            live.closed = Some(reason);
            if let Some(wake) = &live.tunnel {
                // The tunnel writes the close frame itself and ends.
                wake.notify_one();
                n += 1;
                continue;
            }
            if let Some(d) = &live.downstream {
                // Say why before cutting: ttyd's page reconnects after any close code but
                // 1000. The socket is non-blocking; a full buffer just skips the frame.
                let _ = d.send(&close_frame(reason.message()));
            }
            if let Some(s) = &live.upstream {
                let _ = s.shutdown(Shutdown::Both);
            }
            n += 1;
        }
        n
    }

    /// Closes every terminal of a session.
    pub fn close_session(&self, session: &SessionId) -> usize {
        let now = after(RouteNow::Moved, &nobody, &nothing);
        self.close_where(&now, |l, _| l.session == *session)
    }

    /// Closes the terminals of a target whose users and roles are now `access` and no
    /// longer admit them (admins stay, as they were admitted as such).
    pub fn close_disallowed(&self, session: &SessionId, access: &TargetAccess) -> usize {
        let now = after(RouteNow::TargetNow(access), &nobody, &nothing);
        self.close_where(&now, |l, _| l.session == *session)
    }

    /// Closes every terminal of a locked user, and every viewer and peer of their sessions.
    pub fn close_user(&self, sub: &str) -> usize {
        let locked = |user: &str| user == sub;
        let now = after(RouteNow::Unchanged, &locked, &nothing);
        self.close_where(&now, |_, _| true)
    }

    /// Closes terminals whose token expired at `now`.
    pub fn close_expired(&self, now: u64) -> usize {
        let now = at(now, true);
        self.close_where(&now, |_, _| true)
    }

    /// Closes the terminals opened with one credential (its sign-out).
    pub fn close_credential(&self, credential: Fingerprint) -> usize {
        let signed_out =
            |id: &CredentialId<'_>| (id.fingerprint == credential).then_some(RevokedWhy::SignedOut);
        let now = after(RouteNow::Unchanged, &nobody, &signed_out);
        self.close_where(&now, |_, _| true)
    }

    /// Closes the terminals and viewers opened with a credential `r` revokes (an
    /// anonymous viewer holds none).
    pub fn close_revoked(&self, r: &Revocation) -> usize {
        let revoked = |id: &CredentialId<'_>| r.covers(id).then(|| r.why());
        let now = after(RouteNow::Unchanged, &nobody, &revoked);
        self.close_where(&now, |_, _| true)
    }
}

/// A websocket close frame from the server (unmasked): code 1000 and `reason`.
pub(crate) fn close_frame(reason: &str) -> Vec<u8> {
    // A control frame's payload is at most 125 bytes: the code and up to 123 of reason.
    let reason = &reason.as_bytes()[..reason.len().min(123)];
    let mut frame = Vec::with_capacity(4 + reason.len());
    frame.push(0x88);
    frame.push(u8::try_from(2 + reason.len()).unwrap_or(125));
    frame.extend_from_slice(&1000u16.to_be_bytes());
    frame.extend_from_slice(reason);
    frame
}

/// Our own copy of a descriptor Pingora lends for the duration of a call.
fn duplicate(fd: RawFd) -> std::io::Result<socket2::Socket> {
    // SAFETY: Pingora hands us the live descriptor of the connection for the duration of
    // the call; we only duplicate it (F_DUPFD_CLOEXEC) and own the copy.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let owned: OwnedFd = borrowed.try_clone_to_owned()?;
    Ok(socket2::Socket::from(owned))
}

impl Ticket {
    /// This ticket's slot in the locked registry.
    fn slot<'a>(&self, inner: &'a mut Inner) -> std::io::Result<&'a mut Live> {
        inner.live.get_mut(&self.id).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the terminal's slot is no longer registered",
            )
        })
    }

    /// Remembers the upstream socket so enforcement can shut it down. If the terminal
    /// was revoked before the connection existed, it is shut down at once. A socket that
    /// cannot be kept is an error: that terminal could never be closed by enforcement.
    pub fn attach_upstream(&self, fd: RawFd) -> std::io::Result<()> {
        let socket = duplicate(fd)?;
        let mut inner = self.registry.lock();
        let live = self.slot(&mut inner)?;
        if live.closed.is_some() {
            // Revoked already: the socket is cut; the proxy loop ends at once.
            socket.shutdown(Shutdown::Both)?;
        }
        live.upstream = Some(socket);
        Ok(())
    }

    /// Hands the terminal to the gateway's own tunnel: enforcement then wakes `wake`
    /// (a stored permit, so a wake before the tunnel waits is not lost) and the tunnel
    /// closes the terminal itself. A terminal revoked already is woken at once.
    pub fn hand_to_tunnel(&self, wake: Arc<Notify>) -> std::io::Result<()> {
        let mut inner = self.registry.lock();
        let live = self.slot(&mut inner)?;
        if live.closed.is_some() {
            wake.notify_one();
        }
        live.tunnel = Some(wake);
        Ok(())
    }

    /// Remembers the browser's socket (after the upgrade was answered) so that a
    /// revocation can say why in a close frame. Best effort: without it, enforcement
    /// still cuts the terminal.
    pub fn attach_downstream(&self, fd: RawFd) {
        let Ok(socket) = duplicate(fd) else {
            return;
        };
        let mut inner = self.registry.lock();
        if let Some(live) = inner.live.get_mut(&self.id) {
            live.downstream = Some(socket);
        }
    }

    /// Why the terminal was closed by enforcement, if it was.
    pub fn closed(&self) -> Option<CloseReason> {
        self.registry
            .lock()
            .live
            .get(&self.id)
            .and_then(|l| l.closed)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        if let Some(live) = inner.live.remove(&self.id) {
            self.registry.changes.fetch_add(1, Ordering::Relaxed);
            if live.view.is_some() {
                // Viewers hold no place in the per-user and per-session counts.
                return;
            }
            if let Some(n) = inner.per_user.get_mut(&live.sub) {
                *n -= 1;
                if *n == 0 {
                    inner.per_user.remove(&live.sub);
                }
            }
            if let Some(n) = inner.per_session.get_mut(&live.session) {
                *n -= 1;
                if *n == 0 {
                    inner.per_session.remove(&live.session);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

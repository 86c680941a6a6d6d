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

use policy::feed::PeerGrant;
use policy::revocation::{CredentialId, Fingerprint, Revocation, RevokedWhy};
use policy::{Principal, SessionId};
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

/// The viewers one gateway has open on one share link.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShareViewers {
    /// The session watched.
    pub session: SessionId,
    /// The share's id.
    pub share: String,
    /// Viewers open.
    pub open: u32,
    /// The `sub`s of the signed-in ones (sorted, once each).
    pub subs: Vec<String>,
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
/// What the other gateways have open, as control last answered this one's report.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Elsewhere {
    /// Terminals per user (viewers not counted).
    #[serde(default, deserialize_with = "users")]
    pub users: HashMap<String, u32>,
    /// Terminals per session (viewers not counted).
    #[serde(default, deserialize_with = "sessions")]
    pub sessions: HashMap<SessionId, u32>,
    /// Viewers per share link: (session, share).
    #[serde(default, deserialize_with = "viewers")]
    pub viewers: HashMap<(SessionId, String), u32>,
}

/// Control lists its counts as `[{"sub","open"}…]`, `[{"session","open"}…]` and
/// `[{"session","share","open"}…]`.
fn users<'de, D: serde::Deserializer<'de>>(d: D) -> Result<HashMap<String, u32>, D::Error> {
    #[derive(serde::Deserialize)]
    struct Entry {
        sub: String,
        open: u32,
    }
    let list: Vec<Entry> = serde::Deserialize::deserialize(d)?;
    Ok(list.into_iter().map(|e| (e.sub, e.open)).collect())
}

fn sessions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<HashMap<SessionId, u32>, D::Error> {
    #[derive(serde::Deserialize)]
    struct Entry {
        session: SessionId,
        open: u32,
    }
    let list: Vec<Entry> = serde::Deserialize::deserialize(d)?;
    Ok(list.into_iter().map(|e| (e.session, e.open)).collect())
}

type ViewerCounts = HashMap<(SessionId, String), u32>;

fn viewers<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ViewerCounts, D::Error> {
    #[derive(serde::Deserialize)]
    struct Entry {
        session: SessionId,
        share: String,
        open: u32,
    }
    let list: Vec<Entry> = serde::Deserialize::deserialize(d)?;
    Ok(list
        .into_iter()
        .map(|e| ((e.session, e.share), e.open))
        .collect())
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
                peer: None,
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
        let ticket = self.admit(session, who, expires_at, credential)?;
        if let Some(live) = self.lock().live.get_mut(&ticket.id) {
            live.peer = Some(Peer {
                owner: owner.to_owned(),
                until: peer_until,
            });
        }
        Ok(ticket)
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
                    p.until = peers
                        .iter()
                        .find(|g| g.sub == *sub && g.expires_at > now)
                        .map_or(0, |g| g.expires_at);
                }
            }
        }
        self.close_expired_peers(now)
    }

    /// Closes peer terminals whose invitation lapsed at `now`.
    pub fn close_expired_peers(&self, now: u64) -> usize {
        self.close_where(CloseReason::PeerRemoved, |l| {
            l.peer.as_ref().is_some_and(|p| now >= p.until)
        })
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
        self.close_where(CloseReason::ShareEnded, |l| {
            l.session == *session && l.view.as_ref().is_some_and(|v| v.share == share)
        })
    }

    /// Closes viewers whose share link expired at `now`.
    pub fn close_expired_views(&self, now: u64) -> usize {
        self.close_where(CloseReason::ShareEnded, |l| {
            l.view.as_ref().is_some_and(|v| now >= v.share_expires_at)
        })
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

    fn close_where(&self, reason: CloseReason, pred: impl Fn(&Live) -> bool) -> usize {
        let mut inner = self.lock();
        let mut n = 0;
        for live in inner
            .live
            .values_mut()
            .filter(|l| l.closed.is_none() && pred(l))
        {
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
    pub fn close_session(&self, session: &SessionId, reason: CloseReason) -> usize {
        self.close_where(reason, |l| l.session == *session)
    }

    /// Closes the terminals of a target whose users `still_allowed` no longer admits
    /// (admins stay, as they were admitted as such).
    pub fn close_disallowed(
        &self,
        session: &SessionId,
        still_allowed: impl Fn(&str, &[String]) -> bool,
    ) -> usize {
        self.close_where(CloseReason::AccessRemoved, |l| {
            l.session == *session && !l.admin && !still_allowed(&l.sub, &l.roles)
        })
    }

    /// Closes every terminal of a user, and every viewer and peer of their sessions.
    pub fn close_user(&self, sub: &str, reason: CloseReason) -> usize {
        self.close_where(reason, |l| {
            l.sub == sub
                || l.view.as_ref().is_some_and(|v| v.owner == sub)
                || l.peer.as_ref().is_some_and(|p| p.owner == sub)
        })
    }

    /// Closes terminals whose token expired at `now`.
    pub fn close_expired(&self, now: u64) -> usize {
        self.close_where(CloseReason::TokenExpired, |l| {
            l.expires_at.is_some_and(|e| now >= e)
        })
    }

    /// Closes the terminals opened with one credential (its sign-out).
    pub fn close_credential(&self, credential: Fingerprint) -> usize {
        self.close_where(CloseReason::SignedOut, |l| l.credential == credential)
    }

    /// Closes the terminals and viewers opened with a credential `r` revokes (an
    /// anonymous viewer holds none).
    pub fn close_revoked(&self, r: &Revocation) -> usize {
        let reason = match r.why() {
            RevokedWhy::SignedOut => CloseReason::SignedOut,
            RevokedWhy::Revoked => CloseReason::TokenRevoked,
        };
        self.close_where(reason, |l| {
            !l.sub.is_empty()
                && r.covers(&CredentialId {
                    fingerprint: l.credential,
                    sub: &l.sub,
                    jti: l.jti.as_deref(),
                    issued_at: l.issued_at,
                })
        })
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
mod tests {
    use super::*;

    fn fp(n: u8) -> Fingerprint {
        Fingerprint::of(&[n])
    }

    fn who(sub: &str) -> Principal {
        Principal {
            sub: policy::Sub::parse(sub).unwrap(),
            admin: false,
            roles: Vec::new(),
            expires_at: 0,
            issued_at: 0,
            jti: None,
        }
    }
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn id(n: u8) -> SessionId {
        SessionId::from_random([n; 10])
    }

    #[test]
    fn limits_per_user_and_per_session_hold_and_free_on_drop() {
        let t = Terminals::new(2, 1);
        let a = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        assert_eq!(
            t.admit(id(1), &who("alice"), None, fp(0)).err(),
            Some(LimitHit::Session)
        );
        let b = t.admit(id(2), &who("alice"), None, fp(0)).unwrap();
        assert_eq!(
            t.admit(id(3), &who("alice"), None, fp(0)).err(),
            Some(LimitHit::User)
        );
        drop(a);
        assert!(t.admit(id(1), &who("alice"), None, fp(0)).is_ok());
        drop(b);
        assert_eq!(t.open(), 0);
    }

    fn elsewhere(users: &[(&str, u32)], sessions: &[(u8, u32)]) -> Elsewhere {
        Elsewhere {
            users: users.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
            sessions: sessions.iter().map(|(i, n)| (id(*i), *n)).collect(),
            viewers: HashMap::new(),
        }
    }

    #[test]
    fn the_other_gateways_terminals_count_against_the_limits_while_fresh() {
        let t = Terminals::new(4, 3);
        let fresh = Instant::now() + std::time::Duration::from_secs(60);
        t.learn_elsewhere(elsewhere(&[("alice", 3)], &[(1, 2)]), fresh);
        let a = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        assert_eq!(
            t.admit(id(2), &who("alice"), None, fp(0)).err(),
            Some(LimitHit::User),
            "3 elsewhere + 1 here"
        );
        assert_eq!(
            t.admit(id(1), &who("bob"), None, fp(0)).err(),
            Some(LimitHit::Session),
            "2 elsewhere + 1 here"
        );
        assert!(t.admit(id(2), &who("bob"), None, fp(0)).is_ok());
        // One closed elsewhere: the next answer lets one more in.
        t.learn_elsewhere(elsewhere(&[("alice", 2)], &[(1, 2)]), fresh);
        let b = t.admit(id(2), &who("alice"), None, fp(0)).unwrap();
        assert_eq!(t.elsewhere_totals(), Some((2, 0)));
        // Stale counts (control silent) no longer count: this gateway's own do.
        t.learn_elsewhere(elsewhere(&[("alice", 8)], &[(1, 8)]), Instant::now());
        assert_eq!(t.elsewhere_totals(), None);
        let c = t.admit(id(3), &who("alice"), None, fp(0)).unwrap();
        let d = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        assert_eq!(
            t.admit(id(4), &who("alice"), None, fp(0)).err(),
            Some(LimitHit::User),
            "four here"
        );
        drop((a, b, c, d));
        assert_eq!(t.per_user().get("alice"), None);
    }

    #[test]
    fn every_slot_taken_or_freed_moves_the_change_count() {
        let t = Terminals::new(1, 1);
        let before = t.changes();
        let a = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        let refused = t.admit(id(1), &who("alice"), None, fp(0));
        assert!(refused.is_err());
        let after_admit = t.changes();
        assert_eq!(after_admit, before + 1, "a refusal changes nothing");
        drop(a);
        assert_eq!(t.changes(), after_admit + 1);
    }

    #[test]
    fn viewers_elsewhere_count_against_max_viewers() {
        let t = Terminals::new(8, 8);
        let fresh = Instant::now() + std::time::Duration::from_secs(60);
        let mut e = Elsewhere::default();
        e.viewers.insert((id(1), "s1".into()), 1);
        t.learn_elsewhere(e, fresh);
        assert_eq!(
            t.admit_viewer(&viewer("s1", Some(1), None)).err(),
            Some(LimitHit::Viewers)
        );
        let other_link = t.admit_viewer(&viewer("s2", Some(1), None)).unwrap();
        t.learn_elsewhere(Elsewhere::default(), fresh);
        let v = t.admit_viewer(&viewer("s1", Some(1), None)).unwrap();
        drop((v, other_link));
    }

    #[test]
    fn controls_answer_reads_into_counts() {
        let s1 = id(1).to_string();
        let json = format!(
            r#"{{"users":[{{"sub":"alice","open":2}}],"sessions":[{{"session":"{s1}","open":1}}],"viewers":[{{"session":"{s1}","share":"x","open":3}}]}}"#
        );
        let e: Elsewhere = serde_json::from_str(&json).unwrap();
        assert_eq!(e.users.get("alice"), Some(&2));
        assert_eq!(e.sessions.get(&id(1)), Some(&1));
        assert_eq!(e.viewers.get(&(id(1), "x".to_owned())), Some(&3));
        assert_eq!(e.totals(), (2, 3));
    }

    #[test]
    fn closing_shuts_the_upstream_socket_without_traffic() {
        let t = Terminals::new(8, 8);
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        ticket.attach_upstream(ours.as_raw_fd()).unwrap();
        assert_eq!(t.close_session(&id(1), CloseReason::RouteRemoved), 1);
        let mut buf = [0u8; 1];
        assert_eq!(peer.read(&mut buf).unwrap(), 0, "peer must see EOF");
        assert_eq!(ticket.closed(), Some(CloseReason::RouteRemoved));
    }

    /// Whether `wake` holds a wake-up now.
    fn woken(wake: &Notify) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_millis(50), wake.notified())
                .await
                .is_ok()
        })
    }

    #[test]
    fn a_tunnel_terminal_is_woken_to_close_and_nothing_is_written_on_its_sockets() {
        let t = Terminals::new(8, 8);
        let wake = Arc::new(Notify::new());
        let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        ticket.hand_to_tunnel(Arc::clone(&wake)).unwrap();
        assert!(!woken(&wake), "not woken before anything is revoked");
        assert_eq!(t.close_user("alice", CloseReason::UserLocked), 1);
        assert!(woken(&wake), "the revocation wakes the tunnel");
        assert_eq!(ticket.closed(), Some(CloseReason::UserLocked));
        assert_eq!(t.close_user("alice", CloseReason::UserLocked), 0);
        assert!(!woken(&wake), "closed once: one wake-up");
        drop(ticket);
        // A terminal revoked before the tunnel took it is woken as soon as it does.
        let wake = Arc::new(Notify::new());
        let ticket = t.admit(id(2), &who("bob"), None, fp(0)).unwrap();
        t.close_user("bob", CloseReason::UserLocked);
        ticket.hand_to_tunnel(Arc::clone(&wake)).unwrap();
        assert!(woken(&wake));
        drop(ticket);
    }

    #[test]
    fn users_and_expiry_are_enforced_selectively() {
        let t = Terminals::new(8, 8);
        let a = t.admit(id(1), &who("alice"), Some(100), fp(0)).unwrap();
        let b = t.admit(id(2), &who("bob"), Some(200), fp(0)).unwrap();
        assert_eq!(t.close_expired(150), 1);
        assert_eq!(
            (a.closed(), b.closed()),
            (Some(CloseReason::TokenExpired), None)
        );
        assert_eq!(t.close_user("bob", CloseReason::UserLocked), 1);
        assert_eq!(b.closed(), Some(CloseReason::UserLocked));
        assert_eq!(
            t.close_user("bob", CloseReason::UserLocked),
            0,
            "already closed"
        );
    }

    #[test]
    fn a_revoked_terminal_tells_the_browser_why_before_the_cut() {
        let t = Terminals::new(8, 8);
        let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        let (browser_side, mut browser) = UnixStream::pair().unwrap();
        browser_side.set_nonblocking(true).unwrap();
        ticket.attach_downstream(browser_side.as_raw_fd());
        t.close_user("alice", CloseReason::UserLocked);
        let mut frame = [0u8; 64];
        let n = browser.read(&mut frame).unwrap();
        let reason = CloseReason::UserLocked.message().as_bytes();
        assert_eq!(&frame[..4], &[0x88, 2 + reason.len() as u8, 0x03, 0xe8]);
        assert_eq!(&frame[4..n], reason);
    }

    #[test]
    fn signing_out_closes_only_the_terminals_of_that_credential() {
        let t = Terminals::new(8, 8);
        let this_browser = t.admit(id(1), &who("alice"), None, fp(11)).unwrap();
        let other_browser = t.admit(id(1), &who("alice"), None, fp(22)).unwrap();
        assert_eq!(t.close_credential(fp(11)), 1);
        assert_eq!(
            (this_browser.closed(), other_browser.closed()),
            (Some(CloseReason::SignedOut), None)
        );
    }

    fn viewer<'a>(
        share: &'a str,
        max: Option<u32>,
        who: Option<&'a Principal>,
    ) -> ViewerRequest<'a> {
        ViewerRequest {
            session: id(1),
            share,
            owner: "alice",
            share_expires_at: 100,
            max_viewers: max,
            viewer: who.map(|p| (p, None)),
            credential: fp(0),
        }
    }

    #[test]
    fn viewers_are_bounded_per_link_and_never_take_the_owners_places() {
        let t = Terminals::new(1, 1);
        let bob = who("bob");
        let v1 = t.admit_viewer(&viewer("s1", Some(2), Some(&bob))).unwrap();
        let v2 = t.admit_viewer(&viewer("s1", Some(2), None)).unwrap();
        assert_eq!(
            t.admit_viewer(&viewer("s1", Some(2), None)).err(),
            Some(LimitHit::Viewers)
        );
        let other_link = t.admit_viewer(&viewer("s2", Some(1), None)).unwrap();
        let owner = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        assert_eq!(
            t.per_session().get(&id(1)),
            Some(&1),
            "viewers are not counted"
        );
        let mut seen = t.viewers();
        seen.sort_by(|a, b| a.share.cmp(&b.share));
        assert_eq!(
            (seen[0].open, seen[0].subs.clone()),
            (2, vec!["bob".to_owned()])
        );
        assert_eq!((seen[1].share.as_str(), seen[1].open), ("s2", 1));
        drop(v2);
        assert!(t.admit_viewer(&viewer("s1", Some(2), None)).is_ok());
        drop((v1, other_link, owner));
        assert_eq!(t.open(), 0);
    }

    #[test]
    fn revoke_expiry_and_the_owners_lock_close_viewers() {
        let t = Terminals::new(8, 8);
        let a = t.admit_viewer(&viewer("s1", None, None)).unwrap();
        let b = t.admit_viewer(&viewer("s2", None, None)).unwrap();
        let owner = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        assert_eq!(t.close_share(&id(1), "s1"), 1);
        assert_eq!(
            (a.closed(), b.closed()),
            (Some(CloseReason::ShareEnded), None)
        );
        assert_eq!(t.close_expired_views(99), 0);
        assert_eq!(t.close_expired(1000), 0, "token expiry is another thing");
        assert_eq!(t.close_expired_views(100), 1);
        assert_eq!(b.closed(), Some(CloseReason::ShareEnded));
        let c = t.admit_viewer(&viewer("s3", None, None)).unwrap();
        assert_eq!(
            t.close_user("alice", CloseReason::UserLocked),
            2,
            "owner and viewer"
        );
        assert_eq!(
            (c.closed(), owner.closed()),
            (Some(CloseReason::UserLocked), Some(CloseReason::UserLocked))
        );
    }

    #[test]
    fn a_peer_closes_when_dropped_from_the_route_or_expired_and_the_owner_stays() {
        let t = Terminals::new(8, 8);
        let owner = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        let bob = t
            .admit_peer(id(1), &who("bob"), None, fp(1), "alice", 100)
            .unwrap();
        let carol = t
            .admit_peer(id(1), &who("carol"), None, fp(2), "alice", 100)
            .unwrap();
        let grant = |sub: &str, expires_at| PeerGrant {
            sub: sub.into(),
            expires_at,
        };
        // Carol's invitation is moved later; bob's is gone.
        assert_eq!(t.sync_peers(&id(1), &[grant("carol", 300)], 10), 1);
        assert_eq!(
            (owner.closed(), bob.closed(), carol.closed()),
            (None, Some(CloseReason::PeerRemoved), None)
        );
        assert_eq!(t.close_expired_peers(299), 0, "the new lifetime holds");
        assert_eq!(t.close_expired_peers(300), 1);
        assert_eq!(carol.closed(), Some(CloseReason::PeerRemoved));
        assert_eq!(owner.closed(), None);
        // Peers count against their own limits; the owner's lock closes them too.
        let dave = t
            .admit_peer(id(1), &who("dave"), None, fp(3), "alice", 500)
            .unwrap();
        assert_eq!(t.per_user().get("dave"), Some(&1));
        assert_eq!(t.close_user("alice", CloseReason::UserLocked), 2);
        assert_eq!(dave.closed(), Some(CloseReason::UserLocked));
    }

    #[test]
    fn a_socket_without_a_registered_slot_is_an_error() {
        let t = Terminals::new(8, 8);
        let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        t.lock().live.clear();
        let (ours, _peer) = UnixStream::pair().unwrap();
        assert!(ticket.attach_upstream(ours.as_raw_fd()).is_err());
    }

    #[test]
    fn a_terminal_revoked_before_connecting_is_shut_on_attach() {
        let t = Terminals::new(8, 8);
        let ticket = t.admit(id(1), &who("alice"), None, fp(0)).unwrap();
        t.close_user("alice", CloseReason::UserLocked);
        let (ours, mut peer) = UnixStream::pair().unwrap();
        ticket.attach_upstream(ours.as_raw_fd()).unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(peer.read(&mut buf).unwrap(), 0);
    }
}

//! [`Peers`]: peers of a running Docker session: users its owner (or an admin) invites to
//! co-drive it — the owner's writable terminal — for a bounded time. An invitation
//! lives on the session's record ([`PeerGrant`]); every change is a route change, so
//! gateways learn it through the route feed and admit, or close, the peer's terminals
//! locally. A peer may open the session and leave it; nothing else of the owner's.

use std::sync::Arc;

use policy::peer;
use policy::{Action, Principal, Refusal, SessionId, Sub};

use super::clock::now;
use super::core::Core;
use crate::error::ApiError;
use crate::model::{PeerGrant, Session, SessionState};

/// The shortest invitation: [`peer::TTL_RANGE`]'s start; in debug builds,
/// `TERMGATE_TEST_PEER_MIN_TTL` (seconds) lowers it, so tests see an invitation expire
/// without waiting a minute.
fn min_ttl() -> u64 {
    let min = *peer::TTL_RANGE.start();
    cfg!(debug_assertions)
        .then(|| std::env::var("TERMGATE_TEST_PEER_MIN_TTL").ok())
        .flatten()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|m| *m >= 1)
        .map_or(min, |m| m.min(min))
}

/// Peers of sessions: users their owners invite to co-drive them.
#[derive(Clone)]
pub struct Peers {
    core: Arc<Core>,
}

impl Peers {
    pub(super) fn new(core: Arc<Core>) -> Self {
        Peers { core }
    }

    /// Invites `invited` to co-drive session `id` for `ttl_seconds`, if its profile
    /// allows peers and it runs. Inviting a peer again replaces their lifetime.
    pub fn invite_peer(
        &self,
        who: &Principal,
        id: &SessionId,
        invited: &str,
        ttl_seconds: u64,
    ) -> Result<PeerGrant, ApiError> {
        let s = self.core.authorized(who, id, Action::Invite)?;
        let enabled = self
            .core
            .config()
            .profiles
            .get(&s.profile)
            .is_some_and(|p| p.peers);
        let sub = peer::check_request(enabled, s.owner.as_str(), invited, ttl_seconds, min_ttl())?;
        if s.state != SessionState::Running {
            return Err(Refusal::NOT_RUNNING);
        }
        let at = now();
        let expires_at = at.saturating_add(ttl_seconds);
        let mut full = false;
        self.core.store().update(id, |s| {
            s.peers
                .retain(|g| g.expires_at > at && g.sub != sub.as_str());
            if s.peers.len() >= peer::MAX_PEERS {
                full = true;
            } else {
                s.peers.push(PeerGrant {
                    sub: sub.to_string(),
                    expires_at,
                });
            }
        })?;
        if full {
            return Err(Refusal::INVALID_PEER.with_message(format!(
                "a session holds at most {} peers; remove one",
                peer::MAX_PEERS
            )));
        }
        tracing::info!(target: "audit", session = %id, sub = %who.sub, peer = %sub, expires_at, "peer invited");
        Ok(PeerGrant {
            sub: sub.to_string(),
            expires_at,
        })
    }

    /// The peers of session `id` whose invitation has not lapsed.
    pub fn list_peers(&self, who: &Principal, id: &SessionId) -> Result<Vec<PeerGrant>, ApiError> {
        let s = self.core.authorized(who, id, Action::Invite)?;
        let at = now();
        Ok(s.peers
            .iter()
            .filter(|g| g.expires_at > at)
            .cloned()
            .collect())
    }

    /// Removes peer `sub` of session `id`: by its owner or an admin, or by the peer
    /// leaving. Gone from the route, so gateways close the peer's terminals as soon as
    /// the feed brings the change. To anyone else the session is unknown.
    pub fn remove_peer(&self, who: &Principal, id: &SessionId, sub: &str) -> Result<(), ApiError> {
        let s = if who.sub.as_str() == sub {
            self.peer_session(who, id)?.0
        } else {
            self.core.authorized(who, id, Action::Invite)?
        };
        if !s.peers.iter().any(|g| g.sub == sub) {
            return Err(Refusal::NOT_FOUND.with_message("no such peer"));
        }
        self.core
            .store()
            .update(id, |s| s.peers.retain(|g| g.sub != sub))?;
        let how = if who.sub.as_str() == sub {
            "peer left"
        } else {
            "peer removed"
        };
        tracing::info!(target: "audit", session = %id, sub = %who.sub, peer = sub, "{how}");
        Ok(())
    }

    /// Active session `id` if `who` (not locked) holds an unexpired invitation to it,
    /// with when that lapses; else the same refusal as an unknown session.
    pub fn peer_session(
        &self,
        who: &Principal,
        id: &SessionId,
    ) -> Result<(Session, u64), ApiError> {
        if self.core.is_locked(&who.sub)? {
            return Err(Refusal::LOCKED);
        }
        let at = now();
        let s = self.core.store().get(id)?.ok_or(Refusal::NOT_FOUND)?;
        let until = s
            .peers
            .iter()
            .find(|g| g.sub == who.sub.as_str() && g.expires_at > at)
            .map(|g| g.expires_at)
            .ok_or(Refusal::NOT_FOUND)?;
        Ok((s, until))
    }

    /// The active sessions `sub` is an unexpired peer of, with when each invitation
    /// lapses.
    pub fn peer_sessions(&self, sub: &Sub) -> Result<Vec<(Session, u64)>, ApiError> {
        let at = now();
        Ok(self
            .core
            .store()
            .list_active(None)?
            .into_iter()
            .filter_map(|s| {
                let until = s
                    .peers
                    .iter()
                    .find(|g| g.sub == sub.as_str() && g.expires_at > at)?
                    .expires_at;
                (s.owner != *sub).then_some((s, until))
            })
            .collect())
    }
}

//! [`Shares`]: read-only share links of a running session: created, listed and revoked by its
//! owner (or an admin). A link lives in the session's record as a hash
//! ([`ShareGrant`]); every change is a route change, so gateways learn it through the
//! route feed within one long poll and decide viewers locally. The link itself
//! (`/v/<token>`) is answered once, at creation, and kept nowhere.

use std::sync::Arc;

use policy::share::{self, ShareToken};
use policy::{Action, Principal, Refusal, SessionId};

use super::clock::now;
use super::core::Core;
use crate::error::ApiError;
use crate::model::{SessionState, ShareGrant};

/// A link just created: the only time its token is seen.
#[derive(Debug, Clone)]
pub struct ShareLink {
    /// The grant the session's record holds.
    pub grant: ShareGrant,
    /// The link, as a path on the gateway (`/v/<token>`).
    pub url: String,
}

/// A live link with its viewers now.
#[derive(Debug, Clone)]
pub struct ShareStatus {
    pub grant: ShareGrant,
    /// Viewers open now over every gateway that reports.
    pub viewers: u32,
    /// The signed-in viewers' `sub`s.
    pub subs: Vec<String>,
}

/// Most live links one session holds at once.
pub const MAX_SHARES_PER_SESSION: usize = 16;

/// Sessions' read-only share links and their viewers.
#[derive(Clone)]
pub struct Shares {
    core: Arc<Core>,
}

impl Shares {
    pub(super) fn new(core: Arc<Core>) -> Self {
        Shares { core }
    }

    /// Creates a link to watch session `id` read-only for `ttl_seconds`, by at most
    /// `max_viewers` at once, if its profile allows links, it runs, and its host has a
    /// read-only pool.
    pub fn create_share(
        &self,
        who: &Principal,
        id: &SessionId,
        ttl_seconds: u64,
        max_viewers: Option<u32>,
    ) -> Result<ShareLink, ApiError> {
        let s = self.core.authorized(who, id, Action::Share)?;
        let mode = self
            .core
            .config()
            .profiles
            .get(&s.profile)
            .map_or(share::ShareMode::Off, config::Profile::share_mode);
        share::check_request(mode, ttl_seconds, max_viewers)?;
        if s.state != SessionState::Running {
            return Err(Refusal::NOT_RUNNING);
        }
        if !self.core.hosts().has_viewer_pool(&s.host) {
            return Err(Refusal::NO_VIEWER_POOL);
        }
        let mut secret = [0u8; 16];
        getrandom::getrandom(&mut secret).map_err(|e| {
            tracing::error!(error = %e, "no randomness for a share link");
            Refusal::INTERNAL
        })?;
        let token = ShareToken::from_random(*id, secret);
        let at = now();
        let grant = token.grant(at.saturating_add(ttl_seconds), max_viewers, mode);
        let mut full = false;
        let added = grant.clone();
        self.core.store().update(id, |s| {
            s.shares.retain(|g| g.expires_at > at);
            if s.shares.len() >= MAX_SHARES_PER_SESSION {
                full = true;
            } else {
                s.shares.push(added);
            }
        })?;
        if full {
            return Err(Refusal::INVALID_SHARE.with_message(format!(
                "a session holds at most {MAX_SHARES_PER_SESSION} live share links; revoke one"
            )));
        }
        tracing::info!(target: "audit", session = %id, sub = %who.sub, share = %grant.id, expires_at = grant.expires_at, max_viewers = ?grant.max_viewers, signed_in = grant.signed_in, "share link created");
        Ok(ShareLink {
            grant,
            url: format!("/v/{token}"),
        })
    }

    /// The live (unexpired) links of session `id`, with their viewers now.
    pub fn list_shares(
        &self,
        who: &Principal,
        id: &SessionId,
    ) -> Result<Vec<ShareStatus>, ApiError> {
        let s = self.core.authorized(who, id, Action::Share)?;
        let at = now();
        Ok(s.shares
            .iter()
            .filter(|g| g.expires_at > at)
            .map(|g: &ShareGrant| {
                let (viewers, subs) = self.core.live().viewers(id, &g.id);
                ShareStatus {
                    grant: g.clone(),
                    viewers,
                    subs,
                }
            })
            .collect())
    }

    /// Revokes link `share` of session `id`: gone from the route, so gateways close its
    /// viewers as soon as the feed brings the change.
    pub fn revoke_share(
        &self,
        who: &Principal,
        id: &SessionId,
        share: &str,
    ) -> Result<(), ApiError> {
        let s = self.core.authorized(who, id, Action::Share)?;
        if !s.shares.iter().any(|g| g.id == share) {
            return Err(Refusal::NOT_FOUND.with_message("no such share link"));
        }
        self.core
            .store()
            .update(id, |s| s.shares.retain(|g| g.id != share))?;
        tracing::info!(target: "audit", session = %id, sub = %who.sub, share, "share link revoked");
        Ok(())
    }

    /// Records the share-link viewers a gateway has open now.
    pub fn record_viewers(&self, gateway: &str, viewers: Vec<policy::reports::ShareViewers>) {
        self.core.live().record_viewers(gateway, viewers);
    }
}

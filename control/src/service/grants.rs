//! Terminal grants (`policy::grant`): minted by the terminal check for a front proxy,
//! judged again by `GET /v1/grant` for the ttyd pool's `ttyd-attach`, which ends its
//! `docker attach` when the answer is a lapse — live revocation where termgate carries
//! none of the terminal's bytes. [`Grants`] also holds what the terminal check for a
//! front proxy (`GET /v1/authz`, `api/authz.rs`) reads: the Origins, the routes, the
//! owners' locks and the verified credential.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use config::Config;
use policy::close::CloseReason;
use policy::grant::{Grant, GrantSealer};
use policy::{OriginPolicy, Principal, Refusal, SessionId, Sub, TokenError};

use super::clock::now;
use super::core::Core;
use super::grant_handles::Handles;
use super::sign_ins::SignIns;
use crate::error::ApiError;
use crate::model::RouteLookup;

/// The terminal grants and the terminal check's reads.
#[derive(Clone)]
pub struct Grants {
    core: Arc<Core>,
    sign_ins: SignIns,
    /// The Origins allowed to open terminals (`GET /v1/authz`): the gateway's list.
    origins: Arc<OriginPolicy>,
    /// The sealer of terminal grants, made on first use.
    sealer: Arc<OnceLock<GrantSealer>>,
    /// Grants waiting for a pool that takes them by handle.
    handles: Arc<Handles>,
}

impl Grants {
    pub(super) fn new(core: Arc<Core>, sign_ins: SignIns) -> Self {
        Grants {
            origins: Arc::new(OriginPolicy::new(core.config().gateway_origins())),
            core,
            sign_ins,
            sealer: Arc::default(),
            handles: Arc::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        self.core.config()
    }

    /// Who a bearer token proves the caller is, now ([`SignIns::verify`]).
    pub fn verify(&self, token: &[u8]) -> Result<Principal, TokenError> {
        self.sign_ins.verify(token)
    }

    /// The Origins allowed to open a terminal with the cookie (the gateway's list).
    pub fn origins(&self) -> &OriginPolicy {
        &self.origins
    }

    /// Whether `sub` is locked.
    pub fn is_locked(&self, sub: &Sub) -> Result<bool, ApiError> {
        self.core.is_locked(sub)
    }

    /// One route, read consistently with its owner's lock and the revision.
    pub fn route(&self, id: &SessionId) -> Result<Option<RouteLookup>, ApiError> {
        Ok(self.core.store().lookup(id)?)
    }

    /// The sealer of this deployment's grants (its key made and stored on first use).
    fn sealer(&self) -> Result<&GrantSealer, ApiError> {
        if let Some(sealer) = self.sealer.get() {
            return Ok(sealer);
        }
        let key = self.core.store().grant_key()?;
        let sealer = GrantSealer::new(&key).map_err(|e| {
            tracing::error!(error = %e, "cannot make the grant sealer");
            ApiError::INTERNAL
        })?;
        Ok(self.sealer.get_or_init(|| sealer))
    }

    /// The grant of `who` (verified from `token`) on the terminal of `session` in
    /// `container`, as a peer the owner invited when `peer`, sealed.
    pub(crate) fn grant(
        &self,
        session: SessionId,
        container: &str,
        who: &Principal,
        token: &[u8],
        peer: bool,
    ) -> Result<String, ApiError> {
        let grant = Grant::new(session, container, who, token);
        let grant = if peer { grant.as_peer() } else { grant };
        Ok(self.sealer()?.seal(&grant))
    }

    /// Whether the user `owner` names is locked (a name that is no user's is not).
    pub(crate) fn owner_locked(&self, owner: &str) -> Result<bool, ApiError> {
        match Sub::parse(owner) {
            Some(sub) => self.core.is_locked(&sub),
            None => Ok(false),
        }
    }

    /// A one-use handle for a sealed grant (`X-Termgate-Handle`).
    pub(crate) fn grant_handle(&self, grant: &str) -> Result<String, ApiError> {
        self.handles.put(grant.to_owned())
    }

    /// The grant a handle stands for, once; `grant_invalid` for an unknown, used or
    /// stale one.
    pub fn redeem_handle(&self, handle: &str) -> Result<String, ApiError> {
        self.handles.take(handle).ok_or_else(|| {
            tracing::info!(target: "audit", reason = "handle_unknown", "grant refused");
            Refusal::GRANT_INVALID
        })
    }

    /// Opens a presented grant: refused with `grant_invalid` (403) unless sealed here.
    fn open_grant(&self, text: &str) -> Result<Grant, ApiError> {
        self.sealer()?.open(text).map_err(|e| {
            tracing::info!(target: "audit", reason = e.as_str(), "grant refused");
            Refusal::GRANT_INVALID
        })
    }

    /// Judges a grant's terminal now; for a peer's, also when their invitation lapses.
    fn recheck(&self, grant: &Grant) -> Result<(Result<(), CloseReason>, Option<u64>), ApiError> {
        let locked = self.owner_locked(&grant.sub)?;
        let lookup = self.route(&grant.session)?;
        let route = lookup.as_ref().map(|l| &l.route);
        let owner_locked = match route {
            Some(r) if grant.peer => self.owner_locked(&r.owner)?,
            _ => false,
        };
        let at = now();
        let lapses = route
            .filter(|_| grant.peer)
            .and_then(|r| policy::peer::grant_of(r, &grant.sub, at))
            .map(|g| g.expires_at);
        let revoked = self.sign_ins.revoked();
        let verdict = policy::grant::recheck(
            grant,
            route,
            locked,
            owner_locked,
            &revoked,
            at,
            self.core.config().gateway.close_on_token_expiry,
        );
        Ok((verdict, lapses))
    }

    /// `GET /v1/grant`: whether the terminal of `text` may stay open. Waits up to
    /// `wait` for a change that ends it (a store revision, a revocation applied, the
    /// credential's expiry) and answers at once when one does: `Ok(None)` still open,
    /// `Ok(Some(lapse))` close it.
    pub async fn watch_grant(
        &self,
        text: &str,
        wait: Duration,
    ) -> Result<Option<CloseReason>, ApiError> {
        let grant = self.open_grant(text)?;
        let deadline = Instant::now() + wait;
        let mut revs = self.core.store().subscribe();
        let mut applied = self.sign_ins.applied();
        loop {
            revs.borrow_and_update();
            applied.borrow_and_update();
            let (verdict, invitation_lapses) = self.recheck(&grant)?;
            if let Err(lapse) = verdict {
                tracing::info!(target: "audit", session = %grant.session, sub = %grant.sub, reason = lapse.as_str(), "grant lapsed: the pool closes its terminal");
                return Ok(Some(lapse));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let until = |at: u64| {
                Duration::from_secs(at.saturating_sub(now())).max(Duration::from_millis(200))
            };
            let mut nap = left;
            if self.core.config().gateway.close_on_token_expiry {
                nap = nap.min(until(grant.expires_at));
            }
            // An invitation lapses by itself, with no change in the store to wake on.
            if let Some(at) = invitation_lapses {
                nap = nap.min(until(at));
            }
            tokio::select! {
                r = revs.changed() => if r.is_err() { tokio::time::sleep(nap).await },
                r = applied.changed() => if r.is_err() { tokio::time::sleep(nap).await },
                () = tokio::time::sleep(nap) => {}
            }
        }
    }
}

//! [`SignIns`]: sign-ins, revocations and the verification of tokens (design §2 "Sign-ins and revocation"): a gateway records each sign-in it makes,
//! users list and sign out theirs, admins anyone's, and admins revoke bearer tokens.
//! Every revocation is filed in the store, published on the route feed (gateways
//! refuse the credential and close what it opened) and applied here at once, so
//! control's own API and `GET /v1/authz` refuse it too: [`SignIns::verify`] checks
//! every verified token against them.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use policy::revocation::{latest_exp, CredentialId, Fingerprint, Revocation, RevocationSet};
use policy::{Principal, Sub, TokenError, Verifier};
use tokio::sync::watch;

use super::clock::now;
use super::core::Core;
use crate::error::ApiError;
use crate::model::SignIn;
use policy::reports::SignInReport;

/// An admin's revocation: a token by its `jti`, or a user's tokens issued before a
/// time.
#[derive(Debug, Clone, Default)]
pub struct RevocationAsked {
    /// The token's `jti`.
    pub jti: Option<String>,
    /// With `issued_before`: whose tokens.
    pub sub: Option<String>,
    /// Seconds since the Unix epoch; `0` or `None` with `sub`: now (tokens issued in
    /// this second included).
    pub issued_before: Option<u64>,
    /// When the revoked token expires (its `exp`), if known.
    pub expires_at: Option<u64>,
}

/// The time a user's tokens are revoked before, asked at `t`: `None` or `0` is now, and
/// never later. Times are whole seconds: "now" takes in this second's tokens too, so a
/// token signed a moment before is not left out.
fn issued_before(asked: Option<u64>, t: u64) -> u64 {
    match asked {
        None | Some(0) => t + 1,
        Some(b) => b.min(t + 1),
    }
}

/// Cuts a reported string to `max` characters, dropping control characters.
fn clean(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}

/// The sign-ins and revocations, and the verifier that checks tokens against them.
#[derive(Clone)]
pub struct SignIns {
    core: Arc<Core>,
    verifier: Arc<Verifier>,
    /// The revocations in force, checked on every verified token.
    revoked: Arc<RwLock<RevocationSet>>,
    /// Bumped after a revocation is applied to `revoked`, for grant watchers (the
    /// store's revision moves before it is).
    applied: Arc<watch::Sender<u64>>,
}

impl SignIns {
    pub(super) fn new(core: Arc<Core>, verifier: Verifier) -> Self {
        SignIns {
            core,
            verifier: Arc::new(verifier),
            revoked: Arc::default(),
            applied: Arc::new(watch::channel(0).0),
        }
    }

    /// Who a bearer token proves the caller is, now.
    pub fn verify(&self, token: &[u8]) -> Result<Principal, TokenError> {
        let who = self.verifier.verify(token, now())?;
        self.check_revoked(token, &who)?;
        Ok(who)
    }

    /// The revocations in force now.
    pub(super) fn revoked(&self) -> RwLockReadGuard<'_, RevocationSet> {
        self.revoked.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves each time a revocation has been applied here.
    pub(super) fn applied(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Loads the revocations in force from the store (at start).
    pub fn load_revocations(&self) -> Result<usize, crate::store::StoreError> {
        let all = self.core.store().revocations()?;
        let mut set = self.revoked_write();
        set.replace(&all);
        set.prune(now(), self.core.config().auth.leeway_seconds);
        Ok(set.len())
    }

    fn revoked_write(&self) -> RwLockWriteGuard<'_, RevocationSet> {
        self.revoked.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a verified token is revoked; the reason as a token error.
    fn check_revoked(&self, token: &[u8], who: &Principal) -> Result<(), TokenError> {
        let set = self.revoked();
        if set.is_empty() {
            return Ok(());
        }
        match set.check(&CredentialId::of(token, who)) {
            Some(why) => Err(why.into()),
            None => Ok(()),
        }
    }

    /// Files and publishes one revocation, and applies it here.
    fn revoke(&self, r: &Revocation) -> Result<bool, ApiError> {
        let published = self.core.store().revoke(r)?;
        self.revoked_write().insert(r);
        self.applied.send_modify(|n| *n += 1);
        Ok(published)
    }

    /// Records the sign-in whose token `who` presented (`token`).
    pub fn record_sign_in(
        &self,
        who: &Principal,
        token: &[u8],
        report: &SignInReport,
    ) -> Result<SignIn, ApiError> {
        let method = match report.method.as_str() {
            "" | "token" => "token",
            "oidc" => "oidc",
            _ => return Err(ApiError::INVALID_JSON.with_message("method must be token or oidc")),
        };
        let s = SignIn {
            fingerprint: Fingerprint::of(token),
            sub: who.sub.clone(),
            created_at: now(),
            expires_at: who.expires_at,
            method: method.into(),
            gateway: clean(&report.gateway, 64),
            user_agent: clean(&report.user_agent, 200),
            client: clean(&report.client, 64),
        };
        if report.once {
            self.core.store().put_new_sign_in(&s)?;
        } else {
            self.core.store().put_sign_in(&s)?;
        }
        tracing::info!(target: "audit", sub = %who.sub, sign_in = %s.id(), method, gateway = %s.gateway, client = %s.client, "sign-in recorded");
        Ok(s)
    }

    /// The sign-ins of `whose` (the caller's own without it; another user's: admin
    /// only), newest first. A revoked sign-in's record goes in the revocation's own
    /// transaction, so none is listed.
    pub fn list_sign_ins(
        &self,
        who: &Principal,
        whose: Option<&Sub>,
    ) -> Result<Vec<SignIn>, ApiError> {
        let sub = self.whose_sign_ins(who, whose)?;
        Ok(self.core.store().sign_ins(Some(sub), now())?)
    }

    /// Whose sign-ins `who` may see and end: their own, or (admin) anyone's.
    fn whose_sign_ins<'a>(
        &self,
        who: &'a Principal,
        whose: Option<&'a Sub>,
    ) -> Result<&'a Sub, ApiError> {
        match whose {
            Some(other) if *other != who.sub && !who.admin => Err(ApiError::ADMIN_REQUIRED
                .with_message("only an admin may see or end another user's sign-ins")),
            Some(other) => Ok(other),
            None => Ok(&who.sub),
        }
    }

    /// Signs out the sign-in of the token presented (`DELETE /v1/signins/current`).
    pub fn sign_out_current(&self, who: &Principal, token: &[u8]) -> Result<(), ApiError> {
        let fingerprint = Fingerprint::of(token);
        self.revoke(&Revocation::SignIn {
            fingerprint,
            sub: who.sub.to_string(),
            expires_at: who.expires_at,
        })?;
        tracing::info!(target: "audit", sub = %who.sub, sign_in = %fingerprint.id(), by = %who.sub, reason = "signed_out", "signed out");
        Ok(())
    }

    /// Signs out one sign-in by its public id: the caller's own, or (admin) anyone's.
    /// Another user's and an unknown id are the same 404 for a non-admin.
    pub fn sign_out(&self, who: &Principal, id: &str, whose: Option<&Sub>) -> Result<(), ApiError> {
        let sub = match self.whose_sign_ins(who, whose) {
            Ok(sub) => sub,
            Err(_) => return Err(ApiError::SIGN_IN_NOT_FOUND),
        };
        let scope = if who.admin && whose.is_none() {
            // An admin ending a sign-in by id alone may name anyone's.
            None
        } else {
            Some(sub)
        };
        let s = self
            .core
            .store()
            .sign_ins(scope, now())?
            .into_iter()
            .find(|s| s.id() == id)
            .ok_or(ApiError::SIGN_IN_NOT_FOUND)?;
        self.revoke(&Revocation::SignIn {
            fingerprint: s.fingerprint,
            sub: s.sub.to_string(),
            expires_at: s.expires_at,
        })?;
        tracing::info!(target: "audit", sub = %s.sub, sign_in = %s.id(), by = %who.sub, reason = "signed_out", "signed out");
        Ok(())
    }

    /// Signs out every sign-in of `whose` (the caller's own without it): "sign out
    /// everywhere". Then revokes every token of that user issued until now (as an
    /// admin's `{"sub": …}` revocation does), so the sign-in links and tokens those
    /// sign-ins came from cannot sign in again. Returns how many sign-ins, and the time
    /// before which every token of the user is revoked.
    pub fn sign_out_all(
        &self,
        who: &Principal,
        whose: Option<&Sub>,
    ) -> Result<(usize, u64), ApiError> {
        let sub = self.whose_sign_ins(who, whose)?;
        let t = now();
        let list = self.core.store().sign_ins(Some(sub), t)?;
        // Each sign-in first, so their terminals close as "signed out".
        for s in &list {
            self.revoke(&Revocation::SignIn {
                fingerprint: s.fingerprint,
                sub: s.sub.to_string(),
                expires_at: s.expires_at,
            })?;
        }
        let before = issued_before(None, t);
        let tokens = self.tokens_issued_before(sub, before);
        self.revoke(&tokens)?;
        tracing::info!(target: "audit", sub = %sub, by = %who.sub, signed_out = list.len(), revocation = %tokens.key(), reason = "signed_out_everywhere", "signed out everywhere");
        Ok((list.len(), before))
    }

    /// The revocation of every token of `sub` issued before `before`.
    fn tokens_issued_before(&self, sub: &Sub, before: u64) -> Revocation {
        let auth = &self.core.config().auth;
        Revocation::IssuedBefore {
            sub: sub.to_string(),
            before,
            // No token issued before `before` that verifies expires later.
            expires_at: latest_exp(before, auth.max_token_lifetime_seconds, auth.leeway_seconds),
        }
    }

    /// An admin's revocation of a token (`jti`) or of a user's tokens issued before a
    /// time.
    pub fn revoke_tokens(
        &self,
        who: &Principal,
        req: &RevocationAsked,
    ) -> Result<Revocation, ApiError> {
        if !who.admin {
            return Err(ApiError::ADMIN_REQUIRED.with_message("only an admin may revoke tokens"));
        }
        let t = now();
        let (max_lifetime, leeway) = (
            self.core.config().auth.max_token_lifetime_seconds,
            self.core.config().auth.leeway_seconds,
        );
        let r = match (&req.jti, &req.sub) {
            (Some(jti), None) if !jti.is_empty() && jti.len() <= 256 => Revocation::of_token(
                jti.clone(),
                req.expires_at,
                t,
                latest_exp(t, max_lifetime, leeway),
            )
            .map_err(|e| ApiError::INVALID_REVOCATION.with_message(e.to_string()))?,
            (None, Some(sub)) => {
                let sub = Sub::parse(sub).ok_or(ApiError::INVALID_SUB)?;
                self.tokens_issued_before(&sub, issued_before(req.issued_before, t))
            }
            _ => return Err(ApiError::INVALID_REVOCATION),
        };
        self.revoke(&r)?;
        tracing::info!(target: "audit", by = %who.sub, revocation = %r.key(), reason = "token_revoked", "tokens revoked");
        Ok(r)
    }

    /// Every revocation in force; admin only.
    pub fn revocations(&self, who: &Principal) -> Result<Vec<Revocation>, ApiError> {
        if !who.admin {
            return Err(ApiError::ADMIN_REQUIRED.with_message("only an admin may list revocations"));
        }
        Ok(self.core.store().revocations()?)
    }

    /// Forgets sign-ins and revocations whose tokens can no longer verify.
    pub fn prune_sign_ins(&self) -> Result<usize, ApiError> {
        let (t, leeway) = (now(), self.core.config().auth.leeway_seconds);
        let gone = self.core.store().prune_sign_ins(t, leeway)?;
        self.revoked_write().prune(t, leeway);
        Ok(gone)
    }
}

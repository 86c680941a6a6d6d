//! Sign-ins and revocations: who is signed in where, and which credentials no
//! gateway may accept any more. A revocation is one transaction that files the entry,
//! drops the sign-in it ends and appends a [`Change::Revoke`] for the feed; entries go
//! once the tokens they name can no longer verify ([`Revocation::forget_at`], with the
//! verifier's leeway).

use policy::revocation::{Fingerprint, Revocation};
use policy::Sub;

use super::error::{Result, StoreError};
use super::tx::encode;
use super::Store;
use crate::model::{Change, SignIn};

impl Store {
    /// Records a sign-in (a second one of the same token replaces it); flushed.
    pub fn put_sign_in(&self, s: &SignIn) -> Result<()> {
        self.record_sign_in(s, false)
    }

    /// Records a sign-in that must be new: a second one of the same token is refused
    /// (`Conflict`), even once the first was signed out. A browser's code for the
    /// command-line client always makes the same token, so this is its single use.
    pub fn put_new_sign_in(&self, s: &SignIn) -> Result<()> {
        self.record_sign_in(s, true)
    }

    fn record_sign_in(&self, s: &SignIn, once: bool) -> Result<()> {
        let _guard = self.write_lock()?;
        let key = s.fingerprint.to_string();
        self.transact(|tx| {
            if tx.revoked.get(format!("f/{key}").as_bytes())?.is_some() {
                return Err(super::tx::abort(StoreError::Conflict(
                    "this sign-in was signed out".into(),
                )));
            }
            if once && tx.sign_ins.get(key.as_bytes())?.is_some() {
                return Err(super::tx::abort(StoreError::Conflict(
                    "this sign-in was made already".into(),
                )));
            }
            tx.sign_ins.insert(key.as_bytes(), encode(s)?)?;
            Ok(())
        })?;
        self.settle()
    }

    /// The sign-ins of `sub` (of everyone with `None`) whose tokens have not expired at
    /// `now`, newest first.
    pub fn sign_ins(&self, sub: Option<&Sub>, now: u64) -> Result<Vec<SignIn>> {
        let mut out = Vec::new();
        for item in self.t()?.sign_ins.iter() {
            let (key, value) = item?;
            let s: SignIn = serde_json::from_slice(&value).map_err(|e| {
                StoreError::undecodable(format!("sign-in {}", String::from_utf8_lossy(&key)), e)
            })?;
            if s.fingerprint.to_string().as_bytes() != key.as_ref() {
                return Err(StoreError::corrupt(format!(
                    "sign-in stored under {} says {}",
                    String::from_utf8_lossy(&key),
                    s.fingerprint
                )));
            }
            if sub.is_none_or(|u| *u == s.sub) && s.expires_at > now {
                out.push(s);
            }
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        Ok(out)
    }

    /// Files `r`, ends the sign-in it names (if recorded) and publishes it on the feed;
    /// flushed. false if the same entry was in force already (nothing published).
    pub fn revoke(&self, r: &Revocation) -> Result<bool> {
        let _guard = self.write_lock()?;
        let key = r.key();
        let published = self.transact(|tx| {
            if let Some(old) = tx.revoked.get(key.as_bytes())? {
                let old: Revocation = serde_json::from_slice(&old).map_err(|e| {
                    super::tx::abort(StoreError::undecodable(format!("revocation {key}"), e))
                })?;
                if old == *r {
                    return Ok(false);
                }
            }
            tx.revoked.insert(key.as_bytes(), encode(r)?)?;
            if let Revocation::SignIn { fingerprint, .. } = r {
                tx.sign_ins.remove(fingerprint.to_string().as_bytes())?;
            }
            let revocation = r.clone();
            tx.bump(|rev| Change::Revoke { rev, revocation })?;
            Ok(true)
        })?;
        if published {
            self.settle()?;
        }
        Ok(published)
    }

    /// Every revocation in force.
    pub fn revocations(&self) -> Result<Vec<Revocation>> {
        let mut out = Vec::new();
        for item in self.t()?.revoked.iter() {
            let (key, value) = item?;
            let r: Revocation = serde_json::from_slice(&value).map_err(|e| {
                StoreError::undecodable(format!("revocation {}", String::from_utf8_lossy(&key)), e)
            })?;
            out.push(r);
        }
        Ok(out)
    }

    /// The recorded sign-in with this fingerprint.
    pub fn sign_in(&self, f: &Fingerprint) -> Result<Option<SignIn>> {
        let Some(value) = self.t()?.sign_ins.get(f.to_string().as_bytes())? else {
            return Ok(None);
        };
        let s = serde_json::from_slice(&value)
            .map_err(|e| StoreError::undecodable(format!("sign-in {f}"), e))?;
        Ok(Some(s))
    }

    /// Forgets sign-ins and revocations whose tokens can no longer verify at `now`
    /// with `leeway_secs` of leeway (gateways forget them by themselves; nothing is
    /// fed). Returns how many went.
    pub fn prune_sign_ins(&self, now: u64, leeway_secs: u64) -> Result<usize> {
        let _guard = self.write_lock()?;
        let t = self.t()?;
        let mut gone = 0;
        for item in t.sign_ins.iter() {
            let (key, value) = item?;
            let expired = serde_json::from_slice::<SignIn>(&value)
                .map(|s| policy::revocation::keep_until(s.expires_at, leeway_secs) <= now)
                .unwrap_or(false);
            if expired {
                t.sign_ins.remove(key)?;
                gone += 1;
            }
        }
        for item in t.revoked.iter() {
            let (key, value) = item?;
            let done = serde_json::from_slice::<Revocation>(&value)
                .map(|r| r.forget_at(leeway_secs) <= now)
                .unwrap_or(false);
            if done {
                t.revoked.remove(key)?;
                gone += 1;
            }
        }
        if gone > 0 {
            self.settle()?;
        }
        Ok(gone)
    }
}

//! Per-user books: the active-session counts quotas are checked against, and user
//! locks.

use policy::Sub;
use sled::IVec;

use super::error::{Result, StoreError};
use super::keys::{decode_u32, user_count_key, GLOBAL_COUNT_KEY};
use super::sessions::decode_session;
use super::tx::encode;
use super::Store;
use crate::model::{Change, UserLock};

impl Store {
    /// (sessions `owner` holds, sessions the deployment holds), counting `creating`,
    /// `running` and `stopping`.
    pub fn counts(&self, owner: &Sub) -> Result<(u32, u32)> {
        let user = decode_u32(self.t()?.counts.get(user_count_key(owner))?)?;
        Ok((user, self.active_count()?))
    }

    /// Sessions the deployment holds, counting `creating`, `running` and `stopping`.
    pub fn active_count(&self) -> Result<u32> {
        decode_u32(self.t()?.counts.get(GLOBAL_COUNT_KEY)?)
    }

    /// Recompute counts from the sessions tree (used after repair); returns the total
    /// number of active sessions. Gateways learn nothing from it, so no rev bump.
    pub fn recount(&self) -> Result<u32> {
        let _guard = self.write_lock()?;
        let mut per_user: std::collections::BTreeMap<Sub, u32> = Default::default();
        let mut total: u32 = 0;
        for item in self.t()?.sessions.iter() {
            let (key, value) = item?;
            let s = decode_session(&key, &value)?;
            *per_user.entry(s.owner).or_default() += 1;
            total += 1;
        }
        let stale: Vec<IVec> = self
            .t()?
            .counts
            .iter()
            .keys()
            .collect::<std::result::Result<_, _>>()?;
        self.transact(|tx| {
            for key in &stale {
                tx.counts.remove(key)?;
            }
            for (owner, n) in &per_user {
                tx.set_count(&user_count_key(owner), *n)?;
            }
            tx.set_count(GLOBAL_COUNT_KEY, total)?;
            Ok(())
        })?;
        self.flush()?;
        Ok(total)
    }

    /// Locks `sub` (gateways close their terminals). false if already locked (no rev
    /// bump then).
    pub fn lock_user(&self, sub: &Sub, by: &Sub, now: u64) -> Result<bool> {
        let lock = UserLock {
            sub: sub.clone(),
            by: by.clone(),
            at: now,
        };
        let _guard = self.write_lock()?;
        let locked = self.transact(|tx| {
            if tx.locks.get(sub.as_str().as_bytes())?.is_some() {
                return Ok(false);
            }
            tx.locks.insert(sub.as_str().as_bytes(), encode(&lock)?)?;
            tx.bump(|rev| Change::Lock {
                rev,
                sub: sub.to_string(),
            })?;
            Ok(true)
        })?;
        if locked {
            self.settle()?;
        }
        Ok(locked)
    }

    /// Unlocks `sub`. false if not locked (no rev bump then).
    pub fn unlock_user(&self, sub: &Sub) -> Result<bool> {
        let _guard = self.write_lock()?;
        let unlocked = self.transact(|tx| {
            if tx.locks.remove(sub.as_str().as_bytes())?.is_none() {
                return Ok(false);
            }
            tx.bump(|rev| Change::Unlock {
                rev,
                sub: sub.to_string(),
            })?;
            Ok(true)
        })?;
        if unlocked {
            self.settle()?;
        }
        Ok(unlocked)
    }

    /// Whether `sub` is locked.
    pub fn is_locked(&self, sub: &Sub) -> Result<bool> {
        Ok(self.t()?.locks.contains_key(sub.as_str().as_bytes())?)
    }

    /// Every locked user, sorted.
    pub fn locked_users(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for item in self.t()?.locks.iter() {
            let (key, value) = item?;
            let lock: UserLock = serde_json::from_slice(&value).map_err(|e| {
                StoreError::undecodable(format!("lock {}", String::from_utf8_lossy(&key)), e)
            })?;
            if lock.sub.as_str().as_bytes() != key.as_ref() {
                return Err(StoreError::corrupt(format!(
                    "lock stored under {} names {}",
                    String::from_utf8_lossy(&key),
                    lock.sub
                )));
            }
            out.push(lock.sub.to_string());
        }
        Ok(out)
    }
}

//! [`Users`]: locking users out, and who may.

use std::sync::Arc;

use policy::{Principal, Sub};

use crate::error::ApiError;

use super::clock::now;
use super::core::Core;

/// Whether `who` may lock and unlock users: admins only. Checked before the user named
/// is even read, so a non-admin learns nothing from the name.
pub fn may_lock(who: &Principal) -> Result<(), ApiError> {
    if who.admin {
        Ok(())
    } else {
        Err(ApiError::ADMIN_REQUIRED.with_message("only an admin may lock users"))
    }
}

/// The users' locks.
#[derive(Clone)]
pub struct Users {
    core: Arc<Core>,
}

impl Users {
    pub(super) fn new(core: Arc<Core>) -> Self {
        Users { core }
    }

    /// Whether `sub` is locked.
    pub fn is_locked(&self, sub: &Sub) -> Result<bool, ApiError> {
        self.core.is_locked(sub)
    }

    /// The locked users; admin only.
    pub fn locked_users(&self, who: &Principal) -> Result<Vec<String>, ApiError> {
        if !who.admin {
            return Err(
                ApiError::ADMIN_REQUIRED.with_message("only an admin may list locked users")
            );
        }
        Ok(self.core.store().locked_users()?)
    }

    /// Locks (`true`) or unlocks a user; admin only. Published on the route feed.
    pub fn set_lock(&self, who: &Principal, sub: &Sub, lock: bool) -> Result<(), ApiError> {
        may_lock(who)?;
        if *sub == who.sub {
            // An admin who could lock themselves could lock the last unlocked admin
            // out; one who could unlock themselves would make locks meaningless.
            return Err(ApiError::OWN_LOCK);
        }
        let changed = if lock {
            self.core.store().lock_user(sub, &who.sub, now())?
        } else {
            self.core.store().unlock_user(sub)?
        };
        self.core.refresh_gauges();
        tracing::info!(target: "audit", sub = %sub, by = %who.sub, locked = lock, changed, "user lock");
        Ok(())
    }
}

//! One write as one sled transaction over every tree: [`Tx`], and the helpers writes
//! share.

use policy::{SessionId, Sub};
use sled::transaction::{ConflictableTransactionError, TransactionalTree};
use sled::{IVec, Transactional};

use super::error::{Result, StoreError};
use super::keys::{
    decode_u32, decode_u64, history_key, owner_key, user_count_key, GLOBAL_COUNT_KEY, REV_KEY,
};
use super::Store;
use crate::model::{Change, Pools, Session};

/// What a closure run inside a transaction returns; an abort carries a [`StoreError`].
pub(super) type TxResult<T> = std::result::Result<T, ConflictableTransactionError<StoreError>>;

/// Aborts the transaction with `e`.
pub(super) fn abort(e: StoreError) -> ConflictableTransactionError<StoreError> {
    ConflictableTransactionError::Abort(e)
}

/// A record as stored: JSON.
pub(super) fn encode<T: serde::Serialize>(value: &T) -> TxResult<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| abort(StoreError::Encode(e)))
}

impl Store {
    /// Runs `f` as one transaction over all trees. Callers hold the write mutex, so
    /// sled never has to retry `f` for a conflict.
    pub(super) fn transact<T>(&self, f: impl Fn(&Tx<'_>) -> TxResult<T>) -> Result<T> {
        let t = self.t()?;
        let trees = (
            &t.sessions,
            &t.owners,
            &t.history,
            &t.history_by_owner,
            &t.counts,
            &t.meta,
            &t.changes,
            &t.locks,
            &t.targets,
            &t.sign_ins,
            &t.revoked,
            &t.recording_links,
            &t.workspaces,
        );
        let out = self.note(
            trees
                .transaction(
                    |(
                        sessions,
                        owners,
                        history,
                        history_by_owner,
                        counts,
                        meta,
                        changes,
                        locks,
                        targets,
                        sign_ins,
                        revoked,
                        recording_links,
                        workspaces,
                    )| {
                        f(&Tx {
                            sessions,
                            owners,
                            history,
                            history_by_owner,
                            counts,
                            meta,
                            changes,
                            locks,
                            targets,
                            sign_ins,
                            revoked,
                            recording_links,
                            workspaces,
                            change_log_len: self.change_log_len,
                            pools: &self.pools,
                            viewer_pools: &self.viewer_pools,
                        })
                    },
                )
                .map_err(StoreError::from),
        )?;
        Ok(out)
    }
}

/// The trees as seen inside one transaction.
pub(super) struct Tx<'a> {
    pub(super) sessions: &'a TransactionalTree,
    pub(super) owners: &'a TransactionalTree,
    pub(super) history: &'a TransactionalTree,
    pub(super) history_by_owner: &'a TransactionalTree,
    pub(super) counts: &'a TransactionalTree,
    pub(super) meta: &'a TransactionalTree,
    pub(super) changes: &'a TransactionalTree,
    pub(super) locks: &'a TransactionalTree,
    pub(super) targets: &'a TransactionalTree,
    pub(super) sign_ins: &'a TransactionalTree,
    pub(super) revoked: &'a TransactionalTree,
    pub(super) recording_links: &'a TransactionalTree,
    pub(super) workspaces: &'a TransactionalTree,
    change_log_len: u64,
    pools: &'a Pools,
    viewer_pools: &'a Pools,
}

impl Tx<'_> {
    /// Whether the id is taken by a session, active or ended, or by a target (reads
    /// see this transaction's writes).
    pub(super) fn id_used(&self, id: &SessionId) -> TxResult<bool> {
        let key = id.as_str().as_bytes();
        Ok(self.sessions.get(key)?.is_some()
            || self.history.get(key)?.is_some()
            || self.targets.get(key)?.is_some()
            || self.workspaces.get(key)?.is_some())
    }

    /// Files an active session under its id and its owner.
    pub(super) fn put_active(&self, s: &Session) -> TxResult<()> {
        self.sessions.insert(s.id.as_str().as_bytes(), encode(s)?)?;
        self.owners
            .insert(owner_key(&s.owner, &s.id), IVec::default())?;
        Ok(())
    }

    /// Files an ended session under its id and its owner's history.
    pub(super) fn put_history(&self, s: &Session, ended_at: u64) -> TxResult<()> {
        self.history.insert(s.id.as_str().as_bytes(), encode(s)?)?;
        self.history_by_owner
            .insert(history_key(&s.owner, ended_at, &s.id), IVec::default())?;
        Ok(())
    }

    /// The count under `key`.
    pub(super) fn count(&self, key: &[u8]) -> TxResult<u32> {
        decode_u32(self.counts.get(key)?).map_err(abort)
    }

    /// Sets the count under `key`.
    pub(super) fn set_count(&self, key: &[u8], n: u32) -> TxResult<()> {
        // Zero counts are removed so the tree only lists users that hold sessions.
        if n == 0 {
            self.counts.remove(key)?;
        } else {
            self.counts.insert(key, n.to_be_bytes().as_slice())?;
        }
        Ok(())
    }

    /// Adds `delta` (±1) to the owner's and the global count. Decrements saturate at
    /// zero: counts that drifted (repaired by `recount`) must not block ending a session.
    pub(super) fn add_active(&self, owner: &Sub, delta: i8) -> TxResult<()> {
        let apply = |n: u32| {
            if delta >= 0 {
                n.saturating_add(u32::from(delta.unsigned_abs()))
            } else {
                n.saturating_sub(u32::from(delta.unsigned_abs()))
            }
        };
        let user_key = user_count_key(owner);
        self.set_count(&user_key, apply(self.count(&user_key)?))?;
        self.set_count(GLOBAL_COUNT_KEY, apply(self.count(GLOBAL_COUNT_KEY)?))?;
        Ok(())
    }

    /// The change a session write publishes: its route when running, else a removal.
    pub(super) fn bump_for(&self, s: &Session) -> TxResult<u64> {
        match s.route_via(self.pools) {
            Some(route) => {
                let route = s.with_viewers(route, self.viewer_pools);
                self.bump(|rev| Change::Upsert { rev, route })
            }
            None => self.bump(|rev| Change::Remove { rev, session: s.id }),
        }
    }

    /// Bumps `rev`, appends the change made for it, and drops the change that falls
    /// out of the bounded log.
    pub(super) fn bump(&self, make: impl FnOnce(u64) -> Change) -> TxResult<u64> {
        let current = decode_u64(self.meta.get(REV_KEY)?).map_err(abort)?;
        let rev = current
            .checked_add(1)
            .ok_or_else(|| abort(StoreError::corrupt("revision overflow")))?;
        let change = make(rev);
        self.meta.insert(REV_KEY, rev.to_be_bytes().as_slice())?;
        self.changes
            .insert(rev.to_be_bytes().as_slice(), encode(&change)?)?;
        if rev > self.change_log_len {
            self.changes
                .remove((rev - self.change_log_len).to_be_bytes().as_slice())?;
        }
        Ok(rev)
    }
}

//! The control service's books, kept in sled. This is the only module that touches sled.
//!
//! Layout (one sled database, eight trees):
//!
//! | tree               | key                                         | value              |
//! |--------------------|---------------------------------------------|--------------------|
//! | `sessions`         | session id                                  | active [`Session`] JSON |
//! | `owners`           | `owner \0 id`                               | empty              |
//! | `history`          | session id                                  | ended [`Session`] JSON |
//! | `history_by_owner` | `owner \0 ended_at (u64 BE) \0 id`          | empty              |
//! | `counts`           | `u:<sub>` / `g`                             | u32 BE             |
//! | `meta`             | `rev`                                       | u64 BE             |
//! | `changes`          | rev (u64 BE)                                | [`Change`] JSON    |
//! | `locks`            | sub                                         | [`UserLock`] JSON  |
//!
//! Every write holds one process-wide mutex and runs as one multi-tree transaction:
//! the mutex serialises quota check, insert, counting and the revision bump (sled's
//! optimistic transactions alone let racing creates overshoot a quota), and the
//! transaction makes a crash leave either all of a change or none of it. Because every
//! write holds the mutex, a writer may also read the trees outside its transaction
//! (for prefix scans, which transactions cannot do) and rely on them not moving.
//!
//! A write that changes what gateways should know bumps `rev` and appends exactly one
//! [`Change`] in the same transaction; the change log keeps the newest
//! `change_log_len` entries. After commit the database is flushed (an acknowledged
//! change survives `kill -9`) and the new revision is published on a watch channel so
//! long-polling feed readers wake at once.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use policy::{QuotaExceeded, QuotaLimits, SessionId};
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};
use sled::{IVec, Transactional, Tree};
use tokio::sync::watch;

use crate::model::{Change, FeedPage, Route, RouteLookup, Session, SessionState, UserLock};

/// Result of every store operation.
pub type Result<T> = std::result::Result<T, StoreError>;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Creating one more session would exceed a quota.
    #[error("{0}")]
    Quota(QuotaExceeded),
    /// No active session has that id.
    #[error("no such active session")]
    NotFound,
    /// The write contradicts what is stored (an id that exists, a transition not allowed).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The record has moved on from the state the caller decided on (it is now in the
    /// given state); nothing was written.
    #[error("the session is now {}, no longer in the state the change was decided on", .0.as_str())]
    StateChanged(SessionState),
    /// A stored record cannot be read back; the store needs repair.
    #[error("corrupt store record: {0}")]
    Corrupt(String),
    /// The database itself failed (I/O and the like).
    #[error("store database error: {0}")]
    Db(String),
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        match e {
            // sled's own checksum failures are corruption too, and need the same repair.
            sled::Error::Corruption { .. } => StoreError::Corrupt(e.to_string()),
            other => StoreError::Db(other.to_string()),
        }
    }
}

impl From<TransactionError<StoreError>> for StoreError {
    fn from(e: TransactionError<StoreError>) -> Self {
        match e {
            TransactionError::Abort(e) => e,
            TransactionError::Storage(e) => e.into(),
        }
    }
}

const SESSIONS: &str = "sessions";
const OWNERS: &str = "owners";
const HISTORY: &str = "history";
const HISTORY_BY_OWNER: &str = "history_by_owner";
const COUNTS: &str = "counts";
const META: &str = "meta";
const CHANGES: &str = "changes";
const LOCKS: &str = "locks";

const REV_KEY: &[u8] = b"rev";
const GLOBAL_COUNT_KEY: &[u8] = b"g";
const ID_LEN: usize = SessionId::LEN;
/// `\0 id` at the end of an `owners` key.
const OWNER_TAIL: usize = 1 + ID_LEN;
/// `\0 ended_at \0 id` at the end of a `history_by_owner` key.
const HISTORY_TAIL: usize = 1 + 8 + 1 + ID_LEN;

/// The control service's persistent state: sessions, history, quotas, locks and the
/// route feed.
pub struct Store {
    db: sled::Db,
    sessions: Tree,
    owners: Tree,
    history: Tree,
    history_by_owner: Tree,
    counts: Tree,
    meta: Tree,
    changes: Tree,
    locks: Tree,
    change_log_len: u64,
    /// This opening's feed epoch (see [`FeedPage::epoch`]).
    epoch: String,
    write_lock: Mutex<()>,
    /// Holds the newest committed-and-flushed revision; receivers are feed pollers.
    rev_tx: watch::Sender<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("rev", &self.rev())
            .field("change_log_len", &self.change_log_len)
            .finish_non_exhaustive()
    }
}

/// How an active session ends: [`Store::end`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// The states the decision to end was based on; the end happens only if the record
    /// is still in one of them.
    pub from: &'a [SessionState],
    /// The ended state to record.
    pub state: SessionState,
    /// Who ends it: a `sub`, or `termgate` for the reconciler.
    pub by: &'a str,
    /// Why, in words.
    pub reason: &'a str,
    /// When, seconds since the Unix epoch.
    pub at: u64,
}

/// Every active state: for an end that holds whatever the session is doing.
pub const ANY_ACTIVE: &[SessionState] = &[
    SessionState::Creating,
    SessionState::Running,
    SessionState::Stopping,
];

impl Store {
    /// Opens (or creates) the store in directory `path`, keeping the newest
    /// `change_log_len` feed changes (at least one, so the newest change is always
    /// retained).
    pub fn open(path: &Path, change_log_len: usize) -> Result<Store> {
        let db = sled::open(path)?;
        let open = |name: &str| db.open_tree(name);
        let store = Store {
            sessions: open(SESSIONS)?,
            owners: open(OWNERS)?,
            history: open(HISTORY)?,
            history_by_owner: open(HISTORY_BY_OWNER)?,
            counts: open(COUNTS)?,
            meta: open(META)?,
            changes: open(CHANGES)?,
            locks: open(LOCKS)?,
            change_log_len: u64::try_from(change_log_len.max(1)).unwrap_or(u64::MAX),
            epoch: new_epoch()?,
            write_lock: Mutex::new(()),
            rev_tx: watch::channel(0).0,
            db,
        };
        let rev = store.stored_rev()?;
        store.rev_tx.send_replace(rev);
        Ok(store)
    }

    /// The newest revision that has been committed and flushed.
    pub fn rev(&self) -> u64 {
        *self.rev_tx.borrow()
    }

    /// A receiver that sees every new revision as it is published (for long polls).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.rev_tx.subscribe()
    }

    /// true when the store has no active sessions and no history (fresh or lost store).
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.history.is_empty()
    }

    /// Quota check (limits.check(user_active, global_active)) + insert a `Creating`
    /// session + counts + rev bump, atomically; flush.
    ///
    /// `Conflict` if `s` is not `Creating` or its id is already used (active or ended).
    pub fn insert_creating(&self, s: &Session, limits: QuotaLimits) -> Result<()> {
        if s.state != SessionState::Creating {
            return Err(StoreError::Conflict(format!(
                "a new session must be creating, not {}",
                s.state.as_str()
            )));
        }
        let _guard = self.lock();
        self.transact(|tx| {
            if tx.id_used(&s.id)? {
                return Err(abort(conflict_exists(&s.id)));
            }
            let user = tx.count(&user_count_key(&s.owner))?;
            let global = tx.count(GLOBAL_COUNT_KEY)?;
            limits
                .check(user, global)
                .map_err(|q| abort(StoreError::Quota(q)))?;
            tx.put_active(s)?;
            tx.add_active(&s.owner, 1)?;
            tx.bump_for(s)?;
            Ok(())
        })?;
        self.settle()
    }

    /// Insert records rebuilt from container labels (no quota check; active ones
    /// counted); one rev bump and change per inserted session; flush. Skips ids already
    /// present (active or ended, including earlier in the same batch). Ended records go
    /// to history without trimming it. Returns how many were inserted.
    pub fn insert_rebuilt(&self, sessions: &[Session]) -> Result<usize> {
        let _guard = self.lock();
        let inserted = self.transact(|tx| {
            let mut inserted = 0;
            for s in sessions {
                if tx.id_used(&s.id)? {
                    continue;
                }
                if s.state.is_active() {
                    tx.put_active(s)?;
                    tx.add_active(&s.owner, 1)?;
                } else {
                    // A record without an end time still needs an index position.
                    let ended_at = s.ended_at.unwrap_or(s.created_at);
                    tx.put_history(s, ended_at)?;
                }
                tx.bump_for(s)?;
                inserted += 1;
            }
            Ok(inserted)
        })?;
        if inserted > 0 {
            self.settle()?;
        }
        Ok(inserted)
    }

    /// Apply `f` to an active session and write it back (state must stay active:
    /// Creating/Running/Stopping, else Conflict); rev bump + change; flush. Returns the
    /// new record. NotFound if not active.
    ///
    /// `f` may not change the id or the owner (the indexes hang on them): Conflict.
    /// When `f` leaves the record exactly as it was, nothing is written and the
    /// revision does not move (gateways have nothing to learn).
    pub fn update<F: FnOnce(&mut Session)>(&self, id: &SessionId, f: F) -> Result<Session> {
        let _guard = self.lock();
        // Safe to read outside the transaction: every writer holds the mutex.
        let old = self.get(id)?.ok_or(StoreError::NotFound)?;
        let mut new = old.clone();
        f(&mut new);
        if new.id != old.id || new.owner != old.owner {
            return Err(StoreError::Conflict(
                "an update may not change a session's id or owner".into(),
            ));
        }
        if !new.state.is_active() {
            return Err(StoreError::Conflict(format!(
                "update may not set {}; end the session instead",
                new.state.as_str()
            )));
        }
        if new == old {
            return Ok(new);
        }
        self.transact(|tx| {
            tx.sessions
                .insert(new.id.as_str().as_bytes(), encode(&new)?)?;
            tx.bump_for(&new)?;
            Ok(())
        })?;
        self.settle()?;
        Ok(new)
    }

    /// End an active session, but only if it is still in one of `ending.from` (the
    /// states the caller's decision was based on; otherwise `StateChanged` and nothing
    /// is written): set state (must be an ended state: Terminated/Exited/Gone/Failed,
    /// else Conflict), ended_at, ended_by, end_reason; move it from `sessions` to
    /// `history` (+ indexes), decrement counts, rev bump + Change::Remove; trim that
    /// owner's history to the newest `history_per_user` entries; flush. NotFound if not
    /// active.
    ///
    /// Deciding in the store first and acting in Docker only after this succeeded is
    /// what lets two racing parties (a create and the reconciler, say) agree on exactly
    /// one winner.
    pub fn end(
        &self,
        id: &SessionId,
        ending: &Ending<'_>,
        history_per_user: usize,
    ) -> Result<Session> {
        if ending.state.is_active() {
            return Err(StoreError::Conflict(format!(
                "{} is not an ended state",
                ending.state.as_str()
            )));
        }
        let now = ending.at;
        let _guard = self.lock();
        let mut s = self.get(id)?.ok_or(StoreError::NotFound)?;
        if !ending.from.contains(&s.state) {
            return Err(StoreError::StateChanged(s.state));
        }
        s.state = ending.state;
        s.ended_at = Some(now);
        s.ended_by = Some(ending.by.to_owned());
        s.end_reason = Some(ending.reason.to_owned());

        // Transactions cannot scan, so pick the history entries to drop here; the
        // mutex keeps them valid until the transaction runs. The new entry takes part:
        // "newest N" is by end time, whatever order the ends arrive in.
        let mut keys = self.history_keys(&s.owner)?;
        keys.push(history_key(&s.owner, now, &s.id));
        keys.sort();
        let drop_n = keys.len().saturating_sub(history_per_user);
        let dropped: Vec<(Vec<u8>, SessionId)> = keys
            .into_iter()
            .take(drop_n)
            .map(|k| {
                let id = parse_history_key(&k).map(|(_, _, id)| id);
                id.map(|id| (k, id))
            })
            .collect::<Result<_>>()?;

        self.transact(|tx| {
            tx.sessions.remove(s.id.as_str().as_bytes())?;
            tx.owners.remove(owner_key(&s.owner, &s.id))?;
            tx.put_history(&s, now)?;
            // After the insert, so that a new entry that is itself among the oldest
            // goes too.
            for (key, old) in &dropped {
                tx.history_by_owner.remove(key.as_slice())?;
                tx.history.remove(old.as_str().as_bytes())?;
            }
            tx.add_active(&s.owner, -1)?;
            tx.bump(|rev| Change::Remove { rev, session: s.id })?;
            Ok(())
        })?;
        self.settle()?;
        Ok(s)
    }

    /// The active session with this id, if any.
    pub fn get(&self, id: &SessionId) -> Result<Option<Session>> {
        let key = id.as_str().as_bytes();
        self.sessions
            .get(key)?
            .map(|v| decode_session(key, &v))
            .transpose()
    }

    /// A running session's route with its owner's lock and the revision they are true
    /// at, read under the write mutex so that no write falls between the three (a
    /// route stamped with a revision after its own removal would make gateways skip
    /// that removal).
    pub fn lookup(&self, id: &SessionId) -> Result<Option<RouteLookup>> {
        let _guard = self.lock();
        let Some(route) = self.get(id)?.and_then(|s| s.route()) else {
            return Ok(None);
        };
        let owner_locked = self.is_locked(&route.owner)?;
        let rev = self.stored_rev()?;
        Ok(Some(RouteLookup {
            route,
            owner_locked,
            rev,
            epoch: self.epoch.clone(),
        }))
    }

    /// The ended session with this id, if it is still in history.
    pub fn get_ended(&self, id: &SessionId) -> Result<Option<Session>> {
        let key = id.as_str().as_bytes();
        self.history
            .get(key)?
            .map(|v| decode_session(key, &v))
            .transpose()
    }

    /// Active sessions, of one owner (read through the owner index) or of everyone,
    /// sorted by `created_at` then id.
    pub fn list_active(&self, owner: Option<&str>) -> Result<Vec<Session>> {
        let mut out = Vec::new();
        match owner {
            Some(owner) => {
                for item in self.owners.scan_prefix(owner_prefix(owner)) {
                    let (key, _) = item?;
                    let Some(id) = parse_owner_key(&key, owner)? else {
                        continue;
                    };
                    let s = self.get(&id)?.ok_or_else(|| {
                        StoreError::Corrupt(format!("owner index names missing session {id}"))
                    })?;
                    out.push(s);
                }
            }
            None => {
                for item in self.sessions.iter() {
                    let (key, value) = item?;
                    out.push(decode_session(&key, &value)?);
                }
            }
        }
        out.sort_by_key(|s| (s.created_at, s.id));
        Ok(out)
    }

    /// Up to `limit` ended sessions, of one owner or of everyone, newest end first
    /// (ties: larger id first).
    pub fn list_history(&self, owner: Option<&str>, limit: usize) -> Result<Vec<Session>> {
        match owner {
            Some(owner) => {
                let mut out = Vec::new();
                // Index keys sort by end time, so reading backwards is newest first.
                for item in self.history_by_owner.scan_prefix(owner_prefix(owner)).rev() {
                    if out.len() >= limit {
                        break;
                    }
                    let (key, _) = item?;
                    let (key_owner, _, id) = parse_history_key(&key)?;
                    if key_owner != owner.as_bytes() {
                        continue;
                    }
                    let s = self.get_ended(&id)?.ok_or_else(|| {
                        StoreError::Corrupt(format!("history index names missing session {id}"))
                    })?;
                    out.push(s);
                }
                Ok(out)
            }
            None => {
                let mut all = Vec::new();
                for item in self.history.iter() {
                    let (key, value) = item?;
                    all.push(decode_session(&key, &value)?);
                }
                all.sort_by_key(|s| std::cmp::Reverse((s.ended_at, s.id)));
                all.truncate(limit);
                Ok(all)
            }
        }
    }

    /// (sessions `owner` holds, sessions the deployment holds), counting `creating`,
    /// `running` and `stopping`.
    pub fn counts(&self, owner: &str) -> Result<(u32, u32)> {
        let user = decode_u32(self.counts.get(user_count_key(owner))?)?;
        let global = decode_u32(self.counts.get(GLOBAL_COUNT_KEY)?)?;
        Ok((user, global))
    }

    /// Locks `sub` (gateways close their terminals). false if already locked (no rev
    /// bump then).
    pub fn lock_user(&self, sub: &str, by: &str, now: u64) -> Result<bool> {
        let lock = UserLock {
            sub: sub.to_owned(),
            by: by.to_owned(),
            at: now,
        };
        let _guard = self.lock();
        let locked = self.transact(|tx| {
            if tx.locks.get(sub.as_bytes())?.is_some() {
                return Ok(false);
            }
            tx.locks.insert(sub.as_bytes(), encode(&lock)?)?;
            tx.bump(|rev| Change::Lock {
                rev,
                sub: sub.to_owned(),
            })?;
            Ok(true)
        })?;
        if locked {
            self.settle()?;
        }
        Ok(locked)
    }

    /// Unlocks `sub`. false if not locked (no rev bump then).
    pub fn unlock_user(&self, sub: &str) -> Result<bool> {
        let _guard = self.lock();
        let unlocked = self.transact(|tx| {
            if tx.locks.remove(sub.as_bytes())?.is_none() {
                return Ok(false);
            }
            tx.bump(|rev| Change::Unlock {
                rev,
                sub: sub.to_owned(),
            })?;
            Ok(true)
        })?;
        if unlocked {
            self.settle()?;
        }
        Ok(unlocked)
    }

    /// Whether `sub` is locked.
    pub fn is_locked(&self, sub: &str) -> Result<bool> {
        Ok(self.locks.contains_key(sub.as_bytes())?)
    }

    /// Every locked user, sorted.
    pub fn locked_users(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for item in self.locks.iter() {
            let (key, value) = item?;
            let lock: UserLock = serde_json::from_slice(&value).map_err(|e| {
                StoreError::Corrupt(format!("lock {}: {e}", String::from_utf8_lossy(&key)))
            })?;
            if lock.sub.as_bytes() != key.as_ref() {
                return Err(StoreError::Corrupt(format!(
                    "lock stored under {} names {}",
                    String::from_utf8_lossy(&key),
                    lock.sub
                )));
            }
            out.push(lock.sub);
        }
        Ok(out)
    }

    /// Route feed: changes with rev > after, in order. If `after` is older than the
    /// oldest retained change minus one (log trimmed), or greater than the current rev
    /// (a restored/rebuilt store), return reset=true with every route of running
    /// sessions and every locked user. after == rev → empty changes, reset false.
    pub fn feed(&self, after: u64) -> Result<FeedPage> {
        self.feed_in(after, None)
    }

    /// This opening's feed epoch.
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// [`Store::feed`] for a poller whose revision counts in `epoch`: another epoch than
    /// this opening's is answered with a reset.
    pub fn feed_in(&self, after: u64, epoch: Option<&str>) -> Result<FeedPage> {
        if epoch.is_some_and(|e| e != self.epoch) {
            return self.snapshot();
        }
        let rev = self.rev();
        if after == rev {
            return Ok(FeedPage {
                epoch: self.epoch.clone(),
                rev,
                reset: false,
                changes: Vec::new(),
                routes: Vec::new(),
                locked: Vec::new(),
            });
        }
        if after < rev {
            // Only published revisions: every change up to `rev` is committed and
            // flushed. A concurrent write may trim the front of the log under this
            // read; any gap means "trimmed" and becomes a reset.
            let mut changes = Vec::new();
            let mut expect = after + 1;
            let start = expect.to_be_bytes();
            let end = rev.to_be_bytes();
            for item in self.changes.range(start.as_slice()..=end.as_slice()) {
                let (key, value) = item?;
                let at = decode_u64(Some(key))?;
                if at != expect {
                    break;
                }
                let change: Change = serde_json::from_slice(&value)
                    .map_err(|e| StoreError::Corrupt(format!("change {at}: {e}")))?;
                if change.rev() != at {
                    return Err(StoreError::Corrupt(format!(
                        "change stored at {at} says rev {}",
                        change.rev()
                    )));
                }
                changes.push(change);
                expect += 1;
            }
            if expect == rev + 1 {
                return Ok(FeedPage {
                    epoch: self.epoch.clone(),
                    rev,
                    reset: false,
                    changes,
                    routes: Vec::new(),
                    locked: Vec::new(),
                });
            }
        }
        self.snapshot()
    }

    /// Recompute counts from the sessions tree (used after repair); returns the total
    /// number of active sessions. Gateways learn nothing from it, so no rev bump.
    pub fn recount(&self) -> Result<u32> {
        let _guard = self.lock();
        let mut per_user: std::collections::BTreeMap<String, u32> = Default::default();
        let mut total: u32 = 0;
        for item in self.sessions.iter() {
            let (key, value) = item?;
            let s = decode_session(&key, &value)?;
            *per_user.entry(s.owner).or_default() += 1;
            total += 1;
        }
        let stale: Vec<IVec> = self
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
        self.db.flush()?;
        Ok(total)
    }

    /// Writes everything committed so far to disk.
    pub fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }

    // ---- internals ----

    fn lock(&self) -> MutexGuard<'_, ()> {
        // The mutex guards no data (the transaction keeps the trees whole), so a
        // panic in another writer leaves nothing to distrust.
        self.write_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stored_rev(&self) -> Result<u64> {
        decode_u64(self.meta.get(REV_KEY)?)
    }

    /// Runs `f` as one transaction over all trees. Callers hold the write mutex, so
    /// sled never has to retry `f` for a conflict.
    fn transact<T>(&self, f: impl Fn(&Tx<'_>) -> TxResult<T>) -> Result<T> {
        let trees = (
            &self.sessions,
            &self.owners,
            &self.history,
            &self.history_by_owner,
            &self.counts,
            &self.meta,
            &self.changes,
            &self.locks,
        );
        let out = trees.transaction(
            |(sessions, owners, history, history_by_owner, counts, meta, changes, locks)| {
                f(&Tx {
                    sessions,
                    owners,
                    history,
                    history_by_owner,
                    counts,
                    meta,
                    changes,
                    locks,
                    change_log_len: self.change_log_len,
                })
            },
        )?;
        Ok(out)
    }

    /// After a commit (mutex still held): flush, then publish the committed revision.
    /// The revision is published even if the flush fails, because the change is
    /// already visible to readers of this process; the caller still gets the error.
    fn settle(&self) -> Result<()> {
        let flushed = self.db.flush();
        let rev = self.stored_rev()?;
        self.rev_tx.send_if_modified(|cur| {
            // Monotonic even if something ever publishes out of order.
            if rev > *cur {
                *cur = rev;
                true
            } else {
                false
            }
        });
        flushed?;
        Ok(())
    }

    /// The full state for a feed reset, taken under the write mutex so `rev`, routes
    /// and locks describe the same moment.
    fn snapshot(&self) -> Result<FeedPage> {
        let _guard = self.lock();
        let rev = self.rev();
        let mut routes: Vec<Route> = Vec::new();
        for item in self.sessions.iter() {
            let (key, value) = item?;
            if let Some(route) = decode_session(&key, &value)?.route() {
                routes.push(route);
            }
        }
        let locked = self.locked_users()?;
        Ok(FeedPage {
            epoch: self.epoch.clone(),
            rev,
            reset: true,
            changes: Vec::new(),
            routes,
            locked,
        })
    }

    /// Every `history_by_owner` key of `owner`, ascending (oldest first).
    fn history_keys(&self, owner: &str) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        for item in self.history_by_owner.scan_prefix(owner_prefix(owner)) {
            let (key, _) = item?;
            let (key_owner, _, _) = parse_history_key(&key)?;
            if key_owner == owner.as_bytes() {
                keys.push(key.to_vec());
            }
        }
        Ok(keys)
    }
}

type TxResult<T> = std::result::Result<T, ConflictableTransactionError<StoreError>>;

/// A fresh random feed epoch.
fn new_epoch() -> Result<String> {
    let mut random = [0u8; 8];
    getrandom::getrandom(&mut random)
        .map_err(|e| StoreError::Db(format!("no randomness for the feed epoch: {e}")))?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

fn abort(e: StoreError) -> ConflictableTransactionError<StoreError> {
    ConflictableTransactionError::Abort(e)
}

/// The trees as seen inside one transaction.
struct Tx<'a> {
    sessions: &'a TransactionalTree,
    owners: &'a TransactionalTree,
    history: &'a TransactionalTree,
    history_by_owner: &'a TransactionalTree,
    counts: &'a TransactionalTree,
    meta: &'a TransactionalTree,
    changes: &'a TransactionalTree,
    locks: &'a TransactionalTree,
    change_log_len: u64,
}

impl Tx<'_> {
    /// Whether the id is taken, active or ended (reads see this transaction's writes).
    fn id_used(&self, id: &SessionId) -> TxResult<bool> {
        let key = id.as_str().as_bytes();
        Ok(self.sessions.get(key)?.is_some() || self.history.get(key)?.is_some())
    }

    fn put_active(&self, s: &Session) -> TxResult<()> {
        self.sessions.insert(s.id.as_str().as_bytes(), encode(s)?)?;
        self.owners
            .insert(owner_key(&s.owner, &s.id), IVec::default())?;
        Ok(())
    }

    fn put_history(&self, s: &Session, ended_at: u64) -> TxResult<()> {
        self.history.insert(s.id.as_str().as_bytes(), encode(s)?)?;
        self.history_by_owner
            .insert(history_key(&s.owner, ended_at, &s.id), IVec::default())?;
        Ok(())
    }

    fn count(&self, key: &[u8]) -> TxResult<u32> {
        decode_u32(self.counts.get(key)?).map_err(abort)
    }

    fn set_count(&self, key: &[u8], n: u32) -> TxResult<()> {
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
    fn add_active(&self, owner: &str, delta: i8) -> TxResult<()> {
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
    fn bump_for(&self, s: &Session) -> TxResult<u64> {
        match s.route() {
            Some(route) => self.bump(|rev| Change::Upsert { rev, route }),
            None => self.bump(|rev| Change::Remove { rev, session: s.id }),
        }
    }

    /// Bumps `rev`, appends the change made for it, and drops the change that falls
    /// out of the bounded log.
    fn bump(&self, make: impl FnOnce(u64) -> Change) -> TxResult<u64> {
        let current = decode_u64(self.meta.get(REV_KEY)?).map_err(abort)?;
        let rev = current
            .checked_add(1)
            .ok_or_else(|| abort(StoreError::Corrupt("revision overflow".into())))?;
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

fn encode<T: serde::Serialize>(value: &T) -> TxResult<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| abort(StoreError::Db(format!("encode: {e}"))))
}

fn decode_session(key: &[u8], value: &[u8]) -> Result<Session> {
    let name = String::from_utf8_lossy(key);
    let s: Session = serde_json::from_slice(value)
        .map_err(|e| StoreError::Corrupt(format!("session {name}: {e}")))?;
    // A record filed under another id would dodge every lookup and index.
    if s.id.as_str().as_bytes() != key {
        return Err(StoreError::Corrupt(format!(
            "session stored under {name} says id {}",
            s.id
        )));
    }
    Ok(s)
}

fn decode_u32(value: Option<IVec>) -> Result<u32> {
    match value {
        None => Ok(0),
        Some(v) => <[u8; 4]>::try_from(v.as_ref())
            .map(u32::from_be_bytes)
            .map_err(|_| StoreError::Corrupt(format!("count is {} bytes, not 4", v.len()))),
    }
}

fn decode_u64(value: Option<IVec>) -> Result<u64> {
    match value {
        None => Ok(0),
        Some(v) => <[u8; 8]>::try_from(v.as_ref())
            .map(u64::from_be_bytes)
            .map_err(|_| StoreError::Corrupt(format!("revision is {} bytes, not 8", v.len()))),
    }
}

fn conflict_exists(id: &SessionId) -> StoreError {
    StoreError::Conflict(format!("session {id} already exists"))
}

fn user_count_key(owner: &str) -> Vec<u8> {
    [b"u:", owner.as_bytes()].concat()
}

fn owner_prefix(owner: &str) -> Vec<u8> {
    [owner.as_bytes(), b"\0"].concat()
}

fn owner_key(owner: &str, id: &SessionId) -> Vec<u8> {
    [owner.as_bytes(), b"\0", id.as_str().as_bytes()].concat()
}

fn history_key(owner: &str, ended_at: u64, id: &SessionId) -> Vec<u8> {
    [
        owner.as_bytes(),
        b"\0",
        ended_at.to_be_bytes().as_slice(),
        b"\0",
        id.as_str().as_bytes(),
    ]
    .concat()
}

/// The id in an `owners` key, or None when the key belongs to another owner whose
/// name merely starts with `owner \0` (owners are parsed from the fixed-size tail, so
/// a NUL inside a `sub` cannot confuse them).
fn parse_owner_key(key: &[u8], owner: &str) -> Result<Option<SessionId>> {
    let bad = || {
        StoreError::Corrupt(format!(
            "owner index key {:?}",
            String::from_utf8_lossy(key)
        ))
    };
    let split = key.len().checked_sub(OWNER_TAIL).ok_or_else(bad)?;
    let (key_owner, tail) = key.split_at(split);
    if tail.first() != Some(&0) {
        return Err(bad());
    }
    if key_owner != owner.as_bytes() {
        return Ok(None);
    }
    SessionId::parse_bytes(&tail[1..])
        .map(Some)
        .map_err(|_| bad())
}

/// (owner bytes, ended_at, id) of a `history_by_owner` key.
fn parse_history_key(key: &[u8]) -> Result<(&[u8], u64, SessionId)> {
    let bad = || {
        StoreError::Corrupt(format!(
            "history index key {:?}",
            String::from_utf8_lossy(key)
        ))
    };
    let split = key.len().checked_sub(HISTORY_TAIL).ok_or_else(bad)?;
    let (owner, tail) = key.split_at(split);
    if tail[0] != 0 || tail[9] != 0 {
        return Err(bad());
    }
    let ended_at = <[u8; 8]>::try_from(&tail[1..9]).map_err(|_| bad())?;
    let id = SessionId::parse_bytes(&tail[10..]).map_err(|_| bad())?;
    Ok((owner, u64::from_be_bytes(ended_at), id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    const ROOMY: QuotaLimits = QuotaLimits {
        per_user: 1000,
        global: 100_000,
    };

    fn id(n: u32) -> SessionId {
        let b = n.to_be_bytes();
        SessionId::from_random([0, 0, 0, 0, 0, 0, b[0], b[1], b[2], b[3]])
    }

    fn session(n: u32, owner: &str) -> Session {
        Session {
            id: id(n),
            owner: owner.to_owned(),
            name: format!("s{n}"),
            profile: "shell".into(),
            options: BTreeMap::new(),
            state: SessionState::Creating,
            created_at: 1000 + u64::from(n),
            container_id: None,
            ended_at: None,
            ended_by: None,
            end_reason: None,
        }
    }

    /// Opens the store, waiting a little for sled to release the file lock of a store
    /// that was just dropped (its background flusher lets go asynchronously).
    fn open(dir: &Path) -> Store {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match Store::open(dir, 100) {
                Ok(s) => return s,
                Err(StoreError::Db(m))
                    if m.contains("could not acquire lock")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("open: {e:?}"),
            }
        }
    }

    /// An end that holds whatever active state the session is in.
    fn ending(
        state: SessionState,
        by: &'static str,
        reason: &'static str,
        at: u64,
    ) -> Ending<'static> {
        Ending {
            from: ANY_ACTIVE,
            state,
            by,
            reason,
            at,
        }
    }

    fn run(store: &Store, n: u32, container: &str) -> Session {
        store
            .update(&id(n), |s| {
                s.state = SessionState::Running;
                s.container_id = Some(container.to_owned());
            })
            .expect("update")
    }

    #[test]
    fn insert_get_update_end_round_trip_and_history() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let s = session(1, "alice");
        store.insert_creating(&s, ROOMY).unwrap();
        assert_eq!(store.get(&s.id).unwrap(), Some(s.clone()));
        assert_eq!(store.rev(), 1);

        let running = run(&store, 1, "c1");
        assert_eq!(running.state, SessionState::Running);
        assert_eq!(store.get(&s.id).unwrap(), Some(running.clone()));
        assert_eq!(store.rev(), 2);

        let ended = store
            .end(
                &s.id,
                &ending(SessionState::Terminated, "alice", "user asked", 5000),
                10,
            )
            .unwrap();
        assert_eq!(ended.state, SessionState::Terminated);
        assert_eq!(ended.ended_at, Some(5000));
        assert_eq!(ended.ended_by.as_deref(), Some("alice"));
        assert_eq!(ended.end_reason.as_deref(), Some("user asked"));
        assert_eq!(store.get(&s.id).unwrap(), None);
        assert_eq!(store.get_ended(&s.id).unwrap(), Some(ended.clone()));
        assert_eq!(store.list_active(Some("alice")).unwrap(), vec![]);
        assert_eq!(
            store.list_history(Some("alice"), 10).unwrap(),
            vec![ended.clone()]
        );
        assert_eq!(store.list_history(None, 10).unwrap(), vec![ended]);
        assert_eq!(store.rev(), 3);
    }

    #[test]
    fn second_end_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        store
            .end(
                &id(1),
                &ending(SessionState::Exited, "termgate", "exit 0", 10),
                10,
            )
            .unwrap();
        let rev = store.rev();
        assert!(matches!(
            store.end(
                &id(1),
                &ending(SessionState::Exited, "termgate", "exit 0", 11),
                10
            ),
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            store.update(&id(1), |_| {}),
            Err(StoreError::NotFound)
        ));
        assert_eq!(store.rev(), rev);
    }

    #[test]
    fn an_end_decided_on_a_state_the_record_has_left_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        // The reconciler decided on `creating`; the create recorded `running` first.
        run(&store, 1, "c1");
        let rev = store.rev();
        let failed = Ending {
            from: &[SessionState::Creating],
            state: SessionState::Failed,
            by: "termgate",
            reason: "creation did not finish",
            at: 9,
        };
        assert!(matches!(
            store.end(&id(1), &failed, 10),
            Err(StoreError::StateChanged(SessionState::Running))
        ));
        assert_eq!(store.rev(), rev, "a refused end bumps nothing");
        assert_eq!(store.counts("a").unwrap(), (1, 1));
        assert_eq!(
            store.get(&id(1)).unwrap().unwrap().state,
            SessionState::Running
        );
        assert_eq!(store.get_ended(&id(1)).unwrap(), None);

        // The other order: the reconciler's end wins, and the create then finds nothing
        // to mark running.
        store.insert_creating(&session(2, "a"), ROOMY).unwrap();
        let ended = store.end(&id(2), &failed, 10).unwrap();
        assert_eq!(ended.state, SessionState::Failed);
        assert!(matches!(
            store.update(&id(2), |s| s.state = SessionState::Running),
            Err(StoreError::NotFound)
        ));
        assert_eq!(store.counts("a").unwrap(), (1, 1));
    }

    #[test]
    fn transitions_outside_the_rules_are_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let s = session(1, "a");
        store.insert_creating(&s, ROOMY).unwrap();
        assert!(matches!(
            store.insert_creating(&s, ROOMY),
            Err(StoreError::Conflict(_))
        ));
        let mut running = session(2, "a");
        running.state = SessionState::Running;
        assert!(matches!(
            store.insert_creating(&running, ROOMY),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.update(&s.id, |s| s.state = SessionState::Exited),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.update(&s.id, |s| s.owner = "b".into()),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.end(&s.id, &ending(SessionState::Stopping, "a", "", 1), 10),
            Err(StoreError::Conflict(_))
        ));
        // Ended ids stay taken.
        store
            .end(&s.id, &ending(SessionState::Terminated, "a", "", 1), 10)
            .unwrap();
        assert!(matches!(
            store.insert_creating(&s, ROOMY),
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(store.counts("a").unwrap(), (0, 0));
    }

    #[test]
    fn quota_refuses_the_fourth_per_user_and_the_global_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let limits = QuotaLimits {
            per_user: 3,
            global: 5,
        };
        for n in 0..3 {
            store.insert_creating(&session(n, "a"), limits).unwrap();
        }
        match store.insert_creating(&session(3, "a"), limits) {
            Err(StoreError::Quota(q)) => assert_eq!(q.scope, policy::QuotaScope::User),
            other => panic!("expected user quota, got {other:?}"),
        }
        store.insert_creating(&session(4, "b"), limits).unwrap();
        store.insert_creating(&session(5, "b"), limits).unwrap();
        match store.insert_creating(&session(6, "c"), limits) {
            Err(StoreError::Quota(q)) => assert_eq!(q.scope, policy::QuotaScope::Global),
            other => panic!("expected global quota, got {other:?}"),
        }
        assert_eq!(store.get(&id(3)).unwrap(), None);
        assert_eq!(store.get(&id(6)).unwrap(), None);
        assert_eq!(store.counts("a").unwrap(), (3, 5));
        assert_eq!(store.counts("c").unwrap(), (0, 5));
        assert_eq!(store.rev(), 5, "refused creates do not bump the revision");
    }

    #[test]
    fn concurrent_creates_for_one_user_admit_exactly_the_quota() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(open(dir.path()));
        let limits = QuotaLimits {
            per_user: 3,
            global: 1000,
        };
        let handles: Vec<_> = (0..16)
            .map(|n| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || store.insert_creating(&session(n, "alice"), limits))
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let quota = results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Quota(_))))
            .count();
        assert_eq!((ok, quota), (3, 13));
        assert_eq!(store.counts("alice").unwrap(), (3, 3));
        assert_eq!(store.list_active(Some("alice")).unwrap().len(), 3);
        assert_eq!(store.rev(), 3);
    }

    #[test]
    fn concurrent_creates_across_users_admit_exactly_the_global_quota() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(open(dir.path()));
        let limits = QuotaLimits {
            per_user: 10,
            global: 20,
        };
        let handles: Vec<_> = (0..80)
            .map(|n| {
                let store = Arc::clone(&store);
                let owner = format!("user{}", n % 8);
                std::thread::spawn(move || store.insert_creating(&session(n, &owner), limits))
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let quota = results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Quota(_))))
            .count();
        assert_eq!((ok, quota), (20, 60));
        assert_eq!(store.list_active(None).unwrap().len(), 20);
        let per_user: u32 = (0..8)
            .map(|u| store.counts(&format!("user{u}")).unwrap().0)
            .sum();
        assert_eq!(per_user, 20);
        assert_eq!(store.counts("user0").unwrap().1, 20);
        assert_eq!(store.recount().unwrap(), 20);
    }

    #[test]
    fn counts_drop_right_after_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        store.insert_creating(&session(2, "a"), ROOMY).unwrap();
        store.insert_creating(&session(3, "b"), ROOMY).unwrap();
        assert_eq!(store.counts("a").unwrap(), (2, 3));
        store
            .end(
                &id(1),
                &ending(SessionState::Failed, "termgate", "no image", 9),
                10,
            )
            .unwrap();
        assert_eq!(store.counts("a").unwrap(), (1, 2));
        assert_eq!(store.counts("b").unwrap(), (1, 2));
        store
            .end(
                &id(2),
                &ending(SessionState::Gone, "termgate", "vanished", 9),
                10,
            )
            .unwrap();
        assert_eq!(store.counts("a").unwrap(), (0, 1));
        assert_eq!(store.recount().unwrap(), 1);
        assert_eq!(store.counts("b").unwrap(), (1, 1));
    }

    #[test]
    fn feed_returns_changes_after_rev_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        let route = run(&store, 1, "c1").route().unwrap();
        store
            .end(&id(1), &ending(SessionState::Terminated, "a", "bye", 7), 10)
            .unwrap();

        let page = store.feed(0).unwrap();
        assert_eq!(page.rev, 3);
        assert!(!page.reset);
        assert_eq!(
            page.changes,
            vec![
                Change::Remove {
                    rev: 1,
                    session: id(1)
                },
                Change::Upsert { rev: 2, route },
                Change::Remove {
                    rev: 3,
                    session: id(1)
                },
            ]
        );
        let page = store.feed(2).unwrap();
        assert_eq!(
            page.changes.iter().map(Change::rev).collect::<Vec<_>>(),
            vec![3]
        );
        let page = store.feed(3).unwrap();
        assert!(!page.reset);
        assert_eq!(page.rev, 3);
        assert!(page.changes.is_empty());
    }

    #[test]
    fn feed_after_trimmed_log_resets_with_running_routes_and_locked_users() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 3).unwrap();
        store.insert_creating(&session(1, "a"), ROOMY).unwrap(); // 1
        let route = run(&store, 1, "c1").route().unwrap(); // 2
        store.insert_creating(&session(2, "b"), ROOMY).unwrap(); // 3 (creating: no route)
        store.insert_creating(&session(3, "b"), ROOMY).unwrap(); // 4
        run(&store, 3, "c3"); // 5
        store
            .end(
                &id(3),
                &ending(SessionState::Exited, "termgate", "exit", 9),
                10,
            )
            .unwrap(); // 6
        assert!(store.lock_user("mallory", "admin", 10).unwrap()); // 7
        assert_eq!(store.rev(), 7);

        // Retained: 5, 6, 7. after=4 still chains on; after=3 does not.
        let page = store.feed(4).unwrap();
        assert!(!page.reset);
        assert_eq!(
            page.changes.iter().map(Change::rev).collect::<Vec<_>>(),
            vec![5, 6, 7]
        );
        assert_eq!(store.changes.len(), 3, "the change log stays bounded");

        let page = store.feed(3).unwrap();
        assert!(page.reset);
        assert_eq!(page.rev, 7);
        assert!(page.changes.is_empty());
        assert_eq!(page.routes, vec![route]);
        assert_eq!(page.locked, vec!["mallory".to_owned()]);
    }

    #[test]
    fn a_poller_of_another_epoch_gets_a_reset_even_at_a_known_rev() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        run(&store, 1, "c1");
        let epoch = store.epoch().to_owned();
        let same = store.feed_in(1, Some(&epoch)).unwrap();
        assert!(!same.reset, "the same epoch gets increments");
        assert_eq!(same.epoch, epoch);
        let restored = store.feed_in(1, Some("another-life")).unwrap();
        assert!(restored.reset, "another epoch gets the whole state");
        assert_eq!(restored.routes.len(), 1);
        assert_eq!(restored.epoch, epoch);
        // Reopening the same directory starts a new epoch: a restored copy could tell
        // another history under the same revisions.
        drop(store);
        let reopened = open(dir.path());
        assert_ne!(reopened.epoch(), epoch);
        assert!(reopened.feed_in(2, Some(&epoch)).unwrap().reset);
    }

    #[test]
    fn feed_after_a_future_rev_resets() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        let page = store.feed(42).unwrap();
        assert!(page.reset);
        assert_eq!(page.rev, 1);
        assert!(page.routes.is_empty());
        assert!(page.locked.is_empty());
    }

    #[test]
    fn subscriber_sees_the_new_rev_after_insert() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let mut rx = store.subscribe();
        assert_eq!(*rx.borrow_and_update(), 0);
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 1);
        // No-op writes publish nothing.
        assert!(!store.unlock_user("nobody").unwrap());
        assert!(!rx.has_changed().unwrap());
    }

    #[test]
    fn lock_and_unlock_are_idempotent_and_fed() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        assert!(!store.is_locked("eve").unwrap());
        assert!(store.lock_user("eve", "admin", 1).unwrap());
        assert!(!store.lock_user("eve", "admin", 2).unwrap());
        assert_eq!(store.rev(), 1);
        assert!(store.is_locked("eve").unwrap());
        assert!(store.lock_user("bob", "admin", 3).unwrap());
        assert_eq!(
            store.locked_users().unwrap(),
            vec!["bob".to_owned(), "eve".to_owned()]
        );
        assert!(store.unlock_user("eve").unwrap());
        assert!(!store.unlock_user("eve").unwrap());
        assert!(!store.is_locked("eve").unwrap());
        assert_eq!(store.rev(), 3);
        assert_eq!(
            store.feed(0).unwrap().changes,
            vec![
                Change::Lock {
                    rev: 1,
                    sub: "eve".into()
                },
                Change::Lock {
                    rev: 2,
                    sub: "bob".into()
                },
                Change::Unlock {
                    rev: 3,
                    sub: "eve".into()
                },
            ]
        );
    }

    #[test]
    fn everything_survives_reopening_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (running, ended) = {
            let store = open(dir.path());
            store.insert_creating(&session(1, "a"), ROOMY).unwrap();
            store.insert_creating(&session(2, "a"), ROOMY).unwrap();
            let running = run(&store, 1, "c1");
            let ended = store
                .end(
                    &id(2),
                    &ending(SessionState::Terminated, "a", "done", 50),
                    10,
                )
                .unwrap();
            store.lock_user("eve", "admin", 3).unwrap();
            (running, ended)
        };
        let store = open(dir.path());
        assert_eq!(store.rev(), 5);
        assert_eq!(store.get(&id(1)).unwrap(), Some(running.clone()));
        assert_eq!(store.get_ended(&id(2)).unwrap(), Some(ended));
        assert_eq!(store.counts("a").unwrap(), (1, 1));
        assert!(store.is_locked("eve").unwrap());
        assert_eq!(store.feed(0).unwrap().changes.len(), 5);
        assert_eq!(store.list_active(Some("a")).unwrap(), vec![running]);
        // And it keeps counting from where it was.
        store.insert_creating(&session(3, "a"), ROOMY).unwrap();
        assert_eq!(store.rev(), 6);
    }

    #[test]
    fn history_trimming_keeps_the_newest_n_per_owner() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        for n in 0..6 {
            store.insert_creating(&session(n, "a"), ROOMY).unwrap();
            store
                .end(
                    &id(n),
                    &ending(SessionState::Exited, "termgate", "exit", 100 + u64::from(n)),
                    3,
                )
                .unwrap();
        }
        store.insert_creating(&session(10, "b"), ROOMY).unwrap();
        store
            .end(
                &id(10),
                &ending(SessionState::Exited, "termgate", "exit", 1),
                3,
            )
            .unwrap();

        let kept: Vec<SessionId> = store
            .list_history(Some("a"), 100)
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(kept, vec![id(5), id(4), id(3)]);
        assert_eq!(store.get_ended(&id(0)).unwrap(), None);
        assert_eq!(store.list_history(Some("a"), 2).unwrap().len(), 2);
        // Another owner's trimming left b alone, and b's left a alone.
        assert_eq!(store.list_history(Some("b"), 10).unwrap().len(), 1);
        let all: Vec<SessionId> = store
            .list_history(None, 10)
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(all, vec![id(5), id(4), id(3), id(10)]);
    }

    #[test]
    fn list_active_by_owner_returns_only_that_owners_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        // "a\0b" shares the index prefix "a\0" with "a".
        for (n, owner) in [(1, "a"), (2, "ab"), (3, "a\0b"), (4, "a"), (5, "b")] {
            store.insert_creating(&session(n, owner), ROOMY).unwrap();
        }
        let a: Vec<SessionId> = store
            .list_active(Some("a"))
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(a, vec![id(1), id(4)]);
        assert_eq!(store.list_active(Some("a\0b")).unwrap().len(), 1);
        assert_eq!(store.list_active(Some("nobody")).unwrap(), vec![]);
        assert_eq!(store.list_active(None).unwrap().len(), 5);
    }

    #[test]
    fn a_corrupt_record_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let good = session(1, "a");
        {
            let store = open(dir.path());
            store.insert_creating(&good, ROOMY).unwrap();
        }
        {
            let db = sled::open(dir.path()).unwrap();
            let sessions = db.open_tree(SESSIONS).unwrap();
            sessions
                .insert(id(2).as_str(), &b"\xff{not json"[..])
                .unwrap();
            // A valid record filed under another id is corrupt too.
            sessions
                .insert(id(3).as_str(), serde_json::to_vec(&good).unwrap())
                .unwrap();
            db.open_tree(COUNTS)
                .unwrap()
                .insert(b"g", &b"xyz"[..])
                .unwrap();
            db.flush().unwrap();
        }
        let store = open(dir.path());
        assert_eq!(store.get(&id(1)).unwrap(), Some(good));
        assert!(matches!(store.get(&id(2)), Err(StoreError::Corrupt(_))));
        assert!(matches!(store.get(&id(3)), Err(StoreError::Corrupt(_))));
        assert!(matches!(
            store.list_active(None),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(store.counts("a"), Err(StoreError::Corrupt(_))));
        assert!(matches!(
            store.update(&id(2), |_| {}),
            Err(StoreError::Corrupt(_))
        ));
    }

    #[test]
    fn is_empty_on_a_fresh_dir_and_not_after_an_insert() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        assert!(store.is_empty());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        assert!(!store.is_empty());
        store
            .end(&id(1), &ending(SessionState::Terminated, "a", "", 1), 10)
            .unwrap();
        assert!(!store.is_empty(), "history alone makes a store non-empty");
    }

    #[test]
    fn insert_rebuilt_counts_active_skips_present_and_feeds_routes() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store.insert_creating(&session(1, "a"), ROOMY).unwrap();
        let mut running = session(2, "a");
        running.state = SessionState::Running;
        running.container_id = Some("c2".into());
        let mut exited = session(3, "b");
        exited.state = SessionState::Exited;
        exited.ended_at = Some(77);
        let batch = vec![
            session(1, "a"),
            running.clone(),
            exited.clone(),
            running.clone(),
        ];
        assert_eq!(store.insert_rebuilt(&batch).unwrap(), 2);
        assert_eq!(store.counts("a").unwrap(), (2, 2));
        assert_eq!(store.counts("b").unwrap(), (0, 2));
        assert_eq!(store.get(&running.id).unwrap(), Some(running.clone()));
        assert_eq!(store.get_ended(&exited.id).unwrap(), Some(exited.clone()));
        assert_eq!(
            store.list_history(Some("b"), 5).unwrap(),
            vec![exited.clone()]
        );
        assert_eq!(
            store.feed(1).unwrap().changes,
            vec![
                Change::Upsert {
                    rev: 2,
                    route: running.route().unwrap()
                },
                Change::Remove {
                    rev: 3,
                    session: exited.id
                },
            ]
        );
        assert_eq!(store.insert_rebuilt(&batch).unwrap(), 0);
        assert_eq!(store.rev(), 3);
    }

    #[test]
    fn list_active_by_owner_over_ten_thousand_records() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let batch: Vec<Session> = (0..10_000).map(|n| session(n, "bulk")).collect();
        assert_eq!(store.insert_rebuilt(&batch).unwrap(), 10_000);
        store
            .insert_creating(&session(20_000, "other"), ROOMY)
            .unwrap();
        let list = store.list_active(Some("bulk")).unwrap();
        assert_eq!(list.len(), 10_000);
        assert!(list.windows(2).all(|w| w[0].created_at <= w[1].created_at));
        assert_eq!(store.counts("bulk").unwrap(), (10_000, 10_001));
    }
}

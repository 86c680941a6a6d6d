//! The control service's books, kept in sled. This is the only module that touches sled.
//!
//! Layout (one sled database, eleven trees):
//!
//! | tree               | key                                         | value              |
//! |--------------------|---------------------------------------------|--------------------|
//! | `sessions`         | session id                                  | active [`Session`] JSON |
//! | `owners`           | `owner \0 id`                               | empty              |
//! | `history`          | session id                                  | ended [`Session`] JSON |
//! | `history_by_owner` | `owner \0 ended_at (u64 BE) \0 id`          | empty              |
//! | `counts`           | `u:<sub>` / `g`                             | u32 BE             |
//! | `meta`             | `rev`; `grant_key`                          | u64 BE; 32 bytes   |
//! | `changes`          | rev (u64 BE)                                | [`Change`] JSON    |
//! | `locks`            | sub                                         | [`UserLock`] JSON  |
//! | `targets`          | target id                                   | [`Target`] JSON    |
//! | `sign_ins`         | token fingerprint (hex)                     | [`SignIn`] JSON    |
//! | `revoked`          | `f/<fingerprint>`, `j/<jti>`, `b/<sub>`     | [`Revocation`] JSON |
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
//!
//! [`keys`] holds the byte layouts, [`tx`] the transaction helper, [`sign_ins`] the
//! sign-ins and revocations.
//!
//! [`SignIn`]: crate::model::SignIn
//! [`Revocation`]: policy::revocation::Revocation

mod audit;
mod keys;
mod sign_ins;
#[cfg(test)]
mod tests;
mod tx;

pub use audit::AuditQuery;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use policy::{QuotaExceeded, QuotaLimits, SessionId, Sub};
use sled::transaction::TransactionError;
use sled::{IVec, Tree};
use tokio::sync::watch;

use crate::model::{
    Change, FeedPage, Pools, Route, RouteLookup, Session, SessionState, Target, UserLock,
};
use keys::{
    decode_u32, decode_u64, history_key, owner_key, owner_prefix, parse_history_key,
    parse_owner_key, user_count_key, AUDIT, CHANGES, COUNTS, GLOBAL_COUNT_KEY, GRANT_KEY, HISTORY,
    HISTORY_BY_OWNER, LOCKS, META, OWNERS, REVOKED, REV_KEY, SESSIONS, SIGN_INS, TARGETS,
};
use tx::{abort, encode};

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
    /// No Docker host may take the new session (none answers, none the profile
    /// allows has room).
    #[error("no Docker host can take the session: {0}")]
    NoHost(String),
    /// The write contradicts what is stored (an id that exists, a transition not allowed).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The record has moved on from the state the caller decided on (it is now in the
    /// given state); nothing was written.
    #[error("the session is now {}, no longer in the state the change was decided on", .0.as_str())]
    StateChanged(SessionState),
    /// A stored record cannot be read back; the store needs repair.
    #[error("corrupt store record: {0}")]
    Corrupt(#[source] Corruption),
    /// The store's disk cannot be written (full, read-only, failing): writes are
    /// refused until it can; reads keep working. The cause names what the system said.
    #[error("the store cannot write: {0}")]
    Unavailable(#[source] std::io::Error),
    /// The database itself failed in another way.
    #[error("store database error: {0}")]
    Db(#[source] sled::Error),
    /// A record could not be written as JSON.
    #[error("store database error: encode: {0}")]
    Encode(#[source] serde_json::Error),
    /// The system gave no randomness for this opening's feed epoch.
    #[error("store database error: no randomness for the feed epoch: {0}")]
    Randomness(#[source] getrandom::Error),
}

/// What is wrong with a stored record.
#[derive(Debug, thiserror::Error)]
pub enum Corruption {
    /// Bytes of the wrong size or shape, or a record that contradicts its key.
    #[error("{0}")]
    Malformed(String),
    /// A record whose JSON does not decode.
    #[error("{what}: {source}")]
    Undecodable {
        /// Which record.
        what: String,
        /// What the decoder said.
        #[source]
        source: serde_json::Error,
    },
    /// sled's own checksums failed.
    #[error("{0}")]
    Db(#[source] sled::Error),
}

impl StoreError {
    /// A record of the wrong shape, described by `what`.
    fn corrupt(what: impl Into<String>) -> StoreError {
        StoreError::Corrupt(Corruption::Malformed(what.into()))
    }

    /// A record, described by `what`, whose JSON does not decode.
    fn undecodable(what: impl Into<String>, source: serde_json::Error) -> StoreError {
        StoreError::Corrupt(Corruption::Undecodable {
            what: what.into(),
            source,
        })
    }
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        match e {
            // sled's own checksum failures are corruption too, and need the same repair.
            e @ sled::Error::Corruption { .. } => StoreError::Corrupt(Corruption::Db(e)),
            sled::Error::Io(e) => StoreError::Unavailable(e),
            other => StoreError::Db(other),
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

/// The control service's persistent state: sessions, history, quotas, locks and the
/// route feed.
pub struct Store {
    /// Where the database lives, for reopening it.
    path: PathBuf,
    /// The open database; `None` only while it is being reopened (see
    /// [`Store::reopen_if_poisoned`]). Readers clone the `Arc` out and hold no lock.
    open: RwLock<Option<Arc<Opened>>>,
    /// A write failed for I/O (disk full, read-only filesystem): sled refuses every
    /// write after that until it is reopened, and reads keep working from memory.
    poisoned: AtomicBool,
    change_log_len: u64,
    /// The ttyd pool of each Docker host that has its own: where routes point.
    pools: Pools,
    /// The read-only ttyd pool of each Docker host that has one: where viewers go.
    viewer_pools: Pools,
    write_lock: Mutex<()>,
    /// Holds the newest committed-and-flushed revision; receivers are feed pollers.
    rev_tx: watch::Sender<u64>,
}

/// One opening of the database: its trees and its feed epoch.
struct Opened {
    db: sled::Db,
    sessions: Tree,
    owners: Tree,
    history: Tree,
    history_by_owner: Tree,
    counts: Tree,
    meta: Tree,
    changes: Tree,
    locks: Tree,
    targets: Tree,
    sign_ins: Tree,
    revoked: Tree,
    audit: Tree,
    /// This opening's feed epoch (see [`FeedPage::epoch`]).
    epoch: String,
    /// sled's log file, for [`Opened::sync`].
    log: std::fs::File,
}

impl Opened {
    /// Makes what sled flushed durable. On Linux sled's flush ends in
    /// `sync_file_range`, which writes the data but not the file's size or block map:
    /// a log that grew is not on disk until the filesystem commits its journal (ext4:
    /// within 5 s), and a disk error or power loss before that loses acknowledged
    /// writes. `fsync` on the file (any descriptor of it) commits both.
    fn sync(&self) -> Result<()> {
        self.log.sync_all().map_err(StoreError::Unavailable)
    }

    fn open(path: &Path) -> Result<Opened> {
        let db = sled::open(path)?;
        // The directory entries of a store made just now, durable before anything
        // is acknowledged.
        std::fs::File::open(path)
            .and_then(|d| d.sync_all())
            .map_err(StoreError::Unavailable)?;
        let open = |name: &str| db.open_tree(name);
        Ok(Opened {
            sessions: open(SESSIONS)?,
            owners: open(OWNERS)?,
            history: open(HISTORY)?,
            history_by_owner: open(HISTORY_BY_OWNER)?,
            counts: open(COUNTS)?,
            meta: open(META)?,
            changes: open(CHANGES)?,
            locks: open(LOCKS)?,
            targets: open(TARGETS)?,
            sign_ins: open(SIGN_INS)?,
            revoked: open(REVOKED)?,
            audit: open(AUDIT)?,
            epoch: new_epoch()?,
            log: std::fs::File::open(path.join("db")).map_err(StoreError::Unavailable)?,
            db,
        })
    }
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
    SessionState::Unreachable,
];

impl Store {
    /// Opens (or creates) the store in directory `path`, keeping the newest
    /// `change_log_len` feed changes (at least one, so the newest change is always
    /// retained).
    pub fn open(path: &Path, change_log_len: usize) -> Result<Store> {
        let store = Store {
            path: path.to_path_buf(),
            open: RwLock::new(Some(Arc::new(Opened::open(path)?))),
            poisoned: AtomicBool::new(false),
            change_log_len: u64::try_from(change_log_len.max(1)).unwrap_or(u64::MAX),
            pools: Pools::new(),
            viewer_pools: Pools::new(),
            write_lock: Mutex::new(()),
            rev_tx: watch::channel(0).0,
        };
        let rev = store.stored_rev()?;
        store.rev_tx.send_replace(rev);
        Ok(store)
    }

    /// Aims the routes of each host's sessions at that host's ttyd pool (hosts not in
    /// `pools` are served by the gateway's own). Set once, before the store is shared.
    pub fn set_pools(&mut self, pools: Pools) {
        self.pools = pools;
    }

    /// Aims the share-link viewers of each host's sessions at that host's read-only
    /// pool. Set once, before the store is shared.
    pub fn set_viewer_pools(&mut self, pools: Pools) {
        self.viewer_pools = pools;
    }

    /// The route gateways need for `s`, if any (see [`Session::route_via`]).
    pub fn route_of(&self, s: &Session) -> Option<Route> {
        s.route_via(&self.pools)
            .map(|r| s.with_viewers(r, &self.viewer_pools))
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
        // A store being reopened is not known to be empty: nothing is rebuilt over it.
        self.t()
            .is_ok_and(|t| t.sessions.is_empty() && t.history.is_empty())
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
        let _guard = self.write_lock()?;
        self.insert_creating_locked(s, limits)
    }

    /// [`Store::insert_creating`] for a session whose Docker host is chosen here, under
    /// the write lock, so that racing creates never overfill a host: `choose` gets the
    /// active sessions per host and names the host (`None`: no host may take it,
    /// [`StoreError::NoHost`]). Quotas are checked first, so a caller over quota hears
    /// that rather than that no host has room. Sets `s.host`.
    pub fn insert_placed(
        &self,
        s: &mut Session,
        limits: QuotaLimits,
        choose: impl FnOnce(
            &std::collections::BTreeMap<String, u32>,
        ) -> std::result::Result<String, String>,
    ) -> Result<()> {
        if s.state != SessionState::Creating {
            return Err(StoreError::Conflict(format!(
                "a new session must be creating, not {}",
                s.state.as_str()
            )));
        }
        let _guard = self.write_lock()?;
        // Under the mutex the counts cannot move before the transaction re-checks them.
        let user = decode_u32(self.t()?.counts.get(user_count_key(&s.owner))?)?;
        let global = decode_u32(self.t()?.counts.get(GLOBAL_COUNT_KEY)?)?;
        limits.check(user, global).map_err(StoreError::Quota)?;
        let mut per_host = std::collections::BTreeMap::<String, u32>::new();
        for item in self.t()?.sessions.iter() {
            let (key, value) = item?;
            let active = decode_session(&key, &value)?;
            *per_host.entry(active.host).or_default() += 1;
        }
        s.host = choose(&per_host).map_err(StoreError::NoHost)?;
        self.insert_creating_locked(s, limits)
    }

    /// The body of an insert of a `creating` session; the caller holds the write lock.
    fn insert_creating_locked(&self, s: &Session, limits: QuotaLimits) -> Result<()> {
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
        let _guard = self.write_lock()?;
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
        let _guard = self.write_lock()?;
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

    /// Records when users last typed into sessions, as a gateway reports it: each
    /// active session whose `last_input` moves forward (by a second at least: times
    /// are whole seconds) is rewritten, all in one transaction and without a revision
    /// bump (gateways have nothing to learn from it). Ids that name no active session
    /// are skipped; a time after `now` counts as `now`. Returns how many records moved;
    /// flushed when any did.
    pub fn record_input(&self, inputs: &[(SessionId, u64)], now: u64) -> Result<usize> {
        let mut latest = std::collections::BTreeMap::<SessionId, u64>::new();
        for (id, at) in inputs {
            let e = latest.entry(*id).or_default();
            *e = (*e).max((*at).min(now));
        }
        let _guard = self.write_lock()?;
        let mut moved = Vec::new();
        for (id, at) in latest {
            // Safe to read outside the transaction: every writer holds the mutex.
            let Some(mut s) = self.get(&id)? else {
                continue;
            };
            if s.last_input.is_some_and(|l| at <= l) {
                continue;
            }
            s.last_input = Some(at);
            moved.push(s);
        }
        if moved.is_empty() {
            return Ok(0);
        }
        self.transact(|tx| {
            for s in &moved {
                tx.sessions.insert(s.id.as_str().as_bytes(), encode(s)?)?;
            }
            Ok(())
        })?;
        self.note(self.flush_durably())?;
        Ok(moved.len())
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
        let _guard = self.write_lock()?;
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
        self.t()?
            .sessions
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
        let Some(s) = self.get(id)? else {
            // A target: nobody owns it, so no owner can be locked.
            let route = self.get_target(id)?.and_then(|t| t.route());
            let epoch = self.t()?.epoch.clone();
            return Ok(route.map(|route| RouteLookup {
                route,
                owner_locked: false,
                rev: self.rev(),
                epoch,
            }));
        };
        let Some(route) = self.route_of(&s) else {
            return Ok(None);
        };
        let owner_locked = self.is_locked(&s.owner)?;
        let rev = self.stored_rev()?;
        Ok(Some(RouteLookup {
            route,
            owner_locked,
            rev,
            epoch: self.t()?.epoch.clone(),
        }))
    }

    /// The ended session with this id, if it is still in history.
    pub fn get_ended(&self, id: &SessionId) -> Result<Option<Session>> {
        let key = id.as_str().as_bytes();
        self.t()?
            .history
            .get(key)?
            .map(|v| decode_session(key, &v))
            .transpose()
    }

    /// Active sessions, of one owner (read through the owner index) or of everyone,
    /// sorted by `created_at` then id.
    pub fn list_active(&self, owner: Option<&Sub>) -> Result<Vec<Session>> {
        let mut out = Vec::new();
        match owner {
            Some(owner) => {
                for item in self.t()?.owners.scan_prefix(owner_prefix(owner)) {
                    let (key, _) = item?;
                    let Some(id) = parse_owner_key(&key, owner)? else {
                        continue;
                    };
                    let s = self.get(&id)?.ok_or_else(|| {
                        StoreError::corrupt(format!("owner index names missing session {id}"))
                    })?;
                    out.push(s);
                }
            }
            None => {
                for item in self.t()?.sessions.iter() {
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
    pub fn list_history(&self, owner: Option<&Sub>, limit: usize) -> Result<Vec<Session>> {
        match owner {
            Some(owner) => {
                let mut out = Vec::new();
                // Index keys sort by end time, so reading backwards is newest first.
                for item in self
                    .t()?
                    .history_by_owner
                    .scan_prefix(owner_prefix(owner))
                    .rev()
                {
                    if out.len() >= limit {
                        break;
                    }
                    let (key, _) = item?;
                    let (key_owner, _, id) = parse_history_key(&key)?;
                    if key_owner != owner.as_str().as_bytes() {
                        continue;
                    }
                    let s = self.get_ended(&id)?.ok_or_else(|| {
                        StoreError::corrupt(format!("history index names missing session {id}"))
                    })?;
                    out.push(s);
                }
                Ok(out)
            }
            None => {
                let mut all = Vec::new();
                for item in self.t()?.history.iter() {
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
    pub fn counts(&self, owner: &Sub) -> Result<(u32, u32)> {
        let user = decode_u32(self.t()?.counts.get(user_count_key(owner))?)?;
        Ok((user, self.active_count()?))
    }

    /// Sessions the deployment holds, counting `creating`, `running` and `stopping`.
    pub fn active_count(&self) -> Result<u32> {
        decode_u32(self.t()?.counts.get(GLOBAL_COUNT_KEY)?)
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

    /// Route feed: changes with rev > after, in order. If `after` is older than the
    /// oldest retained change minus one (log trimmed), or greater than the current rev
    /// (a restored/rebuilt store), return reset=true with every route of running
    /// sessions and every locked user. after == rev → empty changes, reset false.
    pub fn feed(&self, after: u64) -> Result<FeedPage> {
        self.feed_in(after, None)
    }

    /// This opening's feed epoch.
    pub fn epoch(&self) -> String {
        self.t().map(|t| t.epoch.clone()).unwrap_or_default()
    }

    /// [`Store::feed`] for a poller whose revision counts in `epoch`: another epoch than
    /// this opening's is answered with a reset.
    pub fn feed_in(&self, after: u64, epoch: Option<&str>) -> Result<FeedPage> {
        let current = self.t()?.epoch.clone();
        if epoch.is_some_and(|e| e != current) {
            return self.snapshot();
        }
        let rev = self.rev();
        if after == rev {
            return Ok(FeedPage {
                epoch: self.t()?.epoch.clone(),
                rev,
                reset: false,
                changes: Vec::new(),
                routes: Vec::new(),
                locked: Vec::new(),
                revoked: Vec::new(),
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
            for item in self.t()?.changes.range(start.as_slice()..=end.as_slice()) {
                let (key, value) = item?;
                let at = decode_u64(Some(key))?;
                if at != expect {
                    break;
                }
                let change: Change = serde_json::from_slice(&value)
                    .map_err(|e| StoreError::undecodable(format!("change {at}"), e))?;
                if change.rev() != at {
                    return Err(StoreError::corrupt(format!(
                        "change stored at {at} says rev {}",
                        change.rev()
                    )));
                }
                changes.push(change);
                expect += 1;
            }
            if expect == rev + 1 {
                return Ok(FeedPage {
                    epoch: self.t()?.epoch.clone(),
                    rev,
                    reset: false,
                    changes,
                    routes: Vec::new(),
                    locked: Vec::new(),
                    revoked: Vec::new(),
                });
            }
        }
        self.snapshot()
    }

    /// Registers or replaces a target and publishes its route; flushed. A name another
    /// target uses is a `Conflict`.
    pub fn put_target(&self, t: &Target) -> Result<()> {
        let _guard = self.write_lock()?;
        if let Some(other) = self
            .list_targets()?
            .into_iter()
            .find(|o| o.name == t.name && o.id != t.id)
        {
            return Err(StoreError::Conflict(format!(
                "the name {:?} is taken by target {}",
                t.name, other.id
            )));
        }
        let route = t.route().ok_or_else(|| {
            StoreError::Conflict(format!("upstream {:?} is not valid", t.upstream))
        })?;
        self.transact(|tx| {
            tx.targets.insert(t.id.as_str().as_bytes(), encode(t)?)?;
            let route = route.clone();
            tx.bump(|rev| Change::Upsert { rev, route })?;
            Ok(())
        })?;
        self.settle()
    }

    /// Removes a target and publishes the removal (its live terminals close); flushed.
    /// `NotFound` if there is no such target.
    pub fn delete_target(&self, id: &SessionId) -> Result<()> {
        let _guard = self.write_lock()?;
        if self.get_target(id)?.is_none() {
            return Err(StoreError::NotFound);
        }
        self.transact(|tx| {
            tx.targets.remove(id.as_str().as_bytes())?;
            tx.bump(|rev| Change::Remove { rev, session: *id })?;
            Ok(())
        })?;
        self.settle()
    }

    /// The target with this id.
    pub fn get_target(&self, id: &SessionId) -> Result<Option<Target>> {
        let key = id.as_str().as_bytes();
        self.t()?
            .targets
            .get(key)?
            .map(|v| decode_target(key, &v))
            .transpose()
    }

    /// Every target, sorted by name.
    pub fn list_targets(&self) -> Result<Vec<Target>> {
        let mut out = Vec::new();
        for item in self.t()?.targets.iter() {
            let (key, value) = item?;
            out.push(decode_target(&key, &value)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
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

    /// Writes everything committed so far to disk.
    pub fn flush(&self) -> Result<()> {
        self.note(self.flush_durably())
    }

    /// sled's flush, then the file's own sync (see [`Opened::sync`]).
    fn flush_durably(&self) -> Result<()> {
        let t = self.t()?;
        t.db.flush()?;
        t.sync()
    }

    /// The key terminal grants are sealed with ([`policy::grant`]): 32 random bytes
    /// made on first use and kept in `meta`, so a restarted control still opens the
    /// grants of terminals that stayed open.
    pub fn grant_key(&self) -> Result<[u8; 32]> {
        let t = self.t()?;
        if let Some(key) = t.meta.get(GRANT_KEY)? {
            return <[u8; 32]>::try_from(key.as_ref())
                .map_err(|_| StoreError::corrupt("meta grant_key is not 32 bytes".to_owned()));
        }
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).map_err(StoreError::Randomness)?;
        let _guard = self.lock();
        // Two first uses at once: the first key stored wins.
        if let Err(stored) = t
            .meta
            .compare_and_swap(GRANT_KEY, None::<&[u8]>, Some(&key[..]))?
        {
            if let Some(current) = stored.current {
                key = <[u8; 32]>::try_from(current.as_ref()).map_err(|_| {
                    StoreError::corrupt("meta grant_key is not 32 bytes".to_owned())
                })?;
            }
        }
        drop(_guard);
        self.flush()?;
        Ok(key)
    }

    // ---- internals ----

    fn lock(&self) -> MutexGuard<'_, ()> {
        // The mutex guards no data (the transaction keeps the trees whole), so a
        // panic in another writer leaves nothing to distrust.
        self.write_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The write mutex, for a write: a store poisoned by an I/O error is reopened
    /// first, or the write is refused with what the disk says now.
    fn write_lock(&self) -> Result<MutexGuard<'_, ()>> {
        let guard = self.lock();
        self.refuse_if_read_only()?;
        self.reopen_if_poisoned()?;
        Ok(guard)
    }

    /// A filesystem that the kernel has turned read-only (an ext4 error with
    /// `errors=remount-ro`, a remount) is refused before sled is handed the write:
    /// sled keeps the first I/O error for good and, caught between a failed log write
    /// and a flush, can wait for a stable log position that never comes. The test is
    /// to set the store directory's times: it fails with `EROFS` both on a read-only
    /// mount and on an ext4 in its emergency read-only state, which newer kernels
    /// enter on an error without marking the mount read-only (so `statvfs` still says
    /// writable). One system call per write; the poisoned path then reopens once the
    /// directory takes writes again.
    fn refuse_if_read_only(&self) -> Result<()> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Ok(());
        }
        match touch(&self.path) {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error()) => {
                self.note(Err(StoreError::Unavailable(e)))
            }
            // The write itself will say what is wrong with a directory that cannot be
            // touched for another reason.
            _ => Ok(()),
        }
    }

    /// The current opening of the database.
    fn t(&self) -> Result<Arc<Opened>> {
        self.open
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                StoreError::Unavailable(std::io::Error::other(
                    "the store is being reopened after a write failure",
                ))
            })
    }

    /// Notes a write's outcome: an I/O failure leaves sled refusing every later write
    /// (it keeps the first error for good), so the next write reopens the database.
    fn note<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(StoreError::Unavailable(e)) = &r {
            if !self.poisoned.swap(true, Ordering::SeqCst) {
                tracing::error!(path = %self.path.display(), error = %e, "the store cannot write; writes are refused until its directory takes writes again");
            }
        }
        r
    }

    /// After an I/O failure (caller holds the write mutex): once the directory takes
    /// writes again, drops the poisoned database and opens it afresh — only what was
    /// flushed is there, which is everything acknowledged — under a new feed epoch, so
    /// gateways take a full snapshot. Until then the write is refused naming the cause,
    /// and the poisoned database keeps serving reads.
    fn reopen_if_poisoned(&self) -> Result<()> {
        if !self.poisoned.load(Ordering::SeqCst) {
            return Ok(());
        }
        probe_writable(&self.path).map_err(StoreError::Unavailable)?;
        let old = self
            .open
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(old) = old {
            // Readers hold a clone only for the length of one call.
            let deadline = Instant::now() + Duration::from_secs(2);
            while Arc::strong_count(&old) > 1 {
                if Instant::now() > deadline {
                    *self
                        .open
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(old);
                    return Err(StoreError::Unavailable(std::io::Error::other(
                        "readers still hold the store being reopened",
                    )));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            // sled's file lock goes with the last handle. Its drop syncs the log file
            // and panics when that fails, as it does on the broken filesystem the old
            // handle still points into (one mounted over, say): that panic is caught
            // here, and the handle is gone either way.
            let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(old)));
            if dropped.is_err() {
                tracing::warn!(path = %self.path.display(), "the old store handle could not sync its log while closing (its filesystem failed); closed anyway");
            }
        }
        // sled's background threads may hold the lock file a moment longer.
        let deadline = Instant::now() + Duration::from_secs(5);
        let opened = loop {
            match Opened::open(&self.path) {
                Ok(o) => break o,
                Err(e) if Instant::now() > deadline => {
                    tracing::error!(path = %self.path.display(), error = %e, "cannot reopen the store");
                    return Err(e);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        *self
            .open
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(opened));
        self.poisoned.store(false, Ordering::SeqCst);
        // Writes that failed were visible in memory; the revision goes back to what was
        // flushed, and the new epoch makes every poller start over from a snapshot.
        let rev = self.stored_rev()?;
        self.rev_tx.send_replace(rev);
        tracing::warn!(target: "audit", path = %self.path.display(), rev, "the store takes writes again: reopened");
        Ok(())
    }

    fn stored_rev(&self) -> Result<u64> {
        decode_u64(self.t()?.meta.get(REV_KEY)?)
    }

    /// After a commit (mutex still held): flush, then publish the committed revision.
    /// The revision is published even if the flush fails, because the change is
    /// already visible to readers of this process; the caller still gets the error.
    fn settle(&self) -> Result<()> {
        let flushed = self.note(self.flush_durably());
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
        for item in self.t()?.sessions.iter() {
            let (key, value) = item?;
            if let Some(route) = self.route_of(&decode_session(&key, &value)?) {
                routes.push(route);
            }
        }
        for t in self.list_targets()? {
            routes.extend(t.route());
        }
        let locked = self.locked_users()?;
        let revoked = self.revocations()?;
        Ok(FeedPage {
            epoch: self.t()?.epoch.clone(),
            rev,
            reset: true,
            changes: Vec::new(),
            routes,
            locked,
            revoked,
        })
    }

    /// Every `history_by_owner` key of `owner`, ascending (oldest first).
    fn history_keys(&self, owner: &Sub) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        for item in self.t()?.history_by_owner.scan_prefix(owner_prefix(owner)) {
            let (key, _) = item?;
            let (key_owner, _, _) = parse_history_key(&key)?;
            if key_owner == owner.as_str().as_bytes() {
                keys.push(key.to_vec());
            }
        }
        Ok(keys)
    }
}

/// Sets `dir`'s access and modification times to now.
fn touch(dir: &Path) -> std::io::Result<()> {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    let times = rustix::fs::Timestamps {
        last_access: now,
        last_modification: now,
    };
    rustix::fs::utimensat(rustix::fs::CWD, dir, &times, rustix::fs::AtFlags::empty())
        .map_err(std::io::Error::from)
}

/// Whether `dir` takes a write now: one sled segment's worth (512 KiB) of bytes,
/// synced, then removed. The error says why not ("No space left on device",
/// "Read-only file system").
fn probe_writable(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join(".write-probe");
    let written = std::fs::File::create(&path).and_then(|mut f| {
        f.write_all(&vec![0u8; 512 << 10])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&path);
    written
}

/// A fresh random feed epoch.
fn new_epoch() -> Result<String> {
    let mut random = [0u8; 8];
    getrandom::getrandom(&mut random).map_err(StoreError::Randomness)?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

fn decode_session(key: &[u8], value: &[u8]) -> Result<Session> {
    let name = String::from_utf8_lossy(key);
    let s: Session = serde_json::from_slice(value)
        .map_err(|e| StoreError::undecodable(format!("session {name}"), e))?;
    // A record filed under another id would dodge every lookup and index.
    if s.id.as_str().as_bytes() != key {
        return Err(StoreError::corrupt(format!(
            "session stored under {name} says id {}",
            s.id
        )));
    }
    Ok(s)
}

fn decode_target(key: &[u8], value: &[u8]) -> Result<Target> {
    let name = String::from_utf8_lossy(key);
    let t: Target = serde_json::from_slice(value)
        .map_err(|e| StoreError::undecodable(format!("target {name}"), e))?;
    if t.id.as_str().as_bytes() != key {
        return Err(StoreError::corrupt(format!(
            "target stored under {name} says id {}",
            t.id
        )));
    }
    Ok(t)
}

fn conflict_exists(id: &SessionId) -> StoreError {
    StoreError::Conflict(format!("session {id} already exists"))
}

//! The control service's books, kept in sled. This is the only module that touches sled.
//!
//! Layout (one sled database, fifteen trees):
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
//! | `recording_links`  | `h/<token sha256 hex>`; `i/<session>/<recording>/<link id>` | [`RecordingLink`] JSON; the hash |
//! | `workspaces`       | workspace id                                | [`Workspace`] JSON |
//! | `audit`            | `at_ms seq` (u64 BE, u32 BE)                | an audit line JSON |
//! | `secrets`          | secret name                                 | [`Secret`] JSON    |
//!
//! Every write holds one process-wide mutex and runs as one multi-tree transaction:
//! the mutex serialises quota check, insert, counting and the revision bump (sled's
//! optimistic transactions alone let racing creates overshoot a quota), and the
//! transaction makes a crash leave either all of a change or none of it. Because every
//! write holds the mutex, a writer may also read the trees outside its transaction
//! (for prefix scans, which transactions cannot do) and rely on them not moving.
//! `audit` and `secrets` stand apart from the transaction: an audit line and a secret's
//! record each change one key of one tree, and nothing else moves with them.
//!
//! A write that changes what gateways should know bumps `rev` and appends exactly one
//! [`Change`] in the same transaction; the change log keeps the newest
//! `change_log_len` entries. After commit the database is flushed (an acknowledged
//! change survives `kill -9`) and the new revision is published on a watch channel so
//! long-polling feed readers wake at once.
//!
//! This file holds the [`Store`] handle: opening, durability (flush, the write mutex,
//! reopening after an I/O failure) and publishing revisions. The operations live by
//! topic: [`sessions`] the session records and their history, [`users`] per-user
//! counts and locks, [`feed`] the route feed, [`targets`] the targets, [`meta`] the
//! grant key, [`sign_ins`] the sign-ins and revocations, [`audit`] the audit lines,
//! [`workspaces`] the workspaces, [`secrets`] the registered secrets.
//! [`error`] holds the error types, [`keys`] the byte layouts, [`tx`] the transaction
//! helper.
//!
//! [`Session`]: crate::model::Session
//! [`Change`]: crate::model::Change
//! [`UserLock`]: crate::model::UserLock
//! [`Target`]: crate::model::Target
//! [`SignIn`]: crate::model::SignIn
//! [`Revocation`]: policy::revocation::Revocation
//! [`RecordingLink`]: crate::model::RecordingLink
//! [`Workspace`]: crate::model::Workspace
//! [`Secret`]: crate::model::Secret

mod audit;
mod error;
mod feed;
mod keys;
mod meta;
mod recording_links;
mod secrets;
mod sessions;
mod sign_ins;
mod targets;
#[cfg(test)]
mod tests;
mod tx;
mod users;
mod workspaces;

pub use audit::AuditQuery;
pub use error::{Corruption, Result, StoreError};
pub use sessions::{Ending, ANY_ACTIVE};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use sled::Tree;
use tokio::sync::watch;

use crate::model::{Pools, Route, Session};
use keys::{
    decode_u64, AUDIT, CHANGES, COUNTS, HISTORY, HISTORY_BY_OWNER, LOCKS, META, OWNERS,
    RECORDING_LINKS, REVOKED, REV_KEY, SECRETS, SESSIONS, SIGN_INS, TARGETS, WORKSPACES,
};

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
    recording_links: Tree,
    audit: Tree,
    workspaces: Tree,
    secrets: Tree,
    /// This opening's feed epoch (see [`FeedPage::epoch`](crate::model::FeedPage::epoch)).
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
            recording_links: open(RECORDING_LINKS)?,
            audit: open(AUDIT)?,
            workspaces: open(WORKSPACES)?,
            secrets: open(SECRETS)?,
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

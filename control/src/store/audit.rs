//! The `audit` tree: audit lines in time order, newest kept, searched newest first.
//!
//! Outside the write mutex and the feed: an audit line changes no route and no
//! decision, and its batch is made durable with the next flush (sled's own, every
//! half second, or the next acknowledged write's).

use std::sync::atomic::{AtomicU32, Ordering};

use policy::audit::AuditEntry;

use super::error::{Result, StoreError};
use super::Store;

/// What an admin searches for: newest first, up to `limit`, older than `before_ms`.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries about this user.
    pub sub: Option<String>,
    /// Only entries about this session.
    pub session: Option<String>,
    /// Only entries strictly older than this (for the next page).
    pub before_ms: Option<u64>,
    /// At most this many.
    pub limit: usize,
}

/// Entries looked at for one search, at most: a search for a rare user stays bounded.
const SCAN: usize = 200_000;

/// Breaks ties between lines of the same millisecond (per process; the time leads).
static SEQ: AtomicU32 = AtomicU32::new(0);

/// `at_ms` then a sequence number, both big-endian: keys sort by time.
fn key(at_ms: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&at_ms.to_be_bytes());
    k[8..].copy_from_slice(&SEQ.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    k
}

impl Store {
    /// Appends audit lines in one batch.
    pub fn append_audit(&self, entries: &[AuditEntry]) -> Result<()> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(std::io::Error::other(
                "the store is refusing writes",
            )));
        }
        // A filesystem turned read-only is refused here too: sled would take the batch
        // in memory and fail on it later, in a flush that a write may be waiting for.
        self.refuse_if_read_only()?;
        let mut batch = sled::Batch::default();
        for e in entries {
            let value = serde_json::to_vec(e)
                .map_err(|e| StoreError::undecodable("an audit line".to_owned(), e))?;
            batch.insert(&key(e.at_ms), value);
        }
        self.t()?.audit.apply_batch(batch)?;
        Ok(())
    }

    /// Removes the oldest lines past the newest `keep`; says how many went.
    pub fn prune_audit(&self, keep: usize) -> Result<usize> {
        let t = self.t()?;
        let excess = t.audit.len().saturating_sub(keep);
        let mut batch = sled::Batch::default();
        for item in t.audit.iter().keys().take(excess) {
            batch.remove(item?);
        }
        t.audit.apply_batch(batch)?;
        Ok(excess)
    }

    /// Lines matching `q`, newest first.
    pub fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>> {
        let t = self.t()?;
        let end = q.before_ms.map_or([0xff; 12], |b| {
            let mut k = [0u8; 12];
            k[..8].copy_from_slice(&b.to_be_bytes());
            k
        });
        let mut found = Vec::new();
        for item in t.audit.range(..end).rev().take(SCAN) {
            let (k, v) = item?;
            let e: AuditEntry = serde_json::from_slice(&v)
                .map_err(|e| StoreError::undecodable(format!("audit line {k:?}"), e))?;
            let wanted = q.sub.as_deref().is_none_or(|s| e.concerns_user(s))
                && q.session.as_deref().is_none_or(|s| e.concerns_session(s));
            if wanted {
                found.push(e);
                if found.len() >= q.limit {
                    break;
                }
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at_ms: u64, sub: &str, session: &str) -> AuditEntry {
        AuditEntry {
            at_ms,
            level: "INFO".into(),
            message: "session created".into(),
            fields: [("sub", sub), ("session", session)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }

    #[test]
    fn lines_are_found_newest_first_by_user_and_session_and_pruned_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 16).unwrap();
        let lines: Vec<AuditEntry> = (0..10)
            .map(|i| {
                line(
                    1_000 + i,
                    if i % 2 == 0 { "alice" } else { "bob" },
                    &format!("s{}", i % 3),
                )
            })
            .collect();
        store.append_audit(&lines).unwrap();
        let q = |sub: Option<&str>, session: Option<&str>, before_ms, limit| AuditQuery {
            sub: sub.map(str::to_owned),
            session: session.map(str::to_owned),
            before_ms,
            limit,
        };
        let alice = store.audit(&q(Some("alice"), None, None, 100)).unwrap();
        let times: Vec<u64> = alice.iter().map(|e| e.at_ms).collect();
        assert_eq!(times, [1_008, 1_006, 1_004, 1_002, 1_000]);
        let s1 = store.audit(&q(None, Some("s1"), None, 100)).unwrap();
        let times: Vec<u64> = s1.iter().map(|e| e.at_ms).collect();
        assert_eq!(times, [1_007, 1_004, 1_001]);
        let both = store.audit(&q(Some("bob"), Some("s1"), None, 100)).unwrap();
        assert_eq!(
            both.iter().map(|e| e.at_ms).collect::<Vec<_>>(),
            [1_007, 1_001]
        );
        let page = store.audit(&q(None, None, Some(1_005), 2)).unwrap();
        assert_eq!(
            page.iter().map(|e| e.at_ms).collect::<Vec<_>>(),
            [1_004, 1_003]
        );

        assert_eq!(store.prune_audit(4).unwrap(), 6);
        let left = store.audit(&q(None, None, None, 100)).unwrap();
        assert_eq!(
            left.iter().map(|e| e.at_ms).collect::<Vec<_>>(),
            [1_009, 1_008, 1_007, 1_006]
        );
        assert_eq!(store.prune_audit(4).unwrap(), 0);
    }
}

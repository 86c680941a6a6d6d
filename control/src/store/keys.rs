//! What is where on disk: tree names, key layouts, and the big-endian numbers stored
//! as counts and revisions. Every byte written here is part of the stored format.

use policy::{SessionId, Sub};
use sled::IVec;

use super::error::{Result, StoreError};

/// Active sessions by id.
pub(super) const SESSIONS: &str = "sessions";
/// `owner \0 id` → empty: the active sessions of each owner.
pub(super) const OWNERS: &str = "owners";
/// Ended sessions by id.
pub(super) const HISTORY: &str = "history";
/// `owner \0 ended_at \0 id` → empty: each owner's history, oldest first.
pub(super) const HISTORY_BY_OWNER: &str = "history_by_owner";
/// `u:<sub>` / `g` → active session counts.
pub(super) const COUNTS: &str = "counts";
/// `rev` → the store's revision.
pub(super) const META: &str = "meta";
/// rev → the feed change made at that revision.
pub(super) const CHANGES: &str = "changes";
/// sub → its lock.
pub(super) const LOCKS: &str = "locks";
/// target id → the target.
pub(super) const TARGETS: &str = "targets";
/// fingerprint (hex) → a sign-in.
pub(super) const SIGN_INS: &str = "sign_ins";
/// [`policy::revocation::Revocation::key`] → a revocation in force.
pub(super) const REVOKED: &str = "revoked";
/// `h/<token hash>` → a recording link; `i/<session>/<recording>/<link id>` → its hash.
pub(super) const RECORDING_LINKS: &str = "recording_links";
/// `at_ms sequence` (big-endian) → an audit line (JSON).
pub(super) const AUDIT: &str = "audit";
/// workspace id → the workspace.
pub(super) const WORKSPACES: &str = "workspaces";
/// secret name → the registered secret (its name and path, never its value).
pub(super) const SECRETS: &str = "secrets";

/// The revision's key in `meta`.
pub(super) const REV_KEY: &[u8] = b"rev";
/// The terminal grants' key's key in `meta`.
pub(super) const GRANT_KEY: &[u8] = b"grant_key";
/// The deployment-wide count's key in `counts`.
pub(super) const GLOBAL_COUNT_KEY: &[u8] = b"g";
const ID_LEN: usize = SessionId::LEN;
/// `\0 id` at the end of an `owners` key.
const OWNER_TAIL: usize = 1 + ID_LEN;
/// `\0 ended_at \0 id` at the end of a `history_by_owner` key.
const HISTORY_TAIL: usize = 1 + 8 + 1 + ID_LEN;

/// An owner's key in `counts`.
pub(super) fn user_count_key(owner: &Sub) -> Vec<u8> {
    [b"u:", owner.as_str().as_bytes()].concat()
}

/// What every `owners` and `history_by_owner` key of `owner` starts with.
pub(super) fn owner_prefix(owner: &Sub) -> Vec<u8> {
    [owner.as_str().as_bytes(), b"\0"].concat()
}

/// The `owners` key of one of `owner`'s active sessions.
pub(super) fn owner_key(owner: &Sub, id: &SessionId) -> Vec<u8> {
    [owner.as_str().as_bytes(), b"\0", id.as_str().as_bytes()].concat()
}

/// The `history_by_owner` key of one of `owner`'s ended sessions.
pub(super) fn history_key(owner: &Sub, ended_at: u64, id: &SessionId) -> Vec<u8> {
    [
        owner.as_str().as_bytes(),
        b"\0",
        ended_at.to_be_bytes().as_slice(),
        b"\0",
        id.as_str().as_bytes(),
    ]
    .concat()
}

/// The id in an `owners` key, or None when the key belongs to another owner whose
/// name merely starts with `owner \0` (owners are parsed from the fixed-size tail, so
/// even a NUL inside a stored owner could not confuse them).
pub(super) fn parse_owner_key(key: &[u8], owner: &Sub) -> Result<Option<SessionId>> {
    let bad = || {
        StoreError::corrupt(format!(
            "owner index key {:?}",
            String::from_utf8_lossy(key)
        ))
    };
    let split = key.len().checked_sub(OWNER_TAIL).ok_or_else(bad)?;
    let (key_owner, tail) = key.split_at(split);
    if tail.first() != Some(&0) {
        return Err(bad());
    }
    if key_owner != owner.as_str().as_bytes() {
        return Ok(None);
    }
    SessionId::parse_bytes(&tail[1..])
        .map(Some)
        .map_err(|_| bad())
}

/// (owner bytes, ended_at, id) of a `history_by_owner` key.
pub(super) fn parse_history_key(key: &[u8]) -> Result<(&[u8], u64, SessionId)> {
    let bad = || {
        StoreError::corrupt(format!(
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

/// A count (u32 BE); a missing one is zero.
pub(super) fn decode_u32(value: Option<IVec>) -> Result<u32> {
    match value {
        None => Ok(0),
        Some(v) => <[u8; 4]>::try_from(v.as_ref())
            .map(u32::from_be_bytes)
            .map_err(|_| StoreError::corrupt(format!("count is {} bytes, not 4", v.len()))),
    }
}

/// A revision (u64 BE), as a value in `meta` or a key in `changes`; missing is zero.
pub(super) fn decode_u64(value: Option<IVec>) -> Result<u64> {
    match value {
        None => Ok(0),
        Some(v) => <[u8; 8]>::try_from(v.as_ref())
            .map(u64::from_be_bytes)
            .map_err(|_| StoreError::corrupt(format!("revision is {} bytes, not 8", v.len()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(s: &str) -> Sub {
        Sub::parse(s).expect("valid sub")
    }

    #[test]
    fn key_layouts_are_the_stored_format() {
        let id = SessionId::from_random([1; 10]);
        let alice = sub("alice");
        let ids = id.as_str().as_bytes();
        assert_eq!(user_count_key(&alice), b"u:alice");
        assert_eq!(owner_prefix(&alice), b"alice\0");
        assert_eq!(owner_key(&alice, &id), [b"alice\0", ids].concat());
        assert_eq!(
            history_key(&alice, 0x0102, &id),
            [b"alice\0\0\0\0\0\0\0\x01\x02\0".as_slice(), ids].concat()
        );
    }

    #[test]
    fn index_keys_parse_back_and_other_owners_keys_are_not_theirs() {
        let id = SessionId::from_random([2; 10]);
        let a = sub("a");
        assert_eq!(parse_owner_key(&owner_key(&a, &id), &a).unwrap(), Some(id));
        assert_eq!(
            parse_owner_key(&owner_key(&sub("a.b"), &id), &a).unwrap(),
            None
        );
        // A key written by an older version for an owner holding a NUL shares the
        // prefix `a\0`; the fixed-size tail still tells it apart.
        let raw = [b"a\0b\0".as_slice(), id.as_str().as_bytes()].concat();
        assert_eq!(parse_owner_key(&raw, &a).unwrap(), None);
        let key = history_key(&a, 77, &id);
        let (owner, at, got) = parse_history_key(&key).unwrap();
        assert_eq!((owner, at, got), (b"a".as_slice(), 77, id));
    }

    #[test]
    fn malformed_keys_and_numbers_are_corruption() {
        let a = sub("a");
        assert!(matches!(
            parse_owner_key(b"short", &a),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            parse_history_key(b"short"),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            decode_u32(Some(IVec::from(b"xyz".as_slice()))),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            decode_u64(Some(IVec::from(b"1234".as_slice()))),
            Err(StoreError::Corrupt(_))
        ));
        assert_eq!(decode_u32(None).unwrap(), 0);
        assert_eq!(
            decode_u64(Some(IVec::from(7u64.to_be_bytes().as_slice()))).unwrap(),
            7
        );
    }
}

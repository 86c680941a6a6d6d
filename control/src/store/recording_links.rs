//! Links to one recording: filed under their token's hash (a lookup by link is one
//! `get`), with an index by recording for the owner's list. A revoked link stays
//! (marked) until a new link to the same recording is made, which drops its
//! recording's revoked and expired links.

use policy::SessionId;
use sled::IVec;

use super::error::{Result, StoreError};
use super::tx::{abort, encode};
use super::Store;
use crate::model::RecordingLink;

/// The key of a link by its token's hash.
fn by_hash(hash: &str) -> Vec<u8> {
    format!("h/{hash}").into_bytes()
}

/// What the index keys of one recording start with (names are `[A-Za-z0-9_-]`, so the
/// separators are unambiguous).
fn index_prefix(session: &SessionId, recording: &str) -> Vec<u8> {
    format!("i/{session}/{recording}/").into_bytes()
}

fn index_key(session: &SessionId, recording: &str, id: &str) -> Vec<u8> {
    [index_prefix(session, recording), id.as_bytes().to_vec()].concat()
}

fn decode(key: &[u8], value: &[u8]) -> Result<RecordingLink> {
    serde_json::from_slice(value).map_err(|e| {
        StoreError::undecodable(
            format!("recording link {}", String::from_utf8_lossy(key)),
            e,
        )
    })
}

impl Store {
    /// Files a new link, dropping its recording's revoked and expired (at `now`)
    /// links; flushed.
    pub fn put_recording_link(&self, link: &RecordingLink, now: u64) -> Result<()> {
        let _guard = self.write_lock()?;
        let gone: Vec<RecordingLink> = self
            .recording_links_of(&link.session, &link.recording)?
            .into_iter()
            .filter(|l| l.revoked || l.expires_at <= now)
            .collect();
        self.transact(|tx| {
            let key = by_hash(&link.hash);
            if tx.recording_links.get(&key)?.is_some() {
                return Err(abort(StoreError::Conflict("the link exists".into())));
            }
            for old in &gone {
                tx.recording_links.remove(by_hash(&old.hash))?;
                tx.recording_links
                    .remove(index_key(&old.session, &old.recording, &old.id))?;
            }
            tx.recording_links.insert(key, encode(link)?)?;
            tx.recording_links.insert(
                index_key(&link.session, &link.recording, &link.id),
                link.hash.as_bytes(),
            )?;
            Ok(())
        })?;
        self.settle()
    }

    /// The link whose token hashes to `hash`.
    pub fn recording_link(&self, hash: &str) -> Result<Option<RecordingLink>> {
        let key = by_hash(hash);
        match self.t()?.recording_links.get(&key)? {
            Some(v) => Ok(Some(decode(&key, &v)?)),
            None => Ok(None),
        }
    }

    /// Every link kept of one recording, revoked and expired ones too, oldest first.
    pub fn recording_links_of(
        &self,
        session: &SessionId,
        recording: &str,
    ) -> Result<Vec<RecordingLink>> {
        let t = self.t()?;
        let mut out = Vec::new();
        for item in t
            .recording_links
            .scan_prefix(index_prefix(session, recording))
        {
            let (_, hash) = item?;
            let key = [b"h/".as_slice(), &hash].concat();
            if let Some(v) = t.recording_links.get(&key)? {
                out.push(decode(&key, &v)?);
            }
        }
        out.sort_by_key(|l| l.created_at);
        Ok(out)
    }

    /// Marks link `id` of one recording revoked; flushed. `NotFound` if that recording
    /// has no such link.
    pub fn revoke_recording_link(
        &self,
        session: &SessionId,
        recording: &str,
        id: &str,
    ) -> Result<RecordingLink> {
        let _guard = self.write_lock()?;
        let t = self.t()?;
        let hash: IVec = t
            .recording_links
            .get(index_key(session, recording, id))?
            .ok_or(StoreError::NotFound)?;
        let hash = String::from_utf8_lossy(&hash).into_owned();
        let mut link = self.recording_link(&hash)?.ok_or(StoreError::NotFound)?;
        link.revoked = true;
        self.transact(|tx| {
            tx.recording_links.insert(by_hash(&hash), encode(&link)?)?;
            Ok(())
        })?;
        self.settle()?;
        Ok(link)
    }
}

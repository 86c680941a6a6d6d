//! Recordings of terminals (asciicast v2), as gateways hand them over.
//!
//! Kept as plain files, never in the store: `<control.recordings_dir>/<session>/<name>.cast`.
//! A gateway sends each finished file once with `PUT /v1/recordings/<session>/<name>`
//! (service token, streamed, bounded by `control.max_recording_bytes`); a file is
//! written beside its final name and renamed once whole and synced, so a reader never
//! sees half of one, and a gateway that sends the same file again (its
//! acknowledgement was lost) replaces it with the same bytes. Owners and admins list
//! and read them through `GET /v1/sessions/<id>/recordings[/<name>]`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use policy::SessionId;
use tokio::io::AsyncWriteExt;

use crate::error::ApiError;

/// One recording as a listing shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordingEntry {
    /// Its name (`GET /v1/sessions/<id>/recordings/<name>`).
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// When the terminal opened, seconds since the Unix epoch (the header's
    /// `timestamp`).
    pub started: u64,
    /// Time of its last event, seconds.
    pub duration: f64,
}

/// The recordings directory of one control.
pub struct Recordings {
    dir: PathBuf,
    max_bytes: u64,
}

/// One recording as retention sees it: where it is, its size, and when it was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecording {
    /// Its session.
    pub session: SessionId,
    /// Its name.
    pub name: String,
    /// Bytes on disk.
    pub bytes: u64,
    /// When control stored it (the file's modification time), seconds since the Unix epoch.
    pub stored_at: u64,
}

/// Whether `name` may name a recording: 1–100 of `A-Z a-z 0-9 - _` (gateways name
/// them `<ms>-<pid>-<n>`), so it is never a path.
pub fn valid_name(name: &str) -> bool {
    (1..=100).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Recordings {
    /// Recordings kept in `dir`, each at most `max_bytes`.
    pub fn new(dir: PathBuf, max_bytes: u64) -> Self {
        Recordings { dir, max_bytes }
    }

    fn file(&self, session: &SessionId, name: &str) -> Result<PathBuf, ApiError> {
        if !valid_name(name) {
            return Err(ApiError::NOT_FOUND);
        }
        Ok(self
            .dir
            .join(session.to_string())
            .join(format!("{name}.cast")))
    }

    /// Takes a recording from a gateway, streamed from `body`.
    pub async fn put(
        &self,
        session: &SessionId,
        name: &str,
        mut body: Incoming,
    ) -> Result<(), ApiError> {
        let path = self.file(session, name)?;
        let too_big = || {
            ApiError::BODY_TOO_LARGE.with_message(format!(
                "the recording is larger than control.max_recording_bytes ({})",
                self.max_bytes
            ))
        };
        let io = |e: std::io::Error| {
            ApiError::INTERNAL.with_message(format!("cannot write the recording: {e}"))
        };
        // What users saw (and typed) is for control's user alone.
        if let Some(dir) = path.parent() {
            tokio::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .await
                .map_err(io)?;
        }
        let part = path.with_extension("cast.part");
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&part)
            .await
            .map_err(io)?;
        let mut written = 0u64;
        let result = async {
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|_| ApiError::BAD_BODY)?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                written += data.len() as u64;
                if written > self.max_bytes {
                    return Err(too_big());
                }
                file.write_all(&data).await.map_err(io)?;
            }
            file.sync_all().await.map_err(io)?;
            tokio::fs::rename(&part, &path).await.map_err(io)
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&part).await;
        } else {
            tracing::info!(target: "audit", session = %session, recording = name, bytes = written, "recording stored");
        }
        result
    }

    /// The recordings of `session`, oldest first.
    pub fn list(&self, session: &SessionId) -> Vec<RecordingEntry> {
        let dir = self.dir.join(session.to_string());
        let mut found: Vec<RecordingEntry> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let file_name = e.file_name();
                let name = file_name.to_str()?.strip_suffix(".cast")?;
                valid_name(name).then(|| describe(&e.path(), name))?
            })
            .collect();
        found.sort_by(|a, b| (a.started, &a.name).cmp(&(b.started, &b.name)));
        found
    }

    /// Every recording kept, of every session (files being written are not yet kept).
    pub fn scan(&self) -> Vec<StoredRecording> {
        let mut found = Vec::new();
        for dir in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let Some(session) = dir
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<SessionId>().ok())
            else {
                continue;
            };
            for e in std::fs::read_dir(dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let file_name = e.file_name();
                let Some(name) = file_name.to_str().and_then(|n| n.strip_suffix(".cast")) else {
                    continue;
                };
                let Ok(meta) = e.metadata() else {
                    continue;
                };
                if !valid_name(name) || !meta.is_file() {
                    continue;
                }
                let stored_at = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                found.push(StoredRecording {
                    session,
                    name: name.to_owned(),
                    bytes: meta.len(),
                    stored_at,
                });
            }
        }
        found
    }

    /// Removes one recording, and its session's directory once it is empty.
    pub fn remove(&self, r: &StoredRecording) -> std::io::Result<()> {
        let dir = self.dir.join(r.session.to_string());
        match std::fs::remove_file(dir.join(format!("{}.cast", r.name))) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        // Fails while other recordings (or one being written) remain: that is fine.
        let _ = std::fs::remove_dir(&dir);
        Ok(())
    }

    /// One recording of `session`, opened to be streamed, and its size.
    pub async fn open_file(
        &self,
        session: &SessionId,
        name: &str,
    ) -> Result<(tokio::fs::File, u64), ApiError> {
        let path = self.file(session, name)?;
        let opened = async {
            let f = tokio::fs::File::open(&path).await?;
            let size = f.metadata().await?.len();
            Ok::<_, std::io::Error>((f, size))
        };
        match opened.await {
            Ok(found) => Ok(found),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ApiError::NOT_FOUND),
            Err(e) => {
                Err(ApiError::INTERNAL.with_message(format!("cannot read the recording: {e}")))
            }
        }
    }
}

/// A recording's size, start (its header) and duration (its last event's time).
fn describe(path: &Path, name: &str) -> Option<RecordingEntry> {
    let mut f = std::fs::File::open(path).ok()?;
    let size = f.metadata().ok()?.len();
    let mut head = vec![0u8; 4096.min(size as usize)];
    f.read_exact(&mut head).ok()?;
    let first = head.split(|b| *b == b'\n').next()?;
    let header: serde_json::Value = serde_json::from_slice(first).ok()?;
    let started = header.get("timestamp")?.as_u64().unwrap_or(0);
    // The last whole line holds the last event: read only the file's tail.
    let tail_len = size.min(64 * 1024);
    f.seek(SeekFrom::Start(size - tail_len)).ok()?;
    let mut tail = Vec::with_capacity(tail_len as usize);
    f.take(tail_len).read_to_end(&mut tail).ok()?;
    let duration = tail
        .split(|b| *b == b'\n')
        .rev()
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .find_map(|event| event.get(0)?.as_f64())
        .unwrap_or(0.0);
    Some(RecordingEntry {
        name: name.to_owned(),
        size,
        started,
        duration,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_and_never_paths() {
        assert!(valid_name("1732981234567-4242-0"));
        for bad in ["", "../x", "a/b", "a.cast", ".", "a b", &"x".repeat(101)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_listing_reads_start_and_duration_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let id = SessionId::from_random([1; 10]);
        let session_dir = dir.path().join(id.to_string());
        std::fs::create_dir_all(&session_dir).unwrap();
        std::fs::write(
            session_dir.join("100-1-0.cast"),
            "{\"version\": 2, \"width\": 80, \"height\": 24, \"timestamp\": 1700000000}\n[0.5, \"o\", \"a\"]\n[2.25, \"o\", \"b\"]\n",
        )
        .unwrap();
        std::fs::write(session_dir.join("100-1-1.cast.part"), "{}").unwrap();
        let r = Recordings::new(dir.path().to_path_buf(), 1 << 20);
        let list = r.list(&id);
        assert_eq!(
            list,
            [RecordingEntry {
                name: "100-1-0".into(),
                size: std::fs::metadata(session_dir.join("100-1-0.cast"))
                    .unwrap()
                    .len(),
                started: 1_700_000_000,
                duration: 2.25,
            }]
        );
        assert!(r.list(&SessionId::from_random([2; 10])).is_empty());
    }
}

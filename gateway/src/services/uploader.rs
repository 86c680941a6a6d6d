//! Finished recordings handed to control (`PUT /v1/recordings/<session>/<name>`) and
//! deleted once control has them; a gone gateway's unfinished files are finished first.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use policy::SessionId;

use crate::control_client::ControlClient;
use crate::recording::Spool;

/// How often the spool is swept for files control has not taken yet.
const SWEEP: Duration = Duration::from_secs(5);

/// Hands finished recordings to control and deletes them once control has them.
pub struct Uploader {
    /// Where recordings are spooled, and what wakes the uploader.
    pub recordings: Arc<Spool>,
    /// Control's internal API.
    pub control: ControlClient,
    /// `control.max_recording_bytes`: control refuses a larger file.
    pub max_recording_bytes: u64,
}

#[async_trait]
impl BackgroundService for Uploader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let spool = self.recordings.dir().to_path_buf();
        loop {
            finish_stale(&spool);
            sweep(self, &spool).await;
            tokio::select! {
                _ = self.recordings.finished() => {}
                _ = tokio::time::sleep(SWEEP) => {}
                _ = shutdown.changed() => {
                    sweep(self, &spool).await;
                    return;
                }
            }
        }
    }
}

/// Finishes the recordings a gateway that is gone left unfinished (its pid, in the
/// name, no longer runs; another live gateway sharing the spool, such as the old
/// process of an upgrade, finishes its own): cut after the last whole line, then
/// handed over like any other.
pub(crate) fn finish_stale(spool: &Path) {
    let me = std::process::id();
    for (_, path) in spooled(spool, ".cast.part") {
        let pid = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('-').nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| p == me || Path::new(&format!("/proc/{p}")).exists());
        if alive {
            continue;
        }
        let done = path.with_extension("");
        if let Err(e) = cut_after_last_line(&path).and_then(|()| fs::rename(&path, &done)) {
            tracing::warn!(error = %e, path = %path.display(), "cannot finish a recording left by a stopped gateway");
        }
    }
}

/// Truncates a file after its last newline (a line cut by a crash is dropped).
fn cut_after_last_line(path: &Path) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = fs::OpenOptions::new().read(true).write(true).open(path)?;
    let len = f.metadata()?.len();
    let mut end = len;
    let mut chunk = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let n = (end - start) as usize;
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut chunk[..n])?;
        if let Some(i) = chunk[..n].iter().rposition(|b| *b == b'\n') {
            return f.set_len(start + i as u64 + 1);
        }
        end = start;
    }
    f.set_len(0)
}

/// The files of the spool ending in `suffix`, with their session.
pub(crate) fn spooled(spool: &Path, suffix: &str) -> Vec<(SessionId, PathBuf)> {
    let mut found = Vec::new();
    let Ok(sessions) = fs::read_dir(spool) else {
        return found;
    };
    for dir in sessions.flatten() {
        let Some(id) = dir
            .file_name()
            .to_str()
            .and_then(|s| SessionId::parse(s).ok())
        else {
            continue;
        };
        let Ok(files) = fs::read_dir(dir.path()) else {
            continue;
        };
        for f in files.flatten() {
            if f.file_name().to_str().is_some_and(|n| n.ends_with(suffix)) {
                found.push((id, f.path()));
            }
        }
    }
    found
}

async fn sweep(up: &Uploader, spool: &Path) {
    for (session, path) in spooled(spool, ".cast") {
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".cast"))
        else {
            continue;
        };
        // Control refuses a file over its bound (the same configuration): kept aside
        // rather than sent again at every sweep.
        let max = up.max_recording_bytes;
        if fs::metadata(&path).is_ok_and(|m| m.len() > max) {
            let aside = path.with_extension("cast.too-large");
            let _ = fs::rename(&path, &aside);
            tracing::error!(target: "audit", session = %session, recording = name, path = %aside.display(), "a recording is larger than control.max_recording_bytes: kept in the spool, not handed over");
            continue;
        }
        match up.control.put_recording(&session, name, &path).await {
            Ok(()) => {
                let len = fs::metadata(&path).map_or(0, |m| m.len());
                match fs::remove_file(&path) {
                    Ok(()) => up.recordings.released(len),
                    Err(e) => {
                        tracing::warn!(error = %e, path = %path.display(), "cannot delete a recording control has taken")
                    }
                }
                if let Some(dir) = path.parent() {
                    // Only when empty: another terminal of the session may be recording.
                    let _ = fs::remove_dir(dir);
                }
                tracing::info!(target: "audit", session = %session, recording = name, "recording handed to control");
            }
            Err(e) => {
                tracing::warn!(session = %session, recording = name, error = %e, "control did not take a recording; it stays in the spool");
            }
        }
    }
}

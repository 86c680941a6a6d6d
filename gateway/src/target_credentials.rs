//! The credentials that targets' ttyds expect, read from the files their routes name.
//!
//! A route carries a file path, never a secret: the feed and control's store hold no
//! password. The gateway reads the file on first use and again when it changes (one
//! `stat` per terminal request), so a rotated password needs no restart.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use base64::Engine as _;

/// Read `user:pass` files, by path.
#[derive(Default)]
pub struct TargetCredentials {
    cache: Mutex<HashMap<String, (SystemTime, Arc<str>)>>,
}

impl TargetCredentials {
    /// The `Authorization` value for the basic-auth file at `path` (one line,
    /// `user:pass`, as `ttyd -c` takes it).
    pub fn basic(&self, path: &str) -> io::Result<Arc<str>> {
        let changed = std::fs::metadata(path)?.modified()?;
        if let Some((seen, value)) = self.lock().get(path) {
            if *seen == changed {
                return Ok(Arc::clone(value));
            }
        }
        let raw = std::fs::read_to_string(path)?;
        let line = raw.trim_end_matches(['\n', '\r']);
        if line.contains(['\n', '\r']) || !line.contains(':') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "expected one line user:pass",
            ));
        }
        let value: Arc<str> = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(line)
        )
        .into();
        self.lock()
            .insert(path.to_owned(), (changed, Arc::clone(&value)));
        Ok(value)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (SystemTime, Arc<str>)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::TargetCredentials;

    #[test]
    fn a_basic_file_becomes_an_authorization_value_and_follows_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::write(&path, "user:pass\n").unwrap();
        let c = TargetCredentials::default();
        let p = path.to_str().unwrap();
        assert_eq!(&*c.basic(p).unwrap(), "Basic dXNlcjpwYXNz");
        // A rewrite with another modification time is read again.
        std::fs::write(&path, "user:other").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(&*c.basic(p).unwrap(), "Basic dXNlcjpvdGhlcg==");
    }

    #[test]
    fn missing_and_malformed_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let c = TargetCredentials::default();
        assert!(c.basic(dir.path().join("none").to_str().unwrap()).is_err());
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "no-colon").unwrap();
        assert!(c.basic(bad.to_str().unwrap()).is_err());
        std::fs::write(&bad, "a:b\nc:d").unwrap();
        assert!(c.basic(bad.to_str().unwrap()).is_err());
    }
}

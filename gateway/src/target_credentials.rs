//! The credentials that targets' ttyds expect, read from the files their routes name.
//!
//! A route carries a file path, never a secret: the feed and control's store hold no
//! password. The gateway reads the file on first use and again when it changes (one
//! `stat` per terminal request), so a rotated password needs no restart.
//!
//! The file is sent, as basic auth, to the route's upstream. A target of the
//! configuration reads the file configured for its upstream; any other route (a target
//! an admin registered through the API, choosing both the file and the upstream) only a
//! file that resolves inside `gateway.target_credentials_dir` and never under `/proc`,
//! `/sys` or `/dev` (`policy::target::credential_file_ok`), resolved again at each
//! read, so a link swapped in later leads nowhere.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use base64::Engine as _;
use policy::feed::{TargetCredential, TtydAddress};

/// Read `user:pass` files, by path.
#[derive(Default)]
pub struct TargetCredentials {
    cache: Mutex<HashMap<String, (SystemTime, Arc<str>)>>,
    /// The upstreams and files of the configuration's targets: the operator's own.
    configured: Vec<(TtydAddress, String)>,
    /// `gateway.target_credentials_dir`, resolved at start; `None`: unset.
    dir: Option<String>,
}

impl TargetCredentials {
    /// The files `c` allows: its targets' own, and those in its credentials directory.
    pub fn from_config(c: &config::Config) -> TargetCredentials {
        let configured = c
            .targets
            .iter()
            .filter_map(|t| {
                let upstream = TtydAddress::parse_url(&t.upstream).ok()?;
                match c.target_credential(t) {
                    Ok(Some(TargetCredential::BasicFile { path })) => Some((upstream, path)),
                    _ => None,
                }
            })
            .collect();
        // Validation resolved it already; one that no longer resolves allows nothing.
        let dir = c
            .target_credentials_dir()
            .and_then(|d| std::fs::canonicalize(d).ok())
            .and_then(|d| d.to_str().map(str::to_owned));
        TargetCredentials {
            cache: Mutex::default(),
            configured,
            dir,
        }
    }

    /// The `Authorization` value for the basic-auth file at `path` (one line,
    /// `user:pass`, as `ttyd -c` takes it), to be sent to `upstream`; refused (as
    /// `PermissionDenied`) when the file is not one this route may have read.
    pub fn basic(&self, upstream: Option<&TtydAddress>, path: &str) -> io::Result<Arc<str>> {
        let configured = self
            .configured
            .iter()
            .any(|(u, p)| Some(u) == upstream && p == path);
        let file = if configured {
            PathBuf::from(path)
        } else {
            self.confined(path)?
        };
        self.read(path, &file)
    }

    /// `path` resolved, if it is inside the credentials directory.
    fn confined(&self, path: &str) -> io::Result<PathBuf> {
        let resolved = std::fs::canonicalize(path)?;
        let text = resolved
            .to_str()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a UTF-8 path"))?;
        policy::target::credential_file_ok(text, self.dir.as_deref())
            .map_err(|why| io::Error::new(io::ErrorKind::PermissionDenied, why))?;
        Ok(resolved)
    }

    /// The value of `file` (named `path` in the route), read again when it changed.
    fn read(&self, path: &str, file: &Path) -> io::Result<Arc<str>> {
        let changed = std::fs::metadata(file)?.modified()?;
        if let Some((seen, value)) = self.lock().get(path) {
            if *seen == changed {
                return Ok(Arc::clone(value));
            }
        }
        let raw = std::fs::read_to_string(file)?;
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

    /// Credentials confined to `dir`.
    fn inside(dir: &std::path::Path) -> TargetCredentials {
        TargetCredentials {
            dir: Some(
                std::fs::canonicalize(dir)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned(),
            ),
            ..TargetCredentials::default()
        }
    }

    #[test]
    fn a_basic_file_becomes_an_authorization_value_and_follows_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cred");
        std::fs::write(&path, "user:pass\n").unwrap();
        let c = inside(dir.path());
        let p = path.to_str().unwrap();
        assert_eq!(&*c.basic(None, p).unwrap(), "Basic dXNlcjpwYXNz");
        // A rewrite with another modification time is read again.
        std::fs::write(&path, "user:other").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(&*c.basic(None, p).unwrap(), "Basic dXNlcjpvdGhlcg==");
    }

    #[test]
    fn missing_and_malformed_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let c = inside(dir.path());
        assert!(c
            .basic(None, dir.path().join("none").to_str().unwrap())
            .is_err());
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "no-colon").unwrap();
        assert!(c.basic(None, bad.to_str().unwrap()).is_err());
        std::fs::write(&bad, "a:b\nc:d").unwrap();
        assert!(c.basic(None, bad.to_str().unwrap()).is_err());
    }

    #[test]
    fn only_the_configured_file_or_one_inside_the_directory_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = elsewhere.path().join("cred");
        std::fs::write(&outside, "svc:secret\n").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let upstream = policy::feed::TtydAddress::parse_url("http://127.0.0.1:7681").unwrap();
        let other = policy::feed::TtydAddress::parse_url("http://10.0.0.9:7681").unwrap();
        let outside = outside.to_str().unwrap().to_owned();
        let c = TargetCredentials {
            configured: vec![(upstream.clone(), outside.clone())],
            ..inside(dir.path())
        };
        let denied = |r: std::io::Result<_>| {
            r.map(drop).unwrap_err().kind() == std::io::ErrorKind::PermissionDenied
        };
        // The configured target reads its own file, wherever it is.
        assert!(c.basic(Some(&upstream), &outside).is_ok());
        // Another upstream naming the same file, a link out of the directory, the
        // kernel's files: none is read.
        assert!(denied(c.basic(Some(&other), &outside)));
        assert!(denied(c.basic(None, link.to_str().unwrap())));
        assert!(denied(c.basic(None, "/proc/self/environ")));
        // Without the directory, nothing but the configuration's files.
        let unset = TargetCredentials {
            dir: None,
            ..TargetCredentials::default()
        };
        std::fs::write(dir.path().join("cred"), "u:p").unwrap();
        assert!(denied(
            unset.basic(None, dir.path().join("cred").to_str().unwrap())
        ));
    }
}

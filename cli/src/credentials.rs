//! The sign-ins this user keeps: `$XDG_CONFIG_HOME/termgate/credentials.json` (or
//! `~/.config/termgate/…`), readable by the user alone, one entry per gateway URL.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::failure::Failure;

/// Every kept sign-in, and which gateway commands use when none is named.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Credentials {
    /// The gateway signed in to last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// By gateway URL.
    #[serde(default)]
    pub gateways: BTreeMap<String, Credential>,
}

/// One gateway's sign-in: its own token, as the page's cookie would hold it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Credential {
    /// The sign-in's token (revoked by `termgate logout`).
    pub token: String,
    /// Who it signs in.
    pub sub: String,
    /// When it stops being accepted (Unix seconds).
    pub expires_at: u64,
    /// The CA the gateway's certificate is checked against, when not the system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// Where the file is.
pub fn path() -> Result<PathBuf, Failure> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })
        .ok_or_else(|| Failure::error("neither XDG_CONFIG_HOME nor HOME is set"))?;
    Ok(base.join("termgate").join("credentials.json"))
}

impl Credentials {
    /// Reads the file; none yet is no sign-in.
    pub fn load() -> Result<Credentials, Failure> {
        let path = path()?;
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(Failure::error(format!("{}: {e}", path.display()))),
        };
        serde_json::from_slice(&text).map_err(|e| {
            Failure::error(format!(
                "{}: not a credentials file ({e}); remove it and sign in again",
                path.display()
            ))
        })
    }

    /// The sign-in for `gateway`, or for the current gateway when `None`, with its URL.
    pub fn select(&self, gateway: Option<&str>) -> Result<(String, Credential), Failure> {
        let url = match gateway.or(self.current.as_deref()) {
            Some(url) => url.to_owned(),
            None => {
                return Err(Failure {
                    status: crate::failure::Status::SignIn,
                    message: "not signed in: sign in with termgate login URL".into(),
                })
            }
        };
        match self.gateways.get(&url) {
            Some(c) => Ok((url, c.clone())),
            None => Err(Failure::sign_in(&url, &format!("not signed in to {url}"))),
        }
    }

    /// Writes the file (or removes it when no sign-in is left), readable by the user
    /// alone; the old file is replaced whole, never left half written.
    pub fn save(&self) -> Result<(), Failure> {
        let path = path()?;
        let fail = |e: std::io::Error| Failure::error(format!("{}: {e}", path.display()));
        if self.gateways.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(fail(e)),
                _ => Ok(()),
            };
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail)?;
        let text = serde_json::to_vec_pretty(self).map_err(|e| Failure::error(e.to_string()))?;
        let temp = dir.join(format!(".credentials.{}.tmp", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            // A temporary file left by an earlier crash keeps its mode: set it again.
            .and_then(|mut f| {
                f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
                f.write_all(&text)?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&temp, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written.map_err(fail)
    }
}

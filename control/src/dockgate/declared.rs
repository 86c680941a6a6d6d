//! What dockgate compares creates with: the deployment's configuration file, read by
//! dockgate itself (control can read it, not write it), loaded again when it changes or
//! on `SIGHUP`. A reload that fails keeps what was loaded, and says so.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use policy::dockgate::{bind_source_ok, Declared, Denied, Reason};
use policy::MountKind;

/// The configuration file as it was when last read: what tells a change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
    })
}

#[derive(Debug)]
struct Loaded {
    declared: Arc<Declared>,
    stamp: Option<Stamp>,
    /// The state the configuration names: its store and recordings.
    state: Vec<String>,
    /// The secrets directory, and each secret file with the user of its sessions.
    secrets: (Option<PathBuf>, Vec<(String, String)>),
}

/// The configuration a gate compares creates with, and where it comes from.
#[derive(Debug)]
pub struct DeclaredSource {
    path: PathBuf,
    host: String,
    /// Paths no declared bind may resolve to, under or above: the configuration's own
    /// directory (the state: store, secrets, recordings) and dockgate's sockets.
    protected: Vec<String>,
    loaded: Mutex<Loaded>,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeclaredError {
    /// It does not load.
    #[error("{0}")]
    Config(String),
    /// A secret's file is not one a session may be given.
    #[error("profiles.{profile}.secrets.{name}: {why}")]
    Secret {
        /// The profile.
        profile: String,
        /// The secret's name.
        name: String,
        /// Why.
        why: String,
    },
    /// A declared bind resolves where no mount may go.
    #[error("profiles.{profile}.mounts[{index}]: {denied}")]
    Bind {
        /// The profile.
        profile: String,
        /// The mount's index.
        index: usize,
        /// Why.
        denied: Denied,
    },
}

impl DeclaredSource {
    /// Reads `path` for Docker host `host`; `sockets` is dockgate's own directory.
    /// Fails, naming the key, when it does not load or a declared bind resolves where
    /// no mount may go.
    pub fn open(path: &Path, host: &str, sockets: &Path) -> Result<DeclaredSource, DeclaredError> {
        let abs = |p: &Path| {
            std::fs::canonicalize(p)
                .unwrap_or_else(|_| p.to_path_buf())
                .display()
                .to_string()
        };
        let mut protected = vec![abs(sockets)];
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            protected.push(abs(dir));
        } else {
            protected.push(abs(Path::new(".")));
        }
        let mut source = DeclaredSource {
            path: path.to_path_buf(),
            host: host.to_owned(),
            protected,
            loaded: Mutex::new(Loaded {
                declared: Arc::new(Declared {
                    instance: String::new(),
                    host: host.to_owned(),
                    profiles: Default::default(),
                    shared_volumes: Vec::new(),
                }),
                stamp: None,
                state: Vec::new(),
                secrets: (None, Vec::new()),
            }),
        };
        let loaded = source.read()?;
        source.loaded = Mutex::new(loaded);
        Ok(source)
    }

    /// The deployment's instance, as loaded.
    pub fn instance(&self) -> String {
        self.current().instance.clone()
    }

    fn read(&self) -> Result<Loaded, DeclaredError> {
        let stamp = stamp(&self.path);
        let config = config::load_for(&self.path, config::Part::Dockgate)
            .map_err(|e| DeclaredError::Config(e.to_string()))?;
        let declared = config.declared(&self.host);
        let state: Vec<String> = [
            &config.store.path,
            &config.control.recordings_dir,
            &config.gateway.recordings_dir,
        ]
        .into_iter()
        .map(|p| {
            let p = config.resolve(p);
            std::fs::canonicalize(&p).unwrap_or(p).display().to_string()
        })
        .collect();
        for (name, p) in &config.profiles {
            for (secret, file) in &p.secrets {
                self.secret_ok(config.docker.secrets_dir.as_deref(), file, &p.user, &state)
                    .map_err(|why| DeclaredError::Secret {
                        profile: name.clone(),
                        name: secret.clone(),
                        why,
                    })?;
            }
        }
        for (name, p) in &declared.profiles {
            for (index, m) in p.spec.mounts.iter().enumerate() {
                if m.kind == MountKind::Bind {
                    self.bind_ok_within(&m.source, &state).map_err(|denied| {
                        DeclaredError::Bind {
                            profile: name.clone(),
                            index,
                            denied,
                        }
                    })?;
                }
            }
        }
        let secret_files = config
            .profiles
            .values()
            .flat_map(|p| p.secrets.values().map(|f| (f.clone(), p.user.clone())))
            .collect();
        Ok(Loaded {
            declared: Arc::new(declared),
            stamp,
            state,
            secrets: (config.docker.secrets_dir.clone(), secret_files),
        })
    }

    /// Whether a secret's file may be given to sessions whose user is `user`
    /// (`uid:gid`): it resolves to a regular file under the secrets directory, which
    /// itself may be mounted from, and that user can read it. Only its metadata is read.
    fn secret_ok(
        &self,
        dir: Option<&Path>,
        file: &str,
        user: &str,
        state: &[String],
    ) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let dir = dir.ok_or("docker.secrets_dir is not set")?;
        let dir = std::fs::canonicalize(dir)
            .map_err(|e| format!("docker.secrets_dir {}: {e}", dir.display()))?;
        self.bind_ok_within(&dir.display().to_string(), state)
            .map_err(|d| format!("docker.secrets_dir: {}", d.message))?;
        let resolved = std::fs::canonicalize(file).map_err(|e| format!("{file:?}: {e}"))?;
        if !resolved.starts_with(&dir) || resolved == dir {
            return Err(format!(
                "{file:?} resolves to {}, outside docker.secrets_dir ({})",
                resolved.display(),
                dir.display()
            ));
        }
        let m = std::fs::metadata(&resolved).map_err(|e| format!("{file:?}: {e}"))?;
        if !m.is_file() {
            return Err(format!("{file:?} is not a regular file"));
        }
        let (uid, gid) = user
            .split_once(':')
            .and_then(|(u, g)| Some((u.parse::<u32>().ok()?, g.parse::<u32>().ok()?)))
            .ok_or_else(|| format!("the profile's user {user:?} is not uid:gid"))?;
        let mode = m.mode();
        let readable = mode & 0o004 != 0
            || (m.uid() == uid && mode & 0o400 != 0)
            || (m.gid() == gid && mode & 0o040 != 0);
        if !readable {
            return Err(format!(
                "{file:?} (mode {:o}, owner {}:{}) cannot be read by the sessions' user {user}",
                mode & 0o7777,
                m.uid(),
                m.gid()
            ));
        }
        Ok(())
    }

    /// Whether a declared bind source, resolved on this host now, may be mounted.
    pub fn bind_ok(&self, source: &str) -> Result<(), Denied> {
        let (state, (dir, secrets)) = {
            let l = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
            (l.state.clone(), l.secrets.clone())
        };
        self.bind_ok_within(source, &state)?;
        // A secret's file is judged again as at load: still under the directory, still
        // a readable regular file.
        for (file, user) in secrets.iter().filter(|(f, _)| f == source) {
            self.secret_ok(dir.as_deref(), file, user, &state)
                .map_err(|why| Denied {
                    reason: Reason::NotDeclared,
                    message: format!("secret {file:?}: {why}"),
                })?;
        }
        Ok(())
    }

    /// Whether a registered secret's file, as a create names it, may be mounted for
    /// sessions whose user is `user`: its path is clean and under `docker.secrets_dir`
    /// as written, the path itself is a regular file (`lstat`: not a symbolic link),
    /// and it passes what a profile's secret passes (resolving inside the directory,
    /// readable by that user). Only metadata is read, never the file.
    pub fn registered_secret_ok(&self, file: &str, user: Option<&str>) -> Result<(), Denied> {
        let refuse = |why: String| Denied {
            reason: Reason::NotDeclared,
            message: format!("secret {file:?}: {why}"),
        };
        let (state, dir) = {
            let l = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
            (l.state.clone(), l.secrets.0.clone())
        };
        let dir = dir.ok_or_else(|| refuse("docker.secrets_dir is not set".into()))?;
        let below = policy::sandbox::normalise(&dir.display().to_string())
            .is_some_and(|d| file.starts_with(&format!("{}/", d.trim_end_matches('/'))));
        if policy::sandbox::normalise(file).as_deref() != Some(file) || !below {
            return Err(refuse(format!(
                "not a clean path under docker.secrets_dir ({})",
                dir.display()
            )));
        }
        let m = std::fs::symlink_metadata(file).map_err(|e| refuse(e.to_string()))?;
        if !m.file_type().is_file() {
            return Err(refuse(if m.file_type().is_symlink() {
                "a symbolic link, not the file itself".into()
            } else {
                "not a regular file".into()
            }));
        }
        self.secret_ok(Some(&dir), file, user.unwrap_or_default(), &state)
            .map_err(refuse)
    }

    fn bind_ok_within(&self, source: &str, state: &[String]) -> Result<(), Denied> {
        let resolved = std::fs::canonicalize(source).map_err(|e| Denied {
            reason: Reason::NotDeclared,
            message: format!("bind source {source:?} cannot be resolved: {e}"),
        })?;
        let protected: Vec<String> = self.protected.iter().chain(state).cloned().collect();
        bind_source_ok(&resolved.display().to_string(), &protected)
    }

    /// Reads the file again; on failure keeps what was loaded.
    pub fn reload(&self) {
        match self.read() {
            Ok(l) => {
                let profiles = l.declared.profiles.len();
                *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) = l;
                tracing::info!(config = %self.path.display(), profiles, "dockgate: configuration loaded");
            }
            Err(e) => {
                // Keep the stamp moving so a broken file is reported once, not per create.
                if let Ok(mut l) = self.loaded.lock() {
                    l.stamp = stamp(&self.path);
                }
                tracing::error!(config = %self.path.display(), "dockgate: the configuration does not load; keeping the one loaded before: {e}");
            }
        }
    }

    /// What creates are compared with now: the file is read again first if it changed.
    pub fn current(&self) -> Arc<Declared> {
        let changed = {
            let l = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
            l.stamp != stamp(&self.path)
        };
        if changed {
            self.reload();
        }
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .declared
            .clone()
    }
}

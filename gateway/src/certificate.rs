//! The TLS listener's certificate, picked up again when its files change.
//!
//! The listener asks [`Certificate`] for the certificate at each handshake, so a renewed
//! one (certbot replacing the files, or an operator's `SIGHUP`) is used by every new
//! handshake from then on, while the connections open on the old one stay open. A
//! renewal that cannot be read (a half-written file, a key that does not match the
//! certificate) keeps the certificate in use and says why in the log.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often the files are looked at for a renewal.
const POLL: Duration = Duration::from_secs(2);

/// The certificate and key files of the TLS listener, and what was loaded from them.
#[derive(Debug)]
pub struct Certificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Loaded>,
}

/// A certificate as loaded, and the files' state it was loaded from.
#[derive(Debug, Clone)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: Stamp,
}

/// What tells a renewed file from the one loaded: its modification time and length.
type Stamp = [(Option<SystemTime>, u64); 2];

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read or held nothing usable.
    #[error("{key} {path}: {why}")]
    File {
        /// The config key that names the file.
        key: &'static str,
        /// The file.
        path: String,
        /// What was wrong.
        why: String,
    },
    /// The key does not belong to the certificate, or is of a kind TLS cannot use.
    #[error("gateway.tls_key_file: {0}")]
    Key(String),
}

impl Certificate {
    /// Loads the certificate chain and key; an error names the config key at fault.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<Self>, LoadError> {
        let loaded = load(cert_file, key_file)?;
        Ok(Arc::new(Certificate {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            current: RwLock::new(loaded),
        }))
    }

    /// Loads the files again if they changed since they were last loaded (`force`: even
    /// if they look unchanged). Whether a new certificate is now in use.
    pub fn reload(&self, force: bool) -> Result<bool, LoadError> {
        let stamp = stamp(&self.cert_file, &self.key_file);
        if !force && stamp == self.loaded().stamp {
            return Ok(false);
        }
        let loaded = match load(&self.cert_file, &self.key_file) {
            Ok(loaded) => loaded,
            Err(e) => {
                // Not tried again until the files change once more (or a SIGHUP).
                self.write().stamp = stamp;
                return Err(e);
            }
        };
        let changed = loaded.key.cert != self.loaded().key.cert;
        *self.write() = loaded;
        Ok(changed)
    }

    fn loaded(&self) -> Loaded {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Loaded> {
        self.current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .key,
        ))
    }
}

fn stamp(cert_file: &Path, key_file: &Path) -> Stamp {
    [cert_file, key_file].map(|p| match std::fs::metadata(p) {
        Ok(m) => (m.modified().ok(), m.len()),
        Err(_) => (None, 0),
    })
}

fn load(cert_file: &Path, key_file: &Path) -> Result<Loaded, LoadError> {
    // Taken before reading: a file changed while it is read is read again next time.
    let stamp = stamp(cert_file, key_file);
    let file_error = |key, path: &Path, why: String| LoadError::File {
        key,
        path: path.display().to_string(),
        why,
    };
    let cert_path = cert_file.to_string_lossy();
    let key_path = key_file.to_string_lossy();
    for (key, path) in [
        ("gateway.tls_cert_file", cert_file),
        ("gateway.tls_key_file", key_file),
    ] {
        std::fs::metadata(path).map_err(|e| file_error(key, path, e.to_string()))?;
    }
    let (certs, key) = match pingora::tls::load_certs_and_key_files(&cert_path, &key_path) {
        Ok(Some(pair)) => pair,
        Ok(None) => {
            return Err(file_error(
                "gateway.tls_key_file",
                key_file,
                "no private key in the file".into(),
            ))
        }
        Err(e) => {
            return Err(file_error(
                "gateway.tls_cert_file",
                cert_file,
                e.to_string(),
            ))
        }
    };
    if certs.is_empty() {
        return Err(file_error(
            "gateway.tls_cert_file",
            cert_file,
            "no certificate in the file".into(),
        ));
    }
    let provider = rustls::crypto::ring::default_provider();
    let key =
        CertifiedKey::from_der(certs, key, &provider).map_err(|e| LoadError::Key(e.to_string()))?;
    Ok(Loaded {
        key: Arc::new(key),
        stamp,
    })
}

/// Looks at the files every [`POLL`] and at each `SIGHUP`.
pub struct Renewals(pub Arc<Certificate>);

#[async_trait]
impl BackgroundService for Renewals {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "SIGHUP cannot reload the certificate; file changes still do");
                None
            }
        };
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let force = tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => false,
                Some(()) = async {
                    match hangup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                } => true,
            };
            match self.0.reload(force) {
                Ok(true) => tracing::info!(
                    cert = %self.0.cert_file.display(),
                    "a renewed TLS certificate is in use for new connections"
                ),
                Ok(false) if force => tracing::info!(
                    cert = %self.0.cert_file.display(),
                    "SIGHUP: the TLS certificate is unchanged"
                ),
                Ok(false) => {}
                Err(e) => tracing::error!(
                    error = %e,
                    "the renewed TLS certificate could not be loaded; the previous one stays in use"
                ),
            }
        }
    }
}

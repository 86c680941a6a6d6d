//! The certificates termgate's parts present to each other (docs/hosts.md "More than one
//! host"): loading them, picking up a renewal without a restart, and reading who a
//! peer's certificate says it is.
//!
//! Every part's certificate is issued by the one CA the deployment names
//! (`pki.ca_file`) and carries its identity as a URI SAN,
//! `spiffe://termgate/<role>/<name>` (`termgate-control certs issue`). The role chooses
//! what the peer may do: dockgate gives a `control` certificate the control policy and
//! a `pool` certificate the attach policy; a pool's TLS front admits only `gateway`
//! certificates. A certificate from another CA, or none, fails the handshake.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SignatureScheme};

/// The URI SAN prefix of a termgate identity.
pub const IDENTITY_PREFIX: &str = "spiffe://termgate/";

/// What a part of termgate is, as its certificate says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerRole {
    /// The control service: dockgate's control policy; serves the API.
    Control,
    /// A gateway: opens terminals at a host's pool.
    Gateway,
    /// A ttyd pool: dockgate's attach policy.
    Pool,
    /// A host's dockgate (its server certificate).
    Dockgate,
}

impl PeerRole {
    /// Every role, in the order `--role` lists them.
    pub const ALL: [PeerRole; 4] = [
        PeerRole::Control,
        PeerRole::Gateway,
        PeerRole::Pool,
        PeerRole::Dockgate,
    ];

    /// Its spelling in an identity and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            PeerRole::Control => "control",
            PeerRole::Gateway => "gateway",
            PeerRole::Pool => "pool",
            PeerRole::Dockgate => "dockgate",
        }
    }

    /// The role spelt `s`.
    pub fn parse(s: &str) -> Option<PeerRole> {
        PeerRole::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for PeerRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a certificate says its holder is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerId {
    /// What it may do.
    pub role: PeerRole,
    /// Its name (`--name` when issued), for logs.
    pub name: String,
}

impl PeerId {
    /// The URI SAN that carries this identity.
    pub fn uri(&self) -> String {
        format!("{IDENTITY_PREFIX}{}/{}", self.role, self.name)
    }

    /// The identity in a URI SAN, if it is one of termgate's: a known role and a plain
    /// name, nothing else.
    pub fn from_uri(uri: &str) -> Option<PeerId> {
        let (role, name) = uri.strip_prefix(IDENTITY_PREFIX)?.split_once('/')?;
        let plain = !name.is_empty()
            && name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        Some(PeerId {
            role: PeerRole::parse(role)?,
            name: plain.then(|| name.to_owned())?,
        })
    }

    /// The identity a (verified) certificate carries: exactly one termgate URI SAN, or
    /// none. Two would leave the role to whoever reads first, so they name none.
    pub fn of_certificate(der: &[u8]) -> Option<PeerId> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let san = cert.subject_alternative_name().ok()??;
        let mut ids = san.value.general_names.iter().filter_map(|n| match n {
            GeneralName::URI(u) if u.starts_with(IDENTITY_PREFIX) => Some(PeerId::from_uri(u)),
            _ => None,
        });
        match (ids.next(), ids.next()) {
            (Some(id), None) => id,
            _ => None,
        }
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.role, self.name)
    }
}

/// Why a certificate, key or CA could not be loaded; names the key at fault.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{key} {path}: {why}")]
pub struct PkiError {
    /// The config key (or flag) that names the file.
    pub key: String,
    /// The file.
    pub path: String,
    /// What was wrong.
    pub why: String,
}

impl PkiError {
    fn new(key: &str, path: &Path, why: impl fmt::Display) -> PkiError {
        PkiError {
            key: key.to_owned(),
            path: path.display().to_string(),
            why: why.to_string(),
        }
    }
}

/// The CA certificates in `file` (PEM), as the roots peers are checked against.
pub fn load_roots(file: &Path, key: &str) -> Result<Arc<RootCertStore>, PkiError> {
    let pem = std::fs::read(file).map_err(|e| PkiError::new(key, file, e))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| PkiError::new(key, file, e))?;
        roots
            .add(cert)
            .map_err(|e| PkiError::new(key, file, format!("not a CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(PkiError::new(key, file, "no certificate in the file"));
    }
    Ok(Arc::new(roots))
}

/// A certificate and its key, loaded from two files and picked up again when they
/// change: a renewal is used by every new handshake from then on, while connections
/// made on the old one stay open. A renewal that cannot be read (half written, a key
/// that does not match) keeps the one in use, and [`Certificate::reload`] says why.
#[derive(Debug)]
pub struct Certificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    keys: [String; 2],
    current: RwLock<Loaded>,
}

/// A certificate as loaded, and the files' state it was loaded from.
#[derive(Debug, Clone)]
struct Loaded {
    key: Arc<CertifiedKey>,
    /// The private key of `key`, for [`Certificate::current_der`].
    key_der: Arc<PrivateKeyDer<'static>>,
    stamp: Stamp,
}

/// What tells a renewed file from the one loaded: its modification time and length.
type Stamp = [(Option<SystemTime>, u64); 2];

impl Certificate {
    /// Loads the chain in `cert_file` and the key in `key_file`; an error names
    /// `cert_key` or `key_key` (the config keys or flags that name the files).
    pub fn load(
        cert_file: &Path,
        key_file: &Path,
        cert_key: &str,
        key_key: &str,
    ) -> Result<Arc<Certificate>, PkiError> {
        let keys = [cert_key.to_owned(), key_key.to_owned()];
        let loaded = load(cert_file, key_file, &keys)?;
        Ok(Arc::new(Certificate {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            keys,
            current: RwLock::new(loaded),
        }))
    }

    /// The certificate file, for logs.
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }

    /// Loads the files again if they changed since they were last loaded (`force`: even
    /// if they look unchanged). Whether another certificate is now in use.
    pub fn reload(&self, force: bool) -> Result<bool, PkiError> {
        let stamp = stamp(&self.cert_file, &self.key_file);
        if !force && stamp == self.loaded().stamp {
            return Ok(false);
        }
        let loaded = match load(&self.cert_file, &self.key_file, &self.keys) {
            Ok(loaded) => loaded,
            Err(e) => {
                // Not tried again until the files change once more (or a forced reload).
                self.write().stamp = stamp;
                return Err(e);
            }
        };
        let changed = loaded.key.cert != self.loaded().key.cert;
        *self.write() = loaded;
        Ok(changed)
    }

    /// The certificate and key in use.
    pub fn current(&self) -> Arc<CertifiedKey> {
        Arc::clone(&self.loaded().key)
    }

    /// The certificate in use with its private key as DER, for TLS stacks that take a
    /// chain and a key rather than a resolver (Pingora's upstream peers). The two always
    /// belong together.
    pub fn current_der(&self) -> (Arc<CertifiedKey>, Arc<PrivateKeyDer<'static>>) {
        let loaded = self.loaded();
        (loaded.key, loaded.key_der)
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
        Some(self.current())
    }
}

impl ResolvesClientCert for Certificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn stamp(cert_file: &Path, key_file: &Path) -> Stamp {
    [cert_file, key_file].map(|p| match std::fs::metadata(p) {
        Ok(m) => (m.modified().ok(), m.len()),
        Err(_) => (None, 0),
    })
}

fn load(cert_file: &Path, key_file: &Path, keys: &[String; 2]) -> Result<Loaded, PkiError> {
    // Taken before reading: a file changed while it is read is read again next time.
    let stamp = stamp(cert_file, key_file);
    let cert_pem = std::fs::read(cert_file).map_err(|e| PkiError::new(&keys[0], cert_file, e))?;
    let key_pem = std::fs::read(key_file).map_err(|e| PkiError::new(&keys[1], key_file, e))?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PkiError::new(&keys[0], cert_file, e))?;
    if certs.is_empty() {
        return Err(PkiError::new(
            &keys[0],
            cert_file,
            "no certificate in the file",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        PkiError::new(
            &keys[1],
            key_file,
            format!("no usable private key in the file: {e}"),
        )
    })?;
    let key_der = Arc::new(key.clone_key());
    let provider = rustls::crypto::ring::default_provider();
    let key = CertifiedKey::from_der(certs, key, &provider)
        .map_err(|e| PkiError::new(&keys[1], key_file, e))?;
    Ok(Loaded {
        key: Arc::new(key),
        key_der,
        stamp,
    })
}

/// A server's TLS settings that require a client certificate issued by `client_roots`
/// (mutual TLS), presenting `cert`.
pub fn mutual_server(
    cert: Arc<Certificate>,
    client_roots: Arc<RootCertStore>,
) -> Result<ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(client_roots, provider.clone())
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    Ok(ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert))
}

/// A server's TLS settings without client certificates (control's API: its callers
/// present the service token), presenting `cert`.
pub fn plain_server(cert: Arc<Certificate>) -> Result<ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(cert))
}

/// A client's TLS settings: servers checked against `roots`, `cert` presented when
/// given.
pub fn client(
    roots: Arc<RootCertStore>,
    cert: Option<Arc<Certificate>>,
) -> Result<ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    Ok(match cert {
        Some(c) => builder.with_client_cert_resolver(c),
        None => builder.with_no_client_auth(),
    })
}

/// TLS settings that trust no server: those of a client that dials plain HTTP only,
/// where its HTTP stack asks for some.
pub fn no_roots() -> ClientConfig {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth()
}

/// The identity in the certificate a peer presented on a verified connection.
pub fn peer_of(conn: &rustls::CommonState) -> Option<PeerId> {
    PeerId::of_certificate(conn.peer_certificates()?.first()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_round_trip_and_odd_spellings_name_none() {
        let id = PeerId {
            role: PeerRole::Control,
            name: "control-1".into(),
        };
        assert_eq!(id.uri(), "spiffe://termgate/control/control-1");
        assert_eq!(PeerId::from_uri(&id.uri()), Some(id));
        for bad in [
            "spiffe://termgate/root/x",
            "spiffe://termgate/control/",
            "spiffe://termgate/control",
            "spiffe://termgate/control/a/b",
            "spiffe://termgate/Control/x",
            "spiffe://other/control/x",
            "spiffe://termgate//control/x",
            "spiffe://termgate/control/x y",
            "SPIFFE://termgate/control/x",
        ] {
            assert_eq!(PeerId::from_uri(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_role_parses_back() {
        for r in PeerRole::ALL {
            assert_eq!(PeerRole::parse(r.as_str()), Some(r));
        }
        assert_eq!(PeerRole::parse("admin"), None);
    }
}

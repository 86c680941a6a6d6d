//! TLS for the harness: self-signed certificates made with `openssl`, and a client that
//! trusts exactly one of them (a pin), the way a test knows which certificate the
//! gateway must present.

use std::fmt;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};

/// A certificate and key pair in PEM files, for 127.0.0.1.
#[derive(Debug, Clone)]
pub struct SelfSigned {
    /// The certificate file.
    pub cert: PathBuf,
    /// The private key file.
    pub key: PathBuf,
}

impl SelfSigned {
    /// Makes a new EC certificate for `127.0.0.1` (common name `name`) in `dir`.
    pub fn generate(dir: &Path, name: &str) -> SelfSigned {
        let pair = SelfSigned {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        pair.write(name);
        pair
    }

    /// Replaces both files with a new certificate and key (common name `name`), each
    /// renamed into place as a renewal tool does.
    pub fn renew(&self, name: &str) {
        let dir = self.cert.parent().expect("certificate directory");
        let fresh = SelfSigned::generate(dir, &format!("{name}.new"));
        std::fs::rename(&fresh.key, &self.key).expect("renew key");
        std::fs::rename(&fresh.cert, &self.cert).expect("renew certificate");
    }

    fn write(&self, name: &str) {
        let o = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "1",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&self.key)
            .arg("-out")
            .arg(&self.cert)
            .output()
            .expect("openssl");
        assert!(
            o.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// The certificate as DER.
    pub fn der(&self) -> Vec<u8> {
        CertificateDer::from_pem_file(&self.cert)
            .expect("a PEM certificate")
            .as_ref()
            .to_vec()
    }

    /// A client that trusts this certificate alone.
    pub fn pin(&self) -> Pin {
        Pin::of(self.der())
    }
}

/// A TLS client configuration that accepts exactly one certificate.
#[derive(Clone)]
pub struct Pin {
    der: Arc<Vec<u8>>,
    config: Arc<ClientConfig>,
}

impl fmt::Debug for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pin({} bytes)", self.der.len())
    }
}

impl PartialEq for Pin {
    fn eq(&self, other: &Pin) -> bool {
        self.der == other.der
    }
}

impl Eq for Pin {}

impl Pin {
    /// Trusts the certificate `der`.
    pub fn of(der: Vec<u8>) -> Pin {
        let der = Arc::new(der);
        let verifier = Verifier {
            pinned: Some(Arc::clone(&der)),
            seen: Mutex::new(None),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        };
        Pin {
            config: client_config(Arc::new(verifier)),
            der,
        }
    }

    /// Accepts whatever certificate the server presents (raw requests of a TLS run).
    pub fn any() -> Pin {
        let verifier = Verifier {
            pinned: None,
            seen: Mutex::new(None),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
        };
        Pin {
            config: client_config(Arc::new(verifier)),
            der: Arc::new(Vec::new()),
        }
    }

    /// Connects to `addr` and makes the TLS handshake (within `deadline`).
    pub fn connect(
        &self,
        addr: SocketAddr,
        deadline: Duration,
    ) -> std::io::Result<rustls::StreamOwned<ClientConnection, TcpStream>> {
        handshake(&self.config, addr, deadline)
    }
}

/// The certificate the server at `addr` presents now (DER), whatever it is.
pub fn presented(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
    let verifier = Arc::new(Verifier {
        pinned: None,
        seen: Mutex::new(None),
        provider: Arc::new(rustls::crypto::ring::default_provider()),
    });
    let config = client_config(Arc::clone(&verifier) as _);
    handshake(&config, addr, Duration::from_secs(5))?;
    let seen = verifier.seen.lock().expect("seen").take();
    seen.ok_or_else(|| std::io::Error::other("no certificate presented"))
}

fn client_config(verifier: Arc<dyn ServerCertVerifier>) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Arc::new(config)
}

fn handshake(
    config: &Arc<ClientConfig>,
    addr: SocketAddr,
    deadline: Duration,
) -> std::io::Result<rustls::StreamOwned<ClientConnection, TcpStream>> {
    let name = ServerName::IpAddress(addr.ip().into());
    let conn = ClientConnection::new(Arc::clone(config), name).map_err(std::io::Error::other)?;
    let sock = TcpStream::connect_timeout(&addr, deadline)?;
    sock.set_read_timeout(Some(deadline))?;
    sock.set_nodelay(true)?;
    let mut stream = rustls::StreamOwned::new(conn, sock);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// Accepts the pinned certificate only (or, without a pin, any, remembering it).
#[derive(Debug)]
struct Verifier {
    pinned: Option<Arc<Vec<u8>>>,
    seen: Mutex<Option<Vec<u8>>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.seen.lock().expect("seen") = Some(end_entity.as_ref().to_vec());
        match &self.pinned {
            Some(pin) if pin.as_slice() != end_entity.as_ref() => {
                Err(rustls::Error::General("not the pinned certificate".into()))
            }
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

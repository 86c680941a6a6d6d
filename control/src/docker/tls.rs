//! Control's side of a Docker host reached through its dockgate over mutual TLS
//! (`endpoint = "tls://address:port"`, docs/hosts.md "More than one host").
//!
//! The server must present a certificate issued by the deployment's CA
//! (`pki.ca_file`) for the endpoint's address, and nothing else is trusted: not the
//! system's roots, which bollard's own TLS client adds. Control presents its own
//! certificate (`control.tls_cert_file`), whose role dockgate reads to give it the
//! control policy.
//!
//! Renewal needs no restart: every call is a new connection (as bollard's clients
//! do) with a full handshake (no session resumption), and each handshake first checks
//! whether the certificate's files changed (their modification time and length),
//! loading them again when they did. A renewal
//! that cannot be loaded leaves the certificate in use, logged once.

use std::path::Path;
use std::sync::Arc;

use bollard::{BollardRequest, API_DEFAULT_VERSION};
use config::pki::{self, Certificate};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

use super::DockerError;

/// The scheme of a dockgate endpoint.
pub const SCHEME: &str = "tls://";

/// A client for the dockgate at `endpoint` (`tls://address:port`): the server checked
/// against the CA in `ca` and the endpoint's address, `cert` and `key` presented.
/// `timeout_secs` bounds each call, as bollard's own clients do.
pub(super) fn connect(
    endpoint: &str,
    (ca, cert, key): (&Path, &Path, &Path),
    timeout_secs: u64,
) -> Result<bollard::Docker, DockerError> {
    const OP: &str = "connect";
    let fail = |message: String| DockerError::Other { op: OP, message };
    let address = endpoint
        .strip_prefix(SCHEME)
        .filter(|a| !a.is_empty() && !a.contains('/'))
        .ok_or_else(|| fail(format!("{endpoint:?} is not tls://address:port")))?;
    let roots = pki::load_roots(ca, "pki.ca_file").map_err(|e| fail(e.to_string()))?;
    let certificate = Certificate::load(cert, key, "control.tls_cert_file", "control.tls_key_file")
        .map_err(|e| fail(e.to_string()))?;
    let mut tls = pki::client(roots, None).map_err(|e| fail(e.to_string()))?;
    tls.client_auth_cert_resolver = Arc::new(Renewing(certificate));
    // A resumed session presents no certificate: the server would go on seeing the
    // one of the first handshake, renewed or not.
    tls.resumption = rustls::client::Resumption::disabled();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    // No idle connections kept: each call dials again, with the certificate in use then.
    let client = Arc::new(
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(https),
    );
    bollard::Docker::connect_with_custom_transport(
        move |req: BollardRequest| {
            let client = Arc::clone(&client);
            async move {
                client
                    .request(req)
                    .await
                    .map_err(bollard::errors::Error::from)
            }
        },
        Some(format!("https://{address}")),
        timeout_secs,
        API_DEFAULT_VERSION,
    )
    .map_err(|e| fail(e.to_string()))
}

/// Control's certificate, loaded again at a handshake when its files have changed.
#[derive(Debug)]
struct Renewing(Arc<Certificate>);

impl ResolvesClientCert for Renewing {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        match self.0.reload(false) {
            Ok(true) => {
                tracing::info!(certificate = %self.0.cert_file().display(), "control's renewed TLS certificate is in use for new connections to Docker hosts")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "control's renewed TLS certificate cannot be used; the one in use stays")
            }
        }
        self.0.resolve(root_hint_subjects, sigschemes)
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Mutex;
    use std::time::Duration;

    use config::pki::{PeerId, PeerRole};

    use super::*;

    use crate::certs::{self, Leaf};
    use crate::docker::Docker;

    type Presented = Arc<Mutex<Vec<Vec<u8>>>>;

    /// The certificate in a PEM file, as DER.
    fn der(path: &Path) -> Vec<u8> {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_file(path)
            .unwrap()
            .to_vec()
    }

    fn issue(dir: &Path, role: PeerRole, name: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
        let leaf = Leaf {
            role,
            name: name.into(),
            sans: sans.iter().map(|s| (*s).to_owned()).collect(),
            days: 1,
        };
        certs::issue(dir, &leaf).expect("issue")
    }

    /// A server on 127.0.0.1 with `cert` that requires a client certificate of the CA
    /// in `ca` and answers every request `OK`; the certificates clients presented.
    async fn server((cert, key): (PathBuf, PathBuf), ca: &Path) -> (String, Presented) {
        let certificate = Certificate::load(&cert, &key, "cert", "key").expect("server cert");
        let roots = pki::load_roots(ca, "ca").expect("CA");
        let tls = pki::mutual_server(certificate, roots).expect("server settings");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("tls://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let presented = tls.get_ref().1.peer_certificates().unwrap_or_default();
                record.lock().unwrap().push(presented[0].to_vec());
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"OK")),
                    ))
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service),
                );
            }
        });
        (endpoint, seen)
    }

    #[tokio::test]
    async fn a_dockgate_is_dialled_with_controls_certificate_and_checked_against_the_ca_and_address(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let ca = certs::init(dir.path(), 1).unwrap();
        let other_ca = certs::init(other.path(), 1).unwrap();
        let (cert, key) = issue(dir.path(), PeerRole::Control, "control", &[]);
        let files = (ca.as_path(), cert.as_path(), key.as_path());
        let client = |endpoint: &str| {
            Docker::unnegotiated(Some(endpoint), Some(files), Duration::from_secs(5))
                .expect("a client")
        };

        let good = issue(dir.path(), PeerRole::Dockgate, "far", &["127.0.0.1"]);
        let (endpoint, seen) = server(good, &ca).await;
        let dialler = client(&endpoint);
        dialler.ping().await.expect("dockgate answers");
        let first = der(&cert);
        let control = PeerId {
            role: PeerRole::Control,
            name: "control".into(),
        };
        assert_eq!(PeerId::of_certificate(&first), Some(control));
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            std::slice::from_ref(&first)
        );

        // A renewal is presented at the next call, by the same client.
        issue(dir.path(), PeerRole::Control, "control", &[]);
        let renewed = der(&cert);
        assert_ne!(renewed, first, "renewed");
        dialler
            .ping()
            .await
            .expect("the renewed certificate is accepted");
        assert_eq!(seen.lock().unwrap().as_slice(), [first, renewed]);

        // A server certificate for another address, or from another CA: refused.
        let elsewhere = issue(dir.path(), PeerRole::Dockgate, "elsewhere", &["10.9.9.9"]);
        let (endpoint, seen) = server(elsewhere, &ca).await;
        let e = client(&endpoint).ping().await.unwrap_err();
        assert!(matches!(e, DockerError::Unavailable(_)), "{e:?}");
        assert!(seen.lock().unwrap().is_empty());
        let foreign = issue(other.path(), PeerRole::Dockgate, "far", &["127.0.0.1"]);
        let (endpoint, _) = server(foreign, &other_ca).await;
        let e = client(&endpoint).ping().await.unwrap_err();
        assert!(matches!(e, DockerError::Unavailable(_)), "{e:?}");

        // Without control's files a tls:// host cannot be used at all.
        let e = Docker::unnegotiated(Some(&endpoint), None, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(e, DockerError::Other { op: "connect", .. }),
            "{e:?}"
        );
    }
}

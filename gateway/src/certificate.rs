//! The gateway's certificates, picked up again when their files change: the TLS
//! listener's (`gateway.tls_cert_file`) and the one it presents to the ttyd pools of
//! other hosts (`gateway.client_cert_file`, role `gateway`); and the CA it checks an
//! `https://` control against ([`ControlEndpoint`]).
//!
//! Both are [`config::pki::Certificate`]s, asked for at each handshake, so a renewed one
//! (certbot or `termgate-control certs issue` replacing the files, or an operator's
//! `SIGHUP`) is used by every new handshake from then on, while the connections open on
//! the old one stay open. A renewal that cannot be read (a half-written file, a key that
//! does not match the certificate) keeps the certificate in use and says why in the log.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use config::pki;
use pingora::prelude::HttpPeer;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora::utils::tls::{CertKey, WrappedX509};
use pingora::{Error, ErrorType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

pub use config::pki::Certificate;

/// How often the files are looked at for a renewal.
const POLL: Duration = Duration::from_secs(2);

/// A certificate that [`Renewals`] looks after, and what the log calls it.
pub struct Renewable {
    /// What the certificate is, in log lines ("TLS certificate": the listener's).
    pub what: &'static str,
    /// The certificate.
    pub certificate: Arc<Certificate>,
}

/// Looks at the files of each certificate every [`POLL`], and at each `SIGHUP` (which
/// loads them again even if they look unchanged).
pub struct Renewals(pub Vec<Renewable>);

#[async_trait]
impl BackgroundService for Renewals {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "SIGHUP cannot reload certificates; file changes still do");
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
            for r in &self.0 {
                r.reload(force);
            }
        }
    }
}

impl Renewable {
    /// Loads the files again if they changed (`force`: even if not), and logs what
    /// came of it.
    fn reload(&self, force: bool) {
        let cert = self.certificate.cert_file().display();
        match self.certificate.reload(force) {
            Ok(true) => tracing::info!(
                %cert,
                "a renewed {} is in use for new connections",
                self.what
            ),
            Ok(false) if force => {
                tracing::info!(%cert, "SIGHUP: the {} is unchanged", self.what)
            }
            Ok(false) => {}
            Err(e) => tracing::error!(
                error = %e,
                "the renewed {} could not be loaded; the previous one stays in use",
                self.what
            ),
        }
    }
}

/// What the gateway presents to the `tls://` ttyd pools of other hosts and checks them
/// against: its certificate (`gateway.client_cert_file`, role `gateway`) and the
/// deployment's CA (`pki.ca_file`), in the two forms the two paths to a ttyd take them —
/// rustls settings for the terminal's own tunnel, and a Pingora peer for the page and
/// `/token`.
pub struct PoolTls {
    certificate: Arc<Certificate>,
    /// The tunnel's settings: they ask `certificate` at each handshake.
    client: Arc<rustls::ClientConfig>,
    /// The CA, as Pingora's peers take it.
    ca: Arc<[WrappedX509]>,
    /// Pingora's copy of the certificate in use, and the one it was made from: made
    /// again once a renewal is in use (Pingora takes a chain and key, not a resolver).
    pingora: RwLock<(Arc<CertifiedKey>, Arc<CertKey>)>,
}

/// The config keys of the gateway's client certificate.
const CERT_KEY: &str = "gateway.client_cert_file";
const KEY_KEY: &str = "gateway.client_key_file";

impl PoolTls {
    /// Loads the gateway's client certificate and the CA, when
    /// `gateway.client_cert_file` is set; an error names the key at fault.
    pub fn from_config(config: &config::Config) -> anyhow::Result<Option<Arc<PoolTls>>> {
        let g = &config.gateway;
        let (cert, key) = match (&g.client_cert_file, &g.client_key_file) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (config.resolve(cert), config.resolve(key)),
            (Some(_), None) => anyhow::bail!("{KEY_KEY}: required with {CERT_KEY}"),
            (None, Some(_)) => anyhow::bail!("{CERT_KEY}: required with {KEY_KEY}"),
        };
        let certificate = Certificate::load(&cert, &key, CERT_KEY, KEY_KEY)?;
        let (roots, ca) = load_ca(
            config,
            &format!("required with {CERT_KEY} (the pools' certificates are checked against it)"),
        )?;
        let mut client = pki::client(roots, Some(Arc::clone(&certificate)))
            .map_err(|e| anyhow::anyhow!("{CERT_KEY}: {e}"))?;
        // What Pingora's peers offer too: a front that cannot speak HTTP/1.1 fails both
        // paths alike.
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        // A resumed session carries the certificate of the handshake it resumes: a front
        // would go on seeing the one before a renewal. Every terminal makes a full one.
        client.resumption = rustls::client::Resumption::disabled();
        let (current, key_der) = certificate.current_der();
        let cert_key = cert_key(&current, &key_der).map_err(|why| {
            anyhow::anyhow!("{CERT_KEY} {}: {why}", certificate.cert_file().display())
        })?;
        Ok(Some(Arc::new(PoolTls {
            certificate,
            client: Arc::new(client),
            ca,
            pingora: RwLock::new((current, Arc::new(cert_key))),
        })))
    }

    /// The certificate, for [`Renewals`].
    pub fn certificate(&self) -> &Arc<Certificate> {
        &self.certificate
    }

    /// The tunnel's rustls settings.
    pub fn client(&self) -> &Arc<rustls::ClientConfig> {
        &self.client
    }

    /// Pingora's peer for a pool's front at `addr` (`host:port`, as resolved into
    /// `resolved`): TLS, the server's certificate checked against the CA and for the
    /// address's host (an IP address as an IP address), the gateway's certificate
    /// presented.
    pub fn peer(&self, addr: &str, resolved: std::net::SocketAddr) -> HttpPeer {
        let mut peer = HttpPeer::new(resolved, true, server_name(addr).to_owned());
        peer.client_cert_key = Some(self.cert_key());
        peer.options.ca = Some(Arc::clone(&self.ca));
        peer.options.verify_cert = true;
        peer.options.verify_hostname = true;
        peer
    }

    /// Pingora's copy of the certificate in use, made again after a renewal. A renewal
    /// Pingora cannot take keeps the copy it has (the tunnel presents the renewal).
    fn cert_key(&self) -> Arc<CertKey> {
        let (current, key_der) = self.certificate.current_der();
        let held = self
            .pingora
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if Arc::ptr_eq(&held.0, &current) {
            return held.1;
        }
        let made = match cert_key(&current, &key_der) {
            Ok(made) => Arc::new(made),
            Err(why) => {
                tracing::error!(
                    cert = %self.certificate.cert_file().display(),
                    error = %why,
                    "the renewed {CERT_KEY} cannot be presented on the pages' connections; the previous one is"
                );
                held.1
            }
        };
        *self
            .pingora
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = (current, Arc::clone(&made));
        made
    }
}

/// How the gateway reaches control's API (`gateway.control_url`): its `host:port`, and
/// for `https://` the CA control's certificate is checked against (`pki.ca_file`), in
/// the two forms the gateway's two clients of control take it — a Pingora peer for the
/// `/api` calls it proxies, rustls settings for its own calls (route feed, lookups,
/// reports). No client certificate: the calls carry the service token or a user's.
#[derive(Clone)]
pub struct ControlEndpoint {
    addr: String,
    tls: Option<ControlTls>,
}

/// The CA of an `https://` `gateway.control_url`, as each client takes it.
#[derive(Clone)]
struct ControlTls {
    ca: Arc<[WrappedX509]>,
    client: Arc<rustls::ClientConfig>,
}

impl ControlEndpoint {
    /// From `gateway.control_url` and, for `https://`, `pki.ca_file`; an error names the
    /// key at fault. An `http://` URL off loopback (which the configuration accepts only
    /// with `gateway.allow_plain_control`) is logged as a warning.
    pub fn from_config(config: &config::Config) -> anyhow::Result<ControlEndpoint> {
        const KEY: &str = "gateway.control_url";
        let url = &config.gateway.control_url;
        let (tls, addr) = config.control_api().ok_or_else(|| {
            anyhow::anyhow!("{KEY}: {url:?} is not http://host:port or https://host:port")
        })?;
        if !tls && !policy::feed::is_loopback(addr) {
            if !config.gateway.allow_plain_control {
                anyhow::bail!(
                    "{KEY}: {url:?} would send the service token in the clear off loopback (gateway.allow_plain_control)"
                );
            }
            tracing::warn!(
                control_url = %url,
                "gateway.allow_plain_control = true: the service token goes to control in the clear; only a private network of one machine you trust may carry it"
            );
        }
        let tls = if tls {
            let (roots, ca) = load_ca(
                config,
                &format!(
                    "required with an https:// {KEY} (control's certificate is checked against it)"
                ),
            )?;
            let client = pki::client(roots, None).map_err(|e| anyhow::anyhow!("{KEY}: {e}"))?;
            Some(ControlTls {
                ca,
                client: Arc::new(client),
            })
        } else {
            None
        };
        Ok(ControlEndpoint {
            addr: addr.to_owned(),
            tls,
        })
    }

    /// Control's `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The rustls settings of the gateway's own calls to an `https://` control: its
    /// certificate checked against the CA (`None`: plain HTTP).
    pub fn client_tls(&self) -> Option<&Arc<rustls::ClientConfig>> {
        self.tls.as_ref().map(|t| &t.client)
    }

    /// Pingora's peer for control: for `https://`, TLS with control's certificate
    /// checked against the CA and for the URL's host (an IP address as an IP address);
    /// plain otherwise. An error when the host does not resolve.
    pub fn peer(&self) -> pingora::Result<HttpPeer> {
        use std::net::ToSocketAddrs;
        let resolved = self
            .addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                Error::explain(
                    ErrorType::ConnectNoRoute,
                    "the host of gateway.control_url does not resolve",
                )
            })?;
        Ok(match &self.tls {
            None => HttpPeer::new(resolved, false, String::new()),
            Some(tls) => {
                // Pingora checks nothing of a peer without a server name: always one.
                let mut peer = HttpPeer::new(resolved, true, server_name(&self.addr).to_owned());
                peer.options.ca = Some(Arc::clone(&tls.ca));
                peer.options.verify_cert = true;
                peer.options.verify_hostname = true;
                peer
            }
        })
    }
}

/// The host of `host:port` as a TLS server name: an IP address or a DNS name, without
/// an IPv6 address's brackets.
pub fn server_name(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Pingora's copy of a certificate and its key. Checked first: Pingora panics on a
/// certificate or key it cannot parse.
fn cert_key(cert: &CertifiedKey, key: &PrivateKeyDer<'_>) -> Result<CertKey, String> {
    let chain: Vec<Vec<u8>> = cert.cert.iter().map(|c| c.as_ref().to_vec()).collect();
    if chain.is_empty() {
        return Err("no certificate".into());
    }
    for der in &chain {
        x509_parser::parse_x509_certificate(der).map_err(|e| format!("a certificate: {e}"))?;
    }
    let key = key.secret_der().to_vec();
    PrivateKeyDer::try_from(key.as_slice()).map_err(|e| format!("the key: {e}"))?;
    Ok(CertKey::new(chain, key))
}

/// The CA certificates of a PEM file as Pingora's peers take them.
/// `pki.ca_file` as rustls's roots and as Pingora's peers take it; `missing` says why
/// it is required when it is not set.
fn load_ca(
    config: &config::Config,
    missing: &str,
) -> anyhow::Result<(Arc<rustls::RootCertStore>, Arc<[WrappedX509]>)> {
    let ca_file = config
        .pki
        .ca_file
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("pki.ca_file: {missing}"))?;
    let ca_file = config.resolve(ca_file);
    let roots = pki::load_roots(&ca_file, "pki.ca_file")?;
    let pem = std::fs::read(&ca_file)
        .map_err(|e| anyhow::anyhow!("pki.ca_file {}: {e}", ca_file.display()))?;
    let ca = ca_for_pingora(&pem)
        .map_err(|why| anyhow::anyhow!("pki.ca_file {}: {why}", ca_file.display()))?;
    Ok((roots, ca))
}

fn ca_for_pingora(pem: &[u8]) -> Result<Arc<[WrappedX509]>, String> {
    let mut ca = Vec::new();
    for der in CertificateDer::pem_slice_iter(pem) {
        let der = der.map_err(|e| e.to_string())?;
        x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
        ca.push(WrappedX509::new(
            der.to_vec(),
            pingora::utils::tls::parse_x509,
        ));
    }
    if ca.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(ca.into())
}

/// The error of a `tls://` pool that this gateway cannot reach: it has no certificate.
pub fn no_client_certificate() -> Box<Error> {
    let mut e = Error::explain(
        ErrorType::ConnectNoRoute,
        "a tls:// pool needs the gateway's certificate: gateway.client_cert_file is not set",
    );
    e.esource = pingora::ErrorSource::Upstream;
    e
}

/// A deployment's CA and its parts' certificates, made for tests.
#[cfg(test)]
pub(crate) mod test_pki {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};

    /// A CA in a temporary directory, as `termgate-control certs init` makes one.
    pub(crate) struct TestPki {
        pub(crate) dir: tempfile::TempDir,
        ca: rcgen::Certificate,
        ca_key: KeyPair,
    }

    static SERIAL: AtomicU64 = AtomicU64::new(1);

    impl TestPki {
        pub(crate) fn new() -> TestPki {
            let dir = tempfile::tempdir().unwrap();
            let mut params = CertificateParams::default();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca_key = KeyPair::generate().unwrap();
            let ca = params.self_signed(&ca_key).unwrap();
            std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
            TestPki { dir, ca, ca_key }
        }

        pub(crate) fn ca_file(&self) -> PathBuf {
            self.dir.path().join("ca.pem")
        }

        /// Issues (or renews) `spiffe://termgate/<role>/<name>` for `sans`: its
        /// certificate and key files.
        pub(crate) fn issue(&self, role: &str, name: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
            let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
            let mut params = CertificateParams::new(sans).unwrap();
            params.subject_alt_names.push(SanType::URI(
                format!("spiffe://termgate/{role}/{name}")
                    .try_into()
                    .unwrap(),
            ));
            params.serial_number = Some(SERIAL.fetch_add(1, Ordering::Relaxed).into());
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
            let (cert_file, key_file) = (
                self.dir.path().join(format!("{role}-{name}.pem")),
                self.dir.path().join(format!("{role}-{name}-key.pem")),
            );
            std::fs::write(&key_file, key.serialize_pem()).unwrap();
            std::fs::write(&cert_file, cert.pem()).unwrap();
            (cert_file, key_file)
        }

        /// A gateway's configuration with `gateway.client_cert_file` (when `client`)
        /// and `pki.ca_file` (when `ca`).
        pub(crate) fn config(&self, client: Option<(&Path, &Path)>, ca: bool) -> config::Config {
            let secret = self.dir.path().join("hs");
            std::fs::write(&secret, [7u8; 40]).unwrap();
            let mut toml = format!(
                "[auth]\nissuer=\"t\"\naudience=\"t\"\nhs256_secret_file={secret:?}\n[control]\nservice_token_file={secret:?}\n[profiles.p]\nimage=\"i\"\n[gateway]\n"
            );
            if let Some((cert, key)) = client {
                toml += &format!("client_cert_file={cert:?}\nclient_key_file={key:?}\n");
            }
            if ca {
                toml += &format!("[pki]\nca_file={:?}\n", self.ca_file());
            }
            config::load_from_str(&toml, self.dir.path(), Vec::new()).unwrap()
        }

        /// A pool front's TLS settings: `cert` presented, client certificates of this
        /// CA required.
        pub(crate) fn front(&self, cert: &(PathBuf, PathBuf)) -> Arc<rustls::ServerConfig> {
            let cert = super::Certificate::load(&cert.0, &cert.1, "cert", "key").unwrap();
            let roots = config::pki::load_roots(&self.ca_file(), "ca").unwrap();
            Arc::new(config::pki::mutual_server(cert, roots).unwrap())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_pki::TestPki;
    use super::*;

    #[test]
    fn a_pools_server_name_is_its_host() {
        assert_eq!(server_name("10.0.0.5:7681"), "10.0.0.5");
        assert_eq!(server_name("[fd00::5]:7681"), "fd00::5");
        assert_eq!(server_name("pool.example:7681"), "pool.example");
        for addr in ["10.0.0.5:7681", "[fd00::5]:7681", "pool.example:7681"] {
            assert!(
                rustls::pki_types::ServerName::try_from(server_name(addr)).is_ok(),
                "{addr}"
            );
        }
        assert!(matches!(
            rustls::pki_types::ServerName::try_from(server_name("[fd00::5]:7681")),
            Ok(rustls::pki_types::ServerName::IpAddress(_))
        ));
    }

    #[test]
    fn what_pingora_cannot_parse_is_refused_rather_than_panicking_later() {
        assert!(ca_for_pingora(b"").is_err());
        let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(ca_for_pingora(garbage).is_err());
    }

    #[test]
    fn no_client_certificate_means_no_pool_tls_and_one_without_a_ca_is_refused() {
        let pki = TestPki::new();
        assert!(PoolTls::from_config(&pki.config(None, true))
            .unwrap()
            .is_none());
        let (cert, key) = pki.issue("gateway", "gw", &["gw"]);
        let e = PoolTls::from_config(&pki.config(Some((&cert, &key)), false))
            .err()
            .expect("refused without pki.ca_file");
        assert!(e.to_string().starts_with("pki.ca_file"), "{e}");
    }

    fn serial(peer: &HttpPeer) -> String {
        peer.client_cert_key
            .as_ref()
            .expect("a client certificate")
            .serial()
    }

    #[test]
    fn pingoras_peer_checks_the_pool_and_presents_the_renewed_certificate() {
        let pki = TestPki::new();
        let (cert, key) = pki.issue("gateway", "gw", &["gw"]);
        let tls = PoolTls::from_config(&pki.config(Some((&cert, &key)), true))
            .unwrap()
            .expect("a client certificate");
        let at = "127.0.0.1:7681".parse().unwrap();
        let peer = tls.peer("127.0.0.1:7681", at);
        assert!(peer.is_tls());
        assert_eq!(peer.sni, "127.0.0.1");
        assert!(peer.options.verify_cert && peer.options.verify_hostname);
        assert_eq!(peer.options.ca.as_ref().map(|ca| ca.len()), Some(1));
        let first = serial(&peer);
        // Unchanged: the same copy, not one made per request.
        let again = tls.peer("127.0.0.1:7681", at);
        assert!(Arc::ptr_eq(
            peer.client_cert_key.as_ref().unwrap(),
            again.client_cert_key.as_ref().unwrap()
        ));

        pki.issue("gateway", "gw", &["gw"]);
        assert!(tls.certificate().reload(true).unwrap());
        let renewed = serial(&tls.peer("127.0.0.1:7681", at));
        assert_ne!(renewed, first, "the renewal is presented");
    }

    #[tokio::test]
    async fn pingora_connects_to_a_pool_front_with_the_gateways_identity_and_checks_its_name() {
        let pki = TestPki::new();
        let (cert, key) = pki.issue("gateway", "gw", &["gw"]);
        let tls = PoolTls::from_config(&pki.config(Some((&cert, &key)), true))
            .unwrap()
            .unwrap();
        let front = pki.front(&pki.issue("dockgate", "far", &["127.0.0.1"]));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let accepting = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let s = tokio_rustls::TlsAcceptor::from(front)
                .accept(s)
                .await
                .unwrap();
            pki::peer_of(s.get_ref().1)
        });
        let connector = pingora::connectors::TransportConnector::new(None);
        let addr = format!("127.0.0.1:{}", at.port());
        connector
            .new_stream(&tls.peer(&addr, at))
            .await
            .expect("Pingora's TLS connection to the front");
        let id = accepting.await.unwrap().expect("the gateway's identity");
        assert_eq!((id.role, id.name.as_str()), (pki::PeerRole::Gateway, "gw"));

        // A front whose certificate is not for the address it is reached at.
        let elsewhere = pki.front(&pki.issue("dockgate", "other", &["10.9.9.9"]));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let _ = tokio_rustls::TlsAcceptor::from(elsewhere).accept(s).await;
        });
        let addr = format!("127.0.0.1:{}", at.port());
        let refused = connector
            .new_stream(&tls.peer(&addr, at))
            .await
            .expect_err("refused: the front's certificate is not for 127.0.0.1");
        assert!(
            refused.to_string().contains("not valid for name"),
            "{refused}"
        );
    }

    /// A TLS server on 127.0.0.1 presenting `cert` without asking for a client
    /// certificate (control's `tls_listen`): its address, and what each handshake came
    /// to (`Ok`, or the server's view of the failure).
    async fn control_listener(
        cert: &(std::path::PathBuf, std::path::PathBuf),
    ) -> (
        std::net::SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<Result<(), String>>,
    ) {
        let cert = Certificate::load(&cert.0, &cert.1, "cert", "key").unwrap();
        let server = Arc::new(pki::plain_server(cert).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let done = tokio_rustls::TlsAcceptor::from(Arc::clone(&server))
                    .accept(s)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                let _ = tx.send(done);
            }
        });
        (at, rx)
    }

    #[tokio::test]
    async fn an_https_control_is_checked_against_the_ca_and_for_the_urls_host() {
        let pki = TestPki::new();
        let (at, mut handshakes) =
            control_listener(&pki.issue("control", "control", &["127.0.0.1"])).await;
        let mut config = pki.config(None, true);
        config.gateway.control_url = format!("https://127.0.0.1:{}", at.port());
        let control = ControlEndpoint::from_config(&config).unwrap();
        assert!(control.client_tls().is_some());
        let connector = pingora::connectors::TransportConnector::new(None);
        connector
            .new_stream(&control.peer().unwrap())
            .await
            .expect("Pingora's TLS connection to control");
        assert_eq!(handshakes.recv().await, Some(Ok(())));

        // Control presenting a certificate of another CA.
        let other = TestPki::new();
        let (at, mut handshakes) =
            control_listener(&other.issue("control", "control", &["127.0.0.1"])).await;
        config.gateway.control_url = format!("https://127.0.0.1:{}", at.port());
        let control = ControlEndpoint::from_config(&config).unwrap();
        let refused = connector
            .new_stream(&control.peer().unwrap())
            .await
            .expect_err("a certificate of another CA is refused");
        assert!(
            refused.to_string().contains("invalid peer certificate"),
            "{refused}"
        );
        assert!(matches!(handshakes.recv().await, Some(Err(_))));

        // Control's certificate, but for another address than the URL's.
        let (at, _) = control_listener(&pki.issue("control", "elsewhere", &["10.9.9.9"])).await;
        config.gateway.control_url = format!("https://127.0.0.1:{}", at.port());
        let control = ControlEndpoint::from_config(&config).unwrap();
        let refused = connector
            .new_stream(&control.peer().unwrap())
            .await
            .expect_err("refused: control's certificate is not for 127.0.0.1");
        assert!(
            refused.to_string().contains("not valid for name"),
            "{refused}"
        );

        // The gateway's own calls over the same settings: the route feed's client.
        let ok = pki.issue("control", "control", &["127.0.0.1"]);
        let (at, mut handshakes) = control_listener(&ok).await;
        config.gateway.control_url = format!("https://127.0.0.1:{}", at.port());
        let control = ControlEndpoint::from_config(&config).unwrap();
        let client = crate::control_client::ControlClient::new(
            &config.gateway.control_url,
            b"service-token-for-tests",
            std::time::Duration::from_secs(2),
            control.client_tls().cloned(),
        );
        // The test's server speaks no HTTP after the handshake: the call fails, but
        // only after a handshake that verified control's certificate.
        let _ = client.report_audit(b"{}".to_vec()).await;
        assert_eq!(handshakes.recv().await, Some(Ok(())));
        let (at, _) = control_listener(&other.issue("control", "control", &["127.0.0.1"])).await;
        config.gateway.control_url = format!("https://127.0.0.1:{}", at.port());
        let client = crate::control_client::ControlClient::new(
            &config.gateway.control_url,
            b"service-token-for-tests",
            std::time::Duration::from_secs(2),
            control.client_tls().cloned(),
        );
        let refused = client.report_audit(b"{}".to_vec()).await.unwrap_err();
        assert!(
            refused.to_string().contains("invalid peer certificate"),
            "{refused}"
        );
    }

    #[test]
    fn an_https_control_without_the_ca_is_refused_naming_pki_ca_file() {
        let pki = TestPki::new();
        let mut config = pki.config(None, false);
        config.gateway.control_url = "https://127.0.0.1:7443".into();
        let e = ControlEndpoint::from_config(&config).err().unwrap();
        assert!(e.to_string().starts_with("pki.ca_file:"), "{e}");
        config.gateway.control_url = "http://10.0.0.1:7070".into();
        let e = ControlEndpoint::from_config(&config).err().unwrap();
        assert!(e.to_string().starts_with("gateway.control_url:"), "{e}");
        config.gateway.allow_plain_control = true;
        let plain = ControlEndpoint::from_config(&config).unwrap();
        assert!(plain.client_tls().is_none());
        assert_eq!(plain.addr(), "10.0.0.1:7070");
    }
}

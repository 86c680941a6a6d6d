//! A deployment's CA and its parts' certificates, made by the real
//! `termgate-control certs`, and a blocking mutual-TLS client that presents one of
//! them (or none), for the tests of dockgate's TLS listeners.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use config::pki;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use crate::raw::RawAnswer;
use crate::ttyd::private_dir;

/// A CA in a private directory of its own (removed on drop).
pub struct Pki {
    dir: tempfile::TempDir,
}

/// One part's certificate and key files.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

impl Leaf {
    /// The certificate as DER, as a peer sees it.
    pub fn der(&self) -> Vec<u8> {
        der_of(&self.cert)
    }
}

/// The first certificate of a PEM file, as DER.
pub fn der_of(path: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(path)
        .expect("certificate file")
        .next()
        .expect("a certificate")
        .expect("PEM")
        .to_vec()
}

impl Pki {
    /// `termgate-control certs init` in a fresh directory.
    pub fn init() -> Pki {
        let pki = Pki {
            dir: private_dir("tg-pki."),
        };
        pki.certs(&["init"]);
        pki
    }

    /// `certs issue --role <role> --name <name> [--san <s>]...`: a new certificate, or
    /// a renewal of the one of that role and name.
    pub fn issue(&self, role: &str, name: &str, sans: &[&str]) -> Leaf {
        let mut args = vec!["issue", "--role", role, "--name", name];
        for s in sans {
            args.extend(["--san", s]);
        }
        self.certs(&args);
        self.leaf(role, name)
    }

    /// The files of a certificate issued before (`issue` writes them there).
    pub fn leaf(&self, role: &str, name: &str) -> Leaf {
        Leaf {
            cert: self.dir.path().join(format!("{role}-{name}.pem")),
            key: self.dir.path().join(format!("{role}-{name}-key.pem")),
        }
    }

    /// The CA's certificate file.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A client's settings: servers checked against this CA, `leaf` (of any CA)
    /// presented when given. No session resumption: every connection presents it.
    pub fn client(&self, leaf: Option<&Leaf>) -> Arc<ClientConfig> {
        let roots = pki::load_roots(&self.ca(), "ca").expect("CA");
        let cert = leaf.map(|l| {
            pki::Certificate::load(&l.cert, &l.key, "cert", "key").expect("client certificate")
        });
        let mut config = pki::client(roots, cert).expect("client settings");
        config.resumption = rustls::client::Resumption::disabled();
        Arc::new(config)
    }

    fn certs(&self, args: &[&str]) {
        let o = Command::new(crate::binary("termgate-control"))
            .arg("certs")
            .args(args)
            .arg("--dir")
            .arg(self.dir.path())
            .output()
            .expect("termgate-control certs");
        assert!(
            o.status.success(),
            "certs {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// A client's TLS connection.
pub type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Connects to `addr` (its certificate checked for its IP address) and completes the
/// client's side of the handshake. Under TLS 1.3 a server that refuses the client's
/// certificate says so only after this: the first read fails or ends.
pub fn connect(addr: SocketAddr, config: Arc<ClientConfig>) -> std::io::Result<TlsStream> {
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    tcp.set_read_timeout(Some(Duration::from_millis(200)))?;
    let name = ServerName::from(addr.ip());
    let conn = ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    let mut stream = StreamOwned::new(conn, tcp);
    let deadline = Instant::now() + Duration::from_secs(10);
    while stream.conn.is_handshaking() {
        match stream.conn.complete_io(&mut stream.sock) {
            Ok(_) => {}
            Err(e) if is_wait(&e) && Instant::now() < deadline => {}
            Err(e) => return Err(e),
        }
    }
    Ok(stream)
}

/// The local address of a connection (the peer address the server logs).
pub fn local_addr(stream: &TlsStream) -> SocketAddr {
    stream.sock.local_addr().expect("local address")
}

/// The server's certificate on a connection, as DER.
pub fn server_der(stream: &TlsStream) -> Vec<u8> {
    stream
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default()
}

/// Sends `request` and reads one whole answer (a `Content-Length` or chunked body, or a
/// `101`'s head), or
/// what came before the server closed, errored or `deadline` passed: status 0 when no
/// HTTP came back.
pub fn request(stream: &mut TlsStream, request: &[u8], deadline: Duration) -> RawAnswer {
    let start = Instant::now();
    let mut got = Vec::new();
    if stream
        .write_all(request)
        .and_then(|()| stream.flush())
        .is_ok()
    {
        let mut buf = [0u8; 8192];
        while start.elapsed() < deadline && !crate::raw::complete(&got) {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if is_wait(&e) => {}
                Err(_) => break,
            }
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    RawAnswer { status, text }
}

/// Reads until the server closes the connection, it fails, or `deadline` passes: what
/// came, and whether it was closed (rather than left waiting).
pub fn read_until_closed(stream: &mut TlsStream, deadline: Duration) -> (Vec<u8>, bool) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while start.elapsed() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if is_wait(&e) => {}
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

fn is_wait(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

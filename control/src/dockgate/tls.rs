//! dockgate's mutual-TLS listeners, for parts on other machines (docs/hosts.md "More than one
//! host"): control and the host's ttyd pools reach the Docker API on one port
//! (`--tls-listen`), gateways the host's pools on others (`--pool-listen`,
//! `--viewer-listen`).
//!
//! A connection is admitted by the certificate its peer presents, never by its
//! address. The handshake requires one issued by the deployment's CA (`--tls-ca`); the
//! role in its identity then chooses where the connection goes ([`api_role`],
//! [`pool_admits`]). Any other role, or a certificate without a termgate identity, is
//! closed before a byte of it is read, and the refusal is logged and sent to control's
//! audit trail. A handshake is bounded by [`HANDSHAKE_TIMEOUT`], so a client that says
//! nothing holds nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use config::pki::{self, PeerId, PeerRole};
use policy::audit::AuditEntry;
use policy::dockgate::Role;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::{pool, AuditSender, Gate};

/// How long a client has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refused peer is given to take the `close_notify`.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a listener fronts.
#[derive(Debug, Clone)]
pub enum Front {
    /// The Docker API: a `control` certificate is served by `control`'s gate, a `pool`
    /// one by `attach`'s.
    Api {
        /// The gate of [`Role::Control`].
        control: Arc<Gate>,
        /// The gate of [`Role::Attach`].
        attach: Arc<Gate>,
    },
    /// A ttyd pool's unix socket, for `gateway` certificates.
    Pool {
        /// The listener's name in logs: `pool` or `viewer`.
        name: &'static str,
        /// The pool's socket.
        socket: PathBuf,
    },
}

impl Front {
    /// Its name in logs.
    pub fn name(&self) -> &'static str {
        match self {
            Front::Api { .. } => "docker-api",
            Front::Pool { name, .. } => name,
        }
    }
}

/// The Docker API's role for a peer's identity: `control` gets the control policy,
/// `pool` the attach policy; `Err` says why anyone else is refused.
pub fn api_role(peer: Option<&PeerId>) -> Result<Role, String> {
    match peer.map(|p| p.role) {
        Some(PeerRole::Control) => Ok(Role::Control),
        Some(PeerRole::Pool) => Ok(Role::Attach),
        Some(other) => Err(format!(
            "a {other} certificate may not use the Docker API (only control and pool)"
        )),
        None => Err(no_identity()),
    }
}

/// Whether a peer may reach a ttyd pool: only a `gateway`; `Err` says why not.
pub fn pool_admits(peer: Option<&PeerId>) -> Result<(), String> {
    match peer.map(|p| p.role) {
        Some(PeerRole::Gateway) => Ok(()),
        Some(other) => Err(format!(
            "a {other} certificate may not reach a ttyd pool (only gateway)"
        )),
        None => Err(no_identity()),
    }
}

fn no_identity() -> String {
    "the certificate carries no termgate identity (spiffe://termgate/<role>/<name>)".into()
}

/// One of dockgate's mutual-TLS listeners.
pub struct TlsListener {
    front: Front,
    acceptor: TlsAcceptor,
    host: String,
    audit: Option<AuditSender>,
}

impl TlsListener {
    /// A listener for `front` of Docker host `host`, with server settings `tls` (from
    /// [`config::pki::mutual_server`]: a client certificate of the CA is required).
    pub fn new(front: Front, tls: Arc<rustls::ServerConfig>, host: &str) -> TlsListener {
        TlsListener {
            front,
            acceptor: TlsAcceptor::from(tls),
            host: host.to_owned(),
            audit: None,
        }
    }

    /// Sends every refused peer to control's audit trail too.
    pub fn with_audit(mut self, audit: AuditSender) -> TlsListener {
        self.audit = Some(audit);
        self
    }

    /// Accepts connections on `listener` until it fails for good.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: back off, never spin.
                    tracing::warn!(listener = self.front.name(), "dockgate: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            tokio::spawn(self.clone().connection(tcp, peer));
        }
    }

    /// One connection: the handshake, then the front its peer's role chooses.
    async fn connection(self: Arc<Self>, tcp: TcpStream, peer: SocketAddr) {
        // Terminal keystrokes and Docker's short answers: nothing to gain by waiting.
        let _ = tcp.set_nodelay(true);
        let listener = self.front.name();
        let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::warn!(target: "termgate::dockgate", listener, host = %self.host, peer = %peer, error = %e, "dockgate: TLS handshake failed; closed");
                return;
            }
            Err(_) => {
                tracing::warn!(target: "termgate::dockgate", listener, host = %self.host, peer = %peer, "dockgate: no TLS handshake within {HANDSHAKE_TIMEOUT:?}; closed");
                return;
            }
        };
        let id = pki::peer_of(tls.get_ref().1);
        let identity = id
            .as_ref()
            .map_or_else(|| "-".to_owned(), PeerId::to_string);
        let admitted = match &self.front {
            Front::Api { control, attach } => api_role(id.as_ref()).map(|role| match role {
                Role::Control => Route::Gate(control.clone()),
                Role::Attach => Route::Gate(attach.clone()),
            }),
            Front::Pool { socket, .. } => pool_admits(id.as_ref()).map(|()| Route::Pool(socket)),
        };
        match admitted {
            Ok(Route::Gate(gate)) => {
                tracing::debug!(listener, peer = %peer, identity = %identity, role = %gate.role, "dockgate: peer admitted");
                gate.serve_connection(tls).await;
            }
            Ok(Route::Pool(socket)) => {
                tracing::info!(listener, peer = %peer, identity = %identity, "dockgate: peer admitted");
                if let Some(refused) = pool::splice(tls, socket, listener, peer).await {
                    close(refused).await;
                }
            }
            Err(reason) => {
                self.refuse(peer, &identity, &reason);
                close(tls).await;
            }
        }
    }

    /// The log line of a refused peer, and its audit line.
    fn refuse(&self, peer: SocketAddr, identity: &str, reason: &str) {
        let listener = self.front.name();
        tracing::warn!(
            target: "termgate::dockgate",
            audit = "dockgate_peer_refused",
            listener,
            host = %self.host,
            peer = %peer,
            identity,
            "refused a peer: {reason}"
        );
        if let Some(audit) = &self.audit {
            let fields = [
                ("listener", listener.to_owned()),
                ("host", self.host.clone()),
                ("peer", peer.to_string()),
                ("identity", identity.to_owned()),
                ("reason", reason.to_owned()),
            ];
            audit.send(AuditEntry {
                at_ms: config::telemetry::now_ms(),
                level: "WARN".into(),
                message: "dockgate refused a peer".into(),
                fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            });
        }
    }
}

/// Closes a connection with TLS's `close_notify`, giving the peer [`CLOSE_TIMEOUT`] to
/// take it.
pub(super) async fn close(mut tls: TlsStream<TcpStream>) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, tls.shutdown()).await;
}

/// Where an admitted connection goes.
enum Route<'a> {
    Gate(Arc<Gate>),
    Pool(&'a PathBuf),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(role: PeerRole) -> PeerId {
        PeerId {
            role,
            name: "x".into(),
        }
    }

    #[test]
    fn the_docker_api_serves_control_and_pool_certificates_by_their_policies_only() {
        assert_eq!(api_role(Some(&id(PeerRole::Control))), Ok(Role::Control));
        assert_eq!(api_role(Some(&id(PeerRole::Pool))), Ok(Role::Attach));
        for refused in [PeerRole::Gateway, PeerRole::Dockgate] {
            let e = api_role(Some(&id(refused))).unwrap_err();
            assert!(e.contains(refused.as_str()), "{e}");
        }
        assert!(api_role(None).unwrap_err().contains("no termgate identity"));
    }

    #[test]
    fn a_pool_front_admits_gateway_certificates_only() {
        assert_eq!(pool_admits(Some(&id(PeerRole::Gateway))), Ok(()));
        for refused in [PeerRole::Control, PeerRole::Pool, PeerRole::Dockgate] {
            let e = pool_admits(Some(&id(refused))).unwrap_err();
            assert!(e.contains(refused.as_str()), "{e}");
        }
        assert!(pool_admits(None).is_err());
    }
}

//! The fronts of a host's ttyd pools: how a gateway on another machine reaches them
//! (`ttyd_pool = ["tls://address:port"]`). The gateway has proved its role with its
//! certificate ([`super::tls`]); from then on the front only copies bytes between the
//! TLS stream and a new connection to the pool's unix socket. ttyd and the gateway
//! speak HTTP and websockets through it unchanged, and ttyd itself stays on a socket
//! nobody else can reach.

use std::net::SocketAddr;
use std::path::Path;

use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::server::TlsStream;

/// Copy buffer of a terminal, each way: one TLS record. Terminal traffic comes in
/// small bursts, and an idle terminal should hold little.
const TERMINAL_BUFFER: usize = 16 * 1024;

/// Copies between an admitted gateway's stream and a new connection to the pool at
/// `socket` until both sides are done. A pool that does not take the connection is
/// logged, and the stream handed back for the caller to close.
pub(super) async fn splice(
    mut tls: TlsStream<TcpStream>,
    socket: &Path,
    listener: &'static str,
    peer: SocketAddr,
) -> Option<TlsStream<TcpStream>> {
    let mut pool = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(target: "termgate::dockgate", listener, peer = %peer, socket = %socket.display(), error = %e, "dockgate: the ttyd pool did not take the connection; closed");
            return Some(tls);
        }
    };
    let copied = tokio::io::copy_bidirectional_with_sizes(
        &mut tls,
        &mut pool,
        TERMINAL_BUFFER,
        TERMINAL_BUFFER,
    )
    .await;
    if let Err(e) = copied {
        tracing::debug!(listener, peer = %peer, "dockgate: pool stream: {e}");
    }
    None
}

//! The terminal's websocket through the gateway: `/s/<id>/ws`, subprotocol `tty`, the
//! sign-in as a bearer header. The gateway checks it as it checks the page's: the
//! sign-in, ownership, locks, limits. Behind a front proxy the same request is checked
//! by control's `/v1/authz`, which takes the bearer header without an `Origin` too.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::failure::Failure;
use crate::gateway::{Gateway, Reply, CONNECT_TIMEOUT, USER_AGENT};

/// A byte stream to the gateway, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An open terminal.
pub type Socket = WebSocketStream<Box<dyn Io>>;

/// Why the terminal did not open.
pub enum Refused {
    /// 404: the gateway knows no session of this id that the user may open (yet).
    NotFound,
    /// Anything else, said for the user.
    Failed(Failure),
}

/// Opens the terminal of session `id` and announces a `size` window.
pub async fn open(gw: &Gateway, id: &str, size: (u16, u16)) -> Result<Socket, Refused> {
    let failed = |e: &dyn std::fmt::Display| {
        Refused::Failed(Failure::error(format!(
            "cannot open the terminal at {}: {e}",
            gw.url.as_str()
        )))
    };
    let mut request = gw
        .url
        .websocket(&format!("/s/{id}/ws"))
        .into_client_request()
        .map_err(|e| failed(&e))?;
    let headers = request.headers_mut();
    headers.insert("sec-websocket-protocol", HeaderValue::from_static("tty"));
    headers.insert("user-agent", HeaderValue::from_static(USER_AGENT));
    if let Some(token) = gw.token() {
        let bearer = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| failed(&e))?;
        headers.insert("authorization", bearer);
    }
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect(gw))
        .await
        .map_err(|_| failed(&format!("no connection within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| Refused::Failed(gw.unreachable(&e.to_string())))?;
    let handshake = tokio_tungstenite::client_async(request, stream);
    let mut socket = match tokio::time::timeout(CONNECT_TIMEOUT, handshake).await {
        Err(_) => return Err(failed(&"the gateway did not answer the upgrade")),
        Ok(Ok((socket, _))) => socket,
        Ok(Err(WsError::Http(response))) => {
            let reply = Reply {
                status: response.status().as_u16(),
                body: response.body().clone().unwrap_or_default(),
                set_cookies: Vec::new(),
            };
            if reply.status == 404 {
                return Err(Refused::NotFound);
            }
            return Err(Refused::Failed(gw.refused(&reply, "opening the terminal")));
        }
        Ok(Err(e)) => return Err(failed(&e)),
    };
    let (columns, rows) = size;
    let hello = Message::Binary(super::ttyd::hello(columns, rows).into());
    futures_util::SinkExt::send(&mut socket, hello)
        .await
        .map_err(|e| failed(&e))?;
    Ok(socket)
}

/// A TCP connection to the gateway, in TLS when its URL says https.
async fn connect(gw: &Gateway) -> std::io::Result<Box<dyn Io>> {
    let tcp = TcpStream::connect((gw.url.host(), gw.url.port())).await?;
    // Keys are sent as they are typed.
    tcp.set_nodelay(true)?;
    if !gw.url.tls() {
        return Ok(Box::new(tcp));
    }
    let name = rustls::pki_types::ServerName::try_from(gw.url.host().to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let tls = tokio_rustls::TlsConnector::from(gw.tls.clone())
        .connect(name, tcp)
        .await?;
    Ok(Box::new(tls))
}

/// How long a terminal whose session was just created may answer 404: the gateway
/// learns new sessions from control's route feed, a moment after control answered.
pub const ROUTE_WAIT: Duration = Duration::from_secs(10);

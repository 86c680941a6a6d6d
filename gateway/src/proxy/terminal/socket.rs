//! The two ends of a terminal's tunnel: the ttyd's socket (TCP or unix, or TLS to a
//! `tls://` pool's front) and the browser's connection (a bare TCP socket, or Pingora's
//! TLS stream), and the reading of the ttyd's answer to the upgrade.

use std::io::{self, ErrorKind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pingora::prelude::HttpPeer;
use pingora::protocols::l4::socket::SocketAddr as PeerAddr;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// A connection to a `tls://` pool's front.
type TlsToPool = tokio_rustls::client::TlsStream<TcpStream>;

/// Largest response head accepted from a ttyd.
pub(super) const MAX_HEAD: usize = 16 * 1024;

/// A connection at either end of a tunnel.
pub(super) enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A browser's connection as Pingora's stream: rustls over the TCP socket, or the
    /// connection of an embedding proxy's listener (the library's `Module`). Written through
    /// its own buffer, so flushed.
    Stream(pingora::protocols::Stream),
    /// A `tls://` pool's front: rustls over TCP (boxed: rustls's state is large). Written
    /// through rustls's buffer, so flushed.
    Tls(Box<TlsToPool>),
}

impl Socket {
    /// Connects to `peer` and sends `head`; a TLS peer (a `tls://` pool's front) with
    /// `tls`, checked for the peer's server name. A unix socket connects at once (or not
    /// at all), so its head is written before the socket is registered with the runtime:
    /// no wait for the runtime to report it writable first.
    pub(super) async fn connect_and_send(
        peer: &HttpPeer,
        tls: Option<&Arc<rustls::ClientConfig>>,
        head: &[u8],
    ) -> io::Result<Socket> {
        let (mut socket, sent) = match &peer._address {
            PeerAddr::Inet(a) if peer.is_tls() => {
                let tls = tls.ok_or_else(|| {
                    io::Error::other("a tls:// pool needs gateway.client_cert_file")
                })?;
                let name = ServerName::try_from(peer.sni.clone())
                    .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e))?;
                let s = TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                let s = tokio_rustls::TlsConnector::from(Arc::clone(tls))
                    .connect(name, s)
                    .await?;
                (Socket::Tls(Box::new(s)), 0)
            }
            PeerAddr::Inet(a) => {
                let s = TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                (Socket::Tcp(s), 0)
            }
            PeerAddr::Unix(a) => {
                let path = a
                    .as_pathname()
                    .ok_or_else(|| io::Error::other("an unnamed unix socket"))?;
                // Non-blocking from the start: one system call.
                let s = socket2::Socket::new(
                    socket2::Domain::UNIX,
                    socket2::Type::STREAM.nonblocking(),
                    None,
                )?;
                s.connect(&socket2::SockAddr::unix(path)?)?;
                let s = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(s));
                let sent = write_now(&s, head)?;
                (Socket::Unix(UnixStream::from_std(s)?), sent)
            }
        };
        socket.write_all(&head[sent..]).await?;
        Ok(socket)
    }

    /// Reads what the ttyd sent (its answer to the upgrade) into `buf`, waiting for
    /// some. A socket is read when the runtime reports it readable, one `recv` per
    /// wake-up ([`Socket::try_read`]); TLS through rustls, which decrypts whole records.
    async fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Socket::Tls(s) = self {
            return s.read(buf).await;
        }
        loop {
            match self {
                Socket::Tcp(s) => s.readable().await?,
                Socket::Unix(s) => s.readable().await?,
                Socket::Stream(_) | Socket::Tls(_) => {
                    return Err(io::Error::other("not a ttyd's socket"))
                }
            }
            match self.try_read(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                other => return other,
            }
        }
    }

    /// Whether what is written may wait in the connection's own buffer until flushed.
    pub(super) fn buffers(&self) -> bool {
        matches!(self, Socket::Stream(_) | Socket::Tls(_))
    }

    /// Reads what the connection holds into `buf`. A short read of a socket clears its
    /// readiness (tokio does so on epoll), so the next poll waits for new bytes instead
    /// of making a read that finds none.
    pub(super) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut read = ReadBuf::new(buf);
        let polled = match self {
            Socket::Tcp(s) => Pin::new(s).poll_read(cx, &mut read),
            Socket::Unix(s) => Pin::new(s).poll_read(cx, &mut read),
            Socket::Stream(s) => Pin::new(s).poll_read(cx, &mut read),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, &mut read),
        };
        polled.map_ok(|()| read.filled().len())
    }

    pub(super) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self {
            Socket::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Stream(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    pub(super) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Stream(s) => Pin::new(s).poll_flush(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Socket::Tcp(_) | Socket::Unix(_) => Poll::Ready(Ok(())),
        }
    }

    /// Ends a TLS connection with its close_notify, after what rustls still holds;
    /// bounded by `grace`. A socket is simply closed when dropped.
    pub(super) async fn close(self, grace: Duration) {
        match self {
            Socket::Stream(mut s) => {
                let _ = pingora_timeout::timeout(grace, s.shutdown()).await;
            }
            Socket::Tls(mut s) => {
                let _ = pingora_timeout::timeout(grace, s.shutdown()).await;
            }
            Socket::Tcp(_) | Socket::Unix(_) => {}
        }
    }

    /// Reads what the socket holds now. A read shorter than `buf` took all there was, so
    /// it also clears the socket's readiness: the next read waits for new bytes instead of
    /// being made only to find none (one `recv` per wake-up rather than two, a keystroke's
    /// each way). tokio clears it only if no new readiness arrived since it was reported,
    /// and never clears a closed state, so no bytes or end are missed.
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut short = 0;
        let len = buf.len();
        let took = |read: io::Result<usize>, short: &mut usize| match read {
            Ok(n) if n > 0 && n < len => {
                *short = n;
                Err(io::Error::from(ErrorKind::WouldBlock))
            }
            other => other,
        };
        let read = match self {
            Socket::Tcp(s) => s.try_io(Interest::READABLE, || took(s.try_read(buf), &mut short)),
            Socket::Unix(s) => s.try_io(Interest::READABLE, || took(s.try_read(buf), &mut short)),
            Socket::Stream(_) | Socket::Tls(_) => Err(io::Error::other("not a plain socket")),
        };
        match read {
            Err(e) if e.kind() == ErrorKind::WouldBlock && short > 0 => Ok(short),
            other => other,
        }
    }

    /// Writes all of `buf`; under TLS, flushed out of rustls too.
    pub(super) async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.write_all(buf).await,
            Socket::Unix(s) => s.write_all(buf).await,
            Socket::Stream(s) => {
                s.write_all(buf).await?;
                s.flush().await
            }
            Socket::Tls(s) => {
                s.write_all(buf).await?;
                s.flush().await
            }
        }
    }
}

/// The ttyd's answer to the upgrade: its head, and any bytes that came after it.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, Vec<u8>)>,
    pub(super) rest: Vec<u8>,
}

/// Reads a response head (bounded by [`MAX_HEAD`]).
pub(super) async fn read_answer(up: &mut Socket) -> io::Result<Answer> {
    let mut buf = Vec::with_capacity(1024);
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(
                ErrorKind::InvalidData,
                "the ttyd's response head is too large",
            ));
        }
        let mut chunk = [0u8; 2048];
        match up.read_some(&mut chunk).await? {
            0 => {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "the ttyd closed before answering",
                ))
            }
            n => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let bad = || io::Error::new(ErrorKind::InvalidData, "a malformed response head");
    let mut lines = buf[..end]
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next().ok_or_else(bad)?;
    let mut parts = status_line.splitn(3, |b| *b == b' ');
    let version = parts.next().ok_or_else(bad)?;
    if !version.starts_with(b"HTTP/1.") {
        return Err(bad());
    }
    let status = parts
        .next()
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| (100..1000).contains(s))
        .ok_or_else(bad)?;
    let mut headers = Vec::new();
    for line in lines {
        let colon = line.iter().position(|b| *b == b':').ok_or_else(bad)?;
        let name = std::str::from_utf8(&line[..colon])
            .map_err(|_| bad())?
            .trim();
        if name.is_empty() {
            return Err(bad());
        }
        headers.push((name.to_owned(), line[colon + 1..].trim_ascii().to_vec()));
    }
    let rest = buf.split_off(end + 4);
    Ok(Answer {
        status,
        headers,
        rest,
    })
}

/// Reads from `up` until `buf` holds `n` bytes or the ttyd closes.
pub(super) async fn read_more(up: &mut Socket, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    let mut chunk = [0u8; 2048];
    while buf.len() < n {
        match up
            .read_some(&mut chunk[..(n - buf.len()).min(2048)])
            .await?
        {
            0 => break,
            k => buf.extend_from_slice(&chunk[..k]),
        }
    }
    Ok(())
}

/// Writes as much of `bytes` as a non-blocking socket takes now.
pub(super) fn write_now(mut socket: impl io::Write, bytes: &[u8]) -> io::Result<usize> {
    let mut sent = 0;
    while sent < bytes.len() {
        match socket.write(&bytes[sent..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}

/// Writes what `peer` takes now of `bytes`; how much. When it takes less than all,
/// `peer` holds the task's waker for when it can take more.
fn write_some(peer: &mut Socket, cx: &mut Context<'_>, bytes: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < bytes.len() {
        match peer.poll_write(cx, &bytes[done..]) {
            Poll::Ready(Ok(0)) => return Err(ErrorKind::WriteZero.into()),
            Poll::Ready(Ok(n)) => done += n,
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => break,
        }
    }
    Ok(done)
}

/// Writes what `peer` takes now; keeps the rest in `pending`.
pub(super) fn send(
    peer: &mut Socket,
    cx: &mut Context<'_>,
    bytes: &[u8],
    pending: &mut Vec<u8>,
) -> io::Result<()> {
    let done = write_some(peer, cx, bytes)?;
    pending.extend_from_slice(&bytes[done..]);
    Ok(())
}

/// Writes what `peer` takes of `pending`; frees its memory once it is all written.
/// How much was written.
pub(super) fn flush(
    peer: &mut Socket,
    cx: &mut Context<'_>,
    pending: &mut Vec<u8>,
) -> io::Result<usize> {
    let done = write_some(peer, cx, pending)?;
    if done == pending.len() {
        *pending = Vec::new();
    } else {
        pending.drain(..done);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::test_pki::TestPki;
    use crate::certificate::PoolTls;
    use config::pki::{peer_of, PeerRole};
    use tokio::io::AsyncWriteExt;

    /// A pool front on 127.0.0.1 presenting `front`: it reads one request head, answers
    /// a `101` and `hello`, then echoes; its result is the head and who the client was.
    async fn front(
        front: Arc<rustls::ServerConfig>,
    ) -> (
        std::net::SocketAddr,
        tokio::task::JoinHandle<io::Result<(Vec<u8>, Option<config::pki::PeerId>)>>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (s, _) = listener.accept().await?;
            let mut s = tokio_rustls::TlsAcceptor::from(front).accept(s).await?;
            let id = peer_of(s.get_ref().1);
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                if s.read(&mut byte).await? == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nhello")
                .await?;
            s.flush().await?;
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).await?;
            s.write_all(&buf[..n]).await?;
            s.flush().await?;
            Ok((head, id))
        });
        (at, task)
    }

    fn pool_tls(pki: &TestPki) -> Arc<PoolTls> {
        let (cert, key) = pki.issue("gateway", "gw", &["gw"]);
        PoolTls::from_config(&pki.config(Some((&cert, &key)), true))
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn a_tls_pool_front_gets_the_head_from_a_gateway_and_its_answer_is_read() {
        let pki = TestPki::new();
        let tls = pool_tls(&pki);
        let (at, front) = front(pki.front(&pki.issue("dockgate", "far", &["127.0.0.1"]))).await;
        let peer = tls.peer(&format!("127.0.0.1:{}", at.port()), at);
        let head = b"GET /ws?arg=c1 HTTP/1.1\r\nUpgrade: websocket\r\n\r\n";
        let mut up = Socket::connect_and_send(&peer, Some(tls.client()), head)
            .await
            .expect("connected over TLS");
        assert!(matches!(up, Socket::Tls(_)) && up.buffers());
        let answer = read_answer(&mut up).await.unwrap();
        assert_eq!(answer.status, 101);
        let mut rest = answer.rest;
        read_more(&mut up, &mut rest, 5).await.unwrap();
        assert_eq!(rest, b"hello");
        up.write_all(b"typed").await.unwrap();
        let mut echoed = Vec::new();
        read_more(&mut up, &mut echoed, 5).await.unwrap();
        assert_eq!(echoed, b"typed");
        let (got, id) = front.await.unwrap().unwrap();
        assert_eq!(got, head);
        let id = id.expect("the gateway presented its certificate");
        assert_eq!((id.role, id.name.as_str()), (PeerRole::Gateway, "gw"));
    }

    #[tokio::test]
    async fn a_front_with_a_certificate_of_another_ca_gets_nothing() {
        let pki = TestPki::new();
        let tls = pool_tls(&pki);
        let other = TestPki::new();
        let (at, front) = front(other.front(&other.issue("dockgate", "far", &["127.0.0.1"]))).await;
        let peer = tls.peer(&format!("127.0.0.1:{}", at.port()), at);
        let sent =
            Socket::connect_and_send(&peer, Some(tls.client()), b"GET /ws HTTP/1.1\r\n\r\n").await;
        let e = sent.err().expect("the handshake fails");
        assert!(e.to_string().contains("invalid peer certificate"), "{e}");
        let served = front.await.unwrap();
        assert!(served.is_err(), "the front read no head: {served:?}");
    }

    #[tokio::test]
    async fn a_tls_peer_without_the_gateways_settings_is_not_dialled_in_the_clear() {
        let pki = TestPki::new();
        let tls = pool_tls(&pki);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let peer = tls.peer(&format!("127.0.0.1:{}", at.port()), at);
        let e = Socket::connect_and_send(&peer, None, b"GET / HTTP/1.1\r\n\r\n")
            .await
            .err()
            .expect("refused");
        assert!(e.to_string().contains("gateway.client_cert_file"), "{e}");
    }
}

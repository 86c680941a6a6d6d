//! A deadline on the whole request head (`gateway.header_timeout_ms`).
//!
//! Pingora's own bound on a request head is per read (its keepalive timeout, 60 s): a
//! client that sends one header byte every second keeps a connection, a task and a
//! buffer for ever (slowloris). [`HeadDeadline`] wraps each accepted connection and
//! closes it when a request head has not been read whole within the deadline of its
//! first byte.
//!
//! The stream only needs to know where a head starts and ends: it starts with the
//! first bytes read while idle (armed here), it ends when Pingora hands the parsed
//! head to the proxy (`Proxy::early_request_filter` → [`head_done`]), and the
//! connection is idle again when the request is logged ([`request_done`]). Between the
//! two (bodies, upgraded websockets) the stream adds one relaxed atomic load per read
//! and nothing else: it never looks at the bytes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, Ssl, Stream, UniqueID,
    UniqueIDType, ALPN,
};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// No request in progress: the next bytes read start a head.
const IDLE: u8 = 0;
/// A head is being read: the deadline runs.
const HEAD: u8 = 1;
/// The head was parsed; the request (its body or its upgraded tunnel) is running.
const REQUEST: u8 = 2;

/// A server app that puts every accepted connection of `inner` under a head deadline.
pub struct HeadDeadlineApp<A> {
    inner: Arc<A>,
    timeout: Duration,
}

impl<A> HeadDeadlineApp<A> {
    /// Wraps `inner`; a request head must arrive within `timeout` of its first byte.
    pub fn new(inner: A, timeout: Duration) -> Self {
        HeadDeadlineApp {
            inner: Arc::new(inner),
            timeout,
        }
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for HeadDeadlineApp<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // Pingora keeps a keepalive connection inside one `process_new`, so the wrapper
        // lives exactly as long as the connection.
        let wrapped: Stream = Box::new(HeadDeadline::new(stream, self.timeout));
        self.inner.process_new(wrapped, shutdown).await
    }

    async fn cleanup(&self) {
        // Wakes the keepalive connections parked in `read_request` at shutdown.
        self.inner.cleanup().await
    }
}

/// A connection whose request heads must each arrive within a deadline.
pub struct HeadDeadline {
    inner: Stream,
    state: AtomicU8,
    timeout: Duration,
    /// Armed by the first bytes of each head.
    sleep: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
    /// Whether the connection is a plain TCP socket: [`UNKNOWN`] until first asked
    /// (one `getsockname`, for terminal upgrades only).
    plain_tcp: AtomicU8,
}

/// [`HeadDeadline::plain_tcp`] not yet known.
const UNKNOWN: u8 = 0;
const PLAIN: u8 = 1;
const NOT_PLAIN: u8 = 2;

impl std::fmt::Debug for HeadDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadDeadline")
            .field("inner", &self.inner)
            .field("state", &self.state)
            .field("timeout", &self.timeout)
            .field("armed", &self.sleep.is_some())
            .finish()
    }
}

impl HeadDeadline {
    fn new(inner: Stream, timeout: Duration) -> Self {
        HeadDeadline {
            inner,
            state: AtomicU8::new(IDLE),
            timeout,
            sleep: None,
            plain_tcp: AtomicU8::new(UNKNOWN),
        }
    }

    fn arm(&mut self) {
        // Pingora's coarse timer (10 ms ticks, its own clock thread): arming it takes no
        // wake-up of the runtime thread that waits on the sockets, which a tokio timer
        // armed from another worker thread does.
        self.sleep = Some(Box::pin(pingora_timeout::sleep(self.timeout)));
        self.state.store(HEAD, Ordering::Relaxed);
    }
}

/// The head of the session's current request has been parsed: stop its deadline.
pub fn head_done(session: &pingora::proxy::Session) {
    set(session, REQUEST);
}

/// The session's request has ended: the next bytes read start a new head.
pub fn request_done(session: &pingora::proxy::Session) {
    set(session, IDLE);
}

fn set(session: &pingora::proxy::Session, state: u8) {
    if let Some(d) = session
        .as_downstream()
        .stream()
        // `**s`: the connection behind the box, not the box itself.
        .and_then(|s| (**s).as_any().downcast_ref::<HeadDeadline>())
    {
        d.state.store(state, Ordering::Relaxed);
    }
}

impl HeadDeadline {
    /// Whether the connection is a plain TCP socket of Pingora's (no TLS), the only kind
    /// [`HeadDeadline::into_tcp`] can release.
    pub fn is_plain_tcp(&self) -> bool {
        match self.plain_tcp.load(Ordering::Relaxed) {
            PLAIN => return true,
            NOT_PLAIN => return false,
            _ => {}
        }
        let plain = self.inner.get_ssl().is_none()
            && (*self.inner)
                .as_any()
                .is::<pingora::protocols::l4::stream::Stream>()
            && {
                // SAFETY: `inner` owns the descriptor and is alive for this call.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.inner.id()) };
                socket2::SockRef::from(&fd)
                    .local_addr()
                    .is_ok_and(|a| a.as_socket().is_some())
            };
        let known = if plain { PLAIN } else { NOT_PLAIN };
        self.plain_tcp.store(known, Ordering::Relaxed);
        plain
    }

    /// Lends the socket of a plain connection, still Pingora's, to `f`: for writing past
    /// Pingora's buffers (none hold anything between requests), as the `101` is written
    /// before the socket leaves Pingora, which costs system calls of its own.
    pub fn with_tcp<R>(
        &self,
        f: impl FnOnce(&std::net::TcpStream) -> std::io::Result<R>,
    ) -> std::io::Result<R> {
        if !self.is_plain_tcp() {
            return Err(std::io::Error::other("not a plain TCP connection"));
        }
        use std::os::fd::FromRawFd as _;
        // SAFETY: `inner` owns the descriptor and is alive for this call; the view is
        // never dropped, so it never closes it.
        let socket = std::mem::ManuallyDrop::new(unsafe {
            std::net::TcpStream::from_raw_fd(self.inner.id())
        });
        f(&socket)
    }

    /// Releases the connection this wraps (a TLS stream): its request heads are over,
    /// the connection leaves Pingora for a tunnel of the gateway's own.
    pub fn into_stream(self) -> Stream {
        self.inner
    }

    /// Releases the TCP socket under a plain connection, without Pingora's buffers: the
    /// connection leaves Pingora for a tunnel of the gateway's own. Bytes Pingora read
    /// ahead of the request head stay behind (a websocket client sends nothing before
    /// the `101`, RFC 6455 §4.1).
    ///
    /// The socket comes back non-blocking and not yet registered with the runtime, so
    /// that the caller can write to it at once (the `101`) before it waits on it.
    pub fn into_tcp(self) -> std::io::Result<std::net::TcpStream> {
        if !self.is_plain_tcp() {
            return Err(std::io::Error::other("not a plain TCP connection"));
        }
        // SAFETY: `inner` owns the descriptor and is alive for this call; the copy is
        // ours and outlives it.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.inner.id()) };
        let socket = std::net::TcpStream::from(fd.try_clone_to_owned()?);
        // Closes Pingora's descriptor; the socket lives on in the copy (whose file
        // status, non-blocking, is the shared one).
        drop(self);
        Ok(socket)
    }
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the request head did not arrive within gateway.header_timeout_ms",
    )
}

impl AsyncRead for HeadDeadline {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let state = this.state.load(Ordering::Relaxed);
        if state == REQUEST {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        if state == HEAD {
            if let Some(s) = this.sleep.as_mut() {
                if s.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(timed_out()));
                }
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if state == IDLE && matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.arm();
        }
        polled
    }
}

impl AsyncWrite for HeadDeadline {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

// Everything else is the wrapped connection's own.

#[async_trait]
impl Shutdown for HeadDeadline {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

impl UniqueID for HeadDeadline {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for HeadDeadline {
    fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }
    fn get_ssl_digest(&self) -> Option<Arc<pingora::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }
    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for HeadDeadline {
    fn get_timing_digest(&self) -> Vec<Option<pingora::protocols::TimingDigest>> {
        self.inner.get_timing_digest()
    }
    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }
    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for HeadDeadline {
    fn get_proxy_digest(&self) -> Option<Arc<pingora::protocols::raw_connect::ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
    fn set_proxy_digest(&mut self, digest: pingora::protocols::raw_connect::ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for HeadDeadline {
    fn get_socket_digest(&self) -> Option<Arc<pingora::protocols::SocketDigest>> {
        self.inner.get_socket_digest()
    }
    fn set_socket_digest(&mut self, digest: pingora::protocols::SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl Peek for HeadDeadline {
    async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

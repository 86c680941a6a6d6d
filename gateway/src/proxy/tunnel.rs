//! A terminal websocket's own tunnel, on every listener (plain TCP or TLS).
//!
//! Pingora is the door: it accepts the connection (and makes its TLS handshake), reads
//! the request head and `request_filter` admits the terminal. Then, instead of handing
//! the upgrade to Pingora's body machinery, the gateway connects to the ttyd itself,
//! sends the rewritten head, reads ttyd's answer and, after a real `101`, takes the
//! browser's connection out of Pingora's HTTP session and copies bytes between the two
//! in a task of its own. A plain connection leaves as its bare socket; a TLS one as
//! the TLS stream over it (unbuffered below rustls: the listener's L4 buffers are off).
//!
//! - An idle terminal holds no buffer of the tunnel's: a direction is read only when
//!   its connection has bytes, into a per-thread scratch buffer that is borrowed only
//!   within one poll, and written on at once. Only bytes the other side cannot take yet
//!   are kept, in a buffer owned by that direction until they are written (and that
//!   direction is not read meanwhile). Under TLS, rustls keeps its own record buffer
//!   (4 KiB) and what it has encrypted but not yet written, which the tunnel flushes.
//! - No end-of-body of the upgrade request is relayed after the `101`, so the tunnel
//!   cannot be ended by a stale one (cloudflare/pingora#946).
//! - Upward bytes pass the same checks as on Pingora's path: each frame's size
//!   (`gateway.max_ws_frame_bytes`) and the first message of a `ttyd -c` target.
//!
//! - A recorded terminal's bytes also pass its [`Recorder`] (both directions, before
//!   they are written on).
//! - The tunnel is the one writer of the browser's socket. Enforcement wakes it
//!   ([`crate::terminals::Ticket::hand_to_tunnel`]); it then passes on the rest of the
//!   ttyd's frame in progress (the ttyd's frame headers are followed for this, not its
//!   payloads), writes its close frame with the reason, and ends. Nothing of the
//!   ttyd's follows the close frame, and none is written once the ttyd sent its own.
//!   A terminal that cannot be closed so within [`CLOSE_GRACE`] (a browser that reads
//!   nothing, a frame that never ends) is cut without one.
//!
//! Pingora's own upgrade path (the `ProxyHttp` body filters) is taken only under the
//! debug-build test hook `TERMGATE_TEST_PINGORA_TUNNEL`, which shows its race.

use std::borrow::Cow;
use std::cell::RefCell;
use std::future::Future;
use std::io::{self, ErrorKind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pingora::http::ResponseHeader;
use pingora::protocols::http::server::Session as ServerSession;
use pingora::protocols::l4::socket::SocketAddr as PeerAddr;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

use super::{first_message, log, ws_frames, Ctx, Proxy, RequestLine};
use crate::head_deadline::HeadDeadline;
use crate::recording::{QueueFull, Recorder};
use crate::state::Gateway;

/// Bytes read from a socket at a time.
const SCRATCH: usize = 64 * 1024;
/// Full reads of bulk output passed on in a row before the browser's side is looked at.
const READS_PER_WAKE: usize = 8;
/// Rounds of both directions in one poll before the task yields to others.
const ROUNDS_PER_POLL: usize = 16;
/// Largest response head accepted from a ttyd.
const MAX_HEAD: usize = 16 * 1024;
/// How long a terminal being closed by enforcement may take to reach a frame boundary
/// and write its close frame before it is cut without one.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

thread_local! {
    /// The one read buffer of each worker thread: held only between a read and the
    /// write that follows it, never across an await.
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// Whether the request's connection can leave Pingora for a tunnel of the gateway's own:
/// HTTP/1 on this gateway's listener, plain or TLS.
pub(super) fn eligible(session: &Session) -> bool {
    downstream(session).is_some() && !session.as_downstream().is_http2()
}

/// The browser's connection, as this gateway's listener accepted it.
fn downstream(session: &Session) -> Option<&HeadDeadline> {
    session
        .as_downstream()
        .stream()
        .and_then(|s| (**s).as_any().downcast_ref::<HeadDeadline>())
}

/// A connection at either end of a tunnel.
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A browser's TLS connection: Pingora's stream, rustls over the TCP socket.
    Tls(pingora::protocols::Stream),
}

impl Socket {
    /// Connects to `addr` and sends `head`. A unix socket connects at once (or not at
    /// all), so its head is written before the socket is registered with the runtime:
    /// no wait for the runtime to report it writable first.
    async fn connect_and_send(addr: &PeerAddr, head: &[u8]) -> io::Result<Socket> {
        let (mut socket, sent) = match addr {
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

    /// Waits until a ttyd's socket has bytes (the upgrade's answer; not for TLS).
    async fn readable(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.readable().await,
            Socket::Unix(s) => s.readable().await,
            Socket::Tls(_) => Err(io::Error::other("not a ttyd's socket")),
        }
    }

    /// Whether what is written may wait in the connection's own buffer until flushed.
    fn buffers(&self) -> bool {
        matches!(self, Socket::Tls(_))
    }

    /// Reads what the connection holds into `buf`. A short read of a socket clears its
    /// readiness (tokio does so on epoll), so the next poll waits for new bytes instead
    /// of making a read that finds none.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut read = ReadBuf::new(buf);
        let polled = match self {
            Socket::Tcp(s) => Pin::new(s).poll_read(cx, &mut read),
            Socket::Unix(s) => Pin::new(s).poll_read(cx, &mut read),
            Socket::Tls(s) => Pin::new(s).poll_read(cx, &mut read),
        };
        polled.map_ok(|()| read.filled().len())
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self {
            Socket::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Tls(s) => Pin::new(s).poll_flush(cx),
            Socket::Tcp(_) | Socket::Unix(_) => Poll::Ready(Ok(())),
        }
    }

    /// Ends a TLS connection with its close_notify, after what rustls still holds;
    /// bounded by [`CLOSE_GRACE`]. A socket is simply closed when dropped.
    async fn close(self) {
        if let Socket::Tls(mut s) = self {
            let _ = pingora_timeout::timeout(CLOSE_GRACE, s.shutdown()).await;
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
            Socket::Tls(_) => Err(io::Error::other("not a ttyd's socket")),
        };
        match read {
            Err(e) if e.kind() == ErrorKind::WouldBlock && short > 0 => Ok(short),
            other => other,
        }
    }

    /// Writes all of `buf`; under TLS, flushed out of rustls too.
    async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.write_all(buf).await,
            Socket::Unix(s) => s.write_all(buf).await,
            Socket::Tls(s) => {
                s.write_all(buf).await?;
                s.flush().await
            }
        }
    }
}

/// The ttyd's answer to the upgrade: its head, and any bytes that came after it.
struct Answer {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    rest: Vec<u8>,
}

/// Reads a response head (bounded by [`MAX_HEAD`]).
async fn read_answer(up: &Socket) -> io::Result<Answer> {
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
        up.readable().await?;
        let mut chunk = [0u8; 2048];
        match up.try_read(&mut chunk) {
            Ok(0) => {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "the ttyd closed before answering",
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
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
async fn read_more(up: &Socket, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    let mut chunk = [0u8; 2048];
    while buf.len() < n {
        up.readable().await?;
        match up.try_read(&mut chunk[..(n - buf.len()).min(2048)]) {
            Ok(0) => break,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes as much of `bytes` as a non-blocking socket takes now.
fn write_now(mut socket: impl io::Write, bytes: &[u8]) -> io::Result<usize> {
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

fn up_error(etype: ErrorType, why: &'static str, e: io::Error) -> Box<Error> {
    let mut err = Error::because(etype, why, e);
    err.esource = pingora::ErrorSource::Upstream;
    err
}

/// Opens the terminal admitted in `ctx` through the gateway's own tunnel. Before the
/// browser's socket is taken, a failure is returned for `request_filter` to answer as
/// a failure to proxy; after it, the terminal is logged here (`ctx.tunnelled`).
pub(super) async fn open(p: &Proxy, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
    let g = &p.g;
    let upstream = ctx.upstream.as_ref().ok_or_else(super::no_upstream)?;
    if ctx.ticket.is_none() {
        return Err(Error::explain(
            ErrorType::InternalError,
            "the terminal websocket holds no slot",
        ));
    }
    let peer = upstream.peer(&p.control_addr, &p.ttyd, ctx.request_id)?;
    let mut head = session.req_header().clone();
    super::upstream::strip_identity(&mut head);
    upstream.rewrite(&mut head, ctx.principal.as_ref(), ctx.token.as_deref())?;
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        head.uri
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .as_bytes(),
    );
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in head.headers.iter() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    let connect_timeout = Duration::from_millis(g.config.gateway.control_timeout_ms);
    let up = pingora_timeout::timeout(
        connect_timeout,
        Socket::connect_and_send(&peer._address, &out),
    )
    .await;
    let up = match up {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(up_error(
                ErrorType::ConnectRefused,
                "connecting to the ttyd and sending the upgrade",
                e,
            ))
        }
        Err(_) => {
            return Err(up_error(
                ErrorType::ConnectTimedout,
                "connecting to the ttyd",
                io::Error::from(ErrorKind::TimedOut),
            ))
        }
    };
    let answer_timeout = Duration::from_millis(g.config.gateway.header_timeout_ms);
    let answer = match pingora_timeout::timeout(answer_timeout, read_answer(&up)).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => {
            return Err(up_error(
                ErrorType::ReadError,
                "reading the ttyd's answer",
                e,
            ))
        }
        Err(_) => {
            return Err(up_error(
                ErrorType::ReadTimedout,
                "reading the ttyd's answer",
                io::Error::from(ErrorKind::TimedOut),
            ))
        }
    };

    let record = match upstream {
        super::Upstream::Ttyd(t) => t.record,
        super::Upstream::Control(_) => Default::default(),
    };
    if answer.status == 101
        && !record.is_off()
        && answer
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("sec-websocket-extensions"))
    {
        // The extension was not asked for: frames could not be read for the recording.
        return Err(up_error(
            ErrorType::InvalidHTTPHeader,
            "the ttyd negotiated a websocket extension on a recorded terminal",
            io::Error::from(ErrorKind::InvalidData),
        ));
    }
    let mut resp = ResponseHeader::build(answer.status, Some(answer.headers.len() + 5))?;
    for (name, value) in &answer.headers {
        resp.append_header(name.clone(), value.as_slice())?;
    }
    super::decorate(&mut resp, ctx)?;
    if answer.status != 101 {
        // Not upgraded: Pingora answers it, with the body the ttyd sent (its length
        // as declared, bounded; ttyd's refusals are short).
        let mut body = answer.rest;
        let declared = answer
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<usize>().ok())
            .filter(|n| *n <= MAX_HEAD);
        if let Some(n) = declared {
            let _ = pingora_timeout::timeout(answer_timeout, read_more(&up, &mut body, n)).await;
            body.truncate(n);
        }
        resp.remove_header("transfer-encoding");
        resp.insert_header("Content-Length", body.len().to_string())?;
        resp.insert_header("Connection", "close")?;
        session.set_keepalive(None);
        session.write_response_header(Box::new(resp), false).await?;
        session.write_response_body(Some(body.into()), true).await?;
        return Ok(());
    }

    let mut recorder = match (record.is_off(), ctx.session) {
        (false, Some(id)) => {
            let input = record == policy::feed::Recording::OutputAndInput;
            let r = g.recordings.start(id, input).map_err(|e| {
                Error::because(ErrorType::InternalError, "starting the recording", e)
            })?;
            Some(r)
        }
        _ => None,
    };
    if let Some(r) = recorder.as_mut() {
        if r.downward(&answer.rest).is_err() {
            return Err(Error::explain(
                ErrorType::InternalError,
                "the recording could not take the terminal's first bytes",
            ));
        }
    }

    // Upgraded: from here on the terminal is the tunnel's, and logged by it.
    let line = RequestLine {
        method: session.req_header().method.to_string(),
        path: session.req_header().uri.path().to_owned(),
        status: 101,
    };
    let mut ctx = std::mem::replace(ctx, p.new_ctx_tunnelled());
    // Not needed past the upgrade (enforcement keys on its hash): not kept for the
    // terminal's life.
    ctx.token = None;
    let fail = |mut ctx: Ctx, why: String| {
        log(&g.metrics, &line, Some(&why), &ctx);
        ctx.ticket = None;
    };
    let mut reply = Vec::with_capacity(256);
    reply.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
    for (name, value) in resp.headers.iter() {
        reply.extend_from_slice(name.as_str().as_bytes());
        reply.extend_from_slice(b": ");
        reply.extend_from_slice(value.as_bytes());
        reply.extend_from_slice(b"\r\n");
    }
    reply.extend_from_slice(b"\r\n");
    reply.extend_from_slice(&answer.rest);
    ctx.bytes_down += answer.rest.len() as u64;
    // A plain socket takes the 101 while it is still Pingora's (taking it out costs
    // system calls of its own); what it did not take at once, and a TLS connection's
    // whole 101, is written once the connection is the tunnel's.
    let written = match downstream(session) {
        Some(d) if d.is_plain_tcp() => d.with_tcp(|socket| write_now(socket, &reply)),
        Some(_) => Ok(0),
        None => Err(io::Error::other(
            "not a connection of this gateway's listener",
        )),
    };
    let n = match written {
        Ok(n) => n,
        Err(e) => {
            session.set_keepalive(None);
            fail(ctx, format!("writing the 101: {e}"));
            return Ok(());
        }
    };
    let mut down = match take_downstream(session) {
        Ok(down) => down,
        Err(e) => {
            session.set_keepalive(None);
            fail(ctx, format!("taking the browser's connection: {e}"));
            return Ok(());
        }
    };
    if let Err(e) = down.write_all(&reply[n..]).await {
        fail(ctx, format!("writing the 101: {e}"));
        return Ok(());
    }
    // The 101 is out: from here on enforcement wakes the tunnel to close.
    let wake = Arc::new(Notify::new());
    let handed = match &ctx.ticket {
        Some(t) => t.hand_to_tunnel(Arc::clone(&wake)),
        None => Err(io::Error::other("the terminal websocket holds no slot")),
    };
    if let Err(e) = handed {
        fail(
            ctx,
            format!("cannot keep the terminal for enforcement: {e}"),
        );
        return Ok(());
    }
    let mut frames_down = ws_frames::Boundaries::default();
    frames_down.read(&answer.rest);
    let mut tunnel = Tunnel {
        ctx,
        g: Arc::clone(g),
        line,
        flow: Flow::default(),
        frames_down,
        woken: Box::pin(wake.notified_owned()),
        closing: None,
        recorder,
        down,
        up,
    };
    tokio::spawn(async move {
        let error = tunnel.copy().await.err();
        tunnel.finish(error.as_deref()).close().await;
    });
    Ok(())
}

/// Takes the browser's connection out of Pingora's session, leaving a stand-in that
/// Pingora then finishes as a request already answered: an empty in-memory stream
/// (reads find its end at once; no descriptor, no registration). A plain connection
/// leaves as its bare socket, a TLS one as Pingora's TLS stream.
fn take_downstream(session: &mut Session) -> io::Result<Socket> {
    let stand_in: pingora::protocols::Stream = Box::new(std::io::Cursor::new(Vec::<u8>::new()));
    let taken = std::mem::replace(
        &mut *session.downstream_session,
        ServerSession::new_http1(stand_in),
    );
    let ServerSession::H1(h1) = taken else {
        return Err(io::Error::other("not an HTTP/1 connection"));
    };
    let stream = h1
        .into_inner()
        .into_any()
        .downcast::<HeadDeadline>()
        .map_err(|_| io::Error::other("not a connection of this gateway's listener"))?;
    if stream.is_plain_tcp() {
        Ok(Socket::Tcp(TcpStream::from_std(stream.into_tcp()?)?))
    } else {
        Ok(Socket::Tls(stream.into_stream()))
    }
}

/// A running tunnel.
struct Tunnel {
    ctx: Ctx,
    g: Arc<Gateway>,
    line: RequestLine,
    flow: Flow,
    /// Where the ttyd's frames to the browser begin and end.
    frames_down: ws_frames::Boundaries,
    /// Ready once enforcement woke the tunnel to close (a permit stored before the
    /// first poll counts).
    woken: Pin<Box<OwnedNotified>>,
    /// Set once enforcement closes the terminal.
    closing: Option<Closing>,
    /// Set for a recorded terminal.
    recorder: Option<Recorder>,
    down: Socket,
    up: Socket,
}

/// Where the bytes of a tunnel are.
#[derive(Default)]
struct Flow {
    /// Bytes read from the browser that the ttyd could not take yet.
    up_pending: Vec<u8>,
    /// Bytes read from the ttyd that the browser could not take yet.
    down_pending: Vec<u8>,
    /// Bytes the browser's connection took into its own buffer (TLS) and has not
    /// written yet.
    down_unflushed: bool,
    up_eof: bool,
    down_eof: bool,
}

impl Flow {
    /// Writes to the browser what it takes now; keeps the rest.
    fn send_down(
        &mut self,
        down: &mut Socket,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> io::Result<()> {
        send(down, cx, bytes, &mut self.down_pending)?;
        self.down_unflushed |= down.buffers();
        Ok(())
    }

    /// Whether everything read from the ttyd is on its way to the browser.
    fn down_written(&self) -> bool {
        self.down_pending.is_empty() && !self.down_unflushed
    }
}

/// A terminal that enforcement is closing.
struct Closing {
    /// Past it, the terminal is cut without a close frame.
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The close frame is written, or queued in `down_pending`, or not needed (the
    /// ttyd sent its own).
    framed: bool,
}

/// Why the copy loop ended early.
type Failure = String;

impl Tunnel {
    /// Copies until the ttyd ends the terminal (or enforcement closes it), or either
    /// side fails.
    async fn copy(&mut self) -> Result<(), Failure> {
        std::future::poll_fn(|cx| self.poll_copy(cx)).await
    }

    /// One wake-up of the tunnel: moves bytes both ways until neither side can move
    /// more (every connection it waits on then holds this task's waker), or until
    /// [`ROUNDS_PER_POLL`] rounds moved bytes (then it yields, woken again at once).
    fn poll_copy(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Failure>> {
        let Tunnel {
            ctx,
            g,
            flow,
            frames_down,
            woken,
            closing,
            recorder,
            down,
            up,
            ..
        } = self;
        let max = g.config.gateway.max_ws_frame_bytes;
        for _ in 0..ROUNDS_PER_POLL {
            if let Some(c) = closing.as_mut() {
                if !c.framed && frames_down.at_boundary() {
                    c.framed = true;
                    if !frames_down.ttyd_closed() {
                        let why = ctx.ticket.as_ref().and_then(|t| t.closed());
                        let frame = crate::terminals::close_frame(
                            why.map_or("termgate: terminal closed", |w| w.message()),
                        );
                        flow.send_down(down, cx, &frame)
                            .map_err(|e| format!("browser: {e}"))?;
                    }
                }
                if c.framed && flow.down_written() {
                    return Poll::Ready(Ok(()));
                }
                if c.deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(
                        "closed by enforcement without a close frame: the \
                                            browser took nothing, or the ttyd's frame did not end"
                            .into(),
                    ));
                }
            }
            // Either side gone (the ttyd done, the browser away) ends the terminal once
            // what it sent is passed on: a websocket has no use for a half-closed
            // connection.
            if (flow.up_eof && flow.down_written()) || (flow.down_eof && flow.up_pending.is_empty())
            {
                return Poll::Ready(Ok(()));
            }
            let open = closing.is_none();
            if open && woken.as_mut().poll(cx).is_ready() {
                // What the browser sent no longer goes anywhere.
                flow.up_pending = Vec::new();
                *closing = Some(Closing {
                    deadline: Box::pin(tokio::time::sleep(CLOSE_GRACE)),
                    framed: false,
                });
                continue;
            }
            let mut moved = false;
            // What waits is written before anything new is read.
            if !flow.down_pending.is_empty() {
                let n =
                    flush(down, cx, &mut flow.down_pending).map_err(|e| format!("browser: {e}"))?;
                flow.down_unflushed |= n > 0 && down.buffers();
                moved |= n > 0;
            }
            if flow.down_unflushed && flow.down_pending.is_empty() {
                if let Poll::Ready(r) = down.poll_flush(cx) {
                    r.map_err(|e| format!("browser: {e}"))?;
                    flow.down_unflushed = false;
                    moved = true;
                }
            }
            if open && !flow.up_pending.is_empty() {
                let n = flush(up, cx, &mut flow.up_pending).map_err(|e| format!("ttyd: {e}"))?;
                moved |= n > 0;
            }
            if !flow.down_eof && flow.up_pending.is_empty() {
                moved |= if open {
                    pump_up(cx, ctx, flow, recorder.as_mut(), frames_down, down, up, max)?
                } else {
                    drain(cx, down, flow)?
                };
            }
            let read_up = !flow.up_eof
                && flow.down_pending.is_empty()
                && closing.as_ref().is_none_or(|c| !c.framed);
            if read_up {
                let closing = !open;
                moved |= pump_down(
                    cx,
                    ctx,
                    flow,
                    recorder.as_mut(),
                    frames_down,
                    closing,
                    down,
                    up,
                )?;
            }
            if !moved {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Writes the access and audit lines and frees the slot, and closes the ttyd's
    /// socket; the browser's connection is handed back to be closed.
    fn finish(mut self, error: Option<&str>) -> Socket {
        log(&self.g.metrics, &self.line, error, &self.ctx);
        self.ctx.ticket = None;
        self.down
    }
}

/// Browser → ttyd: one read, checked, written on. Whether anything moved.
#[allow(clippy::too_many_arguments)]
fn pump_up(
    cx: &mut Context<'_>,
    ctx: &mut Ctx,
    flow: &mut Flow,
    recorder: Option<&mut Recorder>,
    frames_down: &ws_frames::Boundaries,
    down: &mut Socket,
    up: &mut Socket,
    max: u64,
) -> Result<bool, Failure> {
    SCRATCH_BUF.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let n = match down.poll_read(cx, &mut scratch) {
            Poll::Pending => return Ok(false),
            Poll::Ready(Ok(0)) => {
                flow.down_eof = true;
                return Ok(true);
            }
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => return Err(format!("browser: {e}")),
        };
        let checked = upward(ctx, &scratch[..n], max)?;
        if let Some(r) = recorder {
            // As the browser sent them (before a target's token is written in).
            if r.upward(&scratch[..n]).is_err() {
                return Err(behind(cx, ctx, flow, down, frames_down.at_boundary()));
            }
        }
        let Some(bytes) = checked else {
            return Ok(true);
        };
        ctx.bytes_up += bytes.len() as u64;
        send(up, cx, &bytes, &mut flow.up_pending).map_err(|e| format!("ttyd: {e}"))?;
        Ok(true)
    })
}

/// ttyd → browser: reads written on at once, while the ttyd has more (a full read)
/// and the browser takes it all, at most [`READS_PER_WAKE`] times. While `closing`,
/// only the rest of the frame in progress is passed on; what follows it is dropped.
/// Whether anything moved.
#[allow(clippy::too_many_arguments)]
fn pump_down(
    cx: &mut Context<'_>,
    ctx: &mut Ctx,
    flow: &mut Flow,
    mut recorder: Option<&mut Recorder>,
    frames_down: &mut ws_frames::Boundaries,
    closing: bool,
    down: &mut Socket,
    up: &mut Socket,
) -> Result<bool, Failure> {
    SCRATCH_BUF.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let mut moved = false;
        for _ in 0..READS_PER_WAKE {
            let n = match up.poll_read(cx, &mut scratch) {
                Poll::Pending => return Ok(moved),
                Poll::Ready(Ok(0)) => {
                    flow.up_eof = true;
                    return Ok(true);
                }
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Err(format!("ttyd: {e}")),
            };
            moved = true;
            let boundary = frames_down.at_boundary();
            let n = if closing {
                frames_down.read_to_boundary(&scratch[..n])
            } else {
                frames_down.read(&scratch[..n]);
                n
            };
            if let Some(r) = recorder.as_deref_mut() {
                // Recorded before the browser sees it, or not passed on at all.
                if let Err(QueueFull) = r.downward(&scratch[..n]) {
                    return Err(behind(cx, ctx, flow, down, boundary));
                }
            }
            ctx.bytes_down += n as u64;
            flow.send_down(down, cx, &scratch[..n])
                .map_err(|e| format!("browser: {e}"))?;
            if n < scratch.len()
                || !flow.down_pending.is_empty()
                || (closing && frames_down.at_boundary())
            {
                break;
            }
        }
        Ok(moved)
    })
}

/// Browser → nowhere, while enforcement closes the terminal: what the browser sends is
/// read (so that closing its socket resets nothing) and dropped. Whether anything moved.
fn drain(cx: &mut Context<'_>, down: &mut Socket, flow: &mut Flow) -> Result<bool, Failure> {
    SCRATCH_BUF.with(
        |scratch| match down.poll_read(cx, &mut scratch.borrow_mut()) {
            Poll::Pending => Ok(false),
            Poll::Ready(Ok(0)) => {
                flow.down_eof = true;
                Ok(true)
            }
            Poll::Ready(Ok(_)) => Ok(true),
            Poll::Ready(Err(e)) => Err(format!("browser: {e}")),
        },
    )
}

/// A recording whose writer fell behind (`gateway.recording_queue`): the terminal is
/// closed rather than recorded incompletely. The browser is told why in a close frame
/// when one can be written between frames (`boundary`: the bytes passed on so far end
/// a frame), so that ttyd's page does not reconnect.
fn behind(
    cx: &mut Context<'_>,
    ctx: &mut Ctx,
    flow: &mut Flow,
    down: &mut Socket,
    boundary: bool,
) -> Failure {
    ctx.reason = "recording_queue_full";
    if boundary && flow.down_pending.is_empty() {
        let frame =
            crate::terminals::close_frame("termgate: the recording fell behind; terminal closed");
        // Best effort: what the browser does not take now is dropped with the terminal
        // (under TLS, rustls's buffer is flushed when the connection is closed).
        let _ = flow.send_down(down, cx, &frame);
    }
    "the recording's writer fell behind (gateway.recording_queue): terminal closed rather than recorded incompletely".into()
}

/// The checks of bytes going up: each frame's size, and a `ttyd -c` target's first
/// message (held until whole, then sent with its token). `None`: nothing to send yet.
fn upward<'a>(ctx: &mut Ctx, bytes: &'a [u8], max: u64) -> Result<Option<Cow<'a, [u8]>>, Failure> {
    if let Some(frames) = ctx.frames.as_mut() {
        if let Err(ws_frames::TooLarge(len)) = frames.feed(bytes, max) {
            ctx.reason = "ws_frame_too_large";
            return Err(format!(
                "a websocket frame of {len} bytes is over gateway.max_ws_frame_bytes"
            ));
        }
    }
    let Some((token, pending)) = ctx.first_message.as_mut() else {
        return Ok(Some(Cow::Borrowed(bytes)));
    };
    pending.extend_from_slice(bytes);
    match first_message::inject_auth_token(pending, token) {
        first_message::FirstMessage::NeedMore
            if pending.len() <= first_message::MAX_FIRST_MESSAGE + 16 =>
        {
            Ok(None)
        }
        first_message::FirstMessage::NeedMore => {
            Err("the first websocket message is too large".into())
        }
        first_message::FirstMessage::Rewritten(out) => {
            ctx.first_message = None;
            Ok(Some(Cow::Owned(out)))
        }
        first_message::FirstMessage::Invalid(why) => Err(why.into()),
    }
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
fn send(
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
fn flush(peer: &mut Socket, cx: &mut Context<'_>, pending: &mut Vec<u8>) -> io::Result<usize> {
    let done = write_some(peer, cx, pending)?;
    if done == pending.len() {
        *pending = Vec::new();
    } else {
        pending.drain(..done);
    }
    Ok(done)
}

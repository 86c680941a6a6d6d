//! A fake upstream that records every HTTP/1.1 request head it receives and answers
//! websocket upgrades with a proper `101`, everything else with a small JSON `200`
//! (or, on demand, a fixed error status).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine as _;

use crate::term::{Stream, Target};
use crate::ttyd::private_dir;

/// The GUID RFC 6455 appends to the client key.
const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The largest request head read (larger heads are answered 431).
const MAX_HEAD: usize = 64 * 1024;

/// One request head as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// Method, e.g. `GET`.
    pub method: String,
    /// Request target, e.g. `/ws?arg=x`.
    pub target: String,
    /// Headers in arrival order, names and values as sent (values trimmed).
    pub headers: Vec<(String, String)>,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name` (case-insensitive), in arrival order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Asserts what a terminal request may carry to ttyd of who sent it: `X-Termgate-User`
    /// exactly once, as `user`, and no `Cookie`, `Authorization` or other
    /// `X-Termgate-*` header (`what` names the request in a failure).
    pub fn assert_only_the_verified_user(&self, user: &str, what: &str) {
        assert_eq!(self.header_all("x-termgate-user"), vec![user], "{what}");
        for (k, _) in &self.headers {
            let k = k.to_ascii_lowercase();
            assert!(
                k != "cookie" && k != "authorization",
                "{k} reached the upstream on {what}"
            );
            assert!(
                !k.starts_with("x-termgate-") || k == "x-termgate-user",
                "{k} reached the upstream on {what}"
            );
        }
    }

    /// Whether this is a websocket upgrade (`Upgrade: websocket`).
    pub fn is_upgrade(&self) -> bool {
        self.header("upgrade")
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
    }
}

#[derive(Debug)]
enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// State shared with the server threads.
#[derive(Default)]
struct Inner {
    requests: Mutex<Vec<RecordedRequest>>,
    open: Mutex<Vec<Stream>>,
    connections: AtomicUsize,
    status: AtomicU16,
    stop: AtomicBool,
}

/// A recording fake upstream on a unix socket or a loopback TCP port; stops on drop
/// (closing the websockets it holds).
///
/// After a `101` it speaks no websocket frames: it discards whatever the client sends
/// until the client closes, so a client's close handshake gets no answer.
pub struct RecordingUpstream {
    inner: Arc<Inner>,
    target: Target,
    dir: Option<tempfile::TempDir>,
    acceptor: Option<JoinHandle<()>>,
}

impl RecordingUpstream {
    /// Listens on `<fresh 0700 dir>/upstream.sock`.
    pub fn unix() -> RecordingUpstream {
        let dir = private_dir("tg-upstream.");
        let path = dir.path().join("upstream.sock");
        let listener = UnixListener::bind(&path).expect("bind recording upstream socket");
        Self::serve(Listener::Unix(listener), Target::Unix(path), Some(dir))
    }

    /// Listens on a free port of 127.0.0.1.
    pub fn tcp() -> RecordingUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind recording upstream port");
        let addr = listener.local_addr().expect("recording upstream address");
        Self::serve(Listener::Tcp(listener), Target::Tcp(addr), None)
    }

    fn serve(
        listener: Listener,
        target: Target,
        dir: Option<tempfile::TempDir>,
    ) -> RecordingUpstream {
        let inner = Arc::new(Inner::default());
        let acceptor = {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name("recording-upstream".into())
                .spawn(move || loop {
                    let accepted = match &listener {
                        Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
                        Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
                    };
                    if inner.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = accepted else { continue };
                    inner.connections.fetch_add(1, Ordering::SeqCst);
                    let inner = Arc::clone(&inner);
                    let spawned = std::thread::Builder::new()
                        .name("recording-upstream-conn".into())
                        .spawn(move || {
                            if let Err(e) = handle(stream, &inner) {
                                eprintln!("recording upstream: {e}");
                            }
                        });
                    if let Err(e) = spawned {
                        eprintln!("recording upstream: spawn connection thread: {e}");
                    }
                })
                .expect("spawn recording upstream thread")
        };
        RecordingUpstream {
            inner,
            target,
            dir,
            acceptor: Some(acceptor),
        }
    }

    /// From now on answer every request (upgrades too) with `status` and a small JSON
    /// body; `0` restores the normal answers.
    pub fn answer_status(&self, status: u16) {
        self.inner.status.store(status, Ordering::SeqCst);
    }

    /// The request heads received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner
            .requests
            .lock()
            .expect("recorded requests lock")
            .clone()
    }

    /// How many connections were accepted so far.
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Where a client connects.
    pub fn target(&self) -> Target {
        self.target.clone()
    }

    /// The socket path of a unix upstream.
    pub fn socket_path(&self) -> Option<&Path> {
        match &self.target {
            Target::Unix(p) => Some(p),
            Target::Tcp(_) | Target::Tls(..) => None,
        }
    }

    /// The address of a TCP upstream.
    pub fn addr(&self) -> Option<SocketAddr> {
        match &self.target {
            Target::Tcp(a) | Target::Tls(a, _) => Some(*a),
            Target::Unix(_) => None,
        }
    }

    /// The port of a TCP upstream.
    pub fn port(&self) -> Option<u16> {
        self.addr().map(|a| a.port())
    }
}

impl Drop for RecordingUpstream {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor so it sees the flag.
        let _ = match &self.target {
            Target::Unix(p) => UnixStream::connect(p).map(drop),
            Target::Tcp(a) | Target::Tls(a, _) => {
                std::net::TcpStream::connect_timeout(a, Duration::from_secs(1)).map(drop)
            }
        };
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for s in self
            .inner
            .open
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
        {
            s.shutdown();
        }
        drop(self.dir.take());
    }
}

/// `base64(sha1(key + GUID))`, the `Sec-WebSocket-Accept` for a client key.
pub fn websocket_accept(key: &str) -> String {
    let digest = sha1_smol::Sha1::from(format!("{}{WS_GUID}", key.trim()))
        .digest()
        .bytes();
    base64::engine::general_purpose::STANDARD.encode(digest)
}

/// Reads one request head, records it, answers; holds upgraded connections open until
/// the peer closes.
fn handle(mut stream: Stream, inner: &Inner) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let Some(head) = read_head(&mut stream)? else {
        let _ = stream.write_all(&plain(431, "Request Header Fields Too Large"));
        return Ok(());
    };
    let Some(request) = parse_head(&head) else {
        let _ = stream.write_all(&plain(400, "Bad Request"));
        return Ok(());
    };
    inner
        .requests
        .lock()
        .expect("recorded requests lock")
        .push(request.clone());

    let status = inner.status.load(Ordering::SeqCst);
    if status != 0 {
        stream.write_all(&plain(status, reason(status)))?;
        stream.shutdown();
        return Ok(());
    }
    if !request.is_upgrade() {
        stream.write_all(&plain(200, "OK"))?;
        stream.shutdown();
        return Ok(());
    }
    let Some(key) = request.header("sec-websocket-key") else {
        stream.write_all(&plain(400, "Bad Request"))?;
        return Ok(());
    };
    let mut answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
        websocket_accept(key)
    );
    let offers_tty = request
        .header_all("sec-websocket-protocol")
        .iter()
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == "tty");
    if offers_tty {
        answer.push_str("Sec-WebSocket-Protocol: tty\r\n");
    }
    answer.push_str("\r\n");
    stream.write_all(answer.as_bytes())?;
    inner
        .open
        .lock()
        .expect("upstream connection list")
        .push(stream.try_clone()?);

    // Hold the connection until the peer closes it (or the upstream is dropped).
    stream.set_read_timeout(None)?;
    let mut sink = [0u8; 4096];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(()),
        }
    }
}

/// Reads up to and including the blank line; `None` when the head is too large.
/// Reads byte by byte so nothing past the head is consumed.
fn read_head(stream: &mut Stream) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return Ok(None);
        }
        match stream.read(&mut byte)? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside the request head",
                ))
            }
            _ => head.push(byte[0]),
        }
    }
    Ok(Some(head))
}

/// Splits a head into request line and headers.
fn parse_head(head: &[u8]) -> Option<RecordedRequest> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        })
        .collect();
    Some(RecordedRequest {
        method,
        target,
        headers,
    })
}

/// A complete `Connection: close` response with a small JSON body.
fn plain(status: u16, reason: &str) -> Vec<u8> {
    let body =
        serde_json::json!({"status": status, "reason": reason, "from": "recording-upstream"})
            .to_string();
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reason phrases for the statuses tests use.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        407 => "Proxy Authentication Required",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_head, websocket_accept};

    #[test]
    fn accept_key_matches_rfc_6455_example() {
        assert_eq!(
            websocket_accept("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn head_is_split_into_line_and_headers() {
        let r = parse_head(b"GET /ws?arg=x HTTP/1.1\r\nHost: a\r\nX-Test:  1 \r\n\r\n")
            .expect("parses");
        assert_eq!((r.method.as_str(), r.target.as_str()), ("GET", "/ws?arg=x"));
        assert_eq!(r.header("x-test"), Some("1"));
        assert_eq!(r.headers.len(), 2);
    }
}

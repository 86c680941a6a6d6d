//! A blocking websocket client that speaks ttyd's terminal protocol (1.7.x), the way
//! the browser page does.
//!
//! A background thread owns the socket: it keeps reading (so pings are answered even
//! while a test is busy elsewhere), collects output, titles and preferences, and writes
//! what the test sends. The test side waits on that state with deadlines.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use tungstenite::handshake::HandshakeError;
use tungstenite::http::{HeaderName, HeaderValue};
use tungstenite::{client::IntoClientRequest, Message, WebSocket};

/// How long `connect` may take (TCP connect plus the HTTP upgrade).
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);
/// The socket read timeout of the pump thread: how late a send or a stop may be noticed.
const POLL: Duration = Duration::from_millis(20);
/// The window size announced on connect.
const INITIAL_SIZE: (u16, u16) = (80, 24);

/// Where a websocket server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A unix socket path.
    Unix(PathBuf),
    /// A TLS listener, trusted through its pinned certificate.
    Tls(SocketAddr, crate::tls::Pin),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp(a) => write!(f, "tcp:{a}"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Tls(a, _) => write!(f, "tls:{a}"),
        }
    }
}

impl Target {
    /// Opens a stream to the target (with `deadline` as TCP connect timeout, and the
    /// TLS handshake's).
    pub fn connect(&self, deadline: Duration) -> io::Result<Stream> {
        match self {
            Target::Tcp(a) => TcpStream::connect_timeout(a, deadline).map(Stream::Tcp),
            Target::Unix(p) => UnixStream::connect(p).map(Stream::Unix),
            Target::Tls(a, pin) => pin
                .connect(*a, deadline)
                .map(|s| Stream::Tls(Arc::new(Mutex::new(s)))),
        }
    }
}

/// A connected TCP, unix or TLS stream.
#[derive(Debug)]
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix socket.
    Unix(UnixStream),
    /// TLS over TCP; one session behind every handle (a refusal's body is read through
    /// a second one).
    Tls(Arc<Mutex<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>>),
}

impl Stream {
    /// Sets the read timeout of the underlying socket.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tls(s) => tls(s).sock.set_read_timeout(t),
        }
    }

    /// A second handle on the same socket.
    pub fn try_clone(&self) -> io::Result<Stream> {
        match self {
            Stream::Tcp(s) => s.try_clone().map(Stream::Tcp),
            Stream::Unix(s) => s.try_clone().map(Stream::Unix),
            Stream::Tls(s) => Ok(Stream::Tls(Arc::clone(s))),
        }
    }

    /// The socket's descriptor.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(t) => t.as_raw_fd(),
            Stream::Unix(u) => u.as_raw_fd(),
            Stream::Tls(t) => tls(t).sock.as_raw_fd(),
        }
    }

    /// Shuts the socket down in both directions (errors ignored).
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tls(s) => tls(s).sock.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => tls(s).read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => tls(s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
            Stream::Tls(s) => tls(s).flush(),
        }
    }
}

type TlsSession = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// The TLS session behind a handle (a poisoned lock still holds a usable session).
fn tls(s: &Mutex<TlsSession>) -> MutexGuard<'_, TlsSession> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Why [`Terminal::connect`] failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The socket could not be opened.
    Io(io::Error),
    /// The server answered the upgrade with a non-101 HTTP response.
    Refused {
        /// HTTP status code.
        status: u16,
        /// Response headers (names lower-case).
        headers: Vec<(String, String)>,
        /// Response body as text.
        body: String,
    },
    /// Anything else: the connection closed mid-handshake, a bad accept key, a timeout.
    Handshake(String),
}

impl ConnectError {
    /// The HTTP status when the server refused the upgrade.
    pub fn status(&self) -> Option<u16> {
        match self {
            ConnectError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The response body when the server refused the upgrade.
    pub fn body(&self) -> Option<&str> {
        match self {
            ConnectError::Refused { body, .. } => Some(body),
            _ => None,
        }
    }

    /// The response body parsed as JSON (`None` when refused without a JSON body, or
    /// not refused at all).
    pub fn json(&self) -> Option<Value> {
        self.body().and_then(|b| serde_json::from_str(b).ok())
    }

    /// A response header (case-insensitive) when the server refused the upgrade.
    pub fn header(&self, name: &str) -> Option<&str> {
        match self {
            ConnectError::Refused { headers, .. } => headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "connect: {e}"),
            ConnectError::Refused { status, body, .. } => {
                write!(f, "upgrade refused with {status}: {body}")
            }
            ConnectError::Handshake(m) => write!(f, "websocket handshake: {m}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// What the pump thread has seen so far.
#[derive(Debug, Default)]
struct State {
    output: Vec<u8>,
    server_title: Option<String>,
    preferences: Option<Value>,
    closed_at: Option<Instant>,
    close_reason: Option<String>,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// A request to the pump thread, answered on the enclosed channel.
enum Command {
    Send(Message, Sender<Result<(), String>>),
    Close(Sender<Result<(), String>>),
}

/// A browser-like ttyd terminal over one websocket.
pub struct Terminal {
    shared: Shared,
    commands: Option<Sender<Command>>,
    pump: Option<JoinHandle<()>>,
}

impl fmt::Debug for Terminal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Terminal")
            .field("state", &*self.state())
            .finish()
    }
}

impl Terminal {
    /// Opens a websocket to `target` at `path_and_query` (e.g. `/ws?arg=NAME`), offering
    /// subprotocol `tty` and sending `headers` (a `Host` given here replaces the default
    /// one), then sends ttyd's initial `{"AuthToken":"","columns":80,"rows":24}` message.
    pub fn connect(
        target: Target,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Result<Terminal, ConnectError> {
        let (ws, _response) = handshake(&target, path_and_query, headers)?;
        let shared: Shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let (tx, rx) = mpsc::channel();
        let pump_state = Arc::clone(&shared);
        let pump = std::thread::Builder::new()
            .name("terminal-pump".into())
            .spawn(move || pump(ws, rx, pump_state))
            .map_err(|e| ConnectError::Handshake(format!("spawn pump thread: {e}")))?;
        let term = Terminal {
            shared,
            commands: Some(tx),
            pump: Some(pump),
        };
        let (columns, rows) = INITIAL_SIZE;
        let hello =
            serde_json::json!({"AuthToken": "", "columns": columns, "rows": rows}).to_string();
        term.send(Message::Binary(hello.into_bytes().into()))
            .map_err(|e| ConnectError::Handshake(format!("send initial message: {e}")))?;
        Ok(term)
    }

    /// Types `bytes` (ttyd command `'0'`). Err when the websocket is closed.
    pub fn send_input(&self, bytes: &[u8]) -> Result<(), String> {
        let mut frame = Vec::with_capacity(bytes.len() + 1);
        frame.push(b'0');
        frame.extend_from_slice(bytes);
        self.send(Message::Binary(frame.into()))
    }

    /// Announces a new window size (ttyd command `'1'`). Err when the websocket is closed.
    pub fn resize(&self, columns: u16, rows: u16) -> Result<(), String> {
        let mut frame = b"1".to_vec();
        frame.extend_from_slice(
            serde_json::json!({"columns": columns, "rows": rows})
                .to_string()
                .as_bytes(),
        );
        self.send(Message::Binary(frame.into()))
    }

    /// Sends a websocket ping carrying `payload`. Err when the websocket is closed.
    pub fn ping(&self, payload: &[u8]) -> Result<(), String> {
        self.send(Message::Ping(payload.to_vec().into()))
    }

    /// Waits until the output so far contains `needle` and returns all of it; Err with
    /// the output so far (and why) on timeout or when the websocket closed first.
    pub fn read_until(&self, needle: &str, deadline: Duration) -> Result<String, String> {
        let end = Instant::now() + deadline;
        let mut st = self.state();
        loop {
            let text = String::from_utf8_lossy(&st.output).into_owned();
            if text.contains(needle) {
                return Ok(text);
            }
            if let Some(reason) = &st.close_reason {
                return Err(format!(
                    "closed ({reason}) before {needle:?} appeared; output so far:\n{text}"
                ));
            }
            let now = Instant::now();
            if now >= end {
                return Err(format!(
                    "no {needle:?} within {deadline:?}; output so far:\n{text}"
                ));
            }
            st = self
                .shared
                .1
                .wait_timeout(st, end - now)
                .expect("terminal state lock")
                .0;
        }
    }

    /// All output received so far (lossy UTF-8).
    pub fn output_so_far(&self) -> String {
        String::from_utf8_lossy(&self.state().output).into_owned()
    }

    /// Forgets the output received so far, so the next [`Terminal::read_until`] only
    /// sees what arrives from now on.
    pub fn clear_output(&self) {
        self.state().output.clear();
    }

    /// Waits until the server closed the websocket (or the socket hit EOF or an error);
    /// returns how long that took from this call (zero when it was already closed).
    /// Err, with the output so far, when still open at the deadline.
    pub fn wait_closed(&self, deadline: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        let end = start + deadline;
        let mut st = self.state();
        loop {
            if let Some(at) = st.closed_at {
                return Ok(at.saturating_duration_since(start));
            }
            let now = Instant::now();
            if now >= end {
                return Err(format!(
                    "still open after {deadline:?}; output so far:\n{}",
                    String::from_utf8_lossy(&st.output)
                ));
            }
            st = self
                .shared
                .1
                .wait_timeout(st, end - now)
                .expect("terminal state lock")
                .0;
        }
    }

    /// When the websocket closed, if it has.
    pub fn closed_at(&self) -> Option<Instant> {
        self.state().closed_at
    }

    /// Whether the websocket has closed.
    pub fn is_closed(&self) -> bool {
        self.state().closed_at.is_some()
    }

    /// Why the websocket closed (close frame code and reason, EOF, or an I/O error).
    pub fn close_reason(&self) -> Option<String> {
        self.state().close_reason.clone()
    }

    /// The window title as the ttyd page shows it: the `titleFixed` preference when the
    /// server set one, otherwise the last title message (`'1'`) received.
    pub fn title(&self) -> Option<String> {
        let st = self.state();
        st.preferences
            .as_ref()
            .and_then(|p| p.get("titleFixed"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| st.server_title.clone())
    }

    /// The last title message (`'1'`) as sent by the server (ttyd: `<command> (<host>)`).
    pub fn server_title(&self) -> Option<String> {
        self.state().server_title.clone()
    }

    /// The client preferences (`'2'`) the server sent, e.g. `{"titleFixed":"termgate"}`.
    pub fn preferences(&self) -> Option<Value> {
        self.state().preferences.clone()
    }

    /// Waits until the title (see [`Terminal::title`]) is known, up to `deadline`.
    pub fn wait_title(&self, deadline: Duration) -> Result<String, String> {
        let end = Instant::now() + deadline;
        loop {
            if let Some(t) = self.title() {
                return Ok(t);
            }
            let st = self.state();
            if st.closed_at.is_some() || Instant::now() >= end {
                return Err(format!(
                    "no title; output so far:\n{}",
                    String::from_utf8_lossy(&st.output)
                ));
            }
            drop(
                self.shared
                    .1
                    .wait_timeout(st, POLL)
                    .expect("terminal state lock"),
            );
        }
    }

    /// Sends a close frame, waits (up to 5 s) for the server's close, and stops the pump.
    pub fn close(mut self) {
        if let Some(tx) = &self.commands {
            let (rtx, rrx) = mpsc::channel();
            if tx.send(Command::Close(rtx)).is_ok() {
                let _ = rrx.recv_timeout(Duration::from_secs(5));
                let _ = self.wait_closed(Duration::from_secs(5));
            }
        }
        self.stop();
    }

    fn send(&self, msg: Message) -> Result<(), String> {
        if let Some(reason) = &self.state().close_reason {
            return Err(format!("websocket closed: {reason}"));
        }
        let tx = self.commands.as_ref().ok_or("terminal stopped")?;
        let (rtx, rrx) = mpsc::channel();
        tx.send(Command::Send(msg, rtx))
            .map_err(|_| "terminal pump stopped".to_owned())?;
        rrx.recv_timeout(CONNECT_DEADLINE)
            .map_err(|e| format!("terminal pump did not answer: {e}"))?
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.0.lock().expect("terminal state lock")
    }

    fn stop(&mut self) {
        // Dropping the sender tells the pump to shut the socket down and exit.
        self.commands = None;
        if let Some(p) = self.pump.take() {
            let _ = p.join();
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Connects and upgrades, turning tungstenite's failures into [`ConnectError`].
fn handshake(
    target: &Target,
    path_and_query: &str,
    headers: &[(&str, &str)],
) -> Result<(WebSocket<Stream>, tungstenite::handshake::client::Response), ConnectError> {
    let start = Instant::now();
    let authority = match target {
        Target::Tcp(a) | Target::Tls(a, _) => a.to_string(),
        Target::Unix(_) => "localhost".to_owned(),
    };
    let scheme = match target {
        Target::Tls(..) => "wss",
        _ => "ws",
    };
    let mut request = format!("{scheme}://{authority}{path_and_query}")
        .into_client_request()
        .map_err(|e| ConnectError::Handshake(format!("request for {path_and_query:?}: {e}")))?;
    let h = request.headers_mut();
    h.insert("Sec-WebSocket-Protocol", HeaderValue::from_static("tty"));
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| ConnectError::Handshake(format!("header name {name:?}: {e}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|e| ConnectError::Handshake(format!("header value {value:?}: {e}")))?;
        // Headers tungstenite writes itself must appear once; others may repeat.
        let single = [
            "host",
            "sec-websocket-protocol",
            "origin",
            "connection",
            "upgrade",
        ];
        if single.contains(&name.as_str()) {
            h.insert(name, value);
        } else {
            h.append(name, value);
        }
    }

    let stream = target.connect(CONNECT_DEADLINE).map_err(ConnectError::Io)?;
    // Short read timeouts so a silent server cannot hang the handshake past the deadline.
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(ConnectError::Io)?;
    let spare = stream.try_clone().map_err(ConnectError::Io)?;

    let mut attempt = tungstenite::client::client_with_config(request, stream, None);
    loop {
        match attempt {
            Ok((ws, response)) => {
                ws.get_ref()
                    .set_read_timeout(Some(POLL))
                    .map_err(ConnectError::Io)?;
                return Ok((ws, response));
            }
            Err(HandshakeError::Interrupted(mid)) => {
                if start.elapsed() > CONNECT_DEADLINE {
                    return Err(ConnectError::Handshake(format!(
                        "no upgrade answer within {CONNECT_DEADLINE:?}"
                    )));
                }
                attempt = mid.handshake();
            }
            Err(HandshakeError::Failure(tungstenite::Error::Http(response))) => {
                let status = response.status().as_u16();
                let headers: Vec<(String, String)> = response
                    .headers()
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_owned(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    })
                    .collect();
                let tail = response.body().clone().unwrap_or_default();
                let body = read_rest_of_body(spare, &headers, tail, start + CONNECT_DEADLINE);
                return Err(ConnectError::Refused {
                    status,
                    headers,
                    body,
                });
            }
            Err(HandshakeError::Failure(e)) => return Err(ConnectError::Handshake(e.to_string())),
        }
    }
}

/// tungstenite hands back only the body bytes that arrived with the head; read the rest
/// (by Content-Length, chunked, or until EOF) from a second handle on the socket.
fn read_rest_of_body(
    mut stream: Stream,
    headers: &[(String, String)],
    mut body: Vec<u8>,
    until: Instant,
) -> String {
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.trim().to_owned())
    };
    let length = get("content-length").and_then(|v| v.parse::<usize>().ok());
    let chunked = get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let complete = |b: &[u8]| match length {
        Some(n) => b.len() >= n,
        None if chunked => b.ends_with(b"0\r\n\r\n"),
        None => false,
    };
    let mut buf = [0u8; 4096];
    while !complete(&body) && Instant::now() < until {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
    }
    stream.shutdown();
    if let Some(n) = length {
        body.truncate(n);
    } else if chunked {
        body = dechunk(&body);
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// Decodes a chunked body (best effort: stops at the first malformed chunk).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let Ok(size) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
        else {
            break;
        };
        if size == 0 || raw.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = raw.get(eol + 4 + size..).unwrap_or(&[]);
    }
    out
}

/// The pump thread: sends what the test asks for, reads everything the server sends.
fn pump(mut ws: WebSocket<Stream>, commands: Receiver<Command>, shared: Shared) {
    let mark_closed = |reason: String| {
        let mut st = shared.0.lock().expect("terminal state lock");
        if st.closed_at.is_none() {
            st.closed_at = Some(Instant::now());
            st.close_reason = Some(reason);
        }
        shared.1.notify_all();
    };
    let mut closed = false;
    loop {
        loop {
            match commands.try_recv() {
                Ok(Command::Send(msg, reply)) => {
                    let r = if closed {
                        Err("websocket closed".to_owned())
                    } else {
                        ws.send(msg).map_err(|e| e.to_string())
                    };
                    let _ = reply.send(r);
                }
                Ok(Command::Close(reply)) => {
                    let r = if closed {
                        Ok(())
                    } else {
                        ws.close(None)
                            .and_then(|_| ws.flush())
                            .map_err(|e| e.to_string())
                    };
                    let _ = reply.send(r);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    ws.get_ref().shutdown();
                    mark_closed("closed by the test".into());
                    return;
                }
            }
        }
        if closed {
            // Nothing more to read; wait for the test to drop the terminal.
            std::thread::sleep(POLL);
            continue;
        }
        match ws.read() {
            Ok(Message::Binary(data)) => record(&shared, &data),
            Ok(Message::Text(text)) => record(&shared, text.as_bytes()),
            Ok(Message::Close(frame)) => {
                let reason = match frame {
                    Some(f) => format!("close frame {} {:?}", u16::from(f.code), f.reason.as_str()),
                    None => "close frame without code".to_owned(),
                };
                // tungstenite queues the close reply; flush it, then we are done.
                let _ = ws.flush();
                mark_closed(reason);
                closed = true;
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(tungstenite::Error::ConnectionClosed) | Err(tungstenite::Error::AlreadyClosed) => {
                mark_closed("connection closed".into());
                closed = true;
            }
            Err(e) => {
                mark_closed(format!("socket error: {e}"));
                closed = true;
            }
        }
    }
}

/// Files one server message by its ttyd command byte.
fn record(shared: &Shared, data: &[u8]) {
    let Some((&command, rest)) = data.split_first() else {
        return;
    };
    let mut st = shared.0.lock().expect("terminal state lock");
    match command {
        b'0' => st.output.extend_from_slice(rest),
        b'1' => st.server_title = Some(String::from_utf8_lossy(rest).into_owned()),
        b'2' => st.preferences = serde_json::from_slice(rest).ok(),
        _ => {}
    }
    shared.1.notify_all();
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn dechunk_joins_chunks() {
        assert_eq!(dechunk(b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n"), b"abcde");
        assert_eq!(dechunk(b"zz\r\n"), b"");
    }
}

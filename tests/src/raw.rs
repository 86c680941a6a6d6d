//! Raw requests over TCP or a unix socket (what an HTTP client refuses to send) and `/proc` figures of a
//! process, for the hostile-client, bad-input and soak tests.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// What came back on a raw connection.
#[derive(Debug, Clone)]
pub struct RawAnswer {
    /// Status code of the first response line; 0 when nothing (or no HTTP) came back.
    pub status: u16,
    /// Everything read (head and body), lossily as text.
    pub text: String,
}

impl RawAnswer {
    /// The `error.code` of a JSON error body, if any.
    pub fn code(&self) -> Option<String> {
        let body = self.text.split_once("\r\n\r\n").map(|(_, b)| b)?;
        // A chunked body starts with its size line.
        let json = body.find('{').map(|i| &body[i..])?;
        let end = json.rfind('}')?;
        let v: serde_json::Value = serde_json::from_str(&json[..=end]).ok()?;
        v["error"]["code"].as_str().map(str::to_owned)
    }
}

/// A connection to a gateway on 127.0.0.1:`port`, for bytes written by hand: TLS in a
/// TLS run ([`crate::stack::tls_mode`], any certificate accepted), else plain TCP.
pub fn connect(port: u16) -> std::io::Result<crate::term::Stream> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let target = if crate::stack::tls_mode() {
        crate::term::Target::Tls(addr, crate::tls::Pin::any())
    } else {
        crate::term::Target::Tcp(addr)
    };
    target.connect(Duration::from_secs(10))
}

/// Sends `request` to 127.0.0.1:`port` and reads until the peer closes, `deadline`
/// passes, or a whole response with `Content-Length` arrived.
pub fn exchange(port: u16, request: &[u8], deadline: Duration) -> RawAnswer {
    exchange_on(connect(port), request, deadline)
}

/// Like [`exchange`], on a unix socket.
pub fn exchange_unix(path: &std::path::Path, request: &[u8], deadline: Duration) -> RawAnswer {
    let target = crate::term::Target::Unix(path.to_path_buf());
    exchange_on(target.connect(Duration::from_secs(10)), request, deadline)
}

fn exchange_on(
    stream: std::io::Result<crate::term::Stream>,
    request: &[u8],
    deadline: Duration,
) -> RawAnswer {
    let Ok(mut s) = stream else {
        return RawAnswer {
            status: 0,
            text: String::new(),
        };
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let _ = s.write_all(request);
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while start.elapsed() < deadline {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if complete(&got) {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
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

/// A response head plus a body as long as its `Content-Length`, a chunked body's end,
/// or a `101`'s head.
pub(crate) fn complete(got: &[u8]) -> bool {
    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    if head.starts_with("http/1.1 101") {
        return true;
    }
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match len {
        Some(n) => got.len() >= end + 4 + n,
        None => head.contains("transfer-encoding: chunked") && got.ends_with(b"0\r\n\r\n"),
    }
}

/// Sends the upgrade `head` on `conn` and reads the answer's head, byte by byte so that
/// nothing after it is taken; panics unless it is a `101`.
pub fn upgrade(conn: &mut (impl Read + Write + ?Sized), head: &str) {
    conn.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut b = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        assert_eq!(conn.read(&mut b).unwrap(), 1, "closed during the upgrade");
        answer.push(b[0]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// A websocket upgrade head for `path` offering `tty`, with extra header lines.
pub fn upgrade_head(port: u16, path: &str, extra: &[(&str, &str)]) -> String {
    let mut h = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tty\r\n"
    );
    for (k, v) in extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h
}

/// One masked binary websocket frame header claiming `len` payload bytes.
pub fn frame_header(len: u64) -> Vec<u8> {
    let mut f = vec![0x82];
    if len < 126 {
        f.push(0x80 | len as u8);
    } else if len <= 0xffff {
        f.push(0x80 | 126);
        f.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&len.to_be_bytes());
    }
    // A zero mask: the payload goes out as written.
    f.extend_from_slice(&[0, 0, 0, 0]);
    f
}

/// Open file descriptors of process `pid` (`/proc/<pid>/fd`).
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Resident memory of process `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Raises this process's soft limit on open files to its hard limit (the tests hold
/// hundreds of sockets); returns the soft limit now in force.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    lim.rlim_cur
}

//! The one websocket client every path is measured with: a blocking RFC 6455 client
//! speaking ttyd's protocol, with no thread of its own (thousands are held open), no
//! compression, and frames parsed in place from one growing buffer.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use e2e::term::{Stream, Target};

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const MASK: [u8; 4] = [0x5a, 0x3c, 0x96, 0x0f];

/// How a path is reached: where, at which path, with which headers.
#[derive(Clone)]
pub struct Endpoint {
    pub target: Target,
    pub host: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

/// One open websocket.
pub struct Ws {
    s: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// A frame as read: opcode and the payload's place in the buffer.
struct Frame {
    opcode: u8,
    from: usize,
    to: usize,
}

fn other(msg: String) -> io::Error {
    io::Error::other(msg)
}

impl Ws {
    /// Connects and upgrades; returns when the `101` head has been read.
    pub fn open(e: &Endpoint, deadline: Duration) -> io::Result<Ws> {
        let s = e.target.connect(deadline)?;
        s.set_read_timeout(Some(deadline))?;
        let mut head = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tty\r\n",
            e.path, e.host
        );
        for (k, v) in &e.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut ws = Ws {
            s,
            buf: vec![0; 16 * 1024],
            start: 0,
            end: 0,
        };
        ws.s.write_all(head.as_bytes())?;
        loop {
            if let Some(i) = ws.buf[..ws.end].windows(4).position(|w| w == b"\r\n\r\n") {
                let status = &ws.buf[..ws.end.min(12)];
                if !status.starts_with(b"HTTP/1.1 101") {
                    let text = String::from_utf8_lossy(&ws.buf[..i]).into_owned();
                    return Err(other(format!("upgrade refused: {text}")));
                }
                ws.start = i + 4;
                return Ok(ws);
            }
            if ws.end == ws.buf.len() {
                return Err(other("response head too large".into()));
            }
            let n = ws.s.read(&mut ws.buf[ws.end..])?;
            if n == 0 {
                return Err(other("closed before the 101".into()));
            }
            ws.end += n;
        }
    }

    /// ttyd's first message from the client: the window size (and an empty token).
    pub fn hello(&mut self) -> io::Result<()> {
        self.send(2, br#"{"AuthToken":"","columns":80,"rows":24}"#)
    }

    /// Types `bytes` (ttyd's input command `0`).
    pub fn input(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut p = Vec::with_capacity(bytes.len() + 1);
        p.push(b'0');
        p.extend_from_slice(bytes);
        self.send(2, &p)
    }

    /// Sends one masked frame.
    pub fn send(&mut self, opcode: u8, payload: &[u8]) -> io::Result<()> {
        let mut f = Vec::with_capacity(payload.len() + 14);
        f.push(0x80 | opcode);
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n <= 0xffff => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&MASK);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
        self.s.write_all(&f)
    }

    /// Sets how long a read may wait.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.s.set_read_timeout(t)
    }

    /// Sends a close frame and shuts the socket down.
    pub fn close(mut self) {
        let _ = self.send(8, &[0x03, 0xe8]);
        self.s.shutdown();
    }

    fn fill(&mut self, need: usize) -> io::Result<()> {
        while self.end - self.start < need {
            if self.start > 0 && (self.start == self.end || self.buf.len() - self.start < need) {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() < need {
                self.buf.resize(need.next_power_of_two(), 0);
            }
            if self.end == self.buf.len() {
                let len = self.buf.len() * 2;
                self.buf.resize(len, 0);
            }
            let n = self.s.read(&mut self.buf[self.end..])?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "websocket closed",
                ));
            }
            self.end += n;
        }
        Ok(())
    }

    fn frame(&mut self) -> io::Result<Frame> {
        self.fill(2)?;
        let (b0, b1) = (self.buf[self.start], self.buf[self.start + 1]);
        let masked = b1 & 0x80 != 0;
        let (len, mut at) = match b1 & 0x7f {
            126 => {
                self.fill(4)?;
                let s = self.start;
                (
                    u16::from_be_bytes([self.buf[s + 2], self.buf[s + 3]]) as usize,
                    4,
                )
            }
            127 => {
                self.fill(10)?;
                let s = self.start;
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.buf[s + 2..s + 10]);
                (
                    usize::try_from(u64::from_be_bytes(b)).unwrap_or(usize::MAX),
                    10,
                )
            }
            n => (n as usize, 2),
        };
        if masked {
            at += 4;
        }
        if len > 64 * 1024 * 1024 {
            return Err(other(format!("frame of {len} bytes")));
        }
        self.fill(at + len)?;
        let from = self.start + at;
        self.start = from + len;
        Ok(Frame {
            opcode: b0 & 0x0f,
            from,
            to: from + len,
        })
    }

    /// Reads frames until a data frame, answering pings; `f` sees its payload.
    pub fn next<T>(&mut self, f: impl FnOnce(&[u8]) -> T) -> io::Result<T> {
        loop {
            let fr = self.frame()?;
            match fr.opcode {
                0..=2 => return Ok(f(&self.buf[fr.from..fr.to])),
                8 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "close frame")),
                9 => {
                    let payload = self.buf[fr.from..fr.to].to_vec();
                    self.send(10, &payload)?;
                }
                _ => {}
            }
        }
    }

    /// Reads output until `needle` has appeared; returns the output bytes read. The
    /// needle may straddle frames.
    pub fn until(&mut self, needle: &[u8], deadline: Duration) -> io::Result<u64> {
        let start = Instant::now();
        let keep = needle.len().saturating_sub(1);
        let mut tail: Vec<u8> = Vec::with_capacity(keep * 2);
        let mut total = 0u64;
        loop {
            if start.elapsed() > deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "needle not seen"));
            }
            let found = self.next(|p| {
                // Output frames are ttyd's command `0` followed by the bytes.
                let Some((&b'0', out)) = p.split_first() else {
                    return false;
                };
                total += out.len() as u64;
                let old = tail.len();
                tail.extend_from_slice(&out[..out.len().min(keep)]);
                let hit = find(&tail, needle) || find(out, needle);
                // The new tail: the last `keep` bytes of everything so far.
                tail.truncate(old);
                if out.len() >= keep {
                    tail.clear();
                }
                tail.extend_from_slice(&out[out.len().saturating_sub(keep)..]);
                let cut = tail.len().saturating_sub(keep);
                tail.drain(..cut);
                hit
            })?;
            if found {
                return Ok(total);
            }
        }
    }

    /// Reads whatever has arrived without waiting, answering pings (for terminals
    /// held idle). False once the socket is closed.
    pub fn poll_idle(&mut self) -> bool {
        let Stream::Tcp(t) = &self.s else {
            return true;
        };
        if t.set_nonblocking(true).is_err() {
            return false;
        }
        let mut alive = true;
        loop {
            if self.end == self.buf.len() {
                if self.start == 0 {
                    // An idle terminal that fills its buffer is not idle: drop the data.
                    self.start = self.end;
                }
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            match self.s.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    alive = false;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    alive = false;
                    break;
                }
            }
        }
        if let Stream::Tcp(t) = &self.s {
            let _ = t.set_nonblocking(false);
        }
        // Answer complete pings; anything else is dropped.
        while alive && self.end - self.start >= 2 {
            let (b0, b1) = (self.buf[self.start], self.buf[self.start + 1]);
            let len = (b1 & 0x7f) as usize;
            if len >= 126 || self.end - self.start < 2 + len {
                break;
            }
            let payload = self.buf[self.start + 2..self.start + 2 + len].to_vec();
            self.start += 2 + len;
            if b0 & 0x0f == 9 && self.send(10, &payload).is_err() {
                alive = false;
            }
            if b0 & 0x0f == 8 {
                alive = false;
            }
        }
        alive
    }
}

/// Whether `needle` occurs in `hay`: a scan for its first byte, then a compare.
fn find(hay: &[u8], needle: &[u8]) -> bool {
    let Some(&first) = needle.first() else {
        return true;
    };
    let mut i = 0;
    while let Some(p) = hay[i..].iter().position(|&b| b == first) {
        let at = i + p;
        if hay.len() - at < needle.len() {
            return false;
        }
        if &hay[at..at + needle.len()] == needle {
            return true;
        }
        i = at + 1;
    }
    false
}

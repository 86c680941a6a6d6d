//! Keystroke round trip and bulk output through the gateway's own tunnel, the same
//! recorded (asciicast, debug builds: `TERMGATE_TEST_RECORD_ALL=1`), Pingora's upgrade
//! path (debug builds: `TERMGATE_TEST_PINGORA_TUNNEL=1`) and straight to ttyd,
//! interleaved, on one plain ttyd (`ttyd -W sh`, a target on a unix socket). Each
//! gateway's resident memory is printed at the end (`BENCH_RECORD=0` leaves the
//! recorded path out).
//!
//! ```sh
//! cargo build --workspace --bins --examples --locked
//! target/debug/examples/tunnel_bench       # KEYSTROKES=500 BULK_MIB=32 BULK_ROUNDS=5
//! # release gateway (no test hooks, so no Pingora's path):
//! TERMGATE_BIN_DIR=target/release BENCH_PINGORA=0 target/debug/examples/tunnel_bench
//! ```
//!
//! The client is a minimal websocket client of ttyd's protocol on a blocking socket,
//! so the figures are the paths', not a client's polling.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use e2e::raw;
use e2e::stack::GatewayStack;
use e2e::ttyd::TtydPool;

trait Conn: Read + Write {}
impl<T: Read + Write> Conn for T {}

/// A terminal websocket spoken to frame by frame.
struct Ws {
    conn: Box<dyn Conn>,
    /// Output bytes received but not yet looked at.
    pending: Vec<u8>,
}

impl Ws {
    /// Upgrades `conn` with `head`, then sends ttyd's opening message.
    fn open(mut conn: Box<dyn Conn>, head: &str) -> Ws {
        raw::upgrade(&mut conn, head);
        let mut ws = Ws {
            conn,
            pending: Vec::new(),
        };
        ws.send(br#"{"AuthToken":"","columns":80,"rows":24}"#);
        ws
    }

    /// Sends one masked binary frame (zero mask: the payload goes out as written).
    fn send(&mut self, payload: &[u8]) {
        let mut f = raw::frame_header(payload.len() as u64);
        f[0] = 0x82;
        f.extend_from_slice(payload);
        self.conn.write_all(&f).unwrap();
    }

    /// Types `bytes`.
    fn type_in(&mut self, bytes: &[u8]) {
        let mut p = vec![b'0'];
        p.extend_from_slice(bytes);
        self.send(&p);
    }

    /// Reads one frame; returns its payload.
    fn try_frame(&mut self) -> std::io::Result<Vec<u8>> {
        let mut h = [0u8; 2];
        self.conn.read_exact(&mut h)?;
        let len = match h[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                self.conn.read_exact(&mut l)?;
                u16::from_be_bytes(l) as usize
            }
            127 => {
                let mut l = [0u8; 8];
                self.conn.read_exact(&mut l)?;
                u64::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut p = vec![0u8; len];
        self.conn.read_exact(&mut p)?;
        Ok(p)
    }

    /// Reads output until it contains `needle`; returns the output bytes read.
    fn until(&mut self, needle: &[u8]) -> usize {
        self.try_until(needle).expect("the terminal closed")
    }

    fn try_until(&mut self, needle: &[u8]) -> std::io::Result<usize> {
        let mut total = 0;
        loop {
            if let Some(at) = self.pending.windows(needle.len()).position(|w| w == needle) {
                self.pending.drain(..at + needle.len());
                return Ok(total);
            }
            let keep = self.pending.len().saturating_sub(needle.len());
            self.pending.drain(..keep);
            let f = self.try_frame()?;
            if f.first() == Some(&b'0') {
                total += f.len() - 1;
                self.pending.extend_from_slice(&f[1..]);
            }
        }
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let keystrokes: usize = std::env::var("KEYSTROKES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let bulk_mib: usize = std::env::var("BULK_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let bulk_rounds: usize = std::env::var("BULK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut stack = GatewayStack::start("");
    // No websocket pings: this client answers none, and ttyd would close it.
    let ttyd = TtydPool::start_plain(true, &["-P", "3600"]);
    let sock = ttyd.socket_path().unwrap().to_path_buf();
    let id = stack.register_target("bench", &sock, &["alice"]);
    let pingora = stack.spawn_gateway(&[("TERMGATE_TEST_PINGORA_TUNNEL", "1")]);
    let recorded = stack.spawn_gateway(&[("TERMGATE_TEST_RECORD_ALL", "1")]);
    let bearer = format!("Bearer {}", stack.control.token("alice", false));
    let via = |n: usize| {
        let port = stack.gateways[n].port;
        let conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        conn.set_nodelay(true).unwrap();
        Ws::open(
            Box::new(conn),
            &raw::upgrade_head(port, &format!("/s/{id}/ws"), &[("Authorization", &bearer)]),
        )
    };
    let direct = || {
        Ws::open(
            Box::new(UnixStream::connect(&sock).unwrap()),
            &raw::upgrade_head(0, "/ws", &[]),
        )
    };
    // A terminal that closes before ttyd's first frame (Pingora's path after its 101,
    // cloudflare/pingora#946) is opened again, and counted.
    let mut reopened = 0;
    let mut alive = |open: &dyn Fn() -> Ws| loop {
        let mut t = open();
        if t.try_frame().is_ok() {
            return t;
        }
        reopened += 1;
    };
    // A release gateway has no test hooks: `BENCH_PINGORA=0` leaves that path out.
    let with_pingora = std::env::var("BENCH_PINGORA").map_or(true, |v| v != "0");
    let with_record = std::env::var("BENCH_RECORD").map_or(true, |v| v != "0");
    let mut names = vec!["own tunnel"];
    let mut terms = vec![alive(&|| via(0))];
    let mut gateways = vec![0];
    if with_record {
        names.push("own tunnel, recorded");
        terms.push(alive(&|| via(recorded)));
        gateways.push(recorded);
    }
    if with_pingora {
        names.push("Pingora's path");
        terms.push(alive(&|| via(pingora)));
        gateways.push(pingora);
    }
    names.push("direct to ttyd");
    terms.push(alive(&direct));
    let paths = terms.len();
    println!("terminals reopened after closing right after their 101: {reopened}");
    for t in terms.iter_mut() {
        // A quiet prompt, so each keystroke's echo is the only output.
        t.type_in(b"PS1=; echo TG-$((40+2))READY\r");
        t.until(b"TG-42READY");
    }

    // Keystroke round trip: one byte typed, its echo back; interleaved.
    let mut rtt: Vec<Vec<Duration>> = vec![Vec::new(); paths];
    for i in 0..keystrokes {
        for (k, t) in terms.iter_mut().enumerate() {
            let c = [b'a' + (i % 26) as u8];
            let start = Instant::now();
            t.type_in(&c);
            t.until(&c);
            rtt[k].push(start.elapsed());
        }
    }
    for t in terms.iter_mut() {
        // Clear the line of typed letters.
        t.type_in(b"\x15echo TG-$((40+3))CLEAR\r");
        t.until(b"TG-43CLEAR");
    }

    // Bulk output: BULK_MIB MiB of text from the shell; interleaved rounds.
    let mut bulk: Vec<Vec<f64>> = vec![Vec::new(); paths];
    let mut lost = vec![false; paths];
    let cmd = format!(
        "head -c {} /dev/zero | tr '\\0' a; echo TG-$((40+4))END\r",
        bulk_mib << 20
    );
    for _ in 0..bulk_rounds {
        for (k, t) in terms.iter_mut().enumerate() {
            if lost[k] {
                continue;
            }
            let start = Instant::now();
            t.type_in(cmd.as_bytes());
            match t.try_until(b"TG-44END") {
                Ok(bytes) => {
                    bulk[k].push(bytes as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64())
                }
                Err(e) => {
                    println!("{}: the terminal closed during bulk output ({e})", names[k]);
                    lost[k] = true;
                }
            }
        }
    }

    println!(
        "| path | keystroke round trip p50 | p99 | bulk output (MiB/s, median of {bulk_rounds}) |"
    );
    println!("|---|---|---|---|");
    for k in 0..paths {
        bulk[k].sort_by(|a, b| a.total_cmp(b));
        let median = bulk[k]
            .get(bulk[k].len() / 2)
            .map_or("closed".to_owned(), |b| format!("{b:.1}"));
        println!(
            "| {} | {} | {} | {median} |",
            names[k],
            ms(pct(&mut rtt[k], 0.5)),
            ms(pct(&mut rtt[k], 0.99)),
        );
    }
    println!();
    for (k, n) in gateways.iter().enumerate() {
        let pid = stack.gateways[*n].pid();
        println!(
            "{}: gateway RSS {} KiB at the end (its terminal open)",
            names[k],
            raw::rss_kib(pid)
        );
    }
}

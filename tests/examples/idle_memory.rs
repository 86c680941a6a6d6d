//! Gateway memory per idle terminal.
//!
//! Holds N upgraded, idle terminal websockets through one gateway process and reports
//! the growth of its resident memory (and descriptors) per terminal, for each path a
//! terminal can take:
//!
//! - `own`: the gateway's own tunnel (plain listeners);
//! - `pingora`: Pingora's upgrade path, which TLS listeners take and every listener took
//!   before the own tunnel (debug builds only: `TERMGATE_TEST_PINGORA_TUNNEL=1`);
//! - `record`: the own tunnel with every terminal recorded (profiles' `record`; debug
//!   builds only: `TERMGATE_TEST_RECORD_ALL=1`): a writer thread, a spool file and the
//!   recorder's state per terminal.
//!
//! The terminals' upstream is a ttyd stand-in in this process (a unix socket answering
//! the upgrade with a `101` and then holding the connection idle), registered as a
//! target, so thousands of terminals need no ttyd process and no container each.
//!
//! ```sh
//! cargo build --workspace --bins --examples --locked
//! target/debug/examples/idle_memory                       # own, pingora, record; 1,000 and 5,000
//! IDLE_COUNTS=1000,5000,9000 IDLE_PATHS=own IDLE_HOLD_SECS=600 target/debug/examples/idle_memory
//! ```
//!
//! A gateway holds two descriptors per idle terminal on its own tunnel and three on
//! Pingora's path (plus its duplicate of the upstream for enforcement); a count that
//! does not fit the open-file limit is skipped and said so.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::raw;
use e2e::stack::{http, wait_for, GatewayStack};
use serde_json::json;

/// Reads an HTTP head (to the blank line) from `s`.
fn read_head(s: &mut impl Read) -> std::io::Result<String> {
    let mut head = Vec::with_capacity(512);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// The ttyd stand-in: answers each upgrade with a `101` and keeps the connection.
fn stand_in(listener: UnixListener, held: Arc<Mutex<Vec<UnixStream>>>) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        if read_head(&mut conn).is_err() {
            continue;
        }
        let answer = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: tty\r\n\r\n";
        if conn.write_all(answer.as_bytes()).is_ok() {
            held.lock().unwrap().push(conn);
        }
    }
}

/// One measurement.
struct Figure {
    path: &'static str,
    count: usize,
    rss_before: u64,
    rss_after: u64,
    rss_hold_max: u64,
    fds_per_terminal: f64,
    closed: usize,
    open_secs: f64,
}

impl Figure {
    /// Growth of the gateway's RSS per terminal still open (those Pingora ended right
    /// after their `101` freed theirs).
    fn per_open(&self, rss: u64) -> f64 {
        (rss as f64 - self.rss_before as f64) / (self.count - self.closed).max(1) as f64
    }
}

fn main() {
    let counts: Vec<usize> = std::env::var("IDLE_COUNTS")
        .unwrap_or_else(|_| "1000,5000".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let paths: Vec<String> = std::env::var("IDLE_PATHS")
        .unwrap_or_else(|_| "own,pingora,record".into())
        .split(',')
        .map(|p| p.trim().to_owned())
        .collect();
    let hold = Duration::from_secs(
        std::env::var("IDLE_HOLD_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10),
    );
    let limit = raw::raise_nofile() as usize;
    println!("open-file limit (this process and the gateway): {limit}");

    let mut stack = GatewayStack::start("");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("stand-in.sock");
    let held = Arc::new(Mutex::new(Vec::new()));
    {
        let listener = UnixListener::bind(&sock).unwrap();
        let held = Arc::clone(&held);
        std::thread::spawn(move || stand_in(listener, held));
    }
    let admin = stack.control.token("root", true);
    let a = http(
        "POST",
        &stack.url(0, "/api/targets"),
        Some(&admin),
        Some(&json!({
            "name": "idle",
            "upstream": format!("unix:{}", sock.display()),
            "users": ["alice"],
        })),
    )
    .unwrap();
    assert_eq!(a.status, 201, "register: {}", a.text);
    let id = a.body["id"].as_str().unwrap().to_owned();
    let bearer = format!("Bearer {}", stack.control.token("alice", false));

    let mut figures = Vec::new();
    for path in &paths {
        for &count in &counts {
            let per = if path == "own" { 2 } else { 3 };
            if count * per + 200 > limit || count * 2 + 200 > limit {
                println!(
                    "{path} path, {count} terminals: needs about {} descriptors in the gateway; over the limit of {limit}, skipped",
                    count * per
                );
                continue;
            }
            let mut env = vec![
                ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "100000"),
                ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION", "100000"),
                ("RUST_LOG", "warn"),
            ];
            if path == "pingora" {
                env.push(("TERMGATE_TEST_PINGORA_TUNNEL", "1"));
            }
            if path == "record" {
                env.push(("TERMGATE_TEST_RECORD_ALL", "1"));
            }
            let n = stack.spawn_gateway(&env);
            let port = stack.gateways[n].port;
            let pid = stack.gateways[n].pid();
            let head =
                raw::upgrade_head(port, &format!("/s/{id}/ws"), &[("Authorization", &bearer)]);
            let open = |n: usize| -> Vec<TcpStream> {
                (0..n)
                    .map(|i| {
                        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                        s.write_all(head.as_bytes()).unwrap();
                        let answer = read_head(&mut s)
                            .unwrap_or_else(|e| panic!("terminal {i}: no answer: {e}"));
                        assert!(answer.starts_with("HTTP/1.1 101"), "terminal {i}: {answer}");
                        s
                    })
                    .collect()
            };
            // Warm-up: lazily made state (route cache, pools, thread scratch buffers)
            // is in the baseline.
            let fds_idle = raw::fds(pid);
            drop(open(200));
            wait_for(
                "the warm-up terminals to close",
                Duration::from_secs(30),
                || (raw::fds(pid) <= fds_idle + 2).then_some(()),
            );
            held.lock().unwrap().clear();
            std::thread::sleep(Duration::from_secs(1));
            let (rss_before, fds_before) = (raw::rss_kib(pid), raw::fds(pid));
            let start = Instant::now();
            let terminals = open(count);
            let open_secs = start.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_secs(2));
            let (rss_after, fds_after) = (raw::rss_kib(pid), raw::fds(pid));
            let mut rss_hold_max = rss_after;
            let hold_start = Instant::now();
            while hold_start.elapsed() < hold {
                std::thread::sleep(Duration::from_secs(1));
                rss_hold_max = rss_hold_max.max(raw::rss_kib(pid));
            }
            // Still open: a read finds nothing (rather than EOF).
            let closed = terminals
                .iter()
                .filter(|t| {
                    t.set_nonblocking(true).unwrap();
                    let mut b = [0u8; 1];
                    !matches!((&**t).read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                })
                .count();
            let f = Figure {
                path: match path.as_str() {
                    "own" => "own tunnel",
                    "record" => "own tunnel, recorded",
                    _ => "Pingora's path",
                },
                count,
                rss_before,
                rss_after,
                rss_hold_max,
                fds_per_terminal: (fds_after as f64 - fds_before as f64)
                    / (count - closed).max(1) as f64,
                closed,
                open_secs,
            };
            println!(
                "{} × {}: RSS {} → {} KiB (max {} over {} s), {:.2} KiB per open terminal, {:.2} descriptors per open terminal, {} closed meanwhile, opened in {:.1} s",
                f.path,
                f.count,
                f.rss_before,
                f.rss_after,
                f.rss_hold_max,
                hold.as_secs(),
                f.per_open(f.rss_after),
                f.fds_per_terminal,
                f.closed,
                f.open_secs
            );
            figures.push(f);
            drop(terminals);
            held.lock().unwrap().clear();
            stack.gateways[n].kill9();
        }
    }

    println!();
    println!("| path | idle terminals | RSS before | RSS after | KiB per open terminal | the same at the hold's maximum | descriptors per open terminal | closed right after the 101 |");
    println!("|---|---|---|---|---|---|---|---|");
    for f in &figures {
        println!(
            "| {} | {} | {} KiB | {} KiB | {:.1} | {:.1} | {:.1} | {} |",
            f.path,
            f.count,
            f.rss_before,
            f.rss_after,
            f.per_open(f.rss_after),
            f.per_open(f.rss_hold_max),
            f.fds_per_terminal,
            f.closed
        );
    }
}

//! Memory per idle terminal, as a long-running proxy holds them: the gateway against
//! nginx.
//!
//! Each row is one fresh process (a gateway, or an nginx with one worker) that first
//! lives through `IDLE_CYCLES` (5,000) upgrade-and-close cycles, `IDLE_CONCURRENCY`
//! (16) at a time (each: the upgrade, the browser's first message, the ttyd's first
//! frames read, a close frame, the connection closed), as a gateway that has served
//! terminals for a while has. After a rest, its resident memory (`VmRSS`) is the
//! baseline; `IDLE_COUNTS` (1,000 and 5,000) terminals are opened and held idle, each
//! after its first message and the ttyd's first frames, and after another rest the
//! growth of its resident memory (and descriptors) is divided by the terminals still
//! open. The paths (`IDLE_PATHS`, `own,nginx`):
//!
//! - `own`: the gateway's own tunnel (plain listeners);
//! - `nginx`: nginx proxying the websocket (one worker process, whose memory is
//!   measured), the reference;
//! - `pingora`: Pingora's upgrade path, which every listener took before the own tunnel
//!   (debug builds only: `TERMGATE_TEST_PINGORA_TUNNEL=1`);
//! - `record`: the own tunnel with every terminal recorded (profiles' `record`; debug
//!   builds only: `TERMGATE_TEST_RECORD_ALL=1`).
//!
//! The terminals' upstream is a ttyd stand-in in this process (a unix socket answering
//! the upgrade with a `101`, reading the first message, writing ttyd's first frames and
//! then holding the connection idle), registered as a target, so thousands of terminals
//! need no ttyd process and no container each; nginx proxies to the same socket.
//!
//! ```sh
//! cargo build --workspace --bins --examples --locked
//! target/debug/examples/idle_memory                 # own and nginx; 1,000 and 5,000; 5,000 cycles
//! IDLE_COUNTS=1000 IDLE_CYCLES=0 IDLE_PATHS=own,pingora,record target/debug/examples/idle_memory
//! TERMGATE_BIN_DIR=target/release IDLE_GATEWAY_ENV=MALLOC_ARENA_MAX=1 target/debug/examples/idle_memory
//! ```
//!
//! `IDLE_SETTLE_SECS` (12) is each rest, past the gateway's heap trim (10 s after
//! terminals came and went); `IDLE_HOLD_SECS` (10) is how long the terminals are then
//! held and watched; `IDLE_GATEWAY_ENV` (`NAME=value,…`) is given to the gateway only
//! (allocator settings, say). A gateway holds two descriptors per idle terminal on its
//! own tunnel and more on Pingora's path or recorded; a count that does not fit the
//! open-file limit is skipped and said so.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::nginx::Nginx;
use e2e::raw;
use e2e::stack::{free_port, wait_for, GatewayStack};

/// The first message of ttyd's page: the terminal's size (and the token, empty: the
/// gateway fills it in for a `ttyd -c` target).
const FIRST_MESSAGE: &[u8] = br#"{"AuthToken":"","columns":120,"rows":40}"#;

/// What a ttyd writes once the first message is in: the window title, the page's
/// preferences and the shell's prompt, as binary frames (`1`, `2`, `0` + bytes).
fn ttyd_first_frames() -> Vec<u8> {
    let mut out = Vec::new();
    for payload in [
        &b"1sh (3f2a9c1e5b7d)"[..],
        &b"2{}"[..],
        &b"0\x1b]0;user@3f2a9c1e5b7d: ~\x07user@3f2a9c1e5b7d:~$ "[..],
    ] {
        out.push(0x82);
        out.push(payload.len() as u8);
        out.extend_from_slice(payload);
    }
    out
}

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

/// Reads one client (masked) websocket frame of up to 64 KiB; returns its payload
/// length.
fn read_client_frame(s: &mut impl Read) -> std::io::Result<usize> {
    let mut b = [0u8; 2];
    s.read_exact(&mut b)?;
    let len = match b[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l)?;
            usize::from(u16::from_be_bytes(l))
        }
        127 => return Err(std::io::ErrorKind::InvalidData.into()),
        n => usize::from(n),
    };
    let mask = if b[1] & 0x80 != 0 { 4 } else { 0 };
    let mut rest = vec![0u8; mask + len];
    s.read_exact(&mut rest)?;
    Ok(len)
}

/// One masked frame from the browser, with a zero mask.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = raw::frame_header(payload.len() as u64);
    f[0] = 0x80 | opcode;
    f.extend_from_slice(payload);
    f
}

/// The ttyd stand-in's side of one connection: the `101`, the first message, ttyd's
/// first frames; then the connection is held.
fn stand_in_one(mut conn: UnixStream, held: &Mutex<Vec<UnixStream>>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    read_head(&mut conn)?;
    let answer = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: tty\r\n\r\n";
    conn.write_all(answer.as_bytes())?;
    read_client_frame(&mut conn)?;
    conn.write_all(&ttyd_first_frames())?;
    held.lock().unwrap().push(conn);
    Ok(())
}

/// The ttyd stand-in: each connection's opening on a short-lived thread of its own (the
/// openers run concurrently), then held by `held`.
fn stand_in(listener: UnixListener, held: Arc<Mutex<Vec<UnixStream>>>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let held = Arc::clone(&held);
        std::thread::spawn(move || {
            let _ = stand_in_one(conn, &held);
        });
    }
}

/// Opens one terminal as a browser does: the upgrade, its `101`, the first message, and
/// ttyd's first frames read. An error: no `101`.
fn open_terminal(port: u16, head: &str) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    s.write_all(head.as_bytes())
        .map_err(|e| format!("upgrade: {e}"))?;
    let answer = read_head(&mut s).map_err(|e| format!("no answer: {e}"))?;
    if !answer.starts_with("HTTP/1.1 101") {
        return Err(answer);
    }
    // Past the `101`, a terminal ended at once (Pingora's path, cloudflare/pingora#946)
    // is not a failure of the run: it is counted among those closed.
    let mut first = vec![0u8; ttyd_first_frames().len()];
    let _ = s
        .write_all(&client_frame(0x2, FIRST_MESSAGE))
        .and_then(|()| s.read_exact(&mut first));
    Ok(s)
}

/// Runs `count` openings on `concurrency` threads; `keep`: the terminals are returned
/// open, else each is closed (a close frame, then the connection) once opened.
fn open_many(
    port: u16,
    head: &str,
    count: usize,
    concurrency: usize,
    keep: bool,
) -> Vec<TcpStream> {
    let next = AtomicUsize::new(0);
    let kept = Mutex::new(Vec::with_capacity(if keep { count } else { 0 }));
    std::thread::scope(|scope| {
        for _ in 0..concurrency.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let mut s =
                    open_terminal(port, head).unwrap_or_else(|e| panic!("terminal {i}: {e}"));
                if keep {
                    kept.lock().unwrap().push(s);
                } else {
                    let _ = s.write_all(&client_frame(0x8, &[0x03, 0xe9]));
                }
            });
        }
    });
    kept.into_inner().unwrap()
}

/// How many of `terminals` are still open: a read finds nothing (rather than EOF).
fn still_open(terminals: &[TcpStream]) -> usize {
    terminals
        .iter()
        .filter(|t| {
            t.set_nonblocking(true).unwrap();
            let mut b = [0u8; 1];
            matches!((&**t).read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count()
}

/// One measurement.
struct Figure {
    path: &'static str,
    count: usize,
    rss_fresh: u64,
    rss_before: u64,
    rss_after: u64,
    rss_hold_max: u64,
    fds_per_terminal: f64,
    closed: usize,
    open_secs: f64,
}

impl Figure {
    /// Growth of the process's RSS per terminal still open, from the baseline after the
    /// cycles.
    fn per_open(&self, rss: u64) -> f64 {
        (rss as f64 - self.rss_before as f64) / (self.count - self.closed).max(1) as f64
    }

    /// The same from the fresh process: what the cycles left resident counted in.
    fn per_open_from_fresh(&self) -> f64 {
        (self.rss_after as f64 - self.rss_fresh as f64) / (self.count - self.closed).max(1) as f64
    }
}

/// The settings of one run.
struct Run {
    cycles: usize,
    concurrency: usize,
    /// How long the process rests after the cycles, and after the terminals are open,
    /// before its memory is read: past the gateway's heap trim after terminals came and
    /// went (10 s).
    settle: Duration,
    hold: Duration,
}

impl Run {
    /// Cycles, baseline, `count` idle terminals, hold: the figure of process `pid`, whose
    /// descriptors at rest are `fds_idle`. `held` is the stand-in's side.
    fn measure(
        &self,
        path: &'static str,
        pid: u32,
        port: u16,
        head: &str,
        count: usize,
        held: &Mutex<Vec<UnixStream>>,
    ) -> Figure {
        let fds_idle = raw::fds(pid);
        let rss_fresh = raw::rss_kib(pid);
        let start = Instant::now();
        open_many(port, head, self.cycles, self.concurrency, false);
        wait_for(
            "the cycles' terminals to close",
            Duration::from_secs(60),
            || (raw::fds(pid) <= fds_idle + 2).then_some(()),
        );
        held.lock().unwrap().clear();
        println!(
            "{path}: {} cycles in {:.1} s; RSS {rss_fresh} → {} KiB",
            self.cycles,
            start.elapsed().as_secs_f64(),
            raw::rss_kib(pid)
        );
        std::thread::sleep(self.settle);
        let (rss_before, fds_before) = (raw::rss_kib(pid), raw::fds(pid));
        let start = Instant::now();
        let terminals = open_many(port, head, count, self.concurrency, true);
        let open_secs = start.elapsed().as_secs_f64();
        std::thread::sleep(self.settle);
        let (rss_after, fds_after) = (raw::rss_kib(pid), raw::fds(pid));
        let mut rss_hold_max = rss_after;
        let hold_start = Instant::now();
        while hold_start.elapsed() < self.hold {
            std::thread::sleep(Duration::from_secs(1));
            rss_hold_max = rss_hold_max.max(raw::rss_kib(pid));
        }
        let closed = count - still_open(&terminals);
        let f = Figure {
            path,
            count,
            rss_fresh,
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
            self.hold.as_secs(),
            f.per_open(f.rss_after),
            f.fds_per_terminal,
            f.closed,
            f.open_secs
        );
        drop(terminals);
        held.lock().unwrap().clear();
        f
    }
}

/// nginx with one worker, proxying websockets to the stand-in at `sock`.
fn nginx(sock: &Path) -> Nginx {
    let port = free_port();
    let site = format!(
        "server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
         proxy_pass http://unix:{}:;\n        proxy_http_version 1.1;\n\
         proxy_set_header Upgrade $http_upgrade;\n\
         proxy_set_header Connection \"upgrade\";\n\
         proxy_read_timeout 1d;\n        proxy_send_timeout 1d;\n    }}\n}}\n",
        sock.display()
    );
    Nginx::start(&site, port, 1)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn main() {
    let counts: Vec<usize> = std::env::var("IDLE_COUNTS")
        .unwrap_or_else(|_| "1000,5000".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let paths: Vec<String> = std::env::var("IDLE_PATHS")
        .unwrap_or_else(|_| "own,nginx".into())
        .split(',')
        .map(|p| p.trim().to_owned())
        .collect();
    let gateway_env: Vec<(String, String)> = std::env::var("IDLE_GATEWAY_ENV")
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let run = Run {
        cycles: env_or("IDLE_CYCLES", 5000),
        concurrency: env_or("IDLE_CONCURRENCY", 16),
        settle: Duration::from_secs(env_or("IDLE_SETTLE_SECS", 12)),
        hold: Duration::from_secs(env_or("IDLE_HOLD_SECS", 10)),
    };
    let limit = raw::raise_nofile() as usize;
    println!(
        "open-file limit (this process, the gateway, nginx): {limit}; {} cycles, {} at a time, before each row; gateway environment: {gateway_env:?}",
        run.cycles, run.concurrency
    );

    let mut stack = GatewayStack::start("");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("stand-in.sock");
    let held = Arc::new(Mutex::new(Vec::new()));
    {
        let listener = UnixListener::bind(&sock).unwrap();
        let held = Arc::clone(&held);
        std::thread::spawn(move || stand_in(listener, held));
    }
    let id = stack.register_target("idle", &sock, &["alice"]);
    let bearer = format!("Bearer {}", stack.control.token("alice", false));

    let mut figures = Vec::new();
    for path in &paths {
        for &count in &counts {
            let per = match path.as_str() {
                "own" | "nginx" => 2,
                _ => 3,
            };
            if count * per + 200 > limit || count * 2 + 200 > limit {
                println!(
                    "{path}, {count} terminals: needs about {} descriptors; over the limit of {limit}, skipped",
                    count * per
                );
                continue;
            }
            if path == "nginx" {
                let n = nginx(&sock);
                let port = n.port();
                let Some(&worker) = n.pids().get(1) else {
                    panic!("nginx started no worker: {}", n.log_text());
                };
                let head = raw::upgrade_head(port, "/ws", &[]);
                figures.push(run.measure("nginx", worker, port, &head, count, &held));
                continue;
            }
            let mut env: Vec<(&str, &str)> = vec![
                ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "100000"),
                ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION", "100000"),
                ("RUST_LOG", "warn"),
            ];
            env.extend(gateway_env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let name = match path.as_str() {
                "own" => "own tunnel",
                "pingora" => {
                    env.push(("TERMGATE_TEST_PINGORA_TUNNEL", "1"));
                    "Pingora's path"
                }
                "record" => {
                    env.push(("TERMGATE_TEST_RECORD_ALL", "1"));
                    "own tunnel, recorded"
                }
                other => panic!("unknown path {other}: own, nginx, pingora or record"),
            };
            let n = stack.spawn_gateway(&env);
            let port = stack.gateways[n].port;
            let pid = stack.gateways[n].pid();
            let head =
                raw::upgrade_head(port, &format!("/s/{id}/ws"), &[("Authorization", &bearer)]);
            figures.push(run.measure(name, pid, port, &head, count, &held));
            stack.gateways[n].kill9();
        }
    }

    println!();
    println!("| path | idle terminals | RSS fresh | RSS after the cycles | RSS with the terminals | KiB per open terminal | the same at the hold's maximum | the same from fresh | descriptors per open terminal | closed |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for f in &figures {
        println!(
            "| {} | {} | {} KiB | {} KiB | {} KiB | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            f.path,
            f.count,
            f.rss_fresh,
            f.rss_before,
            f.rss_after,
            f.per_open(f.rss_after),
            f.per_open(f.rss_hold_max),
            f.per_open_from_fresh(),
            f.fds_per_terminal,
            f.closed
        );
    }
    let row =
        |path: &str, count: usize| figures.iter().find(|f| f.path == path && f.count == count);
    for &count in &counts {
        if let (Some(own), Some(nginx)) = (row("own tunnel", count), row("nginx", count)) {
            let (o, n) = (own.per_open(own.rss_after), nginx.per_open(nginx.rss_after));
            let (of, nf) = (own.per_open_from_fresh(), nginx.per_open_from_fresh());
            println!(
                "{count} terminals: own tunnel {o:.1} KiB, nginx {n:.1} KiB per terminal: {:.2}× (from fresh: {of:.1} against {nf:.1} KiB, {:.2}×)",
                o / n,
                of / nf
            );
        }
    }
}

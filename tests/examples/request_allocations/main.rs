//! Heap allocations the gateway makes per request, counted by preloading a small
//! counter of the C allocator's calls into one gateway process (`count.c`, compiled
//! here with `cc`): an API call passed to control, and a terminal's upgrade, first
//! message, first frame and close through the own tunnel (a target on a plain
//! `ttyd -W sh`, so no container is made per terminal). What the process allocates
//! meanwhile on its own (timers, the route feed) is measured over an idle interval
//! and taken off.
//!
//! ```sh
//! cargo build --workspace --bins --examples --locked
//! target/debug/examples/request_allocations            # REQUESTS=2000
//! # another gateway build (an earlier commit's, say): a directory holding it as
//! # termgate-gateway, and links to this build's other binaries
//! TERMGATE_BIN_DIR=/tmp/before target/debug/examples/request_allocations
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::raw;
use e2e::stack::{http, GatewayStack};
use e2e::ttyd::TtydPool;

/// The counter's last written figure.
fn count(file: &Path) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(n) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return n;
        }
        assert!(Instant::now() < deadline, "the counter writes no figure");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A count taken once the counter has written at least twice since now.
fn settled(file: &Path) -> (u64, Instant) {
    std::thread::sleep(Duration::from_millis(60));
    (count(file), Instant::now())
}

/// One terminal: upgrade, ttyd's opening message, the first frame back, close.
fn terminal(port: u16, head: &str) {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_nodelay(true).unwrap();
    raw::upgrade(&mut conn, head);
    let hello = br#"{"AuthToken":"","columns":80,"rows":24}"#;
    let mut f = raw::frame_header(hello.len() as u64);
    f.extend_from_slice(hello);
    conn.write_all(&f).unwrap();
    let mut h = [0u8; 2];
    conn.read_exact(&mut h).unwrap();
}

fn main() {
    let requests: u64 = std::env::var("REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("count.so");
    let source = dir.path().join("count.c");
    std::fs::write(&source, include_str!("count.c")).unwrap();
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&shim)
        .arg(&source)
        .arg("-lpthread")
        .status()
        .expect("cc");
    assert!(built.success(), "the counter does not compile");
    let file = dir.path().join("count");

    let mut stack = GatewayStack::start("");
    let ttyd = TtydPool::start_plain(true, &["-P", "3600"]);
    let sock = ttyd.socket_path().unwrap().to_path_buf();
    let id = stack.register_target("alloc", &sock, &["alice"]);
    let (shim, file_s) = (shim.display().to_string(), file.display().to_string());
    let n = stack.spawn_gateway(&[
        ("LD_PRELOAD", shim.as_str()),
        ("TERMGATE_ALLOC_COUNT_FILE", file_s.as_str()),
    ]);
    let port = stack.gateways[n].port;
    let alice = stack.control.token("alice", false);
    let bearer = format!("Bearer {alice}");
    let head = raw::upgrade_head(port, &format!("/s/{id}/ws"), &[("Authorization", &bearer)]);
    let api = stack.url(n, "/api/sessions");
    let call = || {
        let a = http("GET", &api, Some(&alice), None).unwrap();
        assert_eq!(a.status, 200, "{}", a.text);
    };
    for _ in 0..200 {
        call();
        terminal(port, &head);
    }

    let (c0, t0) = settled(&file);
    std::thread::sleep(Duration::from_secs(3));
    let (c1, t1) = settled(&file);
    let idle_per_sec = c1.saturating_sub(c0) as f64 / (t1 - t0).as_secs_f64();
    let mut rows = Vec::new();
    for (name, run) in [
        ("API call passed to control", &call as &dyn Fn()),
        ("terminal: upgrade, first message, close", &|| {
            terminal(port, &head)
        }),
    ] {
        let (c0, t0) = settled(&file);
        for _ in 0..requests {
            run();
        }
        let (c1, t1) = settled(&file);
        let idle = idle_per_sec * (t1 - t0).as_secs_f64();
        let per = (c1.saturating_sub(c0) as f64 - idle) / requests as f64;
        rows.push((name, per, (t1 - t0).as_secs_f64(), idle));
    }
    println!(
        "gateway: {}; {requests} requests each; idle: {idle_per_sec:.1} allocations/s",
        e2e::binary("termgate-gateway").display()
    );
    println!("| request | allocations per request | interval | idle taken off |");
    println!("|---|---:|---:|---:|");
    for (name, per, secs, idle) in rows {
        println!("| {name} | {per:.1} | {secs:.1} s | {idle:.0} |");
    }
}

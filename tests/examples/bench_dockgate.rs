//! dockgate against the daemon's own socket, side by side in one run, interleaved:
//!
//! - **bulk**: an attach stream (the pool's path) carrying `BENCH_DOCKGATE_MB` MiB
//!   (default 256) of a container's output (no TTY, no log driver: the daemon's fastest), through dockgate's attach socket and
//!   straight from the daemon's socket, `BENCH_DOCKGATE_ROUNDS` rounds each (default 5);
//! - **create**: control's container create (the body the configuration declares, so
//!   dockgate's comparison is in the figure), through dockgate's control socket and
//!   straight, `BENCH_DOCKGATE_CREATES` each (default 40); each container is removed
//!   after it is timed.
//!
//! `TERMGATE_BIN_DIR=target/release target/release/examples/bench_dockgate`
//! (`cargo build --release --workspace --bins --examples` first). Prints a Markdown table.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e::dockgate::DeclaredGate;
use e2e::random_hex;
use e2e::stack::docker;
use serde_json::{json, Value};

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn daemon_socket() -> PathBuf {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
}

/// Sends one request on a fresh connection; returns the status and the body.
fn request(socket: &Path, method: &str, target: &str, body: Option<&[u8]>) -> (u16, Vec<u8>) {
    let mut s = UnixStream::connect(socket).expect("connect");
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n");
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write");
    if let Some(b) = body {
        s.write_all(b).expect("write body");
    }
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read");
    let text = String::from_utf8_lossy(&got);
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| got[i + 4..].to_vec())
        .unwrap_or_default();
    (status, body)
}

/// A labelled container with this command and TTY, and room to write, made on the
/// daemon directly: the attach streams are what is measured.
fn create_body(instance: &str, cmd: &[&str], tty: bool) -> Value {
    json!({
        "Image": std::env::var("TERMGATE_SESSION_IMAGE")
            .unwrap_or_else(|_| "termgate/session:dev".into()),
        "User": "1000:1000",
        "Tty": tty,
        "OpenStdin": true,
        "Cmd": cmd,
        "Labels": {"termgate.managed": "session", "termgate.instance": instance},
        "HostConfig": {
            "Memory": 268_435_456,
            "MemorySwap": 268_435_456,
            "NanoCpus": 1_000_000_000,
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges:true"],
            "NetworkMode": "none"
        }
    })
}

fn create(socket: &Path, name: &str, body: &Value) -> String {
    let bytes = body.to_string().into_bytes();
    let (status, answer) = request(
        socket,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(&bytes),
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&answer));
    let v: Value = serde_json::from_slice(&answer).expect("create answer");
    v["Id"].as_str().expect("id").to_owned()
}

fn remove(id: &str) {
    let _ = docker(&["rm", "-f", id]);
}

/// Attaches to `id` through `socket`, lets its program write, and reads the stream to
/// its end; returns the bytes and how long they took from the first one.
fn bulk(socket: &Path, id: &str) -> (usize, Duration) {
    let mut s = UnixStream::connect(socket).expect("connect");
    let head = format!(
        "POST /containers/{id}/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("write");
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).expect("read head"), 1, "head");
        got.push(byte[0]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    // The program waits for a line on stdin before it writes.
    s.write_all(b"go\n").expect("go");
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0usize;
    let mut first: Option<Instant> = None;
    loop {
        let r = s.read(&mut buf).expect("read");
        if r == 0 {
            break;
        }
        first.get_or_insert_with(Instant::now);
        n += r;
    }
    (n, first.map(|f| f.elapsed()).unwrap_or_default())
}

/// User and system CPU seconds process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest: Vec<&str> = stat
        .rfind(')')
        .map(|i| stat[i + 2..].split(' ').collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        rest.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime, in clock ticks of 1/100 s (USER_HZ on Linux).
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let mb = env_num("BENCH_DOCKGATE_MB", 256);
    let mb_tty = env_num("BENCH_DOCKGATE_TTY_MB", 64);
    let rounds = env_num("BENCH_DOCKGATE_ROUNDS", 5);
    let creates = env_num("BENCH_DOCKGATE_CREATES", 40);
    let instance = format!("bench{}", random_hex(4));
    let declared = DeclaredGate::start(&instance, "");
    let gate = &declared.gate;
    let daemon = daemon_socket();
    let paths = [
        ("direct", daemon.clone(), daemon.clone()),
        ("dockgate", gate.socket("attach"), gate.socket("control")),
    ];

    // Bulk output over an attach stream: as a pool attaches to a session (a TTY, the
    // daemon's default log driver), and at the daemon's fastest (no TTY, no log
    // driver: a TTY's line discipline and the json-file logger slow the daemon
    // down), where what the proxy costs shows most.
    let cpu_before = cpu_seconds(gate.pid());
    let session = bulk_rates(&daemon, &paths, &instance, mb_tty, rounds, true);
    let raw = bulk_rates(&daemon, &paths, &instance, mb, rounds, false);
    eprintln!(
        "session attach MB/s, direct {:.1?} dockgate {:.1?}",
        session[0], session[1]
    );
    eprintln!(
        "raw attach MB/s, direct {:.0?} dockgate {:.0?}",
        raw[0], raw[1]
    );
    let cpu = cpu_seconds(gate.pid()) - cpu_before;
    let moved = (rounds + 1) * (mb + mb_tty);

    // Control's create, of the body the configuration declares (its owner's home
    // volume made first, as control does).
    let (home, home_body) = declared.home_body("bench");
    let (status, answer) = request(
        &paths[1].2,
        "POST",
        "/volumes/create",
        Some(home_body.to_string().as_bytes()),
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&answer));
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    for round in 0..creates {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let control = &paths[i].2;
            let mut random = [0u8; 10];
            random.iter_mut().for_each(|b| *b = rand_byte());
            let session = policy::SessionId::from_random(random).to_string();
            let (name, body) = declared.session_body("default", &session, "bench");
            let start = Instant::now();
            let id = create(control, &name, &body);
            lat[i].push(start.elapsed().as_secs_f64() * 1e3);
            remove(&id);
        }
    }

    println!("| path | session attach MB/s (TTY, {mb_tty} MiB) | raw attach MB/s (no TTY, {mb} MiB) | create p50 ms | create p90 ms |");
    println!("|---|---:|---:|---:|---:|");
    let mut medians = Vec::new();
    for (i, (name, _, _)) in paths.iter().enumerate() {
        lat[i].sort_by(f64::total_cmp);
        let (s, r) = (median(&session[i]), median(&raw[i]));
        let (p50, p90) = (percentile(&lat[i], 0.5), percentile(&lat[i], 0.9));
        medians.push((s, r, p50));
        println!("| {name} | {s:.1} | {r:.0} | {p50:.2} | {p90:.2} |");
    }
    println!(
        "\nthrough dockgate: session attach {:.3}× direct, raw attach {:.3}× direct (medians of {rounds}); create overhead p50 {:+.2} ms ({creates} creates each)",
        medians[1].0 / medians[0].0,
        medians[1].1 / medians[0].1,
        medians[1].2 - medians[0].2
    );
    println!(
        "dockgate's CPU for the bulk parts: {cpu:.2} s for {moved} MiB ({:.2} ms/MiB)",
        cpu * 1e3 / moved as f64
    );
    let _ = docker(&["volume", "rm", &home]);
}

/// A byte from the kernel's randomness.
fn rand_byte() -> u8 {
    let mut b = [0u8; 1];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("randomness");
    b[0]
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

/// MB/s of `rounds` bulk attaches on each path (after one warm-up round each),
/// interleaved, each round starting with the other path.
fn bulk_rates(
    daemon: &Path,
    paths: &[(&str, PathBuf, PathBuf); 2],
    instance: &str,
    mb: usize,
    rounds: usize,
    tty: bool,
) -> [Vec<f64>; 2] {
    let script = format!("read x; dd if=/dev/zero bs=1048576 count={mb} 2>/dev/null");
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..rounds + 1 {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let name = format!("termgate-bench-{}", random_hex(5));
            let mut body = create_body(instance, &["-c", &script], tty);
            if !tty {
                body["HostConfig"]["LogConfig"] = json!({"Type": "none"});
            }
            let id = create(daemon, &name, &body);
            let (status, _) = request(daemon, "POST", &format!("/containers/{id}/start"), None);
            assert_eq!(status, 204);
            let (n, took) = bulk(&paths[i].1, &id);
            remove(&id);
            assert!(n >= mb * 1024 * 1024, "{n} bytes");
            if round > 0 {
                rates[i].push(n as f64 / took.as_secs_f64() / 1e6);
            }
        }
    }
    rates
}

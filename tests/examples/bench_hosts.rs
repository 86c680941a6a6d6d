//! A Docker host reached over mutual TLS against the same host reached in the clear,
//! side by side in one run, interleaved:
//!
//! - **pools**: one control and one gateway, and three Docker hosts on the machine's
//!   daemon that differ only in how the gateway reaches their ttyd pool (production's
//!   command, `deploy/ttyd-attach`, ttyd `-P 5`):
//!   - *plain*: ttyd on loopback TCP (`ttyd_pool = ["127.0.0.1:<port>"]`);
//!   - *mTLS front*: `tls://` to `termgate-dockgate --pool-listen`, which admits
//!     `gateway` certificates and splices to the pool's unix socket (what
//!     `deploy/host-up` runs);
//!   - *ttyd's own TLS*: `tls://` to ttyd itself (`-S -C -K -A`: it checks the CA, not
//!     the role).
//!
//!   Keystroke round trip (`BENCH_HOSTS_KEYS` per path, default 500, one key on each
//!   path in turn) and bulk output (`head -c <BENCH_HOSTS_BULK_MB>M /dev/zero |
//!   base64`, default 32, `BENCH_HOSTS_BULK_ROUNDS` rounds, default 7, the paths'
//!   order rotated each round), with the CPU time the gateway, ttyd and the front spent
//!   per MB of output;
//! - **creates**: control's create of the declared body through one dockgate's control
//!   socket and through its `--tls-listen` with a `control` certificate, each on a kept
//!   connection and on a fresh one per create (`BENCH_HOSTS_CREATES` each, default 60).
//!   Control keeps its unix connections (bollard's pool) and dials every call to a
//!   `tls://` host afresh, with a full handshake (`control/src/docker/tls.rs`).
//!
//! `TERMGATE_BIN_DIR=target/release target/release/examples/bench_hosts`
//! (`cargo build --release --workspace --bins --examples` first). Prints Markdown tables.

#[path = "bench_paths/machine.rs"]
mod machine;
// The client every path of bench_paths is measured with; not all of it is used here.
#[allow(dead_code)]
#[path = "bench_paths/ws.rs"]
mod ws;

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::dockgate::{DeclaredGate, Dockgate};
use e2e::pki::{self, Pki};
use e2e::random_hex;
use e2e::stack::{free_port, wait_for, ControlStack, GatewayStack};
use e2e::stats::{env_num, median, msf, pct};
use e2e::term::Target;
use e2e::ttyd::{CountingProxy, TtydPool};
use serde_json::Value;
use ws::{Endpoint, Ws};

/// The pool paths, as the tables name them, and their hosts' (and profiles') names.
const POOLS: [(&str, &str); 3] = [
    ("plain TCP", "plain"),
    ("mTLS front (dockgate)", "front"),
    ("ttyd's own TLS", "ttydtls"),
];
const PLAIN: usize = 0;
const DEADLINE: Duration = Duration::from_secs(20);

fn daemon_socket() -> PathBuf {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
}

fn path_text(p: &Path) -> String {
    p.display().to_string()
}

/// Control and a gateway, three hosts on the machine's daemon and their pools, and one
/// session on each host (the fields drop in order: processes before their files).
struct Pools {
    stack: GatewayStack,
    /// The front of the `front` host's pool.
    front: Dockgate,
    /// The plain, unix (fronted) and TLS pools, in [`POOLS`] order.
    pools: Vec<TtydPool>,
    _pki: Pki,
    /// Each path's terminal, in [`POOLS`] order.
    endpoints: Vec<Endpoint>,
}

impl Pools {
    fn start() -> Pools {
        let image = std::env::var("TERMGATE_SESSION_IMAGE")
            .unwrap_or_else(|_| "termgate/session:dev".into());
        // The two-CPU profile of bench_paths, one per host so each session's host is
        // the one named.
        let profiles: String = POOLS
            .iter()
            .map(|(_, host)| {
                format!(
                    "[profiles.{host}]\ndescription = \"benchmark: two CPUs on {host}\"\n\
                     image = \"{image}\"\ncommand = []\nuser = \"1000:1000\"\nnetwork = \"none\"\n\
                     memory_mb = 512\npids_limit = 128\ncpus = 2.0\ntmp_size_mb = 64\n\
                     home = \"/home/user\"\nenv = {{ TERM = \"xterm-256color\" }}\n\
                     hosts = [\"{host}\"]\nreadonly_rootfs = true\n"
                )
            })
            .collect();
        let mut control = ControlStack::prepare(&profiles);
        control.set_env("TERMGATE__QUOTA__PER_USER", "50");
        control.set_env("TERMGATE__QUOTA__GLOBAL", "100");
        let pki = Pki::init();
        let gateway_cert = pki.issue("gateway", "gw", &[]);
        let front_cert = pki.issue("dockgate", "front", &["127.0.0.1"]);
        let ttyd_cert = pki.issue("dockgate", "ttyd", &["127.0.0.1"]);

        let plain = TtydPool::start_tcp_for(&control.instance, free_port());
        let unix = TtydPool::start_for(&control.instance);
        let ssl = TtydPool::start_ssl_for(
            &control.instance,
            free_port(),
            (&ttyd_cert.cert, &ttyd_cert.key, &pki.ca()),
        );
        let front_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let front = Dockgate::start_with(
            &control.instance,
            &[
                "--tls-cert",
                &path_text(&front_cert.cert),
                "--tls-key",
                &path_text(&front_cert.key),
                "--tls-ca",
                &path_text(&pki.ca()),
                "--pool-listen",
                &front_addr.to_string(),
                "--pool-socket",
                &path_text(unix.socket_path().expect("a unix pool")),
            ],
        );
        wait_for("the pool's front to listen", DEADLINE, || {
            TcpStream::connect(front_addr).ok()
        });

        let base = std::fs::read_to_string(control.dir.config_path()).expect("config");
        let config = base
            .replacen(
                "[gateway]\n",
                &format!(
                    "[gateway]\nclient_cert_file = {:?}\nclient_key_file = {:?}\n",
                    path_text(&gateway_cert.cert),
                    path_text(&gateway_cert.key)
                ),
                1,
            )
            .replacen(
                "[pki]\n",
                &format!("[pki]\nca_file = {:?}\n", path_text(&pki.ca())),
                1,
            );
        assert_ne!(config, base, "the example has [gateway] and [pki]");
        let daemon = format!("unix://{}", daemon_socket().display());
        let pool_of = [
            format!("127.0.0.1:{}", plain.port().expect("a TCP pool")),
            format!("tls://{front_addr}"),
            format!("tls://127.0.0.1:{}", ssl.port().expect("a TCP pool")),
        ];
        let hosts: String = POOLS
            .iter()
            .zip(&pool_of)
            .map(|((_, host), pool)| {
                format!(
                    "\n[[docker.hosts]]\nname = \"{host}\"\nendpoint = \"{daemon}\"\n\
                     ttyd_pool = [\"{pool}\"]\ncapacity = 4\n"
                )
            })
            .collect();
        control.dir.write_config(&format!("{config}{hosts}"));
        control.unset_env("TERMGATE__CONTROL__DOCKER_HOST");
        control.spawn(&[]);
        let local = TtydPool::start_for(&control.instance);
        let counter = CountingProxy::start(local.target());
        let limits = [
            (
                "TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER",
                "100000".to_owned(),
            ),
            (
                "TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION",
                "100000".to_owned(),
            ),
        ];
        let stack = GatewayStack::assemble_with_env(control, local, counter, &limits);

        let token = stack.control.token("alice", false);
        let gateway = SocketAddr::from(([127, 0, 0, 1], stack.gw().port));
        let endpoints = POOLS
            .iter()
            .map(|(_, host)| {
                let s = stack.control.create_with(&token, host);
                assert_eq!(s["host"], *host, "{s}");
                Endpoint {
                    target: Target::Tcp(gateway),
                    host: gateway.to_string(),
                    path: format!("/s/{}/ws", s["id"].as_str().expect("id")),
                    headers: vec![("Authorization".into(), format!("Bearer {token}"))],
                }
            })
            .collect();
        Pools {
            stack,
            front,
            pools: vec![plain, unix, ssl],
            _pki: pki,
            endpoints,
        }
    }

    /// The processes of path `p`'s pool side: its ttyd, and the front before it (none
    /// on the other paths).
    fn pool_side(&self, p: usize) -> ([u32; 1], Vec<u32>) {
        let ttyd = [self.pools[p].pid().expect("ttyd runs")];
        let front = if POOLS[p].1 == "front" {
            vec![self.front.pid()]
        } else {
            Vec::new()
        };
        (ttyd, front)
    }
}

/// Reads and drops whatever arrives within `quiet` of the last frame.
fn drain(w: &mut Ws, quiet: Duration) {
    let _ = w.set_read_timeout(Some(quiet));
    while w.next(|_| ()).is_ok() {}
    let _ = w.set_read_timeout(Some(DEADLINE));
}

/// An attached terminal with a shell that answers. What is typed before `docker
/// attach` has taken the terminal can be lost, so the question is asked again each
/// second (a short read timeout: ttyd's pings would keep `until` waiting).
fn terminal(e: &Endpoint) -> Ws {
    let mut w = Ws::open(e, DEADLINE).unwrap_or_else(|err| panic!("open {}: {err}", e.path));
    w.hello().expect("hello");
    let _ = w.set_read_timeout(Some(Duration::from_secs(1)));
    let start = Instant::now();
    loop {
        w.input(b"echo ready-$((20+22))\r").expect("type");
        if w.until(b"ready-42", Duration::from_secs(1)).is_ok() {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{}: the shell never answered",
            e.path
        );
    }
    drain(&mut w, Duration::from_millis(300));
    w
}

/// CPU time of processes `pids`, all their threads, in nanoseconds (the first field of
/// each thread's `schedstat`: time spent running).
fn cpu_ns(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).ok())
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// What one pool path measured.
#[derive(Default)]
struct PoolFigures {
    keys: Vec<Duration>,
    /// MB/s of each bulk round.
    bulk: Vec<f64>,
    bytes: u64,
    gateway_cpu_ns: u64,
    ttyd_cpu_ns: u64,
    front_cpu_ns: u64,
}

fn pool_bench(p: &Pools, keys: usize, bulk_mb: usize, bulk_rounds: usize) -> Vec<PoolFigures> {
    let n = POOLS.len();
    let mut figures: Vec<PoolFigures> = (0..n).map(|_| PoolFigures::default()).collect();

    // Keystrokes: one terminal per path, opened first so that every path is warm.
    let mut terms: Vec<Ws> = p.endpoints.iter().map(terminal).collect();
    // One key on each path in turn, the order rotated each time: a burst of load
    // from elsewhere on the machine falls on every path alike.
    for key in 0..keys {
        for k in 0..n {
            let i = (key + k) % n;
            let w = &mut terms[i];
            // A letter, then a delete: the line stays short.
            let byte: &[u8] = if key % 2 == 0 { b"x" } else { b"\x7f" };
            let start = Instant::now();
            w.input(byte).expect("type");
            w.next(|_| ()).expect("the echo");
            figures[i].keys.push(start.elapsed());
            drain(w, Duration::from_millis(2));
        }
    }
    drop(terms);
    eprintln!("keystrokes done");

    // Bulk output: a fresh terminal each round (one left unread meanwhile would miss
    // ttyd's pings and be hung up).
    let gateway = [p.stack.gw().pid()];
    let cmd = format!(
        "head -c {} /dev/zero | base64; echo bulk-$((20+22))-end\r",
        bulk_mb * 1024 * 1024
    );
    for r in 0..bulk_rounds {
        for k in 0..n {
            let i = (r + k) % n;
            eprintln!("bulk round {} on {}", r + 1, POOLS[i].0);
            let mut w = terminal(&p.endpoints[i]);
            let (ttyd, front) = p.pool_side(i);
            let before = [cpu_ns(&gateway), cpu_ns(&ttyd), cpu_ns(&front)];
            let start = Instant::now();
            w.input(cmd.as_bytes()).expect("type");
            let bytes = w
                .until(b"bulk-42-end", Duration::from_secs(600))
                .unwrap_or_else(|e| panic!("bulk output on {}: {e}", POOLS[i].0));
            let took = start.elapsed();
            let f = &mut figures[i];
            f.gateway_cpu_ns += cpu_ns(&gateway).saturating_sub(before[0]);
            f.ttyd_cpu_ns += cpu_ns(&ttyd).saturating_sub(before[1]);
            f.front_cpu_ns += cpu_ns(&front).saturating_sub(before[2]);
            f.bytes += bytes;
            f.bulk.push(bytes as f64 / took.as_secs_f64() / 1e6);
            drain(&mut w, Duration::from_millis(300));
            w.close();
        }
        eprintln!("bulk round {} of {bulk_rounds} done", r + 1);
    }
    figures
}

/// One HTTP/1.1 request on `s`, written at once, and its whole answer: the status,
/// the head (lower case) and the body (de-chunked).
fn exchange<S: Read + Write + ?Sized>(s: &mut S, request: &[u8]) -> (u16, String, Vec<u8>) {
    s.write_all(request).expect("write the request");
    s.flush().expect("flush the request");
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf).expect("read the answer");
        got.extend_from_slice(&buf[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            assert!(
                n > 0,
                "closed before a head: {}",
                String::from_utf8_lossy(&got)
            );
            continue;
        };
        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
        let status: u16 = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
        let rest = &got[end + 4..];
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        let body = if status == 204 || status == 304 {
            Some(Vec::new())
        } else if let Some(len) = len {
            rest.get(..len).map(<[u8]>::to_vec)
        } else if head.contains("transfer-encoding: chunked") {
            rest.ends_with(b"0\r\n\r\n").then(|| dechunk(rest))
        } else {
            // Neither: the body ends with the connection.
            (n == 0).then(|| rest.to_vec())
        };
        if let Some(body) = body {
            return (status, head, body);
        }
        assert!(n > 0, "closed before a whole answer: {head}");
    }
}

/// The data of a chunked body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16);
        let start = eol + 2;
        match size {
            Ok(n) if n > 0 && b.len() >= start + n => {
                out.extend_from_slice(&b[start..start + n]);
                b = b.get(start + n + 2..).unwrap_or_default();
            }
            _ => break,
        }
    }
    out
}

/// A request with a JSON body, kept alive or closing its connection after the answer.
fn request_bytes(method: &str, target: &str, body: Option<&Value>, close: bool) -> Vec<u8> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut r = format!("{method} {target} HTTP/1.1\r\nHost: docker\r\n");
    if close {
        r.push_str("Connection: close\r\n");
    }
    if !body.is_empty() {
        let _ = write!(
            r,
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
    }
    r.push_str("\r\n");
    r.push_str(&body);
    r.into_bytes()
}

/// The Docker API paths of the create benchmark.
const CREATE_PATHS: [&str; 4] = [
    "control socket, kept connection (control to a local host)",
    "control socket, fresh connection",
    "mutual TLS, kept connection",
    "mutual TLS, fresh connection + handshake (control to a tls:// host)",
];

/// Latencies of `creates` creates of the declared body on each of [`CREATE_PATHS`],
/// interleaved, each container removed (on the daemon's socket) after it was timed.
fn create_bench(creates: usize) -> Vec<Vec<Duration>> {
    let instance = format!("bench{}", random_hex(4));
    let pki = Pki::init();
    let server = pki.issue("dockgate", "local", &["127.0.0.1"]);
    let control_cert = pki.issue("control", "control", &[]);
    let api = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let declared = DeclaredGate::start_with(
        &instance,
        "",
        &[
            "--tls-listen",
            &api.to_string(),
            "--tls-cert",
            &path_text(&server.cert),
            "--tls-key",
            &path_text(&server.key),
            "--tls-ca",
            &path_text(&pki.ca()),
        ],
    );
    wait_for("dockgate's TLS listener", DEADLINE, || {
        TcpStream::connect(api).ok()
    });
    let socket = declared.gate.socket("control");
    let client = pki.client(Some(&control_cert));
    let tls = || {
        let s = pki::connect(api, client.clone()).expect("TLS to dockgate");
        s.sock.set_read_timeout(Some(DEADLINE)).expect("timeout");
        s.sock.set_nodelay(true).expect("nodelay");
        s
    };
    let unix = || UnixStream::connect(&socket).expect("dockgate's control socket");

    // The owner's home volume first, as control makes it.
    let (home, home_body) = declared.home_body("bench");
    let (status, _, answer) = exchange(
        &mut unix(),
        &request_bytes("POST", "/volumes/create", Some(&home_body), true),
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&answer));

    let mut kept_unix = unix();
    let mut kept_tls = tls();
    let version = request_bytes("GET", "/version", None, false);
    assert_eq!(
        exchange(&mut kept_unix, &version).0,
        200,
        "the kept unix connection"
    );
    assert_eq!(
        exchange(&mut kept_tls, &version).0,
        200,
        "the kept TLS connection"
    );
    let daemon = daemon_socket();
    let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); CREATE_PATHS.len()];
    for round in 0..creates {
        for k in 0..CREATE_PATHS.len() {
            let i = (round + k) % CREATE_PATHS.len();
            let session = policy::SessionId::from_random(random_bytes()).to_string();
            let (name, body) = declared.session_body("default", &session, "bench");
            let target = format!("/containers/create?name={name}");
            let start = Instant::now();
            let (status, head, answer) = match i {
                0 => exchange(
                    &mut kept_unix,
                    &request_bytes("POST", &target, Some(&body), false),
                ),
                1 => exchange(
                    &mut unix(),
                    &request_bytes("POST", &target, Some(&body), true),
                ),
                2 => exchange(
                    &mut kept_tls,
                    &request_bytes("POST", &target, Some(&body), false),
                ),
                _ => exchange(
                    &mut tls(),
                    &request_bytes("POST", &target, Some(&body), true),
                ),
            };
            lat[i].push(start.elapsed());
            assert_eq!(
                status,
                201,
                "{}: {head}\n{}",
                CREATE_PATHS[i],
                String::from_utf8_lossy(&answer)
            );
            assert!(
                i % 2 == 1 || !head.contains("connection: close"),
                "{} was closed by the server",
                CREATE_PATHS[i]
            );
            let id: Value = serde_json::from_slice(&answer).expect("the create's answer");
            let id = id["Id"].as_str().expect("an id");
            let (status, _, _) = exchange(
                &mut UnixStream::connect(&daemon).expect("the daemon's socket"),
                &request_bytes("DELETE", &format!("/containers/{id}?force=1"), None, true),
            );
            assert_eq!(status, 204, "remove {id}");
        }
    }
    let _ = Command::new("docker")
        .args(["volume", "rm", &home])
        .output();
    lat
}

fn random_bytes() -> [u8; 10] {
    let mut b = [0u8; 10];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("randomness");
    b
}

fn main() {
    let began = Instant::now();
    let keys = env_num("BENCH_HOSTS_KEYS", 500);
    let bulk_mb = env_num("BENCH_HOSTS_BULK_MB", 32);
    let bulk_rounds = env_num("BENCH_HOSTS_BULK_ROUNDS", 7);
    let creates = env_num("BENCH_HOSTS_CREATES", 60);
    let facts = machine::machine_facts(&[]);

    let pools = Pools::start();
    eprintln!("stack up in {:.1} s", began.elapsed().as_secs_f64());
    let mut figures = pool_bench(&pools, keys, bulk_mb, bulk_rounds);
    drop(pools);
    eprintln!("pools done ({:.0} s)", began.elapsed().as_secs_f64());
    let mut lat = create_bench(creates);
    eprintln!("creates done ({:.0} s)", began.elapsed().as_secs_f64());

    println!("{facts}");
    println!(
        "Run took {:.1} min; BENCH_HOSTS_KEYS={keys} BENCH_HOSTS_BULK_MB={bulk_mb} \
         BENCH_HOSTS_BULK_ROUNDS={bulk_rounds} BENCH_HOSTS_CREATES={creates}.\n",
        began.elapsed().as_secs_f64() / 60.0
    );

    println!(
        "| pool path | keystroke p50 | p99 | p50 ÷ plain | bulk MB/s (median) | each round | ÷ plain | CPU ms/MB: gateway | ttyd | front |"
    );
    println!("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    let p50: Vec<f64> = figures
        .iter_mut()
        .map(|f| msf(pct(&mut f.keys, 0.5)))
        .collect();
    let bulk: Vec<f64> = figures.iter().map(|f| median(&f.bulk)).collect();
    for (i, f) in figures.iter_mut().enumerate() {
        let p99 = msf(pct(&mut f.keys, 0.99));
        let mb = f.bytes as f64 / 1e6;
        let rounds: Vec<String> = f.bulk.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "| {} | {:.3} ms | {p99:.3} ms | {:.2}× | {:.2} | {} | {:.3}× | {:.1} | {:.1} | {} |",
            POOLS[i].0,
            p50[i],
            p50[i] / p50[PLAIN],
            bulk[i],
            rounds.join(", "),
            bulk[i] / bulk[PLAIN],
            f.gateway_cpu_ns as f64 / 1e6 / mb,
            f.ttyd_cpu_ns as f64 / 1e6 / mb,
            if POOLS[i].1 == "front" {
                format!("{:.1}", f.front_cpu_ns as f64 / 1e6 / mb)
            } else {
                "—".into()
            },
        );
    }
    let front = 1;
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    println!(
        "\nmTLS front against plain: throughput {:.3}× (goal ≥ 0.95×: {}), keystroke p50 {:.2}× (goal ≤ 1.1×: {})",
        bulk[front] / bulk[PLAIN],
        verdict(bulk[front] / bulk[PLAIN] >= 0.95),
        p50[front] / p50[PLAIN],
        verdict(p50[front] / p50[PLAIN] <= 1.1),
    );

    println!("\n| Docker API path | create p50 | create p90 | p50 − control socket, kept |");
    println!("|---|---:|---:|---:|");
    let c50: Vec<f64> = lat.iter_mut().map(|l| msf(pct(l, 0.5))).collect();
    for (i, l) in lat.iter_mut().enumerate() {
        println!(
            "| {} | {:.2} ms | {:.2} ms | {:+.2} ms |",
            CREATE_PATHS[i],
            c50[i],
            msf(pct(l, 0.9)),
            c50[i] - c50[0]
        );
    }
    let overhead = c50[3] - c50[0];
    println!(
        "\ncontrol's create to a tls:// host against a local one: p50 {overhead:+.2} ms (goal ≤ 3 ms: {}); of which the handshake (fresh − kept TLS) {:+.2} ms",
        verdict(overhead <= 3.0),
        c50[3] - c50[2]
    );
}

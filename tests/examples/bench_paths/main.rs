//! The data plane side by side: five paths to the same ttyd pool, measured in one run,
//! interleaved, with the same client (`ws.rs`) for each.
//!
//! - **direct ttyd**: the pool's unix socket, `/ws?arg=<container>`;
//! - **nginx**: nginx (the Debian package) as a plain proxy to that socket;
//! - **nginx + auth_request**: `deploy/nginx/termgate-authz.conf`, each upgrade checked
//!   by control's `GET /v1/authz`;
//! - **termgate**: the gateway;
//! - **tokio relay**: the floor of a proxy on tokio, in front of the same socket
//!   ([`relay`]).
//!
//! Scenarios: upgrade latency at 1/16/64 clients at once, to a working terminal, the
//! highest sustained upgrade rate (closed-loop clients, more each step, until a step
//! fails), keystroke round trip, bulk output, idle memory per terminal.
//!
//! Run with `deploy/bench` (release build; writes `docs/bench/`). Counts scale with
//! `BENCH_SCALE` (default 1), `BENCH_BULK_MB` (default 64) and `BENCH_IDLE` (default
//! `1000,5000`). Prints the report and writes `results.md` and one SVG per scenario
//! into the directory given as the first argument. `BENCH_ONLY=upgrades` measures the
//! upgrade latency alone and prints it, writing nothing. `BENCH_TLS=1` puts nginx (both
//! servers, `ssl`) and the gateway on TLS listeners with one self-signed certificate;
//! direct ttyd and the relay stay plain, as references.

mod machine;
mod relay;
mod svg;
mod ws;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e::nginx::{Nginx, AUTHZ_SNIPPET, SNIPPET_CONTROL, SNIPPET_LISTEN};
use e2e::raw::{fds, raise_nofile, rss_kib};
use e2e::stack::{docker, free_port, ControlStack, GatewayStack};
use e2e::stats::pct;
use e2e::term::Target;
use e2e::ttyd::{CountingProxy, TtydPool};
use svg::{Bar, Chart};
use ws::{Endpoint, Ws};

const PATHS: [&str; 5] = [
    "direct ttyd",
    "nginx",
    "nginx + auth_request",
    "termgate",
    "tokio relay",
];
/// How many paths each scenario interleaves.
const N: usize = PATHS.len();
const DIRECT: usize = 0;
const NGINX: usize = 1;
const AUTHZ: usize = 2;
const TERMGATE: usize = 3;
const RELAY: usize = 4;
const DEADLINE: Duration = Duration::from_secs(20);

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn scaled(n: usize) -> usize {
    ((n as f64) * env_f64("BENCH_SCALE", 1.0)).round().max(1.0) as usize
}

/// Milliseconds, two decimals.
fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn msf(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "—".into()
    }
}

/// Where each path is, for one session.
struct Paths {
    socket: PathBuf,
    plain: u16,
    authz: u16,
    gateway: u16,
    relay: u16,
    bearer: String,
    /// Set when nginx and the gateway listen with TLS: the certificate they present.
    tls: Option<e2e::tls::Pin>,
}

impl Paths {
    fn endpoint(&self, path: usize, id: &str, container: &str) -> Endpoint {
        let plain = |port: u16| Target::Tcp(SocketAddr::from(([127, 0, 0, 1], port)));
        let tcp = |port: u16| match &self.tls {
            Some(pin) => Target::Tls(SocketAddr::from(([127, 0, 0, 1], port)), pin.clone()),
            None => plain(port),
        };
        let host = |port: u16| format!("127.0.0.1:{port}");
        let bearer = vec![("Authorization".to_owned(), self.bearer.clone())];
        match path {
            DIRECT => Endpoint {
                target: Target::Unix(self.socket.clone()),
                host: "localhost".into(),
                path: format!("/ws?arg={container}"),
                // ttyd -H: the header a proxy sets; direct clients bring it themselves.
                headers: vec![("X-Termgate-User".into(), "alice".into())],
            },
            NGINX => Endpoint {
                target: tcp(self.plain),
                host: host(self.plain),
                path: format!("/ws?arg={container}"),
                headers: Vec::new(),
            },
            AUTHZ => Endpoint {
                target: tcp(self.authz),
                host: host(self.authz),
                path: format!("/s/{id}/ws"),
                headers: bearer,
            },
            RELAY => Endpoint {
                target: plain(self.relay),
                host: host(self.relay),
                // Passed on as sent: the relay reads no HTTP.
                path: format!("/ws?arg={container}"),
                headers: vec![("X-Termgate-User".into(), "alice".into())],
            },
            _ => Endpoint {
                target: tcp(self.gateway),
                host: host(self.gateway),
                path: format!("/s/{id}/ws"),
                headers: bearer,
            },
        }
    }
}

/// What became of one upgrade.
enum Outcome {
    /// Connect → `101`; with `full`, then the client's first message and ttyd's first
    /// message, timed from the same start.
    Done(Duration, Option<Duration>),
    /// Upgraded, then closed before ttyd's first message.
    ClosedAfter101(String),
    /// No `101`.
    Failed(String),
}

/// One upgrade, timed from connect to the `101`. Without `full` it is closed there, so
/// ttyd starts no `docker attach` and only the path is measured; with `full` the client
/// sends its first message and waits for ttyd's (a working terminal, and a tunnel that
/// dies right after its `101` is counted).
fn upgrade_once(e: &Endpoint, full: bool) -> Outcome {
    let start = Instant::now();
    let mut w = match Ws::open(e, DEADLINE) {
        Ok(w) => w,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let upgrade = start.elapsed();
    if !full {
        w.close();
        return Outcome::Done(upgrade, None);
    }
    if let Err(e) = w.hello() {
        return Outcome::ClosedAfter101(e.to_string());
    }
    if let Err(e) = w.next(|_| ()) {
        return Outcome::ClosedAfter101(e.to_string());
    }
    let first = start.elapsed();
    w.close();
    Outcome::Done(upgrade, Some(first))
}

#[derive(Default)]
struct Upgrades {
    upgrade: Vec<Duration>,
    /// CPU time the path's proxy processes spent over these upgrades, in nanoseconds.
    cpu_ns: u64,
    first: Vec<Duration>,
    closed_after_101: usize,
    failed: usize,
    last_error: Option<String>,
}

/// `workers` clients at once, each making `each` upgrades one after another.
fn upgrade_batch(e: &Endpoint, workers: usize, each: usize, full: bool, into: &mut Upgrades) {
    let results: Vec<Vec<Outcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| s.spawn(|| (0..each).map(|_| upgrade_once(e, full)).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                // A client that panicked made `each` upgrades that count as failed,
                // not as none.
                h.join().unwrap_or_else(|panic| {
                    let why = panic_message(&panic);
                    (0..each)
                        .map(|_| Outcome::Failed(format!("a client panicked: {why}")))
                        .collect()
                })
            })
            .collect()
    });
    for r in results.into_iter().flatten() {
        match r {
            Outcome::Done(a, b) => {
                into.upgrade.push(a);
                into.first.extend(b);
            }
            Outcome::ClosedAfter101(e) => {
                into.closed_after_101 += 1;
                into.last_error = Some(format!("closed after its 101: {e}"));
            }
            Outcome::Failed(e) => {
                into.failed += 1;
                into.last_error = Some(e);
            }
        }
    }
}

/// What a panicked thread said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Upgrades per second with `workers` clients, each upgrading (connect → `101` →
/// close) one after another for `window`; and how many failed.
struct Rate {
    per_second: f64,
    failed: usize,
    last_error: Option<String>,
}

fn upgrade_rate(e: &Endpoint, workers: usize, window: Duration) -> Rate {
    let start = Instant::now();
    let results: Vec<(usize, usize, Option<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let (mut done, mut failed, mut last) = (0, 0, None);
                    while start.elapsed() < window {
                        match upgrade_once(e, false) {
                            Outcome::Done(..) => done += 1,
                            Outcome::ClosedAfter101(err) | Outcome::Failed(err) => {
                                failed += 1;
                                last = Some(err);
                            }
                        }
                    }
                    (done, failed, last)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or((0, 1, Some("a client panicked".into()))))
            .collect()
    });
    let took = start.elapsed().as_secs_f64();
    Rate {
        per_second: results.iter().map(|r| r.0).sum::<usize>() as f64 / took,
        failed: results.iter().map(|r| r.1).sum(),
        last_error: results.into_iter().find_map(|r| r.2),
    }
}

/// Reads and drops whatever arrives within `quiet` of the last frame.
fn drain(w: &mut Ws, quiet: Duration) {
    let _ = w.set_read_timeout(Some(quiet));
    while w.next(|_| ()).is_ok() {}
    let _ = w.set_read_timeout(Some(DEADLINE));
}

/// A terminal on `e` whose shell answered: `echo <marker>-$((20+22))` typed, and
/// `<marker>-42` read back within [`DEADLINE`]. Otherwise what was seen instead: the
/// refused upgrade, the close frame or the silence, and the terminal's last output
/// (where ttyd's command says why it ended).
fn shell(e: &Endpoint, marker: &str) -> Result<Ws, String> {
    let mut w = Ws::open(e, DEADLINE).map_err(|err| format!("no terminal on {}: {err}", e.path))?;
    let mut seen: Vec<u8> = Vec::new();
    let needle = format!("{marker}-42");
    let answered = w
        .hello()
        .and_then(|()| w.input(format!("echo {marker}-$((20+22))\r").as_bytes()))
        .and_then(|()| {
            let start = Instant::now();
            loop {
                if start.elapsed() > DEADLINE {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no {needle} within {DEADLINE:?}"),
                    ));
                }
                w.next(|p| {
                    // Output frames are ttyd's command `0` followed by the bytes.
                    if let Some((&b'0', out)) = p.split_first() {
                        seen.extend_from_slice(out);
                    }
                })?;
                if seen.windows(needle.len()).any(|at| at == needle.as_bytes()) {
                    return Ok(());
                }
            }
        });
    match answered {
        Ok(()) => {
            drain(&mut w, Duration::from_millis(300));
            Ok(w)
        }
        Err(err) => {
            let tail = String::from_utf8_lossy(&seen[seen.len().saturating_sub(400)..])
                .replace('\r', "")
                .trim()
                .to_owned();
            Err(format!(
                "the shell did not answer on {}: {err}; the terminal's last output: {}",
                e.path,
                if tail.is_empty() {
                    "(none)".into()
                } else {
                    format!("{tail:?}")
                }
            ))
        }
    }
}

/// An attached terminal with a shell that answers.
fn terminal(e: &Endpoint) -> Ws {
    shell(e, "ready").unwrap_or_else(|err| panic!("{err}"))
}

/// The last `n` lines of `text`, indented.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("    {l}\n"))
        .collect()
}

fn container_of(instance: &str, session: &str) -> String {
    docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label=termgate.instance={instance}"),
        "--filter",
        &format!("label=termgate.session={session}"),
    ])
}

/// CPU time of processes `pids`, all their threads, in nanoseconds (the first field of
/// each thread's `/proc/<pid>/task/<tid>/schedstat`: time spent running).
fn cpu_ns(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).ok())
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Total resident memory (KiB) and open files of `pids`.
fn footprint(pids: &[u32]) -> (u64, usize) {
    (
        pids.iter().map(|p| rss_kib(*p)).sum(),
        pids.iter().map(|p| fds(*p)).sum(),
    )
}

struct Idle {
    count: usize,
    path: usize,
    opened: usize,
    alive: usize,
    kib_per: f64,
}

/// Opens `count` websockets on `e` (upgraded, no first message: ttyd starts no
/// attach), holds them idle, and measures `pids`' memory before and after.
fn idle(e: &Endpoint, count: usize, pids: &[u32], path: usize) -> Idle {
    let (fds_before, rss_before) = {
        let (rss, f) = footprint(pids);
        (f, rss)
    };
    let workers = 16;
    let per = count.div_ceil(workers);
    let mut held: Vec<Ws> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|i| {
                let n = per.min(count.saturating_sub(i * per));
                s.spawn(move || {
                    (0..n)
                        .filter_map(|_| Ws::open(e, DEADLINE).ok())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let opened = held.len();
    // Held for a while, pings answered, then measured.
    for _ in 0..4 {
        held.retain_mut(Ws::poll_idle);
        std::thread::sleep(Duration::from_millis(750));
    }
    held.retain_mut(Ws::poll_idle);
    let alive = held.len();
    let (rss_after, _) = footprint(pids);
    let kib_per = rss_after.saturating_sub(rss_before) as f64 / alive.max(1) as f64;
    drop(held);
    // Wait until the proxy let go of the connections before the next measurement.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if footprint(pids).1 <= fds_before + 16 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    Idle {
        count,
        path,
        opened,
        alive,
        kib_per,
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text)
        .unwrap_or_else(|e| panic!("write {}: {e}", dir.join(name).display()));
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(relay::ARG) {
        let socket = std::env::args().nth(2).expect("the ttyd socket");
        relay::serve(Path::new(&socket));
        return;
    }
    let out_dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "docs/bench".into()),
    );
    std::fs::create_dir_all(&out_dir).expect("output directory");
    let began = Instant::now();
    let nofile = raise_nofile();
    let facts = machine::machine_facts(&[(
        "nginx",
        machine::command_line(&e2e::nginx::nginx_binary().to_string_lossy(), &["-v"]),
    )]);

    // The stack: control (its ttyd.socket is the pool's, for the check's answer), the
    // pool, a gateway straight on the pool's socket, nginx with both servers.
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    let bench_profile = format!(
        "[profiles.bench]\ndescription = \"benchmark: two CPUs\"\nimage = \"{image}\"\n\
         command = []\nuser = \"1000:1000\"\nnetwork = \"none\"\nmemory_mb = 512\n\
         pids_limit = 128\ncpus = 2.0\ntmp_size_mb = 64\nhome = \"/home/user\"\n\
         env = {{ TERM = \"xterm-256color\" }}\nhosts = []\nreadonly_rootfs = true\n"
    );
    let mut control = ControlStack::prepare(&bench_profile);
    control.set_env("TERMGATE__QUOTA__PER_USER", "50");
    control.set_env("TERMGATE__QUOTA__GLOBAL", "100");
    control.set_env("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "100000");
    control.set_env("TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION", "100000");
    // Behind a front proxy the pool exchanges each terminal's handle (the second `arg`
    // control's check gives nginx) with control: production's pool for that, with
    // `TERMGATE_CONTROL`. The other paths send no handle and attach as before.
    let ttyd = TtydPool::start_plugin_for(&control.instance, &control.api);
    let socket = ttyd.socket_path().expect("unix pool").to_path_buf();
    control.set_env("TERMGATE__TTYD__SOCKET", &socket.to_string_lossy());
    control.spawn(&[]);
    let control_addr = control.api.trim_start_matches("http://").to_owned();
    let counter = CountingProxy::start(ttyd.target());
    let mut stack = GatewayStack::assemble(control, ttyd, counter);
    // The first gateway goes through the counting proxy; the measured one does not.
    stack.gateways[0].kill9();
    stack.set_upstream_socket(&socket);
    let limits = [
        ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "100000"),
        ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION", "100000"),
    ];
    let certs = std::env::var("BENCH_TLS")
        .is_ok_and(|v| v == "1")
        .then(|| e2e::tls::SelfSigned::generate(stack.control.dir.dir.path(), "bench"));
    let spawn_gateway = |stack: &mut GatewayStack| match &certs {
        Some(c) => stack.spawn_tls_gateway(c, &limits),
        None => stack.spawn_gateway(&limits),
    };
    let gw = spawn_gateway(&mut stack);
    let (authz_port, plain_port) = (free_port(), free_port());
    let (ssl, ssl_files) = match &certs {
        Some(c) => (
            " ssl",
            format!(
                "ssl_certificate {};\nssl_certificate_key {};\n",
                c.cert.display(),
                c.key.display()
            ),
        ),
        None => ("", String::new()),
    };
    let site =
        format!(
        "{ssl_files}{}\nserver {{\n    listen 127.0.0.1:{plain_port}{ssl};\n    location / {{\n\
         proxy_pass http://unix:{}:;\n        proxy_http_version 1.1;\n\
         proxy_set_header Upgrade $http_upgrade;\n\
         proxy_set_header Connection $termgate_connection;\n\
         proxy_set_header X-Termgate-User alice;\n        proxy_buffering off;\n\
         proxy_read_timeout 1d;\n        proxy_send_timeout 1d;\n    }}\n}}\n",
        AUTHZ_SNIPPET
            .replace(SNIPPET_CONTROL, &format!("server {control_addr};"))
            .replace(SNIPPET_LISTEN, &format!("listen 127.0.0.1:{authz_port}{ssl};")),
        socket.display()
    );
    let nginx = Nginx::start(&site, authz_port, 2);
    let relay = relay::Relay::start(&socket);
    let token = stack.control.token("alice", false);
    let paths = Paths {
        socket: socket.clone(),
        plain: plain_port,
        authz: authz_port,
        gateway: stack.gateways[gw].port,
        relay: relay.port,
        bearer: format!("Bearer {token}"),
        tls: certs.as_ref().map(e2e::tls::SelfSigned::pin),
    };
    let create = |profile: &str| {
        let a = stack.control.call(
            "POST",
            "/v1/sessions",
            Some(&token),
            Some(serde_json::json!({ "profile": profile })),
        );
        assert_eq!(a.status, 201, "create: {}", a.text);
        let id = a.body["id"].as_str().expect("id").to_owned();
        let container = container_of(&stack.control.instance, &id);
        (id, container)
    };
    let (up_id, up_container) = create("default");
    let endpoints: Vec<Endpoint> = (0..N)
        .map(|p| paths.endpoint(p, &up_id, &up_container))
        .collect();
    // Before anything is timed: a terminal on each path whose shell answers. A pool
    // that cannot attach on one path (its command refusing, say) upgrades and answers
    // ttyd's first message like any other, so only the shell's answer proves the path.
    let refused: Vec<String> = endpoints
        .iter()
        .enumerate()
        .filter_map(|(p, e)| {
            let (ttyd_from, nginx_from) = (stack.ttyd.log_text().len(), nginx.log_text().len());
            let err = match shell(e, &format!("preflight{p}")) {
                Ok(w) => {
                    w.close();
                    return None;
                }
                Err(err) => err,
            };
            // What ttyd (the command's exit) and nginx logged meanwhile.
            std::thread::sleep(Duration::from_millis(300));
            let mut said = format!("  {}: {err}\n", PATHS[p]);
            for (who, text, from) in [
                ("ttyd", stack.ttyd.log_text(), ttyd_from),
                ("nginx", nginx.log_text(), nginx_from),
            ] {
                let since = text.get(from..).unwrap_or_default();
                if !since.trim().is_empty() {
                    let _ = write!(said, "  {who} logged meanwhile:\n{}", last_lines(since, 8));
                }
            }
            Some(said)
        })
        .collect();
    if !refused.is_empty() {
        eprintln!(
            "bench_paths: no working terminal on {} of {N} paths (the shell must answer before \
             anything is measured); nothing was measured.\n{}",
            refused.len(),
            refused.concat()
        );
        drop(relay);
        drop(nginx);
        drop(stack);
        std::process::exit(1);
    }
    eprintln!("stack up in {:.1} s", began.elapsed().as_secs_f64());

    // The processes each path adds in front of ttyd, for their CPU time per upgrade.
    let proxies: [Vec<u32>; N] = [
        Vec::new(),
        nginx.pids(),
        nginx
            .pids()
            .into_iter()
            .chain([stack.control.pid()])
            .collect(),
        vec![stack.gateways[gw].pid()],
        vec![relay.pid()],
    ];

    // A. Upgrade latency at three concurrencies, paths interleaved round by round.
    let rounds = 4;
    let levels: [(usize, usize); 3] = [(1, scaled(100)), (16, scaled(10)), (64, scaled(4))];
    let mut upgrades: Vec<Vec<Upgrades>> = Vec::new();
    for (c, each) in levels {
        let mut by_path: Vec<Upgrades> = (0..N).map(|_| Upgrades::default()).collect();
        for r in 0..rounds {
            for k in 0..N {
                let p = (r + k) % N;
                let before = cpu_ns(&proxies[p]);
                upgrade_batch(&endpoints[p], c, each, false, &mut by_path[p]);
                // After the pause, so that the closes of the last upgrades are counted.
                std::thread::sleep(Duration::from_millis(200));
                by_path[p].cpu_ns += cpu_ns(&proxies[p]).saturating_sub(before);
            }
        }
        eprintln!(
            "upgrades at concurrency {c} done ({:.0} s)",
            began.elapsed().as_secs_f64()
        );
        upgrades.push(by_path);
    }
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "upgrades") {
        // A quick look at the upgrade path alone: p50 and proxy CPU, no report written.
        for ((c, _), by_path) in levels.iter().zip(upgrades.iter_mut()) {
            let p50s: Vec<f64> = by_path
                .iter_mut()
                .map(|u| msf(pct(&mut u.upgrade, 0.5)))
                .collect();
            for (p, u) in by_path.iter().enumerate() {
                let n = (u.upgrade.len() + u.failed).max(1) as f64;
                eprintln!(
                    "c={c:<3} {:<22} p50 {:.3} ms  {}  cpu {:.0} µs  failed {}",
                    PATHS[p],
                    p50s[p],
                    ratio(p50s[p], p50s[NGINX]),
                    u.cpu_ns as f64 / n / 1000.0,
                    u.failed
                );
            }
        }
        return;
    }

    // A'. To a working terminal: the first message each way, one client, and every
    // tunnel closed right after its 101 counted.
    let mut full: Vec<Upgrades> = (0..N).map(|_| Upgrades::default()).collect();
    let full_each = scaled(25);
    for r in 0..rounds {
        for k in 0..N {
            let p = (r + k) % N;
            upgrade_batch(&endpoints[p], 1, full_each, true, &mut full[p]);
        }
    }
    eprintln!(
        "first messages done ({:.0} s)",
        began.elapsed().as_secs_f64()
    );

    // A''. The highest sustained upgrade rate: closed-loop clients upgrading for a
    // window, more of them each step, paths interleaved; a step with a failure ends
    // that path's climb.
    let window = Duration::from_secs_f64(2.0 * env_f64("BENCH_SCALE", 1.0).max(0.5));
    let rate_levels = [8usize, 32, 128, 256];
    let mut rates: Vec<Vec<Option<Rate>>> = (0..N).map(|_| Vec::new()).collect();
    let mut stopped = [false; N];
    for (i, &c) in rate_levels.iter().enumerate() {
        for k in 0..N {
            let p = (i + k) % N;
            if stopped[p] {
                rates[p].push(None);
                continue;
            }
            let r = upgrade_rate(&endpoints[p], c, window);
            if r.failed > 0 {
                stopped[p] = true;
                if let Some(e) = &r.last_error {
                    eprintln!(
                        "{} at {c} clients: {} failed; last: {e}",
                        PATHS[p], r.failed
                    );
                }
            }
            rates[p].push(Some(r));
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    eprintln!(
        "sustained rates done ({:.0} s)",
        began.elapsed().as_secs_f64()
    );

    // B. Keystroke round trip and C. bulk output: one session of the two-CPU profile per
    // path, so that no terminal sees another's output.
    let bench_endpoints: Vec<Endpoint> = (0..N)
        .map(|p| {
            let (id, container) = create("bench");
            paths.endpoint(p, &id, &container)
        })
        .collect();
    let mut terms: Vec<Ws> = bench_endpoints.iter().map(terminal).collect();
    let keys = scaled(40);
    let mut keystrokes: Vec<Vec<Duration>> = vec![Vec::new(); N];
    for r in 0..5 {
        for k in 0..N {
            let p = (r + k) % N;
            let w = &mut terms[p];
            for i in 0..keys {
                // Alternate a letter and a delete so the line stays short.
                let key: &[u8] = if i % 2 == 0 { b"x" } else { b"\x7f" };
                let start = Instant::now();
                w.input(key).expect("type");
                w.next(|_| ()).expect("the echo");
                keystrokes[p].push(start.elapsed());
                drain(w, Duration::from_millis(2));
            }
        }
    }
    drop(terms);
    eprintln!("keystrokes done ({:.0} s)", began.elapsed().as_secs_f64());
    let bulk_mb = env_f64("BENCH_BULK_MB", 64.0).max(1.0) as u64;
    let bulk_rounds = 3;
    let mut bulk: Vec<Vec<(u64, Duration)>> = vec![Vec::new(); N];
    let mut bulk_failures = [0usize; N];
    for r in 0..bulk_rounds {
        for k in 0..N {
            let p = (r + k) % N;
            // A fresh terminal: one left unread meanwhile would miss ttyd's pings
            // (`-P 5`) and be hung up.
            let mut fresh = terminal(&bench_endpoints[p]);
            let w = &mut fresh;
            let cmd = format!(
                "head -c {} /dev/zero | base64; echo bulk-$((20+22))-end\r",
                bulk_mb * 1024 * 1024
            );
            let start = Instant::now();
            let done = w
                .input(cmd.as_bytes())
                .and_then(|()| w.until(b"bulk-42-end", Duration::from_secs(600)));
            match done {
                Ok(bytes) => bulk[p].push((bytes, start.elapsed())),
                Err(e) => {
                    eprintln!(
                        "bulk output on {} failed after {:.1} s: {e}\n{}",
                        PATHS[p],
                        start.elapsed().as_secs_f64(),
                        nginx.log_text()
                    );
                    bulk_failures[p] += 1;
                }
            }
            drain(w, Duration::from_millis(300));
        }
    }
    eprintln!("bulk done ({:.0} s)", began.elapsed().as_secs_f64());

    // D. Idle memory per upgraded terminal.
    let wanted: Vec<usize> = std::env::var("BENCH_IDLE")
        .unwrap_or_else(|_| "1000,5000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    // The gateway holds two descriptors per terminal, and this process one.
    let fits = |n: usize| (n as u64) * 2 + 512 <= nofile;
    let mut idles: Vec<Idle> = Vec::new();
    let mut skipped: Vec<usize> = Vec::new();
    // A fresh gateway for this: the one measured above holds heap that its earlier
    // scenarios freed, which idle terminals would reuse (a reading of 0.0 KiB).
    let idle_gw = spawn_gateway(&mut stack);
    let idle_termgate = Paths {
        socket: paths.socket.clone(),
        plain: paths.plain,
        authz: paths.authz,
        gateway: stack.gateways[idle_gw].port,
        relay: paths.relay,
        bearer: paths.bearer.clone(),
        tls: paths.tls.clone(),
    }
    .endpoint(TERMGATE, &up_id, &up_container);
    let gw_pid = stack.gateways[idle_gw].pid();
    for &count in &wanted {
        if !fits(count) {
            skipped.push(count);
            continue;
        }
        for (k, p) in [NGINX, AUTHZ, TERMGATE].into_iter().enumerate() {
            let _ = k;
            let pids = if p == TERMGATE {
                vec![gw_pid]
            } else {
                nginx.pids()
            };
            let e = if p == TERMGATE {
                &idle_termgate
            } else {
                &endpoints[p]
            };
            idles.push(idle(e, count, &pids, p));
        }
        eprintln!("idle {count} done ({:.0} s)", began.elapsed().as_secs_f64());
    }
    let took = began.elapsed();

    // The report.
    let mut md = String::new();
    let _ = writeln!(md, "{facts}");
    let _ = writeln!(
        md,
        "Run took {:.1} min; open-file limit {nofile}; `BENCH_SCALE={}`.\n",
        took.as_secs_f64() / 60.0,
        env_f64("BENCH_SCALE", 1.0)
    );
    if certs.is_some() {
        let _ = writeln!(
            md,
            "**TLS** (`BENCH_TLS=1`): nginx's two servers listen with `ssl` and the gateway with\n\
             its TLS listener, one self-signed P-256 certificate, TLS 1.3 from the client (rustls);\n\
             every connection makes a full handshake. Direct ttyd and the tokio relay stay plain.\n"
        );
    }
    let _ = writeln!(md, "### Upgrade latency\n");
    let _ = writeln!(
        md,
        "Connect → `101`, then closed (so ttyd starts no `docker attach`: the path alone is\n\
         measured). `c` clients at once; four rounds with the paths' order rotated. Proxy CPU:\n\
         the running time of the processes the path puts in front of ttyd (nginx's; nginx's and\n\
         control's; the gateway's; the relay's), over the upgrades and their close, per upgrade.\n\n\
         The tokio relay is the floor of a proxy on tokio: a process that accepts, connects to the\n\
         same socket and copies bytes both ways, reading no HTTP, checking nothing, logging\n\
         nothing (`tests/examples/bench_paths/relay.rs`; the gateway's runtime, two workers).\n"
    );
    let _ = writeln!(
        md,
        "| c | path | n | p50 | p99 | p50 ÷ nginx | p99 ÷ nginx + auth_request | p50 − direct | proxy CPU per upgrade | failed |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut upgrade_groups = Vec::new();
    for ((c, _), by_path) in levels.iter().zip(upgrades.iter_mut()) {
        let mut p50s = [0.0; N];
        let mut p99s = [0.0; N];
        for (p, u) in by_path.iter_mut().enumerate() {
            p50s[p] = msf(pct(&mut u.upgrade, 0.5));
            p99s[p] = msf(pct(&mut u.upgrade, 0.99));
        }
        let mut bars = Vec::new();
        for (p, u) in by_path.iter_mut().enumerate() {
            let _ = writeln!(
                md,
                "| {c} | {} | {} | {:.2} ms | {:.2} ms | {} | {} | {} | {} | {} |",
                PATHS[p],
                u.upgrade.len(),
                p50s[p],
                p99s[p],
                ratio(p50s[p], p50s[NGINX]),
                ratio(p99s[p], p99s[AUTHZ]),
                if p == DIRECT {
                    "—".into()
                } else {
                    format!("{:+.2} ms", p50s[p] - p50s[DIRECT])
                },
                if p == DIRECT || u.upgrade.is_empty() {
                    "—".into()
                } else {
                    format!(
                        "{:.0} µs",
                        u.cpu_ns as f64 / (u.upgrade.len() + u.failed) as f64 / 1000.0
                    )
                },
                u.failed
            );
            if let Some(e) = &u.last_error {
                eprintln!("{} at c={c}: {} failed; last: {e}", PATHS[p], u.failed);
            }
            bars.push(Some(Bar {
                value: p50s[p],
                tick: Some(p99s[p]),
            }));
        }
        upgrade_groups.push((format!("{c} at once"), bars));
    }
    let _ = writeln!(
        md,
        "\nTo a working terminal, one client: connect → `101` → the client's first message →\n\
         ttyd's first message (ttyd has started the session's `docker attach`); {} per path.\n\
         \"Closed after 101\" counts tunnels that ended between their `101` and ttyd's first message.\n",
        full_each * rounds
    );
    let _ = writeln!(
        md,
        "| path | n | p50 | p99 | p50 − direct | closed after 101 | failed |\n|---|---|---|---|---|---|---|"
    );
    let mut f50 = [0.0; N];
    for (p, u) in full.iter_mut().enumerate() {
        f50[p] = msf(pct(&mut u.first, 0.5));
    }
    for (p, u) in full.iter_mut().enumerate() {
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} ms | {} | {} | {} | {} |",
            PATHS[p],
            u.first.len(),
            f50[p],
            ms(pct(&mut u.first, 0.99)),
            if p == DIRECT {
                "—".into()
            } else {
                format!("{:+.2} ms", f50[p] - f50[DIRECT])
            },
            u.closed_after_101,
            u.failed
        );
        if let Some(e) = &u.last_error {
            eprintln!(
                "{} to a working terminal: {} closed after 101, {} failed; last: {e}",
                PATHS[p], u.closed_after_101, u.failed
            );
        }
    }
    let _ = writeln!(
        md,
        "\nHighest sustained upgrade rate: `c` clients, each upgrading (connect → `101` → close)\n\
         one after another for {:.0} s; upgrades per second, and failures. A path's climb ends at\n\
         its first step with a failure. The best rate without a failure is the path's sustained rate.\n",
        window.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "| path | {} | sustained | ÷ nginx |\n|---|{}---|---|",
        rate_levels
            .iter()
            .map(|c| format!("c={c}"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(rate_levels.len())
    );
    let best: Vec<f64> = rates
        .iter()
        .map(|steps| {
            steps
                .iter()
                .flatten()
                .filter(|r| r.failed == 0)
                .map(|r| r.per_second)
                .fold(0.0, f64::max)
        })
        .collect();
    for (p, steps) in rates.iter().enumerate() {
        let cells: Vec<String> = steps
            .iter()
            .map(|r| match r {
                Some(r) if r.failed == 0 => format!("{:.0}/s", r.per_second),
                Some(r) => format!("{:.0}/s, {} failed", r.per_second, r.failed),
                None => "—".into(),
            })
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {:.0}/s | {} |",
            PATHS[p],
            cells.join(" | "),
            best[p],
            ratio(best[p], best[NGINX])
        );
    }
    let chart = Chart {
        title: "Websocket upgrade: connect to 101",
        unit: "ms (bar p50, tick p99)",
        series: &PATHS,
        groups: upgrade_groups,
        note: "Same ttyd pool, same client, interleaved in one run (deploy/bench).",
    };
    write(&out_dir, "upgrade.svg", &chart.render());

    let _ = writeln!(md, "\n### Keystroke round trip\n");
    let _ = writeln!(
        md,
        "One byte typed (a letter, then a delete) → its echo, on an attached shell; {} per path in five rounds.\n",
        keys * 5
    );
    let _ = writeln!(
        md,
        "| path | p50 | p99 | p50 ÷ nginx | p50 − direct |\n|---|---|---|---|---|"
    );
    let mut k50 = [0.0; N];
    let mut k99 = [0.0; N];
    for p in 0..N {
        k50[p] = msf(pct(&mut keystrokes[p], 0.5));
        k99[p] = msf(pct(&mut keystrokes[p], 0.99));
    }
    for p in 0..N {
        let _ = writeln!(
            md,
            "| {} | {:.3} ms | {:.3} ms | {} | {} |",
            PATHS[p],
            k50[p],
            k99[p],
            ratio(k50[p], k50[NGINX]),
            if p == DIRECT {
                "—".into()
            } else {
                format!("{:+.3} ms", k50[p] - k50[DIRECT])
            }
        );
    }
    let chart = Chart {
        title: "Keystroke round trip",
        unit: "ms (bar p50, tick p99)",
        series: &PATHS,
        groups: vec![(
            "one byte → echo".into(),
            (0..N)
                .map(|p| {
                    Some(Bar {
                        value: k50[p],
                        tick: Some(k99[p]),
                    })
                })
                .collect(),
        )],
        note: "An attached busybox shell in a session container; same client for each path.",
    };
    write(&out_dir, "keystroke.svg", &chart.render());

    let _ = writeln!(md, "\n### Bulk output\n");
    let _ = writeln!(
        md,
        "`head -c {bulk_mb}M /dev/zero | base64` in a session of a two-CPU profile, read to its end marker; {bulk_rounds} rounds per path with the paths' order rotated, the median round counted (output bytes as ttyd sends them, CR LF included).\n"
    );
    let _ = writeln!(
        md,
        "| path | MB/s (median) | MB/s (each round) | ÷ direct | failed rounds |\n|---|---|---|---|---|"
    );
    let rate = |(b, d): &(u64, Duration)| *b as f64 / d.as_secs_f64() / 1e6;
    // The median round: one slow or lucky round on a shared machine moves it least.
    let median: Vec<f64> = bulk
        .iter()
        .map(|rs| {
            let mut r: Vec<f64> = rs.iter().map(rate).collect();
            r.sort_by(f64::total_cmp);
            r.get(r.len() / 2).copied().unwrap_or(0.0)
        })
        .collect();
    for p in 0..N {
        let each: Vec<String> = bulk[p].iter().map(|r| format!("{:.1}", rate(r))).collect();
        let _ = writeln!(
            md,
            "| {} | {:.1} | {} | {} | {} |",
            PATHS[p],
            median[p],
            each.join(", "),
            ratio(median[p], median[DIRECT]),
            bulk_failures[p]
        );
    }
    let chart = Chart {
        title: "Bulk terminal output",
        unit: "MB/s (median round)",
        series: &PATHS,
        groups: vec![(
            format!("{bulk_mb} MiB of zeros, base64"),
            median
                .iter()
                .map(|v| {
                    Some(Bar {
                        value: *v,
                        tick: None,
                    })
                })
                .collect(),
        )],
        note: "Session profile with cpus = 2, so the producer is not capped by the session limit.",
    };
    write(&out_dir, "bulk.svg", &chart.render());

    let _ = writeln!(md, "\n### Idle memory per terminal\n");
    let _ = writeln!(
        md,
        "Upgraded websockets held idle (no first message, so ttyd starts no attach; pings answered), the proxy's resident memory after minus before, per terminal (nginx: master and two workers; termgate: a gateway process started for this measurement, beside the one measured above).\n"
    );
    let _ = writeln!(
        md,
        "| terminals | path | open at the measurement | KiB per terminal | ÷ nginx |\n|---|---|---|---|---|"
    );
    let mut mem_groups = Vec::new();
    for count in wanted.iter().filter(|c| !skipped.contains(c)) {
        let rows: Vec<&Idle> = idles.iter().filter(|i| i.count == *count).collect();
        let nginx_kib = rows
            .iter()
            .find(|i| i.path == NGINX)
            .map_or(0.0, |i| i.kib_per);
        let mut bars: Vec<Option<Bar>> = (0..N).map(|_| None).collect();
        for i in &rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} of {} | {:.1} | {} |",
                i.count,
                PATHS[i.path],
                i.alive,
                i.opened,
                i.kib_per,
                ratio(i.kib_per, nginx_kib)
            );
            bars[i.path] = Some(Bar {
                value: i.kib_per,
                tick: None,
            });
        }
        mem_groups.push((format!("{count} terminals"), bars));
    }
    for count in &skipped {
        let _ = writeln!(
            md,
            "| {count} | — | skipped: the open-file limit ({nofile}) is too low | | |"
        );
    }
    let chart = Chart {
        title: "Proxy memory per idle upgraded terminal",
        unit: "KiB per terminal",
        series: &PATHS,
        groups: mem_groups,
        note: "Resident memory after minus before, divided by the terminals held open.",
    };
    write(&out_dir, "idle-memory.svg", &chart.render());

    write(&out_dir, "results.md", &md);
    println!("{md}");
    eprintln!(
        "wrote {} (results.md, upgrade.svg, keystroke.svg, bulk.svg, idle-memory.svg)",
        out_dir.display()
    );
    drop(relay);
    drop(nginx);
    drop(stack);
}

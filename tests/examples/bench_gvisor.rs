//! Sessions under runc against the same sessions under gVisor's runsc, side by side in
//! one run, interleaved: one Docker host (a `dockerd` of the run's own with runsc
//! registered as docs/operators.md "Sessions under gVisor" says), two profiles that
//! differ only in `runtime`, one control, one gateway, one ttyd pool.
//!
//! - **create to first prompt**: `POST /v1/sessions`, then the terminal through the
//!   gateway until the shell answers (`BENCH_GVISOR_CREATES` each, default 12, the
//!   runtimes alternating, each session ended after);
//! - **keystroke round trip**: one key on each runtime's terminal in turn
//!   (`BENCH_GVISOR_KEYS` each, default 400);
//! - **bulk output**: `head -c <BENCH_GVISOR_BULK_MB>M /dev/zero | base64` (default
//!   16), `BENCH_GVISOR_BULK_ROUNDS` rounds (default 5), the order rotated, the median
//!   counted;
//! - **memory per idle session**: `memory.current` of each container's cgroup
//!   (`BENCH_GVISOR_IDLE` sessions each, default 4), a terminal opened and closed on
//!   each, read after 5 s idle: runsc's sandbox and gofer are in that cgroup too.
//!
//! More rows in the same run, each one more runtime registered with the run's daemon:
//! `BENCH_GVISOR_PTRACE=1` the same runsc on the ptrace platform;
//! `BENCH_GVISOR_BEFORE_RUNSC=<path>` another runsc binary (Debian 12's, say) on ptrace.
//!
//! `TERMGATE_BIN_DIR=target/release target/release/examples/bench_gvisor`
//! (`cargo build --release --workspace --bins --examples` first). Prints Markdown.

#[path = "bench_paths/machine.rs"]
mod machine;
#[allow(dead_code)]
#[path = "bench_paths/ws.rs"]
mod ws;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::daemon::{runsc_missing, TestDaemon, RUNSC_DAEMON_JSON};
use e2e::stack::{ControlStack, GatewayStack};
use e2e::stats::{env_num, median, msf, pct};
use e2e::term::Target;
use e2e::ttyd::{CountingProxy, TtydPool};
use ws::{Endpoint, Ws};

const DEADLINE: Duration = Duration::from_secs(60);

/// A runtime compared: as the tables name it, and as its profile and the daemon name it.
struct Runtime {
    label: String,
    name: &'static str,
}

/// runc, runsc as docs/operators.md "Sessions under gVisor" registers it, and the rows the
/// environment asks for; with the run's `daemon.json`, which registers them.
fn runtimes() -> (Vec<Runtime>, String) {
    let mut daemon: serde_json::Value =
        serde_json::from_str(RUNSC_DAEMON_JSON).expect("docs/operators.md's daemon.json");
    let runsc = daemon["runtimes"]["runsc"].clone();
    let platform = |entry: &serde_json::Value| -> String {
        entry["runtimeArgs"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|a| a.as_str()?.strip_prefix("--platform="))
            .unwrap_or("its default platform")
            .to_owned()
    };
    let version = |path: &str| {
        let v = machine::command_line(path, &["--version"]);
        v.strip_prefix("runsc version ").unwrap_or(&v).to_owned()
    };
    let runsc_path = runsc["path"].as_str().expect("runsc's path").to_owned();
    let mut list = vec![
        Runtime {
            label: "runc".into(),
            name: "runc",
        },
        Runtime {
            label: format!("runsc {} ({})", version(&runsc_path), platform(&runsc)),
            name: "runsc",
        },
    ];
    let mut ptrace = |name: &'static str, path: &str| {
        let mut entry = runsc.clone();
        entry["path"] = path.into();
        let args: Vec<serde_json::Value> = entry["runtimeArgs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| !a.as_str().unwrap_or_default().starts_with("--platform="))
            .cloned()
            .chain([serde_json::Value::from("--platform=ptrace")])
            .collect();
        entry["runtimeArgs"] = args.into();
        list.push(Runtime {
            label: format!("runsc {} ({})", version(path), platform(&entry)),
            name,
        });
        daemon["runtimes"][name] = entry;
    };
    if env_num("BENCH_GVISOR_PTRACE", 0) == 1 {
        ptrace("runsc-ptrace", &runsc_path);
    }
    if let Ok(path) = std::env::var("BENCH_GVISOR_BEFORE_RUNSC") {
        assert!(
            std::path::Path::new(&path).is_file(),
            "BENCH_GVISOR_BEFORE_RUNSC: no file {path}"
        );
        ptrace("runsc-before", &path);
    }
    (list, daemon.to_string())
}

struct Bench {
    stack: GatewayStack,
    gv: TestDaemon,
    token: String,
    gateway: SocketAddr,
    _pool: (TtydPool, CountingProxy),
}

impl Bench {
    fn start(runtimes: &[Runtime], daemon_json: &str) -> Bench {
        if let Some(why) = runsc_missing() {
            panic!("cannot measure gVisor here: {why}");
        }
        let gv = TestDaemon::start_with(None, daemon_json);
        gv.load_session_image();
        let image = std::env::var("TERMGATE_SESSION_IMAGE")
            .unwrap_or_else(|_| "termgate/session:dev".into());
        // bench_paths' two-CPU profile, once per runtime.
        let profiles: String = runtimes
            .iter()
            .map(|Runtime { name, .. }| {
                let runtime = if *name == "runc" {
                    String::new()
                } else {
                    format!("runtime = \"{name}\"\n")
                };
                format!(
                    "[profiles.{name}]\ndescription = \"benchmark: two CPUs under {name}\"\n\
                     image = \"{image}\"\ncommand = []\nuser = \"1000:1000\"\nnetwork = \"none\"\n\
                     memory_mb = 512\npids_limit = 128\ncpus = 2.0\ntmp_size_mb = 64\n\
                     env = {{ TERM = \"xterm-256color\" }}\nreadonly_rootfs = true\n{runtime}"
                )
            })
            .collect();
        let mut control = ControlStack::prepare(&profiles);
        control.set_env("TERMGATE__QUOTA__PER_USER", "50");
        control.set_env("TERMGATE__QUOTA__GLOBAL", "100");
        let pool = TtydPool::start_for_docker(&control.instance, &gv.host);
        let counter = CountingProxy::start(pool.target());
        let config = std::fs::read_to_string(control.dir.config_path()).expect("config");
        control.dir.write_config(&format!(
            "{config}\n[[docker.hosts]]\nname = \"gv\"\nendpoint = \"{}\"\nttyd_pool = [\"unix:{}\"]\ncapacity = 50\n",
            gv.host,
            counter.socket_path().display(),
        ));
        control.unset_env("TERMGATE__CONTROL__DOCKER_HOST");
        control.spawn(&[]);
        let local = TtydPool::start_for(&control.instance);
        let local_counter = CountingProxy::start(local.target());
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
        let stack = GatewayStack::assemble_with_env(control, local, local_counter, &limits);
        let token = stack.control.token("alice", false);
        let gateway = SocketAddr::from(([127, 0, 0, 1], stack.gw().port));
        Bench {
            stack,
            gv,
            token,
            gateway,
            _pool: (pool, counter),
        }
    }

    fn create(&self, profile: &str) -> String {
        let s = self.stack.control.create_with(&self.token, profile);
        assert_eq!(s["host"], "gv", "{s}");
        s["id"].as_str().expect("id").to_owned()
    }

    fn end(&self, id: &str) {
        let a = self.stack.control.call(
            "DELETE",
            &format!("/v1/sessions/{id}"),
            Some(&self.token),
            None,
        );
        assert_eq!(a.status, 204, "{}", a.text);
    }

    fn endpoint(&self, id: &str) -> Endpoint {
        Endpoint {
            target: Target::Tcp(self.gateway),
            host: self.gateway.to_string(),
            path: format!("/s/{id}/ws"),
            headers: vec![("Authorization".into(), format!("Bearer {}", self.token))],
        }
    }

    /// The memory the container's cgroup charges, bytes, as `docker stats` counts it
    /// (usage less inactive file pages): cgroup v1's memory controller, or v2's.
    fn memory(&self, id: &str) -> u64 {
        let cids = self.gv.containers(&format!("termgate.session={id}"));
        let cid = cids.first().expect("the session's container");
        let out = self.gv.docker(&["inspect", "-f", "{{.State.Pid}}", cid]);
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroup");
        let read = |path: String| std::fs::read_to_string(&path).unwrap_or_default();
        let stat = |text: &str, key: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .unwrap_or(0)
        };
        if let Some(path) = cgroup.lines().find_map(|l| {
            l.strip_prefix("4:memory:")
                .or_else(|| l.split_once(":memory:").map(|(_, p)| p))
        }) {
            let dir = format!("/sys/fs/cgroup/memory{path}");
            let usage: u64 = read(format!("{dir}/memory.usage_in_bytes"))
                .trim()
                .parse()
                .expect("memory.usage_in_bytes");
            let inactive = stat(&read(format!("{dir}/memory.stat")), "total_inactive_file ");
            return usage.saturating_sub(inactive);
        }
        let path = cgroup
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup path");
        let dir = format!("/sys/fs/cgroup{path}");
        let current: u64 = read(format!("{dir}/memory.current"))
            .trim()
            .parse()
            .expect("memory.current");
        current.saturating_sub(stat(&read(format!("{dir}/memory.stat")), "inactive_file "))
    }
}

/// Reads and drops whatever arrives within `quiet` of the last frame.
fn drain(w: &mut Ws, quiet: Duration) {
    let _ = w.set_read_timeout(Some(quiet));
    while w.next(|_| ()).is_ok() {}
    let _ = w.set_read_timeout(Some(DEADLINE));
}

/// An attached terminal whose shell answered: the question is asked again every 50 ms
/// until it does (what is typed before `docker attach` took the terminal is lost).
fn terminal(e: &Endpoint) -> Ws {
    let mut w = Ws::open(e, DEADLINE).unwrap_or_else(|err| panic!("open {}: {err}", e.path));
    w.hello().expect("hello");
    let start = Instant::now();
    loop {
        w.input(b"echo ready-$((20+22))\r").expect("type");
        if w.until(b"ready-42", Duration::from_millis(50)).is_ok() {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{}: the shell never answered",
            e.path
        );
    }
    w
}

#[derive(Default)]
struct Figures {
    creates: Vec<Duration>,
    keys: Vec<Duration>,
    bulk: Vec<f64>,
    idle: Vec<u64>,
}

fn main() {
    let creates = env_num("BENCH_GVISOR_CREATES", 12);
    let keys = env_num("BENCH_GVISOR_KEYS", 400);
    let bulk_mb = env_num("BENCH_GVISOR_BULK_MB", 16);
    let bulk_rounds = env_num("BENCH_GVISOR_BULK_ROUNDS", 5);
    let idle = env_num("BENCH_GVISOR_IDLE", 4);
    let facts = machine::machine_facts(&[(
        "runsc",
        machine::command_line("/usr/bin/runsc", &["--version"]),
    )]);
    let (runtimes, daemon_json) = runtimes();
    let started = Instant::now();
    let b = Bench::start(&runtimes, &daemon_json);
    let n = runtimes.len();
    let mut f: Vec<Figures> = (0..n).map(|_| Figures::default()).collect();

    // Create to first prompt, alternating.
    for c in 0..creates {
        for k in 0..n {
            let i = (c + k) % n;
            let start = Instant::now();
            let id = b.create(runtimes[i].name);
            let w = terminal(&b.endpoint(&id));
            f[i].creates.push(start.elapsed());
            drop(w);
            b.end(&id);
        }
    }
    eprintln!("creates done");

    // Keystrokes: one terminal each, one key on each in turn.
    let ids: Vec<String> = runtimes.iter().map(|r| b.create(r.name)).collect();
    let mut terms: Vec<Ws> = ids.iter().map(|id| terminal(&b.endpoint(id))).collect();
    for t in &mut terms {
        drain(t, Duration::from_millis(300));
    }
    for key in 0..keys {
        for k in 0..n {
            let i = (key + k) % n;
            let w = &mut terms[i];
            let byte: &[u8] = if key % 2 == 0 { b"x" } else { b"\x7f" };
            let start = Instant::now();
            w.input(byte).expect("type");
            w.next(|_| ()).expect("the echo");
            f[i].keys.push(start.elapsed());
            drain(w, Duration::from_millis(2));
        }
    }
    drop(terms);
    eprintln!("keystrokes done");

    // Bulk output, a fresh terminal each round.
    let cmd = format!(
        "head -c {} /dev/zero | base64; echo bulk-$((20+22))-end\r",
        bulk_mb * 1024 * 1024
    );
    for r in 0..bulk_rounds {
        for k in 0..n {
            let i = (r + k) % n;
            let mut w = terminal(&b.endpoint(&ids[i]));
            drain(&mut w, Duration::from_millis(300));
            let start = Instant::now();
            w.input(cmd.as_bytes()).expect("type");
            let bytes = w.until(b"bulk-42-end", DEADLINE).expect("the output");
            let secs = start.elapsed().as_secs_f64();
            f[i].bulk.push(bytes as f64 / 1e6 / secs);
        }
    }
    for id in &ids {
        b.end(id);
    }
    eprintln!("bulk done");

    // Memory of idle sessions: each opened once (its shell started), then left.
    let mut held = Vec::new();
    for _ in 0..idle {
        for (i, r) in runtimes.iter().enumerate() {
            let id = b.create(r.name);
            drop(terminal(&b.endpoint(&id)));
            held.push((i, id));
        }
    }
    std::thread::sleep(Duration::from_secs(5));
    for (i, id) in &held {
        f[*i].idle.push(b.memory(id));
    }
    for (_, id) in &held {
        b.end(id);
    }

    let took = started.elapsed();
    println!("{facts}");
    let build = if cfg!(debug_assertions) {
        "Debug"
    } else {
        "Release"
    };
    println!(
        "{build} build; the run took {:.1} min.\n",
        took.as_secs_f64() / 60.0
    );
    println!("The run's daemon.json: `{daemon_json}`\n");
    println!("| runtime | create → first prompt p50 | p90 | ÷ runc | keystroke p50 | p99 | p50 ÷ runc | bulk MB/s (median) | each round | ÷ runc | idle session memory (median) | ÷ runc |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|");
    let base_create = msf(pct(&mut f[0].creates.clone(), 0.5));
    let base_key = msf(pct(&mut f[0].keys.clone(), 0.5));
    let base_bulk = median(&f[0].bulk);
    let base_idle = median(&f[0].idle.iter().map(|b| *b as f64).collect::<Vec<_>>());
    for (i, Runtime { label: name, .. }) in runtimes.iter().enumerate() {
        let c50 = msf(pct(&mut f[i].creates.clone(), 0.5));
        let c90 = msf(pct(&mut f[i].creates.clone(), 0.9));
        let k50 = msf(pct(&mut f[i].keys.clone(), 0.5));
        let k99 = msf(pct(&mut f[i].keys.clone(), 0.99));
        let bulk = median(&f[i].bulk);
        let rounds: Vec<String> = f[i].bulk.iter().map(|m| format!("{m:.2}")).collect();
        let mem = median(&f[i].idle.iter().map(|b| *b as f64).collect::<Vec<_>>());
        println!(
            "| {name} | {c50:.0} ms | {c90:.0} ms | {:.2}× | {k50:.3} ms | {k99:.3} ms | {:.2}× | {bulk:.2} | {} | {:.3}× | {:.1} MiB | {:.2}× |",
            c50 / base_create,
            k50 / base_key,
            rounds.join(", "),
            bulk / base_bulk,
            mem / (1024.0 * 1024.0),
            mem / base_idle,
        );
    }
}

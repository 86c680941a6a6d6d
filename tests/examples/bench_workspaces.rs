//! Workspaces, side by side in one run, interleaved, on one control stack reaching the
//! machine's Docker daemon through its dockgate (the tests' stack):
//!
//! - **create → running**: `POST /v1/sessions` to its 201 on a profile that mounts the
//!   user's home volume (`workspace = "home"`, the create sessions had before
//!   workspaces), against the `choose` default profile given an existing workspace's
//!   id; otherwise the two profiles are the same. `BENCH_WS_CREATES` each (default 30),
//!   alternating, after one warm-up each; every session is ended and its container gone
//!   before the next create. Control's `Server-Timing` (its total and Docker's part)
//!   beside the wall time.
//! - **copy**: `POST /v1/workspaces/<id>/copy` until a poll (every 50 ms) sees `ready`,
//!   against the host's own `cp -a` of the same tree then `sync` (the job's script ends
//!   with `sync -f` of its destination), as root into a directory beside the source volume's, on the same
//!   file system, for a workspace of small files (`BENCH_WS_SMALL_FILES` ×
//!   `BENCH_WS_SMALL_KIB` KiB, default 20,000 × 10, 100 to a directory) and one of
//!   large files (`BENCH_WS_LARGE_FILES` × `BENCH_WS_LARGE_MIB` MiB, default 4 × 50),
//!   each filled through a session (`docker exec`); `BENCH_WS_ROUNDS` rounds (default
//!   3), the order rotated, medians counted. Every file of the source is read just
//!   before each copy, so each starts from the page cache; nothing copied is deleted
//!   before the end. An empty workspace's copy each round gives the job's fixed cost,
//!   and Docker's events split each job's time (volume made, job created, started,
//!   exited, removed).
//! - **where a copy's time goes** (`BENCH_WS_EXPLAIN=0` leaves it out): the same trees
//!   copied, interleaved with the above, by the image's own `cp` (BusyBox) on the host,
//!   and by it in containers with the sources mounted read-only: as root, as the
//!   profile's user in its sandbox, and with the profile's limits too (the job's
//!   `cp` before), that last also run from the destination, as two `tar`s each in its
//!   own directory, owners by number, and as the job's script; and that script
//!   with the job's own CPU allowance (the job without Docker and control); `cp` and
//!   `sync` timed apart, and the CPU of the storage driver's daemon when it is
//!   fuse-overlayfs.
//!
//! `BENCH_WS_ONLY=creates` or `copies` runs one part. The host's copies read Docker's
//! volume directory: run as root.
//!
//! `TERMGATE_BIN_DIR=target/release target/release/examples/bench_workspaces`
//! (`cargo build --release --workspace --bins --examples` first). Prints Markdown.

#[path = "bench_paths/machine.rs"]
mod machine;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::stack::{agent, docker, ControlStack};
use e2e::stats::{env_num, median, msf, pct};
use e2e::workspaces::{end, exec};
use serde_json::{json, Value};

/// The profile that mounts the home volume, as every profile did before workspaces.
const HOME_PROFILE: &str = "homevol";
/// How often a copy's state is asked.
const POLL: Duration = Duration::from_millis(50);
/// How long one copy may take.
const COPY_DEADLINE: Duration = Duration::from_secs(600);

/// An answer of control's, with its `Server-Timing` header.
struct Reply {
    status: u16,
    body: Value,
    text: String,
    timing: Option<String>,
}

/// One create, timed by the client and by control.
struct Created {
    id: String,
    wall: Duration,
    /// Control's own total and Docker's part (`Server-Timing`), ms.
    total: f64,
    docker: f64,
}

struct Bench {
    stack: ControlStack,
    token: String,
    agent: ureq::Agent,
    image: String,
}

impl Bench {
    fn start() -> Bench {
        let image = std::env::var("TERMGATE_SESSION_IMAGE")
            .unwrap_or_else(|_| "termgate/session:dev".into());
        // The example's default profile (`workspace = "choose"`) once more, on the home
        // volume.
        let home = format!(
            "[profiles.{HOME_PROFILE}]\ndescription = \"The default profile on the home volume\"\n\
             image = \"{image}\"\ncommand = []\nuser = \"1000:1000\"\nnetwork = \"none\"\n\
             memory_mb = 256\npids_limit = 128\ncpus = 0.5\ntmp_size_mb = 64\n\
             home = \"/home/user\"\nworkspace = \"home\"\nenv = {{ TERM = \"xterm-256color\" }}\n\
             stop_grace_seconds = 2\nreadonly_rootfs = true\n\
             [profiles.{HOME_PROFILE}.options.shell]\ndescription = \"Login shell\"\n\
             env = \"SESSION_SHELL\"\nvalues = [\"sh\", \"ash\"]\ndefault = \"sh\"\n"
        );
        let mut stack = ControlStack::prepare(&home);
        assert!(
            stack.dockgate.is_some(),
            "control is measured through dockgate: leave TERMGATE_TEST_DOCKGATE unset"
        );
        stack.set_env("TERMGATE__QUOTA__PER_USER", "50");
        stack.set_env("TERMGATE__QUOTA__GLOBAL", "100");
        stack.spawn(&[]);
        let token = stack.token("alice", false);
        Bench {
            stack,
            token,
            agent: agent(),
            image,
        }
    }

    /// `method path` as alice, on one kept connection.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Reply {
        let url = format!("{}{path}", self.stack.api);
        let auth = format!("Bearer {}", self.token);
        let result = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("Authorization", &auth)
                .call(),
            ("POST", Some(b)) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .send_json(b),
            (m, _) => panic!("{m} {path}: not asked here"),
        };
        let mut resp =
            result.unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.stack.log_text()));
        let status = resp.status().as_u16();
        let timing = resp
            .headers()
            .get("server-timing")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        Reply {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
            timing,
        }
    }

    fn create(&self, profile: &str, workspace: Option<&str>) -> Created {
        let mut body = json!({ "profile": profile });
        if let Some(w) = workspace {
            body["workspace"] = json!(w);
        }
        let start = Instant::now();
        let r = self.request("POST", "/v1/sessions", Some(&body));
        let wall = start.elapsed();
        assert_eq!(
            r.status,
            201,
            "create: {}\n{}",
            r.text,
            self.stack.log_text()
        );
        let timing = r.timing.unwrap_or_default();
        Created {
            id: r.body["id"].as_str().expect("id").to_owned(),
            wall,
            total: server_timing(&timing, "total").unwrap_or(f64::NAN),
            docker: server_timing(&timing, "docker").unwrap_or(f64::NAN),
        }
    }

    fn end(&self, session: &str) {
        end(&self.stack, &self.token, session);
    }

    fn new_workspace(&self, name: &str) -> String {
        let r = self.request("POST", "/v1/workspaces", Some(&json!({ "name": name })));
        assert_eq!(r.status, 201, "{}", r.text);
        r.body["id"].as_str().expect("id").to_owned()
    }

    fn delete_workspace(&self, id: &str) {
        let r = self.request("DELETE", &format!("/v1/workspaces/{id}"), None);
        assert_eq!(r.status, 204, "{}", r.text);
    }

    /// Runs `script` in a session on workspace `id`, then ends the session.
    fn fill(&self, id: &str, script: &str) {
        let s = self.create("default", Some(id)).id;
        let (ok, out) = exec(&self.stack, &s, script);
        assert!(ok, "filling the workspace: {out}");
        self.end(&s);
    }

    fn volume_of(&self, id: &str) -> String {
        format!("termgate-ws-{}-{id}", self.stack.instance)
    }

    /// `POST /v1/workspaces/<src>/copy`, then a poll every 50 ms until it is `ready`.
    fn copy(&self, src: &str, name: &str) -> JobRun {
        let posted = now_nanos();
        let start = Instant::now();
        let r = self.request(
            "POST",
            &format!("/v1/workspaces/{src}/copy"),
            Some(&json!({ "name": name })),
        );
        assert_eq!(r.status, 202, "{}", r.text);
        let id = r.body["id"].as_str().expect("id").to_owned();
        loop {
            let w = self.request("GET", &format!("/v1/workspaces/{id}"), None);
            match w.body["state"].as_str() {
                Some("ready") => break,
                Some("copying") => {}
                other => panic!(
                    "copy {id}: {other:?}: {}\n{}",
                    w.text,
                    self.stack.log_text()
                ),
            }
            assert!(start.elapsed() < COPY_DEADLINE, "copy {id} never ended");
            std::thread::sleep(POLL);
        }
        JobRun {
            wall: start.elapsed(),
            posted,
            volume: self.volume_of(&id),
            id,
        }
    }
}

/// `name;dur=<ms>` of a `Server-Timing` header.
fn server_timing(header: &str, name: &str) -> Option<f64> {
    header.split(',').find_map(|part| {
        part.trim()
            .strip_prefix(name)?
            .strip_prefix(";dur=")?
            .parse()
            .ok()
    })
}

fn now_nanos() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as i128
}

fn sync() {
    let ok = Command::new("sync").status().is_ok_and(|s| s.success());
    assert!(ok, "sync");
}

/// Files and bytes under `dir` (directories and links not counted).
fn tree_size(dir: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .flatten()
        {
            let m = e.metadata().expect("metadata");
            if m.is_dir() {
                todo.push(e.path());
            } else if m.is_file() {
                files += 1;
                bytes += m.len();
            }
        }
    }
    (files, bytes)
}

fn mountpoint(volume: &str) -> PathBuf {
    PathBuf::from(docker(&[
        "volume",
        "inspect",
        "-f",
        "{{.Mountpoint}}",
        volume,
    ]))
}

/// A copy job's run: its wall time and what Docker's events say of it.
struct JobRun {
    wall: Duration,
    /// When the copy was asked for, ns since the epoch.
    posted: i128,
    id: String,
    volume: String,
}

/// A copy's time in all, its `cp` and `sync` parts when they were timed apart, and
/// the CPU the storage driver's daemon (fuse-overlayfs) spent meanwhile (`NAN`: not
/// known).
#[derive(Clone, Copy)]
struct Split {
    total: f64,
    cp: f64,
    sync: f64,
    driver: f64,
}

/// Reads every file under `dir`: the page cache holds the source when a copy starts,
/// whatever reclaimed it since it was written.
fn warm(dir: &Path) {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 20];
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                let mut f = std::fs::File::open(e.path()).expect("open");
                while f.read(&mut buf).expect("read") > 0 {}
            }
        }
    }
}

/// `cp -a <src>/. <dest>/` by `program` (its first words) into the new directory
/// `dest`, then `sync`, on the host.
fn host_copy(program: &[&str], src: &Path, dest: &Path) -> Split {
    std::fs::create_dir(dest).expect("the host copy's directory");
    let start = Instant::now();
    let ok = Command::new(program[0])
        .args(&program[1..])
        .arg("-a")
        .arg(src.join("."))
        .arg(dest)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{program:?} cp -a");
    let cp = start.elapsed();
    sync();
    let total = start.elapsed();
    assert_eq!(tree_size(dest), tree_size(src), "the host's copy is whole");
    Split {
        total: total.as_secs_f64(),
        cp: cp.as_secs_f64(),
        sync: (total - cp).as_secs_f64(),
        driver: f64::NAN,
    }
}

/// User and system CPU seconds of process `pid`.
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

/// The fuse-overlayfs process that serves `container`'s root file system, when the
/// storage driver is fuse-overlayfs.
fn driver_pid(container: &str) -> Option<u32> {
    let merged = docker(&[
        "inspect",
        "-f",
        "{{.GraphDriver.Data.MergedDir}}",
        container,
    ]);
    if !merged.starts_with('/') {
        return None;
    }
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.contains("fuse-overlayfs") && cmd.contains(&merged)).then_some(pid)
    })
}

/// How a probe copies.
#[derive(Clone, Copy)]
enum How {
    /// `cp -a /termgate/<kind>/. <dest>/`, as the job does.
    Cp,
    /// The same run from the destination, into `.`.
    CpHere,
    /// `tar -C <source> --numeric-owner -cf - . | tar -C <dest> --numeric-owner -xf -`:
    /// no path walked from `/`, no user or group looked up by name.
    Tar,
    /// The copy job's own script (from its create body), into `<dest>`.
    Job,
}

/// A container of the session image with the sources mounted read-only at
/// `/termgate/<kind>` and an empty volume at the home directory, idle until a copy is
/// run in it with `docker exec`.
struct Probe {
    name: String,
    scratch: PathBuf,
    driver: Option<u32>,
    /// The copy job's script, for [`How::Job`].
    script: String,
}

impl Probe {
    fn start(b: &Bench, label: &str, flags: &[String], sources: &[(&str, String)]) -> Probe {
        let instance = &b.stack.instance;
        let name = format!("termgate-bench-{instance}-{label}");
        let tag = format!("termgate.instance={instance}");
        docker(&["volume", "create", "--label", &tag, &name]);
        let mut args: Vec<String> = ["run", "-d", "--name", &name, "--label", &tag]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        args.extend(flags.iter().cloned());
        args.extend(["-v".into(), format!("{name}:/home/user")]);
        for (kind, volume) in sources {
            args.extend(["-v".into(), format!("{volume}:/termgate/{kind}:ro")]);
        }
        args.extend([
            "--entrypoint".into(),
            "sh".into(),
            b.image.clone(),
            "-c".into(),
            "exec sleep 86400".into(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&args);
        Probe {
            driver: driver_pid(&name),
            scratch: mountpoint(&name),
            name,
            script: String::new(),
        }
    }

    /// The copy of `/termgate/<kind>` into the new directory `/home/user/c<n>`, then
    /// `sync`, timed by the clock outside (the whole `docker exec`) and by
    /// `/proc/uptime` inside.
    fn copy(&self, kind: &str, src: &Path, n: usize, how: How) -> Split {
        let into = match how {
            How::Cp => "cp -a /termgate/\"$1\"/. /home/user/c\"$2\"/",
            How::CpHere => "cd /home/user/c\"$2\"; cp -a /termgate/\"$1\"/. .",
            How::Tar => {
                "tar -C /termgate/\"$1\" --numeric-owner -cf - . \
                 | tar -C /home/user/c\"$2\" --numeric-owner -xf -"
            }
            How::Job => "sh -c \"$3\" copy /home/user/c\"$2\" /termgate/\"$1\" 2>/dev/null",
        };
        let script = format!(
            "set -e; mkdir /home/user/c\"$2\"; read a _ < /proc/uptime; {into}; \
             read b _ < /proc/uptime; sync; read c _ < /proc/uptime; echo $a $b $c"
        );
        let before = self.driver.map(cpu_seconds);
        let start = Instant::now();
        let o = Command::new("docker")
            .args([
                "exec",
                &self.name,
                "sh",
                "-c",
                &script,
                "copy",
                kind,
                &n.to_string(),
                &self.script,
            ])
            .output()
            .expect("docker exec");
        let total = start.elapsed().as_secs_f64();
        let driver = match (self.driver, before) {
            (Some(pid), Some(before)) => cpu_seconds(pid) - before,
            _ => f64::NAN,
        };
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{}: {out}{}",
            self.name,
            String::from_utf8_lossy(&o.stderr)
        );
        let t: Vec<f64> = out
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        assert_eq!(t.len(), 3, "{out}");
        assert_eq!(
            tree_size(&self.scratch.join(format!("c{n}"))),
            tree_size(src),
            "the copy is whole"
        );
        Split {
            total,
            cp: t[1] - t[0],
            sync: t[2] - t[1],
            driver,
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &self.name])
            .output();
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &self.name])
            .output();
    }
}

/// Docker's container and volume events, read as they come (`docker events`).
struct Events {
    child: Child,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Events {
    fn start() -> Events {
        let mut child = Command::new("docker")
            .args([
                "events",
                "--format",
                "{{json .}}",
                "--filter",
                "type=container",
                "--filter",
                "type=volume",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker events");
        let out = child.stdout.take().expect("its output");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    into.lock().expect("events").push(v);
                }
            }
        });
        Events { child, seen }
    }

    /// When `action` happened to the copy job of `volume` (`kind` container), or to
    /// `volume` itself (`kind` volume), ns since the epoch.
    fn at(&self, kind: &str, action: &str, volume: &str) -> Option<i128> {
        let seen = self.seen.lock().expect("events");
        seen.iter().find_map(|e| {
            let attr = |k: &str| e["Actor"]["Attributes"][k].as_str();
            let ours = match kind {
                "volume" => e["Actor"]["ID"].as_str() == Some(volume),
                _ => {
                    attr("termgate.managed") == Some("copy")
                        && attr("termgate.workspace") == Some(volume)
                }
            };
            (e["Type"] == kind && e["Action"] == action && ours)
                .then(|| e["timeNano"].as_i64().map(i128::from))
                .flatten()
        })
    }

    /// The steps of a copy job, ms from the ask: volume made, job created, started,
    /// exited, removed, and the poll that saw `ready` (`NAN`: not seen).
    fn steps(&self, run: &JobRun) -> [f64; 6] {
        // The job is removed before the copy is marked ready: its events are out.
        let gone = || self.at("container", "destroy", &run.volume);
        for _ in 0..100 {
            if gone().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let ms = |t: Option<i128>| t.map_or(f64::NAN, |t| (t - run.posted) as f64 / 1e6);
        [
            ms(self.at("volume", "create", &run.volume)),
            ms(self.at("container", "create", &run.volume)),
            ms(self.at("container", "start", &run.volume)),
            ms(self.at("container", "die", &run.volume)),
            ms(gone()),
            msf(run.wall),
        ]
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The 1-minute load average every 2 s while the run lasts.
struct Load {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<f64>>>,
}

impl Load {
    fn watch() -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, into) = (stop.clone(), samples.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(l) = loadavg().first() {
                    into.lock().expect("load").push(*l);
                }
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        Load { stop, samples }
    }

    /// Lowest, median and highest 1-minute load average seen.
    fn summary(&self) -> (f64, f64, f64) {
        self.stop.store(true, Ordering::Relaxed);
        let v = self.samples.lock().expect("load").clone();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        (lo, median(&v), hi)
    }
}

fn loadavg() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// A workspace of `files` files of `kib` KiB of random bytes (as base64 text), 100 to
/// a directory, ten directories to a parent.
fn small_files_script(files: usize, kib: usize) -> String {
    format!(
        "set -e; cd /home/user; find . -mindepth 1 -maxdepth 1 -exec rm -rf {{}} +; i=0; \
         while [ $i -lt {files} ]; do \
           if [ $((i % 100)) -eq 0 ]; then d=d$((i / 1000))/s$((i / 100 % 10)); mkdir -p $d; \
             b=$(head -c {raw} /dev/urandom | base64 | tr -d '\\n'); fi; \
           printf %s \"$b\" > $d/f$((i % 100)); i=$((i + 1)); \
         done",
        raw = kib * 768
    )
}

/// A workspace of `files` files of `mib` MiB of random bytes.
fn large_files_script(files: usize, mib: usize) -> String {
    format!(
        "set -e; cd /home/user; find . -mindepth 1 -maxdepth 1 -exec rm -rf {{}} +; i=0; \
         while [ $i -lt {files} ]; do head -c {} /dev/urandom > big$i; i=$((i + 1)); done",
        mib * 1024 * 1024
    )
}

/// The ways a tree is copied.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Way {
    /// The copy job, through control.
    Job,
    /// GNU `cp` on the host, as root.
    HostGnu,
    /// The image's BusyBox `cp` on the host, as root.
    HostBusybox,
    /// BusyBox `cp` in a container as root, Docker's default capabilities, no limits.
    Root,
    /// BusyBox `cp` in a container as the profile's user, in its sandbox, no limits.
    User,
    /// The same with the profile's limits: the job's `cp -a` before it copied with
    /// two processes.
    Limited,
    /// The same, run from the destination and copying into `.`.
    LimitedHere,
    /// The same limits, the tree carried by two `tar`s, each in its own directory and
    /// naming owners by number.
    LimitedTar,
    /// The same limits, the copy job's script.
    LimitedScript,
    /// The copy job's script with the job's own limits (its CPU allowance, the
    /// profile's memory and pids): the job without Docker and control.
    JobScript,
}

/// One source workspace of the copy part.
struct Source {
    kind: &'static str,
    label: String,
    id: String,
    dir: PathBuf,
    files: u64,
    bytes: u64,
}

fn main() {
    let creates = env_num("BENCH_WS_CREATES", 30);
    let rounds = env_num("BENCH_WS_ROUNDS", 3);
    let small_files = env_num("BENCH_WS_SMALL_FILES", 20_000);
    let small_kib = env_num("BENCH_WS_SMALL_KIB", 10);
    let large_files = env_num("BENCH_WS_LARGE_FILES", 4);
    let large_mib = env_num("BENCH_WS_LARGE_MIB", 50);
    let explain = env_num("BENCH_WS_EXPLAIN", 1) != 0;
    let only = std::env::var("BENCH_WS_ONLY").unwrap_or_default();
    let facts = machine::machine_facts(&[
        (
            "file system of Docker's volumes",
            machine::command_line(
                "findmnt",
                &["-n", "-o", "FSTYPE,SOURCE", "-T", "/var/lib/docker/volumes"],
            )
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        ),
        (
            "Docker storage driver",
            machine::command_line("docker", &["info", "--format", "{{.Driver}}"]),
        ),
        ("host cp", machine::command_line("cp", &["--version"])),
    ]);
    let load = Load::watch();
    let started = Instant::now();
    let b = Bench::start();
    let mut out = String::new();

    if only.is_empty() || only == "creates" {
        out.push_str(&create_part(&b, creates));
    }
    if only.is_empty() || only == "copies" {
        let sources = [
            (
                "small",
                format!("{small_files} × {small_kib} KiB"),
                small_files_script(small_files, small_kib),
            ),
            (
                "large",
                format!("{large_files} × {large_mib} MiB"),
                large_files_script(large_files, large_mib),
            ),
        ];
        out.push_str(&copy_part(&b, &sources, rounds, explain));
    }

    let took = started.elapsed();
    let (lo, mid, hi) = load.summary();
    println!("{facts}");
    let build = if cfg!(debug_assertions) {
        "Debug"
    } else {
        "Release"
    };
    let end: Vec<String> = loadavg().iter().map(|l| format!("{l:.2}")).collect();
    println!(
        "{build} build; the run took {:.1} min; 1-minute load average during it {lo:.2}–{hi:.2} \
         (median {mid:.2}), {} at the end.\n",
        took.as_secs_f64() / 60.0,
        end.join(" "),
    );
    print!("{out}");
}

/// Create → running on the home volume and on a chosen workspace, alternating.
fn create_part(b: &Bench, creates: usize) -> String {
    let chosen = b.new_workspace("bench");
    let paths: [(&str, &str, Option<&str>); 2] = [
        (
            "home volume (a profile with `workspace = \"home\"`)",
            HOME_PROFILE,
            None,
        ),
        (
            "chosen workspace (`choose`, by id)",
            "default",
            Some(chosen.as_str()),
        ),
    ];
    // One each first: the volumes are made on first use, and not timed.
    for (_, profile, ws) in &paths {
        let c = b.create(profile, *ws);
        b.end(&c.id);
    }
    let mut got: Vec<Vec<Created>> = vec![Vec::new(), Vec::new()];
    for round in 0..creates {
        for k in 0..2 {
            let i = (round + k) % 2;
            let (_, profile, ws) = paths[i];
            let c = b.create(profile, ws);
            b.end(&c.id);
            got[i].push(c);
        }
    }
    eprintln!("creates done");
    let mut s = String::new();
    s.push_str("| create on | n | p50 | p99 | control's total p50 (`Server-Timing`) | Docker's part p50 | control's own p50 (total − Docker) |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    let mut p50s = Vec::new();
    let mut own = Vec::new();
    for (i, (name, _, _)) in paths.iter().enumerate() {
        let mut walls: Vec<Duration> = got[i].iter().map(|c| c.wall).collect();
        let p50 = msf(pct(&mut walls, 0.5));
        let p99 = msf(pct(&mut walls, 0.99));
        let total = median(&got[i].iter().map(|c| c.total).collect::<Vec<_>>());
        let dock = median(&got[i].iter().map(|c| c.docker).collect::<Vec<_>>());
        let mine = median(
            &got[i]
                .iter()
                .map(|c| c.total - c.docker)
                .collect::<Vec<_>>(),
        );
        s.push_str(&format!(
            "| {name} | {} | {p50:.2} ms | {p99:.2} ms | {total:.2} ms | {dock:.2} ms | {mine:.2} ms |\n",
            walls.len()
        ));
        p50s.push(p50);
        own.push(mine);
    }
    s.push_str(&format!(
        "\nA chosen workspace against the home volume: p50 {:+.2} ms ({:.3}×; goal ≤ 5 ms: {}); \
         control's own part {:+.2} ms.\n\n",
        p50s[1] - p50s[0],
        p50s[1] / p50s[0],
        if p50s[1] - p50s[0] <= 5.0 {
            "met"
        } else {
            "missed"
        },
        own[1] - own[0],
    ));
    s
}

/// The copy job against the host's `cp -a`, and where the job's time goes.
///
/// Nothing copied is deleted before the end: on a file system without a journal (ext4
/// here) a file made within a minute of a mass deletion waits while ext4 skips the
/// inodes deleted in it, which would charge one way's copy for another's clean-up.
fn copy_part(
    b: &Bench,
    specs: &[(&'static str, String, String)],
    rounds: usize,
    explain: bool,
) -> String {
    let mut sources = Vec::new();
    for (kind, label, script) in specs {
        let id = b.new_workspace(kind);
        b.fill(&id, script);
        let dir = mountpoint(&b.volume_of(&id));
        let (files, bytes) = tree_size(&dir);
        eprintln!("{kind}: {files} files, {bytes} bytes");
        sources.push(Source {
            kind,
            label: label.clone(),
            id,
            dir,
            files,
            bytes,
        });
    }
    let empty = b.new_workspace("empty");
    b.fill(
        &empty,
        "find /home/user -mindepth 1 -maxdepth 1 -exec rm -rf {} +",
    );
    sync();

    // The image's BusyBox on the host, and the containers that copy as root, as the
    // profile's user in its sandbox, and with its limits too.
    let tools = tempfile::tempdir().expect("temp dir");
    let busybox = tools.path().join("busybox");
    let mut probes: HashMap<Way, Probe> = HashMap::new();
    let mut limits_said = String::new();
    let mut job_said = String::new();
    // The copy job's script and CPU allowance, as control sends them.
    let job = {
        let declared = b.stack.dir.load().profiles["default"].declared();
        let owner = policy::Sub::parse("bench").expect("a sub");
        let facts = policy::declared::CopyFacts {
            instance: &b.stack.instance,
            host: "local",
            owner: &owner,
            profile: "default",
            source: "bench-source",
            dest: "bench-dest",
        };
        policy::declared::copy_job_body(&declared, &facts).expect("a copy job")
    };
    let job_script = job["Entrypoint"][2]
        .as_str()
        .expect("the job's script")
        .to_owned();
    let job_nano_cpus = job["HostConfig"]["NanoCpus"]
        .as_i64()
        .expect("the job's CPUs");
    if explain {
        let o = Command::new("docker")
            .args([
                "run",
                "--rm",
                "--label",
                &format!("termgate.instance={}", b.stack.instance),
                "--entrypoint",
                "cat",
                &b.image,
                "/bin/busybox",
            ])
            .output()
            .expect("docker run");
        assert!(o.status.success(), "the image's busybox");
        std::fs::write(&busybox, &o.stdout).expect("busybox");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&busybox, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let spec = b.stack.dir.load().profiles["default"].declared().spec;
        let mut sandbox = vec![
            format!(
                "--user={}",
                spec.user.clone().unwrap_or_else(|| "0:0".into())
            ),
            format!("--network={}", spec.network_mode),
            "--tmpfs=/tmp".to_owned(),
        ];
        sandbox.extend(spec.cap_drop.iter().map(|c| format!("--cap-drop={c}")));
        sandbox.extend(
            spec.security_opt
                .iter()
                .map(|o| format!("--security-opt={o}")),
        );
        if spec.readonly_rootfs {
            sandbox.push("--read-only".into());
        }
        if spec.init {
            sandbox.push("--init".into());
        }
        let mut limited = sandbox.clone();
        if let Some(n) = spec.nano_cpus {
            limited.push(format!("--cpus={}", n as f64 / 1e9));
        }
        if let Some(m) = spec.memory_bytes {
            limited.push(format!("--memory={m}b"));
        }
        if let Some(m) = spec.memory_swap_bytes {
            limited.push(format!("--memory-swap={m}b"));
        }
        if let Some(p) = spec.pids_limit {
            limited.push(format!("--pids-limit={p}"));
        }
        limits_said = format!(
            "{} CPU, {} MiB",
            spec.nano_cpus
                .map_or("any".into(), |n| format!("{}", n as f64 / 1e9)),
            spec.memory_bytes
                .map_or("any".into(), |m| (m / (1024 * 1024)).to_string()),
        );
        let mounts: Vec<(&str, String)> = sources
            .iter()
            .map(|s| (s.kind, b.volume_of(&s.id)))
            .collect();
        let root = [
            "--user=0:0".to_owned(),
            format!("--network={}", spec.network_mode),
        ];
        probes.insert(Way::Root, Probe::start(b, "root", &root, &mounts));
        probes.insert(Way::User, Probe::start(b, "user", &sandbox, &mounts));
        let mut job_limited = limited.clone();
        job_limited.retain(|f| !f.starts_with("--cpus="));
        job_limited.push(format!("--cpus={}", job_nano_cpus as f64 / 1e9));
        job_said = format!("{} CPU", job_nano_cpus as f64 / 1e9);
        let mut p = Probe::start(b, "limited", &limited, &mounts);
        p.script = job_script.clone();
        probes.insert(Way::Limited, p);
        let mut p = Probe::start(b, "job", &job_limited, &mounts);
        p.script = job_script.clone();
        probes.insert(Way::JobScript, p);
    }
    let busybox_s = busybox.to_string_lossy().into_owned();

    let mut ways = vec![Way::Job, Way::HostGnu];
    if explain {
        ways.extend([
            Way::HostBusybox,
            Way::Root,
            Way::User,
            Way::Limited,
            Way::LimitedHere,
            Way::LimitedTar,
            Way::LimitedScript,
            Way::JobScript,
        ]);
    }
    let events = Events::start();
    let mut copies: Vec<String> = Vec::new();
    let mut host_copies: Vec<PathBuf> = Vec::new();
    // One job not counted: the image and the paths warmed.
    copies.push(b.copy(&empty, "warm-up").id);
    let mut times: Vec<HashMap<Way, Vec<Split>>> = sources.iter().map(|_| HashMap::new()).collect();
    let mut steps: Vec<Vec<[f64; 6]>> = (0..=sources.len()).map(|_| Vec::new()).collect();
    let mut n = 0;
    for round in 0..rounds {
        for (si, src) in sources.iter().enumerate() {
            for k in 0..ways.len() {
                let way = ways[(round + si + k) % ways.len()];
                n += 1;
                warm(&src.dir);
                sync();
                let split = match way {
                    Way::Job => {
                        let run = b.copy(&src.id, &format!("{}-{round}", src.kind));
                        let dir = mountpoint(&run.volume);
                        assert_eq!(
                            tree_size(&dir),
                            (src.files, src.bytes),
                            "the job's copy is whole"
                        );
                        steps[si].push(events.steps(&run));
                        copies.push(run.id);
                        Split {
                            total: run.wall.as_secs_f64(),
                            cp: f64::NAN,
                            sync: f64::NAN,
                            driver: f64::NAN,
                        }
                    }
                    Way::HostGnu | Way::HostBusybox => {
                        let dest = src.dir.with_file_name(format!("bench-copy-{n}"));
                        host_copies.push(dest.clone());
                        let program: &[&str] = if way == Way::HostGnu {
                            &["cp"]
                        } else {
                            &[&busybox_s, "cp"]
                        };
                        host_copy(program, &src.dir, &dest)
                    }
                    Way::LimitedHere => {
                        probes[&Way::Limited].copy(src.kind, &src.dir, n, How::CpHere)
                    }
                    Way::LimitedTar => probes[&Way::Limited].copy(src.kind, &src.dir, n, How::Tar),
                    Way::LimitedScript => {
                        probes[&Way::Limited].copy(src.kind, &src.dir, n, How::Job)
                    }
                    Way::JobScript => probes[&Way::JobScript].copy(src.kind, &src.dir, n, How::Job),
                    _ => probes[&way].copy(src.kind, &src.dir, n, How::Cp),
                };
                eprintln!(
                    "round {round} {} {way:?}: {:.2} s (cp {:.2}, sync {:.2}, fuse-overlayfs CPU {:.2})",
                    src.kind, split.total, split.cp, split.sync, split.driver
                );
                times[si].entry(way).or_default().push(split);
            }
        }
        let run = b.copy(&empty, &format!("empty-{round}"));
        steps[sources.len()].push(events.steps(&run));
        copies.push(run.id);
    }
    eprintln!("copies done");

    let mb = |bytes: u64| bytes as f64 / 1e6;
    let med = |v: &[Split], f: fn(&Split) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let rounds_of = |v: &[Split]| {
        v.iter()
            .map(|s| format!("{:.2}", s.total))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = String::new();
    s.push_str("| workspace | files | MB | job: `POST …/copy` → `ready` (median) | job MB/s | host `cp -a` + `sync` (median) | host MB/s | job ÷ host | job, each round | host, each round |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    let mut ratios = Vec::new();
    for (si, src) in sources.iter().enumerate() {
        let job = &times[si][&Way::Job];
        let host = &times[si][&Way::HostGnu];
        let (j, h) = (med(job, |s| s.total), med(host, |s| s.total));
        let (jr, hr) = (mb(src.bytes) / j, mb(src.bytes) / h);
        ratios.push((src.kind, jr / hr));
        s.push_str(&format!(
            "| {} ({}) | {} | {:.1} | {j:.2} s | {jr:.1} | {h:.2} s | {hr:.1} | **{:.2}×** | {} s | {} s |\n",
            src.kind,
            src.label,
            src.files,
            mb(src.bytes),
            jr / hr,
            rounds_of(job),
            rounds_of(host),
        ));
    }
    let empties: Vec<f64> = steps[sources.len()].iter().map(|st| st[5]).collect();
    s.push_str(&format!(
        "| empty | 0 | 0 | {:.0} ms | — | — | — | — | {} ms | — |\n",
        median(&empties),
        empties
            .iter()
            .map(|t| format!("{t:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let verdict: Vec<String> = ratios
        .iter()
        .map(|(k, r)| format!("{k} {r:.2}× ({})", if *r >= 0.8 { "met" } else { "missed" }))
        .collect();
    s.push_str(&format!(
        "\nJob ÷ host, goal ≥ 0.8×: {}.\n\n",
        verdict.join(", ")
    ));

    s.push_str("Where a job's time goes, from Docker's events (medians, ms after the `POST`):\n\n");
    s.push_str("| workspace | volume made | job created | started | exited | removed | poll saw `ready` | script (started → exited) | the rest |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let names: Vec<&str> = sources
        .iter()
        .map(|s| s.kind)
        .chain(std::iter::once("empty"))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let col = |c: usize| median(&steps[i].iter().map(|st| st[c]).collect::<Vec<_>>());
        let script = median(&steps[i].iter().map(|st| st[3] - st[2]).collect::<Vec<_>>());
        let rest = median(
            &steps[i]
                .iter()
                .map(|st| st[5] - (st[3] - st[2]))
                .collect::<Vec<_>>(),
        );
        s.push_str(&format!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {script:.0} | {rest:.0} |\n",
            col(0),
            col(1),
            col(2),
            col(3),
            col(4),
            col(5),
        ));
    }

    if explain {
        s.push_str(&format!(
            "\nThe same trees by each way of copying (medians of {rounds}, s; inside a container \
             `cp` and `sync` are timed by `/proc/uptime`, 10 ms steps, and \"in all\" is the whole \
             `docker exec`):\n\n"
        ));
        s.push_str("| workspace | way | cp | sync | in all | MB/s | ÷ host GNU `cp` | fuse-overlayfs CPU |\n");
        s.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
        let rows: [(Way, String); 10] = [
            (Way::HostGnu, "host, GNU `cp`, root".into()),
            (
                Way::HostBusybox,
                "host, the image's BusyBox `cp`, root".into(),
            ),
            (
                Way::Root,
                "container, BusyBox `cp`, root (Docker's default capabilities)".into(),
            ),
            (
                Way::User,
                "container, BusyBox `cp`, the profile's user and sandbox".into(),
            ),
            (
                Way::Limited,
                format!("… and its limits ({limits_said}): the job's former `cp -a`"),
            ),
            (
                Way::LimitedHere,
                "… the same, run from the destination, copying into `.`".into(),
            ),
            (
                Way::LimitedTar,
                "… the same limits, two `tar -C <dir> --numeric-owner`s piped together (no path from `/`)".into(),
            ),
            (
                Way::LimitedScript,
                "… the same limits, the job's script (its `sync -f` in cp)".into(),
            ),
            (
                Way::JobScript,
                format!("… the job's script and its own CPU allowance ({job_said})"),
            ),
            (Way::Job, "the job, `POST` → `ready`".into()),
        ];
        for (si, src) in sources.iter().enumerate() {
            let host = med(&times[si][&Way::HostGnu], |s| s.total);
            for (way, name) in &rows {
                let v = &times[si][way];
                let (cp, sy, all, drv) = (
                    med(v, |s| s.cp),
                    med(v, |s| s.sync),
                    med(v, |s| s.total),
                    med(v, |s| s.driver),
                );
                let part = |x: f64, unit: &str| {
                    if x.is_nan() {
                        "—".to_owned()
                    } else {
                        format!("{x:.2}{unit}")
                    }
                };
                s.push_str(&format!(
                    "| {} | {name} | {} | {} | {all:.2} | {:.1} | {:.2}× | {} |\n",
                    src.kind,
                    part(cp, ""),
                    part(sy, ""),
                    mb(src.bytes) / all,
                    host / all,
                    part(drv, " s"),
                ));
            }
        }
        s.push('\n');
    }
    drop(probes);
    for dir in &host_copies {
        std::fs::remove_dir_all(dir).expect("remove a host copy");
    }
    for id in copies
        .iter()
        .chain(sources.iter().map(|s| &s.id))
        .chain(std::iter::once(&empty))
    {
        b.delete_workspace(id);
    }
    s
}

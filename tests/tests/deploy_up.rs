//! `deploy/up` itself, run the way a newcomer runs it (with a temporary state
//! directory and its own ports): the directories it makes, the ttyd command line it
//! starts, and that nobody but its own user can reach the ttyd socket; and its
//! supervision: a control, ttyd pool or gateway killed with SIGKILL is restarted
//! while the others keep serving, and SIGTERM stops exactly what it started.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::stack::{docker, free_port, http, wait_for};
use e2e::term::{ConnectError, Target, Terminal};
use serde_json::json;

/// A uid and gid that own nothing here.
const NOBODY: u32 = 65534;

/// `deploy/up` in its own process group, stopped (with everything it started) on drop,
/// together with the session containers of its instance.
struct Up {
    child: Child,
    /// Every line it printed so far (stdout and stderr).
    output: Arc<Mutex<Vec<String>>>,
    state: PathBuf,
    instance: String,
    gateway: SocketAddr,
    control: SocketAddr,
}

impl Drop for Up {
    fn drop(&mut self) {
        let pid = self.child.id();
        // Not when it has exited already (and its pid may be another process's).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        // Bounded: a test that failed must not hang here.
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Anything still in its process group (only after a failure) goes too.
        if processes().iter().any(|p| p.pgid == pid) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
        if std::thread::panicking() {
            eprintln!("--- deploy/up printed ---\n{}", self.printed());
            for log in ["control.log", "ttyd.log", "gateway.log"] {
                let text =
                    std::fs::read_to_string(self.state.join("logs").join(log)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                eprintln!(
                    "--- {log} (last lines) ---\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
        // Session containers outlive deploy/up by design; the test's must not.
        let filter = format!("label=termgate.instance={}", self.instance);
        for kind in [&["ps", "-aq"][..], &["volume", "ls", "-q"][..]] {
            let Ok(o) = Command::new("docker")
                .args(kind)
                .args(["--filter", &filter])
                .output()
            else {
                continue;
            };
            let ids: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect();
            if ids.is_empty() {
                continue;
            }
            let rm: &[&str] = if kind[0] == "ps" {
                &["rm", "-f", "-v"]
            } else {
                &["volume", "rm", "-f"]
            };
            let _ = Command::new("docker").args(rm).args(&ids).output();
        }
    }
}

impl Up {
    /// Everything printed so far, one line each.
    fn printed(&self) -> String {
        self.output.lock().expect("output lock").join("\n")
    }

    /// Waits until a printed line contains every one of `parts`; returns that line.
    fn wait_line(&self, parts: &[&str], deadline: Duration) -> String {
        self.wait_nth_line(parts, 1, deadline)
    }

    /// The `nth` (from 1) printed line with every one of `parts`, waiting for it.
    fn wait_nth_line(&self, parts: &[&str], nth: usize, deadline: Duration) -> String {
        let found = || {
            self.output
                .lock()
                .expect("output lock")
                .iter()
                .filter(|l| parts.iter().all(|p| l.contains(p)))
                .nth(nth - 1)
                .cloned()
        };
        let start = Instant::now();
        loop {
            if let Some(line) = found() {
                return line;
            }
            assert!(
                start.elapsed() < deadline,
                "deploy/up printed no line with {parts:?} within {deadline:?}:\n{}",
                self.printed()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn config(&self) -> PathBuf {
        self.state.join("termgate.toml")
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.gateway)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.state.join("logs").join(name)).unwrap_or_default()
    }

    /// The running `termgate-<bin> --config <this state>` process.
    fn component(&self, bin: &str) -> Proc {
        let config = self.config();
        let config = config.to_str().expect("utf-8 path");
        // The gateway, when it runs as a user of its own, reads its own copy.
        let copy = self.state.join("gateway/termgate.toml");
        let copy = copy.to_str().expect("utf-8 path");
        wait_for(
            &format!("the {bin} process"),
            Duration::from_secs(30),
            || {
                processes().into_iter().find(|p| {
                    p.args
                        .first()
                        .is_some_and(|a| a.ends_with(&format!("/{bin}")))
                        && (p.args[1..] == ["--config", config]
                            || p.args[1..] == ["--config", copy])
                })
            },
        )
    }

    /// The running ttyd of the pool on this state's socket.
    fn pool(&self) -> Proc {
        let socket = self.state.join("ttyd/ttyd.sock");
        let socket = socket.to_str().expect("utf-8 path");
        wait_for("the ttyd pool process", Duration::from_secs(30), || {
            processes().into_iter().find(|p| {
                p.args.first().is_some_and(|a| a.ends_with("ttyd"))
                    && p.args.iter().any(|a| a == socket)
            })
        })
    }

    /// Whether control answers its health check.
    fn control_healthy(&self) -> bool {
        http(
            "GET",
            &format!("http://{}/v1/healthz", self.control),
            None,
            None,
        )
        .is_ok_and(|a| a.status == 200)
    }

    /// Creates a session through the gateway's public API, as a user would.
    fn create_session(&self, token: &str) -> String {
        let a = http(
            "POST",
            &self.url("/api/sessions"),
            Some(token),
            Some(&json!({"profile": "default"})),
        )
        .expect("the gateway answers");
        assert_eq!(a.status, 201, "create: {}", a.text);
        a.body["id"].as_str().expect("session id").to_owned()
    }

    /// Opens the session's terminal through the gateway and waits until ttyd has spoken.
    /// Retried while the gateway or the pool is not (yet) there, and while the route is
    /// not yet fed (404). A terminal that opens and then closes before ttyd spoke fails.
    fn open_terminal(&self, id: &str, token: &str) -> Terminal {
        let bearer = format!("Bearer {token}");
        let path = format!("/s/{id}/ws");
        let start = Instant::now();
        loop {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no terminal for {id} within 60 s"
            );
            match Terminal::connect(
                Target::Tcp(self.gateway),
                &path,
                &[("Authorization", &bearer)],
            ) {
                Ok(t) => {
                    if let Err(e) = t.wait_title(Duration::from_secs(10)) {
                        panic!(
                            "terminal {id}: ttyd never spoke: {e}; {:?}",
                            t.close_reason()
                        );
                    }
                    return t;
                }
                Err(ConnectError::Refused {
                    status: 404 | 502 | 503,
                    ..
                }) => {}
                Err(ConnectError::Io(_) | ConnectError::Handshake(_)) => {}
                Err(e) => panic!("open terminal {id}: {e}"),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One process as /proc shows it.
#[derive(Debug, Clone)]
struct Proc {
    pid: u32,
    ppid: u32,
    pgid: u32,
    state: char,
    /// Start time (clock ticks since boot): a pid and this name one process for good.
    start: u64,
    args: Vec<String>,
}

fn proc_info(pid: u32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    Some(Proc {
        pid,
        state: rest[0].chars().next()?,
        ppid: rest[1].parse().ok()?,
        pgid: rest[2].parse().ok()?,
        start: rest[19].parse().ok()?,
        args: raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    })
}

fn processes() -> Vec<Proc> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter_map(proc_info)
        .collect()
}

/// Whether the process is gone: no such pid, another process under its pid, or a
/// zombie (it has exited; only its parent has not collected the status).
fn gone(p: &Proc) -> bool {
    proc_info(p.pid).is_none_or(|now| now.start != p.start || now.state == 'Z')
}

/// `docker attach` processes attached to `container`.
fn attaches_of(container: &str) -> Vec<Proc> {
    processes()
        .into_iter()
        .filter(|p| {
            p.state != 'Z'
                && p.args.iter().any(|a| a == "attach")
                && p.args.iter().any(|a| a == container)
        })
        .collect()
}

fn kill(signal: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{signal} {pid}");
}

/// The printed demo user's token.
fn demo_token(printed: &str) -> String {
    let link = printed
        .lines()
        .find_map(|l| l.split_once("Sign in:").map(|(_, r)| r.trim().to_owned()))
        .expect("a sign-in link");
    link.split_once("/#token=")
        .expect("link with a token")
        .1
        .to_owned()
}

/// Types a fresh `echo` into the terminal and waits (up to `deadline`) for its result;
/// returns how long the round trip took. The typed line shows `$((…))`, only the
/// shell's answer shows the number, so the echo of the input never matches.
fn echo(term: &Terminal, n: &mut u64, deadline: Duration) -> Result<Duration, String> {
    *n += 1;
    let want = format!("pong-{}", 100_000 + *n);
    let start = Instant::now();
    term.send_input(format!("echo pong-$((100000+{}))\r", *n).as_bytes())?;
    term.read_until(&want, deadline)?;
    Ok(start.elapsed())
}

/// The session's container id (its `termgate.session` label).
fn container_of(instance: &str, id: &str) -> String {
    let out = docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label=termgate.instance={instance}"),
        "--filter",
        &format!("label=termgate.session={id}"),
    ]);
    assert_eq!(out.lines().count(), 1, "container of session {id}: {out:?}");
    out
}

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("checkout root")
        .to_path_buf()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Whether uid/gid 65534 can connect to the unix socket at `path` (curl exits 7 when
/// it cannot connect; anything else means it reached the listener).
fn nobody_connects(path: &Path) -> bool {
    connects_as(NOBODY, NOBODY, path)
}

/// Whether `uid`:`gid`, without supplementary groups, can connect to the unix socket
/// at `path`.
fn connects_as(uid: u32, gid: u32, path: &Path) -> bool {
    let id = uid.to_string();
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
            "curl",
            "-sS",
            "-m",
            "5",
            "--unix-socket",
        ])
        .arg(path)
        .arg("http://termgate/_ping")
        .output()
        .expect("setpriv + curl as another uid");
    eprintln!(
        "as uid {id}, curl {}: {:?} {}",
        path.display(),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out.status.code() != Some(7)
}

fn start_up(state: &Path) -> Up {
    start_up_with(state, &[])
}

/// `deploy/up` with its state in `state`, ports of its own, and `extra` environment.
fn start_up_with(state: &Path, extra: &[(&str, &str)]) -> Up {
    let instance = format!("t{}", e2e::random_hex(5));
    let gateway: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let control: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut cmd = Command::new(checkout().join("deploy/up"));
    cmd.env("TERMGATE_STATE_DIR", state)
        // deploy/test has built these; release would be a second full build.
        .env("TERMGATE_BUILD_PROFILE", "debug")
        .env("TERMGATE__INSTANCE", &instance)
        .env("TERMGATE__GATEWAY__LISTEN", gateway.to_string())
        .env(
            "TERMGATE__GATEWAY__ADMIN_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env("TERMGATE__CONTROL__LISTEN", control.to_string())
        .env(
            "TERMGATE__CONTROL__ADMIN_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env(
            "TERMGATE__GATEWAY__UPGRADE_SOCKET",
            state.join("gateway-upgrade.sock"),
        )
        .env("TERMGATE__GATEWAY__PID_FILE", state.join("gateway.pid"))
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("start deploy/up");
    let output = Arc::new(Mutex::new(Vec::new()));
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let output = Arc::clone(&output);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                output.lock().expect("output lock").push(line);
            }
        });
    }
    Up {
        child,
        output,
        state: state.to_path_buf(),
        instance,
        gateway,
        control,
    }
}

/// Waits until `deploy/up` says it is up; returns all it printed.
fn wait_up(up: &Up) -> String {
    up.wait_line(&["Sign in:"], Duration::from_secs(300));
    up.printed()
}

/// The command line of the process whose arguments contain `needle`.
fn cmdline_containing(needle: &str) -> Vec<String> {
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.ends_with("ttyd")) && args.iter().any(|a| a == needle) {
            return args;
        }
    }
    panic!("no ttyd process with {needle} in its arguments");
}

#[test]
fn deploy_up_keeps_the_ttyd_socket_to_its_own_user() {
    // The parent is open to everyone, so only what deploy/up makes can keep others out.
    let parent = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let state = parent.path().join("state");
    let up = start_up(&state);
    let printed = wait_up(&up);
    eprintln!("deploy/up printed:\n{printed}");

    let socket = state.join("ttyd/ttyd.sock");
    // Run as root, the pools' user traverses the state directory to its own
    // directories (it cannot list it); else only this user enters it.
    let root = ids_of(std::process::id()).0 == 0;
    let state_mode = if root { 0o711 } else { 0o700 };
    assert_eq!(mode(&state), state_mode, "the state directory");
    // Run as root, control's own user reads them through its group.
    let (dir_mode, file_mode) = if root { (0o750, 0o640) } else { (0o700, 0o600) };
    assert_eq!(
        mode(&state.join("secrets")),
        dir_mode,
        "the secrets directory"
    );
    // Run as root, the gateway's own user reaches them through its primary group.
    let (socket_dir_mode, socket_mode) = if root { (0o710, 0o660) } else { (0o700, 0o600) };
    assert_eq!(
        mode(&state.join("ttyd")),
        socket_dir_mode,
        "the socket's directory"
    );
    assert_eq!(mode(&socket), socket_mode, "the socket");
    for secret in ["secrets/hs256.key", "secrets/service.token"] {
        assert_eq!(mode(&state.join(secret)), file_mode, "{secret}");
    }

    // The pool runs as the design says: -a for the gateway's arg, the user header,
    // a fixed title, on the private socket, attaching through the wrapper that only
    // takes this deployment's session containers.
    let args = cmdline_containing(socket.to_str().expect("utf-8 path"));
    // ttyd rewrites `-t key=value` in its own argv as `key value`; compare alike.
    let joined = args[1..].join(" ").replace('=', " ");
    for part in [
        "-W",
        "-a",
        "-i",
        "-H X-Termgate-User",
        "-t titleFixed termgate",
        // deploy/ttyd-attach, or its copy where the pools' user cannot enter the checkout.
        "ttyd-attach",
    ] {
        assert!(joined.contains(part), "ttyd {joined} lacks {part}");
    }
    assert!(
        !args.iter().any(|a| a == "-p" || a.starts_with("--port")),
        "ttyd listens on no TCP port: {joined}"
    );

    // Another uid cannot reach the socket.
    assert!(
        !nobody_connects(&socket),
        "another uid must not reach ttyd's socket"
    );

    // The pool reaches Docker only through its dockgate, and as root deploy/up runs
    // it as a user of its own who cannot open the daemon's socket.
    let pool = processes()
        .into_iter()
        .find(|p| {
            p.args.first().is_some_and(|a| a.ends_with("ttyd"))
                && p.args.iter().any(|a| Path::new(a) == socket.as_path())
        })
        .expect("the pool's process");
    let attach_socket = state.join("dockgate/local-attach.sock");
    assert_eq!(
        environ_of(pool.pid, "DOCKER_HOST"),
        Some(format!("unix://{}", attach_socket.display())),
        "the pool attaches through dockgate"
    );
    if root {
        let (uid, gid, groups) = ids_of(pool.pid);
        assert_ne!(uid, 0, "the pool runs unprivileged");
        assert!(
            groups.is_empty(),
            "the pool has no supplementary group: {groups:?}"
        );
        let daemon = Path::new("/var/run/docker.sock");
        assert!(
            !connects_as(uid, gid, daemon),
            "the pools' user must not reach the daemon's socket"
        );
        assert!(
            connects_as(uid, gid, &attach_socket),
            "the pools' user reaches its dockgate"
        );
        assert!(
            !connects_as(uid, gid, &state.join("dockgate/local-control.sock")),
            "the pools' user must not reach control's dockgate socket"
        );
        // Control too runs as a user of its own, who reaches Docker only through its
        // dockgate socket.
        let control = processes()
            .into_iter()
            .find(|p| {
                p.args
                    .first()
                    .is_some_and(|a| a.ends_with("termgate-control"))
                    && p.args.iter().any(|a| Path::new(a).starts_with(&state))
            })
            .expect("control's process");
        let (cuid, cgid, cgroups) = ids_of(control.pid);
        assert!(
            cuid != 0 && cuid != uid,
            "control runs as a user of its own"
        );
        assert!(
            cgroups.is_empty(),
            "control has no supplementary group: {cgroups:?}"
        );
        assert!(
            !connects_as(cuid, cgid, daemon),
            "control's user must not reach the daemon's socket"
        );
        assert!(
            connects_as(cuid, cgid, &state.join("dockgate/local-control.sock")),
            "control's user reaches its dockgate"
        );
        assert!(
            !connects_as(cuid, cgid, &attach_socket),
            "control's user must not reach the pools' dockgate socket"
        );
        // The gateway, the one part that parses untrusted input, runs as a user of
        // its own without capabilities or supplementary groups: it reaches the ttyd
        // sockets, and neither the daemon nor dockgate.
        let gateway = up.component("termgate-gateway");
        let (guid, ggid, ggroups) = ids_of(gateway.pid);
        assert!(
            guid != 0 && guid != uid && guid != cuid,
            "the gateway runs as a user of its own"
        );
        assert!(
            ggroups.is_empty(),
            "the gateway has no supplementary group: {ggroups:?}"
        );
        assert_eq!(
            capabilities(gateway.pid),
            (0, 0),
            "the gateway holds no capability"
        );
        assert!(connects_as(guid, ggid, &socket), "the gateway reaches ttyd");
        assert!(
            connects_as(guid, ggid, &state.join("ttyd/ttyd-view.sock")),
            "the gateway reaches the viewers' ttyd"
        );
        for other in [
            daemon,
            attach_socket.as_path(),
            &state.join("dockgate/local-control.sock"),
        ] {
            assert!(
                !connects_as(guid, ggid, other),
                "the gateway's user must not reach {}",
                other.display()
            );
        }
        // Nor do the pools or control reach ttyd's socket: only the gateway's group.
        assert!(
            !connects_as(cuid, cgid, &socket),
            "control must not reach ttyd"
        );
        // Every part it starts but dockgate: no uid 0, no capability.
        for p in processes().into_iter().filter(|p| {
            p.args.first().is_some_and(|a| {
                a.ends_with("termgate-gateway")
                    || a.ends_with("termgate-control")
                    || a.ends_with("ttyd")
            }) && p
                .args
                .iter()
                .any(|a| a.contains(state.to_str().expect("utf-8")))
        }) {
            let (puid, _, _) = ids_of(p.pid);
            assert_ne!(puid, 0, "{:?} runs as root", p.args);
            assert_eq!(
                capabilities(p.pid),
                (0, 0),
                "{:?} holds a capability",
                p.args
            );
        }
        // Positive control of the probe: root reaches the daemon's socket.
        assert!(
            connects_as(0, 0, daemon),
            "root reaches the daemon's socket"
        );
        // What code in ttyd could do through its socket: exec is refused.
        let out = Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
                "env",
                &format!("DOCKER_HOST=unix://{}", attach_socket.display()),
                &format!(
                    "DOCKER_CONFIG={}",
                    state.join("pool/home/.docker").display()
                ),
                "docker",
                "run",
                "--rm",
                "--privileged",
                "termgate/session:dev",
            ])
            .output()
            .expect("docker as the pools' user");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && text.contains("dockgate: "),
            "{text}"
        );
    } else {
        // The users of their own, their groups and capabilities are deploy/up's as root.
        e2e::skip_or_fail("deploy/up's privilege separation is tested as root only");
    }
    // The read-only pool of share links: the same directory and mode, and no -W.
    let view = state.join("ttyd/ttyd-view.sock");
    assert_eq!(mode(&view), socket_mode, "the viewers' socket");
    let args = cmdline_containing(view.to_str().expect("utf-8 path"));
    assert!(
        !args.iter().any(|a| a == "-W" || a == "--writable"),
        "the viewers' pool is read-only: {args:?}"
    );
    assert!(!nobody_connects(&view), "another uid must not reach it");

    // The stack it printed works: the sign-in link's token lists sessions.
    let link = printed
        .lines()
        .find_map(|l| l.split_once("Sign in:").map(|(_, r)| r.trim().to_owned()))
        .expect("a sign-in link");
    let (url, token) = link.split_once("/#token=").expect("link with a token");
    let a = http("GET", &format!("{url}/api/sessions"), Some(token), None)
        .expect("the gateway answers");
    assert_eq!(a.status, 200, "{}", a.text);

    // Positive control: with the modes opened up, the same uid reaches the same
    // socket, so the refusal above was the modes' doing and not the probe's.
    for (path, m) in [
        (&state, 0o755),
        (&state.join("ttyd"), 0o755),
        (&socket, 0o777),
    ] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(m)).expect("chmod");
    }
    assert!(
        nobody_connects(&socket),
        "positive control: another uid reaches the socket once the modes allow it"
    );
}

/// The permitted and effective capability sets of process `pid`.
fn capabilities(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(u64::MAX)
    };
    (field("CapPrm:"), field("CapEff:"))
}

/// The real uid, gid and supplementary groups of process `pid`.
fn ids_of(pid: u32) -> (u32, u32, Vec<u32>) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| -> Vec<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    let (uid, gid) = (field("Uid:"), field("Gid:"));
    (uid[0], gid[0], field("Groups:"))
}

/// The environment variable `name` of process `pid`.
fn environ_of(pid: u32, name: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    raw.split(|b| *b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(&format!("{name}=")).map(str::to_owned)
    })
}

#[test]
fn deploy_up_starts_one_pool_per_docker_host_each_attaching_to_its_own_daemon() {
    if let Some(why) = e2e::daemon::cannot_run() {
        return e2e::skip_or_fail(&why);
    }
    let d2 = e2e::daemon::TestDaemon::start();
    d2.load_session_image();
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let main_host = std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| h.starts_with("unix://"))
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let (main_sock, second_sock) = (state.join("ttyd/main.sock"), state.join("ttyd/second.sock"));
    // The configuration a newcomer writes: the example, with two hosts added.
    let example = std::fs::read_to_string(checkout().join("config/termgate.example.toml"))
        .expect("example config");
    let ttyd = std::env::var("TERMGATE_TTYD").unwrap_or_else(|_| "ttyd".into());
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    let config = example
        .replace("binary = \"ttyd\"", &format!("binary = \"{ttyd}\""))
        .replace(
            "image = \"termgate/session:dev\"",
            &format!("image = \"{image}\""),
        );
    std::fs::write(
        state.join("termgate.toml"),
        format!(
            "{config}\n[[docker.hosts]]\nname = \"main\"\nendpoint = \"{main_host}\"\n\
             ttyd_pool = [\"unix:{}\"]\ncapacity = 2\n\n[[docker.hosts]]\nname = \"second\"\n\
             endpoint = \"{}\"\nttyd_pool = [\"unix:{}\"]\ncapacity = 2\n",
            main_sock.display(),
            d2.host,
            second_sock.display()
        ),
    )
    .expect("write config");

    let up = start_up(&state);
    let token = demo_token(&wait_up(&up));
    // One pool per host, each on its own socket, each attaching through its own daemon.
    // Run as root, the gateway's own user reaches them through its primary group.
    let socket_mode = if ids_of(std::process::id()).0 == 0 {
        0o660
    } else {
        0o600
    };
    for (sock, host) in [(&main_sock, &main_host), (&second_sock, &d2.host)] {
        assert_eq!(mode(sock), socket_mode, "{}", sock.display());
        let pool = processes()
            .into_iter()
            .find(|p| {
                p.args.first().is_some_and(|a| a.ends_with("ttyd"))
                    && p.args.iter().any(|a| Path::new(a) == sock.as_path())
            })
            .unwrap_or_else(|| panic!("no ttyd pool on {}", sock.display()));
        let name = if sock == &main_sock { "main" } else { "second" };
        let attach = format!(
            "unix://{}",
            state.join(format!("dockgate/{name}-attach.sock")).display()
        );
        assert_eq!(
            environ_of(pool.pid, "DOCKER_HOST").as_deref(),
            Some(attach.as_str()),
            "the pool on {} attaches through its host's dockgate",
            sock.display()
        );
        // That dockgate fronts the host's own daemon.
        let gate = processes()
            .into_iter()
            .find(|p| {
                p.args
                    .first()
                    .is_some_and(|a| a.ends_with("termgate-dockgate"))
                    && p.args.windows(2).any(|w| w[0] == "--host" && w[1] == name)
            })
            .unwrap_or_else(|| panic!("no dockgate for host {name}"));
        assert!(
            gate.args
                .windows(2)
                .any(|w| w[0] == "--daemon" && &w[1] == host),
            "the dockgate of {name} fronts {host}: {:?}",
            gate.args
        );
        assert!(
            !nobody_connects(sock),
            "another uid reaches {}",
            sock.display()
        );
    }

    // Placement: the first session on main, the second on the emptier second host;
    // each opens through the one gateway and reaches its own container.
    let first = up.create_session(&token);
    let second = up.create_session(&token);
    let on_second = d2.containers(&format!("termgate.session={second}"));
    assert_eq!(
        on_second.len(),
        1,
        "the second session runs on the second daemon"
    );
    assert!(
        d2.containers(&format!("termgate.session={first}"))
            .is_empty(),
        "the first does not"
    );
    let on_main = container_of(&up.instance, &first);
    for (id, container) in [(&first, on_main.trim()), (&second, on_second[0].as_str())] {
        let term = up.open_terminal(id, &token);
        let mut n = 0;
        echo(&term, &mut n, ECHO).unwrap_or_else(|e| panic!("session {id}: {e}"));
        // A container's host name is its id's first 12 characters.
        term.send_input(b"hostname\r").unwrap();
        term.read_until(&container[..12], ECHO)
            .unwrap_or_else(|e| panic!("session {id}'s shell is not in {container}: {e}"));
    }
    drop(up);
    drop(d2);
}

/// Bound on one terminal round trip; the echoes take milliseconds, the margin is for
/// a loaded machine.
const ECHO: Duration = Duration::from_secs(10);
/// Bound on a component coming back after it was killed.
const BACK: Duration = Duration::from_secs(60);

#[test]
fn a_killed_control_is_restarted_while_open_terminals_keep_echoing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let up = start_up(&dir.path().join("state"));
    let token = demo_token(&wait_up(&up));
    let id = up.create_session(&token);
    let term = up.open_terminal(&id, &token);
    let mut n = 0;
    echo(&term, &mut n, ECHO).expect("echo before control is killed");

    let control = up.component("termgate-control");
    kill("KILL", control.pid);
    let killed = Instant::now();
    wait_for("the killed control to be gone", ECHO, || {
        gone(&control).then_some(())
    });

    // Keep typing until control answers again: every echo must come back, and at
    // least one starts while control is known to be down (the restart waits 0.5 s).
    let (mut during, mut slowest) = (0u32, Duration::ZERO);
    let down_for = loop {
        let down = !up.control_healthy();
        if !down {
            break killed.elapsed();
        }
        let rtt = echo(&term, &mut n, ECHO).unwrap_or_else(|e| {
            panic!(
                "the terminal stopped echoing {:?} after control was killed: {e}",
                killed.elapsed()
            )
        });
        during += 1;
        slowest = slowest.max(rtt);
        assert!(
            killed.elapsed() < BACK,
            "control did not come back within {BACK:?}"
        );
    };
    assert!(
        during >= 1,
        "no echo was typed while control was down ({down_for:?})"
    );
    let restarted = up.component("termgate-control");
    assert_ne!(restarted.pid, control.pid, "a new control process serves");

    // The restart is printed and logged, with the exit status and the delay.
    let line = up.wait_line(
        &[
            "control exited with status 137 (SIGKILL)",
            "restarting in 0.5 s",
        ],
        ECHO,
    );
    assert!(
        up.log("control.log")
            .contains("termgate-up: control exited with status 137 (SIGKILL)"),
        "control.log records the restart:\n{}",
        up.log("control.log")
    );
    let back = up.wait_line(&["control is back"], ECHO);

    // The open terminal is still the same live connection, and still echoes.
    assert!(!term.is_closed(), "{:?}", term.close_reason());
    let after = echo(&term, &mut n, ECHO).expect("echo after control is back");

    // A second quick exit (the restarted control ran for less than a minute) waits
    // twice as long before its restart.
    let control = restarted;
    kill("KILL", control.pid);
    let ran = killed.elapsed();
    assert!(
        ran < Duration::from_secs(55),
        "the second kill came {ran:?} after the first: too late to count as a quick exit"
    );
    wait_for("the killed control to be gone", ECHO, || {
        gone(&control).then_some(())
    });
    let doubled = up.wait_line(
        &[
            "control exited with status 137 (SIGKILL)",
            "restarting in 1.0 s",
        ],
        ECHO,
    );
    up.wait_nth_line(&["control is back"], 2, BACK);
    assert_ne!(
        up.component("termgate-control").pid,
        control.pid,
        "a new control process serves again"
    );
    echo(&term, &mut n, ECHO).expect("echo after the second restart");

    // Control works again end to end: a new session, and its terminal.
    let second = wait_for(
        "a new session after the restart",
        Duration::from_secs(30),
        || {
            let a = http(
                "POST",
                &up.url("/api/sessions"),
                Some(&token),
                Some(&json!({"profile": "default"})),
            )
            .ok()?;
            match a.status {
                201 => Some(a.body["id"].as_str().expect("id").to_owned()),
                502..=504 => None,
                s => panic!("create after the restart answered {s}: {}", a.text),
            }
        },
    );
    let other = up.open_terminal(&second, &token);
    echo(&other, &mut n, ECHO).expect("echo in the new session");
    echo(&term, &mut n, ECHO).expect("the first terminal still echoes");
    eprintln!(
        "control killed: gone for {down_for:?} (until /v1/healthz answered); {during} echoes \
         typed meanwhile, slowest {slowest:?}, next {after:?}; printed: {line:?} / {back:?}; \
         killed again: {doubled:?}"
    );
}

#[test]
fn a_killed_ttyd_pool_is_restarted_and_its_terminal_reopens_to_the_same_shell() {
    let dir = tempfile::tempdir().expect("temp dir");
    let up = start_up(&dir.path().join("state"));
    let token = demo_token(&wait_up(&up));
    let id = up.create_session(&token);
    let container = container_of(&up.instance, &id);
    let term = up.open_terminal(&id, &token);
    let kept = e2e::random_hex(6);
    term.send_input(format!("TG_KEPT={kept}\r").as_bytes())
        .expect("type");
    let mut n = 0;
    echo(&term, &mut n, ECHO).expect("echo before the pool is killed");

    let pool = up.pool();
    let attaches = attaches_of(&container);
    assert!(
        !attaches.is_empty() && attaches.iter().all(|a| a.ppid == pool.pid),
        "the open terminal's docker attach runs under the pool {}: {attaches:?}",
        pool.pid
    );

    kill("KILL", pool.pid);
    let killed = Instant::now();
    // The gateway ends the terminal whose upstream went away; the page would reconnect.
    term.wait_closed(ECHO)
        .expect("the terminal closes with its pool");
    let line = up.wait_line(
        &[
            "ttyd pool local exited with status 137 (SIGKILL)",
            "restarting in",
        ],
        BACK,
    );
    up.wait_line(&["ttyd pool local is back"], BACK);
    assert!(
        up.log("ttyd.log")
            .contains("termgate-up: ttyd pool local exited with status 137 (SIGKILL)"),
        "ttyd.log records the restart"
    );

    // Nothing of the killed pool is left: its attach processes, which run in sessions
    // of their own and outlive ttyd, have been ended.
    let start = Instant::now();
    wait_for(
        "the killed pool's docker attach processes to be gone",
        ECHO,
        || attaches.iter().all(gone).then_some(()),
    );
    let swept = start.elapsed();

    // The client reconnects and finds the same running shell.
    let again = up.open_terminal(&id, &token);
    let reopened = killed.elapsed();
    again
        .send_input(b"echo kept-$TG_KEPT\r")
        .expect("type after reconnect");
    again
        .read_until(&format!("kept-{kept}"), ECHO)
        .expect("the shell variable set before the pool was killed");

    let new_pool = up.pool();
    assert_ne!(new_pool.pid, pool.pid, "a new ttyd serves");
    let now = attaches_of(&container);
    assert!(
        !now.is_empty() && now.iter().all(|a| a.ppid == new_pool.pid),
        "every docker attach of the session belongs to the new pool {}: {now:?}",
        new_pool.pid
    );
    eprintln!(
        "ttyd pool killed: terminal reopened to the same shell {reopened:?} later; \
         old attach processes gone {swept:?} after the restart was printed; printed: {line:?}; {}",
        up.log("ttyd.log")
            .lines()
            .find(|l| l.contains("attach process"))
            .unwrap_or("(no attach process was left to end)")
    );
}

#[test]
fn a_killed_dockgate_is_restarted_and_terminals_and_creates_go_through_it_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    let up = start_up(&state);
    let token = demo_token(&wait_up(&up));
    let id = up.create_session(&token);
    let term = up.open_terminal(&id, &token);
    let kept = e2e::random_hex(6);
    term.send_input(format!("TG_KEPT={kept}\r").as_bytes())
        .expect("type");
    let mut n = 0;
    echo(&term, &mut n, ECHO).expect("echo before dockgate is killed");

    let gate_dir = state.join("dockgate");
    let dockgate = || {
        wait_for("the dockgate process", BACK, || {
            processes().into_iter().find(|p| {
                p.state != 'Z'
                    && p.args
                        .first()
                        .is_some_and(|a| a.ends_with("termgate-dockgate"))
                    && p.args.iter().any(|a| Path::new(a) == gate_dir.as_path())
            })
        })
    };
    let gate = dockgate();
    kill("KILL", gate.pid);
    // The attach stream it carried ends, and with it the terminal.
    term.wait_closed(ECHO)
        .expect("the terminal closes with the attach stream");
    up.wait_line(
        &[
            "dockgate local exited with status 137 (SIGKILL)",
            "restarting in",
        ],
        BACK,
    );
    up.wait_line(&["dockgate local is back"], BACK);
    assert_ne!(dockgate().pid, gate.pid, "a new dockgate serves");

    // The session kept running: the terminal reopens to the same shell.
    let again = up.open_terminal(&id, &token);
    again
        .send_input(b"echo kept-$TG_KEPT\r")
        .expect("type after reopening");
    again
        .read_until(&format!("kept-{kept}"), ECHO)
        .expect("the shell variable set before dockgate was killed");
    // And control creates through the new one.
    let second = up.create_session(&token);
    let other = up.open_terminal(&second, &token);
    let mut m = 0;
    echo(&other, &mut m, ECHO).expect("a session created after the restart echoes");
}

/// Open terminals in the gateway-kill test, spread over `GATEWAY_KILL_SESSIONS`.
const GATEWAY_KILL_TERMINALS: usize = 50;
const GATEWAY_KILL_SESSIONS: usize = 2;

#[test]
fn a_killed_gateway_with_fifty_open_terminals_is_restarted_and_each_reopens_to_its_shell() {
    let dir = tempfile::tempdir().expect("temp dir");
    let per_session = GATEWAY_KILL_TERMINALS / GATEWAY_KILL_SESSIONS;
    let up = start_up_with(
        &dir.path().join("state"),
        &[
            ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "64"),
            ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION", "32"),
        ],
    );
    let token = demo_token(&wait_up(&up));
    // Each session's shell gets its own value before the gateway dies.
    let sessions: Vec<(String, String)> = (0..GATEWAY_KILL_SESSIONS)
        .map(|_| (up.create_session(&token), e2e::random_hex(6)))
        .collect();
    let mut terms = Vec::new();
    for (id, kept) in &sessions {
        for i in 0..per_session {
            let term = up.open_terminal(id, &token);
            if i == 0 {
                term.send_input(format!("TG_KEPT={kept}\r").as_bytes())
                    .expect("type");
                let mut n = 0;
                echo(&term, &mut n, ECHO).expect("echo before the gateway is killed");
            }
            terms.push(term);
        }
    }
    assert_eq!(terms.len(), GATEWAY_KILL_TERMINALS);
    let (control, pool) = (up.component("termgate-control"), up.pool());

    let gateway = up.component("termgate-gateway");
    kill("KILL", gateway.pid);
    let killed = Instant::now();
    for term in &terms {
        term.wait_closed(ECHO)
            .expect("every terminal closes with its gateway");
    }
    let line = up.wait_line(
        &["gateway exited with status 137 (SIGKILL)", "restarting in"],
        BACK,
    );

    // Every terminal reconnects, and each reaches its session's shell as it was.
    let mut reopened = Vec::new();
    for (id, kept) in &sessions {
        for _ in 0..per_session {
            let again = up.open_terminal(id, &token);
            again
                .send_input(b"echo kept-$TG_KEPT\r")
                .expect("type after reconnect");
            again
                .read_until(&format!("kept-{kept}"), ECHO)
                .expect("the shell variable set before the gateway was killed");
            reopened.push(again);
        }
    }
    let all_back = killed.elapsed();
    assert_eq!(reopened.len(), GATEWAY_KILL_TERMINALS);
    assert!(
        up.log("gateway.log")
            .contains("termgate-up: gateway exited with status 137 (SIGKILL)"),
        "gateway.log records the restart"
    );
    assert_ne!(up.component("termgate-gateway").pid, gateway.pid);
    // The others kept serving: the same control and pool processes.
    assert!(!gone(&control), "control was not restarted");
    assert!(!gone(&pool), "the ttyd pool was not restarted");
    eprintln!(
        "gateway killed with {GATEWAY_KILL_TERMINALS} open terminals: all reopened to their shells {all_back:?} later; printed: {line:?}"
    );
}

/// `pid` and every process below it.
fn tree(all: &[Proc], pid: u32) -> Vec<Proc> {
    let mut children: BTreeMap<u32, Vec<&Proc>> = BTreeMap::new();
    for p in all {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out: Vec<Proc> = all.iter().filter(|p| p.pid == pid).cloned().collect();
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i].pid) {
            out.extend(c.iter().map(|p| (*p).clone()));
        }
        i += 1;
    }
    out
}

#[test]
fn sigterm_stops_exactly_what_deploy_up_started_and_leaves_sessions_running() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    // A short drain: the open terminal would otherwise hold the gateway for 10 s.
    let mut up = start_up_with(&state, &[("TERMGATE__GATEWAY__DRAIN_SECONDS", "2")]);
    let token = demo_token(&wait_up(&up));
    let id = up.create_session(&token);
    let container = container_of(&up.instance, &id);
    let term = up.open_terminal(&id, &token);
    let mut n = 0;
    echo(&term, &mut n, ECHO).expect("echo");

    // Everything deploy/up started, as it runs now: the supervisors, control, the
    // pool, the gateway and the open terminal's docker attach.
    let started = tree(&processes(), up.child.id());
    let named = |what: &str| {
        started
            .iter()
            .any(|p| p.args.iter().any(|a| a.contains(what)))
    };
    for what in ["termgate-control", "termgate-gateway", "ttyd", "attach"] {
        assert!(
            named(what),
            "no {what} among deploy/up's processes: {started:#?}"
        );
    }

    kill("TERM", up.child.id());
    let sent = Instant::now();
    let status = wait_for("deploy/up to exit", BACK, || {
        up.child.try_wait().ok().flatten()
    });
    let stopped = sent.elapsed();
    assert!(status.success(), "deploy/up exited with {status}");

    // Every one of them is gone (give the kernel a moment for the last SIGKILLed
    // attach), and nothing else carries deploy/up's group or its state directory.
    wait_for("every process deploy/up started to be gone", ECHO, || {
        started.iter().all(gone).then_some(())
    });
    let pgid = up.child.id();
    let state_str = state.to_str().expect("utf-8 path");
    let left: Vec<Proc> = processes()
        .into_iter()
        .filter(|p| {
            p.state != 'Z' && (p.pgid == pgid || p.args.iter().any(|a| a.contains(state_str)))
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:#?}");
    assert!(
        attaches_of(&container).is_empty(),
        "no docker attach of the session is left"
    );

    // What deploy/up did not start is not touched: the session keeps running.
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Running}}", &container]),
        "true",
        "the session container keeps running"
    );
    assert!(term.is_closed(), "the terminal ended with the gateway");
    let names: Vec<String> = started
        .iter()
        .map(|p| {
            let words: Vec<&str> = p
                .args
                .iter()
                .take(2)
                .map(|a| a.rsplit('/').next().unwrap_or(a))
                .collect();
            words.join(" ")
        })
        .collect();
    eprintln!(
        "SIGTERM: deploy/up and its {} processes gone {stopped:?} after the signal: {names:?}",
        started.len()
    );
}

/// The subject of the certificate `addr` serves.
fn served_subject(addr: SocketAddr) -> String {
    let script = format!(
        "openssl s_client -connect {addr} </dev/null 2>/dev/null | openssl x509 -noout -subject"
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_root_only_tls_key_serves_https_from_an_unprivileged_gateway_and_renewals_reach_it() {
    let parent = tempfile::tempdir().expect("temp dir");
    let tls = parent.path().join("tls");
    std::fs::create_dir(&tls).expect("tls dir");
    std::fs::set_permissions(&tls, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let certs = e2e::tls::SelfSigned::generate(&tls, "first");
    let root_only = |key: &Path| {
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600)).expect("chmod")
    };
    root_only(&certs.key);
    let (cert, key) = (certs.cert.clone(), certs.key.clone());
    let state = parent.path().join("state");
    let up = start_up_with(
        &state,
        &[
            (
                "TERMGATE__GATEWAY__TLS_CERT_FILE",
                cert.to_str().expect("utf-8"),
            ),
            (
                "TERMGATE__GATEWAY__TLS_KEY_FILE",
                key.to_str().expect("utf-8"),
            ),
        ],
    );
    let printed = wait_up(&up);
    assert!(
        printed.contains(&format!("https://{}/", up.gateway)),
        "{printed}"
    );
    let health = Command::new("curl")
        .args([
            "-fsSk",
            "-m",
            "5",
            &format!("https://{}/healthz", up.gateway),
        ])
        .output()
        .expect("curl");
    assert!(health.status.success(), "https answers: {printed}");
    assert!(served_subject(up.gateway).contains("first"));
    if ids_of(std::process::id()).0 != 0 {
        e2e::skip_or_fail("a root-only key and the gateway's own user need root");
    } else {
        let gateway = up.component("termgate-gateway");
        let (guid, _, _) = ids_of(gateway.pid);
        assert_ne!(
            guid, 0,
            "the gateway runs unprivileged with a root-only key"
        );
        assert_eq!(capabilities(gateway.pid), (0, 0));
        // Control never reads the gateway's key (it would refuse to start if it did).
        let control = up.component("termgate-control");
        assert_ne!(ids_of(control.pid).0, 0);
    }
    // A renewal of the root-only files reaches the gateway.
    certs.renew("renewed");
    root_only(&certs.key);
    wait_for(
        "the renewed certificate served",
        Duration::from_secs(30),
        || served_subject(up.gateway).contains("renewed").then_some(()),
    );
}

/// A profile under gVisor on a machine whose daemon has no runsc registered: deploy/up
/// installs runsc if it must, leaves the daemon's configuration alone, and stops before
/// starting anything, saying what to add to daemon.json.
#[test]
fn a_gvisor_profile_on_a_daemon_without_runsc_stops_deploy_up_saying_what_to_add() {
    let runtimes = e2e::stack::docker(&["info", "--format", "{{json .Runtimes}}"]);
    if runtimes.contains("\"runsc\"") {
        return e2e::skip_or_fail("the machine's daemon has runsc registered already");
    }
    let dir = tempfile::tempdir().expect("state dir");
    let mut up = start_up_with(
        dir.path(),
        &[("TERMGATE__PROFILES__DEFAULT__RUNTIME", "runsc")],
    );
    let status = wait_for("deploy/up to stop", Duration::from_secs(300), || {
        up.child.try_wait().ok().flatten()
    });
    assert!(!status.success(), "deploy/up went on:\n{}", up.printed());
    let printed = up.printed();
    assert!(
        printed.contains("has no runtime \"runsc\"")
            && printed.contains("/etc/docker/daemon.json")
            && printed.contains("\"runtimeArgs\": [\"--platform=systrap\", \"--network=none\"]"),
        "{printed}"
    );
    assert!(!printed.contains("Sign in:"), "nothing started:\n{printed}");
    assert_eq!(
        e2e::stack::docker(&["info", "--format", "{{json .Runtimes}}"]),
        runtimes,
        "the daemon's runtimes are as they were"
    );
}

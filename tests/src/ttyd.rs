//! The real ttyd, started exactly as production starts it, plus a connection-counting
//! proxy to put in front of its socket, and a throwaway session container.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::random_hex;
use crate::stack::docker;
use crate::term::{Stream, Target};

/// ttyd's arguments before the listen options, as production passes them.
pub const TTYD_ARGS: &[&str] = &["-W", "-a", "-P", "5"];
/// The header carrying the authenticated user (`ttyd -H`).
pub const TTYD_USER_HEADER: &str = "X-Termgate-User";
/// The fixed window title (`ttyd -t titleFixed=...`).
pub const TTYD_TITLE: &str = "termgate";
/// The command ttyd runs; the container name from the URL's `arg` is appended (`-a`).
pub const TTYD_COMMAND: &[&str] = &["docker", "attach", "--detach-keys=ctrl-x,ctrl-x"];

/// The production pool command: attaches only to a full id of a session container of
/// the deployment named by `TERMGATE_INSTANCE`.
pub fn attach_wrapper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/ttyd-attach")
}

/// The ttyd binary: `$TERMGATE_TTYD`, else `<repo>/.tools/bin/ttyd`, else `ttyd` on PATH.
pub fn ttyd_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("TERMGATE_TTYD") {
        return PathBuf::from(p);
    }
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin/ttyd");
    if tools.is_file() {
        return tools;
    }
    PathBuf::from("ttyd")
}

/// A fresh temporary directory with mode 0700 and a path short enough for unix
/// sockets inside it (falls back to `/tmp` when `$TMPDIR` is long).
pub fn private_dir(prefix: &str) -> tempfile::TempDir {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    let dir = if std::env::temp_dir().as_os_str().len() > 60 {
        builder.tempdir_in("/tmp")
    } else {
        builder.tempdir()
    }
    .expect("create private temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod 0700 private temp dir");
    dir
}

/// How a [`TtydPool`] listens.
#[derive(Debug, Clone)]
enum Listen {
    Unix(PathBuf),
    Tcp(u16),
}

/// The pool's flags after `TTYD_ARGS`, as production passes them.
fn pool_flags() -> Vec<String> {
    [
        "-H",
        TTYD_USER_HEADER,
        "-t",
        &format!("titleFixed={TTYD_TITLE}"),
        // Leaving the page does not end the session, so ttyd must not warn that it does.
        "-t",
        "disableLeaveAlert=true",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A running ttyd (`ttyd -W -a -P 5 -i <dir>/ttyd.sock -H X-Termgate-User -t
/// titleFixed=termgate docker attach --detach-keys=ctrl-x,ctrl-x`) in its own 0700
/// directory, logging to `<dir>/ttyd.log`; killed on drop.
pub struct TtydPool {
    dir: tempfile::TempDir,
    listen: Listen,
    child: Option<Child>,
    log: PathBuf,
    /// The attach socket's dockgate of a pool of production's command (unless the
    /// pool was given its `DOCKER_HOST`).
    gate: Option<crate::dockgate::Dockgate>,
}

impl TtydPool {
    /// Starts ttyd on `<fresh 0700 dir>/ttyd.sock` and waits (10 s) until the socket
    /// accepts a connection.
    pub fn start() -> TtydPool {
        let dir = private_dir("tg-ttyd.");
        let sock = dir.path().join("ttyd.sock");
        Self::spawn(dir, Listen::Unix(sock), None)
    }

    /// Like [`TtydPool::start`], with production's command: `deploy/ttyd-attach`, which
    /// attaches only to session containers of `instance`.
    pub fn start_for(instance: &str) -> TtydPool {
        let dir = private_dir("tg-ttyd.");
        let sock = dir.path().join("ttyd.sock");
        Self::spawn(dir, Listen::Unix(sock), Some(instance))
    }

    /// The read-only pool of share links for `instance`: production's command and
    /// flags without `-W`, so ttyd itself drops every viewer's input.
    pub fn start_viewers_for(instance: &str) -> TtydPool {
        Self::start_viewers_with(instance, &[])
    }

    /// Like [`TtydPool::start_viewers_for`], attaching through the Docker daemon at
    /// `docker_host`, as the read-only pool of one Docker host.
    pub fn start_viewers_for_docker(instance: &str, docker_host: &str) -> TtydPool {
        Self::start_viewers_with(instance, &[("DOCKER_HOST", docker_host)])
    }

    fn start_viewers_with(instance: &str, extra_env: &[(&str, &str)]) -> TtydPool {
        let dir = private_dir("tg-view.");
        let sock = dir.path().join("ttyd-view.sock");
        let mut args: Vec<String> = TTYD_ARGS
            .iter()
            .filter(|a| **a != "-W")
            .map(|a| a.to_string())
            .collect();
        args.extend(pool_flags());
        let command = vec![attach_wrapper().to_string_lossy().into_owned()];
        // No stdin, and no resize of the shared terminal to a viewer's window.
        let mut env = vec![("TERMGATE_ATTACH_READ_ONLY", "1")];
        env.extend_from_slice(extra_env);
        Self::run(
            dir,
            Listen::Unix(sock),
            &args,
            &command,
            Some(instance),
            &env,
        )
    }

    /// Like [`TtydPool::start_for`], attaching through the Docker daemon at
    /// `docker_host` (`DOCKER_HOST` of its command), as the pool of one Docker host.
    pub fn start_for_docker(instance: &str, docker_host: &str) -> TtydPool {
        let dir = private_dir("tg-ttyd.");
        let sock = dir.path().join("ttyd.sock");
        Self::spawn_with(
            dir,
            Listen::Unix(sock),
            Some(instance),
            &[("DOCKER_HOST", docker_host)],
        )
    }

    /// The pool behind a front proxy (nginx, Caddy): production's command and flags,
    /// with control's API URL (`TERMGATE_CONTROL`) so that `ttyd-attach` checks each
    /// terminal's grant (its second arg) and closes it when control says so.
    pub fn start_plugin_for(instance: &str, control: &str) -> TtydPool {
        let dir = private_dir("tg-ttyd.");
        let sock = dir.path().join("ttyd.sock");
        Self::spawn_with(
            dir,
            Listen::Unix(sock),
            Some(instance),
            &[("TERMGATE_CONTROL", control)],
        )
    }

    /// The pool for proxies that cannot set ttyd's query (Traefik, Envoy), on TCP
    /// `port` of the loopback interface: no `-a` (a client's query is ignored), `-H
    /// X-Termgate-Handle` (ttyd passes the check's one-use handle to `ttyd-attach` in
    /// `TTYD_USER`), `TERMGATE_ATTACH_HANDLE=1`.
    pub fn start_handle_pool_for(instance: &str, control: &str, port: u16) -> TtydPool {
        let args: Vec<String> = [
            "-W",
            "-P",
            "5",
            "-H",
            "X-Termgate-Handle",
            "-t",
            &format!("titleFixed={TTYD_TITLE}"),
            "-t",
            "disableLeaveAlert=true",
        ]
        .map(str::to_owned)
        .to_vec();
        let command = vec![attach_wrapper().to_string_lossy().into_owned()];
        let env = [
            ("TERMGATE_CONTROL", control),
            ("TERMGATE_ATTACH_HANDLE", "1"),
        ];
        Self::run(
            private_dir("tg-ttyd."),
            Listen::Tcp(port),
            &args,
            &command,
            Some(instance),
            &env,
        )
    }

    /// Starts ttyd on TCP `port` of the loopback interface (`-p <port> -i lo`) and waits
    /// (10 s) until it accepts a connection.
    pub fn start_tcp(port: u16) -> TtydPool {
        Self::spawn(private_dir("tg-ttyd."), Listen::Tcp(port), None)
    }

    /// Like [`TtydPool::start_for`], on TCP `port` of the loopback interface: a host's
    /// pool that gateways reach without TLS (`ttyd_pool = ["127.0.0.1:<port>"]`).
    pub fn start_tcp_for(instance: &str, port: u16) -> TtydPool {
        Self::spawn(private_dir("tg-ttyd."), Listen::Tcp(port), Some(instance))
    }

    /// Like [`TtydPool::start_tcp_for`], over ttyd's own TLS (`-S -C <cert> -K <key>
    /// -A <ca>`): it presents `cert` and admits clients with a certificate of the CA in
    /// `ca`, of any role (ttyd reads none).
    pub fn start_ssl_for(
        instance: &str,
        port: u16,
        (cert, key, ca): (&Path, &Path, &Path),
    ) -> TtydPool {
        let mut args: Vec<String> = TTYD_ARGS.iter().map(|a| a.to_string()).collect();
        args.extend(pool_flags());
        args.push("-S".into());
        for (flag, file) in [("-C", cert), ("-K", key), ("-A", ca)] {
            args.extend([flag.to_owned(), file.display().to_string()]);
        }
        let command = vec![attach_wrapper().to_string_lossy().into_owned()];
        Self::run(
            private_dir("tg-ttyd."),
            Listen::Tcp(port),
            &args,
            &command,
            Some(instance),
            &[],
        )
    }

    /// A ttyd as a team already runs it, without any termgate flag:
    /// `ttyd -W <extra…> (-i <dir>/ttyd.sock | -p <free port> -i lo) sh`.
    pub fn start_plain(unix: bool, extra: &[&str]) -> TtydPool {
        let dir = private_dir("tg-plain.");
        let listen = if unix {
            Listen::Unix(dir.path().join("ttyd.sock"))
        } else {
            Listen::Tcp(crate::stack::free_port())
        };
        let mut args: Vec<String> = vec!["-W".into()];
        args.extend(extra.iter().map(|a| a.to_string()));
        Self::run(dir, listen, &args, &["sh".to_owned()], None, &[])
    }

    fn spawn(dir: tempfile::TempDir, listen: Listen, instance: Option<&str>) -> TtydPool {
        let mut args: Vec<String> = TTYD_ARGS.iter().map(|a| a.to_string()).collect();
        args.extend(pool_flags());
        let command: Vec<String> = match instance {
            Some(_) => vec![attach_wrapper().to_string_lossy().into_owned()],
            None => TTYD_COMMAND.iter().map(|a| a.to_string()).collect(),
        };
        Self::run(dir, listen, &args, &command, instance, &[])
    }

    /// Like `spawn` for production's command, with extra environment for it.
    fn spawn_with(
        dir: tempfile::TempDir,
        listen: Listen,
        instance: Option<&str>,
        env: &[(&str, &str)],
    ) -> TtydPool {
        let mut pool_args: Vec<String> = TTYD_ARGS.iter().map(|a| a.to_string()).collect();
        pool_args.extend(pool_flags());
        let command = vec![attach_wrapper().to_string_lossy().into_owned()];
        Self::run(dir, listen, &pool_args, &command, instance, env)
    }

    fn run(
        dir: tempfile::TempDir,
        listen: Listen,
        args: &[String],
        command: &[String],
        instance: Option<&str>,
        env: &[(&str, &str)],
    ) -> TtydPool {
        let log = dir.path().join("ttyd.log");
        let log_file = std::fs::File::create(&log).expect("create ttyd log file");
        let mut cmd = Command::new(ttyd_binary());
        match &listen {
            Listen::Unix(sock) => {
                cmd.arg("-i").arg(sock);
            }
            Listen::Tcp(port) => {
                cmd.args(["-p", &port.to_string(), "-i", "lo"]);
            }
        }
        cmd.args(args)
            .args(command)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone ttyd log handle"))
            .stderr(log_file);
        cmd.envs(env.iter().copied());
        let mut gate = None;
        if let Some(instance) = instance {
            cmd.env("TERMGATE_INSTANCE", instance);
            if crate::dockgate::enabled() && !env.iter().any(|(k, _)| *k == "DOCKER_HOST") {
                let g = crate::dockgate::Dockgate::start(instance);
                cmd.env("DOCKER_HOST", g.docker_host("attach"));
                gate = Some(g);
            }
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "spawn {} (set TERMGATE_TTYD?): {e}",
                ttyd_binary().display()
            )
        });
        let mut pool = TtydPool {
            dir,
            listen,
            child: Some(child),
            log,
            gate,
        };
        pool.wait_ready(Duration::from_secs(10));
        pool
    }

    fn wait_ready(&mut self, deadline: Duration) {
        let start = Instant::now();
        let target = self.target();
        loop {
            if target.connect(Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("ttyd exited during start ({status}):\n{}", self.log_text());
            }
            assert!(
                start.elapsed() < deadline,
                "ttyd did not accept connections on {target} within {deadline:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The unix socket path (`None` for a TCP pool).
    pub fn socket_path(&self) -> Option<&Path> {
        match &self.listen {
            Listen::Unix(p) => Some(p),
            Listen::Tcp(_) => None,
        }
    }

    /// The TCP port (`None` for a unix socket pool).
    pub fn port(&self) -> Option<u16> {
        match &self.listen {
            Listen::Unix(_) => None,
            Listen::Tcp(p) => Some(*p),
        }
    }

    /// Where a client connects.
    pub fn target(&self) -> Target {
        match &self.listen {
            Listen::Unix(p) => Target::Unix(p.clone()),
            Listen::Tcp(p) => Target::Tcp(([127, 0, 0, 1], *p).into()),
        }
    }

    /// The dockgate its command reaches Docker through, if the harness started one.
    pub fn dockgate(&self) -> Option<&crate::dockgate::Dockgate> {
        self.gate.as_ref()
    }

    /// The pool's private directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// ttyd's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Process id of ttyd while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether ttyd is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILLs ttyd (idempotent); its terminals' websockets drop with it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TtydPool {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- ttyd log ({}) ---\n{}",
                self.dir.path().display(),
                self.log_text()
            );
        }
    }
}

/// A unix socket proxy that forwards every accepted connection byte for byte to a
/// target and counts the connections it accepted, and the bytes each carried to it.
pub struct CountingProxy {
    dir: tempfile::TempDir,
    path: PathBuf,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    open: Arc<Mutex<OpenConnections>>,
    peaks: Arc<Mutex<Peaks>>,
    carried: Arc<Mutex<Vec<Arc<Carried>>>>,
    acceptor: Option<JoinHandle<()>>,
}

/// What one connection carried to the target, counted as it is written on.
#[derive(Debug, Default)]
struct Carried {
    /// Bytes from the client after the end of its first request head (for a terminal:
    /// its websocket frames).
    after_head: AtomicU64,
    /// The client's direction has ended: the count is final.
    ended: AtomicBool,
}

/// One connection's share of [`CountingProxy::carried`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarriedBytes {
    /// Bytes the client sent on to the target after its first request head.
    pub after_head: u64,
    /// Whether the client's direction has ended, so that the count is final.
    pub ended: bool,
}

/// Finds where a request head ends (`\r\n\r\n`) across reads.
#[derive(Debug, Default)]
struct HeadEnd {
    /// How much of `\r\n\r\n` the bytes so far end with.
    matched: u8,
    done: bool,
}

impl HeadEnd {
    /// How many of `bytes` come after the head.
    fn after(&mut self, bytes: &[u8]) -> usize {
        if self.done {
            return bytes.len();
        }
        for (i, b) in bytes.iter().enumerate() {
            self.matched = match (self.matched, b) {
                (3, b'\n') => {
                    self.done = true;
                    return bytes.len() - i - 1;
                }
                (0 | 2, b'\r') => self.matched + 1,
                (1, b'\n') => 2,
                (_, b'\r') => 1,
                _ => 0,
            };
        }
        0
    }
}

/// Each forwarded connection that is still open, by number: kept to shut its sockets
/// down on drop, and forgotten when the connection ends (a proxy that kept them all
/// would run out of descriptors in a long or hostile test).
type OpenConnections = std::collections::HashMap<u64, Open>;

/// One forwarded connection.
struct Open {
    /// The client's socket (the gateway's end) and the upstream's.
    sockets: [Stream; 2],
    /// The request line of its first request, once it has arrived.
    request_line: Option<String>,
}

/// The most connections with the same request line that were open at once, by
/// request line.
type Peaks = std::collections::HashMap<String, usize>;

static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl CountingProxy {
    /// Listens on `<fresh 0700 dir>/proxy.sock`, forwarding to `target`.
    pub fn start(target: Target) -> CountingProxy {
        let dir = private_dir("tg-proxy.");
        let path = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&path).expect("bind counting proxy socket");
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(OpenConnections::new()));
        let peaks = Arc::new(Mutex::new(Peaks::new()));
        let carried = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (accepted, stop, open, peaks, all_carried) = (
                Arc::clone(&accepted),
                Arc::clone(&stop),
                Arc::clone(&open),
                Arc::clone(&peaks),
                Arc::clone(&carried),
            );
            std::thread::Builder::new()
                .name("counting-proxy".into())
                .spawn(move || {
                    for client in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(client) = client else { continue };
                        // Registered before it is counted: `carried()` has an entry
                        // for every connection `connections()` counts.
                        let carried = Arc::new(Carried::default());
                        all_carried
                            .lock()
                            .expect("proxy byte counts")
                            .push(Arc::clone(&carried));
                        accepted.fetch_add(1, Ordering::SeqCst);
                        let forwarded =
                            forward(Stream::Unix(client), &target, &open, &peaks, &carried);
                        if let Err(e) = forwarded {
                            carried.ended.store(true, Ordering::SeqCst);
                            eprintln!("counting proxy: forwarding to {target}: {e}");
                        }
                    }
                })
                .expect("spawn counting proxy thread")
        };
        CountingProxy {
            dir,
            path,
            accepted,
            stop,
            open,
            peaks,
            carried,
            acceptor: Some(acceptor),
        }
    }

    /// The proxy's socket path.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Where a client connects to go through the proxy.
    pub fn target(&self) -> Target {
        Target::Unix(self.path.clone())
    }

    /// The proxy's private directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How many connections the proxy accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// The most connections that were open at once with the same request line (for a
    /// terminal: `GET /ws?arg=<container> HTTP/1.1`, so one session's terminals), by
    /// request line. A connection counts as open until its client has closed it, as
    /// the kernel tells, so a copy thread that has not yet woken up adds nothing.
    pub fn peak_open_by_request_line(&self) -> Peaks {
        self.peaks.lock().expect("proxy peaks").clone()
    }

    /// What each connection carried to the target so far, in the order the
    /// connections were accepted (index `i` is the connection `connections()` counted
    /// as its `i + 1`-th): the bytes written on after the client's first request head.
    pub fn carried(&self) -> Vec<CarriedBytes> {
        self.carried
            .lock()
            .expect("proxy byte counts")
            .iter()
            .map(|c| CarriedBytes {
                after_head: c.after_head.load(Ordering::SeqCst),
                ended: c.ended.load(Ordering::SeqCst),
            })
            .collect()
    }
}

/// Whether the peer of `s` has closed or shut down its end (without reading from it).
fn peer_closed(s: &Stream) -> bool {
    let fd = s.raw_fd();
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, and a zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Notes the request line of connection `id` and the open connections that share it.
fn note_request_line(id: u64, head: &[u8], open: &Mutex<OpenConnections>, peaks: &Mutex<Peaks>) {
    let end = head
        .iter()
        .position(|b| *b == b'\r' || *b == b'\n')
        .unwrap_or(head.len());
    let line = String::from_utf8_lossy(&head[..end]).into_owned();
    let Ok(mut open) = open.lock() else { return };
    let Some(this) = open.get_mut(&id) else {
        return;
    };
    this.request_line = Some(line.clone());
    let now = open
        .values()
        .filter(|o| o.request_line.as_ref() == Some(&line) && !peer_closed(&o.sockets[0]))
        .count();
    if let Ok(mut peaks) = peaks.lock() {
        let peak = peaks.entry(line).or_default();
        *peak = (*peak).max(now);
    }
}

/// Connects to `target` and copies both ways on two threads; whichever direction ends
/// first shuts both sockets down.
fn forward(
    client: Stream,
    target: &Target,
    open: &Arc<Mutex<OpenConnections>>,
    peaks: &Arc<Mutex<Peaks>>,
    carried: &Arc<Carried>,
) -> io::Result<()> {
    let upstream = match target.connect(Duration::from_secs(5)) {
        Ok(u) => u,
        Err(e) => {
            client.shutdown();
            return Err(e);
        }
    };
    let id = NEXT_CONNECTION.fetch_add(1, Ordering::SeqCst);
    open.lock().expect("proxy connection list").insert(
        id,
        Open {
            sockets: [client.try_clone()?, upstream.try_clone()?],
            request_line: None,
        },
    );
    let pairs = [
        (client.try_clone()?, upstream.try_clone()?, true),
        (upstream, client, false),
    ];
    for (mut from, mut to, up) in pairs {
        let (open, peaks, carried) = (Arc::clone(open), Arc::clone(peaks), Arc::clone(carried));
        std::thread::Builder::new()
            .name("counting-proxy-copy".into())
            .spawn(move || {
                if up {
                    copy_up(id, &mut from, &mut to, &open, &peaks, &carried);
                } else {
                    let _ = io::copy(&mut from, &mut to);
                }
                from.shutdown();
                to.shutdown();
                if up {
                    carried.ended.store(true, Ordering::SeqCst);
                }
                if let Ok(mut open) = open.lock() {
                    open.remove(&id);
                }
            })?;
    }
    Ok(())
}

/// Client → target: the first read carries the request line, which is noted; every
/// byte after the head is counted once written on.
fn copy_up(
    id: u64,
    from: &mut Stream,
    to: &mut Stream,
    open: &Mutex<OpenConnections>,
    peaks: &Mutex<Peaks>,
    carried: &Carried,
) {
    use std::io::{Read, Write};
    let mut buf = [0u8; 16 * 1024];
    let mut head = HeadEnd::default();
    let mut first = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if first {
            note_request_line(id, &buf[..n], open, peaks);
            first = false;
        }
        let after = head.after(&buf[..n]);
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
        carried.after_head.fetch_add(after as u64, Ordering::SeqCst);
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor so it sees the flag (this wake-up is not counted).
        let _ = UnixStream::connect(&self.path);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for s in self
            .open
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
            .into_values()
            .flat_map(|o| o.sockets)
        {
            s.shutdown();
        }
    }
}

/// A session container (`docker run -d -t -i` of the session image) named
/// `termgate-harness-<random>`, labelled `termgate.instance=harness-<random>`; removed on
/// drop, also when the test fails.
pub struct SessionContainer {
    /// The container name (what ttyd's `arg` carries).
    pub name: String,
    /// The `termgate.instance` label value.
    pub instance: String,
}

impl SessionContainer {
    /// Starts a container of `$TERMGATE_SESSION_IMAGE` (default `termgate/session:dev`).
    pub fn start() -> SessionContainer {
        Self::start_labelled(None)
    }

    /// Like [`SessionContainer::start`]; with `Some(instance)` labelled as a session
    /// container of that deployment (`termgate.managed=session`, `termgate.instance`).
    pub fn start_labelled(session_of: Option<&str>) -> SessionContainer {
        let id = random_hex(5);
        let c = SessionContainer {
            name: format!("termgate-harness-{id}"),
            instance: session_of.map_or_else(|| format!("harness-{id}"), str::to_owned),
        };
        let image = std::env::var("TERMGATE_SESSION_IMAGE")
            .unwrap_or_else(|_| "termgate/session:dev".into());
        let label = format!("termgate.instance={}", c.instance);
        let mut args = vec![
            "run", "-d", "-t", "-i", "--name", &c.name, "--label", &label,
        ];
        if session_of.is_some() {
            args.extend(["--label", "termgate.managed=session"]);
        }
        args.push(&image);
        docker(&args);
        c
    }

    /// The container's full id.
    pub fn full_id(&self) -> String {
        docker(&["inspect", "-f", "{{.Id}}", &self.name])
    }

    /// Whether the container is running (`docker inspect`).
    pub fn is_running(&self) -> bool {
        Command::new("docker")
            .args(["inspect", "-f", "{{.State.Running}}", &self.name])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "true")
    }

    /// The websocket path ttyd attaches to this container on.
    pub fn ws_path(&self) -> String {
        format!("/ws?arg={}", self.name)
    }
}

impl Drop for SessionContainer {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &self.name])
            .output();
    }
}

#[cfg(test)]
mod tests {
    use super::HeadEnd;

    #[test]
    fn the_bytes_after_a_head_are_found_however_the_reads_split_it() {
        let stream = b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\nframes\r\n\r\n";
        for a in 0..stream.len() {
            for b in a..stream.len() {
                let mut h = HeadEnd::default();
                let after: usize = [&stream[..a], &stream[a..b], &stream[b..]]
                    .iter()
                    .map(|part| h.after(part))
                    .sum();
                assert_eq!(after, b"frames\r\n\r\n".len(), "split at {a}, {b}");
            }
        }
        let mut h = HeadEnd::default();
        assert_eq!(h.after(b"GET / HTTP/1.1\r\n\r\r\n"), 0, "no blank line yet");
        assert_eq!(h.after(b"\r\nx"), 1);
    }
}

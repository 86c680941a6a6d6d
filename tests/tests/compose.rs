//! The container deployment (deploy/compose.yaml) built and run by its own scripts:
//! deploy/compose-build makes the images offline from the debug binaries,
//! deploy/compose-up starts a project of its own (unique project name, instance id and
//! port), deploy/compose-down removes it again, also when the test fails.
//!
//! What the deployment guarantees, and this test checks, about who reaches whom:
//!
//! * The host reaches the gateway on 127.0.0.1:<port> only; control and ttyd publish
//!   no port.
//! * The host cannot reach control or ttyd at all. On Linux the host normally *can*
//!   reach containers on an `internal: true` network: the bridge carries an address of
//!   the host and the kernel routes the subnet to it (measured: control's
//!   `/v1/healthz` answered 200 and ttyd answered with its own `Server` header when
//!   fetched from the host). The internal network is therefore created with
//!   `com.docker.network.bridge.inhibit_ipv4`: the bridge has no host-side IPv4
//!   address, so the host has no route into the subnet and its packets for control or
//!   ttyd leave through the default route, never reaching the containers. The
//!   containers have IPv6 disabled (no link-local path) and IP forwarding off. Only
//!   someone allowed to change the host's addresses or routes (root, or whoever holds
//!   the Docker socket) could undo this. Checked here three ways: a connection from
//!   the host to their addresses gets no answer from control or ttyd (it may fail, or
//!   something else on the default route may answer, e.g. an egress proxy), while the
//!   very same requests do get control's and ttyd's answers from a throwaway container
//!   on the internal network; no route of the host leads into the internal bridge;
//!   and the network is configured that way.
//! * Session containers have no network at all (`network = "none"`): they reach
//!   neither gateway, control nor ttyd, by address or by name, while the same probes
//!   succeed from the internal network and a server inside the session answers them.
//! * Only dockgate holds the Docker socket: gateway, control and the ttyd pools have no
//!   socket of the host mounted and not the socket's group. Control and the pools reach
//!   Docker through dockgate's sockets only, each through its own: a pool's `docker
//!   version` passes and its `docker ps` is refused by dockgate, a pool cannot connect
//!   to control's socket, control may not open the pools'. The sessions created,
//!   opened and typed into above all went through dockgate.
//!
//! And that the deployment heals itself: every service has a restart policy, and a
//! control whose process dies is restarted by Docker while open terminals keep flowing.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::stack::{docker, free_port, http, wait_for};
use e2e::term::{Target, Terminal};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

/// One deployment at a time: compose-up picks a free internal subnet, and two projects
/// choosing at once could pick the same one.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}
/// Where compose.yaml mounts the configuration in the gateway and control containers.
const CONFIG_IN_CONTAINER: &str = "/etc/termgate/termgate.toml";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn session_image() -> String {
    std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into())
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn inspect(what: &str) -> Value {
    let v: Value = serde_json::from_str(&docker(&["inspect", what])).expect("inspect JSON");
    v[0].clone()
}

/// A compose project of this test; `compose-down` runs when it is dropped.
struct Deployment {
    project: String,
    instance: String,
    port: u16,
    state: tempfile::TempDir,
    down: bool,
}

impl Deployment {
    fn new() -> Deployment {
        let id = e2e::random_hex(4);
        Deployment {
            project: format!("tgc{id}"),
            instance: format!("tgc{id}"),
            port: free_port(),
            state: tempfile::tempdir().expect("state dir"),
            down: false,
        }
    }

    /// Runs deploy/<name> for this project with extra environment.
    fn script(&self, name: &str, env: &[(&str, &Path)]) -> Output {
        let mut cmd = Command::new(repo().join("deploy").join(name));
        cmd.current_dir(repo())
            .env("TERMGATE_COMPOSE_PROJECT", &self.project)
            .env("TERMGATE_INSTANCE", &self.instance)
            .env("TERMGATE_PORT", self.port.to_string())
            .env("TERMGATE_COMPOSE_STATE", self.state.path())
            .env_remove("TERMGATE_INTERNAL_SUBNET")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output()
            .unwrap_or_else(|e| panic!("run deploy/{name}: {e}"))
    }

    /// Runs deploy/<name>, asserts success, returns stdout.
    fn run(&self, name: &str, env: &[(&str, &Path)]) -> String {
        let o = self.script(name, env);
        assert!(o.status.success(), "deploy/{name} failed:\n{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The one running container of `service`.
    fn container(&self, service: &str) -> String {
        let out = docker(&[
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("label=com.docker.compose.project={}", self.project),
            "--filter",
            &format!("label=com.docker.compose.service={service}"),
        ]);
        let ids: Vec<&str> = out.lines().collect();
        assert_eq!(ids.len(), 1, "containers of service {service}: {out:?}");
        ids[0].to_owned()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn internal_network(&self) -> String {
        format!("{}_internal", self.project)
    }

    fn edge_network(&self) -> String {
        format!("{}_edge", self.project)
    }

    fn take_down(&mut self) {
        self.down = true;
        self.run("compose-down", &[]);
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        if self.down {
            return;
        }
        if std::thread::panicking() {
            for service in ["gateway", "dockgate", "control", "ttyd", "ttyd-view"] {
                let o = Command::new("docker")
                    .args([
                        "ps",
                        "-aq",
                        "--filter",
                        &format!("label=com.docker.compose.project={}", self.project),
                        "--filter",
                        &format!("label=com.docker.compose.service={service}"),
                    ])
                    .output();
                let Ok(o) = o else { continue };
                for id in String::from_utf8_lossy(&o.stdout).lines() {
                    if let Ok(logs) = Command::new("docker")
                        .args(["logs", "--tail", "40", id])
                        .output()
                    {
                        eprintln!("--- {service} log ---\n{}", text(&logs));
                    }
                }
            }
        }
        let o = self.script("compose-down", &[]);
        if !o.status.success() {
            eprintln!("deploy/compose-down failed:\n{}", text(&o));
        }
    }
}

/// Networks of a container: name → IPv4 address.
fn networks(container: &str) -> BTreeMap<String, String> {
    let i = inspect(container);
    i["NetworkSettings"]["Networks"]
        .as_object()
        .expect("networks")
        .iter()
        .map(|(name, n)| {
            (
                name.clone(),
                n["IPAddress"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// The host's IPv4 routes through interface `iface` that cover `ip`, as "dest/mask"
/// (from /proc/net/route, whose words are in memory byte order).
fn host_routes_via(iface: &str, ip: Ipv4Addr) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/route").expect("/proc/net/route");
    let word = |s: &str| u32::from_be_bytes(u32::from_str_radix(s, 16).expect("hex").to_ne_bytes());
    let ip = u32::from(ip);
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (dest, mask) = (word(f[1]), word(f[7]));
            (f[0] == iface && ip & mask == dest)
                .then(|| format!("{}/{}", Ipv4Addr::from(dest), Ipv4Addr::from(mask)))
        })
        .collect()
}

/// Sends `request` to `addr` from the host: Err when no connection opens within 2 s,
/// else whatever came back within 2 s.
fn from_host(addr: SocketAddr, request: &str) -> Result<String, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(request.as_bytes());
    let end = Instant::now() + Duration::from_secs(2);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

/// One HTTP probe: a URL that answers 2xx when its server is reachable (ttyd needs
/// its user header to do so).
#[derive(Clone)]
struct Probe {
    url: String,
    header: Option<&'static str>,
}

impl Probe {
    fn wget(&self) -> String {
        let header = self
            .header
            .map(|h| format!("--header '{h}' "))
            .unwrap_or_default();
        // Busybox's `wget -T` crashes in the static Debian build; `timeout` bounds it.
        format!("timeout 5 wget -q -O- {header}'{}'", self.url)
    }
}

/// Runs all `probes` in one shell script through `run`; per probe: URL, whether wget
/// succeeded, and what it printed.
fn run_probes(run: impl Fn(&str) -> Output, probes: &[Probe]) -> Vec<(String, bool, String)> {
    let script: String = probes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "out=$({} 2>&1); rc=$?; printf 'probe {i} %s %s\\n' \"$rc\" \"$(printf %s \"$out\" | tr '\\n' ' ' | head -c 160)\"\n",
                p.wget()
            )
        })
        .collect();
    let o = run(&script);
    let out = text(&o);
    probes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let prefix = format!("probe {i} ");
            let line = out
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no result for {}:\n{out}", p.url));
            let (rc, rest) = line.split_once(' ').unwrap_or((line, ""));
            (
                p.url.clone(),
                rc == "0",
                format!("exit {rc} {rest}").trim().to_owned(),
            )
        })
        .collect()
}

/// Runs `script` with /bin/sh in a throwaway session-image container on `network`.
fn sh_on_network(network: &str, script: &str) -> Output {
    Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            network,
            "--entrypoint",
            "/bin/sh",
        ])
        .arg(session_image())
        .args(["-c", script])
        .output()
        .expect("docker run")
}

fn sh_in(container: &str, script: &str) -> Output {
    Command::new("docker")
        .args(["exec", container, "/bin/sh", "-c", script])
        .output()
        .expect("docker exec")
}

#[test]
fn compose_deployment_serves_terminals_and_keeps_control_and_ttyd_internal() {
    let _one = one_at_a_time();
    let bin_dir = e2e::binary("termgate-gateway")
        .parent()
        .expect("binary dir")
        .to_path_buf();
    let mut dep = Deployment::new();

    let started = Instant::now();
    dep.run("compose-build", &[("TERMGATE_BIN_DIR", &bin_dir)]);
    let built = started.elapsed();
    let up_out = dep.run("compose-up", &[]);
    let up = started.elapsed() - built;
    eprintln!("compose-build {built:?}, compose-up {up:?}");

    // --- (a) the gateway serves, a token made inside control works end to end ---
    let health = http("GET", &dep.url("/healthz"), None, None).expect("healthz");
    assert_eq!(health.status, 200, "{}", health.text);
    assert_eq!(health.body["status"], "ok");

    let link = format!("http://127.0.0.1:{}/#token=", dep.port);
    let demo = up_out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Sign in: ")?.strip_prefix(&link))
        .unwrap_or_else(|| panic!("no sign-in link in:\n{up_out}"));
    let mine = http("GET", &dep.url("/api/sessions"), Some(demo), None).expect("list");
    assert_eq!(mine.status, 200, "the printed demo token: {}", mine.text);

    let control = dep.container("control");
    let ttyd = dep.container("ttyd");
    let gateway = dep.container("gateway");
    let token = docker(&[
        "exec",
        &control,
        "termgate-control",
        "token",
        "--config",
        CONFIG_IN_CONTAINER,
        "--sub",
        "alice",
    ]);
    let session = wait_for("a session through /api/sessions", T, || {
        let a = http(
            "POST",
            &dep.url("/api/sessions"),
            Some(&token),
            Some(&json!({"profile": "default"})),
        )
        .ok()?;
        match a.status {
            201 => Some(a.body),
            502..=504 => {
                std::thread::sleep(Duration::from_millis(200));
                None
            }
            s => panic!("create answered {s}: {}", a.text),
        }
    });
    let id = session["id"].as_str().expect("session id").to_owned();
    assert_eq!(session["owner"], "alice");

    let bearer = format!("Bearer {token}");
    let addr: SocketAddr = ([127, 0, 0, 1], dep.port).into();
    let open = || {
        wait_for("the session's terminal", T, || {
            match Terminal::connect(
                Target::Tcp(addr),
                &format!("/s/{id}/ws"),
                &[("Authorization", &bearer)],
            ) {
                Ok(t) => Some(t),
                // The gateway learns new routes from control's feed a moment later.
                Err(e) if matches!(e.status(), Some(404 | 502 | 503)) => {
                    std::thread::sleep(Duration::from_millis(200));
                    None
                }
                Err(e) => panic!("open terminal: {e}"),
            }
        })
    };
    let term = open();
    term.send_input(b"echo hello-$((6*7))\r")
        .and_then(|()| term.read_until("hello-42", T))
        .unwrap_or_else(|e| panic!("terminal: {e}; {:?}", term.close_reason()));
    term.close();

    // A share link's viewer goes through the read-only pool (`ttyd-view`) and watches.
    let share = http(
        "POST",
        &dep.url(&format!("/api/sessions/{id}/shares")),
        Some(&token),
        Some(&json!({"ttl_seconds": 600})),
    )
    .expect("share");
    assert_eq!(share.status, 201, "{}", share.text);
    let url = share.body["url"].as_str().expect("link").to_owned();
    let owner = open();
    let watched = Instant::now();
    'watch: loop {
        assert!(
            watched.elapsed() < T * 2,
            "the viewer never saw the owner's output"
        );
        // A new link reaches the gateway with the feed's next answer (404 until then).
        let Ok(viewer) = Terminal::connect(
            Target::Tcp(addr),
            &format!("{url}/ws"),
            &[("Authorization", &bearer)],
        ) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        while !viewer.is_closed() && watched.elapsed() < T * 2 {
            let _ = owner.send_input(b"echo watched-$((6*7))\r");
            if viewer
                .read_until("watched-42", Duration::from_secs(1))
                .is_ok()
            {
                break 'watch;
            }
        }
    }
    owner.close();

    let sessions = docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label=termgate.instance={}", dep.instance),
        "--filter",
        &format!("label=termgate.session={id}"),
    ]);
    assert_eq!(
        sessions.lines().count(),
        1,
        "session container: {sessions:?}"
    );
    let session_container = sessions.trim().to_owned();
    let si = inspect(&session_container);
    assert_eq!(si["HostConfig"]["NetworkMode"], "none");
    let session_nets: Vec<&String> = si["NetworkSettings"]["Networks"]
        .as_object()
        .expect("networks")
        .keys()
        .collect();
    assert_eq!(session_nets, ["none"], "a session joins no network");

    // --- (b) control and ttyd are internal: no published port, no host route ---
    assert_eq!(docker(&["port", &control]), "", "control publishes nothing");
    assert_eq!(docker(&["port", &ttyd]), "", "ttyd publishes nothing");
    assert_eq!(
        docker(&["port", &gateway]),
        format!("8080/tcp -> 127.0.0.1:{}", dep.port),
        "the gateway is published on loopback only"
    );

    let (internal, edge) = (dep.internal_network(), dep.edge_network());
    let control_nets = networks(&control);
    let ttyd_nets = networks(&ttyd);
    let gateway_nets = networks(&gateway);
    assert_eq!(control_nets.keys().collect::<Vec<_>>(), [&internal]);
    assert_eq!(ttyd_nets.keys().collect::<Vec<_>>(), [&internal]);
    let mut both = vec![&edge, &internal];
    both.sort();
    assert_eq!(gateway_nets.keys().collect::<Vec<_>>(), both);
    for c in [&gateway, &control, &ttyd] {
        let o = sh_in(
            c,
            "cat /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv6/conf/all/disable_ipv6",
        );
        assert_eq!(
            text(&o).split_whitespace().collect::<Vec<_>>(),
            ["0", "1"],
            "ip_forward, disable_ipv6 in {c}"
        );
    }

    // The host side of the internal network: Docker's bridge, br-<network id prefix>.
    let net = inspect(&internal);
    let bridge = net["Options"]["com.docker.network.bridge.name"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("br-{}", &net["Id"].as_str().expect("network id")[..12]));
    assert!(
        Path::new("/sys/class/net").join(&bridge).exists(),
        "no bridge {bridge} for {internal}: this test must run in the Docker host's network namespace"
    );
    let control_ip: Ipv4Addr = control_nets[&internal].parse().expect("control ip");
    let ttyd_ip: Ipv4Addr = ttyd_nets[&internal].parse().expect("ttyd ip");
    // (address, port, request, what only the real service answers)
    let services = [
        (
            "control",
            control_ip,
            7070,
            "GET /v1/healthz HTTP/1.0\r\n\r\n".to_owned(),
            "\"rev\":",
        ),
        (
            "ttyd",
            ttyd_ip,
            7681,
            "GET / HTTP/1.0\r\nX-Termgate-User: probe\r\n\r\n".to_owned(),
            "server: ttyd/",
        ),
    ];
    for (name, ip, port, request, signature) in &services {
        // Positive control: the same request from the internal network reaches it.
        let inside = sh_on_network(
            &internal,
            &format!(
                // nc may stop at the end of its input: keep it open for the answer.
                "{{ printf '{}'; sleep 2; }} | timeout 5 nc {ip} {port}",
                request.replace("\r\n", "\\r\\n")
            ),
        );
        assert!(
            text(&inside).to_ascii_lowercase().contains(signature),
            "{name} must answer on the internal network:\n{}",
            text(&inside)
        );
        match from_host((*ip, *port).into(), request) {
            Err(e) => eprintln!("host -> {name} {ip}:{port}: no connection ({e})"),
            Ok(answer) => {
                assert!(
                    !answer.to_ascii_lowercase().contains(signature),
                    "the host reached {name} at {ip}:{port}:\n{answer}"
                );
                let first = answer.lines().next().unwrap_or("(nothing)");
                eprintln!("host -> {name} {ip}:{port}: not {name} (answered: {first})");
            }
        }
        let routes = host_routes_via(&bridge, *ip);
        assert!(
            routes.is_empty(),
            "the host routes {name}'s address {ip} into {bridge}: {routes:?}"
        );
    }

    // What makes it so: an internal bridge without a host-side address.
    assert_eq!(net["Internal"], true);
    assert_eq!(
        net["Options"]["com.docker.network.bridge.inhibit_ipv4"], "true",
        "the host side of the internal bridge must have no address"
    );

    // --- (c) a session reaches none of gateway, control, ttyd ---
    let mut probes = Vec::new();
    for (service, container, nets, port, path, header) in [
        ("gateway", &gateway, &gateway_nets, 8080, "/healthz", None),
        (
            "control",
            &control,
            &control_nets,
            7070,
            "/v1/healthz",
            None,
        ),
        (
            "ttyd",
            &ttyd,
            &ttyd_nets,
            7681,
            "/",
            Some("X-Termgate-User: probe"),
        ),
    ] {
        let name = inspect(container)["Name"]
            .as_str()
            .expect("name")
            .trim_start_matches('/')
            .to_owned();
        let mut hosts: Vec<String> = nets.values().cloned().collect();
        hosts.push(service.to_owned());
        hosts.push(name);
        for host in hosts {
            probes.push(Probe {
                url: format!("http://{host}:{port}{path}"),
                header,
            });
        }
    }
    // Positive control: from the internal network every probe succeeds (the edge
    // address of the gateway excepted, that network is not joined there).
    let edge_ip = &gateway_nets[&edge];
    let reachable: Vec<Probe> = probes
        .iter()
        .filter(|p| !p.url.contains(&format!("//{edge_ip}:")))
        .cloned()
        .collect();
    for (url, ok, out) in run_probes(|script| sh_on_network(&internal, script), &reachable) {
        assert!(ok, "from the internal network {url} must answer: {out}");
    }
    // And a server inside the session answers the same kind of probe.
    let own = sh_in(
        &session_container,
        "mkdir -p /tmp/probe && echo probe-ok >/tmp/probe/index.html && \
         httpd -p 127.0.0.1:18080 -h /tmp/probe && timeout 5 wget -q -O- http://127.0.0.1:18080/",
    );
    assert!(
        text(&own).contains("probe-ok"),
        "probe inside the session: {}",
        text(&own)
    );
    for (url, ok, out) in run_probes(|script| sh_in(&session_container, script), &probes) {
        assert!(!ok, "the session reached {url}: {out}");
        eprintln!("session -> {url}: {out}");
    }

    // --- (d) only dockgate holds the Docker socket ---
    only_dockgate_holds_the_docker_socket(&dep);

    // --- down removes everything, session containers included ---
    dep.take_down();
    let left = |kind: &str, filter: &str| docker(&[kind, "ls", "-q", "--filter", filter]);
    assert_eq!(
        docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=com.docker.compose.project={}", dep.project)
        ]),
        ""
    );
    assert_eq!(
        docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=termgate.instance={}", dep.instance)
        ]),
        "",
        "session containers must be gone"
    );
    assert_eq!(
        left(
            "network",
            &format!("label=com.docker.compose.project={}", dep.project)
        ),
        ""
    );
    assert_eq!(
        left(
            "volume",
            &format!("label=com.docker.compose.project={}", dep.project)
        ),
        ""
    );
    assert_eq!(
        left(
            "volume",
            &format!("label=termgate.instance={}", dep.instance)
        ),
        ""
    );
}

/// The supplementary groups compose gave a container (`group_add`).
fn added_groups(i: &Value) -> Vec<String> {
    i["HostConfig"]["GroupAdd"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_owned))
        .collect()
}

/// The value after `flag` in a container's command.
fn command_flag(i: &Value, flag: &str) -> String {
    let cmd: Vec<&str> = i["Config"]["Cmd"]
        .as_array()
        .expect("command")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let at = cmd
        .iter()
        .position(|a| *a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {cmd:?}"));
    cmd[at + 1].to_owned()
}

/// Only dockgate has the Docker socket and its group; control and the pools reach
/// Docker through dockgate's sockets only, each through its own.
fn only_dockgate_holds_the_docker_socket(dep: &Deployment) {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    let dockgate = dep.container("dockgate");
    let di = inspect(&dockgate);
    let daemon = di["Mounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["Destination"] == "/var/run/docker.sock")
        .unwrap_or_else(|| panic!("dockgate has the Docker socket: {}", di["Mounts"]));
    let daemon_path = daemon["Source"].as_str().expect("socket source");
    let meta = std::fs::metadata(daemon_path).expect("the Docker socket on the host");
    assert!(meta.file_type().is_socket(), "{daemon_path}");
    let docker_gid = meta.gid().to_string();
    assert!(
        added_groups(&di).contains(&docker_gid),
        "dockgate has the socket's group {docker_gid}: {:?}",
        added_groups(&di)
    );
    assert_eq!(
        di["HostConfig"]["NetworkMode"], "none",
        "dockgate has no network"
    );

    // Its two sockets: owned by dockgate's own uid, 0660, each with its role's group.
    let attach_gid = command_flag(&di, "--attach-group");
    let control_gid = command_flag(&di, "--control-group");
    assert_ne!(attach_gid, control_gid);
    let uid = di["Config"]["User"]
        .as_str()
        .expect("user")
        .split(':')
        .next()
        .expect("uid")
        .to_owned();
    let o = sh_in(
        &dockgate,
        "stat -c '%a %u %g' /run/dockgate/local-attach.sock /run/dockgate/local-control.sock",
    );
    assert_eq!(
        text(&o).lines().collect::<Vec<_>>(),
        [
            format!("660 {uid} {attach_gid}"),
            format!("660 {uid} {control_gid}")
        ],
        "dockgate's sockets"
    );

    for service in ["gateway", "control", "ttyd", "ttyd-view"] {
        let c = dep.container(service);
        let i = inspect(&c);
        assert_ne!(
            i["Config"]["User"]
                .as_str()
                .and_then(|u| u.split(':').next()),
            Some(uid.as_str()),
            "{service} does not run as dockgate's uid"
        );
        for m in i["Mounts"].as_array().expect("mounts") {
            let dest = m["Destination"].as_str().unwrap_or("");
            assert!(!dest.ends_with("docker.sock"), "{service} mounts {m}");
            if m["Type"] == "bind" {
                let src = m["Source"].as_str().expect("source");
                let is_socket = std::fs::metadata(src).is_ok_and(|m| m.file_type().is_socket());
                assert!(
                    !is_socket,
                    "{service} has a socket of the host mounted: {m}"
                );
            }
        }
        let groups = added_groups(&i);
        assert!(
            !groups.contains(&docker_gid),
            "{service} has the Docker socket's group {docker_gid}: {groups:?}"
        );
        let o = sh_in(
            &c,
            "for p in /var/run/docker.sock /run/docker.sock; do test -e $p && echo $p; done; echo end",
        );
        assert_eq!(text(&o).trim(), "end", "{service} sees a Docker socket");
        let (may_attach, may_control) = match service {
            "control" => (false, true),
            "ttyd" | "ttyd-view" => (true, false),
            _ => (false, false),
        };
        assert_eq!(
            groups.contains(&attach_gid),
            may_attach,
            "{service}: {groups:?}"
        );
        assert_eq!(
            groups.contains(&control_gid),
            may_control,
            "{service}: {groups:?}"
        );
        if service == "gateway" {
            assert!(
                !i["Mounts"]
                    .as_array()
                    .expect("mounts")
                    .iter()
                    .any(|m| m["Destination"] == "/run/dockgate"),
                "the gateway does not mount dockgate's sockets"
            );
            continue;
        }
        // Who may open which socket, as the kernel will judge the connect.
        let o = sh_in(
            &c,
            "for r in attach control; do \
               if test -w /run/dockgate/local-$r.sock; then echo $r yes; else echo $r no; fi; \
             done",
        );
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        assert_eq!(
            text(&o).lines().collect::<Vec<_>>(),
            [
                format!("attach {}", yes_no(may_attach)),
                format!("control {}", yes_no(may_control))
            ],
            "{service}"
        );
    }

    // A pool's docker CLI goes to dockgate's attach socket: what attaching needs
    // passes, anything else is refused by dockgate, and control's socket is closed to it.
    let ttyd = dep.container("ttyd");
    let o = sh_in(&ttyd, "docker version --format '{{.Server.Version}}'");
    assert!(
        o.status.success(),
        "the pool's docker version: {}",
        text(&o)
    );
    let o = sh_in(&ttyd, "docker ps");
    assert!(
        !o.status.success() && text(&o).contains("dockgate:"),
        "dockgate refuses the pool's listing: {}",
        text(&o)
    );
    let o = sh_in(
        &ttyd,
        "DOCKER_HOST=unix:///run/dockgate/local-control.sock docker version",
    );
    assert!(
        !o.status.success() && text(&o).contains("permission denied"),
        "a pool cannot connect to control's socket: {}",
        text(&o)
    );
    eprintln!(
        "compose: only dockgate holds {daemon_path} (group {docker_gid}); attach socket \
         group {attach_gid}, control socket group {control_gid}"
    );
}

/// Types a fresh `echo` and waits for the shell's answer (the typed line shows
/// `$((…))`, only the answer shows the number); returns the round trip.
fn echo(term: &Terminal, n: &mut u64) -> Result<Duration, String> {
    *n += 1;
    let start = Instant::now();
    term.send_input(format!("echo pong-$((100000+{}))\r", *n).as_bytes())?;
    term.read_until(&format!("pong-{}", 100_000 + *n), Duration::from_secs(10))?;
    Ok(start.elapsed())
}

#[test]
fn compose_restarts_a_crashed_control_while_the_open_terminal_keeps_flowing() {
    let _one = one_at_a_time();
    let bin_dir = e2e::binary("termgate-gateway")
        .parent()
        .expect("binary dir")
        .to_path_buf();
    let dep = Deployment::new();
    dep.run("compose-build", &[("TERMGATE_BIN_DIR", &bin_dir)]);
    dep.run("compose-up", &[]);

    // Every service comes back by itself unless an operator stopped it.
    let control = dep.container("control");
    for service in ["gateway", "dockgate", "control", "ttyd", "ttyd-view"] {
        let policy =
            inspect(&dep.container(service))["HostConfig"]["RestartPolicy"]["Name"].clone();
        assert_eq!(policy, "unless-stopped", "restart policy of {service}");
    }

    let token = docker(&[
        "exec",
        &control,
        "termgate-control",
        "token",
        "--config",
        CONFIG_IN_CONTAINER,
        "--sub",
        "alice",
    ]);
    let create = || {
        http(
            "POST",
            &dep.url("/api/sessions"),
            Some(&token),
            Some(&json!({"profile": "default"})),
        )
    };
    let session = wait_for("a session", T, || {
        let a = create().ok()?;
        match a.status {
            201 => Some(a.body),
            502..=504 => None,
            s => panic!("create answered {s}: {}", a.text),
        }
    });
    let id = session["id"].as_str().expect("session id").to_owned();
    let bearer = format!("Bearer {token}");
    let addr: SocketAddr = ([127, 0, 0, 1], dep.port).into();
    // Retried while the route is not yet fed.
    let term = wait_for("the session's terminal", T, || {
        match Terminal::connect(
            Target::Tcp(addr),
            &format!("/s/{id}/ws"),
            &[("Authorization", &bearer)],
        ) {
            Ok(t) => Some(t),
            Err(e) if matches!(e.status(), Some(404 | 502 | 503)) => None,
            Err(e) => panic!("open terminal: {e}"),
        }
    });
    term.wait_title(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("the shell speaks: {e}; {:?}", term.close_reason()));
    let mut n = 0;
    echo(&term, &mut n).expect("echo before control crashes");

    // A crash, as Docker sees one: control's process dies. (`docker kill` would not
    // do: Docker takes it for an operator's stop and applies no restart policy.)
    let before = inspect(&control);
    let restarts = before["RestartCount"].as_u64().expect("RestartCount");
    let pid = before["State"]["Pid"].as_u64().expect("pid").to_string();
    let killed = Instant::now();
    let ok = Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -KILL {pid} (control's process, from the host)");

    // Until control answers through the gateway again, the terminal keeps echoing.
    let (mut during, mut slowest) = (0u32, Duration::ZERO);
    let down_for = loop {
        let answer = http("GET", &dep.url("/api/sessions"), Some(&token), None);
        if answer.as_ref().is_ok_and(|a| a.status == 200)
            && killed.elapsed() > Duration::from_millis(50)
        {
            // Only once Docker has restarted it: the old process may answer a last
            // request in the instant after the signal.
            if inspect(&control)["RestartCount"].as_u64() > Some(restarts) {
                break killed.elapsed();
            }
        }
        let rtt = echo(&term, &mut n).unwrap_or_else(|e| {
            panic!(
                "the terminal stopped {:?} after control crashed: {e}",
                killed.elapsed()
            )
        });
        during += 1;
        slowest = slowest.max(rtt);
        assert!(
            killed.elapsed() < Duration::from_secs(90),
            "control did not come back"
        );
    };
    assert!(during >= 1, "no echo while control was down");
    let after = inspect(&control);
    assert_eq!(after["State"]["Running"], true);
    assert_ne!(
        after["State"]["Pid"].as_u64().map(|p| p.to_string()),
        Some(pid)
    );

    // Control works again: a new session; the first terminal still echoes.
    let second = wait_for("a session after the restart", T, || {
        let a = create().ok()?;
        match a.status {
            201 => Some(a.body),
            502..=504 => None,
            s => panic!("create after the restart answered {s}: {}", a.text),
        }
    });
    assert_ne!(second["id"], session["id"]);
    assert!(!term.is_closed(), "{:?}", term.close_reason());
    echo(&term, &mut n).expect("echo after control is back");
    eprintln!(
        "compose: control's process killed; back through the gateway after {down_for:?} \
         (restart count {restarts} -> {}); {during} echoes meanwhile, slowest {slowest:?}",
        after["RestartCount"]
    );
    term.close();
}

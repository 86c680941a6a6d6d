//! A Docker host elsewhere, reached only over mutual TLS: a real `dockerd` in a network
//! namespace of the test's own, with its own address, runs what `deploy/host-up` runs
//! there — that host's dockgate (Docker API and the pools' fronts on its address, each
//! asking for a certificate) and its ttyd pools on private unix sockets. Control dials
//! its dockgate with control's certificate; the gateway opens terminals at its pool's
//! front with a gateway's. A session is placed there, opened, typed into, shared and
//! ended; renewed certificates leave open terminals open; a host that stops answering
//! still answers 502 `host_unavailable`.

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::daemon::TestDaemon;
use e2e::netns::Netns;
use e2e::pki::Pki;
use e2e::stack::{wait_for, ControlStack, GatewayStack};
use e2e::ttyd::{private_dir, CountingProxy, TtydPool};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

/// How the host elsewhere is run.
#[derive(Clone, Copy)]
enum Run {
    /// Its dockgate and pools started by the test, one by one.
    ByHand,
    /// `deploy/host-up CONFIG far`, as an operator runs it.
    HostUp,
}

/// What runs on the host elsewhere, inside its namespace: its dockgate (Docker API
/// on `<addr>:7443`, the pools' fronts on `:7681` and `:7682`) and its two pools.
struct HostAgent {
    child: Option<Child>,
    log: PathBuf,
    /// The dockgate's own pid, for SIGHUP (by hand: the child's).
    by_hand: bool,
    /// The pools started by hand, stopped with it.
    _pools: Vec<TtydPool>,
    /// Its sockets' directory and logs, removed with it.
    _dir: tempfile::TempDir,
}

impl HostAgent {
    fn start(run: Run, ns: &Netns, control: &ControlStack, daemon: &str, pki: &Pki) -> HostAgent {
        let agent = match run {
            Run::ByHand => Self::by_hand(ns, control, daemon, pki),
            Run::HostUp => Self::host_up(ns, control, daemon, pki),
        };
        agent.wait_listening(ns)
    }

    fn by_hand(ns: &Netns, control: &ControlStack, daemon: &str, pki: &Pki) -> HostAgent {
        let dir = private_dir("tg-far.");
        // The pools attach through the dockgate's attach socket, which it makes.
        let attach = format!("unix://{}/far-attach.sock", dir.path().display());
        let pool = TtydPool::start_for_docker(&control.instance, &attach);
        let viewers = TtydPool::start_viewers_for_docker(&control.instance, &attach);
        let cert = pki.leaf("dockgate", "far");
        let log = dir.path().join("dockgate.log");
        let log_file = std::fs::File::create(&log).expect("log");
        let addr = &ns.addr;
        let mut cmd = ns.command(e2e::binary("termgate-dockgate").to_str().expect("utf-8"));
        cmd.arg("--config")
            .arg(control.dir.config_path())
            .args(["--host", "far", "--dir"])
            .arg(dir.path())
            .args(["--daemon", daemon])
            .args(["--tls-listen", &format!("{addr}:7443")])
            .arg("--tls-cert")
            .arg(&cert.cert)
            .arg("--tls-key")
            .arg(&cert.key)
            .arg("--tls-ca")
            .arg(pki.ca())
            .args(["--pool-listen", &format!("{addr}:7681")])
            .arg("--pool-socket")
            .arg(pool.socket_path().expect("a unix pool"))
            .args(["--viewer-listen", &format!("{addr}:7682")])
            .arg("--viewer-socket")
            .arg(viewers.socket_path().expect("a unix pool"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file);
        // The configuration as control reads it: the same overrides (instance, image).
        for (k, v) in control.overrides() {
            cmd.env(k, v);
        }
        HostAgent {
            child: Some(cmd.spawn().expect("spawn dockgate in the namespace")),
            log,
            by_hand: true,
            _pools: vec![pool, viewers],
            _dir: dir,
        }
    }

    fn host_up(ns: &Netns, control: &ControlStack, daemon: &str, pki: &Pki) -> HostAgent {
        // A state directory the pools' own user may traverse (deploy/host-up checks).
        let dir = tempfile::Builder::new()
            .prefix("tg-hostup.")
            .tempdir()
            .expect("state dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/host-up");
        let out = std::fs::File::create(dir.path().join("host-up.out")).expect("log");
        let mut cmd = ns.command("bash");
        cmd.arg(script)
            .arg(control.dir.config_path())
            .arg("far")
            .env("TERMGATE_HOST_STATE_DIR", dir.path().join("state"))
            .env(
                "TERMGATE_PKI_DIR",
                pki.ca().parent().expect("the CA's directory"),
            )
            .env("TERMGATE_BUILD_PROFILE", "debug")
            .env("DOCKER_HOST", daemon)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
        for (k, v) in control.overrides() {
            cmd.env(k, v);
        }
        HostAgent {
            child: Some(cmd.spawn().expect("spawn deploy/host-up in the namespace")),
            log: dir.path().join("state/logs/dockgate.log"),
            by_hand: false,
            _pools: Vec::new(),
            _dir: dir,
        }
    }

    fn wait_listening(mut self, ns: &Netns) -> HostAgent {
        let addr = ns.addr.as_str();
        // deploy/host-up builds and checks first; its dockgate then binds its ports.
        let bound = Duration::from_secs(300);
        let started = Instant::now();
        while [7443, 7681, 7682]
            .iter()
            .any(|port| TcpStream::connect((addr, *port)).is_err())
        {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("the host's agent exited ({status}):\n{}", self.log_text());
            }
            assert!(
                started.elapsed() < bound,
                "the host's dockgate did not listen:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self
    }

    fn log_text(&self) -> String {
        let mut text = std::fs::read_to_string(&self.log).unwrap_or_default();
        if !self.by_hand {
            text +=
                &std::fs::read_to_string(self._dir.path().join("host-up.out")).unwrap_or_default();
        }
        text
    }

    /// SIGHUP to the dockgate started by hand (deploy/host-up's is left to its poll).
    fn hang_up(&self) {
        if let (true, Some(c)) = (self.by_hand, &self.child) {
            let _ = Command::new("kill")
                .args(["-HUP", &c.id().to_string()])
                .status();
        }
    }

    /// Stops the dockgate (by hand), or everything deploy/host-up started (SIGTERM).
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.by_hand {
                let _ = c.kill();
            } else {
                let _ = Command::new("kill")
                    .args(["-TERM", &c.id().to_string()])
                    .status();
            }
            let _ = c.wait();
        }
    }
}

impl Drop for HostAgent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- the host's agent ---\n{}", self.log_text());
        }
        self.stop();
    }
}

/// A gateway's certificate at the Docker API of the host elsewhere: its dockgate
/// refuses the peer, and the refusal is in control's audit trail, sent over TLS.
fn refused_peer_reaches_controls_audit_trail(stack: &GatewayStack, ns: &Netns, pki: &Pki) {
    use std::io::Read;
    let api: std::net::SocketAddr = format!("{}:7443", ns.addr).parse().expect("address");
    let gateway = pki.leaf("gateway", "gw");
    if let Ok(mut tls) = e2e::pki::connect(api, pki.client(Some(&gateway))) {
        let _ = tls.read(&mut [0; 16]);
    }
    let root = stack.control.token("root", true);
    let found = wait_for("the host's refusal in control's audit trail", T, || {
        let a = stack
            .control
            .call("GET", "/v1/audit?limit=200", Some(&root), None);
        assert_eq!(a.status, 200, "{}", a.text);
        a.body["lines"].as_array().and_then(|lines| {
            lines
                .iter()
                .find(|l| {
                    l["message"] == "dockgate refused a peer"
                        && l["fields"]["gateway"] == "dockgate-far"
                })
                .cloned()
        })
    });
    assert_eq!(found["fields"]["identity"], "gateway/gw", "{found}");
    assert_eq!(found["fields"]["listener"], "docker-api", "{found}");
}

fn session(stack: &GatewayStack, token: &str, id: &str) -> Value {
    stack.control.session(token, id)
}

#[test]
fn a_session_on_a_host_reached_over_mutual_tls_opens_types_shares_ends_and_survives_renewal() {
    whole_path(Run::ByHand);
}

#[test]
fn deploy_host_up_runs_a_host_that_control_and_gateways_reach_over_mutual_tls() {
    whole_path(Run::HostUp);
}

/// A session on the host elsewhere, from placement to its end, and the host's loss.
fn whole_path(run: Run) {
    if let Some(why) = e2e::netns::cannot_run() {
        return e2e::skip_or_fail(&why);
    }
    let ns = Netns::create();
    let d2 = TestDaemon::start_in(Some(&ns.name));
    d2.load_session_image();

    let mut control = ControlStack::prepare("");
    let pki = Pki::init();
    let issue = || {
        (
            pki.issue("control", "control", &[]),
            pki.issue("gateway", "gw", &[]),
            pki.issue("dockgate", "far", &[&ns.addr]),
        )
    };
    let (control_cert, gateway_cert, _) = issue();
    let file = |p: &Path| p.display().to_string();
    // The CA and the certificates in the file itself: every part (and the harness's
    // token minting) reads the same configuration.
    let config = std::fs::read_to_string(control.dir.config_path())
        .expect("config")
        .replacen(
            "[pki]\n",
            &format!("[pki]\nca_file = \"{}\"\n", file(&pki.ca())),
            1,
        )
        .replacen(
            "[control]\n",
            &format!(
                "[control]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
                file(&control_cert.cert),
                file(&control_cert.key)
            ),
            1,
        )
        .replacen(
            "[gateway]\n",
            &format!(
                "[gateway]\nclient_cert_file = \"{}\"\nclient_key_file = \"{}\"\n",
                file(&gateway_cert.cert),
                file(&gateway_cert.key)
            ),
            1,
        );
    let addr = &ns.addr;
    control.dir.write_config(&format!(
        "{config}\n[[docker.hosts]]\nname = \"far\"\nendpoint = \"tls://{addr}:7443\"\n\
         ttyd_pool = [\"tls://{addr}:7681\"]\nviewer_pool = [\"tls://{addr}:7682\"]\ncapacity = 4\n"
    ));
    control.unset_env("TERMGATE__CONTROL__DOCKER_HOST");
    // deploy/host-up sends the host's refusals to control's audit trail at the address
    // the deployment's machines dial control at: its TLS listener on this side of the
    // link, its certificate issued for that address.
    if matches!(run, Run::HostUp) {
        let tls = format!("{}:{}", ns.host_addr, e2e::stack::free_port());
        pki.issue("control", "control", &[&ns.host_addr]);
        control.set_env("TERMGATE__CONTROL__TLS_LISTEN", &tls);
        control.set_env("TERMGATE__GATEWAY__CONTROL_URL", &format!("https://{tls}"));
    }

    // The host elsewhere: its dockgate, which fronts its pools and which they attach
    // through.
    let mut agent = HostAgent::start(run, &ns, &control, &d2.host, &pki);

    control.spawn(&[]);
    let local = TtydPool::start_for(&control.instance);
    let counter = CountingProxy::start(local.target());
    let stack = GatewayStack::assemble(control, local, counter);

    // Placed on the host elsewhere: its container runs on that daemon.
    let alice = stack.control.token("alice", false);
    let s = stack.control.create(&alice);
    assert_eq!(s["host"], "far", "{s}");
    let id = s["id"].as_str().unwrap().to_owned();
    assert_eq!(
        d2.containers(&format!("termgate.session={id}")).len(),
        1,
        "the container runs on the remote daemon"
    );
    assert!(
        stack.control.containers().is_empty(),
        "nothing on the machine's own daemon"
    );

    // Opened and typed into through the gateway, the pool's front and the host's pool.
    let cookie = stack.sign_in("alice");
    let t = stack
        .open_as(0, &id, &cookie)
        .expect("alice opens her session");
    t.send_input(b"echo far-$((40+2))\r").unwrap();
    t.read_until("far-42", T).unwrap();
    assert_eq!(
        stack.counter.connections(),
        0,
        "the local pool saw nothing: the terminal went to the host's"
    );
    let front = agent.log_text();
    assert!(
        front.contains("gateway/gw"),
        "the front admitted the gateway's identity:\n{front}"
    );

    // Someone else on the network between the hosts, speaking plain HTTP to the pool's
    // front and the Docker API: nothing answers, and each attempt is logged.
    let refused = || agent.log_text().matches("TLS handshake failed").count();
    let before = refused();
    for port in [7681, 7443] {
        use std::io::{Read, Write};
        let mut raw = TcpStream::connect((ns.addr.as_str(), port)).expect("connect");
        raw.set_read_timeout(Some(T)).unwrap();
        let _ = raw.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut got = Vec::new();
        let _ = raw.read_to_end(&mut got);
        assert!(
            !String::from_utf8_lossy(&got).contains("HTTP/1.1 200"),
            "port {port} answered in the clear: {}",
            String::from_utf8_lossy(&got)
        );
    }
    wait_for("both refusals in the host's log", T, || {
        (refused() >= before + 2).then_some(())
    });
    if matches!(run, Run::HostUp) {
        refused_peer_reaches_controls_audit_trail(&stack, &ns, &pki);
    }

    // Shared: a signed-in viewer watches through the host's read-only pool.
    let share = stack.control.call(
        "POST",
        &format!("/v1/sessions/{id}/shares"),
        Some(&alice),
        Some(json!({ "ttl_seconds": 600 })),
    );
    assert_eq!(share.status, 201, "{}", share.text);
    let url = share.body["url"].as_str().unwrap().to_owned();
    let origin = stack.origin(0);
    let carol = stack.sign_in("carol");
    let viewer = wait_for("the share reaches the gateway", T, || {
        stack
            .open(
                0,
                &format!("{url}/ws"),
                &[("Origin", origin.as_str()), ("Cookie", carol.as_str())],
            )
            .ok()
    });
    // The viewer's attach starts after its websocket opens: echo until it sees one.
    let start = Instant::now();
    while viewer
        .read_until("seen-52", Duration::from_secs(1))
        .is_err()
    {
        assert!(start.elapsed() < T, "the viewer never saw alice's output");
        t.send_input(b"echo seen-$((50+2))\r").unwrap();
    }

    // Renewal: every certificate issued again while the terminal is open. It stays
    // open and keeps working; new connections present the renewed ones.
    let before = gateway_cert.der();
    let _ = issue();
    assert_ne!(gateway_cert.der(), before, "renewed");
    agent.hang_up();
    wait_for(
        "the host's dockgate and the gateway to take the renewals",
        T,
        || {
            (agent
                .log_text()
                .contains("a renewed TLS certificate is in use")
                && stack.gw().log_text().contains("a renewed"))
            .then_some(())
        },
    );
    t.send_input(b"echo still-$((60+2))\r").unwrap();
    t.read_until("still-62", T).unwrap();
    let t2 = stack
        .open_as(0, &id, &cookie)
        .expect("a new terminal after renewal");
    t2.send_input(b"echo renewed-$((70+2))\r").unwrap();
    t2.read_until("renewed-72", T).unwrap();
    drop(t2);
    let bob = stack.control.token("bob", false);
    let s2 = stack.control.create(&bob);
    assert_eq!(s2["host"], "far", "control still reaches the host: {s2}");
    assert!(
        stack
            .control
            .log_text()
            .contains("control's renewed TLS certificate is in use"),
        "control presented its renewed certificate to the host"
    );

    // Ended: the container goes on the remote daemon, the terminal closes saying why.
    let end = stack
        .control
        .call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None);
    assert_eq!(end.status, 204, "{}", end.text);
    t.wait_closed(T).expect("the terminal closes");
    wait_for("the container to go", T, || {
        d2.containers(&format!("termgate.session={id}"))
            .is_empty()
            .then_some(())
    });

    // The host stops answering (its dockgate gone): its sessions are unreachable and a
    // terminal is answered 502 host_unavailable.
    let id2 = s2["id"].as_str().unwrap().to_owned();
    agent.stop();
    wait_for("bob's session to be unreachable", T, || {
        (session(&stack, &bob, &id2)["state"] == "unreachable").then_some(())
    });
    let bob_cookie = stack.sign_in("bob");
    let e = stack
        .open_as(0, &id2, &bob_cookie)
        .expect_err("an unreachable host's terminal");
    assert_eq!(e.status(), Some(502));
    assert_eq!(
        e.json().unwrap_or_default()["error"]["code"],
        "host_unavailable",
        "{e:?}"
    );
}

//! Control's API over TLS (`control.tls_listen`) and gateways that dial it
//! (`gateway.control_url = "https://…"`, `pki.ca_file`): the route feed and the `/api`
//! calls the gateway proxies both check control's certificate against the CA, a
//! renewal of it is picked up while everything runs, and the service token never goes
//! over plain TCP off loopback unless the configuration says the network is private.
//! Real control, gateways, ttyd and dockgate; certificates by `termgate-control certs`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use e2e::pki::{self, Pki};
use e2e::stack::{free_port, http, wait_for, ControlStack, GatewayStack};
use e2e::ttyd::{CountingProxy, TtydPool};
use e2e::{binary, ConfigDir};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// Control serving its API on 127.0.0.1 over TLS too, with a certificate of the
/// deployment's CA for 127.0.0.1, and one gateway that reaches it only there.
struct Setup {
    stack: GatewayStack,
    pki: Pki,
    /// `control.tls_listen`.
    tls: SocketAddr,
}

/// Control serving its API on 127.0.0.1 over TLS too (`control.tls_listen`), with a
/// certificate of a new CA for 127.0.0.1; the CA, and the TLS listener's address.
fn control_over_tls() -> (ControlStack, Pki, SocketAddr) {
    let pki = Pki::init();
    let cert = pki.issue("control", "control", &["127.0.0.1"]);
    let tls: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut control = ControlStack::prepare("");
    control.set_env("TERMGATE__CONTROL__TLS_LISTEN", &tls.to_string());
    control.set_env("TERMGATE__CONTROL__TLS_CERT_FILE", path(&cert.cert));
    control.set_env("TERMGATE__CONTROL__TLS_KEY_FILE", path(&cert.key));
    control.spawn(&[]);
    (control, pki, tls)
}

impl Setup {
    fn start() -> Setup {
        let (control, pki, tls) = control_over_tls();
        let ttyd = TtydPool::start_for(&control.instance);
        let counter = CountingProxy::start(ttyd.target());
        // Every gateway of the stack: control's TLS listener, and the CA to check it by.
        let stack = GatewayStack::assemble_with_env(
            control,
            ttyd,
            counter,
            &[
                ("TERMGATE__GATEWAY__CONTROL_URL", format!("https://{tls}")),
                ("TERMGATE__PKI__CA_FILE", path(&pki.ca()).to_owned()),
            ],
        );
        Setup { stack, pki, tls }
    }

    /// `GET /api/sessions` through gateway `n` as `sub`.
    fn list(&self, n: usize, sub: &str) -> e2e::stack::Answer {
        let token = self.stack.control.token(sub, false);
        http(
            "GET",
            &self.stack.url(n, "/api/sessions"),
            Some(&token),
            None,
        )
        .expect("list")
    }

    /// The certificate a new TLS connection to control's listener is shown.
    fn presented(&self) -> Vec<u8> {
        let stream = pki::connect(self.tls, self.pki.client(None)).expect("TLS to control");
        pki::server_der(&stream)
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn ids(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .or_else(|| list["sessions"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_gateway_works_through_controls_tls_listener_and_keeps_working_across_a_renewal() {
    let mut s = Setup::start();
    // Ready means the route feed answered once: over TLS, the only way it knows.
    let token = s.stack.control.token("alice", false);
    let created = http(
        "POST",
        &s.stack.url(0, "/api/sessions"),
        Some(&token),
        Some(&json!({"profile": "default"})),
    )
    .expect("create");
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.body["id"].as_str().expect("id").to_owned();
    // The sign-in is recorded at control by the gateway's own client.
    let cookie = s.stack.sign_in("alice");
    let t = wait_for("alice's terminal to open", T, || {
        s.stack.open_as(0, &id, &cookie).ok()
    });
    t.send_input(b"echo tls-$((40+2))\r").unwrap();
    t.read_until("tls-42", T).unwrap();

    // Control's certificate is issued again while the gateway runs.
    let first = s.pki.leaf("control", "control").der();
    assert_eq!(s.presented(), first);
    let renewed = s.pki.issue("control", "control", &["127.0.0.1"]).der();
    assert_ne!(renewed, first, "issued again");
    wait_for("control to pick the renewal up", T, || {
        s.stack
            .control
            .log_text()
            .contains("a renewed TLS certificate is in use")
            .then_some(())
    });
    assert_eq!(s.presented(), renewed, "new handshakes get the renewal");

    let list = s.list(0, "alice");
    assert_eq!(list.status, 200, "{}", list.text);
    assert!(ids(&list.body).contains(&id), "{}", list.text);
    t.send_input(b"echo still-$((50+2))\r").unwrap();
    t.read_until("still-52", T).unwrap();
    assert!(!t.is_closed(), "the open terminal stays open");

    // A gateway started now makes every connection on the renewed certificate.
    let n = s.stack.spawn_gateway(&[]);
    let list = s.list(n, "alice");
    assert_eq!(list.status, 200, "{}", list.text);
    assert!(ids(&list.body).contains(&id), "{}", list.text);
    let cookie = s.stack.sign_in_with(n, &token);
    let t2 = s
        .stack
        .open_as(n, &id, &cookie)
        .expect("a terminal on gateway 1");
    t2.send_input(b"echo renewed-$((60+2))\r").unwrap();
    t2.read_until("renewed-62", T).unwrap();
}

#[test]
fn a_gateway_given_another_ca_refuses_controls_certificate_and_never_becomes_ready() {
    let mut s = Setup::start();
    let other = Pki::init();
    let (port, admin) = (free_port(), free_port());
    let n = s.stack.spawn_gateway_on(
        port,
        admin,
        &[],
        &[("TERMGATE__PKI__CA_FILE", path(&other.ca()))],
        false,
    );
    wait_for("the gateway to log the refused certificate", T, || {
        let log = s.stack.gateways[n].log_text();
        (log.contains("route feed unavailable") && log.contains("invalid peer certificate"))
            .then_some(())
    });
    let public: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for("the gateway's listener", T, || {
        std::net::TcpStream::connect_timeout(&public, Duration::from_millis(200)).ok()
    });
    let ready = |admin: u16| {
        http(
            "GET",
            &format!("http://127.0.0.1:{admin}/readyz"),
            None,
            None,
        )
        .expect("readyz")
        .status
    };
    assert_ne!(ready(admin), 200, "never ready without its feed");
    assert_eq!(ready(s.stack.gw().admin_port), 200, "the other gateway is");

    // An API call Pingora proxies to control fails at the same check: control answered,
    // with a certificate the gateway cannot trust (502), unlike a control that does not
    // answer (503).
    let refused = s.list(n, "bob");
    assert_eq!(
        (refused.status, refused.body["error"]["code"].as_str()),
        (502, Some("control_unavailable")),
        "{}",
        refused.text
    );
    let fine = s.list(0, "bob");
    assert_eq!(fine.status, 200, "{}", fine.text);
    assert!(
        s.stack.control.log_text().contains("TLS handshake failed"),
        "control saw the handshakes fail:\n{}",
        s.stack.control.log_text()
    );
    assert_ne!(ready(admin), 200);
}

#[test]
fn plain_http_to_control_off_loopback_stops_the_gateway_and_dockgate_unless_allowed() {
    let dir = ConfigDir::example("");
    let far = "http://192.0.2.1:7070";
    let gateway = |allow: bool| {
        let (port, admin) = (free_port(), free_port());
        let mut cmd = Command::new(binary("termgate-gateway"));
        cmd.arg("--config")
            .arg(dir.config_path())
            .env("RUST_LOG", "info")
            .env("TERMGATE__GATEWAY__CONTROL_URL", far)
            .env("TERMGATE__GATEWAY__LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "TERMGATE__GATEWAY__ADMIN_LISTEN",
                format!("127.0.0.1:{admin}"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if allow {
            cmd.env("TERMGATE__GATEWAY__ALLOW_PLAIN_CONTROL", "true");
        }
        (cmd, port)
    };
    let (mut refused, _) = gateway(false);
    let o = refused.output().expect("termgate-gateway");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("gateway.control_url") && err.contains("allow_plain_control"),
        "{err}"
    );

    // Allowed: it starts, and says at start what it accepted.
    let (mut allowed, port) = gateway(true);
    let log = dir.dir.path().join("allowed.log");
    let file = std::fs::File::create(&log).expect("log");
    allowed.stdout(file.try_clone().expect("log")).stderr(file);
    let mut child = allowed.spawn().expect("termgate-gateway");
    let public: SocketAddr = ([127, 0, 0, 1], port).into();
    let started = wait_for("the gateway to listen", T, || {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(Err(status));
        }
        std::net::TcpStream::connect_timeout(&public, Duration::from_millis(200))
            .ok()
            .map(Ok)
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert!(started.is_ok(), "{text}");
    assert!(
        text.contains("WARN") && text.contains("allow_plain_control"),
        "{text}"
    );

    // dockgate's refusals to control's audit carry the service token the same way.
    let token = dir.dir.path().join("secrets/service.token");
    let o = Command::new(binary("termgate-dockgate"))
        .args(["--instance", "tplain", "--dir"])
        .arg(dir.dir.path().join("dockgate"))
        .args(["--control-url", far, "--service-token-file"])
        .arg(&token)
        .env_remove("RUST_LOG")
        .output()
        .expect("termgate-dockgate");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("--control-url") && err.contains("--allow-plain-control"),
        "{err}"
    );
    let gate = e2e::dockgate::Dockgate::start_with(
        &format!("t{}", e2e::random_hex(5)),
        &[
            "--control-url",
            far,
            "--allow-plain-control",
            "--service-token-file",
            path(&token),
        ],
    );
    assert!(
        gate.log_text().contains("--allow-plain-control"),
        "{}",
        gate.log_text()
    );
}

/// One request on a dockgate's control socket that it refuses (`swarm init` is no
/// endpoint of control's): a refusal for control's audit trail.
fn refuse_at(gate: &e2e::dockgate::Dockgate) {
    let a = e2e::raw::exchange_unix(
        &gate.socket("control"),
        b"POST /swarm/init HTTP/1.1\r\nHost: docker\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        T,
    );
    assert_eq!(a.status, 403, "{}", a.text);
}

/// Control's audit lines of dockgate refusals reported as `reporter`.
fn refusals_from(control: &ControlStack, reporter: &str) -> Vec<serde_json::Value> {
    let root = control.token("root", true);
    let a = control.call("GET", "/v1/audit?limit=500", Some(&root), None);
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["lines"]
        .as_array()
        .map(|lines| {
            lines
                .iter()
                .filter(|l| {
                    l["message"] == "dockgate refused" && l["fields"]["gateway"] == reporter
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn dockgate_sends_its_refusals_to_an_https_control_only_when_its_certificate_checks_out() {
    let (control, pki, tls) = control_over_tls();
    let token = control.dir.dir.path().join("secrets/service.token");
    let url = format!("https://{tls}");
    let instance = format!("t{}", e2e::random_hex(5));
    let gate = |host: &str, ca: &Path, extra: &[&str]| {
        let mut args = vec![
            "--host",
            host,
            "--control-url",
            &url,
            "--service-token-file",
            path(&token),
            "--tls-ca",
            path(ca),
        ];
        args.extend_from_slice(extra);
        e2e::dockgate::Dockgate::start_with(&instance, &args)
    };

    // Given another CA: control's certificate is refused, nothing is delivered, and the
    // log says why.
    let other = Pki::init();
    let stranger = gate("stranger", &other.ca(), &[]);
    refuse_at(&stranger);
    wait_for("the refused certificate in dockgate's log", T, || {
        let log = stranger.log_text();
        (log.contains("did not take") && log.contains("invalid peer certificate")).then_some(())
    });

    // Given the deployment's CA (and a certificate of its own, presented should control
    // ask for one): the refusal is in control's trail, naming the host that refused.
    let mine = pki.issue("dockgate", "near", &["127.0.0.1"]);
    let near = gate(
        "near",
        &pki.ca(),
        &["--tls-cert", path(&mine.cert), "--tls-key", path(&mine.key)],
    );
    refuse_at(&near);
    let found = wait_for("the refusal in control's trail", T, || {
        refusals_from(&control, "dockgate-near").into_iter().next()
    });
    assert_eq!(found["fields"]["target"], "/swarm/init", "{found}");
    assert_eq!(found["fields"]["rule"], "endpoint_not_allowed", "{found}");
    assert_eq!(found["fields"]["host"], "near", "{found}");

    // The other one, retrying all along, still delivered nothing.
    assert!(
        stranger.log_text().contains("invalid peer certificate"),
        "{}",
        stranger.log_text()
    );
    assert_eq!(
        refusals_from(&control, "dockgate-stranger"),
        Vec::<serde_json::Value>::new()
    );
}

#[test]
fn dockgate_refuses_at_start_a_control_url_it_cannot_use() {
    let dir = ConfigDir::example("");
    let token = dir.dir.path().join("secrets/service.token");
    let pki = Pki::init();
    let start = |url: &str, extra: &[&str]| {
        let o = Command::new(binary("termgate-dockgate"))
            .args(["--instance", "tstart", "--dir"])
            .arg(dir.dir.path().join("dockgate"))
            .args(["--control-url", url, "--service-token-file"])
            .arg(&token)
            .args(extra)
            .env_remove("RUST_LOG")
            .output()
            .expect("termgate-dockgate");
        assert!(!o.status.success(), "{url} {extra:?}: started");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };

    // https:// without the CA to check control's certificate against.
    let err = start("https://127.0.0.1:7070", &[]);
    assert!(
        err.contains("--control-url") && err.contains("--tls-ca"),
        "{err}"
    );

    // Not scheme://host:port.
    for bad in [
        "127.0.0.1:7070",
        "https://127.0.0.1",
        "https://127.0.0.1:7070/v1",
        "tls://127.0.0.1:7070",
    ] {
        let err = start(bad, &["--tls-ca", path(&pki.ca())]);
        assert!(
            err.contains("--control-url") && err.contains("is not https://host:port"),
            "{bad}: {err}"
        );
    }

    // A CA given for nothing (no TLS listener, control's API plain http://).
    let err = start("http://127.0.0.1:7070", &["--tls-ca", path(&pki.ca())]);
    assert!(err.contains("--tls-ca"), "{err}");
}

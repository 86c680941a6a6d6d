//! A host's ttyd pool reached over mutual TLS (`ttyd_pool = ["tls://host:port"]`): the
//! gateway connects to the pool's front, checks its certificate against `pki.ca_file`
//! and the address's host, presents its own (`gateway.client_cert_file`, role
//! `gateway`), then speaks to ttyd through it. The front here is the test's own: a
//! rustls server that admits only the CA's `gateway` certificates, records who came,
//! and splices each connection to the real ttyd pool's unix socket (through the
//! counting proxy). Certificates are made by the real `termgate-control certs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use config::pki::{self, PeerId, PeerRole};
use e2e::pki::{Leaf, Pki};
use e2e::stack::{free_port, http_with, wait_for, ControlStack, GatewayStack};
use e2e::ttyd::{CountingProxy, TtydPool};

const T: Duration = Duration::from_secs(30);

/// One handshake the front completed: who the client's certificate says it is, and
/// the certificate itself.
#[derive(Debug, Clone)]
struct Seen {
    id: Option<PeerId>,
    cert: Vec<u8>,
}

/// A pool's front on 127.0.0.1: TLS with client certificates of the deployment's CA,
/// only `gateway` ones admitted, each admitted connection spliced to `pool`.
struct Front {
    addr: SocketAddr,
    /// What the next handshakes present (a test swaps it).
    server: Arc<Mutex<Arc<rustls::ServerConfig>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Handshakes that failed.
    failed: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

fn server_config(cert: &Path, key: &Path, ca: &Path) -> Arc<rustls::ServerConfig> {
    let cert = pki::Certificate::load(cert, key, "front cert", "front key").expect("front cert");
    let roots = pki::load_roots(ca, "ca").expect("CA");
    Arc::new(pki::mutual_server(cert, roots).expect("server settings"))
}

impl Front {
    fn start(server: Arc<rustls::ServerConfig>, pool: PathBuf) -> Front {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let port = free_port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .expect("bind the front");
        let server = Arc::new(Mutex::new(server));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let (s, k, f) = (Arc::clone(&server), Arc::clone(&seen), Arc::clone(&failed));
        runtime.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let config = Arc::clone(&s.lock().unwrap());
                let (seen, failed, pool) = (Arc::clone(&k), Arc::clone(&f), pool.clone());
                tokio::spawn(async move {
                    let mut tls = match tokio_rustls::TlsAcceptor::from(config).accept(tcp).await {
                        Ok(tls) => tls,
                        Err(e) => {
                            failed.lock().unwrap().push(e.to_string());
                            return;
                        }
                    };
                    let conn = tls.get_ref().1;
                    let id = pki::peer_of(conn);
                    let cert = conn
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| c.to_vec())
                        .unwrap_or_default();
                    let admitted = id.as_ref().is_some_and(|id| id.role == PeerRole::Gateway);
                    seen.lock().unwrap().push(Seen { id, cert });
                    if !admitted {
                        return;
                    }
                    let Ok(mut ttyd) = tokio::net::UnixStream::connect(&pool).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut ttyd).await;
                });
            }
        });
        Front {
            addr,
            server,
            seen,
            failed,
            _runtime: runtime,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn failed(&self) -> Vec<String> {
        self.failed.lock().unwrap().clone()
    }

    fn present(&self, server: Arc<rustls::ServerConfig>) {
        *self.server.lock().unwrap() = server;
    }
}

/// Control with one Docker host, the machine's daemon, whose pool is `front`'s
/// address (`tls://127.0.0.1:<port>`), and a gateway with its certificate.
struct Setup {
    stack: GatewayStack,
    front: Front,
    /// The deployment's CA, the front's certificate (for 127.0.0.1) and the gateway's.
    pki: Pki,
    front_cert: Leaf,
    gateway_cert: Leaf,
    /// The configuration as the stack was started, without the host's section.
    base_config: String,
}

impl Setup {
    fn start() -> Setup {
        let mut control = ControlStack::prepare("");
        let pki = Pki::init();
        let front_cert = pki.issue("dockgate", "host1", &["127.0.0.1"]);
        let gateway_cert = pki.issue("gateway", "gw", &[]);
        let ttyd = TtydPool::start_for(&control.instance);
        let counter = CountingProxy::start(ttyd.target());
        let front = Front::start(
            server_config(&front_cert.cert, &front_cert.key, &pki.ca()),
            counter.socket_path().to_path_buf(),
        );
        let base_config = std::fs::read_to_string(control.dir.config_path()).expect("config");
        let main_host = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|h| h.starts_with("unix://"))
            .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
        let with_certs = base_config
            .replace(
                "[gateway]\n",
                &format!(
                    "[gateway]\nclient_cert_file = {:?}\nclient_key_file = {:?}\n",
                    gateway_cert.cert.display().to_string(),
                    gateway_cert.key.display().to_string()
                ),
            )
            .replace(
                "[pki]\n",
                &format!("[pki]\nca_file = {:?}\n", pki.ca().display().to_string()),
            );
        assert_ne!(
            with_certs, base_config,
            "the example has [gateway] and [pki]"
        );
        control.dir.write_config(&format!(
            "{with_certs}\n[[docker.hosts]]\nname = \"main\"\nendpoint = \"{main_host}\"\nttyd_pool = [\"tls://{}\"]\ncapacity = 4\n",
            front.addr
        ));
        control.unset_env("TERMGATE__CONTROL__DOCKER_HOST");
        control.spawn(&[]);
        let stack = GatewayStack::assemble(control, ttyd, counter);
        Setup {
            stack,
            front,
            pki,
            front_cert,
            gateway_cert,
            base_config,
        }
    }

    /// A new session of `sub`, and a cookie of gateway 0 for it.
    fn session(&self, sub: &str) -> (String, String) {
        let token = self.stack.control.token(sub, false);
        let s = self.stack.control.create(&token);
        assert_eq!(s["host"], "main", "{s}");
        let id = s["id"].as_str().expect("id").to_owned();
        (id, self.stack.sign_in(sub))
    }

    /// The page of `id` through gateway `n` (Pingora's path to the pool).
    fn page(&self, n: usize, id: &str, cookie: &str) -> u16 {
        let url = self.stack.url(n, &format!("/s/{id}/"));
        http_with("GET", &url, &[("Cookie", cookie)])
            .expect("page")
            .status
    }
}

#[test]
fn a_terminal_on_a_tls_pool_opens_as_the_gateway_and_a_renewal_is_presented_to_new_ones() {
    let s = Setup::start();
    let (id, cookie) = s.session("alice");

    let t = s
        .stack
        .open_as(0, &id, &cookie)
        .expect("alice opens her session");
    t.send_input(b"echo tls-$((40+2))\r").unwrap();
    t.read_until("tls-42", T).unwrap();
    let seen = s.front.seen();
    assert_eq!(seen.len(), 1, "one handshake at the front: {seen:?}");
    let id_seen = seen[0]
        .id
        .clone()
        .expect("the gateway presented an identity");
    assert_eq!(
        (id_seen.role, id_seen.name.as_str()),
        (PeerRole::Gateway, "gw")
    );
    let first = s.gateway_cert.der();
    assert_eq!(seen[0].cert, first, "the configured certificate");
    assert_eq!(
        s.stack.counter.connections(),
        1,
        "the terminal reached ttyd through the front"
    );

    // The page goes through Pingora's own connection to the front, as the gateway too.
    assert_eq!(s.page(0, &id, &cookie), 200);
    let seen = s.front.seen();
    assert_eq!(
        seen.len(),
        2,
        "the page made a handshake of its own: {seen:?}"
    );
    assert_eq!(seen[1].cert, first);

    // Renewed while the terminal is open.
    let renewed = s.pki.issue("gateway", "gw", &[]).der();
    assert_ne!(renewed, first, "issued again");
    wait_for("the gateway to pick the renewal up", T, || {
        s.stack
            .gw()
            .log_text()
            .contains("a renewed certificate for the pools")
            .then_some(())
    });
    t.send_input(b"echo still-$((50+2))\r").unwrap();
    t.read_until("still-52", T).unwrap();
    assert!(!t.is_closed(), "the open terminal stays open");

    let before = s.front.seen().len();
    let t2 = s.stack.open_as(0, &id, &cookie).expect("a new terminal");
    t2.send_input(b"echo renewed-$((60+2))\r").unwrap();
    t2.read_until("renewed-62", T).unwrap();
    // A new page request is a new connection too (Pingora reuses none made on the old
    // certificate).
    assert_eq!(s.page(0, &id, &cookie), 200);
    let after = s.front.seen();
    assert_eq!(after.len(), before + 2, "{after:?}");
    for (i, seen) in after[before..].iter().enumerate() {
        assert_eq!(
            seen.cert, renewed,
            "handshake {i} after the renewal presents the renewed certificate"
        );
    }
    t.send_input(b"echo both-$((70+2))\r").unwrap();
    t.read_until("both-72", T).unwrap();
}

#[test]
fn a_front_of_another_ca_gets_nothing_and_a_gateway_without_a_certificate_opens_nothing() {
    let mut s = Setup::start();
    let (id, cookie) = s.session("bob");
    let t = s
        .stack
        .open_as(0, &id, &cookie)
        .expect("bob opens his session");
    t.send_input(b"echo ok-$((20+2))\r").unwrap();
    t.read_until("ok-22", T).unwrap();
    drop(t);

    // The front now presents a certificate of another CA for the same address.
    let other = Pki::init();
    let impostor = other.issue("dockgate", "host1", &["127.0.0.1"]);
    s.front
        .present(server_config(&impostor.cert, &impostor.key, &s.pki.ca()));
    let reached = s.stack.counter.connections();
    let (seen, failed) = (s.front.seen().len(), s.front.failed().len());
    let refused = s
        .stack
        .open_as(0, &id, &cookie)
        .expect_err("no terminal through an impostor");
    assert_eq!(refused.status(), Some(502), "{refused:?}");
    // The gateway answers as soon as its side of the handshake fails; the front records
    // its side when the gateway's alert reaches it, a moment later.
    wait_for(
        "the gateway tried the front and gave up in the handshake",
        T,
        || (s.front.failed().len() == failed + 1).then_some(()),
    );
    assert_eq!(s.page(0, &id, &cookie), 502, "nor its page");
    wait_for("the page's try failed too", T, || {
        (s.front.failed().len() >= failed + 2).then_some(())
    });
    assert_eq!(s.front.seen().len(), seen, "no handshake completed");
    assert_eq!(
        s.stack.counter.connections(),
        reached,
        "nothing reached ttyd"
    );
    wait_for(
        "a line that says the front's certificate is not valid",
        T,
        || {
            let log = s.stack.gw().log_text();
            log.contains("invalid peer certificate").then_some(())
        },
    );

    // A configuration with a tls:// pool and no gateway.client_cert_file is refused at
    // start, naming the key.
    let config = s.stack.control.dir.config_path();
    let with_certs = std::fs::read_to_string(&config).expect("config");
    let hosts = &with_certs[with_certs.find("[[docker.hosts]]").expect("hosts")..];
    let without = s.stack.control.dir.dir.path().join("without-cert.toml");
    std::fs::write(&without, format!("{}\n{hosts}", s.base_config)).expect("config");
    let mut child = Command::new(e2e::binary("termgate-gateway"))
        .arg("--config")
        .arg(&without)
        .env("TERMGATE__GATEWAY__LISTEN", "127.0.0.1:0")
        .env("TERMGATE__GATEWAY__ADMIN_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn termgate-gateway");
    let deadline = Instant::now() + T;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway started without the certificate its pools need");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("gateway.client_cert_file"), "{stderr}");

    // A gateway whose own configuration names no host (routes come from control) and
    // no certificate: the terminal is 502, and its log says which key is missing.
    s.front.present(server_config(
        &s.front_cert.cert,
        &s.front_cert.key,
        &s.pki.ca(),
    ));
    s.stack.control.dir.write_config(&s.base_config);
    let n = s.stack.spawn_gateway(&[]);
    s.stack.control.dir.write_config(&with_certs);
    let cookie = s
        .stack
        .sign_in_with(n, &s.stack.control.token("bob", false));
    let seen = s.front.seen().len();
    let refused = s
        .stack
        .open_as(n, &id, &cookie)
        .expect_err("no terminal without the gateway's certificate");
    assert_eq!(refused.status(), Some(502), "{refused:?}");
    assert_eq!(s.page(n, &id, &cookie), 502, "nor its page");
    assert_eq!(s.front.seen().len(), seen, "the front saw nothing of it");
    // Each request's line is written once it is answered: the page's a moment after
    // its 502 reached the test.
    wait_for(
        "the websocket's and the page's lines name the key",
        T,
        || {
            let log = s.stack.gateways[n].log_text();
            (log.matches("gateway.client_cert_file is not set").count() >= 2).then_some(())
        },
    );
    // The gateway with its certificate still opens it through the restored front.
    let t = s
        .stack
        .open_as(0, &id, &s.stack.sign_in("bob"))
        .expect("bob opens his session again");
    t.send_input(b"echo back-$((30+2))\r").unwrap();
    t.read_until("back-32", T).unwrap();
}

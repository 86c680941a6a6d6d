//! termgate's terminals mounted in a team's own Pingora proxy (`gateway::module`, run as
//! the example `gateway/examples/own_proxy.rs`, terminals under `/terminals/`): the
//! team's route answers beside them, and a mounted terminal keeps the gateway's
//! promises — the owner types, another user and an unknown id get the same 404 and ttyd
//! sees no connection, no credential is 401, a cross-site Origin 403, nothing of the
//! client's identity or `arg` reaches ttyd, and ending the session closes the terminal.
//! Real control, ttyd pool and session containers; no termgate gateway in front.
//!
//! The example is built by `cargo build -p gateway --example own_proxy`; the test finds
//! it beside the binaries (`target/<profile>/examples/`, or `$TERMGATE_BIN_DIR/examples/`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::stack::{docker, free_port, http, http_with, ControlStack};
use e2e::term::{Target, Terminal};
use e2e::ttyd::{CountingProxy, TtydPool};
use e2e::upstream::RecordingUpstream;
use serde_json::json;

const T: Duration = Duration::from_secs(15);
/// Where the example mounts termgate's terminals.
const MOUNT: &str = "/terminals";
/// What ttyd's page is told when a terminal of an ended session is closed.
const ENDED_FRAME: &str = "close frame 1000 \"termgate: this session was ended\"";

/// Why this machine cannot run these tests (no Docker daemon, ttyd or session image).
fn cannot_run() -> Option<String> {
    let ok = |cmd: &mut Command| {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"])) {
        return Some("no Docker daemon answers `docker info`".into());
    }
    let ttyd = e2e::ttyd::ttyd_binary();
    if !ok(Command::new(&ttyd).arg("--version")) {
        return Some(format!(
            "ttyd ({}) does not run; set TERMGATE_TTYD",
            ttyd.display()
        ));
    }
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    if !ok(Command::new("docker").args(["image", "inspect", &image])) {
        return Some(format!("the session image {image} is missing"));
    }
    None
}

/// The example binary, beside the workspace's binaries (as `e2e::binary` finds those).
fn own_proxy_binary() -> PathBuf {
    let path = e2e::bin_dir().join("examples").join("own_proxy");
    assert!(
        path.is_file(),
        "{} is missing: build the example first (cargo build -p gateway --example own_proxy)",
        path.display()
    );
    path
}

/// The team's proxy (the example), with termgate's configuration of `control`.
struct OwnProxy {
    port: u16,
    child: Option<Child>,
    log: PathBuf,
}

impl OwnProxy {
    /// Starts the example in front of `control` and the ttyd behind `ttyd_socket`;
    /// waits until the team's own route answers.
    fn start(control: &ControlStack, ttyd_socket: &Path) -> OwnProxy {
        let port = free_port();
        let dir = control.dir.dir.path();
        let log = dir.join(format!("own-proxy-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("own proxy log");
        let child = Command::new(own_proxy_binary())
            .arg("--config")
            .arg(control.dir.config_path())
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .env("TERMGATE__INSTANCE", &control.instance)
            .env("TERMGATE__GATEWAY__CONTROL_URL", &control.api)
            .env(
                "TERMGATE__GATEWAY__ALLOWED_ORIGINS",
                format!("[\"http://127.0.0.1:{port}\"]"),
            )
            .env("TERMGATE__TTYD__SOCKET", ttyd_socket)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .expect("spawn the own_proxy example");
        let mut p = OwnProxy {
            port,
            child: Some(child),
            log,
        };
        let start = Instant::now();
        loop {
            if http("GET", &p.url("/hello"), None, None).is_ok_and(|a| a.status == 200) {
                return p;
            }
            if let Some(status) = p.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "own_proxy exited during start ({status}):\n{}",
                    p.log_text()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "own_proxy did not start:\n{}",
                p.log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Opens the websocket at `path` under the mount, sending `headers`.
    fn connect(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Terminal, e2e::term::ConnectError> {
        let target = Target::Tcp(([127, 0, 0, 1], self.port).into());
        Terminal::connect(target, &format!("{MOUNT}{path}"), headers)
    }

    /// [`OwnProxy::connect`], then waits until ttyd has spoken (its title): the
    /// terminal is really attached.
    fn open(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Terminal, e2e::term::ConnectError> {
        let t = self.connect(path, headers)?;
        let _ = t.wait_title(Duration::from_secs(10));
        Ok(t)
    }
}

impl Drop for OwnProxy {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- own_proxy log ---\n{}", self.log_text());
        }
    }
}

/// Control, the real ttyd pool behind a connection-counting proxy, and the team's proxy
/// in front of them. Fields drop in order: the team's proxy first.
struct Mounted {
    proxy: OwnProxy,
    counter: CountingProxy,
    _ttyd: TtydPool,
    control: ControlStack,
}

impl Mounted {
    fn start(extra: &str) -> Mounted {
        let control = ControlStack::start(extra);
        let ttyd = TtydPool::start_for(&control.instance);
        let counter = CountingProxy::start(ttyd.target());
        let proxy = OwnProxy::start(&control, counter.socket_path());
        Mounted {
            proxy,
            counter,
            _ttyd: ttyd,
            control,
        }
    }

    /// A running session of `sub`'s; its id.
    fn create(&self, sub: &str) -> String {
        let token = self.control.token(sub, false);
        self.control.create(&token)["id"]
            .as_str()
            .expect("an id")
            .to_owned()
    }

    /// The cookie termgate's sign-in sets for `sub` (`auth.cookie_name`).
    fn cookie(&self, sub: &str) -> String {
        format!("termgate_session={}", self.control.token(sub, false))
    }

    /// Opens `id`'s websocket as a browser on the team's site would.
    fn open_as(&self, id: &str, cookie: &str) -> Result<Terminal, e2e::term::ConnectError> {
        let origin = self.proxy.origin();
        self.proxy.open(
            &format!("/s/{id}/ws"),
            &[("Cookie", cookie), ("Origin", &origin)],
        )
    }
}

fn container_of(control: &ControlStack, id: &str) -> String {
    docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label=termgate.instance={}", control.instance),
        "--filter",
        &format!("label=termgate.session={id}"),
    ])
}

#[test]
fn the_teams_route_answers_and_the_owner_types_in_a_mounted_terminal_closed_by_the_end() {
    if let Some(why) = cannot_run() {
        return e2e::skip_or_fail(&why);
    }
    let m = Mounted::start("");
    let hello = http("GET", &m.proxy.url("/hello"), None, None).unwrap();
    assert_eq!(
        (hello.status, hello.text.as_str()),
        (200, "hello from the team\n")
    );
    let elsewhere = http("GET", &m.proxy.url("/s/aaaaaaaaaaaaaaaa/ws"), None, None).unwrap();
    assert_eq!(
        elsewhere.status, 404,
        "termgate's paths exist only under the mount"
    );

    let id = m.create("alice");
    let cookie = m.cookie("alice");
    // ttyd's page and token, proxied by the team's proxy to the ttyd termgate chose.
    let page = http_with(
        "GET",
        &m.proxy.url(&format!("{MOUNT}/s/{id}/")),
        &[("Cookie", &cookie)],
    )
    .unwrap();
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("<html"), "ttyd's page: {}", page.text);
    let token = http_with(
        "GET",
        &m.proxy.url(&format!("{MOUNT}/s/{id}/token")),
        &[("Cookie", &cookie)],
    )
    .unwrap();
    assert_eq!(
        (token.status, token.body.get("token").is_some()),
        (200, true)
    );

    let t = m
        .open_as(&id, &cookie)
        .expect("the owner opens the mounted terminal");
    t.send_input(b"echo mounted-$((6*7))\r").unwrap();
    t.read_until("mounted-42", T)
        .expect("the owner's typing echoes");
    assert!(!container_of(&m.control, &id).is_empty());

    let alice = m.control.token("alice", false);
    let url = format!("{}/v1/sessions/{id}", m.control.api);
    let start = Instant::now();
    let delete =
        std::thread::spawn(move || http("DELETE", &url, Some(&alice), None).unwrap().status);
    let took = t
        .wait_closed(Duration::from_secs(2))
        .map(|_| start.elapsed())
        .expect("the mounted terminal closes within 2 s of the end");
    assert_eq!(t.close_reason().as_deref(), Some(ENDED_FRAME));
    assert_eq!(delete.join().unwrap(), 204);
    eprintln!("DELETE → mounted terminal closed: {took:?}");
    let again = m
        .open_as(&id, &cookie)
        .expect_err("an ended session's terminal");
    assert_eq!(again.status(), Some(404));
}

#[test]
fn at_the_mount_non_owner_and_unknown_get_one_404_and_no_refusal_reaches_ttyd() {
    if let Some(why) = cannot_run() {
        return e2e::skip_or_fail(&why);
    }
    let m = Mounted::start("");
    let id = m.create("alice");
    let alice = m.cookie("alice");
    let bob = m.cookie("bob");
    let before = m.counter.connections();

    let other = m
        .open_as(&id, &bob)
        .expect_err("bob must not open alice's terminal");
    let unknown = m
        .open_as("aaaaaaaaaaaaaaaa", &bob)
        .expect_err("an unknown session");
    assert_eq!(other.status(), Some(404));
    assert_eq!(
        other.body(),
        unknown.body(),
        "another user's session and an unknown one must look the same"
    );
    assert_eq!(other.json().unwrap()["error"]["code"], "session_not_found");
    for part in ["", "token"] {
        let path = format!("{MOUNT}/s/{id}/{part}");
        let a = http_with("GET", &m.proxy.url(&path), &[("Cookie", &bob)]).unwrap();
        let u = http_with(
            "GET",
            &m.proxy.url(&format!("{MOUNT}/s/aaaaaaaaaaaaaaaa/{part}")),
            &[("Cookie", &bob)],
        )
        .unwrap();
        assert_eq!((a.status, &a.text), (404, &u.text), "{path}");
    }

    let path = format!("/s/{id}/ws");
    let none = m.proxy.open(&path, &[]).expect_err("no credential");
    assert_eq!(
        (none.status(), none.json().unwrap()["error"]["code"].clone()),
        (Some(401), json!("unauthenticated"))
    );
    let page = http("GET", &m.proxy.url(&format!("{MOUNT}/s/{id}/")), None, None).unwrap();
    assert_eq!(page.status, 401, "the page without a credential");
    let foreign = m
        .proxy
        .open(
            &path,
            &[("Cookie", &alice), ("Origin", "http://evil.example")],
        )
        .expect_err("a cross-site upgrade with the cookie");
    assert_eq!(
        (
            foreign.status(),
            foreign.json().unwrap()["error"]["code"].clone()
        ),
        (Some(403), json!("origin_not_allowed"))
    );
    assert_eq!(
        m.counter.connections(),
        before,
        "ttyd must see no connection for a refused request"
    );

    // The same owner, the same headers, this proxy's Origin: the one that reaches ttyd.
    let t = m.open_as(&id, &alice).expect("the owner opens");
    t.send_input(b"echo owner-$((1+1))\r").unwrap();
    t.read_until("owner-2", T).unwrap();
    assert!(m.counter.connections() > before);
}

#[test]
fn at_the_mount_no_cookie_token_client_termgate_header_or_arg_reaches_ttyd() {
    if let Some(why) = cannot_run() {
        return e2e::skip_or_fail(&why);
    }
    let control = ControlStack::start("");
    let token = control.token("alice", false);
    let id = control.create(&token)["id"].as_str().unwrap().to_owned();
    let container = container_of(&control, &id);
    let recorder = RecordingUpstream::unix();
    let proxy = OwnProxy::start(&control, recorder.socket_path().unwrap());
    let cookie = format!("termgate_session={token}; other=1");
    let origin = proxy.origin();
    let claimed = [
        ("Cookie", cookie.as_str()),
        ("Origin", origin.as_str()),
        ("X-Termgate-User", "mallory"),
        ("X-Termgate-Admin", "1"),
    ];
    let _t = proxy
        .connect(&format!("/s/{id}/ws?arg=evil&arg=x"), &claimed)
        .expect("upgrade through the recorder");
    // The page and the token: proxied by the team's proxy, with a bearer header too.
    let bearer = format!("Bearer {token}");
    for part in ["", "token"] {
        let mut headers = claimed.to_vec();
        headers.push(("Authorization", &bearer));
        let path = format!("{MOUNT}/s/{id}/{part}?arg=evil");
        let a = http_with("GET", &proxy.url(&path), &headers).unwrap();
        assert_eq!(a.status, 200, "{path}: {}", a.text);
    }
    let reqs = recorder.requests();
    for target in [format!("/ws?arg={container}"), "/".into(), "/token".into()] {
        let r = reqs
            .iter()
            .find(|r| r.target == target)
            .unwrap_or_else(|| panic!("ttyd never got {target}: {reqs:?}"));
        r.assert_only_the_verified_user("alice", &target);
    }
    assert_eq!(
        recorder.requests().len(),
        3,
        "the websocket, the page and the token, once each"
    );
}

//! `GET /v1/authz` through a real nginx (`deploy/nginx/termgate-authz.conf`, the
//! shipped snippet) in front of the real ttyd pool, with real control and real session
//! containers: the owner's terminal works, everyone else is refused before ttyd.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::nginx::Nginx;
use e2e::raw::exchange;
use e2e::stack::{docker, free_port, http, ControlStack};
use e2e::term::{Target, Terminal};
use e2e::ttyd::{CountingProxy, TtydPool};

const T: Duration = Duration::from_secs(15);

/// Control, the ttyd pool behind a connection-counting proxy (control's `ttyd.socket`,
/// so the check answers it as the upstream) and nginx with the snippet.
struct Stack {
    // Declared first: nginx stops before the pool and control go away.
    nginx: Nginx,
    counter: CountingProxy,
    _ttyd: TtydPool,
    control: ControlStack,
}

impl Stack {
    fn start() -> Stack {
        let mut control = ControlStack::prepare("");
        let ttyd = TtydPool::start_for(&control.instance);
        let counter = CountingProxy::start(ttyd.target());
        let port = free_port();
        let socket = counter.socket_path().to_string_lossy().into_owned();
        control.set_env("TERMGATE__TTYD__SOCKET", &socket);
        control.set_env(
            "TERMGATE__GATEWAY__ALLOWED_ORIGINS",
            &format!("[\"http://127.0.0.1:{port}\"]"),
        );
        control.spawn(&[]);
        let api = control.api.trim_start_matches("http://").to_owned();
        let nginx = Nginx::authz(port, &api);
        Stack {
            nginx,
            counter,
            _ttyd: ttyd,
            control,
        }
    }

    fn create(&self, sub: &str) -> String {
        let token = self.control.token(sub, false);
        self.control.create(&token)["id"]
            .as_str()
            .expect("session id")
            .to_owned()
    }

    fn container(&self, session: &str) -> String {
        docker(&[
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("label=termgate.instance={}", self.control.instance),
            "--filter",
            &format!("label=termgate.session={session}"),
        ])
    }

    fn cookie(&self, sub: &str) -> String {
        format!("termgate_session={}", self.control.token(sub, false))
    }

    /// Opens a websocket through nginx.
    fn open(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Terminal, e2e::term::ConnectError> {
        let addr: SocketAddr = ([127, 0, 0, 1], self.nginx.port()).into();
        Terminal::connect(Target::Tcp(addr), path, headers)
    }

    /// Control's own answer to a check (no nginx), head and body as text.
    fn check(&self, uri: &str, headers: &[(&str, &str)]) -> e2e::raw::RawAnswer {
        let port: u16 = self
            .control
            .api
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("control port");
        let mut req = format!(
            "GET /v1/authz HTTP/1.1\r\nHost: control\r\nConnection: close\r\nX-Original-URI: {uri}\r\n"
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        exchange(port, req.as_bytes(), T)
    }
}

fn header<'a>(answer: &'a e2e::raw::RawAnswer, name: &str) -> Option<&'a str> {
    let head = answer.text.split("\r\n\r\n").next()?;
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn the_owner_types_through_nginx_and_a_client_arg_never_chooses_the_container() {
    let stack = Stack::start();
    let mine = stack.create("alice");
    let theirs = stack.create("bob");
    let (my_container, their_container) = (stack.container(&mine), stack.container(&theirs));
    let before = stack.counter.connections();
    let origin = stack.nginx.origin();
    let cookie = stack.cookie("alice");
    // The browser's way: the cookie and nginx's Origin; the client asks for bob's
    // container in its query, which nginx must never send on.
    let t = stack
        .open(
            &format!("/s/{mine}/ws?arg={their_container}&arg=x"),
            &[("Cookie", &cookie), ("Origin", &origin)],
        )
        .unwrap_or_else(|e| {
            panic!(
                "owner's upgrade through nginx: {e}\n{}",
                stack.nginx.log_text()
            )
        });
    t.send_input(b"echo host-$(hostname)-$((6*7))\r").unwrap();
    let out = t
        .read_until(&format!("host-{}-42", &my_container[..12]), T)
        .unwrap_or_else(|e| panic!("the echo from alice's own container: {e}"));
    assert!(
        !out.contains(&their_container[..12]),
        "landed in bob's container: {out}"
    );
    assert!(
        stack.counter.connections() > before,
        "the terminal went through the counted ttyd socket"
    );
    t.close();

    // A program's way: a bearer token, no Origin needed.
    let token = stack.control.token("alice", false);
    let t = stack
        .open(
            &format!("/s/{mine}/ws"),
            &[("Authorization", &format!("Bearer {token}"))],
        )
        .expect("bearer upgrade through nginx");
    t.send_input(b"echo bearer-$((7*6))\r").unwrap();
    t.read_until("bearer-42", T)
        .expect("the bearer terminal echoes");
    t.close();

    // ttyd's page comes through for the owner too.
    let page = http(
        "GET",
        &format!("{}/s/{mine}/", stack.nginx.origin()),
        Some(&token),
        None,
    )
    .unwrap();
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(
        page.text.contains("<html"),
        "ttyd's page: {}",
        &page.text[..page.text.len().min(200)]
    );

    // Control's answer names the route's arg and the exact target for ttyd.
    let answer = stack.check(
        &format!("/s/{mine}/ws?arg=evil"),
        &[("Authorization", &format!("Bearer {token}"))],
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        header(&answer, "x-termgate-arg"),
        Some(my_container.as_str())
    );
    assert_eq!(
        header(&answer, "x-termgate-uri"),
        Some(format!("/ws?arg={my_container}").as_str())
    );
    assert_eq!(header(&answer, "x-termgate-user"), Some("alice"));
    let socket = stack.counter.socket_path().display().to_string();
    assert_eq!(
        header(&answer, "x-termgate-upstream"),
        Some(format!("unix:{socket}").as_str())
    );
}

#[test]
fn refusals_through_nginx_keep_their_status_and_ttyd_sees_no_connection() {
    let stack = Stack::start();
    let id = stack.create("alice");
    let container = stack.container(&id);
    let origin = stack.nginx.origin();
    let ws = format!("/s/{id}/ws");
    let before = stack.counter.connections();

    // Another user and an unknown session: the same 404, body and all.
    let bob = stack.cookie("bob");
    let other = stack
        .open(&ws, &[("Cookie", &bob), ("Origin", &origin)])
        .expect_err("bob must not open alice's terminal");
    let unknown = stack
        .open(
            "/s/aaaaaaaaaaaaaaaa/ws",
            &[("Cookie", &bob), ("Origin", &origin)],
        )
        .expect_err("unknown session");
    assert_eq!(other.status(), Some(404), "{other}");
    assert_eq!(
        other.body(),
        unknown.body(),
        "non-owner and unknown look the same"
    );
    assert_eq!(other.json().unwrap()["error"]["code"], "session_not_found");
    let bob_token = stack.control.token("bob", false);
    for part in ["", "token"] {
        let a = http(
            "GET",
            &format!("{origin}/s/{id}/{part}"),
            Some(&bob_token),
            None,
        )
        .unwrap();
        assert_eq!(a.status, 404, "/s/<id>/{part}: {}", a.text);
    }
    // Control's own answer to bob never names the container.
    let answer = stack.check(&ws, &[("Authorization", &format!("Bearer {bob_token}"))]);
    assert_eq!(answer.status, 404, "{}", answer.text);
    assert!(!answer.text.contains(&container[..12]), "{}", answer.text);
    assert_eq!(header(&answer, "x-termgate-upstream"), None);

    // No credential, or one that does not verify: 401.
    let none = stack
        .open(&ws, &[("Origin", &origin)])
        .expect_err("no credential");
    assert_eq!(none.status(), Some(401), "{none}");
    let forged = stack
        .open(&ws, &[("Authorization", "Bearer not.a.token")])
        .expect_err("a forged token");
    assert_eq!(forged.status(), Some(401), "{forged}");
    // A token in the query is no credential.
    let token = stack.control.token("alice", false);
    let queried = stack
        .open(&format!("{ws}?token={token}"), &[("Origin", &origin)])
        .expect_err("a token in the query");
    assert_eq!(queried.status(), Some(401), "{queried}");

    // The owner's cookie from another site, or with no Origin at all: 403.
    let cookie = stack.cookie("alice");
    for bad in [Some("http://evil.example"), Some("null"), None] {
        let mut headers = vec![("Cookie", cookie.as_str())];
        if let Some(o) = bad {
            headers.push(("Origin", o));
        }
        let e = stack.open(&ws, &headers).expect_err("a cross-site upgrade");
        assert_eq!(e.status(), Some(403), "Origin {bad:?}: {e}");
    }

    // A locked owner: 403.
    let admin = stack.control.token("root-admin", true);
    let lock = stack
        .control
        .call("POST", "/v1/users/alice/lock", Some(&admin), None);
    assert_eq!(lock.status, 204, "{}", lock.text);
    let locked = stack
        .open(&ws, &[("Cookie", &cookie), ("Origin", &origin)])
        .expect_err("a locked user");
    assert_eq!(locked.status(), Some(403), "{locked}");

    assert_eq!(
        stack.counter.connections(),
        before,
        "ttyd must see no connection for a refused request"
    );

    // Unlocked, the same request goes through: the refusals above were the check's.
    let unlock = stack
        .control
        .call("DELETE", "/v1/users/alice/lock", Some(&admin), None);
    assert_eq!(unlock.status, 204, "{}", unlock.text);
    let t = stack
        .open(&ws, &[("Cookie", &cookie), ("Origin", &origin)])
        .expect("the owner once unlocked");
    t.send_input(b"echo back-$((40+2))\r").unwrap();
    t.read_until("back-42", T)
        .expect("the owner's terminal echoes");
}

//! `GET /v1/authz` through a real nginx (`deploy/nginx/termgate-authz.conf`), a real
//! Caddy (`deploy/caddy/Caddyfile`) and a real HAProxy (`deploy/haproxy/haproxy.cfg`
//! with its Lua check), the shipped files, in front of the real ttyd pool, with real
//! control and real session containers: the owner's terminal works, everyone else is
//! refused before ttyd, ttyd receives control's target and no credential, and an end,
//! a lock or a sign-out closes the open terminal within 2 s although termgate carries
//! none of its bytes. Traefik's and Envoy's checks by contract (exactly the headers
//! each sends), with the handle pool their snippets proxy to.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e::caddy::Caddy;
use e2e::haproxy::Haproxy;
use e2e::nginx::Nginx;
use e2e::raw::exchange;
use e2e::stack::{docker, free_port, http, ControlStack};
use e2e::term::{Target, Terminal};
use e2e::ttyd::{CountingProxy, TtydPool};

const T: Duration = Duration::from_secs(15);
/// What the plugin mode promises for closing a revoked terminal.
const CLOSE_WITHIN: Duration = Duration::from_secs(2);

/// The proxy in front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Nginx,
    Caddy,
    Haproxy,
}

impl Kind {
    /// Whether this proxy can run here; when it cannot, the test fails naming why
    /// (or, with `TERMGATE_ALLOW_SKIP=1`, says so and returns `false`).
    fn runs_here(self) -> bool {
        if self != Kind::Haproxy {
            // nginx and Caddy fail at their start when missing.
            return true;
        }
        match e2e::haproxy::unavailable() {
            None => true,
            Some(why) => {
                e2e::skip_or_fail(&why);
                false
            }
        }
    }
}

enum Front {
    Nginx(Nginx),
    Caddy(Caddy),
    Haproxy(Haproxy),
}

impl Front {
    fn port(&self) -> u16 {
        match self {
            Front::Nginx(n) => n.port(),
            Front::Caddy(c) => c.port(),
            Front::Haproxy(h) => h.port(),
        }
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port())
    }

    fn log_text(&self) -> String {
        match self {
            Front::Nginx(n) => n.log_text(),
            Front::Caddy(c) => c.log_text(),
            Front::Haproxy(h) => h.log_text(),
        }
    }
}

/// Control, the ttyd pool (with `TERMGATE_CONTROL`: it closes what control revokes)
/// behind a connection-counting proxy (control's `ttyd.socket`, so the check answers it
/// as the upstream) and a hop that keeps every request head ttyd receives, and the
/// front proxy with its shipped configuration.
struct Stack {
    // Declared first: the proxy stops before the pool and control go away.
    front: Front,
    counter: CountingProxy,
    heads: HeadRecorder,
    ttyd: TtydPool,
    control: ControlStack,
}

impl Stack {
    fn behind(kind: Kind) -> Stack {
        Stack::behind_with(kind, &[])
    }

    /// [`Stack::behind`], with `env` set for control.
    fn behind_with(kind: Kind, env: &[(&str, &str)]) -> Stack {
        // `stubborn`'s program ignores the hang-up an end sends: a terminal that closes
        // at an end was closed by the end, not by its program exiting.
        let mut control =
            ControlStack::prepare(&e2e::stack::profile_ignoring_hang_up("stubborn", 30));
        for (k, v) in env {
            control.set_env(k, v);
        }
        let ttyd = TtydPool::start_plugin_for(&control.instance, &control.api);
        let heads = HeadRecorder::start(&ttyd.target());
        let counter = CountingProxy::start(heads.target());
        let port = free_port();
        let socket = counter.socket_path().to_string_lossy().into_owned();
        control.set_env("TERMGATE__TTYD__SOCKET", &socket);
        control.set_env(
            "TERMGATE__GATEWAY__ALLOWED_ORIGINS",
            &format!("[\"http://127.0.0.1:{port}\"]"),
        );
        control.spawn(&[]);
        let api = control.api.trim_start_matches("http://").to_owned();
        let front = match kind {
            Kind::Nginx => Front::Nginx(Nginx::authz(port, &api)),
            // Nothing but terminals is asked of the page address here.
            Kind::Caddy => Front::Caddy(Caddy::start(port, &api, "127.0.0.1:9")),
            Kind::Haproxy => Front::Haproxy(Haproxy::authz(
                port,
                &control.api,
                counter.socket_path(),
                "127.0.0.1:9",
            )),
        };
        Stack {
            front,
            counter,
            heads,
            ttyd,
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

    /// Opens a websocket through the front proxy.
    fn open(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Terminal, e2e::term::ConnectError> {
        let addr: SocketAddr = ([127, 0, 0, 1], self.front.port()).into();
        Terminal::connect(Target::Tcp(addr), path, headers)
    }

    /// The owner's terminal through the front proxy, by cookie, shown to echo.
    fn open_as(&self, session: &str, cookie: &str) -> Terminal {
        let origin = self.front.origin();
        let t = self
            .open(
                &format!("/s/{session}/ws"),
                &[("Cookie", cookie), ("Origin", &origin)],
            )
            .unwrap_or_else(|e| panic!("open {session}: {e}\n{}", self.front.log_text()));
        t.send_input(b"echo up-$((20+22))\r").unwrap();
        t.read_until("up-42", T).expect("the terminal echoes");
        t
    }

    /// Control's own answer to a check as nginx asks it (no proxy), head and body.
    fn check(&self, uri: &str, headers: &[(&str, &str)]) -> e2e::raw::RawAnswer {
        let mut all = vec![("X-Original-URI", uri)];
        all.extend_from_slice(headers);
        self.ask("/v1/authz", &all)
    }

    /// A raw `GET <target>` to control's API with exactly `headers`.
    fn ask(&self, target: &str, headers: &[(&str, &str)]) -> e2e::raw::RawAnswer {
        self.ask_method("GET", target, headers)
    }

    /// A raw `<method> <target>` to control's API with exactly `headers`.
    fn ask_method(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
    ) -> e2e::raw::RawAnswer {
        let mut req = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            req.push_str("Host: control\r\n");
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        exchange(self.control_port(), req.as_bytes(), T)
    }

    fn control_port(&self) -> u16 {
        self.control
            .api
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("control port")
    }
}

/// The JSON body of a raw answer.
fn json_body(answer: &e2e::raw::RawAnswer) -> serde_json::Value {
    let body = answer.text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let start = body.find('{').unwrap_or(0);
    let end = body.rfind('}').map_or(body.len(), |e| e + 1);
    serde_json::from_str(&body[start..end]).unwrap_or(serde_json::Value::Null)
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
    the_owner_types_and_a_client_arg_never_chooses_the_container(Kind::Nginx);
}

#[test]
fn the_owner_types_through_caddy_and_a_client_arg_never_chooses_the_container() {
    the_owner_types_and_a_client_arg_never_chooses_the_container(Kind::Caddy);
}

#[test]
fn the_owner_types_through_haproxy_and_a_client_arg_never_chooses_the_container() {
    the_owner_types_and_a_client_arg_never_chooses_the_container(Kind::Haproxy);
}

fn the_owner_types_and_a_client_arg_never_chooses_the_container(kind: Kind) {
    if !kind.runs_here() {
        return;
    }
    let stack = Stack::behind(kind);
    let mine = stack.create("alice");
    let theirs = stack.create("bob");
    let (my_container, their_container) = (stack.container(&mine), stack.container(&theirs));
    let before = stack.counter.connections();
    let origin = stack.front.origin();
    let cookie = stack.cookie("alice");
    // The browser's way: the cookie and the proxy's Origin; the client asks for bob's
    // container in its query, which the proxy must never send on, and names a user and
    // a handle of its own for ttyd.
    let t = stack
        .open(
            &format!("/s/{mine}/ws?arg={their_container}&arg=x"),
            &[
                ("Cookie", &cookie),
                ("Origin", &origin),
                ("X-Termgate-User", "mallory"),
                ("X-Termgate-Handle", "hforged"),
            ],
        )
        .unwrap_or_else(|e| {
            panic!(
                "owner's upgrade through {kind:?}: {e}\n{}",
                stack.front.log_text()
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
        .expect("bearer upgrade through the proxy");
    t.send_input(b"echo bearer-$((7*6))\r").unwrap();
    t.read_until("bearer-42", T)
        .expect("the bearer terminal echoes");
    t.close();

    // ttyd's page comes through for the owner too.
    let page = http(
        "GET",
        &format!("{}/s/{mine}/", stack.front.origin()),
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
    // The container, then the handle of the terminal's grant for the pool: both from
    // control, and short enough for ttyd (it drops a query argument of 252 bytes).
    let uri = header(&answer, "x-termgate-uri").unwrap_or_default();
    let handle = header(&answer, "x-termgate-handle").unwrap_or_default();
    assert_eq!(uri, format!("/ws?arg={my_container}&arg={handle}"));
    assert!(handle.starts_with('h') && handle.len() < 30, "{handle}");
    assert!(!uri.contains("evil") && !uri.contains(&token), "{uri}");
    assert_eq!(header(&answer, "x-termgate-user"), Some("alice"));
    let socket = stack.counter.socket_path().display().to_string();
    assert_eq!(
        header(&answer, "x-termgate-upstream"),
        Some(format!("unix:{socket}").as_str())
    );

    // What ttyd itself received: control's target and user, nothing of the client's.
    let heads = stack.heads.heads();
    let lines: Vec<&str> = heads.iter().filter_map(|h| h.lines().next()).collect();
    let terminals = lines.iter().filter(|l| l.starts_with("GET /ws?")).count();
    assert_eq!(terminals, 2, "{kind:?}: ttyd's requests: {lines:?}");
    assert!(lines.contains(&"GET / HTTP/1.1"), "{kind:?}: {lines:?}");
    let cookie_value = cookie.trim_start_matches("termgate_session=");
    for head in &heads {
        let line = head.lines().next().unwrap_or_default();
        let target = line.split(' ').nth(1).unwrap_or_default();
        if let Some(query) = target.strip_prefix("/ws?") {
            // Exactly `arg=<alice's container>&arg=<a handle>`.
            let args: Vec<&str> = query.split('&').collect();
            assert_eq!(args.len(), 2, "{kind:?}: {line}");
            assert_eq!(args[0], format!("arg={my_container}"), "{kind:?}: {line}");
            let handle = args[1].strip_prefix("arg=h").unwrap_or_default();
            assert!(
                !handle.is_empty() && handle.bytes().all(|b| b.is_ascii_alphanumeric()),
                "{kind:?}: {line}"
            );
        } else {
            assert_eq!(target, "/", "{kind:?}: {line}");
        }
        let mut users = Vec::new();
        for l in head.lines().skip(1) {
            let (name, value) = l.split_once(':').unwrap_or((l, ""));
            let name = name.trim().to_ascii_lowercase();
            assert!(
                name != "cookie" && name != "authorization",
                "{kind:?}: a credential reached ttyd:\n{head}"
            );
            if name == "x-termgate-user" {
                users.push(value.trim().to_owned());
            }
        }
        assert_eq!(users, ["alice"], "{kind:?}: ttyd's user:\n{head}");
        for secret in [
            token.as_str(),
            cookie_value,
            &their_container[..12],
            "mallory",
        ] {
            assert!(
                !head.contains(secret),
                "{kind:?}: {secret} reached ttyd:\n{head}"
            );
        }
        // nginx replaces X-Termgate-User only; Caddy and HAProxy drop every client
        // X-Termgate-* (the handle pool reads X-Termgate-Handle).
        if kind != Kind::Nginx {
            assert!(!head.contains("hforged"), "{kind:?}: {head}");
        }
    }
}

#[test]
fn refusals_through_nginx_keep_their_status_and_ttyd_sees_no_connection() {
    refusals_keep_their_status_and_ttyd_sees_no_connection(Kind::Nginx);
}

#[test]
fn refusals_through_caddy_keep_their_status_and_ttyd_sees_no_connection() {
    refusals_keep_their_status_and_ttyd_sees_no_connection(Kind::Caddy);
}

#[test]
fn refusals_through_haproxy_keep_their_status_and_ttyd_sees_no_connection() {
    refusals_keep_their_status_and_ttyd_sees_no_connection(Kind::Haproxy);
}

fn refusals_keep_their_status_and_ttyd_sees_no_connection(kind: Kind) {
    if !kind.runs_here() {
        return;
    }
    let stack = Stack::behind(kind);
    let id = stack.create("alice");
    let container = stack.container(&id);
    let origin = stack.front.origin();
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
    assert!(
        none.header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer")),
        "{kind:?}: {none:?}"
    );
    // nginx answers its own page for the check's 401; the others control's JSON.
    if kind != Kind::Nginx {
        assert_eq!(
            none.json().unwrap_or_default()["error"]["code"],
            "unauthenticated",
            "{none}"
        );
    }
    let forged = stack
        .open(&ws, &[("Authorization", "Bearer not.a.token")])
        .expect_err("a forged token");
    assert_eq!(forged.status(), Some(401), "{forged}");
    // A browser's page navigation without a credential is sent to sign in, with the
    // terminal's path (never its query) to come back to; a script's request is not.
    let page = exchange(
        stack.front.port(),
        format!(
            "GET /s/{id}/?arg=x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Accept: text/html,application/xhtml+xml\r\n\r\n"
        )
        .as_bytes(),
        T,
    );
    assert_eq!(page.status, 302, "{kind:?}: {}", page.text);
    // nginx spells the location absolute, on its own origin.
    let to = format!("/?next=/s/{id}/");
    let location = header(&page, "location").unwrap_or_default();
    assert!(
        location == to || location == format!("{origin}{to}"),
        "{}",
        page.text
    );
    let script = exchange(
        stack.front.port(),
        format!(
            "GET /s/{id}/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Accept: text/html\r\nX-Requested-With: XMLHttpRequest\r\n\r\n"
        )
        .as_bytes(),
        T,
    );
    assert_eq!(script.status, 401, "{}", script.text);
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
        if kind == Kind::Haproxy {
            let code = match bad {
                Some("null") => "origin_null",
                Some(_) => "origin_not_allowed",
                None => "origin_missing",
            };
            assert_eq!(e.json().unwrap_or_default()["error"]["code"], code, "{e}");
        }
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

#[test]
fn an_end_a_lock_and_a_sign_out_close_the_open_terminal_through_nginx() {
    revocation_closes_open_terminals(Kind::Nginx);
}

#[test]
fn an_end_a_lock_and_a_sign_out_close_the_open_terminal_through_caddy() {
    revocation_closes_open_terminals(Kind::Caddy);
}

#[test]
fn an_end_a_lock_and_a_sign_out_close_the_open_terminal_through_haproxy() {
    revocation_closes_open_terminals(Kind::Haproxy);
}

#[test]
fn a_peer_types_through_nginx_and_is_closed_when_the_invitation_goes() {
    a_peer_types_and_is_closed_when_the_invitation_goes(Kind::Nginx);
}

#[test]
fn a_peer_types_through_caddy_and_is_closed_when_the_invitation_goes() {
    a_peer_types_and_is_closed_when_the_invitation_goes(Kind::Caddy);
}

#[test]
fn a_peer_types_through_haproxy_and_is_closed_when_the_invitation_goes() {
    a_peer_types_and_is_closed_when_the_invitation_goes(Kind::Haproxy);
}

/// A user the owner invited opens the owner's terminal through the front proxy as
/// through the gateway, ttyd is told it is the peer, and the terminal closes when the
/// owner withdraws the invitation, and when a later one lapses by itself.
fn a_peer_types_and_is_closed_when_the_invitation_goes(kind: Kind) {
    if !kind.runs_here() {
        return;
    }
    let stack = Stack::behind_with(
        kind,
        &[
            ("TERMGATE__PROFILES__STUBBORN__PEERS", "true"),
            ("TERMGATE_TEST_PEER_MIN_TTL", "1"),
        ],
    );
    let alice = stack.control.token("alice", false);
    let id = stack.control.create_with(&alice, "stubborn")["id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let owner = stack.open_as(&id, &stack.cookie("alice"));
    let (origin, ws, bob) = (
        stack.front.origin(),
        format!("/s/{id}/ws"),
        stack.cookie("bob"),
    );
    let invite = |ttl: u64| {
        let r = stack.control.call(
            "POST",
            &format!("/v1/sessions/{id}/peers"),
            Some(&alice),
            Some(serde_json::json!({ "sub": "bob", "ttl_seconds": ttl })),
        );
        assert_eq!(r.status, 201, "{}", r.text);
        r.body["expires_at"].as_u64().expect("expires_at")
    };
    let refused = stack
        .open(&ws, &[("Cookie", &bob), ("Origin", &origin)])
        .expect_err("not invited yet");
    assert_eq!(refused.status(), Some(404), "{refused}");

    invite(3600);
    let t = stack.open_as(&id, &bob);
    t.send_input(b"echo peer-$((2*21))\r").unwrap();
    owner
        .read_until("peer-42", T)
        .expect("bob's typing reaches alice's terminal");
    let token = stack.control.token("bob", false);
    let answer = stack.check(&ws, &[("Authorization", &format!("Bearer {token}"))]);
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        header(&answer, "x-termgate-user"),
        Some("peer:bob"),
        "ttyd is told who types"
    );
    let removed = stack.control.call(
        "DELETE",
        &format!("/v1/sessions/{id}/peers/bob"),
        Some(&alice),
        None,
    );
    assert_eq!(removed.status, 204, "{}", removed.text);
    closes(&t, "the withdrawn peer's terminal", &stack);
    let refused = stack
        .open(&ws, &[("Cookie", &bob), ("Origin", &origin)])
        .expect_err("no longer invited");
    assert_eq!(refused.status(), Some(404), "{refused}");

    // An invitation that lapses changes nothing in the store: the pool's watch wakes
    // for it, and not before.
    let lapses = invite(4);
    let t = stack.open_as(&id, &bob);
    t.wait_closed(Duration::from_secs(10))
        .expect("closed when the invitation lapsed");
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        at >= lapses,
        "closed at {at}, before the invitation lapsed at {lapses}"
    );
    owner.send_input(b"echo owner-$((5*5))\r").unwrap();
    owner
        .read_until("owner-25", T)
        .expect("alice's own terminal stays open");
}

#[test]
fn control_not_answering_is_a_502_through_nginx_and_open_terminals_stay_open() {
    control_not_answering_is_a_502_and_open_terminals_stay_open(Kind::Nginx);
}

#[test]
fn control_not_answering_is_a_502_through_haproxy_and_open_terminals_stay_open() {
    control_not_answering_is_a_502_and_open_terminals_stay_open(Kind::Haproxy);
}

/// Without control's answer no terminal opens (502 `terminal_unavailable`, nothing
/// reaches ttyd), and the open ones stay open.
fn control_not_answering_is_a_502_and_open_terminals_stay_open(kind: Kind) {
    if !kind.runs_here() {
        return;
    }
    let mut stack = Stack::behind(kind);
    let id = stack.create("alice");
    let cookie = stack.cookie("alice");
    let open = stack.open_as(&id, &cookie);
    let before = stack.counter.connections();
    stack.control.kill9();
    let origin = stack.front.origin();
    let e = stack
        .open(
            &format!("/s/{id}/ws"),
            &[("Cookie", &cookie), ("Origin", &origin)],
        )
        .expect_err("no check, no terminal");
    assert_eq!(e.status(), Some(502), "{kind:?}: {e}");
    assert_eq!(
        e.json().unwrap_or_default()["error"]["code"],
        "terminal_unavailable",
        "{e}"
    );
    assert_eq!(stack.counter.connections(), before, "ttyd saw the request");
    open.send_input(b"echo still-$((6*7))\r").unwrap();
    open.read_until("still-42", T)
        .expect("the open terminal stays open without control");
}

#[test]
fn haproxy_sends_a_terminal_to_no_pool_but_the_one_declared_for_the_answer() {
    if !Kind::Haproxy.runs_here() {
        return;
    }
    let stack = Stack::behind(Kind::Haproxy);
    let id = stack.create("alice");
    let token = stack.control.token("alice", false);
    // The shipped file whose one pool is another socket than the one control names.
    let elsewhere = e2e::ttyd::private_dir("tg-elsewhere.");
    let port = free_port();
    let config = Haproxy::authz_config(
        port,
        &stack.control.api,
        &elsewhere.path().join("ttyd.sock"),
        "127.0.0.1:9",
    );
    let other = Haproxy::start(&config, port);
    let before = stack.counter.connections();
    let e = Terminal::connect(
        Target::Tcp(([127, 0, 0, 1], other.port()).into()),
        &format!("/s/{id}/ws"),
        &[("Authorization", &format!("Bearer {token}"))],
    )
    .expect_err("no declared pool for the answer");
    assert_eq!(e.status(), Some(502), "{e}\n{}", other.log_text());
    assert_eq!(
        e.json().unwrap_or_default()["error"]["code"],
        "terminal_unavailable",
        "{e}"
    );
    assert_eq!(stack.counter.connections(), before, "ttyd saw the request");
    // Through the file with the pool declared, the same request opens the terminal.
    let t = stack
        .open(
            &format!("/s/{id}/ws"),
            &[("Authorization", &format!("Bearer {token}"))],
        )
        .expect("the declared pool");
    t.send_input(b"echo pool-$((6*7))\r").unwrap();
    t.read_until("pool-42", T).expect("it echoes");
    // A method other than GET is control's 405, through HAProxy as well.
    let post = exchange(
        stack.front.port(),
        format!(
            "POST /s/{id}/token HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nContent-Length: 0\r\n\r\n"
        )
        .as_bytes(),
        T,
    );
    assert_eq!(post.status, 405, "{}", post.text);
}

/// Waits for `t` to close within [`CLOSE_WITHIN`], with what it said last.
fn closes(t: &Terminal, what: &str, stack: &Stack) -> Duration {
    let took = t.wait_closed(CLOSE_WITHIN).unwrap_or_else(|e| {
        panic!(
            "{what}: {e}\nttyd:\n{}\ncontrol:\n{}",
            stack.ttyd.log_text(),
            stack.control.log_text()
        )
    });
    eprintln!("{what}: closed in {took:?}");
    took
}

fn revocation_closes_open_terminals(kind: Kind) {
    if !kind.runs_here() {
        return;
    }
    let stack = Stack::behind(kind);
    let id = stack
        .control
        .create_with(&stack.control.token("alice", false), "stubborn")["id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let container = stack.container(&id);
    // Two browsers of alice's (two sign-ins), and an admin watching her terminal.
    let (one, two) = (
        stack.control.token_for("alice", false, 3600),
        stack.control.token_for("alice", false, 3601),
    );
    let admin = stack.control.token("root-admin", true);
    let a = stack.open_as(&id, &format!("termgate_session={one}"));
    let b = stack.open_as(&id, &format!("termgate_session={two}"));
    let watching = stack.open_as(&id, &format!("termgate_session={admin}"));

    // Signing out one browser closes its terminal and leaves the other's open.
    let out = stack
        .control
        .call("DELETE", "/v1/signins/current", Some(&one), None);
    assert_eq!(out.status, 204, "{}", out.text);
    closes(&a, "signed out", &stack);
    assert!(
        a.output_so_far().contains("signed out"),
        "the terminal says why: {}",
        a.output_so_far()
    );
    b.send_input(b"echo still-$((6*7))\r").unwrap();
    b.read_until("still-42", T)
        .expect("the other browser's terminal stays open");
    assert!(!watching.is_closed(), "the admin's terminal stays open");

    // Locking alice closes her terminal, not the admin's.
    let lock = stack
        .control
        .call("POST", "/v1/users/alice/lock", Some(&admin), None);
    assert_eq!(lock.status, 204, "{}", lock.text);
    closes(&b, "locked", &stack);
    assert!(
        b.output_so_far().contains("your account was locked"),
        "{}",
        b.output_so_far()
    );
    watching.send_input(b"echo admin-$((6*7))\r").unwrap();
    watching
        .read_until("admin-42", T)
        .expect("the admin's terminal stays open");
    let unlock = stack
        .control
        .call("DELETE", "/v1/users/alice/lock", Some(&admin), None);
    assert_eq!(unlock.status, 204, "{}", unlock.text);

    // Ending the session closes every terminal on it, saying so, while its program
    // (which ignores the hang-up) still runs.
    let c = stack.open_as(&id, &format!("termgate_session={two}"));
    // The grant the pool holds for a terminal of this session, as it asks for it.
    let answer = stack.check(
        &format!("/s/{id}/ws"),
        &[("Authorization", &format!("Bearer {two}"))],
    );
    assert_eq!(answer.status, 200, "{}", answer.text);
    let handle = header(&answer, "x-termgate-handle")
        .unwrap_or_default()
        .to_owned();
    let granted = stack.ask("/v1/grant?wait=0", &[("X-Termgate-Handle", &handle)]);
    assert_eq!(granted.status, 200, "{}", granted.text);
    let grant = json_body(&granted)["grant"]
        .as_str()
        .expect("the grant")
        .to_owned();
    let live = stack.ask("/v1/grant?wait=0", &[("X-Termgate-Grant", &grant)]);
    assert_eq!(
        live.status, 200,
        "the grant holds before the end: {}",
        live.text
    );
    let end = stack
        .control
        .call("DELETE", &format!("/v1/sessions/{id}"), Some(&two), None);
    assert_eq!(end.status, 204, "{}", end.text);
    closes(&c, "ended", &stack);
    closes(&watching, "ended (admin)", &stack);
    for (t, who) in [(&c, "alice"), (&watching, "the admin")] {
        assert!(
            t.output_so_far().contains("this session was ended"),
            "{who}'s terminal says why: {}",
            t.output_so_far()
        );
    }
    // The real grant, replayed after the end, is refused.
    let replayed = stack.ask("/v1/grant?wait=0", &[("X-Termgate-Grant", &grant)]);
    assert!(
        replayed.status == 403 || replayed.status == 410,
        "a replayed grant after the end: {}",
        replayed.text
    );

    // The pool's own check refuses a grant control did not seal.
    let forged = stack.ask(
        "/v1/grant?wait=0",
        &[(
            "X-Termgate-Grant",
            &format!("g1.{container}.eyJhbGciOiJIUzI1NiJ9.e30.x"),
        )],
    );
    assert_eq!(forged.status, 403, "{}", forged.text);
    assert!(forged.text.contains("grant_invalid"), "{}", forged.text);
}

/// A websocket to the handle pool as Traefik and Envoy send it after their check: the
/// prefix stripped, the client's query left on (the pool has no `-a`), the handle and
/// user from the check's answer, no credential.
fn open_on_handle_pool(
    pool: &TtydPool,
    query: &str,
    handle: &str,
) -> Result<Terminal, e2e::term::ConnectError> {
    Terminal::connect(
        pool.target(),
        &format!("/ws{query}"),
        &[("X-Termgate-Handle", handle)],
    )
}

#[test]
fn traefik_and_envoy_checks_open_the_owners_terminal_on_the_handle_pool_and_close_it() {
    // `stubborn` ignores the hang-up: an end must close the terminal itself.
    let mut control = ControlStack::prepare(&e2e::stack::profile_ignoring_hang_up("stubborn", 30));
    let port = free_port();
    let origin = "https://term.example.com";
    control.set_env(
        "TERMGATE__GATEWAY__ALLOWED_ORIGINS",
        &format!("[\"{origin}\"]"),
    );
    let pool = TtydPool::start_handle_pool_for(&control.instance, &control.api, port);
    control.spawn(&[]);
    // Traefik and Envoy dial the handle pool themselves; nginx, the counter and the
    // recorder stand in their fields unused.
    let heads = HeadRecorder::start(&pool.target());
    let stack = Stack {
        front: Front::Nginx(Nginx::authz(
            free_port(),
            control.api.trim_start_matches("http://"),
        )),
        counter: CountingProxy::start(pool.target()),
        heads,
        ttyd: pool,
        control,
    };
    let pool = &stack.ttyd;
    // The shipped files ask exactly what is sent below, and send on what is checked.
    let traefik_file = include_str!("../../deploy/traefik/termgate.yml");
    for needle in [
        "address: \"http://127.0.0.1:7070/v1/authz\"",
        "trustForwardHeader: false",
        "- X-Termgate-Handle",
        "- X-Termgate-User",
        "Cookie: \"\"",
        "Authorization: \"\"",
        "- \"^/s/[^/]+\"",
    ] {
        assert!(traefik_file.contains(needle), "termgate.yml lacks {needle}");
    }
    let envoy_file = include_str!("../../deploy/envoy/envoy.yaml");
    for needle in [
        "path_prefix: /v1/authz",
        "{ exact: cookie }",
        "{ exact: origin }",
        "{ exact: x-termgate-handle }",
        "{ exact: location }",
        "request_headers_to_remove: [cookie, authorization]",
        "failure_mode_allow: false",
    ] {
        assert!(envoy_file.contains(needle), "envoy.yaml lacks {needle}");
    }

    let mine = stack
        .control
        .create_with(&stack.control.token("alice", false), "stubborn")["id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let theirs = stack.create("bob");
    let (my_container, their_container) = (stack.container(&mine), stack.container(&theirs));
    let cookie = stack.cookie("alice");
    let ws = format!("/s/{mine}/ws");

    // Traefik's forwardAuth: GET to the fixed address; X-Forwarded-*; the client's
    // headers but no hop-by-hop ones.
    let traefik = |uri: &str, cookie: &str, origin: &str| {
        stack.ask(
            "/v1/authz",
            &[
                ("X-Forwarded-Method", "GET"),
                ("X-Forwarded-Proto", "https"),
                ("X-Forwarded-Host", "term.example.com"),
                ("X-Forwarded-Uri", uri),
                ("X-Forwarded-For", "203.0.113.7"),
                ("Cookie", cookie),
                ("Origin", origin),
                ("Sec-Websocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-Websocket-Version", "13"),
            ],
        )
    };
    let answer = traefik(&format!("{ws}?arg={their_container}"), &cookie, origin);
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(header(&answer, "x-termgate-user"), Some("alice"));
    assert_eq!(header(&answer, "x-termgate-kind"), Some("attach"));
    let handle = header(&answer, "x-termgate-handle").unwrap_or_default();
    assert!(
        handle.len() <= 29 && handle.starts_with('h'),
        "ttyd passes at most 29 bytes of a header: {handle}"
    );
    let t = open_on_handle_pool(pool, &format!("?arg={their_container}"), handle)
        .expect("the terminal on the handle pool");
    t.send_input(b"echo host-$(hostname)-$((6*7))\r").unwrap();
    let out = t
        .read_until(&format!("host-{}-42", &my_container[..12]), T)
        .unwrap_or_else(|e| panic!("alice's own container: {e}\n{}", pool.log_text()));
    assert!(!out.contains(&their_container[..12]), "{out}");

    // A handle is used once: replayed, the pool refuses it.
    let replay = open_on_handle_pool(pool, "", handle).expect("the websocket opens");
    replay
        .wait_closed(T)
        .expect("a used handle opens no terminal");
    assert!(
        !replay.output_so_far().contains("$ "),
        "{}",
        replay.output_so_far()
    );

    // Envoy's ext_authz (HTTP service): the check at its path prefix followed by the
    // original path, with the original method, Host and the allowed headers.
    let envoy = stack.ask(
        &format!("/v1/authz{ws}?arg=evil"),
        &[
            ("Host", "term.example.com"),
            ("Cookie", &cookie),
            ("Origin", origin),
            ("Upgrade", "websocket"),
            ("Content-Length", "0"),
        ],
    );
    assert_eq!(envoy.status, 200, "{}", envoy.text);
    let handle = header(&envoy, "x-termgate-handle").unwrap_or_default();
    let e = open_on_handle_pool(pool, "", handle).expect("the Envoy-checked terminal");
    e.send_input(b"echo envoy-$((6*7))\r").unwrap();
    e.read_until("envoy-42", T).expect("it echoes");

    // Caddy passes the client's Upgrade and Connection to the check: it answers 200,
    // never 101.
    let caddy = stack.ask(
        "/v1/authz?arg=evil",
        &[
            ("X-Forwarded-Method", "GET"),
            ("X-Forwarded-Uri", &ws),
            ("Cookie", &cookie),
            ("Origin", origin),
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
        ],
    );
    assert_eq!(caddy.status, 200, "{}", caddy.text);

    // Refusals, the same for both: another user and an unknown id the same 404, no
    // credential 401, the cookie from another site 403, another method 405.
    let bob = stack.cookie("bob");
    let other = traefik(&ws, &bob, origin);
    let unknown = traefik("/s/aaaaaaaaaaaaaaaa/ws", &bob, origin);
    assert_eq!(other.status, 404, "{}", other.text);
    let body = |a: &e2e::raw::RawAnswer| a.text.split("\r\n\r\n").nth(1).map(str::to_owned);
    assert_eq!(body(&other), body(&unknown));
    assert!(!other.text.contains(&my_container[..12]));
    let envoy_other = stack.ask(
        &format!("/v1/authz{ws}"),
        &[
            ("Cookie", &bob),
            ("Origin", origin),
            ("Upgrade", "websocket"),
        ],
    );
    assert_eq!(envoy_other.status, 404, "{}", envoy_other.text);
    assert_eq!(body(&envoy_other), body(&unknown));
    assert_eq!(traefik(&ws, "", origin).status, 401);
    let envoy_none = stack.ask(&format!("/v1/authz{ws}"), &[("Upgrade", "websocket")]);
    assert_eq!(envoy_none.status, 401, "{}", envoy_none.text);
    assert_eq!(
        traefik(&ws, &cookie, "https://evil.example").status,
        403,
        "a cross-site upgrade"
    );
    let envoy_post = stack.ask_method("POST", &format!("/v1/authz{ws}"), &[("Cookie", &cookie)]);
    assert_eq!(envoy_post.status, 405, "{}", envoy_post.text);

    // A sign-out and a lock close what the handle pool opened, as through the others.
    let open_by = |token: &str| {
        let answer = traefik(&ws, &format!("termgate_session={token}"), origin);
        assert_eq!(answer.status, 200, "{}", answer.text);
        let handle = header(&answer, "x-termgate-handle").unwrap_or_default();
        let t = open_on_handle_pool(pool, "", handle).expect("a terminal on the handle pool");
        t.send_input(b"echo on-$((6*7))\r").unwrap();
        t.read_until("on-42", T).expect("it echoes");
        t
    };
    let signed_in = stack.control.token_for("alice", false, 3602);
    let s = open_by(&signed_in);
    let out = stack
        .control
        .call("DELETE", "/v1/signins/current", Some(&signed_in), None);
    assert_eq!(out.status, 204, "{}", out.text);
    closes(&s, "signed out (handle pool)", &stack);
    let l = open_by(&stack.control.token_for("alice", false, 3603));
    let admin = stack.control.token("root-admin", true);
    let lock = stack
        .control
        .call("POST", "/v1/users/alice/lock", Some(&admin), None);
    assert_eq!(lock.status, 204, "{}", lock.text);
    closes(&l, "locked (handle pool)", &stack);
    closes(&t, "locked (handle pool, Traefik)", &stack);
    closes(&e, "locked (handle pool, Envoy)", &stack);
    let unlock = stack
        .control
        .call("DELETE", "/v1/users/alice/lock", Some(&admin), None);
    assert_eq!(unlock.status, 204, "{}", unlock.text);

    // Ending the session closes the terminal on the handle pool.
    let t = open_by(&stack.control.token_for("alice", false, 3604));
    let token = stack.control.token("alice", false);
    let end = stack.control.call(
        "DELETE",
        &format!("/v1/sessions/{mine}"),
        Some(&token),
        None,
    );
    assert_eq!(end.status, 204, "{}", end.text);
    closes(&t, "ended (handle pool)", &stack);
    assert!(
        t.output_so_far().contains("this session was ended"),
        "the handle pool's terminal says why: {}",
        t.output_so_far()
    );
}

/// Everything ttyd's page shows, one line per buffer row.
const PAGE_TEXT: &str = "(() => { const b = window.term.buffer.active; const out = []; \
    for (let i = 0; i < b.length; i++) { const l = b.getLine(i); if (l) out.push(l.translateToString(true)); } \
    return out.join('\\n'); })()";

#[test]
fn a_browser_behind_caddy_is_sent_to_sign_in_comes_back_types_and_is_closed_by_its_sign_out() {
    a_browser_is_sent_to_sign_in_comes_back_types_and_is_closed_by_its_sign_out(Kind::Caddy);
}

#[test]
fn a_browser_behind_haproxy_is_sent_to_sign_in_comes_back_types_and_is_closed_by_its_sign_out() {
    a_browser_is_sent_to_sign_in_comes_back_types_and_is_closed_by_its_sign_out(Kind::Haproxy);
}

fn a_browser_is_sent_to_sign_in_comes_back_types_and_is_closed_by_its_sign_out(kind: Kind) {
    use e2e::browser::Browser;
    use e2e::stack::GatewayStack;

    if !kind.runs_here() {
        return;
    }
    // The proxy in front: terminals checked by control and carried to the plugin pool,
    // everything else (page, sign-in, API) to a gateway.
    let port = free_port();
    let site = format!("http://127.0.0.1:{port}");
    let mut control = ControlStack::prepare("");
    let ttyd = TtydPool::start_plugin_for(&control.instance, &control.api);
    let counter = CountingProxy::start(ttyd.target());
    control.set_env(
        "TERMGATE__TTYD__SOCKET",
        &counter.socket_path().to_string_lossy(),
    );
    control.set_env(
        "TERMGATE__GATEWAY__ALLOWED_ORIGINS",
        &format!("[\"{site}\"]"),
    );
    control.spawn(&[]);
    let api = control.api.trim_start_matches("http://").to_owned();
    let mut stack = GatewayStack::assemble(control, ttyd, counter);
    // The page's gateway takes the requests Caddy passes on from its site.
    let origins = format!("[\"{site}\"]");
    let n = stack.spawn_gateway(&[("TERMGATE__GATEWAY__ALLOWED_ORIGINS", &origins)]);
    let page = stack.url(n, "").trim_start_matches("http://").to_owned();
    let front = match kind {
        Kind::Caddy => Front::Caddy(Caddy::start(port, &api, &page)),
        Kind::Haproxy => Front::Haproxy(Haproxy::authz(
            port,
            &format!("http://{api}"),
            stack.counter.socket_path(),
            &page,
        )),
        Kind::Nginx => unreachable!("the nginx snippet serves terminals only"),
    };
    let token = stack.control.token("alice", false);
    let id = stack.control.create(&token)["id"]
        .as_str()
        .expect("id")
        .to_owned();

    let mut b = Browser::launch().unwrap_or_else(|e| panic!("cannot start the browser: {e:#}"));
    let ok = |step: &str, r: anyhow::Result<serde_json::Value>| {
        r.unwrap_or_else(|e| panic!("{step}: {e:#}\n{kind:?}:\n{}", front.log_text()))
    };
    // No cookie yet: the terminal's address sends the browser to sign in.
    b.navigate(&format!("{site}/s/{id}/"))
        .unwrap_or_else(|e| panic!("open the terminal: {e:#}"));
    ok(
        "sent to sign in",
        b.wait_js(
            &format!(
                "location.pathname === '/' && location.search === '?next=/s/{id}/' \
                 && !document.getElementById('sign-in').hidden"
            ),
            T,
            "the sign-in form with the way back",
        ),
    );
    // Signing in (by link) brings it back to the terminal, which opens through the proxy.
    b.navigate(&format!("{site}/?next=/s/{id}/#token={token}"))
        .unwrap_or_else(|e| panic!("sign in: {e:#}"));
    ok(
        "back at the terminal",
        b.wait_js(
            &format!("location.pathname === '/s/{id}/' && document.title === 'termgate'"),
            T,
            "ttyd's page with its websocket open",
        ),
    );
    ok("focus", b.eval("window.term.focus()"));
    b.insert_text("echo typed-$((6*7))").expect("type");
    b.press_enter().expect("Enter");
    ok(
        "the shell answers",
        b.wait_js(
            &format!(
                "(() => {{ const s = {PAGE_TEXT}; return s.includes('typed-42') ? s : ''; }})()"
            ),
            T,
            "typed-42 in the terminal",
        ),
    );
    // Signing out (through the page's own call) closes the terminal and says why.
    ok(
        "sign out",
        b.eval(&format!(
            "fetch('{site}/auth/session', {{method: 'DELETE'}}).then((r) => r.status)"
        )),
    );
    ok(
        "the terminal says it was signed out",
        b.wait_js(
            &format!(
                "(() => {{ const s = {PAGE_TEXT}; return s.includes('termgate: signed out'); }})()"
            ),
            CLOSE_WITHIN + Duration::from_secs(1),
            "termgate: signed out in the terminal",
        ),
    );
}

/// A unix socket hop in front of ttyd that forwards every connection byte for byte
/// and keeps the head (request line and headers) of every request on it, up to a
/// websocket upgrade: what ttyd itself receives.
struct HeadRecorder {
    _dir: tempfile::TempDir,
    path: PathBuf,
    heads: Arc<Mutex<Vec<String>>>,
    open: Arc<Mutex<Vec<e2e::term::Stream>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl HeadRecorder {
    /// Listens on `<fresh 0700 dir>/heads.sock`, forwarding to `target`.
    fn start(target: &Target) -> HeadRecorder {
        let dir = e2e::ttyd::private_dir("tg-heads.");
        let path = dir.path().join("heads.sock");
        let listener = UnixListener::bind(&path).expect("bind the head recorder");
        let heads = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (all, sockets, target, stopped) = (
            Arc::clone(&heads),
            Arc::clone(&open),
            target.clone(),
            Arc::clone(&stop),
        );
        std::thread::Builder::new()
            .name("head-recorder".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(upstream) = target.connect(T) else {
                        continue;
                    };
                    let client = e2e::term::Stream::Unix(client);
                    if let (Ok(c), Ok(u)) = (client.try_clone(), upstream.try_clone()) {
                        sockets.lock().expect("open sockets").extend([c, u]);
                    }
                    HeadRecorder::forward(client, upstream, Arc::clone(&all));
                }
            })
            .expect("spawn the head recorder");
        HeadRecorder {
            _dir: dir,
            path,
            heads,
            open,
            stop,
        }
    }

    /// Copies both ways on threads of their own; an end in either direction ends both.
    fn forward(
        client: e2e::term::Stream,
        upstream: e2e::term::Stream,
        heads: Arc<Mutex<Vec<String>>>,
    ) {
        let (Ok(mut from_client), Ok(mut to_client)) = (client.try_clone(), client.try_clone())
        else {
            return;
        };
        let (Ok(mut to_upstream), Ok(mut from_upstream)) =
            (upstream.try_clone(), upstream.try_clone())
        else {
            return;
        };
        std::thread::spawn(move || {
            let mut pending: Vec<u8> = Vec::new();
            let mut scanning = true;
            let mut buf = [0u8; 16 * 1024];
            loop {
                let n = match from_client.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if scanning {
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&pending[..end]).into_owned();
                        pending.drain(..end + 4);
                        let lower = head.to_ascii_lowercase();
                        // ttyd is asked for GETs without bodies; after an upgrade, or a
                        // body, the rest is no longer request heads.
                        if lower.contains("\nupgrade:")
                            || lower.contains("\ncontent-length:")
                            || lower.contains("\ntransfer-encoding:")
                        {
                            scanning = false;
                            pending.clear();
                        }
                        heads.lock().expect("heads").push(head);
                        if !scanning {
                            break;
                        }
                    }
                }
                if to_upstream.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            client.shutdown();
            upstream.shutdown();
        });
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from_upstream, &mut to_client);
            from_upstream.shutdown();
            to_client.shutdown();
        });
    }

    /// Where the counting proxy forwards to.
    fn target(&self) -> Target {
        Target::Unix(self.path.clone())
    }

    /// Every request head ttyd received so far, in order.
    fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("heads").clone()
    }
}

impl Drop for HeadRecorder {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self.open.lock().expect("open sockets").drain(..) {
            s.shutdown();
        }
        // Wakes the acceptor, which then stops.
        let _ = UnixStream::connect(Path::new(&self.path));
    }
}

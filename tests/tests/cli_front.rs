//! The `termgate` command-line client, the real binary, behind the shipped front
//! proxies (docs/front-proxies.md "Behind a front proxy"): a real nginx running
//! `deploy/nginx/termgate-authz.conf` and a real Caddy running `deploy/caddy/Caddyfile`,
//! in front of the real ttyd pool that closes what control revokes, every terminal
//! checked by control's `GET /v1/authz`. nginx passes only terminals: the client signs
//! in with the token itself, attaches by id (`/s/<id>/ws` with the token as a bearer
//! header), types, follows the window, detaches, and reads the reason the pool prints
//! when the session is ended. Caddy passes everything else to a gateway: the client's
//! API calls go there, its terminal through Caddy's check. `attach` runs in tmux.

use std::process::Command;
use std::time::Duration;

use e2e::caddy::Caddy;
use e2e::cli::{Pane, User};
use e2e::nginx::Nginx;
use e2e::stack::{free_port, profile_ignoring_hang_up, wait_for, ControlStack, GatewayStack};
use e2e::ttyd::{CountingProxy, TtydPool};
use serde_json::Value;

const T: Duration = Duration::from_secs(20);

/// Control, the front proxy's ttyd pool (`TERMGATE_CONTROL` set: it closes what
/// control revokes) behind a connection-counting proxy, and nginx with the shipped
/// snippet. No gateway: nginx passes terminals and nothing else.
struct BehindNginx {
    // Declared first: nginx stops before the pool and control go away.
    nginx: Nginx,
    counter: CountingProxy,
    _ttyd: TtydPool,
    control: ControlStack,
}

impl BehindNginx {
    fn start() -> BehindNginx {
        // `stubborn`'s program ignores the hang-up an end sends: a terminal that closes
        // at an end was closed by the end, not by its program exiting.
        let mut control = ControlStack::prepare(&profile_ignoring_hang_up("stubborn", 30));
        let ttyd = TtydPool::start_plugin_for(&control.instance, &control.api);
        let counter = CountingProxy::start(ttyd.target());
        let port = free_port();
        control.set_env(
            "TERMGATE__TTYD__SOCKET",
            &counter.socket_path().to_string_lossy(),
        );
        control.set_env(
            "TERMGATE__GATEWAY__ALLOWED_ORIGINS",
            &format!("[\"http://127.0.0.1:{port}\"]"),
        );
        control.spawn(&[]);
        let api = control.api.trim_start_matches("http://").to_owned();
        BehindNginx {
            nginx: Nginx::authz(port, &api),
            counter,
            _ttyd: ttyd,
            control,
        }
    }

    /// A running session of `profile` for `sub`, made through control's API.
    fn create(&self, sub: &str, profile: &str) -> String {
        let token = self.control.token(sub, false);
        let id = self.control.create_with(&token, profile)["id"]
            .as_str()
            .expect("session id")
            .to_owned();
        wait_running(&self.control, sub, &id);
        id
    }

    /// A user whose client is signed in at nginx, with the token itself.
    fn user(&self, sub: &str) -> User {
        let user = User::new(self.nginx.origin());
        let r = user.login(&self.control.token(sub, false));
        assert!(
            r.stdout.contains(&format!("as {sub}")) && r.stdout.contains("front proxy"),
            "{r:?}"
        );
        user
    }
}

fn state(control: &ControlStack, sub: &str, id: &str) -> String {
    let s = control.session(&control.token(sub, false), id);
    s["state"].as_str().unwrap_or_default().to_owned()
}

fn wait_running(control: &ControlStack, sub: &str, id: &str) {
    wait_for(&format!("session {id} running"), T, || {
        (state(control, sub, id) == "running").then_some(())
    });
}

/// Waits until one more terminal than `before` reached ttyd: the client is attached.
fn wait_attached(counter: &CountingProxy, before: usize) {
    wait_for("the client's terminal to reach ttyd", T, || {
        (counter.connections() > before).then_some(())
    });
}

#[test]
fn through_nginx_attach_by_id_types_follows_the_window_and_detaches_and_a_name_is_refused() {
    let stack = BehindNginx::start();
    let id = stack.create("alice", "default");
    let token = stack.control.token("alice", false);
    let alice = User::new(stack.nginx.origin());
    let r = alice.run_with(&["login", &alice.gateway, "--token-stdin"], &token);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(
        r.stdout.contains("as alice") && r.stdout.contains("front proxy"),
        "{r:?}"
    );
    // nginx has no sign-in to make one of its own: the token itself is kept.
    let kept: Value = serde_json::from_slice(&std::fs::read(alice.credentials_file()).unwrap())
        .expect("credentials");
    let entry = &kept["gateways"][alice.gateway.as_str()];
    assert_eq!(entry["token"], token.as_str(), "{kept}");
    assert_eq!(entry["sub"], "alice", "{kept}");
    // Nothing but terminals there: listing says so, and what works instead.
    let r = alice.run(&["ls"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(
        r.stderr.contains("has no termgate API") && r.stderr.contains("attach <id>"),
        "{r:?}"
    );
    // A name needs the gateway's list; nothing reaches ttyd.
    let before = stack.counter.connections();
    let r = alice.run(&["attach", "build"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(
        r.stderr.contains("name the session by its id") && r.stderr.contains("\"build\""),
        "{r:?}"
    );
    assert_eq!(r.stderr.trim_end().lines().count(), 1, "{r:?}");
    assert_eq!(stack.counter.connections(), before);

    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    let opened = stack.counter.connections();
    pane.attach(1, &id);
    wait_attached(&stack.counter, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    // The session's terminal is the pane's size, and follows it.
    let (rows, columns) = pane.size();
    pane.ask_until("stty size", &format!("{rows} {columns}"));
    pane.tmux(&["resize-window", "-t", "t", "-x", "90", "-y", "24"]);
    let resized = pane.size();
    assert_ne!(resized, (rows, columns), "tmux resized the window");
    pane.ask_until("stty size", &format!("{} {}", resized.0, resized.1));
    pane.type_line("MARK=m$((1000+234))");
    pane.ask_until("echo set-$((2+3))", "set-5");
    pane.wait_prompt();
    pane.tmux(&["send-keys", "-t", "t", "C-\\", "C-\\"]);
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "0", "{err}");
    assert!(err.contains("detached"), "{err}");
    assert_eq!(state(&stack.control, "alice", &id), "running");

    // Back in: the same shell. SIGTERM gives the terminal back and leaves it running.
    let opened = stack.counter.connections();
    pane.attach(2, &id);
    wait_attached(&stack.counter, opened);
    pane.ask_until("echo mark=$MARK", "mark=m1234");
    let pid = pane.foreground_pid();
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (status, err) = pane.attach_ended(2);
    assert_eq!(status, "143", "{err}");
    assert_eq!(state(&stack.control, "alice", &id), "running");

    // Nothing to revoke at nginx: the token is forgotten here, and said to live on.
    let r = alice.run(&["logout"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(r.stdout.contains("stays valid"), "{r:?}");
    assert!(!alice.credentials_file().exists());
}

#[test]
fn through_nginx_another_users_session_is_not_found_as_an_unknown_one_is() {
    let stack = BehindNginx::start();
    let bobs = stack.create("bob", "default");
    let unknown = "aaaaaaaaaaaaaaaa";
    assert_ne!(bobs, unknown);
    let alice = stack.user("alice");
    let before = stack.counter.connections();
    let theirs = alice.run(&["attach", &bobs]);
    let nothing = alice.run(&["attach", unknown]);
    assert_eq!(theirs.status, 4, "{theirs:?}");
    assert_eq!(nothing.status, 4, "{nothing:?}");
    assert_eq!(theirs.stderr, format!("termgate: no session \"{bobs}\"\n"));
    assert_eq!(theirs.stderr.replace(&bobs, unknown), nothing.stderr);
    assert_eq!(stack.counter.connections(), before, "nothing reached ttyd");
    assert_eq!(state(&stack.control, "bob", &bobs), "running");

    // A token control does not take is refused at sign-in, as at a gateway.
    let carol = User::new(stack.nginx.origin());
    let r = carol.run_with(&["login", &carol.gateway, "--token-stdin"], "not.a.token");
    assert_eq!(r.status, 3, "{r:?}");
    assert!(r.stderr.contains("refused this token"), "{r:?}");
    assert!(!carol.credentials_file().exists());
}

#[test]
fn through_nginx_ending_the_session_closes_attach_with_the_reason_and_status_5() {
    let stack = BehindNginx::start();
    let id = stack.create("alice", "stubborn");
    let alice = stack.user("alice");
    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    let opened = stack.counter.connections();
    pane.attach(1, &id);
    wait_attached(&stack.counter, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    let token = stack.control.token("alice", false);
    let end = stack
        .control
        .call("DELETE", &format!("/v1/sessions/{id}"), Some(&token), None);
    assert!(matches!(end.status, 200 | 204), "{}", end.text);
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "5", "{err}");
    assert_eq!(err.trim(), "termgate: this session was ended");
}

#[test]
fn through_caddy_the_api_is_the_gateways_and_the_terminal_caddys_checked_one() {
    // Caddy in front: terminals checked by control and carried to the front proxy's
    // pool, everything else (sign-in, API) to a gateway.
    let port = free_port();
    let site = format!("http://127.0.0.1:{port}");
    let mut control = ControlStack::prepare(&profile_ignoring_hang_up("stubborn", 30));
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
    let origins = format!("[\"{site}\"]");
    let n = stack.spawn_gateway(&[("TERMGATE__GATEWAY__ALLOWED_ORIGINS", &origins)]);
    let page = stack.url(n, "").trim_start_matches("http://").to_owned();
    let caddy = Caddy::start(port, &api, &page);

    // A sign-in of its own, made by the gateway behind Caddy.
    let alice = User::new(site.clone());
    let r = alice.login(&stack.control.token("alice", false));
    assert!(!r.stdout.contains("front proxy"), "{r:?}");
    let made = alice.json(&["new", "--profile", "stubborn", "--name", "build", "--json"]);
    let id = made["id"].as_str().expect("an id").to_owned();
    wait_running(&stack.control, "alice", &id);
    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    // By name: the gateway's list finds it; Caddy's check opens its terminal.
    let opened = stack.counter.connections();
    pane.attach(1, "build");
    wait_attached(&stack.counter, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    let audit = stack.control.log_text();
    assert!(
        audit
            .lines()
            .any(|l| l.contains("authz") && l.contains(&id) && l.contains("allow")),
        "control's check allowed the terminal:\n{audit}\ncaddy:\n{}",
        caddy.log_text()
    );
    // Ended through the gateway's API; the pool closes the terminal and says why.
    let r = alice.run(&["end", "build"]);
    assert_eq!(r.status, 0, "{r:?}");
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "5", "{err}");
    assert_eq!(err.trim(), "termgate: this session was ended");
}

//! Targets: ttyds that a team already runs, started with no termgate flag, fronted by
//! the real gateway and control. Each variant a team would run — plain, `-c user:pass`,
//! `-H X-Remote-User`, on a unix socket — is opened by an allowed user who types and
//! reads the answer.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use e2e::stack::{free_port, http, Answer, GatewayStack};
use e2e::ttyd::{private_dir, CountingProxy, TtydPool};
use e2e::upstream::RecordingUpstream;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(15);

/// Registers a target through the gateway's `/api/targets` as an admin.
fn register(stack: &GatewayStack, body: Value) -> Answer {
    let admin = stack.control.token("root", true);
    http(
        "POST",
        &stack.url(0, "/api/targets"),
        Some(&admin),
        Some(&body),
    )
    .unwrap()
}

fn register_ok(stack: &GatewayStack, body: Value) -> String {
    let a = register(stack, body);
    assert_eq!(a.status, 201, "register: {}", a.text);
    assert_eq!(a.body["kind"], "external");
    a.body["id"].as_str().unwrap().to_owned()
}

fn tcp_upstream(ttyd: &TtydPool) -> String {
    format!("http://127.0.0.1:{}", ttyd.port().unwrap())
}

/// The environment that makes `dir` the credentials directory of registered targets,
/// for control and the gateways.
fn credentials_dir(dir: &tempfile::TempDir) -> [(&'static str, &str); 1] {
    [(
        "TERMGATE__GATEWAY__TARGET_CREDENTIALS_DIR",
        dir.path().to_str().expect("a UTF-8 path"),
    )]
}

/// Opens the target as `cookie`, types, and reads the shell's answer.
fn type_and_read(stack: &GatewayStack, id: &str, cookie: &str) -> e2e::term::Terminal {
    let t = stack
        .open_as(0, id, cookie)
        .unwrap_or_else(|e| panic!("open target {id}: {e:?}"));
    t.send_input(b"echo tg-$((6*7))\r").unwrap();
    t.read_until("tg-42", T)
        .unwrap_or_else(|e| panic!("target {id} did not answer: {e}"));
    t
}

/// The ids a user's session list shows.
fn listed(stack: &GatewayStack, token: &str) -> Vec<String> {
    let a = http("GET", &stack.url(0, "/api/sessions"), Some(token), None).unwrap();
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Sends one raw request head to the gateway; returns the status line's code.
fn raw_get(port: u16, head: &str) -> u16 {
    let mut s = e2e::raw::connect(port).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut buf = vec![0u8; 512];
    let n = s.read(&mut buf).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn existing_ttyds_of_every_kind_open_for_the_users_and_roles_they_allow() {
    let plain = TtydPool::start_plain(false, &[]);
    // ttyd -H X-Remote-User: the gateway sets it to the sub.
    let header = TtydPool::start_plain(false, &["-H", "X-Remote-User"]);
    // On a unix socket, allowed by role.
    let unix = TtydPool::start_plain(true, &[]);
    let unix_upstream = format!("unix:{}", unix.socket_path().unwrap().display());
    // The header and unix kinds are registered both ways: in the configuration and
    // through the API.
    let cred_dir = private_dir("tg-cred.");
    let stack = GatewayStack::start_with_env(
        &format!(
            "[[targets]]\nname = \"plain\"\nupstream = \"{}\"\nusers = [\"alice\"]\n\
             [[targets]]\nname = \"header-configured\"\nupstream = \"{}\"\nusers = [\"alice\"]\n\
             credential = {{ header = \"X-Remote-User\" }}\n\
             [[targets]]\nname = \"socket-configured\"\nupstream = \"{unix_upstream}\"\n\
             roles = [\"ops\"]\n",
            tcp_upstream(&plain),
            tcp_upstream(&header),
        ),
        &credentials_dir(&cred_dir),
    );

    // ttyd -c user:pass, its credential in a file the gateway reads, in the directory
    // such files of registered targets must be in.
    let secret = "s3cret-pass";
    let cred = cred_dir.path().join("ttyd.cred");
    std::fs::write(&cred, format!("user:{secret}\n")).unwrap();
    let basic = TtydPool::start_plain(false, &["-c", &format!("user:{secret}")]);
    let basic_id = register_ok(
        &stack,
        json!({"name": "basic", "upstream": tcp_upstream(&basic), "users": ["alice"],
               "credential": {"basic_file": cred.to_str().unwrap()}}),
    );
    let header_id = register_ok(
        &stack,
        json!({"name": "header", "upstream": tcp_upstream(&header), "users": ["alice"],
               "credential": {"header": "X-Remote-User"}}),
    );
    let unix_id = register_ok(
        &stack,
        json!({"name": "on-a-socket", "upstream": unix_upstream, "roles": ["ops"]}),
    );

    let admin = stack.control.token("root", true);
    let all = http("GET", &stack.url(0, "/api/targets"), Some(&admin), None).unwrap();
    assert_eq!(all.status, 200, "{}", all.text);
    let configured = |name: &str| {
        all.body["targets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("the configured target {name} is listed"))
    };
    let plain_id = configured("plain");
    let header_configured = configured("header-configured");
    let unix_configured = configured("socket-configured");
    assert_eq!(all.body["targets"].as_array().unwrap().len(), 6);
    assert!(
        !all.text.contains(secret),
        "the credential is a file reference, never its content"
    );

    let alice_token = stack.control.token("alice", false);
    let alice = stack.sign_in("alice");
    let mine = listed(&stack, &alice_token);
    let kinds = http(
        "GET",
        &stack.url(0, "/api/sessions"),
        Some(&alice_token),
        None,
    )
    .unwrap();
    for s in kinds.body["sessions"].as_array().unwrap() {
        assert_eq!(s["kind"], "external", "a target is listed as external: {s}");
    }
    for id in [&plain_id, &basic_id, &header_id, &header_configured] {
        assert!(mine.contains(id), "alice's list lacks {id}: {mine:?}");
        type_and_read(&stack, id, &alice);
    }
    assert!(
        !mine.contains(&unix_id) && !mine.contains(&unix_configured),
        "alice has no role ops"
    );

    let olga_token = stack.control.token_with("olga", vec!["ops".into()], 3600);
    let olga = stack.sign_in_with(0, &olga_token);
    let mut hers = listed(&stack, &olga_token);
    hers.sort();
    let mut expected = vec![unix_id.clone(), unix_configured.clone()];
    expected.sort();
    assert_eq!(hers, expected);
    type_and_read(&stack, &unix_id, &olga);
    type_and_read(&stack, &unix_configured, &olga);

    // The basic credential reaches ttyd (it answered above) and never the browser:
    // the token endpoint ttyd would fill with it answers empty.
    let token = http(
        "GET",
        &stack.url(0, &format!("/s/{basic_id}/token")),
        Some(&alice_token),
        None,
    )
    .unwrap();
    assert_eq!(
        (token.status, token.body["token"].as_str()),
        (200, Some(""))
    );
    let page = http(
        "GET",
        &stack.url(0, &format!("/s/{basic_id}/")),
        Some(&alice_token),
        None,
    )
    .unwrap();
    assert_eq!(page.status, 200);
    assert!(!page.text.contains(secret) && !page.text.contains("dXNlcjpzM2NyZXQtcGFzcw"));
}

#[test]
fn non_allowed_and_unknown_get_the_same_404_and_the_target_sees_no_connection() {
    let stack = GatewayStack::start("");
    let ttyd = TtydPool::start_plain(false, &[]);
    let counter = CountingProxy::start(ttyd.target());
    let id = register_ok(
        &stack,
        json!({"name": "counted",
               "upstream": format!("unix:{}", counter.socket_path().display()),
               "users": ["alice"]}),
    );
    let bob = stack.sign_in("bob");
    let denied = stack.open_as(0, &id, &bob).expect_err("bob is not allowed");
    let unknown = stack
        .open_as(0, "aaaaaaaaaaaaaaaa", &bob)
        .expect_err("unknown id");
    assert_eq!(denied.status(), Some(404));
    assert_eq!(
        denied.body(),
        unknown.body(),
        "not allowed and unknown look the same"
    );
    let bob_token = stack.control.token("bob", false);
    for part in ["", "token"] {
        let a = http(
            "GET",
            &stack.url(0, &format!("/s/{id}/{part}")),
            Some(&bob_token),
            None,
        )
        .unwrap();
        assert_eq!(a.status, 404, "/s/<id>/{part}");
    }
    let read = http(
        "GET",
        &stack.url(0, &format!("/api/sessions/{id}")),
        Some(&bob_token),
        None,
    )
    .unwrap();
    assert_eq!(read.status, 404);
    assert!(!listed(&stack, &bob_token).contains(&id));

    // The allowed user, without a credential or from another site: the same 401 and
    // 403 as a container session.
    let alice = stack.sign_in("alice");
    let ws = format!("/s/{id}/ws");
    let anonymous = stack
        .open(0, &ws, &[("Origin", &stack.origin(0))])
        .expect_err("no credential");
    assert_eq!(anonymous.status(), Some(401));
    let cross_site = stack
        .open(
            0,
            &ws,
            &[("Cookie", &alice), ("Origin", "https://evil.example")],
        )
        .expect_err("another site");
    assert_eq!(cross_site.status(), Some(403));
    assert_eq!(counter.connections(), 0, "the target saw a connection");

    // The positive control: the allowed user reaches it, through the counter.
    type_and_read(&stack, &id, &alice);
    assert!(counter.connections() > 0);
}

#[test]
fn client_identity_headers_and_args_never_reach_a_target() {
    let cred_dir = private_dir("tg-cred.");
    let stack = GatewayStack::start_with_env("", &credentials_dir(&cred_dir));
    let by_header = RecordingUpstream::unix();
    let header_id = register_ok(
        &stack,
        json!({"name": "recorded-header",
               "upstream": format!("unix:{}", by_header.socket_path().unwrap().display()),
               "users": ["alice"], "credential": {"header": "X-Remote-User"}}),
    );
    let by_basic = RecordingUpstream::unix();
    let cred = cred_dir.path().join("cred");
    std::fs::write(&cred, "svc:pw\n").unwrap();
    let basic_id = register_ok(
        &stack,
        json!({"name": "recorded-basic",
               "upstream": format!("unix:{}", by_basic.socket_path().unwrap().display()),
               "users": ["alice"], "credential": {"basic_file": cred.to_str().unwrap()}}),
    );
    let token = stack.control.token("alice", false);
    let port = stack.gw().port;
    for id in [&header_id, &basic_id] {
        let status = raw_get(
            port,
            &format!(
                "GET /s/{id}/?arg=evil HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
                 Cookie: termgate_session={token}; other=1\r\nX-Remote-User: mallory\r\n\
                 X-Termgate-User: mallory\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(status, 200, "target {id}");
        // The websocket's upgrade carries the same claims, and loses them the same way.
        let status = raw_get(
            port,
            &format!(
                "GET /s/{id}/ws?arg=evil HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\n\
                 Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: tty\r\n\
                 Cookie: termgate_session={token}; other=1\r\nX-Remote-User: mallory\r\n\
                 Remote-User: mallory\r\nX-Termgate-User: mallory\r\n\r\n",
                origin = stack.origin(0)
            ),
        );
        assert_eq!(status, 101, "target {id}'s websocket");
    }
    let seen = by_header.requests();
    assert_eq!(seen.len(), 2);
    for r in &seen {
        let expected = if r.is_upgrade() { "/ws" } else { "/" };
        assert_eq!(r.target, expected, "no client query reaches a target");
        assert_eq!(r.header_all("x-remote-user"), vec!["alice"]);
        assert_eq!(r.header_all("x-termgate-user"), vec!["alice"]);
        assert!(r.header("authorization").is_none() && r.header("cookie").is_none());
        assert!(r.header("remote-user").is_none());
    }
    assert!(seen.iter().any(|r| r.is_upgrade()));
    let seen = by_basic.requests();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().any(|r| r.is_upgrade()));
    for r in &seen {
        assert_eq!(r.header_all("authorization"), vec!["Basic c3ZjOnB3"]);
        assert!(r.header("cookie").is_none());
        // Only a target that asked for a user header gets one, and never the client's.
        assert!(r.header("x-remote-user").is_none() && r.header("remote-user").is_none());
        assert_eq!(r.header_all("x-termgate-user"), vec!["alice"]);
        assert!(
            !r.headers.iter().any(|(_, v)| v.contains(&token)),
            "the user's token reached the target"
        );
    }
}

#[test]
fn a_registered_targets_credential_file_is_confined_to_the_credentials_directory() {
    let creds = private_dir("tg-cred.");
    let elsewhere = private_dir("tg-other.");
    let inside = creds.path().join("svc.cred");
    std::fs::write(&inside, "svc:pw\n").unwrap();
    let outside = elsewhere.path().join("svc.cred");
    std::fs::write(&outside, "svc:outside\n").unwrap();
    let link = creds.path().join("link.cred");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    // The upstream the registering admin chose, which sees what the gateway sends.
    let upstream = RecordingUpstream::unix();
    let body = |file: &str| {
        json!({"name": "svc", "upstream": format!("unix:{}", upstream.socket_path().unwrap().display()),
               "users": ["alice"], "credential": {"basic_file": file}})
    };
    let refused = |stack: &GatewayStack, file: &str, why: &str| {
        let a = register(stack, body(file));
        let message = a.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            a.status == 400 && message.contains("credential.basic_file") && message.contains(why),
            "{file}: {} {}",
            a.status,
            a.text
        );
    };

    // Without the directory, a registered target has no file at all.
    let unset = GatewayStack::start("");
    refused(&unset, &path(&inside), "gateway.target_credentials_dir");
    refused(
        &unset,
        "/proc/self/environ",
        "gateway.target_credentials_dir",
    );
    drop(unset);

    let stack = GatewayStack::start_with_env("", &credentials_dir(&creds));
    refused(&stack, "/proc/self/environ", "/proc");
    refused(
        &stack,
        &path(&outside),
        "outside gateway.target_credentials_dir",
    );
    refused(
        &stack,
        &path(&link),
        "outside gateway.target_credentials_dir",
    );
    let dotted = format!(
        "{}/../{}/svc.cred",
        path(creds.path()),
        elsewhere.path().file_name().unwrap().to_str().unwrap()
    );
    refused(&stack, &dotted, "outside gateway.target_credentials_dir");
    assert!(upstream.requests().is_empty());

    // A file inside is registered and sent.
    let id = register_ok(&stack, body(&path(&inside)));
    let token = stack.control.token("alice", false);
    let page = format!(
        "GET /s/{id}/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw_get(stack.gw().port, &page), 200);
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header_all("authorization"), vec!["Basic c3ZjOnB3"]);

    // Swapped afterwards for a link out of the directory: the gateway, which resolves
    // the file at each read, sends nothing.
    std::fs::remove_file(&inside).unwrap();
    std::os::unix::fs::symlink(&outside, &inside).unwrap();
    assert_eq!(raw_get(stack.gw().port, &page), 502);
    assert_eq!(
        upstream.requests().len(),
        1,
        "nothing more reached the upstream"
    );
    assert!(
        stack
            .gw()
            .log_text()
            .contains("outside gateway.target_credentials_dir"),
        "the gateway's log says why"
    );
}

#[test]
fn deleting_a_target_or_removing_a_user_closes_live_terminals_within_two_seconds() {
    let stack = GatewayStack::start("");
    let ttyd = TtydPool::start_plain(false, &[]);
    let id = register_ok(
        &stack,
        json!({"name": "shared", "upstream": tcp_upstream(&ttyd), "users": ["alice", "bob"]}),
    );
    let alice = type_and_read(&stack, &id, &stack.sign_in("alice"));
    let bob_cookie = stack.sign_in("bob");
    let bob = type_and_read(&stack, &id, &bob_cookie);

    let admin = stack.control.token("root", true);
    // Two seconds from each change's request to the moment its terminal closed (not
    // to when the test looked).
    let within = |t: &e2e::term::Terminal, since: Instant, what: &str| {
        t.wait_closed(T)
            .unwrap_or_else(|e| panic!("{what}: the terminal was not closed: {e}"));
        let took = t
            .closed_at()
            .expect("closed")
            .saturating_duration_since(since);
        eprintln!("{what}: terminal closed after {took:?}");
        assert!(
            took <= Duration::from_secs(2),
            "{what}: closed after {took:?}"
        );
    };
    let asked = Instant::now();
    let patched = http(
        "PATCH",
        &stack.url(0, &format!("/api/targets/{id}")),
        Some(&admin),
        Some(&json!({"users": ["bob"]})),
    )
    .unwrap();
    assert_eq!(patched.status, 200, "{}", patched.text);
    within(&alice, asked, "alice lost access");
    assert!(alice.close_reason().unwrap_or_default().contains("access"));
    bob.send_input(b"echo still-$((1+1))\r").unwrap();
    bob.read_until("still-2", T).expect("bob is still allowed");

    let asked = Instant::now();
    let deleted = http(
        "DELETE",
        &stack.url(0, &format!("/api/targets/{id}")),
        Some(&admin),
        None,
    )
    .unwrap();
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    within(&bob, asked, "the target was deleted");
    let again = stack.open_as(0, &id, &bob_cookie).expect_err("deleted");
    assert_eq!(again.status(), Some(404));
}

#[test]
fn bad_target_definitions_are_refused_naming_the_field_and_a_silent_upstream_is_a_502() {
    let stack = GatewayStack::start("");
    let alice = stack.control.token("alice", false);
    let body = json!({"name": "x", "upstream": "http://127.0.0.1:1", "users": ["alice"]});
    let a = http(
        "POST",
        &stack.url(0, "/api/targets"),
        Some(&alice),
        Some(&body),
    )
    .unwrap();
    assert_eq!(
        (a.status, a.body["error"]["code"].as_str()),
        (403, Some("admin_required"))
    );

    for (body, field) in [
        (
            json!({"name": "x", "upstream": "ftp://h:1", "users": ["alice"]}),
            "upstream",
        ),
        (
            json!({"name": "x", "upstream": "http://h:1/../etc", "users": ["alice"]}),
            "upstream",
        ),
        (
            json!({"name": "Bad Name", "upstream": "http://h:1", "users": ["alice"]}),
            "name",
        ),
        (
            json!({"name": "x", "upstream": "http://h:1", "users": []}),
            "users",
        ),
        (
            json!({"name": "x", "upstream": "http://h:1", "users": ["a b"]}),
            "users[0]",
        ),
        (
            json!({"name": "x", "upstream": "http://h:1", "users": ["alice"],
                "credential": {"basic_file": "/nonexistent/ttyd.cred"}}),
            "credential.basic_file",
        ),
        (
            json!({"name": "x", "upstream": "http://h:1", "users": ["alice"],
                "credential": {"header": "Cookie"}}),
            "credential.header",
        ),
        (
            json!({"name": "x", "upstream": "http://h:1", "users": ["alice"],
                "credential": {"password": "hunter2"}}),
            "password",
        ),
        (
            json!({"name": "x", "upstream": "http://h:1", "users": ["alice"], "owner": "me"}),
            "owner",
        ),
    ] {
        let a = register(&stack, body.clone());
        assert_eq!(a.status, 400, "{body}: {}", a.text);
        let message = a.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(field),
            "{body}: the message {message:?} does not name {field}"
        );
    }
    register_ok(
        &stack,
        json!({"name": "dup", "upstream": "http://h:1", "users": ["alice"]}),
    );
    let dup = register(
        &stack,
        json!({"name": "dup", "upstream": "http://h:2", "users": ["alice"]}),
    );
    assert_eq!(dup.status, 409, "{}", dup.text);

    // An upstream that does not answer: a clear 502, promptly, not a hang.
    let silent = register_ok(
        &stack,
        json!({"name": "silent", "upstream": format!("http://127.0.0.1:{}", free_port()),
               "users": ["alice"]}),
    );
    let started = std::time::Instant::now();
    let refused = stack
        .open_as(0, &silent, &stack.sign_in("alice"))
        .expect_err("nothing listens there");
    assert_eq!(refused.status(), Some(502), "{refused:?}");
    assert_eq!(
        refused.json().unwrap()["error"]["code"],
        "terminal_unavailable"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn control_without_any_docker_host_starts_says_so_and_fronts_targets() {
    let mut stack = GatewayStack::start("");
    stack.control.kill9();
    stack.control.set_env("TERMGATE__DOCKER__ENABLED", "false");
    // No daemon answers there: a control that tried Docker would not start.
    stack.control.set_env(
        "TERMGATE__CONTROL__DOCKER_HOST",
        "unix:///nonexistent/docker.sock",
    );
    stack.control.spawn(&[]);
    assert!(
        stack.control.log_text().contains("serving targets only"),
        "{}",
        stack.control.log_text()
    );
    let ttyd = TtydPool::start_plain(false, &[]);
    let id = register_ok(
        &stack,
        json!({"name": "only", "upstream": tcp_upstream(&ttyd), "users": ["alice"]}),
    );
    type_and_read(&stack, &id, &stack.sign_in("alice"));
    let alice = stack.control.token("alice", false);
    let create = stack.control.call(
        "POST",
        "/v1/sessions",
        Some(&alice),
        Some(json!({"profile": "default"})),
    );
    assert_eq!(create.status, 503, "{}", create.text);
    assert_eq!(create.body["error"]["code"], "no_host_available");
}

#[test]
fn targets_are_outside_the_session_quota() {
    // The test stack's quota is three sessions per user.
    let stack = GatewayStack::start("");
    let ttyd = TtydPool::start_plain(false, &[]);
    let ids: Vec<String> = (0..4)
        .map(|n| {
            register_ok(
                &stack,
                json!({"name": format!("team-{n}"), "upstream": tcp_upstream(&ttyd),
                       "users": ["alice"]}),
            )
        })
        .collect();
    let alice_token = stack.control.token("alice", false);
    let create = || {
        http(
            "POST",
            &stack.url(0, "/api/sessions"),
            Some(&alice_token),
            Some(&json!({"profile": "default"})),
        )
        .unwrap()
    };
    // Four targets allowed to her take none of her three sessions.
    for n in 0..3 {
        let a = create();
        assert_eq!(a.status, 201, "create {n} beside four targets: {}", a.text);
    }
    let past = create();
    assert_eq!(
        (past.status, past.body["error"]["code"].as_str()),
        (429, Some("quota_exceeded")),
        "{}",
        past.text
    );
    // At her quota, every target still opens.
    let alice = stack.sign_in("alice");
    for id in &ids {
        type_and_read(&stack, id, &alice);
    }
    assert_eq!(listed(&stack, &alice_token).len(), 7);
}

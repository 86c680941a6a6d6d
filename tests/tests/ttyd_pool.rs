//! The harness against the real ttyd and a real session container (no gateway): ttyd
//! started as production starts it attaches browser-like terminals to the container
//! named in the URL, and the fake upstreams behave as the gateway tests rely on.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use e2e::stack::free_port;
use e2e::term::{ConnectError, Target, Terminal};
use e2e::ttyd::{CountingProxy, SessionContainer, TtydPool, TTYD_TITLE, TTYD_USER_HEADER};
use e2e::upstream::RecordingUpstream;

/// Deadline for anything the shell or ttyd must do.
const DEADLINE: Duration = Duration::from_secs(10);

/// Attaches a terminal to `container` through `target` as user `alice`.
fn attach(target: Target, container: &SessionContainer) -> Terminal {
    Terminal::connect(
        target.clone(),
        &container.ws_path(),
        &[(TTYD_USER_HEADER, "alice")],
    )
    .unwrap_or_else(|e| panic!("attach to {} via {target}: {e}", container.name))
}

/// Types `line` followed by Enter.
fn type_line(term: &Terminal, line: &str) {
    term.send_input(format!("{line}\r").as_bytes())
        .unwrap_or_else(|e| panic!("type {line:?}: {e}"));
}

/// Types `line` and waits for `expect` in the output.
fn run(term: &Terminal, line: &str, expect: &str) -> String {
    type_line(term, line);
    term.read_until(expect, DEADLINE)
        .unwrap_or_else(|e| panic!("after typing {line:?}: {e}"))
}

#[test]
fn terminal_over_unix_socket_runs_commands_in_the_container() {
    let container = SessionContainer::start();
    let pool = TtydPool::start();
    let mode = std::fs::metadata(pool.dir())
        .expect("pool dir")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700, "the pool directory must be private");
    assert!(pool
        .socket_path()
        .expect("unix pool")
        .starts_with(pool.dir()));

    let term = attach(pool.target(), &container);
    run(&term, "echo hello-$((6*7))", "hello-42");
    let whoami = run(&term, "echo who-$(id -u)", "who-1000");
    assert!(
        whoami.contains("user@termgate"),
        "prompt of the session shell expected:\n{whoami}"
    );
    assert_eq!(
        term.wait_title(DEADLINE).as_deref(),
        Ok(TTYD_TITLE),
        "preferences: {:?}",
        term.preferences()
    );
    let raw = term.server_title().unwrap_or_default();
    assert!(
        raw.starts_with("docker attach --detach-keys=ctrl-x,ctrl-x"),
        "ttyd's own title names its command: {raw}"
    );
    term.close();
}

#[test]
fn two_terminals_on_one_container_see_the_same_output() {
    let container = SessionContainer::start();
    let pool = TtydPool::start();
    let first = attach(pool.target(), &container);
    let second = attach(pool.target(), &container);
    // Both attachments are live once each has seen its own command's output.
    run(&first, "echo first-$((1+1))", "first-2");
    run(&second, "echo second-$((2+2))", "second-4");

    second.clear_output();
    run(&first, "echo mirror-$((40+2))", "mirror-42");
    second
        .read_until("mirror-42", DEADLINE)
        .expect("the second terminal mirrors the first one's output");
}

#[test]
fn reconnecting_reaches_the_same_running_shell() {
    let container = SessionContainer::start();
    let pool = TtydPool::start();
    let first = attach(pool.target(), &container);
    run(&first, "X=kept-$((100+23)); echo set-$X", "set-kept-123");
    first.close();
    assert!(
        container.is_running(),
        "closing the terminal must leave the container running"
    );

    let again = attach(pool.target(), &container);
    let out = run(&again, "echo \"got $X\"", "got kept-123");
    assert!(
        !out.contains("set-kept"),
        "a new attachment starts with fresh output:\n{out}"
    );
}

#[test]
fn resize_reaches_the_container_tty() {
    let container = SessionContainer::start();
    let pool = TtydPool::start();
    let term = attach(pool.target(), &container);
    run(&term, "echo ready-$((3*3))", "ready-9");
    term.resize(101, 33).expect("resize");
    wait_for_size(&term, "33 101");
}

/// `stty size` reports the resized window (the resize travels ttyd → docker attach →
/// container asynchronously, so ask until it shows).
fn wait_for_size(term: &Terminal, size: &str) {
    e2e::stack::wait_for("the container tty to take the new size", DEADLINE, || {
        term.clear_output();
        type_line(term, "echo size-$(stty size | tr ' ' x)");
        let want = format!("size-{}", size.replace(' ', "x"));
        term.read_until(&want, Duration::from_millis(500)).ok()
    });
}

#[test]
fn shell_exit_closes_the_websocket() {
    let container = SessionContainer::start();
    let pool = TtydPool::start();
    let term = attach(pool.target(), &container);
    run(&term, "echo up-$((5+5))", "up-10");
    type_line(&term, "exit");
    term.wait_closed(DEADLINE)
        .expect("ttyd closes the websocket once the shell ended");
}

#[test]
fn ttyd_refuses_a_terminal_without_the_user_header() {
    let container = SessionContainer::start();
    let pool = TtydPool::start();
    // ttyd drops the connection instead of answering the upgrade.
    match Terminal::connect(pool.target(), &container.ws_path(), &[]) {
        Ok(term) => panic!("ttyd accepted a terminal without {TTYD_USER_HEADER}: {term:?}"),
        Err(e) => assert!(
            matches!(e, ConnectError::Handshake(_)) && e.status().is_none(),
            "{e:?}"
        ),
    }
    // The same request with the header is served.
    let term = attach(pool.target(), &container);
    run(&term, "echo allowed-$((2*21))", "allowed-42");
}

#[test]
fn terminal_over_tcp_pool() {
    let container = SessionContainer::start();
    let pool = TtydPool::start_tcp(free_port());
    assert!(pool.socket_path().is_none());
    let term = attach(pool.target(), &container);
    run(&term, "echo tcp-$((7*6))", "tcp-42");
}

#[test]
fn counting_proxy_counts_and_forwards_one_connection() {
    let container = SessionContainer::start();
    let pool = TtydPool::start();
    let proxy = CountingProxy::start(pool.target());
    assert_eq!(proxy.connections(), 0);
    let term = attach(proxy.target(), &container);
    run(&term, "echo proxied-$((6*7))", "proxied-42");
    assert_eq!(proxy.connections(), 1);
    term.close();
    assert_eq!(proxy.connections(), 1);
}

#[test]
fn recording_upstream_records_upgrade_headers_and_answers_101() {
    for upstream in [RecordingUpstream::unix(), RecordingUpstream::tcp()] {
        let term = Terminal::connect(
            upstream.target(),
            "/ws?arg=abc",
            &[("X-Test", "1"), ("Host", "sessions.example")],
        )
        .unwrap_or_else(|e| panic!("upgrade to {}: {e}", upstream.target()));
        let requests = upstream.requests();
        assert_eq!(requests.len(), 1, "{requests:?}");
        let r = &requests[0];
        assert_eq!(
            (r.method.as_str(), r.target.as_str()),
            ("GET", "/ws?arg=abc")
        );
        assert_eq!(r.header("x-test"), Some("1"));
        assert_eq!(r.header("host"), Some("sessions.example"));
        assert_eq!(r.header_all("host").len(), 1);
        assert_eq!(r.header("sec-websocket-protocol"), Some("tty"));
        assert!(r.is_upgrade());
        assert!(
            !term.is_closed(),
            "the upstream holds the upgraded connection open"
        );
        // The upstream speaks no websocket frames, so no close handshake: just drop.
        drop(term);
    }
}

#[test]
fn refused_upgrade_carries_status_and_json_body() {
    let upstream = RecordingUpstream::unix();
    upstream.answer_status(404);
    let err = Terminal::connect(upstream.target(), "/ws?arg=nope", &[])
        .expect_err("a 404 must refuse the upgrade");
    assert!(matches!(err, ConnectError::Refused { .. }), "{err}");
    assert_eq!(err.status(), Some(404), "{err}");
    let body = err
        .json()
        .unwrap_or_else(|| panic!("JSON body expected: {err}"));
    assert_eq!(body["status"], 404);
    assert_eq!(upstream.requests().len(), 1);
}

#[test]
fn refused_upgrade_body_is_read_when_it_arrives_after_the_head() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).expect("read head") == 1 {
            head.push(byte[0]);
        }
        let body = br#"{"error":"no such session"}"#;
        let head = format!("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
        s.write_all(head.as_bytes()).expect("write head");
        s.flush().expect("flush");
        // The body goes out as a separate segment, after the client parsed the head.
        std::thread::sleep(Duration::from_millis(200));
        s.write_all(body).expect("write body");
    });
    let err = Terminal::connect(Target::Tcp(addr), "/ws?arg=gone", &[]).expect_err("404 refuses");
    assert_eq!(err.status(), Some(404), "{err}");
    assert_eq!(
        err.json(),
        Some(serde_json::json!({"error": "no such session"})),
        "{err}"
    );
    assert_eq!(err.header("content-type"), Some("application/json"));
    server.join().expect("server thread");
}

#[test]
fn the_pool_command_attaches_only_to_full_ids_of_this_deployments_sessions() {
    let instance = format!("pool-{}", e2e::random_hex(4));
    let ours = SessionContainer::start_labelled(Some(&instance));
    let theirs = SessionContainer::start_labelled(Some("another-deployment"));
    let unlabelled = SessionContainer::start();
    let pool = TtydPool::start_for(&instance);

    let full = ours.full_id();
    let refused = [
        (ours.name.clone(), "not a full container id"),
        (full[..12].to_owned(), "not a full container id"),
        (full.to_uppercase(), "not a full container id"),
        (
            theirs.full_id(),
            "not a session container of this deployment",
        ),
        (
            unlabelled.full_id(),
            "not a session container of this deployment",
        ),
        ("f".repeat(64), "no such container"),
        // A second arg is a front proxy's handle: without control to exchange it with,
        // nothing is attached.
        (format!("{full}&arg=h0123"), "TERMGATE_CONTROL is not set"),
    ];
    for (arg, why) in refused {
        let term = Terminal::connect(
            pool.target(),
            &format!("/ws?arg={arg}"),
            &[(TTYD_USER_HEADER, "alice")],
        )
        .unwrap_or_else(|e| panic!("connect for {arg}: {e}"));
        term.wait_closed(DEADLINE)
            .unwrap_or_else(|e| panic!("the refused terminal for {arg} closes: {e}"));
        // ttyd may close before relaying the last output of a command that exits at
        // once; what does arrive is the refusal, never a shell.
        let out = term.output_so_far();
        assert!(
            out.is_empty() || out.contains(why),
            "{arg}: expected {why:?}, got {out:?}"
        );
        assert!(!out.contains("@termgate"), "{arg} reached a shell: {out:?}");
    }
    assert!(theirs.is_running() && unlabelled.is_running());

    // The one thing it takes: the full id of a session container of its deployment.
    let term = Terminal::connect(
        pool.target(),
        &format!("/ws?arg={full}"),
        &[(TTYD_USER_HEADER, "alice")],
    )
    .expect("attach to our session");
    run(&term, "echo ours-$((7*6))", "ours-42");
    term.close();
}

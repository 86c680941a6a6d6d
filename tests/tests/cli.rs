//! The `termgate` command-line client, the real binary, against a real stack (control,
//! ttyd pool, gateway, session containers): sign-in and sign-out, by token and through
//! a real browser (headless Chromium) handing the client a code; sessions listed,
//! created and ended as JSON; `attach` driven in tmux — typing, the window's size, the
//! detach keys, the gateway's close reasons and exit statuses, and the user's terminal
//! given back as it was after every way out; share links, peers and recordings, each
//! seen to do what it says (a viewer watching, a peer typing, a recording played).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::cli::{Pane, Run, User};
use e2e::page::ok;
use e2e::stack::{http, http_with, wait_for, GatewayStack};
use serde_json::Value;

const T: Duration = Duration::from_secs(20);

/// Waits until the gateway has opened one more terminal to ttyd than `before`: the
/// client is attached.
fn wait_attached(stack: &GatewayStack, before: usize) {
    wait_for("the client's terminal to reach ttyd", T, || {
        (stack.counter.connections() > before).then_some(())
    });
}

fn state(stack: &GatewayStack, sub: &str, id: &str) -> String {
    let s = stack.control.session(&stack.control.token(sub, false), id);
    s["state"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn login_from_a_token_then_ls_new_and_end_speak_json_and_logout_revokes_the_sign_in() {
    let stack = GatewayStack::start("");
    let alice = User::for_gateway(&stack);
    let token = stack.control.token("alice", false);
    let r = alice.login(&stack.control.token("alice", false));
    assert!(
        r.stdout.contains("signed in") && r.stdout.contains("as alice"),
        "{r:?}"
    );

    // Kept for the user alone; the sign-in's own token, not the one piped in.
    let file = alice.credentials_file();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{}", file.display());
    let kept: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let entry = &kept["gateways"][alice.gateway.as_str()];
    assert_eq!(entry["sub"], "alice", "{kept}");
    let own = entry["token"].as_str().expect("a token").to_owned();
    assert_ne!(own, token, "the token piped in is not what is kept");
    let whoami = http_with(
        "GET",
        &stack.url(0, "/auth/session"),
        &[("Authorization", &format!("Bearer {own}"))],
    )
    .unwrap();
    assert_eq!(whoami.status, 200, "{}", whoami.text);
    assert_eq!(whoami.body["sub"], "alice");

    assert_eq!(alice.json(&["ls", "--json"]), serde_json::json!([]));
    let walk = alice.json(&["new", "--name", "walk", "--json"]);
    let id = walk["id"].as_str().expect("an id").to_owned();
    assert_eq!(walk["name"], "walk", "{walk}");
    assert_eq!(walk["profile"], "default", "{walk}");
    assert_eq!(walk["owner"], "alice", "{walk}");
    // Control has it, as the client said.
    assert_eq!(state(&stack, "alice", &id), walk["state"].as_str().unwrap());
    let listed = alice.json(&["ls", "--json"]);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()], "{listed}");
    let table = alice.run(&["ls"]);
    let row = table
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{table:?}"));
    assert!(row.contains("walk") && row.contains("default"), "{row}");

    // Two sessions of one name: the name alone is refused, naming both ids.
    let other = alice.json(&["new", "--name", "walk", "--json"]);
    let other_id = other["id"].as_str().unwrap().to_owned();
    let r = alice.run(&["end", "walk"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(
        r.stderr.contains(&id) && r.stderr.contains(&other_id),
        "{r:?}"
    );
    let ended = alice.json(&["end", &other_id, "--json"]);
    assert_eq!(ended["id"], other_id.as_str(), "{ended}");
    assert_eq!(ended["ended"], true);
    assert_ne!(state(&stack, "alice", &other_id), "running");
    // Now the name is unique again.
    let r = alice.run(&["end", "walk"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(r.stdout.contains(&id), "{r:?}");
    assert_ne!(state(&stack, "alice", &id), "running");
    // An ended session is not attached to: "has ended" while it is still listed
    // (stopping), "no session" once it is not; ttyd never sees a connection.
    let opened = stack.counter.connections();
    let r = alice.run(&["attach", &id]);
    assert!([4, 5].contains(&r.status), "{r:?}");
    assert!(r.stderr.contains(&id), "{r:?}");
    assert_eq!(stack.counter.connections(), opened);

    // Logout revokes the sign-in at the gateway, not only here.
    let r = alice.run(&["logout"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(!file.exists(), "the credentials file is removed");
    let refused = http("GET", &stack.url(0, "/api/sessions"), Some(&own), None).unwrap();
    assert_eq!(refused.status, 401, "{}", refused.text);
    let r = alice.run(&["ls"]);
    assert_eq!(r.status, 3, "{r:?}");
    assert!(r.stderr.contains("termgate login"), "{r:?}");
}

#[test]
fn bad_urls_unreachable_gateways_and_refused_tokens_are_one_line_each() {
    let stack = GatewayStack::start("");
    let user = User::for_gateway(&stack);
    let one_line = |r: &Run| {
        assert_eq!(r.stderr.trim_end().lines().count(), 1, "{r:?}");
        assert!(r.stderr.starts_with("termgate: "), "{r:?}");
    };
    let r = user.run_with(&["login", "gw.example", "--token-stdin"], "x");
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("not a gateway URL"), "{r:?}");
    one_line(&r);
    let closed = format!("http://127.0.0.1:{}", e2e::stack::free_port());
    let r = user.run_with(&["login", &closed, "--token-stdin"], "x");
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("cannot reach the gateway"), "{r:?}");
    one_line(&r);
    let r = user.run_with(&["login", &user.gateway, "--token-stdin"], "not.a.token");
    assert_eq!(r.status, 3, "{r:?}");
    assert!(r.stderr.contains("refused this token"), "{r:?}");
    one_line(&r);
    let r = user.run_with(&["login", &user.gateway, "--token-stdin"], "");
    assert_eq!(r.status, 1, "{r:?}");
    one_line(&r);
    assert!(
        !user.credentials_file().exists(),
        "nothing kept from failed sign-ins"
    );
    let r = user.run(&["attach", "walk", "--detach-keys", "ctrl-1"]);
    assert_eq!(r.status, 1, "{r:?}");
    one_line(&r);
    // A credential file that is not one is named, not a panic.
    std::fs::create_dir_all(user.credentials_file().parent().unwrap()).unwrap();
    std::fs::write(user.credentials_file(), "{not json").unwrap();
    let r = user.run(&["ls"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("credentials.json"), "{r:?}");
    one_line(&r);
}

#[test]
fn another_users_session_is_not_found_as_an_unknown_one_is() {
    let stack = GatewayStack::start("");
    let bob = stack.control.create(&stack.control.token("bob", false));
    let bobs = bob["id"].as_str().unwrap();
    let unknown = "aaaaaaaaaaaaaaaa";
    assert_ne!(bobs, unknown);
    let alice = User::for_gateway(&stack);
    alice.login(&stack.control.token("alice", false));
    let before = stack.counter.connections();
    for command in ["attach", "end"] {
        let theirs = alice.run(&[command, bobs]);
        let nothing = alice.run(&[command, unknown]);
        assert_eq!(theirs.status, 4, "{command}: {theirs:?}");
        assert_eq!(nothing.status, 4, "{command}: {nothing:?}");
        assert_eq!(theirs.stderr, format!("termgate: no session \"{bobs}\"\n"));
        assert_eq!(
            theirs.stderr.replace(bobs, unknown),
            nothing.stderr,
            "{command}"
        );
    }
    assert_eq!(stack.counter.connections(), before, "nothing reached ttyd");
    assert_eq!(
        state(&stack, "bob", bobs),
        "running",
        "bob's session is untouched"
    );
}

#[test]
fn attach_types_follows_the_window_detaches_and_reattaches_to_the_same_shell() {
    let stack = GatewayStack::start("");
    let alice = User::for_gateway(&stack);
    alice.login(&stack.control.token("alice", false));
    let walk = alice.json(&["new", "--name", "walk", "--json"]);
    let id = walk["id"].as_str().unwrap().to_owned();
    let Some(pane) = Pane::start(&alice) else {
        return;
    };

    let opened = stack.counter.connections();
    pane.attach(1, "walk");
    wait_attached(&stack, opened);
    pane.ask_until("echo $((6*7))x", "42x");

    // The session's terminal is the pane's size, and follows it.
    let (rows, columns) = pane.size();
    pane.ask_until("stty size", &format!("{rows} {columns}"));
    pane.tmux(&["resize-window", "-t", "t", "-x", "90", "-y", "24"]);
    let resized = pane.size();
    assert_ne!(resized, (rows, columns), "tmux resized the window");
    pane.ask_until("stty size", &format!("{} {}", resized.0, resized.1));

    // Something only this shell knows, then the detach keys once its prompt is back
    // (the prompt asks the terminal where its cursor is: the answer is the session's).
    pane.type_line("MARK=m$((1000+234))");
    pane.ask_until("echo set-$((2+3))", "set-5");
    pane.wait_prompt();
    pane.tmux(&["send-keys", "-t", "t", "C-\\", "C-\\"]);
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "0", "{err}");
    assert!(err.contains("detached"), "{err}");
    assert_eq!(
        state(&stack, "alice", &id),
        "running",
        "detaching leaves it running"
    );
    let listed = alice.json(&["ls", "--json"]);
    assert_eq!(listed[0]["state"], "running", "{listed}");

    // Back in, by id: the same shell.
    let opened = stack.counter.connections();
    pane.attach(2, &id);
    wait_attached(&stack, opened);
    pane.ask_until("echo mark=$MARK", "mark=m1234");

    // SIGTERM gives the terminal back too, and leaves the session running.
    let pid = pane.foreground_pid();
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (status, err) = pane.attach_ended(2);
    assert_eq!(status, "143", "{err}");
    assert_eq!(state(&stack, "alice", &id), "running");
}

#[test]
fn ending_the_session_from_the_page_closes_attach_with_the_reason_and_status_5() {
    let stack = GatewayStack::start("");
    let alice = User::for_gateway(&stack);
    alice.login(&stack.control.token("alice", false));
    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    let opened = stack.counter.connections();
    pane.attach(1, "--new --name ending");
    wait_attached(&stack, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    let listed = alice.json(&["ls", "--json"]);
    let id = listed[0]["id"]
        .as_str()
        .expect("the new session")
        .to_owned();
    assert_eq!(listed[0]["name"], "ending", "{listed}");

    // As the page ends it: its cookie, its Origin.
    let cookie = stack.sign_in("alice");
    let origin = stack.origin(0);
    let a = http_with(
        "DELETE",
        &stack.url(0, &format!("/api/sessions/{id}")),
        &[("Cookie", &cookie), ("Origin", &origin)],
    )
    .unwrap();
    assert_eq!(a.status, 204, "{}", a.text);
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "5", "{err}");
    assert_eq!(err.trim(), "termgate: this session was ended");
}

#[test]
fn logout_elsewhere_closes_an_attached_terminal_with_signed_out_and_status_3() {
    let stack = GatewayStack::start("");
    let alice = User::for_gateway(&stack);
    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    // Signed in at the prompt, the token pasted and not shown.
    pane.type_line(&format!(
        "\"$T\" login {} --token; echo login=$?",
        alice.gateway
    ));
    wait_for("the token prompt", T, || {
        pane.screen().contains("Token for").then_some(())
    });
    let token = stack.control.token("alice", false);
    pane.type_line(&token);
    pane.wait_line("login=0");
    let screen = pane.screen();
    assert!(screen.contains("as alice"), "{screen}");
    assert!(
        !screen.contains(&token),
        "the token is not echoed:\n{screen}"
    );
    let s = alice.json(&["new", "--json"]);
    let id = s["id"].as_str().unwrap().to_owned();
    let opened = stack.counter.connections();
    pane.attach(1, &id);
    wait_attached(&stack, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    let r = alice.run(&["logout"]);
    assert_eq!(r.status, 0, "{r:?}");
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "3", "{err}");
    assert_eq!(err.trim(), "termgate: signed out");
    assert_eq!(
        state(&stack, "alice", &id),
        "running",
        "a sign-out ends no session"
    );
}

#[test]
fn over_tls_the_gateway_is_trusted_through_a_ca_file_for_the_api_and_the_terminal() {
    let pki = e2e::pki::Pki::init();
    let leaf = pki.issue("gateway", "gateway", &["127.0.0.1"]);
    let mut stack = GatewayStack::start("");
    let (cert, key) = (leaf.cert.to_string_lossy(), leaf.key.to_string_lossy());
    let n = stack.spawn_gateway(&[
        ("TERMGATE__GATEWAY__TLS_CERT_FILE", &cert),
        ("TERMGATE__GATEWAY__TLS_KEY_FILE", &key),
    ]);
    let mut alice = User::for_gateway(&stack);
    alice.gateway = format!("https://127.0.0.1:{}", stack.gateways[n].port);
    let token = stack.control.token("alice", false);

    // A private CA is not the system's: refused, saying how to trust it.
    let r = alice.run_with(&["login", &alice.gateway, "--token-stdin"], &token);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("--ca-file"), "{r:?}");
    assert!(!alice.credentials_file().exists());

    let ca = pki.ca().to_string_lossy().into_owned();
    let r = alice.run_with(
        &["login", &alice.gateway, "--token-stdin", "--ca-file", &ca],
        &token,
    );
    assert_eq!(r.status, 0, "{r:?}");
    // Later commands trust the same CA without being told again.
    let s = alice.json(&["new", "--name", "secure", "--json"]);
    assert_eq!(s["name"], "secure", "{s}");
    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    let opened = stack.counter.connections();
    pane.attach(1, "secure");
    wait_attached(&stack, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    pane.wait_prompt();
    pane.tmux(&["send-keys", "-t", "t", "C-\\", "C-\\"]);
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "0", "{err}");
}

/// The client run in the background, its output kept in files (killed if the test
/// ends first).
struct Running {
    child: Option<std::process::Child>,
    out: tempfile::TempDir,
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        let out = tempfile::tempdir().expect("output dir");
        let file = |name: &str| std::fs::File::create(out.path().join(name)).expect("output file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file("stdout"))
            .stderr(file("stderr"))
            .spawn()
            .expect("spawn termgate");
        Running {
            child: Some(child),
            out,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.out.path().join("stderr")).unwrap_or_default()
    }

    /// Waits for the client to exit; what it came to.
    fn wait(mut self) -> Run {
        let mut child = self.child.take().expect("running");
        let status = wait_for("the client to exit", T, || child.try_wait().ok().flatten());
        let read =
            |name: &str| std::fs::read_to_string(self.out.path().join(name)).unwrap_or_default();
        Run {
            status: status.code().unwrap_or(-1),
            stdout: read("stdout"),
            stderr: read("stderr"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("--- the client's stderr ---\n{}", self.stderr());
        }
    }
}

/// The browser the client starts (`$BROWSER`): a script that writes the address it is
/// given to a file, for the test's own headless browser to open.
struct BrowserScript {
    dir: tempfile::TempDir,
}

impl BrowserScript {
    fn new() -> BrowserScript {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("script dir");
        let script = dir.path().join("browser");
        std::fs::write(
            &script,
            "#!/bin/sh\nprintf '%s\\n' \"$1\" > \"$0.tmp\" && mv \"$0.tmp\" \"$0.url\"\n",
        )
        .expect("the script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        BrowserScript { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("browser")
    }

    /// The address the client started the browser at.
    fn wait_url(&self) -> String {
        let file = self.dir.path().join("browser.url");
        wait_for("the client to start the browser", T, || {
            std::fs::read_to_string(&file)
                .ok()
                .map(|t| t.trim().to_owned())
        })
    }
}

/// The value of `name` in a query string, as sent.
fn param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
}

/// Plays the client's loopback port: waits for the browser's request for
/// `/callback?…` on `listener`, answers it and returns its query.
fn callback_query(listener: &std::net::TcpListener) -> String {
    use std::io::{Read, Write};
    listener.set_nonblocking(true).expect("nonblocking");
    wait_for("the browser at the callback", T, || {
        let (mut conn, _) = listener.accept().ok()?;
        conn.set_nonblocking(false).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).ok().filter(|n| *n > 0)?;
            head.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let target = head.lines().next()?.split(' ').nth(1)?;
        let query = target.strip_prefix("/callback?")?.to_owned();
        let _ =
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        Some(query)
    })
}

/// Waits until the page at `/cli-login` asks to sign the client in, and returns its
/// question.
fn asked(b: &mut e2e::browser::Browser) -> String {
    let q = ok(
        "the question",
        b.wait_js(
            "location.pathname === '/cli-login' && !document.getElementById('ask').hidden \
             && document.getElementById('ask-title').textContent",
            T,
            "the page to ask whether to sign termgate in",
        ),
    );
    q.as_str().unwrap_or_default().to_owned()
}

#[test]
fn login_in_the_browser_signs_in_there_first_and_hands_the_client_a_recorded_sign_in_of_its_own() {
    let stack = GatewayStack::start("");
    let alice = User::for_gateway(&stack);
    let script = BrowserScript::new();
    let mut login = alice.command(&["login", &alice.gateway]);
    login.env("BROWSER", script.path());
    let running = Running::start(login);
    let url = script.wait_url();
    let prefix = format!("{}/cli-login#port=", alice.gateway);
    assert!(url.starts_with(&prefix), "{url}");
    assert!(running.stderr().contains(&url), "{}", running.stderr());

    // Signed out in this browser: the page sends it to sign in, then back.
    let mut b = e2e::page::launch();
    ok("open the page the client printed", b.navigate(&url));
    ok(
        "the sign-in form",
        b.wait_js(
            "location.pathname === '/' && !document.getElementById('sign-in').hidden",
            T,
            "the sessions page asking to sign in",
        ),
    );
    let token = stack.control.token("alice", false);
    ok(
        "a sign-in link",
        b.navigate(&stack.url(0, &format!("/#token={token}"))),
    );
    assert_eq!(asked(&mut b), "Sign in termgate on this computer as alice?");
    ok("Allow", b.eval("document.getElementById('allow').click()"));
    let said = ok(
        "the client's answer",
        b.wait_js(
            "location.hostname === '127.0.0.1' && location.pathname === '/callback' \
             && document.getElementById('termgate-cli') \
             && document.getElementById('termgate-cli').textContent",
            T,
            "the client's page in the browser",
        ),
    );
    assert!(
        said.as_str()
            .unwrap_or_default()
            .contains("You can close this tab"),
        "{said}"
    );
    let r = running.wait();
    assert_eq!(r.status, 0, "{r:?}");
    assert!(r.stdout.contains("as alice"), "{r:?}");

    // The client is alice, with a token of its own.
    let made = alice.json(&["new", "--name", "handed", "--json"]);
    assert_eq!(made["owner"], "alice", "{made}");
    let listed = alice.json(&["ls", "--json"]);
    assert_eq!(listed[0]["id"], made["id"], "{listed}");
    let kept: Value =
        serde_json::from_slice(&std::fs::read(alice.credentials_file()).unwrap()).unwrap();
    let own = kept["gateways"][alice.gateway.as_str()]["token"]
        .as_str()
        .expect("a kept token")
        .to_owned();
    assert_ne!(own, token, "not the sign-in link's token");
    // Recorded with the others, as the client's: the browser's sign-in is beside it.
    let signins = http("GET", &stack.url(0, "/api/signins"), Some(&own), None).unwrap();
    assert_eq!(signins.status, 200, "{}", signins.text);
    let list = signins.body["signins"].as_array().expect("a list").clone();
    let current: Vec<&Value> = list.iter().filter(|s| s["current"] == true).collect();
    assert_eq!(current.len(), 1, "{list:?}");
    assert_eq!(current[0]["sub"], "alice");
    assert_eq!(current[0]["method"], "token");
    assert!(
        current[0]["user_agent"]
            .as_str()
            .is_some_and(|ua| ua.starts_with("termgate-cli/")),
        "{list:?}"
    );
    assert!(
        list.iter().any(|s| s["current"] == false
            && s["user_agent"]
                .as_str()
                .is_some_and(|ua| ua.contains("Chrome"))),
        "the browser's own sign-in: {list:?}"
    );
    // Logout ends the client's sign-in only; the browser stays signed in.
    let r = alice.run(&["logout"]);
    assert_eq!(r.status, 0, "{r:?}");
    let refused = http("GET", &stack.url(0, "/api/sessions"), Some(&own), None).unwrap();
    assert_eq!(refused.status, 401, "{}", refused.text);
    ok("back to the gateway", b.navigate(&stack.url(0, "/")));
    let still = ok(
        "the browser's sign-in",
        b.eval("fetch('/auth/session').then((r) => r.status)"),
    );
    assert_eq!(still, serde_json::json!(200));
}

#[test]
fn a_browser_code_is_exchanged_once_only_with_its_verifier_and_a_denial_reaches_the_client() {
    let stack = GatewayStack::start("");
    let mut b = e2e::page::launch();
    e2e::page::sign_in_by_link(&mut b, &stack, "alice");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().unwrap().port();
    let verifier = e2e::random_hex(32);
    let challenge = policy::oidc::pkce_challenge(&verifier);
    let state = e2e::random_hex(16);
    let page = |state: &str| {
        stack.url(
            0,
            &format!("/cli-login#port={port}&state={state}&challenge={challenge}"),
        )
    };
    ok("the page", b.navigate(&page(&state)));
    assert_eq!(asked(&mut b), "Sign in termgate on this computer as alice?");
    ok("Allow", b.eval("document.getElementById('allow').click()"));
    let query = callback_query(&listener);
    assert_eq!(param(&query, "state"), Some(state.as_str()), "{query}");
    let code = param(&query, "code").expect("a code").to_owned();

    let exchange = |code: &str, verifier: &str| {
        http(
            "POST",
            &stack.url(0, "/auth/cli/token"),
            None,
            Some(&serde_json::json!({"code": code, "verifier": verifier})),
        )
        .unwrap()
    };
    let refused = |a: &e2e::stack::Answer, code: &str| {
        assert_eq!(
            (a.status, a.body["error"]["code"].as_str()),
            (400, Some(code)),
            "{}",
            a.text
        );
    };
    // Another client's verifier: refused, and the code is not spent by it.
    refused(
        &exchange(&code, &e2e::random_hex(32)),
        "cli_verifier_mismatch",
    );
    let (head, signature) = code.rsplit_once('.').unwrap();
    let altered = format!("{head}.{}", signature.chars().rev().collect::<String>());
    refused(&exchange(&altered, &verifier), "cli_code_invalid");
    let first = exchange(&code, &verifier);
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.body["sub"], "alice");
    let token = first.body["token"].as_str().expect("a token").to_owned();
    let who = http("GET", &stack.url(0, "/auth/session"), Some(&token), None).unwrap();
    assert_eq!(
        (who.status, who.body["sub"].as_str()),
        (200, Some("alice")),
        "{}",
        who.text
    );
    let signins = http("GET", &stack.url(0, "/api/signins"), Some(&token), None).unwrap();
    assert!(
        signins.body["signins"]
            .as_array()
            .is_some_and(|l| l.iter().any(|s| s["current"] == true)),
        "{}",
        signins.text
    );
    // The same code again, with the right verifier: used.
    refused(&exchange(&code, &verifier), "cli_code_used");

    // A code is minted for this gateway's own page only, and for a signed-in user.
    let mint = |headers: &[(&str, &str)]| {
        let mut r = e2e::stack::agent().post(&stack.url(0, "/auth/cli/code"));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let mut resp = r
            .send_json(serde_json::json!({"challenge": challenge}))
            .expect("the gateway answers");
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap_or_default())
    };
    let cookie = stack.sign_in("alice");
    let origin = stack.origin(0);
    assert_eq!(mint(&[("Cookie", &cookie)]).0, 403, "no Origin");
    assert_eq!(
        mint(&[("Cookie", &cookie), ("Origin", "https://elsewhere.example")]).0,
        403
    );
    assert_eq!(mint(&[("Origin", &origin)]).0, 401, "signed out");
    let (status, body) = mint(&[("Cookie", &cookie), ("Origin", &origin)]);
    assert_eq!(status, 200, "{body}");

    // Deny: the client hears it, and no code comes with it.
    let denied = e2e::random_hex(16);
    ok("the page again", b.navigate(&page(&denied)));
    asked(&mut b);
    ok("Deny", b.eval("document.getElementById('deny').click()"));
    let query = callback_query(&listener);
    assert_eq!(param(&query, "state"), Some(denied.as_str()), "{query}");
    assert_eq!(param(&query, "error"), Some("access_denied"), "{query}");
    assert_eq!(param(&query, "code"), None, "{query}");
}

#[test]
fn login_prints_the_page_when_no_browser_starts_and_refuses_an_answer_for_another_state() {
    let stack = GatewayStack::start("");
    let alice = User::for_gateway(&stack);
    let mut login = alice.command(&["login", &alice.gateway]);
    login.env("BROWSER", "/nonexistent/termgate-test-browser");
    let running = Running::start(login);
    let url = wait_for("the page's address on standard error", T, || {
        let err = running.stderr();
        let line = err.lines().find(|l| l.contains("/cli-login#port="))?;
        Some(line.trim().to_owned())
    });
    assert!(
        running
            .stderr()
            .contains("Open this page in a browser on this computer"),
        "{}",
        running.stderr()
    );
    let fragment = url.split_once('#').expect("a fragment").1;
    let port = param(fragment, "port").expect("a port");
    let state = param(fragment, "state").expect("a state");
    let answer = http(
        "GET",
        &format!("http://127.0.0.1:{port}/callback?code=x&state=not{state}"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(answer.status, 400, "{}", answer.text);
    assert!(
        answer.text.contains("not for this sign-in"),
        "{}",
        answer.text
    );
    let r = running.wait();
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("state differs"), "{r:?}");
    assert!(!alice.credentials_file().exists(), "nothing kept");
}

/// A stack whose default profile is changed by `env`
/// (`TERMGATE__PROFILES__DEFAULT__…`), with the read-only pool of share links, and a
/// gateway that reports its terminals every 300 ms.
fn stack_with(env: &[(&str, &str)]) -> GatewayStack {
    let mut control = e2e::stack::ControlStack::prepare("");
    for (k, v) in env {
        control.set_env(k, v);
    }
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let mut stack = GatewayStack::assemble(control, ttyd, counter);
    stack.viewers = Some(e2e::ttyd::TtydPool::start_viewers_for(
        &stack.control.instance,
    ));
    stack.gateways.clear();
    stack.spawn_gateway(&[
        ("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "300"),
        ("TERMGATE__GATEWAY__TERMINAL_REPORT_MS", "300"),
    ]);
    stack
}

/// Opens `path` (a terminal's or a link's websocket) with `cookie` once the gateway
/// knows it: what the client just made reaches it with the route feed's next answer.
fn open_when_known(stack: &GatewayStack, path: &str, cookie: &str) -> e2e::term::Terminal {
    let origin = stack.origin(0);
    wait_for(&format!("{path} to open"), T, || {
        match stack.open(0, path, &[("Cookie", cookie), ("Origin", &origin)]) {
            Ok(t) => Some(t),
            Err(e2e::term::ConnectError::Refused { status: 404, .. }) => None,
            Err(e) => panic!("{path}: {e}"),
        }
    })
}

/// `by` types until `into` shows the answer: an attach may join a moment after its
/// websocket opened, and replays nothing.
fn typing_shows(by: &e2e::term::Terminal, into: &e2e::term::Terminal, word: &str) {
    wait_for(&format!("{word} to show"), T, || {
        by.send_input(format!("echo {word}-$((6*7))\r").as_bytes())
            .unwrap();
        into.read_until(&format!("{word}-42"), Duration::from_secs(1))
            .ok()
    });
}

#[test]
fn share_prints_a_link_once_that_shows_the_session_read_only_and_share_rm_closes_its_viewer() {
    let stack = stack_with(&[]);
    let alice = User::for_gateway(&stack);
    alice.login(&stack.control.token("alice", false));
    let walk = alice.json(&["new", "--name", "walk", "--json"]);
    let id = walk["id"].as_str().unwrap().to_owned();
    let owner = open_when_known(&stack, &format!("/s/{id}/ws"), &stack.sign_in("alice"));

    let r = alice.run(&["share", "walk", "--ttl", "10m", "--max-viewers", "2"]);
    assert_eq!(r.status, 0, "{r:?}");
    let url = r.stdout.trim().to_owned();
    assert_eq!(r.stdout.lines().count(), 1, "the link alone: {r:?}");
    let path = url
        .strip_prefix(&alice.gateway)
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned();
    assert!(path.starts_with(&format!("/v/{id}-")), "{url}");
    assert!(
        r.stderr.contains("signed-in users") && r.stderr.contains("shown only now"),
        "{r:?}"
    );

    // A signed-in viewer watches alice type, and cannot type.
    let viewer = open_when_known(&stack, &format!("{path}/ws"), &stack.sign_in("bob"));
    typing_shows(&owner, &viewer, "shared");
    viewer
        .send_input(b"echo viewer-$((50+5))\r")
        .expect("the viewer's keys");
    owner.send_input(b"echo after-$((3+4))\r").unwrap();
    owner.read_until("after-7", T).expect("the owner's shell");
    assert!(
        !owner.output_so_far().contains("viewer-55"),
        "a viewer's keys reached the shell"
    );

    // Listed with who watches, never with the link.
    let listed = wait_for("bob listed as watching", T, || {
        let l = alice.json(&["share", "ls", "--json"]);
        (l[0]["subs"] == serde_json::json!(["bob"])).then_some(l)
    });
    let share_id = listed[0]["id"].as_str().expect("an id").to_owned();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["session"], id.as_str());
    assert_eq!(listed[0]["max_viewers"], 2);
    assert!(!listed.to_string().contains(&path), "{listed}");
    let table = alice.run(&["share", "ls", "walk"]);
    let row = table
        .stdout
        .lines()
        .find(|l| l.starts_with(&share_id))
        .unwrap_or_else(|| panic!("{table:?}"));
    assert!(row.contains("walk") && row.contains("bob"), "{row}");

    let r = alice.run(&["share", "rm", &share_id]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(r.stdout.contains("walk"), "{r:?}");
    viewer.wait_closed(T).expect("the viewer is closed");
    let reason = viewer.close_reason().unwrap_or_default();
    assert!(reason.contains("share link was revoked"), "{reason}");
    assert_eq!(
        alice.json(&["share", "ls", "--json"]),
        serde_json::json!([])
    );
    let r = alice.run(&["share", "rm", &share_id]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("no share link"), "{r:?}");
    let r = alice.run(&["share", "nothing-named-so"]);
    assert_eq!(r.status, 4, "{r:?}");
}

#[test]
fn peers_add_lets_a_user_type_into_the_session_and_peers_rm_closes_their_terminal() {
    let stack = stack_with(&[("TERMGATE__PROFILES__DEFAULT__PEERS", "true")]);
    let alice = User::for_gateway(&stack);
    alice.login(&stack.control.token("alice", false));
    let walk = alice.json(&["new", "--name", "walk", "--json"]);
    let id = walk["id"].as_str().unwrap().to_owned();
    let owner = open_when_known(&stack, &format!("/s/{id}/ws"), &stack.sign_in("alice"));

    let r = alice.run(&["peers", "add", "walk", "bob", "--ttl", "30m"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(
        r.stdout.trim(),
        "bob may type into walk until in 30m",
        "{r:?}"
    );
    let peers = alice.json(&["peers", "ls", "walk", "--json"]);
    assert_eq!(peers[0]["sub"], "bob", "{peers}");
    let until = peers[0]["expires_at"].as_u64().expect("an expiry");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        (now + 1790..=now + 1801).contains(&until),
        "{until} vs {now}"
    );
    let table = alice.run(&["peers", "ls", "walk"]);
    assert!(
        table.stdout.lines().any(|l| l.starts_with("bob ")),
        "{table:?}"
    );

    // Bob's own client lists it as a session he co-drives; his terminal types into it.
    let bob = User::for_gateway(&stack);
    bob.login(&stack.control.token("bob", false));
    let theirs = bob.json(&["ls", "--json"]);
    assert_eq!(theirs[0]["id"], id.as_str(), "{theirs}");
    assert_eq!(theirs[0]["role"], "peer", "{theirs}");
    let peer = open_when_known(&stack, &format!("/s/{id}/ws"), &stack.sign_in("bob"));
    typing_shows(&peer, &owner, "from-bob");

    let r = alice.run(&["peers", "rm", "walk", "bob"]);
    assert_eq!(r.status, 0, "{r:?}");
    peer.wait_closed(T).expect("bob's terminal is closed");
    let reason = peer.close_reason().unwrap_or_default();
    assert!(
        reason.contains("access to this session was removed"),
        "{reason}"
    );
    assert!(!owner.is_closed(), "alice's terminal stays");
    assert_eq!(
        alice.json(&["peers", "ls", "walk", "--json"]),
        serde_json::json!([])
    );
    let r = alice.run(&["peers", "rm", "walk", "bob"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("no such peer"), "{r:?}");
    assert_eq!(r.stderr.trim_end().lines().count(), 1, "{r:?}");
}

#[test]
fn recordings_ls_download_and_play_give_back_what_was_typed_once_the_terminal_closed() {
    let stack = stack_with(&[("TERMGATE__PROFILES__DEFAULT__RECORD", "true")]);
    let alice = User::for_gateway(&stack);
    alice.login(&stack.control.token("alice", false));
    let walk = alice.json(&["new", "--name", "walk", "--json"]);
    let id = walk["id"].as_str().unwrap().to_owned();
    assert_eq!(
        alice.json(&["recordings", "ls", "walk", "--json"]),
        serde_json::json!([])
    );
    let t = open_when_known(&stack, &format!("/s/{id}/ws"), &stack.sign_in("alice"));
    // The shell's own pause gives the recording a length to be played at.
    t.send_input(b"sleep 2; echo rec-$((6*7))\r").unwrap();
    t.read_until("rec-42", T).expect("the shell's answer");
    t.close();

    let listed = wait_for("the recording to be listed", T, || {
        let l = alice.json(&["recordings", "ls", "walk", "--json"]);
        (l.as_array().map(Vec::len) == Some(1)).then_some(l)
    });
    let name = listed[0]["name"].as_str().expect("a name").to_owned();
    let table = alice.run(&["recordings", "ls", "walk"]);
    assert!(
        table.stdout.lines().any(|l| l.starts_with(&name)),
        "{table:?}"
    );

    // Downloaded as the file it is, to a name of one's own and to the default one.
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("walk.cast");
    let r = alice.run(&[
        "recordings",
        "download",
        "walk",
        &name,
        "-o",
        &to.to_string_lossy(),
    ]);
    assert_eq!(r.status, 0, "{r:?}");
    let text = std::fs::read_to_string(&to).expect("the file");
    assert!(
        r.stderr.contains(&format!("wrote {} bytes", text.len())),
        "{r:?}"
    );
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap_or_default()).expect("a header");
    assert_eq!(header["version"], 2, "{header}");
    assert!(text.contains("rec-42"), "{text}");
    assert_eq!(listed[0]["size"].as_u64(), Some(text.len() as u64));
    let mut here = alice.command(&["recordings", "download", &id, &name]);
    let o = here.current_dir(dir.path()).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(format!("{name}.cast"))).unwrap(),
        text
    );

    // Played at its pace: four times as fast takes a quarter of the time its output
    // took, not less, and not all of it.
    let last_output = lines
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e[1] == "o")
        .filter_map(|e| e[0].as_f64())
        .fold(0.0, f64::max);
    assert!(last_output >= 1.9, "the output spans {last_output}s");
    let started = Instant::now();
    let r = alice.run(&["recordings", "play", "walk", &name, "--speed", "4"]);
    let took = started.elapsed().as_secs_f64();
    assert_eq!(r.status, 0, "{r:?}");
    assert!(r.stdout.contains("rec-42"), "{r:?}");
    assert!(
        took >= last_output / 4.0 - 0.05 && took < last_output * 0.9,
        "played in {took}s, its output spans {last_output}s"
    );
    let r = alice.run(&["recordings", "play", "walk", "no-such-recording"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("no recording"), "{r:?}");
}

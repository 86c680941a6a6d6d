//! Live read-only share links, end to end: real control, gateway, Docker, and two real
//! ttyd pools — the owner's (`-W`) and the read-only one viewers go to (no `-W`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::stack::{docker, http, wait_for, GatewayStack};
use e2e::term::Terminal;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(15);
/// The most a viewer may stay open after its link ended.
const CLOSE_BOUND: Duration = Duration::from_secs(1);

/// A stack whose default profile has `shares = mode`, with the read-only pool, and a
/// gateway that reports its terminals every 300 ms.
fn start(mode: &str) -> GatewayStack {
    let mut control = e2e::stack::ControlStack::prepare("");
    control.set_env("TERMGATE__PROFILES__DEFAULT__SHARES", mode);
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let mut s = GatewayStack::assemble(control, ttyd, counter);
    s.viewers = Some(e2e::ttyd::TtydPool::start_viewers_for(&s.control.instance));
    // The gateway reads the same file; its own overrides come from the environment.
    s.gateways.clear();
    s.spawn_gateway(&[("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "300")]);
    s
}

fn create(stack: &GatewayStack, sub: &str) -> String {
    let token = stack.control.token(sub, false);
    stack.control.create(&token)["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn container_id(stack: &GatewayStack, session: &str) -> String {
    docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label=termgate.instance={}", stack.control.instance),
        "--filter",
        &format!("label=termgate.session={session}"),
    ])
}

/// Creates a share link of `session` as `sub`; the answer's body.
fn share(stack: &GatewayStack, sub: &str, session: &str, body: Value) -> e2e::stack::Answer {
    let token = stack.control.token(sub, false);
    stack.control.call(
        "POST",
        &format!("/v1/sessions/{session}/shares"),
        Some(&token),
        Some(body),
    )
}

fn link(stack: &GatewayStack, session: &str, ttl: u64, max: Option<u32>) -> (String, String) {
    let mut body = json!({ "ttl_seconds": ttl });
    if let Some(m) = max {
        body["max_viewers"] = json!(m);
    }
    let a = share(stack, "alice", session, body);
    assert_eq!(a.status, 201, "create share: {}", a.text);
    let url = a.body["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("/v/{session}-")), "{url}");
    (a.body["id"].as_str().unwrap().to_owned(), url)
}

fn view(
    stack: &GatewayStack,
    url: &str,
    cookie: Option<&str>,
) -> Result<Terminal, e2e::term::ConnectError> {
    let origin = stack.origin(0);
    let mut headers = vec![("Origin", origin.as_str())];
    if let Some(c) = cookie {
        headers.push(("Cookie", c));
    }
    stack.open(0, &format!("{url}/ws"), &headers)
}

/// The status and body of the page at `path`, with the session cookie `cookie`.
fn get_page(stack: &GatewayStack, path: &str, cookie: Option<&str>) -> (u16, String) {
    let agent = e2e::stack::agent();
    let mut req = agent.get(&stack.url(0, path));
    if let Some(c) = cookie {
        req = req.header("Cookie", c);
    }
    let mut r = req.call().expect("the gateway answers");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap_or_default())
}

fn list(stack: &GatewayStack, session: &str) -> Vec<Value> {
    let token = stack.control.token("alice", false);
    let a = stack.control.call(
        "GET",
        &format!("/v1/sessions/{session}/shares"),
        Some(&token),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["shares"].as_array().unwrap().clone()
}

/// Waits for `t` to close; how long it took from `since` (the request that ended its
/// link) to the moment it closed, at most `CLOSE_BOUND`.
fn closed_within_bound(t: &Terminal, since: Instant, what: &str) -> Duration {
    t.wait_closed(T)
        .unwrap_or_else(|e| panic!("{what}: the viewer was not closed: {e}"));
    let closed_at = t.closed_at().expect("closed");
    let took = closed_at.saturating_duration_since(since);
    eprintln!("{what} → viewer closed: {took:?}");
    assert!(took <= CLOSE_BOUND, "{what}: viewer closed after {took:?}");
    took
}

/// The viewer's page of `url` once the gateway knows the link: a new link reaches it
/// with the route feed's next answer (until then it is unknown, 404).
fn arrived(stack: &GatewayStack, url: &str) -> e2e::stack::Answer {
    wait_for("the link reaches the gateway", T, || {
        let a = http("GET", &stack.url(0, url), None, None).unwrap();
        (a.status != 404).then_some(a)
    })
}

/// The owner types until `viewer` shows it: the viewer's `docker attach` may attach a
/// moment after its websocket opened, and an attach replays nothing.
fn sees_owner(owner: &Terminal, viewer: &Terminal, word: &str) {
    let start = Instant::now();
    loop {
        owner
            .send_input(format!("echo {word}-$((6*7))\r").as_bytes())
            .unwrap();
        if viewer
            .read_until(&format!("{word}-42"), Duration::from_secs(1))
            .is_ok()
        {
            return;
        }
        assert!(
            start.elapsed() < T,
            "the viewer never saw the owner's output: {:?}",
            viewer.output_so_far()
        );
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn a_viewer_watches_live_cannot_type_and_is_closed_by_revoke_expiry_lock_and_end() {
    let stack = start("anyone");
    let id = create(&stack, "alice");
    let cookie = stack.sign_in("alice");
    let owner = stack.open_as(0, &id, &cookie).unwrap();
    owner.send_input(b"echo owner-up\r").unwrap();
    owner.read_until("owner-up", T).unwrap();

    let (share_id, url) = link(&stack, &id, 600, Some(2));
    // The viewer's page: served for a valid link only.
    let page = arrived(&stack, &url);
    assert_eq!(page.status, 200);
    assert!(page.text.contains("Read-only view"), "{}", page.text);

    // Anyone with the link watches, without an account, and sees the owner's output.
    let viewer = view(&stack, &url, None).expect("an anonymous viewer");
    sees_owner(&owner, &viewer, "shared");

    // A viewer's typing never reaches the shell; the owner's does.
    viewer.send_input(b"touch /tmp/viewer-was-here\r").unwrap();
    viewer.send_input(b"echo viewer-typed-$((5*5))\r").unwrap();
    owner
        .send_input(b"touch /tmp/owner-was-here; echo touched-$((3*3))\r")
        .unwrap();
    owner.read_until("touched-9", T).unwrap();
    let container = container_id(&stack, &id);
    let files = docker(&["exec", &container, "ls", "-a", "/tmp"]);
    assert!(files.contains("owner-was-here"), "{files}");
    assert!(
        !files.contains("viewer-was-here"),
        "the viewer's input ran: {files}"
    );
    assert!(
        !owner.output_so_far().contains("viewer-typed-25"),
        "the viewer's input reached the shell"
    );

    // A viewer's window never resizes the shared terminal (its `docker attach` sees
    // no terminal). The absence of an effect has no event to wait on: the owner's own
    // resize, through the same kind of attach, shows how soon a resize lands, and the
    // viewer's is given ten times that (at least a second) to show.
    let stty = |until: &dyn Fn(&str) -> bool, deadline: Duration| -> String {
        let start = Instant::now();
        loop {
            owner.send_input(b"stty size\r").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let seen = owner.output_so_far();
            if until(&seen) || start.elapsed() >= deadline {
                return seen;
            }
        }
    };
    owner.clear_output();
    let resized = Instant::now();
    owner.resize(100, 30).unwrap();
    let seen = stty(&|out| out.contains("30 100"), T);
    let lands = resized.elapsed();
    assert!(seen.contains("30 100"), "the owner's resize landed: {seen}");
    eprintln!("the owner's resize landed within {lands:?}");
    viewer.resize(41, 13).unwrap();
    stty(&|_| false, (lands * 10).max(Duration::from_secs(1)));
    owner.send_input(b"echo sized-$((1+1))\r").unwrap();
    let seen = owner.read_until("sized-2", T).unwrap();
    assert!(
        !seen.contains("13 41"),
        "the viewer's window resized the shared terminal: {seen}"
    );

    // max_viewers = 2: a second viewer is let in, a third is not.
    let second = view(&stack, &url, None).expect("the second viewer");
    sees_owner(&owner, &second, "second");
    let third = view(&stack, &url, None).expect_err("a third viewer");
    assert_eq!(third.status(), Some(429));
    assert_eq!(third.json().unwrap()["error"]["code"], "too_many_viewers");
    // The owner's list counts them (the gateway reports every 300 ms).
    wait_for("two viewers listed", T, || {
        let shares = list(&stack, &id);
        (shares.len() == 1 && shares[0]["id"] == share_id && shares[0]["viewers"] == 2)
            .then_some(())
    });

    // A tampered, an unknown and an unknown-session link are the 404 of an unknown path.
    let unknown_path = http("GET", &stack.url(0, "/no-such-page"), None, None).unwrap();
    assert_eq!(unknown_path.status, 404);
    let mut tampered = url.clone();
    let last = if tampered.ends_with('0') { "1" } else { "0" };
    tampered.replace_range(tampered.len() - 1.., last);
    let other_session = format!("/v/{}-{}", "a".repeat(16), "0".repeat(32));
    for bad in [tampered.clone(), other_session, format!("{url}x")] {
        for path in [bad.clone(), format!("{bad}/"), format!("{bad}/token")] {
            let a = http("GET", &stack.url(0, &path), None, None).unwrap();
            assert_eq!((a.status, &a.text), (404, &unknown_path.text), "{path}");
        }
        let e = view(&stack, &bad, None).expect_err("a bad link's websocket");
        assert_eq!(
            (e.status(), e.body()),
            (Some(404), Some(unknown_path.text.as_str()))
        );
    }

    let attaches = || {
        let o = std::process::Command::new("pgrep")
            .args(["-f", &format!("attach --no-stdin {container}")])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&o.stdout).lines().count()
    };
    assert_eq!(attaches(), 2, "one read-only attach per viewer");

    // Revoke: both viewers closed within the bound, saying why; the link is then unknown.
    let alice = stack.control.token("alice", false);
    let start = Instant::now();
    let a = stack.control.call(
        "DELETE",
        &format!("/v1/sessions/{id}/shares/{share_id}"),
        Some(&alice),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    closed_within_bound(&viewer, start, "revoke");
    closed_within_bound(&second, start, "revoke (second viewer)");
    assert_eq!(
        viewer.close_reason().as_deref(),
        Some("close frame 1000 \"termgate: this share link was revoked or expired\"")
    );
    assert!(
        !owner.is_closed(),
        "revoking a link leaves the owner's terminal open"
    );
    // Their `docker attach` processes end with them: an attach left open would fill
    // the container's output buffer and freeze the owner's program.
    wait_for("the viewers' attach processes ended", T, || {
        (attaches() == 0).then_some(())
    });
    let after = http("GET", &stack.url(0, &url), None, None).unwrap();
    assert_eq!((after.status, &after.text), (404, &unknown_path.text));
    assert!(list(&stack, &id).is_empty());

    // Expiry: closed within the bound after the link's expires_at, and then unknown.
    let a = share(&stack, "alice", &id, json!({ "ttl_seconds": 4 }));
    assert_eq!(a.status, 201, "{}", a.text);
    let (expires_at, short) = (
        a.body["expires_at"].as_u64().unwrap(),
        a.body["url"].as_str().unwrap().to_owned(),
    );
    // A new link reaches the gateway with the route feed's next answer.
    let expiring = wait_for("a viewer of the short link", T, || {
        view(&stack, &short, None).ok()
    });
    expiring
        .wait_closed(T)
        .expect("closed once the link expired");
    let closed_at = expiring.closed_at().expect("closed");
    let late = unix_now() - closed_at.elapsed().as_secs_f64() - expires_at as f64;
    assert_eq!(
        expiring.close_reason().as_deref(),
        Some("close frame 1000 \"termgate: this share link was revoked or expired\"")
    );
    eprintln!("expiry → viewer closed {late:.3} s after expires_at");
    assert!((0.0..=CLOSE_BOUND.as_secs_f64()).contains(&late), "{late}");
    let after = http("GET", &stack.url(0, &short), None, None).unwrap();
    assert_eq!((after.status, &after.text), (404, &unknown_path.text));

    // The owner locked: their viewers close too, and the link admits no one.
    let (_, url) = link(&stack, &id, 600, None);
    let watching = wait_for("a viewer before the lock", T, || {
        view(&stack, &url, None).ok()
    });
    let admin = stack.control.token("root", true);
    let start = Instant::now();
    let a = stack
        .control
        .call("POST", "/v1/users/alice/lock", Some(&admin), None);
    assert!(a.status < 300, "lock: {}", a.text);
    closed_within_bound(&watching, start, "owner locked");
    let e = view(&stack, &url, None).expect_err("a viewer of a locked owner");
    assert_eq!(e.status(), Some(404));
    let a = stack
        .control
        .call("DELETE", "/v1/users/alice/lock", Some(&admin), None);
    assert!(a.status < 300, "unlock: {}", a.text);

    // The session ends: its viewers close.
    let watching = wait_for("a viewer after the unlock", T, || {
        view(&stack, &url, None).ok()
    });
    let start = Instant::now();
    let url_end = format!("{}/v1/sessions/{id}", stack.control.api);
    let end =
        std::thread::spawn(move || http("DELETE", &url_end, Some(&alice), None).unwrap().status);
    closed_within_bound(&watching, start, "session ended");
    assert_eq!(
        watching.close_reason().as_deref(),
        Some("close frame 1000 \"termgate: this session was ended\""),
        "the viewer is told why, before the container goes"
    );
    assert_eq!(end.join().unwrap(), 204);
}

#[test]
fn signed_in_links_need_a_sign_in_and_name_the_viewer_off_refuses_links() {
    let stack = start("signed-in");
    let id = create(&stack, "alice");
    let (share_id, url) = link(&stack, &id, 600, None);
    // Without a sign-in: asked for one (a valid link only; a bad one is still 404).
    let page = arrived(&stack, &url);
    assert_eq!(page.status, 401, "{}", page.text);
    let e = view(&stack, &url, None).expect_err("an anonymous viewer");
    assert_eq!(e.status(), Some(401));
    // A bad link is the unknown path's 404, signed in or not.
    let unknown_path = http("GET", &stack.url(0, "/no-such-page"), None, None).unwrap();
    let bob = stack.sign_in("bob");
    let mut tampered = url.clone();
    let last = if tampered.ends_with('0') { "1" } else { "0" };
    tampered.replace_range(tampered.len() - 1.., last);
    for cookie in [None, Some(bob.as_str())] {
        assert_eq!(
            get_page(&stack, &tampered, cookie),
            (404, unknown_path.text.clone()),
            "{tampered} with {cookie:?}"
        );
        let e = view(&stack, &tampered, cookie).expect_err("a bad link's websocket");
        assert_eq!(
            (e.status(), e.body()),
            (Some(404), Some(unknown_path.text.as_str())),
            "{tampered}/ws with {cookie:?}"
        );
    }
    // Signed in as bob (not the owner): he watches, and the owner's list names him.
    let viewer = wait_for("a signed-in viewer", T, || {
        view(&stack, &url, Some(&bob)).ok()
    });
    assert!(!viewer.is_closed());
    wait_for("bob listed as a viewer", T, || {
        let shares = list(&stack, &id);
        (shares.len() == 1
            && shares[0]["id"] == share_id
            && shares[0]["viewers"] == 1
            && shares[0]["subs"] == json!(["bob"]))
        .then_some(())
    });
    // Someone else's session: bob can neither share nor list it.
    let bob_token = stack.control.token("bob", false);
    let a = stack.control.call(
        "POST",
        &format!("/v1/sessions/{id}/shares"),
        Some(&bob_token),
        Some(json!({ "ttl_seconds": 60 })),
    );
    assert_eq!(
        (a.status, a.body["error"]["code"].as_str()),
        (404, Some("session_not_found"))
    );
    let a = stack.control.call(
        "GET",
        &format!("/v1/sessions/{id}/shares"),
        Some(&bob_token),
        None,
    );
    assert_eq!(
        (a.status, a.body["error"]["code"].as_str()),
        (404, Some("session_not_found")),
        "bob lists someone else's links: {}",
        a.text
    );
    // Out-of-range requests are refused.
    for body in [
        json!({ "ttl_seconds": 0 }),
        json!({ "ttl_seconds": 60, "max_viewers": 0 }),
    ] {
        let a = share(&stack, "alice", &id, body);
        assert_eq!(
            (a.status, a.body["error"]["code"].as_str()),
            (400, Some("invalid_share"))
        );
    }
    drop(viewer);
    drop(stack);

    // A profile with shares = "off" makes no links.
    let stack = start("off");
    let id = create(&stack, "alice");
    let a = share(&stack, "alice", &id, json!({ "ttl_seconds": 60 }));
    assert_eq!(
        (a.status, a.body["error"]["code"].as_str()),
        (403, Some("shares_off"))
    );
}

/// The text in the viewer page's terminal (xterm's buffer in ttyd's page).
const VIEWER_TEXT: &str = "(() => { \
    const f = document.getElementById('terminal-frame'); \
    const t = f && f.contentWindow && f.contentWindow.term; if (!t) return ''; \
    const b = t.buffer.active; const out = []; \
    for (let i = 0; i < b.length; i++) { const l = b.getLine(i); if (l) out.push(l.translateToString(true)); } \
    return out.join('\\n'); })()";

fn ok<R>(step: &str, r: anyhow::Result<R>) -> R {
    r.unwrap_or_else(|e| panic!("{step}: {e:#}"))
}

#[test]
fn the_owner_shares_from_the_sessions_page_and_the_link_shows_the_terminal_read_only() {
    let stack = start("anyone");
    let id = create(&stack, "alice");
    let mut b = e2e::browser::Browser::launch()
        .unwrap_or_else(|e| panic!("cannot start the browser: {e:#}"));
    let token = stack.control.token("alice", false);
    ok(
        "sign in",
        b.navigate(&stack.url(0, &format!("/#token={token}"))),
    );
    let row = format!("document.querySelector('#session-rows tr[data-session=\"{id}\"]')");
    ok(
        "the running row",
        b.wait_js(
            &format!("(() => {{ const r = {row}; return !!r && r.cells[2].textContent === 'running'; }})()"),
            T,
            "the session's row",
        ),
    );
    ok(
        "click Share",
        b.eval(&format!(
            "[...{row}.querySelectorAll('button')].find((x) => x.textContent === 'Share').click()"
        )),
    );
    ok(
        "create a link",
        b.eval(
            "document.getElementById('share-max').value = '3'; \
                document.querySelector('#share-form button[type=submit]').click()",
        ),
    );
    let link = ok(
        "the new link",
        b.wait_js(
            "(() => { const u = document.getElementById('share-url'); \
               return !document.getElementById('share-new').hidden && u.value ? u.value : null; })()",
            T,
            "the link shown once",
        ),
    );
    let link = link.as_str().unwrap().to_owned();
    assert!(
        link.starts_with(&format!("{}/v/{id}-", stack.origin(0))),
        "{link}"
    );
    ok(
        "the link listed",
        b.wait_js(
            "document.querySelectorAll('#share-rows tr').length === 1",
            T,
            "one link",
        ),
    );

    // Someone without an account opens the link: the terminal, read-only, named so.
    ok("sign out of the browser", b.clear_cookies());
    let path = link.trim_start_matches(&stack.origin(0)).to_owned();
    arrived(&stack, &path);
    ok("open the link", b.navigate(&link));
    ok(
        "the viewer's bar",
        b.wait_js(
            &format!("document.getElementById('terminal-title').textContent === 'Read-only view of {id}'"),
            T,
            "the read-only bar",
        ),
    );
    ok(
        "ttyd's page in the frame",
        b.wait_js(
            "(() => { const f = document.getElementById('terminal-frame'); \
               return !!f.contentWindow.term && f.contentDocument.title === 'termgate'; })()",
            T,
            "ttyd's terminal, connected",
        ),
    );
    let owner = stack
        .open_as(0, &id, &stack.sign_in("alice"))
        .expect("the owner's terminal");
    let start = Instant::now();
    loop {
        owner.send_input(b"echo in-browser-$((6*7))\r").unwrap();
        let seen = b
            .wait_js(
                &format!("(() => {{ const s = {VIEWER_TEXT}; return s.includes('in-browser-42') ? s : ''; }})()"),
                Duration::from_secs(1),
                "the owner's output in the viewer",
            )
            .is_ok();
        if seen {
            break;
        }
        assert!(
            start.elapsed() < T,
            "the viewer page never showed the owner's output"
        );
    }
    // Typing into the viewer's terminal reaches nothing.
    ok(
        "focus",
        b.eval("document.getElementById('terminal-frame').contentWindow.term.focus()"),
    );
    ok("type", b.insert_text("touch /tmp/typed-in-browser"));
    ok("enter", b.press_enter());
    // The owner's typing, seen the same way, shows the check sees typed files.
    owner
        .send_input(b"touch /tmp/typed-by-owner; echo checked-$((2*4))\r")
        .unwrap();
    owner.read_until("checked-8", T).unwrap();
    let files = docker(&["exec", &container_id(&stack, &id), "ls", "-a", "/tmp"]);
    assert!(files.contains("typed-by-owner"), "{files}");
    assert!(!files.contains("typed-in-browser"), "{files}");
}

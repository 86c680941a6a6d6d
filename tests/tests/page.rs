//! What a walk through the sessions page found, each in a real browser (headless
//! chromium) in front of real control, ttyd and session containers: a peer's terminal
//! that stays open, last input on a session that does not record, only the actions a
//! profile allows, a signed-out viewer who signs in and lands on the link, a new
//! session's terminal opened at once, and the header on a phone.

use std::time::Duration;

use e2e::browser::Browser;
use e2e::page::{
    artifact, check_js, click_row_button, launch, ok, sign_in_by_link, sign_in_by_link_as,
    wait_connected, TERMINAL_TEXT,
};
use e2e::stack::{wait_for, ControlStack, GatewayStack};
use e2e::ttyd::{CountingProxy, TtydPool};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(15);

/// A stack whose control has `extra` TOML and `env`, whose gateway reports input and
/// terminals every 300 ms and sends viewers to a read-only pool.
fn stack(extra: &str, env: &[(&str, &str)]) -> GatewayStack {
    let mut control = ControlStack::prepare(extra);
    for (k, v) in env {
        control.set_env(k, v);
    }
    control.spawn(&[]);
    let ttyd = TtydPool::start_for(&control.instance);
    let counter = CountingProxy::start(ttyd.target());
    let mut stack = GatewayStack::assemble(control, ttyd, counter);
    stack.viewers = Some(TtydPool::start_viewers_for(&stack.control.instance));
    stack.gateways.clear();
    stack.spawn_gateway(&[
        ("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "300"),
        ("TERMGATE__GATEWAY__TERMINAL_REPORT_MS", "300"),
    ]);
    stack
}

/// Creates a session as `sub` with `body` (the default profile unless it names one).
fn create(stack: &GatewayStack, sub: &str, mut body: Value) -> Value {
    if body.get("profile").is_none() {
        body["profile"] = json!("default");
    }
    let made = stack.control.call(
        "POST",
        "/v1/sessions",
        Some(&stack.control.token(sub, false)),
        Some(body),
    );
    assert_eq!(made.status, 201, "{}", made.text);
    made.body
}

fn session(stack: &GatewayStack, sub: &str, id: &str) -> (u16, Value) {
    let a = stack.control.call(
        "GET",
        &format!("/v1/sessions/{id}"),
        Some(&stack.control.token(sub, false)),
        None,
    );
    (a.status, a.body)
}

/// Types `line` and Enter into the terminal shown, and waits for `answer` in it.
fn type_and_wait(b: &mut Browser, line: &str, answer: &str) {
    ok(
        "focus the terminal",
        b.eval("document.getElementById('terminal-frame').contentWindow.term.focus()"),
    );
    ok("type", b.insert_text(line));
    ok("press Enter", b.press_enter());
    ok(
        "the shell's answer",
        b.wait_js(
            &format!("{TERMINAL_TEXT}.includes({})", json!(answer)),
            T,
            &format!("{answer} in the terminal"),
        ),
    );
}

#[test]
fn a_peers_terminal_stays_open_past_the_pages_checks_and_says_why_when_the_invitation_goes() {
    let stack = stack("", &[("TERMGATE__PROFILES__DEFAULT__PEERS", "true")]);
    let id = create(&stack, "alice", json!({}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let owner = stack.open_as(0, &id, &stack.sign_in("alice")).unwrap();
    let alice = stack.control.token("alice", false);
    let invited = stack.control.call(
        "POST",
        &format!("/v1/sessions/{id}/peers"),
        Some(&alice),
        Some(json!({ "sub": "bob", "ttl_seconds": 3600 })),
    );
    assert_eq!(invited.status, 201, "{}", invited.text);

    // What the page asks while the terminal is open: the session, as bob sees it.
    let (status, seen) = session(&stack, "bob", &id);
    assert_eq!(status, 200, "a peer reads the session it co-drives: {seen}");
    assert_eq!(seen["role"], "peer", "{seen}");
    assert_eq!(seen["state"], "running", "{seen}");
    assert!(seen.get("peers").is_none(), "{seen}");
    assert_eq!(
        seen["allows"],
        json!({"share": false, "peers": false, "recording_links": false}),
        "a peer may do nothing of the owner's: {seen}"
    );
    assert_eq!(session(&stack, "carol", &id).0, 404, "a stranger does not");

    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "bob");
    click_row_button(&mut b, &id, "Open");
    wait_connected(&mut b);
    // Several of the page's checks (every 2 s) go by; the terminal stays.
    std::thread::sleep(Duration::from_secs(11));
    check_js(
        &mut b,
        "the terminal is still shown, nothing said of an end",
        "!document.getElementById('terminal').hidden \
         && !document.getElementById('status').textContent.includes('ended') \
         && document.getElementById('terminal-state').textContent === 'Connected'",
    );
    type_and_wait(&mut b, "echo peer-still-$((40+2))", "peer-still-42");
    owner
        .read_until("peer-still-42", T)
        .expect("bob's typing reaches alice's terminal");

    // Alice withdraws the invitation: bob's terminal closes and the page says why.
    let removed = stack.control.call(
        "DELETE",
        &format!("/v1/sessions/{id}/peers/bob"),
        Some(&alice),
        None,
    );
    assert_eq!(removed.status, 204, "{}", removed.text);
    ok(
        "the page says the access ended",
        b.wait_js(
            "document.getElementById('terminal').hidden \
             && document.getElementById('status').textContent === \
                'This session was ended, or your invitation to it was.'",
            T,
            "the list, with why the terminal closed",
        ),
    );
    let (_, still) = session(&stack, "alice", &id);
    assert_eq!(
        still["state"], "running",
        "alice's session goes on: {still}"
    );
}

#[test]
fn typing_in_the_page_moves_last_input_of_a_session_that_does_not_record() {
    // The default profile: no recording, no limits.
    let stack = stack("", &[]);
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    let id = create(&stack, "alice", json!({ "name": "no-record" }))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok("reload the list", b.navigate(&stack.url(0, "/")));
    ok(
        "the row, never typed into",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
                   return !!r && r.cells[6].textContent === '—'; }})()"
            ),
            T,
            "Last input —",
        ),
    );
    click_row_button(&mut b, &id, "Open");
    wait_connected(&mut b);
    type_and_wait(&mut b, "echo typed-$((6*7))", "typed-42");
    let (_, s) = wait_for("the input to reach control", T, || {
        let (status, s) = session(&stack, "alice", &id);
        s.get("last_input").is_some().then_some((status, s))
    });
    assert!(s.get("ends_at").is_none(), "no limits: {s}");
    ok(
        "back to the list",
        b.eval("document.getElementById('close-terminal').click()"),
    );
    ok(
        "the row shows it",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
                   return !!r && / s ago$/.test(r.cells[6].textContent); }})()"
            ),
            Duration::from_secs(30),
            "Last input … s ago",
        ),
    );
}

/// The buttons of the first recording listed under session `id` (named `name`), once
/// one is listed: its Recordings clicked again until its recording is uploaded.
fn recording_buttons(b: &mut Browser, id: &str, name: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        click_row_button(b, id, "Recordings");
        let shown = ok(
            "the recordings list",
            b.wait_js(
                &format!(
                    "(() => {{ if (document.getElementById('recordings').hidden \
                       || document.getElementById('recordings-title').textContent !== {}) return null; \
                       const r = document.querySelector('#recording-rows tr'); \
                       return r ? [...r.querySelectorAll('button')].map((x) => x.textContent) : false; }})()",
                    json!(format!("Recordings of {name}"))
                ),
                T,
                "the session's recordings",
            ),
        );
        if shown != json!(false) {
            return shown;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no recording of {name} listed"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn each_row_offers_only_what_its_profile_allows() {
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    let extra = format!(
        r#"
[profiles.closed]
image = "{image}"
shares = "off"
recording_links = "off"
peers = false
record = true

[profiles.open]
image = "{image}"
shares = "anyone"
recording_links = "signed-in"
peers = true
record = true
"#
    );
    let stack = stack(&extra, &[]);
    let closed = create(
        &stack,
        "alice",
        json!({ "profile": "closed", "name": "closed" }),
    );
    let open = create(
        &stack,
        "alice",
        json!({ "profile": "open", "name": "open" }),
    );
    assert_eq!(
        closed["allows"],
        json!({"share": false, "peers": false, "recording_links": false}),
        "{closed}"
    );
    assert_eq!(
        open["allows"],
        json!({"share": true, "peers": true, "recording_links": true}),
        "{open}"
    );
    let (closed, open) = (
        closed["id"].as_str().unwrap().to_owned(),
        open["id"].as_str().unwrap().to_owned(),
    );
    // One recording each.
    for id in [&closed, &open] {
        let t = stack.open_as(0, id, &stack.sign_in("alice")).unwrap();
        t.send_input(b"echo rec-$((1+1))\r").unwrap();
        t.read_until("rec-2", T).unwrap();
    }
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    let buttons = |b: &mut Browser, id: &str| {
        ok(
            "the row's buttons",
            b.wait_js(
                &format!(
                    "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
                       return r ? [...r.querySelectorAll('button')].map((x) => x.textContent) : null; }})()"
                ),
                T,
                "the session's row",
            ),
        )
    };
    assert_eq!(
        buttons(&mut b, &closed),
        json!(["Open", "End", "Recordings"]),
        "a profile that allows neither links nor peers"
    );
    assert_eq!(
        buttons(&mut b, &open),
        json!(["Open", "Share", "Peers", "End", "Recordings"]),
        "a profile that allows both"
    );
    let closed_rec = recording_buttons(&mut b, &closed, "closed");
    assert!(
        !closed_rec.as_array().unwrap().contains(&json!("Share")),
        "no link to a recording its profile refuses links to: {closed_rec}"
    );
    let open_rec = recording_buttons(&mut b, &open, "open");
    assert!(
        open_rec.as_array().unwrap().contains(&json!("Share")),
        "{open_rec}"
    );
}

#[test]
fn a_signed_out_viewer_of_a_signed_in_link_signs_in_and_lands_on_the_link() {
    let stack = stack("", &[("TERMGATE__PROFILES__DEFAULT__SHARES", "signed-in")]);
    let alice = stack.control.token("alice", false);
    let id = create(&stack, "alice", json!({}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let owner = stack.open_as(0, &id, &stack.sign_in("alice")).unwrap();
    owner.send_input(b"echo shown-$((3*3))\r").unwrap();
    owner.read_until("shown-9", T).unwrap();
    let link = stack.control.call(
        "POST",
        &format!("/v1/sessions/{id}/shares"),
        Some(&alice),
        Some(json!({ "ttl_seconds": 600 })),
    );
    assert_eq!(link.status, 201, "{}", link.text);
    assert_eq!(link.body["signed_in"], true, "{}", link.text);
    let url = link.body["url"].as_str().unwrap().to_owned();

    let mut b = launch();
    ok("open the link signed out", b.navigate(&stack.url(0, &url)));
    ok(
        "the refusal offers a sign-in",
        b.wait_js(
            "document.querySelector('h2') && document.querySelector('h2').textContent.startsWith('401') \
             && !!document.getElementById('sign-in-then')",
            T,
            "401 with a Sign in link",
        ),
    );
    let href = ok(
        "the sign-in link",
        b.eval("document.getElementById('sign-in-then').getAttribute('href')"),
    );
    assert_eq!(
        href,
        json!(format!("/#next={url}")),
        "the link rides in the fragment"
    );
    ok(
        "click Sign in",
        b.eval("document.getElementById('sign-in-then').click()"),
    );
    ok(
        "the sign-in form",
        b.wait_js(
            "!document.getElementById('sign-in').hidden && location.hash === ''",
            T,
            "the sign-in form, the fragment taken from the address bar",
        ),
    );
    let bob = stack.control.token("bob", false);
    ok(
        "sign in as bob",
        b.eval(&format!(
            "document.getElementById('token').value = {}; \
             document.querySelector('#sign-in-form button[type=submit]').click()",
            json!(bob)
        )),
    );
    ok(
        "back on the link, watching",
        b.wait_js(
            &format!(
                "location.pathname === {} \
                 && document.getElementById('terminal-state').textContent === 'Watching (you cannot type here)'",
                json!(url)
            ),
            T,
            "the viewer page of the link",
        ),
    );
    // An attach replays nothing, and the page says "Watching" once ttyd's page has
    // loaded, a moment before its websocket is attached: alice types until bob sees it.
    let deadline = std::time::Instant::now() + T;
    loop {
        owner.send_input(b"echo watched-$((4*4))\r").unwrap();
        let seen = b.wait_js(
            &format!("{TERMINAL_TEXT}.includes('watched-16')"),
            Duration::from_secs(1),
            "watched-16 in the read-only terminal",
        );
        if seen.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "what alice typed never reached bob's read-only terminal"
        );
    }
    ok(
        "viewer.png",
        b.screenshot(&artifact("signed-in-viewer.png")),
    );
}

#[test]
fn a_new_sessions_terminal_opens_at_once_unless_the_page_is_told_to_stay() {
    let stack = stack("", &[]);
    let mut b = launch();
    ok("a laptop viewport", b.set_viewport(1280, 800, false));
    sign_in_by_link(&mut b, &stack, "alice");
    check_js(
        &mut b,
        "opening is the default",
        "document.getElementById('open-after-create').checked",
    );
    ok(
        "create",
        b.eval(
            "document.getElementById('name').value = 'landed'; \
             document.querySelector('#create-form button[type=submit]').click()",
        ),
    );
    wait_connected(&mut b);
    check_js(
        &mut b,
        "the new session's terminal",
        "document.getElementById('terminal-title').textContent === 'landed'",
    );
    type_and_wait(&mut b, "echo landed-$((5*5))", "landed-25");
    ok(
        "back to the list",
        b.eval("document.getElementById('close-terminal').click()"),
    );
    // Told to stay: the list, the new row, and the choice kept across a reload.
    ok(
        "untick, create",
        b.eval(
            "const c = document.getElementById('open-after-create'); c.click(); \
             document.getElementById('name').value = 'stayed'; \
             document.querySelector('#create-form button[type=submit]').click()",
        ),
    );
    ok(
        "the list with the new row",
        b.wait_js(
            "[...document.querySelectorAll('#session-rows tr')].some((r) => r.cells[0].textContent === 'stayed' \
               && r.cells[2].textContent === 'running') && document.getElementById('terminal').hidden",
            Duration::from_secs(60),
            "a running row named stayed, no terminal shown",
        ),
    );
    ok("reload", b.navigate(&stack.url(0, "/")));
    ok(
        "the choice kept",
        b.wait_js(
            "!document.getElementById('sessions').hidden \
             && document.getElementById('open-after-create').checked === false",
            T,
            "the box still unticked",
        ),
    );
}

#[test]
fn at_phone_width_the_header_keeps_to_the_screen_and_clear_of_the_title() {
    let stack = stack("", &[]);
    let mut b = launch();
    ok("a phone viewport", b.set_viewport(360, 740, true));
    // A long name, an admin: the most the header holds.
    sign_in_by_link_as(
        &mut b,
        &stack,
        "maximiliane.oberhuber-schwarzenberg@engineering.example.com",
        true,
    );
    let r = ok(
        "where the header's parts are",
        b.eval(
            "(() => { const box = (id) => document.querySelector(id).getBoundingClientRect(); \
               const t = box('h1'), w = box('#who'), o = box('#sign-out'); \
               const apart = (a, b) => a.right <= b.left || b.right <= a.left || a.bottom <= b.top || b.bottom <= a.top; \
               return { title_clear: apart(t, w), inside: w.right <= innerWidth && o.right <= innerWidth, \
                        no_scroll: document.documentElement.scrollWidth <= innerWidth }; })()",
        ),
    );
    ok(
        "header-phone.png",
        b.screenshot(&artifact("header-phone.png")),
    );
    assert_eq!(
        r,
        json!({"title_clear": true, "inside": true, "no_scroll": true}),
        "the header at 360 px"
    );
}

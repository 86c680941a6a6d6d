//! The sessions page in a real browser (headless chromium over the DevTools protocol),
//! in front of real control, ttyd and session containers: sign in by link, create,
//! open, type, end; another user's 404; a phone-sized layout. Screenshots go to
//! `artifacts/browser/`.

use std::time::Duration;

use e2e::browser::Browser;
use e2e::page::{
    artifact, check_js, click_row_button, create_in_page, launch, ok, open_in_page_and_type,
    sign_in_by_link, sign_in_by_link_as, wait_connected, TERMINAL_TEXT,
};
use e2e::stack::{http, profile_ignoring_hang_up, wait_for, GatewayStack};
use serde_json::json;

const T: Duration = Duration::from_secs(15);

#[test]
fn a_user_signs_in_by_link_creates_types_and_ends_a_session_in_a_browser() {
    let stack = GatewayStack::start("");
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    let id = create_in_page(&mut b, "");

    click_row_button(&mut b, &id, "Open");
    ok(
        "the terminal frame",
        b.wait_js(
            &format!(
                "!document.getElementById('terminal').hidden \
                 && document.getElementById('terminal-frame').src.endsWith('/s/{id}/') \
                 && !!document.getElementById('terminal-frame').contentWindow.term"
            ),
            T,
            "the terminal frame's xterm",
        ),
    );
    // ttyd sets the fixed title once its websocket is open and input is forwarded.
    ok(
        "the terminal connection",
        b.wait_js(
            "document.getElementById('terminal-frame').contentDocument.title === 'termgate'",
            T,
            "ttyd's window title (its websocket is open)",
        ),
    );
    ok(
        "the bar says connected",
        b.wait_js(
            "document.getElementById('terminal-state').textContent === 'Connected'",
            T,
            "Connected in the terminal's bar",
        ),
    );
    check_js(
        &mut b,
        "the terminal fills the window under its bar",
        "(() => { const f = document.getElementById('terminal-frame').getBoundingClientRect(); \
           const bar = document.getElementById('terminal-bar').getBoundingClientRect(); \
           return f.width === window.innerWidth && bar.height < 48 \
             && Math.abs(f.bottom - window.innerHeight) < 1 && Math.abs(f.top - bar.bottom) < 2; })()",
    );
    ok(
        "focus the terminal",
        b.eval("document.getElementById('terminal-frame').contentWindow.term.focus()"),
    );
    ok("type", b.insert_text("echo hello-$((6*7))"));
    ok("press Enter", b.press_enter());
    let text = ok(
        "the shell's answer",
        b.wait_js(
            &format!("(() => {{ const s = {TERMINAL_TEXT}; return s.includes('hello-42') ? s : ''; }})()"),
            T,
            "hello-42 in the terminal buffer",
        ),
    );
    assert!(
        text.as_str().unwrap().contains("echo hello-$((6*7))"),
        "the typed command is echoed: {text}"
    );
    ok("terminal.png", b.screenshot(&artifact("terminal.png")));
    assert_eq!(
        ok(
            "page overflow",
            b.eval(
                "[document.documentElement.scrollWidth - document.documentElement.clientWidth, \
                  document.documentElement.scrollHeight - document.documentElement.clientHeight]"
            )
        ),
        json!([0, 0]),
        "the terminal view fits the window: only the terminal scrolls"
    );

    ok(
        "Back to sessions",
        b.eval("document.getElementById('close-terminal').click()"),
    );
    ok(
        "the sessions list again",
        b.wait_js(
            "!document.getElementById('sessions').hidden && document.getElementById('terminal').hidden",
            T,
            "the sessions list",
        ),
    );
    assert_eq!(
        b.dialogs(),
        &[] as &[String],
        "going back must not ask to leave the page"
    );
    click_row_button(&mut b, &id, "End");
    ok(
        "the ended session",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#ended-rows tr[data-session=\"{id}\"]'); \
                 return !!r && r.cells[1].textContent === 'terminated' \
                   && !document.querySelector('#session-rows tr[data-session=\"{id}\"]'); }})()"
            ),
            T,
            "the session under Ended sessions as terminated",
        ),
    );
    assert_eq!(
        ok(
            "status",
            b.eval("document.getElementById('status').textContent")
        ),
        json!("Session default ended.")
    );
    ok("sessions.png", b.screenshot(&artifact("sessions.png")));

    // The same page on a phone: one running and one ended session.
    ok("phone viewport", b.set_viewport(390, 844, true));
    ok("reload", b.navigate(&stack.url(0, "/")));
    ok(
        "the sessions list on a phone",
        b.wait_js(
            "!document.getElementById('sessions').hidden && document.querySelectorAll('#ended-rows tr').length > 0",
            T,
            "the sessions list (signed in by cookie)",
        ),
    );
    let second = create_in_page(&mut b, "build-and-deploy-the-documentation-site");
    let overflow = ok(
        "horizontal overflow",
        b.eval("document.documentElement.scrollWidth - document.documentElement.clientWidth"),
    );
    let visible = ok(
        "visible columns",
        b.eval(
            "[...document.querySelectorAll('#session-rows tr:first-child td, #ended-rows tr:first-child td')] \
             .filter((c) => getComputedStyle(c).display !== 'none').map((c) => c.textContent)",
        ),
    );
    ok("phone.png", b.screenshot(&artifact("phone.png")));
    assert_eq!(overflow, json!(0), "the page scrolls sideways on a phone");
    assert!(
        visible.as_array().unwrap().contains(&json!("running"))
            && visible.as_array().unwrap().contains(&json!("terminated")),
        "a phone shows both states: {visible}"
    );

    // Ended elsewhere (another tab, an admin): Open on the stale row says so in words.
    let token = stack.control.token("alice", false);
    let gone = stack.control.call(
        "DELETE",
        &format!("/v1/sessions/{second}"),
        Some(&token),
        None,
    );
    assert!(gone.status < 300, "end {second}: {}", gone.text);
    let terminal = stack.url(0, &format!("/s/{second}/"));
    wait_for("the gateway to forget the ended session", T, || {
        http("GET", &terminal, Some(&token), None)
            .ok()
            .filter(|a| a.status == 404)
    });
    click_row_button(&mut b, &second, "Open");
    ok(
        "the refusal in words",
        b.wait_js(
            &format!(
                "document.getElementById('status').textContent === {} \
                 && document.getElementById('status').className === 'error' \
                 && !document.getElementById('sessions').hidden \
                 && !!document.querySelector('#ended-rows tr[data-session=\"{second}\"]')",
                json!("That session does not exist (or is not yours).")
            ),
            T,
            "the session_not_found message and the refreshed list",
        ),
    );
    ok(
        "phone-ended.png",
        b.screenshot(&artifact("phone-ended.png")),
    );
    assert!(
        !b.console()
            .iter()
            .any(|l| l.contains("Content Security Policy") || l.starts_with("uncaught")),
        "the page must run without CSP violations or uncaught errors: {:#?}",
        b.console()
    );
}

#[test]
fn another_user_in_the_browser_gets_the_404_for_someone_elses_terminal() {
    let stack = GatewayStack::start("");
    let alice_token = stack.control.token("alice", false);
    let id = stack.control.create(&alice_token)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let terminal_url = stack.url(0, &format!("/s/{id}/"));
    let mut b = launch();
    let status = "performance.getEntriesByType('navigation')[0].responseStatus";

    // Alice's own browser loads her terminal page.
    sign_in_by_link(&mut b, &stack, "alice");
    ok("alice opens her terminal", b.navigate(&terminal_url));
    assert_eq!(ok("status", b.eval(status)), json!(200));

    // Bob, in a browser without alice's cookie, signs in and tries her terminal's URL.
    // His link is opened over the sessions page, where only the fragment changes.
    ok("back to the sessions page", b.navigate(&stack.url(0, "/")));
    ok("clear cookies", b.clear_cookies());
    sign_in_by_link(&mut b, &stack, "bob");
    assert_eq!(
        ok(
            "bob's rows",
            b.eval("document.querySelectorAll('#session-rows tr').length")
        ),
        json!(0),
        "bob must not see alice's session"
    );
    ok("bob opens alice's terminal", b.navigate(&terminal_url));
    assert_eq!(ok("status", b.eval(status)), json!(404));
    let body = ok("body text", b.eval("document.body.innerText"));
    assert!(
        body.as_str().unwrap().contains("session_not_found"),
        "the 404 names the error: {body}"
    );
    ok("not-found.png", b.screenshot(&artifact("not-found.png")));
}

#[test]
fn a_sign_in_link_for_another_user_never_switches_accounts_silently() {
    let stack = GatewayStack::start("");
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    let whoami = |b: &mut Browser| {
        ok(
            "who the cookie says",
            b.eval(
                "fetch('/auth/session', {credentials: 'same-origin'}).then((r) => r.json()).then((j) => j.sub)",
            ),
        )
    };
    assert_eq!(whoami(&mut b), json!("alice"));

    // An attacker's link for their own account, opened in alice's signed-in tab: the
    // page asks, and until alice answers her cookie stays hers.
    let mallory = stack.control.token("mallory", false);
    let link_asks = |b: &mut Browser, step: &str| {
        ok(
            step,
            b.eval(&format!(
                "location.hash = {}",
                json!(format!("token={mallory}"))
            )),
        );
        ok(
            "the question",
            b.wait_js(
                "!document.getElementById('switch').hidden \
                 && document.getElementById('switch-text').textContent.includes('mallory') \
                 && document.getElementById('switch-text').textContent.includes('alice')",
                T,
                "the switch question naming both users",
            ),
        );
    };
    link_asks(&mut b, "open mallory's link over the page");
    ok("switch.png", b.screenshot(&artifact("switch.png")));
    assert_eq!(
        whoami(&mut b),
        json!("alice"),
        "nothing switched before the answer"
    );
    assert_eq!(
        ok(
            "who is shown",
            b.eval("document.getElementById('who-name').textContent")
        ),
        json!("alice")
    );
    ok(
        "stay alice",
        b.eval("document.getElementById('switch-no').click()"),
    );
    ok(
        "the question gone",
        b.wait_js(
            "document.getElementById('switch').hidden",
            T,
            "the question to go",
        ),
    );
    assert_eq!(whoami(&mut b), json!("alice"), "declining keeps alice");

    // Asked again and confirmed, the switch happens: the question is the only gate.
    link_asks(&mut b, "open mallory's link again");
    ok(
        "switch to mallory",
        b.eval("document.getElementById('switch-yes').click()"),
    );
    ok(
        "mallory shown",
        b.wait_js(
            "document.getElementById('who-name').textContent === 'mallory'",
            T,
            "mallory signed in",
        ),
    );
    assert_eq!(whoami(&mut b), json!("mallory"));
}

#[test]
fn a_session_ended_elsewhere_is_announced_in_words_at_once_not_left_reconnecting() {
    // Its program ignores the hang-up, so the container outlives the end by its whole
    // grace: the page must say the session ended without waiting for the container.
    let stack = GatewayStack::start(&profile_ignoring_hang_up("stubborn", 10));
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    ok(
        "choose the profile",
        b.eval(
            "(() => { const p = document.getElementById('profile'); p.value = 'stubborn'; \
             p.dispatchEvent(new Event('change')); })()",
        ),
    );
    let id = create_in_page(&mut b, "");
    click_row_button(&mut b, &id, "Open");
    wait_connected(&mut b);
    // Ended from somewhere else (another tab, an admin): the gateway closes the
    // terminal with a close frame, and the page says what happened. The page's
    // two-second check is stopped first, so the close frame is the only event that can
    // make it ask: what is waited for is that event, not a clock.
    assert_eq!(
        ok(
            "the page's periodic check stopped",
            b.eval("clearInterval(watching), watched !== null"),
        ),
        json!(true),
        "the page watches the open session"
    );
    let admin = stack.control.token("root", true);
    let start = std::time::Instant::now();
    let r = stack
        .control
        .call("DELETE", &format!("/v1/sessions/{id}"), Some(&admin), None);
    assert_eq!(r.status, 204, "{}", r.text);
    // Only the gateway's close frame (code 1000) makes the page ask now.
    let status = ok(
        "the close frame makes the page say the session ended",
        b.wait_js(
            "(() => { const s = document.getElementById('status').textContent; \
              return document.getElementById('terminal').hidden \
                && s.startsWith('This session was ended') ? s : ''; })()",
            T,
            "the ended message",
        ),
    );
    eprintln!(
        "figures: DELETE → the page says the session ended: {:?}",
        start.elapsed()
    );
    assert_eq!(
        status,
        json!("This session was ended (ended by an admin)."),
        "the reason is given"
    );
    ok("ended.png", b.screenshot(&artifact("ended.png")));
}

#[test]
fn a_target_with_a_password_opens_from_the_sessions_page_without_the_password_in_the_browser() {
    let secret = "s3cret-browser-pass";
    let ttyd = e2e::ttyd::TtydPool::start_plain(
        false,
        &[
            "-c",
            &format!("user:{secret}"),
            "-t",
            "titleFixed=build-box",
        ],
    );
    let cred_dir = e2e::ttyd::private_dir("tg-cred.");
    let cred = cred_dir.path().join("build-box.cred");
    std::fs::write(&cred, format!("user:{secret}\n")).unwrap();
    let stack = GatewayStack::start(&format!(
        "[[targets]]\nname = \"build-box\"\nupstream = \"http://127.0.0.1:{}\"\nusers = [\"alice\"]\ncredential = {{ basic_file = {:?} }}\n",
        ttyd.port().unwrap(),
        cred.to_str().unwrap()
    ));
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    let id = ok(
        "the target's row",
        b.wait_js(
            "(() => { const r = [...document.querySelectorAll('#session-rows tr')].find((r) => \
               r.cells[0].textContent === 'build-box'); return r ? r.dataset.session : null; })()",
            T,
            "a row named build-box",
        ),
    );
    let id = id.as_str().expect("target id").to_owned();
    assert_eq!(
        ok(
            "the row's buttons",
            b.eval(&format!(
                "[...document.querySelector('#session-rows tr[data-session=\"{id}\"]').querySelectorAll('button')].map((x) => x.textContent)"
            ))
        ),
        json!(["Open"]),
        "a target is opened, never ended, from the page"
    );
    click_row_button(&mut b, &id, "Open");
    ok(
        "the target's terminal",
        b.wait_js(
            "document.getElementById('terminal-frame').contentDocument \
             && document.getElementById('terminal-frame').contentDocument.title === 'build-box' \
             && !!document.getElementById('terminal-frame').contentWindow.term",
            T,
            "ttyd's window title (its websocket is open)",
        ),
    );
    ok(
        "focus the terminal",
        b.eval("document.getElementById('terminal-frame').contentWindow.term.focus()"),
    );
    ok("type", b.insert_text("echo target-$((6*7))"));
    ok("press Enter", b.press_enter());
    ok(
        "the shell's answer",
        b.wait_js(
            &format!("(() => {{ const s = {TERMINAL_TEXT}; return s.includes('target-42') ? s : ''; }})()"),
            T,
            "target-42 in the terminal buffer",
        ),
    );
    ok("target.png", b.screenshot(&artifact("target.png")));
    // What the page's scripts could read: nothing holds the password or its token.
    let seen = ok(
        "the frame's view of the token",
        b.eval(
            "fetch(document.getElementById('terminal-frame').src + 'token').then((r) => r.text())",
        ),
    );
    let encoded = "dXNlcjpzM2NyZXQtYnJvd3Nlci1wYXNz";
    assert!(
        !seen.to_string().contains(secret) && !seen.to_string().contains(encoded),
        "{seen}"
    );
}

#[test]
fn the_admin_console_shows_every_session_ends_one_locks_a_user_and_searches_the_audit() {
    let stack = GatewayStack::start("");
    let c = &stack.control;
    let (alice, bob) = (c.token("alice", false), c.token("bob", false));
    let alices = c.create(&alice)["id"].as_str().unwrap().to_owned();
    let bobs = c.create(&bob)["id"].as_str().unwrap().to_owned();

    // Anyone but an admin gets the page of an unknown path: nothing says it exists.
    let unknown = http("GET", &stack.url(0, "/no-such-page"), Some(&bob), None).unwrap();
    for who in [Some(bob.as_str()), None, Some("not-a-token")] {
        let r = http("GET", &stack.url(0, "/admin"), who, None).unwrap();
        assert_eq!(
            (r.status, &r.text),
            (404, &unknown.text),
            "/admin as {who:?}"
        );
    }

    let mut b = launch();
    ok("a laptop viewport", b.set_viewport(1280, 800, false));
    sign_in_by_link_as(&mut b, &stack, "root", true);
    check_js(
        &mut b,
        "the sessions page links the console for an admin",
        "!document.getElementById('admin-link').hidden",
    );
    ok("open the console", b.navigate(&stack.url(0, "/admin")));
    ok(
        "both users' sessions listed",
        b.wait_js(
            &format!(
                "['{alices}', '{bobs}'].every((id) => \
                   !!document.querySelector(`#active-rows tr[data-id=\"${{id}}\"]`))"
            ),
            T,
            "rows of alice's and bob's sessions",
        ),
    );
    check_js(
        &mut b,
        "owner and host are shown",
        &format!(
            "(() => {{ const cells = [...document.querySelector('#active-rows tr[data-id=\"{alices}\"]').cells].map((c) => c.textContent); \
               return cells[0] === 'alice' && cells[2] === 'local' && cells[3] === 'running'; }})()"
        ),
    );
    // What the recordings hold and the rules that keep them (the defaults: none).
    ok(
        "the recordings kept",
        b.wait_js(
            "/^\\d+ recordings?, \\d+(\\.\\d)? (bytes|KiB|MiB|GiB)/.test(document.getElementById('kept-summary').textContent) \
             && document.getElementById('kept-rules').textContent === \
                'Rules: kept without an age limit, no cap per user, no cap in all.'",
            T,
            "the recordings' summary and rules",
        ),
    );
    // Gateways report even when no terminal is open: the console says 0, not "—".
    ok(
        "no terminal open on alice's row",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#active-rows tr[data-id=\"{alices}\"]'); \
                   return !!r && r.cells[6].textContent === '0'; }})()"
            ),
            Duration::from_secs(30),
            "Terminals 0 on alice's row",
        ),
    );
    // Bob opens a terminal and types: the console shows it open and his last input
    // (gateways report both every few seconds).
    let cookie = stack.sign_in("bob");
    let t = stack
        .open_as(0, &bobs, &cookie)
        .expect("bob opens his terminal");
    t.send_input(b"echo typed-$((3*3))\r").unwrap();
    t.read_until("typed-9", T).unwrap();
    ok(
        "one terminal open and the last input on bob's row",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#active-rows tr[data-id=\"{bobs}\"]'); \
                   return !!r && r.cells[6].textContent === '1' && r.cells[5].textContent.endsWith(' ago') \
                     && r.cells[7].textContent === '0' && r.cells[8].textContent === '—'; }})()"
            ),
            Duration::from_secs(30),
            "Terminals 1, a last input, Viewers 0 and Ends — on bob's row",
        ),
    );
    ok(
        "admin-console.png",
        b.screenshot(&artifact("admin-console.png")),
    );
    drop(t);
    ok(
        "no terminal open on bob's row once he closed it",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#active-rows tr[data-id=\"{bobs}\"]'); \
                   return !!r && r.cells[6].textContent === '0'; }})()"
            ),
            Duration::from_secs(30),
            "Terminals 0 on bob's row",
        ),
    );

    // End alice's session from the console: gone from the list, ended by root.
    check_js(
        &mut b,
        "click End on alice's row",
        &format!(
            "(() => {{ const r = document.querySelector('#active-rows tr[data-id=\"{alices}\"]'); \
               const btn = r && [...r.querySelectorAll('button')].find((x) => x.textContent === 'End'); \
               if (!btn) return false; btn.click(); return true; }})()"
        ),
    );
    ok(
        "alice's session listed as ended by root",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#ended-rows tr[data-id=\"{alices}\"]'); \
                   return !document.querySelector('#active-rows tr[data-id=\"{alices}\"]') \
                     && !!r && r.cells[4].textContent === 'root'; }})()"
            ),
            T,
            "the ended row",
        ),
    );
    let gone = c.call("GET", &format!("/v1/sessions/{alices}"), Some(&alice), None);
    assert_eq!(
        (gone.body["state"].as_str(), gone.body["ended_by"].as_str()),
        (Some("terminated"), Some("root")),
        "{}",
        gone.text
    );

    // Lock bob with the keyboard: type the name, Enter submits the form.
    check_js(
        &mut b,
        "focus the user field",
        "(() => { const i = document.getElementById('lock-sub'); i.focus(); return document.activeElement === i; })()",
    );
    ok("type bob", b.insert_text("bob"));
    ok("submit with Enter", b.press_enter());
    ok(
        "bob listed as locked",
        b.wait_js(
            "!!document.querySelector('#locked-list li[data-sub=\"bob\"]')",
            T,
            "bob in the locked list",
        ),
    );
    let refused = c.call(
        "POST",
        "/v1/sessions",
        Some(&bob),
        Some(json!({"profile": "default"})),
    );
    assert_eq!(
        (refused.status, refused.body["error"]["code"].as_str()),
        (403, Some("user_locked")),
        "{}",
        refused.text
    );

    // The audit trail of alice: her create, and root's end of her session.
    check_js(
        &mut b,
        "search alice's audit lines",
        "(() => { document.getElementById('audit-sub').value = 'alice'; \
           document.getElementById('audit-form').requestSubmit(); return true; })()",
    );
    let lines = ok(
        "alice's audit lines",
        b.wait_js(
            &format!(
                "(() => {{ const rows = [...document.querySelectorAll('#audit-rows tr')].map((r) => r.textContent); \
                   const created = rows.some((t) => t.includes('session created') && t.includes('{alices}')); \
                   const ended = rows.some((t) => t.includes('session ended') && t.includes('{alices}') && t.includes('sub=root')); \
                   return created && ended && rows.every((t) => t.includes('alice')) ? rows.length : 0; }})()"
            ),
            T,
            "the create and the end of alice's session, and only lines about alice",
        ),
    );
    assert!(lines.as_u64().unwrap_or(0) >= 2, "{lines}");
    ok(
        "admin-console-audit.png",
        b.screenshot(&artifact("admin-console-audit.png")),
    );

    // Unlock from the list; bob may create again.
    check_js(
        &mut b,
        "click Unlock next to bob",
        "(() => { const li = document.querySelector('#locked-list li[data-sub=\"bob\"]'); \
           const btn = li && li.querySelector('button'); if (!btn) return false; btn.click(); return true; })()",
    );
    ok(
        "nobody locked",
        b.wait_js(
            "!document.getElementById('no-locked').hidden",
            T,
            "the empty locked list",
        ),
    );
    let again = c.call(
        "POST",
        "/v1/sessions",
        Some(&bob),
        Some(json!({"profile": "default"})),
    );
    assert_eq!(again.status, 201, "{}", again.text);

    ok("a phone viewport", b.set_viewport(390, 844, true));
    ok("reload the console", b.navigate(&stack.url(0, "/admin")));
    ok(
        "the console on a phone",
        b.wait_js(
            "document.querySelectorAll('#active-rows tr').length > 0",
            T,
            "rows",
        ),
    );
    ok(
        "admin-console-phone.png",
        b.screenshot(&artifact("admin-console-phone.png")),
    );
}

#[test]
fn a_dropped_connection_is_shown_in_the_bar_and_the_terminal_comes_back_by_itself() {
    let mut stack = GatewayStack::start("");
    let mut b = launch();
    ok("a laptop viewport", b.set_viewport(1280, 800, false));
    sign_in_by_link(&mut b, &stack, "alice");
    let id = create_in_page(&mut b, "");
    click_row_button(&mut b, &id, "Open");
    ok(
        "connected",
        b.wait_js(
            "document.getElementById('terminal-state').textContent === 'Connected' \
             && !!document.getElementById('terminal-frame').contentWindow.term",
            T,
            "Connected in the terminal's bar",
        ),
    );
    ok(
        "focus the terminal",
        b.eval("document.getElementById('terminal-frame').contentWindow.term.focus()"),
    );
    ok(
        "type",
        b.insert_text("export MARK=kept-$((2*21)); echo set-$((1+1))"),
    );
    ok("press Enter", b.press_enter());
    ok(
        "the shell took it",
        b.wait_js(
            &format!("(() => {{ const s = {TERMINAL_TEXT}; return s.includes('set-2'); }})()"),
            T,
            "set-2 in the terminal",
        ),
    );

    // The network drops: the gateway goes away without a close frame.
    let (port, admin_port) = (stack.gateways[0].port, stack.gateways[0].admin_port);
    stack.gateways[0].kill9();
    let lost = ok(
        "the bar says the connection is lost",
        b.wait_js(
            "(() => { const t = document.getElementById('terminal-state').textContent; \
               return t.startsWith('Connection lost') ? t : ''; })()",
            T,
            "Connection lost in the terminal's bar",
        ),
    );
    assert_eq!(lost, json!("Connection lost: reconnecting…"));
    assert!(
        !ok(
            "still on the terminal",
            b.eval("document.getElementById('terminal').hidden")
        )
        .as_bool()
        .unwrap_or(true),
        "a drop is not an end: the terminal view stays"
    );
    ok(
        "terminal-reconnecting.png",
        b.screenshot(&artifact("terminal-reconnecting.png")),
    );

    // The gateway is back on the same address: ttyd's page reconnects by itself, to
    // the same shell.
    stack.spawn_gateway_on(port, admin_port, &[], &[], true);
    ok(
        "connected again",
        b.wait_js(
            "document.getElementById('terminal-state').textContent === 'Connected'",
            Duration::from_secs(30),
            "Connected again",
        ),
    );
    ok(
        "focus the terminal again",
        b.eval("document.getElementById('terminal-frame').contentWindow.term.focus()"),
    );
    ok("type", b.insert_text("echo \"$MARK\""));
    ok("press Enter", b.press_enter());
    ok(
        "the shell kept its state",
        b.wait_js(
            &format!("(() => {{ const s = {TERMINAL_TEXT}; return s.includes('kept-42'); }})()"),
            T,
            "kept-42 in the terminal",
        ),
    );
    ok("a phone viewport", b.set_viewport(390, 844, true));
    check_js(
        &mut b,
        "the terminal fills the phone's window too",
        "(() => { const f = document.getElementById('terminal-frame').getBoundingClientRect(); \
           return f.width === window.innerWidth && Math.abs(f.bottom - window.innerHeight) < 1; })()",
    );
    ok(
        "terminal-phone.png",
        b.screenshot(&artifact("terminal-phone.png")),
    );
}

#[test]
fn a_recorded_session_types_in_the_browser_and_its_recording_downloads_from_the_page() {
    // Chromium offers permessage-deflate: the gateway strips it on a recorded terminal.
    let stack = recorded_stack(&[]);
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    let id = create_in_page(&mut b, "recorded");
    open_in_page_and_type(&mut b, &id, &["echo recorded-$((6*7))"], &["recorded-42"]);
    ok(
        "Back to sessions",
        b.eval("document.getElementById('close-terminal').click()"),
    );
    // The terminal closed: its recording reaches control, and the page lists it.
    let listed = ok(
        "the recording in the page",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
                 const btn = r && [...r.querySelectorAll('button')].find((x) => x.textContent === 'Recordings'); \
                 if (btn) btn.click(); \
                 const a = document.querySelector('#recording-rows a'); \
                 return !document.getElementById('recordings').hidden && a ? a.getAttribute('href') : null; }})()"
            ),
            Duration::from_secs(30),
            "a download link in the recordings table",
        ),
    );
    let href = listed.as_str().expect("a link").to_owned();
    assert!(
        href.starts_with(&format!("/api/sessions/{id}/recordings/")),
        "{href}"
    );
    // Downloaded with the page's own cookie.
    ok(
        "download the recording",
        b.eval(&format!(
            "fetch({}).then((r) => r.text()).then((t) => {{ window.__cast = t; }})",
            json!(href)
        )),
    );
    let cast = ok(
        "the recording's text",
        b.wait_js("window.__cast || null", T, "the downloaded recording"),
    );
    let cast = cast.as_str().unwrap();
    let header: serde_json::Value = serde_json::from_str(cast.lines().next().unwrap()).unwrap();
    assert_eq!(header["version"], 2);
    assert!(cast.contains("recorded-42"), "{cast}");
    ok("recordings.png", b.screenshot(&artifact("recordings.png")));
}

/// The text the recordings player shows (its terminal's lines).
const PLAYER_TEXT: &str = "(() => { const t = document.querySelector('#player-view .ap-terminal'); \
    return t ? [...t.querySelectorAll('.ap-line')].map((l) => l.textContent).join('\\n') : null; })()";

/// Presses and releases `key` (a DOM key name with its Windows key code) on the
/// focused element.
fn press_key(b: &mut Browser, key: &str, code: u32) {
    for kind in ["rawKeyDown", "keyUp"] {
        ok(
            &format!("press {key}"),
            b.page(
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code}),
            ),
        );
    }
}

#[test]
fn a_recording_plays_in_the_page_and_shows_the_typed_text_at_a_seek_point() {
    if e2e::stack::player_dir().is_none() {
        return e2e::skip_or_fail(
            "TERMGATE_PLAYER_DIR is not set: deploy/lib/prereqs.sh (ensure_player) installs the recordings player and exports it",
        );
    }
    let stack = recorded_stack(&[]);
    let mut b = launch();
    ok("a laptop viewport", b.set_viewport(1280, 800, false));
    sign_in_by_link(&mut b, &stack, "alice");
    check_js(
        &mut b,
        "the player loaded from /assets/player.js",
        "typeof window.AsciinemaPlayer === 'object' && typeof AsciinemaPlayer.create === 'function'",
    );
    let id = create_in_page(&mut b, "played");
    open_in_page_and_type(
        &mut b,
        &id,
        &[
            "echo played-$((6*7))",
            "echo second-$((2+3))",
            "echo last-$((9*9))",
        ],
        &["played-42", "last-81"],
    );
    ok(
        "Back to sessions",
        b.eval("document.getElementById('close-terminal').click()"),
    );
    // The terminal closed: its recording reaches control, and the page lists it with
    // a Play button beside its download link.
    ok(
        "the recording in the page",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
                 const btn = r && [...r.querySelectorAll('button')].find((x) => x.textContent === 'Recordings'); \
                 if (btn) btn.click(); \
                 const row = document.querySelector('#recording-rows tr'); \
                 return !document.getElementById('recordings').hidden && row \
                   && [...row.querySelectorAll('button')].some((x) => x.textContent === 'Play') \
                   && !!row.querySelector('a[download]'); }})()"
            ),
            Duration::from_secs(30),
            "a Play button and a download link in the recordings table",
        ),
    );
    check_js(
        &mut b,
        "click Play",
        "(() => { const btn = [...document.querySelectorAll('#recording-rows button')].find((x) => x.textContent === 'Play'); \
         btn.click(); return true; })()",
    );
    ok(
        "the player, focused, under a heading naming the recording",
        b.wait_js(
            &format!(
                "(() => {{ const region = document.getElementById('player'); \
                 return !!region && !region.hidden && !!window.termgatePlayer \
                   && !!document.querySelector('#player-view .ap-terminal') \
                   && region.contains(document.activeElement) \
                   && document.getElementById('player-title').textContent.startsWith('Recording of played') \
                   && region.getAttribute('aria-labelledby') === 'player-title' \
                   && !!document.getElementById('player-close') && {PLAYER_TEXT} !== null; }})()"
            ),
            T,
            "the player region with its terminal",
        ),
    );
    let before = ok("the player before any seek", b.eval(PLAYER_TEXT));
    assert!(
        !before.as_str().unwrap_or_default().contains("played-42"),
        "nothing is played before the seek: {before}"
    );
    // To the end, through the player's own handle: the screen as the terminal closed.
    let duration = ok(
        "seek to the end",
        b.eval(
            "(async () => { const p = window.termgatePlayer; await p.seek('100%'); \
             return await p.getDuration(); })()",
        ),
    );
    assert!(
        duration.as_f64().is_some_and(|d| d > 0.0),
        "a duration: {duration}"
    );
    let shown = ok(
        "the typed text in the player",
        b.wait_js(
            &format!(
                "(() => {{ const s = {PLAYER_TEXT}; return s && s.includes('played-42') && s.includes('last-81') ? s : ''; }})()"
            ),
            T,
            "played-42 in the player's terminal",
        ),
    );
    assert!(
        shown.as_str().unwrap().contains("second-5"),
        "every line is shown: {shown}"
    );

    // The screenshot, and it is no blank player: its terminal's pixels, decoded from
    // the PNG by the page itself, show text over the background.
    ok(
        "the player in view",
        b.eval("document.getElementById('player').scrollIntoView({block: 'start'})"),
    );
    screenshot_shows_the_players_text(&mut b, "recording-player.png");

    // Another speed: the player is made again at that speed, where it was.
    ok(
        "4× speed",
        b.eval(
            "window.__before = window.termgatePlayer; const s = document.getElementById('player-speed'); \
             s.value = '4'; s.dispatchEvent(new Event('change')); true",
        ),
    );
    ok(
        "the player again at 4×, at the same moment",
        b.wait_js(
            &format!(
                "(() => {{ const s = {PLAYER_TEXT}; return window.termgatePlayer && window.termgatePlayer !== window.__before \
                   && document.querySelectorAll('#player-view .ap-wrapper').length === 1 \
                   && s && s.includes('played-42'); }})()"
            ),
            T,
            "a new player showing played-42",
        ),
    );
    // At phone width the region fits the screen, the player scaled to it.
    ok("a phone viewport", b.set_viewport(390, 844, true));
    ok(
        "the player within the phone's width",
        b.wait_js(
            "(() => { const r = document.querySelector('#player-view .ap-terminal').getBoundingClientRect(); \
             const c = document.getElementById('player-close').getBoundingClientRect(); \
             return r.width > 200 && r.right <= window.innerWidth && c.right <= window.innerWidth \
               && document.documentElement.scrollWidth <= window.innerWidth; })()",
            T,
            "the terminal and Close inside the viewport, no sideways scroll",
        ),
    );
    ok(
        "the player in view",
        b.eval("document.getElementById('player').scrollIntoView({block: 'start'})"),
    );
    ok(
        "recording-player-phone.png",
        b.screenshot(&artifact("recording-player-phone.png")),
    );
    // Escape closes it, disposed, and focus goes back to its Play button.
    ok(
        "focus the player",
        b.eval("document.querySelector('#player-view .ap-wrapper').focus()"),
    );
    press_key(&mut b, "Escape", 27);
    ok(
        "the player closed",
        b.wait_js(
            "document.getElementById('player').hidden && window.termgatePlayer === null \
             && document.getElementById('player-view').childElementCount === 0 \
             && document.activeElement && document.activeElement.textContent === 'Play'",
            T,
            "the region hidden, the player gone, focus on Play",
        ),
    );
    // The admin console lists the same recordings from the session's row and plays
    // them with the same code (common.js).
    ok("a laptop viewport again", b.set_viewport(1280, 800, false));
    ok("forget alice's sign-in", b.clear_cookies());
    sign_in_by_link_as(&mut b, &stack, "root", true);
    ok("open the console", b.navigate(&stack.url(0, "/admin")));
    ok(
        "the recording's Play button in the console",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#active-rows tr[data-id=\"{id}\"]'); \
                 const btn = r && [...r.querySelectorAll('button')].find((x) => x.textContent === 'Recordings'); \
                 if (btn && document.getElementById('recordings').hidden) btn.click(); \
                 const play = [...document.querySelectorAll('#recording-rows button')].find((x) => x.textContent === 'Play'); \
                 if (!play || document.getElementById('recordings-title').textContent !== 'Recordings of played of alice') return false; \
                 play.click(); return true; }})()"
            ),
            T,
            "Recordings on alice's row, then Play",
        ),
    );
    ok(
        "the recording played in the console",
        b.wait_js(
            &format!(
                "(async () => {{ const p = window.termgatePlayer; if (!p) return ''; await p.seek('100%'); \
                 const s = {PLAYER_TEXT}; return s && s.includes('played-42') ? s : ''; }})()"
            ),
            T,
            "played-42 in the console's player",
        ),
    );
    ok(
        "recording-player-admin.png",
        b.screenshot(&artifact("recording-player-admin.png")),
    );
    assert!(
        !b.console()
            .iter()
            .any(|l| l.contains("Content Security Policy")
                || l.contains("Content-Security-Policy")
                || l.starts_with("uncaught")),
        "the player must run without CSP violations or uncaught errors: {:#?}",
        b.console()
    );
}

#[test]
fn the_page_lists_sign_ins_signs_one_out_says_when_a_sign_out_failed_and_signs_out_everywhere() {
    let mut stack = GatewayStack::start("");
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    // Another browser of alice's, signed in meanwhile.
    let other = stack.sign_in_with(0, &stack.control.token("alice", false));
    let rows = "document.querySelectorAll('#signin-rows tr').length";
    ok(
        "both sign-ins listed",
        b.eval("refreshSignIns()").map(|_| ()),
    );
    ok(
        "both sign-ins listed, this one marked",
        b.wait_js(
            &format!(
                "{rows} === 2 && [...document.querySelectorAll('#signin-rows tr')]\
                 .filter((r) => r.textContent.includes('This browser')).length === 1"
            ),
            T,
            "two rows, one of them this browser",
        ),
    );
    ok("sign-ins.png", b.screenshot(&artifact("sign-ins.png")));
    let clicked = ok(
        "click the other sign-in's Sign out",
        b.eval(
            "(() => { const btn = document.querySelector('#signin-rows button'); \
             if (!btn || btn.textContent !== 'Sign out') return false; btn.click(); return true; })()",
        ),
    );
    assert_eq!(
        clicked,
        json!(true),
        "the other sign-in has a Sign out button"
    );
    ok(
        "one sign-in left",
        b.wait_js(&format!("{rows} === 1"), T, "one row"),
    );
    let refused = wait_for("the other browser's cookie refused", T, || {
        let agent = e2e::stack::agent();
        let status = agent
            .get(&stack.url(0, "/api/sessions"))
            .header("Cookie", &other)
            .call()
            .ok()?
            .status()
            .as_u16();
        (status == 401).then_some(status)
    });
    assert_eq!(refused, 401);

    // Control down: the page says the sign-out did not happen and stays signed in.
    stack.control.kill9();
    ok(
        "click Sign out",
        b.eval("document.getElementById('sign-out').click()"),
    );
    let status = ok(
        "the page says the sign-out failed",
        b.wait_js(
            "(() => { const s = document.getElementById('status'); \
              return s.className === 'error' && s.textContent.startsWith('The sign-out did not happen') \
                ? s.textContent : ''; })()",
            T,
            "the failed sign-out message",
        ),
    );
    assert!(status
        .as_str()
        .unwrap_or_default()
        .contains("still signed in"));
    assert_eq!(
        ok(
            "still signed in",
            b.eval("document.getElementById('who').hidden")
        ),
        json!(false)
    );
    ok(
        "sign-out-failed.png",
        b.screenshot(&artifact("sign-out-failed.png")),
    );

    stack.control.spawn(&[]);
    wait_for("control back", T, || {
        http(
            "GET",
            &format!("{}/v1/healthz", stack.control.api),
            None,
            None,
        )
        .ok()
        .filter(|a| a.status == 200)
    });
    ok(
        "click Sign out everywhere",
        b.eval("document.getElementById('sign-out-everywhere').click()"),
    );
    ok(
        "the sign-in form after signing out everywhere",
        b.wait_js(
            "!document.getElementById('sign-in').hidden \
             && document.getElementById('status').textContent.startsWith('Signed out everywhere') \
             && document.getElementById('status').textContent.includes('sign-in link and token of yours')",
            T,
            "the sign-in form",
        ),
    );
    ok("reloaded, still signed out", b.navigate(&stack.url(0, "/")));
    ok(
        "the sign-in form after a reload",
        b.wait_js(
            "!document.getElementById('sign-in').hidden",
            T,
            "the sign-in form",
        ),
    );
}

#[test]
fn the_sessions_page_shows_open_terminals_viewers_peers_last_input_and_when_a_session_ends() {
    // A default profile that ends a session after an hour without input; the gateway
    // reports its terminals every 300 ms, viewers go to a read-only pool.
    let mut control = e2e::stack::ControlStack::prepare("");
    control.set_env("TERMGATE__PROFILES__DEFAULT__IDLE_TIMEOUT_SECONDS", "3600");
    control.set_env("TERMGATE__PROFILES__DEFAULT__PEERS", "true");
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let mut stack = GatewayStack::assemble(control, ttyd, counter);
    stack.viewers = Some(e2e::ttyd::TtydPool::start_viewers_for(
        &stack.control.instance,
    ));
    stack.gateways.clear();
    stack.spawn_gateway(&[("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "300")]);

    let mut b = launch();
    ok("a laptop viewport", b.set_viewport(1280, 800, false));
    sign_in_by_link(&mut b, &stack, "alice");
    let id = create_in_page(&mut b, "glance");
    let row = |cells: &str| {
        format!(
            "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
               if (!r) return false; const c = [...r.cells].map((x) => x.textContent); return {cells}; }})()"
        )
    };
    // Nothing open, nobody watching, never typed into; it ends after an hour idle.
    ok(
        "the row at rest",
        b.wait_js(
            &row("c[4] === '0' && c[5] === '0' && c[6] === '—' && c[7].endsWith(' (idle)') && c[8] === '—'"),
            Duration::from_secs(30),
            "Terminals 0, Viewers 0, Last input —, Ends … (idle)",
        ),
    );
    // Alice types in a terminal of her own (a ttyd client, not this page) and bob,
    // signed in, watches through a share link.
    let cookie = stack.sign_in("alice");
    let t = stack
        .open_as(0, &id, &cookie)
        .expect("alice opens her terminal");
    t.send_input(b"echo glance-$((2*4))\r").unwrap();
    t.read_until("glance-8", T).unwrap();
    let token = stack.control.token("alice", false);
    let link = stack.control.call(
        "POST",
        &format!("/v1/sessions/{id}/shares"),
        Some(&token),
        Some(json!({ "ttl_seconds": 600 })),
    );
    assert_eq!(link.status, 201, "{}", link.text);
    let url = link.body["url"].as_str().unwrap().to_owned();
    let invited = stack.control.call(
        "POST",
        &format!("/v1/sessions/{id}/peers"),
        Some(&token),
        Some(json!({ "sub": "carol", "ttl_seconds": 3600 })),
    );
    assert_eq!(invited.status, 201, "{}", invited.text);
    let bob = stack.sign_in("bob");
    let origin = stack.origin(0);
    let viewer = e2e::stack::wait_for("bob watching", T, || {
        stack
            .open(
                0,
                &format!("{url}/ws"),
                &[("Origin", origin.as_str()), ("Cookie", bob.as_str())],
            )
            .ok()
    });
    ok(
        "the row while in use",
        b.wait_js(
            &row("c[4] === '1' && c[5] === '1 (bob)' && / s ago$/.test(c[6]) && c[7].endsWith(' (idle)') \
                 && c[8].startsWith('carol (until ')"),
            Duration::from_secs(30),
            "Terminals 1, Viewers 1 (bob), Last input … s ago, Peers carol",
        ),
    );
    ok(
        "sessions-glance.png",
        b.screenshot(&artifact("sessions-glance.png")),
    );
    drop(viewer);
    drop(t);
    ok(
        "the row once both closed",
        b.wait_js(
            &row("c[4] === '0' && c[5] === '0' && / ago$/.test(c[6])"),
            Duration::from_secs(30),
            "Terminals 0, Viewers 0, the last input kept",
        ),
    );
}

#[test]
fn the_owner_shares_a_recording_from_the_page_and_a_fresh_browser_plays_it_until_revoked() {
    if e2e::stack::player_dir().is_none() {
        return e2e::skip_or_fail(
            "TERMGATE_PLAYER_DIR is not set: deploy/lib/prereqs.sh (ensure_player) installs the recordings player and exports it",
        );
    }
    let stack = recorded_stack(&[("TERMGATE__PROFILES__DEFAULT__RECORDING_LINKS", "anyone")]);
    let mut b = launch();
    ok("a laptop viewport", b.set_viewport(1280, 800, false));
    sign_in_by_link(&mut b, &stack, "alice");
    let id = create_in_page(&mut b, "linked");
    open_in_page_and_type(&mut b, &id, &["echo shared-$((6*7))"], &["shared-42"]);
    ok(
        "Back to sessions",
        b.eval("document.getElementById('close-terminal').click()"),
    );
    // The recording is listed with a Share button; Share opens its links' form.
    ok(
        "Share in the recordings table",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
                 const btn = r && [...r.querySelectorAll('button')].find((x) => x.textContent === 'Recordings'); \
                 if (btn) btn.click(); \
                 const share = [...document.querySelectorAll('#recording-rows button')].find((x) => x.textContent === 'Share'); \
                 if (!share) return false; share.click(); return true; }})()"
            ),
            Duration::from_secs(30),
            "a Share button in the recordings table",
        ),
    );
    ok(
        "the link form, its mode limited to the profile's, focused",
        b.wait_js(
            "(() => { const region = document.getElementById('recording-share'); \
             const mode = document.getElementById('recording-share-mode'); \
             return !!region && !region.hidden && mode.options.length === 2 \
               && document.activeElement === mode \
               && document.querySelector('label[for=\"recording-share-mode\"]') !== null \
               && document.querySelector('label[for=\"recording-share-ttl\"]') !== null; })()",
            T,
            "the link form with two modes",
        ),
    );
    ok(
        "create an anyone link for an hour",
        b.eval(
            "document.getElementById('recording-share-mode').value = 'anyone'; \
             document.getElementById('recording-share-ttl').value = '3600'; \
             document.getElementById('recording-share-create').click(); true",
        ),
    );
    let url = ok(
        "the new link, and it in the list",
        b.wait_js(
            "(() => { const u = document.getElementById('recording-share-url').value; \
             return u && !document.getElementById('recording-share-new').hidden \
               && document.querySelectorAll('#recording-link-rows tr').length === 1 \
               && !!document.getElementById('recording-share-copy') ? u : null; })()",
            T,
            "the link's URL and one row of links",
        ),
    );
    let url = url.as_str().expect("a URL").to_owned();
    assert!(url.starts_with(&stack.url(0, "/r/")), "{url}");

    // A fresh browser, no cookies: the link plays, and at its end shows what was typed.
    let mut fresh = launch();
    ok("no cookies", fresh.clear_cookies());
    ok("a laptop viewport", fresh.set_viewport(1280, 800, false));
    ok("open the link", fresh.navigate(&url));
    ok(
        "the player of the link's page",
        fresh.wait_js(
            &format!(
                "!!window.termgatePlayer && !!document.querySelector('#player-view .ap-terminal') && {PLAYER_TEXT} !== null"
            ),
            T,
            "the player on /r/<token>",
        ),
    );
    ok(
        "seek to the end",
        fresh.eval("(async () => { await window.termgatePlayer.seek('100%'); return true; })()"),
    );
    ok(
        "the typed text in the player",
        fresh.wait_js(
            &format!("(() => {{ const s = {PLAYER_TEXT}; return s && s.includes('shared-42') ? s : ''; }})()"),
            T,
            "shared-42 in the player's terminal",
        ),
    );
    screenshot_shows_the_players_text(&mut fresh, "recording-link.png");

    // Revoked in the owner's page: the fresh browser gets the 404 page.
    ok(
        "Revoke",
        b.eval(
            "(() => { const btn = [...document.querySelectorAll('#recording-link-rows button')].find((x) => x.textContent === 'Revoke'); \
             btn.click(); return true; })()",
        ),
    );
    ok(
        "no links left",
        b.wait_js(
            "document.querySelectorAll('#recording-link-rows tr').length === 0 \
             && !document.getElementById('no-recording-links').hidden",
            T,
            "the list of links empty",
        ),
    );
    ok("open the link again", fresh.navigate(&url));
    ok(
        "the 404 page",
        fresh.wait_js(
            "(() => { const m = document.querySelector('meta[name=\"termgate-error\"]'); \
             return m && m.content === 'not_found' && !window.termgatePlayer; })()",
            T,
            "the not-found page instead of the player",
        ),
    );
}

/// Screenshots the page as `name` and checks, by decoding the PNG in the page itself,
/// that the player's terminal in it shows text over its background: a blank player,
/// or one out of view, fails.
fn screenshot_shows_the_players_text(b: &mut Browser, name: &str) {
    let png_path = artifact(name);
    ok(name, b.screenshot(&png_path));
    let png = std::fs::read(&png_path).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(&png);
    let pixels = ok(
        "the terminal's pixels in the screenshot",
        b.eval(&format!(
            "(async () => {{ const img = new Image(); img.src = 'data:image/png;base64,{data}'; await img.decode(); \
             const r = document.querySelector('#player-view .ap-terminal').getBoundingClientRect(); \
             const k = img.naturalWidth / window.innerWidth; \
             const x0 = Math.max(0, r.left), y0 = Math.max(0, r.top); \
             const w = Math.floor(Math.min(r.right, window.innerWidth) - x0), h = Math.floor(Math.min(r.bottom, window.innerHeight) - y0); \
             const c = document.createElement('canvas'); c.width = w; c.height = h; \
             const g = c.getContext('2d'); g.drawImage(img, x0 * k, y0 * k, w * k, h * k, 0, 0, w, h); \
             const d = g.getImageData(0, 0, w, h).data; const count = new Map(); \
             for (let i = 0; i < d.length; i += 4) {{ const v = (d[i] << 16) | (d[i + 1] << 8) | d[i + 2]; count.set(v, (count.get(v) || 0) + 1); }} \
             const most = Math.max(...count.values()); \
             return {{ width: w, height: h, colours: count.size, other: 1 - most / (w * h) }}; }})()"
        )),
    );
    let (w, h) = (
        pixels["width"].as_u64().unwrap_or(0),
        pixels["height"].as_u64().unwrap_or(0),
    );
    assert!(w >= 200 && h >= 100, "the terminal is in view: {pixels}");
    assert!(
        pixels["colours"].as_u64().unwrap_or(0) >= 3
            && pixels["other"].as_f64().unwrap_or(0.0) > 0.002,
        "the player's terminal shows text, not one colour: {pixels}"
    );
}

/// A stack whose default profile records its terminals, with `env` set for control.
fn recorded_stack(env: &[(&str, &str)]) -> GatewayStack {
    let mut control = e2e::stack::ControlStack::prepare("");
    control.set_env("TERMGATE__PROFILES__DEFAULT__RECORD", "true");
    for (k, v) in env {
        control.set_env(k, v);
    }
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    GatewayStack::assemble(control, ttyd, counter)
}

#[test]
fn the_owner_invites_a_peer_from_the_page_and_the_peer_opens_and_types_from_theirs() {
    let mut control = e2e::stack::ControlStack::prepare("");
    control.set_env("TERMGATE__PROFILES__DEFAULT__PEERS", "true");
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let stack = GatewayStack::assemble(control, ttyd, counter);
    let alice = stack.control.token("alice", false);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let owner = stack.open_as(0, &id, &stack.sign_in("alice")).unwrap();
    owner.send_input(b"echo owner-up\r").unwrap();
    owner.read_until("owner-up", T).unwrap();

    // Alice invites bob from her page: Peers, a name, Invite; bob is listed.
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "alice");
    ok(
        "alice's row",
        b.wait_js(
            &format!("!!document.querySelector('#session-rows tr[data-session=\"{id}\"]')"),
            T,
            "the session's row",
        ),
    );
    click_row_button(&mut b, &id, "Peers");
    ok(
        "the peers view",
        b.wait_js(
            "!document.getElementById('peers').hidden",
            T,
            "the Peers section",
        ),
    );
    check_js(
        &mut b,
        "the invite form's fields are labelled",
        "document.querySelector('label[for=peer-sub]').textContent === 'User name' \
         && !!document.querySelector('label[for=peer-ttl]')",
    );
    ok(
        "invite bob",
        b.eval(
            "document.getElementById('peer-sub').value = 'bob'; \
             document.querySelector('#peer-form button[type=submit]').click()",
        ),
    );
    ok(
        "bob listed",
        b.wait_js(
            "[...document.querySelectorAll('#peer-rows tr')].some((r) => r.cells[0].textContent === 'bob' \
               && [...r.querySelectorAll('button')].some((x) => x.getAttribute('aria-label') === \"Revoke bob's access\"))",
            T,
            "bob's row with a Revoke button",
        ),
    );
    drop(b);

    // Bob's page lists alice's session with Open and Leave, without End or Share.
    let mut b = launch();
    sign_in_by_link(&mut b, &stack, "bob");
    ok(
        "bob's row of alice's session",
        b.wait_js(
            &format!("!!document.querySelector('#session-rows tr[data-session=\"{id}\"]')"),
            T,
            "the shared session's row",
        ),
    );
    let labels = ok(
        "the row's buttons",
        b.eval(&format!(
            "[...document.querySelectorAll('#session-rows tr[data-session=\"{id}\"] button')].map((x) => x.textContent)"
        )),
    );
    assert_eq!(labels, json!(["Open", "Leave"]), "a peer's actions");
    click_row_button(&mut b, &id, "Open");
    wait_connected(&mut b);
    ok(
        "focus the terminal",
        b.eval("document.getElementById('terminal-frame').contentWindow.term.focus()"),
    );
    ok("type", b.insert_text("echo from-bob-$((6*7))"));
    ok("press Enter", b.press_enter());
    owner
        .read_until("from-bob-42", T)
        .unwrap_or_else(|e| panic!("bob's typing in alice's terminal: {e}"));
    ok("peer.png", b.screenshot(&artifact("peer.png")));
}

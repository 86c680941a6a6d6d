//! Sessions end by themselves: after the profile's `idle_timeout_seconds` without
//! input (output does not count) and at its `max_lifetime_seconds`. Real binaries,
//! real ttyd, real containers, short timeouts.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::stack::{wait_for, GatewayStack};
use e2e::ConfigDir;
use serde_json::Value;

const T: Duration = Duration::from_secs(15);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A stack whose default profile has these limits and whose gateway reports input
/// every 500 ms.
fn stack(idle: Option<u64>, max: Option<u64>) -> GatewayStack {
    stack_with("", idle, max)
}

/// [`stack`], with `extra` TOML appended to the config.
fn stack_with(extra: &str, idle: Option<u64>, max: Option<u64>) -> GatewayStack {
    let mut control = e2e::stack::ControlStack::prepare(extra);
    for (key, v) in [
        ("TERMGATE__PROFILES__DEFAULT__IDLE_TIMEOUT_SECONDS", idle),
        ("TERMGATE__PROFILES__DEFAULT__MAX_LIFETIME_SECONDS", max),
    ] {
        if let Some(v) = v {
            control.set_env(key, &v.to_string());
        }
    }
    control.set_env("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "500");
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let mut s = GatewayStack::assemble(control, ttyd, counter);
    // The gateway reads the same file; its own overrides come from the environment.
    s.gateways.clear();
    s.spawn_gateway(&[("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "500")]);
    s
}

fn create(stack: &GatewayStack, sub: &str) -> Value {
    stack.control.create(&stack.control.token(sub, false))
}

fn session(stack: &GatewayStack, sub: &str, id: &str) -> Value {
    let a = stack.control.call(
        "GET",
        &format!("/v1/sessions/{id}"),
        Some(&stack.control.token(sub, false)),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

/// Waits until the session has ended and returns its record.
fn wait_ended(stack: &GatewayStack, sub: &str, id: &str, deadline: Duration) -> Value {
    wait_for("the session to end", deadline, || {
        let s = session(stack, sub, id);
        (!["creating", "running", "stopping", "unreachable"]
            .contains(&s["state"].as_str().unwrap()))
        .then_some(s)
    })
}

/// Waits until control has alice's input to session `id`, typed at `typed` (± 1 s):
/// the session's record then, and its `last_input`.
fn input_reported(stack: &GatewayStack, id: &str, typed: u64) -> (Value, u64) {
    let reported = wait_for("the input to reach control", T, || {
        let s = session(stack, "alice", id);
        s.get("last_input").and_then(Value::as_u64).map(|_| s)
    });
    let last_input = u(&reported, "last_input");
    assert!(
        last_input >= typed - 1 && last_input <= typed + 1,
        "{reported}"
    );
    (reported, last_input)
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

fn assert_ended_by(s: &Value, cause: &str) {
    assert_eq!(s["state"], "terminated", "{s}");
    assert_eq!(s["ended_by"], "termgate", "{s}");
    let reason = s["end_reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with(&format!("{cause}: ")), "{s}");
    assert!(
        s.get("ends_at").is_none(),
        "an ended session has no deadline: {s}"
    );
}

/// The session's container is gone (stopped and removed the normal way).
fn assert_no_container(stack: &GatewayStack, id: &str) {
    wait_for("the container to be removed", T, || {
        let left = e2e::stack::docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=termgate.instance={}", stack.control.instance),
            "--filter",
            &format!("label=termgate.session={id}"),
        ]);
        left.trim().is_empty().then_some(())
    });
}

#[test]
fn output_alone_does_not_keep_a_session_alive() {
    const IDLE: u64 = 6;
    let stack = stack(Some(IDLE), None);
    let s = create(&stack, "alice");
    let id = s["id"].as_str().unwrap();
    let cookie = stack.sign_in("alice");
    let t = stack.open_as(0, id, &cookie).unwrap();
    t.send_input(b"while :; do echo tick-$((6*7)); sleep 1; done\r")
        .unwrap();
    let typed = now();
    t.read_until("tick-42", T).expect("the loop prints");
    // The input is reported: the deadline is measured from it.
    let (reported, last_input) = input_reported(&stack, id, typed);
    assert_eq!(u(&reported, "ends_at"), last_input + IDLE, "{reported}");
    assert_eq!(reported["ends_because"], "idle");

    // The terminal keeps printing and nobody types; the window is resized and the
    // browser pings (with a payload that looks like input), neither of which is
    // typing: the route goes and the terminal closes at the idle deadline.
    t.clear_output();
    let (mut cols, mut resizes, mut pings) = (80, 0, 0);
    while !t.is_closed() && now() < last_input + IDLE + 8 {
        cols = if cols == 80 { 100 } else { 80 };
        // Each is sent on the open terminal; only its close may refuse one.
        let sent = t
            .resize(cols, 24)
            .map(|()| resizes += 1)
            .and_then(|()| t.ping(b"0ls\r").map(|()| pings += 1));
        if let Err(e) = sent {
            // Refused because the terminal closed (the harness sees the close within
            // its read poll), not by an open one.
            let failed_at = Instant::now();
            t.wait_closed(T)
                .unwrap_or_else(|_| panic!("a resize or ping refused on an open terminal: {e}"));
            let closed_at = t.closed_at().expect("closed");
            assert!(
                closed_at <= failed_at + Duration::from_secs(1),
                "a resize or ping was refused {:?} before the terminal closed: {e}",
                closed_at - failed_at
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        resizes >= 2 && pings >= 2,
        "{resizes} resizes and {pings} pings sent while idle"
    );
    t.wait_closed(T)
        .expect("the terminal closes when the session ends idle");
    // When it closed, not when the test looked.
    let closed_at = t.closed_at().expect("closed");
    let closed_unix = SystemTime::now() - closed_at.elapsed();
    let closed = closed_unix.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let ticks = t.output_so_far().matches("tick-42").count();
    assert!(
        ticks as u64 >= IDLE - 3,
        "output flowed until the end ({ticks} lines)"
    );
    let ended = wait_ended(&stack, "alice", id, T);
    assert_ended_by(&ended, "idle");
    assert_eq!(u(&ended, "last_input"), last_input, "output is not input");
    let ended_at = u(&ended, "ended_at");
    // On time: not before the deadline, and within the culler's second plus the stop;
    // the terminal closes with the route, within the 2 s of a session's end (ended_at
    // counts whole seconds).
    assert!(closed >= last_input + IDLE, "closed at {closed}, {ended}");
    assert!(
        ended_at >= last_input + IDLE && ended_at <= last_input + IDLE + 4,
        "{ended}"
    );
    assert!(closed <= ended_at + 3, "closed at {closed}, {ended}");
    eprintln!(
        "idle deadline {} → ended_at {ended_at}, terminal closed at {closed} ({resizes} resizes and {pings} pings meanwhile)",
        last_input + IDLE
    );
    assert_no_container(&stack, id);
    // History shows why, and the audit line says it.
    let history = stack.control.call(
        "GET",
        "/v1/history",
        Some(&stack.control.token("alice", false)),
        None,
    );
    let row = history.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .cloned()
        .expect("in history");
    assert_ended_by(&row, "idle");
    let log = stack.control.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("session ended by its profile's limits")
                && l.contains(id)
                && l.contains("idle")),
        "audit line: {log}"
    );
}

#[test]
fn typing_keeps_a_session_alive_past_its_idle_timeout_until_typing_stops() {
    const IDLE: u64 = 5;
    let stack = stack(Some(IDLE), None);
    let s = create(&stack, "bob");
    let id = s["id"].as_str().unwrap();
    let cookie = stack.sign_in("bob");
    let t = stack.open_as(0, id, &cookie).unwrap();
    let start = Instant::now();
    let mut n = 0;
    // Three idle timeouts of typing, a keystroke line every 1.5 s.
    while start.elapsed() < Duration::from_secs(3 * IDLE) {
        n += 1;
        t.send_input(format!("echo typed-{n}\r").as_bytes())
            .expect("the terminal stays open while typed into");
        t.read_until(&format!("typed-{n}"), T).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
    }
    let s = session(&stack, "bob", id);
    assert_eq!(s["state"], "running", "{s}");
    assert!(u(&s, "last_input") >= now() - 3, "{s}");
    assert!(!t.is_closed());

    // Typing stops: idle from the last keystroke.
    let last_typed = now();
    t.wait_closed(Duration::from_secs(IDLE + 8))
        .expect("closed once idle");
    let ended = wait_ended(&stack, "bob", id, T);
    assert_ended_by(&ended, "idle");
    let last_input = u(&ended, "last_input");
    assert!(last_input + 2 >= last_typed, "{ended}");
    assert!(u(&ended, "ended_at") >= last_input + IDLE, "{ended}");
}

#[test]
fn a_session_with_nothing_open_and_no_input_ends_on_time() {
    const IDLE: u64 = 4;
    let stack = stack(Some(IDLE), None);
    let s = create(&stack, "carol");
    let id = s["id"].as_str().unwrap();
    let created = u(&s, "created_at");
    assert_eq!(u(&s, "ends_at"), created + IDLE, "{s}");
    assert!(s.get("last_input").is_none(), "{s}");
    let ended = wait_ended(&stack, "carol", id, Duration::from_secs(IDLE + 10));
    assert_ended_by(&ended, "idle");
    let ended_at = u(&ended, "ended_at");
    eprintln!("idle deadline {} → ended_at {ended_at}", created + IDLE);
    assert!(
        ended_at >= created + IDLE && ended_at <= created + IDLE + 4,
        "{ended}"
    );
    assert_no_container(&stack, id);
}

#[test]
fn a_slow_stop_holds_neither_the_culler_nor_the_ended_terminal() {
    // The first session's program ignores the hang-up: after its idle end its
    // container stays for the whole minute of grace, in the background.
    let extra = format!(
        "{}idle_timeout_seconds = 2\n",
        e2e::stack::profile_ignoring_hang_up("stubborn", 60)
    );
    let stack = stack_with(&extra, Some(4), None);
    let alice = stack.control.token("alice", false);
    let slow = stack.control.create_with(&alice, "stubborn");
    let slow_id = slow["id"].as_str().unwrap();
    let other = create(&stack, "alice");
    let other_id = other["id"].as_str().unwrap();
    let cookie = stack.sign_in("alice");
    let t = stack.open_as(0, slow_id, &cookie).unwrap();

    // The slow one's terminal closes at its deadline, saying why, and its record says
    // who ended it and why while its container lives on.
    t.wait_closed(T)
        .expect("the idle session's terminal closes at its deadline");
    let closed = now();
    assert_eq!(
        t.close_reason().as_deref(),
        Some("close frame 1000 \"termgate: this session was ended\"")
    );
    let stopping = session(&stack, "alice", slow_id);
    assert_eq!(stopping["state"], "stopping", "{stopping}");
    assert_eq!(stopping["ended_by"], "termgate", "{stopping}");
    assert!(
        stopping["end_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("idle: ")),
        "{stopping}"
    );
    assert!(
        closed <= u(&slow, "created_at") + 2 + 3,
        "closed at {closed}: {stopping}"
    );

    // The culler was not held by that stop: the other session ends on time.
    let ended = wait_ended(&stack, "alice", other_id, T);
    assert_ended_by(&ended, "idle");
    let deadline = u(&other, "created_at") + 4;
    assert!(u(&ended, "ended_at") <= deadline + 3, "{ended}");
    assert_no_container(&stack, other_id);
    assert_eq!(
        session(&stack, "alice", slow_id)["state"],
        "stopping",
        "the slow stop is still in its grace"
    );
}

#[test]
fn max_lifetime_ends_a_session_however_busy() {
    const MAX: u64 = 8;
    let stack = stack(Some(60), Some(MAX));
    let s = create(&stack, "dave");
    let id = s["id"].as_str().unwrap();
    let created = u(&s, "created_at");
    assert_eq!(u(&s, "ends_at"), created + MAX);
    assert_eq!(s["ends_because"], "max_lifetime");
    let cookie = stack.sign_in("dave");
    let t = stack.open_as(0, id, &cookie).unwrap();
    let mut n = 0;
    while !t.is_closed() && now() < created + MAX + 8 {
        n += 1;
        let _ = t.send_input(format!("echo busy-{n}\r").as_bytes());
        std::thread::sleep(Duration::from_millis(700));
    }
    assert!(t.is_closed(), "the terminal closes at the lifetime");
    let ended = wait_ended(&stack, "dave", id, T);
    assert_ended_by(&ended, "max_lifetime");
    assert!(
        u(&ended, "last_input") + 3 >= u(&ended, "ended_at"),
        "typed until the end: {ended}"
    );
    let ended_at = u(&ended, "ended_at");
    eprintln!("lifetime deadline {} → ended_at {ended_at}", created + MAX);
    assert!(
        ended_at >= created + MAX && ended_at <= created + MAX + 4,
        "{ended}"
    );
    assert_no_container(&stack, id);
}

#[test]
fn input_typed_while_control_is_down_reaches_it_before_the_culler_judges() {
    const IDLE: u64 = 6;
    let mut stack = stack(Some(IDLE), None);
    let s = create(&stack, "erin");
    let id = s["id"].as_str().unwrap().to_owned();
    let created = u(&s, "created_at");
    let cookie = stack.sign_in("erin");
    let t = stack.open_as(0, &id, &cookie).unwrap();
    stack.control.kill9();
    // The session's idle deadline (nobody typed since its creation) passes while
    // control is down; then its user types, and control comes back.
    while now() <= created + IDLE + 1 {
        std::thread::sleep(Duration::from_millis(200));
    }
    t.send_input(b"echo still-$((6*7))\r").unwrap();
    t.read_until("still-42", T)
        .expect("typing works while control is down");
    let typed = now();
    stack.control.spawn(&[]);
    // The report control missed is sent again, before the culler's first look.
    let s = wait_for("the missed report to arrive", T, || {
        let s = session(&stack, "erin", &id);
        s.get("last_input")
            .and_then(Value::as_u64)
            .filter(|l| *l + 1 >= typed)
            .map(|_| s)
    });
    assert_eq!(s["state"], "running", "{s}");
    std::thread::sleep(Duration::from_secs(3));
    let s = session(&stack, "erin", &id);
    assert_eq!(s["state"], "running", "judged on the reported input: {s}");
    assert!(!t.is_closed());
}

#[test]
fn activity_reports_need_the_service_token_and_a_bounded_body() {
    let stack = e2e::stack::ControlStack::start("");
    let body = serde_json::json!([{"session": "aaaaaaaaaaaaaaaa", "last_input": 1}]);
    let user = stack.token("mallory", true);
    for bearer in [None, Some(user.as_str())] {
        let a = stack.call("POST", "/v1/activity", bearer, Some(body.clone()));
        assert_eq!(a.status, 401, "{}", a.text);
    }
    let service = stack.service_token();
    let a = stack.call("POST", "/v1/activity", Some(&service), Some(body));
    assert_eq!(a.status, 204, "an unknown session is skipped: {}", a.text);
    let big: Vec<Value> = (0..1600)
        .map(|_| serde_json::json!({"session": "aaaaaaaaaaaaaaaa", "last_input": 1}))
        .collect();
    let a = stack.call(
        "POST",
        "/v1/activity",
        Some(&service),
        Some(Value::Array(big)),
    );
    assert_eq!(a.status, 413, "{}", a.text);
    let a = stack.call(
        "POST",
        "/v1/activity",
        Some(&service),
        Some(serde_json::json!([{"session": "not-an-id", "last_input": 1}])),
    );
    assert_eq!(a.status, 400, "{}", a.text);
    let a = stack.call("GET", "/v1/activity", Some(&service), None);
    assert_eq!(a.status, 405, "{}", a.text);
}

#[test]
fn bad_idle_timeout_or_max_lifetime_stops_both_binaries_naming_the_key() {
    for (extra, key) in [
        (
            "[profiles.short]\nimage = \"x\"\nidle_timeout_seconds = 0\n",
            "profiles.short.idle_timeout_seconds",
        ),
        (
            "[profiles.short]\nimage = \"x\"\nmax_lifetime_seconds = 0\n",
            "profiles.short.max_lifetime_seconds",
        ),
        (
            "[profiles.short]\nimage = \"x\"\nmax_lifetime_seconds = \"1h\"\n",
            "max_lifetime_seconds",
        ),
    ] {
        let dir = ConfigDir::example(extra);
        for (bin, check) in [
            ("termgate-control", "check"),
            ("termgate-gateway", "--check"),
        ] {
            let o = dir.run(bin, &[check]);
            assert_eq!(o.status.code(), Some(2), "{bin} {extra}");
            let e = String::from_utf8_lossy(&o.stderr);
            assert!(e.contains(key), "{bin} {extra}: {e}");
        }
    }
}

#[test]
fn the_page_warns_in_the_last_minute_and_says_why_the_session_ended() {
    const IDLE: u64 = 15;
    let stack = stack(Some(IDLE), None);
    let id = create(&stack, "frank")["id"].as_str().unwrap().to_owned();
    let mut b = e2e::browser::Browser::launch()
        .unwrap_or_else(|e| panic!("cannot start the browser: {e:#}"));
    let token = stack.control.token("frank", false);
    b.navigate(&stack.url(0, &format!("/#token={token}")))
        .expect("open the sign-in link");
    // Within a minute of its idle deadline from the start: the list warns.
    let warning = b
        .wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
                 const w = r && r.querySelector('.ending'); return w ? w.textContent : ''; }})()"
            ),
            T,
            "the warning in the session's row",
        )
        .expect("the list warns");
    assert!(
        warning.as_str().unwrap().contains("without input"),
        "{warning}"
    );
    b.eval(&format!(
        "[...document.querySelectorAll('#session-rows tr[data-session=\"{id}\"] button')]\
         .find((x) => x.textContent === 'Open').click()"
    ))
    .expect("click Open");
    let alert = b
        .wait_js(
            "(() => { const e = document.getElementById('ending'); \
              return !document.getElementById('terminal').hidden && !e.hidden ? e.textContent : ''; })()",
            T,
            "the warning above the terminal",
        )
        .expect("the terminal view warns");
    assert!(alert.as_str().unwrap().starts_with("Ends in "), "{alert}");
    let shots = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../artifacts/browser");
    std::fs::create_dir_all(&shots).expect("artifacts/browser");
    b.screenshot(&shots.join("terminal-ending.png"))
        .expect("terminal-ending.png");
    // Nobody types: the session ends idle and the page says so in words.
    let status = b
        .wait_js(
            "(() => { const s = document.getElementById('status').textContent; \
              return document.getElementById('terminal').hidden \
                && s.startsWith('This session was ended') ? s : ''; })()",
            Duration::from_secs(IDLE + 15),
            "the ended message",
        )
        .expect("the page says the session ended");
    assert!(
        status
            .as_str()
            .unwrap()
            .contains("(idle: no input on any of its terminals for 15 s)"),
        "{status}"
    );
    assert!(
        b.eval("document.getElementById('ending').hidden")
            .unwrap()
            .as_bool()
            .unwrap(),
        "no warning once it ended"
    );
}

#[test]
fn a_store_rebuilt_from_labels_counts_idleness_from_the_rebuild() {
    const IDLE: u64 = 5;
    let mut control = e2e::stack::ControlStack::prepare("");
    control.set_env(
        "TERMGATE__PROFILES__DEFAULT__IDLE_TIMEOUT_SECONDS",
        &IDLE.to_string(),
    );
    control.spawn(&[]);
    let alice = control.token("alice", false);
    let s = control.create(&alice);
    let id = s["id"].as_str().unwrap().to_owned();
    let created = u(&s, "created_at");
    control.kill9();
    std::fs::remove_dir_all(control.dir.dir.path().join("store")).unwrap();
    // Its idle deadline passes while the store is gone; nobody knows when it was last
    // typed into.
    while now() <= created + IDLE + 1 {
        std::thread::sleep(Duration::from_millis(200));
    }
    let restarted = now();
    control.spawn(&[]);
    assert!(control.log_text().contains("rebuilt from container labels"));
    let got = control.call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None);
    assert_eq!(got.body["state"], "running", "{}", got.text);
    let last_input = u(&got.body, "last_input");
    assert!(last_input >= restarted, "{}", got.text);
    assert_eq!(u(&got.body, "ends_at"), last_input + IDLE);
    std::thread::sleep(Duration::from_secs(3));
    let got = control.call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None);
    assert_eq!(got.body["state"], "running", "{}", got.text);
    let ended = wait_for("the rebuilt session to end idle", T, || {
        let s = control.call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None);
        (s.body["state"] == "terminated").then_some(s.body)
    });
    assert_ended_by(&ended, "idle");
    assert!(u(&ended, "ended_at") >= last_input + IDLE, "{ended}");
}

/// What the sessions page shows as "last input" moves for every session that is typed
/// into, not only for those whose profile ends idle sessions or records: a profile
/// with neither limit and no recording reports its input too, from a client that
/// offers compression as browsers do (compressed messages could not be told apart:
/// the gateway has none negotiated on a session's terminal).
#[test]
fn input_is_reported_for_a_profile_without_limits_or_recording() {
    let stack = stack(None, None);
    let s = create(&stack, "alice");
    let id = s["id"].as_str().unwrap();
    assert!(s.get("last_input").is_none(), "{s}");
    let cookie = stack.sign_in("alice");
    let origin = stack.origin(0);
    let t = stack
        .open(
            0,
            &format!("/s/{id}/ws"),
            &[
                ("Cookie", cookie.as_str()),
                ("Origin", origin.as_str()),
                (
                    "Sec-WebSocket-Extensions",
                    "permessage-deflate; client_max_window_bits",
                ),
            ],
        )
        .unwrap();
    t.send_input(b"echo typed-$((6*7))\r").unwrap();
    let typed = now();
    t.read_until("typed-42", T).expect("the shell answers");
    let (reported, _) = input_reported(&stack, id, typed);
    assert!(reported.get("ends_at").is_none(), "{reported}");
}

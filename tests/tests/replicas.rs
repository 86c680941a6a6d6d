//! Terminal limits hold over gateway replicas: two real gateways on one control, each
//! adding the other's counts (control's answer to its terminal reports) to its own
//! when it admits, and falling back to its own once control stops answering.

use std::time::{Duration, Instant};

use e2e::stack::{http, wait_for, ControlStack, GatewayStack};
use e2e::term::{ConnectError, Terminal};
use serde_json::json;

const T: Duration = Duration::from_secs(20);
/// The gateways' `activity_report_ms` here: the longest between two terminal reports.
const EVERY: Duration = Duration::from_millis(1000);
/// Control's answer counts for three intervals from when its report left.
const STALE_AFTER: Duration = Duration::from_millis(3 * 1000);

/// Control, the ttyd pools and two gateways with `max_terminals_per_user = 4`,
/// reporting at least every second; the default profile shares with `anyone`.
fn stack() -> GatewayStack {
    stack_reporting_every(EVERY)
}

/// The gateways' environment: the limit, and `activity_report_ms`.
fn gateway_env(every: Duration) -> Vec<(&'static str, String)> {
    vec![
        (
            "TERMGATE__GATEWAY__ACTIVITY_REPORT_MS",
            every.as_millis().to_string(),
        ),
        ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "4".to_owned()),
    ]
}

fn stack_reporting_every(every: Duration) -> GatewayStack {
    let mut control = ControlStack::prepare("");
    control.set_env("TERMGATE__PROFILES__DEFAULT__SHARES", "anyone");
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let mut s = GatewayStack::assemble(control, ttyd, counter);
    s.viewers = Some(e2e::ttyd::TtydPool::start_viewers_for(&s.control.instance));
    // Started again, now that the read-only pool exists, with this test's limits.
    s.gateways.clear();
    let env = gateway_env(every);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    s.spawn_gateway(&env);
    s.spawn_gateway(&env);
    s
}

fn create(stack: &GatewayStack, bearer: &str) -> String {
    stack.control.create(bearer)["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

/// Opens a terminal of `session` on gateway `n` with a bearer token.
fn open(
    stack: &GatewayStack,
    n: usize,
    session: &str,
    bearer: &str,
) -> Result<Terminal, ConnectError> {
    let auth = format!("Bearer {bearer}");
    stack.open(n, &format!("/s/{session}/ws"), &[("Authorization", &auth)])
}

/// Opens a share link's viewer on gateway `n`.
fn view(stack: &GatewayStack, n: usize, url: &str) -> Result<Terminal, ConnectError> {
    let origin = stack.origin(n);
    stack.open(n, &format!("{url}/ws"), &[("Origin", &origin)])
}

/// A gauge of gateway `n`'s admin listener.
fn gauge(stack: &GatewayStack, n: usize, name: &str) -> Option<i64> {
    let url = format!("http://127.0.0.1:{}/metrics", stack.gateways[n].admin_port);
    let m = http("GET", &url, None, None).ok()?;
    let prefix = format!("termgate_gateway_{name} ");
    m.text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits until gateway `n` counts, from control's fresh answer, `terminals` open
/// elsewhere and `viewers` watching elsewhere; returns how long that took.
fn wait_elsewhere(stack: &GatewayStack, n: usize, terminals: i64, viewers: i64) -> Duration {
    let start = Instant::now();
    wait_for(
        &format!("gateway {n} to count {terminals} terminals and {viewers} viewers elsewhere"),
        T,
        || {
            let seen = (
                gauge(stack, n, "elsewhere_fresh"),
                gauge(stack, n, "elsewhere_terminals"),
                gauge(stack, n, "elsewhere_viewers"),
            );
            (seen == (Some(1), Some(terminals), Some(viewers))).then_some(())
        },
    );
    start.elapsed()
}

fn refused_with(e: &ConnectError, status: u16, code: &str) {
    assert_eq!(e.status(), Some(status), "{e:?}");
    assert_eq!(
        e.json().expect("a JSON refusal")["error"]["code"],
        code,
        "{e:?}"
    );
}

#[test]
fn a_users_fifth_terminal_is_refused_on_the_other_replica_until_one_closes() {
    let stack = stack();
    let alice = stack.control.token("alice", false);
    let (s1, s2) = (create(&stack, &alice), create(&stack, &alice));
    // Four on gateway A, over two sessions (so only the per-user limit is reached).
    let mut on_a: Vec<Terminal> = [&s1, &s1, &s2, &s2]
        .iter()
        .map(|s| open(&stack, 0, s, &alice).expect("a terminal on A"))
        .collect();
    wait_elsewhere(&stack, 1, 4, 0);
    let fifth = open(&stack, 1, &s1, &alice).expect_err("a fifth terminal on B");
    refused_with(&fifth, 429, "too_many_terminals");
    assert_eq!(
        fifth.json().unwrap()["error"]["message"],
        "you have too many open terminals"
    );
    // Another user is not held by alice's count.
    let bob = stack.control.token("bob", false);
    let bobs = create(&stack, &bob);
    let bob_on_b = open(&stack, 1, &bobs, &bob).expect("bob opens on B");

    // One closed on A: once B hears of it, B admits one, and A then counts it.
    drop(on_a.pop());
    let heard = wait_elsewhere(&stack, 1, 3, 0);
    eprintln!("B heard of the close on A after {heard:?}");
    let on_b = open(&stack, 1, &s1, &alice).expect("B admits one once A closed one");
    on_b.send_input(b"echo on-b-$((6*7))\r").unwrap();
    on_b.read_until("on-b-42", T).expect("B's terminal works");
    wait_elsewhere(&stack, 0, 2, 0);
    let again = open(&stack, 0, &s2, &alice).expect_err("A now counts B's terminal");
    refused_with(&again, 429, "too_many_terminals");
    drop((on_a, on_b, bob_on_b));
}

#[test]
fn a_share_links_max_viewers_holds_over_replicas() {
    let stack = stack();
    let alice = stack.control.token("alice", false);
    let id = create(&stack, &alice);
    let a = stack.control.call(
        "POST",
        &format!("/v1/sessions/{id}/shares"),
        Some(&alice),
        Some(json!({ "ttl_seconds": 600, "max_viewers": 1 })),
    );
    assert_eq!(a.status, 201, "create share: {}", a.text);
    let url = a.body["url"].as_str().expect("url").to_owned();
    // Both gateways know the link once the feed brought it.
    for n in [0, 1] {
        wait_for("the link reaches the gateway", T, || {
            let page = http("GET", &stack.url(n, &url), None, None).ok()?;
            (page.status == 200).then_some(())
        });
    }
    let watching = view(&stack, 0, &url).expect("the viewer on A");
    wait_elsewhere(&stack, 1, 0, 1);
    let second = view(&stack, 1, &url).expect_err("a second viewer on B");
    refused_with(&second, 429, "too_many_viewers");
    drop(watching);
    let heard = wait_elsewhere(&stack, 1, 0, 0);
    eprintln!("B heard the viewer on A left after {heard:?}");
    let on_b = view(&stack, 1, &url).expect("B admits the viewer once A's left");
    wait_elsewhere(&stack, 0, 0, 1);
    let on_a = view(&stack, 0, &url).expect_err("A now counts B's viewer");
    refused_with(&on_a, 429, "too_many_viewers");
    drop(on_b);
}

#[test]
fn with_control_gone_each_replica_counts_only_its_own_terminals_after_the_staleness_bound() {
    let mut stack = stack();
    let alice = stack.control.token("alice", false);
    let (s1, s2) = (create(&stack, &alice), create(&stack, &alice));
    let _on_a: Vec<Terminal> = [&s1, &s1, &s2, &s2]
        .iter()
        .map(|s| open(&stack, 0, s, &alice).expect("a terminal on A"))
        .collect();
    // B's routes are cached, so its terminals open without control.
    wait_elsewhere(&stack, 1, 4, 0);
    let refused = open(&stack, 1, &s1, &alice).expect_err("a fifth terminal on B");
    refused_with(&refused, 429, "too_many_terminals");

    stack.control.kill9();
    let gone = Instant::now();
    // Control's last answer still counts: a blip of control drops no limit.
    let still = open(&stack, 1, &s1, &alice).expect_err("B still counts A's terminals");
    refused_with(&still, 429, "too_many_terminals");
    assert!(
        gone.elapsed() < EVERY,
        "the check above ran inside the fresh window"
    );

    // Then B falls back to its own count: at most three intervals after its last
    // answer, which came at most one interval before control went.
    let first = wait_for("B to admit on its own count", STALE_AFTER + T, || {
        open(&stack, 1, &s1, &alice).ok()
    });
    let took = gone.elapsed();
    eprintln!("B counted only its own terminals {took:?} after control went");
    assert!(
        took <= STALE_AFTER + Duration::from_millis(500),
        "fell back after {took:?}"
    );
    // The gauge is set by the report loop, at most one interval after the fallback.
    wait_for("B's gauge to say its counts went stale", EVERY + T, || {
        (gauge(&stack, 1, "elsewhere_fresh") == Some(0)).then_some(())
    });
    // Its own count still holds the limit: four on B, and no fifth.
    let mut on_b = vec![first];
    for s in [&s1, &s2, &s2] {
        on_b.push(open(&stack, 1, s, &alice).expect("B admits up to its own limit"));
    }
    let fifth = open(&stack, 1, &s2, &alice).expect_err("a fifth on B itself");
    refused_with(&fifth, 429, "too_many_terminals");
}

#[test]
fn a_gateway_restarted_after_a_crash_is_not_held_by_its_predecessors_terminals() {
    // Reports five seconds apart: the dead process's counts would live for fifteen.
    let every = Duration::from_secs(5);
    let mut stack = stack_reporting_every(every);
    let alice = stack.control.token("alice", false);
    let (s1, s2) = (create(&stack, &alice), create(&stack, &alice));
    let on_a: Vec<Terminal> = [&s1, &s1, &s2, &s2]
        .iter()
        .map(|s| open(&stack, 0, s, &alice).expect("a terminal on A"))
        .collect();
    wait_elsewhere(&stack, 1, 4, 0);

    // A crashes; its supervisor starts it again on the same listeners.
    let (port, admin_port) = (stack.gateways[0].port, stack.gateways[0].admin_port);
    stack.gateways[0].kill9();
    let killed = Instant::now();
    for t in &on_a {
        t.wait_closed(T).expect("A's terminals close with it");
    }
    let env = gateway_env(every);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let again = stack.spawn_gateway_on(port, admin_port, &[], &env, true);
    // Its first answer already leaves the dead process out (which would otherwise
    // count until three intervals after its last report, at least 10 s from the kill).
    wait_elsewhere(&stack, again, 0, 0);
    let took = killed.elapsed();
    eprintln!("the restarted A counted nothing elsewhere {took:?} after the crash");
    assert!(
        took < 2 * every,
        "answered only after {took:?}: the dead process's counts may have aged out instead"
    );
    // Every terminal reconnects to it, and the limit still holds.
    let back: Vec<Terminal> = [&s1, &s1, &s2, &s2]
        .iter()
        .map(|s| open(&stack, again, s, &alice).expect("a terminal reopens on A"))
        .collect();
    let fifth = open(&stack, again, &s1, &alice).expect_err("a fifth on A");
    refused_with(&fifth, 429, "too_many_terminals");
    drop(back);
}

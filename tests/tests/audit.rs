//! The audit trail holds the gateways' lines beside control's own: who opened which
//! terminal, who was refused, which live terminals were closed and why, searchable by
//! user and session through control's `GET /v1/audit` (the admin console's search).

use std::time::Duration;

use e2e::stack::{http, wait_for, ControlStack, GatewayStack};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(20);

/// A stack whose gateway reports every 300 ms.
fn stack() -> GatewayStack {
    let mut control = ControlStack::prepare("");
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let mut s = GatewayStack::assemble(control, ttyd, counter);
    s.gateways.clear();
    s.spawn_gateway(&[("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "300")]);
    s
}

/// The trail's lines for `query`, as an admin sees them.
fn lines(control: &ControlStack, query: &str) -> Vec<Value> {
    let a = control.call(
        "GET",
        &format!("/v1/audit?{query}"),
        Some(&control.token("root", true)),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["lines"].as_array().cloned().unwrap_or_default()
}

fn find<'a>(lines: &'a [Value], message: &str, field: &str, value: &str) -> Option<&'a Value> {
    lines
        .iter()
        .find(|l| l["message"] == message && l["fields"][field] == value)
}

#[test]
fn terminal_opens_refusals_and_closes_on_the_gateway_are_in_controls_trail() {
    let mut stack = stack();
    let alice = stack.control.token("alice", false);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let cookie = stack.sign_in("alice");
    let t = stack
        .open_as(0, &id, &cookie)
        .expect("alice opens her terminal");
    t.send_input(b"echo audited\r").expect("type");
    t.read_until("audited", T).expect("echo");
    drop(t);
    let bob = stack.sign_in("bob");
    let refused = stack.open_as(0, &id, &bob).expect_err("bob is refused");
    assert_eq!(refused.status(), Some(404));

    // Alice's allowed terminal, with control's own create, under her name and the
    // session; bob's refusal under his.
    let found = wait_for("the gateway's lines in the trail", T, || {
        let mine = lines(&stack.control, &format!("sub=alice&session={id}"));
        let opened = find(&mine, "terminal access", "decision", "allow")?.clone();
        find(&mine, "session created", "sub", "alice")?;
        let bobs = lines(&stack.control, &format!("sub=bob&session={id}"));
        let denied = find(&bobs, "terminal access", "reason", "session_not_found")?.clone();
        Some((opened, denied))
    });
    let (opened, denied) = found;
    // Searched again now that bob's line is in the trail: a search by user must leave
    // it out.
    let mine = lines(&stack.control, &format!("sub=alice&session={id}"));
    assert!(
        find(&mine, "terminal access", "decision", "allow").is_some(),
        "alice's line is still found: {mine:?}"
    );
    assert_eq!(opened["fields"]["status"], "101", "{opened}");
    assert_eq!(denied["fields"]["decision"], "deny", "{denied}");
    for line in [&opened, &denied] {
        let gateway = line["fields"]["gateway"].as_str().unwrap_or_default();
        assert!(
            !gateway.is_empty(),
            "marked with the gateway that sent it: {line}"
        );
    }
    assert!(
        mine.iter().all(|l| l["fields"]["sub"] != "bob"),
        "a search by user finds only that user's lines: {mine:?}"
    );

    // Lines made while control is down reach the trail once it is back.
    stack.control.kill9();
    let a = http(
        "POST",
        &stack.url(0, "/auth/session"),
        None,
        Some(&json!({"token": "not.a.token"})),
    )
    .expect("sign-in answered");
    assert_eq!(a.status, 401, "{}", a.text);
    std::thread::sleep(Duration::from_millis(900));
    stack.control.spawn(&[]);
    wait_for("the line kept while control was down", T, || {
        let all = lines(&stack.control, "limit=500");
        find(&all, "token refused", "reason", "malformed").map(|_| ())
    });

    // Ending the session closes its open terminal on the gateway, which says so in the
    // trail. The gateway must follow the restarted control's feed first (its poll may
    // still be backing off): an end hangs the container up at once, and a gateway that
    // learns of the end only after the container died finds no terminal left to close.
    stack.control.create(&alice);
    let ready = format!("http://127.0.0.1:{}/readyz", stack.gw().admin_port);
    wait_for("the gateway to follow the restarted control", T, || {
        http("GET", &ready, None, None)
            .ok()
            .filter(|a| a.body["routes"] == 2)
    });
    let t = stack.open_as(0, &id, &cookie).expect("alice again");
    let a = stack
        .control
        .call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None);
    assert!(a.status == 202 || a.status == 204, "{}", a.text);
    t.wait_closed(T).expect("closed by the gateway");
    wait_for("the live close in the trail", T, || {
        let mine = lines(&stack.control, &format!("session={id}"));
        find(&mine, "live terminals closed", "reason", "route_removed").map(|_| ())
    });
}

#[test]
fn audit_reports_need_the_service_token_and_bounded_well_formed_bodies() {
    let control = ControlStack::start("");
    let entry = |sub: &str| {
        json!({"at_ms": 1_700_000_000_000u64, "level": "INFO", "message": "terminal access",
               "fields": {"sub": sub, "session": "s-1", "decision": "allow"}})
    };
    let report = json!({"gateway": "g-test", "entries": [entry("carol")]});
    let user = control.token("mallory", true);
    for bearer in [None, Some(user.as_str())] {
        let a = control.call("POST", "/v1/audit", bearer, Some(report.clone()));
        assert_eq!(a.status, 401, "{}", a.text);
    }
    let service = control.service_token();
    let a = control.call("POST", "/v1/audit", Some(&service), Some(report));
    assert_eq!(a.status, 204, "{}", a.text);
    let carol = lines(&control, "sub=carol");
    let line = find(&carol, "terminal access", "decision", "allow").expect("kept");
    assert_eq!(line["fields"]["gateway"], "g-test");
    assert_eq!(line["at_ms"], 1_700_000_000_000u64);

    let tiny = json!({"at_ms": 1, "level": "INFO", "message": "m", "fields": {"sub": "dave"}});
    let too_many: Vec<Value> = (0..501).map(|_| tiny.clone()).collect();
    for (body, status) in [
        (json!({"gateway": "g", "entries": too_many}), 400),
        (json!({"gateway": "", "entries": []}), 400),
        (json!({"gateway": "g", "entries": [], "extra": 1}), 400),
        (json!({"gateway": "g", "entries": [{"at_ms": 1}]}), 400),
        (
            json!({"gateway": "g", "entries": ["x".repeat(70_000)]}),
            413,
        ),
    ] {
        let a = control.call("POST", "/v1/audit", Some(&service), Some(body));
        assert_eq!(a.status, status, "{}", a.text);
    }
    assert!(
        lines(&control, "sub=dave").is_empty(),
        "a refused report keeps nothing"
    );
}

//! Links to one recording (`/r/<token>`), end to end: real control, gateway, Docker and
//! ttyd. The owner makes, lists and revokes links; anyone (or any signed-in user) with
//! a link plays the recording through the gateway; every worthless link is the 404 of
//! an unknown one; only the token's hash is kept and no log holds a token.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e2e::stack::{http, wait_for, GatewayStack};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(20);

/// A stack whose default profile records and allows `anyone` links, with a profile
/// `closed` (recording, `recording_links = "off"`); control's shortest link life is
/// 1 s (its debug-build hook), so expiry is seen without waiting a minute.
fn start() -> GatewayStack {
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    let extra = format!(
        "\n[profiles.closed]\nimage = \"{image}\"\nrecord = true\nrecording_links = \"off\"\n"
    );
    let mut control = e2e::stack::ControlStack::prepare(&extra);
    control.set_env("TERMGATE__PROFILES__DEFAULT__RECORD", "true");
    control.set_env("TERMGATE__PROFILES__DEFAULT__RECORDING_LINKS", "anyone");
    control.spawn(&[("TERMGATE_TEST_RECORDING_LINK_MIN_TTL", "1")]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    GatewayStack::assemble(control, ttyd, counter)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Opens `session`'s terminal as `sub`, types a command, and waits until control holds
/// its recording; the recording's name.
fn record(stack: &GatewayStack, sub: &str, session: &str) -> String {
    let cookie = stack.sign_in(sub);
    let origin = stack.origin(0);
    let t = stack
        .open(
            0,
            &format!("/s/{session}/ws"),
            &[("Cookie", cookie.as_str()), ("Origin", origin.as_str())],
        )
        .expect("the terminal opens");
    t.send_input(b"echo linked-$((6*7))\r").expect("type");
    t.read_until("linked-42\r\n", T).expect("the output");
    std::thread::sleep(Duration::from_millis(200));
    t.close();
    let token = stack.control.token(sub, false);
    wait_for("the recording at control", T, || {
        let a = stack.control.call(
            "GET",
            &format!("/v1/sessions/{session}/recordings"),
            Some(&token),
            None,
        );
        a.body["recordings"][0]["name"].as_str().map(str::to_owned)
    })
}

/// `method` on the gateway's `/api/sessions/<session>/recordings/<name>/links<tail>`
/// with `bearer`.
fn links(
    stack: &GatewayStack,
    method: &str,
    bearer: &str,
    session: &str,
    name: &str,
    tail: &str,
    body: Option<Value>,
) -> e2e::stack::Answer {
    http(
        method,
        &stack.url(
            0,
            &format!("/api/sessions/{session}/recordings/{name}/links{tail}"),
        ),
        Some(bearer),
        body.as_ref(),
    )
    .expect("the gateway answers")
}

/// GET `path` on the gateway with the session cookie `cookie`: status and body bytes.
fn get(stack: &GatewayStack, path: &str, cookie: Option<&str>) -> (u16, Vec<u8>) {
    let agent = e2e::stack::agent();
    let mut req = agent.get(&stack.url(0, path));
    if let Some(c) = cookie {
        req = req.header("Cookie", c);
    }
    let mut r = req.call().expect("the gateway answers");
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_vec().unwrap_or_default();
    (status, body)
}

/// The lines of `log` that say `message`.
fn lines_with<'a>(log: &'a str, message: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(message)).collect()
}

#[test]
fn an_owners_link_plays_the_recording_to_whom_it_may_and_every_worthless_link_is_404() {
    let mut stack = start();
    let alice = stack.control.token("alice", false);
    let bob = stack.control.token("bob", false);
    let admin = stack.control.token("root", true);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let name = record(&stack, "alice", &id);
    let download = http(
        "GET",
        &stack.url(0, &format!("/api/sessions/{id}/recordings/{name}")),
        Some(&alice),
        None,
    )
    .unwrap();
    assert_eq!(download.status, 200);
    assert!(download.text.contains("linked-42"));

    // The owner makes an `anyone` link: 201, its token answered once.
    let before = now();
    let made = links(
        &stack,
        "POST",
        &alice,
        &id,
        &name,
        "",
        Some(json!({"ttl_seconds": 3600, "mode": "anyone"})),
    );
    assert_eq!(made.status, 201, "{}", made.text);
    let any_token = made.body["token"].as_str().unwrap().to_owned();
    let any_id = made.body["id"].as_str().unwrap().to_owned();
    assert_eq!(any_token.len(), 64, "256 random bits in hex");
    assert!(any_token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(any_id.len(), 16);
    assert_eq!(made.body["url"], format!("/r/{any_token}").as_str());
    assert_eq!(made.body["mode"], "anyone");
    let expires = made.body["expires_at"].as_u64().unwrap();
    assert!((before + 3600..=now() + 3600).contains(&expires));
    // The default: signed-in, for 7 days.
    let made = links(&stack, "POST", &alice, &id, &name, "", Some(json!({})));
    assert_eq!(made.status, 201, "{}", made.text);
    assert_eq!(made.body["mode"], "signed-in");
    let expires = made.body["expires_at"].as_u64().unwrap();
    assert!(expires >= before + 7 * 86400 && expires <= now() + 7 * 86400);
    let signed_token = made.body["token"].as_str().unwrap().to_owned();
    let signed_id = made.body["id"].as_str().unwrap().to_owned();
    // An admin may make one too.
    let by_admin = links(
        &stack,
        "POST",
        &admin,
        &id,
        &name,
        "",
        Some(json!({"mode": "anyone"})),
    );
    assert_eq!(by_admin.status, 201, "{}", by_admin.text);
    let admin_token = by_admin.body["token"].as_str().unwrap().to_owned();

    // Out of bounds: 400 with a stable code.
    for body in [
        json!({"mode": "everyone"}),
        json!({"mode": "off"}),
        json!({"ttl_seconds": 0}),
        json!({"ttl_seconds": 30 * 86400 + 1}),
    ] {
        let a = links(&stack, "POST", &alice, &id, &name, "", Some(body.clone()));
        assert_eq!(
            (a.status, a.body["error"]["code"].as_str()),
            (400, Some("invalid_recording_link")),
            "{body}: {}",
            a.text
        );
    }

    // The list: ids, modes and expiries; never a token.
    let listed = links(&stack, "GET", &alice, &id, &name, "", None);
    assert_eq!(listed.status, 200, "{}", listed.text);
    let ids: Vec<&str> = listed.body["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&any_id.as_str()) && ids.contains(&signed_id.as_str()),
        "{ids:?}"
    );
    assert_eq!(listed.body["modes"], json!(["signed-in", "anyone"]));
    for t in [&any_token, &signed_token, &admin_token] {
        assert!(!listed.text.contains(t.as_str()), "a token in the list");
    }

    // Someone else's recording, an unknown session or recording, a malformed id: one
    // 404, body for body.
    let unknown = links(&stack, "GET", &bob, "abcdefghijk234mn", &name, "", None);
    assert_eq!(unknown.status, 404);
    for (method, session, rec, tail, body) in [
        ("GET", id.as_str(), name.as_str(), "", None),
        (
            "POST",
            id.as_str(),
            name.as_str(),
            "",
            Some(json!({"mode": "anyone"})),
        ),
        (
            "DELETE",
            id.as_str(),
            name.as_str(),
            &*format!("/{any_id}"),
            None,
        ),
        ("GET", "not-a-session", name.as_str(), "", None),
        ("GET", id.as_str(), "no-such-recording", "", None),
    ] {
        let a = links(&stack, method, &bob, session, rec, tail, body);
        assert_eq!(
            (a.status, &a.text),
            (404, &unknown.text),
            "bob {method} {session} {rec}{tail}"
        );
    }
    for tail in ["/0123456789abcdef", "/not-an-id"] {
        let a = links(&stack, "DELETE", &alice, &id, &name, tail, None);
        assert_eq!(
            (a.status, &a.text),
            (404, &unknown.text),
            "alice DELETE {tail}"
        );
    }

    // `anyone`: played with no credential at all, byte for byte the owner's download,
    // on a page of its own.
    let (status, bytes) = get(&stack, &format!("/r/{any_token}/cast"), None);
    assert_eq!(status, 200);
    assert_eq!(bytes, download.text.as_bytes(), "the link plays the file");
    let (status, page) = get(&stack, &format!("/r/{any_token}"), None);
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&page).contains("/assets/recording.js"));

    // A token nobody made: 404, the body every worthless link gets.
    let nobody = "ab".repeat(32);
    let (status, not_found) = get(&stack, &format!("/r/{nobody}/cast"), None);
    assert_eq!(status, 404);
    let (status, malformed) = get(&stack, &format!("/r/{}/cast", &nobody[1..]), None);
    assert_eq!((status, &malformed), (404, &not_found));

    // `signed-in`: no credential, 404 for the recording and a page that says to sign
    // in; any signed-in user plays it.
    let (status, body) = get(&stack, &format!("/r/{signed_token}/cast"), None);
    assert_eq!(
        (status, &body),
        (404, &not_found),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, page) = get(&stack, &format!("/r/{signed_token}"), None);
    assert_eq!(status, 401);
    assert!(String::from_utf8_lossy(&page).contains("sign in"));
    let bob_cookie = stack.sign_in("bob");
    let (status, bytes) = get(
        &stack,
        &format!("/r/{signed_token}/cast"),
        Some(&bob_cookie),
    );
    assert_eq!(status, 200);
    assert_eq!(bytes, download.text.as_bytes());
    let (status, _) = get(&stack, &format!("/r/{signed_token}"), Some(&bob_cookie));
    assert_eq!(status, 200);

    // Every play is audited at control, naming the link and the viewer.
    let log = stack.control.log_text();
    let views = lines_with(&log, "recording viewed by link");
    assert!(
        views.iter().any(|l| l.contains(&any_id)
            && l.contains("anyone")
            && l.contains(&id)
            && l.contains(&name)),
        "{views:#?}"
    );
    assert!(
        views
            .iter()
            .any(|l| l.contains(&signed_id) && l.contains("bob")),
        "{views:#?}"
    );

    // Revoked: the same 404, gone from the list.
    let revoked = links(
        &stack,
        "DELETE",
        &alice,
        &id,
        &name,
        &format!("/{any_id}"),
        None,
    );
    assert_eq!(revoked.status, 204, "{}", revoked.text);
    let (status, body) = get(&stack, &format!("/r/{any_token}/cast"), None);
    assert_eq!((status, &body), (404, &not_found));
    let (status, _) = get(&stack, &format!("/r/{any_token}"), None);
    assert_eq!(status, 404);
    let listed = links(&stack, "GET", &alice, &id, &name, "", None);
    assert!(!listed.text.contains(&any_id), "{}", listed.text);

    // Expired: the same 404.
    let short = links(
        &stack,
        "POST",
        &alice,
        &id,
        &name,
        "",
        Some(json!({"ttl_seconds": 1, "mode": "anyone"})),
    );
    assert_eq!(short.status, 201, "{}", short.text);
    let short_token = short.body["token"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_millis(2100));
    let (status, body) = get(&stack, &format!("/r/{short_token}/cast"), None);
    assert_eq!((status, &body), (404, &not_found));

    // A profile with `recording_links = "off"`: 403 and its code.
    let closed = stack.control.create_with(&alice, "closed")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let closed_name = record(&stack, "alice", &closed);
    let off = links(
        &stack,
        "POST",
        &alice,
        &closed,
        &closed_name,
        "",
        Some(json!({})),
    );
    assert_eq!(
        (off.status, off.body["error"]["code"].as_str()),
        (403, Some("recording_links_off")),
        "{}",
        off.text
    );
    let listed = links(&stack, "GET", &alice, &closed, &closed_name, "", None);
    assert_eq!(listed.body["modes"], json!([]), "{}", listed.text);

    // Links outlive their session: ended, its recording still plays.
    let ended = stack
        .control
        .call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None);
    assert_eq!(ended.status, 204, "{}", ended.text);
    let (status, bytes) = get(&stack, &format!("/r/{admin_token}/cast"), None);
    assert_eq!(status, 200);
    assert_eq!(bytes, download.text.as_bytes());

    // The owner locked: every link of theirs is the same 404; unlocked, it plays again.
    let lock = |sub: &str, method: &str| {
        let a = stack
            .control
            .call(method, &format!("/v1/users/{sub}/lock"), Some(&admin), None);
        assert_eq!(a.status, 204, "{method} lock {sub}: {}", a.text);
    };
    lock("alice", "POST");
    let (status, body) = get(&stack, &format!("/r/{admin_token}/cast"), None);
    assert_eq!((status, &body), (404, &not_found), "the owner is locked");
    lock("alice", "DELETE");
    let (status, _) = get(&stack, &format!("/r/{admin_token}/cast"), None);
    assert_eq!(status, 200, "the owner unlocked");
    // A signed-in viewer locked: the `signed-in` link is a 404 to them.
    lock("bob", "POST");
    let (status, body) = get(
        &stack,
        &format!("/r/{signed_token}/cast"),
        Some(&bob_cookie),
    );
    assert_eq!((status, &body), (404, &not_found), "the viewer is locked");
    lock("bob", "DELETE");
    // The gateway refuses a locked user's cookie itself, until the unlock reaches it
    // through the route feed.
    wait_for("the viewer unlocked", T, || {
        let (status, _) = get(
            &stack,
            &format!("/r/{signed_token}/cast"),
            Some(&bob_cookie),
        );
        (status == 200).then_some(())
    });
    // The profile narrowed to `off` (control restarted with it): the link is a 404.
    stack.control.kill9();
    stack
        .control
        .set_env("TERMGATE__PROFILES__DEFAULT__RECORDING_LINKS", "off");
    stack
        .control
        .spawn(&[("TERMGATE_TEST_RECORDING_LINK_MIN_TTL", "1")]);
    let (status, body) = wait_for("the narrowed profile to be asked", T, || {
        let (status, body) = get(&stack, &format!("/r/{admin_token}/cast"), None);
        (status != 502 && status != 503).then_some((status, body))
    });
    assert_eq!(
        (status, &body),
        (404, &not_found),
        "the profile no longer lets links play"
    );

    // No log holds a token: the gateway's access lines name the link's id.
    let gateway_log = stack.gw().log_text();
    let control_log = stack.control.log_text();
    for t in [&any_token, &signed_token, &admin_token, &short_token] {
        assert!(
            !gateway_log.contains(t.as_str()),
            "a token in the gateway's log"
        );
        assert!(
            !control_log.contains(t.as_str()),
            "a token in control's log"
        );
    }
    assert!(
        gateway_log.contains(&format!("/r/<link {any_id}>/cast")),
        "the access line names the link"
    );
}

//! Revocation that every gateway enforces at once (design §2 "Sign-ins and revocation"): a sign-out on one
//! gateway refuses the cookie on all of them and closes its terminals there, users
//! and admins list and end sign-ins, an admin revokes a bearer token by its `jti` or a
//! user's tokens issued before a time, and a sign-out that cannot reach control says
//! so. Real control, two real gateways, real ttyd and session containers.

use std::time::{Duration, Instant};

use e2e::stack::{claims_of, wait_for, Answer, GatewayStack};
use serde_json::json;

const T: Duration = Duration::from_secs(15);
/// What a revocation promises: every gateway refuses, and closes, within this.
const PROMISED: Duration = Duration::from_secs(2);

/// A request to gateway `n` as a browser makes it: the cookie, and this gateway's
/// Origin on anything but a GET.
fn browser(stack: &GatewayStack, n: usize, method: &str, path: &str, cookie: &str) -> Answer {
    let origin = stack.origin(n);
    let mut headers = vec![("Cookie", cookie)];
    if method != "GET" {
        headers.push(("Origin", origin.as_str()));
    }
    e2e::stack::http_with(method, &stack.url(n, path), &headers).expect("the gateway answers")
}

fn bearer(stack: &GatewayStack, n: usize, method: &str, path: &str, token: &str) -> Answer {
    e2e::stack::http(method, &stack.url(n, path), Some(token), None).expect("the gateway answers")
}

fn create(stack: &GatewayStack, sub: &str) -> String {
    let token = stack.control.token(sub, false);
    stack.control.create(&token)["id"]
        .as_str()
        .expect("an id")
        .to_owned()
}

/// Waits until gateway `n` answers `path` with `status` for the cookie.
fn until_cookie_status(stack: &GatewayStack, n: usize, cookie: &str, status: u16) -> Duration {
    let start = Instant::now();
    wait_for(&format!("gateway {n} answering {status}"), PROMISED, || {
        (browser(stack, n, "GET", "/api/sessions", cookie).status == status).then_some(())
    });
    start.elapsed()
}

#[test]
fn signing_out_on_one_gateway_refuses_the_cookie_everywhere_and_closes_its_terminals() {
    let mut stack = GatewayStack::start("");
    let b = stack.spawn_gateway(&[]);
    let id = create(&stack, "alice");
    let link = stack.control.token("alice", false);
    let here = stack.sign_in_with(0, &link);
    let elsewhere = stack.sign_in_with(b, &link);
    assert_ne!(
        here, elsewhere,
        "each sign-in carries a token of its own, even from the same link"
    );
    let t = stack
        .open_as(b, &id, &here)
        .expect("the terminal opens on B");
    t.send_input(b"echo before-$((40+2))\r").unwrap();
    t.read_until("before-42", T).unwrap();
    let kept = stack
        .open_as(b, &id, &elsewhere)
        .expect("another sign-in's terminal");

    let out = browser(&stack, 0, "DELETE", "/auth/session", &here);
    assert_eq!(out.status, 200, "sign-out: {}", out.text);
    assert!(
        out.set_cookies.iter().any(|c| c.contains("Max-Age=0")),
        "the cookie is cleared: {:?}",
        out.set_cookies
    );
    let closed_in = t
        .wait_closed(PROMISED)
        .expect("B closes the signed-out terminal");
    let why = t.close_reason().unwrap_or_default();
    assert!(
        why.contains("termgate: signed out"),
        "the close frame says why: {why}"
    );
    assert_eq!(
        browser(&stack, 0, "GET", "/api/sessions", &here).status,
        401
    );
    until_cookie_status(&stack, b, &here, 401);
    assert_eq!(
        stack.open_as(b, &id, &here).unwrap_err().status(),
        Some(401),
        "a new terminal with the copied cookie is refused"
    );
    eprintln!("signed-out terminal closed on the other gateway {closed_in:?} after the sign-out");

    // The other sign-in, and the link itself, are not signed out.
    assert_eq!(
        browser(&stack, b, "GET", "/api/sessions", &elsewhere).status,
        200
    );
    kept.send_input(b"echo still-$((40+2))\r").unwrap();
    kept.read_until("still-42", T).unwrap();
    assert_eq!(bearer(&stack, 0, "GET", "/api/sessions", &link).status, 200);
}

#[test]
fn users_list_their_sign_ins_and_sign_out_everywhere_and_admins_end_anyones() {
    let mut stack = GatewayStack::start("");
    let b = stack.spawn_gateway(&[]);
    let link = stack.control.token("alice", false);
    let first = stack.sign_in_with(0, &link);
    let second = stack.sign_in_with(b, &link);
    let list = browser(&stack, 0, "GET", "/api/signins", &first);
    assert_eq!(list.status, 200, "{}", list.text);
    let signins = list.body["signins"].as_array().expect("a list").clone();
    assert_eq!(signins.len(), 2, "{signins:?}");
    assert_eq!(
        signins
            .iter()
            .filter(|s| s["current"] == json!(true))
            .count(),
        1,
        "the caller's own is marked: {signins:?}"
    );
    assert!(signins
        .iter()
        .all(|s| s["sub"] == "alice" && s["method"] == "token"));

    // A user may not see another's.
    let bob_link = stack.control.token("bob", false);
    let bob = stack.sign_in_with(b, &bob_link);
    assert_eq!(
        browser(&stack, 0, "GET", "/api/signins?sub=bob", &first).status,
        403
    );

    // "Sign out everywhere" ends both of alice's, on both gateways; bob's stays.
    let all = browser(&stack, b, "DELETE", "/api/signins", &second);
    assert_eq!(all.status, 200, "{}", all.text);
    assert_eq!(all.body["signed_out"], json!(2));
    let link_iat = claims_of(&link)["iat"].as_u64().unwrap();
    assert!(
        all.body["tokens_issued_before"]
            .as_u64()
            .is_some_and(|t| t > link_iat),
        "the answer says which tokens went: {}",
        all.text
    );
    for n in [0, b] {
        until_cookie_status(&stack, n, &first, 401);
        until_cookie_status(&stack, n, &second, 401);
    }
    assert_eq!(browser(&stack, 0, "GET", "/api/sessions", &bob).status, 200);
    // The link those sign-ins came from goes too: it neither signs in again nor calls
    // the API, on either gateway, and closes what it opened.
    for n in [0, b] {
        wait_for(&format!("gateway {n} refusing the link"), PROMISED, || {
            (bearer(&stack, n, "GET", "/api/sessions", &link).status == 401).then_some(())
        });
        let again = e2e::stack::http(
            "POST",
            &stack.url(n, "/auth/session"),
            None,
            Some(&json!({"token": link})),
        )
        .unwrap();
        assert_eq!(again.status, 401, "the link signs in again: {}", again.text);
    }
    assert_eq!(
        bearer(&stack, 0, "GET", "/api/sessions", &bob_link).status,
        200,
        "another user's link stays"
    );

    // An admin lists bob's and ends the one by its id.
    let admin = stack.control.token("root", true);
    let listed = bearer(&stack, 0, "GET", "/api/signins?sub=bob", &admin);
    assert_eq!(listed.status, 200, "{}", listed.text);
    let ids: Vec<String> = listed.body["signins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{}", listed.text);
    let path = format!("/api/signins/{}?sub=bob", ids[0]);
    assert_eq!(bearer(&stack, 0, "DELETE", &path, &admin).status, 204);
    for n in [0, b] {
        until_cookie_status(&stack, n, &bob, 401);
    }
    assert_eq!(
        bearer(&stack, 0, "DELETE", &path, &admin).status,
        404,
        "an ended sign-in is no longer found"
    );
}

#[test]
fn only_a_gateway_records_a_sign_in_and_a_users_token_files_none() {
    let stack = GatewayStack::start("");
    let link = stack.control.token("alice", false);
    let cookie = stack.sign_in_with(0, &link);
    let forged = json!({"method": "oidc", "gateway": "forged-gateway",
                        "user_agent": "Forged/1.0", "client": "203.0.113.66"});
    // Through the gateway's API and straight at control, with the user's own token
    // (and with the sign-in's, which the page holds as its cookie).
    let sign_in_token = cookie.trim_start_matches("termgate_session=");
    for token in [link.as_str(), sign_in_token] {
        let a = e2e::stack::http(
            "POST",
            &stack.url(0, "/api/signins"),
            Some(token),
            Some(&forged),
        )
        .unwrap();
        assert!(matches!(a.status, 403 | 404), "through the gateway: {a:?}");
        let a = stack
            .control
            .call("POST", "/v1/signins", Some(token), Some(forged.clone()));
        assert!(matches!(a.status, 403 | 404), "at control: {a:?}");
    }
    // The service token alone names nobody: the sign-in's token must verify.
    let mut unsigned = forged.clone();
    unsigned["token"] = json!("not-a-token");
    let a = stack.control.call(
        "POST",
        "/v1/signins",
        Some(&stack.control.service_token()),
        Some(unsigned),
    );
    assert_eq!(a.status, 401, "{a:?}");

    // Only the gateway's own record is listed, and the audit trail holds no forgery.
    let list = browser(&stack, 0, "GET", "/api/signins", &cookie);
    assert_eq!(list.status, 200, "{}", list.text);
    let signins = list.body["signins"].as_array().expect("a list");
    assert_eq!(signins.len(), 1, "{signins:?}");
    assert_eq!(signins[0]["method"], "token");
    assert_ne!(signins[0]["gateway"], "forged-gateway");
    assert!(
        !stack.control.log_text().contains("forged-gateway"),
        "a forged sign-in reached the audit trail"
    );
}

#[test]
fn an_admin_revokes_a_token_by_jti_or_issued_before_and_every_gateway_closes_and_refuses_it() {
    let mut stack = GatewayStack::start("");
    let b = stack.spawn_gateway(&[]);
    let id = create(&stack, "carol");
    let carol = stack.control.token("carol", false);
    let jti = claims_of(&carol)["jti"].as_str().expect("a jti").to_owned();
    let t = stack
        .open(
            b,
            &format!("/s/{id}/ws"),
            &[("Authorization", &format!("Bearer {carol}"))],
        )
        .expect("the terminal opens with the bearer token");
    t.send_input(b"echo jti-$((40+2))\r").unwrap();
    t.read_until("jti-42", T).unwrap();
    let admin = stack.control.token("root", true);
    let not_admin = e2e::stack::http(
        "POST",
        &stack.url(0, "/api/revocations"),
        Some(&carol),
        Some(&json!({"jti": jti})),
    )
    .unwrap();
    assert_eq!(not_admin.status, 403, "only an admin revokes");
    let revoked = e2e::stack::http(
        "POST",
        &stack.url(0, "/api/revocations"),
        Some(&admin),
        Some(&json!({"jti": jti})),
    )
    .unwrap();
    assert_eq!(revoked.status, 201, "{}", revoked.text);
    t.wait_closed(PROMISED)
        .expect("B closes the revoked token's terminal");
    let why = t.close_reason().unwrap_or_default();
    assert!(why.contains("termgate: your sign-in was revoked"), "{why}");
    for n in [0, b] {
        wait_for("the revoked token refused", PROMISED, || {
            (bearer(&stack, n, "GET", "/api/sessions", &carol).status == 401).then_some(())
        });
    }
    assert_eq!(
        stack
            .control
            .call("GET", "/v1/sessions", Some(&carol), None)
            .status,
        401,
        "control refuses it too"
    );
    // And so does the check a proxy in front of ttyd asks (nginx's auth_request).
    let authz = |token: &str| {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        agent
            .get(&format!("{}/v1/authz", stack.control.api))
            .header("X-Original-URI", &format!("/s/{id}/"))
            .header("Authorization", &format!("Bearer {token}"))
            .call()
            .expect("control answers")
            .status()
            .as_u16()
    };
    assert_eq!(authz(&carol), 401, "the revoked token at /v1/authz");
    let fresh = stack.control.token("carol", false);
    assert_eq!(
        bearer(&stack, b, "GET", "/api/sessions", &fresh).status,
        200
    );
    assert_eq!(
        authz(&fresh),
        200,
        "another token of the same user at /v1/authz"
    );

    // Every token of dave issued before now: the old one goes, one issued later works.
    let dave = stack.control.token("dave", false);
    let cookie = stack.sign_in_with(0, &dave);
    let cut = e2e::stack::http(
        "POST",
        &stack.url(b, "/api/revocations"),
        Some(&admin),
        Some(&json!({"sub": "dave"})),
    )
    .unwrap();
    assert_eq!(cut.status, 201, "{}", cut.text);
    let before = cut.body["before"].as_u64().expect("the cut-off");
    for n in [0, b] {
        until_cookie_status(&stack, n, &cookie, 401);
        wait_for("dave's old token refused", PROMISED, || {
            (bearer(&stack, n, "GET", "/api/sessions", &dave).status == 401).then_some(())
        });
    }
    let later = wait_for("a token issued after the cut-off", T, || {
        let t = stack.control.token("dave", false);
        (claims_of(&t)["iat"].as_u64() >= Some(before)).then_some(t)
    });
    assert_eq!(
        bearer(&stack, 0, "GET", "/api/sessions", &later).status,
        200
    );
    let list = bearer(&stack, 0, "GET", "/api/revocations", &admin);
    assert_eq!(list.body["revocations"].as_array().map(Vec::len), Some(2));
}

#[test]
fn a_sign_out_that_cannot_reach_control_fails_visibly_and_the_sign_in_keeps_working() {
    let mut stack = GatewayStack::start("");
    let id = create(&stack, "erin");
    let cookie = stack.sign_in("erin");
    let t = stack.open_as(0, &id, &cookie).expect("the terminal opens");
    t.send_input(b"echo up-$((40+2))\r").unwrap();
    t.read_until("up-42", T).unwrap();
    stack.control.kill9();

    let out = browser(&stack, 0, "DELETE", "/auth/session", &cookie);
    assert_eq!(out.status, 503, "{}", out.text);
    assert_eq!(out.body["error"]["code"], "sign_out_failed");
    assert!(
        out.set_cookies.is_empty(),
        "the cookie is kept: nothing was signed out: {:?}",
        out.set_cookies
    );
    t.send_input(b"echo kept-$((40+2))\r").unwrap();
    t.read_until("kept-42", T).unwrap();
    let again = stack
        .open_as(0, &id, &cookie)
        .expect("a known sign-in still opens");
    again.send_input(b"echo again-$((40+2))\r").unwrap();
    again.read_until("again-42", T).unwrap();
    // A new sign-in cannot be made without control either: one nobody could sign out.
    let token = stack.control.token("erin", false);
    let refused = e2e::stack::http(
        "POST",
        &stack.url(0, "/auth/session"),
        None,
        Some(&json!({"token": token})),
    )
    .unwrap();
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(refused.body["error"]["code"], "sign_in_unavailable");
    assert!(refused.set_cookies.is_empty());

    stack.control.spawn(&[]);
    let out = wait_for("the sign-out once control is back", T, || {
        let a = browser(&stack, 0, "DELETE", "/auth/session", &cookie);
        (a.status == 200).then_some(a)
    });
    assert!(out.set_cookies.iter().any(|c| c.contains("Max-Age=0")));
    t.wait_closed(PROMISED).expect("closed once signed out");
    again.wait_closed(PROMISED).expect("closed once signed out");
    until_cookie_status(&stack, 0, &cookie, 401);
}

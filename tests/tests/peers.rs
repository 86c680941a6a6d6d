//! Peers, end to end: real control, gateway, Docker and ttyd. The owner of a session
//! invites another user to co-drive it; the peer's typing reaches the owner's shell, and
//! revoking, leaving or the invitation's end closes the peer's terminal — only theirs.

use std::time::{Duration, Instant};

use e2e::stack::{wait_for, GatewayStack};
use e2e::term::{ConnectError, Terminal};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(15);
/// The most a peer's terminal may stay open after its access ended.
const CLOSE_BOUND: Duration = Duration::from_secs(2);
/// The close frame's reason (`CloseReason::PeerRemoved`).
const REMOVED: &str = "\"termgate: your access to this session was removed\"";

/// A stack whose default profile has `peers = enabled`; invitations may be as short
/// as one second.
fn start(enabled: bool) -> GatewayStack {
    start_recording(enabled, false)
}

/// [`start`], with the default profile's `record` and `record_input` set to `record`.
fn start_recording(enabled: bool, record: bool) -> GatewayStack {
    let mut control = e2e::stack::ControlStack::prepare("");
    control.set_env("TERMGATE__PROFILES__DEFAULT__RECORD", &record.to_string());
    control.set_env(
        "TERMGATE__PROFILES__DEFAULT__RECORD_INPUT",
        &record.to_string(),
    );
    control.set_env(
        "TERMGATE__PROFILES__DEFAULT__PEERS",
        if enabled { "true" } else { "false" },
    );
    control.set_env("TERMGATE_TEST_PEER_MIN_TTL", "1");
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    GatewayStack::assemble(control, ttyd, counter)
}

fn call(
    stack: &GatewayStack,
    sub: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> e2e::stack::Answer {
    let token = stack.control.token(sub, false);
    stack.control.call(method, path, Some(&token), body)
}

fn invite(
    stack: &GatewayStack,
    by: &str,
    session: &str,
    sub: &str,
    ttl: u64,
) -> e2e::stack::Answer {
    call(
        stack,
        by,
        "POST",
        &format!("/v1/sessions/{session}/peers"),
        Some(json!({ "sub": sub, "ttl_seconds": ttl })),
    )
}

/// Opens `session` as `sub` once the gateway knows the invitation (it arrives with the
/// route feed's next answer; until then the session is unknown to the peer).
fn open_as_peer(stack: &GatewayStack, session: &str, sub: &str) -> Terminal {
    let cookie = stack.sign_in(sub);
    wait_for("the peer's terminal opens", T, || {
        match stack.open_as(0, session, &cookie) {
            Ok(t) => Some(t),
            Err(ConnectError::Refused { status: 404, .. }) => None,
            Err(e) => panic!("the peer's terminal: {e}"),
        }
    })
}

/// `by` types until `into` shows it.
fn typed_reaches(by: &Terminal, into: &Terminal, word: &str) {
    let start = Instant::now();
    loop {
        by.send_input(format!("echo {word}-$((6*7))\r").as_bytes())
            .unwrap();
        if into
            .read_until(&format!("{word}-42"), Duration::from_secs(1))
            .is_ok()
        {
            return;
        }
        assert!(
            start.elapsed() < T,
            "{word} never reached the other terminal: {:?}",
            into.output_so_far()
        );
    }
}

fn closed_within(t: &Terminal, since: Instant, bound: Duration, what: &str) {
    t.wait_closed(T)
        .unwrap_or_else(|e| panic!("{what}: the peer's terminal was not closed: {e}"));
    let took = t
        .closed_at()
        .expect("closed")
        .saturating_duration_since(since);
    eprintln!("{what} → peer closed: {took:?}");
    assert!(
        took <= bound,
        "{what}: the peer's terminal closed after {took:?}"
    );
    let reason = t.close_reason().unwrap_or_default();
    assert!(reason.contains(REMOVED), "{what}: {reason}");
}

fn owner_still_types(owner: &Terminal, word: &str) {
    owner
        .send_input(format!("echo {word}-$((2*21))\r").as_bytes())
        .unwrap();
    owner
        .read_until(&format!("{word}-42"), T)
        .unwrap_or_else(|e| panic!("the owner's terminal after {word}: {e}"));
}

/// A session of alice's with her own terminal open on it and answering.
fn alices_open_session(stack: &GatewayStack) -> (String, Terminal) {
    let alice = stack.control.token("alice", false);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let owner = open_as_owner(stack, &id);
    (id, owner)
}

/// alice's terminal on her session `id`, shown to echo.
fn open_as_owner(stack: &GatewayStack, id: &str) -> Terminal {
    let owner = stack.open_as(0, id, &stack.sign_in("alice")).unwrap();
    owner.send_input(b"echo owner-up\r").unwrap();
    owner.read_until("owner-up", T).unwrap();
    owner
}

#[test]
fn a_peer_types_into_the_owners_shell_and_revoke_closes_only_the_peer() {
    let stack = start(true);
    let (id, owner) = alices_open_session(&stack);

    // Not oneself, not a malformed name, not past a day.
    for (sub, ttl) in [("alice", 600), ("no such user!", 600), ("bob", 86_401)] {
        let a = invite(&stack, "alice", &id, sub, ttl);
        assert_eq!(
            (a.status, a.body["error"]["code"].as_str()),
            (400, Some("invalid_peer")),
            "{sub} {ttl}: {}",
            a.text
        );
    }
    // Only the owner (or an admin) invites: to carol the session is unknown.
    let a = invite(&stack, "carol", &id, "bob", 600);
    assert_eq!(
        (a.status, a.body["error"]["code"].as_str()),
        (404, Some("session_not_found")),
        "{}",
        a.text
    );

    let a = invite(&stack, "alice", &id, "bob", 600);
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(a.body["sub"], "bob");
    let a = call(
        &stack,
        "alice",
        "GET",
        &format!("/v1/sessions/{id}/peers"),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["peers"].as_array().unwrap().len(), 1, "{}", a.text);

    // Bob's list shows alice's session, marked as a peer's.
    let a = call(&stack, "bob", "GET", "/v1/sessions", None);
    assert_eq!(a.status, 200, "{}", a.text);
    let listed: Vec<&Value> = a.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["id"] == id.as_str())
        .collect();
    assert_eq!(listed.len(), 1, "{}", a.text);
    assert_eq!(listed[0]["role"], "peer");
    assert_eq!(listed[0]["owner"], "alice");
    assert!(
        listed[0].get("peers").is_none(),
        "who else co-drives is the owner's to know: {}",
        a.text
    );
    // Alice's own list does not mark it, and names her peer.
    let a = call(&stack, "alice", "GET", "/v1/sessions", None);
    let mine = a.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(mine["peers"][0]["sub"], "bob", "{}", a.text);
    assert!(
        a.body["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s.get("role").is_none()),
        "{}",
        a.text
    );

    // Bob types; alice sees it in her own terminal: the same shell.
    let peer = open_as_peer(&stack, &id, "bob");
    typed_reaches(&peer, &owner, "peer-typed");

    // A peer may not end, share, invite, or list the peers: the API's rule is that
    // only the owner or an admin acts on a session; anyone else finds it unknown.
    for (method, path, body) in [
        ("DELETE", format!("/v1/sessions/{id}"), None),
        (
            "POST",
            format!("/v1/sessions/{id}/shares"),
            Some(json!({"ttl_seconds": 60})),
        ),
        (
            "POST",
            format!("/v1/sessions/{id}/peers"),
            Some(json!({"sub": "carol", "ttl_seconds": 600})),
        ),
        ("GET", format!("/v1/sessions/{id}/peers"), None),
    ] {
        let a = call(&stack, "bob", method, &path, body);
        assert_eq!(a.status, 404, "bob {method} {path}: {}", a.text);
    }

    // A third user cannot open it: the 404 of an unknown session, and ttyd never sees
    // a connection.
    let before = stack.counter.connections();
    match stack.open_as(0, &id, &stack.sign_in("carol")) {
        Err(ConnectError::Refused { status, .. }) => assert_eq!(status, 404),
        Err(e) => panic!("carol: {e}"),
        Ok(_) => panic!("carol opened alice's session"),
    }
    assert_eq!(stack.counter.connections(), before, "carol reached ttyd");

    // Revoked: bob's terminal closes within the bound; alice's stays and works.
    let since = Instant::now();
    let a = call(
        &stack,
        "alice",
        "DELETE",
        &format!("/v1/sessions/{id}/peers/bob"),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    closed_within(&peer, since, CLOSE_BOUND, "revoke");
    owner_still_types(&owner, "after-revoke");
    let a = call(&stack, "bob", "GET", "/v1/sessions", None);
    assert!(
        a.body["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["id"] != id.as_str()),
        "{}",
        a.text
    );
    let cookie = stack.sign_in("bob");
    match stack.open_as(0, &id, &cookie) {
        Err(ConnectError::Refused { status, .. }) => assert_eq!(status, 404),
        Err(e) => panic!("bob after revoke: {e}"),
        Ok(_) => panic!("bob opened the session after the revoke"),
    }

    // Invited again, bob leaves by himself: his terminal closes, alice's stays.
    assert_eq!(invite(&stack, "alice", &id, "bob", 600).status, 201);
    let peer = open_as_peer(&stack, &id, "bob");
    let since = Instant::now();
    let a = call(
        &stack,
        "bob",
        "DELETE",
        &format!("/v1/sessions/{id}/peers/bob"),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    closed_within(&peer, since, CLOSE_BOUND, "leave");
    owner_still_types(&owner, "after-leave");
}

#[test]
fn a_peers_row_names_no_viewer_while_one_watches() {
    // A profile of its own: peers on, links for signed-in viewers (the default).
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    let stack = GatewayStack::start_with_viewers(&format!(
        "\n[profiles.shared]\nimage = \"{image}\"\npeers = true\n"
    ));
    let alice = stack.control.token("alice", false);
    let id = stack.control.create_with(&alice, "shared")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let _owner = open_as_owner(&stack, &id);
    // carol watches through a share link, signed in.
    let a = call(
        &stack,
        "alice",
        "POST",
        &format!("/v1/sessions/{id}/shares"),
        Some(json!({ "ttl_seconds": 600 })),
    );
    assert_eq!(a.status, 201, "{}", a.text);
    let url = a.body["url"].as_str().unwrap().to_owned();
    let origin = stack.origin(0);
    let carol = stack.sign_in("carol");
    // A new link reaches the gateway with the route feed's next answer (until then it
    // is unknown there, 404): waited for, not assumed.
    let _watching = wait_for("the link to reach the gateway", T, || {
        stack
            .open(
                0,
                &format!("{url}/ws"),
                &[("Origin", origin.as_str()), ("Cookie", carol.as_str())],
            )
            .ok()
    });
    assert_eq!(invite(&stack, "alice", &id, "bob", 600).status, 201);
    // The owner's row names carol (once the gateway has reported her): the list does
    // show viewers, so their absence below is the peer's row's doing.
    let row = |sub: &str| {
        let a = call(&stack, sub, "GET", "/v1/sessions", None);
        a.body["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id.as_str())
            .cloned()
            .unwrap_or_default()
    };
    wait_for("the owner's row to name the viewer", T, || {
        row("alice").to_string().contains("carol").then_some(())
    });
    let bobs = row("bob");
    assert_eq!(bobs["role"], "peer", "{bobs}");
    assert!(
        !bobs.to_string().contains("carol"),
        "a peer's row names no viewer: {bobs}"
    );
}

#[test]
fn an_invitation_that_ends_closes_the_peer_and_a_profile_can_forbid_peers() {
    let stack = start(true);
    let (id, owner) = alices_open_session(&stack);

    let a = invite(&stack, "alice", &id, "bob", 6);
    assert_eq!(a.status, 201, "{}", a.text);
    let expires_at = a.body["expires_at"].as_u64().unwrap();
    let peer = open_as_peer(&stack, &id, "bob");
    typed_reaches(&peer, &owner, "before-expiry");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // It expires at the whole second `expires_at`: not before, and from then within
    // the bound.
    let expiry = Instant::now() + Duration::from_secs_f64((expires_at as f64 - now).max(0.0));
    peer.wait_closed(T)
        .expect("the peer's terminal closes on expiry");
    let closed = peer.closed_at().unwrap();
    assert!(
        closed + Duration::from_millis(100) >= expiry,
        "closed {:?} before its expiry",
        expiry.saturating_duration_since(closed)
    );
    let took = closed.saturating_duration_since(expiry);
    assert!(took <= CLOSE_BOUND, "closed {took:?} after expiry");
    let reason = peer.close_reason().unwrap_or_default();
    assert!(reason.contains(REMOVED), "expiry: {reason}");
    owner_still_types(&owner, "after-expiry");
    drop(stack);

    let stack = start(false);
    let alice = stack.control.token("alice", false);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = invite(&stack, "alice", &id, "bob", 600);
    assert_eq!(
        (a.status, a.body["error"]["code"].as_str()),
        (403, Some("peers_off")),
        "{}",
        a.text
    );
}

#[test]
fn a_peers_terminal_is_recorded_apart_and_its_header_names_the_peer() {
    let stack = start_recording(true, true);
    let alice = stack.control.token("alice", false);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(invite(&stack, "alice", &id, "bob", 600).status, 201);
    // The owner types in a terminal of her own, the peer in his.
    let owner = stack.open_as(0, &id, &stack.sign_in("alice")).unwrap();
    owner.send_input(b"echo alice-typed-$((6*7))\r").unwrap();
    owner.read_until("alice-typed-42", T).unwrap();
    let peer = open_as_peer(&stack, &id, "bob");
    peer.send_input(b"echo bob-typed-$((6*7))\r").unwrap();
    peer.read_until("bob-typed-42", T).unwrap();
    peer.close();
    owner.close();
    let dir = stack.control.dir.dir.path().join("recordings").join(&id);
    let casts = wait_for("both recordings reach control", T, || {
        let casts: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "cast"))
            .collect();
        (casts.len() >= 2).then_some(casts)
    });
    assert_eq!(casts.len(), 2, "one recording a terminal: {casts:?}");
    let mut by_user = std::collections::BTreeMap::new();
    for cast in casts {
        let text = std::fs::read_to_string(cast).unwrap();
        let mut lines = text.lines();
        let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        let typed: String = lines
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e[1] == "i")
            .map(|e| e[2].as_str().unwrap().to_owned())
            .collect();
        by_user.insert(
            header["termgate"]["user"].as_str().unwrap_or("").to_owned(),
            typed,
        );
    }
    let keys: Vec<&str> = by_user.keys().map(String::as_str).collect();
    assert_eq!(keys, ["alice", "peer:bob"], "each header names its typist");
    assert!(
        by_user["peer:bob"].contains("echo bob-typed-$((6*7))"),
        "{by_user:?}"
    );
    assert!(!by_user["peer:bob"].contains("alice-typed"), "{by_user:?}");
    assert!(
        by_user["alice"].contains("echo alice-typed-$((6*7))"),
        "{by_user:?}"
    );
    assert!(!by_user["alice"].contains("bob-typed"), "{by_user:?}");
}

/// A locked owner's peer is closed as every other end of an invitation is, with the
/// reason control's `/v1/grant` gives it; the owner's own terminal says the lock.
#[test]
fn a_locked_owners_peer_is_closed_as_removed_and_the_owner_as_locked() {
    let stack = start(true);
    let (id, owner) = alices_open_session(&stack);
    let a = invite(&stack, "alice", &id, "bob", 600);
    assert_eq!(a.status, 201, "{}", a.text);
    let peer = open_as_peer(&stack, &id, "bob");
    typed_reaches(&peer, &owner, "before-the-lock");
    let admin = stack.control.token("root", true);
    let since = Instant::now();
    let a = stack
        .control
        .call("POST", "/v1/users/alice/lock", Some(&admin), None);
    assert!(a.status < 300, "lock: {}", a.text);
    closed_within(&peer, since, CLOSE_BOUND, "the owner locked");
    owner
        .wait_closed(T)
        .expect("the locked owner's terminal closes");
    let reason = owner.close_reason().unwrap_or_default();
    assert!(reason.contains("your account was locked"), "{reason}");
}

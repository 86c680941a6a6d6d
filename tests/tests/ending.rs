//! Ending a session is a decision published before Docker acts: `DELETE` answers once
//! the end is recorded, the gateways close its terminals at once saying why, and the
//! container goes in the background (a hang-up, the profile's grace, removal by force).
//! Real control, gateway, ttyd and session containers.

use std::time::{Duration, Instant};

use e2e::stack::{docker, http, profile_ignoring_hang_up, wait_for, GatewayStack};
use serde_json::Value;

const T: Duration = Duration::from_secs(15);

/// What an end promises: its answer, and its terminals' close frame, within this of the
/// call, whatever the session's programs do.
const PROMISED: Duration = Duration::from_secs(1);

/// The streaming test's `yes` takes a core to itself: it runs alone, never beside the
/// tests that hold an end to its one-second promise (each takes this shared).
static STREAMING: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    STREAMING
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What ttyd's page is told when the gateway closes a terminal of an ended session.
const ENDED_FRAME: &str = "close frame 1000 \"termgate: this session was ended\"";

fn container_of(stack: &GatewayStack, id: &str) -> String {
    docker(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("label=termgate.instance={}", stack.control.instance),
        "--filter",
        &format!("label=termgate.session={id}"),
    ])
}

fn session(stack: &GatewayStack, token: &str, id: &str) -> Value {
    stack.control.session(token, id)
}

/// How one end went, measured from the moment the `DELETE` was sent.
struct Ended {
    answered: Duration,
    closed: Duration,
    gone: Duration,
}

/// Opens a terminal on `id` as `owner`, ends the session through the gateway's API as
/// `ender`, and checks the promise: `204` and the close frame saying why, each within
/// [`PROMISED`]; then waits (up to `gone_within`) for the container to go.
fn end_with_a_terminal_open(
    stack: &GatewayStack,
    owner: &str,
    id: &str,
    ender: &str,
    gone_within: Duration,
) -> Ended {
    let cookie = stack.sign_in(owner);
    let t = stack.open_as(0, id, &cookie).expect("the owner's terminal");
    t.send_input(b"echo up-$((40+2))\r").unwrap();
    t.read_until("up-42", T).expect("a working terminal");
    assert!(!container_of(stack, id).is_empty());

    let url = stack.url(0, &format!("/api/sessions/{id}"));
    let token = ender.to_owned();
    let start = Instant::now();
    let delete = std::thread::spawn(move || {
        let a = http("DELETE", &url, Some(&token), None).expect("DELETE");
        (a.status, start.elapsed(), a.text)
    });
    let closed = t
        .wait_closed(PROMISED)
        .map(|_| start.elapsed())
        .unwrap_or_else(|e| panic!("the terminal must close within {PROMISED:?}: {e}"));
    let (status, answered, text) = delete.join().unwrap();
    assert_eq!(status, 204, "{text}");
    assert!(
        answered <= PROMISED,
        "DELETE answered after {answered:?}; an end must answer within {PROMISED:?}"
    );
    assert_eq!(
        t.close_reason().as_deref(),
        Some(ENDED_FRAME),
        "the terminal is told why it closed"
    );
    wait_for("the ended session's container to go", gone_within, || {
        container_of(stack, id).is_empty().then_some(())
    });
    Ended {
        answered,
        closed,
        gone: start.elapsed(),
    }
}

fn assert_terminated(stack: &GatewayStack, owner_token: &str, id: &str, by: &str, why: &str) {
    let s = session(stack, owner_token, id);
    assert_eq!(
        (
            s["state"].as_str(),
            s["ended_by"].as_str(),
            s["end_reason"].as_str()
        ),
        (Some("terminated"), Some(by), Some(why)),
        "{s}"
    );
}

#[test]
fn an_owners_end_answers_within_a_second_closes_the_terminal_saying_why_and_the_container_goes() {
    let _shared = beside_others();
    let stack = GatewayStack::start("");
    let alice = stack.control.token("alice", false);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The shell exits on the hang-up: its container goes well inside the default grace.
    let e = end_with_a_terminal_open(&stack, "alice", &id, &alice, Duration::from_secs(5));
    wait_for("the record to end", T, || {
        (session(&stack, &alice, &id)["state"] == "terminated").then_some(())
    });
    assert_terminated(&stack, &alice, &id, "alice", "ended by its owner");
    // The quota was given back: alice may create again, up to her limit.
    for _ in 0..3 {
        stack.control.create(&alice);
    }
    eprintln!(
        "figures: owner's end: DELETE answered {:?}, terminal closed {:?}, container gone {:?} after the call",
        e.answered, e.closed, e.gone
    );
}

#[test]
fn an_admins_end_answers_within_a_second_closes_the_terminal_saying_why_and_the_container_goes() {
    let _shared = beside_others();
    let stack = GatewayStack::start("");
    let alice = stack.control.token("alice", false);
    let root = stack.control.token("root", true);
    let id = stack.control.create(&alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let e = end_with_a_terminal_open(&stack, "alice", &id, &root, Duration::from_secs(5));
    wait_for("the record to end", T, || {
        (session(&stack, &alice, &id)["state"] == "terminated").then_some(())
    });
    assert_terminated(&stack, &alice, &id, "root", "ended by an admin");
    eprintln!(
        "figures: admin's end: DELETE answered {:?}, terminal closed {:?}, container gone {:?} after the call",
        e.answered, e.closed, e.gone
    );
}

#[test]
fn a_program_that_ignores_the_hang_up_keeps_its_grace_then_is_removed_by_force() {
    let _shared = beside_others();
    const GRACE: u64 = 3;
    let stack = GatewayStack::start(&profile_ignoring_hang_up("stubborn", GRACE));
    let alice = stack.control.token("alice", false);
    let id = stack.control.create_with(&alice, "stubborn")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let checked = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        // While the grace runs: the end is already decided and visible, with who and
        // why, and the container is still there.
        s.spawn(|| {
            let during = wait_for("the end to be recorded", T, || {
                let v = session(&stack, &alice, &id);
                (v["state"] == "stopping").then_some(v)
            });
            let alive = !container_of(&stack, &id).is_empty();
            *checked.lock().unwrap() = Some((during, alive));
        });
        let e = end_with_a_terminal_open(
            &stack,
            "alice",
            &id,
            &alice,
            Duration::from_secs(GRACE + 10),
        );
        assert!(
            e.gone >= Duration::from_secs(GRACE) - Duration::from_millis(300),
            "the container went after {:?}, before its {GRACE} s grace",
            e.gone
        );
        eprintln!(
            "figures: end of a program ignoring the hang-up (grace {GRACE} s): DELETE answered {:?}, terminal closed {:?}, container removed by force {:?} after the call",
            e.answered, e.closed, e.gone
        );
    });
    let (during, alive) = checked
        .into_inner()
        .unwrap()
        .expect("checked during the grace");
    assert_eq!(
        (during["ended_by"].as_str(), during["end_reason"].as_str()),
        (Some("alice"), Some("ended by its owner")),
        "a stopping record already says who ended it and why: {during}"
    );
    assert!(alive, "the container lives on through its grace");
    wait_for("the record to end", T, || {
        (session(&stack, &alice, &id)["state"] == "terminated").then_some(())
    });
    assert_terminated(&stack, &alice, &id, "alice", "ended by its owner");
}

/// The frames a server sent (unmasked), read strictly: each as `(opcode, payload)`, and
/// how many bytes at the end do not make a whole frame.
fn server_frames(mut bytes: &[u8]) -> (Vec<(u8, Vec<u8>)>, usize) {
    let mut frames = Vec::new();
    loop {
        let [b0, b1, rest @ ..] = bytes else {
            return (frames, bytes.len());
        };
        assert_eq!(b1 & 0x80, 0, "a server frame is never masked");
        let (extra, len) = match b1 & 0x7f {
            126 if rest.len() >= 2 => (2, u64::from(u16::from_be_bytes([rest[0], rest[1]]))),
            127 if rest.len() >= 8 => (8, u64::from_be_bytes(rest[..8].try_into().unwrap())),
            126 | 127 => return (frames, bytes.len()),
            n => (0, u64::from(n)),
        };
        let start = 2 + extra;
        let Some(end) = usize::try_from(len).ok().and_then(|l| l.checked_add(start)) else {
            return (frames, bytes.len());
        };
        if bytes.len() < end {
            return (frames, bytes.len());
        }
        frames.push((b0 & 0x0f, bytes[start..end].to_vec()));
        bytes = &bytes[end..];
    }
}

#[test]
fn an_end_while_output_streams_closes_between_two_frames_and_nothing_follows_the_close_frame() {
    let _alone = STREAMING
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let stack = GatewayStack::start("");
    let alice = stack.control.token("alice", false);
    // The close races the ttyd's output: several ends, so that a close frame written
    // from outside the tunnel, or ttyd bytes after it, are all but sure to be seen.
    for round in 0..6 {
        end_while_streaming(&stack, &alice, round);
    }
}

/// Ends a session of `alice`'s while its terminal streams output, reading every byte the
/// gateway sends, and checks that they are whole frames ending with one close frame.
fn end_while_streaming(stack: &GatewayStack, alice: &str, round: usize) {
    use std::io::{Read, Write};
    let id = stack.control.create(alice)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let port = stack.gateways[0].port;
    let cookie = stack.sign_in("alice");
    let origin = stack.origin(0);
    // A bare socket, or TLS in a TLS run: the bytes after the head are read as they come.
    let mut ws = stack.target(0).connect(T).unwrap();
    ws.set_read_timeout(Some(T)).unwrap();
    let head = e2e::raw::upgrade_head(
        port,
        &format!("/s/{id}/ws"),
        &[("Cookie", &cookie), ("Origin", &origin)],
    );
    ws.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let body_at = loop {
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = ws.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before the 101: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    };
    assert!(
        got.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&got[..body_at])
    );
    // ttyd's first message, then a program whose output never stops.
    for message in [
        &br#"{"AuthToken":"","columns":80,"rows":24}"#[..],
        b"0yes streaming-output-streaming-output\r",
    ] {
        let mut frame = e2e::raw::frame_header(message.len() as u64);
        frame.extend_from_slice(message);
        ws.write_all(&frame).unwrap();
    }
    // Well into the stream: frames of every size have gone by.
    while got.len() < body_at + 512 * 1024 {
        let n = ws.read(&mut buf).unwrap();
        assert!(n > 0, "the terminal closed before its output streamed");
        got.extend_from_slice(&buf[..n]);
    }
    let url = stack.url(0, &format!("/api/sessions/{id}"));
    let start = Instant::now();
    let delete = {
        let alice = alice.to_owned();
        std::thread::spawn(move || http("DELETE", &url, Some(&alice), None).expect("DELETE"))
    };
    // Everything up to the end of the connection, read as fast as it comes.
    loop {
        match ws.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the terminal after the end: {e}"),
        }
        assert!(start.elapsed() < T, "the terminal never closed");
    }
    let closed = start.elapsed();
    let answer = delete.join().unwrap();
    assert_eq!(answer.status, 204, "{}", answer.text);
    assert!(closed <= PROMISED, "closed {closed:?} after the call");
    let (frames, partial) = server_frames(&got[body_at..]);
    assert_eq!(partial, 0, "the stream ends on a frame boundary");
    let closes: Vec<usize> = (0..frames.len()).filter(|i| frames[*i].0 == 8).collect();
    assert_eq!(
        closes,
        vec![frames.len() - 1],
        "one close frame, the last: nothing of the ttyd's follows it, and it landed inside no frame"
    );
    let (_, payload) = frames.last().unwrap();
    assert_eq!(&payload[..2], &1000u16.to_be_bytes(), "code 1000");
    assert_eq!(
        std::str::from_utf8(&payload[2..]),
        Ok("termgate: this session was ended")
    );
    assert!(
        frames[..frames.len() - 1]
            .iter()
            .all(|(op, p)| *op == 2 && p.first().is_some_and(|c| b"012".contains(c))),
        "every frame before it is one of ttyd's messages (output, title, preferences), whole"
    );
    eprintln!(
        "figures: end while output streams, round {round}: {} frames, {} bytes, closed {closed:?} after the call",
        frames.len(),
        got.len() - body_at
    );
}

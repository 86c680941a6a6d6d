//! Hostile clients, each held to its stated bound (docs/reliability.md, "Hostile
//! clients"), while another user (alice) keeps upgrading terminals through the same
//! gateway, quiet and under attack in rounds: every one of her upgrades must succeed.
//! The attacks are `e2e::hostile`'s; how much slower alice's upgrades are under each
//! is a benchmark of its own (`examples/bench_hostile.rs`), not asserted here.
//!
//! The tests of this file run one at a time (a file-wide lock): an attack running in
//! a neighbouring test would load the other's machine.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use e2e::hostile::{
    Arena, HalfOpen, OversizedFrames, PastTerminalLimit, SignInFlood, SlowHeaders, T,
};
use e2e::raw::{self, frame_header};
use e2e::stack::wait_for;
use e2e::stats::ms;
use e2e::term::{Target, Terminal};

/// Rounds of (quiet, attacked) upgrades of alice's, and upgrades in each half-round.
const ROUNDS: usize = 2;
const PER_HALF: usize = 20;
/// The pause before each 429 of a client past a limit (`REFUSAL_PAUSE` in
/// `gateway/src/proxy/credential.rs`): a promised minimum.
const REFUSAL_PAUSE: Duration = Duration::from_millis(100);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Slowloris: 300 connections, each sending one header byte a second. Bound:
/// `gateway.header_timeout_ms` (here 2 s): a head not whole by then closes the
/// connection, so an attacker holds at most (rate of new connections × timeout).
#[test]
fn slow_headers_are_cut_at_the_header_timeout_and_others_still_upgrade() {
    let _serial = serial();
    let arena = Arena::start(&[("TERMGATE__GATEWAY__HEADER_TIMEOUT_MS", "2000")]);
    let conns = 300;
    let attack = SlowHeaders::new(&arena, conns);
    let fds_before = raw::fds(arena.pid());
    arena.rounds(ROUNDS, PER_HALF, Duration::from_secs(5), || attack.start());
    let longest = *attack.longest.lock().unwrap();
    let cut = attack.cut.load(Ordering::SeqCst);
    println!(
        "slow connections cut by the gateway: {cut}, longest lived {}",
        ms(longest)
    );
    assert!(cut >= conns, "slow heads must be cut by the gateway: {cut}");
    // Timeout + one probe tick + scheduling slack.
    assert!(
        longest <= Duration::from_millis(2000 + 1000 + 1500),
        "a slow head lived {longest:?}, past the 2 s header timeout"
    );
    wait_for("the gateway's descriptors to return", T, || {
        (raw::fds(arena.pid()) <= fds_before + 8).then_some(())
    });
    arena.assert_alive();
}

/// Upgrade heads that never read their answer (unauthenticated: answered 401 and
/// closed; nothing reaches ttyd) and upgrades of an authenticated user that never send
/// their first message (each holds one of the user's slots: bound
/// `gateway.max_terminals_per_user`, here 4; the rest are 429).
#[test]
fn half_open_upgrades_hold_no_more_than_the_users_slots() {
    let _serial = serial();
    let arena = Arena::start(&[
        ("TERMGATE__GATEWAY__HEADER_TIMEOUT_MS", "2000"),
        ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "4"),
    ]);
    let attack = HalfOpen::new(&arena);
    let upstream_before = arena.stack.counter.connections();
    let samples = arena.rounds(ROUNDS, PER_HALF, Duration::from_secs(3), || attack.start());
    // Mallory's attempts: ~thousands; the ones that reached ttyd are bounded by her
    // slots at any time. Alice's own upgrades each made one connection.
    let attempts = attack.attempts.load(Ordering::SeqCst);
    let reached = arena.stack.counter.connections() - upstream_before;
    let mallory_reached = reached.saturating_sub(samples.upgrades());
    println!(
        "mallory's half-open upgrades: {attempts} attempted, {mallory_reached} reached ttyd (slots: 4 at a time)"
    );
    assert!(
        mallory_reached < attempts / 4,
        "most half-open upgrades past the user's slots must be refused before ttyd"
    );
    // At ttyd, one session's terminals (one request line) were never more than the
    // user's limit at once, and mallory's did fill her slots: the bound was reached.
    let peaks = arena.stack.counter.peak_open_by_request_line();
    let peak = peaks.values().copied().max().unwrap_or(0);
    println!("most terminals of one session open at ttyd at once: {peak} ({peaks:?})");
    assert_eq!(
        peak, 4,
        "one session's terminals open at ttyd at once, with a per-user limit of 4: {peaks:?}"
    );
    // Each refused upgrade was answered (401, or 429 past the minute's allowance of
    // failed authentications) and then closed by the gateway, not left to the client.
    let refused = std::mem::take(&mut *attack.refused.lock().expect("kept sockets"));
    assert_eq!(
        refused.len(),
        HalfOpen::KEPT,
        "too few refused upgrades were kept"
    );
    let mut unauthenticated = 0;
    for mut s in refused {
        s.set_read_timeout(Some(T)).expect("read timeout");
        let mut answer = Vec::new();
        let read = s.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        assert!(
            read.is_ok(),
            "a refused upgrade was not closed by the gateway within {T:?}: {read:?} after {text:?}"
        );
        assert!(
            text.starts_with("HTTP/1.1 401") || text.starts_with("HTTP/1.1 429"),
            "a refused upgrade's answer: {text:?}"
        );
        unauthenticated += usize::from(text.starts_with("HTTP/1.1 401"));
    }
    println!(
        "refused upgrades read back: {} closed by the gateway, {unauthenticated} of them 401",
        HalfOpen::KEPT
    );
    assert!(unauthenticated > 0, "no refused upgrade was answered 401");
    // At rest, mallory's slots free up: a fresh proper upgrade of hers succeeds.
    wait_for("mallory's slots to be freed", T, || {
        Terminal::connect(
            Target::Tcp(arena.addr()),
            &format!("/s/{}/ws", arena.mallory_session),
            &[("Authorization", &arena.mallory_bearer)],
        )
        .ok()
    });
    arena.assert_alive();
}

/// A flood of failed sign-ins from alice's own address. Bound:
/// `gateway.auth_failures_per_minute` failures a minute are answered 401; past it each
/// failure waits 100 ms and is 429; a valid token is never refused by it.
#[test]
fn failed_sign_ins_past_the_minutes_allowance_wait_and_get_429_and_others_still_upgrade() {
    let _serial = serial();
    let arena = Arena::start(&[]);
    let allowance = arena
        .stack
        .control
        .dir
        .load()
        .gateway
        .auth_failures_per_minute as usize;
    let attack = SignInFlood::new(&arena);
    arena.rounds(ROUNDS, PER_HALF, Duration::from_secs(3), || attack.start());
    // The gateway's minutes start after `gateway_started`, each at least a minute long.
    let minutes = arena
        .gateway_started
        .elapsed()
        .as_secs()
        .div_ceil(60)
        .max(1) as usize;
    let (r401, r429) = (
        attack.r401.load(Ordering::SeqCst),
        attack.r429.load(Ordering::SeqCst),
    );
    let fastest_429 = attack.fastest_429.get();
    println!(
        "failed sign-ins over {minutes} minute(s): {r401} × 401, {r429} × 429, the quickest 429 in {fastest_429:?}"
    );
    assert!(r429 > 0, "the limit must engage");
    assert!(
        (allowance..=allowance * minutes).contains(&r401),
        "auth_failures_per_minute ({allowance}) failures each minute are answered 401, no more: {r401} in {minutes} minute(s)"
    );
    let fastest_429 = fastest_429.expect("a 429 was timed");
    assert!(
        fastest_429 >= REFUSAL_PAUSE,
        "a 429 came back after {fastest_429:?}, without the {REFUSAL_PAUSE:?} pause"
    );
    arena.assert_alive();
}

/// One user opening terminals past the limit, over and over. Bound:
/// `gateway.max_terminals_per_user` (here 4): the rest are 429 `too_many_terminals`,
/// after a 100 ms pause, before ttyd.
#[test]
fn a_user_past_the_terminal_limit_holds_exactly_her_slots_and_the_rest_get_429_before_ttyd() {
    let _serial = serial();
    let arena = Arena::start(&[("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "4")]);
    let attack = PastTerminalLimit::new(&arena);
    let upstream_before = arena.stack.counter.connections();
    let samples = arena.rounds(ROUNDS, PER_HALF, Duration::from_secs(3), || attack.start());
    let (opened, refused, max_held) = (
        attack.opened.load(Ordering::SeqCst),
        attack.refused.load(Ordering::SeqCst),
        attack.max_held.load(Ordering::SeqCst),
    );
    let reached = arena.stack.counter.connections() - upstream_before;
    let peaks = arena.stack.counter.peak_open_by_request_line();
    let peak = peaks.values().copied().max().unwrap_or(0);
    let fastest = attack.fastest_refusal.get();
    println!(
        "mallory: {opened} upgrades opened, {refused} refused 429 (the quickest in {fastest:?}), {max_held} held at once; ttyd saw {reached} connections, alice's {}, at most {peak} of one session at once",
        samples.upgrades()
    );
    assert_eq!(
        max_held, 4,
        "she holds exactly her limit of terminals at once"
    );
    assert_eq!(
        reached,
        samples.upgrades() + opened,
        "only the upgrades that opened reached ttyd: every refusal came before it"
    );
    assert_eq!(
        peak, 4,
        "one session's terminals open at ttyd at once: {peaks:?}"
    );
    let fastest = fastest.expect("a refusal was timed");
    assert!(
        fastest >= REFUSAL_PAUSE,
        "a 429 came back after {fastest:?}, without the {REFUSAL_PAUSE:?} pause"
    );
    arena.assert_alive();
}

/// Oversized websocket frames up a terminal. Bound: `gateway.max_ws_frame_bytes`
/// (here 64 KiB): the frame's header alone closes that terminal, before ttyd
/// receives the payload.
#[test]
fn an_oversized_websocket_frame_closes_that_terminal_before_ttyd_buffers_it() {
    let _serial = serial();
    const MAX: u64 = 64 * 1024;
    let arena = Arena::start(&[("TERMGATE__GATEWAY__MAX_WS_FRAME_BYTES", &MAX.to_string())]);
    let port = arena.port();
    let head = arena.mallory_head();
    let payload = br#"{"AuthToken":"","columns":80,"rows":24}"#;
    let mut hello = frame_header(payload.len() as u64);
    hello.extend_from_slice(payload);
    // What one terminal may carry to ttyd: its first message and less than a frame
    // at the bound.
    let most = MAX + hello.len() as u64;
    let counter = &arena.stack.counter;

    // One oversized frame after the first message: claims `claim` bytes and sends
    // `send` of them; the gateway must close the terminal (reads end, EOF or reset,
    // well before the deadline). Returns what that terminal carried to ttyd.
    let cut_after = |claim: u64, send: usize| -> u64 {
        let first = counter.connections();
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
        s.write_all(&hello).unwrap();
        let _ = s.write_all(&frame_header(claim));
        let chunk = vec![b'x'; 16 * 1024];
        let mut sent = 0;
        while sent < send {
            if s.write_all(&chunk).is_err() {
                break;
            }
            sent += chunk.len();
        }
        let start = Instant::now();
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(9),
            "a frame claiming {claim} bytes did not close the terminal"
        );
        let carried = wait_for("its connection to ttyd to end", T, || {
            counter.carried().get(first).filter(|c| c.ended).copied()
        });
        println!(
            "a frame claiming {claim} bytes, {send} sent: {} bytes reached ttyd after the upgrade",
            carried.after_head
        );
        carried.after_head
    };
    for claim in [64 << 20, MAX + 1] {
        let carried = cut_after(claim, 1 << 20);
        assert!(
            carried < most,
            "{carried} bytes of a terminal whose frame claimed {claim} reached ttyd (at most {most})"
        );
    }
    // The same user's terminals still work (frames within the bound: every typed line;
    // the unit tests of `ws_frames` split frames at every length and offset).
    let t = arena
        .stack
        .open(
            arena.n,
            &format!("/s/{}/ws", arena.mallory_session),
            &[("Authorization", &arena.mallory_bearer)],
        )
        .unwrap();
    t.send_input(b"echo fits-$((40+2))\r").unwrap();
    t.read_until("fits-42", T).expect("typing still works");
    drop(t);

    let attack = OversizedFrames::new(&arena);
    arena.rounds(ROUNDS, PER_HALF, Duration::from_secs(3), || attack.start());
    // No terminal of the whole test, attacked or alice's, carried a frame over the
    // bound to ttyd.
    let all = wait_for("every connection to ttyd to end", T, || {
        let all = counter.carried();
        all.iter().all(|c| c.ended).then_some(all)
    });
    let largest = all.iter().map(|c| c.after_head).max().unwrap_or(0);
    println!(
        "{} oversized frames sent; {} connections to ttyd, the largest carried {largest} bytes",
        attack.sent.load(Ordering::SeqCst),
        all.len()
    );
    assert!(
        largest < most,
        "a terminal carried {largest} bytes to ttyd (at most {most})"
    );
    arena.assert_alive();
}

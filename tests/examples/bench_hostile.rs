//! Another user's terminal upgrades, quiet and under each hostile client of
//! `tests/hostile.rs`, side by side in one run: the source of the latency table in
//! docs/reliability.md ("Hostile clients"). Reproduce with:
//!
//! ```sh
//! cargo build --workspace --bins --locked
//! TERMGATE_TTYD=… cargo run -p e2e --example bench_hostile --locked [-- ATTACK…]
//! ```
//!
//! ATTACK is any of `slow-headers`, `half-open`, `sign-in-flood`, `terminal-limit`,
//! `oversized-frames` (default: all, one after another). Each starts its own stack and
//! times alice's upgrades (connect to the `101` and the first message written, through
//! the gateway to the real ttyd) in three rounds of 100 quiet upgrades, then at least
//! 100 (and at least a few seconds) under attack, and prints one table row: p50 and
//! p99 quiet and attacked, and the ratio of the p99s.

use std::sync::atomic::Ordering;
use std::time::Duration;

use e2e::hostile::{
    Arena, HalfOpen, OversizedFrames, PastTerminalLimit, Samples, SignInFlood, SlowHeaders,
};

const ROUNDS: usize = 3;
const PER_HALF: usize = 100;

fn main() {
    let all = [
        "slow-headers",
        "half-open",
        "sign-in-flood",
        "terminal-limit",
        "oversized-frames",
    ];
    let asked: Vec<String> = std::env::args().skip(1).collect();
    if let Some(unknown) = asked.iter().find(|a| !all.contains(&a.as_str())) {
        eprintln!("unknown attack {unknown:?}; one of {all:?}");
        std::process::exit(2);
    }
    println!("| attack | quiet p50 | attacked p50 | quiet p99 | attacked p99 | p99 ratio | samples (quiet / attacked) |");
    println!("|---|---|---|---|---|---|---|");
    for name in all {
        if !asked.is_empty() && !asked.iter().any(|a| a == name) {
            continue;
        }
        let (mut samples, note) = run(name);
        println!("{}", samples.row(name));
        eprintln!("{name}: {note}");
    }
}

/// One attack's rounds, and what its attackers counted.
fn run(name: &str) -> (Samples, String) {
    let secs = Duration::from_secs;
    match name {
        "slow-headers" => {
            let arena = Arena::start(&[("TERMGATE__GATEWAY__HEADER_TIMEOUT_MS", "2000")]);
            let a = SlowHeaders::new(&arena, 300);
            let s = arena.rounds(ROUNDS, PER_HALF, secs(5), || a.start());
            let note = format!(
                "300 connections, 1 byte/s: {} cut, the longest lived {:?}",
                a.cut.load(Ordering::SeqCst),
                a.longest.lock().map(|l| *l).unwrap_or_default()
            );
            (s, note)
        }
        "half-open" => {
            let arena = Arena::start(&[
                ("TERMGATE__GATEWAY__HEADER_TIMEOUT_MS", "2000"),
                ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "4"),
            ]);
            let a = HalfOpen::new(&arena);
            let s = arena.rounds(ROUNDS, PER_HALF, secs(3), || a.start());
            let note = format!(
                "{} of mallory's half-open upgrades",
                a.attempts.load(Ordering::SeqCst)
            );
            (s, note)
        }
        "sign-in-flood" => {
            let arena = Arena::start(&[]);
            let a = SignInFlood::new(&arena);
            let s = arena.rounds(ROUNDS, PER_HALF, secs(3), || a.start());
            let note = format!(
                "6 connections: {} × 401, {} × 429, the quickest 429 in {:?}",
                a.r401.load(Ordering::SeqCst),
                a.r429.load(Ordering::SeqCst),
                a.fastest_429.get()
            );
            (s, note)
        }
        "terminal-limit" => {
            let arena = Arena::start(&[("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "4")]);
            let a = PastTerminalLimit::new(&arena);
            let s = arena.rounds(ROUNDS, PER_HALF, secs(3), || a.start());
            let note = format!(
                "4 threads: {} opened, {} refused 429 (the quickest in {:?}), {} held at once",
                a.opened.load(Ordering::SeqCst),
                a.refused.load(Ordering::SeqCst),
                a.fastest_refusal.get(),
                a.max_held.load(Ordering::SeqCst)
            );
            (s, note)
        }
        "oversized-frames" => {
            let arena = Arena::start(&[("TERMGATE__GATEWAY__MAX_WS_FRAME_BYTES", "65536")]);
            let a = OversizedFrames::new(&arena);
            let s = arena.rounds(ROUNDS, PER_HALF, secs(3), || a.start());
            let note = format!(
                "1 GiB claimed, 2 connections: {} frames sent",
                a.sent.load(Ordering::SeqCst)
            );
            (s, note)
        }
        _ => unreachable!("checked in main"),
    }
}

//! Other users' latency while one address floods the gateway with bad tokens, side by
//! side in one run. Reproduce with:
//!
//! ```sh
//! cargo build --release --bins && TERMGATE_BIN_DIR=target/release cargo run --release -p e2e --example bench_auth_flood
//! ```
//!
//! Alternates quiet rounds and flood rounds (1,000 bad-token requests from the same
//! address as the measured user, eight connections at once) and measures a signed-in
//! user's `GET /auth/session` (token verified by the gateway, no control call) in each.
//! Prints a Markdown table (the source of the section in docs/benchmarks.md).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e2e::stack::{http, GatewayStack};
use e2e::stats::{ms, pct};

/// One measured request as the signed-in user; its status must be 200.
fn measured(url: &str, token: &str) -> Duration {
    let start = Instant::now();
    let a = http("GET", url, Some(token), None).expect("gateway answers");
    let took = start.elapsed();
    assert_eq!(a.status, 200, "a valid token refused: {}", a.text);
    took
}

fn main() {
    let rounds = 3;
    let per_round = 100;
    let flood_size = 1000;
    let stack = GatewayStack::start("");
    let url = stack.url(0, "/auth/session");
    let alice = stack.control.token("alice", false);
    let (mut quiet, mut flooded) = (Vec::new(), Vec::new());
    let (refused_429, refused_401) = (AtomicUsize::new(0), AtomicUsize::new(0));
    for _ in 0..rounds {
        for _ in 0..per_round {
            quiet.push(measured(&url, &alice));
        }
        let sent = AtomicUsize::new(0);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    while sent.fetch_add(1, Ordering::SeqCst) < flood_size {
                        let a = http("GET", &url, Some("a.b.c"), None).expect("gateway answers");
                        match a.status {
                            429 => refused_429.fetch_add(1, Ordering::Relaxed),
                            401 => refused_401.fetch_add(1, Ordering::Relaxed),
                            other => panic!("a bad token answered {other}"),
                        };
                    }
                    done.store(true, Ordering::SeqCst);
                });
            }
            // Measured only while the flood runs.
            let mut n = 0;
            while !done.load(Ordering::SeqCst) && n < per_round {
                flooded.push(measured(&url, &alice));
                n += 1;
            }
        });
    }
    let (q50, q99) = (pct(&mut quiet, 0.5), pct(&mut quiet, 0.99));
    let (f50, f99) = (pct(&mut flooded, 0.5), pct(&mut flooded, 0.99));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "| signed-in user's `GET /auth/session` | quiet ({}) | during the flood ({}) | ratio |",
        quiet.len(),
        flooded.len()
    );
    println!("|---|---|---|---|");
    println!(
        "| p50 | {} | {} | {:.2}× |",
        ms(q50),
        ms(f50),
        ratio(f50, q50)
    );
    println!(
        "| p99 | {} | {} | {:.2}× |",
        ms(q99),
        ms(f99),
        ratio(f99, q99)
    );
    println!(
        "\nBad-token requests: {} × 401 (the first `auth_failures_per_minute` of each minute), {} × 429; valid requests refused: 0.",
        refused_401.load(Ordering::Relaxed),
        refused_429.load(Ordering::Relaxed)
    );
}

//! Revocation at scale: how long from a sign-out, a lock or an end to the last of its
//! terminals closed, with many terminals open across two gateways. Reproduce with:
//!
//! ```sh
//! cargo build --release --bins && TERMGATE_BIN_DIR=target/release \
//!   cargo run --release -p e2e --example bench_revocation [-- <out dir>]
//! ```
//!
//! `BENCH_USERS` users (default 100), one session each, `BENCH_PER_USER` terminals a
//! user (default 10: 1,000 in all), half on each gateway, every user signed in by the
//! sign-in link on one gateway and its cookie used on both. Then, one at a time: ten
//! sign-outs (`DELETE /auth/session`), ten locks (`POST /api/users/<sub>/lock`), and the
//! remaining sessions ended (`DELETE /api/sessions/<id>`), half one at a time, half
//! eight at once. For each, the time from sending the request to the last of its
//! terminals closed (as the client saw the close frame), and the request's own answer
//! time. Prints a Markdown table
//! (the source of the section in docs/benchmarks.md) and writes `revocation.svg` to
//! the out dir (default `docs/bench`).

#[path = "bench_paths/svg.rs"]
#[allow(dead_code)]
mod svg;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2e::raw;
use e2e::stack::{http, wait_for, GatewayStack};
use e2e::stats::pct;
use e2e::term::Terminal;
use svg::{Bar, Chart};

struct User {
    sub: String,
    session: String,
    cookie: String,
    terminals: Vec<Terminal>,
}

/// Sends `request` and waits until every terminal of `terminals` closed: (time to the
/// last close, the request's own answer time).
fn measure(
    terminals: &[Terminal],
    request: impl FnOnce() -> u16,
    want: u16,
) -> (Duration, Duration) {
    let start = Instant::now();
    let status = request();
    let answered = start.elapsed();
    assert_eq!(status, want, "the revoking request answered {status}");
    let mut last = start;
    for t in terminals {
        t.wait_closed(Duration::from_secs(30))
            .expect("every covered terminal closes");
        last = last.max(t.closed_at().expect("closed"));
    }
    (last - start, answered)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let out_dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/bench").to_owned());
    let users = env_usize("BENCH_USERS", 100);
    let per_user = env_usize("BENCH_PER_USER", 10);
    let limit = raw::raise_nofile();
    assert!(
        limit as usize > users * per_user * 3 + 256,
        "ulimit -n {limit} is too low for {} terminals",
        users * per_user
    );
    let mut stack = GatewayStack::start("");
    stack.control.kill9();
    stack
        .control
        .set_env("TERMGATE__QUOTA__GLOBAL", &(users + 10).to_string());
    stack.control.spawn(&[]);
    let many = (per_user + 4).to_string();
    let env = [
        (
            "TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION",
            many.as_str(),
        ),
        ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", many.as_str()),
    ];
    // Two gateways of the same configuration, started afresh with the limits above.
    let a = stack.spawn_gateway(&env);
    let b = stack.spawn_gateway(&env);
    let gateways = [a, b];

    let setup = Instant::now();
    let list: Mutex<Vec<User>> = Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= users {
                    return;
                }
                let sub = format!("u{i:03}");
                let token = stack.control.token(&sub, false);
                let session = stack.control.create(&token)["id"]
                    .as_str()
                    .expect("an id")
                    .to_owned();
                let cookie = stack.sign_in_with(gateways[i % 2], &token);
                let terminals = (0..per_user)
                    .map(|k| {
                        let n = gateways[k % 2];
                        stack
                            .open_as(n, &session, &cookie)
                            .unwrap_or_else(|e| panic!("terminal {k} of {sub}: {e:?}"))
                    })
                    .collect();
                list.lock().unwrap().push(User {
                    sub,
                    session,
                    cookie,
                    terminals,
                });
            });
        }
    });
    let mut list = list.into_inner().unwrap();
    list.sort_by(|x, y| x.sub.cmp(&y.sub));
    wait_for(
        "every terminal to hear from ttyd",
        Duration::from_secs(120),
        || {
            list.iter()
                .flat_map(|u| &u.terminals)
                .all(|t| t.title().is_some() && !t.is_closed())
                .then_some(())
        },
    );
    let open = list.iter().map(|u| u.terminals.len()).sum::<usize>();
    eprintln!(
        "{open} terminals of {users} users open across two gateways in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    let admin = stack.control.token("root", true);
    let ten = users.min(10);
    let (sign_outs, rest) = list.split_at(ten);
    let (locks, ends) = rest.split_at(ten.min(rest.len()));
    let mut signed_out = (Vec::new(), Vec::new());
    for u in sign_outs {
        let n = gateways[0];
        let (closed, answered) = measure(
            &u.terminals,
            || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .build()
                    .into();
                agent
                    .delete(&stack.url(n, "/auth/session"))
                    .header("Cookie", &u.cookie)
                    .header("Origin", &stack.origin(n))
                    .call()
                    .expect("sign-out")
                    .status()
                    .as_u16()
            },
            200,
        );
        signed_out.0.push(closed);
        signed_out.1.push(answered);
    }
    let mut locked = (Vec::new(), Vec::new());
    for u in locks {
        let url = stack.url(gateways[1], &format!("/api/users/{}/lock", u.sub));
        let (closed, answered) = measure(
            &u.terminals,
            || http("POST", &url, Some(&admin), None).expect("lock").status,
            204,
        );
        locked.0.push(closed);
        locked.1.push(answered);
    }
    // Half the ends one at a time, half eight at once (each end's container stop runs
    // in the background meanwhile, as it does in a busy deployment).
    let (alone, together) = ends.split_at(ends.len() / 2);
    let end_all = |batch: &[User], threads: usize| {
        let ended: Mutex<(Vec<Duration>, Vec<Duration>)> = Mutex::new((Vec::new(), Vec::new()));
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(u) = batch.get(i) else { return };
                    let url = stack.url(gateways[i % 2], &format!("/api/sessions/{}", u.session));
                    let (closed, answered) = measure(
                        &u.terminals,
                        || {
                            http("DELETE", &url, Some(&admin), None)
                                .expect("end")
                                .status
                        },
                        204,
                    );
                    let mut e = ended.lock().unwrap();
                    e.0.push(closed);
                    e.1.push(answered);
                });
            }
        });
        ended.into_inner().unwrap()
    };
    let mut ended_alone = end_all(alone, 1);
    let mut ended_together = end_all(together, 8);

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut rows = Vec::new();
    let mut groups = Vec::new();
    for (name, (closed, answered)) in [
        ("sign-out", &mut signed_out),
        ("lock", &mut locked),
        ("end, one at a time", &mut ended_alone),
        ("end, eight at once", &mut ended_together),
    ] {
        let n = closed.len();
        let (p50, p99) = (pct(closed, 0.5), pct(closed, 0.99));
        let (a50, a99) = (pct(answered, 0.5), pct(answered, 0.99));
        rows.push(format!(
            "| {name} | {n} | {per_user} | {:.1} | {:.1} | {:.1} | {:.1} |",
            ms(p50),
            ms(p99),
            ms(a50),
            ms(a99)
        ));
        groups.push((
            format!("{name} ({n})"),
            vec![
                Some(Bar {
                    value: ms(p50),
                    tick: Some(ms(p99)),
                }),
                Some(Bar {
                    value: ms(a50),
                    tick: Some(ms(a99)),
                }),
            ],
        ));
    }
    println!("\n{open} terminals across two gateways, {users} users\n");
    println!("| request | requests | terminals each | to the last close p50 (ms) | p99 (ms) | answer p50 (ms) | p99 (ms) |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    let chart = Chart {
        title: "Revocation: request → last of its terminals closed",
        unit: "ms",
        series: &[
            "to the last close (p50, tick p99)",
            "the request's answer (p50, tick p99)",
        ],
        groups,
        note: "two gateways, one control; terminals closed with a close frame as the client saw it",
    };
    std::fs::create_dir_all(&out_dir).expect("out dir");
    let path = std::path::Path::new(&out_dir).join("revocation.svg");
    std::fs::write(&path, chart.render()).expect("write the plot");
    eprintln!("wrote {}", path.display());
}

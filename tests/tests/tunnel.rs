//! The gateway's own terminal tunnel: no terminal ends right after its `101`.
//!
//! Pingora 0.9.1 can end an upgraded connection right after the upstream's `101` when
//! a stale end-of-request-body task for the body-less upgrade arrives after it
//! (cloudflare/pingora#946); an await in `request_body_filter` before the upgrade makes
//! it near-certain. Debug builds of the gateway honour `TERMGATE_TEST_BODY_FILTER_DELAY_MS`,
//! such an await, so the race is reproducible through the real binaries. Terminals on
//! every listener, plain or TLS, run in the gateway's own tunnel and never reach that
//! filter: `no_terminal_ends_right_after_its_101_while_others_stream` (and its TLS
//! twin) opens 2,000 of them (`TERMGATE_TUNNEL_UPGRADES` to change) with the delay set
//! and bytes flowing on other terminals, and every one must reach its shell.
//!
//! `pingora_s_upgrade_path_does_end_terminals_after_their_101` runs the same load with
//! `TERMGATE_TEST_PINGORA_TUNNEL=1`, Pingora's own upgrade path (which no listener
//! takes any more), and expects the race to show: the hook does make it reproducible.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e2e::stack::{http, GatewayStack};
use e2e::term::{ConnectError, Terminal};
use e2e::tls::SelfSigned;
use e2e::ttyd::TtydPool;
use e2e::upstream::RecordingUpstream;
use serde_json::json;

/// Upgrades each run makes.
fn upgrades() -> usize {
    std::env::var("TERMGATE_TUNNEL_UPGRADES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// What a run of upgrades found.
struct Run {
    opened: usize,
    /// Terminals that got their `101` and then were closed before their shell spoke.
    ended_after_101: usize,
    elapsed: Duration,
}

/// Opens `count` terminals (eight at a time) on a plain ttyd target through a gateway
/// started with `env` (on a TLS listener when `tls`), while four other terminals keep
/// typing and reading.
fn run(env: &[(&str, &str)], count: usize, tls: bool) -> Run {
    let mut stack = GatewayStack::start("");
    let ttyd = TtydPool::start_plain(true, &[]);
    let id = stack.register_target("tunnel", ttyd.socket_path().unwrap(), &["alice"]);
    let mut env = env.to_vec();
    env.push(("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "100"));
    env.push(("TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION", "100"));
    let certs = SelfSigned::generate(stack.control.dir.dir.path(), "gateway");
    let n = if tls {
        stack.spawn_tls_gateway(&certs, &env)
    } else {
        stack.spawn_gateway(&env)
    };
    let target = if tls {
        stack.tls_target(n, certs.pin())
    } else {
        stack.target(n)
    };
    let bearer = format!("Bearer {}", stack.control.token("alice", false));
    let path = format!("/s/{id}/ws");
    let headers = [("Authorization", bearer.as_str())];
    let connect = || Terminal::connect(target.clone(), &path, &headers);
    // Pingora's path ends nearly every terminal under the delay, so there the loading
    // terminals go through the first gateway (its own tunnel, no hook) instead.
    let pingora_path = env.contains(&("TERMGATE_TEST_PINGORA_TUNNEL", "1"));
    let load_target = if pingora_path {
        stack.target(0)
    } else {
        target.clone()
    };

    let stop = AtomicBool::new(false);
    let next = AtomicUsize::new(0);
    let ended = AtomicUsize::new(0);
    let opened = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        // Bytes flowing on other terminals the whole time.
        let loaders: Vec<_> = (0..4)
            .map(|i| {
                let t = Terminal::connect(load_target.clone(), &path, &headers)
                    .expect("a loading terminal");
                t.wait_title(Duration::from_secs(10)).expect("its shell");
                let stop = &stop;
                s.spawn(move || {
                    let mut round = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        round += 1;
                        let mark = format!("tg-load-{i}-{round}");
                        t.send_input(format!("echo {mark}\r").as_bytes())
                            .expect("the loading terminal takes input");
                        t.read_until(&mark, Duration::from_secs(10))
                            .expect("the loading terminal answers");
                        t.clear_output();
                    }
                    round
                })
            })
            .collect();
        let openers: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= count {
                        return;
                    }
                    let t = match connect() {
                        Ok(t) => t,
                        // The 101 arrived, then the socket closed before the client's
                        // first message could be sent.
                        Err(ConnectError::Handshake(m))
                            if m.starts_with("send initial message: websocket closed") =>
                        {
                            ended.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        Err(e) => panic!("upgrade {i}: {e:?}"),
                    };
                    match t.wait_title(Duration::from_secs(10)) {
                        Ok(_) => {
                            opened.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(_) if t.is_closed() => {
                            ended.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("upgrade {i}: open but silent: {e}"),
                    }
                    t.close();
                })
            })
            .collect();
        for o in openers {
            o.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let rounds: u64 = loaders.into_iter().map(|l| l.join().unwrap()).sum();
        println!("loading terminals typed and read {rounds} lines meanwhile");
    });
    Run {
        opened: opened.into_inner(),
        ended_after_101: ended.into_inner(),
        elapsed: start.elapsed(),
    }
}

fn no_terminal_ends_right_after_its_101(tls: bool) {
    let count = upgrades();
    let r = run(&[("TERMGATE_TEST_BODY_FILTER_DELAY_MS", "20")], count, tls);
    println!(
        "own tunnel{}: {} of {count} terminals reached their shell, {} ended right after the 101, in {:.1} s",
        if tls { " (TLS)" } else { "" },
        r.opened,
        r.ended_after_101,
        r.elapsed.as_secs_f64()
    );
    assert_eq!(
        r.ended_after_101, 0,
        "terminals ended right after their 101"
    );
    assert_eq!(r.opened, count);
}

#[test]
fn no_terminal_ends_right_after_its_101_while_others_stream() {
    no_terminal_ends_right_after_its_101(false);
}

#[test]
fn no_tls_terminal_ends_right_after_its_101_while_others_stream() {
    no_terminal_ends_right_after_its_101(true);
}

/// The other half of the regression test: the same race hook on Pingora's own upgrade
/// path (which no listener takes any more) ends terminals right after their `101`
/// (cloudflare/pingora#946), so the tests above would see it if the own tunnel had it.
#[test]
fn pingora_s_upgrade_path_does_end_terminals_after_their_101() {
    let count = upgrades().min(100);
    let r = run(
        &[
            ("TERMGATE_TEST_BODY_FILTER_DELAY_MS", "20"),
            ("TERMGATE_TEST_PINGORA_TUNNEL", "1"),
        ],
        count,
        false,
    );
    println!(
        "Pingora's path: {} of {count} terminals reached their shell, {} ended right after the 101, in {:.1} s",
        r.opened,
        r.ended_after_101,
        r.elapsed.as_secs_f64()
    );
    assert!(
        r.ended_after_101 > 0,
        "the race did not show on Pingora's path"
    );
}

#[test]
fn a_ttyd_refusing_the_upgrade_is_answered_as_it_came_and_frees_the_slot() {
    let mut stack = GatewayStack::start("");
    let upstream = RecordingUpstream::unix();
    upstream.answer_status(403);
    let admin = stack.control.token("root", true);
    let a = http(
        "POST",
        &stack.url(0, "/api/targets"),
        Some(&admin),
        Some(&json!({
            "name": "refusing",
            "upstream": format!("unix:{}", upstream.socket_path().unwrap().display()),
            "users": ["alice"],
        })),
    )
    .unwrap();
    assert_eq!(a.status, 201, "register: {}", a.text);
    let id = a.body["id"].as_str().unwrap().to_owned();
    // One terminal per user: a refused upgrade that kept its slot would make the next
    // one a 429.
    let n = stack.spawn_gateway(&[("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "1")]);
    let bearer = format!("Bearer {}", stack.control.token("alice", false));
    for _ in 0..3 {
        let Err(refused) = Terminal::connect(
            stack.target(n),
            &format!("/s/{id}/ws"),
            &[("Authorization", &bearer)],
        ) else {
            panic!("the upgrade was not refused");
        };
        let ConnectError::Refused {
            status,
            headers,
            body,
        } = refused
        else {
            panic!("not an HTTP refusal: {refused:?}");
        };
        assert_eq!(status, 403, "{body}");
        assert!(
            body.contains("recording-upstream"),
            "the ttyd's own body: {body}"
        );
        assert!(
            headers.iter().any(|(k, _)| k == "x-request-id"),
            "the gateway's headers: {headers:?}"
        );
    }
    let recorded = upstream.requests();
    assert_eq!(recorded.len(), 3);
    assert!(recorded.iter().all(|r| r.target == "/ws" && r.is_upgrade()));
}

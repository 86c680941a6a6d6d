//! termgate benchmarks, side by side in one run. Reproduce with:
//!
//! ```sh
//! cargo build --release --bins && TERMGATE_BIN_DIR=target/release cargo run --release -p e2e --example bench
//! ```
//!
//! Prints a Markdown report (the source of docs/benchmarks.md).

use std::time::{Duration, Instant};

use e2e::stack::{http, wait_for, GatewayStack};
use e2e::stats::{ms, pct};
use e2e::term::{Target, Terminal};
use serde_json::json;

fn server_timing(header: &str, name: &str) -> Option<Duration> {
    header.split(',').find_map(|part| {
        let part = part.trim();
        let rest = part.strip_prefix(name)?.strip_prefix(";dur=")?;
        rest.parse::<f64>()
            .ok()
            .map(|v| Duration::from_secs_f64(v / 1000.0))
    })
}

fn main() {
    let upgrades: usize = std::env::var("BENCH_UPGRADES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut stack = GatewayStack::start("");
    stack.control.kill9();
    stack.control.set_env("TERMGATE__QUOTA__PER_USER", "300");
    stack.control.set_env("TERMGATE__QUOTA__GLOBAL", "400");
    stack.control.spawn(&[]);
    let token = stack.control.token("alice", false);
    let session = stack.control.create(&token);
    let id = session["id"].as_str().unwrap().to_owned();
    let container = format!("termgate-{id}");
    let bearer = format!("Bearer {token}");
    let gw: std::net::SocketAddr = format!("127.0.0.1:{}", stack.gw().port).parse().unwrap();
    let direct = stack.ttyd.target();

    // A. Upgrade latency: handshake to 101 (plus ttyd's first message written), gateway
    // vs direct ttyd, interleaved so both see the same machine state.
    let (mut via_gw, mut via_ttyd) = (Vec::new(), Vec::new());
    for i in 0..upgrades * 2 {
        let start = Instant::now();
        let t = if i % 2 == 0 {
            Terminal::connect(
                Target::Tcp(gw),
                &format!("/s/{id}/ws"),
                &[("Authorization", &bearer)],
            )
        } else {
            Terminal::connect(
                direct.clone(),
                &format!("/ws?arg={container}"),
                &[("X-Termgate-User", "alice")],
            )
        }
        .expect("connect");
        let took = start.elapsed();
        if i % 2 == 0 {
            via_gw.push(took)
        } else {
            via_ttyd.push(took)
        }
        drop(t);
        // Let ttyd reap the attach it just started before the next connection.
        std::thread::sleep(Duration::from_millis(20));
    }

    // B. DELETE → live terminal closed.
    let mut close_times = Vec::new();
    for _ in 0..20 {
        let s = stack.control.create(&token);
        let sid = s["id"].as_str().unwrap();
        let t = Terminal::connect(
            Target::Tcp(gw),
            &format!("/s/{sid}/ws"),
            &[("Authorization", &bearer)],
        )
        .expect("open");
        t.send_input(b"echo ready\r").unwrap();
        t.read_until("ready", Duration::from_secs(15)).unwrap();
        // DELETE answers once Docker has removed the container; the terminal must close
        // as soon as the route is withdrawn, so the call runs beside the measurement.
        let (url, tok) = (
            format!("{}/v1/sessions/{sid}", stack.control.api),
            token.clone(),
        );
        let start = Instant::now();
        let delete =
            std::thread::spawn(move || http("DELETE", &url, Some(&tok), None).unwrap().status);
        t.wait_closed(Duration::from_secs(5)).expect("closed");
        close_times.push(start.elapsed());
        assert_eq!(delete.join().unwrap(), 204);
    }

    // C. Create latency: control's own time vs Docker's create + start.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let (mut totals, mut dockers, mut owns, mut clients) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut created = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        let mut r = agent
            .post(&format!("{}/v1/sessions", stack.control.api))
            .header("Authorization", &bearer)
            .send_json(json!({"profile": "default"}))
            .unwrap();
        clients.push(start.elapsed());
        assert_eq!(r.status().as_u16(), 201);
        let st = r
            .headers()
            .get("server-timing")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let (docker, total) = (
            server_timing(&st, "docker").unwrap(),
            server_timing(&st, "total").unwrap(),
        );
        dockers.push(docker);
        totals.push(total);
        owns.push(total.saturating_sub(docker));
        created.push(
            r.body_mut().read_json::<serde_json::Value>().unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }

    // D. A full reconcile pass with 200 session containers.
    let more = 200usize.saturating_sub(stack.control.containers().len());
    std::thread::scope(|s| {
        for chunk in 0..8 {
            let (api, bearer) = (stack.control.api.clone(), bearer.clone());
            s.spawn(move || {
                for _ in (chunk..more).step_by(8) {
                    let a = http(
                        "POST",
                        &format!("{api}/v1/sessions"),
                        Some(bearer.trim_start_matches("Bearer ")),
                        Some(&json!({"profile": "default"})),
                    )
                    .unwrap();
                    assert_eq!(a.status, 201, "{}", a.text);
                }
            });
        }
    });
    let containers = stack.control.containers().len();
    let read = || {
        let m = http(
            "GET",
            &format!("{}/metrics", stack.control.admin),
            None,
            None,
        )
        .unwrap()
        .text;
        let get = |name: &str| {
            m.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().last())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (
            get("termgate_control_reconcile_pass_seconds_sum"),
            get("termgate_control_reconcile_pass_seconds_count"),
        )
    };
    let (s0, c0) = read();
    let (s1, c1) = wait_for("ten reconcile passes", Duration::from_secs(60), || {
        let (s, c) = read();
        (c - c0 >= 10.0).then_some((s, c))
    });
    let pass = Duration::from_secs_f64((s1 - s0) / (c1 - c0));

    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let (g50, g99, t50, t99) = (
        pct(&mut via_gw, 0.5),
        pct(&mut via_gw, 0.99),
        pct(&mut via_ttyd, 0.5),
        pct(&mut via_ttyd, 0.99),
    );
    println!("## Gateway\n");
    println!("| measure | through the gateway | direct to ttyd | ratio |\n|---|---|---|---|");
    println!(
        "| websocket upgrade p50 ({upgrades} each) | {} | {} | {:.2}× |",
        ms(g50),
        ms(t50),
        ratio(g50, t50)
    );
    println!(
        "| websocket upgrade p99 | {} | {} | {:.2}× |",
        ms(g99),
        ms(t99),
        ratio(g99, t99)
    );
    println!(
        "| added by the gateway p50 / p99 | {} / {} | | |",
        ms(g50.saturating_sub(t50)),
        ms(g99.saturating_sub(t99))
    );
    println!("\n| measure | p50 | p99 | max |\n|---|---|---|---|");
    let (c50, c99) = (pct(&mut close_times, 0.5), pct(&mut close_times, 0.99));
    println!(
        "| DELETE → live terminal closed (20) | {} | {} | {} |",
        ms(c50),
        ms(c99),
        ms(*close_times.iter().max().unwrap())
    );
    println!("\n## Control\n");
    println!("| create (50, serial) | p50 | p95 |\n|---|---|---|");
    for (name, v) in [
        ("client round trip", &mut clients),
        ("control total", &mut totals),
        ("Docker create + start", &mut dockers),
        ("control's own (total − Docker)", &mut owns),
    ] {
        let (p50, p95) = (pct(v, 0.5), pct(v, 0.95));
        println!("| {name} | {} | {} |", ms(p50), ms(p95));
    }
    println!("\n| reconcile | value |\n|---|---|");
    println!(
        "| full pass with {containers} session containers (mean of {} passes) | {} |",
        (c1 - c0) as u64,
        ms(pass)
    );
    drop(created);
}

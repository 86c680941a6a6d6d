//! Soak: many terminals through one gateway, a tenth of them typing, while the
//! gateway's file descriptors and resident memory are sampled every second.
//!
//! - `soak_terminals_stay_open_and_the_gateway_stays_flat`: 250 terminals for about a
//!   minute, in the normal suite.
//! - The long version (1,000 terminals for 10 minutes) is `#[ignore]`d and runs by name;
//!   it writes `docs/soak/soak-long.csv` and `docs/soak/soak-long.svg`:
//!   `cargo test -p e2e --test soak --locked -- --ignored --nocapture soak_long`
//!
//! Terminals share sessions (about 50 per session container) so Docker stays small.
//! Typing goes through one thread per session: every keystroke reaches the same shell,
//! so typers of one session take turns rather than interleave their lines.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::raw;
use e2e::stack::{wait_for, GatewayStack};
use e2e::term::Terminal;

/// One sample of the gateway process.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    fds: usize,
    rss_kib: u64,
    open: usize,
    typed: usize,
}

/// What a soak run found.
struct Report {
    terminals: usize,
    fds_before: usize,
    fds_ramped: usize,
    fds_after_close: usize,
    rss_before: u64,
    rss_ramped: u64,
    rss_end: u64,
    ramp: Duration,
    unexpected_closes: usize,
    typing_failures: usize,
    typed: usize,
    samples: Vec<Sample>,
}

fn soak(terminals: usize, steady: Duration) -> Report {
    let limit = raw::raise_nofile();
    assert!(
        limit as usize > terminals * 3 + 256,
        "ulimit -n {limit} is too low for {terminals} terminals"
    );
    let per_session = 50;
    let sessions = terminals.div_ceil(per_session);
    let mut stack = GatewayStack::start("");
    stack.control.kill9();
    stack
        .control
        .set_env("TERMGATE__QUOTA__PER_USER", &(sessions + 1).to_string());
    stack
        .control
        .set_env("TERMGATE__QUOTA__GLOBAL", &(sessions + 10).to_string());
    stack.control.spawn(&[]);
    let n = stack.spawn_gateway(&[
        (
            "TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION",
            &(per_session + 10).to_string(),
        ),
        (
            "TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER",
            &(terminals + 10).to_string(),
        ),
    ]);
    let pid = stack.gateways[n].pid();
    let token = stack.control.token("soak", false);
    let bearer = format!("Bearer {token}");
    let ids: Vec<String> = (0..sessions)
        .map(|_| {
            stack.control.create(&token)["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    // One terminal opened and closed first, so that lazily made state (connection
    // pools, caches) is in the baseline.
    let fds_idle = raw::fds(pid);
    let warm = stack
        .open(
            n,
            &format!("/s/{}/ws", ids[0]),
            &[("Authorization", &bearer)],
        )
        .expect("warm-up terminal");
    drop(warm);
    wait_for(
        "the warm-up terminal to close",
        Duration::from_secs(10),
        || (raw::fds(pid) <= fds_idle + 2).then_some(()),
    );
    let fds_before = raw::fds(pid);
    let rss_before = raw::rss_kib(pid);

    // Ramp up: eight openers in parallel.
    let ramp_start = Instant::now();
    let next = AtomicUsize::new(0);
    let opened: Mutex<Vec<(usize, Terminal)>> = Mutex::new(Vec::with_capacity(terminals));
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= terminals {
                    return;
                }
                let path = format!("/s/{}/ws", ids[i % sessions]);
                let t = stack
                    .open(n, &path, &[("Authorization", &bearer)])
                    .unwrap_or_else(|e| panic!("terminal {i}: {e:?}"));
                opened.lock().unwrap().push((i, t));
            });
        }
    });
    let ramp = ramp_start.elapsed();
    let mut opened = opened.into_inner().unwrap();
    opened.sort_by_key(|(i, _)| *i);
    let terms: Arc<Vec<Terminal>> = Arc::new(opened.into_iter().map(|(_, t)| t).collect());
    assert_eq!(terms.len(), terminals);
    wait_for(
        "every terminal to hear from ttyd",
        Duration::from_secs(60),
        || terms.iter().all(|t| t.title().is_some()).then_some(()),
    );
    let fds_ramped = raw::fds(pid);
    let rss_ramped = raw::rss_kib(pid);
    println!(
        "ramp-up: {terminals} terminals over {sessions} sessions in {:.1} s; gateway fds {fds_before} → {fds_ramped}, RSS {} → {} KiB",
        ramp.as_secs_f64(),
        rss_before,
        rss_ramped
    );

    // Steady state: typers (every tenth terminal), one thread per session.
    let stop = Arc::new(AtomicBool::new(false));
    let typed = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let typers: Vec<_> = (0..sessions)
        .map(|s| {
            let (terms, stop, typed, failures) = (
                Arc::clone(&terms),
                Arc::clone(&stop),
                Arc::clone(&typed),
                Arc::clone(&failures),
            );
            std::thread::spawn(move || {
                let mine: Vec<usize> = (0..terms.len())
                    .filter(|i| i % 10 == 0 && i % sessions == s)
                    .collect();
                let mut round = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let tick = Instant::now();
                    for &i in &mine {
                        let t = &terms[i];
                        let marker = format!("t{i}-{}", round + 1000);
                        let sent =
                            t.send_input(format!("echo t{i}-$(({round}+1000))\r").as_bytes());
                        let got = sent.and_then(|_| t.read_until(&marker, Duration::from_secs(20)));
                        match got {
                            Ok(_) => {
                                typed.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => failures.lock().unwrap().push(format!("terminal {i}: {e}")),
                        }
                        // The output accumulates; keep each terminal's buffer small.
                        t.clear_output();
                    }
                    round += 1;
                    while tick.elapsed() < Duration::from_secs(1) && !stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect();
    // Mirrored output reaches every terminal of a session: clear the others' too.
    let start = Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < steady {
        let tick = Instant::now();
        samples.push(Sample {
            at: ramp + start.elapsed(),
            fds: raw::fds(pid),
            rss_kib: raw::rss_kib(pid),
            open: terms.iter().filter(|t| !t.is_closed()).count(),
            typed: typed.load(Ordering::SeqCst),
        });
        for (i, t) in terms.iter().enumerate() {
            if i % 10 != 0 {
                t.clear_output();
            }
        }
        while tick.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stop.store(true, Ordering::SeqCst);
    for t in typers {
        t.join().expect("typer");
    }
    let rss_end = raw::rss_kib(pid);
    let unexpected_closes = terms.iter().filter(|t| t.is_closed()).count();
    let typing_failures = failures.lock().unwrap().len();
    for f in failures.lock().unwrap().iter().take(5) {
        eprintln!("typing failure: {f}");
    }

    // Close everything; the gateway's descriptors return to the baseline.
    drop(terms);
    let fds_after_close = wait_for(
        "the gateway's descriptors to return to the baseline",
        Duration::from_secs(30),
        || {
            let f = raw::fds(pid);
            (f <= fds_before + 8).then_some(f)
        },
    );
    assert!(
        !stack.gateways[n].log_text().contains("panicked"),
        "the gateway panicked"
    );
    // A gateway that died (an abort, the OOM killer) has no descriptors either and
    // prints no panic: it must still be the same process, and answer.
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the gateway process is gone"
    );
    let ready = format!("http://127.0.0.1:{}/readyz", stack.gateways[n].admin_port);
    let a = e2e::stack::http("GET", &ready, None, None).expect("the gateway answers");
    assert_eq!(a.status, 200, "the gateway is still ready: {}", a.text);
    Report {
        terminals,
        fds_before,
        fds_ramped,
        fds_after_close,
        rss_before,
        rss_ramped,
        rss_end,
        ramp,
        unexpected_closes,
        typing_failures,
        typed: typed.load(Ordering::SeqCst),
        samples,
    }
}

impl Report {
    fn print(&self) {
        let fds = self.samples.iter().map(|s| s.fds);
        let (fmin, fmax) = (fds.clone().min().unwrap_or(0), fds.max().unwrap_or(0));
        let rss = self.samples.iter().map(|s| s.rss_kib);
        let (rmin, rmax) = (rss.clone().min().unwrap_or(0), rss.max().unwrap_or(0));
        println!("| terminals | {} |", self.terminals);
        println!("| ramp-up | {:.1} s |", self.ramp.as_secs_f64());
        println!(
            "| steady state | {} s, {} echoes typed and read back, {} typing failures |",
            self.samples.len(),
            self.typed,
            self.typing_failures
        );
        println!("| unexpected closes | {} |", self.unexpected_closes);
        println!(
            "| gateway fds | {} before, {} after ramp-up, {}–{} steady, {} after close |",
            self.fds_before, self.fds_ramped, fmin, fmax, self.fds_after_close
        );
        println!(
            "| gateway RSS | {} KiB before, {} KiB after ramp-up, {}–{} KiB steady, {} KiB at the end |",
            self.rss_before, self.rss_ramped, rmin, rmax, self.rss_end
        );
    }

    /// The bounds a leak would break.
    fn assert_flat(&self) {
        assert_eq!(
            self.unexpected_closes, 0,
            "terminals closed during the soak"
        );
        assert_eq!(self.typing_failures, 0, "typed lines did not come back");
        assert!(self.typed > 0, "nothing was typed");
        let fds: Vec<usize> = self.samples.iter().map(|s| s.fds).collect();
        let (fmin, fmax) = (*fds.iter().min().unwrap(), *fds.iter().max().unwrap());
        // The same terminals all along: the descriptor count may move only by the
        // few short-lived sockets of the moment (feed poll, admin), not grow.
        assert!(
            fmax - fmin <= 16,
            "gateway fds moved {fmin}–{fmax} with a fixed set of terminals"
        );
        assert!(
            self.fds_after_close <= self.fds_before + 8,
            "gateway fds {} after close, {} before",
            self.fds_after_close,
            self.fds_before
        );
        // Memory at the end within 20 % (or 16 MiB, whichever is larger) of after
        // ramp-up: allocator noise passes, a per-message or per-second leak does not.
        let margin = (self.rss_ramped / 5).max(16 * 1024);
        assert!(
            self.rss_end <= self.rss_ramped + margin,
            "gateway RSS grew from {} KiB after ramp-up to {} KiB",
            self.rss_ramped,
            self.rss_end
        );
    }

    fn write_csv_and_svg(&self, name: &str) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/soak");
        std::fs::create_dir_all(&dir).expect("docs/soak");
        let mut csv =
            String::from("seconds,gateway_fds,gateway_rss_kib,open_terminals,echoes_typed\n");
        for s in &self.samples {
            csv.push_str(&format!(
                "{:.0},{},{},{},{}\n",
                s.at.as_secs_f64(),
                s.fds,
                s.rss_kib,
                s.open,
                s.typed
            ));
        }
        std::fs::write(dir.join(format!("{name}.csv")), csv).expect("csv");
        std::fs::write(dir.join(format!("{name}.svg")), self.svg()).expect("svg");
    }

    /// Two stacked line charts (fds, RSS in MiB) over time, as plain SVG.
    fn svg(&self) -> String {
        let (w, h, pad) = (800.0, 220.0, 50.0);
        let t_max = self
            .samples
            .last()
            .map_or(1.0, |s| s.at.as_secs_f64())
            .max(1.0);
        let t_min = self.samples.first().map_or(0.0, |s| s.at.as_secs_f64());
        let panel = |title: &str, y0: f64, values: Vec<f64>, unit: &str| -> String {
            let max = values.iter().cloned().fold(1.0_f64, f64::max) * 1.1;
            let points: Vec<String> = self
                .samples
                .iter()
                .zip(&values)
                .map(|(s, v)| {
                    let x = pad
                        + (s.at.as_secs_f64() - t_min) / (t_max - t_min).max(1.0) * (w - 2.0 * pad);
                    let y = y0 + h - pad / 2.0 - v / max * (h - pad);
                    format!("{x:.1},{y:.1}")
                })
                .collect();
            format!(
                "<text x=\"{pad}\" y=\"{:.0}\" font-size=\"14\">{title}</text>\n\
                 <line x1=\"{pad}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"#999\"/>\n\
                 <line x1=\"{pad}\" y1=\"{:.0}\" x2=\"{pad}\" y2=\"{:.0}\" stroke=\"#999\"/>\n\
                 <text x=\"4\" y=\"{:.0}\" font-size=\"11\">{:.0} {unit}</text>\n\
                 <text x=\"4\" y=\"{:.0}\" font-size=\"11\">0</text>\n\
                 <polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                y0 + 16.0,
                y0 + h - pad / 2.0,
                w - pad,
                y0 + h - pad / 2.0,
                y0 + pad / 2.0,
                y0 + h - pad / 2.0,
                y0 + pad / 2.0 + 4.0,
                max,
                y0 + h - pad / 2.0,
                points.join(" ")
            )
        };
        let fds = panel(
            &format!(
                "gateway file descriptors ({} terminals open)",
                self.terminals
            ),
            0.0,
            self.samples.iter().map(|s| s.fds as f64).collect(),
            "fds",
        );
        let rss = panel(
            "gateway resident memory (VmRSS)",
            h,
            self.samples
                .iter()
                .map(|s| s.rss_kib as f64 / 1024.0)
                .collect(),
            "MiB",
        );
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{:.0}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{fds}{rss}<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"11\">seconds since the first terminal opened ({t_min:.0}–{t_max:.0})</text>\n</svg>\n",
            2.0 * h + 20.0,
            w / 2.0 - 150.0,
            2.0 * h + 14.0
        )
    }
}

#[test]
fn soak_terminals_stay_open_and_the_gateway_stays_flat() {
    let r = soak(250, Duration::from_secs(60));
    r.print();
    r.assert_flat();
}

#[test]
#[ignore = "10 minutes, 1,000 terminals: run by name with --ignored (docs/reliability.md, Soak)"]
fn soak_long_one_thousand_terminals_for_ten_minutes() {
    let r = soak(1000, Duration::from_secs(600));
    r.print();
    r.write_csv_and_svg("soak-long");
    r.assert_flat();
}

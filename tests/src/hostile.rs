//! Hostile clients against a real stack, for the functional tests of
//! `tests/hostile.rs` (the bound each attack is held to) and the benchmark
//! `examples/bench_hostile.rs` (another user's upgrade latency, quiet and under each
//! attack).
//!
//! An [`Arena`] is a stack with one measured user (alice, her own session) and an
//! attacker (mallory, hers). Each attack is a value holding what its attackers count;
//! `start` sets its attackers going and returns a guard that stops them when dropped,
//! and re-raises the panic of any attacker whose own check failed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::raw::{self, frame_header, upgrade_head};
use crate::stack::{http, wait_for, GatewayStack};
use crate::stats::{ms, pct};
use crate::term::{Target, Terminal};

/// Deadline of the waits on an attack's progress.
pub const T: Duration = Duration::from_secs(15);
/// Upgrades made before the first timed round (alice's first attach starts cold).
const WARM_UP: usize = 5;

/// A stack with one measured user (alice, her own session) and an attacker's session.
pub struct Arena {
    /// Control, the ttyd pool behind its counting proxy, and the gateways.
    pub stack: GatewayStack,
    /// The gateway under test (index into `stack.gateways`).
    pub n: usize,
    /// Alice's session and her `Authorization` header value.
    pub alice_session: String,
    pub alice_bearer: String,
    /// Mallory's session and her `Authorization` header value.
    pub mallory_session: String,
    pub mallory_bearer: String,
    /// Just before the gateway under test was started: its per-minute limits count
    /// from a moment after this.
    pub gateway_started: Instant,
}

impl Arena {
    /// A stack whose gateway under test gets `env` (on top of 16 terminals per user and
    /// per session), with a session for alice and one for mallory.
    pub fn start(env: &[(&str, &str)]) -> Arena {
        raw::raise_nofile();
        let mut stack = GatewayStack::start("");
        let mut all = vec![
            ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_SESSION", "16"),
            ("TERMGATE__GATEWAY__MAX_TERMINALS_PER_USER", "16"),
        ];
        all.extend_from_slice(env);
        let gateway_started = Instant::now();
        let n = stack.spawn_gateway(&all);
        let alice = stack.control.token("alice", false);
        let mallory = stack.control.token("mallory", false);
        let id = |token: &str| {
            stack.control.create(token)["id"]
                .as_str()
                .expect("a session id")
                .to_owned()
        };
        let (alice_session, mallory_session) = (id(&alice), id(&mallory));
        Arena {
            stack,
            n,
            alice_session,
            alice_bearer: format!("Bearer {alice}"),
            mallory_session,
            mallory_bearer: format!("Bearer {mallory}"),
            gateway_started,
        }
    }

    /// The public port of the gateway under test.
    pub fn port(&self) -> u16 {
        self.stack.gateways[self.n].port
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port()).into()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.stack.gateways[self.n].pid()
    }

    /// The upgrade head of mallory's own terminal (authenticated, never a first message).
    pub fn mallory_head(&self) -> String {
        upgrade_head(
            self.port(),
            &format!("/s/{}/ws", self.mallory_session),
            &[("Authorization", &self.mallory_bearer)],
        )
    }

    /// One timed upgrade of alice's terminal: connect to the `101` and the first
    /// message written. The terminal is then held until ttyd has spoken (its attach
    /// started), so no attach is still starting when the next one is timed. Panics
    /// when the upgrade is refused: an attack must never cost another user a terminal.
    pub fn timed_upgrade(&self) -> Duration {
        let start = Instant::now();
        let t = Terminal::connect(
            Target::Tcp(self.addr()),
            &format!("/s/{}/ws", self.alice_session),
            &[("Authorization", &self.alice_bearer)],
        )
        .unwrap_or_else(|e| panic!("alice's upgrade refused during the test: {e:?}"));
        let took = start.elapsed();
        if let Err(e) = t.wait_title(Duration::from_secs(10)) {
            panic!("alice's terminal did not reach its shell: {e}");
        }
        took
    }

    /// `rounds` times: `per_half` of alice's upgrades in quiet, then an attack
    /// (`attack` starts it and returns once it is in full swing, with a guard that
    /// stops it when dropped) during at least `per_half` upgrades and at least
    /// `min_attack` (long enough for the attack's bound to act, e.g. the header
    /// timeout). Quiet and attacked rounds interleave so both see the same machine.
    pub fn rounds<G>(
        &self,
        rounds: usize,
        per_half: usize,
        min_attack: Duration,
        mut attack: impl FnMut() -> G,
    ) -> Samples {
        for _ in 0..WARM_UP {
            self.timed_upgrade();
        }
        let mut s = Samples::default();
        for _ in 0..rounds {
            for _ in 0..per_half {
                s.quiet.push(self.timed_upgrade());
            }
            let guard = attack();
            let started = Instant::now();
            let mut n = 0;
            while n < per_half || started.elapsed() < min_attack {
                s.attacked.push(self.timed_upgrade());
                n += 1;
            }
            drop(guard);
        }
        s
    }

    /// The gateway still answers its health check and never panicked.
    pub fn assert_alive(&self) {
        let g = &self.stack.gateways[self.n];
        let a = http("GET", &self.stack.url(self.n, "/healthz"), None, None)
            .expect("the gateway still answers");
        assert_eq!(a.status, 200);
        assert!(
            !g.log_text().contains("panicked"),
            "the gateway panicked:\n{}",
            g.log_text()
        );
    }
}

/// Alice's upgrade times, quiet and under attack.
#[derive(Debug, Default)]
pub struct Samples {
    pub quiet: Vec<Duration>,
    pub attacked: Vec<Duration>,
}

impl Samples {
    /// Every upgrade alice made, warm-up included: each one connection to ttyd.
    pub fn upgrades(&self) -> usize {
        WARM_UP + self.quiet.len() + self.attacked.len()
    }

    /// The benchmark's table row: p50 and p99 quiet and attacked, the p99 ratio.
    pub fn row(&mut self, name: &str) -> String {
        let (q50, q99) = (pct(&mut self.quiet, 0.5), pct(&mut self.quiet, 0.99));
        let (a50, a99) = (pct(&mut self.attacked, 0.5), pct(&mut self.attacked, 0.99));
        format!(
            "| {name} | {} | {} | {} | {} | {:.2}× | {} / {} |",
            ms(q50),
            ms(a50),
            ms(q99),
            ms(a99),
            a99.as_secs_f64() / q99.as_secs_f64(),
            self.quiet.len(),
            self.attacked.len()
        )
    }
}

/// Running attackers: threads that stop when this is dropped. Dropping it joins them
/// and re-raises the first panic among them, so a check an attacker makes (the status
/// of each answer, say) fails the test instead of only ending that attacker.
pub struct Attack {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Attack {
    /// `workers` threads each running `f(worker, stop)` until `stop` is set.
    pub fn spawn(workers: usize, f: impl Fn(usize, &AtomicBool) + Send + Sync + 'static) -> Attack {
        let stop = Arc::new(AtomicBool::new(false));
        let f = Arc::new(f);
        let threads = (0..workers)
            .map(|i| {
                let (stop, f) = (Arc::clone(&stop), Arc::clone(&f));
                std::thread::spawn(move || f(i, &stop))
            })
            .collect();
        Attack { stop, threads }
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let mut failed = None;
        for t in self.threads.drain(..) {
            if let Err(panic) = t.join() {
                failed.get_or_insert(panic);
            }
        }
        // Already unwinding (another check failed first): a second panic would abort.
        if let Some(panic) = failed.filter(|_| !std::thread::panicking()) {
            std::panic::resume_unwind(panic);
        }
    }
}

/// The smallest duration seen so far.
#[derive(Debug, Default)]
pub struct Fastest(Mutex<Option<Duration>>);

impl Fastest {
    /// Notes one duration.
    pub fn note(&self, d: Duration) {
        let mut f = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *f = Some(f.map_or(d, |f| f.min(d)));
    }

    /// The smallest noted, if any.
    pub fn get(&self) -> Option<Duration> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Slowloris: `conns` connections, each sending one header byte a second, reconnecting
/// when cut. Bound: `gateway.header_timeout_ms`.
pub struct SlowHeaders {
    port: u16,
    conns: usize,
    /// How long the longest-lived slow connection lived before the gateway cut it.
    pub longest: Arc<Mutex<Duration>>,
    /// Slow connections the gateway cut.
    pub cut: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
}

impl SlowHeaders {
    /// The attack on `arena`'s gateway.
    pub fn new(arena: &Arena, conns: usize) -> SlowHeaders {
        SlowHeaders {
            port: arena.port(),
            conns,
            longest: Arc::default(),
            cut: Arc::default(),
            open: Arc::default(),
        }
    }

    /// Opens the connections (returns once nine in ten are open) and keeps them
    /// trickling.
    pub fn start(&self) -> Attack {
        let (port, conns) = (self.port, self.conns);
        let (longest, cut, opened) = (
            Arc::clone(&self.longest),
            Arc::clone(&self.cut),
            Arc::clone(&self.open),
        );
        self.open.store(0, Ordering::SeqCst);
        let head_start = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        let a = Attack::spawn(2, move |_, stop| {
            let connect = || {
                let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
                s.set_nonblocking(true).ok()?;
                (&s).write_all(head_start.as_bytes()).ok()?;
                Some((s, Instant::now()))
            };
            let mut socks: Vec<(TcpStream, Instant)> =
                (0..conns / 2).filter_map(|_| connect()).collect();
            opened.fetch_add(socks.len(), Ordering::SeqCst);
            while !stop.load(Ordering::SeqCst) {
                let tick = Instant::now();
                for slot in socks.iter_mut() {
                    let mut probe = [0u8; 64];
                    let closed = match (&slot.0).read(&mut probe) {
                        Ok(_) => true,
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    } || (&slot.0).write_all(b"a").is_err();
                    if closed {
                        let lived = slot.1.elapsed();
                        let mut l = longest.lock().unwrap_or_else(|e| e.into_inner());
                        *l = (*l).max(lived);
                        drop(l);
                        cut.fetch_add(1, Ordering::SeqCst);
                        if let Some(fresh) = connect() {
                            *slot = fresh;
                        }
                    }
                }
                while tick.elapsed() < Duration::from_secs(1) && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        wait_for("the slow connections to be open", T, || {
            (self.open.load(Ordering::SeqCst) >= conns * 9 / 10).then_some(())
        });
        a
    }
}

/// Upgrade heads that are never read: mallory's own, authenticated, which never send
/// a first message (each holds one of her slots), and unauthenticated ones (answered
/// and closed). Bound: `gateway.max_terminals_per_user`.
pub struct HalfOpen {
    port: u16,
    mallory_head: String,
    bad_head: String,
    /// Mallory's half-open upgrades sent so far.
    pub attempts: Arc<AtomicUsize>,
    /// The first [`HalfOpen::KEPT`] unauthenticated upgrades, kept (as a second
    /// descriptor) to read their answers later.
    pub refused: Arc<Mutex<Vec<TcpStream>>>,
}

impl HalfOpen {
    /// How many unauthenticated upgrades are kept to read.
    pub const KEPT: usize = 40;

    /// The attack on `arena`'s gateway.
    pub fn new(arena: &Arena) -> HalfOpen {
        let bad_head = upgrade_head(
            arena.port(),
            &format!("/s/{}/ws", arena.alice_session),
            &[("Authorization", "Bearer not.a.token")],
        );
        HalfOpen {
            port: arena.port(),
            mallory_head: arena.mallory_head(),
            bad_head,
            attempts: Arc::default(),
            refused: Arc::default(),
        }
    }

    /// Two attackers, one of each kind; returns once 100 more of mallory's are sent.
    pub fn start(&self) -> Attack {
        let port = self.port;
        let (mallory_head, bad_head, attempts, refused) = (
            self.mallory_head.clone(),
            self.bad_head.clone(),
            Arc::clone(&self.attempts),
            Arc::clone(&self.refused),
        );
        let before = self.attempts.load(Ordering::SeqCst);
        let a = Attack::spawn(2, move |w, stop| {
            let mut socks = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                // Worker 0: mallory's own upgrades, never a first message and never
                // read. Worker 1: unauthenticated upgrade heads, never read.
                let head = if w == 0 { &mallory_head } else { &bad_head };
                if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                    let _ = s.write_all(head.as_bytes());
                    if w == 1 {
                        let mut kept = refused.lock().unwrap_or_else(|e| e.into_inner());
                        if kept.len() < Self::KEPT {
                            kept.extend(s.try_clone());
                        }
                    }
                    socks.push(s);
                    if w == 0 {
                        attempts.fetch_add(1, Ordering::SeqCst);
                    }
                }
                if socks.len() >= 150 {
                    socks.remove(0);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        wait_for("the half-open upgrades to pile up", T, || {
            (self.attempts.load(Ordering::SeqCst) >= before + 100).then_some(())
        });
        a
    }
}

/// Failed sign-ins (`POST /auth/session` with a token that does not verify) from
/// alice's own address, six connections without pause. Bound:
/// `gateway.auth_failures_per_minute`; every answer is 401 or 429 (an attacker panics
/// at any other).
pub struct SignInFlood {
    url: String,
    /// Answers 401 and 429 so far.
    pub r401: Arc<AtomicUsize>,
    pub r429: Arc<AtomicUsize>,
    /// The quickest 429, from the request sent to its whole answer.
    pub fastest_429: Arc<Fastest>,
}

impl SignInFlood {
    /// The attack on `arena`'s gateway.
    pub fn new(arena: &Arena) -> SignInFlood {
        SignInFlood {
            url: arena.stack.url(arena.n, "/auth/session"),
            r401: Arc::default(),
            r429: Arc::default(),
            fastest_429: Arc::default(),
        }
    }

    /// Starts the flood; returns once 20 answers came back.
    pub fn start(&self) -> Attack {
        let (url, r401, r429, fastest) = (
            self.url.clone(),
            Arc::clone(&self.r401),
            Arc::clone(&self.r429),
            Arc::clone(&self.fastest_429),
        );
        let answered = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&answered);
        let a = Attack::spawn(6, move |_, stop| {
            while !stop.load(Ordering::SeqCst) {
                let sent = Instant::now();
                let a = http(
                    "POST",
                    &url,
                    None,
                    Some(&serde_json::json!({"token": "a.b.c"})),
                )
                .expect("the gateway answers");
                let took = sent.elapsed();
                match a.status {
                    401 => r401.fetch_add(1, Ordering::SeqCst),
                    429 => {
                        fastest.note(took);
                        r429.fetch_add(1, Ordering::SeqCst)
                    }
                    s => panic!("a failed sign-in answered {s}: {}", a.text),
                };
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        wait_for("the flood to run", T, || {
            (answered.load(Ordering::SeqCst) >= 20).then_some(())
        });
        a
    }
}

/// Mallory opening terminals past her limit, four threads without pause, holding
/// every one that opens. Bound: `gateway.max_terminals_per_user`: the rest are 429
/// `too_many_terminals` (an attacker panics at any other refusal).
pub struct PastTerminalLimit {
    addr: SocketAddr,
    path: String,
    bearer: String,
    /// Her upgrades that opened, and those refused, so far.
    pub opened: Arc<AtomicUsize>,
    pub refused: Arc<AtomicUsize>,
    /// The most terminals she still held open when an attack stopped.
    pub max_held: Arc<AtomicUsize>,
    /// The quickest refusal, from the connect to its whole answer.
    pub fastest_refusal: Arc<Fastest>,
}

/// A [`PastTerminalLimit`] attack running; dropping it stops the attackers, which
/// count the terminals they still hold first.
pub struct Holding {
    attack: Option<Attack>,
    live: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        drop(self.attack.take());
        self.max
            .fetch_max(self.live.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

impl PastTerminalLimit {
    /// The attack on `arena`'s gateway.
    pub fn new(arena: &Arena) -> PastTerminalLimit {
        PastTerminalLimit {
            addr: arena.addr(),
            path: format!("/s/{}/ws", arena.mallory_session),
            bearer: arena.mallory_bearer.clone(),
            opened: Arc::default(),
            refused: Arc::default(),
            max_held: Arc::default(),
            fastest_refusal: Arc::default(),
        }
    }

    /// Starts the attackers; returns once 20 more were refused.
    pub fn start(&self) -> Holding {
        let (addr, path, bearer) = (self.addr, self.path.clone(), self.bearer.clone());
        let (refused, opened, fastest) = (
            Arc::clone(&self.refused),
            Arc::clone(&self.opened),
            Arc::clone(&self.fastest_refusal),
        );
        // Terminals still open when each attacker stops.
        let live = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&live);
        let start_refused = self.refused.load(Ordering::SeqCst);
        let a = Attack::spawn(4, move |_, stop| {
            let mut mine = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let sent = Instant::now();
                match Terminal::connect(Target::Tcp(addr), &path, &[("Authorization", &bearer)]) {
                    Ok(t) => {
                        opened.fetch_add(1, Ordering::SeqCst);
                        mine.push(t);
                    }
                    Err(e) => {
                        let took = sent.elapsed();
                        let code = e.json().map(|j| j["error"]["code"].clone());
                        assert_eq!(
                            (e.status(), code.as_ref().and_then(|c| c.as_str())),
                            (Some(429), Some("too_many_terminals")),
                            "past the limit: {e:?}"
                        );
                        fastest.note(took);
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            counted.fetch_add(
                mine.iter().filter(|t| !t.is_closed()).count(),
                Ordering::SeqCst,
            );
        });
        wait_for("the limit to refuse", T, || {
            (self.refused.load(Ordering::SeqCst) > start_refused + 20).then_some(())
        });
        Holding {
            attack: Some(a),
            live,
            max: Arc::clone(&self.max_held),
        }
    }
}

/// Oversized websocket frames up mallory's terminal: each connection announces a
/// 1 GiB frame first (ttyd starts nothing before a first message, so what is measured
/// is the gateway's cost alone) and sends 1 MiB of it, two connections in a loop.
/// Bound: `gateway.max_ws_frame_bytes`.
pub struct OversizedFrames {
    port: u16,
    head: String,
    /// Connections that were upgraded and sent their frame.
    pub sent: Arc<AtomicUsize>,
}

impl OversizedFrames {
    /// The attack on `arena`'s gateway.
    pub fn new(arena: &Arena) -> OversizedFrames {
        OversizedFrames {
            port: arena.port(),
            head: arena.mallory_head(),
            sent: Arc::default(),
        }
    }

    /// Starts the attackers; returns once four frames were sent.
    pub fn start(&self) -> Attack {
        let (port, head, sent) = (self.port, self.head.clone(), Arc::clone(&self.sent));
        let before = self.sent.load(Ordering::SeqCst);
        let a = Attack::spawn(2, move |_, stop| {
            let hello = frame_header(1 << 30);
            let chunk = vec![b'x'; 64 * 1024];
            while !stop.load(Ordering::SeqCst) {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                // A connection the gateway did not cut must not hang the attacker.
                let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.write_all(head.as_bytes());
                let mut buf = [0u8; 1024];
                if !matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"HTTP/1.1 101")) {
                    continue;
                }
                let _ = s.write_all(&hello);
                for _ in 0..16 {
                    if s.write_all(&chunk).is_err() {
                        break;
                    }
                }
                sent.fetch_add(1, Ordering::SeqCst);
            }
        });
        wait_for("the oversized frames to flow", T, || {
            (self.sent.load(Ordering::SeqCst) >= before + 4).then_some(())
        });
        a
    }
}

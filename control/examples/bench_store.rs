//! List latency of the store with 10,000 records. Reproduce with:
//!
//! ```sh
//! cargo run --release -p control --example bench_store
//! ```

use std::time::{Duration, Instant};

use control::model::{Session, SessionState};
use control::store::Store;
use policy::{SessionId, Sub};

fn session(n: u32, owner: &str) -> Session {
    let mut r = [0u8; 10];
    r[..4].copy_from_slice(&n.to_be_bytes());
    Session {
        id: SessionId::from_random(r),
        owner: Sub::parse(owner).expect("valid sub"),
        name: format!("s{n}"),
        profile: "default".into(),
        host: "local".into(),
        options: Default::default(),
        state: SessionState::Running,
        created_at: 1_800_000_000 + u64::from(n),
        container_id: Some(format!("c{n}")),
        ended_at: None,
        ended_by: None,
        end_reason: None,
        last_input: None,
        record: Default::default(),
        shares: Vec::new(),
        peers: Vec::new(),
        workspace: None,
    }
}

fn time(runs: usize, mut f: impl FnMut() -> usize) -> (Duration, Duration, usize) {
    let mut v: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            std::hint::black_box(f());
            s.elapsed()
        })
        .collect();
    v.sort();
    (v[runs / 2], v[runs * 95 / 100], f())
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path(), 1024).expect("store");
    // 10,000 records: 1,000 for alice, 9,000 spread over 90 other users.
    let mut all: Vec<Session> = (0..1000).map(|n| session(n, "alice")).collect();
    all.extend((1000..10_000).map(|n| session(n, &format!("user{}", n % 90))));
    store.insert_rebuilt(&all).expect("insert");
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    println!("| list with 10,000 records in the store | p50 | p95 | records |\n|---|---|---|---|");
    let alice = Sub::parse("alice").expect("valid sub");
    let (p50, p95, n) = time(200, || store.list_active(Some(&alice)).expect("list").len());
    println!(
        "| one user's sessions (index scan) | {} | {} | {n} |",
        ms(p50),
        ms(p95)
    );
    let (p50, p95, n) = time(50, || store.list_active(None).expect("list").len());
    println!(
        "| every session (admin, full scan) | {} | {} | {n} |",
        ms(p50),
        ms(p95)
    );
}

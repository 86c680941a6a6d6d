//! Faults, each against the real binaries: a Docker daemon restarted under control, a
//! session container killed by the out-of-memory killer, a store whose disk is full,
//! and clocks that disagree by about the leeway (docs/reliability.md, "Faults").

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::daemon::{cannot_run, kill_container_program, link_exists, TestDaemon};
use e2e::stack::{http, wait_for, ControlStack, GatewayStack};
use e2e::ttyd::private_dir;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn session(control: &ControlStack, token: &str, id: &str) -> Value {
    let a = control.call("GET", &format!("/v1/sessions/{id}"), Some(token), None);
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

/// Waits until session `id` has ended; returns its record.
fn wait_ended(control: &ControlStack, token: &str, id: &str, deadline: Duration) -> Value {
    wait_for(&format!("session {id} to end"), deadline, || {
        let s = session(control, token, id);
        s["ended_at"].is_u64().then_some(s)
    })
}

#[test]
fn a_restarted_docker_daemon_is_followed_again_survivors_run_and_lost_sessions_end() {
    if let Some(why) = cannot_run() {
        return e2e::skip_or_fail(&why);
    }
    assert!(
        link_exists("docker0"),
        "the machine's docker0 exists before"
    );
    let mut d = TestDaemon::start();
    d.load_session_image();

    let mut control = ControlStack::prepare("");
    // Only events can end a session within seconds: passes are a minute apart.
    control.set_env("TERMGATE__CONTROL__RECONCILE_INTERVAL_SECONDS", "60");
    control.set_env("TERMGATE__CONTROL__DOCKER_HOST", &d.host);
    control.spawn(&[]);

    let users = ["alice", "bob", "carol", "dave"];
    let tokens: Vec<String> = users.iter().map(|u| control.token(u, false)).collect();
    let ids: Vec<String> = tokens
        .iter()
        .map(|t| control.create(t)["id"].as_str().unwrap().to_owned())
        .collect();
    let container = |d: &TestDaemon, id: &str| {
        let c = d.containers(&format!("termgate.session={id}"));
        assert_eq!(
            c.len(),
            1,
            "session {id} has one container on the test daemon"
        );
        c[0].clone()
    };
    let (kept, killed_later, lost, died) = (0, 1, 2, 3);
    let lost_cid = container(&d, &ids[lost]);
    let died_cid = container(&d, &ids[died]);

    // Stopped: with live restore its containers keep running. Meanwhile one
    // session's program dies and another's container state is lost.
    let stopped = Instant::now();
    d.stop();
    let stop_took = stopped.elapsed();
    assert!(
        kill_container_program(&d.namespace, &died_cid),
        "the program of the session that dies was found under its shim"
    );
    assert!(
        kill_container_program(&d.namespace, &lost_cid),
        "the program of the lost session was found under its shim"
    );
    d.forget_container(&lost_cid);

    let restarted = Instant::now();
    d.spawn();
    let daemon_up = restarted.elapsed();
    let gone = wait_ended(&control, &tokens[lost], &ids[lost], T);
    let gone_after = restarted.elapsed();
    assert_eq!(
        (gone["state"].as_str(), gone["end_reason"].as_str()),
        (Some("gone"), Some("the container disappeared")),
        "{gone}"
    );
    let exited = wait_ended(&control, &tokens[died], &ids[died], T);
    let exited_after = restarted.elapsed();
    assert_eq!(exited["state"], "exited", "{exited}");
    assert_eq!(exited["ended_by"], "termgate", "{exited}");
    for i in [kept, killed_later] {
        assert_eq!(
            session(&control, &tokens[i], &ids[i])["state"],
            "running",
            "a session whose container survived the restart runs"
        );
    }

    // The event stream follows the restarted daemon: a kill is recorded within 2 s.
    let out = d.docker(&["kill", &container(&d, &ids[killed_later])]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let killed = Instant::now();
    let ended = wait_ended(&control, &tokens[killed_later], &ids[killed_later], T);
    let kill_recorded = killed.elapsed();
    assert!(
        kill_recorded <= Duration::from_secs(2),
        "the kill was recorded {kill_recorded:?} after it"
    );
    assert_eq!(ended["state"], "exited", "{ended}");
    assert_eq!(
        session(&control, &tokens[kept], &ids[kept])["state"],
        "running"
    );
    assert!(
        control.log_text().contains("event stream came back"),
        "the host was reconciled when its events came back"
    );
    eprintln!(
        "figures: test dockerd stop (SIGTERM, live restore) took {stop_took:?}; restarted daemon answered in {daemon_up:?}; lost container ended gone {gone_after:?} and the one whose program died meanwhile ended exited {exited_after:?} after the restart began; a kill after the restart recorded in {kill_recorded:?} (passes 60 s apart)"
    );

    drop(control);
    drop(d);
    assert!(
        link_exists("docker0"),
        "the machine's docker0 survives the test daemon"
    );
}

#[test]
fn a_session_killed_by_the_oom_killer_ends_failed_with_reason_oom_and_its_terminal_closes() {
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    let stack = GatewayStack::start(&format!(
        "[profiles.tiny]\ndescription = \"16 MiB\"\nimage = \"{image}\"\nmemory_mb = 16\ntmp_size_mb = 4\n"
    ));
    let alice = stack.control.token("alice", false);
    let made = stack.control.call(
        "POST",
        "/v1/sessions",
        Some(&alice),
        Some(json!({"profile": "tiny"})),
    );
    assert_eq!(made.status, 201, "{}", made.text);
    let id = made.body["id"].as_str().unwrap().to_owned();
    let cookie = stack.sign_in("alice");
    let t = stack
        .open_as(0, &id, &cookie)
        .expect("alice opens her terminal");
    t.send_input(b"echo ready-$((6*7))\r").unwrap();
    t.read_until("ready-42", T).unwrap();

    // The shell doubles a string until the 16 MiB limit stops it.
    t.send_input(b"x=a; while :; do x=$x$x; done\r").unwrap();
    let typed = Instant::now();
    let ended = wait_ended(&stack.control, &alice, &id, Duration::from_secs(10));
    let ended_after = typed.elapsed();
    assert_eq!(ended["state"], "failed", "{ended}");
    assert_eq!(ended["ended_by"], "termgate", "{ended}");
    assert!(
        ended["end_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("oom")),
        "{ended}"
    );
    let closed_after = t.wait_closed(T).expect("the terminal closes");
    assert!(
        ended_after < Duration::from_secs(2),
        "ended {ended_after:?} after the allocation began"
    );
    wait_for("its container to be removed", T, || {
        stack.control.containers().is_empty().then_some(())
    });
    eprintln!(
        "figures: allocation typed → session ended failed (oom) in {ended_after:?}; terminal closed {closed_after:?} after that"
    );
}

/// A tmpfs of `mib` MiB mounted on a fresh directory; unmounted (lazily, so that an
/// open file never keeps it) when dropped, also when the test fails.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u32) -> Tmpfs {
        let dir = private_dir("tg-store.");
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(ok.success(), "mount a tmpfs");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills it up with one file; returns that file.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0xa5u8; 64 << 10];
        while f.write_all(&chunk).is_ok() {}
        // The last partial chunk: byte by byte is too slow, 4 KiB pages are enough.
        while f.write_all(&chunk[..4096]).is_ok() {}
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn can_mount() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    (String::from_utf8_lossy(&uid.stdout).trim() != "0")
        .then(|| "mounting a tmpfs needs root".into())
}

#[test]
fn a_full_store_refuses_writes_with_the_cause_keeps_reads_and_terminals_and_recovers() {
    if let Some(why) = can_mount() {
        return e2e::skip_or_fail(&why);
    }
    let fs = Tmpfs::mount(8);
    let mut control = ControlStack::prepare("");
    control.set_env(
        "TERMGATE__STORE__PATH",
        &fs.path().join("store").display().to_string(),
    );
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let stack = GatewayStack::assemble(control, ttyd, counter);
    let c = &stack.control;
    let alice = c.token("alice", false);
    let bob = c.token("bob", false);
    let svc = c.service_token();
    let mut acknowledged = vec![(
        alice.clone(),
        c.create(&alice)["id"].as_str().unwrap().to_owned(),
    )];
    let first = acknowledged[0].1.clone();
    let cookie = stack.sign_in("alice");
    let t = stack.open_as(0, &first, &cookie).expect("alice opens s1");
    t.send_input(b"echo before-$((1+1))\r").unwrap();
    t.read_until("before-2", T).unwrap();

    // Full: writes are refused naming the cause. Creates that still fit are
    // acknowledged and must survive.
    let filler = fs.fill();
    let filled = Instant::now();
    let refused = wait_for("a create to be refused for want of space", T, || {
        let a = c.call(
            "POST",
            "/v1/sessions",
            Some(&bob),
            Some(json!({"profile": "default"})),
        );
        match a.status {
            201 => {
                acknowledged.push((bob.clone(), a.body["id"].as_str().unwrap().to_owned()));
                None
            }
            _ => Some(a),
        }
    });
    let refused_after = filled.elapsed();
    let fitted = acknowledged.len() - 1;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(
        refused.body["error"]["code"], "store_unavailable",
        "{}",
        refused.text
    );
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("No space left on device")),
        "{}",
        refused.text
    );
    // An end is a write too: refused, and its container left running.
    let end = c.call(
        "DELETE",
        &format!("/v1/sessions/{first}"),
        Some(&alice),
        None,
    );
    assert_eq!(
        (end.status, end.body["error"]["code"].as_str()),
        (503, Some("store_unavailable")),
        "{}",
        end.text
    );
    // Reads, the feed, the gateway's routes and the open terminal keep working.
    let listed = c.call("GET", "/v1/sessions", Some(&alice), None);
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert!(listed.text.contains(&first), "{}", listed.text);
    assert_eq!(session(c, &alice, &first)["state"], "running");
    let feed = c.call("GET", "/v1/routes?after=0", Some(&svc), None);
    assert_eq!(feed.status, 200, "{}", feed.text);
    let through = http("GET", &stack.url(0, "/api/sessions"), Some(&alice), None).unwrap();
    assert_eq!(through.status, 200, "{}", through.text);
    t.send_input(b"echo during-$((2+2))\r").unwrap();
    t.read_until("during-4", T)
        .expect("the open terminal keeps flowing while the store is full");
    let t2 = stack
        .open_as(0, &first, &cookie)
        .expect("a new terminal opens on a known route while the store is full");
    drop(t2);

    // Space returns: the next write reopens the store and succeeds.
    std::fs::remove_file(&filler).expect("free the space");
    let freed = Instant::now();
    let made = wait_for("a create to succeed again", T, || {
        let a = c.call(
            "POST",
            "/v1/sessions",
            Some(&bob),
            Some(json!({"profile": "default"})),
        );
        (a.status == 201).then_some(a)
    });
    let recovered_after = freed.elapsed();
    acknowledged.push((bob.clone(), made.body["id"].as_str().unwrap().to_owned()));
    for (token, id) in &acknowledged {
        assert_eq!(
            session(c, token, id)["state"],
            "running",
            "acknowledged session {id} is still there"
        );
    }
    // The gateway follows the reopened store (a new epoch: a full snapshot).
    let new_id = &acknowledged.last().unwrap().1;
    let bob_cookie = stack.sign_in("bob");
    let t3 = wait_for("bob's new terminal to open", T, || {
        stack.open_as(0, new_id, &bob_cookie).ok()
    });
    t3.send_input(b"echo after-$((3+3))\r").unwrap();
    t3.read_until("after-6", T).unwrap();
    let gone = c.call(
        "DELETE",
        &format!("/v1/sessions/{first}"),
        Some(&alice),
        None,
    );
    assert_eq!(gone.status, 204, "{}", gone.text);
    t.wait_closed(T)
        .expect("the ended session's terminal closes");
    eprintln!(
        "figures: store full → first refused write {refused_after:?} after filling ({fitted} create(s) still fitted and were acknowledged); space freed → first successful create {recovered_after:?} after"
    );
}

/// A small ext4 filesystem in a file, loop-mounted with `errors=remount-ro` on a fresh
/// directory, whose kernel driver can be told to fail (`trigger_fs_error`): it then
/// turns read-only under every open file, as on a disk error. Unmounted (lazily)
/// when dropped, also when the test fails.
struct Ext4 {
    dir: tempfile::TempDir,
    mounts: u32,
}

impl Ext4 {
    fn make(mib: u32) -> Ext4 {
        let dir = private_dir("tg-ext4.");
        let img = dir.path().join("fs0.img");
        let f = std::fs::File::create(&img).expect("image");
        f.set_len(u64::from(mib) << 20).expect("image size");
        let out = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&img)
            .output()
            .expect("mkfs.ext4");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::create_dir(dir.path().join("m")).expect("mount point");
        let fs = Ext4 { dir, mounts: 0 };
        fs.mount(&img);
        fs
    }

    fn mount(&self, img: &Path) {
        let out = Command::new("mount")
            .args(["-o", "loop,errors=remount-ro"])
            .arg(img)
            .arg(self.path())
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The mount point.
    fn path(&self) -> PathBuf {
        self.dir.path().join("m")
    }

    /// The loop device under the mount point, as /sys/fs/ext4 names it.
    fn device(&self) -> String {
        let out = Command::new("findmnt")
            .args(["-no", "SOURCE"])
            .arg(self.path())
            .output()
            .expect("findmnt");
        let source = String::from_utf8_lossy(&out.stdout);
        let source = source.lines().last().unwrap_or_default().trim();
        let device = source.rsplit('/').next().unwrap_or_default().to_owned();
        // An empty name would read as a kernel without the trigger: a skip, not a fault.
        assert!(
            !device.is_empty(),
            "no device found under {} (findmnt: {:?}, {})",
            self.path().display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        device
    }

    /// An error in the filesystem: the kernel makes it read-only at once.
    fn break_read_only(&self) {
        std::fs::write(
            format!("/sys/fs/ext4/{}/trigger_fs_error", self.device()),
            "termgate fault test
",
        )
        .expect("trigger an ext4 error");
    }

    /// A writable filesystem again at the same place, with everything the broken one
    /// had on disk: the image copied, checked, and mounted over the broken one (which
    /// cannot be remounted writable while files are open on it).
    fn replace_with_repaired_copy(&mut self) {
        self.mounts += 1;
        let (old, new) = (
            self.dir.path().join(format!("fs{}.img", self.mounts - 1)),
            self.dir.path().join(format!("fs{}.img", self.mounts)),
        );
        std::fs::copy(&old, &new).expect("copy the image");
        let fsck = Command::new("e2fsck")
            .arg("-fy")
            .arg(&new)
            .output()
            .expect("e2fsck");
        // 0: clean, 1: errors corrected.
        assert!(
            matches!(fsck.status.code(), Some(0 | 1)),
            "{}",
            String::from_utf8_lossy(&fsck.stdout)
        );
        self.mount(&new);
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        for _ in 0..=self.mounts {
            let _ = Command::new("umount").arg("-l").arg(self.path()).status();
        }
    }
}

#[test]
fn a_store_whose_filesystem_turns_read_only_refuses_writes_keeps_reads_and_recovers() {
    if let Some(why) = can_mount() {
        return e2e::skip_or_fail(&why);
    }
    let mut fs = Ext4::make(32);
    if !Path::new(&format!("/sys/fs/ext4/{}/trigger_fs_error", fs.device())).exists() {
        return e2e::skip_or_fail("this kernel cannot be told to fail an ext4 filesystem");
    }
    let mut control = ControlStack::prepare("");
    control.set_env(
        "TERMGATE__STORE__PATH",
        &fs.path().join("store").display().to_string(),
    );
    control.spawn(&[]);
    let ttyd = e2e::ttyd::TtydPool::start_for(&control.instance);
    let counter = e2e::ttyd::CountingProxy::start(ttyd.target());
    let stack = GatewayStack::assemble(control, ttyd, counter);
    let c = &stack.control;
    let alice = c.token("alice", false);
    let bob = c.token("bob", false);
    let svc = c.service_token();
    let first = c.create(&alice)["id"].as_str().unwrap().to_owned();
    let second = c.create(&bob)["id"].as_str().unwrap().to_owned();
    let cookie = stack.sign_in("alice");
    let t = stack.open_as(0, &first, &cookie).expect("alice opens s1");
    t.send_input(b"echo before-$((1+1))\r").unwrap();
    t.read_until("before-2", T).unwrap();

    fs.break_read_only();
    let broke = Instant::now();
    let refused = c.call(
        "POST",
        "/v1/sessions",
        Some(&bob),
        Some(json!({"profile": "default"})),
    );
    let refused_after = broke.elapsed();
    assert_eq!(
        (refused.status, refused.body["error"]["code"].as_str()),
        (503, Some("store_unavailable")),
        "{}",
        refused.text
    );
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Read-only file system")),
        "{}",
        refused.text
    );
    // Refused again without touching sled: the cause is read from the disk now.
    let again = c.call(
        "DELETE",
        &format!("/v1/sessions/{second}"),
        Some(&bob),
        None,
    );
    assert_eq!(again.status, 503, "{}", again.text);
    assert!(
        again.text.contains("Read-only file system"),
        "{}",
        again.text
    );
    let listed = c.call("GET", "/v1/sessions", Some(&alice), None);
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert!(listed.text.contains(&first), "{}", listed.text);
    let feed = c.call("GET", "/v1/routes?after=0", Some(&svc), None);
    assert_eq!(feed.status, 200, "{}", feed.text);
    t.send_input(b"echo during-$((2+2))\r").unwrap();
    t.read_until("during-4", T)
        .expect("the open terminal keeps flowing while the store is read-only");

    fs.replace_with_repaired_copy();
    let writable = Instant::now();
    let made = wait_for("a create to succeed again", T, || {
        let a = c.call(
            "POST",
            "/v1/sessions",
            Some(&bob),
            Some(json!({"profile": "default"})),
        );
        (a.status == 201).then_some(a)
    });
    let recovered_after = writable.elapsed();
    let third = made.body["id"].as_str().unwrap().to_owned();
    for (token, id) in [(&alice, &first), (&bob, &second), (&bob, &third)] {
        assert_eq!(
            session(c, token, id)["state"],
            "running",
            "acknowledged session {id} is still there"
        );
    }
    let gone = c.call(
        "DELETE",
        &format!("/v1/sessions/{first}"),
        Some(&alice),
        None,
    );
    assert_eq!(gone.status, 204, "{}", gone.text);
    t.wait_closed(T)
        .expect("the ended session's terminal closes");
    eprintln!(
        "figures: filesystem read-only → write refused in {refused_after:?} (503 store_unavailable, Read-only file system); writable filesystem back → first successful create {recovered_after:?} after"
    );
}

/// A token of the stack's dev key with the given `exp` and `nbf`, as another issuer
/// with a skewed clock would send it.
fn skewed_token(control: &ControlStack, sub: &str, exp: u64, nbf: Option<u64>) -> String {
    let config = control.dir.load();
    let mut claims = json!({
        "sub": sub,
        "iat": now().min(exp).saturating_sub(60),
        "exp": exp,
        "iss": config.auth.issuer,
        "aud": config.auth.audience,
    });
    if let Some(nbf) = nbf {
        claims["nbf"] = json!(nbf);
    }
    config
        .signer()
        .expect("dev key")
        .sign_claims(&claims)
        .expect("sign")
}

#[test]
fn tokens_at_the_edges_of_the_leeway_are_accepted_inside_and_refused_outside_with_the_reason() {
    let stack = GatewayStack::start("");
    let c = &stack.control;
    let leeway = c.dir.load().auth.leeway_seconds;
    let alice = c.token("alice", false);
    let id = c.create(&alice)["id"].as_str().unwrap().to_owned();
    // Margins keep each case on its side of the edge for as long as the requests take:
    // time only moves forward, which makes "not yet valid" and "expired" tokens
    // drift in opposite directions.
    type Mint<'a> = dyn Fn() -> String + 'a;
    let cases: Vec<(&str, Box<Mint<'_>>, Option<&str>)> = vec![
        (
            "expired, within the leeway",
            Box::new(move || skewed_token(c, "alice", now() + 6 - leeway, None)),
            None,
        ),
        (
            "expired, just beyond the leeway",
            Box::new(move || skewed_token(c, "alice", now() - leeway - 1, None)),
            Some("expired"),
        ),
        (
            "not yet valid, within the leeway",
            Box::new(move || skewed_token(c, "alice", now() + 3600, Some(now() + leeway - 1))),
            None,
        ),
        (
            "not yet valid, just beyond the leeway",
            Box::new(move || skewed_token(c, "alice", now() + 3600, Some(now() + leeway + 6))),
            Some("not_yet_valid"),
        ),
    ];
    for (i, (what, mint, refused)) in cases.iter().enumerate() {
        let expect = |a: &e2e::stack::Answer, via: &str| match refused {
            None => assert_eq!(a.status, 200, "{what} via {via}: {}", a.text),
            Some(reason) => assert_eq!(
                (
                    a.status,
                    a.body["error"]["code"].as_str(),
                    a.body["error"]["message"].as_str()
                ),
                (
                    401,
                    Some("unauthenticated"),
                    Some(format!("token refused: {reason}").as_str())
                ),
                "{what} via {via}: {}",
                a.text
            ),
        };
        let gw = http("GET", &stack.url(0, "/api/sessions"), Some(&mint()), None).unwrap();
        expect(&gw, "the gateway");
        let direct = c.call("GET", "/v1/sessions", Some(&mint()), None);
        expect(&direct, "control");
        // The terminal, with the token as a browser's cookie. Not for a token already
        // past its `exp` (case 0): the gateway admits it, but its expiry sweep closes
        // terminals at `exp` itself, without the leeway (docs/reliability.md, Faults).
        if i == 0 {
            continue;
        }
        let token = mint();
        let signed_in = http(
            "POST",
            &stack.url(0, "/auth/session"),
            None,
            Some(&json!({"token": token})),
        )
        .unwrap();
        let origin = stack.origin(0);
        let opened = stack.open(
            0,
            &format!("/s/{id}/ws"),
            &[
                ("Cookie", &format!("termgate_session={token}")),
                ("Origin", &origin),
            ],
        );
        match refused {
            None => {
                assert_eq!(signed_in.status, 200, "{what}: {}", signed_in.text);
                let t = opened.unwrap_or_else(|e| panic!("{what}: {e}"));
                t.send_input(b"echo skew-$((5+5))\r").unwrap();
                t.read_until("skew-10", T).unwrap();
            }
            Some(_) => {
                assert_eq!(signed_in.status, 401, "{what}: {}", signed_in.text);
                let e = opened
                    .err()
                    .unwrap_or_else(|| panic!("{what}: the terminal opened"));
                assert_eq!(e.status(), Some(401), "{what}: {e}");
            }
        }
    }
}

//! The control service against a real Docker daemon, a real sled directory and the
//! real binary.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use e2e::stack::{docker, http, wait_for, ControlStack};
use serde_json::{json, Value};

fn inspect(id: &str) -> Value {
    let out = docker(&["inspect", id]);
    let v: Value = serde_json::from_str(&out).expect("inspect JSON");
    v[0].clone()
}

/// Session ids of the containers labelled with the stack's instance, in one docker call
/// (no race with a container vanishing between listing and inspecting).
fn container_sessions(stack: &ControlStack) -> HashSet<String> {
    labelled_states(stack)
        .into_iter()
        .map(|(session, _)| session)
        .collect()
}

fn container_of(stack: &ControlStack, session: &str) -> String {
    docker(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("label=termgate.instance={}", stack.instance),
        "--filter",
        &format!("label=termgate.session={session}"),
    ])
}

fn exec(container: &str, script: &str) -> (bool, String) {
    let o = e2e::stack::docker_output(
        std::process::Command::new("docker").args(["exec", container, "/bin/sh", "-c", script]),
    )
    .expect("docker exec");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn a_created_session_runs_in_a_hardened_container() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let s = stack.create(&alice);
    assert_eq!(s["state"], "running");
    assert_eq!(s["owner"], "alice");
    let id = s["id"].as_str().unwrap();
    assert_eq!(s["terminal_url"], format!("/s/{id}/"));
    assert!(
        s.get("container_id").is_none(),
        "the API must not expose container ids"
    );

    let c = container_of(&stack, id);
    let i = inspect(&c);
    let hc = &i["HostConfig"];
    assert_eq!(hc["CapDrop"], json!(["ALL"]));
    assert!(hc["CapAdd"].is_null() || hc["CapAdd"] == json!([]));
    assert_eq!(hc["SecurityOpt"], json!(["no-new-privileges:true"]));
    assert_eq!(hc["Privileged"], false);
    assert_eq!(hc["ReadonlyRootfs"], true);
    assert_eq!(hc["NetworkMode"], "none");
    assert_eq!(hc["Init"], true);
    assert_eq!(hc["PidsLimit"], 128);
    assert_eq!(hc["Memory"], 256 * 1024 * 1024);
    assert_eq!(hc["MemorySwap"], hc["Memory"]);
    assert_eq!(hc["NanoCpus"], 500_000_000);
    assert!(hc["Binds"].is_null(), "legacy Binds must not be used");
    // Explicitly: a cgroup v1 daemon defaults to the host's cgroup namespace.
    assert_eq!(hc["CgroupnsMode"], "private");
    assert_eq!(i["Config"]["User"], "1000:1000");
    assert_eq!(i["Config"]["Tty"], true);
    assert_eq!(i["Config"]["OpenStdin"], true);
    assert_eq!(i["Name"], format!("/termgate-{id}"));
    let labels = &i["Config"]["Labels"];
    assert_eq!(labels["termgate.managed"], "session");
    assert_eq!(labels["termgate.instance"], stack.instance.as_str());
    assert_eq!(labels["termgate.session"], id);
    assert_eq!(labels["termgate.owner"], "alice");
    let mounts = i["Mounts"].as_array().unwrap();
    assert!(mounts
        .iter()
        .all(|m| !m["Source"].as_str().unwrap_or("").contains("docker.sock")));
    assert!(
        mounts
            .iter()
            .any(|m| m["Type"] == "volume" && m["Destination"] == "/home/user"),
        "home volume: {mounts:?}"
    );

    let (_, status) = exec(&c, "grep -E '^(CapEff|NoNewPrivs)' /proc/1/status");
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    // As uid 0 (who could write a root-owned `/` on a writable root): only a
    // read-only mount refuses. The mount table says the same.
    let root_write = std::process::Command::new("docker")
        .args([
            "exec",
            "-u",
            "0",
            &c,
            "/bin/sh",
            "-c",
            "touch /root-write-test",
        ])
        .output()
        .expect("docker exec");
    assert!(
        !root_write.status.success(),
        "the root filesystem must refuse writes, even to uid 0"
    );
    assert!(
        String::from_utf8_lossy(&root_write.stderr).contains("Read-only file system"),
        "refused for being read-only: {}",
        String::from_utf8_lossy(&root_write.stderr)
    );
    let (_, mounts_table) = exec(&c, "cat /proc/self/mounts");
    let root = mounts_table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("/"))
        .unwrap_or_default();
    assert!(
        root.split_whitespace()
            .nth(3)
            .is_some_and(|o| o.split(',').any(|f| f == "ro")),
        "/ is mounted ro: {root}"
    );
    let (wrote_tmp, out) = exec(&c, "touch /tmp/ok && echo ok");
    assert!(wrote_tmp, "/tmp must be writable: {out}");
    let (found, _) = exec(
        &c,
        "ls /var/run/docker.sock || ls /run/docker.sock || ls /run/containerd",
    );
    assert!(!found, "no daemon socket may exist in a session");
}

#[test]
fn only_the_owner_sees_a_session_and_others_get_the_unknown_answer() {
    let stack = ControlStack::start("");
    let (alice, bob, admin) = (
        stack.token("alice", false),
        stack.token("bob", false),
        stack.token("root", true),
    );
    let s = stack.create(&alice);
    let id = s["id"].as_str().unwrap();

    let as_bob = stack.call("GET", &format!("/v1/sessions/{id}"), Some(&bob), None);
    let unknown = stack.call("GET", "/v1/sessions/aaaaaaaaaaaaaaaa", Some(&bob), None);
    assert_eq!(as_bob.status, 404);
    assert_eq!(
        as_bob.text, unknown.text,
        "non-owner and unknown must look the same"
    );
    let malformed = stack.call("GET", "/v1/sessions/..%2F..%2Fetc", Some(&bob), None);
    assert_eq!(malformed.status, 404);
    assert_eq!(malformed.text, unknown.text);

    assert_eq!(
        stack
            .call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None)
            .status,
        200
    );
    assert_eq!(
        stack
            .call("GET", &format!("/v1/sessions/{id}"), Some(&admin), None)
            .status,
        200
    );
    assert_eq!(
        stack.call("GET", "/v1/sessions", Some(&bob), None).body["sessions"],
        json!([])
    );
    assert_eq!(
        stack.call("GET", "/v1/sessions", Some(&alice), None).body["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        stack
            .call("GET", "/v1/sessions?owner=alice", Some(&admin), None)
            .body["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        stack
            .call("GET", "/v1/sessions?owner=alice", Some(&bob), None)
            .status,
        403
    );

    // Bob cannot end it either, and the answer is the same 404.
    let del = stack.call("DELETE", &format!("/v1/sessions/{id}"), Some(&bob), None);
    assert_eq!((del.status, del.text), (404, unknown.text.clone()));
    assert_eq!(
        stack
            .call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None)
            .status,
        204
    );
    assert_eq!(
        stack
            .call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None)
            .status,
        404
    );
    // 204 means decided: the container goes in the background, within its grace.
    let hist = wait_for("the end to be recorded", Duration::from_secs(10), || {
        let h = stack.call("GET", "/v1/history", Some(&alice), None).body;
        (h["sessions"][0]["id"] == id).then_some(h)
    });
    assert_eq!(hist["sessions"][0]["state"], "terminated");
    assert_eq!(hist["sessions"][0]["ended_by"], "alice");
    assert!(
        stack.containers().is_empty(),
        "the container must be gone once the end is recorded"
    );
}

#[test]
fn bad_requests_get_clear_errors() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let cases = [
        (
            json!({"profile": "default", "colour": "red"}),
            400,
            "invalid_json",
        ),
        (json!({"profile": "nope"}), 400, "unknown_profile"),
        (
            json!({"profile": "default", "options": {"shell": "zsh"}}),
            400,
            "invalid_option",
        ),
        (
            json!({"profile": "default", "options": {"editor": "vi"}}),
            400,
            "invalid_option",
        ),
        (
            json!({"profile": "default", "name": "a\u{0007}b"}),
            400,
            "invalid_name",
        ),
    ];
    for (body, status, code) in cases {
        let a = stack.call("POST", "/v1/sessions", Some(&alice), Some(body.clone()));
        assert_eq!(
            (a.status, a.body["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {}",
            a.text
        );
    }
    let big = json!({"profile": "default", "name": "x".repeat(100_000)});
    assert_eq!(
        stack
            .call("POST", "/v1/sessions", Some(&alice), Some(big))
            .status,
        413
    );
    let no_token = stack.call("GET", "/v1/sessions", None, None);
    assert_eq!(
        (no_token.status, no_token.body["error"]["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    let forged = stack.call("GET", "/v1/sessions", Some("a.b.c"), None);
    assert_eq!(forged.status, 401);
    assert!(forged.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("malformed"));
    assert_eq!(
        stack.call("GET", "/v1/routes", Some(&alice), None).status,
        401,
        "the feed needs the service token"
    );
    assert!(stack.containers().is_empty());
}

#[test]
fn sixteen_concurrent_creates_with_quota_three_make_exactly_three() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let url = format!("{}/v1/sessions", stack.api);
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| {
                    http(
                        "POST",
                        &url,
                        Some(&alice),
                        Some(&json!({"profile": "default"})),
                    )
                    .unwrap()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .map(|a| (a.status, a.body))
            .collect()
    });
    let created = answers.iter().filter(|(s, _)| *s == 201).count();
    let refused = answers
        .iter()
        .filter(|(s, b)| *s == 429 && b["error"]["code"] == "quota_exceeded")
        .count();
    assert_eq!((created, refused), (3, 13), "{answers:?}");
    assert_eq!(stack.containers().len(), 3);
}

#[test]
fn a_container_killed_from_outside_is_recorded_within_two_seconds_and_published() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let svc = stack.service_token();
    let s = stack.create(&alice);
    let id = s["id"].as_str().unwrap().to_owned();
    let rev = stack
        .call("GET", "/v1/routes?after=0", Some(&svc), None)
        .body["rev"]
        .as_u64()
        .unwrap();

    // Bystanders: an unlabelled container and one of another instance.
    let bystander = docker(&[
        "run",
        "-d",
        "--rm",
        "--entrypoint",
        "/bin/sleep",
        "termgate/session:dev",
        "120",
    ]);
    let foreign = docker(&[
        "run",
        "-d",
        "--rm",
        "--label",
        "termgate.managed=session",
        "--label",
        "termgate.instance=someone-else",
        "--label",
        "termgate.session=aaaaaaaaaaaaaaaa",
        "--entrypoint",
        "/bin/sleep",
        "termgate/session:dev",
        "120",
    ]);
    let _cleanup = Cleanup(vec![bystander.clone(), foreign.clone()]);

    docker(&["kill", &container_of(&stack, &id)]);
    let killed = Instant::now();
    let state = wait_for("the kill to be recorded", Duration::from_secs(2), || {
        let a = stack.call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None);
        let st = a.body["state"].as_str().unwrap_or("").to_owned();
        (st == "exited" || st == "gone").then_some(st)
    });
    eprintln!("kill recorded as {state} after {:?}", killed.elapsed());
    let feed = stack
        .call("GET", &format!("/v1/routes?after={rev}"), Some(&svc), None)
        .body;
    assert!(
        feed["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["op"] == "remove" && c["session"] == id.as_str()),
        "{feed}"
    );
    // Several passes later, the bystanders are untouched.
    std::thread::sleep(Duration::from_secs(4));
    for c in [&bystander, &foreign] {
        assert_eq!(
            inspect(c)["State"]["Running"],
            true,
            "reconciler touched a container that is not its own"
        );
    }
}

struct Cleanup(Vec<String>);
impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.0 {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f", c])
                .output();
        }
    }
}

#[test]
fn a_waiting_feed_poller_sees_a_create_and_a_delete_within_100ms() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let svc = stack.service_token();
    let rev = stack
        .call("GET", "/v1/routes?after=0", Some(&svc), None)
        .body["rev"]
        .as_u64()
        .unwrap();
    let feed_url = format!("{}/v1/routes", stack.api);

    // The poller long-polls from `rev` until it sees `op` for any session, and reports when.
    let poll_until = |from: u64, op: &'static str| {
        let (url, svc) = (feed_url.clone(), svc.clone());
        std::thread::spawn(move || {
            let mut after = from;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                assert!(
                    Instant::now() < deadline,
                    "the feed never showed a {op} change"
                );
                let page = http(
                    "GET",
                    &format!("{url}?after={after}&wait=10"),
                    Some(&svc),
                    None,
                )
                .unwrap()
                .body;
                let seen = Instant::now();
                if let Some(c) = page["changes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["op"] == op)
                {
                    return (seen, c.clone());
                }
                after = page["rev"].as_u64().unwrap();
            }
        })
    };
    let poller = poll_until(rev, "upsert");
    std::thread::sleep(Duration::from_millis(200));
    let s = stack.create(&alice);
    let acked = Instant::now();
    let (seen, change) = poller.join().unwrap();
    assert_eq!(change["route"]["session"], s["id"]);
    let lag = seen.saturating_duration_since(acked);
    assert!(
        lag <= Duration::from_millis(100),
        "create reached the poller {lag:?} after the 201"
    );

    let rev = stack
        .call("GET", "/v1/routes?after=0", Some(&svc), None)
        .body["rev"]
        .as_u64()
        .unwrap();
    let poller = poll_until(rev, "remove");
    std::thread::sleep(Duration::from_millis(200));
    let id = s["id"].as_str().unwrap();
    assert_eq!(
        stack
            .call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None)
            .status,
        204
    );
    let acked = Instant::now();
    let (seen, change) = poller.join().unwrap();
    assert_eq!(change["session"], id);
    let lag = seen.saturating_duration_since(acked);
    assert!(
        lag <= Duration::from_millis(100),
        "delete reached the poller {lag:?} after the 204"
    );
}

#[test]
fn a_lost_store_is_rebuilt_from_labels_with_owners() {
    let mut stack = ControlStack::start("");
    let (alice, bob) = (stack.token("alice", false), stack.token("bob", false));
    let a = stack.create(&alice)["id"].as_str().unwrap().to_owned();
    let b = stack.create(&bob)["id"].as_str().unwrap().to_owned();
    stack.kill9();
    std::fs::remove_dir_all(stack.dir.dir.path().join("store")).unwrap();
    stack.spawn(&[]);
    assert!(
        stack.log_text().contains("rebuilt from container labels"),
        "{}",
        stack.log_text()
    );
    let got = stack.call("GET", &format!("/v1/sessions/{a}"), Some(&alice), None);
    assert_eq!(
        (got.status, got.body["owner"].as_str()),
        (200, Some("alice"))
    );
    assert_eq!(got.body["state"], "running");
    assert_eq!(
        stack
            .call("GET", &format!("/v1/sessions/{b}"), Some(&alice), None)
            .status,
        404
    );
    assert_eq!(
        stack
            .call("GET", &format!("/v1/sessions/{b}"), Some(&bob), None)
            .body["owner"],
        "bob"
    );
    // Quota counts come back too: alice holds one of her three.
    let counts: usize = stack.call("GET", "/v1/sessions", Some(&alice), None).body["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(counts, 1);
}

#[test]
fn sigterm_stops_control_within_seconds_and_keeps_what_was_acknowledged() {
    let mut stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let id = stack.create(&alice)["id"].as_str().unwrap().to_owned();
    let (status, took) = stack.terminate();
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(5), "SIGTERM took {took:?}");
    stack.spawn(&[]);
    assert_eq!(
        stack
            .call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None)
            .body["state"],
        "running"
    );
}

#[test]
fn a_locked_user_can_neither_create_nor_list_and_the_lock_is_published() {
    let stack = ControlStack::start("");
    let (alice, admin, svc) = (
        stack.token("alice", false),
        stack.token("root", true),
        stack.service_token(),
    );
    assert_eq!(
        stack
            .call("POST", "/v1/users/alice/lock", Some(&alice), None)
            .status,
        403,
        "only admins lock"
    );
    assert_eq!(
        stack
            .call("POST", "/v1/users/alice/lock", Some(&admin), None)
            .status,
        204
    );
    let a = stack.call(
        "POST",
        "/v1/sessions",
        Some(&alice),
        Some(json!({"profile": "default"})),
    );
    assert_eq!(
        (a.status, a.body["error"]["code"].as_str()),
        (403, Some("user_locked"))
    );
    for path in ["/v1/sessions", "/v1/history"] {
        let l = stack.call("GET", path, Some(&alice), None);
        assert_eq!(
            (l.status, l.body["error"]["code"].as_str()),
            (403, Some("user_locked")),
            "a locked user cannot list {path}: {}",
            l.text
        );
    }
    let feed = stack
        .call("GET", "/v1/routes?after=0", Some(&svc), None)
        .body;
    assert!(
        feed["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["op"] == "lock" && c["sub"] == "alice"),
        "{feed}"
    );
    assert_eq!(
        stack
            .call("DELETE", "/v1/users/alice/lock", Some(&admin), None)
            .status,
        204
    );
    assert_eq!(
        stack
            .call(
                "POST",
                "/v1/sessions",
                Some(&alice),
                Some(json!({"profile": "default"}))
            )
            .status,
        201
    );
    let l = stack.call("GET", "/v1/sessions", Some(&alice), None);
    assert_eq!(
        (l.status, l.body["sessions"].as_array().map(Vec::len)),
        (200, Some(1)),
        "unlocked, alice lists again: {}",
        l.text
    );
}

#[test]
fn redraw_resizes_twice_so_the_program_repaints() {
    let extra = r#"
[profiles.winch]
image = "termgate/session:dev"
command = ["-c", "trap 'echo WINCH-MARK' WINCH; echo ready; while :; do sleep 0.05; done"]
"#;
    let stack = ControlStack::start(extra);
    let alice = stack.token("alice", false);
    let s = stack.call(
        "POST",
        "/v1/sessions",
        Some(&alice),
        Some(json!({"profile": "winch"})),
    );
    assert_eq!(s.status, 201, "{}", s.text);
    let id = s.body["id"].as_str().unwrap();
    let c = container_of(&stack, id);
    wait_for("the trap to be set", Duration::from_secs(5), || {
        docker(&["logs", &c]).contains("ready").then_some(())
    });
    let r = stack.call(
        "POST",
        &format!("/v1/sessions/{id}/redraw"),
        Some(&alice),
        Some(json!({"cols": 100, "rows": 30})),
    );
    assert_eq!(r.status, 204, "{}", r.text);
    let marks = wait_for("two WINCH marks", Duration::from_secs(5), || {
        let n = docker(&["logs", &c]).matches("WINCH-MARK").count();
        (n >= 2).then_some(n)
    });
    assert_eq!(marks, 2);
}

/// Creates sessions until one is acknowledged per user, crashing control at `failpoint`
/// on the way; after a restart and a reconcile pass, records and containers must agree.
fn crash_at(failpoint: &str, during_delete: bool) {
    let mut stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let kept = stack.create(&alice)["id"].as_str().unwrap().to_owned();
    let victim = if during_delete {
        Some(stack.create(&alice)["id"].as_str().unwrap().to_owned())
    } else {
        None
    };
    stack.kill9();
    stack.spawn(&[("TERMGATE_FAILPOINT", failpoint)]);
    let r = match &victim {
        Some(v) => http(
            "DELETE",
            &format!("{}/v1/sessions/{v}", stack.api),
            Some(&alice),
            None,
        ),
        None => http(
            "POST",
            &format!("{}/v1/sessions", stack.api),
            Some(&alice),
            Some(&json!({"profile": "default"})),
        ),
    };
    // A crash before the decision is durable leaves the caller without an answer; one
    // in the background stop may come after the 204 (the end was already decided).
    let acknowledged_ok = matches!(failpoint, "end:before_stop" | "delete:after_remove");
    assert!(
        r.is_err()
            || r.as_ref()
                .is_ok_and(|a| a.status >= 500 || (acknowledged_ok && a.status == 204)),
        "{failpoint}: control answered {r:?}"
    );
    stack.wait_exit(Duration::from_secs(10));
    // It crashed at the named point, and Docker is in that point's in-between state.
    assert!(
        stack
            .log_text()
            .contains(&format!("failpoint {failpoint}: aborting")),
        "{failpoint}: control did not stop at the failpoint:\n{}",
        stack.log_text()
    );
    let states: Vec<(String, String)> = labelled_states(&stack)
        .into_iter()
        .filter(|(id, _)| *id != kept)
        .collect();
    let expected: &[&str] = match failpoint {
        "create:after_record" | "delete:after_remove" => &[],
        "create:after_container" => &["created"],
        "create:after_start" | "delete:after_stopping" | "end:before_stop" => &["running"],
        other => panic!("no expectation for failpoint {other}"),
    };
    assert_eq!(
        states.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>(),
        expected,
        "{failpoint}: Docker's state at the crash"
    );
    stack.spawn(&[]);

    // After the grace periods and a pass: every container has a running record and
    // every running record has its container.
    wait_for(
        &format!("{failpoint}: records and containers to agree"),
        Duration::from_secs(20),
        || {
            let sessions = stack.call("GET", "/v1/sessions", Some(&alice), None).body["sessions"]
                .as_array()
                .unwrap()
                .clone();
            let running: HashSet<String> = sessions
                .iter()
                .filter(|s| s["state"] == "running")
                .map(|s| s["id"].as_str().unwrap().to_owned())
                .collect();
            let settled = sessions.iter().all(|s| s["state"] == "running");
            let labelled = container_sessions(&stack);
            (settled && running == labelled).then_some(())
        },
    );
    let got = stack.call("GET", &format!("/v1/sessions/{kept}"), Some(&alice), None);
    assert_eq!(
        got.body["state"], "running",
        "{failpoint}: an acknowledged session was lost"
    );
    if let Some(victim) = &victim {
        // The interrupted end was finished: ended as its owner asked, who and why kept
        // from the decision, container gone.
        let got = stack.call("GET", &format!("/v1/sessions/{victim}"), Some(&alice), None);
        assert_eq!(
            (
                got.body["state"].as_str(),
                got.body["ended_by"].as_str(),
                got.body["end_reason"].as_str()
            ),
            (
                Some("terminated"),
                Some("alice"),
                Some("ended by its owner")
            ),
            "{failpoint}: {}",
            got.text
        );
        assert!(
            container_of(&stack, victim).is_empty(),
            "{failpoint}: the ended session's container is still there"
        );
    }
    // Quota counts are right: alice can fill exactly up to her limit of three.
    let held = stack.call("GET", "/v1/sessions", Some(&alice), None).body["sessions"]
        .as_array()
        .unwrap()
        .len();
    for _ in held..3 {
        stack.create(&alice);
    }
    let over = stack.call(
        "POST",
        "/v1/sessions",
        Some(&alice),
        Some(json!({"profile": "default"})),
    );
    assert_eq!(
        over.status, 429,
        "{failpoint}: quota count drifted: {}",
        over.text
    );
}

#[test]
fn a_crash_after_recording_a_create_leaves_no_orphan_and_no_drift() {
    crash_at("create:after_record", false);
}

#[test]
fn a_crash_after_creating_the_container_leaves_no_orphan_and_no_drift() {
    crash_at("create:after_container", false);
}

#[test]
fn a_crash_after_starting_the_container_leaves_no_orphan_and_no_drift() {
    crash_at("create:after_start", false);
}

#[test]
fn a_crash_after_recording_stopping_finishes_the_end() {
    crash_at("delete:after_stopping", true);
}

#[test]
fn a_crash_after_removing_the_container_finishes_the_end() {
    crash_at("delete:after_remove", true);
}

#[test]
fn a_crash_between_the_decided_end_and_its_stop_finishes_the_end() {
    crash_at("end:before_stop", true);
}

#[test]
fn an_acknowledged_end_survives_kill_9_before_its_container_stops() {
    // The program ignores the hang-up and the grace is long: when control dies, the end
    // is acknowledged and recorded while the container still runs.
    let mut stack = ControlStack::start(&e2e::stack::profile_ignoring_hang_up("stubborn", 120));
    let alice = stack.token("alice", false);
    let kept = stack.create(&alice)["id"].as_str().unwrap().to_owned();
    let victim = stack.create_with(&alice, "stubborn")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let asked = Instant::now();
    let r = stack.call(
        "DELETE",
        &format!("/v1/sessions/{victim}"),
        Some(&alice),
        None,
    );
    let answered = asked.elapsed();
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(
        answered < Duration::from_secs(1),
        "answered after {answered:?}"
    );
    let s = stack
        .call("GET", &format!("/v1/sessions/{victim}"), Some(&alice), None)
        .body;
    assert_eq!(
        (s["state"].as_str(), s["ended_by"].as_str()),
        (Some("stopping"), Some("alice")),
        "{s}"
    );
    stack.kill9();
    assert_eq!(
        labelled_states(&stack)
            .into_iter()
            .filter(|(id, _)| *id == victim)
            .map(|(_, state)| state)
            .collect::<Vec<_>>(),
        ["running"],
        "the container outlived control"
    );

    // Restarted with a short grace, so the resumed stop ends by force within the test.
    stack.set_env("TERMGATE__PROFILES__STUBBORN__STOP_GRACE_SECONDS", "1");
    stack.spawn(&[]);
    let ended = wait_for(
        "the acknowledged end to be finished",
        Duration::from_secs(20),
        || {
            let got = stack
                .call("GET", &format!("/v1/sessions/{victim}"), Some(&alice), None)
                .body;
            (got["state"] == "terminated" && container_of(&stack, &victim).is_empty())
                .then_some(got)
        },
    );
    assert_eq!(
        (ended["ended_by"].as_str(), ended["end_reason"].as_str()),
        (Some("alice"), Some("ended by its owner")),
        "{ended}"
    );
    assert_eq!(
        container_sessions(&stack),
        HashSet::from([kept.clone()]),
        "no orphan: only the kept session's container is left"
    );
    // The quota was given back: alice holds one session and may make two more.
    stack.create(&alice);
    stack.create(&alice);
    let over = stack.call(
        "POST",
        "/v1/sessions",
        Some(&alice),
        Some(json!({"profile": "default"})),
    );
    assert_eq!(over.status, 429, "quota count drifted: {}", over.text);
}

#[test]
fn a_crash_between_an_idle_end_and_its_stop_finishes_it_with_who_and_why() {
    let mut stack = ControlStack::prepare("");
    stack.set_env("TERMGATE__PROFILES__DEFAULT__IDLE_TIMEOUT_SECONDS", "1");
    stack.set_env("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "100");
    // The culler's first end aborts control right after the decision.
    stack.spawn(&[("TERMGATE_FAILPOINT", "end:before_stop")]);
    let alice = stack.token("alice", false);
    let id = stack.create(&alice)["id"].as_str().unwrap().to_owned();
    stack.wait_exit(Duration::from_secs(20));
    assert!(
        stack
            .log_text()
            .contains("failpoint end:before_stop: aborting"),
        "control did not stop at the failpoint:\n{}",
        stack.log_text()
    );
    assert!(
        !container_of(&stack, &id).is_empty(),
        "the container outlived control"
    );
    stack.spawn(&[]);
    let ended = wait_for(
        "the idle end to be finished",
        Duration::from_secs(20),
        || {
            let got = stack
                .call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None)
                .body;
            (got["state"] == "terminated" && container_of(&stack, &id).is_empty()).then_some(got)
        },
    );
    assert_eq!(ended["ended_by"], "termgate", "{ended}");
    assert!(
        ended["end_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("idle: ")),
        "the reason decided before the crash is kept: {ended}"
    );
    assert!(container_sessions(&stack).is_empty(), "no orphan");
}

/// A small deterministic generator, so a failing storm can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

/// Users per storm, creates per user (= the per-user quota, so all may succeed).
const STORM_USERS: usize = 3;
const STORM_PER_USER: usize = 3;

/// What became of one storm's creates.
struct Storm {
    /// (user index, session id) of every create answered 201.
    acknowledged: Vec<(usize, String)>,
    /// Creates sent before the kill that never got an answer: in flight when it landed.
    in_flight_at_kill: usize,
    /// From the first request to the last answer.
    took: Duration,
}

/// Where in a storm the kill lands: once `acks` creates have been acknowledged, `then`
/// later.
struct KillPoint {
    acks: usize,
    then: Duration,
}

/// Fires the creates of a storm, the n-th `stagger * n` after the first (so that at any
/// moment some are answered and some in flight); with `kill`, SIGKILLs control at that
/// point.
fn storm(
    stack: &mut ControlStack,
    tokens: &[String],
    stagger: Duration,
    kill: Option<KillPoint>,
) -> Storm {
    let url = format!("{}/v1/sessions", stack.api);
    let started = Instant::now();
    let acks = std::sync::atomic::AtomicUsize::new(0);
    let mut killed_at = None;
    type Sent = (usize, Instant, Result<e2e::stack::Answer, String>);
    let answers: Vec<Sent> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..STORM_USERS * STORM_PER_USER)
            .map(|n| {
                let user = n % STORM_USERS;
                let (url, token, acks) = (url.clone(), tokens[user].clone(), &acks);
                let start_at = started + stagger * u32::try_from(n).unwrap_or(0);
                s.spawn(move || {
                    std::thread::sleep(start_at.saturating_duration_since(Instant::now()));
                    let sent = Instant::now();
                    let r = http(
                        "POST",
                        &url,
                        Some(&token),
                        Some(&json!({"profile": "default"})),
                    );
                    if r.as_ref().is_ok_and(|a| a.status == 201) {
                        acks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    (user, sent, r)
                })
            })
            .collect();
        if let Some(point) = kill {
            while acks.load(std::sync::atomic::Ordering::SeqCst) < point.acks
                && !handles.iter().all(|h| h.is_finished())
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(point.then);
            killed_at = Some(Instant::now());
            stack.kill9();
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = started.elapsed();
    let mut acknowledged = Vec::new();
    let mut in_flight_at_kill = 0;
    for (user, sent, r) in answers {
        match r {
            Ok(a) if a.status == 201 => {
                acknowledged.push((user, a.body["id"].as_str().unwrap().to_owned()))
            }
            // Fresh users within their quota: a create succeeds or fails in Docker; a
            // 429 would be a drifted count, a 409 a create abandoned under its feet.
            Ok(a) => assert!(
                a.status >= 500,
                "unexpected answer to a create: {} {}",
                a.status,
                a.text
            ),
            Err(_) => {
                if killed_at.is_some_and(|k| sent < k) {
                    in_flight_at_kill += 1;
                }
            }
        }
    }
    Storm {
        acknowledged,
        in_flight_at_kill,
        took,
    }
}

/// The instance's containers as (session label, state).
fn labelled_states(stack: &ControlStack) -> Vec<(String, String)> {
    docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=termgate.instance={}", stack.instance),
        "--format",
        "{{.Label \"termgate.session\"}} {{.State}}",
    ])
    .lines()
    .filter_map(|l| l.split_once(' '))
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect()
}

/// After a restart: waits until every record has settled (all `running`) and exactly
/// the running records have containers, all running; then checks every acknowledged
/// session, and that each user can fill exactly up to the quota (the counts are right).
fn check_after_restart(
    stack: &ControlStack,
    admin: &str,
    tokens: &[String],
    acknowledged: &[(usize, String)],
    point: &str,
) -> Vec<String> {
    let running = wait_for(
        &format!("{point}: records and containers to agree"),
        Duration::from_secs(30),
        || {
            let sessions = stack
                .call("GET", "/v1/sessions?all=true", Some(admin), None)
                .body["sessions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if !sessions.iter().all(|s| s["state"] == "running") {
                return None;
            }
            let running: HashSet<String> = sessions
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_owned())
                .collect();
            let containers = labelled_states(stack);
            let all_running = containers.iter().all(|(_, state)| state == "running");
            let labelled: HashSet<String> = containers.into_iter().map(|(id, _)| id).collect();
            (all_running && labelled == running).then_some(running)
        },
    );
    assert_still_running(stack, tokens, acknowledged, point);
    for (_, id) in acknowledged {
        assert!(
            running.contains(id),
            "{point}: acknowledged session {id} has no running container"
        );
    }
    // Quota counts equal the running records: concurrent creates fill each user's
    // quota exactly.
    let held: Vec<usize> = tokens
        .iter()
        .map(|t| {
            stack.call("GET", "/v1/sessions", Some(t), None).body["sessions"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .collect();
    let fill = http_storm(stack, tokens);
    for (user, statuses) in fill.iter().enumerate() {
        let made = statuses.iter().filter(|s| **s == 201).count();
        let refused = statuses.iter().filter(|s| **s == 429).count();
        assert_eq!(
            (made, refused),
            (STORM_PER_USER - held[user], held[user]),
            "{point}: user {user} held {} and got {statuses:?}: the quota count drifted",
            held[user]
        );
    }
    stack
        .call("GET", "/v1/sessions?all=true", Some(admin), None)
        .body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every acknowledged session is still `running`, as its owner sees it.
fn assert_still_running(
    stack: &ControlStack,
    tokens: &[String],
    acknowledged: &[(usize, String)],
    point: &str,
) {
    for (user, id) in acknowledged {
        let got = stack.call(
            "GET",
            &format!("/v1/sessions/{id}"),
            Some(&tokens[*user]),
            None,
        );
        assert_eq!(
            got.body["state"], "running",
            "{point}: acknowledged session {id} lost: {}",
            got.text
        );
    }
}

/// One create per quota slot per user, all at once; the statuses by user.
fn http_storm(stack: &ControlStack, tokens: &[String]) -> Vec<Vec<u16>> {
    let url = format!("{}/v1/sessions", stack.api);
    let mut by_user = vec![Vec::new(); tokens.len()];
    let answers: Vec<(usize, u16)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..tokens.len() * STORM_PER_USER)
            .map(|n| {
                let user = n % tokens.len();
                let (url, token) = (url.clone(), tokens[user].clone());
                s.spawn(move || {
                    let a = http(
                        "POST",
                        &url,
                        Some(&token),
                        Some(&json!({"profile": "default"})),
                    )
                    .expect("control answers");
                    (user, a.status)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (user, status) in answers {
        by_user[user].push(status);
    }
    by_user
}

/// Ends every listed session at once, as an admin, and checks each went.
fn end_all(stack: &ControlStack, admin: &str, ids: &[String]) {
    std::thread::scope(|s| {
        for id in ids {
            s.spawn(move || {
                let r = stack.call("DELETE", &format!("/v1/sessions/{id}"), Some(admin), None);
                assert_eq!(r.status, 204, "end {id}: {}", r.text);
            });
        }
    });
    // Each 204 is a decision; the containers go in the background, within their grace.
    wait_for(
        "every ended session's container to go",
        Duration::from_secs(20),
        || labelled_states(stack).is_empty().then_some(()),
    );
}

/// Kill -9 at 20 random points across storms of concurrent creates, each followed by a
/// restart, a full reconcile and the checks: every acknowledged session running with
/// its container, no container without a running record, quota counts exact.
fn kill_9_at_random_points_during_storms(creating_grace: &str) {
    const KILLS: usize = 20;
    let seed = std::env::var("TERMGATE_STORM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from_str_radix(&e2e::random_hex(8), 16).unwrap() | 1);
    eprintln!("storm seed {seed} (replay with TERMGATE_STORM_SEED={seed})");
    let mut rng = Rng(seed);
    let mut stack = ControlStack::prepare("");
    stack.set_env("TERMGATE__QUOTA__PER_USER", &STORM_PER_USER.to_string());
    stack.set_env("TERMGATE__QUOTA__GLOBAL", "1000");
    stack.set_env("TERMGATE__CONTROL__CREATING_GRACE_SECONDS", creating_grace);
    stack.spawn(&[]);
    let admin = stack.token("root", true);

    // How long an uninterrupted storm takes here: the kill points fall inside it.
    let tokens: Vec<String> = (0..STORM_USERS)
        .map(|u| stack.token(&format!("calib{u}"), false))
        .collect();
    let calibration = storm(&mut stack, &tokens, Duration::ZERO, None);
    assert_eq!(
        calibration.acknowledged.len(),
        STORM_USERS * STORM_PER_USER,
        "an uninterrupted storm makes every session"
    );
    // Even without a kill, nothing acknowledged may be taken back.
    assert_still_running(&stack, &tokens, &calibration.acknowledged, "no crash");
    let ids: Vec<String> = calibration
        .acknowledged
        .iter()
        .map(|(_, id)| id.clone())
        .collect();
    end_all(&stack, &admin, &ids);
    let creates = u32::try_from(STORM_USERS * STORM_PER_USER).unwrap_or(1);
    let stagger = calibration.took / creates;

    let mut mid_storm = 0;
    let mut acknowledged_total = 0;
    for k in 0..KILLS {
        let tokens: Vec<String> = (0..STORM_USERS)
            .map(|u| stack.token(&format!("k{k}u{u}"), false))
            .collect();
        // After a random number of acknowledgements (none to all but one), plus up to
        // one stagger: creates are answered, in flight and not yet sent around it.
        let acks = usize::try_from(rng.below(u64::from(creates - 1))).unwrap_or(0);
        let then = stagger.mul_f64(rng.below(1000) as f64 / 1000.0);
        let point = format!("seed {seed}, kill {k} after {acks} acks + {then:?}");
        let result = storm(&mut stack, &tokens, stagger, Some(KillPoint { acks, then }));
        if result.in_flight_at_kill > 0 {
            mid_storm += 1;
        }
        acknowledged_total += result.acknowledged.len();
        stack.spawn(&[]);
        let ids = check_after_restart(&stack, &admin, &tokens, &result.acknowledged, &point);
        end_all(&stack, &admin, &ids);
    }
    eprintln!(
        "{KILLS} kills, {mid_storm} with creates in flight, {acknowledged_total} creates acknowledged before their kill"
    );
    // The kills must have landed inside storms, or this proved nothing.
    assert!(
        mid_storm >= KILLS * 3 / 4,
        "seed {seed}: only {mid_storm} of {KILLS} kills hit creates in flight"
    );
}

#[test]
fn kill_9_at_random_points_during_storms_loses_no_acknowledged_session() {
    kill_9_at_random_points_during_storms("3");
}

#[test]
fn kill_9_during_storms_with_a_grace_shorter_than_docker_loses_nothing() {
    // A zero grace makes every `creating` record look abandoned at once; only sessions
    // really abandoned (by a dead process) may be ended.
    kill_9_at_random_points_during_storms("0");
}

#[test]
fn metrics_are_served_on_the_admin_listener() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    stack.create(&alice);
    let m = http("GET", &format!("{}/metrics", stack.admin), None, None)
        .unwrap()
        .text;
    // Values, not just names: each moves with what happened.
    let value = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
    };
    assert_eq!(value(&m, "termgate_control_sessions_active"), 1.0);
    // This machine's daemon filters syscalls (else control would have refused to start).
    assert_eq!(value(&m, "termgate_control_seccomp_enforced"), 1.0);
    assert_eq!(
        value(&m, "termgate_control_create_seconds_count{kind=\"total\"}"),
        1.0
    );
    let rev = value(&m, "termgate_control_feed_revision");
    assert!(rev >= 2.0, "creating and running are two revisions: {rev}");
    stack.create(&alice);
    let m2 = http("GET", &format!("{}/metrics", stack.admin), None, None)
        .unwrap()
        .text;
    assert_eq!(value(&m2, "termgate_control_sessions_active"), 2.0);
    assert_eq!(
        value(&m2, "termgate_control_create_seconds_count{kind=\"total\"}"),
        2.0
    );
    assert!(value(&m2, "termgate_control_feed_revision") >= rev + 2.0);
}

#[test]
fn a_chosen_option_reaches_the_container_and_home_and_borrowed_volumes_outlive_the_session() {
    let borrowed = format!("termgate-test-borrowed-{}", e2e::random_hex(4));
    docker(&["volume", "create", &borrowed]);
    struct DropVolume(String);
    impl Drop for DropVolume {
        fn drop(&mut self) {
            let _ = std::process::Command::new("docker")
                .args(["volume", "rm", "-f", &self.0])
                .output();
        }
    }
    let _guard = DropVolume(borrowed.clone());
    let extra = format!(
        "[profiles.data]\nimage = \"termgate/session:dev\"\nhome = \"/home/user\"\n[[profiles.data.mounts]]\nkind = \"volume\"\nsource = \"{borrowed}\"\ntarget = \"/data\"\nread_only = true\n[profiles.data.options.shell]\nenv = \"SESSION_SHELL\"\nvalues = [\"sh\", \"ash\"]\ndefault = \"sh\"\n"
    );
    let stack = ControlStack::start(&extra);
    let alice = stack.token("alice", false);
    let s = stack.call(
        "POST",
        "/v1/sessions",
        Some(&alice),
        Some(json!({"profile": "data", "options": {"shell": "ash"}})),
    );
    assert_eq!(s.status, 201, "{}", s.text);
    let id = s.body["id"].as_str().unwrap().to_owned();
    assert_eq!(s.body["options"]["shell"], "ash");
    let c = container_of(&stack, &id);
    let i = inspect(&c);
    assert!(
        i["Config"]["Env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "SESSION_SHELL=ash"),
        "{}",
        i["Config"]["Env"]
    );
    // The entrypoint script execs the chosen shell a moment after the container starts.
    let mut top = String::new();
    let started = Instant::now();
    while !top.contains("/bin/ash -l") && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        top = docker(&["top", &c]);
    }
    assert!(
        top.contains("/bin/ash -l"),
        "the entrypoint must have started ash:\n{top}"
    );
    let (wrote, _) = exec(
        &c,
        "echo persisted > /home/user/note && cat /home/user/note",
    );
    assert!(wrote, "the home volume is writable");
    let home = i["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Destination"] == "/home/user")
        .unwrap()["Name"]
        .as_str()
        .unwrap()
        .to_owned();

    assert_eq!(
        stack
            .call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None)
            .status,
        204
    );
    docker(&["volume", "inspect", &borrowed]);
    docker(&["volume", "inspect", &home]);
    // The next session of the same user finds the file in the same home volume.
    let s2 = stack.call(
        "POST",
        "/v1/sessions",
        Some(&alice),
        Some(json!({"profile": "data"})),
    );
    let c2 = container_of(&stack, s2.body["id"].as_str().unwrap());
    let (_, note) = exec(&c2, "cat /home/user/note");
    assert_eq!(note.trim(), "persisted");
}

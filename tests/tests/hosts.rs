//! Several Docker hosts (design §7): a second, real `dockerd` started by the test in
//! its own network namespace, with its own ttyd pool; sessions placed on both, the
//! terminals of each reached through the gateway by the right pool, and a host that
//! stops answering marks only its own sessions `unreachable` until it comes back.

use std::time::{Duration, Instant};

use e2e::daemon::{cannot_run, kill_container_program, link_exists, TestDaemon};
use e2e::stack::{wait_for, ControlStack, GatewayStack};
use e2e::ttyd::{CountingProxy, TtydPool};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

fn session(stack: &GatewayStack, token: &str, id: &str) -> Value {
    stack.control.session(token, id)
}

fn create(stack: &GatewayStack, token: &str) -> Value {
    stack.control.create(token)
}

#[test]
fn sessions_spread_over_two_hosts_and_a_silent_host_is_unreachable_until_it_answers() {
    if let Some(why) = cannot_run() {
        return e2e::skip_or_fail(&why);
    }
    assert!(
        link_exists("docker0"),
        "the machine's docker0 exists before"
    );
    let mut d2 = TestDaemon::start();
    d2.load_session_image();

    let mut control = ControlStack::prepare("");
    let ttyd1 = TtydPool::start_for(&control.instance);
    let counter1 = CountingProxy::start(ttyd1.target());
    let ttyd2 = TtydPool::start_for_docker(&control.instance, &d2.host);
    let counter2 = CountingProxy::start(ttyd2.target());
    let main_host = std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| h.starts_with("unix://"))
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let config = std::fs::read_to_string(control.dir.config_path()).expect("config");
    control.dir.write_config(&format!(
        "{config}\n[[docker.hosts]]\nname = \"main\"\nendpoint = \"{main_host}\"\nttyd_pool = [\"unix:{}\"]\ncapacity = 2\n\n[[docker.hosts]]\nname = \"second\"\nendpoint = \"{}\"\nttyd_pool = [\"unix:{}\"]\ncapacity = 2\n",
        counter1.socket_path().display(),
        d2.host,
        counter2.socket_path().display(),
    ));
    // Each host by its own endpoint, the daemons themselves (a dockgate per host is
    // deploy_up.rs's two-host test).
    control.unset_env("TERMGATE__CONTROL__DOCKER_HOST");
    control.spawn(&[]);
    let mut stack = GatewayStack::assemble(control, ttyd1, counter1);

    // Placement: equal free capacity goes to the first host, then the emptier one.
    let alice = stack.control.token("alice", false);
    let bob = stack.control.token("bob", false);
    let s1 = create(&stack, &alice);
    let s2 = create(&stack, &bob);
    assert_eq!(s1["host"], "main", "{s1}");
    assert_eq!(s2["host"], "second", "{s2}");
    let (id1, id2) = (s1["id"].as_str().unwrap(), s2["id"].as_str().unwrap());
    let carol = stack.control.token("carol", false);
    let erin = stack.control.token("erin", false);
    let s3 = create(&stack, &carol);
    let s4 = create(&stack, &erin);
    assert_eq!(
        (&s3["host"], &s4["host"]),
        (&"main".into(), &"second".into())
    );
    let (id3, id4) = (s3["id"].as_str().unwrap(), s4["id"].as_str().unwrap());
    let c4 = d2.containers(&format!("termgate.session={id4}"));
    assert_eq!(c4.len(), 1, "s4's container runs on the second daemon");
    let on_second = d2.containers(&format!("termgate.session={id2}"));
    assert_eq!(
        on_second.len(),
        1,
        "s2's container runs on the second daemon"
    );
    assert!(
        d2.containers(&format!("termgate.session={id1}")).is_empty(),
        "s1's does not"
    );
    let host_label = d2.docker(&[
        "inspect",
        "-f",
        "{{index .Config.Labels \"termgate.host\"}}",
        &on_second[0],
    ]);
    assert_eq!(String::from_utf8_lossy(&host_label.stdout).trim(), "second");
    assert_eq!(
        stack.control.containers().len(),
        2,
        "only s1's and s3's containers are on the machine's daemon"
    );

    // Each terminal through the gateway, each through its own host's pool.
    let alice_cookie = stack.sign_in("alice");
    let bob_cookie = stack.sign_in("bob");
    let t1 = stack
        .open_as(0, id1, &alice_cookie)
        .expect("alice opens s1");
    t1.send_input(b"echo one-$((40+2))\r").unwrap();
    t1.read_until("one-42", T).unwrap();
    assert!(stack.counter.connections() >= 1, "main's pool saw s1");
    assert_eq!(counter2.connections(), 0, "the second pool saw nothing yet");
    let before = stack.counter.connections();
    let t2 = stack.open_as(0, id2, &bob_cookie).expect("bob opens s2");
    t2.send_input(b"echo two-$((50+2))\r").unwrap();
    t2.read_until("two-52", T).unwrap();
    assert!(counter2.connections() >= 1, "the second pool saw s2");
    assert_eq!(
        stack.counter.connections(),
        before,
        "main's pool did not see s2"
    );
    drop(t2);

    // The second host stops answering: only its sessions become unreachable.
    let stopped = Instant::now();
    d2.stop();
    let stop_took = stopped.elapsed();
    wait_for("s2 and s4 to be unreachable", T, || {
        (session(&stack, &bob, id2)["state"] == "unreachable"
            && session(&stack, &erin, id4)["state"] == "unreachable")
            .then_some(())
    });
    let unreachable_after = stopped.elapsed();
    assert_eq!(session(&stack, &alice, id1)["state"], "running");
    assert_eq!(session(&stack, &carol, id3)["state"], "running");
    // s4's program dies while nobody can see it: when the host answers again, that
    // is what its session ends with.
    assert!(
        kill_container_program(&d2.namespace, &c4[0]),
        "s4's program found under its shim"
    );
    let refused = wait_for(
        "the gateway to refuse s2 with host_unavailable",
        T,
        || match stack.open_as(0, id2, &bob_cookie) {
            Err(e) if e.status() == Some(502) => Some(e),
            _ => None,
        },
    );
    assert_eq!(
        refused.json().unwrap()["error"]["code"],
        "host_unavailable",
        "{refused}"
    );
    let refused_after = stopped.elapsed();
    t1.send_input(b"echo still-$((60+2))\r").unwrap();
    t1.read_until("still-62", T)
        .expect("the first host's terminal keeps flowing");
    // Room on the first host: new sessions go there, never to the silent one.
    let gone = stack
        .control
        .call("DELETE", &format!("/v1/sessions/{id3}"), Some(&carol), None);
    assert_eq!(gone.status, 204, "{}", gone.text);
    // The end answers once decided; its container (and so its place on the host) goes
    // in the background, when its record leaves `stopping`.
    wait_for("s3's container to be gone", T, || {
        (session(&stack, &carol, id3)["state"] == "terminated").then_some(())
    });
    let frank = stack.control.token("frank", false);
    let s5 = create(&stack, &frank);
    assert_eq!(
        s5["host"], "main",
        "new sessions go to the host that answers"
    );
    let dave = stack.control.token("dave", false);
    let full = stack.control.call(
        "POST",
        "/v1/sessions",
        Some(&dave),
        Some(serde_json::json!({"profile": "default"})),
    );
    assert_eq!(full.status, 503, "{}", full.text);
    assert_eq!(full.body["error"]["code"], "no_host_available");
    assert_eq!(session(&stack, &bob, id2)["state"], "unreachable");

    // Control restarted while the host is silent: it starts, and keeps the session
    // unreachable rather than gone.
    stack.control.kill9();
    stack.control.spawn(&[]);
    assert_eq!(session(&stack, &bob, id2)["state"], "unreachable");
    assert_eq!(session(&stack, &alice, id1)["state"], "running");
    wait_for(
        "the gateway to refuse s2 after control's restart",
        T,
        || match stack.open_as(0, id2, &bob_cookie) {
            Err(e) if e.status() == Some(502) => Some(()),
            _ => None,
        },
    );

    // It answers again: its session is reconciled back to running and opens again.
    let restarted = Instant::now();
    d2.spawn();
    let daemon_up = restarted.elapsed();
    wait_for("s2 to run again", T, || {
        (session(&stack, &bob, id2)["state"] == "running").then_some(())
    });
    let running_after = restarted.elapsed();
    let ended = wait_for("s4 to end with what happened to it", T, || {
        let s = session(&stack, &erin, id4);
        (s["state"] == "exited").then_some(s)
    });
    assert_eq!(ended["ended_by"], "termgate", "{ended}");
    assert!(
        ended["end_reason"]
            .as_str()
            .is_some_and(|r| r.contains("while its host was unreachable")),
        "{ended}"
    );
    let seen = counter2.connections();
    let t2 = wait_for("s2's terminal to open again", T, || {
        stack.open_as(0, id2, &bob_cookie).ok()
    });
    t2.send_input(b"echo back-$((70+2))\r").unwrap();
    t2.read_until("back-72", T)
        .expect("the same container answers after the host came back");
    assert!(counter2.connections() > seen, "through the second pool");
    assert_eq!(session(&stack, &alice, id1)["state"], "running");
    drop(t2);
    drop(t1);

    // The store lost: control rebuilds it from the labels on each host, every session
    // on the host its container runs on.
    stack.control.kill9();
    std::fs::remove_dir_all(stack.control.dir.dir.path().join("store")).unwrap();
    stack.control.spawn(&[]);
    assert!(
        stack
            .control
            .log_text()
            .contains("rebuilt from container labels"),
        "{}",
        stack.control.log_text()
    );
    let s5_id = s5["id"].as_str().unwrap();
    for (token, id, host) in [
        (&alice, id1, "main"),
        (&bob, id2, "second"),
        (&frank, s5_id, "main"),
    ] {
        let s = wait_for("the rebuilt session to be running", T, || {
            let s = session(&stack, token, id);
            (s["state"] == "running").then_some(s)
        });
        assert_eq!(s["host"], host, "rebuilt on its host: {s}");
    }
    let t2 = wait_for("s2's terminal to open after the rebuild", T, || {
        stack.open_as(0, id2, &bob_cookie).ok()
    });
    t2.send_input(b"echo rebuilt-$((80+2))\r").unwrap();
    t2.read_until("rebuilt-82", T)
        .expect("the rebuilt route sends s2 to the second host's pool");
    drop(t2);

    eprintln!(
        "figures: second dockerd stop (SIGTERM) took {stop_took:?}; s2 unreachable in the API {unreachable_after:?} after the signal, refused by the gateway (502 host_unavailable) {refused_after:?} after; restarted daemon answered in {daemon_up:?}, s2 running again {running_after:?} after the restart began, s4 (killed meanwhile) ended exited"
    );

    drop(stack);
    drop(counter2);
    drop(ttyd2);
    drop(d2);
    assert!(
        link_exists("docker0"),
        "the machine's docker0 survives the second daemon"
    );
}

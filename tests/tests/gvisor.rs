//! A profile whose sessions run under gVisor (`profiles.<name>.runtime = "runsc"`):
//! a second Docker host whose daemon has `runsc` registered (a `dockerd` of the test's
//! own; the machine's daemon is never reconfigured), beside the machine's, which has
//! not. Real control, gateway, ttyd, runsc and session containers.

use std::time::Duration;

use e2e::daemon::{runsc_missing, TestDaemon};
use e2e::dockgate::Dockgate;
use e2e::stack::{ControlStack, GatewayStack};
use e2e::ttyd::{CountingProxy, TtydPool};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// Control and a gateway over two hosts: `main`, the machine's daemon (no runsc), and
/// `gv`, a daemon of the test's own with runsc; profile `gvisor` names the runtime.
struct Setup {
    stack: GatewayStack,
    /// gv's dockgate, which compares control's creates there with the configuration.
    gate: Dockgate,
    gv: TestDaemon,
    _gv_pool: (TtydPool, CountingProxy),
}

fn setup() -> Option<Setup> {
    if let Some(why) = runsc_missing() {
        e2e::skip_or_fail(&why);
        return None;
    }
    let gv = TestDaemon::start_with_runsc();
    gv.load_session_image();
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    let mut control = ControlStack::prepare(&format!(
        "\n[profiles.gvisor]\nimage = \"{image}\"\nruntime = \"runsc\"\ndescription = \"A shell under gVisor\"\n\n[profiles.plain]\nimage = \"{image}\"\nhosts = [\"main\"]\n\n[profiles.gvisor-rec]\nimage = \"{image}\"\nruntime = \"runsc\"\nrecord = true\nidle_timeout_seconds = 8\n\n[profiles.gvisor-tight]\nimage = \"{image}\"\nruntime = \"runsc\"\nmemory_mb = 64\npids_limit = 128\n\n[profiles.gvisor-ws]\nimage = \"{image}\"\nruntime = \"runsc\"\nhome = \"/home/user\"\nworkspace = \"choose\"\n"
    ));
    let main_pool = TtydPool::start_for(&control.instance);
    let main_counter = CountingProxy::start(main_pool.target());
    let gv_pool = TtydPool::start_for_docker(&control.instance, &gv.host);
    let gv_counter = CountingProxy::start(gv_pool.target());
    let main_host = std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| h.starts_with("unix://"))
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    // gv is reached through a dockgate of its own, as deploy/up runs one per host: the
    // runsc create passes it only because the configuration declares it.
    let mut gate = Dockgate::prepare_declared(
        &control.dir.config_path(),
        &["--host", "gv", "--daemon", &gv.host],
    );
    let config = std::fs::read_to_string(control.dir.config_path()).expect("config");
    control.dir.write_config(&format!(
        "{config}\n[[docker.hosts]]\nname = \"main\"\nendpoint = \"{main_host}\"\nttyd_pool = [\"unix:{}\"]\ncapacity = 10\n\n[[docker.hosts]]\nname = \"gv\"\nendpoint = \"{}\"\nttyd_pool = [\"unix:{}\"]\ncapacity = 10\n",
        main_counter.socket_path().display(),
        gate.docker_host("control"),
        gv_counter.socket_path().display(),
    ));
    control.unset_env("TERMGATE__CONTROL__DOCKER_HOST");
    gate.launch(&control.overrides());
    control.spawn(&[]);
    let stack = GatewayStack::assemble(control, main_pool, main_counter);
    Some(Setup {
        stack,
        gate,
        gv,
        _gv_pool: (gv_pool, gv_counter),
    })
}

#[test]
fn a_runsc_session_types_resizes_and_reattaches_to_its_shell_under_gvisors_kernel() {
    let Some(s) = setup() else { return };
    let alice = s.stack.control.token("alice", false);

    // The profile says what it runs under, to users and in each session.
    let profiles = s
        .stack
        .control
        .call("GET", "/v1/profiles", Some(&alice), None);
    let gvisor = profiles.body["profiles"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "gvisor"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(gvisor["runtime"], "runsc", "{}", profiles.text);
    let created = s.stack.control.create_with(&alice, "gvisor");
    assert_eq!(
        created["host"], "gv",
        "only the host with runsc takes it: {created}"
    );
    assert_eq!(created["runtime"], "runsc", "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let plain = s.stack.control.create(&alice);
    assert!(plain.get("runtime").is_none(), "{plain}");

    // Through gv's dockgate, which compared it with the configuration.
    let log = s.gate.log_text();
    assert!(!log.contains("not_declared"), "{log}");
    // The container runs under runsc on the host that has it.
    let cid = s.gv.containers(&format!("termgate.session={id}"));
    assert_eq!(cid.len(), 1, "its container is on gv");
    let runtime =
        s.gv.docker(&["inspect", "-f", "{{.HostConfig.Runtime}}", &cid[0]]);
    assert_eq!(String::from_utf8_lossy(&runtime.stdout).trim(), "runsc");

    // Its shell sees gVisor's kernel, not the host's.
    let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("the host's kernel release")
        .trim()
        .to_owned();
    let cookie = s.stack.sign_in("alice");
    let t = s.stack.open_as(0, &id, &cookie).expect("alice opens it");
    // Output, not the echo of what was typed: the arithmetic is done by the shell.
    t.send_input(b"echo kern-$((1+1))-$(uname -r)-$((3+4))-\r")
        .unwrap();
    let out = t.read_until("-7-\r", T).unwrap();
    let kernel = out
        .split("kern-2-")
        .nth(1)
        .and_then(|r| r.rsplit_once("-7-\r"))
        .map(|(release, _)| release.to_owned())
        .unwrap_or_default();
    assert!(!kernel.is_empty(), "{out}");
    assert_ne!(kernel, host_kernel, "the shell saw the host's kernel");
    t.clear_output();
    t.send_input(b"dmesg 2>&1 | head -3; echo dm-$((2+3))\r")
        .unwrap();
    let dmesg = t.read_until("dm-5", T).unwrap();
    assert!(
        dmesg.contains("gVisor"),
        "the sentry's log, not the host's: {dmesg}"
    );

    // A resize reaches the shell.
    t.resize(91, 33).unwrap();
    t.send_input(b"echo size=$(stty size)=\r").unwrap();
    t.read_until("size=33 91=", T).expect("the new size inside");

    // Detach and come back: the same shell.
    t.send_input(b"MARK=kept-$((6*7))\r").unwrap();
    t.send_input(b"echo set-$MARK\r").unwrap();
    t.read_until("set-kept-42", T).unwrap();
    drop(t);
    let again = s.stack.open_as(0, &id, &cookie).expect("alice reopens it");
    again.send_input(b"echo again-$MARK\r").unwrap();
    again
        .read_until("again-kept-42", T)
        .expect("the shell kept its variable");

    // End closes it first, and the container goes.
    let ended = s
        .stack
        .control
        .call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None);
    assert_eq!(ended.status, 204, "{}", ended.text);
    again
        .wait_closed(T)
        .expect("the terminal closes at the end");
    e2e::stack::wait_for("the runsc container to go", T, || {
        s.gv.containers(&format!("termgate.session={id}"))
            .is_empty()
            .then_some(())
    });
}

#[test]
fn a_runtime_no_usable_host_has_is_refused_at_start_naming_the_profile_and_host() {
    if let Some(why) = runsc_missing() {
        return e2e::skip_or_fail(&why);
    }
    // The machine's daemon has no runsc: a profile that needs it cannot start control.
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    let mut control = ControlStack::prepare(&format!(
        "\n[profiles.gvisor]\nimage = \"{image}\"\nruntime = \"runsc\"\n"
    ));
    let log = control.start_refused();
    assert!(
        log.contains("profiles.gvisor.runtime: Docker host local (has ")
            && log.contains("has no runtime \"runsc\""),
        "{log}"
    );
}

/// What a session's user tries to get out with, each a shell command that succeeds
/// only if the attempt worked.
const ESCAPES: &[(&str, &str)] = &[
    (
        "a capability",
        "! grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status",
    ),
    ("a kernel setting", "echo 1 > /proc/sys/kernel/sysrq"),
    ("a mount", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m"),
    (
        "the daemon socket",
        "test -e /var/run/docker.sock || test -e /run/docker.sock",
    ),
    // runc refuses the node itself (no CAP_MKNOD); gVisor makes it in its own
    // filesystem with no device behind it: what counts is reading the disk.
    (
        "a block device's bytes",
        "mknod /tmp/blk b 8 0 && head -c1 /tmp/blk >/dev/null",
    ),
    ("chroot", "chroot / true"),
    ("host namespaces", "nsenter -t 1 -m -u -n true"),
    ("root by su", "su -c true root </dev/null"),
    ("a network device", "ip link add d0 type dummy"),
    ("physical memory", "head -c1 /dev/mem >/dev/null"),
    ("pid 1's memory", "head -c1 /proc/1/mem >/dev/null"),
    ("a kernel module", "insmod /dev/null"),
    (
        "the host's kernel log",
        "test -e /dev/kmsg && head -c1 /dev/kmsg >/dev/null",
    ),
];

/// Runs every escape in `t`'s shell, one line each, and returns those that worked. The
/// answer is the shell's arithmetic, never the echo of the line typed.
fn escapes_that_work(t: &e2e::term::Terminal) -> Vec<&'static str> {
    let mut open = Vec::new();
    for (i, (name, cmd)) in ESCAPES.iter().enumerate() {
        t.clear_output();
        let line = format!(
            "if ( {cmd} ) 2>/dev/null; then echo P$(({i}+100))=open; else echo P$(({i}+100))=shut; fi\r"
        );
        t.send_input(line.as_bytes()).unwrap();
        let marker = format!("P{}=", i + 100);
        let out = t.read_until(&marker, T).expect("the probe ran");
        let rest = t
            .read_until(&format!("{marker}shut"), Duration::from_millis(1))
            .or_else(|_| t.read_until(&format!("{marker}open"), T))
            .unwrap_or(out);
        if rest.contains(&format!("{marker}open")) {
            open.push(*name);
        } else {
            assert!(
                rest.contains(&format!("{marker}shut")),
                "no answer for {name}: {rest}"
            );
        }
    }
    open
}

#[test]
fn the_escapes_refused_under_runc_are_refused_under_runsc() {
    let Some(s) = setup() else { return };
    let alice = s.stack.control.token("alice", false);
    let cookie = s.stack.sign_in("alice");
    let runc = s.stack.control.create_with(&alice, "plain");
    let runsc = s.stack.control.create_with(&alice, "gvisor");
    assert_eq!(
        (&runc["host"], &runsc["host"]),
        (&json!("main"), &json!("gv"))
    );
    for (what, session) in [("runc", &runc), ("runsc", &runsc)] {
        let id = session["id"].as_str().unwrap();
        let t = s.stack.open_as(0, id, &cookie).expect("alice opens it");
        let open = escapes_that_work(&t);
        assert!(open.is_empty(), "under {what}, these worked: {open:?}");
    }
}

#[test]
fn a_runsc_session_is_recorded_and_ended_when_idle() {
    let Some(mut s) = setup() else { return };
    // Input reaches control every 500 ms: the idle deadline follows the typing.
    s.stack.gateways.clear();
    s.stack
        .spawn_gateway(&[("TERMGATE__GATEWAY__ACTIVITY_REPORT_MS", "500")]);
    let alice = s.stack.control.token("alice", false);
    let created = s.stack.control.create_with(&alice, "gvisor-rec");
    assert_eq!(created["runtime"], "runsc", "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let t = s
        .stack
        .open_as(0, &id, &s.stack.sign_in("alice"))
        .expect("alice opens it");
    t.send_input(b"echo rec-$((3*3))\r").unwrap();
    t.read_until("rec-9", T).unwrap();
    drop(t);
    let recording = e2e::stack::wait_for("the recording", T, || {
        let a = s.stack.control.call(
            "GET",
            &format!("/v1/sessions/{id}/recordings"),
            Some(&alice),
            None,
        );
        a.body["recordings"][0]["name"].as_str().map(str::to_owned)
    });
    let cast = s.stack.control.call(
        "GET",
        &format!("/v1/sessions/{id}/recordings/{recording}"),
        Some(&alice),
        None,
    );
    assert_eq!(cast.status, 200, "{}", cast.text);
    let header: serde_json::Value =
        serde_json::from_str(cast.text.lines().next().unwrap_or_default()).expect("a header");
    assert_eq!(header["version"], 2, "an asciicast v2: {header}");
    assert!(
        cast.text.contains("rec-9"),
        "what the shell answered is in it"
    );

    // Nobody types: it ends at its idle deadline, as a runc session does.
    let ended = e2e::stack::wait_for("the idle end", Duration::from_secs(40), || {
        let a = s
            .stack
            .control
            .call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None);
        (a.body["state"] == "terminated").then_some(a.body)
    });
    let reason = ended["end_reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("idle: "), "{ended}");
    e2e::stack::wait_for("the runsc container to go", T, || {
        s.gv.containers(&format!("termgate.session={id}"))
            .is_empty()
            .then_some(())
    });
}

/// Where gVisor differs from runc: past its memory limit the whole sandbox is killed
/// (runc's out-of-memory killer takes only the greediest process, and the shell
/// lives), so the session ends `failed` with the out-of-memory reason; and each of the
/// user's processes is host tasks of the sandbox's own (on the systrap platform a stub
/// process and its threads), counted by `pids_limit` with the sentry's, so too many
/// processes end the sandbox rather than failing one fork.
#[test]
fn past_its_limits_a_runsc_session_ends_where_runc_would_refuse_one_process() {
    let Some(s) = setup() else { return };
    let alice = s.stack.control.token("alice", false);
    let cookie = s.stack.sign_in("alice");
    for (what, line) in [
        (
            "memory",
            &b"head -c 200m /dev/zero | tail >/dev/null; echo survived-$((1+1))\r"[..],
        ),
        (
            "processes",
            &b"for i in $(seq 1 60); do sleep 30 & done; echo survived-$((1+1))\r"[..],
        ),
    ] {
        let created = s.stack.control.create_with(&alice, "gvisor-tight");
        let id = created["id"].as_str().unwrap().to_owned();
        let t = s.stack.open_as(0, &id, &cookie).expect("alice opens it");
        t.send_input(b"echo up-$((2+2))\r").unwrap();
        t.read_until("up-4", T).unwrap();
        t.send_input(line).unwrap();
        t.wait_closed(T)
            .unwrap_or_else(|e| panic!("{what}: the terminal stays open: {e}"));
        assert!(
            !t.output_so_far().contains("survived-2"),
            "{what}: the shell lived on"
        );
        let ended = e2e::stack::wait_for("the session to end", T, || {
            let a = s
                .stack
                .control
                .call("GET", &format!("/v1/sessions/{id}"), Some(&alice), None);
            (!["creating", "running", "stopping", "unreachable"]
                .contains(&a.body["state"].as_str().unwrap_or_default()))
            .then_some(a.body)
        });
        if what == "memory" {
            assert_eq!(ended["state"], "failed", "{what}: {ended}");
            assert!(
                ended["end_reason"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("oom: "),
                "{what}: {ended}"
            );
        } else {
            assert_ne!(ended["state"], "running", "{what}: {ended}");
        }
    }
}

/// Runs `script` in a container on gv; its output, asserting success.
fn sh_on_gv(s: &Setup, session: &str, script: &str) -> String {
    let cid = s.gv.containers(&format!("termgate.session={session}"));
    assert_eq!(cid.len(), 1, "the session's container is on gv");
    let o = s.gv.docker(&["exec", &cid[0], "/bin/sh", "-c", script]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{script}: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn a_workspace_keeps_its_files_across_runsc_sessions_and_copies_there() {
    let Some(s) = setup() else { return };
    let c = &s.stack.control;
    let alice = c.token("alice", false);
    let made = c.call(
        "POST",
        "/v1/workspaces",
        Some(&alice),
        Some(json!({"name": "under-gvisor"})),
    );
    assert_eq!(made.status, 201, "{}", made.text);
    let ws = made.body["id"].as_str().unwrap().to_owned();
    let create = |workspace: &str| {
        let a = c.call(
            "POST",
            "/v1/sessions",
            Some(&alice),
            Some(json!({"profile": "gvisor-ws", "workspace": workspace})),
        );
        assert_eq!(a.status, 201, "{}\n{}", a.text, c.log_text());
        assert_eq!(a.body["host"], "gv", "{}", a.text);
        a.body["id"].as_str().unwrap().to_owned()
    };
    let end = |id: &str| {
        let a = c.call("DELETE", &format!("/v1/sessions/{id}"), Some(&alice), None);
        assert_eq!(a.status, 204, "{}", a.text);
        e2e::stack::wait_for("the container to go", T, || {
            s.gv.containers(&format!("termgate.session={id}"))
                .is_empty()
                .then_some(())
        });
    };
    let first = create(&ws);
    // Under gVisor's kernel, on the workspace's volume.
    assert_ne!(
        sh_on_gv(&s, &first, "uname -r").trim(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap()
            .trim()
    );
    sh_on_gv(
        &s,
        &first,
        "echo under-gvisor > /home/user/kept && mkdir -p /home/user/d && echo x > /home/user/d/y",
    );
    end(&first);
    let second = create(&ws);
    assert_eq!(
        sh_on_gv(&s, &second, "cat /home/user/kept"),
        "under-gvisor\n"
    );
    end(&second);
    // Its volume is on gv, labelled as termgate made it.
    let volume = format!("termgate-ws-{}-{ws}", c.instance);
    let o = s.gv.docker(&[
        "volume",
        "inspect",
        "-f",
        "{{index .Labels \"termgate.managed\"}}",
        &volume,
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "workspace");
    // A copy is made on gv too, and a runsc session reads it.
    let a = c.call(
        "POST",
        &format!("/v1/workspaces/{ws}/copy"),
        Some(&alice),
        Some(json!({"name": "copy"})),
    );
    assert_eq!(a.status, 202, "{}", a.text);
    let copy = a.body["id"].as_str().unwrap().to_owned();
    let done = e2e::stack::wait_for("the copy", Duration::from_secs(120), || {
        let w = c.call("GET", &format!("/v1/workspaces/{copy}"), Some(&alice), None);
        (w.body["state"] != "copying").then_some(w.body)
    });
    assert_eq!(done["state"], "ready", "{done}\n{}", c.log_text());
    let third = create(&copy);
    assert_eq!(
        sh_on_gv(&s, &third, "cat /home/user/kept /home/user/d/y"),
        "under-gvisor\nx\n"
    );
    end(&third);
    assert!(
        !s.gate.log_text().contains("not_declared"),
        "{}",
        s.gate.log_text()
    );
}

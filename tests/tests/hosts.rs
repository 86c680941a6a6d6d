//! Several Docker hosts (design §7): a second, real `dockerd` started by the test in
//! its own network namespace, with its own ttyd pool; sessions placed on both, the
//! terminals of each reached through the gateway by the right pool, and a host that
//! stops answering marks only its own sessions `unreachable` until it comes back.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::random_hex;
use e2e::stack::{wait_for, ControlStack, GatewayStack};
use e2e::ttyd::{private_dir, CountingProxy, TtydPool};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

/// Why this machine cannot run a second daemon, if it cannot.
fn cannot_run() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("a second dockerd needs root".into());
    }
    for tool in ["unshare", "dockerd", "ip"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    let netns = Command::new("unshare")
        .args(["--net", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    (!netns).then(|| "unshare --net is not permitted here".into())
}

/// Whether the network interface `name` exists in this (the host's) namespace.
fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A `dockerd` of the test's own: own socket, data and exec roots, pid file, containerd
/// namespaces and an empty config file (the machine's daemon.json sets data-root), in a
/// network namespace of its own (so it never touches the host's `docker0`), with live
/// restore so its containers outlive a stop. Everything it made goes when it is dropped,
/// also when the test fails: its containers, the process (only the pid started here),
/// its containerd, its mounts and directories.
struct SecondDaemon {
    dir: tempfile::TempDir,
    /// `unix://…` of its socket.
    host: String,
    namespace: String,
    child: Option<Child>,
}

impl SecondDaemon {
    fn start() -> SecondDaemon {
        // Short path: containerd's sockets live under the exec root.
        let dir = private_dir("tgd2.");
        std::fs::write(dir.path().join("daemon.json"), "{}").expect("daemon.json");
        let host = format!("unix://{}", dir.path().join("docker.sock").display());
        let mut d = SecondDaemon {
            dir,
            host,
            namespace: format!("tg2-{}", random_hex(4)),
            child: None,
        };
        d.spawn();
        d
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "the second daemon already runs");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("dockerd.log"))
            .expect("dockerd log");
        let p = |rel: &str| self.path(rel).display().to_string();
        // `unshare` execs dockerd: the pid of this child is the daemon's.
        let child = Command::new("unshare")
            .args(["--net", "--", "dockerd"])
            .args(["--host", &self.host])
            .args(["--data-root", &p("data"), "--exec-root", &p("x")])
            .args(["--pidfile", &p("docker.pid")])
            .args(["--config-file", &p("daemon.json")])
            .args(["--iptables=false", "--ip6tables=false", "--bridge", "none"])
            .args(["--storage-driver", "vfs", "--live-restore"])
            .args(["--containerd-namespace", &self.namespace])
            .args([
                "--containerd-plugins-namespace",
                &format!("{}-plugins", self.namespace),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn unshare dockerd");
        self.child = Some(child);
        let started = Instant::now();
        while !self.answers() {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("the second dockerd exited ({status}):\n{}", self.log());
            }
            assert!(
                started.elapsed() < T,
                "the second dockerd did not answer:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("dockerd.log")).unwrap_or_default()
    }

    fn answers(&self) -> bool {
        self.docker(&["version"]).status.success()
    }

    fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .args(["-H", &self.host])
            .args(args)
            .output()
            .expect("docker CLI")
    }

    /// `termgate/session:dev` from the machine's daemon (no registry).
    fn load_session_image(&self) {
        let image = std::env::var("TERMGATE_SESSION_IMAGE")
            .unwrap_or_else(|_| "termgate/session:dev".into());
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker save '{image}' | docker -H '{}' load",
                self.host
            ))
            .status()
            .expect("docker save | load");
        assert!(status.success(), "loading {image} into the second daemon");
    }

    /// Ids of the containers of the second daemon labelled with `label`.
    fn containers(&self, label: &str) -> Vec<String> {
        let o = self.docker(&[
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            &format!("label={label}"),
        ]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// SIGTERM to exactly the daemon this test started, and wait for it to exit; with
    /// live restore its containers keep running.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let started = Instant::now();
        loop {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            if started.elapsed() > T {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for SecondDaemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- second dockerd log ---\n{}", self.log());
        }
        // Containers go while the daemon runs (a stopped one is started for that).
        if self.child.is_none() {
            let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.spawn()));
            if spawned.is_err() {
                eprintln!("could not restart the second dockerd to remove its containers");
            }
        }
        let o = self.docker(&["ps", "-aq"]);
        let ids: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f", "-v"];
            args.extend(ids.iter().map(String::as_str));
            let _ = self.docker(&args);
        }
        self.stop();
        // Its own containerd, when the daemon left it behind.
        if let Ok(pid) = std::fs::read_to_string(self.path("x/containerd/containerd.pid")) {
            let pid = pid.trim();
            if !pid.is_empty()
                && Path::new(&format!("/proc/{pid}")).exists()
                && std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.contains(&self.dir.path().display().to_string()))
            {
                let _ = Command::new("kill").args(["-TERM", pid]).status();
            }
        }
        // Mounts the daemon left under its directory, deepest first.
        let root = self.dir.path().display().to_string();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
            .filter(|m| m.starts_with(&root))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
    }
}

/// Every process: (pid, parent pid, command line joined by spaces).
fn processes() -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let (Ok(stat), Ok(cmdline)) = (
            std::fs::read_to_string(entry.path().join("stat")),
            std::fs::read(entry.path().join("cmdline")),
        ) else {
            continue;
        };
        // The parent is the second field after the command name in parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let cmd = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        out.push((pid, ppid, cmd));
    }
    out
}

/// SIGKILLs the program of container `cid` (the child of its containerd shim) while
/// the second daemon is stopped, as if it died meanwhile. Whether it was found.
fn kill_container_program(namespace: &str, cid: &str) -> bool {
    let procs = processes();
    let shim = format!("-namespace {namespace} -id {cid}");
    let Some((shim_pid, _, _)) = procs
        .iter()
        .find(|(_, _, cmd)| cmd.contains("containerd-shim") && cmd.contains(&shim))
    else {
        return false;
    };
    let children: Vec<u32> = procs
        .iter()
        .filter(|(_, ppid, _)| ppid == shim_pid)
        .map(|(pid, _, _)| *pid)
        .collect();
    for pid in &children {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    !children.is_empty()
}

fn session(stack: &GatewayStack, token: &str, id: &str) -> Value {
    let a = stack
        .control
        .call("GET", &format!("/v1/sessions/{id}"), Some(token), None);
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

fn create(stack: &GatewayStack, token: &str) -> Value {
    stack.control.create(token)
}

#[test]
fn sessions_spread_over_two_hosts_and_a_silent_host_is_unreachable_until_it_answers() {
    if let Some(why) = cannot_run() {
        eprintln!("skipping: {why}");
        return;
    }
    assert!(
        link_exists("docker0"),
        "the machine's docker0 exists before"
    );
    let mut d2 = SecondDaemon::start();
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

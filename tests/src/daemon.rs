//! A `dockerd` of a test's own, for faults no test may cause on the machine's daemon
//! (stopping it, restarting it, losing a container's state): own socket, data and exec
//! roots, pid file, containerd namespace, an empty config file and its own network
//! namespace, so it never touches the host's `docker0`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::random_hex;
use crate::ttyd::private_dir;

const T: Duration = Duration::from_secs(30);

/// The `runtimes` entry docs/operators.md "Sessions under gVisor" gives an operator.
pub const RUNSC_DAEMON_JSON: &str = r#"{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=systrap", "--network=none"]}}}"#;

/// Why gVisor's `runsc` cannot run sessions here, if it cannot.
pub fn runsc_missing() -> Option<String> {
    if let Some(why) = cannot_run() {
        return Some(why);
    }
    if !Path::new("/usr/bin/runsc").exists() {
        return Some("gVisor's runsc is not installed (deploy/lib/prereqs.sh ensure_runsc)".into());
    }
    // `runsc flags` names the platforms this build has (Debian 12's has no systrap).
    let flags = Command::new("/usr/bin/runsc").arg("flags").output();
    let has_systrap = flags.is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout).contains("systrap")
            || String::from_utf8_lossy(&o.stderr).contains("systrap")
    });
    (!has_systrap).then(|| {
        "/usr/bin/runsc has no systrap platform (deploy/lib/prereqs.sh ensure_runsc installs one that has)"
            .into()
    })
}

/// Why this machine cannot run a second daemon, if it cannot.
pub fn cannot_run() -> Option<String> {
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
pub fn link_exists(name: &str) -> bool {
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
pub struct TestDaemon {
    dir: tempfile::TempDir,
    /// `unix://…` of its socket.
    pub host: String,
    /// Its containerd namespace (`--containerd-namespace`).
    pub namespace: String,
    child: Option<Child>,
    /// The network namespace it runs in (`ip netns`); `None`: one of its own.
    netns: Option<String>,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        Self::start_in(None)
    }

    /// Like [`TestDaemon::start`], in the named network namespace (another host of a
    /// test, [`crate::netns::Netns`]) rather than an unnamed one of its own.
    pub fn start_in(netns: Option<&str>) -> TestDaemon {
        Self::start_with(netns, "{}")
    }

    /// A daemon whose `daemon.json` also registers gVisor's `runsc` (the systrap
    /// platform, which needs no KVM), as docs/operators.md "Sessions under gVisor" tells an
    /// operator to.
    pub fn start_with_runsc() -> TestDaemon {
        Self::start_with(None, RUNSC_DAEMON_JSON)
    }

    /// [`TestDaemon::start_in`] with `daemon_json` as its configuration file.
    pub fn start_with(netns: Option<&str>, daemon_json: &str) -> TestDaemon {
        // Short path: containerd's sockets live under the exec root.
        let dir = private_dir("tgd.");
        std::fs::write(dir.path().join("daemon.json"), daemon_json).expect("daemon.json");
        let host = format!("unix://{}", dir.path().join("docker.sock").display());
        let mut d = TestDaemon {
            dir,
            host,
            namespace: format!("tgd-{}", random_hex(4)),
            child: None,
            netns: netns.map(str::to_owned),
        };
        d.spawn();
        d
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the test daemon already runs");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("dockerd.log"))
            .expect("dockerd log");
        let p = |rel: &str| self.path(rel).display().to_string();
        // `unshare` and `nsenter` exec dockerd: the pid of this child is the daemon's.
        // (`ip netns exec` would mount a sysfs of its own, hiding the cgroups.)
        let mut command = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/var/run/netns/{ns}"))
                    .args(["--", "dockerd"]);
                c
            }
            None => {
                let mut c = Command::new("unshare");
                c.args(["--net", "--", "dockerd"]);
                c
            }
        };
        let child = command
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
                panic!("the test dockerd exited ({status}):\n{}", self.log());
            }
            assert!(
                started.elapsed() < T,
                "the test dockerd did not answer:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("dockerd.log")).unwrap_or_default()
    }

    pub fn answers(&self) -> bool {
        self.docker(&["version"]).status.success()
    }

    pub fn docker(&self, args: &[&str]) -> Output {
        crate::stack::docker_output(Command::new("docker").args(["-H", &self.host]).args(args))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `termgate/session:dev` from the machine's daemon (no registry).
    pub fn load_session_image(&self) {
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
        assert!(status.success(), "loading {image} into the test daemon");
    }

    /// Ids of the containers of the test daemon labelled with `label`.
    pub fn containers(&self, label: &str) -> Vec<String> {
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

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Removes what the (stopped) daemon keeps of container `cid`, so that when it
    /// starts again it no longer knows that container: as if its state were lost.
    /// Its program should be killed first ([`kill_container_program`]).
    pub fn forget_container(&self, cid: &str) {
        assert!(self.child.is_none(), "the daemon must be stopped first");
        std::fs::remove_dir_all(self.path(&format!("data/containers/{cid}")))
            .expect("remove the container's state");
    }

    /// SIGTERM to exactly the daemon this test started, and wait for it to exit; with
    /// live restore its containers keep running.
    pub fn stop(&mut self) {
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

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- second dockerd log ---\n{}", self.log());
        }
        // Containers go while the daemon runs (a stopped one is started for that).
        if self.child.is_none() {
            let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.spawn()));
            if spawned.is_err() {
                eprintln!("could not restart the test dockerd to remove its containers");
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
        // Shims of containers the daemon no longer knows (a forgotten container):
        // exactly those of this daemon's containerd namespace.
        let shim = format!("-namespace {} ", self.namespace);
        for (pid, _, cmd) in processes() {
            if cmd.contains("containerd-shim") && cmd.contains(&shim) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
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
pub fn processes() -> Vec<(u32, u32, String)> {
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
/// the test daemon is stopped, as if it died meanwhile. Whether it was found.
pub fn kill_container_program(namespace: &str, cid: &str) -> bool {
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

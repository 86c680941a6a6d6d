//! The real `termgate-dockgate` in front of the machine's Docker daemon, as production
//! runs it: one per deployment and host, its two sockets in a private directory.
//!
//! Every stack of the harness reaches Docker through one (control through the control
//! socket, the pools of `TtydPool::start_for` through the attach socket), so every
//! suite runs through dockgate; `TERMGATE_TEST_DOCKGATE=0` goes to the daemon directly.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::binary;
use crate::ttyd::private_dir;

/// Whether the harness puts dockgate in front of Docker (default: yes).
pub fn enabled() -> bool {
    std::env::var("TERMGATE_TEST_DOCKGATE").map_or(true, |v| v != "0")
}

/// A running `termgate-dockgate --instance <i> --host local --dir <private dir>`;
/// stopped on drop.
pub struct Dockgate {
    dir: tempfile::TempDir,
    child: Option<Child>,
    log: PathBuf,
}

impl Dockgate {
    /// Starts dockgate for deployment `instance` in front of the environment's daemon
    /// and waits (10 s) until both sockets accept.
    pub fn start(instance: &str) -> Dockgate {
        Self::start_with(instance, &[])
    }

    /// Like [`Dockgate::start`] with extra arguments (e.g. `--attach-group`).
    pub fn start_with(instance: &str, extra: &[&str]) -> Dockgate {
        let dir = private_dir("tg-dg.");
        let log = dir.path().join("dockgate.log");
        let log_file = std::fs::File::create(&log).expect("dockgate log");
        let child = Command::new(binary("termgate-dockgate"))
            .args(["--instance", instance, "--host", "local", "--dir"])
            .arg(dir.path())
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .expect("spawn termgate-dockgate");
        let mut gate = Dockgate {
            dir,
            child: Some(child),
            log,
        };
        let start = Instant::now();
        let accepts = |p: PathBuf| std::os::unix::net::UnixStream::connect(p).is_ok();
        while !(accepts(gate.socket("attach")) && accepts(gate.socket("control"))) {
            if let Some(status) = gate
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "dockgate exited during start ({status}):\n{}",
                    gate.log_text()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "dockgate did not start:\n{}",
                gate.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        gate
    }

    /// `<dir>/local-<role>.sock` (`attach` or `control`).
    pub fn socket(&self, role: &str) -> PathBuf {
        self.dir.path().join(format!("local-{role}.sock"))
    }

    /// `unix://` URL of a role's socket, for `DOCKER_HOST`.
    pub fn docker_host(&self, role: &str) -> String {
        format!("unix://{}", self.socket(role).display())
    }

    /// The private directory of the sockets.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The log so far (every refusal is a line naming its rule).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dockgate {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A container create body as control writes it (control/src/docker/body.rs) for a
/// session of deployment `instance`, for requests written by hand.
pub fn session_create_body(instance: &str) -> Value {
    json!({
        "Image": std::env::var("TERMGATE_SESSION_IMAGE")
            .unwrap_or_else(|_| "termgate/session:dev".into()),
        "User": "1000:1000",
        "Tty": true,
        "OpenStdin": true,
        "StdinOnce": false,
        "AttachStdin": false,
        "AttachStdout": false,
        "AttachStderr": false,
        "Env": ["SESSION_SHELL=sh"],
        "Labels": {
            "termgate.managed": "session",
            "termgate.instance": instance,
            "termgate.session": "abcdefghijk234mn",
            "termgate.owner": "alice",
            "termgate.host": "local"
        },
        "HostConfig": {
            "Memory": 134_217_728,
            "NanoCpus": 500_000_000,
            "Init": true,
            "PidsLimit": 64,
            "MemorySwap": 134_217_728,
            "NetworkMode": "none",
            "AutoRemove": false,
            "CapAdd": [],
            "CapDrop": ["ALL"],
            "CgroupnsMode": "private",
            "IpcMode": "private",
            "PidMode": "private",
            "Privileged": false,
            "ReadonlyRootfs": true,
            "SecurityOpt": ["no-new-privileges:true"],
            "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=16m"},
            "UTSMode": "",
            "UsernsMode": ""
        }
    })
}

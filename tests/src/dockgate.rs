//! The real `termgate-dockgate` in front of the machine's Docker daemon, as production
//! runs it: one per deployment and host, its two sockets in a private directory.
//!
//! Every stack of the harness reaches Docker through one (control through the control
//! socket, the pools of `TtydPool::start_for` through the attach socket), so every
//! suite runs through dockgate; `TERMGATE_TEST_DOCKGATE=0` goes to the daemon directly.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::binary;
use crate::ttyd::private_dir;

/// Whether the harness puts dockgate in front of Docker (default: yes).
pub fn enabled() -> bool {
    std::env::var("TERMGATE_TEST_DOCKGATE").map_or(true, |v| v != "0")
}

/// A running `termgate-dockgate --host local --dir <private dir>` (another `--host`
/// when its arguments name one) with `--instance <i>` or `--config <file>`; stopped on
/// drop.
pub struct Dockgate {
    dir: tempfile::TempDir,
    child: Option<Child>,
    log: PathBuf,
    args: Vec<String>,
    /// The `TERMGATE__*` environment of the running process.
    env: Vec<(String, String)>,
}

impl Dockgate {
    /// Starts dockgate for deployment `instance` in front of the environment's daemon
    /// and waits (10 s) until both sockets accept. Without a configuration it passes no
    /// create: a gate for ttyd pools.
    pub fn start(instance: &str) -> Dockgate {
        Self::start_with(instance, &[])
    }

    /// Like [`Dockgate::start`] with extra arguments (e.g. `--attach-group`).
    pub fn start_with(instance: &str, extra: &[&str]) -> Dockgate {
        let mut args = vec!["--instance".to_owned(), instance.to_owned()];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let mut g = Self::prepare(args);
        g.launch(&[]);
        g
    }

    /// A dockgate comparing creates with `config` (read with the `TERMGATE__*`
    /// environment given to [`Dockgate::launch`]), not started yet: its sockets' paths
    /// are known before control's configuration names them.
    pub fn prepare_declared(config: &Path, extra: &[&str]) -> Dockgate {
        let mut args = vec!["--config".to_owned(), config.display().to_string()];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        Self::prepare(args)
    }

    fn prepare(args: Vec<String>) -> Dockgate {
        let dir = private_dir("tg-dg.");
        let log = dir.path().join("dockgate.log");
        Dockgate {
            dir,
            child: None,
            log,
            args,
            env: Vec::new(),
        }
    }

    /// Starts it (again, when `env` differs from the running process's) with `env` and
    /// waits (10 s) until both sockets accept.
    pub fn launch(&mut self, env: &[(String, String)]) {
        let mut env: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| k.starts_with("TERMGATE__"))
            .cloned()
            .collect();
        env.sort();
        let running = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if running && env == self.env {
            return;
        }
        self.stop();
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("dockgate log");
        for role in ["attach", "control"] {
            let _ = std::fs::remove_file(self.socket(role));
        }
        let mut cmd = Command::new(binary("termgate-dockgate"));
        if !self.args.iter().any(|a| a == "--host") {
            cmd.args(["--host", "local"]);
        }
        cmd.arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("spawn termgate-dockgate"));
        self.env = env;
        let start = Instant::now();
        let accepts = |p: PathBuf| std::os::unix::net::UnixStream::connect(p).is_ok();
        while !(accepts(self.socket("attach")) && accepts(self.socket("control"))) {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "dockgate exited during start ({status}):\n{}",
                    self.log_text()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "dockgate did not start:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends it `SIGHUP` (it reads its configuration again).
    pub fn hang_up(&self) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args(["-HUP", &c.id().to_string()])
                .status();
        }
    }

    /// `<dir>/<host>-<role>.sock` (`attach` or `control`; the host `local` unless its
    /// arguments name another).
    pub fn socket(&self, role: &str) -> PathBuf {
        let host = self
            .args
            .iter()
            .position(|a| a == "--host")
            .and_then(|i| self.args.get(i + 1))
            .map_or("local", String::as_str);
        self.dir.path().join(format!("{host}-{role}.sock"))
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
        self.stop();
    }
}

/// A dockgate comparing creates with a configuration of its own (the example, `extra`
/// TOML appended, instance `instance`), and that configuration as the binaries read it.
pub struct DeclaredGate {
    /// The configuration's directory.
    pub dir: crate::ConfigDir,
    /// The gate.
    pub gate: Dockgate,
    /// The `TERMGATE__*` overrides it runs with.
    pub env: Vec<(String, String)>,
}

impl DeclaredGate {
    /// Starts dockgate with `--config` on the example configuration plus `extra`.
    pub fn start(instance: &str, extra: &str) -> DeclaredGate {
        Self::start_with(instance, extra, &[])
    }

    /// Like [`DeclaredGate::start`], with more arguments for dockgate (its TLS
    /// listeners, another `--daemon`).
    pub fn start_with(instance: &str, extra: &str, args: &[&str]) -> DeclaredGate {
        let dir = crate::ConfigDir::example(extra);
        let env = vec![
            ("TERMGATE__INSTANCE".to_owned(), instance.to_owned()),
            (
                "TERMGATE__PROFILES__DEFAULT__IMAGE".to_owned(),
                std::env::var("TERMGATE_SESSION_IMAGE")
                    .unwrap_or_else(|_| "termgate/session:dev".into()),
            ),
        ];
        let mut gate = Dockgate::prepare_declared(&dir.config_path(), args);
        gate.launch(&env);
        DeclaredGate { dir, gate, env }
    }

    /// The configuration now, read with the gate's overrides.
    pub fn config(&self) -> config::Config {
        let text = std::fs::read_to_string(self.dir.config_path()).expect("config");
        config::load_from_str(&text, self.dir.dir.path(), self.env.clone())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The create body control sends for session `session` of `owner` on profile
    /// `profile` (its options' defaults), and the container's name.
    pub fn session_body(&self, profile: &str, session: &str, owner: &str) -> (String, Value) {
        let c = self.config();
        let p = c
            .profiles
            .get(profile)
            .expect("a profile of the configuration");
        // The home workspace, as control mounts it when the user chooses none.
        let sub = policy::Sub::parse(owner).expect("a sub");
        let home = policy::declared::home_volume_name(&c.instance, &sub);
        let workspace =
            (p.workspace_mode() != policy::declared::WorkspaceMode::None).then_some(home.as_str());
        self.session_body_in(profile, session, owner, workspace)
    }

    /// Like [`DeclaredGate::session_body`], the session mounting the volume `workspace`
    /// (`Some("")`: an ephemeral one; `None`: none).
    pub fn session_body_in(
        &self,
        profile: &str,
        session: &str,
        owner: &str,
        workspace: Option<&str>,
    ) -> (String, Value) {
        self.session_body_with(profile, session, owner, workspace, &Default::default())
    }

    /// Like [`DeclaredGate::session_body_in`], the session also mounting the registered
    /// secrets `secrets` (name → file), as control mounts those granted to its owner.
    pub fn session_body_with(
        &self,
        profile: &str,
        session: &str,
        owner: &str,
        workspace: Option<&str>,
        secrets: &policy::declared::SessionSecrets,
    ) -> (String, Value) {
        let c = self.config();
        let p = c
            .profiles
            .get(profile)
            .expect("a profile of the configuration");
        let options: std::collections::BTreeMap<String, String> = p
            .options
            .iter()
            .map(|(k, o)| (k.clone(), o.default.clone()))
            .collect();
        let id = policy::SessionId::parse(session).expect("a session id");
        let owner = policy::Sub::parse(owner).expect("a sub");
        let body = policy::declared::session_body(
            &p.declared(),
            &policy::declared::SessionFacts {
                instance: &c.instance,
                host: "local",
                session: &id,
                owner: &owner,
                profile,
                name: "dockgate test",
                created: 1_700_000_000,
                options: &options,
                workspace,
                workspace_read_only: false,
            },
            secrets,
        )
        .expect("a declared body");
        (policy::declared::container_name(&id), body)
    }

    /// The create body of `owner`'s workspace `id` (a session id's form), and the
    /// volume's name.
    pub fn workspace_body(&self, owner: &str, id: &str) -> (String, Value) {
        let c = self.config();
        let owner = policy::Sub::parse(owner).expect("a sub");
        let id = policy::SessionId::parse(id).expect("a workspace id");
        (
            policy::declared::workspace_volume_name(&c.instance, &id),
            policy::declared::workspace_volume_body(&c.instance, &owner, &id),
        )
    }

    /// The create body of `owner`'s job on `profile` that copies the volume `source`
    /// into the volume `dest`, and the job's container name.
    pub fn copy_body(
        &self,
        profile: &str,
        owner: &str,
        source: &str,
        dest: &str,
    ) -> (String, Value) {
        let c = self.config();
        let p = c
            .profiles
            .get(profile)
            .expect("a profile of the configuration");
        let owner = policy::Sub::parse(owner).expect("a sub");
        let body = policy::declared::copy_job_body(
            &p.declared(),
            &policy::declared::CopyFacts {
                instance: &c.instance,
                host: "local",
                owner: &owner,
                profile,
                source,
                dest,
            },
        )
        .expect("a declared copy job");
        (policy::declared::copy_job_name(dest), body)
    }

    /// The home volume create body of `owner`, and the volume's name.
    pub fn home_body(&self, owner: &str) -> (String, Value) {
        let c = self.config();
        let owner = policy::Sub::parse(owner).expect("a sub");
        (
            policy::declared::home_volume_name(&c.instance, &owner),
            policy::declared::home_volume_body(&c.instance, &owner),
        )
    }
}

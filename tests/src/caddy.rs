//! A real Caddy (the Debian package) running the repository's `deploy/caddy/Caddyfile`
//! unchanged, its addresses given by the environment the file reads, so the tests
//! prove the file the docs ship.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The shipped Caddyfile.
pub fn caddyfile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/caddy/Caddyfile")
}

/// The caddy executable: `$TERMGATE_CADDY`, else `/usr/bin/caddy`, else `caddy` on PATH.
pub fn caddy_binary() -> PathBuf {
    crate::system_binary("TERMGATE_CADDY", "/usr/bin/caddy", "caddy")
}

/// A running Caddy; killed on drop.
pub struct Caddy {
    _dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Caddy {
    /// Runs the shipped Caddyfile on `http://127.0.0.1:<port>`, checking with control's
    /// API at `check` (`host:port`) and sending everything else to `page`, and waits
    /// (10 s) until the port accepts.
    pub fn start(port: u16, check: &str, page: &str) -> Caddy {
        let dir = tempfile::Builder::new()
            .prefix("tg-caddy.")
            .tempdir()
            .expect("caddy dir");
        let log = dir.path().join("caddy.log");
        let log_file = std::fs::File::create(&log).expect("caddy log");
        let child = Command::new(caddy_binary())
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(caddyfile())
            .env("TERMGATE_SITE", format!("http://127.0.0.1:{port}"))
            .env("TERMGATE_CHECK", check)
            .env("TERMGATE_PAGE", page)
            // Caddy keeps its autosaved config and storage under these.
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}); deploy/lib/prereqs.sh ensure_caddy installs it",
                    caddy_binary().display()
                )
            });
        let mut c = Caddy {
            _dir: dir,
            child: Some(child),
            port,
            log,
        };
        c.wait_accepting();
        c
    }

    fn wait_accepting(&mut self) {
        if let Some(child) = self.child.as_mut() {
            crate::wait_accepting(child, "caddy", self.port, &self.log);
        }
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`: the origin users reach this Caddy at.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What Caddy logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Caddy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

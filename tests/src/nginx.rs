//! A real nginx (the Debian package) as an unprivileged-style foreground process: its
//! own prefix directory, its own configuration, `daemon off`, errors to a log file.
//!
//! [`Nginx::authz`] runs the repository's `deploy/nginx/termgate-authz.conf` with only
//! its two addresses replaced, so the tests prove the snippet that the docs ship.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shipped nginx snippet for `GET /v1/authz`.
pub const AUTHZ_SNIPPET: &str = include_str!("../../deploy/nginx/termgate-authz.conf");
/// The snippet's address of control, replaced by the test's.
pub const SNIPPET_CONTROL: &str = "server 127.0.0.1:7680;";
/// The snippet's listening address, replaced by the test's.
pub const SNIPPET_LISTEN: &str = "listen 127.0.0.1:8080;";

/// The nginx executable: `$TERMGATE_NGINX`, else `/usr/sbin/nginx`, else `nginx` on PATH.
pub fn nginx_binary() -> PathBuf {
    crate::system_binary("TERMGATE_NGINX", "/usr/sbin/nginx", "nginx")
}

/// A running nginx; stopped (SIGQUIT, then SIGKILL) on drop.
pub struct Nginx {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Nginx {
    /// Starts nginx with `site` (text for its `http { }` block) listening on `port`,
    /// `workers` worker processes, and waits (10 s) until the port accepts.
    pub fn start(site: &str, port: u16, workers: usize) -> Nginx {
        let dir = tempfile::Builder::new()
            .prefix("tg-nginx.")
            .tempdir()
            .expect("nginx dir");
        let d = dir.path();
        for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi", "logs"] {
            std::fs::create_dir_all(d.join(sub)).expect("nginx temp dir");
        }
        let nofile = crate::raw::raise_nofile();
        // As root, nginx would hand its workers to `nobody`, which cannot reach the
        // private ttyd socket; workers keep the test's own user instead.
        // SAFETY: geteuid has no preconditions.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user root;"
        } else {
            ""
        };
        let connections = nofile.saturating_sub(64).clamp(1024, 65_536);
        let conf = format!(
            "daemon off;\nmaster_process on;\nworker_processes {workers};\n{user}\n\
             pid {d}/nginx.pid;\nerror_log stderr warn;\nworker_rlimit_nofile {nofile};\n\
             events {{ worker_connections {connections}; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n\
             proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             include {d}/site.conf;\n}}\n",
            d = d.display(),
        );
        std::fs::write(d.join("nginx.conf"), conf).expect("nginx.conf");
        std::fs::write(d.join("site.conf"), site).expect("site.conf");
        let log = d.join("nginx.log");
        let log_file = std::fs::File::create(&log).expect("nginx log");
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(d)
            .arg("-e")
            .arg("stderr")
            .arg("-c")
            .arg(d.join("nginx.conf"))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}); deploy/lib/prereqs.sh ensure_nginx installs it",
                    nginx_binary().display()
                )
            });
        let mut n = Nginx {
            dir,
            child: Some(child),
            port,
            log,
        };
        n.wait_accepting();
        n
    }

    /// Runs the shipped `deploy/nginx/termgate-authz.conf` on `port`, checking with the
    /// control API at `control` (`host:port`).
    pub fn authz(port: u16, control: &str) -> Nginx {
        assert!(
            AUTHZ_SNIPPET.contains(SNIPPET_CONTROL) && AUTHZ_SNIPPET.contains(SNIPPET_LISTEN),
            "the snippet's addresses changed: update tests/src/nginx.rs"
        );
        let site = AUTHZ_SNIPPET
            .replace(SNIPPET_CONTROL, &format!("server {control};"))
            .replace(SNIPPET_LISTEN, &format!("listen 127.0.0.1:{port};"));
        Nginx::start(&site, port, 2)
    }

    fn wait_accepting(&mut self) {
        if let Some(child) = self.child.as_mut() {
            crate::wait_accepting(child, "nginx", self.port, &self.log);
        }
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`: the origin users reach this nginx at.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The prefix directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What nginx wrote to its error log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The master and its workers (children of the master), for memory figures.
    pub fn pids(&self) -> Vec<u32> {
        let Some(master) = self.child.as_ref().map(Child::id) else {
            return Vec::new();
        };
        let mut pids = vec![master];
        let children = format!("/proc/{master}/task/{master}/children");
        if let Ok(text) = std::fs::read_to_string(children) {
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
        pids
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // A SIGKILLed master would leave its workers behind: ask it to stop them.
        let pid = libc::pid_t::try_from(child.id()).unwrap_or(0);
        // SAFETY: kill only sends a signal to the nginx master this value started.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

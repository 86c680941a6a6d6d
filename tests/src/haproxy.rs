//! A real HAProxy (the Debian package) as a foreground process of the test's own
//! (`-f <config> -db`), logging to a file.
//!
//! [`Haproxy::authz`] runs the repository's `deploy/haproxy/haproxy.cfg` with only its
//! marked addresses replaced, loading `deploy/haproxy/termgate-authz.lua` where it is,
//! so the tests prove the files that the docs ship.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shipped HAProxy configuration.
pub const CONFIG: &str = include_str!("../../deploy/haproxy/haproxy.cfg");
/// The configuration's place of the Lua check, replaced by the repository's file.
pub const CONFIG_LUA: &str = "lua-load /etc/haproxy/termgate-authz.lua";
/// The configuration's listening address, replaced by the test's.
pub const CONFIG_LISTEN: &str = "bind 127.0.0.1:8080";
/// The configuration's address of control (the action's argument), replaced.
pub const CONFIG_CONTROL: &str = "lua.termgate_authz http://127.0.0.1:7680";
/// The configuration's ttyd pool socket (its backend and the answer naming it).
pub const CONFIG_POOL: &str = "/run/termgate/ttyd.sock";
/// The configuration's gateway (page, sign-in, API), replaced by the test's.
pub const CONFIG_PAGE: &str = "server gateway 127.0.0.1:8081";

/// The shipped Lua check.
pub fn lua_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/haproxy/termgate-authz.lua")
}

/// The haproxy executable: `$TERMGATE_HAPROXY`, else `/usr/sbin/haproxy`, else
/// `haproxy` on PATH.
pub fn haproxy_binary() -> PathBuf {
    crate::system_binary("TERMGATE_HAPROXY", "/usr/sbin/haproxy", "haproxy")
}

/// Why HAProxy cannot run the shipped files here (missing, too old, or without Lua),
/// or `None`. A test that gets a reason calls [`crate::skip_or_fail`] with it.
pub fn unavailable() -> Option<String> {
    let bin = haproxy_binary();
    let out = match Command::new(&bin).arg("-vv").stdin(Stdio::null()).output() {
        Ok(out) => out,
        Err(e) => {
            return Some(format!(
                "cannot run {} ({e}); deploy/lib/prereqs.sh ensure_haproxy installs it",
                bin.display()
            ))
        }
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("HAProxy version "))
        .and_then(|v| {
            let mut parts = v.split(|c: char| !c.is_ascii_digit());
            let major: u32 = parts.next()?.parse().ok()?;
            let minor: u32 = parts.next()?.parse().ok()?;
            Some((major, minor))
        });
    match version {
        Some(v) if v >= (2, 5) => {}
        _ => {
            return Some(format!(
                "{} is not HAProxy 2.5 or later (core.httpclient): {}",
                bin.display(),
                text.lines().next().unwrap_or_default()
            ))
        }
    }
    if !text.lines().any(|l| l.starts_with("Built with Lua")) {
        return Some(format!("{} is built without Lua", bin.display()));
    }
    None
}

/// A running HAProxy; stopped (SIGTERM, then SIGKILL) on drop.
pub struct Haproxy {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Haproxy {
    /// Starts HAProxy with the configuration text `config`, which listens on `port`,
    /// and waits (10 s) until the port accepts.
    pub fn start(config: &str, port: u16) -> Haproxy {
        let dir = tempfile::Builder::new()
            .prefix("tg-haproxy.")
            .tempdir()
            .expect("haproxy dir");
        let conf = dir.path().join("haproxy.cfg");
        std::fs::write(&conf, config).expect("haproxy.cfg");
        let log = dir.path().join("haproxy.log");
        let log_file = std::fs::File::create(&log).expect("haproxy log");
        let child = Command::new(haproxy_binary())
            .arg("-f")
            .arg(&conf)
            // Foreground, no daemon, no master: the child is HAProxy itself.
            .arg("-db")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}); deploy/lib/prereqs.sh ensure_haproxy installs it",
                    haproxy_binary().display()
                )
            });
        let mut h = Haproxy {
            dir,
            child: Some(child),
            port,
            log,
        };
        if let Some(child) = h.child.as_mut() {
            crate::wait_accepting(child, "haproxy", h.port, &h.log);
        }
        h
    }

    /// The shipped configuration with the test's addresses: listening on `port`,
    /// checking with control's API at `control` (`http://host:port`), the ttyd pool at
    /// the unix socket `pool`, everything but terminals to `page` (`host:port`).
    pub fn authz_config(port: u16, control: &str, pool: &Path, page: &str) -> String {
        for marked in [
            CONFIG_LUA,
            CONFIG_LISTEN,
            CONFIG_CONTROL,
            CONFIG_POOL,
            CONFIG_PAGE,
        ] {
            assert!(
                CONFIG.contains(marked),
                "haproxy.cfg no longer has {marked:?}: update tests/src/haproxy.rs"
            );
        }
        CONFIG
            .replace(CONFIG_LUA, &format!("lua-load {}", lua_file().display()))
            .replace(CONFIG_LISTEN, &format!("bind 127.0.0.1:{port}"))
            .replace(CONFIG_CONTROL, &format!("lua.termgate_authz {control}"))
            .replace(CONFIG_POOL, &pool.display().to_string())
            .replace(CONFIG_PAGE, &format!("server gateway {page}"))
    }

    /// Runs the shipped configuration (see [`Haproxy::authz_config`]).
    pub fn authz(port: u16, control: &str, pool: &Path, page: &str) -> Haproxy {
        Haproxy::start(&Haproxy::authz_config(port, control, pool, page), port)
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`: the origin users reach this HAProxy at.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The directory holding its configuration and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What HAProxy logged (its warnings, and the Lua check's).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGTERM is HAProxy's hard stop: every connection, tunnels included, closes.
        let pid = libc::pid_t::try_from(child.id()).unwrap_or(0);
        // SAFETY: kill only sends a signal to the HAProxy this value started.
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

//! termgate's end-to-end harness: real binaries, real files, real Docker and ttyd.
//!
//! The binaries are built by `cargo build --workspace --bins` before the tests run
//! (`deploy/test` does it); the harness finds them next to the test executable, or in
//! `TERMGATE_BIN_DIR`.

pub mod caddy;
pub mod cli;
pub mod daemon;
pub mod dockgate;
pub mod haproxy;
pub mod hostile;
pub mod netns;
pub mod nginx;
pub mod pki;
pub mod raw;
pub mod stack;
pub mod stats;
pub mod term;
pub mod tls;
pub mod ttyd;
pub mod upstream;
pub mod workspaces;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The example configuration shipped with the config crate.
pub const EXAMPLE_CONFIG: &str = include_str!("../../config/termgate.example.toml");

/// Where the workspace's binaries are: `$TERMGATE_BIN_DIR`, else `target/<profile>`
/// beside the test executable (its examples in `examples/` below it).
pub fn bin_dir() -> PathBuf {
    std::env::var_os("TERMGATE_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // target/<profile>/deps/<test-exe> → target/<profile>
            let exe = std::env::current_exe().expect("test executable path");
            exe.parent()
                .and_then(Path::parent)
                .expect("target directory")
                .to_path_buf()
        })
}

/// Path of a workspace binary such as `termgate-control`.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the binaries first (cargo build --workspace --bins; deploy/test does it)",
        path.display()
    );
    path
}

/// A state directory holding a configuration and its secret files.
pub struct ConfigDir {
    /// The directory (removed on drop).
    pub dir: tempfile::TempDir,
}

impl ConfigDir {
    /// The example configuration with generated dev secrets, plus `extra` TOML appended.
    pub fn example(extra: &str) -> ConfigDir {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("secrets")).expect("secrets dir");
        std::fs::write(dir.path().join("secrets/hs256.key"), random_hex(32)).expect("secret");
        std::fs::write(dir.path().join("secrets/service.token"), random_hex(24)).expect("token");
        std::fs::write(
            dir.path().join("termgate.toml"),
            format!("{EXAMPLE_CONFIG}\n{extra}\n"),
        )
        .expect("config");
        ConfigDir { dir }
    }

    /// Path of the configuration file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("termgate.toml")
    }

    /// Replaces the configuration text.
    pub fn write_config(&self, text: &str) {
        std::fs::write(self.config_path(), text).expect("config");
    }

    /// Writes a file relative to the directory.
    pub fn write(&self, rel: &str, contents: &[u8]) {
        std::fs::write(self.dir.path().join(rel), contents).expect("file");
    }

    /// Loads the configuration the way the binaries do.
    pub fn load(&self) -> config::Config {
        config::load(&self.config_path()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs a binary with `--config <this>` and the given arguments.
    pub fn run(&self, bin: &str, args: &[&str]) -> Output {
        Command::new(binary(bin))
            .args(args)
            .arg("--config")
            .arg(self.config_path())
            .env_remove("RUST_LOG")
            .output()
            .expect("run binary")
    }
}

/// What a test that cannot run on this machine does: it fails, naming `why`, so that a
/// suite whose tests never ran does not read as passed; with `TERMGATE_ALLOW_SKIP=1` it
/// prints `why` and returns, and the caller returns too (`return skip_or_fail(..)`).
#[track_caller]
pub fn skip_or_fail(why: &str) {
    if std::env::var("TERMGATE_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!("skipped (TERMGATE_ALLOW_SKIP=1): {why}");
        return;
    }
    panic!("this test cannot run here: {why} (set TERMGATE_ALLOW_SKIP=1 to skip it instead)");
}

/// Hex of `bytes` random bytes from the OS.
pub fn random_hex(bytes: usize) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
pub mod browser;
pub mod page;

/// Waits (10 s) until a process of a test's own (`child`, named `what`, writing to
/// `log`) accepts on loopback `port`; panics with its log when it exits or never does.
pub fn wait_accepting(child: &mut std::process::Child, what: &str, port: u16, log: &Path) {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let text = || std::fs::read_to_string(log).unwrap_or_default();
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            panic!("{what} exited during start ({status}):\n{}", text());
        }
        if std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200))
            .is_ok()
        {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{what} does not accept on {addr}:\n{}",
            text()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A system program a test runs: `$<env>`, else `path` when it exists, else `name` on
/// PATH.
pub fn system_binary(env: &str, path: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let installed = PathBuf::from(path);
    if installed.is_file() {
        return installed;
    }
    PathBuf::from(name)
}

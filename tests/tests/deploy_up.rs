//! `deploy/up` itself, run the way a newcomer runs it (with a temporary state
//! directory and its own ports): the directories it makes, the ttyd command line it
//! starts, and that nobody but its own user can reach the ttyd socket.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use e2e::stack::{free_port, http};

/// A uid and gid that own nothing here.
const NOBODY: u32 = 65534;

/// `deploy/up` in its own process group, stopped (with everything it started) on drop.
struct Up {
    child: Child,
    /// Everything it printed.
    output: mpsc::Receiver<String>,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("checkout root")
        .to_path_buf()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Whether uid/gid 65534 can connect to the unix socket at `path` (curl exits 7 when
/// it cannot connect; anything else means it reached the listener).
fn nobody_connects(path: &Path) -> bool {
    let id = NOBODY.to_string();
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={id}"),
            &format!("--regid={id}"),
            "--clear-groups",
            "curl",
            "-sS",
            "-m",
            "5",
            "--unix-socket",
        ])
        .arg(path)
        .arg("http://termgate/")
        .output()
        .expect("setpriv + curl as another uid");
    eprintln!(
        "as uid {id}, curl {}: {:?} {}",
        path.display(),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out.status.code() != Some(7)
}

fn start_up(state: &Path) -> Up {
    let mut cmd = Command::new(checkout().join("deploy/up"));
    cmd.env("TERMGATE_STATE_DIR", state)
        // deploy/test has built these; release would be a second full build.
        .env("TERMGATE_BUILD_PROFILE", "debug")
        .env("TERMGATE__INSTANCE", format!("t{}", e2e::random_hex(5)))
        .env(
            "TERMGATE__GATEWAY__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env(
            "TERMGATE__GATEWAY__ADMIN_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env(
            "TERMGATE__CONTROL__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env(
            "TERMGATE__CONTROL__ADMIN_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env(
            "TERMGATE__GATEWAY__UPGRADE_SOCKET",
            state.join("gateway-upgrade.sock"),
        )
        .env("TERMGATE__GATEWAY__PID_FILE", state.join("gateway.pid"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("start deploy/up");
    let (tx, rx) = mpsc::channel();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    Up { child, output: rx }
}

/// Reads what `deploy/up` prints until it says it is up; returns all of it.
fn wait_up(up: &Up) -> String {
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match up.output.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains("Sign in:") {
                    return seen;
                }
            }
            Err(_) => panic!("deploy/up did not come up:\n{seen}"),
        }
    }
}

/// The command line of the process whose arguments contain `needle`.
fn cmdline_containing(needle: &str) -> Vec<String> {
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.ends_with("ttyd")) && args.iter().any(|a| a == needle) {
            return args;
        }
    }
    panic!("no ttyd process with {needle} in its arguments");
}

#[test]
fn deploy_up_keeps_the_ttyd_socket_to_its_own_user() {
    // The parent is open to everyone, so only what deploy/up makes can keep others out.
    let parent = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let state = parent.path().join("state");
    let up = start_up(&state);
    let printed = wait_up(&up);
    eprintln!("deploy/up printed:\n{printed}");

    let socket = state.join("ttyd/ttyd.sock");
    assert_eq!(mode(&state), 0o700, "the state directory");
    assert_eq!(mode(&state.join("secrets")), 0o700, "the secrets directory");
    assert_eq!(mode(&state.join("ttyd")), 0o700, "the socket's directory");
    assert_eq!(mode(&socket), 0o600, "the socket");
    for secret in ["secrets/hs256.key", "secrets/service.token"] {
        assert_eq!(mode(&state.join(secret)), 0o600, "{secret}");
    }

    // The pool runs as the design says: -a for the gateway's arg, the user header,
    // a fixed title, on the private socket, attaching through the wrapper that only
    // takes this deployment's session containers.
    let args = cmdline_containing(socket.to_str().expect("utf-8 path"));
    // ttyd rewrites `-t key=value` in its own argv as `key value`; compare alike.
    let joined = args[1..].join(" ").replace('=', " ");
    for part in [
        "-W",
        "-a",
        "-i",
        "-H X-Termgate-User",
        "-t titleFixed termgate",
        "deploy/ttyd-attach",
    ] {
        assert!(joined.contains(part), "ttyd {joined} lacks {part}");
    }
    assert!(
        !args.iter().any(|a| a == "-p" || a.starts_with("--port")),
        "ttyd listens on no TCP port: {joined}"
    );

    // Another uid cannot reach the socket.
    assert!(
        !nobody_connects(&socket),
        "another uid must not reach ttyd's socket"
    );

    // The stack it printed works: the sign-in link's token lists sessions.
    let link = printed
        .lines()
        .find_map(|l| l.split_once("Sign in:").map(|(_, r)| r.trim().to_owned()))
        .expect("a sign-in link");
    let (url, token) = link.split_once("/#token=").expect("link with a token");
    let a = http("GET", &format!("{url}/api/sessions"), Some(token), None)
        .expect("the gateway answers");
    assert_eq!(a.status, 200, "{}", a.text);

    // Positive control: with the modes opened up, the same uid reaches the same
    // socket, so the refusal above was the modes' doing and not the probe's.
    for (path, m) in [
        (&state, 0o755),
        (&state.join("ttyd"), 0o755),
        (&socket, 0o777),
    ] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(m)).expect("chmod");
    }
    assert!(
        nobody_connects(&socket),
        "positive control: another uid reaches the socket once the modes allow it"
    );
}

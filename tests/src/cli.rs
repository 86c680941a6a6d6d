//! What the tests of the `termgate` command-line client share: a user with a config
//! directory of their own running the real binary, what a run came to, and a tmux pane
//! to run `attach` in the way a user would.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::stack::{wait_for, GatewayStack};

const T: Duration = Duration::from_secs(20);

/// One user at their terminal: a config directory of their own, where the client keeps
/// its sign-in, and the address it signs in at.
pub struct User {
    /// The config directory (`XDG_CONFIG_HOME` and `HOME` of every run).
    pub config: tempfile::TempDir,
    /// The address `login` signs in at.
    pub gateway: String,
}

impl User {
    /// A user who signs in at `gateway_url`.
    pub fn new(gateway_url: String) -> User {
        User {
            config: tempfile::tempdir().expect("config dir"),
            gateway: gateway_url,
        }
    }

    /// A user who signs in at the stack's first gateway.
    pub fn for_gateway(stack: &GatewayStack) -> User {
        User::new(stack.url(0, ""))
    }

    /// The client with `args`, in this user's config directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(crate::binary("termgate"));
        cmd.args(args)
            .env("XDG_CONFIG_HOME", self.config.path())
            .env("HOME", self.config.path())
            .env_remove("RUST_LOG");
        cmd
    }

    /// Runs the client with `input` on standard input.
    pub fn run_with(&self, args: &[&str], input: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn termgate");
        let mut stdin = child.stdin.take().expect("stdin");
        // A client that refuses its arguments exits before reading: that is its answer.
        let _ = stdin.write_all(input.as_bytes());
        drop(stdin);
        Run::from(child.wait_with_output().expect("termgate runs"))
    }

    /// Runs the client with nothing on standard input.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, "")
    }

    /// `termgate login --token-stdin` with `token`, asserted to succeed.
    pub fn login(&self, token: &str) -> Run {
        let r = self.run_with(&["login", &self.gateway, "--token-stdin"], token);
        assert_eq!(r.status, 0, "login: {r:?}");
        r
    }

    /// Runs a command that prints JSON, asserted to succeed.
    pub fn json(&self, args: &[&str]) -> Value {
        let r = self.run(args);
        assert_eq!(r.status, 0, "{args:?}: {r:?}");
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {r:?}"))
    }

    /// Where the client keeps its sign-ins.
    pub fn credentials_file(&self) -> PathBuf {
        self.config.path().join("termgate/credentials.json")
    }
}

/// What a run of the client came to.
#[derive(Debug)]
pub struct Run {
    /// The exit status, -1 when a signal ended it.
    pub status: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            status: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// A tmux server of the test's own, one pane running `sh` in a directory of its own,
/// with `$T` the client and the user's config directory in its environment.
pub struct Pane {
    socket: String,
    dir: tempfile::TempDir,
}

impl Pane {
    /// A 100×30 window; `None` (after [`crate::skip_or_fail`]) without tmux.
    pub fn start(user: &User) -> Option<Pane> {
        let found = Command::new("sh")
            .args(["-c", "command -v tmux"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            crate::skip_or_fail("tmux is not installed (deploy/lib/prereqs.sh ensure_tmux)");
            return None;
        }
        let pane = Pane {
            socket: format!("termgate-cli-{}", crate::random_hex(6)),
            dir: tempfile::tempdir().expect("pane dir"),
        };
        let o = Command::new("tmux")
            .args(["-L", &pane.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-s", "t", "-x", "100", "-y", "30", "-c"])
            .arg(pane.dir.path())
            .arg("sh")
            .env("XDG_CONFIG_HOME", user.config.path())
            .env("HOME", user.config.path())
            .env("T", crate::binary("termgate"))
            .env("PS1", "pane$ ")
            .env_remove("RUST_LOG")
            .env_remove("TMUX")
            .output()
            .expect("tmux");
        assert!(
            o.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Some(pane)
    }

    /// Runs `tmux <args>` on this server, asserted to succeed; its standard output.
    pub fn tmux(&self, args: &[&str]) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux");
        assert!(
            o.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Types `text` and Enter.
    pub fn type_line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", text]);
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }

    /// The pane's screen and recent history, wrapped lines joined.
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "t"])
    }

    /// Waits until a line of the screen is `line`, typing `command` again every second
    /// (an answer can be on its way while what it answers changes).
    pub fn ask_until(&self, command: &str, line: &str) {
        let mut typed: Option<Instant> = None;
        wait_for(&format!("{line:?} after {command:?}"), T, || {
            if typed.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                self.type_line(command);
                typed = Some(Instant::now());
            }
            self.screen()
                .lines()
                .any(|l| l.trim_end() == line)
                .then_some(())
        });
    }

    /// Waits until a line of the screen is `line`.
    pub fn wait_line(&self, line: &str) {
        wait_for(&format!("{line:?} on the screen"), T, || {
            self.screen()
                .lines()
                .any(|l| l.trim_end() == line)
                .then_some(())
        });
    }

    /// Waits until the screen's last line is a shell's prompt, waiting for input.
    pub fn wait_prompt(&self) {
        wait_for("a prompt", T, || {
            let screen = self.screen();
            let last = screen.lines().rev().find(|l| !l.trim().is_empty())?;
            last.trim_end().ends_with(['$', '#']).then_some(())
        });
    }

    /// `(rows, columns)` of the pane, as tmux has it.
    pub fn size(&self) -> (u16, u16) {
        let out = self.tmux(&[
            "display-message",
            "-p",
            "-t",
            "t",
            "#{pane_height} #{pane_width}",
        ]);
        let mut parts = out.split_whitespace().map(|n| n.parse().expect("a number"));
        (parts.next().expect("rows"), parts.next().expect("columns"))
    }

    /// The process the pane's shell runs in the foreground now (the client).
    pub fn foreground_pid(&self) -> u32 {
        let shell = self.tmux(&["display-message", "-p", "-t", "t", "#{pane_pid}"]);
        let shell = shell.trim();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .expect("the shell's children");
        children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the pane's shell runs nothing:\n{}", self.screen()))
    }

    /// Path of the file `name` in the pane's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Waits for the file `name` the pane's shell writes, and returns it, trimmed.
    pub fn wait_file(&self, name: &str) -> String {
        let path = self.path(name);
        wait_for(&format!("{} to be written", path.display()), T, || {
            std::fs::read_to_string(&path)
                .ok()
                .filter(|t| t.ends_with('\n'))
                .map(|t| t.trim().to_owned())
        })
    }

    /// The file `name` in the pane's directory, empty when there is none.
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Runs `termgate attach <attach_args>` in the pane the way a user would, recording
    /// the terminal's settings before and after (`before`, `after<n>`), the exit status
    /// (`status<n>`) and what the client said on standard error (`err<n>`).
    pub fn attach(&self, n: u32, attach_args: &str) {
        self.type_line(&format!(
            "stty -g >before; \"$T\" attach {attach_args} 2>err{n}; echo $? >status{n}; stty -g >after{n}"
        ));
    }

    /// How attach `n` ended: its status and standard error; asserts the terminal's
    /// settings are back to those before it.
    pub fn attach_ended(&self, n: u32) -> (String, String) {
        let after = self.wait_file(&format!("after{n}"));
        let before = self.read("before");
        assert!(
            !before.trim().is_empty(),
            "no settings recorded before attach"
        );
        assert_eq!(
            before.trim(),
            after,
            "the terminal's settings after attach {n} differ from before it"
        );
        (
            self.read(&format!("status{n}")).trim().to_owned(),
            self.read(&format!("err{n}")),
        )
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- pane ---\n{}", self.screen());
        }
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

//! The `termgate` command-line client, the real binary, against a real stack (control,
//! ttyd pool, gateway, session containers): sign-in and sign-out, sessions listed,
//! created and ended as JSON, and `attach` driven in tmux — typing, the window's size,
//! the detach keys, the gateway's close reasons and exit statuses, and the user's
//! terminal given back as it was after every way out.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::stack::{http, http_with, wait_for, GatewayStack};
use serde_json::Value;

const T: Duration = Duration::from_secs(20);

/// One user at their terminal: a config directory of their own, where the client keeps
/// its sign-in.
struct User {
    config: tempfile::TempDir,
    gateway: String,
}

impl User {
    fn new(stack: &GatewayStack) -> User {
        User {
            config: tempfile::tempdir().expect("config dir"),
            gateway: stack.url(0, ""),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(e2e::binary("termgate"));
        cmd.args(args)
            .env("XDG_CONFIG_HOME", self.config.path())
            .env("HOME", self.config.path())
            .env_remove("RUST_LOG");
        cmd
    }

    /// Runs the client with `input` on standard input.
    fn run_with(&self, args: &[&str], input: &str) -> Run {
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

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, "")
    }

    /// `termgate login --token-stdin` as `sub`, asserted to succeed.
    fn login(&self, stack: &GatewayStack, sub: &str) -> Run {
        let token = stack.control.token(sub, false);
        let r = self.run_with(&["login", &self.gateway, "--token-stdin"], &token);
        assert_eq!(r.status, 0, "login: {r:?}");
        r
    }

    /// Runs a command that prints JSON, asserted to succeed.
    fn json(&self, args: &[&str]) -> Value {
        let r = self.run(args);
        assert_eq!(r.status, 0, "{args:?}: {r:?}");
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {r:?}"))
    }

    fn credentials_file(&self) -> PathBuf {
        self.config.path().join("termgate/credentials.json")
    }
}

/// What a run of the client came to.
#[derive(Debug)]
struct Run {
    status: i32,
    stdout: String,
    stderr: String,
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
struct Pane {
    socket: String,
    dir: tempfile::TempDir,
}

impl Pane {
    /// A 100×30 window; `None` (after [`e2e::skip_or_fail`]) without tmux.
    fn start(user: &User) -> Option<Pane> {
        let found = Command::new("sh")
            .args(["-c", "command -v tmux"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            e2e::skip_or_fail("tmux is not installed (deploy/lib/prereqs.sh ensure_tmux)");
            return None;
        }
        let pane = Pane {
            socket: format!("termgate-cli-{}", e2e::random_hex(6)),
            dir: tempfile::tempdir().expect("pane dir"),
        };
        let o = Command::new("tmux")
            .args(["-L", &pane.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-s", "t", "-x", "100", "-y", "30", "-c"])
            .arg(pane.dir.path())
            .arg("sh")
            .env("XDG_CONFIG_HOME", user.config.path())
            .env("HOME", user.config.path())
            .env("T", e2e::binary("termgate"))
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

    fn tmux(&self, args: &[&str]) -> String {
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
    fn type_line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", text]);
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }

    /// The pane's screen and recent history, wrapped lines joined.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "t"])
    }

    /// Waits until a line of the screen is `line`, typing `command` again every second
    /// (an answer can be on its way while what it answers changes).
    fn ask_until(&self, command: &str, line: &str) {
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
    fn wait_line(&self, line: &str) {
        wait_for(&format!("{line:?} on the screen"), T, || {
            self.screen()
                .lines()
                .any(|l| l.trim_end() == line)
                .then_some(())
        });
    }

    /// Waits until the screen's last line is a shell's prompt, waiting for input.
    fn wait_prompt(&self) {
        wait_for("a prompt", T, || {
            let screen = self.screen();
            let last = screen.lines().rev().find(|l| !l.trim().is_empty())?;
            last.trim_end().ends_with(['$', '#']).then_some(())
        });
    }

    /// `(rows, columns)` of the pane, as tmux has it.
    fn size(&self) -> (u16, u16) {
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
    fn foreground_pid(&self) -> u32 {
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

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Waits for the file `name` the pane's shell writes, and returns it, trimmed.
    fn wait_file(&self, name: &str) -> String {
        let path = self.path(name);
        wait_for(&format!("{} to be written", path.display()), T, || {
            std::fs::read_to_string(&path)
                .ok()
                .filter(|t| t.ends_with('\n'))
                .map(|t| t.trim().to_owned())
        })
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Runs `attach_args` in the pane the way a user would, recording the terminal's
    /// settings before and after (`before`, `after<n>`), the exit status (`status<n>`)
    /// and what the client said on standard error (`err<n>`).
    fn attach(&self, n: u32, attach_args: &str) {
        self.type_line(&format!(
            "stty -g >before; \"$T\" attach {attach_args} 2>err{n}; echo $? >status{n}; stty -g >after{n}"
        ));
    }

    /// How attach `n` ended: its status and standard error; asserts the terminal's
    /// settings are back to those before it.
    fn attach_ended(&self, n: u32) -> (String, String) {
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

/// Waits until the gateway has opened one more terminal to ttyd than `before`: the
/// client is attached.
fn wait_attached(stack: &GatewayStack, before: usize) {
    wait_for("the client's terminal to reach ttyd", T, || {
        (stack.counter.connections() > before).then_some(())
    });
}

fn state(stack: &GatewayStack, sub: &str, id: &str) -> String {
    let s = stack.control.session(&stack.control.token(sub, false), id);
    s["state"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn login_from_a_token_then_ls_new_and_end_speak_json_and_logout_revokes_the_sign_in() {
    let stack = GatewayStack::start("");
    let alice = User::new(&stack);
    let token = stack.control.token("alice", false);
    let r = alice.login(&stack, "alice");
    assert!(
        r.stdout.contains("signed in") && r.stdout.contains("as alice"),
        "{r:?}"
    );

    // Kept for the user alone; the sign-in's own token, not the one piped in.
    let file = alice.credentials_file();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{}", file.display());
    let kept: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let entry = &kept["gateways"][alice.gateway.as_str()];
    assert_eq!(entry["sub"], "alice", "{kept}");
    let own = entry["token"].as_str().expect("a token").to_owned();
    assert_ne!(own, token, "the token piped in is not what is kept");
    let whoami = http_with(
        "GET",
        &stack.url(0, "/auth/session"),
        &[("Authorization", &format!("Bearer {own}"))],
    )
    .unwrap();
    assert_eq!(whoami.status, 200, "{}", whoami.text);
    assert_eq!(whoami.body["sub"], "alice");

    assert_eq!(alice.json(&["ls", "--json"]), serde_json::json!([]));
    let walk = alice.json(&["new", "--name", "walk", "--json"]);
    let id = walk["id"].as_str().expect("an id").to_owned();
    assert_eq!(walk["name"], "walk", "{walk}");
    assert_eq!(walk["profile"], "default", "{walk}");
    assert_eq!(walk["owner"], "alice", "{walk}");
    // Control has it, as the client said.
    assert_eq!(state(&stack, "alice", &id), walk["state"].as_str().unwrap());
    let listed = alice.json(&["ls", "--json"]);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()], "{listed}");
    let table = alice.run(&["ls"]);
    let row = table
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{table:?}"));
    assert!(row.contains("walk") && row.contains("default"), "{row}");

    // Two sessions of one name: the name alone is refused, naming both ids.
    let other = alice.json(&["new", "--name", "walk", "--json"]);
    let other_id = other["id"].as_str().unwrap().to_owned();
    let r = alice.run(&["end", "walk"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(
        r.stderr.contains(&id) && r.stderr.contains(&other_id),
        "{r:?}"
    );
    let ended = alice.json(&["end", &other_id, "--json"]);
    assert_eq!(ended["id"], other_id.as_str(), "{ended}");
    assert_eq!(ended["ended"], true);
    assert_ne!(state(&stack, "alice", &other_id), "running");
    // Now the name is unique again.
    let r = alice.run(&["end", "walk"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(r.stdout.contains(&id), "{r:?}");
    assert_ne!(state(&stack, "alice", &id), "running");
    // An ended session is not attached to: "has ended" while it is still listed
    // (stopping), "no session" once it is not; ttyd never sees a connection.
    let opened = stack.counter.connections();
    let r = alice.run(&["attach", &id]);
    assert!([4, 5].contains(&r.status), "{r:?}");
    assert!(r.stderr.contains(&id), "{r:?}");
    assert_eq!(stack.counter.connections(), opened);

    // Logout revokes the sign-in at the gateway, not only here.
    let r = alice.run(&["logout"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(!file.exists(), "the credentials file is removed");
    let refused = http("GET", &stack.url(0, "/api/sessions"), Some(&own), None).unwrap();
    assert_eq!(refused.status, 401, "{}", refused.text);
    let r = alice.run(&["ls"]);
    assert_eq!(r.status, 3, "{r:?}");
    assert!(r.stderr.contains("termgate login"), "{r:?}");
}

#[test]
fn bad_urls_unreachable_gateways_and_refused_tokens_are_one_line_each() {
    let stack = GatewayStack::start("");
    let user = User::new(&stack);
    let one_line = |r: &Run| {
        assert_eq!(r.stderr.trim_end().lines().count(), 1, "{r:?}");
        assert!(r.stderr.starts_with("termgate: "), "{r:?}");
    };
    let r = user.run_with(&["login", "gw.example", "--token-stdin"], "x");
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("not a gateway URL"), "{r:?}");
    one_line(&r);
    let closed = format!("http://127.0.0.1:{}", e2e::stack::free_port());
    let r = user.run_with(&["login", &closed, "--token-stdin"], "x");
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("cannot reach the gateway"), "{r:?}");
    one_line(&r);
    let r = user.run_with(&["login", &user.gateway, "--token-stdin"], "not.a.token");
    assert_eq!(r.status, 3, "{r:?}");
    assert!(r.stderr.contains("refused this token"), "{r:?}");
    one_line(&r);
    let r = user.run_with(&["login", &user.gateway, "--token-stdin"], "");
    assert_eq!(r.status, 1, "{r:?}");
    one_line(&r);
    assert!(
        !user.credentials_file().exists(),
        "nothing kept from failed sign-ins"
    );
    let r = user.run(&["attach", "walk", "--detach-keys", "ctrl-1"]);
    assert_eq!(r.status, 1, "{r:?}");
    one_line(&r);
    // A credential file that is not one is named, not a panic.
    std::fs::create_dir_all(user.credentials_file().parent().unwrap()).unwrap();
    std::fs::write(user.credentials_file(), "{not json").unwrap();
    let r = user.run(&["ls"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("credentials.json"), "{r:?}");
    one_line(&r);
}

#[test]
fn another_users_session_is_not_found_as_an_unknown_one_is() {
    let stack = GatewayStack::start("");
    let bob = stack.control.create(&stack.control.token("bob", false));
    let bobs = bob["id"].as_str().unwrap();
    let unknown = "aaaaaaaaaaaaaaaa";
    assert_ne!(bobs, unknown);
    let alice = User::new(&stack);
    alice.login(&stack, "alice");
    let before = stack.counter.connections();
    for command in ["attach", "end"] {
        let theirs = alice.run(&[command, bobs]);
        let nothing = alice.run(&[command, unknown]);
        assert_eq!(theirs.status, 4, "{command}: {theirs:?}");
        assert_eq!(nothing.status, 4, "{command}: {nothing:?}");
        assert_eq!(theirs.stderr, format!("termgate: no session \"{bobs}\"\n"));
        assert_eq!(
            theirs.stderr.replace(bobs, unknown),
            nothing.stderr,
            "{command}"
        );
    }
    assert_eq!(stack.counter.connections(), before, "nothing reached ttyd");
    assert_eq!(
        state(&stack, "bob", bobs),
        "running",
        "bob's session is untouched"
    );
}

#[test]
fn attach_types_follows_the_window_detaches_and_reattaches_to_the_same_shell() {
    let stack = GatewayStack::start("");
    let alice = User::new(&stack);
    alice.login(&stack, "alice");
    let walk = alice.json(&["new", "--name", "walk", "--json"]);
    let id = walk["id"].as_str().unwrap().to_owned();
    let Some(pane) = Pane::start(&alice) else {
        return;
    };

    let opened = stack.counter.connections();
    pane.attach(1, "walk");
    wait_attached(&stack, opened);
    pane.ask_until("echo $((6*7))x", "42x");

    // The session's terminal is the pane's size, and follows it.
    let (rows, columns) = pane.size();
    pane.ask_until("stty size", &format!("{rows} {columns}"));
    pane.tmux(&["resize-window", "-t", "t", "-x", "90", "-y", "24"]);
    let resized = pane.size();
    assert_ne!(resized, (rows, columns), "tmux resized the window");
    pane.ask_until("stty size", &format!("{} {}", resized.0, resized.1));

    // Something only this shell knows, then the detach keys once its prompt is back
    // (the prompt asks the terminal where its cursor is: the answer is the session's).
    pane.type_line("MARK=m$((1000+234))");
    pane.ask_until("echo set-$((2+3))", "set-5");
    pane.wait_prompt();
    pane.tmux(&["send-keys", "-t", "t", "C-\\", "C-\\"]);
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "0", "{err}");
    assert!(err.contains("detached"), "{err}");
    assert_eq!(
        state(&stack, "alice", &id),
        "running",
        "detaching leaves it running"
    );
    let listed = alice.json(&["ls", "--json"]);
    assert_eq!(listed[0]["state"], "running", "{listed}");

    // Back in, by id: the same shell.
    let opened = stack.counter.connections();
    pane.attach(2, &id);
    wait_attached(&stack, opened);
    pane.ask_until("echo mark=$MARK", "mark=m1234");

    // SIGTERM gives the terminal back too, and leaves the session running.
    let pid = pane.foreground_pid();
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (status, err) = pane.attach_ended(2);
    assert_eq!(status, "143", "{err}");
    assert_eq!(state(&stack, "alice", &id), "running");
}

#[test]
fn ending_the_session_from_the_page_closes_attach_with_the_reason_and_status_5() {
    let stack = GatewayStack::start("");
    let alice = User::new(&stack);
    alice.login(&stack, "alice");
    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    let opened = stack.counter.connections();
    pane.attach(1, "--new --name ending");
    wait_attached(&stack, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    let listed = alice.json(&["ls", "--json"]);
    let id = listed[0]["id"]
        .as_str()
        .expect("the new session")
        .to_owned();
    assert_eq!(listed[0]["name"], "ending", "{listed}");

    // As the page ends it: its cookie, its Origin.
    let cookie = stack.sign_in("alice");
    let origin = stack.origin(0);
    let a = http_with(
        "DELETE",
        &stack.url(0, &format!("/api/sessions/{id}")),
        &[("Cookie", &cookie), ("Origin", &origin)],
    )
    .unwrap();
    assert_eq!(a.status, 204, "{}", a.text);
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "5", "{err}");
    assert_eq!(err.trim(), "termgate: this session was ended");
}

#[test]
fn logout_elsewhere_closes_an_attached_terminal_with_signed_out_and_status_3() {
    let stack = GatewayStack::start("");
    let alice = User::new(&stack);
    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    // Signed in at the prompt, the token pasted and not shown.
    pane.type_line(&format!("\"$T\" login {}; echo login=$?", alice.gateway));
    wait_for("the token prompt", T, || {
        pane.screen().contains("Token for").then_some(())
    });
    let token = stack.control.token("alice", false);
    pane.type_line(&token);
    pane.wait_line("login=0");
    let screen = pane.screen();
    assert!(screen.contains("as alice"), "{screen}");
    assert!(
        !screen.contains(&token),
        "the token is not echoed:\n{screen}"
    );
    let s = alice.json(&["new", "--json"]);
    let id = s["id"].as_str().unwrap().to_owned();
    let opened = stack.counter.connections();
    pane.attach(1, &id);
    wait_attached(&stack, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    let r = alice.run(&["logout"]);
    assert_eq!(r.status, 0, "{r:?}");
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "3", "{err}");
    assert_eq!(err.trim(), "termgate: signed out");
    assert_eq!(
        state(&stack, "alice", &id),
        "running",
        "a sign-out ends no session"
    );
}

#[test]
fn over_tls_the_gateway_is_trusted_through_a_ca_file_for_the_api_and_the_terminal() {
    let pki = e2e::pki::Pki::init();
    let leaf = pki.issue("gateway", "gateway", &["127.0.0.1"]);
    let mut stack = GatewayStack::start("");
    let (cert, key) = (leaf.cert.to_string_lossy(), leaf.key.to_string_lossy());
    let n = stack.spawn_gateway(&[
        ("TERMGATE__GATEWAY__TLS_CERT_FILE", &cert),
        ("TERMGATE__GATEWAY__TLS_KEY_FILE", &key),
    ]);
    let mut alice = User::new(&stack);
    alice.gateway = format!("https://127.0.0.1:{}", stack.gateways[n].port);
    let token = stack.control.token("alice", false);

    // A private CA is not the system's: refused, saying how to trust it.
    let r = alice.run_with(&["login", &alice.gateway, "--token-stdin"], &token);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(r.stderr.contains("--ca-file"), "{r:?}");
    assert!(!alice.credentials_file().exists());

    let ca = pki.ca().to_string_lossy().into_owned();
    let r = alice.run_with(
        &["login", &alice.gateway, "--token-stdin", "--ca-file", &ca],
        &token,
    );
    assert_eq!(r.status, 0, "{r:?}");
    // Later commands trust the same CA without being told again.
    let s = alice.json(&["new", "--name", "secure", "--json"]);
    assert_eq!(s["name"], "secure", "{s}");
    let Some(pane) = Pane::start(&alice) else {
        return;
    };
    let opened = stack.counter.connections();
    pane.attach(1, "secure");
    wait_attached(&stack, opened);
    pane.ask_until("echo $((6*7))x", "42x");
    pane.wait_prompt();
    pane.tmux(&["send-keys", "-t", "t", "C-\\", "C-\\"]);
    let (status, err) = pane.attach_ended(1);
    assert_eq!(status, "0", "{err}");
}

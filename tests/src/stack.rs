//! A running control service (and, as they arrive, gateway and ttyd) for one test.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{binary, random_hex, ConfigDir};

/// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
/// A port to listen on, free now, below the kernel's ephemeral range: a port the kernel
/// hands out for `:0` is also one it hands to outgoing connections, which can take it
/// between this call and the process's own bind (thousands of connections run in
/// parallel tests). Ports here are taken only by a listener asking for them by number.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    // Spread by process so that parallel test binaries start apart.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let span = EPHEMERAL_START - FIRST_PORT;
    let seed = (std::process::id() % u32::from(span)) as u16;
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = FIRST_PORT + (seed + step) % span;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between {FIRST_PORT} and {EPHEMERAL_START}");
}

/// The first port [`free_port`] hands out.
const FIRST_PORT: u16 = 20_000;
/// Where Linux's default ephemeral range (`ip_local_port_range`) starts.
const EPHEMERAL_START: u16 = 32_768;

/// Waits until `f` returns `Some`, or panics after `deadline` naming `what`.
pub fn wait_for<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An HTTP answer: status and parsed JSON body (`Value::Null` when empty or not JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Body as JSON.
    pub body: Value,
    /// Body as text.
    pub text: String,
    /// The `Set-Cookie` headers, in order.
    pub set_cookies: Vec<String>,
}

impl Answer {
    /// The value the answer sets for cookie `name`, if it sets one.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.set_cookies.iter().find_map(|c| {
            let pair = c.split(';').next()?;
            let (k, v) = pair.split_once('=')?;
            (k.trim() == name).then(|| v.trim().to_owned())
        })
    }
}

/// A `jti` no other token of this test process has (as `termgate-control token`
/// gives each token its own).
fn next_jti() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("test-{}-{n}", std::process::id())
}

/// The claims of a token, unverified (tests read the `jti` and `iat` they sent).
pub fn claims_of(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).expect("a JWT has a payload");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url payload");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

/// Whether the gateways of every [`GatewayStack`] listen with TLS in this run
/// (`TERMGATE_TEST_TLS=1`; `deploy/test` runs the terminal suites once so).
pub fn tls_mode() -> bool {
    std::env::var("TERMGATE_TEST_TLS").is_ok_and(|v| v == "1")
}

/// The recordings player's directory, `TERMGATE_PLAYER_DIR` (installed by
/// `deploy/lib/prereqs.sh::ensure_player`): the gateways started here serve it
/// (`gateway.player_dir`) unless a test says otherwise ([`GatewayStack::player_dir`]).
pub fn player_dir() -> Option<PathBuf> {
    std::env::var_os("TERMGATE_PLAYER_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The HTTP agent of the tests: never treats a status as an error. It speaks https to
/// the test's own gateways without checking their self-signed certificates (the
/// terminal client pins them instead: [`crate::tls::Pin`]).
pub fn agent() -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .disable_verification(true)
        .build();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .tls_config(tls)
        .build()
        .into()
}

/// A tiny HTTP client that never treats a status as an error.
pub fn http(
    method: &str,
    url: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
) -> Result<Answer, String> {
    let agent = agent();
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let with_body = |r: ureq::RequestBuilder<ureq::typestate::WithBody>| {
        let r = match &auth {
            Some(a) => r.header("Authorization", a),
            None => r,
        };
        match body {
            Some(v) => r.send_json(v),
            None => r.send_empty(),
        }
    };
    let without_body = |r: ureq::RequestBuilder<ureq::typestate::WithoutBody>| match &auth {
        Some(a) => r.header("Authorization", a).call(),
        None => r.call(),
    };
    let result = match method {
        "GET" => without_body(agent.get(url)),
        "DELETE" => without_body(agent.delete(url)),
        "POST" => with_body(agent.post(url)),
        "PATCH" => with_body(agent.patch(url)),
        m => return Err(format!("unsupported method {m}")),
    };
    Ok(answer(result.map_err(|e| e.to_string())?))
}

/// A bodiless request (GET, DELETE) with the given headers, such as a browser's cookie
/// and Origin; never treats a status as an error.
pub fn http_with(method: &str, url: &str, headers: &[(&str, &str)]) -> Result<Answer, String> {
    let agent = agent();
    let mut req = match method {
        "GET" => agent.get(url),
        "DELETE" => agent.delete(url),
        m => return Err(format!("unsupported method {m}")),
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    Ok(answer(req.call().map_err(|e| e.to_string())?))
}

/// Reads a whole answer: status, `Set-Cookie` headers, body as text and as JSON.
fn answer(mut resp: ureq::http::Response<ureq::Body>) -> Answer {
    let status = resp.status().as_u16();
    let set_cookies = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer {
        status,
        body,
        text,
        set_cookies,
    }
}

/// How long one `docker` command of the harness may take. A daemon that stops
/// answering fails the test that asked, naming the command, instead of holding the
/// whole suite.
pub const DOCKER_CLI_DEADLINE: Duration = Duration::from_secs(120);

/// Runs the `docker` CLI as `cmd` says and collects its output, killing it past
/// [`DOCKER_CLI_DEADLINE`] (an error naming the command).
pub fn docker_output(cmd: &mut Command) -> std::io::Result<std::process::Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Read both pipes beside the wait: a long answer must not fill a pipe and stall.
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let read_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let read_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > DOCKER_CLI_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "{cmd:?} did not end within {DOCKER_CLI_DEADLINE:?}: the Docker daemon does not answer"
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(std::process::Output {
        status,
        stdout: read_out.join().unwrap_or_default(),
        stderr: read_err.join().unwrap_or_default(),
    })
}

/// Runs `docker` with arguments; returns trimmed stdout (panics when docker fails or
/// does not answer within [`DOCKER_CLI_DEADLINE`]).
pub fn docker(args: &[&str]) -> String {
    let o = docker_output(Command::new("docker").args(args)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        o.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// A control service with its own state directory, ports and deployment instance id,
/// so tests run in parallel and clean up only what they made.
pub struct ControlStack {
    /// Configuration and state directory.
    pub dir: ConfigDir,
    /// This stack's `instance` (container labels).
    pub instance: String,
    /// Base URL of the API (`http://127.0.0.1:port`).
    pub api: String,
    /// Base URL of the admin listener.
    pub admin: String,
    env: Vec<(String, String)>,
    child: Option<Child>,
    log: PathBuf,
    /// The dockgate control reaches Docker through (see [`crate::dockgate`]).
    pub dockgate: Option<crate::dockgate::Dockgate>,
}

impl ControlStack {
    /// Writes a config (the example, fast reconcile timings, `extra` TOML appended) and
    /// starts control.
    pub fn start(extra: &str) -> ControlStack {
        let mut s = Self::prepare(extra);
        s.spawn(&[]);
        s
    }

    /// Like [`ControlStack::start`] but does not start the process.
    pub fn prepare(extra: &str) -> ControlStack {
        let dir = ConfigDir::example(extra);
        let instance = format!("t{}", random_hex(5));
        let (api, admin) = (free_port(), free_port());
        let image = std::env::var("TERMGATE_SESSION_IMAGE")
            .unwrap_or_else(|_| "termgate/session:dev".into());
        let env = vec![
            ("TERMGATE__INSTANCE".into(), instance.clone()),
            (
                "TERMGATE__CONTROL__LISTEN".into(),
                format!("127.0.0.1:{api}"),
            ),
            (
                "TERMGATE__CONTROL__ADMIN_LISTEN".into(),
                format!("127.0.0.1:{admin}"),
            ),
            (
                "TERMGATE__CONTROL__RECONCILE_INTERVAL_SECONDS".into(),
                "1".into(),
            ),
            ("TERMGATE__CONTROL__ORPHAN_GRACE_SECONDS".into(), "2".into()),
            (
                "TERMGATE__CONTROL__CREATING_GRACE_SECONDS".into(),
                "3".into(),
            ),
            ("TERMGATE__PROFILES__DEFAULT__IMAGE".into(), image),
        ];
        let mut env = env;
        let dockgate = crate::dockgate::enabled().then(|| {
            // It compares creates with this stack's configuration, read with control's
            // environment (started by `spawn`); its refusals go to this control's audit
            // trail.
            let token = dir.dir.path().join("secrets/service.token");
            let g = crate::dockgate::Dockgate::prepare_declared(
                &dir.config_path(),
                &[
                    "--control-url",
                    &format!("http://127.0.0.1:{api}"),
                    "--service-token-file",
                    token.to_str().expect("utf-8 path"),
                ],
            );
            env.push((
                "TERMGATE__CONTROL__DOCKER_HOST".into(),
                g.docker_host("control"),
            ));
            g
        });
        let log = dir.dir.path().join("control.log");
        ControlStack {
            dir,
            instance,
            api: format!("http://127.0.0.1:{api}"),
            admin: format!("http://127.0.0.1:{admin}"),
            env,
            child: None,
            log,
            dockgate,
        }
    }

    /// The `TERMGATE__*` overrides control starts with: what another part reading the
    /// same configuration must see too.
    pub fn overrides(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .filter(|(k, _)| k.starts_with("TERMGATE__"))
            .cloned()
            .collect()
    }

    /// Removes an environment override for the next start.
    pub fn unset_env(&mut self, key: &str) {
        self.env.retain(|(k, _)| k != key);
    }

    /// Sets an environment override for the next start.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
    }

    /// Starts the process expecting it to refuse its configuration: waits (30 s) for it
    /// to exit unsuccessfully and returns its log. Panics if it serves instead.
    pub fn start_refused(&mut self) -> String {
        self.launch(&[]);
        let url = format!("{}/v1/healthz", self.api);
        let start = Instant::now();
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                assert!(!status.success(), "control exited successfully");
                return self.log_text();
            }
            assert!(
                !http("GET", &url, None, None).is_ok_and(|a| a.status == 200),
                "control started:\n{}",
                self.log_text()
            );
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "control neither started nor exited:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Starts the process with extra environment (e.g. a failpoint) and waits until it
    /// answers `/v1/healthz` (unless a failpoint may stop it first).
    pub fn spawn(&mut self, extra_env: &[(&str, &str)]) {
        self.launch(extra_env);
        let url = format!("{}/v1/healthz", self.api);
        let start = Instant::now();
        loop {
            if http("GET", &url, None, None).is_ok_and(|a| a.status == 200) {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "termgate-control exited during start ({status}):\n{}",
                    self.log_text()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "control did not start:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Starts dockgate (when there is one) and the process, waiting for neither.
    fn launch(&mut self, extra_env: &[(&str, &str)]) {
        assert!(self.child.is_none(), "control already running");
        if let Some(g) = self.dockgate.as_mut() {
            // dockgate reads the configuration control reads: the same overrides.
            let env: Vec<(String, String)> = self
                .env
                .iter()
                .cloned()
                .chain(
                    extra_env
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
                )
                .collect();
            g.launch(&env);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut cmd = Command::new(binary("termgate-control"));
        cmd.arg("--config")
            .arg(self.dir.config_path())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        for (k, v) in self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(extra_env.iter().copied())
        {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("spawn termgate-control"));
    }

    /// The process's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Process id of the running control.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Waits for the process to exit by itself (e.g. at a failpoint).
    pub fn wait_exit(&mut self, deadline: Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("running");
        let status = wait_for("control to exit", deadline, || {
            child.try_wait().ok().flatten()
        });
        self.child = None;
        status
    }

    /// SIGKILL, no chance to flush.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; returns how long the exit took.
    pub fn terminate(&mut self) -> (std::process::ExitStatus, Duration) {
        let mut c = self.child.take().expect("running");
        let start = Instant::now();
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let status = wait_for(
            "control to stop after SIGTERM",
            Duration::from_secs(15),
            || c.try_wait().ok().flatten(),
        );
        (status, start.elapsed())
    }

    /// A token for `sub` signed with the stack's dev key, valid for an hour.
    pub fn token(&self, sub: &str, admin: bool) -> String {
        self.token_for(sub, admin, 3600)
    }

    /// A token for `sub` signed with the stack's dev key, valid for `lifetime` seconds
    /// from now (tokens of different lifetimes differ even when made in one second).
    pub fn token_for(&self, sub: &str, admin: bool, lifetime: u64) -> String {
        let roles = if admin { vec!["admin".into()] } else { vec![] };
        self.token_with(sub, roles, lifetime)
    }

    /// A token for `sub` carrying `roles`, valid for `lifetime` seconds from now.
    pub fn token_with(&self, sub: &str, roles: Vec<String>, lifetime: u64) -> String {
        let config = self.dir.load();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        config
            .signer()
            .expect("dev key")
            .sign(&policy::TokenClaims {
                sub: sub.into(),
                exp: now + lifetime,
                iat: now,
                iss: config.auth.issuer.clone(),
                aud: config.auth.audience.clone(),
                roles,
                jti: Some(next_jti()),
                sid: None,
            })
            .expect("sign")
    }

    /// The service token gateways use.
    pub fn service_token(&self) -> String {
        String::from_utf8(
            self.dir
                .load()
                .secrets()
                .service_token
                .as_ref()
                .expect("service token")
                .expose()
                .to_vec(),
        )
        .expect("utf-8")
    }

    /// An API call as `bearer`; panics only if the connection fails.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        http(
            method,
            &format!("{}{path}", self.api),
            bearer,
            body.as_ref(),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.log_text()))
    }

    /// Ids of every container labelled with this stack's instance (any state).
    pub fn containers(&self) -> Vec<String> {
        let out = docker(&[
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            &format!("label=termgate.instance={}", self.instance),
        ]);
        out.lines().map(str::to_owned).collect()
    }

    /// `GET /v1/sessions/<id>` as the holder of `token`: the session's view (200 asserted).
    pub fn session(&self, token: &str, id: &str) -> Value {
        let a = self.call("GET", &format!("/v1/sessions/{id}"), Some(token), None);
        assert_eq!(a.status, 200, "{}", a.text);
        a.body
    }

    /// Creates a session as `token` and returns its JSON (asserting 201).
    pub fn create(&self, token: &str) -> Value {
        self.create_with(token, "default")
    }

    /// Creates a session of `profile` as `token` and returns its JSON (asserting 201).
    pub fn create_with(&self, token: &str, profile: &str) -> Value {
        let a = self.call(
            "POST",
            "/v1/sessions",
            Some(token),
            Some(serde_json::json!({ "profile": profile })),
        );
        assert_eq!(a.status, 201, "create: {}\n{}", a.text, self.log_text());
        a.body
    }
}

/// TOML for a profile `name` whose program ignores the hang-up an end sends, with
/// `stop_grace_seconds = grace`: its container lives until it is removed by force, so a
/// test can tell what the end did before the container went. The program reads lines
/// from its terminal and runs them (an interactive shell would take the hang-up back).
pub fn profile_ignoring_hang_up(name: &str, grace: u64) -> String {
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    format!(
        r#"
[profiles.{name}]
image = "{image}"
command = ["-c", "trap '' HUP; while read -r line; do eval \"$line\"; done"]
stop_grace_seconds = {grace}
"#
    )
}

impl Drop for ControlStack {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!("--- control log ---\n{}", self.log_text());
        }
        let filter = format!("label=termgate.instance={}", self.instance);
        if let Ok(o) =
            docker_output(Command::new("docker").args(["ps", "-aq", "--filter", &filter]))
        {
            let ids: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect();
            if !ids.is_empty() {
                let _ = docker_output(Command::new("docker").args(["rm", "-f", "-v"]).args(&ids));
            }
        }
        if let Ok(o) =
            docker_output(Command::new("docker").args(["volume", "ls", "-q", "--filter", &filter]))
        {
            let vols: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect();
            if !vols.is_empty() {
                let _ = docker_output(
                    Command::new("docker")
                        .args(["volume", "rm", "-f"])
                        .args(&vols),
                );
            }
        }
    }
}

/// One running gateway process.
pub struct GatewayProc {
    /// Public port.
    pub port: u16,
    /// Admin port.
    pub admin_port: u16,
    child: Option<Child>,
    log: PathBuf,
}

impl GatewayProc {
    /// The process's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("gateway running").id()
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal (`TERM`, `QUIT`, …) and returns without waiting.
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
    }

    /// Waits for the process to exit; returns how long it took.
    pub fn wait_exit(&mut self, deadline: Duration) -> Duration {
        let start = Instant::now();
        let mut c = self.child.take().expect("gateway running");
        wait_for("the gateway to exit", deadline, || {
            c.try_wait().ok().flatten()
        });
        start.elapsed()
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!("--- gateway log ---\n{}", self.log_text());
        }
    }
}

/// Control, a ttyd pool (behind a connection-counting proxy) and gateways, wired as
/// on a single host.
pub struct GatewayStack {
    /// Gateway processes (the first is started by `start`). Declared first so they
    /// stop (and print their logs on failure) before control's directory is removed.
    pub gateways: Vec<GatewayProc>,
    /// The control service.
    pub control: ControlStack,
    /// The real ttyd pool.
    pub ttyd: crate::ttyd::TtydPool,
    /// Counts every connection the gateways make to ttyd.
    pub counter: crate::ttyd::CountingProxy,
    /// The read-only pool of share links (no `-W`), when started.
    pub viewers: Option<crate::ttyd::TtydPool>,
    upstream_socket: PathBuf,
    /// In [`tls_mode`], the certificate every gateway started here listens with.
    pub certs: Option<crate::tls::SelfSigned>,
    /// The `gateway.player_dir` of the gateways started from now on ([`player_dir`]
    /// at first; `None`: no player).
    pub player_dir: Option<PathBuf>,
    /// Environment every gateway started here gets, as control got it
    /// ([`GatewayStack::start_with_env`]).
    shared_env: Vec<(String, String)>,
}

impl GatewayStack {
    /// Starts control, ttyd and one gateway; `extra` TOML is appended to the config.
    pub fn start(extra: &str) -> GatewayStack {
        Self::start_inner(extra, false)
    }

    /// Like [`GatewayStack::start`], with the read-only pool of share links too.
    pub fn start_with_viewers(extra: &str) -> GatewayStack {
        Self::start_inner(extra, true)
    }

    /// Like [`GatewayStack::start`], with `env` set for control and for every gateway
    /// (keys both read, such as `gateway.target_credentials_dir`).
    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> GatewayStack {
        let mut control = ControlStack::prepare(extra);
        for (k, v) in env {
            control.set_env(k, v);
        }
        control.spawn(&[]);
        let shared = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Self::around(control, false, shared)
    }

    fn start_inner(extra: &str, viewers: bool) -> GatewayStack {
        Self::around(ControlStack::start(extra), viewers, Vec::new())
    }

    /// Starts the ttyd pools and one gateway around a running control.
    fn around(
        control: ControlStack,
        viewers: bool,
        shared_env: Vec<(String, String)>,
    ) -> GatewayStack {
        let ttyd = crate::ttyd::TtydPool::start_for(&control.instance);
        let counter = crate::ttyd::CountingProxy::start(ttyd.target());
        let upstream_socket = counter.socket_path().to_path_buf();
        let viewers = viewers.then(|| crate::ttyd::TtydPool::start_viewers_for(&control.instance));
        let mut s = GatewayStack {
            control,
            ttyd,
            counter,
            viewers,
            gateways: Vec::new(),
            upstream_socket,
            certs: None,
            player_dir: player_dir(),
            shared_env,
        };
        s.certs =
            tls_mode().then(|| crate::tls::SelfSigned::generate(s.control.dir.dir.path(), "stack"));
        s.spawn_gateway(&[]);
        s
    }

    /// Puts together a control already running, the gateways' own ttyd pool and the
    /// counting proxy in front of it, then starts one gateway (for stacks whose control
    /// needs pools made before it, such as several Docker hosts).
    pub fn assemble(
        control: ControlStack,
        ttyd: crate::ttyd::TtydPool,
        counter: crate::ttyd::CountingProxy,
    ) -> GatewayStack {
        Self::assemble_with_env(control, ttyd, counter, &[])
    }

    /// Like [`GatewayStack::assemble`], every gateway started with `env` as well (e.g.
    /// its certificate for the pools of other hosts).
    pub fn assemble_with_env(
        control: ControlStack,
        ttyd: crate::ttyd::TtydPool,
        counter: crate::ttyd::CountingProxy,
        env: &[(&str, String)],
    ) -> GatewayStack {
        let upstream_socket = counter.socket_path().to_path_buf();
        let mut s = GatewayStack {
            control,
            ttyd,
            counter,
            viewers: None,
            gateways: Vec::new(),
            upstream_socket,
            certs: None,
            player_dir: player_dir(),
            shared_env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        };
        s.certs =
            tls_mode().then(|| crate::tls::SelfSigned::generate(s.control.dir.dir.path(), "stack"));
        s.spawn_gateway(&[]);
        s
    }

    /// Points the next gateways at another upstream socket (e.g. a recording upstream).
    pub fn set_upstream_socket(&mut self, path: &std::path::Path) {
        self.upstream_socket = path.to_path_buf();
    }

    /// Starts another gateway process sharing the same control; waits for `/readyz`.
    pub fn spawn_gateway(&mut self, extra_env: &[(&str, &str)]) -> usize {
        let (port, admin_port) = (free_port(), free_port());
        self.spawn_gateway_on(port, admin_port, &[], extra_env, true)
    }

    /// Starts another gateway whose listener speaks TLS with `certs`; waits for `/readyz`.
    pub fn spawn_tls_gateway(
        &mut self,
        certs: &crate::tls::SelfSigned,
        extra_env: &[(&str, &str)],
    ) -> usize {
        let cert = certs.cert.to_string_lossy().into_owned();
        let key = certs.key.to_string_lossy().into_owned();
        let mut env = vec![
            ("TERMGATE__GATEWAY__TLS_CERT_FILE", cert.as_str()),
            ("TERMGATE__GATEWAY__TLS_KEY_FILE", key.as_str()),
        ];
        env.extend_from_slice(extra_env);
        self.spawn_gateway(&env)
    }

    /// Gateway `n`'s TLS listener, trusted through `pin`.
    pub fn tls_target(&self, n: usize, pin: crate::tls::Pin) -> crate::term::Target {
        crate::term::Target::Tls(([127, 0, 0, 1], self.gateways[n].port).into(), pin)
    }

    /// Starts a gateway on given ports with extra arguments (e.g. `--upgrade`) and
    /// environment; `wait` for readiness.
    pub fn spawn_gateway_on(
        &mut self,
        port: u16,
        admin_port: u16,
        args: &[&str],
        extra_env: &[(&str, &str)],
        wait: bool,
    ) -> usize {
        let n = self.gateways.len();
        let dir = self.control.dir.dir.path();
        let log = dir.join(format!("gateway-{n}-{port}.log"));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("gateway log");
        let scheme = self.scheme();
        let origins = format!("[\"{scheme}://127.0.0.1:{port}\", \"{scheme}://localhost:{port}\"]");
        let mut cmd = Command::new(binary("termgate-gateway"));
        cmd.arg("--config")
            .arg(self.control.dir.config_path())
            .env("RUST_LOG", "info")
            .env("TERMGATE__INSTANCE", &self.control.instance)
            .env("TERMGATE__GATEWAY__LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "TERMGATE__GATEWAY__ADMIN_LISTEN",
                format!("127.0.0.1:{admin_port}"),
            )
            .env("TERMGATE__GATEWAY__CONTROL_URL", &self.control.api)
            .env("TERMGATE__GATEWAY__ALLOWED_ORIGINS", origins)
            .env(
                "TERMGATE__GATEWAY__UPGRADE_SOCKET",
                dir.join("gateway-upgrade.sock"),
            )
            .env(
                "TERMGATE__GATEWAY__PID_FILE",
                dir.join(format!("gateway-{n}.pid")),
            )
            .env("TERMGATE__TTYD__SOCKET", &self.upstream_socket)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file);
        if let Some(path) = self.viewers.as_ref().and_then(|v| v.socket_path()) {
            cmd.env("TERMGATE__TTYD__VIEWER_SOCKET", path);
        }
        if let Some(c) = &self.certs {
            cmd.env("TERMGATE__GATEWAY__TLS_CERT_FILE", &c.cert)
                .env("TERMGATE__GATEWAY__TLS_KEY_FILE", &c.key);
        }
        if let Some(dir) = &self.player_dir {
            cmd.env("TERMGATE__GATEWAY__PLAYER_DIR", dir);
        }
        cmd.args(args);
        for (k, v) in &self.shared_env {
            cmd.env(k, v);
        }
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn termgate-gateway");
        self.gateways.push(GatewayProc {
            port,
            admin_port,
            child: Some(child),
            log,
        });
        if wait {
            self.wait_ready(n);
        }
        n
    }

    /// Waits until gateway `n` reports ready (its route cache synced once).
    pub fn wait_ready(&mut self, n: usize) {
        let ready = format!("http://127.0.0.1:{}/readyz", self.gateways[n].admin_port);
        // Pingora starts its services in no fixed order: the admin listener can say
        // ready before the public one accepts (plain or TLS), so both are waited for.
        let public: std::net::SocketAddr = ([127, 0, 0, 1], self.gateways[n].port).into();
        let start = Instant::now();
        loop {
            let ready = http("GET", &ready, None, None).is_ok_and(|a| a.status == 200);
            let accepts =
                std::net::TcpStream::connect_timeout(&public, Duration::from_millis(200)).is_ok();
            if ready && accepts {
                return;
            }
            let g = &mut self.gateways[n];
            if let Some(status) = g.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "termgate-gateway exited during start ({status}):\n{}",
                    g.log_text()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "gateway not ready:\n{}",
                g.log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The first gateway.
    pub fn gw(&self) -> &GatewayProc {
        &self.gateways[0]
    }

    /// `https` in [`tls_mode`], else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.certs.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The allowed Origin of gateway `n`.
    pub fn origin(&self, n: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.gateways[n].port)
    }

    /// URL on gateway `n`.
    pub fn url(&self, n: usize, path: &str) -> String {
        format!(
            "{}://127.0.0.1:{}{path}",
            self.scheme(),
            self.gateways[n].port
        )
    }

    /// Where a terminal client reaches gateway `n` (TLS, pinned, in [`tls_mode`]).
    pub fn target(&self, n: usize) -> crate::term::Target {
        let addr = ([127, 0, 0, 1], self.gateways[n].port).into();
        match &self.certs {
            Some(c) => crate::term::Target::Tls(addr, c.pin()),
            None => crate::term::Target::Tcp(addr),
        }
    }

    /// Registers, as an admin through gateway 0, a target named `name` whose upstream is
    /// the ttyd on unix socket `socket`, for `users`; its session id.
    pub fn register_target(&self, name: &str, socket: &std::path::Path, users: &[&str]) -> String {
        let admin = self.control.token("root", true);
        let a = http(
            "POST",
            &self.url(0, "/api/targets"),
            Some(&admin),
            Some(&serde_json::json!({
                "name": name,
                "upstream": format!("unix:{}", socket.display()),
                "users": users,
            })),
        )
        .unwrap();
        assert_eq!(a.status, 201, "register: {}", a.text);
        a.body["id"].as_str().expect("the target's id").to_owned()
    }

    /// Signs `sub` in through gateway 0 and returns the `Cookie` header value to send.
    pub fn sign_in(&self, sub: &str) -> String {
        let token = self.control.token(sub, false);
        self.sign_in_with(0, &token)
    }

    /// Posts `token` to `/auth/session` of gateway `n`; returns the cookie pair it set
    /// (the sign-in's own token).
    pub fn sign_in_with(&self, n: usize, token: &str) -> String {
        let a = http(
            "POST",
            &self.url(n, "/auth/session"),
            None,
            Some(&serde_json::json!({"token": token})),
        )
        .expect("sign in");
        assert_eq!(a.status, 200, "sign-in: {}", a.text);
        let value = a
            .cookie("termgate_session")
            .expect("the sign-in sets the session cookie");
        assert!(!value.is_empty(), "the session cookie has a value");
        format!("termgate_session={value}")
    }

    /// Opens a terminal websocket on gateway `n` at `path_and_query`, and waits until
    /// ttyd has spoken (its title), so the terminal is really attached. A terminal that
    /// is closed instead (such as one ended right after its `101`) is returned as it is
    /// for the caller to judge.
    pub fn open(
        &self,
        n: usize,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Result<crate::term::Terminal, crate::term::ConnectError> {
        let t = crate::term::Terminal::connect(self.target(n), path_and_query, headers)?;
        let _ = t.wait_title(Duration::from_secs(10));
        Ok(t)
    }

    /// Opens the terminal of `session` as a browser would: cookie and this gateway's Origin.
    pub fn open_as(
        &self,
        n: usize,
        session: &str,
        cookie: &str,
    ) -> Result<crate::term::Terminal, crate::term::ConnectError> {
        let origin = self.origin(n);
        self.open(
            n,
            &format!("/s/{session}/ws"),
            &[("Cookie", cookie), ("Origin", &origin)],
        )
    }
}

//! A small Chrome DevTools Protocol driver: a headless `chromium` driven over its
//! debugging websocket, the way a user's browser loads and uses the sessions page.
//!
//! One thread, blocking calls: each command is sent with a fresh id and the socket is
//! read until the answer with that id arrives. Of the events, only the page's console
//! and log entries (kept for failure reports) and JavaScript dialogs (accepted, so they
//! cannot block the page, and recorded) are looked at; the rest are dropped.

use std::fs;
use std::io;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use tungstenite::handshake::HandshakeError;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

/// The browser binary (Debian's `chromium` package; `ensure_chromium` installs it).
pub const CHROMIUM: &str = "chromium";
/// How long chromium may take to start and announce its debugging port.
const LAUNCH_DEADLINE: Duration = Duration::from_secs(30);
/// How long one protocol command may take.
const COMMAND_DEADLINE: Duration = Duration::from_secs(30);
/// Socket read timeout: how often a waiting command checks its deadline.
const POLL: Duration = Duration::from_millis(50);

/// A running headless chromium with one page attached.
pub struct Browser {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    session: String,
    console: Vec<String>,
    dialogs: Vec<String>,
    process: Process,
}

/// The chromium process group and its profile directory; killed and removed on drop.
struct Process {
    child: Child,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl Process {
    /// Reads `DevToolsActivePort` (port, then the browser's websocket path) once
    /// chromium has written both lines.
    fn wait_for_port(&mut self) -> Result<(u16, String)> {
        let file = self.dir.path().join("DevToolsActivePort");
        let start = Instant::now();
        loop {
            if let Ok(text) = fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    if let (Ok(port), true) = (port.trim().parse::<u16>(), path.starts_with('/')) {
                        return Ok((port, path.trim().to_owned()));
                    }
                }
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{CHROMIUM} exited during start ({status}):\n{}",
                    self.log_tail()
                );
            }
            if start.elapsed() > LAUNCH_DEADLINE {
                bail!(
                    "{CHROMIUM} wrote no {} within {LAUNCH_DEADLINE:?}:\n{}",
                    file.display(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The last lines chromium printed.
    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // SIGKILL the whole group while the (possibly exited, unreaped) leader still
        // holds the id, then reap it; the profile directory goes after that.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts `chromium --headless=new` with a fresh profile and opens a blank page.
    pub fn launch() -> Result<Browser> {
        let dir = tempfile::Builder::new()
            .prefix("termgate-chromium.")
            .tempdir()
            .context("temporary profile directory")?;
        let log = dir.path().join("chromium.log");
        let out = fs::File::create(&log).context("chromium log file")?;
        let mut cmd = Command::new(CHROMIUM);
        cmd.args([
            "--headless=new",
            // Tests run as root, where chromium refuses to start sandboxed.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", dir.path().display()));
        if crate::stack::tls_mode() {
            // The gateways of a TLS run present self-signed certificates.
            cmd.arg("--ignore-certificate-errors");
        }
        cmd.args(["--window-size=1280,900", "about:blank"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().context("chromium log file")?)
            .stderr(out)
            // Its own process group, so drop ends the renderer and helper processes too.
            .process_group(0);
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
                "`{CHROMIUM}` is not installed or not on PATH; the browser end-to-end test \
                 needs it (as root: apt-get install -y chromium, or run .ci/run, whose \
                 ensure_chromium step installs it)"
            ),
            Err(e) => return Err(e).context(format!("cannot start {CHROMIUM}")),
        };
        let mut process = Process { child, log, dir };
        let (port, path) = process.wait_for_port()?;
        let ws = connect(port, &path)?;
        let mut browser = Browser {
            ws,
            next_id: 0,
            session: String::new(),
            console: Vec::new(),
            dialogs: Vec::new(),
            process,
        };
        let target = browser.call("Target.createTarget", json!({"url": "about:blank"}))?;
        let target_id = target["targetId"]
            .as_str()
            .ok_or_else(|| anyhow!("Target.createTarget answered without targetId: {target}"))?
            .to_owned();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        )?;
        browser.session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("Target.attachToTarget answered without sessionId: {attached}"))?
            .to_owned();
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            browser.page(domain, json!({}))?;
        }
        Ok(browser)
    }

    /// The last lines chromium printed.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// Console messages, uncaught exceptions and log entries (CSP violations, failed
    /// loads) of the page and its same-origin frames so far.
    pub fn console(&self) -> &[String] {
        &self.console
    }

    /// JavaScript dialogs (`alert`, `confirm`, `beforeunload`, …) the page opened so
    /// far, as `type: message`; each was accepted.
    pub fn dialogs(&self) -> &[String] {
        &self.dialogs
    }

    /// Sends a browser-level command and returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        self.command(None, method, params)
    }

    /// Sends a command to the page and returns its result.
    pub fn page(&mut self, method: &str, params: Value) -> Result<Value> {
        let session = self.session.clone();
        self.command(Some(&session), method, params)
    }

    fn command(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .with_context(|| format!("sending {method}"))?;
        let start = Instant::now();
        loop {
            let text = match self.ws.read() {
                Ok(Message::Text(t)) => t,
                Ok(Message::Close(_)) => bail!("{CHROMIUM} closed the connection during {method}"),
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if start.elapsed() > COMMAND_DEADLINE {
                        bail!("no answer to {method} within {COMMAND_DEADLINE:?}");
                    }
                    continue;
                }
                Err(e) => {
                    return Err(anyhow!(
                        "reading the answer to {method}: {e}\n{}",
                        self.log_tail()
                    ))
                }
            };
            let v: Value = serde_json::from_str(text.as_str())
                .with_context(|| format!("{CHROMIUM} sent invalid JSON: {}", text.as_str()))?;
            if v["id"].as_u64() == Some(id) {
                if let Some(err) = v.get("error") {
                    bail!(
                        "{method} failed: {}",
                        err["message"].as_str().unwrap_or(&err.to_string())
                    );
                }
                return Ok(v["result"].clone());
            }
            if v.get("id").is_none() {
                self.note_event(&v);
            }
            if v["method"] == "Page.javascriptDialogOpening" {
                // A dialog blocks the page (and this command) until answered: accept it,
                // as a user clicking OK or Leave would, and keep it for the test to see.
                let p = &v["params"];
                self.dialogs.push(format!(
                    "{}: {}",
                    p["type"].as_str().unwrap_or("?"),
                    p["message"].as_str().unwrap_or("")
                ));
                self.next_id += 1;
                let mut answer = json!({
                    "id": self.next_id,
                    "method": "Page.handleJavaScriptDialog",
                    "params": {"accept": true},
                });
                if let Some(s) = v.get("sessionId") {
                    answer["sessionId"] = s.clone();
                }
                self.ws
                    .send(Message::text(answer.to_string()))
                    .context("answering a dialog")?;
            }
        }
    }

    /// Keeps what a failing test wants to see; every other event is dropped.
    fn note_event(&mut self, v: &Value) {
        let p = &v["params"];
        let line = match v["method"].as_str() {
            Some("Runtime.consoleAPICalled") => {
                let args: Vec<String> = p["args"]
                    .as_array()
                    .map(|a| a.iter().map(remote_text).collect())
                    .unwrap_or_default();
                format!(
                    "console.{}: {}",
                    p["type"].as_str().unwrap_or("?"),
                    args.join(" ")
                )
            }
            Some("Runtime.exceptionThrown") => {
                format!("uncaught: {}", exception_text(&p["exceptionDetails"]))
            }
            Some("Log.entryAdded") => {
                let e = &p["entry"];
                format!(
                    "log.{} ({}): {} {}",
                    e["level"].as_str().unwrap_or("?"),
                    e["source"].as_str().unwrap_or("?"),
                    e["text"].as_str().unwrap_or(""),
                    e["url"].as_str().unwrap_or("")
                )
            }
            _ => return,
        };
        self.console.push(line);
    }

    /// Loads `url` and waits until its document has finished loading.
    pub fn navigate(&mut self, url: &str) -> Result<()> {
        // Marks the current document, so a reload of the same address is not mistaken
        // for the new document being ready.
        self.eval("window.__termgateOldDocument = true")?;
        let r = self.page("Page.navigate", json!({"url": url}))?;
        if let Some(err) = r["errorText"].as_str() {
            bail!("navigating to {url}: {err}");
        }
        // A same-document navigation (only the fragment changes) has no loader and
        // keeps the document.
        let new_document = r.get("loaderId").is_some_and(|l| !l.is_null());
        let ready = if new_document {
            "document.readyState === 'complete' && !window.__termgateOldDocument"
        } else {
            "document.readyState === 'complete'"
        };
        self.wait_js(ready, COMMAND_DEADLINE, &format!("{url} to load"))?;
        Ok(())
    }

    /// Evaluates `js` in the page (awaiting a returned promise) and returns its value;
    /// a thrown exception is an error carrying its text.
    pub fn eval(&mut self, js: &str) -> Result<Value> {
        let r = self.page(
            "Runtime.evaluate",
            json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
        )?;
        if let Some(details) = r.get("exceptionDetails") {
            bail!("{js}\n  threw: {}", exception_text(details));
        }
        Ok(r["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// Evaluates `js` until it gives a truthy value (returned), or fails after
    /// `deadline` naming `what`. Errors while waiting (a document being replaced, a
    /// frame not there yet) count as not yet.
    pub fn wait_js(&mut self, js: &str, deadline: Duration, what: &str) -> Result<Value> {
        let start = Instant::now();
        let mut last;
        loop {
            match self.eval(js) {
                Ok(v) if truthy(&v) => return Ok(v),
                Ok(v) => last = format!("last value: {v}"),
                Err(e) => last = format!("last error: {e:#}"),
            }
            if start.elapsed() > deadline {
                bail!("timed out after {deadline:?} waiting for {what} ({last})");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Types `text` into the focused element, as an input method would.
    pub fn insert_text(&mut self, text: &str) -> Result<()> {
        self.page("Input.insertText", json!({"text": text}))
            .map(drop)
    }

    /// Presses and releases Enter on the focused element.
    pub fn press_enter(&mut self) -> Result<()> {
        let key = json!({
            "key": "Enter",
            "code": "Enter",
            "windowsVirtualKeyCode": 13,
            "nativeVirtualKeyCode": 13,
            "text": "\r",
            "unmodifiedText": "\r",
        });
        let mut down = key.clone();
        down["type"] = json!("keyDown");
        self.page("Input.dispatchKeyEvent", down)?;
        let mut up = key;
        up["type"] = json!("keyUp");
        self.page("Input.dispatchKeyEvent", up).map(drop)
    }

    /// Saves a PNG of the viewport at `path` (parent directories are created).
    pub fn screenshot(&mut self, path: &Path) -> Result<()> {
        let r = self.page("Page.captureScreenshot", json!({"format": "png"}))?;
        let data = r["data"]
            .as_str()
            .ok_or_else(|| anyhow!("Page.captureScreenshot answered without data"))?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .context("screenshot is not base64")?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// Emulates a `width`×`height` CSS-pixel viewport; `mobile` also applies the
    /// page's viewport meta tag and touch-sized scrollbars, as on a phone.
    pub fn set_viewport(&mut self, width: u32, height: u32, mobile: bool) -> Result<()> {
        self.page(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        )
        .map(drop)
    }

    /// Forgets every cookie, as a fresh browser would have none.
    pub fn clear_cookies(&mut self) -> Result<()> {
        self.page("Network.clearBrowserCookies", json!({}))
            .map(drop)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- browser console and dialogs ---");
            for line in self.console.iter().chain(&self.dialogs) {
                eprintln!("{line}");
            }
            eprintln!("--- {CHROMIUM} log (tail) ---\n{}", self.log_tail());
        }
    }
}

/// Connects to the browser's debugging websocket.
fn connect(port: u16, path: &str) -> Result<WebSocket<TcpStream>> {
    let url = format!("ws://127.0.0.1:{port}{path}");
    let stream =
        TcpStream::connect(("127.0.0.1", port)).with_context(|| format!("connecting to {url}"))?;
    stream.set_read_timeout(Some(POLL))?;
    // Screenshots arrive as one large base64 message.
    let config = WebSocketConfig::default()
        .max_message_size(Some(256 << 20))
        .max_frame_size(Some(256 << 20));
    let start = Instant::now();
    let mut attempt = tungstenite::client::client_with_config(url.as_str(), stream, Some(config));
    loop {
        match attempt {
            Ok((ws, _)) => return Ok(ws),
            Err(HandshakeError::Interrupted(mid)) => {
                if start.elapsed() > LAUNCH_DEADLINE {
                    bail!("no websocket upgrade from {url} within {LAUNCH_DEADLINE:?}");
                }
                attempt = mid.handshake();
            }
            Err(HandshakeError::Failure(e)) => bail!("websocket handshake with {url}: {e}"),
        }
    }
}

/// JavaScript truthiness of a returned value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// Text of a `Runtime.ExceptionDetails`.
fn exception_text(details: &Value) -> String {
    details["exception"]["description"]
        .as_str()
        .or_else(|| details["text"].as_str())
        .unwrap_or("exception")
        .to_owned()
}

/// Text of a `Runtime.RemoteObject` (a console argument).
fn remote_text(o: &Value) -> String {
    match o.get("value") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => o["description"].as_str().unwrap_or("?").to_owned(),
    }
}

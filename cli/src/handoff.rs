//! Signing in through the browser, as `gh auth login` and `tsh login` do: the client
//! listens on a loopback port, opens the gateway's `/cli-login` page with that port, a
//! random `state` and the S256 challenge of a random verifier in the fragment, and
//! waits. The user allows it in the browser they are signed in with; the page sends
//! the browser to `http://127.0.0.1:<port>/callback` with a one-minute code, and the
//! client exchanges the code and its verifier at `/auth/cli/token` for a recorded
//! sign-in of its own.
//!
//! Another local process that reaches the port first cannot use what it catches: the
//! state tells the client's own answer from others, and a code is worth nothing
//! without the verifier, which never leaves this process.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::failure::{Failure, Status};
use crate::gateway::Gateway;

/// How long the user has to allow the sign-in in the browser.
const WAIT_FOR_BROWSER: Duration = Duration::from_secs(300);
/// How long a browser's request to the port may take to arrive whole.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Largest request head read from the browser.
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// The sign-in the gateway handed over.
pub struct HandedOver {
    /// Its own token.
    pub token: String,
    /// Who it signs in.
    pub sub: String,
    /// When it ends (Unix seconds).
    pub expires_at: u64,
}

/// What one request to the port asked.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// A code, for this client's state.
    Code(String),
    /// The browser says no (denied, or the gateway refused to mint a code).
    Refused(String),
    /// Not the callback (a browser's `/favicon.ico`, say): answered 404, waited past.
    Elsewhere,
}

/// Signs in to `gw` through the browser; what to keep.
pub async fn sign_in(gw: &Gateway) -> Result<HandedOver, Failure> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| Failure::error(format!("cannot listen on a loopback port: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| Failure::error(format!("cannot listen on a loopback port: {e}")))?
        .port();
    let state = random()?;
    let verifier = random()?;
    let url = format!(
        "{}/cli-login#port={port}&state={state}&challenge={}",
        gw.url.as_str(),
        policy::oidc::pkce_challenge(&verifier)
    );
    match open_browser(&url) {
        Some(how) => eprintln!("Opening the sign-in page in your browser ({how}):"),
        None => eprintln!("Open this page in a browser on this computer to sign in:"),
    }
    eprintln!("  {url}");
    eprintln!("Waiting for you to allow it there (Ctrl-C to stop)…");
    // Each connection is read on its own: a browser may open one it never sends on
    // (a preconnect), and the callback must not wait behind it.
    let (heads, mut read) = tokio::sync::mpsc::channel::<(TcpStream, String)>(8);
    let waited = tokio::time::timeout(WAIT_FOR_BROWSER, async {
        loop {
            let (mut conn, head) = tokio::select! {
                accepted = listener.accept() => {
                    let (mut conn, _) = accepted
                        .map_err(|e| Failure::error(format!("waiting for the browser: {e}")))?;
                    let heads = heads.clone();
                    tokio::spawn(async move {
                        if let Some(head) = read_head(&mut conn).await {
                            let _ = heads.send((conn, head)).await;
                        }
                    });
                    continue;
                }
                Some(request) = read.recv() => request,
            };
            match callback(&head, &state) {
                Ok(Answer::Elsewhere) => reply(&mut conn, 404, "Not found.").await,
                Ok(Answer::Code(code)) => return Ok((conn, code)),
                Ok(Answer::Refused(why)) => {
                    reply(
                        &mut conn,
                        200,
                        &format!("termgate was not signed in: {why}."),
                    )
                    .await;
                    return Err(Failure {
                        status: Status::SignIn,
                        message: format!("not signed in: {why}"),
                    });
                }
                Err(why) => {
                    reply(
                        &mut conn,
                        400,
                        &format!("termgate was not signed in: {why}."),
                    )
                    .await;
                    return Err(Failure::error(format!("not signed in: {why}")));
                }
            }
        }
    })
    .await;
    let (mut conn, code) = match waited {
        Ok(answer) => answer?,
        Err(_) => {
            return Err(Failure::error(format!(
                "no answer from the browser within {} minutes; run termgate login again",
                WAIT_FOR_BROWSER.as_secs() / 60
            )))
        }
    };
    let exchanged = exchange(gw, &code, &verifier).await;
    let page = match &exchanged {
        Ok(h) => format!(
            "termgate is signed in to {} as {}. You can close this tab.",
            gw.url.as_str(),
            h.sub
        ),
        Err(e) => format!("termgate was not signed in: {e}."),
    };
    reply(&mut conn, 200, &page).await;
    exchanged
}

/// The code and this client's verifier, exchanged for the sign-in.
async fn exchange(gw: &Gateway, code: &str, verifier: &str) -> Result<HandedOver, Failure> {
    let body = json!({"code": code, "verifier": verifier});
    let reply = gw
        .send("POST", "/auth/cli/token", None, Some(&body))
        .await?;
    if reply.status != 200 {
        return Err(Failure {
            status: Status::SignIn,
            message: format!("the gateway refused the sign-in: {}", reply.message()),
        });
    }
    let v = reply.json();
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    match (text("token"), text("sub")) {
        (Some(token), Some(sub)) if !token.is_empty() => Ok(HandedOver {
            token,
            sub,
            expires_at: v.get("expires_at").and_then(Value::as_u64).unwrap_or(0),
        }),
        _ => Err(Failure::error(
            "signing in: the gateway's answer holds no sign-in",
        )),
    }
}

/// 32 random bytes, base64url: a state, or a PKCE verifier (43 characters).
fn random() -> Result<String, Failure> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| Failure::error(format!("no randomness from the system: {e}")))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// Starts the user's browser at `url`: each of `$BROWSER`'s commands (`:`-separated,
/// `%s` standing for the URL, else the URL appended) in turn, else the desktop's
/// opener. Which command started, if one did; it is not waited for.
fn open_browser(url: &str) -> Option<String> {
    let commands: Vec<String> = match std::env::var("BROWSER") {
        Ok(b) if !b.trim().is_empty() => b.split(':').map(str::to_owned).collect(),
        _ if cfg!(target_os = "macos") => vec!["open".into()],
        _ => vec!["xdg-open".into()],
    };
    commands.into_iter().find(|command| {
        let mut words: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
        if words.is_empty() {
            return false;
        }
        if words.iter().any(|w| w.contains("%s")) {
            for w in &mut words {
                *w = w.replace("%s", url);
            }
        } else {
            words.push(url.to_owned());
        }
        let started = std::process::Command::new(&words[0])
            .args(&words[1..])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        match started {
            Ok(mut child) => {
                // Reaped when it exits; a browser may keep running after the client.
                std::thread::spawn(move || child.wait());
                true
            }
            Err(_) => false,
        }
    })
}

/// The request head of one connection, or `None` when it does not come whole in time.
async fn read_head(conn: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let read = async {
        let mut buf = [0u8; 2048];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).await.ok()?;
            if n == 0 || head.len() + n > MAX_REQUEST_BYTES {
                return None;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Some(())
    };
    tokio::time::timeout(REQUEST_DEADLINE, read).await.ok()??;
    String::from_utf8(head).ok()
}

/// What a request head asks: the callback's code for `state`, a refusal, or another
/// path. A callback for another state is an error: something other than this client's
/// page answered.
fn callback(head: &str, state: &str) -> Result<Answer, String> {
    let target = head
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("GET "))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_default();
    let Some(query) = target.strip_prefix("/callback?") else {
        return Ok(Answer::Elsewhere);
    };
    let answer = policy::oidc::Callback::parse(query).map_err(|e| e.to_string())?;
    let same = answer.state.as_deref().is_some_and(|s| {
        s.len() == state.len()
            && s.bytes()
                .zip(state.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if !same {
        return Err("the browser's answer is not for this sign-in (its state differs)".into());
    }
    if let Some(error) = answer.error {
        let why = match (error.as_str(), answer.error_description) {
            ("access_denied", _) => "it was denied in the browser".to_owned(),
            (_, Some(d)) if !d.is_empty() => d,
            (code, _) => code.to_owned(),
        };
        return Ok(Answer::Refused(why));
    }
    match answer.code {
        Some(code) if !code.is_empty() => Ok(Answer::Code(code)),
        _ => Err("the browser's answer holds no code".into()),
    }
}

/// Answers the browser with a small page saying `text`, then closes.
async fn reply(conn: &mut TcpStream, status: u16, text: &str) {
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>termgate</title></head><body><p id=\"termgate-cli\">{escaped}</p></body></html>"
    );
    let reason = if status == 200 { "OK" } else { "Not OK" };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nCache-Control: no-store\r\nReferrer-Policy: no-referrer\r\nContent-Security-Policy: default-src 'none'\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // The browser's tab is all it reaches: nothing to do when it went away.
    let _ = conn.write_all(head.as_bytes()).await;
    let _ = conn.write_all(body.as_bytes()).await;
    let _ = conn.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATE: &str = "s7Yq0V4mV1b2Kx9d";

    fn get(target: &str) -> String {
        format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    }

    #[test]
    fn the_callback_for_this_state_gives_its_code() {
        assert_eq!(
            callback(
                &get(&format!("/callback?code=a.b-c%2Fd&state={STATE}")),
                STATE
            ),
            Ok(Answer::Code("a.b-c/d".into()))
        );
    }

    #[test]
    fn another_state_or_none_is_refused_whatever_it_carries() {
        for target in [
            "/callback?code=x&state=other".to_owned(),
            "/callback?code=x".to_owned(),
            format!("/callback?code=x&state={STATE}x"),
            "/callback?error=access_denied&state=nope".to_owned(),
            format!("/callback?code=x&state={STATE}&state={STATE}"),
        ] {
            assert!(callback(&get(&target), STATE).is_err(), "{target}");
        }
    }

    #[test]
    fn a_denial_or_a_refused_code_says_why() {
        assert_eq!(
            callback(
                &get(&format!("/callback?error=access_denied&state={STATE}")),
                STATE
            ),
            Ok(Answer::Refused("it was denied in the browser".into()))
        );
        assert_eq!(
            callback(
                &get(&format!(
                    "/callback?error=cli_login_unavailable&error_description=no%20key&state={STATE}"
                )),
                STATE
            ),
            Ok(Answer::Refused("no key".into()))
        );
        assert!(callback(&get(&format!("/callback?state={STATE}")), STATE).is_err());
    }

    #[test]
    fn other_paths_and_methods_are_not_the_callback() {
        for head in [
            get("/favicon.ico"),
            get("/callback"),
            get("/"),
            format!("POST /callback?code=x&state={STATE} HTTP/1.1\r\n\r\n"),
        ] {
            assert_eq!(callback(&head, STATE), Ok(Answer::Elsewhere), "{head}");
        }
    }
}

//! `termgate login` and `logout`: a sign-in of its own at the gateway, recorded by
//! control with the others and revoked there on logout (`DELETE /auth/session`). It is
//! handed over by the browser the user is signed in with (`crate::handoff`), or made
//! from a token as the page's sign-in form makes one (`POST /auth/session`).

use std::io::{BufRead, Read};
use std::path::Path;

use serde_json::Value;

use crate::credentials::{Credential, Credentials};
use crate::failure::{Failure, Status};
use crate::gateway::{Gateway, GatewayUrl};
use crate::handoff::HandedOver;

/// Where a sign-in comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The browser the user is signed in with hands one over.
    Browser,
    /// A token typed at a prompt, not echoed.
    Prompt,
    /// A token read from standard input (for scripts).
    Stdin,
}

/// Signs in to `url` `how` the user asked; keeps the sign-in's own token. Returns what
/// to tell the user.
pub async fn login(url: &str, how: How, ca_file: Option<&Path>) -> Result<String, Failure> {
    let url = GatewayUrl::parse(url)?;
    // Kept absolute: later commands run from anywhere.
    let ca_file = ca_file
        .map(|p| {
            std::fs::canonicalize(p)
                .map_err(|e| Failure::error(format!("--ca-file {}: {e}", p.display())))
        })
        .transpose()?;
    let gw = Gateway::new(url.clone(), ca_file.as_deref(), None)?;
    let (kept, as_given) = match how {
        How::Browser => (crate::handoff::sign_in(&gw).await?, false),
        How::Prompt => with_token(&gw, &token_from_prompt(&url)?).await?,
        How::Stdin => with_token(&gw, &token_from_stdin()?).await?,
    };
    let mut credentials = Credentials::load()?;
    credentials.gateways.insert(
        url.as_str().to_owned(),
        Credential {
            token: kept.token,
            sub: kept.sub.clone(),
            expires_at: kept.expires_at,
            ca_file: ca_file.clone(),
        },
    );
    credentials.current = Some(url.as_str().to_owned());
    credentials.save()?;
    let mut said = format!("signed in to {} as {}", url.as_str(), kept.sub);
    if kept.expires_at != 0 || !as_given {
        let until = crate::sessions::until(crate::now(), kept.expires_at);
        said.push_str(&format!(", until {until}"));
    }
    if as_given {
        said.push_str(
            "\nthis address passes only terminals (a front proxy): the token is kept as \
             given, termgate attach <id> works through it, and termgate logout forgets it \
             here without revoking it",
        );
    }
    Ok(said)
}

/// A sign-in made from `token`, as the page's sign-in form makes one; or, where the URL
/// has no sign-in (a front proxy), the token itself (`true`).
async fn with_token(gw: &Gateway, token: &str) -> Result<(HandedOver, bool), Failure> {
    let reply = gw.send("POST", "/auth/session", Some(token), None).await?;
    if reply.not_there() {
        return Ok((as_given(gw, token).await?, true));
    }
    match reply.status {
        200 => {}
        401 | 403 => {
            return Err(Failure {
                status: Status::SignIn,
                message: format!("the gateway refused this token: {}", reply.message()),
            })
        }
        _ => return Err(gw.refused(&reply, "signing in")),
    }
    // The answer sets one cookie, the sign-in's own token: it is what is kept, so that
    // a logout signs out this sign-in alone, and the token piped in is not stored.
    let own = reply
        .set_cookies
        .iter()
        .filter_map(|c| c.split(';').next()?.split_once('=').map(|(_, v)| v.trim()))
        .find(|v| !v.is_empty())
        .ok_or_else(|| Failure::error("signing in: the gateway's answer set no sign-in"))?;
    let who = reply.json();
    Ok((
        HandedOver {
            token: own.to_owned(),
            sub: who
                .get("sub")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            expires_at: who.get("expires_at").and_then(Value::as_u64).unwrap_or(0),
        },
        false,
    ))
}

/// A session id no one has, for [`as_given`]'s check.
const NO_SESSION: &str = "aaaaaaaaaaaaaaaa";

/// Behind a front proxy that passes only terminals (docs/front-proxies.md "Behind a
/// front proxy") there is no sign-in to make: what the terminal's check takes is the
/// token itself, which is kept as it is. It is checked by that check first, on a
/// session id no one has: control verifies the token before it looks the session up, so
/// a token it takes is answered termgate's "no such session", any other 401.
async fn as_given(gw: &Gateway, token: &str) -> Result<HandedOver, Failure> {
    let path = format!("/s/{NO_SESSION}/token");
    let reply = gw.send("GET", &path, Some(token), None).await?;
    let code = reply.json()["error"]["code"].as_str().map(str::to_owned);
    match reply.status {
        404 if code.as_deref() == Some(policy::Refusal::NOT_FOUND.code) => {}
        401 | 403 => {
            return Err(Failure {
                status: Status::SignIn,
                message: format!("the gateway refused this token: {}", reply.message()),
            })
        }
        _ if reply.not_there() => {
            return Err(Failure::error(format!(
                "{} has neither termgate's sign-in nor its terminals ({}: {})",
                gw.url.as_str(),
                reply.status,
                reply.message()
            )))
        }
        _ => return Err(gw.refused(&reply, "checking the token")),
    }
    let claims = claims(token);
    Ok(HandedOver {
        token: token.to_owned(),
        sub: claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        expires_at: claims.get("exp").and_then(Value::as_u64).unwrap_or(0),
    })
}

/// A JWT's claims, unverified (the check above verified it): who it signs in, and
/// until when. `Null` for a token that is not a JWT.
fn claims(token: &str) -> Value {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    token
        .split('.')
        .nth(1)
        .and_then(|part| URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok())
        .and_then(|json| serde_json::from_slice(&json).ok())
        .unwrap_or(Value::Null)
}

/// Signs out of `gateway` (the current one when `None`): revoked at the gateway first,
/// then forgotten here. A sign-out the gateway could not make keeps the sign-in.
pub async fn logout(gateway: Option<&str>) -> Result<String, Failure> {
    let mut credentials = Credentials::load()?;
    let gateway = gateway.map(GatewayUrl::parse).transpose()?;
    let (url, credential) = credentials.select(gateway.as_ref().map(GatewayUrl::as_str))?;
    let gw = Gateway::new(
        GatewayUrl::parse(&url)?,
        credential.ca_file.as_deref(),
        Some(credential.token.clone()),
    )?;
    let said = match gw.call("DELETE", "/auth/session", None).await {
        Ok(r) if r.status == 200 => format!("signed out of {url}"),
        // A front proxy's token, kept as given: there is nothing here to revoke it at.
        Ok(r) if r.not_there() => format!(
            "forgot the token kept for {url}; it has no sign-out (a front proxy), so the \
             token itself stays valid until it expires or is revoked"
        ),
        // Expired or revoked already: nothing is left to revoke.
        Ok(r) if r.status == 401 => format!("signed out of {url} (the sign-in had already ended)"),
        Ok(r) => {
            return Err(Failure::error(format!(
                "the sign-out did not happen, you are still signed in: {} ({}); try again",
                r.message(),
                r.status
            )))
        }
        Err(e) => {
            return Err(Failure::error(format!(
                "the sign-out did not happen, you are still signed in: {e}"
            )))
        }
    };
    credentials.gateways.remove(&url);
    if credentials.current.as_deref() == Some(url.as_str()) {
        credentials.current = credentials.gateways.keys().next().cloned();
    }
    credentials.save()?;
    Ok(said)
}

/// The credential kept for `gateway` (the current one when `None`), and a client
/// presenting it.
pub fn signed_in(gateway: Option<&str>) -> Result<Gateway, Failure> {
    let credentials = Credentials::load()?;
    let gateway = gateway.map(GatewayUrl::parse).transpose()?;
    let (url, credential) = credentials.select(gateway.as_ref().map(GatewayUrl::as_str))?;
    if credential.expires_at != 0 && credential.expires_at <= crate::now() {
        return Err(Failure::sign_in(&url, "your sign-in expired"));
    }
    Gateway::new(
        GatewayUrl::parse(&url)?,
        credential.ca_file.as_deref(),
        Some(credential.token),
    )
}

fn token_from_stdin() -> Result<String, Failure> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| Failure::error(format!("reading the token from standard input: {e}")))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Failure::error("no token on standard input"));
    }
    Ok(token.to_owned())
}

/// Asks for the token at the terminal, not echoed (it would stay on the screen and in
/// the terminal's scrollback).
fn token_from_prompt(url: &GatewayUrl) -> Result<String, Failure> {
    use rustix::termios::{self, LocalModes, OptionalActions};
    let stdin = std::io::stdin();
    if !termios::isatty(&stdin) {
        return Err(Failure::error(
            "no terminal to ask for a token at: pipe one in with --token-stdin, or sign in through the browser (without --token)",
        ));
    }
    let before = termios::tcgetattr(&stdin).ok();
    if let Some(b) = &before {
        let mut quiet = b.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        let _ = termios::tcsetattr(&stdin, OptionalActions::Now, &quiet);
    }
    // Asked once nothing typed is echoed any more.
    eprint!("Token for {} (not shown): ", url.as_str());
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if let Some(b) = &before {
        let _ = termios::tcsetattr(&stdin, OptionalActions::Now, b);
    }
    eprintln!();
    read.map_err(|e| Failure::error(format!("reading the token: {e}")))?;
    let token = line.trim();
    if token.is_empty() {
        return Err(Failure::error("no token given"));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokens_claims_are_read_and_anything_else_is_none() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine as _;
        let payload = URL_SAFE_NO_PAD.encode(br#"{"sub":"alice","exp":1700000000}"#);
        let c = claims(&format!("e30.{payload}.sig"));
        assert_eq!(c["sub"], "alice");
        assert_eq!(c["exp"], 1_700_000_000);
        for bad in ["", "opaque", "a.!!!.b", "e30.e30"] {
            assert!(claims(bad).get("sub").is_none(), "{bad}");
        }
    }
}

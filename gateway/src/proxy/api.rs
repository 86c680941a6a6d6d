//! The gateway's API surface: `/api/…`, proxied to control's `/v1/…` for a verified
//! caller, and `/auth/session` — who am I (GET), sign in (POST, sets the cookie), sign
//! out (DELETE).

use std::time::Duration;

use pingora::proxy::Session;
use policy::{CredentialSource, Principal, Refusal};

use super::credential::{authenticate, caller, credential, Credential};
use super::headers::header;
use super::outcome::{Allowed, Denied, Next};
use super::reply::Json;
use super::upstream::{ControlCall, Upstream};
use crate::clock::now;
use crate::control_client::{NotRecorded, SignInReport};
use crate::state::{ClosedFor, Gateway};
use crate::terminals::CloseReason;

/// Largest sign-in body: a JSON object holding one token.
const MAX_SIGN_IN_BYTES: usize = 16 * 1024;

/// The body of a sign-in.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

/// Admits an `/api/{rest}` call, to be proxied to control with the verified token.
pub(super) async fn api(g: &Gateway, session: &mut Session, rest: &str) -> Result<Allowed, Denied> {
    let verified = caller(g, session).await?;
    let source = verified.source;
    let req = session.req_header();
    let unsafe_method = !matches!(req.method.as_str(), "GET" | "HEAD" | "OPTIONS");
    if source == CredentialSource::Cookie && unsafe_method {
        // Defence in depth next to SameSite=Strict: a cookie-borne change must come
        // from an allowed page.
        g.origins
            .check(header(req, "origin"), source)
            .map_err(Refusal::from)?;
    }
    let declared = header(req, "content-length")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > g.config.gateway.max_body_bytes) {
        return Err(Refusal::BODY_TOO_LARGE.into());
    }
    let query = req.uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let timeout = Duration::from_millis(g.config.gateway.control_timeout_ms);
    let call = ControlCall {
        path: format!("/v1/{rest}{query}"),
        timeout,
        answer_within: timeout + docker_wait(&g.config.control, req.method.as_str(), rest),
        viewer: None,
    };
    Ok(Allowed {
        principal: Some(verified.principal),
        token: verified.token,
        ..Allowed::new("api", Next::Proxy(Upstream::Control(call)))
    })
}

/// How long control may wait on Docker while answering `method /api/{rest}`: its bound
/// on one Docker call (`control.docker_timeout_seconds`) for a create or a redraw. An
/// end answers once it is decided (the container's stop runs in the background), so it,
/// like every other call, waits on nothing but control's store.
///
/// One Docker bound, not the sum over a create's calls (volume, create, start): a
/// create whose Docker steps together take longer is not a normal slow create but a
/// Docker in trouble, and its caller hears 504 `control_timeout` rather than waiting
/// on every step's own bound (control may still finish it; the session then shows in
/// the list).
fn docker_wait(control: &config::ControlConfig, method: &str, rest: &str) -> Duration {
    let docker = Duration::from_secs(control.docker_timeout_seconds);
    let segments: Vec<&str> = rest.split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["sessions"])
        | ("POST", ["sessions", _, "redraw"])
        | ("DELETE", ["workspaces" | "shared-workspaces", _]) => docker,
        _ => Duration::ZERO,
    }
}

/// `/auth/session`: GET who am I, POST sign in (sets the cookie), DELETE sign out.
pub(super) async fn auth_session(g: &Gateway, session: &mut Session) -> Result<Allowed, Denied> {
    if let Some(origin) = header(session.req_header(), "origin") {
        // A sign-in posted from another site would log the victim into the attacker's
        // account.
        g.origins
            .check(Some(origin), CredentialSource::Cookie)
            .map_err(Refusal::from)?;
    }
    match session.req_header().method.as_str() {
        "DELETE" => sign_out(g, session).await,
        "GET" => {
            let p = caller(g, session).await?.principal;
            Ok(Allowed::new("whoami", Next::Reply(Json::ok(&who(&p)))))
        }
        "POST" => sign_in(g, session).await,
        _ => Err(Refusal::METHOD_NOT_ALLOWED
            .with_message("use GET, POST or DELETE")
            .into()),
    }
}

/// Signs the sign-in of `token` out, the one sign-out every path takes: revoked at
/// control first (every gateway then refuses it and closes what it opened), then its
/// terminals here closed at once. If control cannot be reached nothing is revoked, and
/// the caller is told so (503 `sign_out_failed`) with the cookie kept: never a
/// sign-out that only looks done.
pub(super) async fn sign_out_token(g: &Gateway, token: &[u8]) -> Result<(), Denied> {
    if let Err(e) = g.control.sign_out(&String::from_utf8_lossy(token)).await {
        tracing::warn!(error = %e, "sign-out could not reach control; nothing revoked");
        return Err(Refusal::SIGN_OUT_FAILED.into());
    }
    let n = g.terminals.close_credential(g.credential_key(token));
    g.said_closed(n, CloseReason::SignedOut, "signed_out", ClosedFor::Anything);
    Ok(())
}

/// A `Set-Cookie` value that clears cookie `name` on `path` (`secure`: `"; Secure"`
/// or nothing, as the cookie was set).
pub(super) fn cleared_cookie(name: &str, path: &str, secure: &str) -> String {
    format!("{name}=; HttpOnly; SameSite=Strict; Path={path}; Max-Age=0{secure}")
}

/// `DELETE /auth/session`: signs the presented credential out ([`sign_out_token`]) and
/// clears the cookie.
async fn sign_out(g: &Gateway, session: &Session) -> Result<Allowed, Denied> {
    let cookie = &g.config.auth.cookie_name;
    if let Some(Credential { token, .. }) = credential(session.req_header(), cookie) {
        sign_out_token(g, &token).await?;
    }
    let clear = cleared_cookie(cookie, "/", if g.secure_cookie { "; Secure" } else { "" });
    Ok(Allowed::new(
        "sign_out",
        Next::Reply(
            Json::new(200, br#"{"signed_in":false}"#.to_vec()).with_header("Set-Cookie", clear),
        ),
    ))
}

/// Verifies the token of a bearer header or of the body, gives the sign-in a token of
/// its own (when the gateway holds a signing key), records the sign-in at control and
/// sets its token as the cookie, for as long as the presented token is valid.
async fn sign_in(g: &Gateway, session: &mut Session) -> Result<Allowed, Denied> {
    let token = match header(session.req_header(), "authorization")
        .and_then(policy::identity::bearer)
    {
        Some(t) => t.to_vec(),
        None => {
            let body = read_body(session, MAX_SIGN_IN_BYTES).await?;
            let sign_in: SignIn = serde_json::from_slice(&body).map_err(|e| {
                Refusal::INVALID_JSON.with_message(format!("expected {{\"token\": \"…\"}}: {e}"))
            })?;
            sign_in.token.into_bytes()
        }
    };
    // A token in the body is presented by a program, as a bearer header is.
    let presented = Credential {
        token,
        source: CredentialSource::Bearer,
    };
    let verified = authenticate(g, session, Some(presented)).await?;
    let p = verified.principal;
    let presented = verified.token.unwrap_or_default();
    let token = match &g.signer {
        Some(signer) => own_token(g, signer, &p)?,
        None => presented,
    };
    record_sign_in(g, session, &token, "token", &p.sub).await?;
    let max_age = p.expires_at.saturating_sub(now());
    let cookie = &g.config.auth.cookie_name;
    let secure = if g.secure_cookie { "; Secure" } else { "" };
    let set =
        format!("{cookie}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}");
    tracing::info!(target: "audit", sub = %p.sub, sign_in = %g.credential_key(token.as_bytes()).id(), decision = "allow", reason = "sign_in", "signed in");
    let reply = Json::ok(&who(&p)).with_header("Set-Cookie", set);
    Ok(Allowed {
        principal: Some(p),
        ..Allowed::new("sign_in", Next::Reply(reply))
    })
}

/// Records the sign-in whose cookie will carry `token` at control, with this request's
/// browser and address. A sign-in nobody could sign out is not made: without control,
/// 503 `sign_in_unavailable` and no cookie.
pub(super) async fn record_sign_in(
    g: &Gateway,
    session: &Session,
    token: &str,
    method: &str,
    sub: &policy::Sub,
) -> Result<(), Refusal> {
    report_sign_in(g, session, token, method, false)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, sub = %sub, "sign-in could not be recorded; refused");
            Refusal::SIGN_IN_UNAVAILABLE
        })
}

/// Records a sign-in at control; with `once`, one that must be new (`Repeated` when
/// its token was recorded before).
pub(super) async fn report_sign_in(
    g: &Gateway,
    session: &Session,
    token: &str,
    method: &str,
    once: bool,
) -> Result<(), NotRecorded> {
    let ip = super::credential::client_ip(session, &g.trusted_proxies).to_string();
    let report = SignInReport {
        token: token.to_owned(),
        method: method.to_owned(),
        gateway: g.config.gateway.listen.clone(),
        user_agent: header(session.req_header(), "user-agent")
            .and_then(|v| std::str::from_utf8(v).ok())
            .unwrap_or_default()
            .to_owned(),
        client: ip,
        once,
    };
    g.control.record_sign_in(&report).await
}

/// The sign-in's own token: the presented token's user, roles, expiry and `jti` (an
/// admin revoking that token by its id ends the sign-ins made with it too), issued now
/// with a random `sid`, so every sign-in is signed out on its own.
fn own_token(g: &Gateway, signer: &policy::Signer, p: &Principal) -> Result<String, Refusal> {
    let sid = crate::oidc::random_hex().ok_or(Refusal::INTERNAL)?;
    signer
        .sign(&policy::TokenClaims {
            sub: p.sub.to_string(),
            exp: p.expires_at,
            iat: now(),
            iss: g.config.auth.issuer.clone(),
            aud: g.config.auth.audience.clone(),
            roles: p.roles.clone(),
            jti: p.jti.clone(),
            sid: Some(sid),
        })
        .map_err(|e| {
            tracing::error!(error = %e, "the sign-in's token could not be signed");
            Refusal::INTERNAL
        })
}

/// What the sessions page is told about the signed-in user.
pub(super) fn who(p: &Principal) -> serde_json::Value {
    serde_json::json!({"sub": p.sub.as_str(), "admin": p.admin, "expires_at": p.expires_at})
}

/// Reads a small request body, refusing one larger than `limit`.
pub(super) async fn read_body(session: &mut Session, limit: usize) -> Result<Vec<u8>, Refusal> {
    let mut body = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > limit => {
                return Err(Refusal::BODY_TOO_LARGE)
            }
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return Ok(body),
            Err(e) => {
                tracing::debug!(error = %e, "request body could not be read");
                return Err(Refusal::BAD_BODY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_calls_that_wait_on_docker_get_dockers_bound_on_top() {
        let control: config::ControlConfig = serde_json::from_value(serde_json::json!({
            "docker_timeout_seconds": 7,
        }))
        .unwrap();
        let wait = |method, rest| docker_wait(&control, method, rest).as_secs();
        assert_eq!(wait("POST", "sessions"), 7, "a create");
        assert_eq!(wait("POST", "sessions/abc/redraw"), 7, "a redraw");
        for (method, rest) in [
            ("DELETE", "sessions/abc"),
            ("GET", "sessions"),
            ("GET", "sessions/abc"),
            ("POST", "sessions/abc/shares"),
            ("DELETE", "sessions/abc/shares/s"),
            ("POST", "users/bob/lock"),
            ("GET", "profiles"),
        ] {
            assert_eq!(wait(method, rest), 0, "{method} {rest}");
        }
    }
}

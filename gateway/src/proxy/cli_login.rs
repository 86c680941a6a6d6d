//! The command-line client signed in through the browser (`policy::cli_login`):
//! `GET /cli-login`, the page that asks the signed-in user; `POST /auth/cli/code`, its
//! Allow, which mints a code bound to the client's challenge from the browser's
//! sign-in; `POST /auth/cli/token`, the client's exchange of that code and its verifier
//! for a recorded sign-in of its own, the kind `POST /auth/session` makes.

use pingora::proxy::Session;
use policy::cli_login::CliCode;
use policy::{CliLoginStep, CredentialSource, Refusal};

use super::api::{read_body, report_sign_in, who};
use super::credential::{caller, client_ip, REFUSAL_PAUSE};
use super::headers::header;
use super::outcome::{Allowed, Denied, Next};
use super::reply::Json;
use crate::clock::now;
use crate::control_client::NotRecorded;
use crate::state::Gateway;

/// Largest body of either POST: a challenge, or a code and a verifier.
const MAX_BODY_BYTES: usize = 8 * 1024;

/// The page's Allow.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CodeRequest {
    challenge: String,
}

/// The client's exchange.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    code: String,
    verifier: String,
}

/// Admits a request for one step of the hand-off.
pub(super) async fn step(
    g: &Gateway,
    session: &mut Session,
    step: CliLoginStep,
) -> Result<Allowed, Denied> {
    let method = session.req_header().method.as_str();
    match (step, method) {
        (CliLoginStep::Page, "GET" | "HEAD") => {
            Ok(Allowed::new("cli_login_page", Next::CliLoginPage))
        }
        (CliLoginStep::Page, _) => Err(Refusal::METHOD_NOT_ALLOWED.with_message("use GET").into()),
        (CliLoginStep::Code, "POST") => code(g, session).await,
        (CliLoginStep::Token, "POST") => token(g, session).await,
        _ => Err(Refusal::METHOD_NOT_ALLOWED.with_message("use POST").into()),
    }
}

/// `POST /auth/cli/code {"challenge"}`: a code for the browser's user, bound to the
/// challenge, valid a minute.
async fn code(g: &Gateway, session: &mut Session) -> Result<Allowed, Denied> {
    let verified = caller(g, session).await?;
    let p = verified.principal;
    // A code is as good as a sign-in: with a cookie, only this gateway's own page may
    // ask for one (another site would sign a client of its own in as the user).
    g.origins
        .check(header(session.req_header(), "origin"), verified.source)
        .map_err(|e| Denied::of(Refusal::from(e), Some(p.clone())))?;
    let sealer = g
        .cli_codes
        .as_ref()
        .ok_or_else(|| Denied::of(Refusal::CLI_LOGIN_UNAVAILABLE, Some(p.clone())))?;
    let body = read_body(session, MAX_BODY_BYTES).await?;
    let asked: CodeRequest = serde_json::from_slice(&body).map_err(|e| {
        Refusal::INVALID_JSON.with_message(format!("expected {{\"challenge\": \"…\"}}: {e}"))
    })?;
    let sid = crate::oidc::random_hex().ok_or(Refusal::INTERNAL)?;
    let code = CliCode::mint(&p, &asked.challenge, sid, now())
        .map_err(|e| Denied::of(Refusal::from(e), Some(p.clone())))?;
    tracing::info!(target: "audit", sub = %p.sub, decision = "allow", reason = "cli_code", "browser allowed a command-line sign-in");
    let reply = Json::ok(&serde_json::json!({
        "code": sealer.seal(&code),
        "expires_at": code.exp,
    }));
    Ok(Allowed {
        principal: Some(p),
        ..Allowed::new("cli_code", Next::Reply(reply))
    })
}

/// `POST /auth/cli/token {"code","verifier"}`: the code's sign-in, recorded at control
/// once (a second presentation of the code is refused there, on any replica), answered
/// with its token.
async fn token(g: &Gateway, session: &mut Session) -> Result<Allowed, Denied> {
    if let Some(origin) = header(session.req_header(), "origin") {
        // The client sends no Origin; a page that does must be this gateway's.
        g.origins
            .check(Some(origin), CredentialSource::Cookie)
            .map_err(Refusal::from)?;
    }
    let (Some(sealer), Some(signer)) = (g.cli_codes.as_ref(), g.signer.as_ref()) else {
        return Err(Refusal::CLI_LOGIN_UNAVAILABLE.into());
    };
    // Refused codes count like failed sign-ins: a code is a credential.
    let ip = client_ip(session, &g.trusted_proxies);
    let limit = isize::try_from(g.config.gateway.auth_failures_per_minute).unwrap_or(isize::MAX);
    if g.auth_failures.observe(&ip, 0) >= limit {
        tokio::time::sleep(REFUSAL_PAUSE).await;
        return Err(Refusal::TOO_MANY_FAILURES.into());
    }
    let refused = |r: Refusal| {
        g.auth_failures.observe(&ip, 1);
        tracing::info!(target: "audit", decision = "deny", reason = r.code, client = %ip, "command-line sign-in refused");
        Denied::from(r)
    };
    let body = read_body(session, MAX_BODY_BYTES).await?;
    let asked: TokenRequest = serde_json::from_slice(&body).map_err(|e| {
        Refusal::INVALID_JSON.with_message(format!(
            "expected {{\"code\": \"…\", \"verifier\": \"…\"}}: {e}"
        ))
    })?;
    let code = sealer
        .redeem(&asked.code, &asked.verifier, now())
        .map_err(|e| refused(e.into()))?;
    let auth = &g.config.auth;
    let token = signer
        .sign(&code.claims(auth.issuer.clone(), auth.audience.clone()))
        .map_err(|e| {
            tracing::error!(error = %e, "the command-line sign-in's token could not be signed");
            Refusal::INTERNAL
        })?;
    // Judged as any presented token is: a code outlives neither its browser sign-in's
    // token revoked meanwhile (it keeps that token's `jti`) nor its user's revocation.
    let p = match g.verifier.verify(token.as_bytes(), now()) {
        Ok(p) => match g.routes.revoked(token.as_bytes(), &p) {
            Some(why) => return Err(refused(Refusal::from(&policy::TokenError::from(why)))),
            None => p,
        },
        Err(e) => return Err(refused(Refusal::from(&e))),
    };
    match report_sign_in(g, session, &token, "token", true).await {
        Ok(()) => {}
        Err(NotRecorded::Repeated(why)) => {
            tracing::debug!(%why, "a code's sign-in was recorded already");
            return Err(refused(Refusal::CLI_CODE_USED));
        }
        Err(NotRecorded::Unavailable(e)) => {
            tracing::warn!(error = %e, sub = %p.sub, "sign-in could not be recorded; refused");
            return Err(Refusal::SIGN_IN_UNAVAILABLE.into());
        }
    }
    tracing::info!(target: "audit", sub = %p.sub, sign_in = %g.credential_key(token.as_bytes()).id(), decision = "allow", reason = "cli_sign_in", "signed in");
    let mut answer = who(&p);
    answer["token"] = serde_json::Value::String(token);
    Ok(Allowed {
        principal: Some(p),
        ..Allowed::new("cli_sign_in", Next::Reply(Json::ok(&answer)))
    })
}

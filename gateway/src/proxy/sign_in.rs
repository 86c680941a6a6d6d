//! The routes of the sign-in through an OpenID Connect provider (`crate::oidc`):
//! `/auth/providers`, `/auth/login`, `/auth/callback` (GET), `/auth/logout` (POST; its
//! GET only asks). Without `[auth.oidc]` only `/auth/providers` exists (it says there is
//! no provider).

use pingora::http::RequestHeader;
use pingora::proxy::Session;
use policy::{CredentialSource, OidcStep, Refusal};

use super::credential::{client_ip, credential, Credential, REFUSAL_PAUSE};
use super::headers::header;
use super::outcome::{Allowed, Denied, Next};
use super::reply::{Json, Redirect};
use crate::clock::now;
use crate::oidc::{Oidc, FLOW_COOKIE, ID_TOKEN_COOKIE};
use crate::state::Gateway;

/// Admits a request for one step of the sign-in.
pub(super) async fn step(
    g: &Gateway,
    session: &mut Session,
    step: OidcStep,
) -> Result<Allowed, Denied> {
    let get = session.req_header().method == "GET";
    let post = session.req_header().method == "POST";
    match step {
        OidcStep::Logout if !get && !post => {
            return Err(Refusal::METHOD_NOT_ALLOWED.with_message("use POST").into())
        }
        OidcStep::Logout => {}
        _ if !get => return Err(Refusal::METHOD_NOT_ALLOWED.with_message("use GET").into()),
        _ => {}
    }
    if step == OidcStep::Providers {
        let oidc = g
            .oidc
            .as_ref()
            .map(|o| serde_json::json!({"name": o.display_name(), "login": "/auth/login"}));
        return Ok(Allowed::new(
            "providers",
            Next::Reply(Json::ok(&serde_json::json!({ "oidc": oidc }))),
        ));
    }
    let Some(oidc) = g.oidc.clone() else {
        return Err(Refusal::PAGE_NOT_FOUND.into());
    };
    let secure = if oidc.secure() || g.secure_cookie {
        "; Secure"
    } else {
        ""
    };
    let fail = |e: policy::oidc::OidcError| {
        tracing::info!(target: "audit", decision = "deny", reason = e.code(), error = %e, "sign-in refused");
        Denied {
            reason: e.code(),
            ..Refusal::from(&e).into()
        }
    };
    match step {
        OidcStep::Providers => unreachable!("answered above"),
        OidcStep::Login => {
            let (location, flow) = oidc.login(now()).await.map_err(fail)?;
            // Lax: the provider's redirect back is a cross-site navigation.
            let cookie = format!(
                "{FLOW_COOKIE}={flow}; HttpOnly; SameSite=Lax; Path=/auth/callback; Max-Age={}{secure}",
                policy::oidc::FLOW_TTL_SECS
            );
            Ok(redirect("oidc_login", location, vec![cookie]))
        }
        OidcStep::Callback => {
            // Refused callbacks count like failed sign-ins: each one that gets as far
            // as the code costs a call to the provider.
            let ip = client_ip(session, &g.trusted_proxies);
            let limit =
                isize::try_from(g.config.gateway.auth_failures_per_minute).unwrap_or(isize::MAX);
            if g.auth_failures.observe(&ip, 0) >= limit {
                tokio::time::sleep(REFUSAL_PAUSE).await;
                return Err(Refusal::TOO_MANY_FAILURES.into());
            }
            let req = session.req_header();
            let query = req.uri.query().unwrap_or_default().to_owned();
            let flow = cookie(req, FLOW_COOKIE).map(str::to_owned);
            let signed_in = oidc
                .callback(&query, flow.as_deref(), now())
                .await
                .map_err(|e| {
                    g.auth_failures.observe(&ip, 1);
                    fail(e)
                })?;
            super::api::record_sign_in(g, session, &signed_in.token, "oidc", &signed_in.grant.sub)
                .await?;
            let name = &g.config.auth.cookie_name;
            let max_age = signed_in.grant.exp.saturating_sub(now());
            tracing::info!(target: "audit", sub = %signed_in.grant.sub, admin = signed_in.grant.admin, sign_in = %g.credential_key(signed_in.token.as_bytes()).id(), decision = "allow", reason = "oidc_sign_in", "signed in");
            let cookies = vec![
                format!(
                    "{name}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}",
                    signed_in.token
                ),
                format!(
                    "{ID_TOKEN_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/auth/logout; Max-Age={max_age}{secure}",
                    signed_in.id_token
                ),
                format!("{FLOW_COOKIE}=; HttpOnly; SameSite=Lax; Path=/auth/callback; Max-Age=0{secure}"),
            ];
            Ok(redirect("oidc_sign_in", "/".into(), cookies))
        }
        // A GET signs nobody out: a link, an image or a redirect from any page of the
        // site would otherwise end the user's sign-in and close their terminals. It
        // shows a form that posts.
        OidcStep::Logout if get => Ok(Allowed::new("sign_out_page", Next::SignOutPage)),
        OidcStep::Logout => sign_out(g, session, &oidc, secure).await,
    }
}

/// `POST /auth/logout`: with a cookie, from an allowed Origin (as a change through
/// `/api`), revokes the sign-in at control, closes its terminals here and clears both
/// cookies; then the provider's end of session. A form's navigation is sent there
/// (303); the page's `fetch` gets `{"signed_in":false,"location":…}` and goes itself.
async fn sign_out(
    g: &Gateway,
    session: &Session,
    oidc: &Oidc,
    secure: &str,
) -> Result<Allowed, Denied> {
    let req = session.req_header();
    let name = &g.config.auth.cookie_name;
    let presented = credential(req, name);
    let source = presented
        .as_ref()
        .map_or(CredentialSource::Cookie, |c| c.source);
    g.origins
        .check(header(req, "origin"), source)
        .map_err(Refusal::from)?;
    if let Some(Credential { token, .. }) = presented {
        // If this cannot happen, the page says so and the browser stays signed in.
        super::api::sign_out_token(g, &token).await?;
    }
    let id_token = cookie(req, ID_TOKEN_COOKIE).map(str::to_owned);
    let navigating = header(req, "accept").is_some_and(|a| a.windows(9).any(|w| w == b"text/html"));
    let location = oidc.logout_location(id_token.as_deref()).await;
    let cookies = vec![
        super::api::cleared_cookie(name, "/", secure),
        super::api::cleared_cookie(ID_TOKEN_COOKIE, "/auth/logout", secure),
    ];
    if navigating {
        return Ok(redirect("oidc_sign_out", location, cookies));
    }
    let reply = cookies.into_iter().fold(
        Json::ok(&serde_json::json!({"signed_in": false, "location": location})),
        |reply, c| reply.with_header("Set-Cookie", c),
    );
    Ok(Allowed::new("oidc_sign_out", Next::Reply(reply)))
}

fn redirect(reason: &'static str, location: String, cookies: Vec<String>) -> Allowed {
    Allowed::new(reason, Next::Redirect(Redirect { location, cookies }))
}

/// The value of the cookie `name`, from any `Cookie` header; not UTF-8 is none.
fn cookie<'a>(req: &'a RequestHeader, name: &str) -> Option<&'a str> {
    let value = req
        .headers
        .get_all("cookie")
        .into_iter()
        .find_map(|value| policy::identity::cookie(value.as_bytes(), name))?;
    std::str::from_utf8(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_by_its_exact_name() {
        let mut r = RequestHeader::build("GET", b"/auth/callback", None).unwrap();
        r.append_header(
            "Cookie",
            "a=1; termgate_oidc_flowx=no; termgate_oidc_flow=yes",
        )
        .unwrap();
        assert_eq!(cookie(&r, FLOW_COOKIE), Some("yes"));
        assert_eq!(cookie(&r, "b"), None);
    }
}

//! Terminal admission: a bodiless GET, a verified credential, an allowed Origin on the
//! websocket, the session's route, the access decision, and for a websocket a slot
//! among the open terminals, re-checked once taken.

use std::sync::Arc;

use pingora::http::RequestHeader;
use pingora::proxy::Session;
use policy::feed::{Route, TargetCredential};
use policy::share::ShareToken;
use policy::terminal_access::{admit, AdmittedAs};
use policy::{Principal, Refusal, SessionId, TerminalPart};

use super::credential::{authenticate, caller, credential, Verified};
use super::headers::header;
use super::outcome::{Allowed, Denied, Next};
use super::reply::Json;
use super::upstream::{TtydRequest, Upstream};
use crate::clock::now;
use crate::routes::Lookup;
use crate::state::Gateway;
use crate::terminals::{LimitHit, Ticket, ViewerRequest};

/// Admits a request for a terminal's page, token or websocket, or says why not.
pub(super) async fn terminal(
    g: &Gateway,
    session: &mut Session,
    id: SessionId,
    part: TerminalPart,
) -> Result<Allowed, Denied> {
    bodiless_get(session.req_header())?;
    if part == TerminalPart::Ws {
        websocket_handshake(session.req_header())?;
    }
    let verified = caller(g, session).await?;
    // From here on, a refusal still names who was refused.
    match terminal_of(g, session, &verified, id, part).await {
        Ok(allowed) => Ok(Allowed {
            principal: Some(verified.principal),
            token: verified.token,
            ..allowed
        }),
        Err(refusal) => Err(Denied::of(refusal, Some(verified.principal))),
    }
}

/// The rest of [`terminal`], for a verified caller.
async fn terminal_of(
    g: &Gateway,
    session: &Session,
    verified: &Verified,
    id: SessionId,
    part: TerminalPart,
) -> Result<Allowed, Refusal> {
    let principal = &verified.principal;
    if part == TerminalPart::Ws {
        g.origins
            .check(header(session.req_header(), "origin"), verified.source)?;
    }
    let sub = principal.sub.as_str();
    let route = route(g, &id, sub).await?;
    let admitted = decide(
        principal,
        route.as_deref(),
        |s| g.routes.is_locked(s),
        now(),
    )?;
    let peer_until = admitted.peer_until();
    let route = route.ok_or(Refusal::NOT_FOUND)?;
    if route.unreachable {
        return Err(Refusal::HOST_UNAVAILABLE);
    }
    let mut auth_token = None;
    let credential = match route.target.as_ref().and_then(|t| t.credential.as_ref()) {
        // ttyd (`-H`) is told who types: the peer, never the owner.
        None if peer_until.is_some() => Some((
            "X-Termgate-User".to_owned(),
            policy::peer::terminal_user(sub),
        )),
        None => None,
        Some(TargetCredential::Header { name }) => Some((name.clone(), sub.to_owned())),
        Some(TargetCredential::BasicFile { path }) => {
            let value = g.target_credentials.basic(route.upstream.as_ref(), path).map_err(|e| {
                tracing::error!(session = %id, file = %path, error = %e, "cannot read the target's credential");
                Refusal::TARGET_MISCONFIGURED
            })?;
            if part == TerminalPart::Token {
                // ttyd would answer its credential here, for the page to send back in
                // the first message; the gateway writes it there itself instead.
                return Ok(Allowed::new(
                    "allowed",
                    Next::Reply(Json::ok(&serde_json::json!({ "token": "" }))),
                ));
            }
            auth_token = value.strip_prefix("Basic ").map(str::to_owned);
            Some(("Authorization".to_owned(), value.to_string()))
        }
    };
    let mut ticket = None;
    if part == TerminalPart::Ws {
        match slot(
            g,
            verified.token.as_deref(),
            principal,
            id,
            &route,
            peer_until,
        ) {
            Ok(taken) => ticket = Some(taken),
            Err(refusal) => {
                if refusal.code == Refusal::TOO_MANY_TERMINALS.code {
                    // Like a failed sign-in past its limit: a short pause throttles a
                    // client that keeps opening terminals past its limit to a few
                    // attempts a second per connection, at no CPU cost.
                    tokio::time::sleep(super::credential::REFUSAL_PAUSE).await;
                }
                return Err(refusal);
            }
        }
    }
    Ok(Allowed {
        ticket,
        ..Allowed::new(
            admitted.as_str(),
            Next::Proxy(Upstream::Ttyd(TtydRequest {
                part,
                arg: route.arg().map(str::to_owned),
                address: route.upstream.clone(),
                credential,
                auth_token: auth_token.filter(|_| part == TerminalPart::Ws),
                record: route.record,
            })),
        )
    })
}

/// Admits a share link's viewer: the viewer's page (`part` `None`), or the read-only
/// terminal's page, token or websocket, sent to a ttyd pool started without `-W` with
/// the session's container as `arg`. A termgate token is optional: with one (not
/// locked) the viewer is recorded by `sub`, and a `signed-in` link requires it. Every
/// link that grants nothing is the 404 of an unknown path (`policy::share`).
pub(super) async fn share(
    g: &Gateway,
    session: &mut Session,
    token: ShareToken,
    part: Option<TerminalPart>,
) -> Result<Allowed, Denied> {
    let id = token.session();
    bodiless_get(session.req_header())?;
    if part == Some(TerminalPart::Ws) {
        websocket_handshake(session.req_header())?;
    }
    let viewer = match credential(session.req_header(), &g.config.auth.cookie_name) {
        None => None,
        Some(presented) => match authenticate(g, session, Some(presented)).await {
            Ok(v) if !g.routes.is_locked(v.principal.sub.as_str()) => Some(v),
            // A refused or locked sign-in watches as anyone would.
            _ => None,
        },
    };
    if let (Some(v), Some(TerminalPart::Ws)) = (&viewer, part) {
        g.origins
            .check(header(session.req_header(), "origin"), v.source)
            .map_err(Refusal::from)?;
    }
    let (principal, viewer_token) = match viewer {
        Some(v) => (Some(v.principal), v.token),
        None => (None, None),
    };
    let lookup_key = principal
        .as_ref()
        .map_or("-", |p| p.sub.as_str())
        .to_owned();
    let route = route(g, &id, &lookup_key).await?;
    let owner_locked = route.as_ref().is_some_and(|r| g.routes.is_locked(&r.owner));
    let grant = policy::share::decide_view(
        route.as_deref(),
        &token,
        now(),
        owner_locked,
        principal.is_some(),
    )?
    .clone();
    let route = route.ok_or(Refusal::PAGE_NOT_FOUND)?;
    // From here on, a refusal still names the share and the viewer.
    let denied = |refusal: Refusal| Denied {
        share: Some(grant.id.clone()),
        ..Denied::of(refusal, principal.clone())
    };
    let Some(part) = part else {
        return Ok(Allowed {
            principal,
            token: viewer_token,
            share: Some(grant.id),
            ..Allowed::new(AdmittedAs::Viewer.as_str(), Next::ViewerPage)
        });
    };
    // A session on a host of its own pool is watched through that host's read-only
    // pool; control creates no link for a host without one.
    let address = match (&route.upstream, &route.viewer_upstream) {
        (_, Some(viewers)) => viewers.clone(),
        (None, None) => g.viewer_pool.clone(),
        (Some(_), None) => return Err(denied(Refusal::TERMINAL_UNAVAILABLE)),
    };
    let mut ticket = None;
    if part == TerminalPart::Ws {
        let expires = principal
            .as_ref()
            .filter(|_| g.config.gateway.close_on_token_expiry)
            .map(|p| p.expires_at);
        let request = ViewerRequest {
            session: id,
            share: &grant.id,
            owner: &route.owner,
            share_expires_at: grant.expires_at,
            max_viewers: grant.max_viewers,
            viewer: principal.as_ref().map(|p| (p, expires)),
            credential: g.credential_key(viewer_token.as_deref().unwrap_or_default().as_bytes()),
        };
        let taken = g
            .terminals
            .admit_viewer(&request)
            .map_err(|_| denied(Refusal::TOO_MANY_VIEWERS))?;
        // As for an owner's slot: a revocation applied before this point is seen here,
        // one applied after it finds the slot and closes it.
        let still = matches!(g.routes.get(&id), Lookup::Hit(r)
            if r.shares.iter().any(|s| s.id == grant.id) && !g.routes.is_locked(&r.owner));
        if !still {
            return Err(denied(Refusal::PAGE_NOT_FOUND));
        }
        ticket = Some(taken);
    }
    let who = principal.as_ref().map_or("anyone", |p| p.sub.as_str());
    let next = Next::Proxy(Upstream::Ttyd(TtydRequest {
        part,
        arg: route.arg().map(str::to_owned),
        address: Some(address),
        // ttyd (`-H`) wants the header; it names the viewer, never the owner.
        credential: Some(("X-Termgate-User".to_owned(), format!("viewer:{who}"))),
        auth_token: None,
        // A viewer sees what the owner's recorded terminals already hold.
        record: policy::feed::Recording::Off,
    }));
    Ok(Allowed {
        principal,
        token: viewer_token,
        ticket,
        share: Some(grant.id),
        ..Allowed::new(AdmittedAs::Viewer.as_str(), next)
    })
}

/// The admin console's page, for an admin's credential; anyone else (no credential,
/// a refused one, a user who is not an admin) gets the 404 of an unknown path, so the
/// console's existence tells them nothing. Its data comes from the API, which checks
/// the admin role again on every call.
pub(super) async fn admin_page(g: &Gateway, session: &mut Session) -> Result<Allowed, Denied> {
    bodiless_get(session.req_header()).map_err(|_| Refusal::PAGE_NOT_FOUND)?;
    let Some(presented) = credential(session.req_header(), &g.config.auth.cookie_name) else {
        return Err(Refusal::PAGE_NOT_FOUND.into());
    };
    // A refused token is the same 404, its reason kept for the logs.
    let verified = authenticate(g, session, Some(presented))
        .await
        .map_err(|d| Denied {
            refusal: Refusal::PAGE_NOT_FOUND,
            ..d
        })?;
    let principal = verified.principal;
    if !principal.admin || g.routes.is_locked(principal.sub.as_str()) {
        return Err(Denied::of(Refusal::PAGE_NOT_FOUND, Some(principal)));
    }
    Ok(Allowed {
        principal: Some(principal),
        token: verified.token,
        ..Allowed::new("admin", Next::AdminPage)
    })
}

/// The access decision of a terminal request: `policy::terminal_access::admit` with the
/// cache's locks, the owner's asked only when the route alone does not admit. A user the
/// owner invited opens it as a peer; to anyone else it stays unknown.
fn decide(
    principal: &Principal,
    route: Option<&Route>,
    is_locked: impl Fn(&str) -> bool,
    now: u64,
) -> Result<AdmittedAs, Refusal> {
    let locked = is_locked(principal.sub.as_str());
    let admitted = admit(principal, route, locked, now, |owner| {
        Ok::<_, std::convert::Infallible>(is_locked(owner))
    });
    admitted.unwrap_or_else(|never| match never {})
}

/// Terminals take GET (and HEAD) without a body: ttyd never needs one, so nothing
/// unexpected is relayed to it.
fn bodiless_get(req: &RequestHeader) -> Result<(), Refusal> {
    if req.method != "GET" && req.method != "HEAD" {
        return Err(Refusal::METHOD_NOT_ALLOWED.with_message("terminals accept GET only"));
    }
    let declares_body = header(req, "transfer-encoding").is_some()
        || header(req, "content-length").is_some_and(|v| v.trim_ascii() != b"0");
    if declares_body {
        return Err(Refusal::BODY_NOT_ALLOWED);
    }
    Ok(())
}

/// A websocket handshake as ttyd's page sends it (RFC 6455 §4.1), checked here so
/// that a malformed one never reaches ttyd: `Upgrade: websocket`, `Connection` naming
/// `upgrade`, version 13, a key of 16 bytes in base64, the `tty` subprotocol offered.
fn websocket_handshake(req: &RequestHeader) -> Result<(), Refusal> {
    let has_token = |name: &str, token: &[u8]| {
        req.headers.get_all(name).iter().any(|v| {
            v.as_bytes()
                .split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
        })
    };
    let key_ok = header(req, "sec-websocket-key").is_some_and(|k| {
        let k = k.trim_ascii();
        k.len() == 24
            && k.ends_with(b"==")
            && k[..22]
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
    });
    let ok = req.method == "GET"
        && has_token("upgrade", b"websocket")
        && has_token("connection", b"upgrade")
        && header(req, "sec-websocket-version").is_some_and(|v| v.trim_ascii() == b"13")
        && req.headers.get_all("sec-websocket-key").iter().count() == 1
        && key_ok
        && has_token("sec-websocket-protocol", b"tty");
    if ok {
        Ok(())
    } else {
        Err(Refusal::BAD_UPGRADE)
    }
}

/// The route of a session (`None`: unknown or not running): from the cache, or from one
/// bounded lookup at control.
async fn route(g: &Gateway, id: &SessionId, sub: &str) -> Result<Option<Arc<Route>>, Refusal> {
    match g.routes.get(id) {
        Lookup::Hit(r) => return Ok(Some(r)),
        Lookup::Negative => return Ok(None),
        Lookup::Miss => {}
    }
    let limit = isize::try_from(g.config.gateway.lookup_misses_per_minute).unwrap_or(isize::MAX);
    if g.lookups.observe(&sub, 1) > limit {
        // Past the limit, unknown ids are not asked about; they get the answer an
        // unknown id gets, so the limit tells nothing apart.
        return Ok(None);
    }
    let l = g.control.lookup(id).await.map_err(|e| {
        tracing::warn!(session = %id, error = %e, "route lookup failed");
        Refusal::CONTROL_UNAVAILABLE
    })?;
    g.routes.learn(*id, l);
    // The cache's view after learning: an answer older than what the feed already said
    // was dropped, and the feed knows better.
    Ok(match g.routes.get(id) {
        Lookup::Hit(r) => Some(r),
        Lookup::Negative | Lookup::Miss => None,
    })
}

/// Takes a slot among the open terminals for a websocket on `route`, then re-checks: a
/// revocation applied to the cache before this point is seen here; one applied after it
/// finds the slot registered and closes it.
fn slot(
    g: &Gateway,
    token: Option<&str>,
    principal: &Principal,
    id: SessionId,
    route: &Route,
    peer_until: Option<u64>,
) -> Result<Ticket, Refusal> {
    let sub = principal.sub.as_str();
    let expires = g
        .config
        .gateway
        .close_on_token_expiry
        .then_some(principal.expires_at);
    let credential = g.credential_key(token.unwrap_or_default().as_bytes());
    let taken = match peer_until {
        None => g.terminals.admit(id, principal, expires, credential),
        Some(until) => {
            g.terminals
                .admit_peer(id, principal, expires, credential, &route.owner, until)
        }
    };
    let ticket = taken.map_err(|hit| match hit {
        LimitHit::User => Refusal::TOO_MANY_TERMINALS,
        LimitHit::Session => {
            Refusal::TOO_MANY_TERMINALS.with_message("this session has too many open terminals")
        }
        LimitHit::Viewers => Refusal::TOO_MANY_VIEWERS,
    })?;
    let still = matches!(g.routes.get(&id), Lookup::Hit(r) if *r == *route);
    if !still {
        return Err(Refusal::NOT_FOUND);
    }
    if g.routes.is_locked(sub) {
        return Err(Refusal::LOCKED);
    }
    if peer_until.is_some() && g.routes.is_locked(&route.owner) {
        return Err(Refusal::NOT_FOUND);
    }
    Ok(ticket)
}

#[cfg(test)]
mod tests {
    use policy::terminal_access::{cases, named};

    #[test]
    fn the_gateway_admits_as_the_shared_table_says() {
        for case in cases() {
            let Some(expected) = case.admit else { continue };
            let got = super::decide(
                &case.principal,
                case.route.as_ref(),
                |s| case.is_locked(s),
                case.now,
            );
            assert_eq!(named(got), expected, "{}", case.name);
        }
    }
}

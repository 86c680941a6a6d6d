//! control's HTTP API (hyper 1): routing, authentication, bodies, JSON.
//!
//! User calls carry the user's JWT as a bearer token (the gateway turns the cookie into
//! one); the route feed carries the service token. Bodies are bounded, unknown fields
//! refused, and every error is the JSON shape of design §2.
//!
//! `route` picks the handler by path: `sessions`, `users`, `internal` (the gateways'
//! endpoints) and `authz`; the bodies and answers are in `wire`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use policy::{Principal, SessionId};
use serde::Serialize;
use tokio::net::TcpListener;

use crate::error::ApiError;
use crate::service::Control;
use wire::Health;

pub mod authz;
mod internal;
mod sessions;
mod users;
pub mod wire;

type Reply = Response<Full<Bytes>>;

fn json<T: Serialize>(status: u16, value: &T) -> Reply {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn empty(status: u16) -> Reply {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NO_CONTENT);
    r
}

fn error(e: &ApiError) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(e.body())));
    *r.status_mut() = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn bearer(req: &Request<Incoming>) -> Option<&[u8]> {
    policy::identity::bearer(req.headers().get(AUTHORIZATION)?.as_bytes())
}

/// The caller: a valid token of a user who is not locked. A locked user, admin or not,
/// is refused on every endpoint, so a locked admin can neither unlock themselves nor
/// lock anyone else.
fn authenticate(control: &Control, req: &Request<Incoming>) -> Result<Principal, ApiError> {
    let token = bearer(req)
        .ok_or_else(|| ApiError::UNAUTHENTICATED.with_message("a bearer token is required"))?;
    let who = control.verify(token).map_err(|e| {
        tracing::info!(target: "audit", decision = "deny", reason = e.reason(), "token refused");
        ApiError::from(&e)
    })?;
    if control.is_locked(&who.sub)? {
        tracing::info!(target: "audit", sub = %who.sub, decision = "deny", reason = ApiError::LOCKED.code, "locked caller refused");
        return Err(ApiError::LOCKED);
    }
    Ok(who)
}

/// Compares in time independent of where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authenticate_service(control: &Control, req: &Request<Incoming>) -> Result<(), ApiError> {
    match (bearer(req), control.service_token()) {
        (Some(got), Some(want)) if constant_time_eq(got, want) => Ok(()),
        _ => Err(ApiError::UNAUTHENTICATED.with_message("the service token is required")),
    }
}

fn query_param<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.uri()
        .query()?
        .split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

async fn read_json<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
    limit: usize,
) -> Result<T, ApiError> {
    let too_big = || {
        ApiError::BODY_TOO_LARGE.with_message(format!("request body is larger than {limit} bytes"))
    };
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > limit {
            return Err(too_big());
        }
    }
    let body = Limited::new(req.into_body(), limit)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_big()
            } else {
                ApiError::BAD_BODY
            }
        })?
        .to_bytes();
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::INVALID_JSON.with_message(format!("invalid request body: {e}")))
}

fn session_id(seg: &str) -> Result<SessionId, ApiError> {
    // A malformed id cannot name anyone's session: the same 404 as an unknown one.
    SessionId::parse(seg).map_err(|_| ApiError::NOT_FOUND)
}

/// A method the endpoint does not take.
fn not_allowed() -> ApiError {
    ApiError::METHOD_NOT_ALLOWED
}

/// A path no endpoint has.
fn no_such_endpoint() -> ApiError {
    ApiError::PAGE_NOT_FOUND.with_message("no such endpoint")
}

/// Answers a request on the API listener: the path picks the handler of its group.
async fn route(control: Arc<Control>, req: Request<Incoming>) -> Result<Reply, ApiError> {
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path
        .strip_prefix("/v1/")
        .map(|p| p.split('/').collect())
        .unwrap_or_default();
    let method = req.method().clone();
    let limit = control.max_body_bytes();
    match segments.as_slice() {
        ["healthz"] => Ok(json(
            200,
            &Health {
                rev: Some(control.rev()),
                status: "ok",
            },
        )),
        ["routes", rest @ ..] => internal::routes(control, req, rest).await,
        ["activity"] => internal::activity(control, req, limit).await,
        ["terminals"] => internal::terminals(control, req, limit).await,
        ["recordings", rest @ ..] => internal::recordings(control, req, rest).await,
        ["audit"] if method == Method::POST => internal::audit_report(control, req, limit).await,
        ["authz", rest @ ..] => authz::handle(control, req, rest),
        ["grant"] => authz::grant(control, req).await,
        ["profiles"] => users::profiles(control, req),
        ["signins", rest @ ..] => users::sign_ins(&control, req, rest, limit).await,
        ["revocations"] => users::revocations(control, req, limit).await,
        ["audit"] => users::audit(control, req),
        ["users", rest @ ..] => users::users(control, req, rest),
        ["sessions", rest @ ..] => sessions::sessions(control, req, rest, limit).await,
        ["history"] => sessions::history(control, req),
        ["targets", rest @ ..] => sessions::targets(control, req, rest, limit).await,
        _ => Err(no_such_endpoint()),
    }
}

async fn handle(control: Arc<Control>, req: Request<Incoming>) -> Result<Reply, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let reply = match route(control, req).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = error(&e);
            if e.status == 401 && path == "/v1/authz" {
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer"),
                );
            }
            r
        }
    };
    tracing::debug!(%method, %path, status = reply.status().as_u16(), "request");
    Ok(reply)
}

async fn handle_admin(control: Arc<Control>, req: Request<Incoming>) -> Result<Reply, Infallible> {
    Ok(match req.uri().path() {
        "/metrics" => {
            let mut r = Response::new(Full::new(Bytes::from(control.metrics().render())));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        "/healthz" => json(
            200,
            &Health {
                rev: None,
                status: "ok",
            },
        ),
        _ => error(&ApiError::PAGE_NOT_FOUND.with_message("no such endpoint")),
    })
}

/// Which of control's two listeners.
#[derive(Clone, Copy)]
pub enum Listener {
    /// The internal API.
    Api,
    /// Metrics and health.
    Admin,
}

/// Serves one listener until `shutdown` fires, then lets open requests finish for up
/// to `grace`.
pub async fn serve(
    control: Arc<Control>,
    listener: TcpListener,
    which: Listener,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    grace: Duration,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (stream, _peer): (_, SocketAddr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let control = Arc::clone(&control);
        let service = hyper::service::service_fn(move |req| {
            let control = Arc::clone(&control);
            async move {
                match which {
                    Listener::Api => handle(control, req).await,
                    Listener::Admin => handle_admin(control, req).await,
                }
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(10))
            .max_buf_size(64 * 1024)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                // Clients that hang up or send garbage end here; nothing to repair.
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "open requests did not finish within the grace period"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}

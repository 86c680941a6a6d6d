//! control's HTTP API (hyper 1): routing, authentication, bodies, JSON.
//!
//! User calls carry the user's JWT as a bearer token (the gateway turns the cookie into
//! one); the route feed carries the service token. Bodies are bounded, unknown fields
//! refused, and every error is the JSON shape of design §2.
//!
//! `route` classes the endpoint by path (`access`: public, the gateways' service
//! token, a user's token, or the front proxies' own checks), authenticates the caller
//! by that class and hands the handler who called: `sessions`, `workspaces`,
//! `secrets`, `users`, `internal` (the gateways' endpoints) and `authz`; the bodies and
//! answers are in `wire`, the plumbing they share (replies, authentication, bodies) in
//! `http`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::error::ApiError;
use crate::service::Control;
use access::{access, Access};
use http::{
    authenticate, authenticate_service, boxed, error, json, no_such_endpoint, Reply, ServiceCaller,
    Streamed,
};
use policy::Principal;
use wire::Health;

mod access;
pub mod authz;
mod http;
mod internal;
mod recording_links;
mod secrets;
mod sessions;
mod users;
pub mod wire;
mod workspaces;

/// A `/v1/` path's segments (none for any other path).
fn path_segments(path: &str) -> Vec<&str> {
    path.strip_prefix("/v1/")
        .map(|p| p.split('/').collect())
        .unwrap_or_default()
}

/// Answers a request on the API listener: the path names the endpoint, whose class
/// ([`access`]) says which credential is checked here, once, before its handler runs;
/// the handler is handed who called.
async fn route(control: Arc<Control>, req: Request<Incoming>) -> Result<Streamed, ApiError> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let segments = path_segments(&path);
    match access(&segments, &method)? {
        Access::Public => Ok(boxed(json(
            200,
            &Health {
                rev: Some(control.rev()),
                status: "ok",
            },
        ))),
        Access::Service => {
            let gateway = authenticate_service(&control, &req)?;
            for_gateway(control, req, gateway, &segments).await
        }
        Access::GatewaySignIn => {
            let gateway = authenticate_service(&control, &req).map_err(|_| no_such_endpoint())?;
            let limit = control.max_body_bytes();
            users::record_sign_in(&control, req, gateway, limit)
                .await
                .map(boxed)
        }
        Access::User => {
            let who = authenticate(&control, &req)?;
            for_user(control, req, &who, &segments).await
        }
        Access::FrontProxy => {
            let rest = segments.get(1..).unwrap_or_default();
            authz::handle(control, req, rest).map(boxed)
        }
        Access::Grant => authz::grant(control, req).await.map(boxed),
    }
}

/// The endpoints of [`Access::Service`], for a caller with the service token.
async fn for_gateway(
    control: Arc<Control>,
    req: Request<Incoming>,
    gateway: ServiceCaller,
    segments: &[&str],
) -> Result<Streamed, ApiError> {
    let limit = control.max_body_bytes();
    let reply = match segments {
        ["recording-links", ..] => return recording_links::play(control, req, gateway).await,
        ["routes", rest @ ..] => internal::routes(control, req, gateway, rest).await,
        ["activity"] => internal::activity(control, req, gateway, limit).await,
        ["terminals"] => internal::terminals(control, req, gateway, limit).await,
        ["recordings", rest @ ..] => internal::recordings(control, req, gateway, rest).await,
        ["audit"] => internal::audit_report(control, req, gateway, limit).await,
        _ => Err(no_such_endpoint()),
    };
    reply.map(boxed)
}

/// The endpoints of [`Access::User`], for user `who` (not locked).
async fn for_user(
    control: Arc<Control>,
    req: Request<Incoming>,
    who: &Principal,
    segments: &[&str],
) -> Result<Streamed, ApiError> {
    let limit = control.max_body_bytes();
    let reply = match segments {
        ["sessions", id, "recordings", name] if req.method() == Method::GET => {
            // A recording streams from its file, never read whole.
            return sessions::download(control, who, id, name).await;
        }
        ["retention"] => users::recordings_usage(control, req, who),
        ["profiles"] => users::profiles(control, req, who),
        ["signins", rest @ ..] => users::sign_ins(&control, req, who, rest),
        ["revocations"] => users::revocations(control, req, who, limit).await,
        ["audit"] => users::audit(control, req, who),
        ["users", rest @ ..] => users::users(control, req, who, rest),
        ["sessions", rest @ ..] => sessions::sessions(control, req, who, rest, limit).await,
        ["history"] => sessions::history(control, req, who),
        ["targets", rest @ ..] => sessions::targets(control, req, who, rest, limit).await,
        ["workspaces", rest @ ..] => workspaces::workspaces(control, req, who, rest, limit).await,
        ["shared-workspaces", rest @ ..] => {
            workspaces::shared(control, req, who, rest, limit).await
        }
        ["secrets", rest @ ..] => secrets::secrets(control, req, who, rest, limit).await,
        _ => Err(no_such_endpoint()),
    };
    reply.map(boxed)
}

async fn handle(control: Arc<Control>, req: Request<Incoming>) -> Result<Streamed, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let reply = route(control, req).await.unwrap_or_else(|e| {
        let mut r = error(&e);
        if e.status == 401 && path == "/v1/authz" {
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
        }
        boxed(r)
    });
    let status = reply.status().as_u16();
    if path.starts_with("/v1/recording-links/") {
        // The path holds a recording link's token: it is never logged.
        tracing::debug!(%method, path = "/v1/recording-links/<token>", status, "request");
    } else {
        tracing::debug!(%method, %path, status, "request");
    }
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

/// The longest a client of `control.tls_listen` may take over its TLS handshake.
pub const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// Which of control's two listeners.
#[derive(Clone, Copy)]
pub enum Listener {
    /// The internal API.
    Api,
    /// Metrics and health.
    Admin,
}

/// Serves one listener until `shutdown` fires, then lets open requests finish for up
/// to `grace`. With `tls` (`control.tls_listen`) each connection completes a TLS
/// handshake first, within [`TLS_HANDSHAKE`]; the same handlers answer behind it.
pub async fn serve(
    control: Arc<Control>,
    listener: TcpListener,
    which: Listener,
    tls: Option<TlsAcceptor>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    grace: Duration,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .max_buf_size(64 * 1024);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (stream, peer): (_, SocketAddr) = match accepted {
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
                    Listener::Admin => handle_admin(control, req).await.map(boxed),
                }
            }
        });
        let (http, watcher, tls) = (http.clone(), graceful.watcher(), tls.clone());
        tokio::spawn(async move {
            let ended = match tls {
                None => {
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(conn).await
                }
                Some(tls) => match tokio::time::timeout(TLS_HANDSHAKE, tls.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let conn = http.serve_connection(TokioIo::new(stream), service);
                        watcher.watch(conn).await
                    }
                    Ok(Err(e)) => {
                        // A client that does not trust control's certificate ends here.
                        tracing::info!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::info!(%peer, "no TLS handshake within {TLS_HANDSHAKE:?}");
                        return;
                    }
                },
            };
            if let Err(e) = ended {
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

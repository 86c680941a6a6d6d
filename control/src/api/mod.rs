//! control's HTTP API (hyper 1): routing, authentication, bodies, JSON.
//!
//! User calls carry the user's JWT as a bearer token (the gateway turns the cookie into
//! one); the route feed carries the service token. Bodies are bounded, unknown fields
//! refused, and every error is the JSON shape of design §2.
//!
//! `route` picks the handler by path: `sessions`, `workspaces`, `secrets`, `users`, `internal`
//! (the gateways' endpoints) and `authz`; the bodies and answers are in `wire`, the plumbing they share
//! (replies, authentication, bodies) in `http`.

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
use http::{boxed, error, json, no_such_endpoint, Reply, Streamed};
use wire::Health;

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

/// Answers a request on the API listener: the path picks the handler of its group.
async fn route(control: Arc<Control>, req: Request<Incoming>) -> Result<Reply, ApiError> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let limit = control.max_body_bytes();
    match path_segments(&path).as_slice() {
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
        ["retention"] => users::recordings_usage(control, req),
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
        ["workspaces", rest @ ..] => workspaces::workspaces(control, req, rest, limit).await,
        ["shared-workspaces", rest @ ..] => workspaces::shared(control, req, rest, limit).await,
        ["secrets", rest @ ..] => secrets::secrets(control, req, rest, limit).await,
        _ => Err(no_such_endpoint()),
    }
}

async fn handle(control: Arc<Control>, req: Request<Incoming>) -> Result<Streamed, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    if path.starts_with("/v1/recording-links/") {
        // The path holds a recording link's token: it is never logged.
        let reply = recording_links::play(control, req)
            .await
            .unwrap_or_else(|e| boxed(error(&e)));
        tracing::debug!(%method, path = "/v1/recording-links/<token>", status = reply.status().as_u16(), "request");
        return Ok(reply);
    }
    if let ["sessions", id, "recordings", name] = path_segments(&path).as_slice() {
        if method == Method::GET {
            // A recording streams from its file, never read whole.
            let reply = sessions::download(control, req, id, name)
                .await
                .unwrap_or_else(|e| boxed(error(&e)));
            tracing::debug!(%method, %path, status = reply.status().as_u16(), "request");
            return Ok(reply);
        }
    }
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
    Ok(boxed(reply))
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

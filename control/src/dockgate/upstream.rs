//! The daemon side of dockgate: one HTTP/1.1 connection over the daemon's unix socket
//! a request (as the Docker CLI does), and the inspections a verdict depends on.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use policy::dockgate::{Labels, ObjectKind};
use serde_json::Value;
use tokio::net::UnixStream;

use super::body::{empty, Body};

/// How long an inspection may take.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest inspection answer read.
const MAX_INSPECT: usize = 4 * 1024 * 1024;

/// What can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Its socket cannot be reached.
    #[error("cannot connect to {socket}: {error}")]
    Connect {
        /// The daemon's socket.
        socket: String,
        /// Why.
        error: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// An inspection took longer than allowed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// An inspection answered something other than 200 or 404, or not JSON.
    #[error("unexpected answer: {0}")]
    Invalid(String),
}

/// A labelled object as the daemon reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Its labels.
    pub labels: Labels,
    /// A volume's driver (empty for a container).
    pub driver: String,
    /// A volume's driver options (empty for a container).
    pub options: BTreeMap<String, String>,
}

/// The Docker daemon behind a gate.
#[derive(Debug, Clone)]
pub struct Daemon {
    socket: PathBuf,
}

/// A request that passed, rebuilt from its judged parts.
pub(super) struct Forward<'a> {
    pub method: Method,
    pub target: &'a str,
    pub user_agent: Option<HeaderValue>,
    /// The judged body of a create (sent as JSON); `None`: no body.
    pub body: Option<Bytes>,
    /// Ask for the attach stream (`Connection: Upgrade`, `Upgrade: tcp`).
    pub upgrade: bool,
}

/// The daemon's answer.
pub(super) enum Answer {
    /// An ordinary answer, its body streamed on (events and waits are long).
    Plain(Response<Incoming>),
    /// `101`: the head to send to the client and the daemon's side of the stream.
    Upgraded(Response<Body>, hyper::upgrade::Upgraded),
}

impl Daemon {
    /// The daemon listening on `socket`.
    pub fn new(socket: PathBuf) -> Daemon {
        Daemon { socket }
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, UpstreamError> {
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|error| UpstreamError::Connect {
                    socket: self.socket.display().to_string(),
                    error,
                })?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!("dockgate: daemon connection: {e}");
            }
        });
        Ok(sender.send_request(req).await?)
    }

    /// Sends a request that passed.
    pub(super) async fn forward(&self, f: Forward<'_>) -> Result<Answer, UpstreamError> {
        let mut b = Request::builder()
            .method(f.method)
            .uri(f.target)
            .header(header::HOST, "docker");
        if let Some(ua) = f.user_agent {
            b = b.header(header::USER_AGENT, ua);
        }
        if f.upgrade {
            b = b
                .header(header::CONNECTION, "Upgrade")
                .header(header::UPGRADE, "tcp");
        }
        let body = match f.body {
            Some(bytes) => {
                // Docker reads a form-encoded body as query parameters: JSON only.
                b = b.header(header::CONTENT_TYPE, "application/json");
                Full::new(bytes)
            }
            None => Full::new(Bytes::new()),
        };
        let req = b
            .body(body)
            .map_err(|e| UpstreamError::Invalid(format!("request: {e}")))?;
        let mut resp = self.send(req).await?;
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS && f.upgrade {
            let daemon_side = hyper::upgrade::on(&mut resp).await?;
            let mut head = Response::new(empty());
            *head.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            *head.headers_mut() = resp.headers().clone();
            return Ok(Answer::Upgraded(head, daemon_side));
        }
        let h = resp.headers_mut();
        for name in [header::CONNECTION, header::TRANSFER_ENCODING] {
            h.remove(name);
        }
        h.remove("keep-alive");
        Ok(Answer::Plain(resp))
    }

    /// The labels (and for a volume its driver and options) of object `id`; `None`
    /// when the daemon has no such object.
    pub async fn inspect(
        &self,
        kind: ObjectKind,
        id: &str,
    ) -> Result<Option<Found>, UpstreamError> {
        let path = match kind {
            ObjectKind::Container => format!("/containers/{id}/json"),
            ObjectKind::Volume => format!("/volumes/{id}"),
        };
        let Some(v) = self.get_json(&path).await? else {
            return Ok(None);
        };
        Ok(Some(match kind {
            ObjectKind::Container => Found {
                labels: strings(&v["Config"]["Labels"]),
                ..Found::default()
            },
            ObjectKind::Volume => Found {
                labels: strings(&v["Labels"]),
                driver: v["Driver"].as_str().unwrap_or_default().to_owned(),
                options: strings(&v["Options"]),
            },
        }))
    }

    /// The name of the network the daemon resolves `reference` to (a name, an id or an
    /// id prefix all resolve); `None` when it resolves to none.
    pub async fn network_name(&self, reference: &str) -> Result<Option<String>, UpstreamError> {
        let v = self.get_json(&format!("/networks/{reference}")).await?;
        Ok(v.map(|v| v["Name"].as_str().unwrap_or_default().to_owned()))
    }

    /// `GET path` as JSON; `None` on 404.
    async fn get_json(&self, path: &str) -> Result<Option<Value>, UpstreamError> {
        let req = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(header::HOST, "docker")
            .body(Full::new(Bytes::new()))
            .map_err(|e| UpstreamError::Invalid(format!("request: {e}")))?;
        let ask = async {
            let resp = self.send(req).await?;
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_INSPECT)
                .collect()
                .await
                .map_err(|e| UpstreamError::Invalid(format!("{path}: {e}")))?
                .to_bytes();
            Ok::<_, UpstreamError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(INSPECT_TIMEOUT, ask)
            .await
            .map_err(|_| UpstreamError::Timeout(INSPECT_TIMEOUT))??;
        match status {
            StatusCode::NOT_FOUND => return Ok(None),
            StatusCode::OK => {}
            other => return Err(UpstreamError::Invalid(format!("{path}: {other}"))),
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| UpstreamError::Invalid(format!("{path}: {e}")))
    }
}

/// A JSON object of strings (`null` and absent: empty); other values are kept as
/// their JSON text, so that they never read as a wanted label and always as an option.
fn strings(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let s = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    (k.clone(), s)
                })
                .collect()
        })
        .unwrap_or_default()
}

//! dockgate: a fail-closed proxy between one privileged part (a ttyd pool, control)
//! and the Docker daemon, one unix socket per role, and on another host one TCP port
//! whose clients' certificates choose the role. The decisions are
//! [`policy::dockgate`]'s; this module reads requests off the connection, asks it,
//! looks up the labels a verdict depends on, and forwards what passes.
//!
//! Architecture invariant: **nothing reaches the daemon that `policy::dockgate` did
//! not pass**, and what is forwarded is rebuilt from the judged parts: the target as
//! it came (it was read once, and every ambiguous spelling refused), a fixed set of
//! headers, and for a create exactly the body that was judged. The attach stream
//! after Docker's `101` is copied untouched in both directions.
//!
//! `upstream.rs` speaks to the daemon (one connection a request, as the Docker CLI);
//! `audit.rs` sends refusals to control's audit trail; `body.rs` holds the body type
//! every answer has; `tls.rs` accepts mutual-TLS connections and hands each to the
//! gate its peer's role chooses, or to `pool.rs`, the fronts of the host's ttyd pools.

mod audit;
mod body;
mod declared;
mod pool;
mod tls;
mod upstream;

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use policy::audit::AuditEntry;
use policy::dockgate::{
    container_create_declared, decide, labels_pass, normalize, volume_create_declared, volume_ok,
    volume_usage, Asked, BodyInfo, CreateLookups, Denied, ObjectKind, Reason, Role, Verdict,
    MAX_BODY, MAX_USAGE_ANSWER,
};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

pub use audit::{control_address, AuditSender};
pub use body::{empty, Body};
pub use declared::{DeclaredError, DeclaredSource};
pub use tls::{api_role, pool_admits, Front, TlsListener};
pub use upstream::{Daemon, Found, UpstreamError};

/// How long a client may take to send a request's head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head read (the policy's longest target is 16 KiB).
const MAX_HEAD: usize = 64 * 1024;
/// How long a refused request's body is read before the answer goes out anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Copy buffer of an attach stream, each way.
const STREAM_BUFFER: usize = 256 * 1024;

/// One role's gate in front of one daemon.
#[derive(Debug)]
pub struct Gate {
    /// Who connects to this socket.
    pub role: Role,
    /// This deployment's `termgate.instance`.
    pub instance: String,
    /// The Docker host's name, for logs.
    pub host: String,
    /// The daemon.
    pub daemon: Daemon,
    /// Control's audit trail, where refusals go besides the log.
    pub audit: Option<AuditSender>,
    /// The configuration creates are compared with; without it no create passes.
    pub declared: Option<Arc<DeclaredSource>>,
}

/// A request's identity in logs and refusals.
struct Seen<'a> {
    method: &'a str,
    target: &'a str,
}

impl Gate {
    /// A gate for `role` of deployment `instance` in front of the daemon's unix socket.
    pub fn new(role: Role, instance: &str, host: &str, daemon_socket: PathBuf) -> Gate {
        Gate {
            role,
            instance: instance.to_owned(),
            host: host.to_owned(),
            daemon: Daemon::new(daemon_socket),
            audit: None,
            declared: None,
        }
    }

    /// Compares every create with what `source` declares.
    pub fn with_declared(mut self, source: Arc<DeclaredSource>) -> Gate {
        self.declared = Some(source);
        self
    }

    /// Sends every refusal to control's audit trail too.
    pub fn with_audit(mut self, audit: AuditSender) -> Gate {
        self.audit = Some(audit);
        self
    }

    /// Accepts connections on `listener` until it fails for good.
    pub async fn serve(self: Arc<Self>, listener: UnixListener) {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors and the like: back off, never spin.
                    tracing::warn!(role = %self.role, "dockgate: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            tokio::spawn(self.clone().serve_connection(stream));
        }
    }

    /// Serves one client connection (a unix socket, or a TLS stream whose peer's
    /// certificate chose this gate) until it ends; an attach stream is copied on
    /// `stream` itself once upgraded.
    pub async fn serve_connection<S>(self: Arc<Self>, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = hyper::service::service_fn(move |req| {
            let gate = self.clone();
            async move { Ok::<_, Infallible>(gate.handle::<S>(req).await) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        if let Err(e) = conn.await {
            tracing::debug!("dockgate: connection: {e}");
        }
    }

    /// Judges one request and answers it: forwarded, or refused with `403`. A passed
    /// attach's stream is copied on the client's transport `S` itself.
    async fn handle<S>(&self, mut req: Request<Incoming>) -> Response<Body>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let method = req.method().as_str().to_owned();
        let target = origin_target(&req);
        let seen = Seen {
            method: &method,
            target: &target,
        };
        let asked = match target_form_ok(&req).and_then(|()| normalize(&method, target.as_bytes()))
        {
            Ok(a) => a,
            Err(d) => return self.refuse(&mut req, &seen, &d).await,
        };
        let info = match framing(&req) {
            Ok(f) => f,
            Err(d) => return self.refuse(&mut req, &seen, &d).await,
        };
        let mut verdict = decide(self.role, &asked, info);
        let mut body = None;
        if let Verdict::ReadBody { max } = verdict {
            let bytes = match Limited::new(req.body_mut(), max).collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    let d = Denied {
                        reason: Reason::BodyLengthMismatch,
                        message: format!("the body could not be read as declared: {e}"),
                    };
                    return self.refuse(&mut req, &seen, &d).await;
                }
            };
            verdict = decide(self.role, &asked, info.with_bytes(&bytes));
            body = Some(bytes);
        }
        // A create passes only when it is exactly what the configuration declares.
        let mut lookups = None;
        if let Verdict::PassCreate { kind, .. } = &verdict {
            match self.compare_create(*kind, &asked, body.as_deref().unwrap_or_default()) {
                Ok(l) => lookups = l,
                Err(d) => return self.refuse(&mut req, &seen, &d).await,
            }
        }
        if let Some(l) = lookups {
            match self.look_up(l).await {
                Ok(()) => {}
                Err(Refusal::Denied(d)) => return self.refuse(&mut req, &seen, &d).await,
                Err(Refusal::Missing(kind, id)) => return not_found(kind, &id),
                Err(Refusal::Daemon(e)) => return daemon_error(&e),
            }
        }
        let usage = matches!(verdict, Verdict::PassVolumeUsage);
        match self.admit(verdict).await {
            Ok(()) => {}
            Err(Refusal::Denied(d)) => return self.refuse(&mut req, &seen, &d).await,
            Err(Refusal::Missing(kind, id)) => return not_found(kind, &id),
            Err(Refusal::Daemon(e)) => return daemon_error(&e),
        }
        tracing::debug!(role = %self.role, method = %method, target = %target, "dockgate: pass");
        // Only an attach is ever upgraded; elsewhere the headers are not passed on.
        let attach = is_attach(&asked);
        let upgrade = (attach && wants_tcp_upgrade(&req)).then(|| hyper::upgrade::on(&mut req));
        if attach && upgrade.is_none() {
            let d = Denied {
                reason: Reason::EndpointNotAllowed,
                message: "an attach must ask for the stream upgrade (Upgrade: tcp)".into(),
            };
            return self.refuse(&mut req, &seen, &d).await;
        }
        let forward = upstream::Forward {
            method: req.method().clone(),
            target: &target,
            user_agent: req.headers().get(header::USER_AGENT).cloned(),
            body,
            upgrade: upgrade.is_some(),
        };
        match self.daemon.forward(forward).await {
            Ok(upstream::Answer::Plain(resp)) if usage => self.volume_usage(resp).await,
            Ok(upstream::Answer::Plain(resp)) => resp.map(BodyExt::boxed),
            Ok(upstream::Answer::Upgraded(head, daemon_side)) => {
                if let Some(client_side) = upgrade {
                    tokio::spawn(splice::<S>(client_side, daemon_side));
                }
                head
            }
            Err(e) => daemon_error(&e),
        }
    }

    /// Looks up what a verdict depends on; `Ok` when the request may go on.
    async fn admit(&self, verdict: Verdict) -> Result<(), Refusal> {
        match verdict {
            Verdict::Pass => Ok(()),
            Verdict::Refuse(d) => Err(Refusal::Denied(d)),
            // `decide` with the body read never asks for it again.
            Verdict::ReadBody { .. } => Err(Refusal::Denied(Denied {
                reason: Reason::BodyRequired,
                message: "the body was not read".into(),
            })),
            Verdict::PassIfLabelled { kind, id } => {
                let found = self.daemon.inspect(kind, &id).await?;
                let Some(found) = found else {
                    return Err(Refusal::Missing(kind, id));
                };
                if labels_pass(kind, &found.labels, &self.instance) {
                    Ok(())
                } else {
                    Err(Refusal::Denied(Denied {
                        reason: Reason::LabelsRequired,
                        message: format!(
                            "{} {id} is not a {} of deployment {}",
                            kind_name(kind),
                            describe(kind),
                            self.instance
                        ),
                    }))
                }
            }
            Verdict::PassCreate {
                kind: _,
                instance,
                volumes,
            } => {
                self.own_instance(&instance)?;
                for name in volumes {
                    // A volume that does not exist is made by Docker as a plain local one.
                    if let Some(v) = self.daemon.inspect(ObjectKind::Volume, &name).await? {
                        volume_ok(&v.driver, &v.options).map_err(|mut d| {
                            d.message = format!("volume {name}: {}", d.message);
                            Refusal::Denied(d)
                        })?;
                    }
                }
                Ok(())
            }
            Verdict::PassFiltered { instance } => self.own_instance(&instance),
            Verdict::PassVolumeUsage => Ok(()),
        }
    }

    /// The daemon's disk usage cut to this deployment's volumes and those the
    /// configuration lends ([`policy::dockgate::volume_usage`]); the daemon's own
    /// refusal as it came.
    async fn volume_usage(&self, resp: Response<Incoming>) -> Response<Body> {
        if !resp.status().is_success() {
            return resp.map(BodyExt::boxed);
        }
        let bytes = match Limited::new(resp.into_body(), MAX_USAGE_ANSWER)
            .collect()
            .await
        {
            Ok(c) => c.to_bytes(),
            Err(e) => return daemon_error(&UpstreamError::Invalid(format!("disk usage: {e}"))),
        };
        let lent = self
            .declared
            .as_ref()
            .map(|d| d.current().shared_volumes.clone())
            .unwrap_or_default();
        match volume_usage(&bytes, &self.instance, &lent) {
            Ok(cut) => {
                let mut r =
                    Response::new(Full::new(Bytes::from(cut)).map_err(|n| match n {}).boxed());
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                r
            }
            Err(d) => daemon_error(&UpstreamError::Invalid(d.message)),
        }
    }

    /// Compares a create's body with the one the configuration declares for it; for a
    /// container, says what to look up before it goes on.
    fn compare_create(
        &self,
        kind: ObjectKind,
        asked: &Asked,
        bytes: &[u8],
    ) -> Result<Option<CreateLookups>, Denied> {
        let source = self.declared.as_ref().ok_or_else(|| Denied {
            reason: Reason::NotDeclared,
            message: "dockgate runs without --config: no create is declared".into(),
        })?;
        let declared = source.current();
        let body: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| Denied {
            reason: Reason::InvalidJson,
            message: format!("the body is not JSON: {e}"),
        })?;
        match kind {
            ObjectKind::Container => container_create_declared(&declared, asked, &body).map(Some),
            ObjectKind::Volume => volume_create_declared(&declared, &body).map(|()| None),
        }
    }

    /// What a declared container create depends on, looked up now: the workspace (and
    /// a copy's source and new volume) are the owner's home volume or workspaces
    /// termgate made for them, borrowed volumes are plain local ones, the named network resolves to exactly that name, each bind source
    /// still resolves where a mount may go, and each registered secret's file is one
    /// under `docker.secrets_dir`.
    async fn look_up(&self, l: CreateLookups) -> Result<(), Refusal> {
        let refuse = |message: String| {
            Refusal::Denied(Denied {
                reason: Reason::NotDeclared,
                message,
            })
        };
        let borrowable = self
            .declared
            .as_ref()
            .map(|d| d.current().shared_volumes.clone())
            .unwrap_or_default();
        for (name, owner, home_allowed) in &l.own_volumes {
            let found = self.daemon.inspect(ObjectKind::Volume, name).await?;
            let Some(found) = found else {
                return Err(refuse(format!("volume {name} does not exist")));
            };
            let home = policy::declared::home_volume_labels(&self.instance, owner);
            let own = policy::declared::is_own_volume(name, &found.labels, &self.instance, owner)
                && (*home_allowed || found.labels != home);
            let shared = *home_allowed
                && policy::declared::is_shared_volume(
                    name,
                    &found.labels,
                    &self.instance,
                    &borrowable,
                );
            if !(own || shared) {
                return Err(refuse(format!(
                    "volume {name} is not {} of {owner} in deployment {}",
                    if *home_allowed {
                        "the home volume, a workspace or a shared workspace"
                    } else {
                        "a workspace"
                    },
                    self.instance
                )));
            }
            volume_ok(&found.driver, &found.options).map_err(|mut d| {
                d.message = format!("volume {name}: {}", d.message);
                Refusal::Denied(d)
            })?;
        }
        for name in &l.borrowed_volumes {
            // A volume that does not exist is made by Docker as a plain local one.
            if let Some(v) = self.daemon.inspect(ObjectKind::Volume, name).await? {
                volume_ok(&v.driver, &v.options).map_err(|mut d| {
                    d.message = format!("volume {name}: {}", d.message);
                    Refusal::Denied(d)
                })?;
            }
        }
        if let Some(network) = &l.network {
            match self.daemon.network_name(network).await? {
                Some(n) if &n == network => {}
                other => {
                    return Err(refuse(format!(
                        "HostConfig.NetworkMode {network:?} resolves to {other:?}, not to a network of that name"
                    )))
                }
            }
        }
        if let Some(source) = &self.declared {
            for bind in &l.bind_sources {
                source.bind_ok(bind).map_err(Refusal::Denied)?;
            }
            for (file, user) in &l.secrets {
                source
                    .registered_secret_ok(file, user.as_deref())
                    .map_err(Refusal::Denied)?;
            }
        } else if !l.secrets.is_empty() {
            return Err(refuse("no configuration names docker.secrets_dir".into()));
        }
        Ok(())
    }

    fn own_instance(&self, instance: &str) -> Result<(), Refusal> {
        if instance == self.instance {
            return Ok(());
        }
        Err(Refusal::Denied(Denied {
            reason: Reason::LabelsRequired,
            message: format!(
                "instance {instance:?} is not this deployment's ({})",
                self.instance
            ),
        }))
    }

    /// `403` naming the rule, and the audit line. A body the client is still sending is
    /// read and dropped first (up to [`MAX_BODY`]), so that it sees the refusal rather
    /// than a connection closed under its write.
    async fn refuse(
        &self,
        req: &mut Request<Incoming>,
        seen: &Seen<'_>,
        d: &Denied,
    ) -> Response<Body> {
        let drain = Limited::new(req.body_mut(), MAX_BODY).collect();
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
        tracing::warn!(
            target: "termgate::dockgate",
            audit = "dockgate_refused",
            role = %self.role,
            host = %self.host,
            method = %seen.method,
            request_target = %seen.target,
            rule = d.code(),
            "refused: {}",
            d.message
        );
        if let Some(audit) = &self.audit {
            let fields = [
                ("role", self.role.to_string()),
                ("host", self.host.clone()),
                ("method", seen.method.to_owned()),
                ("target", seen.target.to_owned()),
                ("rule", d.code().to_owned()),
                ("reason", d.message.clone()),
            ];
            audit.send(AuditEntry {
                at_ms: config::telemetry::now_ms(),
                level: "WARN".into(),
                message: "dockgate refused".into(),
                fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            });
        }
        let e = d.error_body();
        // Docker's clients show `message`; programs read `error.code`.
        let body = json!({ "message": e.error.message, "error": e.error });
        json_response(StatusCode::FORBIDDEN, &body)
    }
}

/// Why a request stops before the daemon sees it.
enum Refusal {
    Denied(Denied),
    Missing(ObjectKind, String),
    Daemon(UpstreamError),
}

impl From<UpstreamError> for Refusal {
    fn from(e: UpstreamError) -> Self {
        Refusal::Daemon(e)
    }
}

fn kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Container => "container",
        ObjectKind::Volume => "volume",
    }
}

fn describe(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Container => "session container or copy job",
        ObjectKind::Volume => "home or workspace volume",
    }
}

fn is_attach(asked: &Asked) -> bool {
    matches!(asked.segments.as_slice(), [c, _, a] if c == "containers" && a == "attach")
}

/// The request target as it came, for origin-form requests.
fn origin_target(req: &Request<Incoming>) -> String {
    req.uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default()
}

/// Only origin-form targets (`/path?query`): an absolute or authority form is refused.
fn target_form_ok(req: &Request<Incoming>) -> Result<(), Denied> {
    if req.uri().scheme().is_some() || req.uri().authority().is_some() {
        return Err(Denied {
            reason: Reason::BadTarget,
            message: "only origin-form request targets are accepted".into(),
        });
    }
    Ok(())
}

/// How the body is framed. A `Transfer-Encoding` of any kind counts as chunked.
fn framing(req: &Request<Incoming>) -> Result<BodyInfo<'static>, Denied> {
    let h = req.headers();
    if h.contains_key(header::TRANSFER_ENCODING) {
        return Ok(BodyInfo::chunked());
    }
    let mut lengths = h.get_all(header::CONTENT_LENGTH).iter();
    let Some(first) = lengths.next() else {
        return Ok(BodyInfo::none());
    };
    let bad = || Denied {
        reason: Reason::BodyLengthMismatch,
        message: "Content-Length must be given once, as a number".into(),
    };
    if lengths.next().is_some() {
        return Err(bad());
    }
    let n = first
        .to_str()
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(bad)?;
    Ok(BodyInfo::length(n))
}

/// `Connection: Upgrade` and `Upgrade: tcp`, as the Docker CLI asks for an attach stream.
fn wants_tcp_upgrade(req: &Request<Incoming>) -> bool {
    let h = req.headers();
    let tcp = h
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("tcp"));
    let connection = h.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    tcp && connection
}

/// Copies the attach stream both ways until both sides are done, on the client's
/// transport `S` and the daemon's unix socket themselves once hyper hands them back
/// (what either side sent early first).
async fn splice<S>(client: hyper::upgrade::OnUpgrade, daemon: hyper::upgrade::Upgraded)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let client = match client.await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!("dockgate: client upgrade: {e}");
            return;
        }
    };
    let result = match (
        client.downcast::<TokioIo<S>>(),
        daemon.downcast::<TokioIo<UnixStream>>(),
    ) {
        (Ok(c), Ok(d)) => {
            let (mut client, mut daemon) = (c.io.into_inner(), d.io.into_inner());
            async {
                daemon.write_all(&c.read_buf).await?;
                client.write_all(&d.read_buf).await?;
                tokio::io::copy_bidirectional_with_sizes(
                    &mut client,
                    &mut daemon,
                    STREAM_BUFFER,
                    STREAM_BUFFER,
                )
                .await
            }
            .await
        }
        // Both ends are the transports `serve_connection` and `upstream` were given;
        // anything else is a bug, and the stream is closed rather than copied some
        // other way.
        _ => {
            tracing::error!("dockgate: an attach stream on an unexpected transport; closed");
            return;
        }
    };
    if let Err(e) = result {
        tracing::debug!("dockgate: attach stream: {e}");
    }
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let bytes = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
    let mut resp = Response::new(Full::new(bytes).map_err(|never| match never {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Docker's own answer for a missing object, so that its clients read it as such.
fn not_found(kind: ObjectKind, id: &str) -> Response<Body> {
    let message = format!("No such {}: {id}", kind_name(kind));
    json_response(StatusCode::NOT_FOUND, &json!({ "message": message }))
}

fn daemon_error(e: &UpstreamError) -> Response<Body> {
    tracing::warn!("dockgate: daemon: {e}");
    json_response(
        StatusCode::BAD_GATEWAY,
        &json!({ "message": format!("dockgate: the Docker daemon did not answer: {e}") }),
    )
}

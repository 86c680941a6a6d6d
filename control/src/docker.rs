//! The only module that talks to Docker: session containers and home volumes.
//!
//! Every call is bounded by the per-call timeout given to [`Docker::connect`]; a timeout,
//! like a daemon that cannot be reached, is [`DockerError::Unavailable`]. Container
//! creation re-checks the red lines of [`policy::sandbox`] on the spec right before the
//! call and refuses a non-compliant spec without talking to Docker at all.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, EventMessage,
    EventMessageTypeEnum, HostConfig, HostConfigCgroupnsModeEnum, Mount, MountType,
    VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, EventsOptionsBuilder, InspectContainerOptions,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, ResizeContainerTTYOptionsBuilder,
    StopContainerOptionsBuilder,
};
use bollard::API_DEFAULT_VERSION;
use futures_util::{Stream, StreamExt};
use policy::sandbox::{self, MountKind};
use policy::{ContainerSpec, Violation};

/// Label marking what termgate manages: `session` on containers, `home` on volumes.
pub const LABEL_MANAGED: &str = "termgate.managed";
/// Label naming the termgate instance that owns a container or volume.
pub const LABEL_INSTANCE: &str = "termgate.instance";
/// Label naming the user a home volume belongs to.
pub const LABEL_OWNER: &str = "termgate.owner";

/// Event actions [`Docker::events`] reports.
const EVENT_ACTIONS: [&str; 3] = ["die", "destroy", "oom"];

/// What can go wrong talking to Docker.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The daemon cannot be reached, or a call timed out.
    #[error("docker unavailable: {0}")]
    Unavailable(String),
    /// Docker answered 404.
    #[error("not found")]
    NotFound,
    /// The spec broke a red line; refused before any call to Docker.
    #[error("refused by sandbox policy: {}", join_violations(.0))]
    Refused(Vec<Violation>),
    /// Docker answered 409 (name in use, removal in progress, …), or an existing
    /// object is not one termgate may use.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Anything else.
    #[error("docker {op}: {message}")]
    Other {
        /// The operation that failed.
        op: &'static str,
        /// What Docker (or the client) said.
        message: String,
    },
}

fn join_violations(v: &[Violation]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A session container to create.
#[derive(Debug, Clone)]
pub struct ContainerRequest {
    /// Container name, `termgate-<session id>`.
    pub name: String,
    /// Image reference (must be present locally; nothing is pulled).
    pub image: String,
    /// Arguments replacing the image's `Cmd`; empty keeps the image default.
    pub command: Vec<String>,
    /// Environment, `K=V`.
    pub env: Vec<String>,
    /// Container labels.
    pub labels: BTreeMap<String, String>,
    /// The sandbox description the red lines are checked on.
    pub spec: ContainerSpec,
    /// Size of the `/tmp` tmpfs, in MiB; must be positive.
    pub tmp_size_mb: u64,
}

/// A container as Docker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    /// Full container id.
    pub id: String,
    /// Name, without the leading `/`.
    pub name: String,
    /// Container labels.
    pub labels: BTreeMap<String, String>,
    /// What Docker says it is doing.
    pub state: ContainerState,
    /// Creation time, unix seconds (0 when Docker did not say).
    pub created: i64,
}

/// What Docker says a container is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    /// Made, never started.
    Created,
    /// Its program runs.
    Running,
    /// Frozen by `docker pause`.
    Paused,
    /// Being restarted by a restart policy.
    Restarting,
    /// Being removed.
    Removing,
    /// Its program ended.
    Exited,
    /// Docker could not stop or remove it cleanly.
    Dead,
    /// Docker said nothing, or something this version does not know.
    Unknown,
}

impl ContainerState {
    /// From Docker's spelling.
    pub fn parse(s: &str) -> ContainerState {
        match s {
            "created" => ContainerState::Created,
            "running" => ContainerState::Running,
            "paused" => ContainerState::Paused,
            "restarting" => ContainerState::Restarting,
            "removing" => ContainerState::Removing,
            "exited" => ContainerState::Exited,
            "dead" => ContainerState::Dead,
            _ => ContainerState::Unknown,
        }
    }

    /// Docker's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerState::Created => "created",
            ContainerState::Running => "running",
            ContainerState::Paused => "paused",
            ContainerState::Restarting => "restarting",
            ContainerState::Removing => "removing",
            ContainerState::Exited => "exited",
            ContainerState::Dead => "dead",
            ContainerState::Unknown => "unknown",
        }
    }

    /// Whether the program runs.
    pub fn is_running(self) -> bool {
        self == ContainerState::Running
    }

    /// Whether a session on it is over: its program ended, or (for a session recorded
    /// as running, whose container was started before the record said so) it is not
    /// started at all.
    pub fn is_dead(self) -> bool {
        matches!(
            self,
            ContainerState::Exited | ContainerState::Dead | ContainerState::Created
        )
    }
}

/// A container event of a termgate instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEvent {
    /// Container id.
    pub id: String,
    /// `die`, `destroy` or `oom`.
    pub action: String,
    /// The event actor's attributes: the container's labels, plus the `name`, `image`
    /// (and for `die`, `exitCode`) attributes Docker adds.
    pub labels: BTreeMap<String, String>,
}

/// A Docker client with a per-call timeout.
#[derive(Debug, Clone)]
pub struct Docker {
    inner: bollard::Docker,
    timeout: Duration,
}

/// Whole seconds for bollard's own (header) timeout: never below ours, never zero.
fn whole_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

/// Maps a bollard error to a [`DockerError`].
fn map_err(op: &'static str, e: BollardError) -> DockerError {
    match e {
        BollardError::DockerResponseServerError {
            status_code: 404, ..
        } => DockerError::NotFound,
        BollardError::DockerResponseServerError {
            status_code: 409,
            message,
        } => DockerError::Conflict(message),
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => DockerError::Other {
            op,
            message: format!("status {status_code}: {message}"),
        },
        BollardError::RequestTimeoutError => {
            DockerError::Unavailable(format!("{op}: request timed out"))
        }
        BollardError::SocketNotFoundError(path) => {
            DockerError::Unavailable(format!("{op}: socket {path} not found"))
        }
        e @ (BollardError::HyperLegacyError { .. }
        | BollardError::HyperResponseError { .. }
        | BollardError::IOError { .. }) => DockerError::Unavailable(format!("{op}: {e}")),
        e => DockerError::Other {
            op,
            message: e.to_string(),
        },
    }
}

/// Whether `s` can be put in a request path as a container id, container name or
/// volume name: what Docker itself allows for names (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`).
fn is_plain_ref(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 255
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

fn check_ref(op: &'static str, s: &str) -> Result<(), DockerError> {
    if is_plain_ref(s) {
        Ok(())
    } else {
        Err(DockerError::Other {
            op,
            message: format!("{s:?} is not a valid container or volume reference"),
        })
    }
}

fn to_btree(m: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    m.unwrap_or_default().into_iter().collect()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix seconds of an RFC 3339 timestamp as Docker writes it
/// (`2024-05-07T21:09:36.123456789Z`, or with a `±hh:mm` offset).
fn parse_rfc3339(s: &str) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let p = s.get(r)?;
        if p.bytes().all(|b| b.is_ascii_digit()) {
            p.parse().ok()
        } else {
            None
        }
    };
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

fn status_from_summary(c: ContainerSummary) -> ContainerStatus {
    ContainerStatus {
        id: c.id.unwrap_or_default(),
        name: c
            .names
            .and_then(|n| n.into_iter().next())
            .map(|n| n.trim_start_matches('/').to_owned())
            .unwrap_or_default(),
        labels: to_btree(c.labels),
        state: c.state.map_or(ContainerState::Unknown, |s| {
            ContainerState::parse(s.as_ref())
        }),
        created: c.created.unwrap_or(0),
    }
}

fn status_from_inspect(c: ContainerInspectResponse) -> ContainerStatus {
    ContainerStatus {
        id: c.id.unwrap_or_default(),
        name: c
            .name
            .map(|n| n.trim_start_matches('/').to_owned())
            .unwrap_or_default(),
        labels: to_btree(c.config.and_then(|cfg| cfg.labels)),
        state: c
            .state
            .and_then(|s| s.status)
            .map_or(ContainerState::Unknown, |s| {
                ContainerState::parse(s.as_ref())
            }),
        created: c.created.as_deref().and_then(parse_rfc3339).unwrap_or(0),
    }
}

fn event_from_message(m: EventMessage) -> Option<ContainerEvent> {
    if m.typ != Some(EventMessageTypeEnum::CONTAINER) {
        return None;
    }
    let action = m.action?;
    if !EVENT_ACTIONS.contains(&action.as_str()) {
        return None;
    }
    let actor = m.actor?;
    Some(ContainerEvent {
        id: actor.id?,
        action,
        labels: to_btree(actor.attributes),
    })
}

/// The create body for a request whose spec has already passed the red lines.
/// Fails (without any call) on what cannot be expressed safely.
fn container_body(req: &ContainerRequest) -> Result<ContainerCreateBody, DockerError> {
    const OP: &str = "create";
    let spec = &req.spec;
    if req.tmp_size_mb == 0 {
        return Err(DockerError::Other {
            op: OP,
            message: "tmp_size_mb must be positive (size=0 would make /tmp unbounded)".into(),
        });
    }
    let mut host = HostConfig {
        cap_drop: Some(spec.cap_drop.clone()),
        cap_add: Some(spec.cap_add.clone()),
        security_opt: Some(spec.security_opt.clone()),
        privileged: Some(spec.privileged),
        readonly_rootfs: Some(spec.readonly_rootfs),
        pids_limit: spec.pids_limit,
        memory: spec.memory_bytes,
        memory_swap: spec.memory_swap_bytes,
        nano_cpus: spec.nano_cpus,
        init: Some(true),
        network_mode: Some(spec.network_mode.clone()),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_owned(),
            format!("rw,nosuid,nodev,size={}m", req.tmp_size_mb),
        )])),
        auto_remove: Some(false),
        ..Default::default()
    };
    for (kind, mode) in &spec.namespace_modes {
        match kind.as_str() {
            "PidMode" => host.pid_mode = Some(mode.clone()),
            "IpcMode" => host.ipc_mode = Some(mode.clone()),
            "UsernsMode" => host.userns_mode = Some(mode.clone()),
            "UTSMode" => host.uts_mode = Some(mode.clone()),
            "CgroupnsMode" => {
                host.cgroupns_mode = Some(match mode.as_str() {
                    "private" => HostConfigCgroupnsModeEnum::PRIVATE,
                    _ => {
                        return Err(DockerError::Other {
                            op: OP,
                            message: format!("unsupported CgroupnsMode {mode:?}"),
                        })
                    }
                })
            }
            _ => {
                return Err(DockerError::Other {
                    op: OP,
                    message: format!("unsupported namespace mode {kind:?}"),
                })
            }
        }
    }
    let mounts: Vec<Mount> = spec
        .mounts
        .iter()
        .map(|m| Mount {
            typ: Some(match m.kind {
                MountKind::Bind => MountType::BIND,
                MountKind::Volume => MountType::VOLUME,
            }),
            source: Some(m.source.clone()),
            target: Some(m.target.clone()),
            read_only: Some(m.read_only),
            ..Default::default()
        })
        .collect();
    if !mounts.is_empty() {
        host.mounts = Some(mounts);
    }
    Ok(ContainerCreateBody {
        image: Some(req.image.clone()),
        user: spec.user.clone(),
        tty: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(false),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        env: Some(req.env.clone()),
        cmd: (!req.command.is_empty()).then(|| req.command.clone()),
        labels: Some(req.labels.clone().into_iter().collect()),
        host_config: Some(host),
        ..Default::default()
    })
}

impl Docker {
    /// Connects and negotiates the API version. `None` uses `DOCKER_HOST`, else
    /// `/var/run/docker.sock`; `unix://`, `tcp://` and `http://` hosts are supported
    /// (a bare absolute path is taken as a unix socket).
    pub async fn connect(
        docker_host: Option<&str>,
        timeout: Duration,
    ) -> Result<Docker, DockerError> {
        const OP: &str = "connect";
        let secs = whole_secs(timeout);
        let inner = match docker_host {
            None => bollard::Docker::connect_with_defaults(),
            Some(h) if h.starts_with("unix://") => {
                bollard::Docker::connect_with_unix(h, secs, API_DEFAULT_VERSION)
            }
            Some(h) if h.starts_with('/') => bollard::Docker::connect_with_unix(
                &format!("unix://{h}"),
                secs,
                API_DEFAULT_VERSION,
            ),
            Some(h) if h.starts_with("tcp://") || h.starts_with("http://") => {
                bollard::Docker::connect_with_http(h, secs, API_DEFAULT_VERSION)
            }
            Some(h) => {
                return Err(DockerError::Other {
                    op: OP,
                    message: format!(
                        "unsupported docker host {h:?} (use unix://, tcp:// or http://)"
                    ),
                })
            }
        }
        .map_err(|e| map_err(OP, e))?
        .with_timeout(Duration::from_secs(secs));
        let inner = match tokio::time::timeout(timeout, inner.negotiate_version()).await {
            Err(_) => return Err(DockerError::Unavailable(format!("{OP}: timed out"))),
            Ok(r) => r.map_err(|e| map_err(OP, e))?,
        };
        Ok(Docker { inner, timeout })
    }

    /// Runs one call under the per-call timeout.
    async fn call<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, BollardError>>,
    ) -> Result<T, DockerError> {
        self.call_within(op, self.timeout, fut).await
    }

    async fn call_within<T>(
        &self,
        op: &'static str,
        limit: Duration,
        fut: impl Future<Output = Result<T, BollardError>>,
    ) -> Result<T, DockerError> {
        match tokio::time::timeout(limit, fut).await {
            Err(_) => Err(DockerError::Unavailable(format!(
                "{op}: timed out after {limit:?}"
            ))),
            Ok(r) => r.map_err(|e| map_err(op, e)),
        }
    }

    /// Checks that the daemon answers.
    pub async fn ping(&self) -> Result<(), DockerError> {
        self.call("ping", self.inner.ping()).await.map(|_| ())
    }

    /// Whether the daemon runs containers under a seccomp profile.
    pub async fn seccomp_supported(&self) -> Result<bool, DockerError> {
        let info = self.call("info", self.inner.info()).await?;
        Ok(info
            .security_options
            .unwrap_or_default()
            .iter()
            .any(|o| o.split(',').any(|part| part == "name=seccomp")))
    }

    /// Creates a session container; returns its id. The spec is checked against the red
    /// lines first: any violation is [`DockerError::Refused`] and Docker is not called.
    pub async fn create(&self, req: &ContainerRequest) -> Result<String, DockerError> {
        let violations = sandbox::check(&req.spec);
        if !violations.is_empty() {
            return Err(DockerError::Refused(violations));
        }
        let body = container_body(req)?;
        let options = CreateContainerOptionsBuilder::new().name(&req.name).build();
        let created = self
            .call("create", self.inner.create_container(Some(options), body))
            .await?;
        for w in &created.warnings {
            tracing::warn!(container = %req.name, warning = %w, "docker create warning");
        }
        Ok(created.id)
    }

    /// Starts a created container.
    pub async fn start(&self, id: &str) -> Result<(), DockerError> {
        check_ref("start", id)?;
        self.call("start", self.inner.start_container(id, None))
            .await
    }

    /// Stops a container, killing it after `grace_secs`. Already stopped or missing: Ok.
    /// The call may take the grace period on top of the per-call timeout.
    pub async fn stop(&self, id: &str, grace_secs: u64) -> Result<(), DockerError> {
        const OP: &str = "stop";
        check_ref(OP, id)?;
        let t = i32::try_from(grace_secs).unwrap_or(i32::MAX);
        let options = StopContainerOptionsBuilder::new().t(t).build();
        let limit = self.timeout.saturating_add(Duration::from_secs(grace_secs));
        let client = self.inner.clone().with_timeout(Duration::from_secs(
            whole_secs(self.timeout).saturating_add(grace_secs),
        ));
        let stop = async move {
            match client.stop_container(id, Some(options)).await {
                // 304: already stopped.
                Err(BollardError::DockerResponseServerError {
                    status_code: 304, ..
                }) => Ok(()),
                r => r,
            }
        };
        match self.call_within(OP, limit, stop).await {
            Ok(()) | Err(DockerError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Removes a container by force, with its anonymous volumes. Missing: Ok.
    pub async fn remove(&self, id_or_name: &str) -> Result<(), DockerError> {
        check_ref("remove", id_or_name)?;
        let options = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match self
            .call(
                "remove",
                self.inner.remove_container(id_or_name, Some(options)),
            )
            .await
        {
            Ok(()) | Err(DockerError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A container's status; `None` when it does not exist.
    pub async fn inspect(&self, id_or_name: &str) -> Result<Option<ContainerStatus>, DockerError> {
        check_ref("inspect", id_or_name)?;
        match self
            .call(
                "inspect",
                self.inner
                    .inspect_container(id_or_name, None::<InspectContainerOptions>),
            )
            .await
        {
            Ok(c) => Ok(Some(status_from_inspect(c))),
            Err(DockerError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every session container of `instance`, in any state.
    pub async fn list_managed(&self, instance: &str) -> Result<Vec<ContainerStatus>, DockerError> {
        let filters = HashMap::from([(
            "label",
            vec![
                format!("{LABEL_MANAGED}=session"),
                format!("{LABEL_INSTANCE}={instance}"),
            ],
        )]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let list = self
            .call("list", self.inner.list_containers(Some(options)))
            .await?;
        Ok(list
            .into_iter()
            .map(status_from_summary)
            .filter(|c| {
                c.labels.get(LABEL_MANAGED).map(String::as_str) == Some("session")
                    && c.labels.get(LABEL_INSTANCE).map(String::as_str) == Some(instance)
            })
            .collect())
    }

    /// Resizes a running container's TTY.
    pub async fn resize(&self, id: &str, cols: u16, rows: u16) -> Result<(), DockerError> {
        check_ref("resize", id)?;
        let options = ResizeContainerTTYOptionsBuilder::new()
            .w(i32::from(cols))
            .h(i32::from(rows))
            .build();
        self.call("resize", self.inner.resize_container_tty(id, options))
            .await
    }

    /// Makes sure the home volume `name` exists for `owner`. Creates it, labelled, when
    /// absent; an existing volume must carry exactly termgate's three labels with these
    /// values, else [`DockerError::Conflict`]: a volume termgate did not create is never
    /// adopted.
    pub async fn ensure_home_volume(
        &self,
        name: &str,
        owner: &str,
        instance: &str,
    ) -> Result<(), DockerError> {
        const OP: &str = "ensure_home_volume";
        check_ref(OP, name)?;
        let want: HashMap<String, String> = HashMap::from([
            (LABEL_MANAGED.to_owned(), "home".to_owned()),
            (LABEL_OWNER.to_owned(), owner.to_owned()),
            (LABEL_INSTANCE.to_owned(), instance.to_owned()),
        ]);
        let labels = match self.call(OP, self.inner.inspect_volume(name)).await {
            Ok(v) => v.labels,
            Err(DockerError::NotFound) => {
                let req = VolumeCreateRequest {
                    name: Some(name.to_owned()),
                    labels: Some(want.clone()),
                    ..Default::default()
                };
                // Creating an existing volume answers with that volume, so a racing
                // creator is caught by the same label check.
                self.call(OP, self.inner.create_volume(req)).await?.labels
            }
            Err(e) => return Err(e),
        };
        if labels == want {
            Ok(())
        } else {
            Err(DockerError::Conflict(format!(
                "volume {name:?} exists and was not created by termgate for this owner and instance"
            )))
        }
    }

    /// `die`, `destroy` and `oom` events of the containers labelled with `instance`.
    /// The stream has no overall timeout; it ends when the daemon closes it.
    ///
    /// The request is only sent when the stream is first polled; it asks for events
    /// since the moment of this call, so nothing between the call and the first poll is
    /// missed (an event from the same instant may be seen twice across resubscriptions).
    pub fn events(
        &self,
        instance: &str,
    ) -> impl Stream<Item = Result<ContainerEvent, DockerError>> + Send + 'static {
        let filters = HashMap::from([
            ("type", vec!["container".to_owned()]),
            ("label", vec![format!("{LABEL_INSTANCE}={instance}")]),
            (
                "event",
                EVENT_ACTIONS.iter().map(|a| (*a).to_owned()).collect(),
            ),
        ]);
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()))
            .unwrap_or_else(|_| "0".to_owned());
        let options = EventsOptionsBuilder::new()
            .since(&since)
            .filters(&filters)
            .build();
        let instance = instance.to_owned();
        self.inner.events(Some(options)).filter_map(move |r| {
            let item = match r {
                Ok(m) => event_from_message(m)
                    .filter(|e| e.labels.get(LABEL_INSTANCE) == Some(&instance))
                    .map(Ok),
                Err(e) => Some(Err(map_err("events", e))),
            };
            std::future::ready(item)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::MountSpec;
    use std::process::{Command, Output};
    use std::time::Instant;

    const IMAGE: &str = "termgate/session:dev";
    const TIMEOUT: Duration = Duration::from_secs(30);

    fn random_suffix() -> String {
        let mut b = [0u8; 6];
        getrandom::getrandom(&mut b).expect("random bytes");
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn docker_cli(args: &[&str]) -> Output {
        Command::new("docker")
            .args(args)
            .output()
            .expect("run the docker CLI")
    }

    /// Removes the containers and volumes it names when dropped, test failed or not.
    #[derive(Default)]
    struct Cleanup {
        containers: Vec<String>,
        volumes: Vec<String>,
    }

    impl Cleanup {
        fn container(&mut self, name: &str) -> String {
            self.containers.push(name.to_owned());
            name.to_owned()
        }
        fn volume(&mut self, name: &str) -> String {
            self.volumes.push(name.to_owned());
            name.to_owned()
        }
    }

    impl Drop for Cleanup {
        fn drop(&mut self) {
            for c in &self.containers {
                let _ = Command::new("docker").args(["rm", "-f", "-v", c]).output();
            }
            for v in &self.volumes {
                let _ = Command::new("docker")
                    .args(["volume", "rm", "-f", v])
                    .output();
            }
        }
    }

    fn hardened() -> ContainerSpec {
        ContainerSpec {
            user: Some("1000:1000".into()),
            cap_drop: vec!["ALL".into()],
            security_opt: vec!["no-new-privileges:true".into()],
            network_mode: "none".into(),
            readonly_rootfs: true,
            pids_limit: Some(64),
            memory_bytes: Some(128 << 20),
            memory_swap_bytes: Some(128 << 20),
            nano_cpus: Some(500_000_000),
            tty: true,
            open_stdin: true,
            init: true,
            ..Default::default()
        }
    }

    fn request(name: &str, instance: &str) -> ContainerRequest {
        ContainerRequest {
            name: name.to_owned(),
            image: IMAGE.to_owned(),
            command: vec![],
            env: vec!["SESSION_SHELL=sh".into()],
            labels: BTreeMap::from([
                (LABEL_MANAGED.to_owned(), "session".to_owned()),
                (LABEL_INSTANCE.to_owned(), instance.to_owned()),
            ]),
            spec: hardened(),
            tmp_size_mb: 16,
        }
    }

    /// A fresh container name and instance label, both registered for cleanup.
    fn names(cleanup: &mut Cleanup) -> (String, String) {
        let r = random_suffix();
        (
            cleanup.container(&format!("termgate-test-{r}")),
            format!("test-{r}"),
        )
    }

    async fn docker() -> Docker {
        Docker::connect(None, TIMEOUT)
            .await
            .expect("connect to the local docker daemon")
    }

    /// Docker pointed at an address nothing answers on, without negotiating.
    fn unreachable(timeout: Duration) -> Docker {
        Docker {
            inner: bollard::Docker::connect_with_http(
                "tcp://127.0.0.1:9",
                whole_secs(timeout),
                API_DEFAULT_VERSION,
            )
            .unwrap(),
            timeout,
        }
    }

    fn exec(id: &str, script: &str) -> Output {
        docker_cli(&["exec", id, "sh", "-c", script])
    }

    async fn wait_for_state(d: &Docker, id: &str, state: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = d.inspect(id).await.unwrap().expect("container exists");
            if s.state.as_str() == state {
                return;
            }
            assert!(Instant::now() < deadline, "{id} stuck in {:?}", s.state);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    #[test]
    fn body_maps_the_spec_exactly_and_never_uses_binds() {
        let mut req = request("termgate-x", "i");
        req.command = vec!["-c".into(), "true".into()];
        req.spec.namespace_modes = BTreeMap::from([
            ("PidMode".to_owned(), "private".to_owned()),
            ("IpcMode".to_owned(), "private".to_owned()),
            ("UTSMode".to_owned(), "".to_owned()),
            ("UsernsMode".to_owned(), "".to_owned()),
        ]);
        req.spec.mounts = vec![
            MountSpec {
                kind: MountKind::Bind,
                source: "/srv/data".into(),
                target: "/data".into(),
                read_only: true,
            },
            MountSpec {
                kind: MountKind::Volume,
                source: "termgate-home-alice".into(),
                target: "/home/user".into(),
                read_only: false,
            },
        ];
        let body = container_body(&req).unwrap();
        assert_eq!(body.user.as_deref(), Some("1000:1000"));
        assert_eq!(body.tty, Some(true));
        assert_eq!(body.open_stdin, Some(true));
        assert_eq!(body.stdin_once, Some(false));
        assert_eq!(body.attach_stdin, Some(false));
        assert_eq!(body.attach_stdout, Some(false));
        assert_eq!(body.attach_stderr, Some(false));
        assert_eq!(body.cmd, Some(vec!["-c".to_owned(), "true".to_owned()]));
        assert_eq!(body.entrypoint, None);
        assert_eq!(body.network_disabled, None);
        let h = body.host_config.unwrap();
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(h.cap_add, Some(vec![]));
        assert_eq!(
            h.security_opt,
            Some(vec!["no-new-privileges:true".to_owned()])
        );
        assert_eq!(h.privileged, Some(false));
        assert_eq!(h.readonly_rootfs, Some(true));
        assert_eq!(h.pids_limit, Some(64));
        assert_eq!(h.memory, Some(128 << 20));
        assert_eq!(h.memory_swap, Some(128 << 20));
        assert_eq!(h.nano_cpus, Some(500_000_000));
        assert_eq!(h.init, Some(true));
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        assert_eq!(h.pid_mode.as_deref(), Some("private"));
        assert_eq!(h.ipc_mode.as_deref(), Some("private"));
        assert_eq!(h.uts_mode.as_deref(), Some(""));
        assert_eq!(h.userns_mode.as_deref(), Some(""));
        assert_eq!(
            h.tmpfs,
            Some(HashMap::from([(
                "/tmp".to_owned(),
                "rw,nosuid,nodev,size=16m".to_owned()
            )]))
        );
        assert_eq!(h.binds, None);
        assert_eq!(h.devices, None);
        assert_eq!(h.restart_policy, None);
        assert_eq!(h.auto_remove, Some(false));
        assert_eq!(h.log_config, None);
        let mounts = h.mounts.unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].typ, Some(MountType::BIND));
        assert_eq!(mounts[0].source.as_deref(), Some("/srv/data"));
        assert_eq!(mounts[0].target.as_deref(), Some("/data"));
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(mounts[1].typ, Some(MountType::VOLUME));
        assert_eq!(mounts[1].source.as_deref(), Some("termgate-home-alice"));
        assert_eq!(mounts[1].read_only, Some(false));

        req.command.clear();
        assert_eq!(container_body(&req).unwrap().cmd, None);
    }

    #[test]
    fn body_refuses_unknown_namespace_keys_and_an_unbounded_tmp() {
        let mut req = request("termgate-x", "i");
        req.spec
            .namespace_modes
            .insert("SomethingMode".into(), "private".into());
        assert!(matches!(
            container_body(&req),
            Err(DockerError::Other { op: "create", .. })
        ));
        let mut req = request("termgate-x", "i");
        req.tmp_size_mb = 0;
        assert!(matches!(
            container_body(&req),
            Err(DockerError::Other { op: "create", .. })
        ));
    }

    #[test]
    fn rfc3339_timestamps_parse_to_unix_seconds() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-05-07T21:09:36.123456789Z"),
            Some(1_715_116_176)
        );
        assert_eq!(
            parse_rfc3339("2024-05-07T23:09:36+02:00"),
            Some(1_715_116_176)
        );
        assert_eq!(parse_rfc3339("2000-02-29T12:00:00.5Z"), Some(951_825_600));
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some(-62_135_596_800));
        for bad in [
            "",
            "2024-05-07",
            "2024-13-01T00:00:00Z",
            "2024-05-07T21:09:36",
            "x024-05-07T21:09:36Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn references_with_path_characters_are_rejected() {
        for bad in ["", "../containers", "a/b", "a?b", "-x", ".x", "a b"] {
            assert!(!is_plain_ref(bad), "{bad}");
        }
        for ok in ["termgate-abc", "0123abcdef", "termgate-home-alice_1.x"] {
            assert!(is_plain_ref(ok), "{ok}");
        }
    }

    #[tokio::test]
    async fn connect_negotiates_the_daemons_api_version() {
        let d = docker().await;
        let server = d.inner.version().await.unwrap();
        let server: bollard::ClientVersion = server
            .api_version
            .map(|v| {
                let (maj, min) = v.split_once('.').unwrap();
                bollard::ClientVersion {
                    major_version: maj.parse().unwrap(),
                    minor_version: min.parse().unwrap(),
                }
            })
            .unwrap();
        let client = d.inner.client_version();
        assert!(client <= server, "client {client} > server {server}");
        assert!(client <= *API_DEFAULT_VERSION);
        d.ping().await.unwrap();
    }

    #[tokio::test]
    async fn seccomp_support_matches_docker_info() {
        let d = docker().await;
        let out = docker_cli(&["info", "--format", "{{json .SecurityOptions}}"]);
        let cli = String::from_utf8_lossy(&out.stdout).contains("name=seccomp");
        assert_eq!(d.seccomp_supported().await.unwrap(), cli);
    }

    #[tokio::test]
    async fn create_and_start_apply_the_hardened_host_config() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let d = docker().await;
        let id = d.create(&request(&name, &instance)).await.unwrap();
        d.start(&id).await.unwrap();
        wait_for_state(&d, &id, "running").await;

        let status = d.inspect(&name).await.unwrap().unwrap();
        assert_eq!(status.id, id);
        assert_eq!(status.name, name);
        assert_eq!(status.labels.get(LABEL_INSTANCE), Some(&instance));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(
            (status.created - now).abs() < 300,
            "created {}",
            status.created
        );

        let out = docker_cli(&["inspect", &id]);
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let c = &v[0];
        let h = &c["HostConfig"];
        assert_eq!(h["CapDrop"], serde_json::json!(["ALL"]));
        assert!(h["CapAdd"].is_null() || h["CapAdd"] == serde_json::json!([]));
        assert_eq!(
            h["SecurityOpt"],
            serde_json::json!(["no-new-privileges:true"])
        );
        assert_eq!(h["Privileged"], false);
        assert_eq!(h["ReadonlyRootfs"], true);
        assert_eq!(h["PidsLimit"], 64);
        assert_eq!(h["Memory"], 128 << 20);
        assert_eq!(h["MemorySwap"], h["Memory"]);
        assert_eq!(h["NanoCpus"], 500_000_000);
        assert_eq!(h["NetworkMode"], "none");
        assert_eq!(h["Init"], true);
        assert!(h["Binds"].is_null(), "Binds: {}", h["Binds"]);
        assert!(h["Devices"].is_null() || h["Devices"] == serde_json::json!([]));
        assert_eq!(h["Tmpfs"]["/tmp"], "rw,nosuid,nodev,size=16m");
        assert_eq!(h["AutoRemove"], false);
        assert_eq!(h["RestartPolicy"]["Name"], "");
        assert_eq!(c["Config"]["Tty"], true);
        assert_eq!(c["Config"]["OpenStdin"], true);
        assert_eq!(c["Config"]["StdinOnce"], false);
        assert_eq!(c["Config"]["User"], "1000:1000");

        let status = exec(
            &id,
            r#"grep -E "^(CapEff|CapBnd|NoNewPrivs):" /proc/1/status /proc/self/status"#,
        );
        assert!(status.status.success(), "{status:?}");
        let text = String::from_utf8_lossy(&status.stdout);
        assert_eq!(
            text.matches("CapEff:\t0000000000000000").count(),
            2,
            "{text}"
        );
        assert_eq!(
            text.matches("CapBnd:\t0000000000000000").count(),
            2,
            "{text}"
        );
        assert_eq!(text.matches("NoNewPrivs:\t1").count(), 2, "{text}");
        assert!(
            !exec(&id, "touch /x").status.success(),
            "root fs is writable"
        );
        assert!(
            exec(&id, "touch /tmp/x && rm /tmp/x").status.success(),
            "/tmp is not writable"
        );
        let tmp = exec(&id, "grep ' /tmp ' /proc/mounts");
        let tmp = String::from_utf8_lossy(&tmp.stdout);
        assert!(tmp.starts_with("tmpfs /tmp tmpfs rw,nosuid,nodev"), "{tmp}");
        assert!(exec(
            &id,
            "test ! -e /var/run/docker.sock && test ! -e /run/docker.sock"
        )
        .status
        .success());
        let id_out = exec(&id, "id -u; id -g");
        assert_eq!(String::from_utf8_lossy(&id_out.stdout), "1000\n1000\n");

        d.remove(&id).await.unwrap();
        assert_eq!(d.inspect(&id).await.unwrap(), None);
    }

    #[tokio::test]
    async fn mounts_reach_the_container_as_typed_mounts() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let volume = cleanup.volume(&format!("termgate-test-home-{}", random_suffix()));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "hello").unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let d = docker().await;
        d.ensure_home_volume(&volume, "alice", &instance)
            .await
            .unwrap();
        let mut req = request(&name, &instance);
        req.spec.mounts = vec![
            MountSpec {
                kind: MountKind::Bind,
                source: dir.path().to_str().unwrap().to_owned(),
                target: "/data".into(),
                read_only: true,
            },
            MountSpec {
                kind: MountKind::Volume,
                source: volume.clone(),
                target: "/home/user".into(),
                read_only: false,
            },
        ];
        let id = d.create(&req).await.unwrap();
        d.start(&id).await.unwrap();
        wait_for_state(&d, &id, "running").await;
        let out = docker_cli(&["inspect", &id]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v[0]["HostConfig"]["Binds"].is_null());
        let mounts = v[0]["HostConfig"]["Mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0]["Type"], "bind");
        assert_eq!(mounts[0]["ReadOnly"], true);
        assert_eq!(mounts[1]["Type"], "volume");
        assert_eq!(mounts[1]["Source"], volume.as_str());
        let cat = exec(&id, "cat /data/f");
        assert_eq!(String::from_utf8_lossy(&cat.stdout), "hello");
        assert!(
            !exec(&id, "touch /data/g").status.success(),
            "bind is writable"
        );
        d.remove(&id).await.unwrap();
    }

    #[tokio::test]
    async fn privileged_spec_is_refused_before_any_docker_call() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let mut req = request(&name, &instance);
        req.spec.privileged = true;
        // A client that cannot reach anything: Refused (not Unavailable) proves no call.
        let offline = unreachable(Duration::from_secs(2));
        match offline.create(&req).await {
            Err(DockerError::Refused(v)) => {
                assert!(
                    v.iter().any(|v| v.rule == policy::Rule::NotPrivileged),
                    "{v:?}"
                )
            }
            other => panic!("expected Refused, got {other:?}"),
        }
        let d = docker().await;
        assert!(matches!(d.create(&req).await, Err(DockerError::Refused(_))));
        assert_eq!(d.inspect(&name).await.unwrap(), None);
    }

    #[tokio::test]
    async fn missing_bind_source_fails_and_leaves_no_container() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let missing = format!("/nonexistent-termgate-{}", random_suffix());
        let mut req = request(&name, &instance);
        req.spec.mounts.push(MountSpec {
            kind: MountKind::Bind,
            source: missing.clone(),
            target: "/data".into(),
            read_only: true,
        });
        let d = docker().await;
        let err = d.create(&req).await.unwrap_err();
        assert!(
            matches!(err, DockerError::Other { op: "create", .. }),
            "{err:?}"
        );
        assert_eq!(d.inspect(&name).await.unwrap(), None);
        assert!(!std::path::Path::new(&missing).exists());
    }

    #[tokio::test]
    async fn create_with_a_name_in_use_is_conflict() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let d = docker().await;
        d.create(&request(&name, &instance)).await.unwrap();
        let err = d.create(&request(&name, &instance)).await.unwrap_err();
        assert!(matches!(err, DockerError::Conflict(_)), "{err:?}");
        d.remove(&name).await.unwrap();
    }

    #[tokio::test]
    async fn list_managed_returns_only_containers_of_its_instance() {
        let mut cleanup = Cleanup::default();
        let (mine, instance) = names(&mut cleanup);
        let (theirs, other_instance) = names(&mut cleanup);
        let (unlabelled, _) = names(&mut cleanup);
        let d = docker().await;
        let id = d.create(&request(&mine, &instance)).await.unwrap();
        d.create(&request(&theirs, &other_instance)).await.unwrap();
        let out = docker_cli(&[
            "run",
            "-d",
            "--name",
            &unlabelled,
            "--network",
            "none",
            "--entrypoint",
            "/bin/sleep",
            IMAGE,
            "60",
        ]);
        assert!(out.status.success(), "{out:?}");
        // Same instance label but not a session container.
        let (home_like, _) = names(&mut cleanup);
        let label = format!("{LABEL_INSTANCE}={instance}");
        let out = docker_cli(&[
            "create",
            "--name",
            &home_like,
            "--label",
            &label,
            "--label",
            "termgate.managed=other",
            IMAGE,
        ]);
        assert!(out.status.success(), "{out:?}");

        let list = d.list_managed(&instance).await.unwrap();
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0].id, id);
        assert_eq!(list[0].name, mine);
        assert_eq!(list[0].state, ContainerState::Created);
        assert!(list[0].created > 0);
        assert_eq!(
            list[0].labels.get(LABEL_MANAGED).map(String::as_str),
            Some("session")
        );
        assert!(d
            .list_managed(&format!("test-{}", random_suffix()))
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn remove_is_idempotent() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let d = docker().await;
        let id = d.create(&request(&name, &instance)).await.unwrap();
        d.start(&id).await.unwrap();
        d.remove(&id).await.unwrap();
        d.remove(&id).await.unwrap();
        d.remove(&name).await.unwrap();
        assert_eq!(d.inspect(&name).await.unwrap(), None);
    }

    #[tokio::test]
    async fn stop_on_an_exited_created_or_missing_container_is_ok() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let d = docker().await;
        let mut req = request(&name, &instance);
        req.command = vec!["-c".into(), "exit 3".into()];
        let id = d.create(&req).await.unwrap();
        d.stop(&id, 1).await.unwrap(); // never started
        d.start(&id).await.unwrap();
        wait_for_state(&d, &id, "exited").await;
        d.stop(&id, 1).await.unwrap();
        d.remove(&id).await.unwrap();
        d.stop(&id, 1).await.unwrap(); // gone
    }

    #[tokio::test]
    async fn stop_ends_a_running_container() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let d = docker().await;
        let id = d.create(&request(&name, &instance)).await.unwrap();
        d.start(&id).await.unwrap();
        wait_for_state(&d, &id, "running").await;
        d.stop(&id, 2).await.unwrap();
        assert_eq!(
            d.inspect(&id).await.unwrap().unwrap().state,
            ContainerState::Exited
        );
    }

    #[tokio::test]
    async fn ensure_home_volume_creates_accepts_and_refuses_foreign_volumes() {
        let mut cleanup = Cleanup::default();
        let instance = format!("test-{}", random_suffix());
        let ours = cleanup.volume(&format!("termgate-test-home-{}", random_suffix()));
        let foreign = cleanup.volume(&format!("termgate-test-home-{}", random_suffix()));
        let d = docker().await;

        d.ensure_home_volume(&ours, "alice", &instance)
            .await
            .unwrap();
        let out = docker_cli(&["volume", "inspect", &ours]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            v[0]["Labels"],
            serde_json::json!({
                "termgate.managed": "home",
                "termgate.owner": "alice",
                "termgate.instance": instance,
            })
        );
        d.ensure_home_volume(&ours, "alice", &instance)
            .await
            .unwrap();
        for (owner, inst) in [("bob", instance.as_str()), ("alice", "test-other")] {
            let err = d.ensure_home_volume(&ours, owner, inst).await.unwrap_err();
            assert!(matches!(err, DockerError::Conflict(_)), "{err:?}");
        }

        let out = docker_cli(&["volume", "create", &foreign]);
        assert!(out.status.success(), "{out:?}");
        let err = d
            .ensure_home_volume(&foreign, "alice", &instance)
            .await
            .unwrap_err();
        assert!(matches!(err, DockerError::Conflict(_)), "{err:?}");
        let out = docker_cli(&[
            "volume",
            "inspect",
            "--format",
            "{{json .Labels}}",
            &foreign,
        ]);
        let labels = String::from_utf8_lossy(&out.stdout);
        assert!(
            !labels.contains("termgate"),
            "foreign volume was relabelled: {labels}"
        );
    }

    #[tokio::test]
    async fn events_report_die_of_a_killed_container() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let (other, other_instance) = names(&mut cleanup);
        let d = docker().await;
        let mut events = Box::pin(d.events(&instance));
        let id = d.create(&request(&name, &instance)).await.unwrap();
        let other_id = d.create(&request(&other, &other_instance)).await.unwrap();
        d.start(&id).await.unwrap();
        d.start(&other_id).await.unwrap();
        wait_for_state(&d, &id, "running").await;
        // The stream is first polled after the kills: it still sees them, because it
        // asks for events since the moment `events` was called.
        assert!(docker_cli(&["kill", &other_id]).status.success());
        assert!(docker_cli(&["kill", &id]).status.success());
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("a die event within 5 s")
            .expect("stream open")
            .expect("event");
        assert_eq!(event.id, id);
        assert_eq!(event.action, "die");
        assert_eq!(event.labels.get(LABEL_INSTANCE), Some(&instance));
        d.remove(&id).await.unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("a destroy event within 5 s")
            .expect("stream open")
            .expect("event");
        assert_eq!(
            (event.id.as_str(), event.action.as_str()),
            (id.as_str(), "destroy")
        );
    }

    #[tokio::test]
    async fn resize_on_a_running_container_succeeds() {
        let mut cleanup = Cleanup::default();
        let (name, instance) = names(&mut cleanup);
        let d = docker().await;
        let id = d.create(&request(&name, &instance)).await.unwrap();
        d.start(&id).await.unwrap();
        wait_for_state(&d, &id, "running").await;
        d.resize(&id, 132, 43).await.unwrap();
        assert!(matches!(
            d.resize(&format!("termgate-test-{}", random_suffix()), 80, 24)
                .await,
            Err(DockerError::NotFound)
        ));
    }

    #[tokio::test]
    async fn missing_socket_is_unavailable() {
        let err = Docker::connect(Some("unix:///nonexistent.sock"), Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(matches!(err, DockerError::Unavailable(_)), "{err:?}");
        let err = unreachable(Duration::from_secs(2))
            .ping()
            .await
            .unwrap_err();
        assert!(matches!(err, DockerError::Unavailable(_)), "{err:?}");
        let err = Docker::connect(Some("ftp://x"), Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(
            matches!(err, DockerError::Other { op: "connect", .. }),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_daemon_that_never_answers_times_out_as_unavailable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        let d = Docker {
            inner: bollard::Docker::connect_with_http(
                &format!("tcp://{addr}"),
                30,
                API_DEFAULT_VERSION,
            )
            .unwrap(),
            timeout: Duration::from_millis(300),
        };
        let started = Instant::now();
        let err = d.ping().await.unwrap_err();
        assert!(matches!(err, DockerError::Unavailable(_)), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let err = Docker::connect(Some(&format!("tcp://{addr}")), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(err, DockerError::Unavailable(_)), "{err:?}");
        hold.abort();
    }

    #[tokio::test]
    async fn invalid_references_never_reach_docker() {
        let offline = unreachable(Duration::from_secs(2));
        for bad in ["../../volumes/x", "a/b", ""] {
            assert!(matches!(
                offline.inspect(bad).await,
                Err(DockerError::Other { .. })
            ));
            assert!(matches!(
                offline.remove(bad).await,
                Err(DockerError::Other { .. })
            ));
            assert!(matches!(
                offline.ensure_home_volume(bad, "a", "b").await,
                Err(DockerError::Other { .. })
            ));
        }
    }
}

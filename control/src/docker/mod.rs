//! The only module that talks to Docker: session containers, copy jobs, and home and
//! workspace volumes.
//!
//! Every call is bounded by the per-call timeout given to [`Docker::connect`]; a timeout,
//! like a daemon that cannot be reached, is [`DockerError::Unavailable`]. Container
//! creation re-checks the red lines of [`policy::sandbox`] on the spec right before the
//! call and refuses a non-compliant spec without talking to Docker at all.
//!
//! [`types`] holds what the client speaks in, [`body`] writes the create call,
//! [`convert`] reads Docker's answers.

mod body;
mod convert;
mod tls;
mod types;

pub use types::{
    ContainerEvent, ContainerRequest, ContainerState, ContainerStatus, DockerError, EventAction,
};

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DataUsageOptions, EventsOptionsBuilder, InspectContainerOptions,
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, ListVolumesOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder, ResizeContainerTTYOptionsBuilder,
};
use bollard::{ClientVersion, API_DEFAULT_VERSION};
use futures_util::{Stream, StreamExt};
use policy::sandbox;
use policy::{SessionId, Sub};

use crate::labels::{self, Labels};

/// How often [`Docker::wait_exit`] asks whether a hung-up container has stopped.
const EXIT_POLL: Duration = Duration::from_millis(50);

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

impl Docker {
    /// Connects and negotiates the API version. `None` uses `DOCKER_HOST`, else
    /// `/var/run/docker.sock`; `unix://`, `tcp://` and `http://` hosts are supported
    /// (a bare absolute path is taken as a unix socket).
    pub async fn connect(
        docker_host: Option<&str>,
        timeout: Duration,
    ) -> Result<Docker, DockerError> {
        Docker::unnegotiated(docker_host, None, timeout)?
            .negotiated()
            .await
    }

    /// A client for `docker_host` (as [`Docker::connect`]; with `tls` = (CA,
    /// certificate, key) files, a `tcp://` host is spoken to over TLS, and a `tls://`
    /// host is a dockgate spoken to over mutual TLS, see [`tls`]) that has not talked
    /// to the daemon yet: for a host that may be down when control starts. Fails only
    /// for an endpoint it cannot use at all.
    pub fn unnegotiated(
        docker_host: Option<&str>,
        tls: Option<(&std::path::Path, &std::path::Path, &std::path::Path)>,
        timeout: Duration,
    ) -> Result<Docker, DockerError> {
        const OP: &str = "connect";
        let secs = whole_secs(timeout);
        let inner = match (docker_host, tls) {
            (Some(h), Some(files)) if h.starts_with(tls::SCHEME) => {
                let inner = tls::connect(h, files, secs)?.with_timeout(Duration::from_secs(secs));
                return Ok(Docker { inner, timeout });
            }
            (Some(h), Some((ca, cert, key))) if h.starts_with("tcp://") => {
                bollard::Docker::connect_with_ssl(h, key, cert, ca, secs, API_DEFAULT_VERSION)
            }
            (h, Some(_)) => {
                return Err(DockerError::Other {
                    op: OP,
                    message: format!("TLS needs a tcp:// or tls:// docker host, not {h:?}"),
                })
            }
            (Some(h), None) if h.starts_with(tls::SCHEME) => {
                return Err(DockerError::Other {
                    op: OP,
                    message: format!(
                        "{h:?} needs pki.ca_file, control.tls_cert_file and control.tls_key_file"
                    ),
                })
            }
            (docker_host, None) => match docker_host {
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
            },
        }
        .map_err(|e| map_err(OP, e))?
        .with_timeout(Duration::from_secs(secs));
        Ok(Docker { inner, timeout })
    }

    /// This client with the API version negotiated with the daemon (which may be old:
    /// Debian's 20.10 speaks 1.41).
    pub async fn negotiated(&self) -> Result<Docker, DockerError> {
        const OP: &str = "connect";
        let inner = match tokio::time::timeout(self.timeout, self.inner.clone().negotiate_version())
            .await
        {
            Err(_) => return Err(DockerError::Unavailable(format!("{OP}: timed out"))),
            Ok(r) => r.map_err(|e| map_err(OP, e))?,
        };
        Ok(Docker {
            inner,
            timeout: self.timeout,
        })
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

    /// The Docker API version this client speaks, as negotiated by [`Docker::connect`].
    pub fn api_version(&self) -> ClientVersion {
        self.inner.client_version()
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

    /// The OCI runtimes the daemon offers (`docker info`'s `Runtimes`), by name.
    pub async fn runtimes(&self) -> Result<Vec<String>, DockerError> {
        let info = self.call("info", self.inner.info()).await?;
        let mut names: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
        names.sort();
        Ok(names)
    }

    /// Creates a session container; returns its id. The spec is checked against the red
    /// lines first: any violation is [`DockerError::Refused`] and Docker is not called.
    pub async fn create(&self, req: &ContainerRequest) -> Result<String, DockerError> {
        let violations = sandbox::check(&req.spec);
        if !violations.is_empty() {
            return Err(DockerError::Refused(violations));
        }
        let body = body::container_body(&req.body)?;
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

    /// Hangs up on a container's processes as a closed terminal would: `SIGHUP`, which
    /// the container's init (`Init=true`) forwards to its program. A container that is
    /// missing or not running (Docker's 409) has nothing to hang up: Ok. Kill with a
    /// signal is the same call on every API version, however old.
    pub async fn hang_up(&self, id: &str) -> Result<(), DockerError> {
        const OP: &str = "kill";
        check_ref(OP, id)?;
        let options = KillContainerOptionsBuilder::new().signal("SIGHUP").build();
        match self
            .call(OP, self.inner.kill_container(id, Some(options)))
            .await
        {
            Ok(()) | Err(DockerError::NotFound | DockerError::Conflict(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `within` for a container's program to stop (or the container to be
    /// gone); `true` when it did. Asks Docker every [`EXIT_POLL`] with an inspect, which
    /// every API version answers alike; the whole wait, Docker's answers included, is
    /// bounded by `within`.
    pub async fn wait_exit(&self, id: &str, within: Duration) -> Result<bool, DockerError> {
        check_ref("inspect", id)?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let Ok(found) = tokio::time::timeout(left, self.inspect(id)).await else {
                return Ok(false);
            };
            match found? {
                None => return Ok(true),
                Some(c) if !c.state.is_alive() => return Ok(true),
                Some(_) => {}
            }
            tokio::time::sleep(EXIT_POLL.min(left)).await;
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
            Ok(c) => Ok(Some(convert::status_from_inspect(c))),
            Err(DockerError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every session container of `instance`, in any state.
    pub async fn list_managed(&self, instance: &str) -> Result<Vec<ContainerStatus>, DockerError> {
        let filters = HashMap::from([("label", labels::session_filters(instance))]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let list = self
            .call("list", self.inner.list_containers(Some(options)))
            .await?;
        Ok(list
            .into_iter()
            .map(convert::status_from_summary)
            // Docker's filter is not the red line: the predicate is.
            .filter(|c| labels::is_session_of(&c.labels, instance))
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
        owner: &Sub,
        instance: &str,
    ) -> Result<(), DockerError> {
        self.ensure_volume(
            "ensure_home_volume",
            name,
            labels::home_volume(instance, owner),
        )
        .await
    }

    /// Makes sure workspace `id`'s volume `name` exists for `owner`, as
    /// [`Docker::ensure_home_volume`] does the home volume: made with the workspace's
    /// labels when absent, adopted only when it carries exactly them.
    pub async fn ensure_workspace_volume(
        &self,
        name: &str,
        owner: &Sub,
        id: &SessionId,
        instance: &str,
    ) -> Result<(), DockerError> {
        let want = policy::declared::workspace_volume_labels(instance, owner, id);
        self.ensure_volume("ensure_workspace_volume", name, want)
            .await
    }

    /// Makes sure shared workspace `id`'s volume `name` exists, as
    /// [`Docker::ensure_workspace_volume`] does a workspace's.
    pub async fn ensure_shared_volume(
        &self,
        name: &str,
        id: &SessionId,
        instance: &str,
    ) -> Result<(), DockerError> {
        let want = policy::declared::shared_volume_labels(instance, id);
        self.ensure_volume("ensure_shared_volume", name, want).await
    }

    async fn ensure_volume(
        &self,
        op: &'static str,
        name: &str,
        want: Labels,
    ) -> Result<(), DockerError> {
        check_ref(op, name)?;
        let found = match self.call(op, self.inner.inspect_volume(name)).await {
            Ok(v) => v.labels,
            Err(DockerError::NotFound) => {
                let req = VolumeCreateRequest {
                    name: Some(name.to_owned()),
                    labels: Some(want.clone().into_iter().collect()),
                    ..Default::default()
                };
                // Creating an existing volume answers with that volume, so a racing
                // creator is caught by the same label check.
                self.call(op, self.inner.create_volume(req)).await?.labels
            }
            Err(e) => return Err(e),
        };
        if found.into_iter().collect::<Labels>() == want {
            Ok(())
        } else {
            Err(DockerError::Conflict(format!(
                "volume {name:?} exists and was not created by termgate for this owner and instance"
            )))
        }
    }

    /// The labels of volume `name`; `None` when it does not exist.
    pub async fn volume_labels(&self, name: &str) -> Result<Option<Labels>, DockerError> {
        const OP: &str = "inspect_volume";
        check_ref(OP, name)?;
        match self.call(OP, self.inner.inspect_volume(name)).await {
            Ok(v) => Ok(Some(v.labels.into_iter().collect())),
            Err(DockerError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes volume `name`, never by force: a volume a container still uses stays
    /// ([`DockerError::Conflict`]). Missing: Ok. The caller has the evidence that
    /// termgate made it.
    pub async fn remove_volume(&self, name: &str) -> Result<(), DockerError> {
        const OP: &str = "remove_volume";
        check_ref(OP, name)?;
        let options = RemoveVolumeOptionsBuilder::new().force(false).build();
        match self
            .call(OP, self.inner.remove_volume(name, Some(options)))
            .await
        {
            Ok(()) | Err(DockerError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The volumes labelled with `instance`: each one's name and labels.
    pub async fn list_volumes(&self, instance: &str) -> Result<Vec<(String, Labels)>, DockerError> {
        let filters = HashMap::from([("label", vec![format!("{}={instance}", labels::INSTANCE)])]);
        let options = ListVolumesOptionsBuilder::new().filters(&filters).build();
        let list = self
            .call("list_volumes", self.inner.list_volumes(Some(options)))
            .await?;
        Ok(list
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| (v.name, v.labels.into_iter().collect::<Labels>()))
            // Docker's filter is not the evidence: the labels are.
            .filter(|(_, l)| l.get(labels::INSTANCE).map(String::as_str) == Some(instance))
            .collect())
    }

    /// The size in bytes of each volume the daemon measured for `GET /system/df`, by
    /// name. Read from API 1.52's shape (`VolumeUsage.Items`), the one dockgate always
    /// answers in; a daemon before 1.52 dialled without dockgate tells none.
    pub async fn volume_sizes(&self) -> Result<HashMap<String, u64>, DockerError> {
        // Without `type=volume`: bollard 0.21 cannot encode its list (and daemons
        // before API 1.42 ignore it); dockgate cuts the answer to volumes anyway.
        let df = self
            .call("df", self.inner.df(None::<DataUsageOptions>))
            .await?;
        let items = df.volume_usage.and_then(|u| u.items).unwrap_or_default();
        Ok(items
            .iter()
            .filter_map(|v| {
                let name = v.get("Name")?.as_str()?;
                // Docker says -1 for a size it did not compute.
                let size = u64::try_from(v.pointer("/UsageData/Size")?.as_i64()?).ok()?;
                Some((name.to_owned(), size))
            })
            .collect())
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
        self.events_since(instance, std::time::SystemTime::now())
    }

    /// [`Docker::events`] from `since` on: a stream that broke is resumed from the
    /// moment it broke, so what the daemon still remembers of the gap (its recent
    /// events, those since its restart included) is delivered, some perhaps twice.
    pub fn events_since(
        &self,
        instance: &str,
        since: std::time::SystemTime,
    ) -> impl Stream<Item = Result<ContainerEvent, DockerError>> + Send + 'static {
        let filters = HashMap::from([
            ("type", vec!["container".to_owned()]),
            ("label", vec![labels::instance_filter(instance)]),
            (
                "event",
                EventAction::WATCHED
                    .iter()
                    .map(|a| a.as_str().to_owned())
                    .collect(),
            ),
        ]);
        let since = since
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
                Ok(m) => convert::event_from_message(m)
                    .filter(|e| labels::is_of_instance(&e.labels, &instance))
                    .map(Ok),
                Err(e) => Some(Err(map_err("events", e))),
            };
            std::future::ready(item)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use policy::ContainerSpec;

    use super::*;

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

    fn sub(s: &str) -> Sub {
        Sub::parse(s).expect("valid sub")
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

    #[test]
    fn watched_event_actions_round_trip() {
        for a in EventAction::WATCHED {
            assert_eq!(EventAction::parse(a.as_str()), a);
        }
        assert_eq!(EventAction::parse("start"), EventAction::Start);
        assert_eq!(EventAction::parse("exec_start: sh"), EventAction::Unknown);
    }

    #[tokio::test]
    async fn privileged_spec_is_refused_before_any_docker_call() {
        let req = ContainerRequest {
            name: "termgate-x".into(),
            body: serde_json::json!({}),
            spec: ContainerSpec {
                privileged: true,
                ..Default::default()
            },
        };
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

    /// A throwaway CA, and a client certificate and key it signed (P-256, valid for a
    /// century), made for this test only: they authenticate nothing anywhere.
    const TEST_CA: &str = "-----BEGIN CERTIFICATE-----\n\
MIIBjjCCATOgAwIBAgIUMMcsGmKkHvyVhcv+S94OHraXGaAwCgYIKoZIzj0EAwIw\n\
GzEZMBcGA1UEAwwQdGVybWdhdGUtdGVzdC1jYTAgFw0yNjExMzAxMDI2MTlaGA8y\n\
MTI2MTEwNjEwMjYxOVowGzEZMBcGA1UEAwwQdGVybWdhdGUtdGVzdC1jYTBZMBMG\n\
ByqGSM49AgEGCCqGSM49AwEHA0IABC5/BCE87gy7yDhLbfSdmfptGnrR8ZLgLIF7\n\
/xUmJeZKtG6mQWqffi2bIxuhHD0s67PLy3rXgoM/WZTA5s7NVNujUzBRMB0GA1Ud\n\
DgQWBBTIJ+7UPu+VuYBt/BJU+7MN/gHUOTAfBgNVHSMEGDAWgBTIJ+7UPu+VuYBt\n\
/BJU+7MN/gHUOTAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQDw\n\
Oa8VOWR9m/lP2nZ7qkeJdQHG9a9R7HBxtWJ7cWnVHAIhAOGuaPGGCzKyGre1MiSk\n\
RsOWjbosNXdf56ZKuLxAME4L\n\
-----END CERTIFICATE-----\n";
    const TEST_CERT: &str = "-----BEGIN CERTIFICATE-----\n\
MIIBKDCBzwIUd8vSM2uATn9Pj2w6eH+ehcZfLnUwCgYIKoZIzj0EAwIwGzEZMBcG\n\
A1UEAwwQdGVybWdhdGUtdGVzdC1jYTAgFw0yNjExMzAxMDI2MTlaGA8yMTI2MTEw\n\
NjEwMjYxOVowETEPMA0GA1UEAwwGY2xpZW50MFkwEwYHKoZIzj0CAQYIKoZIzj0D\n\
AQcDQgAEKK4fwOI5lprXCPvChuOCl7NpljHfEVfKYDrLWxA5qUoKf/r8WnAw3dqm\n\
5uAjtasMcsD4SUcKlu6xKtDYVsl//TAKBggqhkjOPQQDAgNIADBFAiAyVrErAgmU\n\
d+h7yvzN5tI1YcR5YMsjZqj3t7db9tpo1gIhAKhzVNVYRhWXp+MqX9u4tFM91lFK\n\
sqyeudl6a2PfIsXG\n\
-----END CERTIFICATE-----\n";
    const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----\n\
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgnOs2klPyFzHmf1eV\n\
Z+iC6HsXiwGsI7otWQLiuMXkaPihRANCAAQorh/A4jmWmtcI+8KG44KXs2mWMd8R\n\
V8pgOstbEDmpSgp/+vxacDDd2qbm4CO1qwxywPhJRwqW7rEq0NhWyX/9\n\
-----END PRIVATE KEY-----\n";

    #[tokio::test]
    async fn a_tls_endpoint_builds_a_client_from_its_files_and_bad_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let (ca, cert, key) = (
            write("ca.pem", TEST_CA),
            write("cert.pem", TEST_CERT),
            write("key.pem", TEST_KEY),
        );
        let files = Some((ca.as_path(), cert.as_path(), key.as_path()));
        let d = Docker::unnegotiated(Some("tcp://127.0.0.1:9"), files, Duration::from_secs(2))
            .expect("a TLS client from readable PEM files");
        // Nothing listens there: unavailable, never a panic in the TLS stack.
        let err = d.ping().await.unwrap_err();
        assert!(matches!(err, DockerError::Unavailable(_)), "{err:?}");
        // The CA is read at once; the client certificate and key at each handshake
        // (so rotated files are picked up), which is why config checks them at load.
        let missing = dir.path().join("missing.pem");
        let err = Docker::unnegotiated(
            Some("tcp://127.0.0.1:9"),
            Some((missing.as_path(), cert.as_path(), key.as_path())),
            Duration::from_secs(2),
        )
        .unwrap_err();
        assert!(
            matches!(err, DockerError::Other { op: "connect", .. }),
            "{err:?}"
        );
        let err = Docker::unnegotiated(Some("unix:///x.sock"), files, Duration::from_secs(2))
            .unwrap_err();
        assert!(
            matches!(err, DockerError::Other { op: "connect", .. }),
            "{err:?}"
        );
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
                offline.ensure_home_volume(bad, &sub("a"), "b").await,
                Err(DockerError::Other { .. })
            ));
        }
    }
}

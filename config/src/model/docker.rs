//! The `[docker]` section and the Docker hosts control places sessions on.

use std::path::PathBuf;

use serde::Deserialize;

use super::defaults;

/// `[docker]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerConfig {
    /// false: control manages no Docker host at all and fronts targets only; creating
    /// a session is then answered 503.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// The Docker hosts control places sessions on, each with its own ttyd pool. Empty:
    /// one host named `local` at `control.docker_host`, served by the gateway's own pool.
    #[serde(default)]
    pub hosts: Vec<DockerHostConfig>,
    /// The directory of `termgate-dockgate`'s sockets (relative paths from the config
    /// file's directory). Set: control reaches each host's daemon only through
    /// `<dir>/<host>-control.sock`, and the host's pools through `<dir>/<host>-attach.sock`
    /// (docs/operators.md "dockgate"); every host's endpoint must then be a unix socket on
    /// this machine, which its dockgate fronts. `deploy/up` sets it.
    #[serde(default)]
    pub dockgate_dir: Option<PathBuf>,
    /// The directory on the Docker hosts under which profiles' `secrets` files must
    /// be (absolute; outside termgate's own state). termgate never reads them: they are
    /// mounted read-only by reference.
    #[serde(default)]
    pub secrets_dir: Option<PathBuf>,
    /// Existing Docker volumes an admin may register as shared workspaces (borrowed:
    /// termgate mounts them where granted and never removes them).
    #[serde(default)]
    pub shared_volumes: Vec<String>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            enabled: true,
            hosts: Vec::new(),
            dockgate_dir: None,
            secrets_dir: None,
            shared_volumes: Vec::new(),
        }
    }
}

/// One `[[docker.hosts]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerHostConfig {
    /// The host's name: recorded on its sessions and containers (`termgate.host`),
    /// named by profiles' `hosts`. 1-32 characters of a-z, 0-9 and -.
    pub name: String,
    /// Where control reaches the host: `tls://host:port`, that host's dockgate over
    /// mutual TLS (`deploy/host-up`); `unix:///path`, a daemon on this machine (fronted
    /// by its dockgate under `docker.dockgate_dir`); or `tcp://host:port`, the daemon's
    /// own port, only with `dockgate = false`.
    pub endpoint: String,
    /// false: control speaks to this host's daemon directly (a `tcp://` endpoint), with
    /// nothing comparing its calls to the configuration; a warning at start.
    #[serde(default = "defaults::yes")]
    pub dockgate: bool,
    /// CA certificate (PEM) the daemon's certificate is checked against; with
    /// `tls_cert_file` and `tls_key_file`, a `tcp://` endpoint is spoken to over TLS.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) presented to the daemon.
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    /// Client private key (PEM).
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// Speak to a `tcp://` endpoint without TLS. Refused unless set: a daemon's API in
    /// the clear is root on that host to anyone who can reach or watch the port.
    #[serde(default)]
    pub allow_plain_tcp: bool,
    /// The addresses of the ttyd pool that attaches to this host's containers
    /// (`unix:/path`, `tls://host:port` — the pool's front on another host, over mutual
    /// TLS — or a loopback `host:port`), at least one.
    #[serde(default)]
    pub ttyd_pool: Vec<String>,
    /// The addresses of this host's read-only ttyd pool (started without `-W`) that
    /// share-link viewers go to; empty: this host's sessions cannot be shared.
    #[serde(default)]
    pub viewer_pool: Vec<String>,
    /// Most sessions this host holds at once.
    pub capacity: u32,
}

/// Name of the one host of a configuration without `[[docker.hosts]]`.
pub const LOCAL_HOST: &str = "local";

/// A Docker host as control uses it: configured, or the implicit `local` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    /// Its name.
    pub name: String,
    /// The endpoint control dials: its dockgate's control socket when
    /// `docker.dockgate_dir` is set, else [`HostSpec::daemon`].
    pub endpoint: Option<String>,
    /// The daemon's own endpoint; `None`: `DOCKER_HOST` or the default socket.
    pub daemon: Option<String>,
    /// (CA, certificate, key) files, resolved, when the endpoint speaks TLS: the
    /// daemon's own (`tcp://`), or `pki.ca_file` and control's certificate (`tls://`).
    pub tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// Its ttyd pool; empty: the gateway's own (the implicit host only).
    pub ttyd_pool: Vec<String>,
    /// Its read-only pool for share-link viewers; empty: the gateway's own (the
    /// implicit host), or none (a configured host without `viewer_pool`).
    pub viewer_pool: Vec<String>,
    /// Most sessions at once; `u32::MAX` for the implicit host (only quotas bound it).
    pub capacity: u32,
    /// Whether it is the implicit host of a configuration without `[[docker.hosts]]`,
    /// which behaves as the single daemon always did: never marked unreachable.
    pub implicit: bool,
}

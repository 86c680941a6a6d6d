//! `[profiles.<name>]`: what a session container is made from, with its mounts and
//! options.

use std::collections::BTreeMap;

use policy::NamespaceMode;
use serde::Deserialize;

use super::defaults;

/// `[profiles.<name>]`: what a session container is made from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Shown to users.
    #[serde(default)]
    pub description: String,
    /// Image (must exist locally or be pullable by the daemon).
    pub image: String,
    /// Command; empty: the image's own.
    #[serde(default)]
    pub command: Vec<String>,
    /// Non-root user as numeric `uid:gid`, both non-zero (a name could map to root
    /// inside the image).
    #[serde(default = "defaults::user")]
    pub user: String,
    /// Fixed environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `none`, or the name of an isolated network. Never the network gateway, control
    /// and ttyd share.
    #[serde(default = "defaults::network")]
    pub network: String,
    /// Memory limit (no swap), MiB.
    #[serde(default = "defaults::memory_mb")]
    pub memory_mb: u64,
    /// Process limit.
    #[serde(default = "defaults::pids_limit")]
    pub pids_limit: i64,
    /// CPU limit, in CPUs.
    #[serde(default = "defaults::cpus")]
    pub cpus: f64,
    /// Size of the `/tmp` tmpfs, MiB.
    #[serde(default = "defaults::tmp_mb")]
    pub tmp_size_mb: u64,
    /// Mount point of the user's persistent home volume; unset: no home volume.
    #[serde(default)]
    pub home: Option<String>,
    /// What its sessions mount at `home`: `home` (the user's home volume), `choose`
    /// (the workspace the user picks at create time: one of theirs, a new one, or an
    /// ephemeral one removed with the session) or `none`; unset: `home` when `home` is
    /// set.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Extra mounts.
    #[serde(default)]
    pub mounts: Vec<MountConfig>,
    /// Secrets by reference: each name's file on the Docker host (under
    /// `docker.secrets_dir`) is mounted read-only at `/run/secrets/<name>`; its value
    /// is never read by termgate.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    /// Options the user may choose, each from enumerated values, passed as environment.
    #[serde(default)]
    pub options: BTreeMap<String, OptionConfig>,
    /// Refused unless true (red line `readonly_rootfs`); present so the refusal names it.
    #[serde(default = "defaults::yes")]
    pub readonly_rootfs: bool,
    /// Refused if true (red line `not_privileged`).
    #[serde(default)]
    pub privileged: bool,
    /// Refused if not empty (red line `cap_drop_all`).
    #[serde(default)]
    pub cap_add: Vec<String>,
    /// Extra security options; `no-new-privileges:true` is always added, and the
    /// unconfined ones are refused.
    #[serde(default)]
    pub security_opt: Vec<String>,
    /// Refused if not empty (red line `no_devices`).
    #[serde(default)]
    pub devices: Vec<String>,
    /// `""`, `private` or `host`; any other value is refused at load, and `host` by
    /// red line `no_host_namespaces`. Like `ipc_mode`, `userns_mode` and `uts_mode`.
    #[serde(default)]
    pub pid_mode: Option<NamespaceMode>,
    /// See `pid_mode`.
    #[serde(default)]
    pub ipc_mode: Option<NamespaceMode>,
    /// See `pid_mode`.
    #[serde(default)]
    pub userns_mode: Option<NamespaceMode>,
    /// See `pid_mode`.
    #[serde(default)]
    pub uts_mode: Option<NamespaceMode>,
    /// Names of the Docker hosts this profile's sessions may run on; empty: any.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The OCI runtime its sessions run under, as the Docker host names it
    /// (`runsc`: gVisor, a kernel of its own between the shell and the host's);
    /// unset: the daemon's default.
    #[serde(default)]
    pub runtime: Option<String>,
    /// End a session after this long without input on any of its terminals, seconds
    /// (output does not count); unset: never.
    #[serde(default)]
    pub idle_timeout_seconds: Option<u64>,
    /// End a session this long after its creation, however busy, seconds; unset: never.
    #[serde(default)]
    pub max_lifetime_seconds: Option<u64>,
    /// When a session ends, how long its programs get after their hang-up (`SIGHUP`)
    /// before the container is removed by force, seconds.
    #[serde(default = "defaults::stop_grace")]
    pub stop_grace_seconds: u64,
    /// Record every terminal of its sessions as an asciicast v2 file (output and
    /// resizes).
    #[serde(default)]
    pub record: bool,
    /// With `record`: also record what users type (passwords included).
    #[serde(default)]
    pub record_input: bool,
    /// Who may open its sessions' read-only share links: `anyone`, `signed-in` or
    /// `off`.
    #[serde(default = "defaults::shares")]
    pub shares: String,
    /// Who may open links to one of its sessions' recordings: `anyone`, `signed-in`
    /// or `off`.
    #[serde(default = "defaults::recording_links")]
    pub recording_links: String,
    /// Whether its sessions' owners may invite other users to co-drive them (write
    /// access to the owner's terminal, for a bounded time).
    #[serde(default)]
    pub peers: bool,
}

/// One `[[profiles.<name>.mounts]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    /// `bind` (a host path; a missing one is an error) or `volume` (an existing named
    /// volume that termgate borrows and never removes).
    #[serde(default = "defaults::mount_kind")]
    pub kind: String,
    /// Host path as control sees it (checked to exist), or the volume name.
    pub source: String,
    /// Host path as dockerd sees it, when control runs in a container; default `source`.
    #[serde(default)]
    pub host_source: Option<String>,
    /// Path inside the session container.
    pub target: String,
    /// Mounted read-only.
    #[serde(default = "defaults::yes")]
    pub read_only: bool,
}

/// One `[profiles.<name>.options.<option>]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionConfig {
    /// Shown to users.
    #[serde(default)]
    pub description: String,
    /// Environment variable the chosen value is passed in.
    pub env: String,
    /// The values a user may choose.
    pub values: Vec<String>,
    /// Value used when the user chooses none; must be one of `values`.
    pub default: String,
}

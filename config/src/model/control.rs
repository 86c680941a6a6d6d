//! The `[control]`, `[store]` and `[quota]` sections: the control service, its store
//! and the session quotas it enforces.

use std::path::PathBuf;

use serde::Deserialize;

use super::defaults;

/// `[control]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    /// Internal API listener, `host:port`.
    #[serde(default = "defaults::control_listen")]
    pub listen: String,
    /// Admin listener (`/metrics`).
    #[serde(default = "defaults::control_admin_listen")]
    pub admin_listen: String,
    /// Also serve the internal API on this `host:port` over TLS, with `tls_cert_file`
    /// (required with it): for gateways on other machines (`gateway.control_url =
    /// "https://…"`). No client certificate is asked for; callers present their tokens
    /// as on `listen`.
    #[serde(default)]
    pub tls_listen: Option<String>,
    /// Control's certificate (role `control`, `termgate-control certs issue`), presented
    /// to the dockgates of `tls://` hosts, whose certificates are checked against
    /// `pki.ca_file`, and served on `tls_listen`. Picked up again when renewed.
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of `tls_cert_file`.
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// Docker endpoint (`unix:///var/run/docker.sock`); unset: `DOCKER_HOST` or the default socket.
    #[serde(default)]
    pub docker_host: Option<String>,
    /// Bound on every Docker call, seconds.
    #[serde(default = "defaults::docker_timeout")]
    pub docker_timeout_seconds: u64,
    /// Start even when the Docker daemon has no seccomp support (sessions then run
    /// without a syscall filter; `termgate_control_seccomp_enforced` reports 0).
    #[serde(default)]
    pub allow_no_seccomp: bool,
    /// File holding the token gateways present to the route feed.
    #[serde(default)]
    pub service_token_file: Option<PathBuf>,
    /// Largest accepted request body, bytes.
    #[serde(default = "defaults::body_bytes")]
    pub max_body_bytes: usize,
    /// Full reconcile pass interval, seconds.
    #[serde(default = "defaults::reconcile_interval")]
    pub reconcile_interval_seconds: u64,
    /// Age after which a labelled container without a record is removed, seconds.
    #[serde(default = "defaults::orphan_grace")]
    pub orphan_grace_seconds: u64,
    /// Age after which a `creating` record with no container is `failed`, seconds.
    #[serde(default = "defaults::creating_grace")]
    pub creating_grace_seconds: u64,
    /// Retired: ends no longer wait for Docker's stop (a profile's
    /// `stop_grace_seconds` is the time a session's programs get after their hang-up).
    /// Still accepted so that existing files load; it has no effect, and control warns
    /// at start when it is set.
    #[serde(default)]
    pub stop_timeout_seconds: Option<u64>,
    /// Pause between the two resizes of a redraw nudge, milliseconds.
    #[serde(default = "defaults::redraw_pause_ms")]
    pub redraw_pause_ms: u64,
    /// Ended sessions kept in history per user.
    #[serde(default = "defaults::history_per_user")]
    pub history_per_user: usize,
    /// Docker networks that gateway, control or the ttyd pool use; a profile naming one
    /// is refused at load (sessions would reach termgate's own services).
    #[serde(default)]
    pub service_networks: Vec<String>,
    /// Where recordings handed over by gateways are kept, one directory per session.
    #[serde(default = "defaults::control_recordings_dir")]
    pub recordings_dir: PathBuf,
    /// Largest recording a gateway may hand over, bytes.
    #[serde(default = "defaults::max_recording_bytes")]
    pub max_recording_bytes: u64,
    /// Recordings older than this many days are removed (0: kept until a cap says).
    #[serde(default)]
    pub recordings_keep_days: u64,
    /// All recordings together stay within this many bytes; the oldest go first (0: no cap).
    #[serde(default)]
    pub recordings_max_total_bytes: u64,
    /// One user's recordings stay within this many bytes; their oldest go first (0: no cap).
    #[serde(default)]
    pub recordings_max_user_bytes: u64,
    /// How often control applies the three rules above, milliseconds.
    #[serde(default = "defaults::recordings_prune_ms")]
    pub recordings_prune_ms: u64,
    /// Where the terminal check (`GET /v1/authz`) sends a browser's page navigation that
    /// carries no credential: a 302 to it with `?next=<the terminal's path>`; a path on
    /// the proxy's own origin (termgate's page behind it) or an absolute `https://` URL.
    #[serde(default = "defaults::authz_sign_in_url")]
    pub authz_sign_in_url: String,
}

/// `[store]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// sled directory.
    #[serde(default = "defaults::store_path")]
    pub path: PathBuf,
    /// Route changes kept for the feed; older pollers get a full snapshot.
    #[serde(default = "defaults::change_log")]
    pub change_log_len: usize,
}

/// `[quota]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Sessions one user may hold at once.
    #[serde(default = "defaults::per_user")]
    pub per_user: u32,
    /// Sessions the deployment may hold at once.
    #[serde(default = "defaults::global")]
    pub global: u32,
}

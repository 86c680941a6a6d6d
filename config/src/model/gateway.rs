//! The `[gateway]` and `[ttyd]` sections: the public gateway and its ttyd pool.

use std::path::PathBuf;

use serde::Deserialize;

use super::defaults;

/// `[gateway]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Public listener, `host:port`.
    #[serde(default = "defaults::gateway_listen")]
    pub listen: String,
    /// TLS certificate chain (PEM); with `tls_key_file`, the listener speaks TLS.
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    /// TLS private key (PEM).
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// Admin listener (`/metrics`, `/healthz`, `/readyz`).
    #[serde(default = "defaults::gateway_admin_listen")]
    pub admin_listen: String,
    /// Origins allowed to open terminals. Empty: the listener's own origin (and its
    /// `localhost` spelling when it listens on loopback).
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Base URL of control's internal API: `http://host:port` (on loopback unless
    /// `allow_plain_control`), or `https://host:port` (control's `tls_listen`, its
    /// certificate checked against `pki.ca_file` and for the URL's host).
    #[serde(default = "defaults::control_url")]
    pub control_url: String,
    /// Accept an `http://` `control_url` off loopback, which carries the service token
    /// in the clear: only for a private network of one machine you trust (compose's
    /// internal network). The gateway warns at start when it is used.
    #[serde(default)]
    pub allow_plain_control: bool,
    /// Bound on every call to control, milliseconds.
    #[serde(default = "defaults::control_timeout_ms")]
    pub control_timeout_ms: u64,
    /// ttyd upstreams as `host:port`; empty means the unix socket `ttyd.socket`.
    #[serde(default)]
    pub ttyd_upstreams: Vec<String>,
    /// The read-only ttyd pool (started without `-W`) that share-link viewers go to, as
    /// `host:port`; empty means the unix socket `ttyd.viewer_socket`.
    #[serde(default)]
    pub viewer_upstreams: Vec<String>,
    /// Open terminals one user may hold.
    #[serde(default = "defaults::terminals_per_user")]
    pub max_terminals_per_user: u32,
    /// Open terminals one session may have.
    #[serde(default = "defaults::terminals_per_session")]
    pub max_terminals_per_session: u32,
    /// Close a live terminal when its token expires.
    #[serde(default = "defaults::yes")]
    pub close_on_token_expiry: bool,
    /// Grace on SIGTERM before open terminals are closed, seconds.
    #[serde(default = "defaults::drain_seconds")]
    pub drain_seconds: u64,
    /// Largest accepted request header block, bytes.
    #[serde(default = "defaults::header_bytes")]
    pub max_request_header_bytes: usize,
    /// Largest accepted request body on `/api` and `/auth`, bytes.
    #[serde(default = "defaults::body_bytes")]
    pub max_body_bytes: usize,
    /// Time a request head may take to arrive, from its first byte to its end,
    /// milliseconds; a slower head closes the connection (slow-header clients).
    #[serde(default = "defaults::header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// Largest websocket frame a browser may send up a terminal, bytes (payload); a
    /// larger one closes that terminal before ttyd buffers it.
    #[serde(default = "defaults::ws_frame_bytes")]
    pub max_ws_frame_bytes: u64,
    /// Failed authentications allowed per client address per minute.
    #[serde(default = "defaults::auth_failures")]
    pub auth_failures_per_minute: u32,
    /// Proxies (addresses or networks) in front of the gateway whose
    /// `X-Forwarded-For` names the client address for per-address limits.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// How long an unknown session id is remembered as unknown, milliseconds.
    #[serde(default = "defaults::negative_cache_ms")]
    pub negative_cache_ms: u64,
    /// Route lookups at control (cache misses) allowed per user per minute.
    #[serde(default = "defaults::lookup_misses")]
    pub lookup_misses_per_minute: u32,
    /// How often the gateway reports to control when each session was last typed
    /// into, milliseconds (one batched call; profiles' `idle_timeout_seconds`).
    #[serde(default = "defaults::activity_report_ms")]
    pub activity_report_ms: u64,
    /// Soonest the gateway reports its open terminals to control again after they
    /// changed, milliseconds (never later than `activity_report_ms`); control's answer
    /// carries the other gateways' counts, which terminal limits add to this one's.
    #[serde(default = "defaults::terminal_report_ms")]
    pub terminal_report_ms: u64,
    /// Unix socket over which a new gateway process takes the listeners of the old one
    /// (zero-downtime upgrade: start the new one with `--upgrade`, then SIGQUIT the old).
    #[serde(default = "defaults::upgrade_socket")]
    pub upgrade_socket: PathBuf,
    /// Pid file of the gateway process.
    #[serde(default = "defaults::pid_file")]
    pub pid_file: PathBuf,
    /// Spool directory where recorded terminals are written while they run and kept
    /// until control has taken them (profiles' `record`).
    #[serde(default = "defaults::gateway_recordings_dir")]
    pub recordings_dir: PathBuf,
    /// Events a recorded terminal may have waiting for its writer; a terminal whose
    /// writer falls this far behind is closed rather than recorded incompletely.
    #[serde(default = "defaults::recording_queue")]
    pub recording_queue: usize,
    /// The most the recordings spool may hold in all, bytes: a recorded terminal that
    /// would pass it is closed (`recording_too_large`) rather than fill the disk.
    #[serde(default = "defaults::recordings_spool_max_bytes")]
    pub recordings_spool_max_bytes: u64,
    /// The gateway's certificate (role `gateway`, `termgate-control certs issue`),
    /// presented to the `tls://` ttyd pools of other hosts; their certificates are
    /// checked against `pki.ca_file`. Picked up again when renewed.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    /// The key of `client_cert_file`.
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
    /// Directory holding the recordings player (`asciinema-player.js` and
    /// `asciinema-player.css`), served to the page at `/assets/player.js` and
    /// `/assets/player.css`; unset: recordings download, and do not play in the page.
    #[serde(default)]
    pub player_dir: Option<PathBuf>,
    /// Directory holding the credential files (`basic_file`) of targets registered
    /// through the API; unset: such targets may not use `basic_file`. Targets of the
    /// configuration may name a file anywhere.
    #[serde(default)]
    pub target_credentials_dir: Option<PathBuf>,
}

/// `[ttyd]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtydConfig {
    /// The ttyd executable.
    #[serde(default = "defaults::ttyd_binary")]
    pub binary: PathBuf,
    /// Unix socket ttyd listens on (single host). Its directory must be reachable only
    /// by the gateway's user.
    #[serde(default = "defaults::ttyd_socket")]
    pub socket: PathBuf,
    /// Unix socket of the read-only ttyd pool (started without `-W`) that share-link
    /// viewers go to; the same rules as `socket`.
    #[serde(default = "defaults::ttyd_viewer_socket")]
    pub viewer_socket: PathBuf,
    /// The docker CLI ttyd runs (`docker attach`).
    #[serde(default = "defaults::docker_cli")]
    pub docker_cli: PathBuf,
}

//! The typed configuration. Field docs are the configuration reference; README.md's
//! table is checked against [`KEYS`] by a test so the two cannot drift.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use policy::NamespaceMode;
use serde::Deserialize;

use crate::secret::Secrets;

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// This deployment's id, written into every container label `termgate.instance`.
    /// Two deployments on one Docker daemon must use different ids.
    #[serde(default = "defaults::instance")]
    pub instance: String,
    /// Token verification and the session cookie.
    pub auth: AuthConfig,
    /// The public gateway.
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// The control service.
    #[serde(default)]
    pub control: ControlConfig,
    /// The ttyd pool.
    #[serde(default)]
    pub ttyd: TtydConfig,
    /// The Docker hosts sessions run on (design §7).
    #[serde(default)]
    pub docker: DockerConfig,
    /// The sled store.
    #[serde(default)]
    pub store: StoreConfig,
    /// Session quotas.
    #[serde(default)]
    pub quota: QuotaConfig,
    /// Session profiles by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
    /// Existing ttyds that termgate fronts but does not run (`[[targets]]`).
    #[serde(default)]
    pub targets: Vec<TargetConfig>,
    /// Directory relative paths are resolved against (the config file's directory).
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// Secrets loaded from the files named above (filled in by `load`).
    #[serde(skip)]
    pub secrets: Option<Secrets>,
}

/// `[auth]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Required `iss` claim.
    #[serde(default)]
    pub issuer: Option<String>,
    /// Required member of the `aud` claim. Required unless `allow_any_audience`.
    #[serde(default)]
    pub audience: Option<String>,
    /// Accept tokens whatever their `aud` (only when `audience` is unset): a token
    /// minted for another service would then open terminals here.
    #[serde(default)]
    pub allow_any_audience: bool,
    /// Longest accepted token lifetime (`exp - iat`, or `exp - now` without `iat`),
    /// seconds.
    #[serde(default = "defaults::max_token_lifetime")]
    pub max_token_lifetime_seconds: u64,
    /// Clock skew tolerated on `exp` and `nbf`, seconds.
    #[serde(default = "defaults::leeway")]
    pub leeway_seconds: u64,
    /// Role in the `roles` claim that grants admin.
    #[serde(default = "defaults::admin_role")]
    pub admin_role: String,
    /// File holding the HS256 secret (at least 32 bytes). One of this, `public_keys`
    /// or `jwks_file`.
    #[serde(default)]
    pub hs256_secret_file: Option<PathBuf>,
    /// PEM public keys (RS256, ES256, EdDSA).
    #[serde(default)]
    pub public_keys: Vec<PublicKeyConfig>,
    /// A JWKS document; keys are chosen by `kid`.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// PEM private key for `termgate-control token` when verification uses public keys.
    #[serde(default)]
    pub signing_key_file: Option<PathBuf>,
    /// `kid` written into tokens signed with `signing_key_file`.
    #[serde(default)]
    pub signing_key_id: Option<String>,
    /// Name of the session cookie.
    #[serde(default = "defaults::cookie_name")]
    pub cookie_name: String,
    /// Lifetime of tokens printed by `termgate-control token`, seconds.
    #[serde(default = "defaults::token_ttl")]
    pub token_ttl_seconds: u64,
    /// Sign-in through an OpenID Connect provider; unset: tokens only.
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
}

/// `[auth.oidc]`: the gateway signs people in through an OpenID Connect provider
/// (authorization code flow with PKCE) and issues its own session token.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer; discovery reads `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    /// This application's client id at the provider.
    pub client_id: String,
    /// File holding the client secret; unset: a public client (PKCE only).
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// How the secret is sent to the token endpoint: `client_secret_basic` or
    /// `client_secret_post`.
    #[serde(default = "defaults::oidc_auth_method")]
    pub token_endpoint_auth_method: String,
    /// The callback URL registered at the provider: `<public origin>/auth/callback`.
    pub redirect_url: String,
    /// Scopes requested; must include `openid`.
    #[serde(default = "defaults::oidc_scopes")]
    pub scopes: Vec<String>,
    /// The ID token claim that becomes termgate's user name (`sub`).
    #[serde(default = "defaults::oidc_sub_claim")]
    pub sub_claim: String,
    /// A claim (string or array) whose value among `admin_values` grants admin.
    #[serde(default)]
    pub admin_claim: Option<String>,
    /// Values of `admin_claim` that grant admin.
    #[serde(default)]
    pub admin_values: Vec<String>,
    /// E-mail domains allowed to sign in; empty: any.
    #[serde(default)]
    pub allowed_email_domains: Vec<String>,
    /// Groups allowed to sign in (any one, in `groups_claim`); empty: any.
    #[serde(default)]
    pub allowed_groups: Vec<String>,
    /// The claim listing the user's groups.
    #[serde(default = "defaults::oidc_groups_claim")]
    pub groups_claim: String,
    /// Longest session one sign-in gives (never past the ID token's `exp`), seconds.
    #[serde(default = "defaults::oidc_session_max")]
    pub session_max_seconds: u64,
    /// Name on the sign-in button; empty: the issuer's host.
    #[serde(default)]
    pub display_name: String,
    /// Bound on every call to the provider (discovery, token, keys), milliseconds.
    #[serde(default = "defaults::oidc_timeout_ms")]
    pub timeout_ms: u64,
    /// PEM certificates trusted for the provider's https besides the system's roots
    /// (a provider behind a private CA).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// One `[[auth.public_keys]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicKeyConfig {
    /// PEM file.
    pub file: PathBuf,
    /// Key id tokens name in their header.
    #[serde(default)]
    pub kid: Option<String>,
}

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
    /// Base URL of control's internal API.
    #[serde(default = "defaults::control_url")]
    pub control_url: String,
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
}

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
    /// Where the terminal check (`GET /v1/authz`) sends a browser's page navigation that
    /// carries no credential: a 302 to it with `?next=<the terminal's path>`; a path on
    /// the proxy's own origin (termgate's page behind it) or an absolute `https://` URL.
    #[serde(default = "defaults::authz_sign_in_url")]
    pub authz_sign_in_url: String,
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
    /// (README "dockgate"); every host's endpoint must then be a unix socket on this
    /// machine, which its dockgate fronts. `deploy/up` sets it.
    #[serde(default)]
    pub dockgate_dir: Option<PathBuf>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            enabled: true,
            hosts: Vec::new(),
            dockgate_dir: None,
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
    /// The daemon's endpoint: `unix:///path` or `tcp://host:port`.
    pub endpoint: String,
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
    /// (`unix:/path` or `host:port`), at least one.
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
    /// (CA, certificate, key) files, resolved, when the endpoint speaks TLS.
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
    /// Extra mounts.
    #[serde(default)]
    pub mounts: Vec<MountConfig>,
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
}

/// One `[[targets]]` entry: a ttyd that already runs, opened by the users and roles
/// listed (design §7). Control's `POST /v1/targets` takes the same fields as JSON.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// Unique name, `[a-z0-9-]`; the target's id is derived from it.
    pub name: String,
    /// `http://host:port[/base-path]` or `unix:/path` of the ttyd.
    pub upstream: String,
    /// `sub`s allowed to open it.
    #[serde(default)]
    pub users: Vec<String>,
    /// Token roles allowed to open it.
    #[serde(default)]
    pub roles: Vec<String>,
    /// What the ttyd expects: `{ basic_file = "…" }` (ttyd `-c`, a file holding
    /// `user:pass`) or `{ header = "X-Remote-User" }` (ttyd `-H`, set to the `sub`).
    #[serde(default)]
    pub credential: Option<TargetCredentialConfig>,
}

/// A target's credential: exactly one of the two keys.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetCredentialConfig {
    /// File holding `user:pass` (relative paths against the config file).
    #[serde(default)]
    pub basic_file: Option<PathBuf>,
    /// Header the gateway sets to the user's `sub`.
    #[serde(default)]
    pub header: Option<String>,
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

impl Config {
    /// Resolves a configured path against the config file's directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    /// The credential a configured target's ttyd expects, with a relative file
    /// resolved against the config file's directory. Both keys, or an empty table, are
    /// an error.
    pub fn target_credential(
        &self,
        t: &TargetConfig,
    ) -> Result<Option<policy::feed::TargetCredential>, &'static str> {
        use policy::feed::TargetCredential;
        match &t.credential {
            None => Ok(None),
            Some(TargetCredentialConfig {
                basic_file: Some(file),
                header: None,
            }) => Ok(Some(TargetCredential::BasicFile {
                path: self.resolve(file).to_string_lossy().into_owned(),
            })),
            Some(TargetCredentialConfig {
                basic_file: None,
                header: Some(name),
            }) => Ok(Some(TargetCredential::Header { name: name.clone() })),
            Some(_) => Err("set exactly one of basic_file or header"),
        }
    }

    /// `unix://<docker.dockgate_dir>/<host>-<role>.sock`, when dockgate is in use.
    pub fn dockgate_socket(&self, host: &str, role: &str) -> Option<String> {
        let dir = self.resolve(self.docker.dockgate_dir.as_ref()?);
        Some(format!("unix://{}/{host}-{role}.sock", dir.display()))
    }

    /// The Docker hosts control manages, in configuration order: `[[docker.hosts]]`,
    /// or the one implicit host `local` at `control.docker_host`; none when
    /// `docker.enabled` is false.
    pub fn docker_hosts(&self) -> Vec<HostSpec> {
        if !self.docker.enabled {
            return Vec::new();
        }
        if self.docker.hosts.is_empty() {
            return vec![HostSpec {
                name: LOCAL_HOST.to_owned(),
                endpoint: self
                    .dockgate_socket(LOCAL_HOST, "control")
                    .or_else(|| self.control.docker_host.clone()),
                daemon: self.control.docker_host.clone(),
                tls: None,
                ttyd_pool: Vec::new(),
                viewer_pool: Vec::new(),
                capacity: u32::MAX,
                implicit: true,
            }];
        }
        self.docker
            .hosts
            .iter()
            .map(|h| HostSpec {
                name: h.name.clone(),
                endpoint: self
                    .dockgate_socket(&h.name, "control")
                    .or_else(|| Some(h.endpoint.clone())),
                daemon: Some(h.endpoint.clone()),
                tls: match (&h.tls_ca_file, &h.tls_cert_file, &h.tls_key_file) {
                    (Some(ca), Some(cert), Some(key)) if self.docker.dockgate_dir.is_none() => {
                        Some((self.resolve(ca), self.resolve(cert), self.resolve(key)))
                    }
                    _ => None,
                },
                ttyd_pool: h.ttyd_pool.clone(),
                viewer_pool: h.viewer_pool.clone(),
                capacity: h.capacity,
                implicit: false,
            })
            .collect()
    }

    /// The loaded secrets. Present on every `Config` returned by `load`.
    pub fn secrets(&self) -> &Secrets {
        self.secrets
            .as_ref()
            .expect("Config values are only handed out by load, which fills in secrets")
    }
}

/// Every key of the configuration, with its default as written in TOML (empty when
/// it has none). README.md's reference table is checked against this list.
pub const KEYS: &[(&str, &str)] = &[
    ("instance", "\"termgate\""),
    ("auth.issuer", ""),
    ("auth.audience", ""),
    ("auth.allow_any_audience", "false"),
    ("auth.max_token_lifetime_seconds", "86400"),
    ("auth.leeway_seconds", "30"),
    ("auth.admin_role", "\"admin\""),
    ("auth.hs256_secret_file", ""),
    ("auth.public_keys", "[]"),
    ("auth.jwks_file", ""),
    ("auth.signing_key_file", ""),
    ("auth.signing_key_id", ""),
    ("auth.cookie_name", "\"termgate_session\""),
    ("auth.token_ttl_seconds", "3600"),
    ("auth.oidc", ""),
    ("auth.oidc.issuer", ""),
    ("auth.oidc.client_id", ""),
    ("auth.oidc.client_secret_file", ""),
    (
        "auth.oidc.token_endpoint_auth_method",
        "\"client_secret_basic\"",
    ),
    ("auth.oidc.redirect_url", ""),
    ("auth.oidc.scopes", "[\"openid\", \"email\", \"profile\"]"),
    ("auth.oidc.sub_claim", "\"sub\""),
    ("auth.oidc.admin_claim", ""),
    ("auth.oidc.admin_values", "[]"),
    ("auth.oidc.allowed_email_domains", "[]"),
    ("auth.oidc.allowed_groups", "[]"),
    ("auth.oidc.groups_claim", "\"groups\""),
    ("auth.oidc.session_max_seconds", "28800"),
    ("auth.oidc.display_name", "\"\""),
    ("auth.oidc.timeout_ms", "5000"),
    ("auth.oidc.ca_file", ""),
    ("gateway.listen", "\"127.0.0.1:8080\""),
    ("gateway.tls_cert_file", ""),
    ("gateway.tls_key_file", ""),
    ("gateway.admin_listen", "\"127.0.0.1:9080\""),
    ("gateway.allowed_origins", "[]"),
    ("gateway.control_url", "\"http://127.0.0.1:7070\""),
    ("gateway.control_timeout_ms", "2000"),
    ("gateway.ttyd_upstreams", "[]"),
    ("gateway.viewer_upstreams", "[]"),
    ("gateway.max_terminals_per_user", "8"),
    ("gateway.max_terminals_per_session", "4"),
    ("gateway.close_on_token_expiry", "true"),
    ("gateway.drain_seconds", "10"),
    ("gateway.max_request_header_bytes", "16384"),
    ("gateway.max_body_bytes", "65536"),
    ("gateway.header_timeout_ms", "10000"),
    ("gateway.max_ws_frame_bytes", "1048576"),
    ("gateway.auth_failures_per_minute", "30"),
    ("gateway.trusted_proxies", "[]"),
    ("gateway.negative_cache_ms", "2000"),
    ("gateway.lookup_misses_per_minute", "120"),
    ("gateway.activity_report_ms", "5000"),
    ("gateway.terminal_report_ms", "250"),
    ("gateway.upgrade_socket", "\"gateway-upgrade.sock\""),
    ("gateway.pid_file", "\"gateway.pid\""),
    ("gateway.recordings_dir", "\"recordings-spool\""),
    ("gateway.recording_queue", "256"),
    ("control.listen", "\"127.0.0.1:7070\""),
    ("control.admin_listen", "\"127.0.0.1:9070\""),
    ("control.docker_host", ""),
    ("control.docker_timeout_seconds", "10"),
    ("control.allow_no_seccomp", "false"),
    ("control.service_token_file", ""),
    ("control.max_body_bytes", "65536"),
    ("control.reconcile_interval_seconds", "30"),
    ("control.orphan_grace_seconds", "60"),
    ("control.creating_grace_seconds", "120"),
    ("control.stop_timeout_seconds", ""),
    ("control.redraw_pause_ms", "150"),
    ("control.history_per_user", "200"),
    ("control.service_networks", "[]"),
    ("control.recordings_dir", "\"recordings\""),
    ("control.max_recording_bytes", "67108864"),
    ("control.authz_sign_in_url", "\"/\""),
    ("docker.enabled", "true"),
    ("docker.hosts", "[]"),
    ("docker.hosts.name", ""),
    ("docker.hosts.endpoint", ""),
    ("docker.hosts.tls_ca_file", ""),
    ("docker.hosts.tls_cert_file", ""),
    ("docker.hosts.tls_key_file", ""),
    ("docker.hosts.allow_plain_tcp", ""),
    ("docker.hosts.ttyd_pool", ""),
    ("docker.hosts.viewer_pool", ""),
    ("docker.hosts.capacity", ""),
    ("docker.dockgate_dir", ""),
    ("ttyd.binary", "\"ttyd\""),
    ("ttyd.socket", "\"ttyd/ttyd.sock\""),
    ("ttyd.viewer_socket", "\"ttyd/ttyd-view.sock\""),
    ("ttyd.docker_cli", "\"docker\""),
    ("store.path", "\"store\""),
    ("store.change_log_len", "1024"),
    ("quota.per_user", "3"),
    ("quota.global", "50"),
    ("profiles.<name>.description", "\"\""),
    ("profiles.<name>.image", ""),
    ("profiles.<name>.command", "[]"),
    ("profiles.<name>.user", "\"1000:1000\""),
    ("profiles.<name>.env", "{}"),
    ("profiles.<name>.network", "\"none\""),
    ("profiles.<name>.memory_mb", "512"),
    ("profiles.<name>.pids_limit", "256"),
    ("profiles.<name>.cpus", "1.0"),
    ("profiles.<name>.tmp_size_mb", "64"),
    ("profiles.<name>.home", ""),
    ("profiles.<name>.mounts", "[]"),
    ("profiles.<name>.options", "{}"),
    ("profiles.<name>.readonly_rootfs", "true"),
    ("profiles.<name>.privileged", "false"),
    ("profiles.<name>.cap_add", "[]"),
    ("profiles.<name>.security_opt", "[]"),
    ("profiles.<name>.devices", "[]"),
    ("profiles.<name>.pid_mode", ""),
    ("profiles.<name>.ipc_mode", ""),
    ("profiles.<name>.userns_mode", ""),
    ("profiles.<name>.uts_mode", ""),
    ("targets", "[]"),
    ("profiles.<name>.hosts", "[]"),
    ("profiles.<name>.idle_timeout_seconds", ""),
    ("profiles.<name>.max_lifetime_seconds", ""),
    ("profiles.<name>.stop_grace_seconds", "2"),
    ("profiles.<name>.record", "false"),
    ("profiles.<name>.record_input", "false"),
    ("profiles.<name>.shares", "\"signed-in\""),
];

/// `profiles.<name>.stop_grace_seconds` when a profile leaves it out; also the grace of
/// a session whose profile this configuration no longer has.
pub const DEFAULT_STOP_GRACE_SECONDS: u64 = 2;

mod defaults {
    use std::path::PathBuf;

    pub fn instance() -> String {
        "termgate".into()
    }
    pub fn leeway() -> u64 {
        30
    }
    pub fn admin_role() -> String {
        "admin".into()
    }
    pub fn cookie_name() -> String {
        "termgate_session".into()
    }
    pub fn token_ttl() -> u64 {
        3600
    }
    pub fn oidc_auth_method() -> String {
        "client_secret_basic".into()
    }
    pub fn oidc_scopes() -> Vec<String> {
        ["openid", "email", "profile"].map(String::from).to_vec()
    }
    pub fn oidc_sub_claim() -> String {
        "sub".into()
    }
    pub fn oidc_groups_claim() -> String {
        "groups".into()
    }
    pub fn oidc_session_max() -> u64 {
        28800
    }
    pub fn oidc_timeout_ms() -> u64 {
        5000
    }
    pub fn gateway_listen() -> String {
        "127.0.0.1:8080".into()
    }
    pub fn gateway_admin_listen() -> String {
        "127.0.0.1:9080".into()
    }
    pub fn control_url() -> String {
        "http://127.0.0.1:7070".into()
    }
    pub fn control_timeout_ms() -> u64 {
        2000
    }
    pub fn terminals_per_user() -> u32 {
        8
    }
    pub fn terminals_per_session() -> u32 {
        4
    }
    pub fn yes() -> bool {
        true
    }
    pub fn drain_seconds() -> u64 {
        10
    }
    pub fn header_bytes() -> usize {
        16 * 1024
    }
    pub fn body_bytes() -> usize {
        64 * 1024
    }
    pub fn header_timeout_ms() -> u64 {
        10_000
    }
    pub fn ws_frame_bytes() -> u64 {
        1 << 20
    }
    pub fn auth_failures() -> u32 {
        30
    }
    pub fn negative_cache_ms() -> u64 {
        2000
    }
    pub fn lookup_misses() -> u32 {
        120
    }
    pub fn activity_report_ms() -> u64 {
        5000
    }
    pub fn terminal_report_ms() -> u64 {
        250
    }
    pub fn upgrade_socket() -> PathBuf {
        "gateway-upgrade.sock".into()
    }
    pub fn pid_file() -> PathBuf {
        "gateway.pid".into()
    }
    pub fn gateway_recordings_dir() -> PathBuf {
        "recordings-spool".into()
    }
    pub fn recording_queue() -> usize {
        256
    }
    pub fn control_recordings_dir() -> PathBuf {
        "recordings".into()
    }
    pub fn max_recording_bytes() -> u64 {
        64 << 20
    }
    pub fn authz_sign_in_url() -> String {
        "/".into()
    }
    pub fn control_listen() -> String {
        "127.0.0.1:7070".into()
    }
    pub fn control_admin_listen() -> String {
        "127.0.0.1:9070".into()
    }
    pub fn docker_timeout() -> u64 {
        10
    }
    pub fn reconcile_interval() -> u64 {
        30
    }
    pub fn orphan_grace() -> u64 {
        60
    }
    pub fn max_token_lifetime() -> u64 {
        86_400
    }
    pub fn creating_grace() -> u64 {
        120
    }
    pub fn stop_grace() -> u64 {
        super::DEFAULT_STOP_GRACE_SECONDS
    }
    pub fn redraw_pause_ms() -> u64 {
        150
    }
    pub fn history_per_user() -> usize {
        200
    }
    pub fn ttyd_binary() -> PathBuf {
        "ttyd".into()
    }
    pub fn ttyd_viewer_socket() -> PathBuf {
        "ttyd/ttyd-view.sock".into()
    }
    pub fn shares() -> String {
        "signed-in".into()
    }
    pub fn ttyd_socket() -> PathBuf {
        "ttyd/ttyd.sock".into()
    }
    pub fn docker_cli() -> PathBuf {
        "docker".into()
    }
    pub fn store_path() -> PathBuf {
        "store".into()
    }
    pub fn change_log() -> usize {
        1024
    }
    pub fn per_user() -> u32 {
        3
    }
    pub fn global() -> u32 {
        50
    }
    pub fn user() -> String {
        "1000:1000".into()
    }
    pub fn network() -> String {
        "none".into()
    }
    pub fn memory_mb() -> u64 {
        512
    }
    pub fn pids_limit() -> i64 {
        256
    }
    pub fn cpus() -> f64 {
        1.0
    }
    pub fn tmp_mb() -> u64 {
        64
    }
    pub fn mount_kind() -> String {
        "bind".into()
    }
}

macro_rules! impl_default_from_empty_table {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                // Every field has a serde default, so an empty table is the default.
                toml::from_str("").expect("all fields have defaults")
            }
        }
    )*};
}
impl_default_from_empty_table!(
    GatewayConfig,
    ControlConfig,
    TtydConfig,
    StoreConfig,
    QuotaConfig
);

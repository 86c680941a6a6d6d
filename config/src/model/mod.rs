//! The typed configuration. Field docs are the configuration reference; docs/reference.md's
//! table is checked against [`KEYS`] by a test so the two cannot drift.

mod auth;
mod control;
mod defaults;
mod docker;
mod gateway;
mod keys;
mod profile;
mod target;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::secret::Secrets;

pub use auth::{AuthConfig, OidcConfig, PublicKeyConfig};
pub use control::{ControlConfig, QuotaConfig, StoreConfig};
pub use defaults::DEFAULT_STOP_GRACE_SECONDS;
pub use docker::{DockerConfig, DockerHostConfig, HostSpec, LOCAL_HOST};
pub use gateway::{GatewayConfig, TtydConfig};
pub use keys::KEYS;
pub use profile::{MountConfig, OptionConfig, Profile};
pub use target::{TargetConfig, TargetCredentialConfig};

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
    /// The CA of the certificates termgate's parts present to each other.
    #[serde(default)]
    pub pki: PkiConfig,
    /// Directory relative paths are resolved against (the config file's directory).
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// Secrets loaded from the files named above (filled in by `load`).
    #[serde(skip)]
    pub secrets: Option<Secrets>,
    /// Which part loaded it: only the files that part reads are read and checked.
    #[serde(skip)]
    pub part: Part,
}

/// `[pki]`: the CA that issues every part's certificate (`termgate-control certs init`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PkiConfig {
    /// The CA certificate (PEM) that peers' certificates are checked against: the
    /// dockgates and pools of `tls://` hosts, and the gateways that open terminals there.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// Which of termgate's parts loads a configuration. Each reads and checks only the
/// files it uses itself: control never the gateway's TLS key, dockgate no secret at
/// all (it compares creates with the profiles and reads nothing else).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Part {
    /// Every file (tests, `termgate-control config check`).
    #[default]
    All,
    /// The gateway.
    Gateway,
    /// Control (and its `token` and `hosts` commands).
    Control,
    /// dockgate.
    Dockgate,
}

impl Part {
    /// Whether this part reads the file configured at `key`.
    pub fn reads(self, key: &str) -> bool {
        match self {
            Part::All => true,
            Part::Dockgate => false,
            Part::Gateway => !key.starts_with("docker.") && !key.starts_with("control.tls_"),
            Part::Control => !key.starts_with("gateway."),
        }
    }
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

    /// `gateway.target_credentials_dir`, resolved against the config file's directory.
    pub fn target_credentials_dir(&self) -> Option<PathBuf> {
        self.gateway
            .target_credentials_dir
            .as_ref()
            .map(|d| self.resolve(d))
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
                endpoint: match (h.endpoint.starts_with("unix://"), h.dockgate) {
                    (true, true) => self.dockgate_socket(&h.name, "control"),
                    _ => None,
                }
                .or_else(|| Some(h.endpoint.clone())),
                daemon: Some(h.endpoint.clone()),
                tls: if h.endpoint.starts_with("tls://") {
                    match (
                        &self.pki.ca_file,
                        &self.control.tls_cert_file,
                        &self.control.tls_key_file,
                    ) {
                        (Some(ca), Some(cert), Some(key)) => {
                            Some((self.resolve(ca), self.resolve(cert), self.resolve(key)))
                        }
                        _ => None,
                    }
                } else {
                    match (&h.tls_ca_file, &h.tls_cert_file, &h.tls_key_file) {
                        (Some(ca), Some(cert), Some(key))
                            if !h.dockgate || self.docker.dockgate_dir.is_none() =>
                        {
                            Some((self.resolve(ca), self.resolve(cert), self.resolve(key)))
                        }
                        _ => None,
                    }
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

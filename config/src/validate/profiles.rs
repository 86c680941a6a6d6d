//! The rules for `[profiles]`: each profile's container, options and limits, its Docker
//! hosts and network, and the sandbox's red lines; also the container a profile describes.

use std::path::Path;

use policy::declared::{DeclaredOption, DeclaredProfile, WorkspaceMode};
use policy::sandbox::{self, ContainerSpec, MountKind, MountSpec, Namespace, NamespaceMode};

use super::common::is_name;
use crate::error::ConfigError;
use crate::model::{Config, Profile};

/// Checks `[profiles]`.
pub(super) fn check(c: &Config, err: &mut impl FnMut(&str, String)) {
    if c.profiles.is_empty() && c.docker.enabled {
        err("profiles", "at least one profile is required".into());
    }
    let host_names: Vec<String> = c.docker_hosts().into_iter().map(|h| h.name).collect();
    for (name, p) in &c.profiles {
        validate_profile(name, p, err);
        for (i, h) in p.hosts.iter().enumerate() {
            if !host_names.contains(h) {
                err(
                    &format!("profiles.{name}.hosts[{i}]"),
                    format!(
                        "{h:?} is not a Docker host of this configuration (known: {host_names:?})"
                    ),
                );
            }
        }
        for (secret, file) in &p.secrets {
            let key = format!("profiles.{name}.secrets.{secret}");
            let named = (1..=64).contains(&secret.len())
                && secret
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                && !secret.starts_with('.');
            if !named {
                err(
                    &key,
                    "secret names are 1-64 characters of A-Z a-z 0-9 . _ - (not starting with .)"
                        .into(),
                );
            }
            match &c.docker.secrets_dir {
                None => err(
                    &key,
                    "needs docker.secrets_dir, the directory its file must be under".into(),
                ),
                Some(dir) => {
                    let under = sandbox::normalise(file)
                        .zip(sandbox::normalise(&dir.display().to_string()))
                        .is_some_and(|(f, d)| f.starts_with(&format!("{d}/")));
                    if !under {
                        err(
                            &key,
                            format!(
                                "{file:?} must be an absolute path under docker.secrets_dir ({})",
                                dir.display()
                            ),
                        );
                    }
                }
            }
        }
        if c.control.service_networks.contains(&p.network) {
            err(
                &format!("profiles.{name}.network"),
                format!(
                    "profile {name:?} breaks rule `isolated_network`: {:?} is one of control.service_networks, where termgate's own services listen",
                    p.network
                ),
            );
        }
    }
}

fn validate_profile(name: &str, p: &Profile, err: &mut impl FnMut(&str, String)) {
    let key = format!("profiles.{name}");
    if !is_name(name, 32) {
        err(
            &key,
            "profile names are 1-32 characters of a-z, 0-9 and -".into(),
        );
    }
    if p.image.trim().is_empty() {
        err(&format!("{key}.image"), "must not be empty".into());
    }
    if p.memory_mb < 6 {
        err(
            &format!("{key}.memory_mb"),
            "must be at least 6 (Docker's minimum)".into(),
        );
    }
    if !(p.cpus > 0.0 && p.cpus <= 256.0) {
        err(&format!("{key}.cpus"), "must be between 0 and 256".into());
    }
    if p.tmp_size_mb == 0 {
        err(&format!("{key}.tmp_size_mb"), "must be positive".into());
    }
    if let Some(runtime) = &p.runtime {
        let spelled = (1..=64).contains(&runtime.len())
            && runtime
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !spelled {
            err(
                &format!("{key}.runtime"),
                format!("{runtime:?} is not a runtime name (letters, digits, '.', '_', '-'; at most 64)"),
            );
        }
    }
    match (p.workspace.as_deref().map(WorkspaceMode::parse), &p.home) {
        (Some(None), _) => err(
            &format!("{key}.workspace"),
            format!(
                "{:?} is not one of \"none\", \"home\", \"choose\"",
                p.workspace.as_deref().unwrap_or_default()
            ),
        ),
        (Some(Some(WorkspaceMode::Home | WorkspaceMode::Choose)), None) => err(
            &format!("{key}.workspace"),
            format!(
                "{:?} needs home, the mount point of the workspace",
                p.workspace.as_deref().unwrap_or_default()
            ),
        ),
        _ => {}
    }
    if p.record_input && !p.record {
        err(
            &format!("{key}.record_input"),
            "records input only with record = true".into(),
        );
    }
    if policy::share::ShareMode::parse(&p.shares).is_none() {
        err(
            &format!("{key}.shares"),
            format!(
                "must be \"anyone\", \"signed-in\" or \"off\", got {:?}",
                p.shares
            ),
        );
    }
    if policy::share::ShareMode::parse(&p.recording_links).is_none() {
        err(
            &format!("{key}.recording_links"),
            format!(
                "must be \"anyone\", \"signed-in\" or \"off\", got {:?}",
                p.recording_links
            ),
        );
    }
    for (k, v) in [
        ("idle_timeout_seconds", p.idle_timeout_seconds),
        ("max_lifetime_seconds", p.max_lifetime_seconds),
    ] {
        if let Some(v) = v {
            if !(1..=MAX_LIFETIME_LIMIT).contains(&v) {
                err(
                    &format!("{key}.{k}"),
                    format!("must be between 1 and {MAX_LIFETIME_LIMIT} seconds (leave it out for no limit), got {v}"),
                );
            }
        }
    }
    if p.stop_grace_seconds > MAX_STOP_GRACE {
        err(
            &format!("{key}.stop_grace_seconds"),
            format!(
                "must be between 0 and {MAX_STOP_GRACE} seconds, got {}",
                p.stop_grace_seconds
            ),
        );
    }
    for env in p.env.keys() {
        if !is_env_name(env) {
            err(
                &format!("{key}.env.{env}"),
                "not a valid environment variable name".into(),
            );
        }
    }
    if let Some(home) = &p.home {
        if !home.starts_with('/') {
            err(&format!("{key}.home"), "must be an absolute path".into());
        }
    }
    for (i, m) in p.mounts.iter().enumerate() {
        if m.kind != "bind" && m.kind != "volume" {
            err(
                &format!("{key}.mounts[{i}].kind"),
                format!("must be bind or volume, got {:?}", m.kind),
            );
        }
        if m.kind == "volume" && m.host_source.is_some() {
            err(
                &format!("{key}.mounts[{i}].host_source"),
                "only bind mounts have a host path".into(),
            );
        }
    }
    let mut option_envs = Vec::new();
    for (opt, o) in &p.options {
        let okey = format!("{key}.options.{opt}");
        if !is_name(opt, 32) {
            err(
                &okey,
                "option names are 1-32 characters of a-z, 0-9 and -".into(),
            );
        }
        if !is_env_name(&o.env) {
            err(
                &format!("{okey}.env"),
                "not a valid environment variable name".into(),
            );
        }
        if p.env.contains_key(&o.env) || option_envs.contains(&&o.env) {
            err(
                &format!("{okey}.env"),
                format!("{} is already set by this profile", o.env),
            );
        }
        option_envs.push(&o.env);
        if o.values.is_empty() {
            err(
                &format!("{okey}.values"),
                "must list at least one value".into(),
            );
        }
        for v in &o.values {
            let ok = !v.is_empty()
                && v.len() <= 64
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if !ok {
                err(
                    &format!("{okey}.values"),
                    format!("{v:?}: values are 1-64 characters of A-Z a-z 0-9 . _ -"),
                );
            }
        }
        if !o.values.contains(&o.default) {
            err(
                &format!("{okey}.default"),
                format!("{:?} is not one of values", o.default),
            );
        }
    }
    // The red lines, on the spec as dockerd would see it and on the paths control checks.
    let mut specs = vec![p.sandbox_spec(p.home.as_ref().map(|_| "termgate-home-check"))];
    if p.mounts.iter().any(|m| m.host_source.is_some()) {
        let mut control_view = specs[0].clone();
        for (m, spec_m) in p.mounts.iter().zip(control_view.mounts.iter_mut()) {
            spec_m.source = m.source.clone();
        }
        specs.push(control_view);
    }
    let mut seen = Vec::new();
    for spec in &specs {
        for v in sandbox::check(spec) {
            let line = format!(
                "profile {name:?} breaks red line `{}`: {}",
                v.rule, v.detail
            );
            if !seen.contains(&line) {
                err(&key, line.clone());
                seen.push(line);
            }
        }
    }
}

/// The longest idle timeout or lifetime a profile may set: ten years, seconds.
const MAX_LIFETIME_LIMIT: u64 = 10 * 366 * 86_400;

/// The longest a profile may let its sessions' programs run after their hang-up,
/// seconds: the end is already decided and its terminals closed, so anything longer
/// only keeps a container (and its user's quota) for nobody.
const MAX_STOP_GRACE: u64 = 300;

impl Profile {
    /// Who may open this profile's sessions' share links (validated at load; an
    /// unknown spelling, impossible after validation, reads as `off`).
    pub fn share_mode(&self) -> policy::share::ShareMode {
        policy::share::ShareMode::parse(&self.shares).unwrap_or(policy::share::ShareMode::Off)
    }

    /// Who may open links to this profile's sessions' recordings (validated at load;
    /// an unknown spelling reads as `off`).
    pub fn recording_link_mode(&self) -> policy::share::ShareMode {
        policy::share::ShareMode::parse(&self.recording_links)
            .unwrap_or(policy::share::ShareMode::Off)
    }

    /// When this profile's sessions end by themselves.
    pub fn lifetime_limits(&self) -> policy::LifetimeLimits {
        policy::LifetimeLimits {
            idle_timeout: self.idle_timeout_seconds,
            max_lifetime: self.max_lifetime_seconds,
        }
    }

    /// How long an ended session's programs get after their hang-up before the
    /// container is removed by force.
    pub fn stop_grace(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.stop_grace_seconds)
    }

    /// What this profile declares its sessions' containers to be: the input of
    /// [`policy::declared::container_body`], for control's creates and dockgate's
    /// comparison alike. Every session has a cgroup namespace of its own, set
    /// explicitly: a cgroup v1 daemon would give it the host's.
    pub fn declared(&self) -> DeclaredProfile {
        let mut security_opt = vec!["no-new-privileges:true".to_owned()];
        security_opt.extend(self.security_opt.iter().cloned());
        let namespace_modes = [
            (Namespace::Pid, self.pid_mode),
            (Namespace::Ipc, self.ipc_mode),
            (Namespace::Userns, self.userns_mode),
            (Namespace::Uts, self.uts_mode),
            (Namespace::Cgroup, Some(NamespaceMode::Private)),
        ]
        .into_iter()
        .filter_map(|(kind, mode)| mode.map(|m| (kind, m)))
        .collect();
        let mut mounts: Vec<MountSpec> = self
            .mounts
            .iter()
            .map(|m| MountSpec {
                kind: if m.kind == "volume" {
                    MountKind::Volume
                } else {
                    MountKind::Bind
                },
                source: m.host_source.clone().unwrap_or_else(|| m.source.clone()),
                target: m.target.clone(),
                read_only: m.read_only,
            })
            .collect();
        mounts.extend(self.secrets.iter().map(|(name, file)| MountSpec {
            kind: MountKind::Bind,
            source: file.clone(),
            target: secret_target(name),
            read_only: true,
        }));
        let memory = i64::try_from(self.memory_mb.saturating_mul(1 << 20)).unwrap_or(i64::MAX);
        let spec = ContainerSpec {
            user: Some(self.user.clone()),
            privileged: self.privileged,
            cap_add: self.cap_add.clone(),
            cap_drop: vec!["ALL".into()],
            security_opt,
            network_mode: self.network.clone(),
            namespace_modes,
            mounts,
            devices: self.devices.clone(),
            readonly_rootfs: self.readonly_rootfs,
            pids_limit: Some(self.pids_limit),
            memory_bytes: Some(memory),
            memory_swap_bytes: Some(memory),
            nano_cpus: Some((self.cpus * 1e9) as i64),
            tty: true,
            open_stdin: true,
            init: true,
        };
        DeclaredProfile {
            image: self.image.clone(),
            command: self.command.clone(),
            env: self.env.clone(),
            options: self
                .options
                .iter()
                .map(|(name, o)| {
                    (
                        name.clone(),
                        DeclaredOption {
                            env: o.env.clone(),
                            values: o.values.clone(),
                        },
                    )
                })
                .collect(),
            spec,
            home: self.home.clone(),
            workspace: self.workspace_mode(),
            tmp_size_mb: self.tmp_size_mb,
            runtime: self.runtime.clone(),
        }
    }

    /// What its sessions mount at `home` (an unknown spelling, refused at load, reads
    /// as none).
    pub fn workspace_mode(&self) -> WorkspaceMode {
        match (&self.workspace, &self.home) {
            (_, None) => WorkspaceMode::None,
            (None, Some(_)) => WorkspaceMode::Home,
            (Some(w), Some(_)) => WorkspaceMode::parse(w).unwrap_or_default(),
        }
    }

    /// The container this profile describes, as the sandbox rules see it. `home_volume`
    /// is the user's home volume name when the profile has `home`.
    pub fn sandbox_spec(&self, home_volume: Option<&str>) -> ContainerSpec {
        policy::declared::session_spec(&self.declared(), home_volume, false)
    }
}

/// Where a secret named `name` is mounted in a session.
pub fn secret_target(name: &str) -> String {
    format!("/run/secrets/{name}")
}

impl Config {
    /// What dockgate in front of Docker host `host` compares creates with.
    pub fn declared(&self, host: &str) -> policy::dockgate::Declared {
        policy::dockgate::Declared {
            instance: self.instance.clone(),
            host: host.to_owned(),
            profiles: self
                .profiles
                .iter()
                .map(|(name, p)| (name.clone(), p.declared()))
                .collect(),
            shared_volumes: self.docker.shared_volumes.clone(),
        }
    }

    /// Bind mounts whose source (as control sees it) does not exist, as errors naming
    /// the key. Control calls this at start; Docker would fail the create anyway.
    pub fn missing_bind_sources(&self) -> Vec<crate::error::ConfigError> {
        let mut out = Vec::new();
        for (name, p) in &self.profiles {
            for (i, m) in p.mounts.iter().enumerate() {
                if m.kind == "bind" && !Path::new(&m.source).exists() {
                    out.push(ConfigError::new(
                        format!("profiles.{name}.mounts[{i}].source"),
                        format!("{} does not exist", m.source),
                    ));
                }
            }
        }
        out
    }
}

fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

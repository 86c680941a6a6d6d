//! The session container red lines (design §5), checked on a plain description of a
//! container. Control builds the Docker call from a [`ContainerSpec`] and checks it
//! here twice: when the configuration is loaded (refusing to start) and again right
//! before every create. [`check`] reports every violation, each naming its rule.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};

/// How a path or volume reaches the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountKind {
    /// A host path (`Mounts` type bind — never legacy `Binds`).
    Bind,
    /// A named Docker volume.
    Volume,
}

/// A namespace a container may share or keep to itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Namespace {
    /// Process ids (`PidMode`).
    Pid,
    /// System V IPC and POSIX message queues (`IpcMode`).
    Ipc,
    /// Host and domain name (`UTSMode`).
    Uts,
    /// User and group ids (`UsernsMode`).
    Userns,
    /// The cgroup hierarchy (`CgroupnsMode`).
    Cgroup,
}

impl Namespace {
    /// Every kind, in a fixed order.
    pub const ALL: [Namespace; 5] = [
        Namespace::Pid,
        Namespace::Ipc,
        Namespace::Uts,
        Namespace::Userns,
        Namespace::Cgroup,
    ];

    /// The name of Docker's host-config field that sets it.
    pub fn docker_field(self) -> &'static str {
        match self {
            Namespace::Pid => "PidMode",
            Namespace::Ipc => "IpcMode",
            Namespace::Uts => "UTSMode",
            Namespace::Userns => "UsernsMode",
            Namespace::Cgroup => "CgroupnsMode",
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.docker_field())
    }
}

/// How a container has one of its namespaces. Only the modes every [`Namespace`] kind
/// can express exist, so a spec can always be written as a Docker call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NamespaceMode {
    /// Docker's default for the kind (the empty string in Docker's API).
    Default,
    /// A namespace of the container's own (`private`).
    Private,
    /// The host's namespace (`host`); breaks [`Rule::NoHostNamespaces`].
    Host,
}

impl NamespaceMode {
    /// From Docker's spelling, case-insensitively; `None` for anything else.
    pub fn parse(s: &str) -> Option<NamespaceMode> {
        if s.is_empty() {
            Some(NamespaceMode::Default)
        } else if s.eq_ignore_ascii_case("private") {
            Some(NamespaceMode::Private)
        } else if s.eq_ignore_ascii_case("host") {
            Some(NamespaceMode::Host)
        } else {
            None
        }
    }

    /// Docker's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NamespaceMode::Default => "",
            NamespaceMode::Private => "private",
            NamespaceMode::Host => "host",
        }
    }
}

impl fmt::Display for NamespaceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NamespaceMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        NamespaceMode::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown namespace mode {s:?}, expected \"\", \"private\" or \"host\""
            ))
        })
    }
}

/// One mount of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    /// Bind or volume.
    pub kind: MountKind,
    /// Host path (bind) or volume name.
    pub source: String,
    /// Path inside the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Everything about a container that the red lines speak of.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerSpec {
    /// `User` (`uid[:gid]` or a name); `None` means the image's default.
    pub user: Option<String>,
    /// `Privileged`.
    pub privileged: bool,
    /// `CapAdd`.
    pub cap_add: Vec<String>,
    /// `CapDrop`.
    pub cap_drop: Vec<String>,
    /// `SecurityOpt`.
    pub security_opt: Vec<String>,
    /// `NetworkMode` (`none`, or a named isolated network).
    pub network_mode: String,
    /// The namespaces whose mode is set; the others keep Docker's default.
    pub namespace_modes: BTreeMap<Namespace, NamespaceMode>,
    /// Mounts.
    pub mounts: Vec<MountSpec>,
    /// Host devices passed in.
    pub devices: Vec<String>,
    /// `ReadonlyRootfs`.
    pub readonly_rootfs: bool,
    /// `PidsLimit`.
    pub pids_limit: Option<i64>,
    /// `Memory`, in bytes.
    pub memory_bytes: Option<i64>,
    /// `MemorySwap`, in bytes.
    pub memory_swap_bytes: Option<i64>,
    /// `NanoCpus`.
    pub nano_cpus: Option<i64>,
    /// `Tty`.
    pub tty: bool,
    /// `OpenStdin`.
    pub open_stdin: bool,
    /// `Init`.
    pub init: bool,
}

/// A red line of design §5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// `CapDrop=["ALL"]` and nothing added back.
    CapDropAll,
    /// `no-new-privileges:true`.
    NoNewPrivileges,
    /// `Privileged=false`.
    NotPrivileged,
    /// No Docker, containerd or other daemon socket (or a directory holding one).
    NoDaemonSocket,
    /// No host network, pid, ipc, uts, cgroup or user namespace, nor another container's.
    NoHostNamespaces,
    /// No `seccomp=unconfined`, `apparmor=unconfined`, `label=disable` or
    /// `systempaths=unconfined`.
    NoUnconfinedProfiles,
    /// No host devices.
    NoDevices,
    /// `ReadonlyRootfs=true`.
    ReadonlyRootfs,
    /// A positive `PidsLimit`.
    PidsLimit,
    /// A positive `Memory` with `MemorySwap` equal to it (no swap).
    MemoryLimit,
    /// A positive `NanoCpus`.
    CpuLimit,
    /// A non-root `User`.
    NonRootUser,
    /// `Tty`, `OpenStdin` and `Init` (what `docker attach` and signal handling need).
    Terminal,
    /// Mount sources and targets are absolute, normalised paths (or volume names).
    MountPaths,
}

impl Rule {
    /// Stable name used in errors, logs and configuration messages.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::CapDropAll => "cap_drop_all",
            Rule::NoNewPrivileges => "no_new_privileges",
            Rule::NotPrivileged => "not_privileged",
            Rule::NoDaemonSocket => "no_daemon_socket",
            Rule::NoHostNamespaces => "no_host_namespaces",
            Rule::NoUnconfinedProfiles => "no_unconfined_profiles",
            Rule::NoDevices => "no_devices",
            Rule::ReadonlyRootfs => "readonly_rootfs",
            Rule::PidsLimit => "pids_limit",
            Rule::MemoryLimit => "memory_limit",
            Rule::CpuLimit => "cpu_limit",
            Rule::NonRootUser => "non_root_user",
            Rule::Terminal => "terminal",
            Rule::MountPaths => "mount_paths",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken rule and what broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// What in the spec breaks it.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule, self.detail)
    }
}

/// Host paths that hold a container daemon's socket or its state. Mounting any of them,
/// or any directory above them, hands the session the daemon.
const DAEMON_PATHS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/var/run/docker",
    "/run/docker",
    "/var/run/containerd",
    "/run/containerd",
    "/var/run/crio",
    "/run/crio",
    "/var/run/podman",
    "/run/podman",
    "/run/buildkit",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/run/user",
    "/var/run/user",
];

/// Normalises an absolute path lexically. `None` for relative paths, `..`, NUL.
pub fn normalise(path: &str) -> Option<String> {
    if !path.starts_with('/') || path.contains('\0') {
        return None;
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// Whether `a` is `b` or an ancestor directory of `b`.
fn is_same_or_ancestor(a: &str, b: &str) -> bool {
    a == "/" || a == b || (b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/'))
}

pub(crate) fn is_daemon_path(p: &str) -> bool {
    p.ends_with(".sock")
        || DAEMON_PATHS
            .iter()
            .any(|d| is_same_or_ancestor(p, d) || is_same_or_ancestor(d, p))
}

/// A non-root user as Docker takes it: numeric uid *and* gid, both non-zero. A name
/// (or a missing group) is resolved inside the image, where it can map to root.
fn is_numeric_non_root(user: &str) -> bool {
    let non_zero_id = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit())
            && s.parse::<u32>().is_ok_and(|n| n != 0)
    };
    match user.split_once(':') {
        Some((uid, gid)) => non_zero_id(uid) && non_zero_id(gid),
        None => false,
    }
}

/// Whether `s` is a plain Docker object name: `[A-Za-z0-9_.-]+`, not starting with `.`
/// or `-`.
pub fn is_plain_name(s: &str) -> bool {
    s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Checks a spec against every red line; returns all violations (empty: compliant).
pub fn check(spec: &ContainerSpec) -> Vec<Violation> {
    let mut v = Vec::new();
    let mut add = |rule: Rule, detail: String| v.push(Violation { rule, detail });

    if !spec.cap_drop.iter().any(|c| c.eq_ignore_ascii_case("ALL")) {
        add(Rule::CapDropAll, "CapDrop must contain ALL".into());
    }
    if !spec.cap_add.is_empty() {
        add(
            Rule::CapDropAll,
            format!("CapAdd must be empty, got {:?}", spec.cap_add),
        );
    }
    let nnp = spec.security_opt.iter().any(|o| {
        let o = o.to_ascii_lowercase();
        o == "no-new-privileges" || o == "no-new-privileges:true" || o == "no-new-privileges=true"
    });
    if !nnp {
        add(
            Rule::NoNewPrivileges,
            "SecurityOpt must contain no-new-privileges:true".into(),
        );
    }
    if spec.privileged {
        add(Rule::NotPrivileged, "Privileged must be false".into());
    }
    for opt in &spec.security_opt {
        let o = opt.to_ascii_lowercase().replace(':', "=");
        let unconfined = o == "seccomp=unconfined"
            || o == "apparmor=unconfined"
            || o == "label=disable"
            || o == "systempaths=unconfined"
            || o.starts_with("no-new-privileges=false");
        if unconfined {
            add(
                Rule::NoUnconfinedProfiles,
                format!("SecurityOpt {opt:?} is not allowed"),
            );
        }
    }
    let net = spec.network_mode.to_ascii_lowercase();
    if net == "host" || net.starts_with("container:") {
        add(
            Rule::NoHostNamespaces,
            format!("NetworkMode {:?} shares a namespace", spec.network_mode),
        );
    }
    if net.is_empty() || net == "default" || net == "bridge" {
        add(
            Rule::NoHostNamespaces,
            format!(
                "NetworkMode {:?}: use none or a named isolated network",
                spec.network_mode
            ),
        );
    }
    for (kind, mode) in &spec.namespace_modes {
        if *mode == NamespaceMode::Host {
            add(
                Rule::NoHostNamespaces,
                format!("{kind} {:?} shares a namespace", mode.as_str()),
            );
        }
    }
    // Explicitly: a cgroup v1 daemon (`default-cgroupns-mode=host`) gives a container
    // without it the host's cgroup namespace at every API version.
    if spec.namespace_modes.get(&Namespace::Cgroup) != Some(&NamespaceMode::Private) {
        add(
            Rule::NoHostNamespaces,
            "CgroupnsMode must be private, explicitly".into(),
        );
    }
    if !spec.devices.is_empty() {
        add(
            Rule::NoDevices,
            format!("Devices must be empty, got {:?}", spec.devices),
        );
    }
    for m in &spec.mounts {
        let target = normalise(&m.target);
        if target.is_none() {
            add(
                Rule::MountPaths,
                format!(
                    "mount target {:?} must be an absolute path without ..",
                    m.target
                ),
            );
        }
        if let Some(t) = &target {
            if is_daemon_path(t) {
                add(
                    Rule::NoDaemonSocket,
                    format!("mount target {t:?} is a daemon socket path"),
                );
            }
        }
        match m.kind {
            MountKind::Bind => match normalise(&m.source) {
                None => add(
                    Rule::MountPaths,
                    format!(
                        "bind source {:?} must be an absolute path without ..",
                        m.source
                    ),
                ),
                Some(s) => {
                    if is_daemon_path(&s) {
                        add(
                            Rule::NoDaemonSocket,
                            format!("bind source {s:?} exposes a daemon socket"),
                        );
                    }
                }
            },
            // No source: an anonymous volume, made for the container and removed with
            // it (an ephemeral workspace).
            MountKind::Volume => {
                if !(m.source.is_empty() || is_plain_name(&m.source)) {
                    add(
                        Rule::MountPaths,
                        format!("volume name {:?} is not a plain name", m.source),
                    );
                }
            }
        }
    }
    if !spec.readonly_rootfs {
        add(Rule::ReadonlyRootfs, "ReadonlyRootfs must be true".into());
    }
    if spec.pids_limit.is_none_or(|p| p <= 0) {
        add(Rule::PidsLimit, "PidsLimit must be positive".into());
    }
    match spec.memory_bytes {
        Some(m) if m > 0 => {
            if spec.memory_swap_bytes != Some(m) {
                add(
                    Rule::MemoryLimit,
                    "MemorySwap must equal Memory (no swap)".into(),
                );
            }
        }
        _ => add(Rule::MemoryLimit, "Memory must be positive".into()),
    }
    if spec.nano_cpus.is_none_or(|c| c <= 0) {
        add(Rule::CpuLimit, "NanoCpus must be positive".into());
    }
    match &spec.user {
        Some(u) if is_numeric_non_root(u) => {}
        other => add(
            Rule::NonRootUser,
            format!("User must be a numeric non-zero uid:gid, got {other:?}"),
        ),
    }
    if !(spec.tty && spec.open_stdin && spec.init) {
        add(
            Rule::Terminal,
            "Tty, OpenStdin and Init must all be true".into(),
        );
    }
    v
}

#[cfg(test)]
mod tests;

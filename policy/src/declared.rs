//! What this deployment's configuration declares a session container to be.
//!
//! One pure function, [`container_body`], builds the Docker create body of a session
//! from its profile ([`DeclaredProfile`], made by `config` from `[profiles.<name>]`) and
//! its facts ([`SessionFacts`]: instance, host, id, owner, display name, creation time
//! and the user's enumerated options). Control sends exactly that body; dockgate rebuilds
//! it from the create's own labels and options with the same function and refuses any
//! difference, naming the first field that differs ([`first_difference`]). A session
//! granted registered secrets mounts them too ([`session_body`]). A home
//! volume's create body is [`home_volume_body`], a workspace's
//! [`workspace_volume_body`] and a workspace copy's job [`copy_job_body`], each
//! compared the same way.
//!
//! Architecture invariant: nothing about a session container is decided anywhere else.
//! What a profile may mount, its user, network and security options come from the
//! configuration only; the facts a create carries (owner, id, options) are checked
//! against their own rules before they are used.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use sha2::Digest;

use crate::sandbox::{ContainerSpec, MountKind, MountSpec, Namespace};
use crate::session_id::SessionId;
use crate::Sub;

/// What termgate made an object as: `session` on containers, `home` on volumes.
pub const MANAGED_LABEL: &str = "termgate.managed";
/// The deployment's `instance`.
pub const INSTANCE_LABEL: &str = "termgate.instance";
/// The session id.
pub const SESSION_LABEL: &str = "termgate.session";
/// The owner `sub`.
pub const OWNER_LABEL: &str = "termgate.owner";
/// The profile name.
pub const PROFILE_LABEL: &str = "termgate.profile";
/// The session's display name.
pub const NAME_LABEL: &str = "termgate.name";
/// Creation time, Unix seconds.
pub const CREATED_LABEL: &str = "termgate.created";
/// The Docker host the session was placed on.
pub const HOST_LABEL: &str = "termgate.host";

mod secrets;
mod workspace;

pub use secrets::{
    is_secret_name, secret_labels, secret_target, secrets_from_labels, with_secrets,
    SessionSecrets, SECRETS_TARGET_DIR, SECRET_LABEL_PREFIX,
};
pub use workspace::{
    copy_job_body, copy_job_name, is_own_volume, is_shared_volume, shared_volume_body,
    shared_volume_labels, shared_volume_name, workspace_volume_body, workspace_volume_labels,
    workspace_volume_name, CopyFacts, COPY_SOURCE_LABEL, COPY_SOURCE_TARGET,
    WORKSPACE_ACCESS_LABEL, WORKSPACE_LABEL,
};

/// What a profile's sessions mount at its `home` mount point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceMode {
    /// Nothing.
    #[default]
    None,
    /// The owner's home volume.
    Home,
    /// The workspace the user chooses at create time: one of theirs (the home volume
    /// among them), or an ephemeral one removed with the container.
    Choose,
}

impl WorkspaceMode {
    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceMode::None => "none",
            WorkspaceMode::Home => "home",
            WorkspaceMode::Choose => "choose",
        }
    }

    /// Reads the configuration's spelling.
    pub fn parse(s: &str) -> Option<WorkspaceMode> {
        match s {
            "none" => Some(WorkspaceMode::None),
            "home" => Some(WorkspaceMode::Home),
            "choose" => Some(WorkspaceMode::Choose),
            _ => None,
        }
    }
}

/// One option a user may choose for a profile's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredOption {
    /// The environment variable the chosen value is passed in.
    pub env: String,
    /// The values a user may choose.
    pub values: Vec<String>,
}

/// A profile as far as it makes a container: everything here comes from the
/// configuration, nothing from a request.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredProfile {
    /// Image reference.
    pub image: String,
    /// Command replacing the image's; empty keeps the image's.
    pub command: Vec<String>,
    /// Fixed environment.
    pub env: BTreeMap<String, String>,
    /// The options users choose from.
    pub options: BTreeMap<String, DeclaredOption>,
    /// The sandbox, with the profile's declared mounts (host paths as dockerd sees
    /// them, borrowed volumes) and without the workspace.
    pub spec: ContainerSpec,
    /// Where the session's workspace is mounted; `None`: it has none.
    pub home: Option<String>,
    /// What is mounted there.
    pub workspace: WorkspaceMode,
    /// Size of the `/tmp` tmpfs, MiB.
    pub tmp_size_mb: u64,
    /// The OCI runtime (`HostConfig.Runtime`); `None`: the daemon's default, and no
    /// runtime named in the body.
    pub runtime: Option<String>,
}

/// What one session brings to its container's body.
#[derive(Debug, Clone, Copy)]
pub struct SessionFacts<'a> {
    /// The deployment's `instance`.
    pub instance: &'a str,
    /// The Docker host's name.
    pub host: &'a str,
    /// The session id.
    pub session: &'a SessionId,
    /// The owner.
    pub owner: &'a Sub,
    /// The profile's name.
    pub profile: &'a str,
    /// The display name.
    pub name: &'a str,
    /// Creation time, Unix seconds.
    pub created: u64,
    /// The user's options, each one of its profile's enumerated values.
    pub options: &'a BTreeMap<String, String>,
    /// The Docker volume of the session's workspace (`""`: an ephemeral one, made
    /// anonymous and removed with the container); `None`: it mounts none.
    pub workspace: Option<&'a str>,
    /// The workspace is mounted read-only (a shared one granted read-only).
    pub workspace_read_only: bool,
}

/// A body that cannot be declared: the field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct NotDeclared {
    /// The JSON path of the field.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn not_declared(field: impl Into<String>, message: impl Into<String>) -> NotDeclared {
    NotDeclared {
        field: field.into(),
        message: message.into(),
    }
}

/// Docker's name for a session's container.
pub fn container_name(id: &SessionId) -> String {
    format!("termgate-{id}")
}

/// Name of a user's persistent home volume: stable, label-safe, collision-free.
pub fn home_volume_name(instance: &str, owner: &Sub) -> String {
    let digest = sha2::Sha256::digest(owner.as_str().as_bytes());
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    format!("termgate-home-{instance}-{hex}")
}

/// The labels of `owner`'s home volume.
pub fn home_volume_labels(instance: &str, owner: &Sub) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_LABEL.to_owned(), "home".to_owned()),
        (OWNER_LABEL.to_owned(), owner.as_str().to_owned()),
        (INSTANCE_LABEL.to_owned(), instance.to_owned()),
    ])
}

/// The create body of `owner`'s home volume: its name and labels, the local driver
/// without options.
pub fn home_volume_body(instance: &str, owner: &Sub) -> Value {
    json!({
        "Name": home_volume_name(instance, owner),
        "Labels": home_volume_labels(instance, owner),
    })
}

/// The labels of a session's container: enough to tell it is termgate's, to rebuild
/// the session's record, and for dockgate to rebuild its body.
pub fn session_labels(f: &SessionFacts<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_LABEL.to_owned(), "session".to_owned()),
        (INSTANCE_LABEL.to_owned(), f.instance.to_owned()),
        (SESSION_LABEL.to_owned(), f.session.to_string()),
        (OWNER_LABEL.to_owned(), f.owner.as_str().to_owned()),
        (PROFILE_LABEL.to_owned(), f.profile.to_owned()),
        (NAME_LABEL.to_owned(), f.name.to_owned()),
        (CREATED_LABEL.to_owned(), f.created.to_string()),
        (HOST_LABEL.to_owned(), f.host.to_owned()),
    ])
    .into_iter()
    .chain(
        f.workspace
            .map(|w| (WORKSPACE_LABEL.to_owned(), w.to_owned())),
    )
    .chain(
        f.workspace_read_only
            .then(|| (WORKSPACE_ACCESS_LABEL.to_owned(), "ro".to_owned())),
    )
    .collect()
}

/// The sandbox of a session of `p` whose workspace is the volume `workspace` (`""`:
/// an anonymous one), mounted read-only when `read_only`.
pub fn session_spec(
    p: &DeclaredProfile,
    workspace: Option<&str>,
    read_only: bool,
) -> ContainerSpec {
    let mut spec = p.spec.clone();
    if let (Some(target), Some(volume)) = (&p.home, workspace) {
        spec.mounts.push(MountSpec {
            kind: MountKind::Volume,
            source: volume.to_owned(),
            target: target.clone(),
            read_only,
        });
    }
    spec
}

/// The environment of a session: the profile's fixed variables, then each option's
/// variable with the chosen value, in option-name order.
fn session_env(
    p: &DeclaredProfile,
    options: &BTreeMap<String, String>,
) -> Result<Vec<String>, NotDeclared> {
    if let Some(unknown) = options.keys().find(|k| !p.options.contains_key(*k)) {
        return Err(not_declared(
            "Env",
            format!("the profile has no option {unknown:?}"),
        ));
    }
    let mut env: Vec<String> = p.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for (name, o) in &p.options {
        let value = options
            .get(name)
            .ok_or_else(|| not_declared("Env", format!("option {name:?} has no value")))?;
        if !o.values.contains(value) {
            return Err(not_declared(
                "Env",
                format!("option {name:?} may not be {value:?}"),
            ));
        }
        env.push(format!("{}={value}", o.env));
    }
    Ok(env)
}

/// The options a create's environment carries for profile `p`: the value of each
/// option's variable, given exactly once. What it finds is checked when the body is
/// rebuilt from it.
pub fn options_from_env(p: &DeclaredProfile, env: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, o) in &p.options {
        let prefix = format!("{}=", o.env);
        let mut found = env.iter().filter_map(|e| e.strip_prefix(prefix.as_str()));
        if let (Some(v), None) = (found.next(), found.next()) {
            out.insert(name.clone(), v.to_owned());
        }
    }
    out
}

/// The create body of the session `f` describes, made from profile `p`: exactly what
/// control sends and what dockgate compares with. Fails when the facts are not what
/// the profile allows (an option it lacks or a value it does not list) or when `/tmp`
/// would be unbounded.
pub fn container_body(p: &DeclaredProfile, f: &SessionFacts<'_>) -> Result<Value, NotDeclared> {
    session_body(p, f, &SessionSecrets::new())
}

/// [`container_body`] of a session that also mounts the registered secrets `secrets`
/// ([`with_secrets`]), each named by a label of its container. Fails as
/// [`container_body`] does, and as [`with_secrets`] does for a secret.
pub fn session_body(
    p: &DeclaredProfile,
    f: &SessionFacts<'_>,
    secrets: &SessionSecrets,
) -> Result<Value, NotDeclared> {
    if p.tmp_size_mb == 0 {
        return Err(not_declared(
            "HostConfig.Tmpfs",
            "tmp_size_mb must be positive (size=0 would make /tmp unbounded)",
        ));
    }
    let workspace = session_workspace(p, f)?;
    let spec = with_secrets(session_spec(p, workspace, f.workspace_read_only), secrets)?;
    let env = session_env(p, f.options)?;
    let cmd = (!p.command.is_empty()).then(|| Launch::Cmd(p.command.clone()));
    let mut labels = session_labels(f);
    labels.extend(secret_labels(secrets));
    Ok(body_of(p, &spec, env, cmd, labels))
}

/// The workspace volume a session of `p` mounts, checked against the profile: a home
/// profile's is the owner's home volume, a chosen one any volume (what it must be is
/// looked up before the create goes on), and a profile without one mounts none.
fn session_workspace<'f>(
    p: &DeclaredProfile,
    f: &SessionFacts<'f>,
) -> Result<Option<&'f str>, NotDeclared> {
    let field = || format!("Labels.{WORKSPACE_LABEL}");
    let mode = if p.home.is_some() {
        p.workspace
    } else {
        WorkspaceMode::None
    };
    // Only a chosen workspace may be one granted read-only.
    if f.workspace_read_only
        && (mode != WorkspaceMode::Choose || f.workspace.is_none_or(str::is_empty))
    {
        return Err(not_declared(
            format!("Labels.{WORKSPACE_ACCESS_LABEL}"),
            "only a chosen shared workspace is mounted read-only",
        ));
    }
    match (mode, f.workspace) {
        (WorkspaceMode::None, None) => Ok(None),
        (WorkspaceMode::None, Some(_)) => {
            Err(not_declared(field(), "the profile mounts no workspace"))
        }
        (_, None) => Err(not_declared(
            field(),
            "the profile mounts a workspace, the session names none",
        )),
        (WorkspaceMode::Home, Some(w)) => {
            let home = home_volume_name(f.instance, f.owner);
            if w == home {
                Ok(Some(w))
            } else {
                Err(not_declared(
                    field(),
                    format!("the profile mounts the owner's home volume {home:?}, not {w:?}"),
                ))
            }
        }
        (WorkspaceMode::Choose, Some(w)) => {
            if w.is_empty() || crate::sandbox::is_plain_name(w) {
                Ok(Some(w))
            } else {
                Err(not_declared(field(), format!("{w:?} is not a volume name")))
            }
        }
    }
}

/// What a container runs: a command after the image's entrypoint, or an entrypoint of
/// its own (the image's command then unused).
enum Launch {
    Cmd(Vec<String>),
    Entrypoint(Vec<String>),
}

/// The create body of a container of profile `p` with sandbox `spec`.
fn body_of(
    p: &DeclaredProfile,
    spec: &ContainerSpec,
    env: Vec<String>,
    launch: Option<Launch>,
    labels: BTreeMap<String, String>,
) -> Value {
    let mut host = Map::new();
    host.insert("CapAdd".into(), json!(spec.cap_add));
    host.insert("CapDrop".into(), json!(spec.cap_drop));
    host.insert("SecurityOpt".into(), json!(spec.security_opt));
    host.insert("Privileged".into(), json!(spec.privileged));
    host.insert("ReadonlyRootfs".into(), json!(spec.readonly_rootfs));
    host.insert("Init".into(), json!(spec.init));
    host.insert("NetworkMode".into(), json!(spec.network_mode));
    host.insert("AutoRemove".into(), json!(false));
    if let Some(runtime) = &p.runtime {
        host.insert("Runtime".into(), json!(runtime));
    }
    host.insert(
        "Tmpfs".into(),
        json!({ "/tmp": format!("rw,nosuid,nodev,size={}m", p.tmp_size_mb) }),
    );
    for (key, value) in [
        ("PidsLimit", spec.pids_limit),
        ("Memory", spec.memory_bytes),
        ("MemorySwap", spec.memory_swap_bytes),
        ("NanoCpus", spec.nano_cpus),
    ] {
        if let Some(v) = value {
            host.insert(key.into(), json!(v));
        }
    }
    for kind in Namespace::ALL {
        if let Some(mode) = spec.namespace_modes.get(&kind) {
            host.insert(kind.docker_field().into(), json!(mode.as_str()));
        }
    }
    if !spec.mounts.is_empty() {
        let mounts: Vec<Value> = spec
            .mounts
            .iter()
            .map(|m| {
                let mut mount = json!({
                    "Type": match m.kind {
                        MountKind::Bind => "bind",
                        MountKind::Volume => "volume",
                    },
                    "Source": m.source,
                    "Target": m.target,
                    "ReadOnly": m.read_only,
                });
                // An ephemeral workspace: Docker makes the volume and removes it with
                // the container.
                if m.kind == MountKind::Volume && m.source.is_empty() {
                    if let Some(o) = mount.as_object_mut() {
                        o.remove("Source");
                    }
                }
                mount
            })
            .collect();
        host.insert("Mounts".into(), Value::Array(mounts));
    }
    let mut body = Map::new();
    body.insert("Image".into(), json!(p.image));
    if let Some(user) = &spec.user {
        body.insert("User".into(), json!(user));
    }
    body.insert("Tty".into(), json!(spec.tty));
    body.insert("OpenStdin".into(), json!(spec.open_stdin));
    for key in ["StdinOnce", "AttachStdin", "AttachStdout", "AttachStderr"] {
        body.insert(key.into(), json!(false));
    }
    body.insert("Env".into(), json!(env));
    match launch {
        Some(Launch::Cmd(cmd)) => {
            body.insert("Cmd".into(), json!(cmd));
        }
        Some(Launch::Entrypoint(e)) => {
            body.insert("Entrypoint".into(), json!(e));
        }
        None => {}
    }
    body.insert("Labels".into(), json!(labels));
    body.insert("HostConfig".into(), Value::Object(host));
    Value::Object(body)
}

/// Where a body differs from the declared one: the JSON path of the first field that
/// differs, and both values there (`None`: absent on that side).
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// `HostConfig.Mounts[0].Source`, `Labels.termgate.owner`, … (`<body>` for the whole).
    pub path: String,
    /// The declared value.
    pub want: Option<Value>,
    /// The value sent.
    pub got: Option<Value>,
}

/// The first place where `got` differs from `want` (`None`: equal). Objects are walked
/// in key order, a key present on one side only is a difference; arrays element by
/// element, then by length.
pub fn first_difference(want: &Value, got: &Value) -> Option<Difference> {
    fn at(path: &str, key: &str) -> String {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    }
    fn walk(want: &Value, got: &Value, path: &str) -> Option<Difference> {
        match (want, got) {
            (Value::Object(w), Value::Object(g)) => {
                let mut keys: Vec<&String> = w.keys().chain(g.keys()).collect();
                keys.sort();
                keys.dedup();
                keys.into_iter().find_map(|k| match (w.get(k), g.get(k)) {
                    (Some(wv), Some(gv)) => walk(wv, gv, &at(path, k)),
                    (wv, gv) => Some(Difference {
                        path: at(path, k),
                        want: wv.cloned(),
                        got: gv.cloned(),
                    }),
                })
            }
            (Value::Array(w), Value::Array(g)) => {
                let first = w
                    .iter()
                    .zip(g)
                    .enumerate()
                    .find_map(|(i, (wv, gv))| walk(wv, gv, &format!("{path}[{i}]")));
                first.or_else(|| {
                    (w.len() != g.len()).then(|| {
                        let i = w.len().min(g.len());
                        Difference {
                            path: format!("{path}[{i}]"),
                            want: w.get(i).cloned(),
                            got: g.get(i).cloned(),
                        }
                    })
                })
            }
            (w, g) => (w != g).then(|| Difference {
                path: if path.is_empty() {
                    "<body>".into()
                } else {
                    path.to_owned()
                },
                want: Some(w.clone()),
                got: Some(g.clone()),
            }),
        }
    }
    walk(want, got, "")
}

#[cfg(test)]
mod secrets_tests;
#[cfg(test)]
mod shared_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod workspace_tests;

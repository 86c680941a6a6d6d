//! A create compared with what this deployment's configuration declares: dockgate
//! rebuilds the body with [`crate::declared`] from the create's own labels and options
//! and passes it only when the two are equal.

use std::collections::BTreeMap;

use serde_json::Value;

use super::denied::{deny, Denied, Reason};
use super::target::Asked;
use crate::declared::{
    container_name, copy_job_body, copy_job_name, first_difference, home_volume_body,
    options_from_env, secrets_from_labels, session_body, shared_volume_body, workspace_volume_body,
    CopyFacts, DeclaredProfile, SessionFacts, COPY_SOURCE_LABEL, CREATED_LABEL, MANAGED_LABEL,
    NAME_LABEL, OWNER_LABEL, PROFILE_LABEL, SESSION_LABEL, WORKSPACE_ACCESS_LABEL, WORKSPACE_LABEL,
};
use crate::sandbox::{is_daemon_path, normalise, MountKind};
use crate::session_id::SessionId;
use crate::Sub;

/// What dockgate knows of the deployment: its configuration's instance and profiles,
/// and the host it stands in front of.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// The deployment's `instance`.
    pub instance: String,
    /// The Docker host's name.
    pub host: String,
    /// Every profile, by name.
    pub profiles: BTreeMap<String, DeclaredProfile>,
    /// Existing volumes that may be mounted as shared workspaces (`docker.
    /// shared_volumes`).
    pub shared_volumes: Vec<String>,
}

/// What the binary looks up before a declared container create goes on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateLookups {
    /// Volumes that must exist and be the owner's: a workspace termgate made for them,
    /// or, with `true`, also their home volume or a shared workspace
    /// ([`crate::declared::is_own_volume`], [`crate::declared::is_shared_volume`]);
    /// `false` (a copy's destination): one of their workspaces only.
    pub own_volumes: Vec<(String, Sub, bool)>,
    /// The profile's borrowed volumes: each must be a plain local volume.
    pub borrowed_volumes: Vec<String>,
    /// The profile's named network: it must resolve to a network of exactly that name.
    pub network: Option<String>,
    /// The profile's bind sources: each, resolved again, must pass [`bind_source_ok`].
    pub bind_sources: Vec<String>,
    /// The registered secrets' files the session mounts, each with the user its
    /// sessions run as: each must be a regular file (not a symbolic link) under
    /// `docker.secrets_dir`, resolving inside it, that user able to read it.
    pub secrets: Vec<(String, Option<String>)>,
}

fn not_declared(message: String) -> Denied {
    deny(Reason::NotDeclared, message)
}

fn short(v: Option<&Value>) -> String {
    match v {
        None => "nothing".into(),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 120 {
                format!("{}…", s.chars().take(120).collect::<String>())
            } else {
                s
            }
        }
    }
}

fn compare(want: &Value, got: &Value) -> Result<(), Denied> {
    match first_difference(want, got) {
        None => Ok(()),
        Some(d) => Err(not_declared(format!(
            "{}: the configuration declares {}, the request has {}",
            d.path,
            short(d.want.as_ref()),
            short(d.got.as_ref())
        ))),
    }
}

fn label<'b>(body: &'b Value, key: &str) -> Result<&'b str, Denied> {
    body.get("Labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
        .ok_or_else(|| not_declared(format!("Labels.{key}: missing")))
}

/// The profile a create's labels name.
fn profile_of<'d>(d: &'d Declared, body: &Value) -> Result<(&'d str, &'d DeclaredProfile), Denied> {
    let name = label(body, PROFILE_LABEL)?;
    d.profiles
        .get_key_value(name)
        .map(|(k, v)| (k.as_str(), v))
        .ok_or_else(|| {
            let known: Vec<&str> = d.profiles.keys().map(String::as_str).collect();
            not_declared(format!(
                "Labels.{PROFILE_LABEL}: no profile {name:?} is declared (loaded: {known:?})"
            ))
        })
}

fn owner_of(body: &Value) -> Result<Sub, Denied> {
    Sub::parse(label(body, OWNER_LABEL)?)
        .ok_or_else(|| not_declared(format!("Labels.{OWNER_LABEL}: not a valid sub")))
}

fn name_is(asked: &Asked, want: &str) -> Result<(), Denied> {
    if asked.query_value("name") == Some(want) {
        return Ok(());
    }
    Err(not_declared(format!(
        "name (query): the configuration declares {want:?}, the request has {:?}",
        asked.query_value("name")
    )))
}

/// Compares a container create (its target's query and its JSON body) with the body
/// the configuration declares for what its labels name: a session, or a workspace
/// copy's job. On equality says what to look up before it goes on.
pub fn container_create_declared(
    d: &Declared,
    asked: &Asked,
    body: &Value,
) -> Result<CreateLookups, Denied> {
    if label(body, MANAGED_LABEL)? == "copy" {
        return copy_create_declared(d, asked, body);
    }
    let (profile_name, profile) = profile_of(d, body)?;
    let session = SessionId::parse(label(body, SESSION_LABEL)?)
        .map_err(|_| not_declared(format!("Labels.{SESSION_LABEL}: not a session id")))?;
    let owner = owner_of(body)?;
    let created: u64 = label(body, CREATED_LABEL)?
        .parse()
        .map_err(|_| not_declared(format!("Labels.{CREATED_LABEL}: not a number")))?;
    let name = label(body, NAME_LABEL)?;
    let workspace = body
        .get("Labels")
        .and_then(|l| l.get(WORKSPACE_LABEL))
        .and_then(Value::as_str);
    // Any other spelling of the access is not what the rebuilt body carries.
    let workspace_read_only = body
        .get("Labels")
        .and_then(|l| l.get(WORKSPACE_ACCESS_LABEL))
        .is_some();
    let env: Vec<String> = body
        .get("Env")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let options = options_from_env(profile, &env);
    // The registered secrets its labels name: rebuilt into the same mounts below, and
    // their files looked up on the host before the create goes on.
    let secrets = secrets_from_labels(
        body.get("Labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))),
    );
    let facts = SessionFacts {
        instance: &d.instance,
        host: &d.host,
        session: &session,
        owner: &owner,
        profile: profile_name,
        name,
        created,
        options: &options,
        workspace,
        workspace_read_only,
    };
    let want = session_body(profile, &facts, &secrets)
        .map_err(|e| not_declared(format!("{}: {}", e.field, e.message)))?;
    compare(&want, body)?;
    name_is(asked, &container_name(&session))?;
    let mut lookups = CreateLookups {
        secrets: secrets
            .into_values()
            .map(|file| (file, profile.spec.user.clone()))
            .collect(),
        ..CreateLookups::default()
    };
    if let Some(w) = workspace.filter(|w| !w.is_empty()) {
        lookups
            .own_volumes
            .push((w.to_owned(), owner.clone(), true));
    }
    for m in &profile.spec.mounts {
        match m.kind {
            MountKind::Bind => lookups.bind_sources.push(m.source.clone()),
            MountKind::Volume => lookups.borrowed_volumes.push(m.source.clone()),
        }
    }
    if !profile.spec.network_mode.eq_ignore_ascii_case("none") {
        lookups.network = Some(profile.spec.network_mode.clone());
    }
    Ok(lookups)
}

/// A copy job's create: the body [`copy_job_body`] makes for the volumes, owner and
/// profile its labels name, under the name its new volume gives it. The source must be
/// the owner's (their home volume or a workspace), the new volume a workspace of theirs.
fn copy_create_declared(
    d: &Declared,
    asked: &Asked,
    body: &Value,
) -> Result<CreateLookups, Denied> {
    let (profile_name, profile) = profile_of(d, body)?;
    let owner = owner_of(body)?;
    let source = label(body, COPY_SOURCE_LABEL)?;
    let dest = label(body, WORKSPACE_LABEL)?;
    let facts = CopyFacts {
        instance: &d.instance,
        host: &d.host,
        owner: &owner,
        profile: profile_name,
        source,
        dest,
    };
    let want = copy_job_body(profile, &facts)
        .map_err(|e| not_declared(format!("{}: {}", e.field, e.message)))?;
    compare(&want, body)?;
    name_is(asked, &copy_job_name(dest))?;
    Ok(CreateLookups {
        own_volumes: vec![
            (source.to_owned(), owner.clone(), true),
            (dest.to_owned(), owner, false),
        ],
        ..CreateLookups::default()
    })
}

/// Compares a volume create with the body the configuration declares for what its
/// labels name: the owner's home volume, a workspace of theirs, or a shared one.
pub fn volume_create_declared(d: &Declared, body: &Value) -> Result<(), Denied> {
    if label(body, MANAGED_LABEL)? == "shared" {
        let id = SessionId::parse(label(body, WORKSPACE_LABEL)?)
            .map_err(|_| not_declared(format!("Labels.{WORKSPACE_LABEL}: not a workspace id")))?;
        return compare(&shared_volume_body(&d.instance, &id), body);
    }
    let owner = owner_of(body)?;
    if label(body, MANAGED_LABEL)? == "workspace" {
        let id = SessionId::parse(label(body, WORKSPACE_LABEL)?)
            .map_err(|_| not_declared(format!("Labels.{WORKSPACE_LABEL}: not a workspace id")))?;
        return compare(&workspace_volume_body(&d.instance, &owner, &id), body);
    }
    compare(&home_volume_body(&d.instance, &owner), body)
}

/// Host paths no bind may resolve to or under: the kernel's views of processes,
/// devices and the system (`/proc/self/root` is the host's `/`).
const KERNEL_PATHS: &[&str] = &["/proc", "/sys", "/dev"];

/// Whether a declared bind source, as it resolves on the host (`realpath`), may be
/// mounted: not `/`, nothing at or under `/proc`, `/sys` or `/dev`, no daemon's socket
/// or state (nor a directory above one), and nothing at, under or above one of
/// `protected` (termgate's state directory, dockgate's sockets).
pub fn bind_source_ok(resolved: &str, protected: &[String]) -> Result<(), Denied> {
    let refuse = |why: &str| {
        Err(not_declared(format!(
            "bind source resolves to {resolved:?}, {why}"
        )))
    };
    let Some(p) = normalise(resolved) else {
        return refuse("which is not a clean absolute path");
    };
    let under = |root: &str| p == root || p.starts_with(&format!("{root}/"));
    if p == "/" {
        return refuse("the host's root");
    }
    if let Some(k) = KERNEL_PATHS.iter().find(|k| under(k)) {
        return refuse(&format!("under {k}"));
    }
    if is_daemon_path(&p) {
        return refuse("a container daemon's socket or state");
    }
    for root in protected.iter().filter_map(|r| normalise(r)) {
        if under(&root) || root.starts_with(&format!("{p}/")) {
            return refuse(&format!("which holds or is under termgate's {root:?}"));
        }
    }
    Ok(())
}

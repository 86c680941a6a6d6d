//! Workspaces as the configuration declares them: the volume termgate makes for one
//! (its name and labels are the evidence that termgate made it, for whom), and the
//! throwaway job that copies one into another.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{
    body_of, home_volume_labels, home_volume_name, not_declared, DeclaredProfile, Launch,
    NotDeclared, WorkspaceMode, HOST_LABEL, INSTANCE_LABEL, MANAGED_LABEL, OWNER_LABEL,
    PROFILE_LABEL,
};
use crate::sandbox::{ContainerSpec, MountKind, MountSpec};
use crate::session_id::SessionId;
use crate::Sub;

/// On a session container or a copy job: the volume of the workspace it mounts (`""`
/// on a session: an ephemeral one). On a workspace volume: the workspace's id.
pub const WORKSPACE_LABEL: &str = "termgate.workspace";
/// On a session container whose workspace is mounted read-only: `ro`.
pub const WORKSPACE_ACCESS_LABEL: &str = "termgate.workspace.access";
/// On a copy job: the volume it copies from.
pub const COPY_SOURCE_LABEL: &str = "termgate.copy.source";
/// Where a copy job mounts its source, read-only.
pub const COPY_SOURCE_TARGET: &str = "/termgate/source";

/// Name of workspace `id`'s volume.
pub fn workspace_volume_name(instance: &str, id: &SessionId) -> String {
    format!("termgate-ws-{instance}-{id}")
}

/// The labels of `owner`'s workspace `id`: written when termgate makes it, the only
/// evidence it ever removes a volume on.
pub fn workspace_volume_labels(
    instance: &str,
    owner: &Sub,
    id: &SessionId,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_LABEL.to_owned(), "workspace".to_owned()),
        (OWNER_LABEL.to_owned(), owner.as_str().to_owned()),
        (INSTANCE_LABEL.to_owned(), instance.to_owned()),
        (WORKSPACE_LABEL.to_owned(), id.to_string()),
    ])
}

/// The create body of `owner`'s workspace `id`: its name and labels, the local driver
/// without options.
pub fn workspace_volume_body(instance: &str, owner: &Sub, id: &SessionId) -> Value {
    json!({
        "Name": workspace_volume_name(instance, id),
        "Labels": workspace_volume_labels(instance, owner, id),
    })
}

/// Whether the volume `name`, labelled `labels`, is `owner`'s in deployment
/// `instance`: their home volume, or a workspace termgate made for them, each under
/// the name its labels give it.
pub fn is_own_volume(
    name: &str,
    labels: &BTreeMap<String, String>,
    instance: &str,
    owner: &Sub,
) -> bool {
    if *labels == home_volume_labels(instance, owner) {
        return name == home_volume_name(instance, owner);
    }
    let Some(id) = labels
        .get(WORKSPACE_LABEL)
        .and_then(|id| SessionId::parse(id).ok())
    else {
        return false;
    };
    *labels == workspace_volume_labels(instance, owner, &id)
        && name == workspace_volume_name(instance, &id)
}

/// Name of shared workspace `id`'s volume, when termgate makes it.
pub fn shared_volume_name(instance: &str, id: &SessionId) -> String {
    format!("termgate-shared-{instance}-{id}")
}

/// The labels of shared workspace `id`'s volume: nobody's own, the deployment's.
pub fn shared_volume_labels(instance: &str, id: &SessionId) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_LABEL.to_owned(), "shared".to_owned()),
        (INSTANCE_LABEL.to_owned(), instance.to_owned()),
        (WORKSPACE_LABEL.to_owned(), id.to_string()),
    ])
}

/// The create body of shared workspace `id`'s volume.
pub fn shared_volume_body(instance: &str, id: &SessionId) -> Value {
    json!({
        "Name": shared_volume_name(instance, id),
        "Labels": shared_volume_labels(instance, id),
    })
}

/// Whether the volume `name`, labelled `labels`, may be mounted as a shared workspace
/// of deployment `instance`: one termgate made for sharing (its labels and the name
/// they give it), or one the configuration lists in `borrowable` (`docker.
/// shared_volumes`) that carries no termgate label (never another user's).
pub fn is_shared_volume(
    name: &str,
    labels: &BTreeMap<String, String>,
    instance: &str,
    borrowable: &[String],
) -> bool {
    if let Some(id) = labels
        .get(WORKSPACE_LABEL)
        .and_then(|id| SessionId::parse(id).ok())
    {
        if *labels == shared_volume_labels(instance, &id) {
            return name == shared_volume_name(instance, &id);
        }
    }
    borrowable.iter().any(|b| b == name) && !labels.keys().any(|k| k.starts_with("termgate."))
}

/// What one copy job copies, for whom, and with which profile's image and sandbox.
#[derive(Debug, Clone, Copy)]
pub struct CopyFacts<'a> {
    /// The deployment's `instance`.
    pub instance: &'a str,
    /// The Docker host's name.
    pub host: &'a str,
    /// Who asked for the copy: both volumes are theirs.
    pub owner: &'a Sub,
    /// The profile whose image, user and limits the job runs with.
    pub profile: &'a str,
    /// The volume copied from (mounted read-only).
    pub source: &'a str,
    /// The new workspace's volume (mounted where the profile mounts workspaces, so
    /// that Docker gives its root the image's owner there).
    pub dest: &'a str,
}

/// Docker's name for the job that fills the volume `dest`.
pub fn copy_job_name(dest: &str) -> String {
    format!("termgate-copy-{dest}")
}

/// What the job runs: empty the new volume of what Docker copied into it from the
/// image, then copy the source's tree into it, modes, times, links and (as far as the
/// profile's user may set them) owners kept, and write it to disk.
///
/// Every path is named from the directory it is in, never from `/`: the container's
/// root is the storage driver's, which (as fuse-overlayfs) is asked for `/`'s ACL at
/// each walk from it by a user who is not root, several times per file. So the copy is
/// two processes, one in each tree, joined by a pipe: GNU `tar` where the image has it
/// (it sets directories' modes and times after their contents); else BusyBox's, whose
/// `tar` sets them before, which `cpio` does not, in two passes: every file but
/// directories and those too large for its format (4 GiB, which `tar` copies), then
/// the directories, deepest first (after the links `cpio` makes at its end). Without
/// either, `cp -a`. A pipe's status is its last process's, so the processes that read
/// the source mark their failure in the job's `/tmp` (a file unreadable to the user
/// fails the copy, as it failed `cp -a`). Then only the destination's file system is
/// written out.
const COPY_SCRIPT: &str = "set -e; failed=/tmp/termgate-copy-failed; rm -f \"$failed\"; \
     ok() { \"$@\" || : > \"$failed\"; }; \
     cd \"$1\"; find . -mindepth 1 -maxdepth 1 -exec rm -rf {} +; \
     cd \"$2\"; \
     if tar --version 2>/dev/null | grep -q 'GNU tar'; then \
       ok tar --numeric-owner -cf - . | tar -C \"$1\" --numeric-owner -xpf -; \
     elif command -v cpio >/dev/null; then \
       ok find . ! -type d ! \\( -type f -size +4194303k \\) -print0 \
         | ok cpio -o -0 -H newc | (cd \"$1\" && cpio -i -d -m -u); \
       find . -type f -size +4194303k -exec sh -c 'set -e; d=$1; shift; for f; do \
         tar -cf - \"$f\" | tar -C \"$d\" --numeric-owner -xpf -; done' big \"$1\" {} +; \
       ok find . -depth -type d -print0 \
         | ok cpio -o -0 -H newc | (cd \"$1\" && cpio -i -d -m -u); \
     else cp -a . \"$1\"; fi; \
     [ ! -e \"$failed\" ]; cd \"$1\"; sync -f . 2>/dev/null || sync";

/// The copy job's CPU allowance, in nano-CPUs, whatever less its profile allows a
/// session: one CPU. A copy is short and the user waits for it; one CPU is what every
/// Docker host has (Docker refuses more than the host's).
pub const COPY_NANO_CPUS: i64 = 1_000_000_000;

/// The create body of a copy job: the profile's image, user and limits, but at least
/// [`COPY_NANO_CPUS`] of CPU; no network, no environment, the source read-only and the
/// new workspace read-write, nothing else mounted. Fails when the profile mounts no
/// workspace (it declares no place for one) or a volume name is not plain.
pub fn copy_job_body(p: &DeclaredProfile, f: &CopyFacts<'_>) -> Result<Value, NotDeclared> {
    let target = match (&p.home, p.workspace) {
        (Some(t), WorkspaceMode::Home | WorkspaceMode::Choose) => t.clone(),
        _ => {
            return Err(not_declared(
                format!("Labels.{PROFILE_LABEL}"),
                format!("profile {:?} mounts no workspace", f.profile),
            ))
        }
    };
    if f.source == f.dest {
        return Err(not_declared(
            format!("Labels.{WORKSPACE_LABEL}"),
            "a copy's destination is not its source",
        ));
    }
    for (label, v) in [(COPY_SOURCE_LABEL, f.source), (WORKSPACE_LABEL, f.dest)] {
        if !crate::sandbox::is_plain_name(v) {
            return Err(not_declared(
                format!("Labels.{label}"),
                format!("{v:?} is not a volume name"),
            ));
        }
    }
    let volume = |source: &str, target: &str, read_only| MountSpec {
        kind: MountKind::Volume,
        source: source.to_owned(),
        target: target.to_owned(),
        read_only,
    };
    let spec = ContainerSpec {
        network_mode: "none".into(),
        nano_cpus: Some(
            p.spec
                .nano_cpus
                .map_or(COPY_NANO_CPUS, |n| n.max(COPY_NANO_CPUS)),
        ),
        mounts: vec![
            volume(f.source, COPY_SOURCE_TARGET, true),
            volume(f.dest, &target, false),
        ],
        ..p.spec.clone()
    };
    let labels = BTreeMap::from([
        (MANAGED_LABEL.to_owned(), "copy".to_owned()),
        (INSTANCE_LABEL.to_owned(), f.instance.to_owned()),
        (OWNER_LABEL.to_owned(), f.owner.as_str().to_owned()),
        (PROFILE_LABEL.to_owned(), f.profile.to_owned()),
        (HOST_LABEL.to_owned(), f.host.to_owned()),
        (COPY_SOURCE_LABEL.to_owned(), f.source.to_owned()),
        (WORKSPACE_LABEL.to_owned(), f.dest.to_owned()),
    ]);
    let launch = Launch::Entrypoint(vec![
        "sh".into(),
        "-c".into(),
        COPY_SCRIPT.into(),
        "copy".into(),
        target,
        COPY_SOURCE_TARGET.into(),
    ]);
    Ok(body_of(p, &spec, Vec::new(), Some(launch), labels))
}

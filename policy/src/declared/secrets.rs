//! Secrets an admin registered and granted: each a file under `docker.secrets_dir` on
//! the Docker host, mounted read-only at `/run/secrets/<name>` in the sessions of the
//! users it is granted to. A session's set is one of its facts, fixed at its create:
//! its container carries one label per secret (`termgate.secret.<name>` = the file's
//! path, never its value), from which dockgate rebuilds the same mounts.

use std::collections::BTreeMap;

use super::{not_declared, NotDeclared};
use crate::sandbox::{normalise, ContainerSpec, MountKind, MountSpec};

/// On a session container: one label per registered secret it mounts, the secret's
/// name after this prefix, the file's path on the Docker host as the value.
pub const SECRET_LABEL_PREFIX: &str = "termgate.secret.";

/// Where a session finds its secrets.
pub const SECRETS_TARGET_DIR: &str = "/run/secrets";

/// The registered secrets a session mounts: name → the file's path on the Docker host.
pub type SessionSecrets = BTreeMap<String, String>;

/// Where the secret `name` is mounted in a session.
pub fn secret_target(name: &str) -> String {
    format!("{SECRETS_TARGET_DIR}/{name}")
}

/// Whether `name` may name a secret: 1-64 characters of `A-Z a-z 0-9 . _ -`, not
/// starting with `.` (a plain file name under `/run/secrets`).
pub fn is_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The labels that carry a session's secrets.
pub fn secret_labels(secrets: &SessionSecrets) -> BTreeMap<String, String> {
    secrets
        .iter()
        .map(|(name, path)| (format!("{SECRET_LABEL_PREFIX}{name}"), path.clone()))
        .collect()
}

/// The secrets a container's labels name (every `termgate.secret.*` label), as
/// written; what they name is checked when the body is rebuilt from them.
pub fn secrets_from_labels<'a>(
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> SessionSecrets {
    labels
        .into_iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(SECRET_LABEL_PREFIX)
                .map(|name| (name.to_owned(), v.to_owned()))
        })
        .collect()
}

/// `spec` with each secret bound read-only at `/run/secrets/<name>`, after its other
/// mounts. Fails when a name is not a secret's, a path is not clean and absolute (no
/// `..`, `.` or doubled `/`), or a target is one the spec mounts already (a profile's
/// own secret of that name).
pub fn with_secrets(
    mut spec: ContainerSpec,
    secrets: &SessionSecrets,
) -> Result<ContainerSpec, NotDeclared> {
    for (name, path) in secrets {
        let field = || format!("Labels.{SECRET_LABEL_PREFIX}{name}");
        if !is_secret_name(name) {
            return Err(not_declared(
                field(),
                format!("{name:?} is not a secret name"),
            ));
        }
        if normalise(path).as_deref() != Some(path.as_str()) || path == "/" {
            return Err(not_declared(
                field(),
                format!("{path:?} is not a clean absolute path"),
            ));
        }
        let target = secret_target(name);
        if spec.mounts.iter().any(|m| m.target == target) {
            return Err(not_declared(
                field(),
                format!("the profile mounts {target} itself"),
            ));
        }
        spec.mounts.push(MountSpec {
            kind: MountKind::Bind,
            source: path.clone(),
            target,
            read_only: true,
        });
    }
    Ok(spec)
}

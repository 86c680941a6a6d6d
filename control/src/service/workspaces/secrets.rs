//! Secrets an admin registers: a name and a file on the Docker hosts under
//! `docker.secrets_dir`, granted to users and roles. Control records the name, the
//! path, who registered it, when and its grants; it never opens the file, so a value
//! never passes through it. A session made by a user a secret is granted to mounts it
//! read-only at `/run/secrets/<name>` (dockgate checks the file on the host); the set
//! is fixed when the session is made.

use std::borrow::Cow;

use config::Profile;
use policy::declared::{is_secret_name, SessionSecrets};
use policy::sandbox::normalise;
use policy::Principal;

use crate::error::ApiError;
use crate::model::Secret;
use crate::store::StoreError;

use super::super::clock::now;
use super::shared::is_grantee;
use super::Workspaces;

const fn refusal(status: u16, code: &'static str, message: &'static str) -> ApiError {
    ApiError {
        status,
        code,
        message: Cow::Borrowed(message),
    }
}

/// No secret by that name is registered.
const SECRET_NOT_FOUND: ApiError = refusal(404, "secret_not_found", "no such secret");
/// A name that is not a secret's, or a grant of the wrong form.
const INVALID_SECRET: ApiError = refusal(400, "invalid_secret", "invalid secret");
/// The configuration names no `docker.secrets_dir`: nothing can be registered.
const SECRETS_DIR_NOT_SET: ApiError = refusal(
    400,
    "secrets_dir_not_set",
    "docker.secrets_dir is not set: no secret can be registered",
);
/// A path with `..`, or empty, or with control characters.
const INVALID_SECRET_PATH: ApiError = refusal(
    400,
    "invalid_secret_path",
    "a secret's path names a file under docker.secrets_dir, without ..",
);
/// A path that is not under `docker.secrets_dir`.
const SECRET_OUTSIDE_DIR: ApiError = refusal(
    400,
    "secret_outside_dir",
    "the file is not under docker.secrets_dir",
);
/// A name registered already, or one a profile's own `secrets` uses.
const SECRET_NAME_TAKEN: ApiError = refusal(409, "secret_name_taken", "that secret name is taken");

fn admin(who: &Principal) -> Result<(), ApiError> {
    if who.admin {
        Ok(())
    } else {
        Err(ApiError::ADMIN_REQUIRED.with_message("only an admin manages secrets"))
    }
}

fn refused(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => SECRET_NOT_FOUND,
        StoreError::Conflict(m) => SECRET_NAME_TAKEN.with_message(m),
        other => other.into(),
    }
}

/// The file a registration names, as an absolute clean path under `dir`: `path`
/// absolute, or relative to `dir`. Only the text is looked at.
fn checked_path(dir: Option<&std::path::Path>, path: &str) -> Result<String, ApiError> {
    let dir = dir
        .and_then(|d| normalise(&d.display().to_string()))
        .ok_or(SECRETS_DIR_NOT_SET)?;
    if path.is_empty() || path.len() > 4096 || path.chars().any(char::is_control) {
        return Err(INVALID_SECRET_PATH.with_message(format!("{path:?} is not a file's path")));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(INVALID_SECRET_PATH.with_message(format!(
            "{path:?} holds \"..\": name the file under docker.secrets_dir itself"
        )));
    }
    let full = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{dir}/{path}")
    };
    match normalise(&full) {
        Some(p) if p.starts_with(&format!("{}/", dir.trim_end_matches('/'))) => Ok(p),
        _ => Err(SECRET_OUTSIDE_DIR.with_message(format!(
            "{path:?} is not a file under docker.secrets_dir ({dir})"
        ))),
    }
}

fn checked_grants(grants: &[String]) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<String> = Vec::new();
    for to in grants {
        if !is_grantee(to) {
            return Err(INVALID_SECRET
                .with_message(format!("grant {to:?}: expected user:<sub> or role:<role>")));
        }
        if !out.contains(to) {
            out.push(to.clone());
        }
    }
    Ok(out)
}

impl Workspaces {
    /// Every registered secret (admins).
    pub fn secrets(&self, who: &Principal) -> Result<Vec<Secret>, ApiError> {
        admin(who)?;
        Ok(self.core.store().list_secrets()?)
    }

    /// The secret `name` (admins).
    pub fn secret(&self, who: &Principal, name: &str) -> Result<Secret, ApiError> {
        admin(who)?;
        self.core.store().get_secret(name)?.ok_or(SECRET_NOT_FOUND)
    }

    /// Registers the secret `name`, the file `path` under `docker.secrets_dir`
    /// (absolute, or relative to it), granted to `grants` (admins). The file is not
    /// opened: dockgate checks it on the Docker host at each create that mounts it.
    pub fn register_secret(
        &self,
        who: &Principal,
        name: &str,
        path: &str,
        grants: &[String],
    ) -> Result<Secret, ApiError> {
        admin(who)?;
        if !is_secret_name(name) {
            return Err(INVALID_SECRET.with_message(format!(
                "{name:?}: secret names are 1-64 characters of A-Z a-z 0-9 . _ - (not starting with .)"
            )));
        }
        let path = checked_path(self.core.config().docker.secrets_dir.as_deref(), path)?;
        if let Some((profile, _)) = self
            .core
            .config()
            .profiles
            .iter()
            .find(|(_, p)| p.secrets.contains_key(name))
        {
            return Err(SECRET_NAME_TAKEN.with_message(format!(
                "profile {profile:?} declares a secret named {name:?} in its configuration"
            )));
        }
        let s = Secret {
            name: name.to_owned(),
            path,
            registered_by: who.sub.clone(),
            registered_at: now(),
            grants: checked_grants(grants)?,
        };
        self.core.store().insert_secret(&s).map_err(refused)?;
        tracing::info!(target: "audit", sub = %who.sub, secret = %s.name, path = %s.path, grants = %s.grants.join(","), "secret registered");
        Ok(s)
    }

    /// Replaces the grants of the secret `name` (admins). Sessions made before keep
    /// what they mount; the next ones mount it as granted now.
    pub fn grant_secret(
        &self,
        who: &Principal,
        name: &str,
        grants: &[String],
    ) -> Result<Secret, ApiError> {
        admin(who)?;
        let grants = checked_grants(grants)?;
        let (s, before) = self
            .core
            .store()
            .change_secret(name, |s| Ok(std::mem::replace(&mut s.grants, grants)))
            .map_err(refused)?;
        let added: Vec<&str> = s
            .grants
            .iter()
            .filter(|g| !before.contains(g))
            .map(String::as_str)
            .collect();
        let revoked: Vec<&str> = before
            .iter()
            .filter(|g| !s.grants.contains(g))
            .map(String::as_str)
            .collect();
        if !added.is_empty() {
            tracing::info!(target: "audit", sub = %who.sub, secret = %s.name, to = %added.join(","), grants = %s.grants.join(","), "secret granted");
        }
        if !revoked.is_empty() {
            tracing::info!(target: "audit", sub = %who.sub, secret = %s.name, from = %revoked.join(","), grants = %s.grants.join(","), "secret grant revoked");
        }
        Ok(s)
    }

    /// Forgets the secret `name` (admins): the next sessions do not mount it; the
    /// file is not touched.
    pub fn delete_secret(&self, who: &Principal, name: &str) -> Result<(), ApiError> {
        admin(who)?;
        let s = self.core.store().delete_secret(name).map_err(refused)?;
        tracing::info!(target: "audit", sub = %who.sub, secret = %s.name, path = %s.path, "secret deleted");
        Ok(())
    }

    /// The registered secrets a new session of `who` on `profile` mounts: those granted
    /// to them or one of their roles, but for a name the profile's own `secrets` uses
    /// (the profile's wins) or a file no longer under `docker.secrets_dir`.
    pub(in crate::service) fn granted_secrets(
        &self,
        who: &Principal,
        profile: &Profile,
    ) -> Result<SessionSecrets, ApiError> {
        let mut out = SessionSecrets::new();
        for s in self.core.store().list_secrets()? {
            if !s.granted_to(&who.sub, &who.roles) || profile.secrets.contains_key(&s.name) {
                continue;
            }
            match checked_path(self.core.config().docker.secrets_dir.as_deref(), &s.path) {
                Ok(path) if path == s.path => {
                    out.insert(s.name, path);
                }
                _ => {
                    tracing::warn!(secret = %s.name, path = %s.path, "a granted secret's file is no longer under docker.secrets_dir; not mounted");
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::checked_path;

    #[test]
    fn a_path_is_a_file_under_the_directory_as_written_or_refused_naming_why() {
        let dir = Some(Path::new("/srv/secrets"));
        for (given, want) in [
            ("token", "/srv/secrets/token"),
            ("team/key", "/srv/secrets/team/key"),
            ("/srv/secrets/token", "/srv/secrets/token"),
            ("/srv//secrets/./token", "/srv/secrets/token"),
        ] {
            assert_eq!(checked_path(dir, given).unwrap(), want, "{given}");
        }
        for (given, code) in [
            ("../token", "invalid_secret_path"),
            ("/srv/secrets/../etc/passwd", "invalid_secret_path"),
            ("", "invalid_secret_path"),
            ("tok\nen", "invalid_secret_path"),
            ("/etc/passwd", "secret_outside_dir"),
            ("/srv/secrets", "secret_outside_dir"),
            ("/srv/secrets-other/token", "secret_outside_dir"),
            (".", "secret_outside_dir"),
        ] {
            assert_eq!(
                checked_path(dir, given).unwrap_err().code,
                code,
                "{given:?}"
            );
        }
        assert_eq!(
            checked_path(None, "token").unwrap_err().code,
            "secrets_dir_not_set"
        );
    }
}

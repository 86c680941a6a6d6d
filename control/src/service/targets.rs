//! [`Targets`]: existing ttyds that control registers and feeds to gateways but never
//! starts, stops or reconciles (design §7). Admins register them (configuration or
//! API); users see the ones that allow them next to their sessions.

use std::path::Path;
use std::sync::Arc;

use config::TargetConfig;
use policy::target::TargetDefinition;
use policy::{Principal, SessionId};
use sha2::Digest;

use super::clock::now;
use super::core::Core;
use crate::error::ApiError;
use crate::model::{Target, TargetCredential};
use crate::store::StoreError;

/// A change of who may open a target: each list replaced when given.
#[derive(Debug, Clone, Default)]
pub struct TargetAccessPatch {
    /// New list of allowed `sub`s.
    pub users: Option<Vec<String>>,
    /// New list of allowed roles.
    pub roles: Option<Vec<String>>,
}

/// Who registered the targets of the configuration.
const FROM_CONFIG: &str = "config";

/// The id of a configured target: derived from the deployment and its name, so it is
/// the same at every start and in every control of the deployment.
fn config_target_id(instance: &str, name: &str) -> SessionId {
    let digest = sha2::Sha256::digest(format!("termgate-target\0{instance}\0{name}"));
    let mut bytes = [0u8; 10];
    bytes.copy_from_slice(&digest[..10]);
    SessionId::from_random(bytes)
}

/// The credential of a request, checked: exactly one kind, and a file that exists and
/// resolves inside `dir` (`gateway.target_credentials_dir`, resolved; none: no file at
/// all), never under `/proc`, `/sys` or `/dev` (`policy::target::credential_file_ok`).
/// The gateway checks the file again each time it reads it: this check says so at
/// once, to the admin registering it.
fn credential(
    req: Option<&config::TargetCredentialConfig>,
    dir: Option<&Path>,
) -> Result<Option<TargetCredential>, ApiError> {
    let invalid =
        |field: &str, why: &str| ApiError::INVALID_TARGET.with_message(format!("{field}: {why}"));
    match req {
        None => Ok(None),
        Some(config::TargetCredentialConfig {
            basic_file: Some(path),
            header: None,
        }) => {
            if !path.is_absolute() {
                return Err(invalid("credential.basic_file", "must be an absolute path"));
            }
            let unreadable = |e: std::io::Error| {
                let why = format!("cannot read {}: {e}", path.display());
                invalid("credential.basic_file", &why)
            };
            let resolved = std::fs::canonicalize(path).map_err(unreadable)?;
            let dir = match dir {
                Some(d) => Some(std::fs::canonicalize(d).map_err(|e| {
                    ApiError::INTERNAL.with_message(format!(
                        "gateway.target_credentials_dir {}: {e}",
                        d.display()
                    ))
                })?),
                None => None,
            };
            policy::target::credential_file_ok(
                &resolved.to_string_lossy(),
                dir.as_deref().map(|d| d.to_string_lossy()).as_deref(),
            )
            .map_err(|why| {
                invalid(
                    "credential.basic_file",
                    &format!("{} ({}): {why}", path.display(), resolved.display()),
                )
            })?;
            std::fs::File::open(&resolved).map_err(unreadable)?;
            Ok(Some(TargetCredential::BasicFile {
                path: path.to_string_lossy().into_owned(),
            }))
        }
        Some(config::TargetCredentialConfig {
            basic_file: None,
            header: Some(name),
        }) => Ok(Some(TargetCredential::Header { name: name.clone() })),
        Some(_) => Err(invalid(
            "credential",
            "set exactly one of basic_file or header",
        )),
    }
}

/// Refuses a definition with its first problem, naming the field.
fn check(def: TargetDefinition<'_>) -> Result<(), ApiError> {
    match def.check().1.into_iter().next() {
        None => Ok(()),
        Some(p) => {
            Err(ApiError::INVALID_TARGET.with_message(format!("{}: {}", p.field, p.message)))
        }
    }
}

/// The targets: ttyds control registers but never runs.
#[derive(Clone)]
pub struct Targets {
    core: Arc<Core>,
}

impl Targets {
    pub(super) fn new(core: Arc<Core>) -> Self {
        Targets { core }
    }

    fn admin_only(&self, who: &Principal) -> Result<(), ApiError> {
        if self.core.is_locked(&who.sub)? {
            return Err(ApiError::LOCKED);
        }
        if !who.admin {
            return Err(ApiError::ADMIN_REQUIRED.with_message("only an admin may manage targets"));
        }
        Ok(())
    }

    /// Registers a target (admin only).
    pub fn create_target(&self, who: &Principal, req: TargetConfig) -> Result<Target, ApiError> {
        self.admin_only(who)?;
        let dir = self.core.config().target_credentials_dir();
        let credential = credential(req.credential.as_ref(), dir.as_deref())?;
        check(TargetDefinition {
            name: &req.name,
            upstream: &req.upstream,
            users: &req.users,
            roles: &req.roles,
            credential: credential.as_ref(),
        })?;
        let mut random = [0u8; 10];
        getrandom::getrandom(&mut random)
            .map_err(|e| ApiError::INTERNAL.with_message(format!("no randomness: {e}")))?;
        let target = Target {
            id: SessionId::from_random(random),
            name: req.name,
            upstream: req.upstream,
            users: req.users,
            roles: req.roles,
            credential,
            created_at: now(),
            created_by: who.sub.to_string(),
            from_config: false,
        };
        self.core.store().put_target(&target)?;
        tracing::info!(target: "audit", sub = %who.sub, session = %target.id, name = %target.name, upstream = %target.upstream, "target registered");
        Ok(target)
    }

    /// Every target (admin only).
    pub fn list_targets(&self, who: &Principal) -> Result<Vec<Target>, ApiError> {
        self.admin_only(who)?;
        Ok(self.core.store().list_targets()?)
    }

    /// Changes who may open a target (admin only); terminals of users it no longer
    /// allows are closed by the gateways when the change reaches them.
    pub fn patch_target(
        &self,
        who: &Principal,
        id: &SessionId,
        patch: TargetAccessPatch,
    ) -> Result<Target, ApiError> {
        self.admin_only(who)?;
        let mut target = self
            .core
            .store()
            .get_target(id)?
            .ok_or(ApiError::NOT_FOUND)?;
        if target.from_config {
            return Err(ApiError::CONFLICT
                .with_message("this target is defined in the configuration; change it there"));
        }
        if let Some(users) = patch.users {
            target.users = users;
        }
        if let Some(roles) = patch.roles {
            target.roles = roles;
        }
        check(TargetDefinition {
            name: &target.name,
            upstream: &target.upstream,
            users: &target.users,
            roles: &target.roles,
            credential: target.credential.as_ref(),
        })?;
        self.core.store().put_target(&target)?;
        tracing::info!(target: "audit", sub = %who.sub, session = %target.id, users = ?target.users, roles = ?target.roles, "target access changed");
        Ok(target)
    }

    /// Removes a target (admin only); its live terminals are closed.
    pub fn delete_target(&self, who: &Principal, id: &SessionId) -> Result<(), ApiError> {
        self.admin_only(who)?;
        let target = self
            .core
            .store()
            .get_target(id)?
            .ok_or(ApiError::NOT_FOUND)?;
        if target.from_config {
            return Err(ApiError::CONFLICT
                .with_message("this target is defined in the configuration; remove it there"));
        }
        match self.core.store().delete_target(id) {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(target: "audit", sub = %who.sub, session = %id, name = %target.name, "target removed");
        Ok(())
    }

    /// The targets `who` may open, for the session list.
    pub fn targets_for(&self, who: &Principal) -> Result<Vec<Target>, ApiError> {
        let mut targets = self.core.store().list_targets()?;
        targets.retain(|t| t.allows(who));
        Ok(targets)
    }

    /// The target with this id if `who` may open it; anything else is the one 404.
    pub fn target_for(&self, who: &Principal, id: &SessionId) -> Result<Option<Target>, ApiError> {
        Ok(self.core.store().get_target(id)?.filter(|t| t.allows(who)))
    }

    /// Makes the stored targets of the configuration what the configuration says:
    /// new and changed ones written, removed ones deleted (their terminals close).
    /// Targets registered through the API are left alone.
    pub fn apply_config_targets(&self) -> Result<usize, ApiError> {
        let config = &self.core.config();
        let mut wanted = Vec::new();
        for t in &config.targets {
            let credential = config
                .target_credential(t)
                .map_err(|e| ApiError::INVALID_TARGET.with_message(e))?;
            let id = config_target_id(&config.instance, &t.name);
            let stored = self.core.store().get_target(&id)?;
            let target = Target {
                id,
                name: t.name.clone(),
                upstream: t.upstream.clone(),
                users: t.users.clone(),
                roles: t.roles.clone(),
                credential,
                created_at: stored.as_ref().map_or_else(now, |s| s.created_at),
                created_by: FROM_CONFIG.into(),
                from_config: true,
            };
            if stored.as_ref() != Some(&target) {
                self.core.store().put_target(&target)?;
            }
            wanted.push(id);
        }
        for stale in self
            .core
            .store()
            .list_targets()?
            .into_iter()
            .filter(|t| t.from_config && !wanted.contains(&t.id))
        {
            self.core.store().delete_target(&stale.id)?;
            tracing::info!(target: "audit", session = %stale.id, name = %stale.name, "configured target removed");
        }
        Ok(wanted.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_target_ids_are_stable_and_differ_by_name_and_instance() {
        let a = config_target_id("termgate", "build-box");
        assert_eq!(a, config_target_id("termgate", "build-box"));
        assert_ne!(a, config_target_id("termgate", "build-box-2"));
        assert_ne!(a, config_target_id("other", "build-box"));
        assert!(SessionId::parse(a.as_str()).is_ok());
    }

    fn req(basic_file: Option<&str>, header: Option<&str>) -> config::TargetCredentialConfig {
        config::TargetCredentialConfig {
            basic_file: basic_file.map(std::path::PathBuf::from),
            header: header.map(str::to_owned),
        }
    }

    fn code(r: Result<Option<TargetCredential>, ApiError>) -> String {
        r.unwrap_err().message.into_owned()
    }

    #[test]
    fn a_credential_is_one_kind_and_an_existing_absolute_file() {
        let dir = tempfile::tempdir().unwrap();
        let credential = |r| credential(Some(&r), Some(dir.path()));
        assert!(code(credential(req(Some("/x"), Some("H")))).starts_with("credential:"));
        assert!(code(credential(req(None, None))).starts_with("credential:"));
        assert!(code(credential(req(Some("rel"), None))).starts_with("credential.basic_file:"));
        assert!(code(credential(req(Some("/nonexistent/cred"), None)))
            .starts_with("credential.basic_file:"));
        assert_eq!(
            credential(req(None, Some("X-Remote-User"))).unwrap(),
            Some(TargetCredential::Header {
                name: "X-Remote-User".into()
            })
        );
    }

    #[test]
    fn a_credential_file_resolves_inside_the_credentials_directory_or_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("build.cred");
        std::fs::write(&inside, "u:p\n").unwrap();
        let outside_dir = tempfile::tempdir().unwrap();
        let outside = outside_dir.path().join("other.cred");
        std::fs::write(&outside, "u:p\n").unwrap();
        let escape = dir.path().join("escape.cred");
        std::os::unix::fs::symlink(&outside, &escape).unwrap();
        let environ = dir.path().join("environ.cred");
        std::os::unix::fs::symlink("/proc/self/environ", &environ).unwrap();
        let path = |p: &Path| p.to_str().unwrap().to_owned();

        let ok = credential(Some(&req(Some(&path(&inside)), None)), Some(dir.path()));
        assert_eq!(
            ok.unwrap(),
            Some(TargetCredential::BasicFile {
                path: path(&inside)
            })
        );
        for refused in [
            path(&outside),
            path(&escape),
            path(&environ),
            "/proc/self/environ".into(),
            // Both temporary directories are in one: `..` leads from one to the other.
            format!(
                "{}/../{}/other.cred",
                path(dir.path()),
                outside_dir.path().file_name().unwrap().to_str().unwrap()
            ),
        ] {
            let message = code(credential(
                Some(&req(Some(&refused), None)),
                Some(dir.path()),
            ));
            assert!(
                message.starts_with("credential.basic_file:")
                    && (message.contains("outside gateway.target_credentials_dir")
                        || message.contains("under /proc")
                        || message.contains("cannot read")),
                "{refused}: {message}"
            );
        }
        // Without the directory, no file at all.
        let message = code(credential(Some(&req(Some(&path(&inside)), None)), None));
        assert!(
            message.contains("gateway.target_credentials_dir, which is not set"),
            "{message}"
        );
    }
}

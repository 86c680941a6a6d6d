//! Shared workspaces, an admin's: made by termgate for sharing, or an existing volume
//! the configuration lets an admin register (`docker.shared_volumes`, borrowed: never
//! removed). Each is granted to users and roles, read-only or read-write; a user
//! granted one chooses it for a session like one of their own. Ending or deleting a
//! session never touches it; only an admin's delete does, and removes the volume only
//! of one termgate made.

use policy::declared::shared_volume_name;
use policy::{Principal, SessionId};

use crate::error::ApiError;
use crate::model::{Session, Workspace, WorkspaceGrant, WorkspaceOrigin, WorkspaceState};
use crate::store::StoreError;

use super::super::clock::now;
use super::Workspaces;
use super::{checked_name, new_id, refused};

fn admin(who: &Principal) -> Result<(), ApiError> {
    if who.admin {
        Ok(())
    } else {
        Err(ApiError::ADMIN_REQUIRED.with_message("only an admin manages shared workspaces"))
    }
}

/// Whether `to` names whom a grant is for: `user:<sub>` or `role:<role>`.
pub(super) fn is_grantee(to: &str) -> bool {
    match to.split_once(':') {
        Some(("user", u)) => policy::Sub::parse(u).is_some(),
        Some(("role", r)) => {
            (1..=128).contains(&r.len()) && r.chars().all(|c| !c.is_control() && c != ':')
        }
        _ => false,
    }
}

/// A grant as the API takes it: `user:<sub>` or `role:<role>`, `ro` or `rw`.
fn checked_grant(to: &str, access: &str) -> Result<WorkspaceGrant, ApiError> {
    let bad = |m: String| ApiError::INVALID_WORKSPACE.with_message(m);
    if !is_grantee(to) {
        return Err(bad(format!(
            "grant {to:?}: expected user:<sub> or role:<role>"
        )));
    }
    let read_only = match access {
        "ro" => true,
        "rw" => false,
        other => return Err(bad(format!("access {other:?}: expected ro or rw"))),
    };
    Ok(WorkspaceGrant {
        to: to.to_owned(),
        read_only,
    })
}

impl Workspaces {
    /// Every shared workspace, with the sessions that use it (admins).
    pub fn shared_workspaces(
        &self,
        who: &Principal,
    ) -> Result<Vec<(Workspace, Vec<Session>)>, ApiError> {
        admin(who)?;
        let mut out = Vec::new();
        for w in self.core.store().list_workspaces(None)? {
            if w.origin.is_shared() {
                let users = self.core.store().users_of(&w.id)?;
                out.push((w, users));
            }
        }
        Ok(out)
    }

    fn shared_workspace(&self, who: &Principal, id: &SessionId) -> Result<Workspace, ApiError> {
        admin(who)?;
        self.core
            .store()
            .get_workspace(id)?
            .filter(|w| w.origin.is_shared())
            .ok_or(ApiError::WORKSPACE_NOT_FOUND)
    }

    /// Makes a shared workspace named `name` (admins): termgate's own volume, made where
    /// it is first used, or with `volume` an existing one the configuration lists in
    /// `docker.shared_volumes`, on `host` (default: the first host).
    pub fn create_shared_workspace(
        &self,
        who: &Principal,
        name: &str,
        volume: Option<&str>,
        host: Option<&str>,
    ) -> Result<Workspace, ApiError> {
        admin(who)?;
        let id = new_id()?;
        let bad = |m: String| ApiError::INVALID_WORKSPACE.with_message(m);
        let (origin, volume, host) = match volume {
            None => (
                WorkspaceOrigin::Shared,
                shared_volume_name(&self.core.config().instance, &id),
                None,
            ),
            Some(v) => {
                if !self
                    .core
                    .config()
                    .docker
                    .shared_volumes
                    .iter()
                    .any(|s| s == v)
                {
                    return Err(bad(format!(
                        "volume {v:?} is not in docker.shared_volumes, the volumes that may be shared"
                    )));
                }
                let host = match host {
                    Some(h) if self.core.hosts().get(h).is_some() => h.to_owned(),
                    Some(h) => return Err(bad(format!("no Docker host named {h:?}"))),
                    None => self
                        .core
                        .hosts()
                        .iter()
                        .next()
                        .map(|h| h.name().to_owned())
                        .ok_or_else(|| bad("no Docker host".into()))?,
                };
                (WorkspaceOrigin::Borrowed, v.to_owned(), Some(host))
            }
        };
        let w = Workspace {
            id,
            owner: who.sub.clone(),
            name: checked_name(name)?,
            volume,
            origin,
            host,
            state: WorkspaceState::Ready,
            created_at: now(),
            size_bytes: None,
            copied_from: None,
            grants: Vec::new(),
        };
        self.core.store().insert_workspace(&w).map_err(refused)?;
        tracing::info!(target: "audit", sub = %who.sub, workspace = %w.id, name = %w.name, volume = %w.volume, borrowed = w.origin == WorkspaceOrigin::Borrowed, "shared workspace registered");
        Ok(w)
    }

    /// Renames a shared workspace and/or replaces its grants (admins); `grants` are
    /// `(user:<sub>|role:<role>, ro|rw)`. What running sessions mount stays as it was.
    pub fn update_shared_workspace(
        &self,
        who: &Principal,
        id: &SessionId,
        name: Option<&str>,
        grants: Option<&[(String, String)]>,
    ) -> Result<Workspace, ApiError> {
        self.shared_workspace(who, id)?;
        let name = name.map(checked_name).transpose()?;
        let grants = grants
            .map(|g| {
                g.iter()
                    .map(|(to, access)| checked_grant(to, access))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let (w, ()) = self
            .core
            .store()
            .change_workspace(id, |w, _| {
                if let Some(n) = name {
                    w.name = n;
                }
                if let Some(g) = grants {
                    w.grants = g;
                }
                Ok(())
            })
            .map_err(refused)?;
        let granted: Vec<String> = w
            .grants
            .iter()
            .map(|g| format!("{}:{}", g.to, if g.read_only { "ro" } else { "rw" }))
            .collect();
        tracing::info!(target: "audit", sub = %who.sub, workspace = %w.id, name = %w.name, grants = %granted.join(","), "shared workspace granted");
        Ok(w)
    }

    /// Deletes a shared workspace (admins): refused while a session uses it; the volume
    /// goes only when termgate made it, a borrowed one stays.
    pub async fn delete_shared_workspace(
        &self,
        who: &Principal,
        id: &SessionId,
    ) -> Result<(), ApiError> {
        let w = self.shared_workspace(who, id)?;
        if let Some(s) = self.core.store().users_of(id)?.first() {
            return Err(super::in_use(&w, s));
        }
        if let Some(host) = &w.host {
            self.remove_created_volume(host, &w).await?;
        }
        self.core
            .store()
            .delete_workspace(id, |w, users| match users.first() {
                Some(s) => Err(StoreError::Conflict(
                    super::in_use(w, s).message.into_owned(),
                )),
                None => Ok(()),
            })
            .map_err(refused)?;
        tracing::info!(target: "audit", sub = %who.sub, workspace = %w.id, name = %w.name, volume = %w.volume, volume_removed = w.origin == WorkspaceOrigin::Shared, "shared workspace deleted");
        Ok(())
    }
}

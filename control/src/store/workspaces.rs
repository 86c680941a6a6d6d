//! Workspace records: made, renamed, changed and deleted under the write lock, where
//! the sessions that use a workspace cannot move, so that "in use" is decided on what
//! is stored.

use policy::{SessionId, Sub};

use super::error::{Result, StoreError};
use super::tx::{abort, encode};
use super::Store;
use crate::model::{Session, Workspace, WorkspaceState};

impl Store {
    /// Files a new workspace; flushed. A name the owner already uses is a `Conflict`,
    /// as is an id already used by a session, target or workspace.
    pub fn insert_workspace(&self, w: &Workspace) -> Result<()> {
        let _guard = self.write_lock()?;
        self.name_free(&w.owner, &w.name, None)?;
        self.transact(|tx| {
            if tx.id_used(&w.id)? {
                return Err(abort(StoreError::Conflict(format!(
                    "id {} is already used",
                    w.id
                ))));
            }
            tx.workspaces.insert(w.id.as_str().as_bytes(), encode(w)?)?;
            Ok(())
        })?;
        self.settle()
    }

    /// Changes a workspace under the write lock: `f` sees the record and the active
    /// sessions that use it, and either changes the record or refuses. `NotFound` when
    /// there is none.
    pub fn change_workspace<T>(
        &self,
        id: &SessionId,
        f: impl FnOnce(&mut Workspace, &[Session]) -> Result<T>,
    ) -> Result<(Workspace, T)> {
        let _guard = self.write_lock()?;
        let mut w = self.get_workspace(id)?.ok_or(StoreError::NotFound)?;
        let users = self.users_of(id)?;
        let before = w.name.clone();
        let out = f(&mut w, &users)?;
        if w.name != before {
            self.name_free(&w.owner, &w.name, Some(id))?;
        }
        self.transact(|tx| {
            tx.workspaces.insert(id.as_str().as_bytes(), encode(&w)?)?;
            Ok(())
        })?;
        self.settle()?;
        Ok((w, out))
    }

    /// Deletes a workspace's record if `may` allows it, seeing the record and the
    /// active sessions that use it; flushed. `NotFound` when there is none.
    pub fn delete_workspace(
        &self,
        id: &SessionId,
        may: impl FnOnce(&Workspace, &[Session]) -> Result<()>,
    ) -> Result<Workspace> {
        let _guard = self.write_lock()?;
        let w = self.get_workspace(id)?.ok_or(StoreError::NotFound)?;
        may(&w, &self.users_of(id)?)?;
        self.transact(|tx| {
            tx.workspaces.remove(id.as_str().as_bytes())?;
            Ok(())
        })?;
        self.settle()?;
        Ok(w)
    }

    /// Files `copy`, a workspace being filled from `source`, if `source` is ready and
    /// no active session uses it (a copy is taken only from an idle workspace);
    /// flushed. Returns the source as it is.
    pub fn insert_copy(&self, source: &SessionId, copy: &Workspace) -> Result<Workspace> {
        let _guard = self.write_lock()?;
        let from = self.get_workspace(source)?.ok_or(StoreError::NotFound)?;
        if from.owner != copy.owner && !from.origin.is_shared() {
            return Err(StoreError::NotFound);
        }
        if let Some(s) = self.users_of(source)?.first() {
            return Err(StoreError::Conflict(format!(
                "workspace {:?} is in use by session {} ({:?}); end it first",
                from.name, s.id, s.name
            )));
        }
        if from.state != WorkspaceState::Ready {
            return Err(StoreError::Conflict(format!(
                "workspace {:?} is not ready",
                from.name
            )));
        }
        self.name_free(&copy.owner, &copy.name, None)?;
        self.transact(|tx| {
            if tx.id_used(&copy.id)? {
                return Err(abort(StoreError::Conflict(format!(
                    "id {} is already used",
                    copy.id
                ))));
            }
            tx.workspaces
                .insert(copy.id.as_str().as_bytes(), encode(copy)?)?;
            Ok(())
        })?;
        self.settle()?;
        Ok(from)
    }

    /// The workspace with this id.
    pub fn get_workspace(&self, id: &SessionId) -> Result<Option<Workspace>> {
        let key = id.as_str().as_bytes();
        self.t()?
            .workspaces
            .get(key)?
            .map(|v| decode_workspace(key, &v))
            .transpose()
    }

    /// Every workspace of `owner` (everyone's for `None`), sorted by name.
    pub fn list_workspaces(&self, owner: Option<&Sub>) -> Result<Vec<Workspace>> {
        let mut out = Vec::new();
        for item in self.t()?.workspaces.iter() {
            let (key, value) = item?;
            let w = decode_workspace(&key, &value)?;
            if owner.is_none_or(|o| *o == w.owner) {
                out.push(w);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    /// The active sessions that mount workspace `id`.
    pub fn users_of(&self, id: &SessionId) -> Result<Vec<Session>> {
        Ok(self
            .list_active(None)?
            .into_iter()
            .filter(|s| s.workspace.as_ref().and_then(|w| w.id.as_ref()) == Some(id))
            .collect())
    }

    /// Whether a workspace is being copied from: no session may start on it then.
    pub(super) fn being_copied(&self, id: &SessionId) -> Result<bool> {
        Ok(self
            .list_workspaces(None)?
            .iter()
            .any(|w| w.state == WorkspaceState::Copying { from: *id }))
    }

    fn name_free(&self, owner: &Sub, name: &str, except: Option<&SessionId>) -> Result<()> {
        let taken = self
            .list_workspaces(Some(owner))?
            .into_iter()
            .any(|w| w.name == name && Some(&w.id) != except);
        if taken {
            return Err(StoreError::Conflict(format!(
                "you already have a workspace named {name:?}"
            )));
        }
        Ok(())
    }
}

fn decode_workspace(key: &[u8], value: &[u8]) -> Result<Workspace> {
    let name = String::from_utf8_lossy(key);
    let w: Workspace = serde_json::from_slice(value)
        .map_err(|e| StoreError::undecodable(format!("workspace {name}"), e))?;
    if w.id.as_str().as_bytes() != key {
        return Err(StoreError::corrupt(format!(
            "workspace stored under {name} says id {}",
            w.id
        )));
    }
    Ok(w)
}

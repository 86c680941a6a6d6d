//! [`Workspaces`]: a user's volumes that outlive sessions. Listing, making, renaming and
//! deleting them; which one a new session mounts; and copies, made by a throwaway job
//! container from an idle workspace.
//!
//! Owned by evidence: termgate removes a volume only when it made it (a `created`
//! record, and labels written in the same step that dockgate checks again). A home
//! workspace (the user's home volume) is never removed.
//!
//! The same type holds an admin's shared workspaces ([`shared`]) and the secrets
//! sessions mount ([`secrets`]).

use std::sync::Arc;
use std::time::Duration;

use config::Profile;
use futures_util::{Stream, StreamExt};
use policy::declared::{
    copy_job_body, copy_job_name, workspace_volume_name, CopyFacts, WorkspaceMode,
};
use policy::{Principal, SessionId, Sub};

use crate::docker::{ContainerEvent, ContainerRequest, Docker, DockerError, EventAction};
use crate::error::ApiError;
use crate::model::{Session, SessionWorkspace, Workspace, WorkspaceOrigin, WorkspaceState};
use crate::store::StoreError;

use super::clock::now;
use super::core::Core;
use super::failpoint::failpoint;
use super::names::home_volume_name;

mod secrets;
mod shared;

/// The name of a user's home workspace.
pub const HOME_WORKSPACE: &str = "home";
/// How often a copy job is asked whether it still runs, should the event of its end
/// not come (Docker's event stream broke).
const COPY_CHECK: Duration = Duration::from_secs(2);

/// A workspace name: 1-64 printable characters.
pub(super) fn checked_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 64 || name.chars().any(super::names::invisible) {
        return Err(ApiError::INVALID_NAME);
    }
    Ok(name.to_owned())
}

pub(super) fn new_id() -> Result<SessionId, ApiError> {
    let mut random = [0u8; 10];
    getrandom::getrandom(&mut random)
        .map_err(|e| ApiError::INTERNAL.with_message(format!("no randomness: {e}")))?;
    Ok(SessionId::from_random(random))
}

/// A store refusal about a workspace, as the API says it.
pub(super) fn refused(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::WORKSPACE_NOT_FOUND,
        StoreError::Conflict(m) => ApiError::WORKSPACE_IN_USE.with_message(m),
        other => other.into(),
    }
}

/// The workspaces, shared workspaces and secrets.
#[derive(Clone)]
pub struct Workspaces {
    core: Arc<Core>,
    /// Asks the volume pass to measure workspaces' sizes ([`crate::volumes`]).
    sizes_wanted: Arc<tokio::sync::Notify>,
}

impl Workspaces {
    pub(super) fn new(core: Arc<Core>) -> Self {
        Workspaces {
            core,
            sizes_wanted: Arc::default(),
        }
    }

    /// Asks for the workspaces' sizes to be measured soon: a session on one ended, or
    /// a copy finished.
    pub fn measure_workspaces_soon(&self) {
        self.sizes_wanted.notify_one();
    }

    /// What the volume pass waits on besides its interval.
    pub(crate) fn sizes_wanted(&self) -> &tokio::sync::Notify {
        &self.sizes_wanted
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &config::Config {
        self.core.config()
    }

    /// The Docker hosts; the volume pass lists and measures volumes through them.
    pub(crate) fn hosts(&self) -> &crate::hosts::Hosts {
        self.core.hosts()
    }

    /// The store; the volume pass reads and records workspaces' sizes directly.
    pub(crate) fn store(&self) -> &crate::store::Store {
        self.core.store()
    }

    /// Whether any profile mounts workspaces.
    fn has_workspaces(&self) -> bool {
        self.core
            .config()
            .profiles
            .values()
            .any(|p| p.workspace_mode() != WorkspaceMode::None)
    }

    /// `who`'s home workspace, its record made on first use.
    pub fn home_workspace(&self, owner: &Sub) -> Result<Workspace, ApiError> {
        let volume = home_volume_name(&self.core.config().instance, owner);
        let list = self.core.store().list_workspaces(Some(owner))?;
        if let Some(w) = list.into_iter().find(|w| w.origin == WorkspaceOrigin::Home) {
            return Ok(w);
        }
        let w = Workspace {
            id: new_id()?,
            owner: owner.clone(),
            name: HOME_WORKSPACE.into(),
            volume,
            origin: WorkspaceOrigin::Home,
            host: None,
            state: WorkspaceState::Ready,
            created_at: now(),
            size_bytes: None,
            copied_from: None,
            grants: Vec::new(),
        };
        match self.core.store().insert_workspace(&w) {
            Ok(()) => Ok(w),
            // Made meanwhile by a racing call (or the name is taken by one of theirs).
            Err(StoreError::Conflict(_)) => self
                .core
                .store()
                .list_workspaces(Some(owner))?
                .into_iter()
                .find(|w| w.origin == WorkspaceOrigin::Home)
                .ok_or_else(|| {
                    ApiError::WORKSPACE_IN_USE.with_message(
                        "a workspace named \"home\" exists; rename it to get the home workspace back",
                    )
                }),
            Err(e) => Err(e.into()),
        }
    }

    /// `who`'s workspaces (the home one first made if any profile mounts workspaces)
    /// and the shared ones granted to them, each with the active sessions that use it.
    pub fn workspaces(&self, who: &Principal) -> Result<Vec<(Workspace, Vec<Session>)>, ApiError> {
        if self.has_workspaces() {
            self.home_workspace(&who.sub)?;
        }
        let mut out = Vec::new();
        for w in self.core.store().list_workspaces(None)? {
            if w.access(&who.sub, &who.roles).is_some() {
                let users = self.core.store().users_of(&w.id)?;
                out.push((w, users));
            }
        }
        Ok(out)
    }

    /// One of the workspaces `who` may use (theirs, or a shared one granted to them);
    /// any other is not found, as an unknown id.
    pub fn workspace(
        &self,
        who: &Principal,
        id: &SessionId,
    ) -> Result<(Workspace, Vec<Session>), ApiError> {
        let w = self
            .core
            .store()
            .get_workspace(id)?
            .filter(|w| w.access(&who.sub, &who.roles).is_some())
            .ok_or(ApiError::WORKSPACE_NOT_FOUND)?;
        let users = self.core.store().users_of(id)?;
        Ok((w, users))
    }

    /// One of `who`'s own workspaces, to rename or delete: a shared one is an admin's.
    fn own_workspace(
        &self,
        who: &Principal,
        id: &SessionId,
    ) -> Result<(Workspace, Vec<Session>), ApiError> {
        let (w, users) = self.workspace(who, id)?;
        if w.origin.is_shared() {
            return Err(ApiError::ADMIN_REQUIRED
                .with_message("a shared workspace is changed in the admin console"));
        }
        Ok((w, users))
    }

    /// Makes an empty workspace for `who`; its volume is made where its first session
    /// runs.
    pub fn create_workspace(&self, who: &Principal, name: &str) -> Result<Workspace, ApiError> {
        let id = new_id()?;
        let w = Workspace {
            id,
            owner: who.sub.clone(),
            name: checked_name(name)?,
            volume: workspace_volume_name(&self.core.config().instance, &id),
            origin: WorkspaceOrigin::Created,
            host: None,
            state: WorkspaceState::Ready,
            created_at: now(),
            size_bytes: None,
            copied_from: None,
            grants: Vec::new(),
        };
        self.core.store().insert_workspace(&w).map_err(refused)?;
        tracing::info!(target: "audit", sub = %who.sub, workspace = %w.id, name = %w.name, "workspace created");
        Ok(w)
    }

    /// Renames one of `who`'s workspaces.
    pub fn rename_workspace(
        &self,
        who: &Principal,
        id: &SessionId,
        name: &str,
    ) -> Result<Workspace, ApiError> {
        let name = checked_name(name)?;
        self.own_workspace(who, id)?;
        let (w, ()) = self
            .core
            .store()
            .change_workspace(id, |w, _| {
                w.name = name;
                Ok(())
            })
            .map_err(refused)?;
        tracing::info!(target: "audit", sub = %who.sub, workspace = %w.id, name = %w.name, "workspace renamed");
        Ok(w)
    }

    /// Deletes one of `who`'s workspaces and, when termgate made it, its volume. One in
    /// use, being copied or being copied from is refused naming why; the home
    /// workspace is never deleted.
    pub async fn delete_workspace(&self, who: &Principal, id: &SessionId) -> Result<(), ApiError> {
        let (w, users) = self.own_workspace(who, id)?;
        if w.origin == WorkspaceOrigin::Home {
            return Err(ApiError::WORKSPACE_IN_USE
                .with_message("the home workspace is your default one and is kept"));
        }
        if let Some(s) = users.first() {
            return Err(in_use(&w, s));
        }
        if matches!(w.state, WorkspaceState::Copying { .. }) {
            return Err(ApiError::WORKSPACE_IN_USE
                .with_message(format!("workspace {:?} is being copied into", w.name)));
        }
        if self
            .core
            .store()
            .list_workspaces(Some(&who.sub))?
            .iter()
            .any(|o| o.state == (WorkspaceState::Copying { from: *id }))
        {
            return Err(ApiError::WORKSPACE_IN_USE
                .with_message(format!("workspace {:?} is being copied from", w.name)));
        }
        // The volume first: a record is never gone while its volume stays.
        if let Some(host) = &w.host {
            self.remove_created_volume(host, &w).await?;
        }
        self.core
            .store()
            .delete_workspace(id, |w, users| match users.first() {
                Some(s) => Err(StoreError::Conflict(in_use(w, s).message.into_owned())),
                None => Ok(()),
            })
            .map_err(refused)?;
        tracing::info!(target: "audit", sub = %who.sub, workspace = %w.id, name = %w.name, volume = %w.volume, "workspace deleted");
        Ok(())
    }

    /// Removes a volume termgate made for workspace `w` on `host`, after checking its
    /// labels say so (a volume whose labels and record disagree is left, and said).
    pub(super) async fn remove_created_volume(
        &self,
        host: &str,
        w: &Workspace,
    ) -> Result<(), ApiError> {
        let instance = &self.core.config().instance;
        let want = match w.origin {
            WorkspaceOrigin::Created => {
                policy::declared::workspace_volume_labels(instance, &w.owner, &w.id)
            }
            WorkspaceOrigin::Shared => policy::declared::shared_volume_labels(instance, &w.id),
            WorkspaceOrigin::Home | WorkspaceOrigin::Borrowed => return Ok(()),
        };
        let docker = self
            .core
            .docker_of(host)
            .map_err(|e| DockerError::Unavailable(e.to_string()))?;
        match docker.volume_labels(&w.volume).await? {
            None => Ok(()),
            Some(found) if found == want => Ok(docker.remove_volume(&w.volume).await?),
            Some(_) => {
                tracing::warn!(target: "audit", workspace = %w.id, volume = %w.volume, host = %host, "volume kept: its labels are not the ones termgate wrote for this workspace");
                Ok(())
            }
        }
    }

    /// The workspace a new session of `profile` mounts, from the request's choice:
    /// a workspace id of the caller's, `"new"`, `"ephemeral"`, or nothing (the home
    /// workspace). `None` when the profile mounts none.
    pub(super) fn choose_workspace(
        &self,
        who: &Principal,
        profile: &Profile,
        session_name: &str,
        choice: Option<&str>,
    ) -> Result<Option<(SessionWorkspace, Option<Workspace>)>, ApiError> {
        let mode = profile.workspace_mode();
        let kept = |w: &Workspace| SessionWorkspace {
            id: Some(w.id),
            volume: w.volume.clone(),
            read_only: w.access(&who.sub, &who.roles).unwrap_or(true),
        };
        match (mode, choice) {
            (WorkspaceMode::None, None) => Ok(None),
            (WorkspaceMode::None, Some(_)) => {
                Err(ApiError::INVALID_WORKSPACE.with_message("this profile mounts no workspace"))
            }
            (WorkspaceMode::Home, None | Some(HOME_WORKSPACE)) | (WorkspaceMode::Choose, None) => {
                let w = self.home_workspace(&who.sub)?;
                Ok(Some((kept(&w), Some(w))))
            }
            (WorkspaceMode::Home, Some(_)) => Err(ApiError::INVALID_WORKSPACE
                .with_message("this profile mounts your home workspace; it offers no choice")),
            (WorkspaceMode::Choose, Some("ephemeral")) => Ok(Some((
                SessionWorkspace {
                    id: None,
                    volume: String::new(),
                    read_only: false,
                },
                None,
            ))),
            (WorkspaceMode::Choose, Some("new")) => {
                let taken: Vec<String> = self
                    .core
                    .store()
                    .list_workspaces(Some(&who.sub))?
                    .into_iter()
                    .map(|w| w.name)
                    .collect();
                let name = (1..)
                    .map(|n| {
                        if n == 1 {
                            session_name.to_owned()
                        } else {
                            format!("{session_name} {n}")
                        }
                    })
                    .find(|n| !taken.contains(n))
                    .unwrap_or_default();
                let w = self.create_workspace(who, &name)?;
                Ok(Some((kept(&w), Some(w))))
            }
            (WorkspaceMode::Choose, Some(id)) => {
                let id = SessionId::parse(id).map_err(|_| ApiError::WORKSPACE_NOT_FOUND)?;
                let (w, _) = self.workspace(who, &id)?;
                Ok(Some((kept(&w), Some(w))))
            }
        }
    }

    /// Makes sure a session's workspace volume exists on the Docker host it runs on.
    pub(super) async fn ensure_workspace(
        &self,
        s: &Session,
        docker: &Docker,
    ) -> Result<(), DockerError> {
        let Some(ws) = s.workspace.as_ref().filter(|w| !w.volume.is_empty()) else {
            return Ok(());
        };
        let instance = &self.core.config().instance;
        if ws.volume == home_volume_name(instance, &s.owner) {
            return docker
                .ensure_home_volume(&ws.volume, &s.owner, instance)
                .await;
        }
        let missing = |message: String| DockerError::Other {
            op: "ensure_workspace_volume",
            message,
        };
        let id = ws
            .id
            .ok_or_else(|| missing("the session's workspace has no record".into()))?;
        let origin = self
            .core
            .store()
            .get_workspace(&id)
            .ok()
            .flatten()
            .map(|w| w.origin)
            .ok_or_else(|| missing(format!("workspace {id} is gone")))?;
        match origin {
            WorkspaceOrigin::Shared => docker.ensure_shared_volume(&ws.volume, &id, instance).await,
            // Never made by termgate, nor looked at (it carries no label of termgate's):
            // dockgate refuses the create if it is not there.
            WorkspaceOrigin::Borrowed => Ok(()),
            WorkspaceOrigin::Home | WorkspaceOrigin::Created => {
                docker
                    .ensure_workspace_volume(&ws.volume, &s.owner, &id, instance)
                    .await
            }
        }
    }

    /// Starts a copy of `who`'s idle workspace `source` into a new one named `name`,
    /// which is returned `copying`; the job runs in the background and leaves it
    /// `ready`, or `failed` with its volume removed.
    pub fn copy_workspace(
        &self,
        who: &Principal,
        source: &SessionId,
        name: &str,
    ) -> Result<Workspace, ApiError> {
        let (from, users) = self.workspace(who, source)?;
        if let Some(s) = users.first() {
            return Err(in_use(&from, s));
        }
        let id = new_id()?;
        let mut copy = Workspace {
            id,
            owner: who.sub.clone(),
            name: checked_name(name)?,
            volume: workspace_volume_name(&self.core.config().instance, &id),
            origin: WorkspaceOrigin::Created,
            host: None,
            state: WorkspaceState::Copying { from: *source },
            created_at: now(),
            size_bytes: None,
            copied_from: Some(*source),
            grants: Vec::new(),
        };
        let shown = copy.clone();
        // Where the source's volume is: its record's host, else (a home workspace,
        // one volume per host) the first host that has it; else nowhere yet, and an
        // empty workspace copies as an empty one.
        self.core
            .store()
            .insert_copy(source, &copy)
            .map_err(refused)?;
        tracing::info!(target: "audit", sub = %who.sub, workspace = %copy.id, name = %copy.name, from = %source, "workspace copy started");
        let control = self.clone();
        tokio::spawn(async move {
            let host = match &from.host {
                Some(h) => Some(h.clone()),
                None => control.host_with_volume(&from.volume).await,
            };
            let outcome = match host {
                None => Ok(()),
                Some(h) => {
                    copy.host = Some(h.clone());
                    match control.core.store().change_workspace(&copy.id, |w, _| {
                        w.host = Some(h.clone());
                        Ok(())
                    }) {
                        Ok(_) => control.run_copy(&h, &from, &copy).await,
                        Err(e) => Err(format!("the copy could not be recorded: {e}")),
                    }
                }
            };
            control.finish_copy(&copy, outcome).await;
        });
        Ok(shown)
    }

    /// The first Docker host that answers and has volume `name`.
    async fn host_with_volume(&self, name: &str) -> Option<String> {
        for h in self.core.hosts().iter() {
            if let Ok(docker) = h.docker() {
                if let Ok(Some(_)) = docker.volume_labels(name).await {
                    return Some(h.name().to_owned());
                }
            }
        }
        None
    }

    /// The copy job: the new volume made, the job created, started, waited for and
    /// removed. `Err` says why the copy failed.
    async fn run_copy(&self, host: &str, from: &Workspace, copy: &Workspace) -> Result<(), String> {
        let docker = self.core.docker_of(host).map_err(|e| e.to_string())?;
        // A borrowed volume is there by the admin's word (and dockgate's check).
        let never_made = from.origin != WorkspaceOrigin::Borrowed
            && docker
                .volume_labels(&from.volume)
                .await
                .map_err(|e| e.to_string())?
                .is_none();
        if never_made {
            // Never used on this host: an empty workspace copies as an empty one.
            return Ok(());
        }
        let (profile_name, profile) = self
            .core
            .config()
            .profiles
            .iter()
            .find(|(_, p)| {
                p.workspace_mode() != WorkspaceMode::None
                    && (p.hosts.is_empty() || p.hosts.iter().any(|h| h == host))
            })
            .ok_or_else(|| format!("no profile that mounts workspaces runs on host {host}"))?;
        docker
            .ensure_workspace_volume(
                &copy.volume,
                &copy.owner,
                &copy.id,
                &self.core.config().instance,
            )
            .await
            .map_err(|e| e.to_string())?;
        let declared = profile.declared();
        let facts = CopyFacts {
            instance: &self.core.config().instance,
            host,
            owner: &copy.owner,
            profile: profile_name,
            source: &from.volume,
            dest: &copy.volume,
        };
        let body = copy_job_body(&declared, &facts).map_err(|e| e.to_string())?;
        let spec = policy::dockgate::spec_from_create_body(&body)
            .map_err(|e| e.message)?
            .0;
        let name = copy_job_name(&copy.volume);
        let req = ContainerRequest {
            name: name.clone(),
            body,
            spec,
        };
        let run = async {
            // Subscribed before the job exists, so that its end is never missed.
            let events = docker.events(&self.core.config().instance);
            let id = docker.create(&req).await?;
            docker.start(&id).await?;
            failpoint("copy:after_start");
            job_end(&docker, &id, events).await?;
            Ok::<_, DockerError>(docker.inspect(&id).await?.and_then(|c| c.exit_code))
        };
        let result = run.await;
        if let Err(e) = docker.remove(&name).await {
            tracing::warn!(workspace = %copy.id, error = %e, "the copy job could not be removed; it is removed when control starts again");
        }
        match result {
            Ok(Some(0)) => Ok(()),
            Ok(code) => Err(format!(
                "the copy job exited with status {}",
                code.map_or("unknown".into(), |c| c.to_string())
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Records a copy's outcome: `ready`, or `failed` with the half-made volume removed.
    async fn finish_copy(&self, copy: &Workspace, outcome: Result<(), String>) {
        let state = match outcome {
            Ok(()) => WorkspaceState::Ready,
            Err(reason) => {
                if let Some(host) = &copy.host {
                    if let Err(e) = self.remove_created_volume(host, copy).await {
                        tracing::warn!(workspace = %copy.id, error = %e, "the failed copy's volume could not be removed; it is when control starts again");
                    }
                }
                WorkspaceState::Failed { reason }
            }
        };
        let line = match &state {
            WorkspaceState::Ready => "workspace copied".to_owned(),
            WorkspaceState::Failed { reason } => format!("workspace copy failed: {reason}"),
            WorkspaceState::Copying { .. } => String::new(),
        };
        let r = self.core.store().change_workspace(&copy.id, |w, _| {
            w.state = state;
            Ok(())
        });
        match r {
            Ok(_) => {
                tracing::info!(target: "audit", sub = %copy.owner, workspace = %copy.id, "{line}");
                self.measure_workspaces_soon();
            }
            Err(e) => {
                tracing::error!(workspace = %copy.id, error = %e, "the copy's outcome could not be recorded; it is when control starts again")
            }
        }
    }

    /// At start: copies this process did not finish (it stopped mid-copy) end
    /// `failed`, their jobs and half-made volumes removed. Nothing half-made is ever
    /// recorded as ready.
    pub async fn recover_copies(&self) {
        let Ok(all) = self.core.store().list_workspaces(None) else {
            return;
        };
        for w in all
            .into_iter()
            .filter(|w| matches!(w.state, WorkspaceState::Copying { .. }))
        {
            for h in self.core.hosts().iter() {
                let Ok(docker) = h.docker() else { continue };
                if let Err(e) = docker.remove(&copy_job_name(&w.volume)).await {
                    tracing::warn!(workspace = %w.id, host = %h.name(), error = %e, "an unfinished copy's job could not be removed");
                }
                if let Err(e) = self.remove_created_volume(h.name(), &w).await {
                    tracing::warn!(workspace = %w.id, host = %h.name(), error = %e.message, "an unfinished copy's volume could not be removed");
                }
            }
            let outcome = Err("control stopped during the copy".to_owned());
            self.finish_copy(&w, outcome).await;
        }
    }
}

pub(super) fn in_use(w: &Workspace, s: &Session) -> ApiError {
    ApiError::WORKSPACE_IN_USE.with_message(format!(
        "workspace {:?} is in use by session {} ({:?}); end it first",
        w.name, s.id, s.name
    ))
}

/// Waits for the end of the copy job `id`: its `die` (or `destroy`) in `events`, the
/// events of its deployment from before it started; with an inspect every
/// [`COPY_CHECK`] besides, and only inspects once the stream breaks.
async fn job_end(
    docker: &Docker,
    id: &str,
    events: impl Stream<Item = Result<ContainerEvent, DockerError>>,
) -> Result<(), DockerError> {
    let mut events = std::pin::pin!(events.fuse());
    let mut check = tokio::time::interval(COPY_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    check.tick().await;
    let mut listening = true;
    loop {
        tokio::select! {
            e = events.next(), if listening => match e {
                Some(Ok(e)) if e.id == id && matches!(e.action, EventAction::Die | EventAction::Destroy) => {
                    return Ok(());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "events broke while a copy job ran; it is inspected instead");
                    listening = false;
                }
                None => listening = false,
            },
            _ = check.tick() => {
                match docker.inspect(id).await? {
                    Some(c) if c.state.is_alive() => {}
                    _ => return Ok(()),
                }
            }
        }
    }
}

//! A session's create: quota and record first, then the container, compensated on
//! every failure path.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use config::Profile;
use policy::declared::{session_body, session_spec, with_secrets, SessionSecrets};
use policy::{Action, Decision, Principal, SessionId};

use crate::docker::{ContainerRequest, Docker, DockerError};
use crate::error::ApiError;
use crate::labels;
use crate::model::{Session, SessionState};
use crate::store::StoreError;

use super::super::clock::now;
use super::super::failpoint::failpoint;
use super::super::names::{container_name, invisible, SYSTEM};
use super::Sessions;

/// What a user asks a new session to be.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// Profile name.
    pub profile: String,
    /// Display name (default: the profile name).
    pub name: Option<String>,
    /// Option values by option name.
    pub options: BTreeMap<String, String>,
    /// For a profile whose workspace is chosen: a workspace id of the caller's,
    /// `"new"` or `"ephemeral"`; `None`: the home workspace.
    pub workspace: Option<String>,
}

/// Where the time of a create went.
#[derive(Debug, Clone, Copy)]
pub struct CreateTiming {
    /// Docker's share: home volume, create and start.
    pub docker: Duration,
    /// The whole create inside control.
    pub total: Duration,
}

impl Sessions {
    /// Creates a session for `who`; also says how long Docker took and how long in all.
    pub async fn create(
        &self,
        who: &Principal,
        req: NewSession,
    ) -> Result<(Session, CreateTiming), ApiError> {
        let started = Instant::now();
        if let Decision::Deny(d) =
            policy::decide(who, None, self.core.is_locked(&who.sub)?, Action::Create)
        {
            return Err(d);
        }
        let profile = self
            .core
            .config()
            .profiles
            .get(&req.profile)
            .ok_or_else(|| {
                ApiError::UNKNOWN_PROFILE
                    .with_message(format!("no profile named {:?}", req.profile))
            })?;
        let options = resolve_options(profile, &req.options)?;
        let name = match req.name {
            None => req.profile.clone(),
            Some(n) => {
                if n.chars().count() > 64 || n.chars().any(invisible) {
                    return Err(ApiError::INVALID_NAME);
                }
                n
            }
        };
        let workspace =
            self.workspaces
                .choose_workspace(who, profile, &name, req.workspace.as_deref())?;
        // Fixed now: a later grant or revoke changes only the sessions made after it.
        let secrets = self.workspaces.granted_secrets(who, profile)?;
        let mut random = [0u8; 10];
        getrandom::getrandom(&mut random)
            .map_err(|e| ApiError::INTERNAL.with_message(format!("no randomness: {e}")))?;
        let mut session = Session {
            id: SessionId::from_random(random),
            owner: who.sub.clone(),
            name,
            profile: req.profile.clone(),
            // Chosen by the store, under its write lock, right before the record is made.
            host: String::new(),
            options,
            state: SessionState::Creating,
            created_at: now(),
            container_id: None,
            ended_at: None,
            ended_by: None,
            end_reason: None,
            last_input: None,
            record: crate::model::Recording::of(profile.record, profile.record_input),
            shares: Vec::new(),
            peers: Vec::new(),
            workspace: workspace.map(|(w, _)| w),
        };
        // Marked before the record exists, so no reconcile pass ever sees this record
        // without the mark while this process works on it.
        let _in_flight = self
            .creating
            .mark(session.id)
            .ok_or_else(|| ApiError::INTERNAL.with_message("session id already in flight"))?;
        self.core.store()
            .insert_placed(&mut session, self.core.limits(), |active, pinned| match pinned {
                // A workspace's volume is on one host: the session goes there.
                Some(h) if profile.hosts.is_empty() || profile.hosts.iter().any(|p| p == h) => {
                    self.core.hosts()
                        .place(&[h.to_owned()], profile.runtime.as_deref(), active)
                }
                Some(h) => Err(format!(
                    "the workspace is on host {h}, where profile {:?} does not run",
                    req.profile
                )),
                None => self
                    .core
                    .hosts()
                    .place(&profile.hosts, profile.runtime.as_deref(), active),
            })
            .map_err(|e| {
                match &e {
                    StoreError::Quota(q) => {
                        tracing::info!(target: "audit", sub = %who.sub, decision = "deny", reason = "quota_exceeded", limit = q.limit, "create refused");
                    }
                    StoreError::NoHost(why) => {
                        tracing::warn!(target: "audit", sub = %who.sub, decision = "deny", reason = "no_host_available", why = %why, "create refused");
                    }
                    _ => {}
                }
                ApiError::from(e)
            })?;
        failpoint("create:after_record");
        self.core.refresh_gauges();

        let docker_started = Instant::now();
        let docker = self.core.docker_of(&session.host);
        let made = match &docker {
            Ok(docker) => {
                self.make_container(&session, profile, &secrets, docker)
                    .await
            }
            Err(e) => Err(DockerError::Unavailable(e.to_string())),
        };
        let docker_time = docker_started.elapsed();
        self.core
            .metrics()
            .create_phase("docker", docker_time.as_secs_f64());
        let container_id = match made {
            Ok(id) => id,
            Err(e) => {
                self.core.metrics().docker_error("create");
                // Compensate: whatever was made goes, and the record ends as failed
                // (unless a delete took it over meanwhile; that delete ends it).
                if let Ok(docker) = &docker {
                    if let Err(re) = docker.remove(&container_name(&session.id)).await {
                        tracing::warn!(session = %session.id, error = %re, "create failed and its container could not be removed; the reconciler will");
                    }
                }
                if let Err(se) = self.end_record(
                    &session.id,
                    &[SessionState::Creating],
                    SessionState::Failed,
                    SYSTEM,
                    &format!("creation failed: {e}"),
                ) {
                    tracing::error!(session = %session.id, error = %se, "create failed and its record could not be ended; the reconciler will");
                }
                self.core.refresh_gauges();
                tracing::warn!(target: "audit", session = %session.id, sub = %who.sub, error = %e, "create failed");
                return Err(e.into());
            }
        };
        failpoint("create:after_start");
        let cid = container_id.clone();
        let updated = self.core.store().update(&session.id, move |s| {
            // A delete may have started while the container was being made; keep it.
            if s.state == SessionState::Creating {
                s.state = SessionState::Running;
            }
            s.container_id = Some(cid);
        });
        match updated {
            Ok(s) if s.state == SessionState::Running => {
                let timing = CreateTiming {
                    docker: docker_time,
                    total: started.elapsed(),
                };
                self.core
                    .metrics()
                    .create_phase("total", timing.total.as_secs_f64());
                self.core.refresh_gauges();
                let secrets: Vec<&str> = secrets.keys().map(String::as_str).collect();
                tracing::info!(target: "audit", session = %s.id, sub = %who.sub, profile = %s.profile, host = %s.host, secrets = %secrets.join(","), docker_ms = timing.docker.as_millis() as u64, total_ms = timing.total.as_millis() as u64, "session created");
                Ok((s, timing))
            }
            other => {
                // Ended or being ended concurrently: the container must not outlive it,
                // and the caller never hears 201 for it.
                if let Ok(docker) = &docker {
                    if let Err(e) = docker.remove(&container_id).await {
                        tracing::warn!(session = %session.id, error = %e, "could not remove the container of a session ended while being created; the reconciler will");
                    }
                }
                if let Err(e) = &other {
                    if !matches!(e, StoreError::NotFound) {
                        tracing::error!(session = %session.id, error = %e, "could not record the container of a session being created; the reconciler will end it");
                    }
                }
                if let Ok(s) = &other {
                    let by = s.ended_by.clone().unwrap_or_else(|| SYSTEM.into());
                    if let Err(e) = self.end_record(
                        &s.id,
                        &[SessionState::Stopping],
                        SessionState::Terminated,
                        &by,
                        "ended while being created",
                    ) {
                        tracing::error!(session = %s.id, error = %e, "could not end a session ended while being created; the reconciler will");
                    }
                }
                self.core.refresh_gauges();
                match other {
                    // The store could not record it (its disk is full, say): that is
                    // the answer, not a conflict.
                    Err(e) if !matches!(e, StoreError::NotFound) => Err(ApiError::from(e)),
                    _ => Err(ApiError::CONFLICT
                        .with_message("the session was ended while it was being created")),
                }
            }
        }
    }

    async fn make_container(
        &self,
        s: &Session,
        profile: &Profile,
        secrets: &SessionSecrets,
        docker: &Docker,
    ) -> Result<String, DockerError> {
        let instance = &self.core.config().instance;
        self.workspaces.ensure_workspace(s, docker).await?;
        let declared = profile.declared();
        let undeclared = |e: policy::declared::NotDeclared| DockerError::Other {
            op: "create",
            message: format!("the profile does not declare this session: {e}"),
        };
        let body =
            session_body(&declared, &labels::facts(instance, s), secrets).map_err(undeclared)?;
        let spec = session_spec(
            &declared,
            s.workspace.as_ref().map(|w| w.volume.as_str()),
            s.workspace.as_ref().is_some_and(|w| w.read_only),
        );
        let req = ContainerRequest {
            name: container_name(&s.id),
            body,
            spec: with_secrets(spec, secrets).map_err(undeclared)?,
        };
        let id = docker.create(&req).await?;
        failpoint("create:after_container");
        docker.start(&id).await?;
        Ok(id)
    }
}

/// Checks user-chosen options against the profile and fills in defaults.
fn resolve_options(
    profile: &Profile,
    chosen: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ApiError> {
    if let Some(unknown) = chosen.keys().find(|k| !profile.options.contains_key(*k)) {
        return Err(ApiError::INVALID_OPTION
            .with_message(format!("this profile has no option {unknown:?}")));
    }
    let mut out = BTreeMap::new();
    for (name, o) in &profile.options {
        let value = chosen.get(name).unwrap_or(&o.default);
        if !o.values.contains(value) {
            return Err(ApiError::INVALID_OPTION
                .with_message(format!("option {name:?} must be one of {:?}", o.values)));
        }
        out.insert(name.clone(), value.clone());
    }
    Ok(out)
}

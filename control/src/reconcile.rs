//! The reconciler: makes the store agree with Docker.
//!
//! Docker's events give fast reaction (a killed container is recorded within a second);
//! a full pass on an interval catches everything else. Every Docker call has its own
//! timeout and a pass handles containers concurrently, so one stuck container never
//! stalls the others. Only containers for which [`labels::is_session_of`] holds (this
//! deployment's session containers) are ever touched, and a container is removed only
//! when the store says for certain that no active session claims it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use policy::SessionId;

use crate::docker::{ContainerStatus, DockerError, EventAction};
use crate::labels::{self, SessionLabels};
use crate::model::{Session, SessionState};
use crate::service::{container_name, now, Control, SYSTEM};
use crate::store::StoreError;

/// What one pass did, by kind.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// Records ended because their container is gone.
    pub gone: usize,
    /// Records ended because their program exited.
    pub exited: usize,
    /// `creating` records that never got a container.
    pub failed: usize,
    /// Interrupted ends finished.
    pub finished: usize,
    /// Labelled containers without a record, removed.
    pub orphans_removed: usize,
    /// Docker calls or store reads that failed (timeouts included).
    pub errors: usize,
}

/// Why the store could not be rebuilt from container labels.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// Docker could not list the containers.
    #[error("cannot list session containers: {0}")]
    Docker(#[from] DockerError),
    /// The store could not be read or written.
    #[error("cannot rebuild the store: {0}")]
    Store(#[from] StoreError),
}

/// Repairs drift between the store and Docker for one [`Control`].
#[derive(Clone)]
pub struct Reconciler {
    control: Arc<Control>,
}

impl Reconciler {
    /// A reconciler for `control`.
    pub fn new(control: Arc<Control>) -> Self {
        Reconciler { control }
    }

    /// Rebuilds the store from container labels when it is empty (fresh or lost) and
    /// running session containers of this instance exist. Returns how many were
    /// restored.
    pub async fn rebuild_from_labels(&self) -> Result<usize, RebuildError> {
        let c = &self.control;
        if !c.store().is_empty() {
            return Ok(0);
        }
        let containers = c.docker().list_managed(&c.config().instance).await?;
        let sessions: Vec<Session> = containers
            .iter()
            .filter(|s| s.state.is_running())
            .filter_map(|s| {
                let l = SessionLabels::read(&s.labels)?;
                Some(Session {
                    id: l.id,
                    owner: l.owner,
                    name: l.name,
                    profile: l.profile,
                    options: Default::default(),
                    state: SessionState::Running,
                    created_at: l.created.unwrap_or(u64::try_from(s.created).unwrap_or(0)),
                    container_id: Some(s.id.clone()),
                    ended_at: None,
                    ended_by: None,
                    end_reason: None,
                })
            })
            .collect();
        let restored = c.store().insert_rebuilt(&sessions)?;
        if restored > 0 {
            tracing::warn!(target: "audit", restored, "store was empty: sessions rebuilt from container labels");
            c.metrics().reconciled("rebuilt");
        }
        Ok(restored)
    }

    /// One full pass.
    ///
    /// The store is read before Docker is listed, so every container a record points
    /// at was made before the listing; each action is then decided in the store first
    /// (an end that holds only if the record is still in the state the decision was
    /// based on) and carried out in Docker after. Sessions this process is creating
    /// right now are never touched, however long Docker takes.
    pub async fn pass(&self) -> PassReport {
        let c = &self.control;
        let started = Instant::now();
        let mut report = PassReport::default();
        let active = match c.store().list_active(None) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "reconcile: cannot read the store");
                report.errors += 1;
                return report;
            }
        };
        let containers = match c.docker().list_managed(&c.config().instance).await {
            Ok(list) => list,
            Err(e) => {
                c.metrics().docker_error("list");
                tracing::warn!(error = %e, "reconcile: cannot list containers");
                report.errors += 1;
                return report;
            }
        };
        let mut by_session: HashMap<SessionId, &ContainerStatus> = HashMap::new();
        for s in &containers {
            if let Some(id) = labels::session_id(&s.labels) {
                by_session.insert(id, s);
            }
        }
        let t = now();
        let creating_grace = c.config().control.creating_grace_seconds;

        let record_actions = active.iter().map(|s| {
            let container = by_session.get(&s.id).copied();
            self.reconcile_session(s, container, t, creating_grace)
        });
        let active_ids: HashSet<SessionId> = active.iter().map(|s| s.id).collect();
        let mut orphans = Vec::new();
        for s in &containers {
            match self.is_orphan(s, &active_ids, t) {
                Ok(true) => orphans.push(s),
                Ok(false) => {}
                Err(e) => {
                    // Never remove on doubt: the next pass asks again.
                    tracing::warn!(container = %s.id, error = %e, "reconcile: cannot tell whether the container's session ended; keeping it");
                    report.errors += 1;
                }
            }
        }
        let outcomes = futures_util::future::join_all(record_actions).await;
        for o in outcomes {
            match o {
                Outcome::Nothing => {}
                Outcome::Gone => report.gone += 1,
                Outcome::Exited => report.exited += 1,
                Outcome::Failed => report.failed += 1,
                Outcome::Finished => report.finished += 1,
                Outcome::Error => report.errors += 1,
            }
        }
        let orphan_results =
            futures_util::future::join_all(orphans.into_iter().map(|s| self.remove_orphan(s)))
                .await;
        for r in orphan_results {
            match r {
                Ok(true) => {
                    report.orphans_removed += 1;
                    c.metrics().reconciled("orphan_removed");
                }
                Ok(false) => {}
                Err(_) => {
                    c.metrics().docker_error("remove");
                    report.errors += 1;
                }
            }
        }
        match c.store().recount() {
            Ok(total) => {
                c.metrics().sessions_active.set(i64::from(total));
            }
            Err(e) => {
                tracing::error!(error = %e, "reconcile: cannot recount active sessions");
                report.errors += 1;
            }
        }
        c.metrics()
            .reconcile_pass_seconds
            .observe(started.elapsed().as_secs_f64());
        report
    }

    /// Whether `s` is a session container of this instance that no active record
    /// claims and that is old enough, or whose session is known to have ended. A store
    /// error is an error, never a yes.
    fn is_orphan(
        &self,
        s: &ContainerStatus,
        active: &HashSet<SessionId>,
        t: u64,
    ) -> Result<bool, StoreError> {
        let c = &self.control;
        if !labels::is_session_of(&s.labels, &c.config().instance) {
            return Ok(false);
        }
        let label = labels::session_id(&s.labels);
        let known = label.is_some_and(|id| active.contains(&id));
        let in_flight = label.is_some_and(|id| c.is_being_created(&id));
        if known || in_flight {
            return Ok(false);
        }
        let ended = match label {
            Some(id) => c.store().get_ended(&id)?.is_some(),
            None => false,
        };
        let age = t.saturating_sub(u64::try_from(s.created).unwrap_or(0));
        Ok(ended || age >= c.config().control.orphan_grace_seconds)
    }

    /// Removes a labelled container that no active record claims, after checking the
    /// store once more right before acting: a record that became active since the pass
    /// read the store (or a create this process started since) keeps its container.
    async fn remove_orphan(&self, s: &ContainerStatus) -> Result<bool, DockerError> {
        let c = &self.control;
        if let Some(id) = labels::session_id(&s.labels) {
            if c.is_being_created(&id) {
                return Ok(false);
            }
            match c.store().get(&id) {
                Ok(None) => {}
                Ok(Some(_)) => return Ok(false),
                Err(e) => {
                    tracing::warn!(container = %s.id, session = %id, error = %e, "reconcile: cannot re-read the session; keeping its container");
                    return Ok(false);
                }
            }
        }
        let r = c.remove_container(&s.id).await;
        tracing::info!(target: "audit", container = %s.id, session = ?s.labels.get(labels::SESSION), ok = r.is_ok(), "orphan container removed");
        r.map(|()| true)
    }

    async fn reconcile_session(
        &self,
        s: &Session,
        container: Option<&ContainerStatus>,
        t: u64,
        creating_grace: u64,
    ) -> Outcome {
        let c = &self.control;
        match s.state {
            SessionState::Running => {
                let Some(cid) = s.container_id.as_deref() else {
                    // A running record always names its container; without one there
                    // is nothing to attach to.
                    return self.end_as(s, SessionState::Gone, "the container disappeared");
                };
                // Docker's answer about this very container, now: the listing may be
                // a moment old.
                let looks_alive = container.is_some_and(|c| !c.state.is_dead());
                if looks_alive {
                    return Outcome::Nothing;
                }
                self.settle_running(s, cid, "the session's program exited")
                    .await
            }
            SessionState::Creating
                if t.saturating_sub(s.created_at) >= creating_grace
                    && !c.is_being_created(&s.id) =>
            {
                // Decide first: only a record still `creating` is abandoned. If the
                // create recorded `running` in between, this end is refused and the
                // container stays.
                let outcome = self.end_as(s, SessionState::Failed, "creation did not finish");
                if !matches!(outcome, Outcome::Failed) {
                    return outcome;
                }
                let target = container.map_or_else(|| container_name(&s.id), |c| c.id.clone());
                if let Err(e) = c.remove_container(&target).await {
                    // The record has ended; the container is now an orphan of an ended
                    // session and goes on a later pass.
                    c.metrics().docker_error("remove");
                    tracing::warn!(session = %s.id, error = %e, "reconcile: cannot remove the container of an abandoned create; a later pass will");
                    return Outcome::Error;
                }
                outcome
            }
            SessionState::Creating => Outcome::Nothing,
            SessionState::Stopping => match c
                .finish_stopping(s, "ended (finished by the reconciler)")
                .await
            {
                Ok(()) => {
                    c.metrics().reconciled("finished_stopping");
                    Outcome::Finished
                }
                Err(e) => {
                    tracing::warn!(session = %s.id, error = %e, "reconcile: cannot finish an interrupted end; a later pass will");
                    Outcome::Error
                }
            },
            _ => Outcome::Nothing,
        }
    }

    /// A `running` record whose container looked missing or dead: inspect that
    /// container now, end the record only if it is still `running`, and only then
    /// remove what is left of the container.
    async fn settle_running(&self, s: &Session, cid: &str, exit_reason: &str) -> Outcome {
        let c = &self.control;
        match c.docker().inspect(cid).await {
            Ok(None) => self.end_as(s, SessionState::Gone, "the container disappeared"),
            Ok(Some(found)) if found.state.is_dead() => {
                let outcome = self.end_as(s, SessionState::Exited, exit_reason);
                if !matches!(outcome, Outcome::Exited) {
                    return outcome;
                }
                if let Err(e) = c.remove_container(&found.id).await {
                    c.metrics().docker_error("remove");
                    tracing::warn!(session = %s.id, error = %e, "reconcile: cannot remove an exited session's container; a later pass will");
                    return Outcome::Error;
                }
                outcome
            }
            Ok(Some(_)) => Outcome::Nothing,
            Err(e) => {
                c.metrics().docker_error("inspect");
                tracing::warn!(session = %s.id, error = %e, "reconcile: inspect failed; the next pass decides");
                Outcome::Error
            }
        }
    }

    /// Ends `s` as `state`, but only if it is still in the state this decision was
    /// based on (`s.state`).
    fn end_as(&self, s: &Session, state: SessionState, reason: &str) -> Outcome {
        let c = &self.control;
        match c.end_record(&s.id, &[s.state], state, SYSTEM, reason) {
            Ok(Some(_)) => {
                tracing::info!(target: "audit", session = %s.id, sub = %s.owner, state = state.as_str(), reason, "session ended by the reconciler");
                c.metrics().reconciled(state.as_str());
                match state {
                    SessionState::Gone => Outcome::Gone,
                    SessionState::Exited => Outcome::Exited,
                    _ => Outcome::Failed,
                }
            }
            Ok(None) => Outcome::Nothing,
            Err(e) => {
                tracing::error!(session = %s.id, error = %e, "reconcile: store write failed");
                Outcome::Error
            }
        }
    }

    /// Reacts to one Docker event for a session container.
    async fn on_event(&self, id: SessionId, action: EventAction) {
        let s = match self.control.store().get(&id) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "event: cannot read the session; the next pass decides");
                return;
            }
        };
        if s.state != SessionState::Running {
            return;
        }
        let Some(cid) = s.container_id.clone() else {
            return;
        };
        let reason = if action == EventAction::Oom {
            "the session ran out of memory"
        } else {
            "the session's program exited"
        };
        if let Outcome::Error = self.settle_running(&s, &cid, reason).await {
            tracing::warn!(session = %id, "event: could not settle; the next pass decides");
        }
    }

    /// Runs the event listener and the periodic pass until `shutdown` fires.
    pub async fn run(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let events = tokio::spawn(self.clone().listen_events());
        let mut tick = tokio::time::interval(Duration::from_secs(
            self.control.config().control.reconcile_interval_seconds,
        ));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let r = self.pass().await;
                    if r != PassReport::default() {
                        tracing::info!(?r, "reconcile pass");
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
        events.abort();
    }

    async fn listen_events(self) {
        let mut backoff = Duration::from_millis(200);
        loop {
            let mut stream = Box::pin(
                self.control
                    .docker()
                    .events(&self.control.config().instance),
            );
            while let Some(item) = stream.next().await {
                match item {
                    Ok(ev) => {
                        backoff = Duration::from_millis(200);
                        if let Some(id) = labels::session_id(&ev.labels) {
                            self.on_event(id, ev.action).await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "docker event stream failed; reconnecting");
                        break;
                    }
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }
}

/// What reconciling one record did.
enum Outcome {
    Nothing,
    Gone,
    Exited,
    Failed,
    Finished,
    Error,
}

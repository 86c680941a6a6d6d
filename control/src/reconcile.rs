//! The reconciler: makes the store agree with Docker.
//!
//! Docker's events give fast reaction (a killed container is recorded within a second);
//! a full pass on an interval catches everything else. Every Docker call has its own
//! timeout and a pass handles containers concurrently, so one stuck container never
//! stalls the others. Only containers labelled `termgate.managed=session` with this
//! deployment's `termgate.instance` are ever touched.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use policy::SessionId;

use crate::docker::{ContainerStatus, DockerError};
use crate::model::{Session, SessionState};
use crate::service::{container_name, labels, now, Control, SYSTEM};

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
    /// Docker calls that failed (timeouts included).
    pub errors: usize,
}

fn session_label(c: &ContainerStatus) -> Option<SessionId> {
    c.labels
        .get(labels::SESSION)
        .and_then(|s| SessionId::parse(s).ok())
}

impl Control {
    /// Rebuilds the store from container labels when it is empty (fresh or lost) and
    /// labelled containers of this instance exist. Returns how many were restored.
    pub async fn rebuild_from_labels(&self) -> anyhow::Result<usize> {
        if !self.store.is_empty() {
            return Ok(0);
        }
        let containers = self.docker.list_managed(&self.config.instance).await?;
        let mut sessions = Vec::new();
        for c in &containers {
            let (Some(id), Some(owner)) = (session_label(c), c.labels.get(labels::OWNER)) else {
                continue;
            };
            if policy::Sub::parse(owner).is_none() || !c.state.is_running() {
                continue;
            }
            sessions.push(Session {
                id,
                owner: owner.clone(),
                name: c.labels.get(labels::NAME).cloned().unwrap_or_default(),
                profile: c.labels.get(labels::PROFILE).cloned().unwrap_or_default(),
                options: Default::default(),
                state: SessionState::Running,
                created_at: c
                    .labels
                    .get(labels::CREATED)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(u64::try_from(c.created).unwrap_or(0)),
                container_id: Some(c.id.clone()),
                ended_at: None,
                ended_by: None,
                end_reason: None,
            });
        }
        let restored = self.store.insert_rebuilt(&sessions)?;
        if restored > 0 {
            tracing::warn!(target: "audit", restored, "store was empty: sessions rebuilt from container labels");
            self.metrics.reconciled("rebuilt");
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
    pub async fn reconcile_pass(&self) -> PassReport {
        let started = Instant::now();
        let mut report = PassReport::default();
        let active = match self.store.list_active(None) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "reconcile: cannot read the store");
                report.errors += 1;
                return report;
            }
        };
        let containers = match self.docker.list_managed(&self.config.instance).await {
            Ok(c) => c,
            Err(e) => {
                self.metrics.docker_error("list");
                tracing::warn!(error = %e, "reconcile: cannot list containers");
                report.errors += 1;
                return report;
            }
        };
        let mut by_session: HashMap<SessionId, &ContainerStatus> = HashMap::new();
        for c in &containers {
            if let Some(id) = session_label(c) {
                by_session.insert(id, c);
            }
        }
        let t = now();
        let creating_grace = self.config.control.creating_grace_seconds;
        let orphan_grace = self.config.control.orphan_grace_seconds;

        let record_actions = active.iter().map(|s| {
            let c = by_session.get(&s.id).copied();
            self.reconcile_session(s, c, t, creating_grace)
        });
        let active_ids: std::collections::HashSet<SessionId> =
            active.iter().map(|s| s.id).collect();
        let orphan_actions = containers.iter().filter(|c| {
            let label = session_label(c);
            let known = label.is_some_and(|id| active_ids.contains(&id));
            let in_flight = label.is_some_and(|id| self.is_being_created(&id));
            let old = t.saturating_sub(u64::try_from(c.created).unwrap_or(0)) >= orphan_grace;
            // A store error counts as "not known to have ended": keep the container.
            let ended = label.is_some_and(|id| matches!(self.store.get_ended(&id), Ok(Some(_))));
            !known && !in_flight && (old || ended)
        });
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
            futures_util::future::join_all(orphan_actions.map(|c| self.remove_orphan(c))).await;
        for r in orphan_results {
            match r {
                Ok(true) => {
                    report.orphans_removed += 1;
                    self.metrics.reconciled("orphan_removed");
                }
                Ok(false) => {}
                Err(_) => {
                    self.metrics.docker_error("remove");
                    report.errors += 1;
                }
            }
        }
        if let Ok(total) = self.store.recount() {
            self.metrics.sessions_active.set(i64::from(total));
        }
        self.metrics
            .reconcile_pass_seconds
            .observe(started.elapsed().as_secs_f64());
        report
    }

    /// Removes a labelled container that no active record claims, after checking the
    /// store once more right before acting: a record that became active since the pass
    /// read the store (or a create this process started since) keeps its container.
    async fn remove_orphan(&self, c: &ContainerStatus) -> Result<bool, DockerError> {
        if let Some(id) = session_label(c) {
            if self.is_being_created(&id) || !matches!(self.store.get(&id), Ok(None)) {
                return Ok(false);
            }
        }
        let r = self.remove_container(&c.id).await;
        tracing::info!(target: "audit", container = %c.id, session = ?c.labels.get(labels::SESSION), ok = r.is_ok(), "orphan container removed");
        r.map(|()| true)
    }

    async fn reconcile_session(
        &self,
        s: &Session,
        c: Option<&ContainerStatus>,
        t: u64,
        creating_grace: u64,
    ) -> Outcome {
        match s.state {
            SessionState::Running => {
                let Some(cid) = s.container_id.as_deref() else {
                    // A running record always names its container; without one there
                    // is nothing to attach to.
                    return self.end_as(s, SessionState::Gone, "the container disappeared");
                };
                // Docker's answer about this very container, now: the listing may be
                // a moment old.
                let looks_alive = c.is_some_and(|c| !c.state.is_dead());
                if looks_alive {
                    return Outcome::Nothing;
                }
                self.settle_running(s, cid, "the session's program exited")
                    .await
            }
            SessionState::Creating
                if t.saturating_sub(s.created_at) >= creating_grace
                    && !self.is_being_created(&s.id) =>
            {
                // Decide first: only a record still `creating` is abandoned. If the
                // create recorded `running` in between, this end is refused and the
                // container stays.
                let outcome = self.end_as(s, SessionState::Failed, "creation did not finish");
                if !matches!(outcome, Outcome::Failed) {
                    return outcome;
                }
                let target = c.map_or_else(|| container_name(&s.id), |c| c.id.clone());
                if self.remove_container(&target).await.is_err() {
                    // The record has ended; the container is now an orphan of an ended
                    // session and goes on a later pass.
                    self.metrics.docker_error("remove");
                    return Outcome::Error;
                }
                outcome
            }
            SessionState::Creating => Outcome::Nothing,
            SessionState::Stopping => match self
                .finish_stopping(s, "ended (finished by the reconciler)")
                .await
            {
                Ok(()) => {
                    self.metrics.reconciled("finished_stopping");
                    Outcome::Finished
                }
                Err(_) => Outcome::Error,
            },
            _ => Outcome::Nothing,
        }
    }

    /// A `running` record whose container looked missing or dead: inspect that
    /// container now, end the record only if it is still `running`, and only then
    /// remove what is left of the container.
    async fn settle_running(&self, s: &Session, cid: &str, exit_reason: &str) -> Outcome {
        match self.docker.inspect(cid).await {
            Ok(None) => self.end_as(s, SessionState::Gone, "the container disappeared"),
            Ok(Some(c)) if c.state.is_dead() => {
                let outcome = self.end_as(s, SessionState::Exited, exit_reason);
                if !matches!(outcome, Outcome::Exited) {
                    return outcome;
                }
                if self.remove_container(&c.id).await.is_err() {
                    self.metrics.docker_error("remove");
                    return Outcome::Error;
                }
                outcome
            }
            Ok(Some(_)) => Outcome::Nothing,
            Err(e) => {
                self.metrics.docker_error("inspect");
                tracing::warn!(session = %s.id, error = %e, "reconcile: inspect failed; the next pass decides");
                Outcome::Error
            }
        }
    }

    /// Ends `s` as `state`, but only if it is still in the state this decision was
    /// based on (`s.state`).
    fn end_as(&self, s: &Session, state: SessionState, reason: &str) -> Outcome {
        match self.end_record(&s.id, &[s.state], state, SYSTEM, reason) {
            Ok(Some(_)) => {
                tracing::info!(target: "audit", session = %s.id, sub = %s.owner, state = state.as_str(), reason, "session ended by the reconciler");
                self.metrics.reconciled(state.as_str());
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
    async fn on_event(&self, id: SessionId, action: &str) {
        let Ok(Some(s)) = self.store.get(&id) else {
            return;
        };
        if s.state != SessionState::Running {
            return;
        }
        let Some(cid) = s.container_id.clone() else {
            return;
        };
        let reason = if action == "oom" {
            "the session ran out of memory"
        } else {
            "the session's program exited"
        };
        if let Outcome::Error = self.settle_running(&s, &cid, reason).await {
            tracing::warn!(session = %id, "event: could not settle; the next pass decides");
        }
    }

    /// Runs the event listener and the periodic pass until `shutdown` fires.
    pub async fn run_reconciler(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let events = tokio::spawn(Arc::clone(&self).listen_events());
        let mut tick = tokio::time::interval(Duration::from_secs(
            self.config.control.reconcile_interval_seconds,
        ));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let r = self.reconcile_pass().await;
                    if r != PassReport::default() {
                        tracing::info!(?r, "reconcile pass");
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
        events.abort();
    }

    async fn listen_events(self: Arc<Self>) {
        let mut backoff = Duration::from_millis(200);
        loop {
            let mut stream = Box::pin(self.docker.events(&self.config.instance));
            while let Some(item) = stream.next().await {
                match item {
                    Ok(ev) => {
                        backoff = Duration::from_millis(200);
                        if let Some(id) = ev
                            .labels
                            .get(labels::SESSION)
                            .and_then(|s| SessionId::parse(s).ok())
                        {
                            self.on_event(id, &ev.action).await;
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

enum Outcome {
    Nothing,
    Gone,
    Exited,
    Failed,
    Finished,
    Error,
}

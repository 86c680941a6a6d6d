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

use crate::docker::ContainerStatus;
use crate::model::{Session, SessionState};
use crate::service::{labels, now, Control, SYSTEM};

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

fn is_dead(state: &str) -> bool {
    matches!(state, "exited" | "dead" | "created")
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
            if policy::Sub::parse(owner).is_none() || c.state != "running" {
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
    pub async fn reconcile_pass(&self) -> PassReport {
        let started = Instant::now();
        let mut report = PassReport::default();
        let containers = match self.docker.list_managed(&self.config.instance).await {
            Ok(c) => c,
            Err(e) => {
                self.metrics.docker_error("list");
                tracing::warn!(error = %e, "reconcile: cannot list containers");
                report.errors += 1;
                return report;
            }
        };
        let active = match self.store.list_active(None) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "reconcile: cannot read the store");
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
            let known = session_label(c).is_some_and(|id| active_ids.contains(&id));
            let old = t.saturating_sub(u64::try_from(c.created).unwrap_or(0)) >= orphan_grace;
            let ended =
                session_label(c).is_some_and(|id| matches!(self.store.get_ended(&id), Ok(Some(_))));
            !known && (old || ended)
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
        let orphan_results = futures_util::future::join_all(orphan_actions.map(|c| async move {
            let r = self.remove_container(&c.id).await;
            tracing::info!(target: "audit", container = %c.id, session = ?c.labels.get(labels::SESSION), ok = r.is_ok(), "orphan container removed");
            r
        }))
        .await;
        for r in orphan_results {
            match r {
                Ok(()) => {
                    report.orphans_removed += 1;
                    self.metrics.reconciled("orphan_removed");
                }
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

    async fn reconcile_session(
        &self,
        s: &Session,
        c: Option<&ContainerStatus>,
        t: u64,
        creating_grace: u64,
    ) -> Outcome {
        match s.state {
            SessionState::Running => match c {
                None => {
                    self.end_as(s, SessionState::Gone, "the container disappeared")
                        .await
                }
                Some(c) if is_dead(&c.state) => {
                    if self.remove_container(&c.id).await.is_err() {
                        self.metrics.docker_error("remove");
                        return Outcome::Error;
                    }
                    self.end_as(s, SessionState::Exited, "the session's program exited")
                        .await
                }
                Some(_) => Outcome::Nothing,
            },
            SessionState::Creating if t.saturating_sub(s.created_at) >= creating_grace => {
                if let Some(c) = c {
                    if self.remove_container(&c.id).await.is_err() {
                        return Outcome::Error;
                    }
                }
                self.end_as(s, SessionState::Failed, "creation did not finish")
                    .await
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

    async fn end_as(&self, s: &Session, state: SessionState, reason: &str) -> Outcome {
        match self.store.end(
            &s.id,
            state,
            SYSTEM,
            reason,
            now(),
            self.config.control.history_per_user,
        ) {
            Ok(_) => {
                tracing::info!(target: "audit", session = %s.id, sub = %s.owner, state = state.as_str(), reason, "session ended by the reconciler");
                self.metrics.reconciled(state.as_str());
                match state {
                    SessionState::Gone => Outcome::Gone,
                    SessionState::Exited => Outcome::Exited,
                    _ => Outcome::Failed,
                }
            }
            Err(crate::store::StoreError::NotFound) => Outcome::Nothing,
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
        let target = s.container_id.clone().unwrap_or_default();
        match self.docker.inspect(&target).await {
            Ok(None) => {
                self.end_as(&s, SessionState::Gone, "the container was removed")
                    .await;
            }
            Ok(Some(c)) if is_dead(&c.state) => {
                let _ = self.remove_container(&c.id).await;
                let reason = if action == "oom" {
                    "the session ran out of memory"
                } else {
                    "the session's program exited"
                };
                self.end_as(&s, SessionState::Exited, reason).await;
            }
            Ok(Some(_)) => {}
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "event: inspect failed; the next pass will decide")
            }
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

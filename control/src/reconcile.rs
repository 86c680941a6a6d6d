//! The reconciler: makes the store agree with Docker, host by host (design §7).
//!
//! Each Docker host has its own event stream and its own share of every pass, and a
//! configured host is probed every second: one that stops answering has its running
//! sessions recorded `unreachable` (never `gone`: nothing is known to have ended, and
//! nothing is removed), and once it answers again a pass over it puts them back to
//! `running` or ends them with what really happened. Other hosts are untouched.
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

use crate::docker::{ContainerStatus, Docker, DockerError, EventAction};
use crate::hosts::{Host, Probe};
use crate::labels::{self, SessionLabels};
use crate::model::SessionWorkspace;
use crate::model::{Recording, Session, SessionState};
use crate::service::{container_name, now, Sessions, Workspaces, SYSTEM};
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
    /// Interrupted ends taken over: their container's stop started in the background.
    pub finished: usize,
    /// Labelled containers without a record, removed.
    pub orphans_removed: usize,
    /// Records ended `failed` because the out-of-memory killer struck their container.
    pub oom: usize,
    /// Running records whose host stopped answering, recorded `unreachable`.
    pub unreachable: usize,
    /// `unreachable` records whose host answers again and whose container runs, back
    /// to `running`.
    pub recovered: usize,
    /// Docker calls or store reads that failed (timeouts included).
    pub errors: usize,
}

impl PassReport {
    fn add(&mut self, o: &PassReport) {
        self.gone += o.gone;
        self.exited += o.exited;
        self.failed += o.failed;
        self.oom += o.oom;
        self.finished += o.finished;
        self.orphans_removed += o.orphans_removed;
        self.unreachable += o.unreachable;
        self.recovered += o.recovered;
        self.errors += o.errors;
    }
}

/// How often, and how far apart, a container killed by SIGKILL is inspected again for
/// Docker's out-of-memory mark (see `Reconciler::settle_running`): 0.6 s, so that a
/// container killed from outside is still recorded within two seconds.
const OOM_SETTLE_TRIES: usize = 4;
const OOM_SETTLE_WAIT: Duration = Duration::from_millis(150);
/// The same for a session under another OCI runtime than the daemon's own (gVisor's
/// runsc reports the out-of-memory end itself, and on a busy host its mark was seen to
/// come 0.7 s after the sandbox died): up to 3 s.
const OOM_SETTLE_TRIES_OTHER_RUNTIME: usize = 12;
const OOM_SETTLE_WAIT_OTHER_RUNTIME: Duration = Duration::from_millis(250);

/// The `end_reason` of a session whose container the kernel's out-of-memory killer
/// struck (it ends `failed`); it starts with the stable word `oom`.
pub const OOM_REASON: &str = "oom: the session ran out of memory (its profile's memory limit)";

/// How often a configured host is asked whether it answers.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

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

/// Repairs drift between the store and Docker for the sessions of one control.
#[derive(Clone)]
pub struct Reconciler {
    sessions: Sessions,
    /// For the volume pass it starts ([`crate::volumes`]).
    workspaces: Workspaces,
}

impl Reconciler {
    /// A reconciler for `sessions`; `workspaces` for the volume pass it runs.
    pub fn new(sessions: Sessions, workspaces: Workspaces) -> Self {
        Reconciler {
            sessions,
            workspaces,
        }
    }

    /// Rebuilds the store from container labels when it is empty (fresh or lost) and
    /// running session containers of this instance exist, on every host that answers;
    /// each session is recorded on the host its label names (or, for a container made
    /// before hosts were labelled, the host it was found on). Returns how many were
    /// restored.
    pub async fn rebuild_from_labels(&self) -> Result<usize, RebuildError> {
        let c = &self.sessions;
        if !c.store().is_empty() {
            return Ok(0);
        }
        let mut sessions = Vec::new();
        let rebuilt_at = now();
        for host in c.hosts().iter().filter(|h| h.is_up()) {
            let listed = match host.docker() {
                Ok(d) => d.list_managed(&c.config().instance).await,
                Err(e) => Err(e),
            };
            let containers = match listed {
                Ok(list) => list,
                // The implicit host fails as the one daemon always did; a configured
                // host that fails now is rebuilt from on a later start.
                Err(e) if !host.is_monitored() => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(host = %host.name(), error = %e, "cannot list the host's session containers to rebuild the store");
                    continue;
                }
            };
            sessions.extend(
                containers
                    .iter()
                    .filter(|s| s.state.is_running())
                    .filter(|s| labels::is_on_host(&s.labels, host.name()))
                    .filter_map(|s| {
                        let l = SessionLabels::read(&s.labels)?;
                        // The profile's, as a create would have set it.
                        let record = c
                            .config()
                            .profiles
                            .get(&l.profile)
                            .map_or(Recording::Off, |p| Recording::of(p.record, p.record_input));
                        Some(Session {
                            id: l.id,
                            owner: l.owner,
                            name: l.name,
                            profile: l.profile,
                            host: l.host.unwrap_or_else(|| host.name().to_owned()),
                            options: Default::default(),
                            state: SessionState::Running,
                            created_at: l.created.unwrap_or(u64::try_from(s.created).unwrap_or(0)),
                            container_id: Some(s.id.clone()),
                            ended_at: None,
                            ended_by: None,
                            end_reason: None,
                            // Unknown: counted from now, so that a rebuild never ends
                            // a session someone was using for being idle.
                            last_input: Some(rebuilt_at),
                            record,
                            shares: Vec::new(),
                            peers: Vec::new(),
                            // Its volume, from the label; which record it was is for
                            // the workspaces' own books.
                            workspace: l.workspace.map(|volume| SessionWorkspace {
                                id: None,
                                volume,
                                read_only: l.workspace_read_only,
                            }),
                        })
                    }),
            );
        }
        let restored = c.store().insert_rebuilt(&sessions)?;
        if restored > 0 {
            tracing::warn!(target: "audit", restored, "store was empty: sessions rebuilt from container labels");
            c.metrics().reconciled("rebuilt");
        }
        Ok(restored)
    }

    /// One full pass over every host, then the counts recomputed.
    ///
    /// Hosts are reconciled concurrently and each on its own (see [`Reconciler::pass_host`]):
    /// a host that does not answer never holds up or changes the others.
    pub async fn pass(&self) -> PassReport {
        let c = &self.sessions;
        let started = Instant::now();
        let hosts: Vec<Arc<Host>> = c.hosts().iter().cloned().collect();
        let reports = futures_util::future::join_all(hosts.iter().map(|h| self.pass_host(h))).await;
        let mut report = PassReport::default();
        for r in &reports {
            report.add(r);
        }
        self.recount(&mut report);
        c.metrics()
            .reconcile_pass_seconds
            .observe(started.elapsed().as_secs_f64());
        report
    }

    fn recount(&self, report: &mut PassReport) {
        let c = &self.sessions;
        match c.store().recount() {
            Ok(total) => {
                c.metrics().sessions_active.set(i64::from(total));
            }
            Err(e) => {
                tracing::error!(error = %e, "reconcile: cannot recount active sessions");
                report.errors += 1;
            }
        }
    }

    /// One pass over one host.
    ///
    /// A host that did not answer its last probe is not listed: its running sessions
    /// are recorded `unreachable` and nothing else happens. Otherwise the store is read
    /// before Docker is listed, so every container a record points at was made before
    /// the listing; each action is then decided in the store first (an end that holds
    /// only if the record is still in the state the decision was based on) and carried
    /// out in Docker after. Sessions this process is creating right now are never
    /// touched, however long Docker takes.
    pub async fn pass_host(&self, host: &Host) -> PassReport {
        let c = &self.sessions;
        let mut report = PassReport::default();
        if !host.is_up() {
            self.mark_unreachable(host, &mut report);
            return report;
        }
        let all_active = match c.store().list_active(None) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "reconcile: cannot read the store");
                report.errors += 1;
                return report;
            }
        };
        let docker = match host.docker() {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(host = %host.name(), error = %e, "reconcile: no client for the host");
                report.errors += 1;
                return report;
            }
        };
        let containers = match docker.list_managed(&c.config().instance).await {
            Ok(list) => list,
            Err(e) => {
                c.metrics().docker_error("list");
                tracing::warn!(host = %host.name(), error = %e, "reconcile: cannot list containers");
                report.errors += 1;
                return report;
            }
        };
        // A container that names another host is that host's to judge (two entries
        // may point at one daemon).
        let containers: Vec<ContainerStatus> = containers
            .into_iter()
            .filter(|s| labels::is_on_host(&s.labels, host.name()))
            .collect();
        let mut by_session: HashMap<SessionId, &ContainerStatus> = HashMap::new();
        for s in &containers {
            if let Some(id) = labels::session_id(&s.labels) {
                by_session.insert(id, s);
            }
        }
        let t = now();
        let creating_grace = c.config().control.creating_grace_seconds;

        let record_actions = all_active
            .iter()
            .filter(|s| s.host == host.name())
            .map(|s| {
                let container = by_session.get(&s.id).copied();
                self.reconcile_session(s, container, &docker, t, creating_grace)
            });
        let active_ids: HashSet<SessionId> = all_active.iter().map(|s| s.id).collect();
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
                Outcome::Oom => report.oom += 1,
                Outcome::Finished => report.finished += 1,
                Outcome::Recovered => report.recovered += 1,
                Outcome::Error => report.errors += 1,
            }
        }
        let orphan_results = futures_util::future::join_all(
            orphans.into_iter().map(|s| self.remove_orphan(s, &docker)),
        )
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
        report
    }

    /// Records the running sessions of a host that does not answer as `unreachable`
    /// (each only if still running: a record that moved on is left as it is). Gateways
    /// learn it from the feed and refuse those terminals at once.
    fn mark_unreachable(&self, host: &Host, report: &mut PassReport) {
        let c = &self.sessions;
        let active = match c.store().list_active(None) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "reconcile: cannot read the store");
                report.errors += 1;
                return;
            }
        };
        for s in active
            .iter()
            .filter(|s| s.host == host.name() && s.state == SessionState::Running)
        {
            let marked = c.store().update(&s.id, |r| {
                if r.state == SessionState::Running {
                    r.state = SessionState::Unreachable;
                }
            });
            match marked {
                Ok(r) if r.state == SessionState::Unreachable => {
                    report.unreachable += 1;
                    c.metrics().reconciled("unreachable");
                    tracing::warn!(target: "audit", session = %s.id, sub = %s.owner, host = %host.name(), "session unreachable: its Docker host does not answer");
                }
                Ok(_) | Err(StoreError::NotFound) => {}
                Err(e) => {
                    tracing::error!(session = %s.id, error = %e, "reconcile: store write failed");
                    report.errors += 1;
                }
            }
        }
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
        let c = &self.sessions;
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
    async fn remove_orphan(
        &self,
        s: &ContainerStatus,
        docker: &Docker,
    ) -> Result<bool, DockerError> {
        let c = &self.sessions;
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
        let r = c.remove_container(docker, &s.id).await;
        tracing::info!(target: "audit", container = %s.id, session = ?s.labels.get(labels::SESSION), ok = r.is_ok(), "orphan container removed");
        r.map(|()| true)
    }

    async fn reconcile_session(
        &self,
        s: &Session,
        container: Option<&ContainerStatus>,
        docker: &Docker,
        t: u64,
        creating_grace: u64,
    ) -> Outcome {
        let c = &self.sessions;
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
                self.settle_running(s, cid, docker, "the session's program exited", false)
                    .await
            }
            SessionState::Unreachable => {
                let Some(cid) = s.container_id.as_deref() else {
                    return self.end_as(s, SessionState::Gone, "the container disappeared");
                };
                if container.is_some_and(|c| !c.state.is_dead()) {
                    return self.recover(s);
                }
                self.settle_running(
                    s,
                    cid,
                    docker,
                    "the session's program exited while its host was unreachable",
                    false,
                )
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
                if let Err(e) = c.remove_container(docker, &target).await {
                    // The record has ended; the container is now an orphan of an ended
                    // session and goes on a later pass.
                    c.metrics().docker_error("remove");
                    tracing::warn!(session = %s.id, error = %e, "reconcile: cannot remove the container of an abandoned create; a later pass will");
                    return Outcome::Error;
                }
                outcome
            }
            SessionState::Creating => Outcome::Nothing,
            // An end decided but not carried out (a crash, a failed removal, a host
            // that did not answer): its stop is resumed in the background, like any
            // end's, so a pass never waits out a profile's grace. An end this process
            // is carrying out right now is left to it.
            SessionState::Stopping => {
                if c.stop_in_background(s.clone()) {
                    tracing::info!(target: "audit", session = %s.id, sub = %s.owner, by = s.ended_by.as_deref().unwrap_or(SYSTEM), reason = s.end_reason.as_deref().unwrap_or(""), "reconcile: resuming an interrupted end");
                    c.metrics().reconciled("finished_stopping");
                    Outcome::Finished
                } else {
                    Outcome::Nothing
                }
            }
            _ => Outcome::Nothing,
        }
    }

    /// A `running` record whose container looked missing or dead: inspect that
    /// container now, end the record only if it is still `running`, and only then
    /// remove what is left of the container.
    ///
    /// A container the kernel's out-of-memory killer struck (Docker's `OOMKilled`, or
    /// the `oom` event this settles) ends `failed` with [`OOM_REASON`]: the session did
    /// not end by itself, it hit its profile's memory limit.
    async fn settle_running(
        &self,
        s: &Session,
        cid: &str,
        docker: &Docker,
        exit_reason: &str,
        oom_event: bool,
    ) -> Outcome {
        let c = &self.sessions;
        let mut inspected = docker.inspect(cid).await;
        // Docker learns of an out-of-memory kill from its own event, which can come after
        // the program's death: a program killed by SIGKILL (exit 137) without the mark yet
        // is asked about again a few times before it is judged to have simply exited.
        let other_runtime = c
            .config()
            .profiles
            .get(&s.profile)
            .is_some_and(|p| p.runtime.is_some());
        let (tries, wait) = if other_runtime {
            (
                OOM_SETTLE_TRIES_OTHER_RUNTIME,
                OOM_SETTLE_WAIT_OTHER_RUNTIME,
            )
        } else {
            (OOM_SETTLE_TRIES, OOM_SETTLE_WAIT)
        };
        for _ in 0..tries {
            match &inspected {
                Ok(Some(found))
                    if found.state.is_dead()
                        && !found.oom_killed
                        && !oom_event
                        && found.exit_code == Some(137) =>
                {
                    tokio::time::sleep(wait).await;
                    inspected = docker.inspect(cid).await;
                }
                _ => break,
            }
        }
        match inspected {
            Ok(None) => self.end_as(s, SessionState::Gone, "the container disappeared"),
            Ok(Some(found)) if found.state.is_dead() => {
                let outcome = if found.oom_killed || oom_event {
                    match self.end_as(s, SessionState::Failed, OOM_REASON) {
                        Outcome::Failed => Outcome::Oom,
                        other => other,
                    }
                } else {
                    self.end_as(s, SessionState::Exited, exit_reason)
                };
                if !matches!(outcome, Outcome::Exited | Outcome::Oom) {
                    return outcome;
                }
                if let Err(e) = c.remove_container(docker, &found.id).await {
                    c.metrics().docker_error("remove");
                    tracing::warn!(session = %s.id, error = %e, "reconcile: cannot remove an ended session's container; a later pass will");
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

    /// An `unreachable` session whose host answers again and whose container runs:
    /// back to `running` (only if still `unreachable`), and its route with it.
    fn recover(&self, s: &Session) -> Outcome {
        let c = &self.sessions;
        let back = c.store().update(&s.id, |r| {
            if r.state == SessionState::Unreachable {
                r.state = SessionState::Running;
            }
        });
        match back {
            Ok(r) if r.state == SessionState::Running => {
                tracing::info!(target: "audit", session = %s.id, sub = %s.owner, host = %s.host, "session reachable again");
                c.metrics().reconciled("recovered");
                Outcome::Recovered
            }
            Ok(_) | Err(StoreError::NotFound) => Outcome::Nothing,
            Err(e) => {
                tracing::error!(session = %s.id, error = %e, "reconcile: store write failed");
                Outcome::Error
            }
        }
    }

    /// Ends `s` as `state`, but only if it is still in the state this decision was
    /// based on (`s.state`).
    fn end_as(&self, s: &Session, state: SessionState, reason: &str) -> Outcome {
        let c = &self.sessions;
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
    async fn on_event(&self, host: &Host, id: SessionId, action: EventAction) {
        let s = match self.sessions.store().get(&id) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "event: cannot read the session; the next pass decides");
                return;
            }
        };
        if s.state != SessionState::Running || s.host != host.name() {
            return;
        }
        let Some(cid) = s.container_id.clone() else {
            return;
        };
        let docker = match host.docker() {
            Ok(d) => d,
            Err(_) => return,
        };
        // An `oom` event may come before the program has died (the container is then
        // still running and nothing happens); the `die` that follows finds Docker's
        // `OOMKilled` set.
        let settled = self
            .settle_running(
                &s,
                &cid,
                &docker,
                "the session's program exited",
                action == EventAction::Oom,
            )
            .await;
        if let Outcome::Error = settled {
            tracing::warn!(session = %id, "event: could not settle; the next pass decides");
        }
    }

    /// Runs, until `shutdown` fires: each host's event listener, the probe of each
    /// configured host, the culler ([`crate::cull`]), the recordings' retention
    /// ([`crate::retention`]), the volume pass ([`crate::volumes`]) and the periodic
    /// pass.
    pub async fn run(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut tasks = vec![
            tokio::spawn(crate::cull::run(self.sessions.clone(), shutdown.clone())),
            tokio::spawn(crate::retention::run(
                self.sessions.clone(),
                shutdown.clone(),
            )),
            tokio::spawn(crate::volumes::run(
                self.workspaces.clone(),
                shutdown.clone(),
            )),
        ];
        for host in self.sessions.hosts().iter() {
            tasks.push(tokio::spawn(self.clone().listen_events(Arc::clone(host))));
            if host.is_monitored() {
                tasks.push(tokio::spawn(self.clone().watch(Arc::clone(host))));
            }
        }
        let mut tick = tokio::time::interval(Duration::from_secs(
            self.sessions.config().control.reconcile_interval_seconds,
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
        for t in tasks {
            t.abort();
        }
    }

    /// Probes `host` every [`PROBE_INTERVAL`]: when it stops answering its running
    /// sessions become `unreachable` at once; when it answers again it is reconciled
    /// at once, without waiting for the next pass.
    async fn watch(self, host: Arc<Host>) {
        let allow_no_seccomp = self.sessions.config().control.allow_no_seccomp;
        let mut tick = tokio::time::interval(PROBE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match host.probe(allow_no_seccomp).await {
                Probe::Down { went_down } => {
                    if went_down {
                        tracing::warn!(host = %host.name(), "Docker host stopped answering");
                    }
                    // Every time: a create that was in flight when the host went down
                    // may have recorded `running` since.
                    let mut r = PassReport::default();
                    self.mark_unreachable(&host, &mut r);
                }
                Probe::Up { came_back: true } => {
                    tracing::info!(host = %host.name(), "Docker host answers again; reconciling it");
                    let mut r = self.pass_host(&host).await;
                    self.recount(&mut r);
                    tracing::info!(host = %host.name(), ?r, "reconciled the host that came back");
                }
                Probe::Up { came_back: false } => {}
            }
        }
    }

    /// Follows `host`'s event stream for as long as control runs. A stream that breaks
    /// (the daemon restarted, the connection dropped) is resumed from the moment it
    /// broke, and once the daemon answers again the host gets one pass of its own:
    /// whatever happened while nobody listened (a container that died while its daemon
    /// was down) is settled at once rather than at the next periodic pass.
    async fn listen_events(self, host: Arc<Host>) {
        const FIRST_RETRY: Duration = Duration::from_millis(200);
        // Reconnecting to a local socket is cheap; a restarted daemon is followed
        // again within a second of answering.
        const MAX_RETRY: Duration = Duration::from_secs(1);
        let mut backoff = FIRST_RETRY;
        // When the stream last broke, while no event has been read since.
        let mut broke_at: Option<std::time::SystemTime> = None;
        let mut pass_due = false;
        loop {
            // No client yet (its socket was never there): wait as for a failed stream.
            if let Ok(docker) = host.docker() {
                // Set again by the break that ends the stream opened below.
                if pass_due && docker.ping().await.is_ok() {
                    let (me, h) = (self.clone(), Arc::clone(&host));
                    tokio::spawn(async move {
                        let mut r = me.pass_host(&h).await;
                        me.recount(&mut r);
                        tracing::info!(host = %h.name(), ?r, "reconciled the host after its event stream came back");
                    });
                }
                let since = broke_at.unwrap_or_else(std::time::SystemTime::now);
                let mut stream =
                    Box::pin(docker.events_since(&self.sessions.config().instance, since));
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(ev) => {
                            backoff = FIRST_RETRY;
                            broke_at = None;
                            if !labels::is_on_host(&ev.labels, host.name()) {
                                continue;
                            }
                            if let Some(id) = labels::session_id(&ev.labels) {
                                self.on_event(&host, id, ev.action).await;
                            }
                        }
                        Err(e) => {
                            // Once per break, not once per retry.
                            if broke_at.is_none() {
                                tracing::warn!(host = %host.name(), error = %e, "docker event stream failed; reconnecting");
                            }
                            break;
                        }
                    }
                }
            }
            if broke_at.is_none() {
                broke_at = Some(std::time::SystemTime::now());
            }
            pass_due = true;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_RETRY);
        }
    }
}

/// What reconciling one record did.
enum Outcome {
    Nothing,
    Gone,
    Exited,
    Failed,
    /// Ended `failed` by the out-of-memory killer.
    Oom,
    Finished,
    Recovered,
    Error,
}

//! The control service's operations: create, end, list, redraw, locks, route feed.
//! HTTP lives in `api`; this module decides (through `policy`), writes the store and
//! drives Docker, with compensation on every failure path.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use config::{Config, Profile};
use policy::audit::AuditEntry;
use policy::{
    Action, Decision, EndCause, OriginPolicy, Principal, QuotaLimits, SessionId, Sub, TokenError,
    Verifier,
};
use sha2::Digest;

use crate::docker::{ContainerRequest, Docker, DockerError};
use crate::error::ApiError;
use crate::hosts::Hosts;
use crate::labels;
use crate::metrics::Metrics;
use crate::model::{FeedPage, RouteLookup, Session, SessionState};
use crate::recordings::Recordings;
use crate::store::{AuditQuery, Ending, Store, StoreError};

mod grants;
mod shares;
mod sign_ins;
mod targets;

// The API's bodies and views live in `api::wire`; the operations here take and return
// them under these paths.
pub use crate::api::wire::{
    CreateRequest, CreatedShare, ListedTarget, RedrawRequest, RevocationRequest, SessionView,
    ShareRequest, ShareView, SignInReport, SignInView, TargetPatch, TargetRequest, TargetView,
};

/// Who ends sessions the reconciler ends.
pub const SYSTEM: &str = "termgate";

/// A character a session name may not hold: control characters, and the invisible
/// format characters that make a name display as another one (bidirectional
/// overrides and isolates, zero-width characters, the byte-order mark, line and
/// paragraph separators).
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}')
}

/// Where the time of a create went.
#[derive(Debug, Clone, Copy)]
pub struct CreateTiming {
    /// Docker's share: home volume, create and start.
    pub docker: Duration,
    /// The whole create inside control.
    pub total: Duration,
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Aborts the process at a named step when `TERMGATE_FAILPOINT` names it. Debug builds
/// only: the crash-safety tests use it to stop control between two steps.
pub fn failpoint(name: &str) {
    if cfg!(debug_assertions) && std::env::var("TERMGATE_FAILPOINT").is_ok_and(|v| v == name) {
        eprintln!("failpoint {name}: aborting");
        std::process::abort();
    }
}

/// Name of a user's persistent home volume: stable, label-safe, collision-free.
pub fn home_volume_name(instance: &str, sub: &Sub) -> String {
    let digest = sha2::Sha256::digest(sub.as_str().as_bytes());
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    format!("termgate-home-{instance}-{hex}")
}

/// Docker's name for a session's container.
pub fn container_name(id: &SessionId) -> String {
    format!("termgate-{id}")
}

/// The control service.
pub struct Control {
    config: Arc<Config>,
    store: Store,
    hosts: Hosts,
    verifier: Verifier,
    /// The Origins allowed to open terminals (`GET /v1/authz`): the gateway's list.
    origins: OriginPolicy,
    metrics: Metrics,
    redraw_locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Sessions being created by this process right now. The reconciler never
    /// abandons these, however long Docker takes; after a restart the set is empty, so
    /// the `creating` grace still cleans up after a process that died mid-create.
    creating: InFlight,
    /// Sessions whose container is being removed right now, so that the API and the
    /// reconciler never race to remove the same container.
    ending: InFlight,
    /// Terminals open on each session now, as the gateways report them.
    live: crate::live::LiveTerminals,
    /// The revocations in force (`sign_ins`), checked on every verified token.
    revoked: std::sync::RwLock<policy::revocation::RevocationSet>,
    /// Bumped after a revocation is applied to `revoked`, for grant watchers (the
    /// store's revision moves before it is).
    revocations_applied: tokio::sync::watch::Sender<u64>,
    /// The sealer of terminal grants, made on first use (`service/grants.rs`).
    grants: std::sync::OnceLock<policy::grant::GrantSealer>,
    /// Grants waiting for a pool that takes them by handle.
    grant_handles: grants::Handles,
}

/// Whether `who` may lock and unlock users: admins only. Checked before the user named
/// is even read, so a non-admin learns nothing from the name.
pub fn may_lock(who: &Principal) -> Result<(), ApiError> {
    if who.admin {
        Ok(())
    } else {
        Err(ApiError::ADMIN_REQUIRED.with_message("only an admin may lock users"))
    }
}

/// Whose sessions a listing asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whose {
    /// The caller's own.
    Own,
    /// One owner's (admin).
    Owner(Sub),
    /// An owner named by something that is no valid sub, so owns no session (admin).
    NoValidOwner,
    /// Everyone's (admin).
    Everyone,
}

impl Whose {
    /// From a request's `all` and `owner`: `all` wins; an `owner` that is no valid sub
    /// owns nothing.
    pub fn asked(all: bool, owner: Option<&str>) -> Whose {
        match (all, owner) {
            (true, _) => Whose::Everyone,
            (false, Some(o)) => Sub::parse(o).map_or(Whose::NoValidOwner, Whose::Owner),
            (false, None) => Whose::Own,
        }
    }
}

/// Whose sessions a listing shows, once allowed.
enum Scope<'a> {
    /// Everyone's.
    Everyone,
    /// One owner's.
    Owner(&'a Sub),
    /// No one's.
    Nobody,
}

/// A set of sessions that some task of this process is working on.
#[derive(Default)]
struct InFlight(Arc<Mutex<HashSet<SessionId>>>);

impl InFlight {
    /// Marks `id`; `None` when another task already holds it. The mark goes when the
    /// returned guard is dropped, on every path out of the task; the guard owns its
    /// share of the set, so it can move into a spawned task.
    fn mark(&self, id: SessionId) -> Option<InFlightGuard> {
        // The set's lock is released before a guard exists: a guard's drop takes it.
        let inserted = lock_set(&self.0).insert(id);
        inserted.then(|| InFlightGuard(Arc::clone(&self.0), id))
    }

    fn contains(&self, id: &SessionId) -> bool {
        lock_set(&self.0).contains(id)
    }
}

fn lock_set(set: &Mutex<HashSet<SessionId>>) -> std::sync::MutexGuard<'_, HashSet<SessionId>> {
    // The set is consistent after any panic (single insert/remove calls).
    set.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes its id from an [`InFlight`] set when dropped.
struct InFlightGuard(Arc<Mutex<HashSet<SessionId>>>, SessionId);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        lock_set(&self.0).remove(&self.1);
    }
}

impl Control {
    /// Assembles the service. The store's routes should already point at the hosts'
    /// pools ([`Store::set_pools`] with [`Hosts::pools`]).
    pub fn new(config: Arc<Config>, store: Store, hosts: Hosts, verifier: Verifier) -> Self {
        Control {
            origins: OriginPolicy::new(config.gateway_origins()),
            config,
            store,
            hosts,
            verifier,
            metrics: Metrics::default(),
            redraw_locks: Mutex::new(HashMap::new()),
            creating: InFlight::default(),
            ending: InFlight::default(),
            live: crate::live::LiveTerminals::default(),
            revoked: Default::default(),
            revocations_applied: tokio::sync::watch::channel(0).0,
            grants: std::sync::OnceLock::new(),
            grant_handles: Default::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The recordings gateways handed over: their directory and size limit.
    pub fn recordings(&self) -> Recordings {
        let c = &self.config;
        Recordings::new(
            c.resolve(&c.control.recordings_dir),
            c.control.max_recording_bytes,
        )
    }

    /// The store; the reconciler reads and repairs it directly.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The Docker hosts; the reconciler probes, lists and inspects through them.
    pub(crate) fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// The Docker client of host `name`; a host this configuration no longer has is
    /// answered as unavailable (its sessions wait for it to come back).
    pub(crate) fn docker_of(&self, name: &str) -> Result<Docker, DockerError> {
        self.hosts
            .get(name)
            .ok_or_else(|| {
                DockerError::Unavailable(format!("no Docker host named {name:?} is configured"))
            })?
            .docker()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The profiles users may create sessions from, by name.
    pub fn profiles(&self) -> &BTreeMap<String, Profile> {
        &self.config.profiles
    }

    /// The largest request body the API reads, in bytes.
    pub fn max_body_bytes(&self) -> usize {
        self.config.control.max_body_bytes
    }

    /// The token gateways present on the route feed, when configured.
    pub fn service_token(&self) -> Option<&[u8]> {
        self.config
            .secrets()
            .service_token
            .as_ref()
            .map(|s| s.expose())
    }

    /// Who a bearer token proves the caller is, now.
    pub fn verify(&self, token: &[u8]) -> Result<Principal, TokenError> {
        let who = self.verifier.verify(token, now())?;
        self.check_revoked(token, &who)?;
        Ok(who)
    }

    /// The Origins allowed to open a terminal with the cookie (the gateway's list).
    pub fn origins(&self) -> &OriginPolicy {
        &self.origins
    }

    /// The store's newest published revision.
    pub fn rev(&self) -> u64 {
        self.store.rev()
    }

    /// Writes everything the store committed so far to disk.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.store.flush()
    }

    /// Whether this process is creating session `id` right now.
    pub fn is_being_created(&self, id: &SessionId) -> bool {
        self.creating.contains(id)
    }

    /// Whether this process is ending session `id` right now.
    pub fn is_being_ended(&self, id: &SessionId) -> bool {
        self.ending.contains(id)
    }

    /// Ends session `id` as `state` if it is still in one of `from`, as decided by
    /// `by` for `reason`. Refused ends (already ended, or moved on) are `Ok(None)`.
    pub fn end_record(
        &self,
        id: &SessionId,
        from: &[SessionState],
        state: SessionState,
        by: &str,
        reason: &str,
    ) -> Result<Option<Session>, StoreError> {
        let ending = Ending {
            from,
            state,
            by,
            reason,
            at: now(),
        };
        match self
            .store
            .end(id, &ending, self.config.control.history_per_user)
        {
            Ok(s) => Ok(Some(s)),
            Err(StoreError::NotFound | StoreError::StateChanged(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn limits(&self) -> QuotaLimits {
        QuotaLimits {
            per_user: self.config.quota.per_user,
            global: self.config.quota.global,
        }
    }

    /// Whether `sub` is locked.
    pub fn is_locked(&self, sub: &Sub) -> Result<bool, ApiError> {
        Ok(self.store.is_locked(sub)?)
    }

    fn refresh_gauges(&self) {
        match self.store.active_count() {
            Ok(total) => {
                self.metrics.sessions_active.set(i64::from(total));
            }
            Err(e) => tracing::warn!(error = %e, "cannot count active sessions for the gauge"),
        }
        self.metrics
            .feed_rev
            .set(i64::try_from(self.store.rev()).unwrap_or(i64::MAX));
    }

    /// Creates a session for `who`; also says how long Docker took and how long in all.
    pub async fn create(
        &self,
        who: &Principal,
        req: CreateRequest,
    ) -> Result<(Session, CreateTiming), ApiError> {
        let started = Instant::now();
        if let Decision::Deny(d) =
            policy::decide(who, None, self.is_locked(&who.sub)?, Action::Create)
        {
            return Err(d);
        }
        let profile = self.config.profiles.get(&req.profile).ok_or_else(|| {
            ApiError::UNKNOWN_PROFILE.with_message(format!("no profile named {:?}", req.profile))
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
        };
        // Marked before the record exists, so no reconcile pass ever sees this record
        // without the mark while this process works on it.
        let _in_flight = self
            .creating
            .mark(session.id)
            .ok_or_else(|| ApiError::INTERNAL.with_message("session id already in flight"))?;
        self.store
            .insert_placed(&mut session, self.limits(), |active| {
                self.hosts.place(&profile.hosts, active)
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
        self.refresh_gauges();

        let docker_started = Instant::now();
        let docker = self.docker_of(&session.host);
        let made = match &docker {
            Ok(docker) => self.make_container(&session, profile, docker).await,
            Err(e) => Err(DockerError::Unavailable(e.to_string())),
        };
        let docker_time = docker_started.elapsed();
        self.metrics
            .create_phase("docker", docker_time.as_secs_f64());
        let container_id = match made {
            Ok(id) => id,
            Err(e) => {
                self.metrics.docker_error("create");
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
                self.refresh_gauges();
                tracing::warn!(target: "audit", session = %session.id, sub = %who.sub, error = %e, "create failed");
                return Err(e.into());
            }
        };
        failpoint("create:after_start");
        let cid = container_id.clone();
        let updated = self.store.update(&session.id, move |s| {
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
                self.metrics
                    .create_phase("total", timing.total.as_secs_f64());
                self.refresh_gauges();
                tracing::info!(target: "audit", session = %s.id, sub = %who.sub, profile = %s.profile, host = %s.host, docker_ms = timing.docker.as_millis() as u64, total_ms = timing.total.as_millis() as u64, "session created");
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
                self.refresh_gauges();
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
        docker: &Docker,
    ) -> Result<String, DockerError> {
        let instance = &self.config.instance;
        let home = match &profile.home {
            Some(_) => {
                let volume = home_volume_name(instance, &s.owner);
                docker
                    .ensure_home_volume(&volume, &s.owner, instance)
                    .await?;
                Some(volume)
            }
            None => None,
        };
        let mut env: Vec<String> = profile
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for (opt, value) in &s.options {
            if let Some(o) = profile.options.get(opt) {
                env.push(format!("{}={value}", o.env));
            }
        }
        let req = ContainerRequest {
            name: container_name(&s.id),
            image: profile.image.clone(),
            command: profile.command.clone(),
            env,
            labels: labels::session_container(instance, s),
            spec: profile.sandbox_spec(home.as_deref()),
            tmp_size_mb: profile.tmp_size_mb,
        };
        let id = docker.create(&req).await?;
        failpoint("create:after_container");
        docker.start(&id).await?;
        Ok(id)
    }

    /// Looks a session up for `who`: active or ended; others' and unknown alike → 404.
    pub fn get(&self, who: &Principal, id: &SessionId) -> Result<Session, ApiError> {
        let s = match self.store.get(id)? {
            Some(s) => Some(s),
            None => self.store.get_ended(id)?,
        };
        let locked = self.is_locked(&who.sub)?;
        match policy::decide(
            who,
            s.as_ref().map(|s| s.owner.as_str()),
            locked,
            Action::Read,
        ) {
            Decision::Allow { .. } => s.ok_or(ApiError::NOT_FOUND),
            Decision::Deny(d) => Err(d),
        }
    }

    /// When `s` will end by itself under its profile's limits, if it is active and
    /// its profile has any.
    pub fn deadline(&self, s: &Session) -> Option<policy::Deadline> {
        if !s.state.is_active() {
            return None;
        }
        self.config
            .profiles
            .get(&s.profile)?
            .lifetime_limits()
            .deadline(s.created_at, s.last_input)
    }

    /// `s` as the API shows it, with its deadline.
    pub fn view<'a>(&self, s: &'a Session) -> SessionView<'a> {
        let mut v = SessionView::from(s);
        v.terminals = self.live.count(&s.id);
        if let Some(d) = self.deadline(s) {
            v.ends_at = Some(d.at);
            v.ends_because = Some(d.cause.as_str());
        }
        v
    }

    /// Records a gateway's report of the terminals it has open, per session and per
    /// user; `replica` names where it serves, so a process that replaces another there
    /// takes its place at once.
    pub fn record_terminals(
        &self,
        gateway: &str,
        replica: Option<&str>,
        every: Duration,
        counts: &[(SessionId, u32)],
        users: &[(Sub, u32)],
    ) {
        self.live.record(gateway, replica, every, counts, users);
    }

    /// What the live gateways other than `gateway` have open (the answer to its
    /// report).
    pub fn terminals_elsewhere(&self, gateway: &str) -> crate::live::Elsewhere {
        self.live.elsewhere(gateway)
    }

    /// Records the input times a gateway reported; returns how many sessions moved.
    pub fn record_input(&self, inputs: &[(SessionId, u64)]) -> Result<usize, ApiError> {
        Ok(self.store.record_input(inputs, now())?)
    }

    /// Ends session `id` if its profile's limits say it is due now (`idle` or
    /// `max_lifetime`), the way any end goes: recorded `stopping` by `termgate` with
    /// its reason and flushed, which removes its route (gateways close its terminals);
    /// then its container is stopped in the background ([`Control::stop_in_background`]).
    /// Decided again inside the store's write, so an input reported since the caller
    /// looked keeps the session. Returns the cause when this call ended it, once the
    /// decision is durable.
    pub fn end_if_due(self: &Arc<Self>, id: &SessionId) -> Result<Option<EndCause>, ApiError> {
        let t = now();
        let mut decided = None;
        let s = self.store.update(id, |s| {
            if s.state != SessionState::Running {
                return;
            }
            let Some(p) = self.config.profiles.get(&s.profile) else {
                return;
            };
            let limits = p.lifetime_limits();
            let Some(cause) = limits.due(s.created_at, s.last_input, t) else {
                return;
            };
            let reason = match cause {
                EndCause::Idle => format!(
                    "idle: no input on any of its terminals for {} s",
                    limits.idle_timeout.unwrap_or(0)
                ),
                EndCause::MaxLifetime => format!(
                    "max_lifetime: {} s since it was created",
                    limits.max_lifetime.unwrap_or(0)
                ),
            };
            s.state = SessionState::Stopping;
            s.ended_by = Some(SYSTEM.into());
            // Kept on the stopping record, so an end the reconciler finishes says why.
            s.end_reason = Some(reason);
            decided = Some(cause);
        });
        let s = match s {
            Ok(s) => s,
            Err(StoreError::NotFound) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(cause) = decided else {
            return Ok(None);
        };
        self.refresh_gauges();
        let reason = s.end_reason.clone().unwrap_or_default();
        tracing::info!(target: "audit", session = %s.id, sub = %s.owner, reason = cause.as_str(), detail = %reason, last_input = ?s.last_input, created_at = s.created_at, "session ended by its profile's limits");
        self.metrics.reconciled(cause.as_str());
        self.stop_in_background(s);
        Ok(Some(cause))
    }

    /// Active sessions of `who`, or (admin) of another owner or of everyone.
    pub fn list(&self, who: &Principal, whose: &Whose) -> Result<Vec<Session>, ApiError> {
        Ok(match self.list_target(who, whose)? {
            Scope::Everyone => self.store.list_active(None)?,
            Scope::Owner(o) => self.store.list_active(Some(o))?,
            Scope::Nobody => Vec::new(),
        })
    }

    /// Ended sessions, newest first, with the same visibility as [`Control::list`].
    pub fn history(&self, who: &Principal, whose: &Whose) -> Result<Vec<Session>, ApiError> {
        let limit = self.config.control.history_per_user;
        Ok(match self.list_target(who, whose)? {
            Scope::Everyone => self.store.list_history(None, limit)?,
            Scope::Owner(o) => self.store.list_history(Some(o), limit)?,
            Scope::Nobody => Vec::new(),
        })
    }

    fn list_target<'a>(&self, who: &'a Principal, whose: &'a Whose) -> Result<Scope<'a>, ApiError> {
        if self.is_locked(&who.sub)? {
            return Err(ApiError::LOCKED);
        }
        if *whose != Whose::Own && !who.admin {
            return Err(ApiError::ADMIN_REQUIRED
                .with_message("only an admin may list other users' sessions"));
        }
        Ok(match whose {
            Whose::Own => Scope::Owner(&who.sub),
            Whose::Owner(o) => Scope::Owner(o),
            Whose::NoValidOwner => Scope::Nobody,
            Whose::Everyone => Scope::Everyone,
        })
    }

    /// The active session `id`, if `who` may do `action` to it; others' and unknown alike
    /// are the same 404.
    fn authorized(
        &self,
        who: &Principal,
        id: &SessionId,
        action: Action,
    ) -> Result<Session, ApiError> {
        let s = self.store.get(id)?;
        let locked = self.is_locked(&who.sub)?;
        match policy::decide(who, s.as_ref().map(|s| s.owner.as_str()), locked, action) {
            Decision::Allow { .. } => s.ok_or(ApiError::NOT_FOUND),
            Decision::Deny(d) => Err(d),
        }
    }

    /// Ends a session, decision first: the record becomes `stopping` with who ended it
    /// and why, flushed, and its route leaves the feed in the same write, so gateways
    /// close its terminals and share viewers now. The container is then stopped on a
    /// task of its own ([`Control::stop_in_background`]). Returns once the decision is
    /// durable: the caller never waits for Docker.
    pub fn end(self: &Arc<Self>, who: &Principal, id: &SessionId) -> Result<(), ApiError> {
        let s = self.authorized(who, id, Action::End)?;
        let by = who.sub.to_string();
        let reason = if s.owner != who.sub {
            "ended by an admin"
        } else {
            "ended by its owner"
        };
        let by_for_record = by.clone();
        let mut decided_before = false;
        let s = self.store.update(id, |s| {
            // Decided inside the write, so of two racing ends exactly one wins and
            // keeps who and why.
            if s.state == SessionState::Stopping {
                decided_before = true;
                return;
            }
            s.state = SessionState::Stopping;
            s.ended_by = Some(by_for_record);
            s.end_reason = Some(reason.to_owned());
        })?;
        if decided_before {
            // Its end was decided already (by this caller, another, or the culler): to
            // the caller it is ended, as it will be in a moment.
            return Err(ApiError::NOT_FOUND);
        }
        failpoint("delete:after_stopping");
        self.refresh_gauges();
        tracing::info!(target: "audit", session = %id, sub = %by, owner = %s.owner, reason, "session ended");
        self.stop_in_background(s);
        Ok(())
    }

    /// Stops the container of the `stopping` session `s` and records it ended, on a
    /// task of its own that holds the session's `ending` mark from now on: whoever
    /// decided the end (an API call, the culler, a reconcile pass) never waits for
    /// Docker. `false` when another task of this process is ending it already. A stop
    /// that fails, like a crash, leaves the record `stopping`, which the next reconcile
    /// pass hands here again.
    pub(crate) fn stop_in_background(self: &Arc<Self>, s: Session) -> bool {
        let Some(mark) = self.ending.mark(s.id) else {
            return false;
        };
        let c = Arc::clone(self);
        tokio::spawn(async move {
            let _mark = mark;
            failpoint("end:before_stop");
            let started = Instant::now();
            match c.stop_and_record(&s).await {
                Ok(true) => {
                    tracing::info!(session = %s.id, sub = %s.owner, stop_ms = started.elapsed().as_millis() as u64, "ended session's container removed");
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(session = %s.id, error = %e.message, "could not remove an ended session's container; the reconciler will");
                }
            }
        });
        true
    }

    /// The stop itself, as a closed terminal would end its programs: a hang-up, up to
    /// the profile's `stop_grace_seconds` for them to exit, then removal by force; the
    /// record ends `terminated` only once the container is gone. `Ok(false)` when the
    /// record is no longer `stopping` (another task finished it).
    async fn stop_and_record(&self, s: &Session) -> Result<bool, ApiError> {
        // The record this task was handed may be a pass's stale copy.
        if !self
            .store
            .get(&s.id)?
            .is_some_and(|now| now.state == SessionState::Stopping)
        {
            return Ok(false);
        }
        let target = s
            .container_id
            .clone()
            .unwrap_or_else(|| container_name(&s.id));
        let docker = self.docker_of(&s.host)?;
        match docker.hang_up(&target).await {
            Ok(()) => match docker.wait_exit(&target, self.stop_grace(s)).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(session = %s.id, "the session's programs outlived their grace after the hang-up; removing by force");
                }
                Err(e) => {
                    tracing::warn!(session = %s.id, error = %e, "cannot tell whether the hung-up container stopped; removing by force");
                }
            },
            Err(e) => {
                self.metrics.docker_error("kill");
                tracing::warn!(session = %s.id, error = %e, "hang-up failed; removing by force");
            }
        }
        if let Err(e) = self.remove_container(&docker, &target).await {
            self.metrics.docker_error("remove");
            // The record stays `stopping`; the reconciler finishes the job later.
            return Err(e.into());
        }
        // A create racing with this end may have made the container under its name only.
        if s.container_id.is_some() {
            if let Err(e) = docker.remove(&container_name(&s.id)).await {
                tracing::warn!(session = %s.id, error = %e, "could not remove a container made under the session's name; the reconciler will");
            }
        }
        failpoint("delete:after_remove");
        let by = s.ended_by.clone().unwrap_or_else(|| SYSTEM.into());
        // Every end records its reason on the `stopping` record; one written by an
        // older version may lack it.
        let reason = s
            .end_reason
            .as_deref()
            .unwrap_or("ended (finished by the reconciler)");
        self.end_record(
            &s.id,
            &[SessionState::Stopping],
            SessionState::Terminated,
            &by,
            reason,
        )?;
        self.refresh_gauges();
        Ok(true)
    }

    /// How long the programs of `s` get after their hang-up: its profile's
    /// `stop_grace_seconds`, or the default for a profile this configuration dropped.
    fn stop_grace(&self, s: &Session) -> Duration {
        self.config.profiles.get(&s.profile).map_or(
            Duration::from_secs(config::DEFAULT_STOP_GRACE_SECONDS),
            Profile::stop_grace,
        )
    }

    /// Removes a container and waits until Docker no longer has it. A removal already in
    /// progress elsewhere (Docker answers 409) counts as success once it completes.
    pub async fn remove_container(&self, docker: &Docker, target: &str) -> Result<(), DockerError> {
        match docker.remove(target).await {
            Ok(()) => Ok(()),
            Err(DockerError::Conflict(m)) => {
                let deadline = Instant::now()
                    + Duration::from_secs(self.config.control.docker_timeout_seconds);
                while Instant::now() < deadline {
                    if docker.inspect(target).await?.is_none() {
                        return Ok(());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(DockerError::Conflict(m))
            }
            Err(e) => Err(e),
        }
    }

    /// Forces a repaint: resize to `cols-1`, pause, back to `cols`. Serialised per session
    /// so that two nudges never interleave and undo each other.
    pub async fn redraw(
        &self,
        who: &Principal,
        id: &SessionId,
        req: RedrawRequest,
    ) -> Result<(), ApiError> {
        if !(2..=1000).contains(&req.cols) || !(1..=1000).contains(&req.rows) {
            return Err(ApiError::INVALID_SIZE);
        }
        let s = self.authorized(who, id, Action::Redraw)?;
        let Some(container) = s.route().filter(|r| !r.unreachable).map(|r| r.container) else {
            return Err(ApiError::NOT_RUNNING);
        };
        let docker = self.docker_of(&s.host)?;
        let lock = {
            let mut locks = self.redraw_locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.retain(|_, l| Arc::strong_count(l) > 1);
            locks.entry(*id).or_default().clone()
        };
        let _serial = lock.lock().await;
        docker.resize(&container, req.cols - 1, req.rows).await?;
        tokio::time::sleep(Duration::from_millis(self.config.control.redraw_pause_ms)).await;
        docker.resize(&container, req.cols, req.rows).await?;
        Ok(())
    }

    /// Audit lines matching `q`, newest first; admin only.
    pub fn audit(&self, who: &Principal, q: &AuditQuery) -> Result<Vec<AuditEntry>, ApiError> {
        if !who.admin {
            return Err(
                ApiError::ADMIN_REQUIRED.with_message("only an admin may read the audit trail")
            );
        }
        Ok(self.store.audit(q)?)
    }

    /// Appends audit lines to the store (the audit writer's one call).
    pub fn append_audit(&self, lines: &[AuditEntry]) -> Result<(), StoreError> {
        self.store.append_audit(lines)
    }

    /// Keeps a gateway's audit lines beside control's own, each marked with the
    /// `gateway` that sent it.
    pub fn append_gateway_audit(
        &self,
        gateway: &str,
        mut lines: Vec<AuditEntry>,
    ) -> Result<(), ApiError> {
        for line in &mut lines {
            line.fields.insert("gateway".to_owned(), gateway.to_owned());
        }
        Ok(self.store.append_audit(&lines)?)
    }

    /// Keeps the newest `keep` audit lines.
    pub fn prune_audit(&self, keep: usize) -> Result<usize, StoreError> {
        self.store.prune_audit(keep)
    }

    /// The locked users; admin only.
    pub fn locked_users(&self, who: &Principal) -> Result<Vec<String>, ApiError> {
        if !who.admin {
            return Err(
                ApiError::ADMIN_REQUIRED.with_message("only an admin may list locked users")
            );
        }
        Ok(self.store.locked_users()?)
    }

    /// Locks (`true`) or unlocks a user; admin only. Published on the route feed.
    pub fn set_lock(&self, who: &Principal, sub: &Sub, lock: bool) -> Result<(), ApiError> {
        may_lock(who)?;
        if *sub == who.sub {
            // An admin who could lock themselves could lock the last unlocked admin
            // out; one who could unlock themselves would make locks meaningless.
            return Err(ApiError::OWN_LOCK);
        }
        let changed = if lock {
            self.store.lock_user(sub, &who.sub, now())?
        } else {
            self.store.unlock_user(sub)?
        };
        self.refresh_gauges();
        tracing::info!(target: "audit", sub = %sub, by = %who.sub, locked = lock, changed, "user lock");
        Ok(())
    }

    /// One route, for a gateway's cache miss, read consistently with its owner's lock
    /// and the revision.
    pub fn route(&self, id: &SessionId) -> Result<Option<RouteLookup>, ApiError> {
        Ok(self.store.lookup(id)?)
    }

    /// The route feed: waits up to `wait` for a change after `after`, then answers.
    pub async fn feed(
        &self,
        after: u64,
        epoch: Option<&str>,
        wait: Duration,
    ) -> Result<FeedPage, ApiError> {
        let mut rx = self.store.subscribe();
        let same_epoch = epoch.is_none_or(|e| e == self.store.epoch());
        if same_epoch && *rx.borrow_and_update() == after && !wait.is_zero() {
            let _ = tokio::time::timeout(wait, rx.changed()).await;
        }
        Ok(self.store.feed_in(after, epoch)?)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_mark_is_refused_and_leaves_the_first_in_place() {
        let set = InFlight::default();
        let id = SessionId::from_random([7; 10]);
        let first = set.mark(id).expect("first mark");
        assert!(set.mark(id).is_none(), "a second task is refused");
        assert!(set.contains(&id), "the refusal leaves the holder's mark");
        drop(first);
        assert!(!set.contains(&id));
        assert!(set.mark(id).is_some(), "free again once the holder is done");
    }

    #[test]
    fn home_volume_names_are_distinct_and_docker_safe() {
        let sub = |s: &str| Sub::parse(s).expect("valid sub");
        let a = home_volume_name("prod", &sub("a@b"));
        let b = home_volume_name("prod", &sub("a-at-b"));
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'));
        assert_ne!(
            home_volume_name("one", &sub("alice")),
            home_volume_name("two", &sub("alice"))
        );
    }
}

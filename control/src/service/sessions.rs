//! [`Sessions`]: a user's sessions — made ([`create`]), ended ([`end`]), looked up,
//! listed and shown with what the gateways report of them, redrawn, and published on
//! the route feed — and the quotas and terminal counts that go with them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use config::{Config, Profile};
use policy::{Action, Decision, Principal, SessionId, Sub};
use tokio::sync::Semaphore;

use super::clock::now;
use super::core::Core;
use super::in_flight::InFlight;
use super::workspaces::Workspaces;
use crate::error::ApiError;
use crate::hosts::Hosts;
use crate::metrics::Metrics;
use crate::model::{FeedPage, RouteLookup, Session};
use crate::recordings::Recordings;
use crate::store::Store;

mod create;
mod end;

pub use create::{CreateTiming, NewSession};

/// Container teardowns ([`end`]) that run at once, at most.
const STOPS_AT_ONCE: usize = 4;

/// The sessions; a clone is the same sessions (everything it holds is shared).
#[derive(Clone)]
pub struct Sessions {
    core: Arc<Core>,
    /// Where sessions' workspaces and secrets come from.
    workspaces: Workspaces,
    /// Sessions being created by this process right now. The reconciler never
    /// abandons these, however long Docker takes; after a restart the set is empty, so
    /// the `creating` grace still cleans up after a process that died mid-create.
    creating: InFlight,
    /// Sessions whose container is being removed right now, so that the API and the
    /// reconciler never race to remove the same container.
    ending: InFlight,
    /// One lock per session being redrawn, so that two nudges never interleave.
    redraw_locks: Arc<Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>>,
    /// Turns of the container teardowns ([`end`]).
    stops: Arc<Semaphore>,
}

/// The actions a session's profile allows its owner: read-only share links, peers,
/// links to its recordings. A peer is allowed none of them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Allows {
    pub share: bool,
    pub peers: bool,
    pub recording_links: bool,
}

/// A session with what control knows of it now beyond its record, as one caller may
/// see it: [`Sessions::shown`] for its owner or an admin, [`Sessions::shown_to_peer`]
/// for a user invited to co-drive it.
#[derive(Debug, Clone)]
pub struct Shown<'a> {
    pub session: &'a Session,
    /// Terminals open on it now over every gateway that reports (`None`: no gateway
    /// has reported lately).
    pub terminals: Option<u32>,
    /// Share-link viewers watching it now (`None` as for `terminals`).
    pub viewers: Option<u32>,
    /// The signed-in viewers among them.
    pub viewer_subs: Vec<String>,
    /// When and why it will end by itself, for an active session whose profile
    /// limits its life.
    pub deadline: Option<policy::Deadline>,
    /// For a peer: when their invitation lapses (`None`: the owner or an admin asks).
    pub peer_until: Option<u64>,
    /// Who the owner invited to co-drive it (none, to a peer).
    pub peers: &'a [crate::model::PeerGrant],
    /// What the caller may do with it beyond open and end.
    pub allows: Allows,
    /// The OCI runtime its profile runs sessions under, when not the daemon's default.
    pub runtime: Option<String>,
    /// The workspace it mounts: its id (none for an ephemeral one) and name.
    pub workspace: Option<(Option<SessionId>, String)>,
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

impl Sessions {
    pub(super) fn new(core: Arc<Core>, workspaces: Workspaces) -> Self {
        Sessions {
            core,
            workspaces,
            creating: InFlight::default(),
            ending: InFlight::default(),
            redraw_locks: Arc::default(),
            stops: Arc::new(Semaphore::new(STOPS_AT_ONCE)),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        self.core.config()
    }

    /// The store; the reconciler, the culler and the recordings' retention read it
    /// directly.
    pub(crate) fn store(&self) -> &Store {
        self.core.store()
    }

    /// The Docker hosts; the reconciler probes, lists and inspects through them.
    pub(crate) fn hosts(&self) -> &Hosts {
        self.core.hosts()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        self.core.metrics()
    }

    /// The recordings gateways handed over: their directory and size limit.
    pub fn recordings(&self) -> Recordings {
        self.core.recordings()
    }

    /// The profiles users may create sessions from, by name.
    pub fn profiles(&self) -> &BTreeMap<String, Profile> {
        &self.core.config().profiles
    }

    /// Whether this process is creating session `id` right now.
    pub fn is_being_created(&self, id: &SessionId) -> bool {
        self.creating.contains(id)
    }

    /// Whether this process is ending session `id` right now.
    pub fn is_being_ended(&self, id: &SessionId) -> bool {
        self.ending.contains(id)
    }

    /// Looks a session up for `who`: active or ended; others' and unknown alike → 404.
    pub fn get(&self, who: &Principal, id: &SessionId) -> Result<Session, ApiError> {
        let s = match self.core.store().get(id)? {
            Some(s) => Some(s),
            None => self.core.store().get_ended(id)?,
        };
        let locked = self.core.is_locked(&who.sub)?;
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
        self.core
            .config()
            .profiles
            .get(&s.profile)?
            .lifetime_limits()
            .deadline(s.created_at, s.last_input)
    }

    /// `s` as its owner or an admin sees it now, with its deadline.
    pub fn shown<'a>(&self, s: &'a Session) -> Shown<'a> {
        let terminals = self.core.live().count(&s.id);
        let (viewers, viewer_subs) = match terminals {
            Some(_) => {
                let (open, subs) = self.core.live().session_viewers(&s.id);
                (Some(open), subs)
            }
            None => (None, Vec::new()),
        };
        let workspace = s.workspace.as_ref().map(|w| {
            let name = match w
                .id
                .and_then(|id| self.core.store().get_workspace(&id).ok().flatten())
            {
                Some(ws) => ws.name,
                None if w.volume.is_empty() => "ephemeral".into(),
                None => w.volume.clone(),
            };
            (w.id, name)
        });
        let profile = self.core.config().profiles.get(&s.profile);
        let off = policy::share::ShareMode::Off;
        Shown {
            session: s,
            terminals,
            viewers,
            viewer_subs,
            deadline: self.deadline(s),
            peer_until: None,
            peers: &s.peers,
            allows: profile.map_or_else(Allows::default, |p| Allows {
                share: p.share_mode() != off,
                peers: p.peers,
                recording_links: p.recording_link_mode() != off,
            }),
            runtime: profile.and_then(|p| p.runtime.clone()),
            workspace,
        }
    }

    /// Session `s` as a peer invited until `until` sees it: who else watches or
    /// co-drives is the owner's to know, and what the owner may do with it is not
    /// the peer's.
    pub fn shown_to_peer<'a>(&self, s: &'a Session, until: u64) -> Shown<'a> {
        Shown {
            peer_until: Some(until),
            peers: &[],
            viewer_subs: Vec::new(),
            allows: Allows::default(),
            ..self.shown(s)
        }
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
        self.core
            .live()
            .record(gateway, replica, every, counts, users);
    }

    /// What the live gateways other than `gateway` have open (the answer to its
    /// report).
    pub fn terminals_elsewhere(&self, gateway: &str) -> crate::live::Elsewhere {
        self.core.live().elsewhere(gateway)
    }

    /// Records the input times a gateway reported; returns how many sessions moved.
    pub fn record_input(&self, inputs: &[(SessionId, u64)]) -> Result<usize, ApiError> {
        Ok(self.core.store().record_input(inputs, now())?)
    }

    /// Active sessions of `who`, or (admin) of another owner or of everyone.
    pub fn list(&self, who: &Principal, whose: &Whose) -> Result<Vec<Session>, ApiError> {
        Ok(match self.list_target(who, whose)? {
            Scope::Everyone => self.core.store().list_active(None)?,
            Scope::Owner(o) => self.core.store().list_active(Some(o))?,
            Scope::Nobody => Vec::new(),
        })
    }

    /// Ended sessions, newest first, with the same visibility as [`Sessions::list`].
    pub fn history(&self, who: &Principal, whose: &Whose) -> Result<Vec<Session>, ApiError> {
        let limit = self.core.config().control.history_per_user;
        Ok(match self.list_target(who, whose)? {
            Scope::Everyone => self.core.store().list_history(None, limit)?,
            Scope::Owner(o) => self.core.store().list_history(Some(o), limit)?,
            Scope::Nobody => Vec::new(),
        })
    }

    fn list_target<'a>(&self, who: &'a Principal, whose: &'a Whose) -> Result<Scope<'a>, ApiError> {
        if self.core.is_locked(&who.sub)? {
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

    /// Forces a repaint: resize to `cols-1`, pause, back to `cols`. Serialised per session
    /// so that two nudges never interleave and undo each other.
    pub async fn redraw(
        &self,
        who: &Principal,
        id: &SessionId,
        cols: u16,
        rows: u16,
    ) -> Result<(), ApiError> {
        if !(2..=1000).contains(&cols) || !(1..=1000).contains(&rows) {
            return Err(ApiError::INVALID_SIZE);
        }
        let s = self.core.authorized(who, id, Action::Redraw)?;
        let Some(container) = s.route().filter(|r| !r.unreachable).map(|r| r.container) else {
            return Err(ApiError::NOT_RUNNING);
        };
        let docker = self.core.docker_of(&s.host)?;
        let lock = {
            let mut locks = self.redraw_locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.retain(|_, l| Arc::strong_count(l) > 1);
            locks.entry(*id).or_default().clone()
        };
        let _serial = lock.lock().await;
        docker.resize(&container, cols - 1, rows).await?;
        tokio::time::sleep(Duration::from_millis(
            self.core.config().control.redraw_pause_ms,
        ))
        .await;
        docker.resize(&container, cols, rows).await?;
        Ok(())
    }

    /// One route, for a gateway's cache miss, read consistently with its owner's lock
    /// and the revision.
    pub fn route(&self, id: &SessionId) -> Result<Option<RouteLookup>, ApiError> {
        Ok(self.core.store().lookup(id)?)
    }

    /// The route feed: waits up to `wait` for a change after `after`, then answers.
    pub async fn feed(
        &self,
        after: u64,
        epoch: Option<&str>,
        wait: Duration,
    ) -> Result<FeedPage, ApiError> {
        let mut rx = self.core.store().subscribe();
        let same_epoch = epoch.is_none_or(|e| e == self.core.store().epoch());
        if same_epoch && *rx.borrow_and_update() == after && !wait.is_zero() {
            let _ = tokio::time::timeout(wait, rx.changed()).await;
        }
        Ok(self.core.store().feed_in(after, epoch)?)
    }
}

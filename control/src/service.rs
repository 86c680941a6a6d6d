//! The control service's operations: create, end, list, redraw, locks, route feed.
//! HTTP lives in `api`; this module decides (through `policy`), writes the store and
//! drives Docker, with compensation on every failure path.
//!
//! This file holds the handle's accessors and views, listing, redraw, audit and the
//! feed; [`handle`] defines [`Control`] itself, and the other operations live in the
//! files named after them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use config::{Config, Profile};
use policy::audit::AuditEntry;
use policy::{Action, Decision, OriginPolicy, Principal, QuotaLimits, SessionId, Sub, TokenError};

use crate::docker::{Docker, DockerError};
use crate::error::ApiError;
use crate::hosts::Hosts;
use crate::metrics::Metrics;
use crate::model::{FeedPage, RouteLookup, Session};
use crate::recordings::Recordings;
use crate::store::{AuditQuery, Store, StoreError};

mod clock;
mod create;
mod end;
mod failpoint;
mod grant_handles;
mod grants;
mod handle;
mod in_flight;
mod locks;
mod names;
mod peers;
mod recording_links;
mod secrets;
mod shared_workspaces;
mod shares;
mod sign_ins;
mod targets;
mod workspaces;

pub use clock::now;
pub use create::CreateTiming;
pub use failpoint::failpoint;
pub use handle::Control;
pub use locks::may_lock;
pub use names::{container_name, home_volume_name, SYSTEM};

// The operations take and return the types below and these; `api` turns its bodies
// into them and them into its views.
pub use create::NewSession;
pub use policy::reports::SignInReport;
pub use recording_links::NewRecordingLink;
pub use shares::{ShareLink, ShareStatus};
pub use sign_ins::RevocationAsked;
pub use targets::TargetAccessPatch;

/// The actions a session's profile allows its owner: read-only share links, peers,
/// links to its recordings. A peer is allowed none of them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Allows {
    pub share: bool,
    pub peers: bool,
    pub recording_links: bool,
}

/// A session with what control knows of it now beyond its record, as one caller may
/// see it: [`Control::shown`] for its owner or an admin, [`Control::shown_to_peer`]
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

impl Control {
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

    fn limits(&self) -> QuotaLimits {
        QuotaLimits {
            per_user: self.config.quota.per_user,
            global: self.config.quota.global,
        }
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

    /// `s` as its owner or an admin sees it now, with its deadline.
    pub fn shown<'a>(&self, s: &'a Session) -> Shown<'a> {
        let terminals = self.live.count(&s.id);
        let (viewers, viewer_subs) = match terminals {
            Some(_) => {
                let (open, subs) = self.live.session_viewers(&s.id);
                (Some(open), subs)
            }
            None => (None, Vec::new()),
        };
        let workspace = s.workspace.as_ref().map(|w| {
            let name = match w
                .id
                .and_then(|id| self.store.get_workspace(&id).ok().flatten())
            {
                Some(ws) => ws.name,
                None if w.volume.is_empty() => "ephemeral".into(),
                None => w.volume.clone(),
            };
            (w.id, name)
        });
        let profile = self.config.profiles.get(&s.profile);
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
        docker.resize(&container, cols - 1, rows).await?;
        tokio::time::sleep(Duration::from_millis(self.config.control.redraw_pause_ms)).await;
        docker.resize(&container, cols, rows).await?;
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

#[cfg(test)]
mod tests {
    use super::in_flight::InFlight;
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

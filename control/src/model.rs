//! The records control keeps and publishes.

use std::collections::BTreeMap;

pub use policy::feed::{
    Change, FeedPage, PeerGrant, Recording, Route, RouteLookup, ShareGrant, TargetAccess,
    TargetCredential, TtydAddress,
};
use policy::{SessionId, Sub};
use serde::{Deserialize, Serialize};

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Recorded and counted against quota; the container is being made.
    Creating,
    /// The container runs; the session has a route.
    Running,
    /// Being ended; still counted against quota until its container is gone.
    Stopping,
    /// Was running on a Docker host that stopped answering: still counted, never
    /// ended for that alone; back to `running` (or ended with the real reason) once
    /// the host answers again.
    Unreachable,
    /// Ended by a user or an admin.
    Terminated,
    /// The container's program exited (or was killed).
    Exited,
    /// The container disappeared without termgate removing it.
    Gone,
    /// Creation failed.
    Failed,
}

impl SessionState {
    /// Whether the session still holds resources (and counts against quota).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            SessionState::Creating
                | SessionState::Running
                | SessionState::Stopping
                | SessionState::Unreachable
        )
    }

    /// Stable name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Creating => "creating",
            SessionState::Running => "running",
            SessionState::Stopping => "stopping",
            SessionState::Unreachable => "unreachable",
            SessionState::Terminated => "terminated",
            SessionState::Exited => "exited",
            SessionState::Gone => "gone",
            SessionState::Failed => "failed",
        }
    }
}

/// A session as control stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id.
    pub id: SessionId,
    /// The user that created it (stored and shown as the plain `sub` string).
    pub owner: Sub,
    /// User-chosen display name.
    pub name: String,
    /// Profile it was made from.
    pub profile: String,
    /// The Docker host it runs on; records from before several hosts read as `local`.
    #[serde(default = "local_host")]
    pub host: String,
    /// User-chosen option values (validated against the profile).
    #[serde(default)]
    pub options: std::collections::BTreeMap<String, String>,
    /// Current state.
    pub state: SessionState,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    /// Docker container id, once created.
    #[serde(default)]
    pub container_id: Option<String>,
    /// When it ended (ended states only).
    #[serde(default)]
    pub ended_at: Option<u64>,
    /// Who ended it: a `sub`, or `termgate` for the reconciler.
    #[serde(default)]
    pub ended_by: Option<String>,
    /// Why it ended, in words; the first word is stable (`idle`, `max_lifetime`, `oom`
    /// or a sentence for the others).
    #[serde(default)]
    pub end_reason: Option<String>,
    /// When a user last typed into one of its terminals (seconds since the Unix epoch),
    /// as gateways report it; output does not count. `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_input: Option<u64>,
    /// What gateways record of its terminals, fixed from its profile at creation.
    #[serde(default, skip_serializing_if = "Recording::is_off")]
    pub record: Recording,
    /// Its read-only share links (hashes only, never a link), fed to gateways on its
    /// route; they end with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<ShareGrant>,
    /// The users its owner invited to co-drive it, fed to gateways on its route; they
    /// end with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerGrant>,
    /// The workspace it mounts; `None`: its profile mounts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<SessionWorkspace>,
}

/// The workspace a session mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionWorkspace {
    /// The workspace's id; `None`: an ephemeral one (made with the container and
    /// removed with it), or one whose record was lost.
    #[serde(default)]
    pub id: Option<SessionId>,
    /// Its Docker volume; `""` for an ephemeral one.
    pub volume: String,
    /// Mounted read-only (a shared workspace granted so).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// Where a workspace is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum WorkspaceState {
    /// Usable.
    Ready,
    /// Being filled by a copy job from workspace `from`.
    Copying {
        /// The source workspace.
        from: SessionId,
    },
    /// Its copy failed; its volume was removed, the record stays until deleted.
    Failed {
        /// Why, in words.
        reason: String,
    },
}

/// How termgate came to hold a workspace: the evidence its removal rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceOrigin {
    /// The user's home volume (`termgate.managed=home`), their default workspace: it
    /// is never removed.
    Home,
    /// Made by termgate (`termgate.managed=workspace` and this record, written in the
    /// same step): termgate may remove it.
    Created,
    /// Made by termgate for sharing (`termgate.managed=shared`), by an admin: only an
    /// admin's explicit delete removes it.
    Shared,
    /// An existing volume an admin registered for sharing (`docker.shared_volumes`):
    /// mounted where granted, never removed.
    Borrowed,
}

impl WorkspaceOrigin {
    /// Whether it is shared (granted to users and roles) rather than one user's.
    pub fn is_shared(self) -> bool {
        matches!(self, WorkspaceOrigin::Shared | WorkspaceOrigin::Borrowed)
    }
}

/// Who a shared workspace is granted to, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceGrant {
    /// `user:<sub>` or `role:<role>`.
    pub to: String,
    /// Mounted read-only for them.
    pub read_only: bool,
}

/// A workspace as control stores it: one Docker volume that outlives sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspace {
    /// Its id.
    pub id: SessionId,
    /// Whose it is.
    pub owner: Sub,
    /// Its name, unique among its owner's.
    pub name: String,
    /// Its Docker volume.
    pub volume: String,
    /// Home volume or made by termgate.
    pub origin: WorkspaceOrigin,
    /// The Docker host its volume is on, once made; a home workspace has one volume on
    /// each host its owner's sessions ran on, and none here.
    #[serde(default)]
    pub host: Option<String>,
    /// Ready, copying or failed.
    #[serde(flatten)]
    pub state: WorkspaceState,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    /// Its size in bytes when last measured (after a copy); `None`: never measured.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// The workspace it was copied from.
    #[serde(default)]
    pub copied_from: Option<SessionId>,
    /// A shared workspace's grants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<WorkspaceGrant>,
}

impl Workspace {
    /// What `sub` with `roles` may do with it: `Some(false)` read and write (their own,
    /// or a shared one granted so), `Some(true)` read only, `None` nothing.
    pub fn access(&self, sub: &Sub, roles: &[String]) -> Option<bool> {
        if !self.origin.is_shared() {
            return (self.owner == *sub).then_some(false);
        }
        let mut access = None;
        for g in &self.grants {
            let granted = match g.to.split_once(':') {
                Some(("user", u)) => u == sub.as_str(),
                Some(("role", r)) => roles.iter().any(|have| have == r),
                _ => false,
            };
            if granted {
                access = Some(access.unwrap_or(true) && g.read_only);
            }
        }
        access
    }
}

/// A secret an admin registered: a name and a file on the Docker hosts under
/// `docker.secrets_dir`, never its value (control never opens the file). Sessions of
/// the users and roles it is granted to mount it read-only at `/run/secrets/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secret {
    /// Its name: the file's name under `/run/secrets` in a session.
    pub name: String,
    /// The file's absolute path on the Docker hosts, under `docker.secrets_dir`.
    pub path: String,
    /// The admin who registered it.
    pub registered_by: Sub,
    /// When, seconds since the Unix epoch.
    pub registered_at: u64,
    /// Who it is granted to: `user:<sub>` or `role:<role>` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<String>,
}

impl Secret {
    /// Whether it is granted to `sub` with `roles`.
    pub fn granted_to(&self, sub: &Sub, roles: &[String]) -> bool {
        self.grants.iter().any(|g| match g.split_once(':') {
            Some(("user", u)) => u == sub.as_str(),
            Some(("role", r)) => roles.iter().any(|have| have == r),
            _ => false,
        })
    }
}

fn local_host() -> String {
    config::LOCAL_HOST.to_owned()
}

/// The ttyd pool of each Docker host that has its own; a host missing here is served
/// by the gateway's own pool.
pub type Pools = BTreeMap<String, TtydAddress>;

impl Session {
    /// `route` with this session's share links and the read-only pool of its host in
    /// `viewer_pools` (none there: the gateway's own, for the implicit host).
    pub fn with_viewers(&self, mut route: Route, viewer_pools: &Pools) -> Route {
        route.shares.clone_from(&self.shares);
        route.viewer_upstream = viewer_pools.get(&self.host).cloned();
        route
    }

    /// The route gateways need, when the session is running, or unreachable (then
    /// marked so, and gateways refuse its terminals at once), with no pools known.
    pub fn route(&self) -> Option<Route> {
        self.route_via(&Pools::new())
    }

    /// [`Session::route`], aimed at the ttyd pool of the session's host in `pools`.
    pub fn route_via(&self, pools: &Pools) -> Option<Route> {
        let unreachable = match self.state {
            SessionState::Running => false,
            SessionState::Unreachable => true,
            _ => return None,
        };
        let c = self.container_id.as_ref()?;
        let mut route = Route::container(self.id, self.owner.to_string(), c.clone());
        route.host = Some(self.host.clone());
        route.upstream = pools.get(&self.host).cloned();
        route.unreachable = unreachable;
        route.record = self.record;
        route.peers.clone_from(&self.peers);
        Some(route)
    }
}

/// An existing ttyd that termgate fronts but does not run (design §7): it has no
/// lifecycle, only who may open it and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// Its id, in the same space as session ids (`/s/<id>/`).
    pub id: SessionId,
    /// Unique name.
    pub name: String,
    /// `http://host:port[/base-path]` or `unix:/path`, as registered.
    pub upstream: String,
    /// `sub`s allowed to open it.
    pub users: Vec<String>,
    /// Token roles allowed to open it.
    pub roles: Vec<String>,
    /// What its ttyd expects (a file reference or a header name, never a secret).
    #[serde(default)]
    pub credential: Option<TargetCredential>,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    /// Who registered it (`config` for the configuration).
    pub created_by: String,
    /// Defined in the configuration: applied at every start, not deletable through
    /// the API.
    #[serde(default)]
    pub from_config: bool,
}

impl Target {
    /// The route gateways need; `None` only if the stored upstream no longer parses.
    pub fn route(&self) -> Option<Route> {
        let upstream = TtydAddress::parse_url(&self.upstream).ok()?;
        let mut route = Route::container(self.id, "", "");
        route.upstream = Some(upstream);
        route.target = Some(TargetAccess {
            users: self.users.clone(),
            roles: self.roles.clone(),
            credential: self.credential.clone(),
        });
        Some(route)
    }

    /// Whether `who` may open it (and see it listed): listed by sub or role, or admin.
    pub fn allows(&self, who: &policy::Principal) -> bool {
        who.admin
            || self.users.iter().any(|u| u == who.sub.as_str())
            || self.roles.iter().any(|r| who.roles.contains(r))
    }
}

/// A lock on a user, set by an admin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserLock {
    /// Locked user.
    pub sub: Sub,
    /// Admin who locked.
    pub by: Sub,
    /// When, seconds since the Unix epoch.
    pub at: u64,
}

/// A sign-in: a browser (or program) that signed in at a gateway and holds the session
/// cookie whose token has this fingerprint. Kept until its token expires, listed to
/// its user and to admins, ended by signing it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignIn {
    /// The fingerprint of the cookie's token (the record's key; never shown whole).
    pub fingerprint: policy::revocation::Fingerprint,
    /// Who signed in.
    pub sub: Sub,
    /// When, seconds since the Unix epoch.
    pub created_at: u64,
    /// When its token expires.
    pub expires_at: u64,
    /// How: `token` (a sign-in link or a token posted to `/auth/session`) or `oidc`.
    pub method: String,
    /// The gateway that made it (as it names itself).
    #[serde(default)]
    pub gateway: String,
    /// The browser's `User-Agent`, cut to 200 characters.
    #[serde(default)]
    pub user_agent: String,
    /// The client address the gateway saw.
    #[serde(default)]
    pub client: String,
}

impl SignIn {
    /// The public id: the fingerprint's first 16 hex digits.
    pub fn id(&self) -> String {
        self.fingerprint.id()
    }
}

/// A link to one recording (`/r/<token>`), kept under its token's SHA-256 (never the
/// token itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingLink {
    /// Its public id: the first 16 hex digits of `hash`.
    pub id: String,
    /// The SHA-256 of its token, lowercase hex.
    pub hash: String,
    /// The session whose recording it plays (it may have ended since).
    pub session: SessionId,
    /// The recording's name.
    pub recording: String,
    /// The session's profile, whose `recording_links` still bounds the link.
    pub profile: String,
    /// The session's owner.
    pub owner: Sub,
    /// Who made it (the owner or an admin).
    pub created_by: Sub,
    /// `anyone` or `signed-in`.
    pub mode: String,
    /// When it was made, seconds since the Unix epoch.
    pub created_at: u64,
    /// When it stops playing, seconds since the Unix epoch.
    pub expires_at: u64,
    /// Revoked by the owner or an admin.
    pub revoked: bool,
}

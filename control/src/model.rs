//! The records control keeps and publishes.

pub use policy::feed::{Change, FeedPage, Route, RouteLookup};
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
            SessionState::Creating | SessionState::Running | SessionState::Stopping
        )
    }

    /// Stable name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Creating => "creating",
            SessionState::Running => "running",
            SessionState::Stopping => "stopping",
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
    /// Why it ended, in words.
    #[serde(default)]
    pub end_reason: Option<String>,
}

impl Session {
    /// The route gateways need, when the session is running.
    pub fn route(&self) -> Option<Route> {
        match (self.state, &self.container_id) {
            (SessionState::Running, Some(c)) => {
                Some(Route::container(self.id, self.owner.to_string(), c.clone()))
            }
            _ => None,
        }
    }
}

/// A lock on a user, set by an admin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserLock {
    /// Locked user.
    pub sub: String,
    /// Admin who locked.
    pub by: String,
    /// When, seconds since the Unix epoch.
    pub at: u64,
}

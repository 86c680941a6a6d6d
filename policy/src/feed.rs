//! The route feed's records: what control publishes and gateways cache.
//!
//! Plain data shared by both sides of the feed; control writes it, gateways apply it.

use serde::{Deserialize, Serialize};

use crate::session_id::SessionId;

/// What a gateway needs to authorize and connect a terminal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Session id.
    pub session: SessionId,
    /// Owner `sub`.
    pub owner: String,
    /// Container the terminal attaches to (ttyd's `arg`).
    pub container: String,
}

/// Control's answer to a one-off route lookup (`GET /v1/routes/<id>`): the route,
/// its owner's lock and the revision both are true at, read as one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteLookup {
    /// The running session's route.
    pub route: Route,
    /// Whether its owner is locked.
    #[serde(default)]
    pub owner_locked: bool,
    /// The store's revision at the time of the answer.
    pub rev: u64,
    /// The feed epoch that revision counts in (see [`FeedPage::epoch`]).
    #[serde(default)]
    pub epoch: String,
}

/// One entry of the route feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Change {
    /// A session is running at this route (new, or changed).
    Upsert {
        /// Revision of this change.
        rev: u64,
        /// The route.
        route: Route,
    },
    /// A session no longer has a route: close its terminals.
    Remove {
        /// Revision of this change.
        rev: u64,
        /// The session.
        session: SessionId,
    },
    /// A user was locked: close their terminals, refuse them.
    Lock {
        /// Revision of this change.
        rev: u64,
        /// The user.
        sub: String,
    },
    /// A user was unlocked.
    Unlock {
        /// Revision of this change.
        rev: u64,
        /// The user.
        sub: String,
    },
}

impl Change {
    /// The change's revision.
    pub fn rev(&self) -> u64 {
        match self {
            Change::Upsert { rev, .. }
            | Change::Remove { rev, .. }
            | Change::Lock { rev, .. }
            | Change::Unlock { rev, .. } => *rev,
        }
    }
}

/// The answer to a feed poll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedPage {
    /// Which life of the store the revisions count in: random each time control opens
    /// its store. A poller that names another epoch gets a reset, so a restored or
    /// rebuilt store, whose revisions tell another history, is never applied as
    /// increments.
    #[serde(default)]
    pub epoch: String,
    /// The store's revision at the time of the answer.
    pub rev: u64,
    /// True: `routes` and `locked` are the whole state, replace everything.
    pub reset: bool,
    /// Changes after the poller's revision (when not a reset).
    #[serde(default)]
    pub changes: Vec<Change>,
    /// Every route (reset only).
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Every locked user (reset only).
    #[serde(default)]
    pub locked: Vec<String>,
}

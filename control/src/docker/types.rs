//! What the Docker client speaks in: the container request, what Docker reports about
//! containers and their events, and [`DockerError`].

use policy::{ContainerSpec, Violation};

use crate::labels::Labels;

/// What can go wrong talking to Docker.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The daemon cannot be reached, or a call timed out.
    #[error("docker unavailable: {0}")]
    Unavailable(String),
    /// Docker answered 404.
    #[error("not found")]
    NotFound,
    /// The spec broke a red line; refused before any call to Docker.
    #[error("refused by sandbox policy: {}", join_violations(.0))]
    Refused(Vec<Violation>),
    /// Docker answered 409 (name in use, removal in progress, …), or an existing
    /// object is not one termgate may use.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Anything else.
    #[error("docker {op}: {message}")]
    Other {
        /// The operation that failed.
        op: &'static str,
        /// What Docker (or the client) said.
        message: String,
    },
}

fn join_violations(v: &[Violation]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A session container to create.
#[derive(Debug, Clone)]
pub struct ContainerRequest {
    /// Container name, `termgate-<session id>`.
    pub name: String,
    /// The create body, exactly as [`policy::declared::container_body`] made it.
    pub body: serde_json::Value,
    /// The sandbox description the red lines are checked on (the same profile's).
    pub spec: ContainerSpec,
}

/// A container as Docker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    /// Full container id.
    pub id: String,
    /// Name, without the leading `/`.
    pub name: String,
    /// Container labels.
    pub labels: Labels,
    /// What Docker says it is doing.
    pub state: ContainerState,
    /// Creation time, unix seconds (0 when Docker did not say).
    pub created: i64,
    /// The kernel's out-of-memory killer struck inside it (only an inspection says;
    /// a listing leaves it false).
    pub oom_killed: bool,
    /// Its program's exit status, once it ended (only an inspection says).
    pub exit_code: Option<i64>,
}

/// What Docker says a container is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    /// Made, never started.
    Created,
    /// Its program runs.
    Running,
    /// Frozen by `docker pause`.
    Paused,
    /// Being restarted by a restart policy.
    Restarting,
    /// Being removed.
    Removing,
    /// Its program ended.
    Exited,
    /// Docker could not stop or remove it cleanly.
    Dead,
    /// Docker said nothing, or something this version does not know.
    Unknown,
}

impl ContainerState {
    /// From Docker's spelling.
    pub fn parse(s: &str) -> ContainerState {
        match s {
            "created" => ContainerState::Created,
            "running" => ContainerState::Running,
            "paused" => ContainerState::Paused,
            "restarting" => ContainerState::Restarting,
            "removing" => ContainerState::Removing,
            "exited" => ContainerState::Exited,
            "dead" => ContainerState::Dead,
            _ => ContainerState::Unknown,
        }
    }

    /// Docker's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerState::Created => "created",
            ContainerState::Running => "running",
            ContainerState::Paused => "paused",
            ContainerState::Restarting => "restarting",
            ContainerState::Removing => "removing",
            ContainerState::Exited => "exited",
            ContainerState::Dead => "dead",
            ContainerState::Unknown => "unknown",
        }
    }

    /// Whether the program runs.
    pub fn is_running(self) -> bool {
        self == ContainerState::Running
    }

    /// Whether its program may still run: running, paused, or being restarted (a state
    /// Docker does not name is counted as alive, so nothing is taken for stopped on
    /// doubt).
    pub fn is_alive(self) -> bool {
        matches!(
            self,
            ContainerState::Running
                | ContainerState::Paused
                | ContainerState::Restarting
                | ContainerState::Unknown
        )
    }

    /// Whether a session on it is over: its program ended, or (for a session recorded
    /// as running, whose container was started before the record said so) it is not
    /// started at all.
    pub fn is_dead(self) -> bool {
        matches!(
            self,
            ContainerState::Exited | ContainerState::Dead | ContainerState::Created
        )
    }
}

/// What happened to a container, as Docker's event stream names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventAction {
    /// Made.
    Create,
    /// Started.
    Start,
    /// Its program ended (exited or was killed).
    Die,
    /// Sent a signal.
    Kill,
    /// The kernel's out-of-memory killer struck inside it.
    Oom,
    /// Stopped by a stop call.
    Stop,
    /// Removed.
    Destroy,
    /// Something else, or something this version does not know.
    Unknown,
}

impl EventAction {
    /// The actions `Docker::events` reports: those that can end a session.
    pub const WATCHED: [EventAction; 3] =
        [EventAction::Die, EventAction::Destroy, EventAction::Oom];

    /// From Docker's spelling.
    pub fn parse(s: &str) -> EventAction {
        match s {
            "create" => EventAction::Create,
            "start" => EventAction::Start,
            "die" => EventAction::Die,
            "kill" => EventAction::Kill,
            "oom" => EventAction::Oom,
            "stop" => EventAction::Stop,
            "destroy" => EventAction::Destroy,
            _ => EventAction::Unknown,
        }
    }

    /// Docker's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventAction::Create => "create",
            EventAction::Start => "start",
            EventAction::Die => "die",
            EventAction::Kill => "kill",
            EventAction::Oom => "oom",
            EventAction::Stop => "stop",
            EventAction::Destroy => "destroy",
            EventAction::Unknown => "unknown",
        }
    }
}

/// A container event of a termgate instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEvent {
    /// Container id.
    pub id: String,
    /// One of [`EventAction::WATCHED`].
    pub action: EventAction,
    /// The event actor's attributes: the container's labels, plus the `name`, `image`
    /// (and for `die`, `exitCode`) attributes Docker adds.
    pub labels: Labels,
}

//! [`Core`]: what every resource of the service shares — the configuration, the store,
//! the Docker hosts, the metrics and the terminals the gateways report — and the few
//! reads all of them make (a user's lock, a session its caller may act on, a host's
//! client). Each resource type holds an `Arc` of it; nothing else is kept here.

use std::sync::Arc;

use config::Config;
use policy::{Action, Decision, Principal, QuotaLimits, SessionId, Sub};

use crate::docker::{Docker, DockerError};
use crate::error::ApiError;
use crate::hosts::Hosts;
use crate::live::LiveTerminals;
use crate::metrics::Metrics;
use crate::model::Session;
use crate::recordings::Recordings;
use crate::store::Store;

/// The state the resource types share.
pub(super) struct Core {
    config: Arc<Config>,
    store: Store,
    hosts: Hosts,
    metrics: Metrics,
    /// Terminals and share viewers open on each session now, as the gateways report them.
    live: LiveTerminals,
}

impl Core {
    pub(super) fn new(config: Arc<Config>, store: Store, hosts: Hosts) -> Self {
        Core {
            config,
            store,
            hosts,
            metrics: Metrics::default(),
            live: LiveTerminals::default(),
        }
    }

    pub(super) fn config(&self) -> &Config {
        &self.config
    }

    pub(super) fn store(&self) -> &Store {
        &self.store
    }

    pub(super) fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub(super) fn live(&self) -> &LiveTerminals {
        &self.live
    }

    /// The recordings gateways handed over: their directory and size limit.
    pub(super) fn recordings(&self) -> Recordings {
        let c = &self.config;
        Recordings::new(
            c.resolve(&c.control.recordings_dir),
            c.control.max_recording_bytes,
        )
    }

    /// The Docker client of host `name`; a host this configuration no longer has is
    /// answered as unavailable (its sessions wait for it to come back).
    pub(super) fn docker_of(&self, name: &str) -> Result<Docker, DockerError> {
        self.hosts
            .get(name)
            .ok_or_else(|| {
                DockerError::Unavailable(format!("no Docker host named {name:?} is configured"))
            })?
            .docker()
    }

    /// Whether `sub` is locked.
    pub(super) fn is_locked(&self, sub: &Sub) -> Result<bool, ApiError> {
        Ok(self.store.is_locked(sub)?)
    }

    /// The quotas of the configuration.
    pub(super) fn limits(&self) -> QuotaLimits {
        QuotaLimits {
            per_user: self.config.quota.per_user,
            global: self.config.quota.global,
        }
    }

    /// Sets the gauges the store's counts feed.
    pub(super) fn refresh_gauges(&self) {
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

    /// The active session `id`, if `who` may do `action` to it; others' and unknown alike
    /// are the same 404.
    pub(super) fn authorized(
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
}

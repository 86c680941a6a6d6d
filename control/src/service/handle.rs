//! The [`Control`] handle: the control service's state, and how it is assembled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use config::Config;
use policy::{OriginPolicy, SessionId, Verifier};

use super::grant_handles::Handles;
use super::in_flight::InFlight;
use crate::hosts::Hosts;
use crate::metrics::Metrics;
use crate::store::Store;

/// Container teardowns (`end.rs`) that run at once, at most.
pub(super) const STOPS_AT_ONCE: usize = 4;

/// The control service.
pub struct Control {
    pub(super) config: Arc<Config>,
    pub(super) store: Store,
    pub(super) hosts: Hosts,
    pub(super) verifier: Verifier,
    /// The Origins allowed to open terminals (`GET /v1/authz`): the gateway's list.
    pub(super) origins: OriginPolicy,
    pub(super) metrics: Metrics,
    pub(super) redraw_locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Sessions being created by this process right now. The reconciler never
    /// abandons these, however long Docker takes; after a restart the set is empty, so
    /// the `creating` grace still cleans up after a process that died mid-create.
    pub(super) creating: InFlight,
    /// Sessions whose container is being removed right now, so that the API and the
    /// reconciler never race to remove the same container.
    pub(super) ending: InFlight,
    /// Terminals open on each session now, as the gateways report them.
    pub(super) live: crate::live::LiveTerminals,
    /// The revocations in force (`sign_ins`), checked on every verified token.
    pub(super) revoked: std::sync::RwLock<policy::revocation::RevocationSet>,
    /// Bumped after a revocation is applied to `revoked`, for grant watchers (the
    /// store's revision moves before it is).
    pub(super) revocations_applied: tokio::sync::watch::Sender<u64>,
    /// The sealer of terminal grants, made on first use (`service/grants.rs`).
    pub(super) grants: std::sync::OnceLock<policy::grant::GrantSealer>,
    /// Grants waiting for a pool that takes them by handle.
    pub(super) grant_handles: Handles,
    /// Asks the volume pass to measure workspaces' sizes ([`crate::volumes`]).
    pub(super) sizes_wanted: tokio::sync::Notify,
    /// Turns of the container teardowns (`end.rs`).
    pub(super) stops: tokio::sync::Semaphore,
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
            sizes_wanted: tokio::sync::Notify::new(),
            stops: tokio::sync::Semaphore::new(STOPS_AT_ONCE),
        }
    }

    /// Asks for the workspaces' sizes to be measured soon: a session on one ended, or
    /// a copy finished.
    pub fn measure_workspaces_soon(&self) {
        self.sizes_wanted.notify_one();
    }

    /// What the volume pass waits on besides its interval.
    pub(crate) fn sizes_wanted(&self) -> &tokio::sync::Notify {
        &self.sizes_wanted
    }
}

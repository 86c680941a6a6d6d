//! [`Control`]: the control service assembled — one handle per resource, built here on
//! one shared [`Core`] — and the few things the API needs beside them: the
//! configuration, the metrics, the store's revision and the audit trail.

use std::sync::Arc;

use config::Config;
use policy::audit::AuditEntry;
use policy::{Principal, Verifier};

use super::core::Core;
use super::grants::Grants;
use super::locks::Users;
use super::peers::Peers;
use super::recording_links::RecordingLinks;
use super::sessions::Sessions;
use super::shares::Shares;
use super::sign_ins::SignIns;
use super::targets::Targets;
use super::workspaces::Workspaces;
use crate::error::ApiError;
use crate::hosts::Hosts;
use crate::metrics::Metrics;
use crate::store::{AuditQuery, Store, StoreError};

/// The control service: its resources, each a cheap handle to clone and hand on.
pub struct Control {
    /// Sessions: create, end, list, show, redraw, the route feed, terminal counts.
    pub sessions: Sessions,
    /// Sign-ins, revocations, and the verification of tokens.
    pub sign_ins: SignIns,
    /// Read-only share links and their viewers.
    pub shares: Shares,
    /// Peers: users an owner invited to co-drive a session.
    pub peers: Peers,
    /// Links to recordings.
    pub recording_links: RecordingLinks,
    /// Targets: ttyds control registers but never runs.
    pub targets: Targets,
    /// Users' locks.
    pub users: Users,
    /// Workspaces, shared workspaces and secrets.
    pub workspaces: Workspaces,
    /// Terminal grants, and what a front proxy's terminal check reads.
    pub grants: Grants,
    core: Arc<Core>,
}

impl Control {
    /// Assembles the service. The store's routes should already point at the hosts'
    /// pools ([`Store::set_pools`] with [`Hosts::pools`]).
    pub fn new(config: Arc<Config>, store: Store, hosts: Hosts, verifier: Verifier) -> Self {
        let core = Arc::new(Core::new(config, store, hosts));
        let workspaces = Workspaces::new(Arc::clone(&core));
        let sign_ins = SignIns::new(Arc::clone(&core), verifier);
        Control {
            sessions: Sessions::new(Arc::clone(&core), workspaces.clone()),
            grants: Grants::new(Arc::clone(&core), sign_ins.clone()),
            sign_ins,
            shares: Shares::new(Arc::clone(&core)),
            peers: Peers::new(Arc::clone(&core)),
            recording_links: RecordingLinks::new(Arc::clone(&core)),
            targets: Targets::new(Arc::clone(&core)),
            users: Users::new(Arc::clone(&core)),
            workspaces,
            core,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        self.core.config()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        self.core.metrics()
    }

    /// The largest request body the API reads, in bytes.
    pub fn max_body_bytes(&self) -> usize {
        self.core.config().control.max_body_bytes
    }

    /// The token gateways present on the route feed, when configured.
    pub fn service_token(&self) -> Option<&[u8]> {
        self.core
            .config()
            .secrets()
            .service_token
            .as_ref()
            .map(|s| s.expose())
    }

    /// The store's newest published revision.
    pub fn rev(&self) -> u64 {
        self.core.store().rev()
    }

    /// Writes everything the store committed so far to disk.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.core.store().flush()
    }

    /// Audit lines matching `q`, newest first; admin only.
    pub fn audit(&self, who: &Principal, q: &AuditQuery) -> Result<Vec<AuditEntry>, ApiError> {
        if !who.admin {
            return Err(
                ApiError::ADMIN_REQUIRED.with_message("only an admin may read the audit trail")
            );
        }
        Ok(self.core.store().audit(q)?)
    }

    /// Appends audit lines to the store (the audit writer's one call).
    pub fn append_audit(&self, lines: &[AuditEntry]) -> Result<(), StoreError> {
        self.core.store().append_audit(lines)
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
        Ok(self.core.store().append_audit(&lines)?)
    }

    /// Keeps the newest `keep` audit lines.
    pub fn prune_audit(&self, keep: usize) -> Result<usize, StoreError> {
        self.core.store().prune_audit(keep)
    }
}

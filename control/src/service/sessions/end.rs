//! A session's end: decided and recorded first, the container stopped after, on a
//! task of its own.
//!
//! The decision reaches the gateways through the route feed, and they close the
//! session's terminals with a close frame. Its Docker teardown (a hang-up, the
//! programs' exit, the removal, and every `docker attach` of the pools ending with it)
//! costs the same cores, so it waits until the gateways report the terminals closed
//! (at most [`FANOUT_WAIT`]), and at most [`STOPS_AT_ONCE`](super::STOPS_AT_ONCE)
//! teardowns run together:
//! ends decided together close their terminals first and stop their containers after.

use std::time::{Duration, Instant};

use config::Profile;
use policy::{Action, EndCause, Principal, SessionId};

use crate::docker::{Docker, DockerError};
use crate::error::ApiError;
use crate::model::{Session, SessionState};
use crate::store::{Ending, StoreError};

use super::super::clock::now;
use super::super::failpoint::failpoint;
use super::super::names::{container_name, home_volume_name, SYSTEM};
use super::Sessions;

/// How long a teardown waits for the gateways to report the session's terminals
/// closed; a gateway that stopped reporting is forgotten sooner.
const FANOUT_WAIT: Duration = Duration::from_secs(1);

impl Sessions {
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
            .core
            .store()
            .end(id, &ending, self.core.config().control.history_per_user)
        {
            Ok(s) => Ok(Some(s)),
            Err(StoreError::NotFound | StoreError::StateChanged(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Ends session `id` if its profile's limits say it is due now (`idle` or
    /// `max_lifetime`), the way any end goes: recorded `stopping` by `termgate` with
    /// its reason and flushed, which removes its route (gateways close its terminals);
    /// then its container is stopped in the background ([`Sessions::stop_in_background`]).
    /// Decided again inside the store's write, so an input reported since the caller
    /// looked keeps the session. Returns the cause when this call ended it, once the
    /// decision is durable.
    pub fn end_if_due(&self, id: &SessionId) -> Result<Option<EndCause>, ApiError> {
        let t = now();
        let mut decided = None;
        let s = self.core.store().update(id, |s| {
            if s.state != SessionState::Running {
                return;
            }
            let Some(p) = self.core.config().profiles.get(&s.profile) else {
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
        self.core.refresh_gauges();
        let reason = s.end_reason.clone().unwrap_or_default();
        tracing::info!(target: "audit", session = %s.id, sub = %s.owner, reason = cause.as_str(), detail = %reason, last_input = ?s.last_input, created_at = s.created_at, "session ended by its profile's limits");
        self.core.metrics().reconciled(cause.as_str());
        self.stop_in_background(s);
        Ok(Some(cause))
    }

    /// Ends a session, decision first: the record becomes `stopping` with who ended it
    /// and why, flushed, and its route leaves the feed in the same write, so gateways
    /// close its terminals and share viewers now. The container is then stopped on a
    /// task of its own ([`Sessions::stop_in_background`]). Returns once the decision is
    /// durable: the caller never waits for Docker.
    pub fn end(&self, who: &Principal, id: &SessionId) -> Result<(), ApiError> {
        let s = self.core.authorized(who, id, Action::End)?;
        let by = who.sub.to_string();
        let reason = if s.owner != who.sub {
            "ended by an admin"
        } else {
            "ended by its owner"
        };
        let by_for_record = by.clone();
        let mut decided_before = false;
        let s = self.core.store().update(id, |s| {
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
        self.core.refresh_gauges();
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
    pub(crate) fn stop_in_background(&self, s: Session) -> bool {
        let Some(mark) = self.ending.mark(s.id) else {
            return false;
        };
        let c = self.clone();
        tokio::spawn(async move {
            let _mark = mark;
            if !c.core.live().closed_everywhere(&s.id, FANOUT_WAIT).await {
                tracing::debug!(session = %s.id, "terminals still reported open; stopping the container anyway");
            }
            // Never closed: the semaphore lives as long as the handle.
            let _turn = c.stops.acquire().await.ok();
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
            .core
            .store()
            .get(&s.id)?
            .is_some_and(|now| now.state == SessionState::Stopping)
        {
            return Ok(false);
        }
        let target = s
            .container_id
            .clone()
            .unwrap_or_else(|| container_name(&s.id));
        let docker = self.core.docker_of(&s.host)?;
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
                self.core.metrics().docker_error("kill");
                tracing::warn!(session = %s.id, error = %e, "hang-up failed; removing by force");
            }
        }
        if let Err(e) = self.remove_container(&docker, &target).await {
            self.core.metrics().docker_error("remove");
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
        self.core.refresh_gauges();
        // A chosen workspace's size is measured again (not the home volume's: every
        // session of a `home` profile has one, and each measurement walks the host).
        let home = home_volume_name(&self.core.config().instance, &s.owner);
        if s.workspace
            .as_ref()
            .is_some_and(|w| w.id.is_some() && w.volume != home)
        {
            self.workspaces.measure_workspaces_soon();
        }
        Ok(true)
    }

    /// How long the programs of `s` get after their hang-up: its profile's
    /// `stop_grace_seconds`, or the default for a profile this configuration dropped.
    fn stop_grace(&self, s: &Session) -> Duration {
        self.core.config().profiles.get(&s.profile).map_or(
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
                    + Duration::from_secs(self.core.config().control.docker_timeout_seconds);
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
}

//! What gateways learn: the route feed (changes after a revision, or a reset snapshot)
//! and the lookup of one route.

use policy::SessionId;

use super::error::{Result, StoreError};
use super::keys::decode_u64;
use super::sessions::decode_session;
use super::Store;
use crate::model::{Change, FeedPage, Route, RouteLookup};

impl Store {
    /// A running session's route with its owner's lock and the revision they are true
    /// at, read under the write mutex so that no write falls between the three (a
    /// route stamped with a revision after its own removal would make gateways skip
    /// that removal).
    pub fn lookup(&self, id: &SessionId) -> Result<Option<RouteLookup>> {
        let _guard = self.lock();
        let Some(s) = self.get(id)? else {
            // A target: nobody owns it, so no owner can be locked.
            let route = self.get_target(id)?.and_then(|t| t.route());
            let epoch = self.t()?.epoch.clone();
            return Ok(route.map(|route| RouteLookup {
                route,
                owner_locked: false,
                rev: self.rev(),
                epoch,
            }));
        };
        let Some(route) = self.route_of(&s) else {
            return Ok(None);
        };
        let owner_locked = self.is_locked(&s.owner)?;
        let rev = self.stored_rev()?;
        Ok(Some(RouteLookup {
            route,
            owner_locked,
            rev,
            epoch: self.t()?.epoch.clone(),
        }))
    }

    /// Route feed: changes with rev > after, in order. If `after` is older than the
    /// oldest retained change minus one (log trimmed), or greater than the current rev
    /// (a restored/rebuilt store), return reset=true with every route of running
    /// sessions and every locked user. after == rev → empty changes, reset false.
    pub fn feed(&self, after: u64) -> Result<FeedPage> {
        self.feed_in(after, None)
    }

    /// This opening's feed epoch.
    pub fn epoch(&self) -> String {
        self.t().map(|t| t.epoch.clone()).unwrap_or_default()
    }

    /// [`Store::feed`] for a poller whose revision counts in `epoch`: another epoch than
    /// this opening's is answered with a reset.
    pub fn feed_in(&self, after: u64, epoch: Option<&str>) -> Result<FeedPage> {
        let current = self.t()?.epoch.clone();
        if epoch.is_some_and(|e| e != current) {
            return self.snapshot();
        }
        let rev = self.rev();
        if after == rev {
            return Ok(FeedPage {
                epoch: self.t()?.epoch.clone(),
                rev,
                reset: false,
                changes: Vec::new(),
                routes: Vec::new(),
                locked: Vec::new(),
                revoked: Vec::new(),
            });
        }
        if after < rev {
            // Only published revisions: every change up to `rev` is committed and
            // flushed. A concurrent write may trim the front of the log under this
            // read; any gap means "trimmed" and becomes a reset.
            let mut changes = Vec::new();
            let mut expect = after + 1;
            let start = expect.to_be_bytes();
            let end = rev.to_be_bytes();
            for item in self.t()?.changes.range(start.as_slice()..=end.as_slice()) {
                let (key, value) = item?;
                let at = decode_u64(Some(key))?;
                if at != expect {
                    break;
                }
                let change: Change = serde_json::from_slice(&value)
                    .map_err(|e| StoreError::undecodable(format!("change {at}"), e))?;
                if change.rev() != at {
                    return Err(StoreError::corrupt(format!(
                        "change stored at {at} says rev {}",
                        change.rev()
                    )));
                }
                changes.push(change);
                expect += 1;
            }
            if expect == rev + 1 {
                return Ok(FeedPage {
                    epoch: self.t()?.epoch.clone(),
                    rev,
                    reset: false,
                    changes,
                    routes: Vec::new(),
                    locked: Vec::new(),
                    revoked: Vec::new(),
                });
            }
        }
        self.snapshot()
    }

    /// The full state for a feed reset, taken under the write mutex so `rev`, routes
    /// and locks describe the same moment.
    fn snapshot(&self) -> Result<FeedPage> {
        let _guard = self.lock();
        let rev = self.rev();
        let mut routes: Vec<Route> = Vec::new();
        for item in self.t()?.sessions.iter() {
            let (key, value) = item?;
            if let Some(route) = self.route_of(&decode_session(&key, &value)?) {
                routes.push(route);
            }
        }
        for t in self.list_targets()? {
            routes.extend(t.route());
        }
        let locked = self.locked_users()?;
        let revoked = self.revocations()?;
        Ok(FeedPage {
            epoch: self.t()?.epoch.clone(),
            rev,
            reset: true,
            changes: Vec::new(),
            routes,
            locked,
            revoked,
        })
    }
}

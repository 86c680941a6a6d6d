//! The route cache: what the gateway knows about sessions, locked users and revoked
//! credentials, fed by control's route feed. Reads are on every terminal request, so the lock is a plain
//! `RwLock` held for a map lookup only (never across an await).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use policy::feed::{Change, FeedPage, PeerGrant, Route, RouteLookup, TargetAccess};
use policy::revocation::{CredentialId, Revocation, RevocationSet, RevokedWhy};
use policy::SessionId;

/// The answer of a cache lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A running session's route (shared with the cache: no copy per request).
    Hit(Arc<Route>),
    /// Recently confirmed unknown: answer 404 without asking control.
    Negative,
    /// Not known: ask control once.
    Miss,
}

/// What a feed update takes away, so live terminals can be closed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Revocations {
    /// Sessions whose route was removed, or changed owner, container or upstream.
    pub sessions: Vec<SessionId>,
    /// Targets whose allowed users or roles changed: each terminal is judged again.
    pub narrowed: Vec<(SessionId, TargetAccess)>,
    /// Users who were locked.
    pub users: Vec<String>,
    /// Share links revoked (gone from their session's route): their viewers close.
    pub shares: Vec<(SessionId, String)>,
    /// Sessions whose peers changed, with their peers now: each peer terminal is judged
    /// again.
    pub peers: Vec<(SessionId, Vec<PeerGrant>)>,
    /// Credentials revoked (sign-outs, an admin's revocations): what they opened closes.
    pub credentials: Vec<Revocation>,
}

impl Revocations {
    /// What a route that changed from `old` to `new` revokes: the whole session when
    /// its terminals would now reach something else, the users a target no longer
    /// allows when only its list changed.
    fn compare(&mut self, old: &Route, new: &Route) {
        if !old.same_terminal(new) {
            self.sessions.push(new.session);
            return;
        }
        self.shares
            .extend(old.shares_gone(new).into_iter().map(|s| (new.session, s)));
        if old.peers != new.peers {
            self.peers.push((new.session, new.peers.clone()));
        }
        if let (Some(before), Some(after)) = (&old.target, &new.target) {
            if before != after {
                self.narrowed.push((new.session, after.clone()));
            }
        }
    }

    /// Whether nothing was revoked.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
            && self.users.is_empty()
            && self.narrowed.is_empty()
            && self.shares.is_empty()
            && self.peers.is_empty()
            && self.credentials.is_empty()
    }
}

#[derive(Default)]
struct Inner {
    /// The feed epoch `rev` counts in.
    epoch: String,
    rev: u64,
    routes: HashMap<SessionId, Arc<Route>>,
    locked: HashSet<String>,
    revoked: RevocationSet,
    negative: HashMap<SessionId, Instant>,
    /// Routes learned by a one-off lookup ahead of the feed, with the revision they were
    /// true at: older feed changes for them are stale and skipped.
    learned: HashMap<SessionId, (u64, String)>,
}

/// Routes and locks, as of a feed revision.
pub struct RouteCache {
    inner: RwLock<Inner>,
    synced: AtomicBool,
    negative_ttl: Duration,
}

impl RouteCache {
    /// An empty cache; unknown ids are remembered for `negative_ttl`.
    pub fn new(negative_ttl: Duration) -> Self {
        RouteCache {
            inner: RwLock::new(Inner::default()),
            synced: AtomicBool::new(false),
            negative_ttl,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the cache has applied at least one feed answer.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The feed revision the cache reflects.
    pub fn rev(&self) -> u64 {
        self.read().rev
    }

    /// The feed epoch that revision counts in (empty before the first answer).
    pub fn epoch(&self) -> String {
        self.read().epoch.clone()
    }

    /// Number of known routes.
    pub fn len(&self) -> usize {
        self.read().routes.len()
    }

    /// Whether no route is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Looks a session up.
    pub fn get(&self, id: &SessionId) -> Lookup {
        let inner = self.read();
        if let Some(r) = inner.routes.get(id) {
            return Lookup::Hit(Arc::clone(r));
        }
        match inner.negative.get(id) {
            Some(t) if t.elapsed() < self.negative_ttl => Lookup::Negative,
            _ => Lookup::Miss,
        }
    }

    /// Whether `sub` is locked.
    pub fn is_locked(&self, sub: &str) -> bool {
        self.read().locked.contains(sub)
    }

    /// Why a verified credential is refused, if a revocation covers it. Nothing is
    /// hashed while nothing is revoked.
    pub fn revoked(&self, token: &[u8], who: &policy::Principal) -> Option<RevokedWhy> {
        let inner = self.read();
        if inner.revoked.is_empty() {
            return None;
        }
        inner.revoked.check(&CredentialId::of(token, who))
    }

    /// Forgets revocations whose tokens can no longer verify at `now` with
    /// `leeway_secs` of leeway (`auth.leeway_seconds`).
    pub fn prune_revoked(&self, now: u64, leeway_secs: u64) {
        let mut inner = self.write();
        if !inner.revoked.is_empty() {
            inner.revoked.prune(now, leeway_secs);
        }
    }

    /// Revocations in force (the admin listener's gauge).
    pub fn revoked_len(&self) -> usize {
        self.read().revoked.len()
    }

    /// Records the answer of a one-off lookup (`None`: not running, remembered briefly as
    /// unknown). A route is ignored when the cache has already seen a later revision of
    /// the answer's epoch (the feed knows better).
    pub fn learn(&self, id: SessionId, answer: Option<RouteLookup>) {
        let mut inner = self.write();
        match answer {
            Some(RouteLookup {
                route,
                owner_locked,
                rev,
                epoch,
            }) => {
                if epoch == inner.epoch && rev < inner.rev {
                    return;
                }
                if owner_locked {
                    inner.locked.insert(route.owner.clone());
                }
                inner.negative.remove(&id);
                inner.learned.insert(id, (rev, epoch));
                inner.routes.insert(id, Arc::new(route));
            }
            None => {
                // Short-lived by design, so it needs no revision; bound its size.
                if inner.negative.len() > 10_000 {
                    let ttl = self.negative_ttl;
                    inner.negative.retain(|_, t| t.elapsed() < ttl);
                }
                inner.negative.insert(id, Instant::now());
            }
        }
    }

    /// Applies a feed answer; returns what it revoked. Revocations follow the state at
    /// the end of the answer, not each change: a session created (`remove` while
    /// `creating`) and started (`upsert`) in one answer revokes nothing.
    pub fn apply(&self, page: &FeedPage) -> Revocations {
        let mut out = Revocations::default();
        let mut inner = self.write();
        if !page.reset && !inner.epoch.is_empty() && page.epoch != inner.epoch {
            // Increments of another history must not be applied: forget the revision
            // so that the next poll asks for the whole state.
            inner.rev = 0;
            inner.epoch.clear();
            return out;
        }
        inner.epoch.clone_from(&page.epoch);
        if page.reset {
            let mut routes: HashMap<SessionId, Arc<Route>> = page
                .routes
                .iter()
                .map(|r| (r.session, Arc::new(r.clone())))
                .collect();
            // A route learned at a later revision of this epoch than the snapshot is
            // newer knowledge: a snapshot taken just before a session started must not
            // revoke the terminal that was admitted on the lookup.
            inner
                .learned
                .retain(|_, (l, e)| *e == page.epoch && *l > page.rev);
            for id in inner.learned.keys() {
                if let Some(r) = inner.routes.get(id) {
                    routes.entry(*id).or_insert_with(|| Arc::clone(r));
                }
            }
            for (id, old) in &inner.routes {
                match routes.get(id) {
                    Some(new) => out.compare(old, new),
                    None => out.sessions.push(*id),
                }
            }
            let locked: HashSet<String> = page.locked.iter().cloned().collect();
            out.users = locked.difference(&inner.locked).cloned().collect();
            // Every entry is enforced again: closing what is closed already is a no-op,
            // and a gateway that missed the increments must not keep what they revoked.
            inner.revoked.replace(&page.revoked);
            out.credentials.clone_from(&page.revoked);
            inner.routes = routes;
            inner.locked = locked;
            inner.negative.clear();
        } else {
            let mut before: HashMap<SessionId, Option<Arc<Route>>> = HashMap::new();
            let mut locked_now = Vec::new();
            for change in &page.changes {
                let rev = change.rev();
                if rev <= inner.rev {
                    continue;
                }
                match change {
                    Change::Upsert { route, .. } => {
                        let id = route.session;
                        if inner
                            .learned
                            .get(&id)
                            .is_some_and(|(l, e)| *e == page.epoch && *l >= rev)
                        {
                            continue;
                        }
                        let old = inner.routes.get(&id).cloned();
                        before.entry(id).or_insert(old);
                        inner.negative.remove(&id);
                        inner.routes.insert(id, Arc::new(route.clone()));
                    }
                    Change::Remove { session, .. } => {
                        if inner
                            .learned
                            .get(session)
                            .is_some_and(|(l, e)| *e == page.epoch && *l >= rev)
                        {
                            continue;
                        }
                        let old = inner.routes.get(session).cloned();
                        before.entry(*session).or_insert(old);
                        inner.routes.remove(session);
                    }
                    Change::Lock { sub, .. } => {
                        inner.locked.insert(sub.clone());
                        locked_now.push(sub.clone());
                    }
                    Change::Unlock { sub, .. } => {
                        inner.locked.remove(sub);
                    }
                    Change::Revoke { revocation, .. } => {
                        inner.revoked.insert(revocation);
                        out.credentials.push(revocation.clone());
                    }
                }
            }
            for (id, old) in before {
                match (inner.routes.get(&id), old) {
                    (Some(new), Some(old)) => out.compare(&old, new),
                    (Some(_), None) => {}
                    (None, _) => out.sessions.push(id),
                }
            }
            locked_now.sort();
            locked_now.dedup();
            out.users = locked_now
                .into_iter()
                .filter(|u| inner.locked.contains(u))
                .collect();
        }
        inner.rev = page.rev;
        let rev = page.rev;
        inner
            .learned
            .retain(|_, (l, e)| *e == page.epoch && *l > rev);
        drop(inner);
        self.synced.store(true, Ordering::Release);
        out
    }
}

#[cfg(test)]
mod tests;

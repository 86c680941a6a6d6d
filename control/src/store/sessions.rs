//! Session records: creating, updating and ending active sessions, their history
//! (trimmed per owner) and the reads over both.

use policy::{QuotaLimits, SessionId, Sub};

use super::error::{Result, StoreError};
use super::keys::{
    decode_u32, history_key, owner_key, owner_prefix, parse_history_key, parse_owner_key,
    user_count_key, GLOBAL_COUNT_KEY,
};
use super::tx::{abort, encode};
use super::Store;
use crate::model::{Change, Session, SessionState, Workspace, WorkspaceOrigin, WorkspaceState};

/// How an active session ends: [`Store::end`]'s request.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// The states the decision to end was based on; the end happens only if the record
    /// is still in one of them.
    pub from: &'a [SessionState],
    /// The ended state to record.
    pub state: SessionState,
    /// Who ends it: a `sub`, or `termgate` for the reconciler.
    pub by: &'a str,
    /// Why, in words.
    pub reason: &'a str,
    /// When, seconds since the Unix epoch.
    pub at: u64,
}

/// Every active state: for an end that holds whatever the session is doing.
pub const ANY_ACTIVE: &[SessionState] = &[
    SessionState::Creating,
    SessionState::Running,
    SessionState::Stopping,
    SessionState::Unreachable,
];

impl Store {
    /// Quota check (limits.check(user_active, global_active)) + insert a `Creating`
    /// session + counts + rev bump, atomically; flush.
    ///
    /// `Conflict` if `s` is not `Creating` or its id is already used (active or ended).
    pub fn insert_creating(&self, s: &Session, limits: QuotaLimits) -> Result<()> {
        if s.state != SessionState::Creating {
            return Err(StoreError::Conflict(format!(
                "a new session must be creating, not {}",
                s.state.as_str()
            )));
        }
        let _guard = self.write_lock()?;
        self.insert_creating_locked(s, limits, None)
    }

    /// [`Store::insert_creating`] for a session whose Docker host is chosen here, under
    /// the write lock, so that racing creates never overfill a host: `choose` gets the
    /// active sessions per host and names the host (`None`: no host may take it,
    /// [`StoreError::NoHost`]). Quotas are checked first, so a caller over quota hears
    /// that rather than that no host has room. Sets `s.host`.
    pub fn insert_placed(
        &self,
        s: &mut Session,
        limits: QuotaLimits,
        choose: impl FnOnce(
            &std::collections::BTreeMap<String, u32>,
            Option<&str>,
        ) -> std::result::Result<String, String>,
    ) -> Result<()> {
        if s.state != SessionState::Creating {
            return Err(StoreError::Conflict(format!(
                "a new session must be creating, not {}",
                s.state.as_str()
            )));
        }
        let _guard = self.write_lock()?;
        // Under the mutex the counts cannot move before the transaction re-checks them.
        let user = decode_u32(self.t()?.counts.get(user_count_key(&s.owner))?)?;
        let global = decode_u32(self.t()?.counts.get(GLOBAL_COUNT_KEY)?)?;
        limits.check(user, global).map_err(StoreError::Quota)?;
        let mut per_host = std::collections::BTreeMap::<String, u32>::new();
        for item in self.t()?.sessions.iter() {
            let (key, value) = item?;
            let active = decode_session(&key, &value)?;
            *per_host.entry(active.host).or_default() += 1;
        }
        // A workspace is claimed here, where no copy or delete can start meanwhile; its
        // volume's host (once made) is the only one the session may go to, and the
        // first session on a new one fixes it.
        let mut workspace = None;
        if let Some(id) = s.workspace.as_ref().and_then(|w| w.id) {
            let mut w = self
                .get_workspace(&id)?
                .filter(|w| w.owner == s.owner || w.origin.is_shared())
                .ok_or_else(|| StoreError::Conflict(format!("workspace {id} is gone")))?;
            if w.state != WorkspaceState::Ready {
                return Err(StoreError::Conflict(format!(
                    "workspace {:?} is not ready",
                    w.name
                )));
            }
            if self.being_copied(&id)? {
                return Err(StoreError::Conflict(format!(
                    "workspace {:?} is being copied; start the session once the copy is done",
                    w.name
                )));
            }
            s.host = choose(&per_host, w.host.as_deref()).map_err(StoreError::NoHost)?;
            let made = matches!(w.origin, WorkspaceOrigin::Created | WorkspaceOrigin::Shared);
            if made && w.host.is_none() {
                w.host = Some(s.host.clone());
                workspace = Some(w);
            }
        } else {
            s.host = choose(&per_host, None).map_err(StoreError::NoHost)?;
        }
        self.insert_creating_locked(s, limits, workspace.as_ref())
    }

    /// The body of an insert of a `creating` session; the caller holds the write lock.
    fn insert_creating_locked(
        &self,
        s: &Session,
        limits: QuotaLimits,
        workspace: Option<&Workspace>,
    ) -> Result<()> {
        self.transact(|tx| {
            if tx.id_used(&s.id)? {
                return Err(abort(conflict_exists(&s.id)));
            }
            let user = tx.count(&user_count_key(&s.owner))?;
            let global = tx.count(GLOBAL_COUNT_KEY)?;
            limits
                .check(user, global)
                .map_err(|q| abort(StoreError::Quota(q)))?;
            tx.put_active(s)?;
            tx.add_active(&s.owner, 1)?;
            tx.bump_for(s)?;
            if let Some(w) = workspace {
                tx.workspaces.insert(w.id.as_str().as_bytes(), encode(w)?)?;
            }
            Ok(())
        })?;
        self.settle()
    }

    /// Insert records rebuilt from container labels (no quota check; active ones
    /// counted); one rev bump and change per inserted session; flush. Skips ids already
    /// present (active or ended, including earlier in the same batch). Ended records go
    /// to history without trimming it. Returns how many were inserted.
    pub fn insert_rebuilt(&self, sessions: &[Session]) -> Result<usize> {
        let _guard = self.write_lock()?;
        let inserted = self.transact(|tx| {
            let mut inserted = 0;
            for s in sessions {
                if tx.id_used(&s.id)? {
                    continue;
                }
                if s.state.is_active() {
                    tx.put_active(s)?;
                    tx.add_active(&s.owner, 1)?;
                } else {
                    // A record without an end time still needs an index position.
                    let ended_at = s.ended_at.unwrap_or(s.created_at);
                    tx.put_history(s, ended_at)?;
                }
                tx.bump_for(s)?;
                inserted += 1;
            }
            Ok(inserted)
        })?;
        if inserted > 0 {
            self.settle()?;
        }
        Ok(inserted)
    }

    /// Apply `f` to an active session and write it back (state must stay active:
    /// Creating/Running/Stopping, else Conflict); rev bump + change; flush. Returns the
    /// new record. NotFound if not active.
    ///
    /// `f` may not change the id or the owner (the indexes hang on them): Conflict.
    /// When `f` leaves the record exactly as it was, nothing is written and the
    /// revision does not move (gateways have nothing to learn).
    pub fn update<F: FnOnce(&mut Session)>(&self, id: &SessionId, f: F) -> Result<Session> {
        let _guard = self.write_lock()?;
        // Safe to read outside the transaction: every writer holds the mutex.
        let old = self.get(id)?.ok_or(StoreError::NotFound)?;
        let mut new = old.clone();
        f(&mut new);
        if new.id != old.id || new.owner != old.owner {
            return Err(StoreError::Conflict(
                "an update may not change a session's id or owner".into(),
            ));
        }
        if !new.state.is_active() {
            return Err(StoreError::Conflict(format!(
                "update may not set {}; end the session instead",
                new.state.as_str()
            )));
        }
        if new == old {
            return Ok(new);
        }
        self.transact(|tx| {
            tx.sessions
                .insert(new.id.as_str().as_bytes(), encode(&new)?)?;
            tx.bump_for(&new)?;
            Ok(())
        })?;
        self.settle()?;
        Ok(new)
    }

    /// Records when users last typed into sessions, as a gateway reports it: each
    /// active session whose `last_input` moves forward (by a second at least: times
    /// are whole seconds) is rewritten, all in one transaction and without a revision
    /// bump (gateways have nothing to learn from it). Ids that name no active session
    /// are skipped; a time after `now` counts as `now`. Returns how many records moved;
    /// flushed when any did.
    pub fn record_input(&self, inputs: &[(SessionId, u64)], now: u64) -> Result<usize> {
        let mut latest = std::collections::BTreeMap::<SessionId, u64>::new();
        for (id, at) in inputs {
            let e = latest.entry(*id).or_default();
            *e = (*e).max((*at).min(now));
        }
        let _guard = self.write_lock()?;
        let mut moved = Vec::new();
        for (id, at) in latest {
            // Safe to read outside the transaction: every writer holds the mutex.
            let Some(mut s) = self.get(&id)? else {
                continue;
            };
            if s.last_input.is_some_and(|l| at <= l) {
                continue;
            }
            s.last_input = Some(at);
            moved.push(s);
        }
        if moved.is_empty() {
            return Ok(0);
        }
        self.transact(|tx| {
            for s in &moved {
                tx.sessions.insert(s.id.as_str().as_bytes(), encode(s)?)?;
            }
            Ok(())
        })?;
        self.note(self.flush_durably())?;
        Ok(moved.len())
    }

    /// End an active session, but only if it is still in one of `ending.from` (the
    /// states the caller's decision was based on; otherwise `StateChanged` and nothing
    /// is written): set state (must be an ended state: Terminated/Exited/Gone/Failed,
    /// else Conflict), ended_at, ended_by, end_reason; move it from `sessions` to
    /// `history` (+ indexes), decrement counts, rev bump + Change::Remove; trim that
    /// owner's history to the newest `history_per_user` entries; flush. NotFound if not
    /// active.
    ///
    /// Deciding in the store first and acting in Docker only after this succeeded is
    /// what lets two racing parties (a create and the reconciler, say) agree on exactly
    /// one winner.
    pub fn end(
        &self,
        id: &SessionId,
        ending: &Ending<'_>,
        history_per_user: usize,
    ) -> Result<Session> {
        if ending.state.is_active() {
            return Err(StoreError::Conflict(format!(
                "{} is not an ended state",
                ending.state.as_str()
            )));
        }
        let now = ending.at;
        let _guard = self.write_lock()?;
        let mut s = self.get(id)?.ok_or(StoreError::NotFound)?;
        if !ending.from.contains(&s.state) {
            return Err(StoreError::StateChanged(s.state));
        }
        s.state = ending.state;
        s.ended_at = Some(now);
        s.ended_by = Some(ending.by.to_owned());
        s.end_reason = Some(ending.reason.to_owned());

        // Transactions cannot scan, so pick the history entries to drop here; the
        // mutex keeps them valid until the transaction runs. The new entry takes part:
        // "newest N" is by end time, whatever order the ends arrive in.
        let mut keys = self.history_keys(&s.owner)?;
        keys.push(history_key(&s.owner, now, &s.id));
        keys.sort();
        let drop_n = keys.len().saturating_sub(history_per_user);
        let dropped: Vec<(Vec<u8>, SessionId)> = keys
            .into_iter()
            .take(drop_n)
            .map(|k| {
                let id = parse_history_key(&k).map(|(_, _, id)| id);
                id.map(|id| (k, id))
            })
            .collect::<Result<_>>()?;

        self.transact(|tx| {
            tx.sessions.remove(s.id.as_str().as_bytes())?;
            tx.owners.remove(owner_key(&s.owner, &s.id))?;
            tx.put_history(&s, now)?;
            // After the insert, so that a new entry that is itself among the oldest
            // goes too.
            for (key, old) in &dropped {
                tx.history_by_owner.remove(key.as_slice())?;
                tx.history.remove(old.as_str().as_bytes())?;
            }
            tx.add_active(&s.owner, -1)?;
            tx.bump(|rev| Change::Remove { rev, session: s.id })?;
            Ok(())
        })?;
        self.settle()?;
        Ok(s)
    }

    /// The active session with this id, if any.
    pub fn get(&self, id: &SessionId) -> Result<Option<Session>> {
        let key = id.as_str().as_bytes();
        self.t()?
            .sessions
            .get(key)?
            .map(|v| decode_session(key, &v))
            .transpose()
    }

    /// The ended session with this id, if it is still in history.
    pub fn get_ended(&self, id: &SessionId) -> Result<Option<Session>> {
        let key = id.as_str().as_bytes();
        self.t()?
            .history
            .get(key)?
            .map(|v| decode_session(key, &v))
            .transpose()
    }

    /// Active sessions, of one owner (read through the owner index) or of everyone,
    /// sorted by `created_at` then id.
    pub fn list_active(&self, owner: Option<&Sub>) -> Result<Vec<Session>> {
        let mut out = Vec::new();
        match owner {
            Some(owner) => {
                for item in self.t()?.owners.scan_prefix(owner_prefix(owner)) {
                    let (key, _) = item?;
                    let Some(id) = parse_owner_key(&key, owner)? else {
                        continue;
                    };
                    let s = self.get(&id)?.ok_or_else(|| {
                        StoreError::corrupt(format!("owner index names missing session {id}"))
                    })?;
                    out.push(s);
                }
            }
            None => {
                for item in self.t()?.sessions.iter() {
                    let (key, value) = item?;
                    out.push(decode_session(&key, &value)?);
                }
            }
        }
        out.sort_by_key(|s| (s.created_at, s.id));
        Ok(out)
    }

    /// Up to `limit` ended sessions, of one owner or of everyone, newest end first
    /// (ties: larger id first).
    pub fn list_history(&self, owner: Option<&Sub>, limit: usize) -> Result<Vec<Session>> {
        match owner {
            Some(owner) => {
                let mut out = Vec::new();
                // Index keys sort by end time, so reading backwards is newest first.
                for item in self
                    .t()?
                    .history_by_owner
                    .scan_prefix(owner_prefix(owner))
                    .rev()
                {
                    if out.len() >= limit {
                        break;
                    }
                    let (key, _) = item?;
                    let (key_owner, _, id) = parse_history_key(&key)?;
                    if key_owner != owner.as_str().as_bytes() {
                        continue;
                    }
                    let s = self.get_ended(&id)?.ok_or_else(|| {
                        StoreError::corrupt(format!("history index names missing session {id}"))
                    })?;
                    out.push(s);
                }
                Ok(out)
            }
            None => {
                let mut all = Vec::new();
                for item in self.t()?.history.iter() {
                    let (key, value) = item?;
                    all.push(decode_session(&key, &value)?);
                }
                all.sort_by_key(|s| std::cmp::Reverse((s.ended_at, s.id)));
                all.truncate(limit);
                Ok(all)
            }
        }
    }

    /// Every `history_by_owner` key of `owner`, ascending (oldest first).
    fn history_keys(&self, owner: &Sub) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        for item in self.t()?.history_by_owner.scan_prefix(owner_prefix(owner)) {
            let (key, _) = item?;
            let (key_owner, _, _) = parse_history_key(&key)?;
            if key_owner == owner.as_str().as_bytes() {
                keys.push(key.to_vec());
            }
        }
        Ok(keys)
    }
}

pub(super) fn decode_session(key: &[u8], value: &[u8]) -> Result<Session> {
    let name = String::from_utf8_lossy(key);
    let s: Session = serde_json::from_slice(value)
        .map_err(|e| StoreError::undecodable(format!("session {name}"), e))?;
    // A record filed under another id would dodge every lookup and index.
    if s.id.as_str().as_bytes() != key {
        return Err(StoreError::corrupt(format!(
            "session stored under {name} says id {}",
            s.id
        )));
    }
    Ok(s)
}

fn conflict_exists(id: &SessionId) -> StoreError {
    StoreError::Conflict(format!("session {id} already exists"))
}

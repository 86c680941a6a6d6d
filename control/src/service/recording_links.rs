//! [`RecordingLinks`]: links to one recording (`/r/<token>`): made, listed and revoked by the session's
//! owner (or an admin), for an active or an ended session alike; played for whoever
//! holds the link, as its mode and the profile's `recording_links` allow. Control
//! keeps the token's hash only ([`RecordingLink`]); the token is answered once, at
//! creation. Logs and the audit trail name a link by its id.

use std::ops::RangeInclusive;
use std::sync::Arc;

use policy::recording_link::{self, RecordingToken};
use policy::share::ShareMode;
use policy::{Action, Decision, Principal, Refusal, SessionId, Sub};

use super::clock::now;
use super::core::Core;
use crate::error::ApiError;
use crate::model::{RecordingLink, Session};

/// A recording link just made: the only time its token is seen.
#[derive(Debug, Clone)]
pub struct NewRecordingLink {
    pub id: String,
    /// The secret: 64 hex digits, kept nowhere.
    pub token: String,
    /// The link, as a path on the gateway (`/r/<token>`).
    pub url: String,
    pub expires_at: u64,
    pub mode: String,
}

/// Most live links one recording holds at once.
pub const MAX_LINKS_PER_RECORDING: usize = 16;

/// The spelling of a mode on the wire and in the store.
fn spelling(mode: ShareMode) -> &'static str {
    match mode {
        ShareMode::Anyone => "anyone",
        ShareMode::SignedIn => "signed-in",
        ShareMode::Off => "off",
    }
}

/// The lives a link may have: [`recording_link::TTL_RANGE`]; in debug builds,
/// `TERMGATE_TEST_RECORDING_LINK_MIN_TTL` (seconds) lowers the shortest, so tests see
/// a link expire without waiting a minute.
fn ttl_range() -> RangeInclusive<u64> {
    let range = recording_link::TTL_RANGE;
    let min = cfg!(debug_assertions)
        .then(|| std::env::var("TERMGATE_TEST_RECORDING_LINK_MIN_TTL").ok())
        .flatten()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|m| *m >= 1);
    match min {
        Some(m) => m.min(*range.start())..=*range.end(),
        None => range,
    }
}

/// Links to recordings.
#[derive(Clone)]
pub struct RecordingLinks {
    core: Arc<Core>,
}

impl RecordingLinks {
    pub(super) fn new(core: Arc<Core>) -> Self {
        RecordingLinks { core }
    }

    /// The session (active or ended) whose recording `name` `who` may link to, and
    /// the profile's mode. Another's, unknown, malformed and absent are one 404.
    fn linkable(
        &self,
        who: &Principal,
        id: &SessionId,
        name: &str,
    ) -> Result<(Session, ShareMode), ApiError> {
        let s = match self.core.store().get(id)? {
            Some(s) => Some(s),
            None => self.core.store().get_ended(id)?,
        };
        let locked = self.core.is_locked(&who.sub)?;
        let s = match policy::decide(
            who,
            s.as_ref().map(|s| s.owner.as_str()),
            locked,
            Action::Share,
        ) {
            Decision::Allow { .. } => s.ok_or(ApiError::NOT_FOUND)?,
            Decision::Deny(d) => return Err(d),
        };
        let exists = crate::recordings::valid_name(name)
            && self
                .core
                .recordings()
                .list(id)
                .iter()
                .any(|r| r.name == name);
        if !exists {
            return Err(ApiError::NOT_FOUND);
        }
        let mode = self.profile_mode(&s.profile);
        Ok((s, mode))
    }

    /// What a profile allows now (a profile no longer configured: `off`).
    fn profile_mode(&self, profile: &str) -> ShareMode {
        self.core
            .config()
            .profiles
            .get(profile)
            .map_or(ShareMode::Off, config::Profile::recording_link_mode)
    }

    /// Makes a link to recording `name` of session `id`, playing it for `ttl_seconds`
    /// (`None`: 7 days) to `mode` (`anyone` or `signed-in`; `None`: `signed-in`).
    pub fn create_recording_link(
        &self,
        who: &Principal,
        id: &SessionId,
        name: &str,
        ttl_seconds: Option<u64>,
        mode: Option<&str>,
    ) -> Result<NewRecordingLink, ApiError> {
        let (s, profile) = self.linkable(who, id, name)?;
        let mode = match mode {
            None => ShareMode::SignedIn,
            Some(m) => ShareMode::parse(m).ok_or_else(|| {
                Refusal::INVALID_RECORDING_LINK
                    .with_message("mode must be \"anyone\" or \"signed-in\"")
            })?,
        };
        let ttl = ttl_seconds.unwrap_or(recording_link::DEFAULT_TTL);
        recording_link::check_request(profile, mode, ttl, &ttl_range())?;
        let at = now();
        let live = self
            .core
            .store()
            .recording_links_of(id, name)?
            .iter()
            .filter(|l| !l.revoked && l.expires_at > at)
            .count();
        if live >= MAX_LINKS_PER_RECORDING {
            return Err(Refusal::INVALID_RECORDING_LINK.with_message(format!(
                "a recording holds at most {MAX_LINKS_PER_RECORDING} live links; revoke one"
            )));
        }
        let mut secret = [0u8; 32];
        getrandom::getrandom(&mut secret).map_err(|e| {
            tracing::error!(error = %e, "no randomness for a recording link");
            Refusal::INTERNAL
        })?;
        let token = RecordingToken::from_random(secret);
        let hash = token.hash();
        let link = RecordingLink {
            id: recording_link::link_id(&hash),
            hash,
            session: *id,
            recording: name.to_owned(),
            profile: s.profile.clone(),
            owner: s.owner.clone(),
            created_by: who.sub.clone(),
            mode: spelling(mode).to_owned(),
            created_at: at,
            expires_at: at.saturating_add(ttl),
            revoked: false,
        };
        self.core.store().put_recording_link(&link, at)?;
        tracing::info!(target: "audit", sub = %who.sub, session = %id, recording = name, link = %link.id, mode = %link.mode, expires_at = link.expires_at, "recording link created");
        Ok(NewRecordingLink {
            id: link.id,
            url: format!("/r/{token}"),
            token: token.to_string(),
            expires_at: link.expires_at,
            mode: link.mode,
        })
    }

    /// The live (neither revoked nor expired) links of recording `name`, and the
    /// modes a new one may have (none: the profile's `recording_links` is `off`).
    pub fn list_recording_links(
        &self,
        who: &Principal,
        id: &SessionId,
        name: &str,
    ) -> Result<(Vec<RecordingLink>, Vec<&'static str>), ApiError> {
        let (_, profile) = self.linkable(who, id, name)?;
        let allowed = [ShareMode::SignedIn, ShareMode::Anyone]
            .into_iter()
            .filter(|m| recording_link::narrower(*m, profile) == *m)
            .map(spelling)
            .collect();
        let at = now();
        let links = self
            .core
            .store()
            .recording_links_of(id, name)?
            .into_iter()
            .filter(|l| !l.revoked && l.expires_at > at)
            .collect();
        Ok((links, allowed))
    }

    /// Revokes link `link` of recording `name`: it plays no more.
    pub fn revoke_recording_link(
        &self,
        who: &Principal,
        id: &SessionId,
        name: &str,
        link: &str,
    ) -> Result<(), ApiError> {
        self.linkable(who, id, name)?;
        if !recording_link::valid_id(link) {
            return Err(ApiError::NOT_FOUND);
        }
        let l = self.core.store().revoke_recording_link(id, name, link)?;
        tracing::info!(target: "audit", sub = %who.sub, session = %id, recording = name, link = %l.id, "recording link revoked");
        Ok(())
    }

    /// The link of `token`, if it plays now for `viewer` (a signed-in user, as the
    /// gateway verified them; `None`: anyone). Unknown, revoked, expired, an owner
    /// locked, a profile now `off`: the 404 of an unknown path; a `signed-in` link
    /// without a viewer: 401.
    pub fn recording_link_plays(
        &self,
        token: &RecordingToken,
        viewer: Option<&Sub>,
    ) -> Result<RecordingLink, ApiError> {
        let link = self
            .core
            .store()
            .recording_link(&token.hash())?
            .ok_or(Refusal::PAGE_NOT_FOUND)?;
        let mode = recording_link::narrower(
            ShareMode::parse(&link.mode).unwrap_or(ShareMode::Off),
            self.profile_mode(&link.profile),
        );
        let signed_in = match viewer {
            Some(v) => !self.core.is_locked(v)?,
            None => false,
        };
        let owner_locked = self.core.is_locked(&link.owner)?;
        recording_link::decide_recording_view(
            mode,
            signed_in,
            link.expires_at,
            link.revoked,
            owner_locked,
            now(),
        )
        .inspect_err(|r| {
            let viewer = viewer.map_or("anyone", Sub::as_str);
            tracing::info!(target: "audit", viewer, session = %link.session, recording = %link.recording, link = %link.id, decision = "deny", reason = r.code, "recording link refused");
        })?;
        Ok(link)
    }
}

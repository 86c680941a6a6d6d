//! The JSON that crosses control's API: the request bodies it reads and the views it
//! answers with. `service` takes and returns its own types; the `From`s here turn a
//! body into one and one into a view.

use std::collections::BTreeMap;

use policy::audit::AuditEntry;
use policy::feed::PeerGrant;
use policy::{SessionId, Sub};
use serde::{Deserialize, Serialize};

use crate::model::{RecordingLink, SessionState, SignIn, Target, TargetCredential};
use crate::recordings::RecordingEntry;
use crate::service::{
    self, NewRecordingLink, NewSession, RevocationAsked, ShareLink, ShareStatus, Shown,
    TargetAccessPatch,
};

// Sessions.

/// Body of `POST /v1/sessions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// Profile name.
    pub profile: String,
    /// Display name (default: the profile name).
    #[serde(default)]
    pub name: Option<String>,
    /// Option values by option name.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// For a profile whose workspace is chosen: a workspace id of the caller's,
    /// `"new"` or `"ephemeral"`; left out: the home workspace.
    #[serde(default)]
    pub workspace: Option<String>,
}

impl From<CreateRequest> for NewSession {
    fn from(r: CreateRequest) -> Self {
        NewSession {
            profile: r.profile,
            name: r.name,
            options: r.options,
            workspace: r.workspace,
        }
    }
}

/// Body of `POST /v1/sessions/<id>/redraw`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedrawRequest {
    /// Terminal columns.
    pub cols: u16,
    /// Terminal rows.
    pub rows: u16,
}

/// A session as the API shows it (no container id).
#[derive(Debug, Serialize)]
pub struct SessionView<'a> {
    id: &'a SessionId,
    kind: &'static str,
    owner: &'a Sub,
    name: &'a str,
    profile: &'a str,
    host: &'a str,
    options: &'a BTreeMap<String, String>,
    state: &'static str,
    created_at: u64,
    terminal_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    ended_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ended_by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_reason: Option<&'a str>,
    /// When a user last typed into one of its terminals.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_input: Option<u64>,
    /// When it will end by itself (the earlier of its idle and lifetime deadlines),
    /// for an active session whose profile limits either.
    #[serde(skip_serializing_if = "Option::is_none")]
    ends_at: Option<u64>,
    /// What ends it then: `idle` or `max_lifetime`.
    #[serde(skip_serializing_if = "Option::is_none")]
    ends_because: Option<&'static str>,
    /// Terminals open on it now over every gateway that reports (absent: no gateway
    /// has reported lately).
    #[serde(skip_serializing_if = "Option::is_none")]
    terminals: Option<u32>,
    /// Share-link viewers watching it now, over every gateway that reports (absent:
    /// no gateway has reported lately).
    #[serde(skip_serializing_if = "Option::is_none")]
    viewers: Option<u32>,
    /// The signed-in viewers among them (`sub`s; anonymous viewers only count).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    viewer_subs: Vec<String>,
    /// `peer` in the list of a user its owner invited to co-drive it (absent: the
    /// caller owns it, or lists as an admin).
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    /// For a peer: when their invitation lapses.
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_until: Option<u64>,
    /// Who the owner invited to co-drive it, and until when (to its owner and admins).
    #[serde(skip_serializing_if = "<[PeerGrant]>::is_empty")]
    peers: &'a [PeerGrant],
    /// What the caller may do with it beyond open and end, as its profile says now.
    allows: Allows,
    /// The OCI runtime its profile runs sessions under, when not the daemon's default
    /// (`runsc`: gVisor).
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<String>,
    /// The workspace it mounts: `{"id", "name"}`, or `{"id": null, "name":
    /// "ephemeral"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace: Option<SessionWorkspaceView>,
}

/// The workspace a session mounts, as its view names it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionWorkspaceView {
    id: Option<SessionId>,
    name: String,
}

/// The actions a session's profile allows its owner: read-only share links, peers,
/// links to its recordings. A peer is allowed none of them.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Allows {
    share: bool,
    peers: bool,
    recording_links: bool,
}

impl From<service::Allows> for Allows {
    fn from(a: service::Allows) -> Self {
        Allows {
            share: a.share,
            peers: a.peers,
            recording_links: a.recording_links,
        }
    }
}

impl<'a> From<Shown<'a>> for SessionView<'a> {
    fn from(shown: Shown<'a>) -> Self {
        let s = shown.session;
        SessionView {
            id: &s.id,
            kind: "container",
            owner: &s.owner,
            name: &s.name,
            profile: &s.profile,
            host: &s.host,
            options: &s.options,
            state: s.state.as_str(),
            created_at: s.created_at,
            terminal_url: format!("/s/{}/", s.id),
            ended_at: s.ended_at,
            ended_by: s.ended_by.as_deref(),
            end_reason: s.end_reason.as_deref(),
            last_input: s.last_input,
            ends_at: shown.deadline.as_ref().map(|d| d.at),
            ends_because: shown.deadline.as_ref().map(|d| d.cause.as_str()),
            terminals: shown.terminals,
            viewers: shown.viewers,
            viewer_subs: shown.viewer_subs,
            role: shown.peer_until.map(|_| "peer"),
            peer_until: shown.peer_until,
            peers: shown.peers,
            allows: shown.allows.into(),
            runtime: shown.runtime,
            workspace: shown
                .workspace
                .map(|(id, name)| SessionWorkspaceView { id, name }),
        }
    }
}

#[derive(Serialize)]
pub(super) struct Sessions<T> {
    pub(super) sessions: Vec<T>,
}

/// One entry of a session list: a session, or a target the caller may open.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Listed<'a> {
    Session(Box<SessionView<'a>>),
    Target(ListedTarget<'a>),
}

/// `GET /v1/sessions/<id>/recordings`.
#[derive(Serialize)]
pub(super) struct RecordingList {
    pub(super) recordings: Vec<RecordingView>,
}

// Share links.

/// Body of `POST /v1/sessions/<id>/shares`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareRequest {
    /// How long the link admits viewers, seconds (1 s to 7 days).
    pub ttl_seconds: u64,
    /// Most viewers at once (per gateway); absent: no bound but the gateway's.
    #[serde(default)]
    pub max_viewers: Option<u32>,
}

/// A link just created: the only time its token is seen.
#[derive(Debug, Serialize)]
pub struct CreatedShare {
    id: String,
    /// The link, as a path on the gateway (`/v/<token>`).
    url: String,
    expires_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_viewers: Option<u32>,
    signed_in: bool,
}

impl From<ShareLink> for CreatedShare {
    fn from(l: ShareLink) -> Self {
        CreatedShare {
            id: l.grant.id,
            url: l.url,
            expires_at: l.grant.expires_at,
            max_viewers: l.grant.max_viewers,
            signed_in: l.grant.signed_in,
        }
    }
}

/// A live link as its owner sees it: never its token.
#[derive(Debug, Serialize)]
pub struct ShareView {
    id: String,
    expires_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_viewers: Option<u32>,
    signed_in: bool,
    /// Viewers open now over every gateway that reports.
    viewers: u32,
    /// The signed-in viewers' `sub`s.
    subs: Vec<String>,
}

impl From<ShareStatus> for ShareView {
    fn from(s: ShareStatus) -> Self {
        ShareView {
            id: s.grant.id,
            expires_at: s.grant.expires_at,
            max_viewers: s.grant.max_viewers,
            signed_in: s.grant.signed_in,
            viewers: s.viewers,
            subs: s.subs,
        }
    }
}

// Peers.

/// Body of `POST /v1/sessions/<id>/peers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerRequest {
    /// The user invited to co-drive the session.
    pub sub: String,
    /// How long the invitation lasts, seconds (60 s to 24 h).
    pub ttl_seconds: u64,
}

/// `GET /v1/sessions/<id>/shares`.
#[derive(Debug, Serialize)]
pub struct Shares {
    pub(super) shares: Vec<ShareView>,
}

/// `GET /v1/signins`: the caller's (or, for an admin, a user's) sign-ins.
#[derive(Debug, Serialize)]
pub struct SignIns<'a> {
    pub(super) signins: Vec<SignInView<'a>>,
}

/// `DELETE /v1/signins`: how many sign-ins were signed out, and the time (seconds since
/// the Unix epoch) before which every token of the user, sign-in links included, is
/// revoked.
#[derive(Debug, Serialize)]
pub struct SignedOut {
    pub(super) signed_out: usize,
    pub(super) tokens_issued_before: u64,
}

/// `GET /v1/revocations`: the revocations in force.
#[derive(Debug, Serialize)]
pub struct Revocations {
    pub(super) revocations: Vec<policy::revocation::Revocation>,
}

/// `GET /v1/sessions/<id>/peers`.
#[derive(Debug, Serialize)]
pub struct Peers {
    pub(super) peers: Vec<PeerView>,
}

/// One peer of a session, as its owner (or an admin) sees it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct PeerView {
    sub: String,
    expires_at: u64,
}

impl From<PeerGrant> for PeerView {
    fn from(g: PeerGrant) -> Self {
        PeerView {
            sub: g.sub,
            expires_at: g.expires_at,
        }
    }
}

// Recording links.

/// Body of `POST /v1/sessions/<id>/recordings/<name>/links`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordingLinkRequest {
    /// How long the link plays the recording, seconds (60 s to 30 days; absent: 7 days).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// `anyone` or `signed-in` (absent: `signed-in`), no wider than the profile's
    /// `recording_links`.
    #[serde(default)]
    pub mode: Option<String>,
}

/// A recording link just made: the only time its token is seen.
#[derive(Debug, Serialize)]
pub struct CreatedRecordingLink {
    id: String,
    /// The secret: 64 hex digits, kept nowhere.
    token: String,
    /// The link, as a path on the gateway (`/r/<token>`).
    url: String,
    expires_at: u64,
    mode: String,
}

impl From<NewRecordingLink> for CreatedRecordingLink {
    fn from(l: NewRecordingLink) -> Self {
        CreatedRecordingLink {
            id: l.id,
            token: l.token,
            url: l.url,
            expires_at: l.expires_at,
            mode: l.mode,
        }
    }
}

/// A link of a recording as its owner sees it: never its token.
#[derive(Debug, Serialize)]
pub struct RecordingLinkView {
    id: String,
    mode: String,
    created_at: u64,
    expires_at: u64,
    created_by: String,
}

impl From<RecordingLink> for RecordingLinkView {
    fn from(l: RecordingLink) -> Self {
        RecordingLinkView {
            id: l.id,
            mode: l.mode,
            created_at: l.created_at,
            expires_at: l.expires_at,
            created_by: l.created_by.to_string(),
        }
    }
}

/// `GET /v1/sessions/<id>/recordings/<name>/links`: the live links, oldest first.
#[derive(Debug, Serialize)]
pub struct RecordingLinks {
    pub(crate) links: Vec<RecordingLinkView>,
    /// The modes a new link may have, narrowest first (empty: the profile's
    /// `recording_links` is `off`).
    pub(crate) modes: Vec<&'static str>,
}

/// `GET /v1/recording-links/<token>/check`: a link that plays, for the gateway's page.
#[derive(Debug, Serialize)]
pub struct RecordingLinkCheck {
    pub(crate) id: String,
    pub(crate) session: SessionId,
    pub(crate) recording: String,
    pub(crate) expires_at: u64,
}

// Targets.

/// Body of `POST /v1/targets`: the fields of a `[[targets]]` table, as JSON (the
/// credential only as a file reference, never a secret).
pub type TargetRequest = config::TargetConfig;

/// Body of `PATCH /v1/targets/<id>`: who may open it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetPatch {
    /// New list of allowed `sub`s (unchanged when absent).
    #[serde(default)]
    pub users: Option<Vec<String>>,
    /// New list of allowed roles (unchanged when absent).
    #[serde(default)]
    pub roles: Option<Vec<String>>,
}

impl From<TargetPatch> for TargetAccessPatch {
    fn from(p: TargetPatch) -> Self {
        TargetAccessPatch {
            users: p.users,
            roles: p.roles,
        }
    }
}

/// A target as admins see it.
#[derive(Debug, Serialize)]
pub struct TargetView<'a> {
    id: &'a SessionId,
    name: &'a str,
    kind: &'static str,
    upstream: &'a str,
    users: &'a [String],
    roles: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    credential: Option<&'a TargetCredential>,
    created_at: u64,
    created_by: &'a str,
    from_config: bool,
    terminal_url: String,
}

impl<'a> From<&'a Target> for TargetView<'a> {
    fn from(t: &'a Target) -> Self {
        TargetView {
            id: &t.id,
            name: &t.name,
            kind: "external",
            upstream: &t.upstream,
            users: &t.users,
            roles: &t.roles,
            credential: t.credential.as_ref(),
            created_at: t.created_at,
            created_by: &t.created_by,
            from_config: t.from_config,
            terminal_url: format!("/s/{}/", t.id),
        }
    }
}

/// A target as it appears among a user's sessions: always running, owned by nobody.
#[derive(Debug, Serialize)]
pub struct ListedTarget<'a> {
    id: &'a SessionId,
    name: &'a str,
    kind: &'static str,
    profile: &'static str,
    state: &'static str,
    created_at: u64,
    terminal_url: String,
}

impl<'a> From<&'a Target> for ListedTarget<'a> {
    fn from(t: &'a Target) -> Self {
        ListedTarget {
            id: &t.id,
            name: &t.name,
            kind: "external",
            profile: "existing ttyd",
            state: SessionState::Running.as_str(),
            created_at: t.created_at,
            terminal_url: format!("/s/{}/", t.id),
        }
    }
}

#[derive(Serialize)]
pub(super) struct Targets<'a> {
    pub(super) targets: Vec<TargetView<'a>>,
}

// Users: sign-ins, revocations, locks, the audit search, profiles.

/// `POST /v1/revocations`: a token by its `jti`, or a user's tokens issued before a
/// time.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevocationRequest {
    /// The token's `jti`.
    #[serde(default)]
    pub jti: Option<String>,
    /// With `issued_before`: whose tokens.
    #[serde(default)]
    pub sub: Option<String>,
    /// Seconds since the Unix epoch; `0` or absent with `sub`: now (tokens issued in
    /// this second included).
    #[serde(default)]
    pub issued_before: Option<u64>,
    /// When the revoked token expires (its `exp`), if known; otherwise the entry is
    /// kept for the longest lifetime a token may have (`auth.max_token_lifetime_seconds`
    /// and the leeway). One in the past is refused.
    #[serde(default)]
    pub expires_at: Option<u64>,
}

impl From<RevocationRequest> for RevocationAsked {
    fn from(r: RevocationRequest) -> Self {
        RevocationAsked {
            jti: r.jti,
            sub: r.sub,
            issued_before: r.issued_before,
            expires_at: r.expires_at,
        }
    }
}

/// A sign-in as its user and admins see it.
#[derive(Debug, Serialize)]
pub struct SignInView<'a> {
    /// Its public id.
    pub id: String,
    /// Whose.
    pub sub: &'a str,
    /// When it was made, seconds since the Unix epoch.
    pub created_at: u64,
    /// When it ends by itself.
    pub expires_at: u64,
    /// `token` or `oidc`.
    pub method: &'a str,
    /// The gateway that made it.
    pub gateway: &'a str,
    /// The browser.
    pub user_agent: &'a str,
    /// The client address.
    pub client: &'a str,
    /// Whether it is the caller's own sign-in (the token of this request).
    pub current: bool,
}

impl<'a> SignInView<'a> {
    /// `s` as listed to the holder of the token whose fingerprint is `current`.
    pub fn of(s: &'a SignIn, current: &policy::revocation::Fingerprint) -> Self {
        SignInView {
            id: s.id(),
            sub: s.sub.as_str(),
            created_at: s.created_at,
            expires_at: s.expires_at,
            method: &s.method,
            gateway: &s.gateway,
            user_agent: &s.user_agent,
            client: &s.client,
            current: s.fingerprint == *current,
        }
    }
}

#[derive(Serialize)]
pub(super) struct Users {
    pub(super) locked: Vec<String>,
}

#[derive(Serialize)]
pub(super) struct AuditLines {
    pub(super) lines: Vec<AuditEntry>,
}

/// `GET /v1/profiles`.
#[derive(Serialize)]
pub(super) struct Profiles<'a> {
    pub(super) profiles: Vec<ProfileView<'a>>,
}

/// A profile as users see it. Fields in name order, as the answer always was.
#[derive(Serialize)]
pub(super) struct ProfileView<'a> {
    description: &'a str,
    name: &'a str,
    options: BTreeMap<&'a str, OptionView<'a>>,
    /// The OCI runtime its sessions run under, when not the daemon's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'a str>,
    /// What its sessions mount: `home` or `choose` (the create takes `workspace`);
    /// absent: nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace: Option<&'static str>,
}

/// One option of a profile, without the variable it is passed in.
#[derive(Serialize)]
struct OptionView<'a> {
    default: &'a str,
    description: &'a str,
    values: &'a [String],
}

impl<'a> ProfileView<'a> {
    pub(super) fn new(name: &'a str, p: &'a config::Profile) -> Self {
        ProfileView {
            description: &p.description,
            name,
            options: p
                .options
                .iter()
                .map(|(k, o)| {
                    let view = OptionView {
                        default: &o.default,
                        description: &o.description,
                        values: &o.values,
                    };
                    (k.as_str(), view)
                })
                .collect(),
            runtime: p.runtime.as_deref(),
            workspace: Some(p.workspace_mode())
                .filter(|m| *m != policy::declared::WorkspaceMode::None)
                .map(|m| m.as_str()),
        }
    }
}

// Gateways' reports (`POST /v1/terminals`, `/v1/activity`, `/v1/signins`) and
// control's answer to them are `policy::reports`', one definition for both sides.

// Health.

/// `GET /healthz` on either listener. Fields in name order, as the answer always was.
#[derive(Serialize)]
pub(super) struct Health {
    /// The store's revision (API listener only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rev: Option<u64>,
    pub(super) status: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_answers_keep_the_bytes_of_the_old_json() {
        let p: config::Profile = serde_json::from_value(serde_json::json!({
            "image": "termgate/session:dev",
            "description": "a shell",
            "options": {"shell": {"env": "SESSION_SHELL", "values": ["sh", "ash"], "default": "sh", "description": "which shell"}},
        }))
        .expect("a profile");
        let options: serde_json::Map<String, serde_json::Value> = p
            .options
            .iter()
            .map(|(k, o)| (k.clone(), serde_json::json!({"description": o.description, "values": o.values, "default": o.default})))
            .collect();
        let old = serde_json::json!({"profiles": [
            serde_json::json!({"name": "dev", "description": p.description, "options": options})
        ]});
        let new = Profiles {
            profiles: vec![ProfileView::new("dev", &p)],
        };
        assert_eq!(
            serde_json::to_string(&new).unwrap(),
            serde_json::to_string(&old).unwrap()
        );
        let health = Health {
            rev: Some(7),
            status: "ok",
        };
        assert_eq!(
            serde_json::to_string(&health).unwrap(),
            serde_json::json!({"status": "ok", "rev": 7}).to_string()
        );
        let admin = Health {
            rev: None,
            status: "ok",
        };
        assert_eq!(
            serde_json::to_string(&admin).unwrap(),
            serde_json::json!({"status": "ok"}).to_string()
        );
    }
}

/// `GET /v1/retention`: what the recordings hold, and the rules that keep them.
#[derive(Debug, Serialize)]
pub struct RecordingsUsage {
    pub(super) files: usize,
    pub(super) bytes: u64,
    pub(super) oldest_stored_at: Option<u64>,
    pub(super) keep_days: u64,
    pub(super) max_total_bytes: u64,
    pub(super) max_user_bytes: u64,
    /// Per owner, the largest first (`-`: sessions no record is left of).
    pub(super) users: Vec<RecordingsOfUser>,
}

/// One owner's part of [`RecordingsUsage`].
#[derive(Debug, Serialize)]
pub struct RecordingsOfUser {
    pub(super) sub: String,
    pub(super) files: usize,
    pub(super) bytes: u64,
}

/// One recording as the API lists it.
#[derive(Debug, Serialize, PartialEq)]
pub struct RecordingView {
    /// Its name (`GET /v1/sessions/<id>/recordings/<name>`).
    name: String,
    /// Bytes.
    size: u64,
    /// When the terminal opened, seconds since the Unix epoch (the header's
    /// `timestamp`).
    started: u64,
    /// Time of its last event, seconds.
    duration: f64,
}

impl From<RecordingEntry> for RecordingView {
    fn from(r: RecordingEntry) -> Self {
        RecordingView {
            name: r.name,
            size: r.size,
            started: r.started,
            duration: r.duration,
        }
    }
}

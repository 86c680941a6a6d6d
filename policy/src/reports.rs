//! What gateways report to control, and control's answers: each record defined once,
//! serialised by the gateway and read by control (or the other way round), so that a
//! field one side has and the other lacks does not compile.
//!
//! | call | record | answer |
//! |---|---|---|
//! | `POST /v1/terminals` | [`TerminalsReport`] | [`Elsewhere`] (200), or 204 to a report without `users` |
//! | `POST /v1/activity` | a list of [`InputReport`] | 204 |
//! | `POST /v1/signins` | [`SignInReport`] | 201, or 409 for a sign-in recorded already |
//! | `POST /v1/audit` | [`crate::audit::AuditReport`] | 204 |
//!
//! The route feed (`GET /v1/routes`) is [`crate::feed`]'s.
//!
//! # Versions
//!
//! Control is upgraded before its gateways. A field added to a report is
//! `#[serde(default)]`, so an older gateway's report still reads; every report refuses
//! fields it does not know, so a report this control cannot read whole is refused (400)
//! rather than half understood. Added so far, each with its default: the terminals
//! report's `replica` (none), `users` (none: the gateway predates deployment-wide
//! limits and is answered 204, as it expects) and `viewers` (none); the sign-in
//! report's `method`, `gateway`, `user_agent`, `client` (empty) and `once` (false).
//! An answer's fields are read with their defaults too, so a gateway takes an answer
//! from a newer control.

use serde::{Deserialize, Serialize};

use crate::{SessionId, Sub};

/// `POST /v1/terminals`: the terminals one gateway has open, per session and per user
/// (a zero for one that had some at its previous report), and its share-link viewers,
/// sent at least every `every_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalsReport {
    /// The gateway's name for itself.
    pub gateway: String,
    /// Where the gateway serves (its host and listener), the same across its restarts.
    #[serde(default)]
    pub replica: Option<String>,
    /// How often, at least, it reports, in milliseconds.
    pub every_ms: u64,
    /// Open per session.
    pub open: Vec<SessionOpen>,
    /// Open per user. Without it, control answers 204 and not [`Elsewhere`].
    #[serde(default)]
    pub users: Option<Vec<UserOpen>>,
    /// The share-link viewers it has open, all of them: each report replaces the last.
    #[serde(default)]
    pub viewers: Vec<ShareViewers>,
}

/// Terminals open on one session (viewers not counted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionOpen {
    /// The session.
    pub session: SessionId,
    /// Terminals open.
    pub open: u32,
}

/// Terminals one user has open (viewers not counted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserOpen {
    /// The user.
    pub sub: Sub,
    /// Terminals open.
    pub open: u32,
}

/// The viewers one gateway has open on one share link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareViewers {
    /// The session watched.
    pub session: SessionId,
    /// The share's id.
    pub share: String,
    /// Viewers open.
    pub open: u32,
    /// The `sub`s of the signed-in ones (sorted, once each).
    #[serde(default)]
    pub subs: Vec<String>,
}

/// Control's answer to a [`TerminalsReport`]: what the *other* live gateways have open.
/// Only entries with something open are listed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elsewhere {
    /// Terminals open per user (share-link viewers not counted).
    #[serde(default)]
    pub users: Vec<UserOpen>,
    /// Terminals open per session (viewers not counted).
    #[serde(default)]
    pub sessions: Vec<SessionOpen>,
    /// Viewers open per share link.
    #[serde(default)]
    pub viewers: Vec<ShareOpen>,
}

/// Viewers open on one share link, over the other gateways.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareOpen {
    /// The session watched.
    pub session: SessionId,
    /// The share's id.
    pub share: String,
    /// Viewers open.
    pub open: u32,
}

/// One entry of `POST /v1/activity`: when a user last typed into a session's
/// terminals on the reporting gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputReport {
    /// The session.
    pub session: SessionId,
    /// Seconds since the Unix epoch.
    pub last_input: u64,
}

/// `POST /v1/signins`: what a gateway (with the service token) says of a sign-in it
/// just made, and the sign-in's token, which itself says who and until when.
#[derive(Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInReport {
    /// The sign-in's own token, the one its cookie carries.
    pub token: String,
    /// `token` or `oidc`.
    #[serde(default)]
    pub method: String,
    /// The gateway's name for itself.
    #[serde(default)]
    pub gateway: String,
    /// The browser's `User-Agent`.
    #[serde(default)]
    pub user_agent: String,
    /// The client address the gateway saw.
    #[serde(default)]
    pub client: String,
    /// The sign-in must be new: a second record of the same token is refused (409),
    /// as a browser's code for the command-line client is used once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub once: bool,
}

impl std::fmt::Debug for SignInReport {
    /// Everything but the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInReport")
            .field("method", &self.method)
            .field("gateway", &self.gateway)
            .field("user_agent", &self.user_agent)
            .field("client", &self.client)
            .field("once", &self.once)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn id(s: &str) -> SessionId {
        SessionId::parse(s).unwrap()
    }

    #[test]
    fn a_report_reads_back_as_written_and_an_older_gateways_still_reads() {
        let report = TerminalsReport {
            gateway: "g1".into(),
            replica: Some("host:8080".into()),
            every_ms: 1000,
            open: vec![SessionOpen {
                session: id("abcdefghijk234mn"),
                open: 2,
            }],
            users: Some(vec![UserOpen {
                sub: Sub::parse("alice").unwrap(),
                open: 2,
            }]),
            viewers: vec![ShareViewers {
                session: id("abcdefghijk234mn"),
                share: "s1".into(),
                open: 1,
                subs: vec!["bob".into()],
            }],
        };
        let wire = serde_json::to_value(&report).unwrap();
        assert_eq!(
            wire,
            json!({"gateway": "g1", "replica": "host:8080", "every_ms": 1000,
                   "open": [{"session": "abcdefghijk234mn", "open": 2}],
                   "users": [{"sub": "alice", "open": 2}],
                   "viewers": [{"session": "abcdefghijk234mn", "share": "s1", "open": 1, "subs": ["bob"]}]})
        );
        assert_eq!(
            serde_json::from_value::<TerminalsReport>(wire).unwrap(),
            report
        );
        let old: TerminalsReport =
            serde_json::from_value(json!({"gateway": "g0", "every_ms": 500, "open": []})).unwrap();
        assert_eq!((old.replica, old.users, old.viewers.len()), (None, None, 0));
    }

    #[test]
    fn a_field_control_does_not_know_is_refused_not_dropped() {
        let newer = json!({"gateway": "g", "every_ms": 1, "open": [], "extra": 1});
        assert!(serde_json::from_value::<TerminalsReport>(newer).is_err());
        let bad_sub = json!({"gateway": "g", "every_ms": 1, "open": [],
                             "users": [{"sub": "a b", "open": 1}]});
        assert!(serde_json::from_value::<TerminalsReport>(bad_sub).is_err());
        let sign_in = json!({"token": "t", "method": "oidc", "shiny": true});
        assert!(serde_json::from_value::<SignInReport>(sign_in).is_err());
        let input = json!([{"session": "abcdefghijk234mn", "last_input": 5, "x": 1}]);
        assert!(serde_json::from_value::<Vec<InputReport>>(input).is_err());
    }

    #[test]
    fn an_answer_from_a_newer_control_still_reads() {
        let answer: Elsewhere = serde_json::from_value(json!({
            "users": [{"sub": "alice", "open": 3}],
            "later": {"something": true}
        }))
        .unwrap();
        assert_eq!(answer.users[0].open, 3);
        assert!(answer.sessions.is_empty() && answer.viewers.is_empty());
    }

    #[test]
    fn a_sign_in_report_never_shows_its_token_and_sends_once_only_when_set() {
        let r = SignInReport {
            token: "secret-token-value".into(),
            method: "token".into(),
            ..SignInReport::default()
        };
        assert!(!format!("{r:?}").contains("secret-token-value"));
        let wire: Value = serde_json::to_value(&r).unwrap();
        assert!(wire.get("once").is_none(), "{wire}");
        let once = SignInReport { once: true, ..r };
        assert_eq!(serde_json::to_value(&once).unwrap()["once"], true);
    }
}

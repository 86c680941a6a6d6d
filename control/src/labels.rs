//! The labels termgate writes on what it creates in Docker (design §4), and the one
//! reading of them that decides whether termgate may touch a container.
//!
//! Red line: termgate never removes what it did not create. A container is termgate's
//! to manage only when [`is_session_of`] holds for it; everything that lists, adopts
//! or removes session containers goes through that predicate.

use std::collections::BTreeMap;

use policy::{SessionId, Sub};

use crate::model::Session;

/// What the object is: [`Managed::Session`] on containers, [`Managed::Home`] on volumes.
pub const MANAGED: &str = policy::declared::MANAGED_LABEL;
/// The deployment's `instance`.
pub const INSTANCE: &str = policy::declared::INSTANCE_LABEL;
/// The session id.
pub const SESSION: &str = policy::declared::SESSION_LABEL;
/// The owner `sub`.
pub const OWNER: &str = policy::declared::OWNER_LABEL;
/// Profile name (for rebuilding the store).
pub const PROFILE: &str = policy::declared::PROFILE_LABEL;
/// Display name (for rebuilding the store).
pub const NAME: &str = policy::declared::NAME_LABEL;
/// Creation time, Unix seconds (for rebuilding the store).
pub const CREATED: &str = policy::declared::CREATED_LABEL;
/// The Docker host the session was placed on (design §7): a container found on a
/// host whose name it does not carry is another host's to judge.
pub const HOST: &str = policy::declared::HOST_LABEL;

/// The kinds of object termgate creates, as the [`MANAGED`] label names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Managed {
    /// A session container.
    Session,
    /// A user's persistent home volume.
    Home,
    /// A workspace's volume.
    Workspace,
    /// A workspace copy's job container.
    Copy,
}

impl Managed {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Managed::Session => "session",
            Managed::Home => "home",
            Managed::Workspace => "workspace",
            Managed::Copy => "copy",
        }
    }

    /// From a label value; `None` for anything termgate does not write.
    pub fn parse(s: &str) -> Option<Managed> {
        match s {
            "session" => Some(Managed::Session),
            "home" => Some(Managed::Home),
            "workspace" => Some(Managed::Workspace),
            "copy" => Some(Managed::Copy),
            _ => None,
        }
    }
}

/// A label set, as Docker reports it and as requests carry it.
pub type Labels = BTreeMap<String, String>;

#[cfg(test)]
fn label(key: &str, value: impl Into<String>) -> (String, String) {
    (key.to_owned(), value.into())
}

/// The labels of session `s`'s container in deployment `instance`: enough to tell it
/// is termgate's and to rebuild the session's record from it.
pub fn session_container(instance: &str, s: &Session) -> Labels {
    policy::declared::session_labels(&facts(instance, s))
}

/// What session `s` brings to its container's declared body.
pub fn facts<'a>(instance: &'a str, s: &'a Session) -> policy::declared::SessionFacts<'a> {
    policy::declared::SessionFacts {
        instance,
        host: &s.host,
        session: &s.id,
        owner: &s.owner,
        profile: &s.profile,
        name: &s.name,
        created: s.created_at,
        options: &s.options,
        workspace: s.workspace.as_ref().map(|w| w.volume.as_str()),
        workspace_read_only: s.workspace.as_ref().is_some_and(|w| w.read_only),
    }
}

/// The labels of `owner`'s home volume in deployment `instance`: exactly these three,
/// so an existing volume is adopted only when it carries exactly them.
pub fn home_volume(instance: &str, owner: &Sub) -> Labels {
    policy::declared::home_volume_labels(instance, owner)
}

/// Whether labels `l` mark a session container of deployment `instance`: the one test
/// every listing, adoption and removal of containers rests on.
pub fn is_session_of(l: &Labels, instance: &str) -> bool {
    l.get(MANAGED).and_then(|m| Managed::parse(m)) == Some(Managed::Session)
        && is_of_instance(l, instance)
}

/// Whether labels `l` name deployment `instance` (events carry the labels as
/// attributes next to Docker's own).
pub fn is_of_instance(l: &Labels, instance: &str) -> bool {
    l.get(INSTANCE).map(String::as_str) == Some(instance)
}

/// Whether a container with labels `l`, found on Docker host `host`, is that host's
/// to judge: it names `host`, or (made before hosts were labelled) no host at all.
pub fn is_on_host(l: &Labels, host: &str) -> bool {
    l.get(HOST).is_none_or(|h| h == host)
}

/// Docker `label` filters that select the session containers of `instance`; a
/// listing is still checked with [`is_session_of`].
pub fn session_filters(instance: &str) -> Vec<String> {
    vec![
        format!("{MANAGED}={}", Managed::Session.as_str()),
        instance_filter(instance),
    ]
}

/// The Docker `label` filter that selects what belongs to `instance`.
pub fn instance_filter(instance: &str) -> String {
    format!("{INSTANCE}={instance}")
}

/// The session a container's labels name, when they name a valid id.
pub fn session_id(l: &Labels) -> Option<SessionId> {
    l.get(SESSION).and_then(|s| SessionId::parse(s).ok())
}

/// What a session container's labels say about its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLabels {
    /// The session id.
    pub id: SessionId,
    /// Its owner.
    pub owner: Sub,
    /// Display name; empty when missing.
    pub name: String,
    /// Profile name; empty when missing.
    pub profile: String,
    /// Creation time, Unix seconds, when the label is there and readable.
    pub created: Option<u64>,
    /// The host it was placed on; `None` for containers made before hosts were labelled.
    pub host: Option<String>,
    /// The volume of the workspace it mounts (`""`: an ephemeral one); `None`: none, or
    /// made before workspaces were labelled.
    pub workspace: Option<String>,
    /// It is mounted read-only.
    pub workspace_read_only: bool,
}

impl SessionLabels {
    /// Reads them; `None` unless a valid session id and owner are there.
    pub fn read(l: &Labels) -> Option<SessionLabels> {
        Some(SessionLabels {
            id: session_id(l)?,
            owner: l.get(OWNER).and_then(|o| Sub::parse(o))?,
            name: l.get(NAME).cloned().unwrap_or_default(),
            profile: l.get(PROFILE).cloned().unwrap_or_default(),
            created: l.get(CREATED).and_then(|t| t.parse().ok()),
            host: l.get(HOST).cloned(),
            workspace: l.get(policy::declared::WORKSPACE_LABEL).cloned(),
            workspace_read_only: l.contains_key(policy::declared::WORKSPACE_ACCESS_LABEL),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SessionState;

    fn sub(s: &str) -> Sub {
        Sub::parse(s).expect("valid sub")
    }

    fn session() -> Session {
        Session {
            id: SessionId::from_random([3; 10]),
            owner: sub("alice"),
            name: "work".into(),
            profile: "shell".into(),
            host: "gpu-1".into(),
            options: Default::default(),
            state: SessionState::Creating,
            created_at: 1_700_000_000,
            container_id: None,
            ended_at: None,
            ended_by: None,
            end_reason: None,
            last_input: None,
            record: Default::default(),
            shares: Vec::new(),
            peers: Vec::new(),
            workspace: None,
        }
    }

    #[test]
    fn managed_kinds_round_trip_and_nothing_else_parses() {
        for m in [
            Managed::Session,
            Managed::Home,
            Managed::Workspace,
            Managed::Copy,
        ] {
            assert_eq!(Managed::parse(m.as_str()), Some(m));
        }
        for other in ["", "other", "Session", "sessions"] {
            assert_eq!(Managed::parse(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_session_containers_labels_are_exactly_the_documented_ones() {
        let s = session();
        let l = session_container("prod", &s);
        assert_eq!(
            l,
            Labels::from([
                label("termgate.managed", "session"),
                label("termgate.instance", "prod"),
                label("termgate.session", s.id.to_string()),
                label("termgate.owner", "alice"),
                label("termgate.profile", "shell"),
                label("termgate.name", "work"),
                label("termgate.created", "1700000000"),
                label("termgate.host", "gpu-1"),
            ])
        );
        assert!(is_session_of(&l, "prod"));
        assert_eq!(session_id(&l), Some(s.id));
        assert_eq!(
            SessionLabels::read(&l),
            Some(SessionLabels {
                id: s.id,
                owner: sub("alice"),
                name: "work".into(),
                profile: "shell".into(),
                created: Some(1_700_000_000),
                host: Some("gpu-1".into()),
                workspace: None,
                workspace_read_only: false,
            })
        );
        // A session on a workspace names its volume; an ephemeral one, none.
        for volume in ["termgate-ws-prod-abcdefghijk234mn", ""] {
            let mut on = s.clone();
            on.workspace = Some(crate::model::SessionWorkspace {
                id: None,
                volume: volume.into(),
                read_only: false,
            });
            let l = session_container("prod", &on);
            assert_eq!(
                l.get("termgate.workspace").map(String::as_str),
                Some(volume)
            );
            assert_eq!(
                SessionLabels::read(&l).and_then(|r| r.workspace).as_deref(),
                Some(volume)
            );
        }
    }

    #[test]
    fn a_home_volume_carries_exactly_three_labels() {
        assert_eq!(
            home_volume("prod", &sub("bob")),
            Labels::from([
                label("termgate.managed", "home"),
                label("termgate.owner", "bob"),
                label("termgate.instance", "prod"),
            ])
        );
    }

    #[test]
    fn only_session_containers_of_this_instance_are_ours() {
        let ours = session_container("prod", &session());
        assert!(is_session_of(&ours, "prod"));
        assert!(!is_session_of(&ours, "staging"), "another deployment's");
        assert!(
            !is_session_of(&ours, ""),
            "an empty instance matches nothing"
        );
        let home = home_volume("prod", &sub("alice"));
        assert!(!is_session_of(&home, "prod"), "a home volume is no session");
        let mut other = ours.clone();
        other.insert(MANAGED.into(), "other".into());
        assert!(!is_session_of(&other, "prod"));
        let mut unmanaged = ours.clone();
        unmanaged.remove(MANAGED);
        assert!(!is_session_of(&unmanaged, "prod"));
        let mut foreign = ours;
        foreign.remove(INSTANCE);
        assert!(!is_session_of(&foreign, "prod"));
        assert!(!is_session_of(&Labels::new(), "prod"));
    }

    #[test]
    fn labels_without_a_valid_id_or_owner_name_no_session() {
        let mut l = session_container("prod", &session());
        l.insert(OWNER.into(), "not a sub".into());
        assert_eq!(SessionLabels::read(&l), None);
        let mut l = session_container("prod", &session());
        l.insert(SESSION.into(), "nope".into());
        assert_eq!(session_id(&l), None);
        assert_eq!(SessionLabels::read(&l), None);
        let mut l = session_container("prod", &session());
        l.remove(CREATED);
        l.remove(NAME);
        let read = SessionLabels::read(&l).expect("id and owner suffice");
        assert_eq!((read.created, read.name.as_str()), (None, ""));
    }

    #[test]
    fn filters_name_the_same_labels_the_predicate_reads() {
        assert_eq!(
            session_filters("prod"),
            vec![
                "termgate.managed=session".to_owned(),
                "termgate.instance=prod".to_owned()
            ]
        );
    }
}

//! Shared workspaces as dockgate judges them: a session mounting one read-only only
//! when it is chosen and says so, a shared volume's create compared, and which volumes
//! may be mounted as shared ones.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::tests::{alice, declared, profile, SESSION};
use super::*;
use crate::dockgate::{
    container_create_declared, normalize, volume_create_declared, CreateLookups, Declared, Denied,
};

const SHARED: &str = "sharedwrkspce234";

fn shared() -> String {
    shared_volume_name("prod", &SessionId::parse(SHARED).unwrap())
}

fn with_mode(mode: WorkspaceMode) -> DeclaredProfile {
    DeclaredProfile {
        workspace: mode,
        ..profile()
    }
}

/// Alice's session of profile `p` on `workspace`, read-only or not.
fn session(p: &DeclaredProfile, workspace: &str, read_only: bool) -> Result<Value, NotDeclared> {
    let id = SessionId::parse(SESSION).unwrap();
    container_body(
        p,
        &SessionFacts {
            instance: "prod",
            host: "local",
            session: &id,
            owner: &alice(),
            profile: "default",
            name: "my box",
            created: 1_700_000_000,
            options: &BTreeMap::from([("editor".into(), "vi".into())]),
            workspace: Some(workspace),
            workspace_read_only: read_only,
        },
    )
}

fn judge(p: DeclaredProfile, body: &Value) -> Result<CreateLookups, Denied> {
    let d = Declared {
        profiles: BTreeMap::from([("default".into(), p)]),
        ..declared()
    };
    let target = normalize(
        "POST",
        format!("/containers/create?name=termgate-{SESSION}&platform=").as_bytes(),
    )
    .unwrap();
    container_create_declared(&d, &target, body)
}

#[test]
fn a_chosen_shared_workspace_is_mounted_read_only_when_the_labels_say_so() {
    let p = with_mode(WorkspaceMode::Choose);
    let b = session(&p, &shared(), true).unwrap();
    assert_eq!(b["Labels"][WORKSPACE_ACCESS_LABEL], "ro");
    let mounts = b["HostConfig"]["Mounts"].as_array().unwrap();
    let m = mounts.iter().find(|m| m["Target"] == "/home/user").unwrap();
    assert_eq!(m["ReadOnly"], true);
    assert_eq!(m["Source"], shared().as_str());
    // It passes and is looked up as a volume the owner may mount.
    let l = judge(p.clone(), &b).unwrap();
    assert_eq!(l.own_volumes, vec![(shared(), alice(), true)]);
    // The label alone, or the mount alone, changed: refused.
    let mut writable = b.clone();
    for m in writable["HostConfig"]["Mounts"].as_array_mut().unwrap() {
        if m["Target"] == "/home/user" {
            m["ReadOnly"] = json!(false);
        }
    }
    assert_eq!(
        judge(p.clone(), &writable).unwrap_err().code(),
        "not_declared"
    );
    let mut unlabelled = b.clone();
    unlabelled["Labels"]
        .as_object_mut()
        .unwrap()
        .remove(WORKSPACE_ACCESS_LABEL);
    assert_eq!(
        judge(p.clone(), &unlabelled).unwrap_err().code(),
        "not_declared"
    );
    for other in ["rw", "RO", "", "ro "] {
        let mut spelled = b.clone();
        spelled["Labels"][WORKSPACE_ACCESS_LABEL] = json!(other);
        assert_eq!(
            judge(p.clone(), &spelled).unwrap_err().code(),
            "not_declared",
            "{other:?}"
        );
    }
}

#[test]
fn only_a_chosen_named_workspace_is_mounted_read_only() {
    let home = home_volume_name("prod", &alice());
    let e = session(&with_mode(WorkspaceMode::Home), &home, true).unwrap_err();
    assert_eq!(e.field, format!("Labels.{WORKSPACE_ACCESS_LABEL}"));
    let e = session(&with_mode(WorkspaceMode::Choose), "", true).unwrap_err();
    assert_eq!(e.field, format!("Labels.{WORKSPACE_ACCESS_LABEL}"));
}

#[test]
fn a_shared_volume_create_is_compared_too() {
    let id = SessionId::parse(SHARED).unwrap();
    let good = shared_volume_body("prod", &id);
    volume_create_declared(&declared(), &good).unwrap();
    let mut renamed = good.clone();
    renamed["Name"] = json!("team-data");
    let mut owned = good.clone();
    owned["Labels"]["termgate.owner"] = json!("alice");
    let mut bound = good.clone();
    bound["DriverOpts"] = json!({"o": "bind", "device": "/"});
    for bad in [renamed, owned, bound] {
        assert_eq!(
            volume_create_declared(&declared(), &bad)
                .unwrap_err()
                .code(),
            "not_declared",
            "{bad}"
        );
    }
}

#[test]
fn shared_volumes_are_termgates_shared_ones_or_listed_and_unlabelled() {
    let id = SessionId::parse(SHARED).unwrap();
    let labels = shared_volume_labels("prod", &id);
    let listed = vec!["team-data".to_owned()];
    assert!(is_shared_volume(&shared(), &labels, "prod", &[]));
    assert!(
        !is_shared_volume("team-data", &labels, "prod", &listed),
        "its labels give it its name"
    );
    assert!(
        !is_shared_volume(&shared(), &labels, "staging", &[]),
        "another deployment's"
    );
    assert!(is_shared_volume(
        "team-data",
        &BTreeMap::new(),
        "prod",
        &listed
    ));
    assert!(
        !is_shared_volume("other-data", &BTreeMap::new(), "prod", &listed),
        "not listed"
    );
    // A listed name on a volume that is some user's workspace or home is not shared.
    for l in [
        workspace_volume_labels("prod", &alice(), &id),
        home_volume_labels("prod", &alice()),
        BTreeMap::from([("termgate.managed".to_owned(), "x".to_owned())]),
    ] {
        assert!(!is_shared_volume("team-data", &l, "prod", &listed), "{l:?}");
    }
    let mut extra = labels.clone();
    extra.insert("termgate.owner".into(), "alice".into());
    assert!(!is_shared_volume(&shared(), &extra, "prod", &[]));
}

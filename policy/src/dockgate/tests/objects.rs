//! Labels and volumes: volume creates, [`volume_ok`] and [`labels_pass`].

use std::collections::BTreeMap;

use serde_json::json;

use super::*;

#[test]
fn controls_volume_create_passes_and_names_its_instance() {
    let body = json!({
        "Name": "termgate-home-alice",
        "Labels": {"termgate.managed": "home", "termgate.owner": "alice", "termgate.instance": "prod"}
    });
    let bytes = body.to_string();
    let a = asked("POST", "/volumes/create");
    assert_eq!(
        decide(Role::Control, &a, BodyInfo::length(bytes.len() as u64)),
        Verdict::ReadBody { max: bytes.len() }
    );
    assert_eq!(
        decide(
            Role::Control,
            &a,
            BodyInfo::length(bytes.len() as u64).with_bytes(bytes.as_bytes())
        ),
        Verdict::PassCreate {
            kind: ObjectKind::Volume,
            instance: "prod".into(),
            volumes: vec![]
        }
    );
}

#[test]
fn volumes_with_another_driver_or_driver_options_are_refused() {
    let volume = |extra: Value| {
        let mut v = json!({
            "Name": "termgate-home-alice",
            "Labels": {"termgate.managed": "home", "termgate.owner": "alice", "termgate.instance": "prod"}
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        let bytes = v.to_string();
        let a = asked("POST", "/volumes/create");
        decide(
            Role::Control,
            &a,
            BodyInfo::length(bytes.len() as u64).with_bytes(bytes.as_bytes()),
        )
    };
    for (what, extra, code) in [
        (
            "a bind of /",
            json!({"DriverOpts": {"type": "none", "o": "bind", "device": "/"}}),
            "volume_driver",
        ),
        (
            "a host disk",
            json!({"DriverOpts": {"type": "ext4", "device": "/dev/sda1"}}),
            "volume_driver",
        ),
        (
            "a plugin driver",
            json!({"Driver": "rexray"}),
            "volume_driver",
        ),
        (
            "a cluster volume",
            json!({"ClusterVolumeSpec": {"Group": "x"}}),
            "volume_driver",
        ),
        (
            "an unknown field",
            json!({"Options": {"o": "bind"}}),
            "field_not_allowed",
        ),
        (
            "a session label",
            json!({"Labels": {"termgate.managed": "session", "termgate.instance": "prod"}}),
            "labels_required",
        ),
        ("no labels", json!({"Labels": null}), "labels_required"),
        ("a path name", json!({"Name": "../x"}), "bad_reference"),
        ("no name", json!({"Name": null}), "bad_reference"),
    ] {
        assert_eq!(refused(volume(extra)), code, "{what}");
    }
    assert!(matches!(
        volume(json!({"Driver": "local", "DriverOpts": {}})),
        Verdict::PassCreate {
            kind: ObjectKind::Volume,
            ..
        }
    ));
    let a = asked("POST", "/volumes/create");
    assert_eq!(
        refused(decide(Role::Control, &a, BodyInfo::chunked())),
        "body_chunked"
    );
    assert_eq!(
        refused(decide(Role::Control, &a, BodyInfo::length(0))),
        "body_required"
    );
}

#[test]
fn volume_ok_accepts_only_plain_local_volumes() {
    assert_eq!(volume_ok("local", &BTreeMap::new()), Ok(()));
    assert_eq!(volume_ok("", &BTreeMap::new()), Ok(()));
    let bind = BTreeMap::from([
        ("o".to_owned(), "bind".to_owned()),
        ("device".to_owned(), "/run".to_owned()),
    ]);
    assert_eq!(
        volume_ok("local", &bind).unwrap_err().code(),
        "volume_driver"
    );
    assert_eq!(
        volume_ok("nfs", &BTreeMap::new()).unwrap_err().code(),
        "volume_driver"
    );
}

#[test]
fn labels_pass_only_for_this_instances_objects_of_the_kind() {
    let l = |managed: &str, instance: &str| {
        Labels::from([
            (MANAGED_LABEL.to_owned(), managed.to_owned()),
            (INSTANCE_LABEL.to_owned(), instance.to_owned()),
        ])
    };
    assert!(labels_pass(
        ObjectKind::Container,
        &l("session", "prod"),
        "prod"
    ));
    assert!(labels_pass(ObjectKind::Volume, &l("home", "prod"), "prod"));
    assert!(!labels_pass(
        ObjectKind::Container,
        &l("home", "prod"),
        "prod"
    ));
    assert!(!labels_pass(
        ObjectKind::Volume,
        &l("session", "prod"),
        "prod"
    ));
    assert!(!labels_pass(
        ObjectKind::Container,
        &l("session", "staging"),
        "prod"
    ));
    assert!(!labels_pass(ObjectKind::Container, &l("session", ""), ""));
    assert!(!labels_pass(ObjectKind::Container, &Labels::new(), "prod"));
}

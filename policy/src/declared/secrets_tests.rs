//! Registered secrets as dockgate judges them: the body control makes with a session's
//! secrets passes and asks for each file to be looked up; every other spelling of a
//! secret mount (writable, elsewhere, unlabelled, a path with `..`) is refused.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::tests::{alice, declared, profile, remove, set, SESSION};
use super::*;
use crate::dockgate::{container_create_declared, normalize, CreateLookups, Denied};

const TOKEN: &str = "/srv/secrets/github-token";

fn granted() -> SessionSecrets {
    BTreeMap::from([("github-token".into(), TOKEN.into())])
}

/// Alice's session on her home volume, mounting `secrets`.
fn session(p: &DeclaredProfile, secrets: &SessionSecrets) -> Result<Value, NotDeclared> {
    let id = SessionId::parse(SESSION).unwrap();
    let owner = alice();
    let home = home_volume_name("prod", &owner);
    session_body(
        p,
        &SessionFacts {
            instance: "prod",
            host: "local",
            session: &id,
            owner: &owner,
            profile: "default",
            name: "my box",
            created: 1_700_000_000,
            options: &BTreeMap::from([("editor".into(), "vi".into())]),
            workspace: Some(&home),
            workspace_read_only: false,
        },
        secrets,
    )
}

fn judge(body: &Value) -> Result<CreateLookups, Denied> {
    let target = normalize(
        "POST",
        format!("/containers/create?name=termgate-{SESSION}&platform=").as_bytes(),
    )
    .unwrap();
    container_create_declared(&declared(), &target, body)
}

fn refused(body: &Value, what: &str) -> String {
    match judge(body) {
        Ok(l) => panic!("{what} passed: {l:?}\n{body:#}"),
        Err(d) => {
            assert_eq!(d.code(), "not_declared", "{what}: {d}");
            d.message
        }
    }
}

#[test]
fn a_granted_secret_is_a_read_only_bind_at_its_name_and_a_label_holding_its_path() {
    let b = session(&profile(), &granted()).unwrap();
    let mounts = b["HostConfig"]["Mounts"].as_array().unwrap();
    assert_eq!(
        mounts.last().unwrap(),
        &json!({"Type": "bind", "Source": TOKEN, "Target": "/run/secrets/github-token", "ReadOnly": true})
    );
    assert_eq!(b["Labels"]["termgate.secret.github-token"], TOKEN);
    // The body without secrets is what container_body makes.
    let none = session(&profile(), &SessionSecrets::new()).unwrap();
    assert_eq!(
        mounts.len(),
        none["HostConfig"]["Mounts"].as_array().unwrap().len() + 1
    );
    assert!(crate::sandbox::check(&with_secrets(profile().spec, &granted()).unwrap()).is_empty());
    // dockgate passes it and looks the file up for the profile's user.
    let l = judge(&b).unwrap();
    assert_eq!(
        l.secrets,
        vec![(TOKEN.to_owned(), Some("1000:1000".to_owned()))]
    );
    assert!(judge(&none).unwrap().secrets.is_empty());
}

#[test]
fn every_other_spelling_of_a_secret_mount_is_refused() {
    let b = session(&profile(), &granted()).unwrap();
    let last = (b["HostConfig"]["Mounts"].as_array().unwrap().len() - 1).to_string();
    let mount = |field: &'static str| ["HostConfig", "Mounts", last.as_str(), field];
    for (what, body) in [
        (
            "a writable secret",
            set(b.clone(), &mount("ReadOnly"), json!(false)),
        ),
        (
            "a target elsewhere",
            set(b.clone(), &mount("Target"), json!("/home/user/.token")),
        ),
        (
            "another source than its label",
            set(b.clone(), &mount("Source"), json!("/etc/shadow")),
        ),
        (
            "a volume in its place",
            set(b.clone(), &mount("Type"), json!("volume")),
        ),
        ("a label without its mount", {
            let mut unmounted = b.clone();
            unmounted["HostConfig"]["Mounts"]
                .as_array_mut()
                .unwrap()
                .pop();
            unmounted
        }),
        (
            "a mount without its label",
            remove(b.clone(), &["Labels", "termgate.secret.github-token"]),
        ),
    ] {
        refused(&body, what);
    }
    // A path with `..`, `.` or `//`, a relative one, or a name that is no file name:
    // no rebuilt body has them.
    for (name, file) in [
        ("github-token", "/srv/secrets/../../etc/shadow"),
        ("github-token", "/srv/secrets/./github-token"),
        ("github-token", "/srv//secrets/github-token"),
        ("github-token", "srv/secrets/github-token"),
        ("github-token", "/"),
        ("../escape", "/srv/secrets/x"),
        (".hidden", "/srv/secrets/x"),
        ("", "/srv/secrets/x"),
    ] {
        let secrets = BTreeMap::from([(name.to_owned(), file.to_owned())]);
        assert!(session(&profile(), &secrets).is_err(), "{name} {file}");
        let mut forged = session(&profile(), &granted()).unwrap();
        forged = remove(forged, &["Labels", "termgate.secret.github-token"]);
        forged["Labels"][format!("{SECRET_LABEL_PREFIX}{name}")] = json!(file);
        let n = forged["HostConfig"]["Mounts"].as_array().unwrap().len() - 1;
        forged["HostConfig"]["Mounts"][n] = json!({"Type": "bind", "Source": file, "Target": format!("/run/secrets/{name}"), "ReadOnly": true});
        refused(&forged, &format!("{name} at {file}"));
    }
}

#[test]
fn a_secret_named_like_a_mount_of_the_profile_is_not_declared() {
    let mut p = profile();
    p.spec.mounts.push(MountSpec {
        kind: MountKind::Bind,
        source: "/srv/secrets/profile-token".into(),
        target: secret_target("github-token"),
        read_only: true,
    });
    let e = session(&p, &granted()).unwrap_err();
    assert!(e.message.contains("/run/secrets/github-token"), "{e}");
}

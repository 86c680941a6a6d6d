//! Workspaces as dockgate compares them: a session's chosen or ephemeral workspace, a
//! workspace volume, a copy job, and which volumes are an owner's. What control sends
//! passes and says which volumes to look up for whom; every other body is refused.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::tests::{alice, declared, mutate, odd_value, profile, remove, set, SESSION};
use super::workspace::COPY_NANO_CPUS;
use super::*;
use crate::dockgate::{
    container_create_declared, decide, normalize, spec_from_create_body, volume_create_declared,
    Asked, BodyInfo, CreateLookups, Declared, Denied, Role, Verdict,
};
use crate::sandbox;

/// The id of alice's workspace.
const WORKSPACE: &str = "mnopqrstuvwxyz23";
/// The id of another workspace.
const OTHER_WORKSPACE: &str = "zyxwvutsrqponm76";

fn bob() -> Sub {
    Sub::parse("bob").unwrap()
}

fn workspace_id(id: &str) -> SessionId {
    SessionId::parse(id).unwrap()
}

/// The volume of alice's workspace.
fn workspace() -> String {
    workspace_volume_name("prod", &workspace_id(WORKSPACE))
}

fn home() -> String {
    home_volume_name("prod", &alice())
}

fn with_mode(mode: WorkspaceMode) -> DeclaredProfile {
    DeclaredProfile {
        workspace: mode,
        ..profile()
    }
}

fn choose() -> DeclaredProfile {
    with_mode(WorkspaceMode::Choose)
}

/// The deployment of `tests`, its one profile `p`.
fn declared_with(p: DeclaredProfile) -> Declared {
    Declared {
        profiles: BTreeMap::from([("default".into(), p)]),
        ..declared()
    }
}

/// Alice's session `SESSION` of profile `p` mounting `workspace`, as control makes it.
fn session(p: &DeclaredProfile, workspace: Option<&str>) -> Value {
    let id = SessionId::parse(SESSION).unwrap();
    let owner = alice();
    container_body(
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
            workspace,
            workspace_read_only: false,
        },
    )
    .unwrap()
}

fn create_named(name: &str) -> Asked {
    normalize(
        "POST",
        format!("/containers/create?name={name}&platform=").as_bytes(),
    )
    .unwrap()
}

fn session_target() -> Asked {
    create_named(&format!("termgate-{SESSION}"))
}

/// Judges a session create under a deployment whose profile is `p`.
fn judge_in(p: &DeclaredProfile, body: &Value) -> Result<CreateLookups, Denied> {
    container_create_declared(&declared_with(p.clone()), &session_target(), body)
}

/// Alice's copy job of profile `p` from `source` into `dest`, as control makes it.
fn copy(p: &DeclaredProfile, source: &str, dest: &str) -> Value {
    copy_job_body(
        p,
        &CopyFacts {
            instance: "prod",
            host: "local",
            owner: &alice(),
            profile: "default",
            source,
            dest,
        },
    )
    .unwrap()
}

fn judge_copy(p: &DeclaredProfile, name: &str, body: &Value) -> Result<CreateLookups, Denied> {
    container_create_declared(&declared_with(p.clone()), &create_named(name), body)
}

/// The refusal's message, checked to be `not_declared` and to name `field`.
fn denied(what: &str, got: Result<CreateLookups, Denied>, field: &str) {
    match got {
        Ok(l) => panic!("{what}: passed: {l:?}"),
        Err(d) => {
            assert_eq!(d.code(), "not_declared", "{what}: {d}");
            assert!(d.message.contains(field), "{what}: names {field}: {d}");
        }
    }
}

fn workspace_field() -> String {
    format!("Labels.{WORKSPACE_LABEL}")
}

/// `good` with the value at `path` (keys `/`-separated) the JSON `value`, and the
/// field a refusal of it names.
fn at(good: &Value, path: &str, value: &str) -> (Value, String) {
    let keys: Vec<&str> = path.split('/').collect();
    let field = keys
        .iter()
        .fold(String::new(), |f, k| match k.parse::<usize>() {
            Ok(_) => format!("{f}[{k}]"),
            Err(_) if f.is_empty() => (*k).to_owned(),
            Err(_) => format!("{f}.{k}"),
        });
    let value = serde_json::from_str(value).unwrap();
    (set(good.clone(), &keys, value), field)
}

/// The label naming a session's workspace, or a copy job's new volume.
const WS: [&str; 2] = ["Labels", WORKSPACE_LABEL];
/// A session's workspace mount.
const MOUNT: [&str; 3] = ["HostConfig", "Mounts", "2"];
/// A session's workspace mount's volume.
const SOURCE: [&str; 4] = ["HostConfig", "Mounts", "2", "Source"];

#[test]
fn a_chosen_workspace_passes_and_is_looked_up_as_the_owners() {
    let b = session(&choose(), Some(&workspace()));
    assert_eq!(b["Labels"][WORKSPACE_LABEL], workspace().as_str());
    let mount =
        json!({"Type": "volume", "Source": workspace(), "Target": "/home/user", "ReadOnly": false});
    assert_eq!(b["HostConfig"]["Mounts"][2], mount);
    let l = judge_in(&choose(), &b).unwrap();
    assert_eq!(l.own_volumes, vec![(workspace(), alice(), true)]);
    assert_eq!(l.borrowed_volumes, vec!["team-tools".to_owned()]);
    assert_eq!(l.bind_sources, vec!["/srv/data".to_owned()]);
    // The home volume is one of the workspaces a user may choose.
    let l = judge_in(&choose(), &session(&choose(), Some(&home()))).unwrap();
    assert_eq!(l.own_volumes, vec![(home(), alice(), true)]);
    // Under another owner's name the same body passes, to be looked up for them.
    let l = judge_in(&choose(), &set(b, &["Labels", OWNER_LABEL], json!("bob"))).unwrap();
    assert_eq!(l.own_volumes, vec![(workspace(), bob(), true)]);
}

#[test]
fn an_ephemeral_workspace_is_an_anonymous_volume_and_nothing_is_looked_up_for_it() {
    let b = session(&choose(), Some(""));
    assert_eq!(b["Labels"][WORKSPACE_LABEL], "");
    let mount = json!({"Type": "volume", "Target": "/home/user", "ReadOnly": false});
    assert_eq!(b["HostConfig"]["Mounts"][2], mount);
    let l = judge_in(&choose(), &b).unwrap();
    assert!(l.own_volumes.is_empty(), "{l:?}");
    assert_eq!(l.borrowed_volumes, vec!["team-tools".to_owned()]);
    // The red lines pass, on the spec the body is made of and on the body itself.
    let violations = sandbox::check(&session_spec(&choose(), Some(""), false));
    assert!(violations.is_empty(), "{violations:?}");
    let (spec, _) = spec_from_create_body(&b).unwrap();
    let anonymous = |m: &MountSpec| m.target == "/home/user" && m.source.is_empty();
    assert!(spec.mounts.iter().any(|m| anonymous(m) && !m.read_only));
    // Docker would make the anonymous volume with the options it is given: none pass.
    let host_root =
        json!({"DriverConfig": {"Name": "local", "Options": {"o": "bind", "device": "/"}}});
    let bound = set(
        b.clone(),
        &[&MOUNT[..], &["VolumeOptions"]].concat(),
        host_root,
    );
    denied(
        "options",
        judge_in(&choose(), &bound),
        "Mounts[2].VolumeOptions",
    );
    assert!(spec_from_create_body(&bound).is_err());
    // And dockgate's first screen asks about the borrowed volume only.
    let bytes = b.to_string().into_bytes();
    let info = BodyInfo::length(bytes.len() as u64).with_bytes(&bytes);
    match decide(Role::Control, &session_target(), info) {
        Verdict::PassCreate { volumes, .. } => assert_eq!(volumes, ["team-tools"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_home_profile_mounts_the_owners_home_volume_and_nothing_else() {
    let home_profile = with_mode(WorkspaceMode::Home);
    judge_in(&home_profile, &session(&home_profile, Some(&home()))).unwrap();
    let bobs = home_volume_name("prod", &bob());
    let other_instance = home_volume_name("other", &alice());
    for other in [
        workspace(),
        bobs,
        other_instance,
        "team-tools".into(),
        "".into(),
    ] {
        // What a profile that lets the user choose would send for it.
        let b = session(&choose(), Some(&other));
        denied(&other, judge_in(&home_profile, &b), &workspace_field());
    }
    let b = remove(session(&home_profile, Some(&home())), &WS);
    denied("no label", judge_in(&home_profile, &b), &workspace_field());
}

#[test]
fn a_chosen_workspace_must_be_a_plain_volume_name() {
    let good = session(&choose(), Some(&workspace()));
    for bad in [
        "a/b",
        "/proc/self/root",
        "..",
        ".",
        "-v",
        "/",
        "a b",
        "x\u{0}",
    ] {
        let b = set(set(good.clone(), &WS, json!(bad)), &SOURCE, json!(bad));
        denied(bad, judge_in(&choose(), &b), &workspace_field());
    }
    let b = remove(good.clone(), &WS);
    denied("no label", judge_in(&choose(), &b), &workspace_field());
    let b = set(good, &WS, json!(7));
    denied("a number", judge_in(&choose(), &b), &workspace_field());
}

#[test]
fn the_label_and_the_mount_name_the_same_volume() {
    let ws = session(&choose(), Some(&workspace()));
    let ephemeral = session(&choose(), Some(""));
    let bobs = home_volume_name("prod", &bob());
    // The label's volume, the mount's.
    for (what, b) in [
        ("ws, home", set(ws.clone(), &SOURCE, json!(home()))),
        ("home, ws", set(ws.clone(), &WS, json!(home()))),
        ("\"\", ws", set(ws.clone(), &WS, json!(""))),
        ("ws, none", remove(ws.clone(), &SOURCE)),
        ("\"\", bob", set(ephemeral.clone(), &SOURCE, json!(bobs))),
        ("\"\", \"\"", set(ephemeral, &SOURCE, json!(""))),
    ] {
        denied(what, judge_in(&choose(), &b), "HostConfig.Mounts[2].Source");
    }
    // The workspace mount read-only, or elsewhere.
    let b = set(
        ws.clone(),
        &[&MOUNT[..], &["ReadOnly"]].concat(),
        json!(true),
    );
    denied("read-only", judge_in(&choose(), &b), "Mounts[2].ReadOnly");
    let b = set(ws, &[&MOUNT[..], &["Target"]].concat(), json!("/etc"));
    denied("elsewhere", judge_in(&choose(), &b), "Mounts[2].Target");
}

#[test]
fn a_profile_without_a_workspace_takes_no_workspace_label() {
    // A profile that chooses but has no place for a workspace mounts none either.
    let homeless = DeclaredProfile {
        home: None,
        ..choose()
    };
    for p in [with_mode(WorkspaceMode::None), homeless] {
        let b = session(&p, None);
        assert_eq!(b["HostConfig"]["Mounts"].as_array().unwrap().len(), 2);
        assert!(b["Labels"].get(WORKSPACE_LABEL).is_none(), "{b}");
        let l = judge_in(&p, &b).unwrap();
        assert!(l.own_volumes.is_empty(), "{l:?}");
        for w in [workspace(), home(), String::new()] {
            let labelled = set(b.clone(), &WS, json!(w));
            denied(&w, judge_in(&p, &labelled), &workspace_field());
            // With the mount a chosen workspace would have, too.
            let mounted = session(&choose(), Some(&w));
            denied(&w, judge_in(&p, &mounted), &workspace_field());
        }
    }
}

#[test]
fn a_copy_job_passes_and_names_both_volumes_for_their_owner() {
    let dest = workspace();
    let name = copy_job_name(&dest);
    let b = copy(&choose(), &home(), &dest);
    assert_eq!(b["Labels"][MANAGED_LABEL], "copy");
    assert_eq!(b["Labels"][COPY_SOURCE_LABEL], home().as_str());
    assert_eq!(b["Labels"][WORKSPACE_LABEL], dest.as_str());
    assert_eq!((&b["Env"], b.get("Cmd")), (&json!([]), None));
    assert_eq!(b["Entrypoint"][0], "sh");
    assert_eq!(b["HostConfig"]["NetworkMode"], "none");
    // The job's own CPU allowance, not its profile's half CPU.
    assert_eq!(choose().spec.nano_cpus, Some(500_000_000));
    assert_eq!(b["HostConfig"]["NanoCpus"], COPY_NANO_CPUS);
    let mounts = json!([
        {"Type": "volume", "Source": home(), "Target": COPY_SOURCE_TARGET, "ReadOnly": true},
        {"Type": "volume", "Source": dest, "Target": "/home/user", "ReadOnly": false},
    ]);
    assert_eq!(b["HostConfig"]["Mounts"], mounts);
    assert!(sandbox::check(&spec_from_create_body(&b).unwrap().0).is_empty());
    let l = judge_copy(&choose(), &name, &b).unwrap();
    let own_volumes = vec![(home(), alice(), true), (dest.clone(), alice(), false)];
    let want = CreateLookups {
        own_volumes,
        ..CreateLookups::default()
    };
    assert_eq!(l, want);
    // Another owner's name: both volumes are looked up for them.
    let l = judge_copy(
        &choose(),
        &name,
        &set(b, &["Labels", OWNER_LABEL], json!("bob")),
    )
    .unwrap();
    assert_eq!(
        l.own_volumes,
        [(home(), bob(), true), (dest.clone(), bob(), false)]
    );
    // From another workspace, and under a profile that mounts the home volume.
    let other = workspace_volume_name("prod", &workspace_id(OTHER_WORKSPACE));
    let l = judge_copy(&choose(), &name, &copy(&choose(), &other, &dest)).unwrap();
    assert_eq!(
        l.own_volumes,
        [(other, alice(), true), (dest.clone(), alice(), false)]
    );
    let home_profile = with_mode(WorkspaceMode::Home);
    let b = copy(&home_profile, &home(), &dest);
    judge_copy(&home_profile, &name, &b).unwrap();
}

#[test]
fn a_copy_job_has_at_least_its_own_cpu_allowance() {
    let dest = workspace();
    let name = copy_job_name(&dest);
    for (profile, want) in [
        (None, COPY_NANO_CPUS),
        (Some(1), COPY_NANO_CPUS),
        (Some(COPY_NANO_CPUS), COPY_NANO_CPUS),
        (Some(4 * COPY_NANO_CPUS), 4 * COPY_NANO_CPUS),
    ] {
        let mut p = choose();
        p.spec.nano_cpus = profile;
        let b = copy(&p, &home(), &dest);
        assert_eq!(b["HostConfig"]["NanoCpus"], want, "{profile:?}");
        assert!(sandbox::check(&spec_from_create_body(&b).unwrap().0).is_empty());
        judge_copy(&p, &name, &b).unwrap();
        for other in [profile.unwrap_or(0), want - 1, want + 1, 0, -1] {
            if other == want {
                continue;
            }
            let b = set(b.clone(), &["HostConfig", "NanoCpus"], json!(other));
            denied(
                &format!("{profile:?}: {other}"),
                judge_copy(&p, &name, &b),
                "HostConfig.NanoCpus",
            );
        }
        let b = remove(b, &["HostConfig", "NanoCpus"]);
        denied("no CPU limit", judge_copy(&p, &name, &b), "NanoCpus");
    }
}

#[test]
fn every_other_copy_job_is_refused() {
    let dest = workspace();
    let name = copy_job_name(&dest);
    let good = copy(&choose(), &home(), &dest);
    for other in [
        "termgate-copy-other".into(),
        format!("termgate-{SESSION}"),
        dest,
    ] {
        denied(&other, judge_copy(&choose(), &other, &good), "name (query)");
    }
    let bobs = json!(home_volume_name("prod", &bob())).to_string();
    for (path, value) in [
        ("HostConfig/Mounts/0/ReadOnly", "false"),
        ("HostConfig/Mounts/0/Type", r#""bind""#),
        ("HostConfig/Mounts/0/Source", &bobs),
        ("HostConfig/Mounts", "[]"),
        ("HostConfig/NetworkMode", r#""bridge""#),
        ("HostConfig/Privileged", "true"),
        ("Entrypoint", r#"["sh", "-c", "cat /etc/shadow"]"#),
        ("Entrypoint/5", r#""/""#),
        ("Cmd", r#"["-l"]"#),
        ("Env", r#"["LD_PRELOAD=/x"]"#),
        ("User", r#""0:0""#),
        ("Labels/x", r#""y""#),
        ("Labels/termgate.session", r#""abcdefghijk234mn""#),
    ] {
        let (b, field) = at(&good, path, value);
        denied(path, judge_copy(&choose(), &name, &b), &field);
    }
    // The new volume's label another than the mounted one (here the source itself: a
    // copy never empties its source); called a session, it is judged as one.
    let b = set(good.clone(), &WS, json!(home()));
    denied("dest", judge_copy(&choose(), &name, &b), "not its source");
    let b = set(
        good.clone(),
        &WS,
        json!("termgate-ws-prod-zzzzzzzzzzzzzzzz"),
    );
    denied("dest", judge_copy(&choose(), &name, &b), "Mounts[1].Source");
    let b = set(good.clone(), &["Labels", MANAGED_LABEL], json!("session"));
    denied("session", judge_copy(&choose(), &name, &b), SESSION_LABEL);
    let volume =
        json!({"Type": "volume", "Source": "team-tools", "Target": "/t", "ReadOnly": true});
    let bind = json!({"Type": "bind", "Source": "/srv/data", "Target": "/data", "ReadOnly": true});
    for (what, mount) in [("another mount", volume), ("a bind", bind)] {
        let mut b = good.clone();
        b["HostConfig"]["Mounts"]
            .as_array_mut()
            .unwrap()
            .push(mount);
        denied(
            what,
            judge_copy(&choose(), &name, &b),
            "HostConfig.Mounts[2]",
        );
    }
    let not_a_volume = set(
        set(
            good.clone(),
            &["HostConfig", "Mounts", "0", "Source"],
            json!("/"),
        ),
        &["Labels", COPY_SOURCE_LABEL],
        json!("/"),
    );
    let no_source = remove(good.clone(), &["Labels", COPY_SOURCE_LABEL]);
    for (what, b) in [
        ("a source that is no volume", not_a_volume),
        ("no source label", no_source),
    ] {
        denied(what, judge_copy(&choose(), &name, &b), COPY_SOURCE_LABEL);
    }
    // A profile without a workspace declares no copy job.
    let homeless = DeclaredProfile {
        home: None,
        ..choose()
    };
    for p in [with_mode(WorkspaceMode::None), homeless] {
        let got = judge_copy(&p, &name, &good);
        denied(
            "a profile without a workspace",
            got,
            "Labels.termgate.profile",
        );
    }
}

#[test]
fn a_workspace_volume_create_is_compared_too() {
    let id = workspace_id(WORKSPACE);
    let good = workspace_volume_body("prod", &alice(), &id);
    let labels = json!({
        MANAGED_LABEL: "workspace",
        OWNER_LABEL: "alice",
        INSTANCE_LABEL: "prod",
        WORKSPACE_LABEL: WORKSPACE,
    });
    assert_eq!(good, json!({"Name": workspace(), "Labels": labels}));
    volume_create_declared(&declared(), &good).unwrap();
    let other_name = json!(workspace_volume_name(
        "prod",
        &workspace_id(OTHER_WORKSPACE)
    ));
    let home_name = json!(home()).to_string();
    for (path, value) in [
        ("Name", other_name.to_string().as_str()),
        ("Name", &home_name),
        ("Name", r#""team-tools""#),
        ("Driver", r#""local""#),
        (
            "DriverOpts",
            r#"{"type": "none", "o": "bind", "device": "/"}"#,
        ),
        ("Labels/termgate.workspace", r#""zyxwvutsrqponm76""#),
        ("Labels/termgate.workspace", r#""../x""#),
        ("Labels/x", r#""y""#),
        ("Labels/termgate.instance", r#""other""#),
        ("Labels/termgate.owner", r#""../x""#),
        ("Labels/termgate.managed", r#""home""#),
        ("Labels/termgate.managed", r#""session""#),
    ] {
        let (bad, _) = at(&good, path, value);
        let e = volume_create_declared(&declared(), &bad).unwrap_err();
        assert_eq!(e.code(), "not_declared", "{path}={value}: {e}");
    }
    let e = volume_create_declared(&declared(), &remove(good, &WS)).unwrap_err();
    assert_eq!(e.code(), "not_declared", "no id label: {e}");
}

#[test]
fn own_volumes_are_the_home_and_the_workspaces_termgate_made_for_the_owner() {
    let id = workspace_id(WORKSPACE);
    let (h, w) = (
        home_volume_labels("prod", &alice()),
        workspace_volume_labels("prod", &alice(), &id),
    );
    assert!(is_own_volume(&home(), &h, "prod", &alice()));
    assert!(is_own_volume(&workspace(), &w, "prod", &alice()));
    let relabel = |l: &BTreeMap<String, String>, k: &str, v: &str| {
        let mut l = l.clone();
        l.insert(k.into(), v.into());
        l
    };
    let other_ws = workspace_volume_name("prod", &workspace_id(OTHER_WORKSPACE));
    let no_id = workspace().replace(WORKSPACE, "x");
    for (what, name, labels, instance, owner) in [
        ("bob's home", home(), h.clone(), "prod", bob()),
        ("bob's workspace", workspace(), w.clone(), "prod", bob()),
        (
            "another instance's home",
            home(),
            h.clone(),
            "other",
            alice(),
        ),
        (
            "another instance's workspace",
            workspace(),
            w.clone(),
            "other",
            alice(),
        ),
        (
            "a workspace, another id's name",
            other_ws,
            w.clone(),
            "prod",
            alice(),
        ),
        (
            "a workspace, the home's name",
            home(),
            w.clone(),
            "prod",
            alice(),
        ),
        (
            "the home, a workspace's name",
            workspace(),
            h.clone(),
            "prod",
            alice(),
        ),
        (
            "the home, another name",
            "team-tools".into(),
            h.clone(),
            "prod",
            alice(),
        ),
        (
            "the home, a label more",
            home(),
            relabel(&h, "x", "y"),
            "prod",
            alice(),
        ),
        (
            "a workspace, a label more",
            workspace(),
            relabel(&w, "x", "y"),
            "prod",
            alice(),
        ),
        ("no labels", workspace(), BTreeMap::new(), "prod", alice()),
        (
            "no id",
            no_id,
            relabel(&w, WORKSPACE_LABEL, "x"),
            "prod",
            alice(),
        ),
        (
            "a session's labels",
            workspace(),
            relabel(&w, MANAGED_LABEL, "session"),
            "prod",
            alice(),
        ),
    ] {
        assert!(!is_own_volume(&name, &labels, instance, &owner), "{what}");
    }
}

/// Values a mutation writes: [`odd_value`]'s, and the names and values of workspaces.
fn workspace_value() -> impl Strategy<Value = Value> {
    let words = prop::sample::select(vec![
        workspace(),
        home(),
        home_volume_name("prod", &bob()),
        workspace_volume_name("prod", &workspace_id(OTHER_WORKSPACE)),
        WORKSPACE.to_owned(),
        "bob".into(),
        "alice".into(),
        "copy".into(),
        "session".into(),
        "workspace".into(),
        "home".into(),
        "none".into(),
        "/home/user".into(),
        COPY_SOURCE_TARGET.into(),
        "sh".into(),
        "-c".into(),
        "team-tools".into(),
        "/srv/data".into(),
    ]);
    prop_oneof![odd_value(), words.prop_map(Value::String)]
}

fn added_key() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "Runtime",
        "Binds",
        "x",
        "Source",
        "Entrypoint",
        "Cmd",
        "VolumeOptions",
        "Volumes",
        WORKSPACE_LABEL,
        COPY_SOURCE_LABEL,
        SESSION_LABEL,
        "termgate.extra",
    ])
}

/// Whether every volume `l` names is looked up for the owner `body`'s label names.
fn looked_up_for_its_owner(l: &CreateLookups, body: &Value) -> bool {
    let owner = body["Labels"][OWNER_LABEL].as_str();
    l.own_volumes
        .iter()
        .all(|(_, o, _)| Some(o.as_str()) == owner)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A session body that is not the declared one for its workspace (chosen, or
    /// ephemeral) never passes, unless only the session's own facts changed; a body
    /// naming another owner passes only to be looked up for that owner.
    #[test]
    fn every_workspace_session_body_but_the_declared_one_is_refused(
        ephemeral in any::<bool>(),
        pick in any::<prop::sample::Index>(),
        how in 0u8..4,
        value in workspace_value(),
        key in added_key(),
    ) {
        let chosen = if ephemeral { String::new() } else { workspace() };
        let original = session(&choose(), Some(&chosen));
        let mutated = mutate(&original, &pick, how, value, key);
        match judge_in(&choose(), &mutated) {
            Ok(l) => {
                // The session's own facts may differ: its name, time, owner, and the
                // options the user chose (another value the profile lists, in `Env`).
                let mut facts_reset = mutated.clone();
                for label in [NAME_LABEL, CREATED_LABEL, OWNER_LABEL] {
                    facts_reset["Labels"][label] = original["Labels"][label].clone();
                }
                facts_reset["Env"] = original["Env"].clone();
                prop_assert_eq!(&facts_reset, &original, "a changed body passed");
                prop_assert_eq!(l.own_volumes.len(), usize::from(!ephemeral));
                prop_assert!(looked_up_for_its_owner(&l, &mutated), "{:?}", l);
            }
            Err(d) => {
                prop_assert_ne!(&mutated, &original);
                prop_assert_eq!(d.code(), "not_declared");
            }
        }
    }

    /// A copy job's body that is not the declared one never passes, unless only its
    /// owner changed, and then both volumes are looked up for that owner.
    #[test]
    fn every_copy_job_body_but_the_declared_one_is_refused(
        pick in any::<prop::sample::Index>(),
        how in 0u8..4,
        value in workspace_value(),
        key in added_key(),
    ) {
        let dest = workspace();
        let original = copy(&choose(), &home(), &dest);
        let mutated = mutate(&original, &pick, how, value, key);
        match judge_copy(&choose(), &copy_job_name(&dest), &mutated) {
            Ok(l) => {
                let mut facts_reset = mutated.clone();
                facts_reset["Labels"][OWNER_LABEL] = original["Labels"][OWNER_LABEL].clone();
                prop_assert_eq!(&facts_reset, &original, "a changed body passed");
                prop_assert_eq!(l.own_volumes.len(), 2);
                prop_assert!(looked_up_for_its_owner(&l, &mutated), "{:?}", l);
                prop_assert_eq!(
                    l.own_volumes.iter().map(|(v, _, h)| (v.clone(), *h)).collect::<Vec<_>>(),
                    vec![(home(), true), (dest, false)]
                );
            }
            Err(d) => {
                prop_assert_ne!(&mutated, &original);
                prop_assert_eq!(d.code(), "not_declared");
            }
        }
    }
}

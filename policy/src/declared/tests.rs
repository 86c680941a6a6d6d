//! The declared body, and dockgate's comparison with it: what control sends passes,
//! every other body is refused naming the field.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::dockgate::{
    bind_source_ok, container_create_declared, normalize, volume_create_declared, Asked,
    CreateLookups, Declared,
};
use crate::sandbox::{self, NamespaceMode};

pub(super) const SESSION: &str = "abcdefghijk234mn";

pub(super) fn profile() -> DeclaredProfile {
    DeclaredProfile {
        image: "termgate/session:dev".into(),
        command: vec!["-l".into()],
        env: BTreeMap::from([("SESSION_SHELL".into(), "sh".into())]),
        options: BTreeMap::from([(
            "editor".into(),
            DeclaredOption {
                env: "SESSION_EDITOR".into(),
                values: vec!["vi".into(), "nano".into()],
            },
        )]),
        spec: ContainerSpec {
            user: Some("1000:1000".into()),
            cap_drop: vec!["ALL".into()],
            security_opt: vec!["no-new-privileges:true".into()],
            network_mode: "none".into(),
            namespace_modes: BTreeMap::from([
                (Namespace::Pid, NamespaceMode::Private),
                (Namespace::Cgroup, NamespaceMode::Private),
            ]),
            mounts: vec![
                MountSpec {
                    kind: MountKind::Bind,
                    source: "/srv/data".into(),
                    target: "/data".into(),
                    read_only: true,
                },
                MountSpec {
                    kind: MountKind::Volume,
                    source: "team-tools".into(),
                    target: "/tools".into(),
                    read_only: true,
                },
            ],
            readonly_rootfs: true,
            pids_limit: Some(64),
            memory_bytes: Some(128 << 20),
            memory_swap_bytes: Some(128 << 20),
            nano_cpus: Some(500_000_000),
            tty: true,
            open_stdin: true,
            init: true,
            ..ContainerSpec::default()
        },
        home: Some("/home/user".into()),
        workspace: WorkspaceMode::Home,
        tmp_size_mb: 16,
        runtime: None,
    }
}

pub(super) fn declared() -> Declared {
    Declared {
        instance: "prod".into(),
        host: "local".into(),
        profiles: BTreeMap::from([("default".into(), profile())]),
        shared_volumes: Vec::new(),
    }
}

pub(super) fn alice() -> Sub {
    Sub::parse("alice").unwrap()
}

fn body_for(options: &BTreeMap<String, String>) -> Value {
    body_of(&profile(), options)
}

/// Alice's session `SESSION` of profile `p` with `options`, as control makes it.
fn body_of(p: &DeclaredProfile, options: &BTreeMap<String, String>) -> Value {
    let id = SessionId::parse(SESSION).unwrap();
    let owner = alice();
    let home = home_volume_name("prod", &owner);
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
            options,
            workspace: Some(&home),
            workspace_read_only: false,
        },
    )
    .unwrap()
}

fn body() -> Value {
    body_for(&BTreeMap::from([("editor".into(), "vi".into())]))
}

fn create_target() -> Asked {
    normalize(
        "POST",
        format!("/containers/create?name=termgate-{SESSION}&platform=").as_bytes(),
    )
    .unwrap()
}

fn judge(body: &Value) -> Result<CreateLookups, crate::dockgate::Denied> {
    container_create_declared(&declared(), &create_target(), body)
}

/// The refusal's message, checked to be `not_declared`.
fn refused(body: &Value) -> String {
    match judge(body) {
        Ok(l) => panic!("passed: {l:?}\n{body:#}"),
        Err(d) => {
            assert_eq!(d.code(), "not_declared", "{d}");
            d.message
        }
    }
}

pub(super) fn set(mut body: Value, path: &[&str], value: Value) -> Value {
    let path: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
    *slot(&mut body, &path) = value;
    body
}

/// `body` without the object key at `path`.
pub(super) fn remove(mut body: Value, path: &[&str]) -> Value {
    let (last, parents) = path.split_last().unwrap();
    let mut at = &mut body;
    for p in parents {
        at = match at {
            Value::Array(a) => &mut a[p.parse::<usize>().unwrap()],
            other => &mut other[*p],
        };
    }
    at.as_object_mut().unwrap().remove(*last);
    body
}

#[test]
fn the_declared_body_is_exactly_what_a_session_gets() {
    let b = body();
    assert_eq!(b["Image"], "termgate/session:dev");
    assert_eq!(b["User"], "1000:1000");
    assert_eq!(b["Cmd"], json!(["-l"]));
    assert_eq!(b["Env"], json!(["SESSION_SHELL=sh", "SESSION_EDITOR=vi"]));
    assert_eq!(b["Labels"]["termgate.owner"], "alice");
    assert_eq!(b["Labels"]["termgate.host"], "local");
    let h = &b["HostConfig"];
    assert_eq!(h["CgroupnsMode"], "private");
    assert_eq!(h["PidMode"], "private");
    assert_eq!(h["CapDrop"], json!(["ALL"]));
    assert_eq!(h["SecurityOpt"], json!(["no-new-privileges:true"]));
    assert_eq!(h["Tmpfs"], json!({"/tmp": "rw,nosuid,nodev,size=16m"}));
    assert_eq!(h["Mounts"].as_array().unwrap().len(), 3);
    assert_eq!(
        h["Mounts"][2]["Source"],
        home_volume_name("prod", &alice()).as_str()
    );
    // The spec the body is made of passes the red lines.
    let owner = alice();
    let home = home_volume_name("prod", &owner);
    assert!(sandbox::check(&session_spec(&profile(), Some(&home), false)).is_empty());
    // And the red-line screen of the same body agrees.
    assert!(crate::dockgate::spec_from_create_body(&b).is_ok());
}

#[test]
fn controls_body_passes_and_says_what_to_look_up() {
    let l = judge(&body()).unwrap();
    assert_eq!(
        l.own_volumes,
        vec![(home_volume_name("prod", &alice()), alice(), true)]
    );
    assert_eq!(l.borrowed_volumes, vec!["team-tools".to_owned()]);
    assert_eq!(l.bind_sources, vec!["/srv/data".to_owned()]);
    assert_eq!(l.network, None);
    // Another enumerated value of the option is declared as well.
    judge(&body_for(&BTreeMap::from([(
        "editor".into(),
        "nano".into(),
    )])))
    .unwrap();
}

#[test]
fn the_reviews_bodies_are_refused_naming_the_field() {
    let b = body;
    let mut proc_root = b();
    proc_root["HostConfig"]["Mounts"]
        .as_array_mut()
        .unwrap()
        .push(
            json!({"Type":"bind","Source":"/proc/self/root","Target":"/hostroot","ReadOnly":true}),
        );
    for (what, body, field) in [
        ("/proc/self/root bound", proc_root, "HostConfig.Mounts[3]"),
        (
            "the docker group",
            set(b(), &["User"], json!("1000:998")),
            "User",
        ),
        ("root", set(b(), &["User"], json!("0:0")), "User"),
        (
            "a whole seccomp profile",
            set(
                b(),
                &["HostConfig", "SecurityOpt"],
                json!([
                    "no-new-privileges:true",
                    "seccomp={\"defaultAction\":\"SCMP_ACT_ALLOW\"}"
                ]),
            ),
            "HostConfig.SecurityOpt[1]",
        ),
        (
            "an SELinux type",
            set(
                b(),
                &["HostConfig", "SecurityOpt"],
                json!(["no-new-privileges:true", "label=type:spc_t"]),
            ),
            "HostConfig.SecurityOpt[1]",
        ),
        (
            "a network id prefix",
            set(b(), &["HostConfig", "NetworkMode"], json!("4f3c2a")),
            "HostConfig.NetworkMode",
        ),
        (
            "the host's cgroup namespace",
            set(b(), &["HostConfig", "CgroupnsMode"], json!("host")),
            "HostConfig.CgroupnsMode",
        ),
        (
            "another image",
            set(b(), &["Image"], json!("busybox")),
            "Image",
        ),
        (
            "a bind made writable",
            set(
                b(),
                &["HostConfig", "Mounts", "0", "ReadOnly"],
                json!(false),
            ),
            "HostConfig.Mounts[0].ReadOnly",
        ),
        (
            "another user's home",
            set(
                b(),
                &["HostConfig", "Mounts", "2", "Source"],
                json!(home_volume_name("prod", &Sub::parse("bob").unwrap())),
            ),
            "HostConfig.Mounts[2].Source",
        ),
        (
            "a label of its own",
            set(b(), &["Labels", "x"], json!("y")),
            "Labels.x",
        ),
        (
            "another host",
            set(b(), &["Labels", "termgate.host"], json!("other")),
            "Labels.termgate.host",
        ),
        (
            "another instance",
            set(b(), &["Labels", "termgate.instance"], json!("other")),
            "Labels.termgate.instance",
        ),
        (
            "a value the option does not list",
            set(
                b(),
                &["Env"],
                json!(["SESSION_SHELL=sh", "SESSION_EDITOR=$(id)"]),
            ),
            "Env",
        ),
        (
            "a variable of its own",
            set(
                b(),
                &["Env"],
                json!(["SESSION_SHELL=sh", "SESSION_EDITOR=vi", "LD_PRELOAD=/x"]),
            ),
            "Env[2]",
        ),
        (
            "a field termgate never sends",
            set(b(), &["HostConfig", "Runtime"], json!("runc")),
            "HostConfig.Runtime",
        ),
        (
            "an unknown profile",
            set(b(), &["Labels", "termgate.profile"], json!("admin")),
            "termgate.profile",
        ),
    ] {
        let m = refused(&body);
        assert!(m.starts_with(field) || m.contains(field), "{what}: {m}");
    }
}

#[test]
fn the_container_name_must_be_the_sessions() {
    let a = normalize("POST", b"/containers/create?name=other&platform=").unwrap();
    let e = container_create_declared(&declared(), &a, &body()).unwrap_err();
    assert_eq!(e.code(), "not_declared");
    assert!(e.message.starts_with("name (query)"), "{}", e.message);
}

#[test]
fn a_named_network_is_looked_up() {
    let mut d = declared();
    let p = d.profiles.get_mut("default").unwrap();
    p.spec.network_mode = "tg-isolated".into();
    let b = set(body(), &["HostConfig", "NetworkMode"], json!("tg-isolated"));
    let l = container_create_declared(&d, &create_target(), &b).unwrap();
    assert_eq!(l.network.as_deref(), Some("tg-isolated"));
}

#[test]
fn the_home_volume_create_is_compared_too() {
    let good = home_volume_body("prod", &alice());
    volume_create_declared(&declared(), &good).unwrap();
    for bad in [
        set(good.clone(), &["Name"], json!("team-tools")),
        set(good.clone(), &["Driver"], json!("local")),
        set(
            good.clone(),
            &["DriverOpts"],
            json!({"o": "bind", "device": "/"}),
        ),
        set(
            good.clone(),
            &["Labels", "termgate.instance"],
            json!("other"),
        ),
        set(good.clone(), &["Labels", "termgate.owner"], json!("../x")),
    ] {
        let e = volume_create_declared(&declared(), &bad).unwrap_err();
        assert_eq!(e.code(), "not_declared", "{bad}");
    }
}

#[test]
fn bind_sources_that_resolve_into_the_host_are_refused() {
    let protected = vec!["/var/lib/termgate".to_owned()];
    bind_source_ok("/srv/data", &protected).unwrap();
    bind_source_ok("/home/shared/tools", &protected).unwrap();
    for bad in [
        "/",
        "/proc",
        "/proc/1/root",
        "/sys/fs/cgroup",
        "/dev/sda",
        "/var/run/docker.sock",
        "/run",
        "/var/lib/docker/volumes",
        "/var/lib/termgate",
        "/var/lib/termgate/secrets",
        "/var/lib",
        "relative",
    ] {
        let e = bind_source_ok(bad, &protected).unwrap_err();
        assert_eq!(e.code(), "not_declared", "{bad}");
    }
}

#[test]
fn first_difference_names_the_first_field_in_key_order() {
    assert_eq!(first_difference(&body(), &body()), None);
    let d = first_difference(&json!({"a": [1, 2]}), &json!({"a": [1, 2, 3]})).unwrap();
    assert_eq!(d.path, "a[2]");
    assert_eq!((d.want, d.got), (None, Some(json!(3))));
    let d = first_difference(&json!({"a": 1, "b": 2}), &json!({"b": 3})).unwrap();
    assert_eq!(d.path, "a");
    let d = first_difference(&json!(1), &json!("1")).unwrap();
    assert_eq!(d.path, "<body>");
}

/// Values a mutation writes: other spellings and what the daemon resolves them to.
pub(super) fn odd_value() -> impl Strategy<Value = Value> {
    let words = prop::sample::select(vec![
        "/proc/self/root",
        "/proc/1/root",
        "/proc/thread-self/cwd",
        "/",
        "/var/run/docker.sock",
        "0",
        "0:0",
        "1000",
        "1000:0",
        "1000:998",
        "root",
        "host",
        "private",
        "bridge",
        "default",
        "4f3c",
        "seccomp=unconfined",
        "seccomp={\"defaultAction\":\"SCMP_ACT_ALLOW\"}",
        "label=type:spc_t",
        "apparmor=unconfined",
        "no-new-privileges:false",
        "runc",
        "runsc",
        "ALL",
        "SYS_ADMIN",
        "bind",
        "volume",
        "",
        "termgate/session:dev",
        "SESSION_EDITOR=nano",
    ]);
    prop_oneof![
        words.prop_map(|w| json!(w)),
        any::<i64>().prop_map(|n| json!(n)),
        any::<bool>().prop_map(|b| json!(b)),
        Just(Value::Null),
        Just(json!([])),
        Just(json!({})),
        "[a-zA-Z0-9/:=._-]{0,12}".prop_map(|s| json!(s)),
    ]
}

/// Every path of `v` (objects and arrays too), and every object's path (for adding a key).
fn paths(v: &Value, at: Vec<String>, out: &mut Vec<(Vec<String>, bool)>) {
    match v {
        Value::Object(m) => {
            out.push((at.clone(), true));
            for (k, c) in m {
                let mut p = at.clone();
                p.push(k.clone());
                paths(c, p, out);
            }
        }
        Value::Array(a) => {
            out.push((at.clone(), false));
            for (i, c) in a.iter().enumerate() {
                let mut p = at.clone();
                p.push(i.to_string());
                paths(c, p, out);
            }
        }
        _ => out.push((at, false)),
    }
}

pub(super) fn slot<'v>(v: &'v mut Value, path: &[String]) -> &'v mut Value {
    let mut at = v;
    for k in path {
        at = match at {
            Value::Array(a) => &mut a[k.parse::<usize>().unwrap()],
            other => &mut other[k.as_str()],
        };
    }
    at
}

/// `original` changed at the path `pick` chooses among all of its paths: replaced by
/// `value` (`how` 0), removed (1), `key` added when it is an object (2), or `value`
/// appended when it is an array (otherwise).
pub(super) fn mutate(
    original: &Value,
    pick: &prop::sample::Index,
    how: u8,
    value: Value,
    key: &str,
) -> Value {
    let mut all = Vec::new();
    paths(original, Vec::new(), &mut all);
    let (path, is_object) = pick.get(&all).clone();
    let mut mutated = original.clone();
    match how {
        0 => *slot(&mut mutated, &path) = value,
        1 if !path.is_empty() => {
            let (last, parent) = path.split_last().unwrap();
            match slot(&mut mutated, parent) {
                Value::Object(m) => {
                    m.remove(last);
                }
                Value::Array(a) => {
                    a.remove(last.parse::<usize>().unwrap());
                }
                _ => {}
            }
        }
        2 if is_object => {
            if let Value::Object(m) = slot(&mut mutated, &path) {
                m.insert(key.to_owned(), value);
            }
        }
        _ => {
            if let Value::Array(a) = slot(&mut mutated, &path) {
                a.push(value);
            }
        }
    }
    mutated
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A body that is not the declared one never passes, whichever field changes and
    /// to what (replaced, removed, a key added, an element appended).
    #[test]
    fn every_body_but_the_declared_one_is_refused(
        pick in any::<prop::sample::Index>(),
        how in 0u8..4,
        value in odd_value(),
        key in prop::sample::select(vec!["Runtime", "Binds", "GroupAdd", "x", "Privileged", "Devices", "Isolation", "termgate.extra"]),
    ) {
        let original = body();
        let mutated = mutate(&original, &pick, how, value, key);
        match judge(&mutated) {
            // The display name and the creation time are the session's own facts: a
            // body passes with any, and with nothing else changed.
            Ok(_) => {
                let mut facts_reset = mutated.clone();
                for label in [NAME_LABEL, CREATED_LABEL] {
                    facts_reset["Labels"][label] = original["Labels"][label].clone();
                }
                prop_assert_eq!(&facts_reset, &original, "a changed body passed");
            }
            Err(d) => {
                prop_assert_ne!(&mutated, &original);
                prop_assert_eq!(d.code(), "not_declared");
            }
        }
    }
}

#[test]
fn a_runtime_passes_only_for_the_profile_that_names_it() {
    // The default profile names none: any runtime in a create is not declared, the
    // daemon's default included when spelled out.
    for runtime in [
        "runsc",
        "runc",
        "runc-unsafe",
        "kata",
        "io.containerd.runc.v2",
        "",
    ] {
        let asked = set(body(), &["HostConfig", "Runtime"], json!(runtime));
        let why = refused(&asked);
        assert!(why.contains("HostConfig.Runtime"), "{runtime}: {why}");
    }
    // A profile that names runsc: its body carries it, and nothing else passes.
    let mut gvisor = profile();
    gvisor.runtime = Some("runsc".into());
    let sandboxed = Declared {
        profiles: BTreeMap::from([("default".into(), gvisor.clone())]),
        ..declared()
    };
    let b = body_of(&gvisor, &BTreeMap::from([("editor".into(), "vi".into())]));
    assert_eq!(b["HostConfig"]["Runtime"], "runsc");
    container_create_declared(&sandboxed, &create_target(), &b).expect("its own body passes");
    let mut without = b.clone();
    without["HostConfig"]
        .as_object_mut()
        .unwrap()
        .remove("Runtime");
    for other in [
        set(b.clone(), &["HostConfig", "Runtime"], json!("runc")),
        set(b.clone(), &["HostConfig", "Runtime"], json!("RUNSC")),
        set(b.clone(), &["HostConfig", "Runtime"], json!("runsc ")),
        without,
    ] {
        let e = container_create_declared(&sandboxed, &create_target(), &other)
            .expect_err("another runtime, or none");
        assert_eq!(e.code(), "not_declared", "{e}");
        assert!(e.message.contains("HostConfig.Runtime"), "{e}");
    }
}

use super::*;
use proptest::prelude::*;

fn hardened() -> ContainerSpec {
    ContainerSpec {
        user: Some("1000:1000".into()),
        cap_drop: vec!["ALL".into()],
        security_opt: vec!["no-new-privileges:true".into()],
        network_mode: "none".into(),
        readonly_rootfs: true,
        pids_limit: Some(128),
        memory_bytes: Some(256 << 20),
        memory_swap_bytes: Some(256 << 20),
        nano_cpus: Some(500_000_000),
        tty: true,
        open_stdin: true,
        init: true,
        mounts: vec![MountSpec {
            kind: MountKind::Volume,
            source: "termgate-home-alice".into(),
            target: "/home/user".into(),
            read_only: false,
        }],
        namespace_modes: BTreeMap::from([(Namespace::Cgroup, NamespaceMode::Private)]),
        ..Default::default()
    }
}

fn rules(spec: &ContainerSpec) -> Vec<Rule> {
    let mut r: Vec<Rule> = check(spec).into_iter().map(|v| v.rule).collect();
    r.dedup();
    r
}

fn bind(source: &str, target: &str) -> MountSpec {
    MountSpec {
        kind: MountKind::Bind,
        source: source.into(),
        target: target.into(),
        read_only: true,
    }
}

#[test]
fn the_hardened_defaults_pass() {
    assert_eq!(check(&hardened()), vec![]);
}

#[test]
fn privileged_is_refused() {
    let s = ContainerSpec {
        privileged: true,
        ..hardened()
    };
    assert_eq!(rules(&s), vec![Rule::NotPrivileged]);
}

#[test]
fn missing_cap_drop_or_any_cap_add_is_refused() {
    assert_eq!(
        rules(&ContainerSpec {
            cap_drop: vec![],
            ..hardened()
        }),
        vec![Rule::CapDropAll]
    );
    assert_eq!(
        rules(&ContainerSpec {
            cap_add: vec!["NET_ADMIN".into()],
            ..hardened()
        }),
        vec![Rule::CapDropAll]
    );
}

#[test]
fn unconfined_profiles_are_refused_in_every_spelling() {
    for opt in [
        "seccomp=unconfined",
        "seccomp:unconfined",
        "apparmor=unconfined",
        "label=disable",
        "systempaths=unconfined",
        "SECCOMP=UNCONFINED",
    ] {
        let mut s = hardened();
        s.security_opt.push(opt.into());
        assert_eq!(rules(&s), vec![Rule::NoUnconfinedProfiles], "{opt}");
    }
}

#[test]
fn no_new_privileges_is_required() {
    assert_eq!(
        rules(&ContainerSpec {
            security_opt: vec![],
            ..hardened()
        }),
        vec![Rule::NoNewPrivileges]
    );
}

#[test]
fn daemon_sockets_and_their_directories_are_refused() {
    for (src, dst) in [
        ("/var/run/docker.sock", "/var/run/docker.sock"),
        ("/run/docker.sock", "/tmp/d.sock"),
        ("/var/run", "/host-run"),
        ("/run", "/r"),
        ("/", "/host"),
        ("//var//run/./docker.sock", "/x"),
        ("/run/containerd/containerd.sock", "/c"),
        ("/srv/podman.sock", "/p"),
        ("/var/lib/docker", "/d"),
        ("/data", "/var/run/docker.sock"),
    ] {
        let mut s = hardened();
        s.mounts.push(bind(src, dst));
        assert_eq!(rules(&s), vec![Rule::NoDaemonSocket], "{src} -> {dst}");
    }
}

#[test]
fn ordinary_binds_pass() {
    let mut s = hardened();
    s.mounts.push(bind("/srv/datasets", "/data"));
    s.mounts.push(bind("/var/runtime-data", "/data2"));
    assert_eq!(check(&s), vec![]);
}

#[test]
fn relative_or_dotdot_paths_are_refused() {
    for (src, dst) in [
        ("data", "/data"),
        ("/srv/../run/docker.sock", "/x"),
        ("/srv", "data"),
    ] {
        let mut s = hardened();
        s.mounts.push(bind(src, dst));
        assert!(rules(&s).contains(&Rule::MountPaths), "{src} -> {dst}");
    }
}

#[test]
fn host_namespaces_are_refused() {
    assert_eq!(
        rules(&ContainerSpec {
            network_mode: "host".into(),
            ..hardened()
        }),
        vec![Rule::NoHostNamespaces]
    );
    assert_eq!(
        rules(&ContainerSpec {
            network_mode: "bridge".into(),
            ..hardened()
        }),
        vec![Rule::NoHostNamespaces]
    );
    for kind in Namespace::ALL {
        let mut s = hardened();
        s.namespace_modes.insert(kind, NamespaceMode::Host);
        assert_eq!(rules(&s), vec![Rule::NoHostNamespaces], "{kind}");
        for mode in [NamespaceMode::Default, NamespaceMode::Private] {
            s.namespace_modes.insert(kind, mode);
            // The cgroup namespace must be private explicitly: Docker's default is the
            // host's on a cgroup v1 daemon.
            let want = if kind == Namespace::Cgroup && mode == NamespaceMode::Default {
                vec![Rule::NoHostNamespaces]
            } else {
                vec![]
            };
            assert_eq!(rules(&s), want, "{kind} {mode}");
        }
    }
    let mut s = hardened();
    s.namespace_modes.remove(&Namespace::Cgroup);
    assert_eq!(
        rules(&s),
        vec![Rule::NoHostNamespaces],
        "CgroupnsMode absent"
    );
}

#[test]
fn namespace_modes_parse_only_what_every_kind_can_express() {
    for (text, mode) in [
        ("", NamespaceMode::Default),
        ("private", NamespaceMode::Private),
        ("host", NamespaceMode::Host),
        ("HOST", NamespaceMode::Host),
    ] {
        assert_eq!(NamespaceMode::parse(text), Some(mode), "{text:?}");
    }
    for text in ["shareable", "none", "container:abc", "hostile", " host"] {
        assert_eq!(NamespaceMode::parse(text), None, "{text:?}");
    }
    let e = serde_json::from_str::<NamespaceMode>("\"container:abc\"").unwrap_err();
    assert!(e.to_string().contains("unknown namespace mode"), "{e}");
}

#[test]
fn root_users_are_refused() {
    for u in [
        None,
        Some("root"),
        Some("0"),
        Some("0:0"),
        Some("root:1000"),
        Some("00"),
        // Names and missing groups resolve inside the image, possibly to root.
        Some("user"),
        Some("1000"),
        Some("1000:root"),
        Some("1000:0"),
        Some("0:1000"),
        Some("1000:"),
        Some(":1000"),
        Some("+1000:1000"),
        Some("1000:1000:1"),
        Some("99999999999:1"),
    ] {
        let s = ContainerSpec {
            user: u.map(String::from),
            ..hardened()
        };
        assert_eq!(rules(&s), vec![Rule::NonRootUser], "{u:?}");
    }
    for u in ["1000:1000", "10:20", "65534:65534"] {
        assert_eq!(
            check(&ContainerSpec {
                user: Some(u.into()),
                ..hardened()
            }),
            vec![],
            "{u}"
        );
    }
}

#[test]
fn limits_are_required_and_swap_is_refused() {
    assert_eq!(
        rules(&ContainerSpec {
            pids_limit: None,
            ..hardened()
        }),
        vec![Rule::PidsLimit]
    );
    assert_eq!(
        rules(&ContainerSpec {
            memory_swap_bytes: Some(1 << 40),
            ..hardened()
        }),
        vec![Rule::MemoryLimit]
    );
    assert_eq!(
        rules(&ContainerSpec {
            nano_cpus: Some(0),
            ..hardened()
        }),
        vec![Rule::CpuLimit]
    );
    assert_eq!(
        rules(&ContainerSpec {
            readonly_rootfs: false,
            ..hardened()
        }),
        vec![Rule::ReadonlyRootfs]
    );
}

#[test]
fn every_violation_is_reported_together() {
    let s = ContainerSpec {
        privileged: true,
        cap_drop: vec![],
        security_opt: vec!["seccomp=unconfined".into()],
        ..hardened()
    };
    let r = rules(&s);
    for want in [
        Rule::NotPrivileged,
        Rule::CapDropAll,
        Rule::NoNewPrivileges,
        Rule::NoUnconfinedProfiles,
    ] {
        assert!(r.contains(&want), "{want} missing from {r:?}");
    }
}

proptest! {
    #[test]
    fn check_never_panics_on_any_mount(src in ".{0,40}", dst in ".{0,40}", volume in any::<bool>()) {
        let mut s = hardened();
        s.mounts.push(MountSpec { kind: if volume { MountKind::Volume } else { MountKind::Bind }, source: src, target: dst, read_only: false });
        let _ = check(&s);
    }

    #[test]
    fn any_bind_at_or_above_the_docker_socket_is_refused(depth in 0usize..3, slashes in 1usize..3) {
        let parts = ["var", "run", "docker.sock"];
        let sep = "/".repeat(slashes);
        let src = format!("{sep}{}", parts[..depth + 1].join(&sep));
        let mut s = hardened();
        s.mounts.push(bind(&src, "/x"));
        prop_assert!(rules(&s).contains(&Rule::NoDaemonSocket), "{}", src);
    }
}

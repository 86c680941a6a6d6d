//! Container create bodies: control's passes, every red line is refused by its rule.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::sandbox::{Namespace, NamespaceMode};

#[test]
fn controls_own_create_body_passes() {
    assert_eq!(create(&control_body()), session_create_passes());
    // Without a command (bollard skips it) and through a version prefix.
    let body = without(control_body(), &["Cmd"]);
    assert_eq!(
        create_with(&format!("/v1.47{CREATE}"), body.to_string().as_bytes()),
        session_create_passes()
    );
    let (spec, labels) = spec_from_create_body(&control_body()).unwrap();
    assert_eq!(spec.user.as_deref(), Some("1000:1000"));
    assert_eq!(
        spec.namespace_modes.get(&Namespace::Cgroup),
        Some(&NamespaceMode::Private)
    );
    assert_eq!(spec.mounts.len(), 2);
    assert!(spec.tty && spec.open_stdin && spec.init);
    assert_eq!(
        labels.get("termgate.host").map(String::as_str),
        Some("local")
    );
}

#[test]
fn each_red_line_in_a_create_body_is_refused_by_its_rule() {
    let b = control_body;
    let bind = |src: &str, dst: &str| json!([{"Type": "bind", "Source": src, "Target": dst, "ReadOnly": true}]);
    for (what, body, code) in [
        (
            "privileged",
            with(b(), &["HostConfig", "Privileged"], json!(true)),
            "not_privileged",
        ),
        (
            "a capability added",
            with(b(), &["HostConfig", "CapAdd"], json!(["SYS_ADMIN"])),
            "cap_drop_all",
        ),
        (
            "no CapDrop",
            without(b(), &["HostConfig", "CapDrop"]),
            "cap_drop_all",
        ),
        (
            "docker.sock bound",
            with(
                b(),
                &["HostConfig", "Mounts"],
                bind("/var/run/docker.sock", "/var/run/docker.sock"),
            ),
            "no_daemon_socket",
        ),
        (
            "/ bound",
            with(b(), &["HostConfig", "Mounts"], bind("/", "/host")),
            "no_daemon_socket",
        ),
        (
            "docker.sock in Binds",
            with(
                b(),
                &["HostConfig", "Binds"],
                json!(["/var/run/docker.sock:/var/run/docker.sock"]),
            ),
            "no_daemon_socket",
        ),
        (
            "/ in Binds",
            with(b(), &["HostConfig", "Binds"], json!(["/:/host:ro"])),
            "no_daemon_socket",
        ),
        (
            "host network",
            with(b(), &["HostConfig", "NetworkMode"], json!("host")),
            "no_host_namespaces",
        ),
        (
            "default network",
            without(b(), &["HostConfig", "NetworkMode"]),
            "no_host_namespaces",
        ),
        (
            "another's network",
            with(b(), &["HostConfig", "NetworkMode"], json!("container:abc")),
            "no_host_namespaces",
        ),
        (
            "host pid",
            with(b(), &["HostConfig", "PidMode"], json!("host")),
            "no_host_namespaces",
        ),
        (
            "host userns",
            with(b(), &["HostConfig", "UsernsMode"], json!("host")),
            "no_host_namespaces",
        ),
        (
            "another's ipc",
            with(b(), &["HostConfig", "IpcMode"], json!("container:abc")),
            "no_host_namespaces",
        ),
        (
            "seccomp off",
            with(
                b(),
                &["HostConfig", "SecurityOpt"],
                json!(["no-new-privileges:true", "seccomp=unconfined"]),
            ),
            "no_unconfined_profiles",
        ),
        (
            "apparmor off",
            with(
                b(),
                &["HostConfig", "SecurityOpt"],
                json!(["no-new-privileges:true", "apparmor:unconfined"]),
            ),
            "no_unconfined_profiles",
        ),
        (
            "no no-new-privileges",
            with(b(), &["HostConfig", "SecurityOpt"], json!([])),
            "no_new_privileges",
        ),
        (
            "a device",
            with(
                b(),
                &["HostConfig", "Devices"],
                json!([{"PathOnHost": "/dev/sda", "PathInContainer": "/dev/sda", "CgroupPermissions": "rwm"}]),
            ),
            "no_devices",
        ),
        (
            "a GPU",
            with(
                b(),
                &["HostConfig", "DeviceRequests"],
                json!([{"Driver": "nvidia", "Count": -1}]),
            ),
            "no_devices",
        ),
        (
            "a device rule",
            with(
                b(),
                &["HostConfig", "DeviceCgroupRules"],
                json!(["a *:* rwm"]),
            ),
            "no_devices",
        ),
        (
            "writable root",
            with(b(), &["HostConfig", "ReadonlyRootfs"], json!(false)),
            "readonly_rootfs",
        ),
        ("uid 0", with(b(), &["User"], json!("0:0")), "non_root_user"),
        (
            "root by name",
            with(b(), &["User"], json!("root")),
            "non_root_user",
        ),
        (
            "a user name",
            with(b(), &["User"], json!("alice:alice")),
            "non_root_user",
        ),
        ("no user", without(b(), &["User"]), "non_root_user"),
        (
            "no pids limit",
            with(b(), &["HostConfig", "PidsLimit"], json!(0)),
            "pids_limit",
        ),
        (
            "swap",
            with(b(), &["HostConfig", "MemorySwap"], json!(-1)),
            "memory_limit",
        ),
        (
            "no cpu limit",
            without(b(), &["HostConfig", "NanoCpus"]),
            "cpu_limit",
        ),
        (
            "no init",
            with(b(), &["HostConfig", "Init"], json!(null)),
            "terminal",
        ),
        (
            "no HostConfig",
            without(b(), &["HostConfig"]),
            "cap_drop_all",
        ),
    ] {
        assert_eq!(create_refused(&body), code, "{what}");
    }
}

#[test]
fn fields_termgate_never_sets_are_refused_unless_default() {
    let b = control_body;
    for (what, body) in [
        (
            "top-level Privileged",
            with(b(), &["Privileged"], json!(true)),
        ),
        ("top-level Binds", with(b(), &["Binds"], json!(["/:/host"]))),
        (
            "lower-case privileged",
            with(b(), &["HostConfig", "privileged"], json!(true)),
        ),
        (
            "lower-case hostconfig",
            with(b(), &["hostconfig"], json!({"Privileged": true})),
        ),
        ("Cpuset", with(b(), &["Cpuset"], json!("0"))),
        (
            "an unknown field",
            with(
                b(),
                &["HostConfig", "Capabilities"],
                json!(["CAP_SYS_ADMIN"]),
            ),
        ),
        (
            "VolumesFrom",
            with(b(), &["HostConfig", "VolumesFrom"], json!(["other"])),
        ),
        (
            "Links",
            with(b(), &["HostConfig", "Links"], json!(["other:o"])),
        ),
        (
            "Sysctls",
            with(
                b(),
                &["HostConfig", "Sysctls"],
                json!({"kernel.shm_rmid_forced": "1"}),
            ),
        ),
        (
            "CgroupParent",
            with(b(), &["HostConfig", "CgroupParent"], json!("/")),
        ),
        (
            "Cgroup",
            with(b(), &["HostConfig", "Cgroup"], json!("container:x")),
        ),
        (
            "OomKillDisable",
            with(b(), &["HostConfig", "OomKillDisable"], json!(true)),
        ),
        (
            "PortBindings",
            with(
                b(),
                &["HostConfig", "PortBindings"],
                json!({"22/tcp": [{"HostPort": "22"}]}),
            ),
        ),
        (
            "PublishAllPorts",
            with(b(), &["HostConfig", "PublishAllPorts"], json!(true)),
        ),
        (
            "MaskedPaths emptied",
            with(b(), &["HostConfig", "MaskedPaths"], json!([])),
        ),
        (
            "ReadonlyPaths emptied",
            with(b(), &["HostConfig", "ReadonlyPaths"], json!([])),
        ),
        (
            "GroupAdd",
            with(b(), &["HostConfig", "GroupAdd"], json!(["docker"])),
        ),
        (
            "RestartPolicy",
            with(
                b(),
                &["HostConfig", "RestartPolicy"],
                json!({"Name": "always"}),
            ),
        ),
        (
            "NetworkingConfig",
            with(
                b(),
                &["NetworkingConfig"],
                json!({"EndpointsConfig": {"host": {}}}),
            ),
        ),
    ] {
        assert_eq!(create_refused(&body), "field_not_allowed", "{what}");
    }
    for (what, body) in [
        (
            "VolumesFrom empty",
            with(b(), &["HostConfig", "VolumesFrom"], json!([])),
        ),
        (
            "OomKillDisable false",
            with(b(), &["HostConfig", "OomKillDisable"], json!(false)),
        ),
        (
            "PublishAllPorts false",
            with(b(), &["HostConfig", "PublishAllPorts"], json!(false)),
        ),
        (
            "Runtime empty",
            with(b(), &["HostConfig", "Runtime"], json!("")),
        ),
        (
            "MaskedPaths null",
            with(b(), &["HostConfig", "MaskedPaths"], json!(null)),
        ),
        (
            "NetworkingConfig null",
            with(b(), &["NetworkingConfig"], json!(null)),
        ),
        (
            "Binds empty",
            with(b(), &["HostConfig", "Binds"], json!([])),
        ),
    ] {
        assert_eq!(create(&body), session_create_passes(), "{what}");
    }
}

#[test]
fn mount_tmpfs_and_bind_options_are_refused() {
    let b = control_body;
    let mount = |extra: Value| {
        let mut m =
            json!({"Type": "volume", "Source": "termgate-home-alice", "Target": "/home/user"});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        with(b(), &["HostConfig", "Mounts"], json!([m]))
    };
    for (what, body, code) in [
        (
            "a volume driven to a host path",
            mount(
                json!({"VolumeOptions": {"DriverConfig": {"Name": "local", "Options": {"type": "none", "o": "bind", "device": "/"}}}}),
            ),
            "mount_options",
        ),
        (
            "shared propagation",
            mount(
                json!({"Type": "bind", "Source": "/srv", "BindOptions": {"Propagation": "rshared"}}),
            ),
            "mount_options",
        ),
        (
            "a tmpfs mount",
            mount(json!({"Type": "tmpfs", "Source": ""})),
            "mount_options",
        ),
        (
            "an image mount",
            mount(json!({"Type": "image", "Source": "alpine"})),
            "mount_options",
        ),
        (
            "no mount type",
            mount(json!({"Type": null})),
            "mount_options",
        ),
        (
            "an unknown mount field",
            mount(json!({"Propagation": "shared"})),
            "field_not_allowed",
        ),
        (
            "an ordinary bind in Binds",
            with(b(), &["HostConfig", "Binds"], json!(["/srv/data:/data:ro"])),
            "mount_options",
        ),
        (
            "a relative bind",
            mount(json!({"Type": "bind", "Source": "srv"})),
            "mount_paths",
        ),
        (
            "a volume named by a path",
            mount(json!({"Type": "volume", "Source": "a/b", "Target": "/x"})),
            "mount_paths",
        ),
        (
            "a suid tmpfs",
            with(
                b(),
                &["HostConfig", "Tmpfs"],
                json!({"/tmp": "rw,nodev,size=16m"}),
            ),
            "tmpfs_options",
        ),
        (
            "an unbounded tmpfs",
            with(
                b(),
                &["HostConfig", "Tmpfs"],
                json!({"/tmp": "rw,nosuid,nodev,size=0"}),
            ),
            "tmpfs_options",
        ),
        (
            "a tmpfs without a size",
            with(
                b(),
                &["HostConfig", "Tmpfs"],
                json!({"/tmp": "rw,nosuid,nodev"}),
            ),
            "tmpfs_options",
        ),
        (
            "a tmpfs with dev",
            with(
                b(),
                &["HostConfig", "Tmpfs"],
                json!({"/tmp": "rw,nosuid,nodev,dev,size=1m"}),
            ),
            "tmpfs_options",
        ),
        (
            "a tmpfs at ..",
            with(
                b(),
                &["HostConfig", "Tmpfs"],
                json!({"/tmp/..": "rw,nosuid,nodev,size=1m"}),
            ),
            "tmpfs_options",
        ),
    ] {
        assert_eq!(create_refused(&body), code, "{what}");
    }
}

#[test]
fn a_create_must_carry_termgates_labels() {
    let b = control_body;
    for (what, body) in [
        ("no labels", without(b(), &["Labels"])),
        (
            "a home label",
            with(b(), &["Labels", "termgate.managed"], json!("home")),
        ),
        (
            "no instance",
            without(b(), &["Labels", "termgate.instance"]),
        ),
        (
            "an empty instance",
            with(b(), &["Labels", "termgate.instance"], json!("")),
        ),
    ] {
        assert_eq!(create_refused(&body), "labels_required", "{what}");
    }
    let other = with(b(), &["Labels", "termgate.instance"], json!("staging"));
    assert!(
        matches!(create(&other), Verdict::PassCreate { instance, .. } if instance == "staging")
    );
}

#[test]
fn a_create_without_a_private_cgroup_namespace_is_refused_at_every_api_version() {
    let body = without(control_body(), &["HostConfig", "CgroupnsMode"]);
    let bytes = body.to_string();
    for prefix in ["/v1.40", "/v1.41", "/v1.47", ""] {
        assert_eq!(
            refused(create_with(&format!("{prefix}{CREATE}"), bytes.as_bytes())),
            "no_host_namespaces",
            "{prefix}"
        );
    }
    let empty = with(control_body(), &["HostConfig", "CgroupnsMode"], json!(""));
    assert_eq!(create_refused(&empty), "no_host_namespaces");
    let explicit = control_body().to_string();
    assert_eq!(
        create_with(&format!("/v1.40{CREATE}"), explicit.as_bytes()),
        session_create_passes()
    );
}

#[test]
fn create_bodies_fail_closed() {
    let privileged = with(control_body(), &["HostConfig", "Privileged"], json!(true)).to_string();
    let a = asked("POST", CREATE);
    let code = |body: BodyInfo<'_>| refused(decide(Role::Control, &a, body));
    assert_eq!(code(BodyInfo::chunked()), "body_chunked");
    assert_eq!(
        code(BodyInfo::chunked().with_bytes(privileged.as_bytes())),
        "body_chunked"
    );
    assert_eq!(code(BodyInfo::length(0)), "body_required");
    assert_eq!(
        code(BodyInfo::length(0).with_bytes(privileged.as_bytes())),
        "body_required"
    );
    assert_eq!(code(BodyInfo::none()), "body_required");
    assert_eq!(
        code(BodyInfo::length(MAX_BODY as u64 + 1)),
        "body_too_large"
    );
    assert_eq!(code(BodyInfo::length(u64::MAX)), "body_too_large");
    let good = control_body().to_string();
    let short = BodyInfo::length(good.len() as u64 - 1).with_bytes(good.as_bytes());
    assert_eq!(code(short), "body_length_mismatch");
    let long = BodyInfo::length(good.len() as u64 + 1).with_bytes(good.as_bytes());
    assert_eq!(code(long), "body_length_mismatch");
    for bytes in [
        &b"{"[..],
        b"not json",
        b"{}{}",
        b"{} x",
        b"\xef\xbb\xbf{}",
        br#"{"HostConfig":{"Privileged":false,"Privileged":true}}"#,
        br#"{"Labels":{"termgate.instance":"a","termgate.instance":"b"}}"#,
    ] {
        assert_eq!(
            refused(create_with(CREATE, bytes)),
            "invalid_json",
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    for body in [
        json!([]),
        with(
            control_body(),
            &["HostConfig", "Privileged"],
            json!("false"),
        ),
        with(control_body(), &["HostConfig", "PidsLimit"], json!(64.0)),
        with(control_body(), &["HostConfig", "Memory"], json!(u64::MAX)),
        with(control_body(), &["Cmd"], json!("sh -c true")),
        with(control_body(), &["HostConfig"], json!([])),
    ] {
        assert_eq!(create_refused(&body), "invalid_body", "{body}");
    }
}

proptest! {
    #[test]
    fn any_privileged_or_capable_create_is_refused(cap in "[A-Z_]{1,12}", privileged in any::<bool>()) {
        let body = with(control_body(), &["HostConfig", "CapAdd"], json!([cap]));
        let body = with(body, &["HostConfig", "Privileged"], json!(privileged));
        prop_assert!(matches!(create(&body), Verdict::Refuse(_)));
    }
}

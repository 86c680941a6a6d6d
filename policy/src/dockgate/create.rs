//! The container create body: what control sends, read into the [`ContainerSpec`] the
//! sandbox red lines are checked on.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::denied::{deny, Denied, Reason};
use super::json::{check_fields, Field, Fields};
use super::objects::{termgate_instance, Labels, ObjectKind};
use super::target::ApiVersion;
use crate::sandbox::{self, ContainerSpec, MountKind, MountSpec, Namespace, NamespaceMode, Rule};

const TOP_FIELDS: &[(&str, Field)] = &[
    ("Image", Field::Read),
    ("User", Field::Read),
    ("Tty", Field::Read),
    ("OpenStdin", Field::Read),
    ("StdinOnce", Field::Read),
    ("AttachStdin", Field::Read),
    ("AttachStdout", Field::Read),
    ("AttachStderr", Field::Read),
    ("Env", Field::Read),
    ("Cmd", Field::Read),
    ("Labels", Field::Read),
    ("HostConfig", Field::Read),
    ("Hostname", Field::DefaultOnly),
    ("Domainname", Field::DefaultOnly),
    ("ExposedPorts", Field::DefaultOnly),
    ("Healthcheck", Field::DefaultOnly),
    ("ArgsEscaped", Field::DefaultOnly),
    ("Volumes", Field::DefaultOnly),
    ("WorkingDir", Field::DefaultOnly),
    // A copy job names one; which passes is the comparison with the declared body.
    ("Entrypoint", Field::Read),
    ("NetworkDisabled", Field::DefaultOnly),
    ("MacAddress", Field::DefaultOnly),
    ("OnBuild", Field::DefaultOnly),
    ("StopSignal", Field::DefaultOnly),
    ("StopTimeout", Field::DefaultOnly),
    ("Shell", Field::DefaultOnly),
    ("NetworkingConfig", Field::DefaultOnly),
];

const HOST_FIELDS: &[(&str, Field)] = &[
    ("CapAdd", Field::Read),
    ("CapDrop", Field::Read),
    ("SecurityOpt", Field::Read),
    ("Privileged", Field::Read),
    ("ReadonlyRootfs", Field::Read),
    ("PidsLimit", Field::Read),
    ("Memory", Field::Read),
    ("MemorySwap", Field::Read),
    ("NanoCpus", Field::Read),
    ("Init", Field::Read),
    ("NetworkMode", Field::Read),
    ("Tmpfs", Field::Read),
    ("AutoRemove", Field::Read),
    ("PidMode", Field::Read),
    ("IpcMode", Field::Read),
    ("UTSMode", Field::Read),
    ("UsernsMode", Field::Read),
    ("CgroupnsMode", Field::Read),
    ("Mounts", Field::Read),
    ("Binds", Field::Read),
    ("Devices", Field::Read),
    ("DeviceRequests", Field::Read),
    ("DeviceCgroupRules", Field::Read),
    // A profile may name one (`runtime`); which one passes is the comparison with the
    // declared body's, which every create goes through.
    ("Runtime", Field::Read),
    ("MaskedPaths", Field::NullOnly),
    ("ReadonlyPaths", Field::NullOnly),
    ("CpuShares", Field::DefaultOnly),
    ("CgroupParent", Field::DefaultOnly),
    ("Cgroup", Field::DefaultOnly),
    ("BlkioWeight", Field::DefaultOnly),
    ("BlkioWeightDevice", Field::DefaultOnly),
    ("BlkioDeviceReadBps", Field::DefaultOnly),
    ("BlkioDeviceWriteBps", Field::DefaultOnly),
    ("BlkioDeviceReadIOps", Field::DefaultOnly),
    ("BlkioDeviceWriteIOps", Field::DefaultOnly),
    ("CpuPeriod", Field::DefaultOnly),
    ("CpuQuota", Field::DefaultOnly),
    ("CpuRealtimePeriod", Field::DefaultOnly),
    ("CpuRealtimeRuntime", Field::DefaultOnly),
    ("CpusetCpus", Field::DefaultOnly),
    ("CpusetMems", Field::DefaultOnly),
    ("CpuCount", Field::DefaultOnly),
    ("CpuPercent", Field::DefaultOnly),
    ("IOMaximumIOps", Field::DefaultOnly),
    ("IOMaximumBandwidth", Field::DefaultOnly),
    ("KernelMemory", Field::DefaultOnly),
    ("KernelMemoryTCP", Field::DefaultOnly),
    ("MemoryReservation", Field::DefaultOnly),
    ("MemorySwappiness", Field::DefaultOnly),
    ("OomKillDisable", Field::DefaultOnly),
    ("OomScoreAdj", Field::DefaultOnly),
    ("Ulimits", Field::DefaultOnly),
    ("ContainerIDFile", Field::DefaultOnly),
    ("LogConfig", Field::DefaultOnly),
    ("PortBindings", Field::DefaultOnly),
    ("PublishAllPorts", Field::DefaultOnly),
    ("RestartPolicy", Field::DefaultOnly),
    ("VolumeDriver", Field::DefaultOnly),
    ("VolumesFrom", Field::DefaultOnly),
    ("Links", Field::DefaultOnly),
    ("ConsoleSize", Field::DefaultOnly),
    ("Annotations", Field::DefaultOnly),
    ("Dns", Field::DefaultOnly),
    ("DnsOptions", Field::DefaultOnly),
    ("DnsSearch", Field::DefaultOnly),
    ("ExtraHosts", Field::DefaultOnly),
    ("GroupAdd", Field::DefaultOnly),
    ("StorageOpt", Field::DefaultOnly),
    ("ShmSize", Field::DefaultOnly),
    ("Sysctls", Field::DefaultOnly),
    ("Isolation", Field::DefaultOnly),
];

const MOUNT_FIELDS: &[(&str, Field)] = &[
    ("Type", Field::Read),
    ("Source", Field::Read),
    ("Target", Field::Read),
    ("ReadOnly", Field::Read),
    ("Consistency", Field::DefaultOnly),
    ("BindOptions", Field::DefaultOnly),
    ("VolumeOptions", Field::DefaultOnly),
    ("ImageOptions", Field::DefaultOnly),
    ("TmpfsOptions", Field::DefaultOnly),
];

/// Lexically normal absolute path (as the sandbox's), without `..`.
fn is_clean_absolute(p: &str) -> bool {
    p.starts_with('/')
        && p.len() > 1
        && !p.ends_with('/')
        && p[1..]
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..")
}

/// A tmpfs as control writes it: `nosuid`, `nodev` and a positive size; only options
/// that change nothing outside the container.
fn check_tmpfs(tmpfs: &BTreeMap<String, String>) -> Result<(), Denied> {
    for (target, options) in tmpfs {
        let bad = |m: String| deny(Reason::TmpfsOptions, format!("Tmpfs {target:?}: {m}"));
        if !is_clean_absolute(target) {
            return Err(bad("target must be a clean absolute path".into()));
        }
        let (mut nosuid, mut nodev, mut sized) = (false, false, false);
        for opt in options.split(',') {
            match opt.split_once('=') {
                None => match opt {
                    "nosuid" => nosuid = true,
                    "nodev" => nodev = true,
                    "rw" | "ro" | "noexec" | "exec" => {}
                    other => return Err(bad(format!("option {other:?} is not allowed"))),
                },
                Some(("size", v)) => {
                    let n = v.trim_end_matches(['k', 'm', 'g', 'K', 'M', 'G']);
                    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(bad(format!("size {v:?} is not a size")));
                    }
                    sized = n.bytes().any(|b| b != b'0');
                }
                Some(("mode" | "uid" | "gid" | "nr_inodes", v))
                    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric()) => {}
                Some((k, _)) => return Err(bad(format!("option {k:?} is not allowed"))),
            }
        }
        if !(nosuid && nodev && sized) {
            return Err(bad("needs nosuid, nodev and a positive size".into()));
        }
    }
    Ok(())
}

fn mount_from(i: usize, v: &Value) -> Result<MountSpec, Denied> {
    let at = format!("HostConfig.Mounts[{i}].");
    let obj = v.as_object().ok_or_else(|| {
        deny(
            Reason::InvalidBody,
            format!("HostConfig.Mounts[{i}] must be an object"),
        )
    })?;
    check_fields(obj, MOUNT_FIELDS, &at, Reason::MountOptions)?;
    let f = Fields { obj, at: &at };
    let kind = match f.text("Type")? {
        Some("bind") => MountKind::Bind,
        Some("volume") => MountKind::Volume,
        other => {
            return Err(deny(
                Reason::MountOptions,
                format!("{at}Type must be bind or volume, got {other:?}"),
            ))
        }
    };
    Ok(MountSpec {
        kind,
        source: f.text("Source")?.unwrap_or_default().to_owned(),
        target: f.text("Target")?.unwrap_or_default().to_owned(),
        read_only: f.boolean("ReadOnly")?,
    })
}

/// A legacy `Binds` entry, `source:target[:options]`, as the mount it makes.
fn bind_from(entry: &str) -> MountSpec {
    let mut parts = entry.splitn(3, ':');
    let source = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let read_only = parts
        .next()
        .is_some_and(|o| o.split(',').any(|o| o == "ro"));
    MountSpec {
        kind: if source.starts_with('/') {
            MountKind::Bind
        } else {
            MountKind::Volume
        },
        source,
        target,
        read_only,
    }
}

/// Reads Docker's container create body (the JSON bollard serialises from
/// `ContainerCreateBody`, PascalCase) into the [`ContainerSpec`] the red lines are
/// checked on, and checks them. Refuses, naming the rule: an unknown field, a field
/// termgate never sends set to anything but its default (`VolumesFrom`, `Links`,
/// `Sysctls`, `CgroupParent`, `OomKillDisable`, `PortBindings`,
/// `PublishAllPorts`, `NetworkingConfig`, …), a HostConfig field at the top level (old
/// daemons read those), mount or tmpfs options, legacy `Binds`, any
/// [`sandbox::check`] violation, and labels without `termgate.managed=session` and a
/// non-empty `termgate.instance`. Returns the spec and the body's labels.
pub fn spec_from_create_body(body: &Value) -> Result<(ContainerSpec, Labels), Denied> {
    create_body(body, None)
}

/// [`spec_from_create_body`] for a request of API `version`: before 1.41 Docker on a
/// cgroup v1 host gives a container without `CgroupnsMode` the host's cgroup namespace.
pub(super) fn create_body(
    body: &Value,
    version: Option<ApiVersion>,
) -> Result<(ContainerSpec, Labels), Denied> {
    let top = body
        .as_object()
        .ok_or_else(|| deny(Reason::InvalidBody, "the body must be a JSON object"))?;
    check_fields(top, TOP_FIELDS, "", Reason::FieldNotAllowed)?;
    let t = Fields { obj: top, at: "" };
    let empty = Map::new();
    let host = t.object("HostConfig")?.unwrap_or(&empty);
    check_fields(host, HOST_FIELDS, "HostConfig.", Reason::FieldNotAllowed)?;
    let h = Fields {
        obj: host,
        at: "HostConfig.",
    };

    // Read for their types only: none of them weakens isolation.
    t.text("Image")?;
    for key in ["StdinOnce", "AttachStdin", "AttachStdout", "AttachStderr"] {
        t.boolean(key)?;
    }
    t.strings("Env")?;
    t.strings("Cmd")?;
    h.boolean("AutoRemove")?;
    h.text("Runtime")?;

    let mut spec = ContainerSpec {
        user: t.text("User")?.filter(|u| !u.is_empty()).map(str::to_owned),
        privileged: h.boolean("Privileged")?,
        cap_add: h.strings("CapAdd")?,
        cap_drop: h.strings("CapDrop")?,
        security_opt: h.strings("SecurityOpt")?,
        network_mode: h.text("NetworkMode")?.unwrap_or_default().to_owned(),
        readonly_rootfs: h.boolean("ReadonlyRootfs")?,
        pids_limit: h.int("PidsLimit")?,
        memory_bytes: h.int("Memory")?,
        memory_swap_bytes: h.int("MemorySwap")?,
        nano_cpus: h.int("NanoCpus")?,
        tty: t.boolean("Tty")?,
        open_stdin: t.boolean("OpenStdin")?,
        init: h.boolean("Init")?,
        ..ContainerSpec::default()
    };
    for kind in Namespace::ALL {
        let Some(text) = h.text(kind.docker_field())? else {
            continue;
        };
        let mode = NamespaceMode::parse(text).ok_or_else(|| {
            deny(
                Reason::Sandbox(Rule::NoHostNamespaces),
                format!("HostConfig.{kind} {text:?} is not a mode termgate sets"),
            )
        })?;
        spec.namespace_modes.insert(kind, mode);
    }
    if version.is_some_and(|v| v.minor() < 41)
        && spec
            .namespace_modes
            .get(&Namespace::Cgroup)
            .is_none_or(|m| *m == NamespaceMode::Default)
    {
        spec.namespace_modes
            .insert(Namespace::Cgroup, NamespaceMode::Host);
    }
    for (i, m) in h.array("Mounts")?.iter().enumerate() {
        spec.mounts.push(mount_from(i, m)?);
    }
    let binds = h.strings("Binds")?;
    spec.mounts
        .extend(binds.iter().map(String::as_str).map(bind_from));
    spec.devices = h.array("Devices")?.iter().map(Value::to_string).collect();
    for key in ["DeviceRequests", "DeviceCgroupRules"] {
        if !h.array(key)?.is_empty() {
            return Err(deny(
                Reason::Sandbox(Rule::NoDevices),
                format!("HostConfig.{key} must be empty"),
            ));
        }
    }
    check_tmpfs(&h.string_map("Tmpfs")?)?;

    let violations = sandbox::check(&spec);
    if let Some(first) = violations.first() {
        let all: Vec<String> = violations.iter().map(ToString::to_string).collect();
        return Err(deny(Reason::Sandbox(first.rule), all.join("; ")));
    }
    if !binds.is_empty() {
        return Err(deny(
            Reason::MountOptions,
            "HostConfig.Binds is not allowed: termgate mounts through Mounts only",
        ));
    }
    let labels = t.string_map("Labels")?;
    termgate_instance(&labels, ObjectKind::Container)?;
    Ok((spec, labels))
}

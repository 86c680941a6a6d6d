//! A [`ContainerRequest`] as the body of Docker's create call.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum, Mount, MountType,
};
use policy::sandbox::{MountKind, Namespace, NamespaceMode};

use super::types::{ContainerRequest, DockerError};

/// Docker's cgroup namespace setting for `mode` (Docker types this one field).
fn cgroupns_mode(mode: NamespaceMode) -> HostConfigCgroupnsModeEnum {
    match mode {
        NamespaceMode::Default => HostConfigCgroupnsModeEnum::EMPTY,
        NamespaceMode::Private => HostConfigCgroupnsModeEnum::PRIVATE,
        NamespaceMode::Host => HostConfigCgroupnsModeEnum::HOST,
    }
}

/// The create body for a request whose spec has already passed the red lines.
/// Fails (without any call) on what cannot be expressed safely.
pub(super) fn container_body(req: &ContainerRequest) -> Result<ContainerCreateBody, DockerError> {
    const OP: &str = "create";
    let spec = &req.spec;
    if req.tmp_size_mb == 0 {
        return Err(DockerError::Other {
            op: OP,
            message: "tmp_size_mb must be positive (size=0 would make /tmp unbounded)".into(),
        });
    }
    let mut host = HostConfig {
        cap_drop: Some(spec.cap_drop.clone()),
        cap_add: Some(spec.cap_add.clone()),
        security_opt: Some(spec.security_opt.clone()),
        privileged: Some(spec.privileged),
        readonly_rootfs: Some(spec.readonly_rootfs),
        pids_limit: spec.pids_limit,
        memory: spec.memory_bytes,
        memory_swap: spec.memory_swap_bytes,
        nano_cpus: spec.nano_cpus,
        init: Some(true),
        network_mode: Some(spec.network_mode.clone()),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_owned(),
            format!("rw,nosuid,nodev,size={}m", req.tmp_size_mb),
        )])),
        auto_remove: Some(false),
        ..Default::default()
    };
    for (kind, mode) in &spec.namespace_modes {
        let text = Some(mode.as_str().to_owned());
        match kind {
            Namespace::Pid => host.pid_mode = text,
            Namespace::Ipc => host.ipc_mode = text,
            Namespace::Userns => host.userns_mode = text,
            Namespace::Uts => host.uts_mode = text,
            Namespace::Cgroup => host.cgroupns_mode = Some(cgroupns_mode(*mode)),
        }
    }
    let mounts: Vec<Mount> = spec
        .mounts
        .iter()
        .map(|m| Mount {
            typ: Some(match m.kind {
                MountKind::Bind => MountType::BIND,
                MountKind::Volume => MountType::VOLUME,
            }),
            source: Some(m.source.clone()),
            target: Some(m.target.clone()),
            read_only: Some(m.read_only),
            ..Default::default()
        })
        .collect();
    if !mounts.is_empty() {
        host.mounts = Some(mounts);
    }
    Ok(ContainerCreateBody {
        image: Some(req.image.clone()),
        user: spec.user.clone(),
        tty: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(false),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        env: Some(req.env.clone()),
        cmd: (!req.command.is_empty()).then(|| req.command.clone()),
        labels: Some(req.labels.clone().into_iter().collect()),
        host_config: Some(host),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use policy::{ContainerSpec, MountSpec};

    use super::*;

    fn request(name: &str, instance: &str) -> ContainerRequest {
        ContainerRequest {
            name: name.to_owned(),
            image: "termgate/session:dev".to_owned(),
            command: vec![],
            env: vec!["SESSION_SHELL=sh".into()],
            labels: BTreeMap::from([
                (crate::labels::MANAGED.to_owned(), "session".to_owned()),
                (crate::labels::INSTANCE.to_owned(), instance.to_owned()),
            ]),
            spec: ContainerSpec {
                user: Some("1000:1000".into()),
                cap_drop: vec!["ALL".into()],
                security_opt: vec!["no-new-privileges:true".into()],
                network_mode: "none".into(),
                readonly_rootfs: true,
                pids_limit: Some(64),
                memory_bytes: Some(128 << 20),
                memory_swap_bytes: Some(128 << 20),
                nano_cpus: Some(500_000_000),
                tty: true,
                open_stdin: true,
                init: true,
                ..Default::default()
            },
            tmp_size_mb: 16,
        }
    }

    #[test]
    fn body_maps_the_spec_exactly_and_never_uses_binds() {
        let mut req = request("termgate-x", "i");
        req.command = vec!["-c".into(), "true".into()];
        req.spec.namespace_modes = BTreeMap::from([
            (Namespace::Pid, NamespaceMode::Private),
            (Namespace::Ipc, NamespaceMode::Private),
            (Namespace::Uts, NamespaceMode::Default),
            (Namespace::Userns, NamespaceMode::Default),
            (Namespace::Cgroup, NamespaceMode::Private),
        ]);
        req.spec.mounts = vec![
            MountSpec {
                kind: MountKind::Bind,
                source: "/srv/data".into(),
                target: "/data".into(),
                read_only: true,
            },
            MountSpec {
                kind: MountKind::Volume,
                source: "termgate-home-alice".into(),
                target: "/home/user".into(),
                read_only: false,
            },
        ];
        let body = container_body(&req).unwrap();
        assert_eq!(body.user.as_deref(), Some("1000:1000"));
        assert_eq!(body.tty, Some(true));
        assert_eq!(body.open_stdin, Some(true));
        assert_eq!(body.stdin_once, Some(false));
        assert_eq!(body.attach_stdin, Some(false));
        assert_eq!(body.attach_stdout, Some(false));
        assert_eq!(body.attach_stderr, Some(false));
        assert_eq!(body.cmd, Some(vec!["-c".to_owned(), "true".to_owned()]));
        assert_eq!(body.entrypoint, None);
        assert_eq!(body.network_disabled, None);
        let h = body.host_config.unwrap();
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(h.cap_add, Some(vec![]));
        assert_eq!(
            h.security_opt,
            Some(vec!["no-new-privileges:true".to_owned()])
        );
        assert_eq!(h.privileged, Some(false));
        assert_eq!(h.readonly_rootfs, Some(true));
        assert_eq!(h.pids_limit, Some(64));
        assert_eq!(h.memory, Some(128 << 20));
        assert_eq!(h.memory_swap, Some(128 << 20));
        assert_eq!(h.nano_cpus, Some(500_000_000));
        assert_eq!(h.init, Some(true));
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        assert_eq!(h.pid_mode.as_deref(), Some("private"));
        assert_eq!(h.ipc_mode.as_deref(), Some("private"));
        assert_eq!(h.uts_mode.as_deref(), Some(""));
        assert_eq!(h.userns_mode.as_deref(), Some(""));
        assert_eq!(h.cgroupns_mode, Some(HostConfigCgroupnsModeEnum::PRIVATE));
        assert_eq!(
            h.tmpfs,
            Some(HashMap::from([(
                "/tmp".to_owned(),
                "rw,nosuid,nodev,size=16m".to_owned()
            )]))
        );
        assert_eq!(h.binds, None);
        assert_eq!(h.devices, None);
        assert_eq!(h.restart_policy, None);
        assert_eq!(h.auto_remove, Some(false));
        assert_eq!(h.log_config, None);
        let mounts = h.mounts.unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].typ, Some(MountType::BIND));
        assert_eq!(mounts[0].source.as_deref(), Some("/srv/data"));
        assert_eq!(mounts[0].target.as_deref(), Some("/data"));
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(mounts[1].typ, Some(MountType::VOLUME));
        assert_eq!(mounts[1].source.as_deref(), Some("termgate-home-alice"));
        assert_eq!(mounts[1].read_only, Some(false));

        req.command.clear();
        assert_eq!(container_body(&req).unwrap().cmd, None);
    }

    #[test]
    fn every_cgroup_namespace_mode_has_a_docker_value() {
        assert_eq!(
            cgroupns_mode(NamespaceMode::Default),
            HostConfigCgroupnsModeEnum::EMPTY
        );
        assert_eq!(
            cgroupns_mode(NamespaceMode::Host),
            HostConfigCgroupnsModeEnum::HOST
        );
    }

    #[test]
    fn body_refuses_an_unbounded_tmp() {
        let mut req = request("termgate-x", "i");
        req.tmp_size_mb = 0;
        assert!(matches!(
            container_body(&req),
            Err(DockerError::Other { op: "create", .. })
        ));
    }
}

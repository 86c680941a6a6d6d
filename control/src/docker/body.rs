//! A session's declared create body ([`policy::declared::container_body`]) as bollard's
//! create call. The body is made by policy alone; this file only hands it to bollard,
//! and its tests hold that bollard sends it back out unchanged (dockgate compares what
//! arrives with the same function's output, field by field).

use bollard::models::ContainerCreateBody;
use serde_json::Value;

use super::types::DockerError;

/// bollard's create body for a declared `body`. Fails (without any call) when the body
/// holds what bollard cannot carry, which would reach the daemon changed.
pub(super) fn container_body(body: &Value) -> Result<ContainerCreateBody, DockerError> {
    let typed: ContainerCreateBody =
        serde_json::from_value(body.clone()).map_err(|e| DockerError::Other {
            op: "create",
            message: format!("the declared body is not a create body: {e}"),
        })?;
    let back = serde_json::to_value(&typed).map_err(|e| DockerError::Other {
        op: "create",
        message: format!("the declared body cannot be written: {e}"),
    })?;
    if let Some(d) = policy::declared::first_difference(body, &back) {
        return Err(DockerError::Other {
            op: "create",
            message: format!("bollard would change the declared body at {}", d.path),
        });
    }
    Ok(typed)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use policy::declared::{
        container_body as declared_body, DeclaredOption, DeclaredProfile, SessionFacts,
        WorkspaceMode,
    };
    use policy::{ContainerSpec, MountKind, MountSpec, Namespace, NamespaceMode, SessionId, Sub};

    use super::*;

    fn profile() -> DeclaredProfile {
        DeclaredProfile {
            image: "termgate/session:dev".into(),
            command: vec!["-c".into(), "true".into()],
            env: BTreeMap::from([("SESSION_SHELL".into(), "sh".into())]),
            options: BTreeMap::from([(
                "editor".into(),
                DeclaredOption {
                    env: "SESSION_EDITOR".into(),
                    values: vec!["vi".into()],
                },
            )]),
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
                namespace_modes: BTreeMap::from([
                    (Namespace::Pid, NamespaceMode::Private),
                    (Namespace::Ipc, NamespaceMode::Private),
                    (Namespace::Uts, NamespaceMode::Default),
                    (Namespace::Userns, NamespaceMode::Default),
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
                        source: "team".into(),
                        target: "/team".into(),
                        read_only: true,
                    },
                ],
                ..Default::default()
            },
            home: Some("/home/user".into()),
            workspace: WorkspaceMode::Home,
            tmp_size_mb: 16,
            runtime: None,
        }
    }

    fn declared(p: &DeclaredProfile) -> Value {
        let home = policy::declared::home_volume_name("prod", &Sub::parse("alice").unwrap());
        let workspace = match p.workspace {
            WorkspaceMode::None => None,
            WorkspaceMode::Home => Some(home.as_str()),
            WorkspaceMode::Choose => Some(""),
        };
        declared_with(p, workspace)
    }

    fn declared_with(p: &DeclaredProfile, workspace: Option<&str>) -> Value {
        let id = SessionId::parse("abcdefghijk234mn").unwrap();
        let owner = Sub::parse("alice").unwrap();
        let options = BTreeMap::from([("editor".to_owned(), "vi".to_owned())]);
        declared_body(
            p,
            &SessionFacts {
                instance: "prod",
                host: "local",
                session: &id,
                owner: &owner,
                profile: "default",
                name: "box",
                created: 1,
                options: &options,
                workspace,
                workspace_read_only: false,
            },
        )
        .unwrap()
    }

    #[test]
    fn bollard_sends_the_declared_body_unchanged() {
        let mut p = profile();
        let body = declared(&p);
        let typed = container_body(&body).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), body);
        let h = typed.host_config.unwrap();
        assert_eq!(h.binds, None, "never legacy Binds");
        assert_eq!(h.mounts.unwrap().len(), 3);
        // Without a command, mounts or namespaces set: still unchanged.
        p.command.clear();
        p.spec.mounts.clear();
        p.home = None;
        p.workspace = WorkspaceMode::None;
        p.spec.namespace_modes = BTreeMap::from([(Namespace::Cgroup, NamespaceMode::Private)]);
        let body = declared(&p);
        assert_eq!(body.get("Cmd"), None);
        let typed = container_body(&body).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), body);
    }

    #[test]
    fn bollard_sends_workspaces_and_copy_jobs_unchanged() {
        let mut p = profile();
        p.workspace = WorkspaceMode::Choose;
        // An ephemeral workspace: a volume mount without a source.
        let body = declared_with(&p, Some(""));
        let typed = container_body(&body).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), body);
        let chosen = declared_with(&p, Some("termgate-ws-prod-abcdefghijk234mn"));
        let typed = container_body(&chosen).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), chosen);
        let owner = Sub::parse("alice").unwrap();
        let job = policy::declared::copy_job_body(
            &p,
            &policy::declared::CopyFacts {
                instance: "prod",
                host: "local",
                owner: &owner,
                profile: "default",
                source: "termgate-ws-prod-abcdefghijk234mn",
                dest: "termgate-ws-prod-bbcdefghijk234mn",
            },
        )
        .unwrap();
        assert!(job.get("Entrypoint").is_some());
        let typed = container_body(&job).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), job);
    }

    #[test]
    fn a_field_bollard_would_drop_is_an_error_before_any_call() {
        let mut body = declared(&profile());
        body["HostConfig"]["NoSuchField"] = serde_json::json!(true);
        assert!(matches!(
            container_body(&body),
            Err(DockerError::Other { op: "create", .. })
        ));
    }
}

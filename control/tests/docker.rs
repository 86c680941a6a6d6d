//! `control::docker` against the local Docker daemon, with the image
//! `termgate/session:dev`. Every test names its containers and volumes with a random
//! suffix and removes them when it ends, passed or not.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use control::docker::{ContainerRequest, ContainerState, Docker, DockerError, EventAction};
use control::labels;
use futures_util::StreamExt;
use std::collections::BTreeMap;

use policy::declared::{DeclaredProfile, SessionFacts};
use policy::{ContainerSpec, MountKind, MountSpec, Namespace, NamespaceMode, SessionId, Sub};

const IMAGE: &str = "termgate/session:dev";
const TIMEOUT: Duration = Duration::from_secs(30);

fn random_suffix() -> String {
    let mut b = [0u8; 6];
    getrandom::getrandom(&mut b).expect("random bytes");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn docker_cli(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("run the docker CLI")
}

/// Removes the containers and volumes it names when dropped, test failed or not.
#[derive(Default)]
struct Cleanup {
    containers: Vec<String>,
    volumes: Vec<String>,
}

impl Cleanup {
    fn container(&mut self, name: &str) -> String {
        self.containers.push(name.to_owned());
        name.to_owned()
    }
    fn volume(&mut self, name: &str) -> String {
        self.volumes.push(name.to_owned());
        name.to_owned()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = Command::new("docker").args(["rm", "-f", "-v", c]).output();
        }
        for v in &self.volumes {
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f", v])
                .output();
        }
    }
}

fn hardened() -> ContainerSpec {
    ContainerSpec {
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
        namespace_modes: BTreeMap::from([(Namespace::Cgroup, NamespaceMode::Private)]),
        ..Default::default()
    }
}

/// A session container to create: its name, instance, command and sandbox, made into
/// the declared body control sends by [`Req::build`].
struct Req {
    name: String,
    instance: String,
    command: Vec<String>,
    spec: ContainerSpec,
}

impl Req {
    fn build(&self) -> ContainerRequest {
        let profile = DeclaredProfile {
            image: IMAGE.to_owned(),
            command: self.command.clone(),
            env: BTreeMap::from([("SESSION_SHELL".to_owned(), "sh".to_owned())]),
            options: BTreeMap::new(),
            spec: self.spec.clone(),
            home: None,
            workspace: policy::declared::WorkspaceMode::None,
            tmp_size_mb: 16,
            runtime: None,
        };
        let id = SessionId::from_random([9; 10]);
        let owner = sub("alice");
        let options = BTreeMap::new();
        let body = policy::declared::container_body(
            &profile,
            &SessionFacts {
                instance: &self.instance,
                host: "local",
                session: &id,
                owner: &owner,
                profile: "test",
                name: "test",
                created: 1,
                options: &options,
                workspace: None,
                workspace_read_only: false,
            },
        )
        .expect("a declared body");
        ContainerRequest {
            name: self.name.clone(),
            body,
            spec: self.spec.clone(),
        }
    }
}

fn request(name: &str, instance: &str) -> Req {
    Req {
        name: name.to_owned(),
        instance: instance.to_owned(),
        command: vec![],
        spec: hardened(),
    }
}

/// A fresh container name and instance label, both registered for cleanup.
fn names(cleanup: &mut Cleanup) -> (String, String) {
    let r = random_suffix();
    (
        cleanup.container(&format!("termgate-test-{r}")),
        format!("test-{r}"),
    )
}

async fn docker() -> Docker {
    Docker::connect(None, TIMEOUT)
        .await
        .expect("connect to the local docker daemon")
}

fn exec(id: &str, script: &str) -> Output {
    docker_cli(&["exec", id, "sh", "-c", script])
}

async fn wait_for_state(d: &Docker, id: &str, state: ContainerState) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = d.inspect(id).await.unwrap().expect("container exists");
        if s.state == state {
            return;
        }
        assert!(Instant::now() < deadline, "{id} stuck in {:?}", s.state);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn sub(s: &str) -> Sub {
    Sub::parse(s).expect("valid sub")
}

#[tokio::test]
async fn connect_negotiates_the_daemons_api_version() {
    let d = docker().await;
    let out = docker_cli(&["version", "--format", "{{.Server.APIVersion}}"]);
    assert!(out.status.success(), "{out:?}");
    let server = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (maj, min) = server.split_once('.').expect("major.minor");
    let server = bollard::ClientVersion {
        major_version: maj.parse().unwrap(),
        minor_version: min.parse().unwrap(),
    };
    let client = d.api_version();
    assert!(client <= server, "client {client} > server {server}");
    assert!(client <= *bollard::API_DEFAULT_VERSION);
    d.ping().await.unwrap();
}

#[tokio::test]
async fn seccomp_support_matches_docker_info() {
    let d = docker().await;
    let out = docker_cli(&["info", "--format", "{{json .SecurityOptions}}"]);
    let cli = String::from_utf8_lossy(&out.stdout).contains("name=seccomp");
    assert_eq!(d.seccomp_supported().await.unwrap(), cli);
}

#[tokio::test]
async fn create_and_start_apply_the_hardened_host_config() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let d = docker().await;
    let id = d.create(&request(&name, &instance).build()).await.unwrap();
    d.start(&id).await.unwrap();
    wait_for_state(&d, &id, ContainerState::Running).await;

    let status = d.inspect(&name).await.unwrap().unwrap();
    assert_eq!(status.id, id);
    assert_eq!(status.name, name);
    assert_eq!(status.labels.get(labels::INSTANCE), Some(&instance));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (status.created - now).abs() < 300,
        "created {}",
        status.created
    );

    let out = docker_cli(&["inspect", &id]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v[0];
    let h = &c["HostConfig"];
    assert_eq!(h["CapDrop"], serde_json::json!(["ALL"]));
    assert!(h["CapAdd"].is_null() || h["CapAdd"] == serde_json::json!([]));
    assert_eq!(
        h["SecurityOpt"],
        serde_json::json!(["no-new-privileges:true"])
    );
    assert_eq!(h["Privileged"], false);
    assert_eq!(h["ReadonlyRootfs"], true);
    assert_eq!(h["PidsLimit"], 64);
    assert_eq!(h["Memory"], 128 << 20);
    assert_eq!(h["MemorySwap"], h["Memory"]);
    assert_eq!(h["NanoCpus"], 500_000_000);
    assert_eq!(h["NetworkMode"], "none");
    assert_eq!(h["Init"], true);
    assert!(h["Binds"].is_null(), "Binds: {}", h["Binds"]);
    assert!(h["Devices"].is_null() || h["Devices"] == serde_json::json!([]));
    assert_eq!(h["Tmpfs"]["/tmp"], "rw,nosuid,nodev,size=16m");
    assert_eq!(h["AutoRemove"], false);
    assert_eq!(h["RestartPolicy"]["Name"], "");
    assert_eq!(c["Config"]["Tty"], true);
    assert_eq!(c["Config"]["OpenStdin"], true);
    assert_eq!(c["Config"]["StdinOnce"], false);
    assert_eq!(c["Config"]["User"], "1000:1000");

    let status = exec(
        &id,
        r#"grep -E "^(CapEff|CapBnd|NoNewPrivs):" /proc/1/status /proc/self/status"#,
    );
    assert!(status.status.success(), "{status:?}");
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(
        text.matches("CapEff:\t0000000000000000").count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.matches("CapBnd:\t0000000000000000").count(),
        2,
        "{text}"
    );
    assert_eq!(text.matches("NoNewPrivs:\t1").count(), 2, "{text}");
    assert!(
        !exec(&id, "touch /x").status.success(),
        "root fs is writable"
    );
    assert!(
        exec(&id, "touch /tmp/x && rm /tmp/x").status.success(),
        "/tmp is not writable"
    );
    let tmp = exec(&id, "grep ' /tmp ' /proc/mounts");
    let tmp = String::from_utf8_lossy(&tmp.stdout);
    assert!(tmp.starts_with("tmpfs /tmp tmpfs rw,nosuid,nodev"), "{tmp}");
    assert!(exec(
        &id,
        "test ! -e /var/run/docker.sock && test ! -e /run/docker.sock"
    )
    .status
    .success());
    let id_out = exec(&id, "id -u; id -g");
    assert_eq!(String::from_utf8_lossy(&id_out.stdout), "1000\n1000\n");

    d.remove(&id).await.unwrap();
    assert_eq!(d.inspect(&id).await.unwrap(), None);
}

#[tokio::test]
async fn mounts_reach_the_container_as_typed_mounts() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let volume = cleanup.volume(&format!("termgate-test-home-{}", random_suffix()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "hello").unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let d = docker().await;
    let alice = sub("alice");
    d.ensure_home_volume(&volume, &alice, &instance)
        .await
        .unwrap();
    let mut req = request(&name, &instance);
    req.spec.mounts = vec![
        MountSpec {
            kind: MountKind::Bind,
            source: dir.path().to_str().unwrap().to_owned(),
            target: "/data".into(),
            read_only: true,
        },
        MountSpec {
            kind: MountKind::Volume,
            source: volume.clone(),
            target: "/home/user".into(),
            read_only: false,
        },
    ];
    let id = d.create(&req.build()).await.unwrap();
    d.start(&id).await.unwrap();
    wait_for_state(&d, &id, ContainerState::Running).await;
    let out = docker_cli(&["inspect", &id]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v[0]["HostConfig"]["Binds"].is_null());
    let mounts = v[0]["HostConfig"]["Mounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 2);
    assert_eq!(mounts[0]["Type"], "bind");
    assert_eq!(mounts[0]["ReadOnly"], true);
    assert_eq!(mounts[1]["Type"], "volume");
    assert_eq!(mounts[1]["Source"], volume.as_str());
    let cat = exec(&id, "cat /data/f");
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "hello");
    assert!(
        !exec(&id, "touch /data/g").status.success(),
        "bind is writable"
    );
    d.remove(&id).await.unwrap();
}

#[tokio::test]
async fn privileged_spec_is_refused_and_leaves_no_container() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let mut req = request(&name, &instance);
    req.spec.privileged = true;
    let d = docker().await;
    assert!(matches!(
        d.create(&req.build()).await,
        Err(DockerError::Refused(_))
    ));
    assert_eq!(d.inspect(&name).await.unwrap(), None);
}

#[tokio::test]
async fn missing_bind_source_fails_and_leaves_no_container() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let missing = format!("/nonexistent-termgate-{}", random_suffix());
    let mut req = request(&name, &instance);
    req.spec.mounts.push(MountSpec {
        kind: MountKind::Bind,
        source: missing.clone(),
        target: "/data".into(),
        read_only: true,
    });
    let d = docker().await;
    let err = d.create(&req.build()).await.unwrap_err();
    assert!(
        matches!(err, DockerError::Other { op: "create", .. }),
        "{err:?}"
    );
    assert_eq!(d.inspect(&name).await.unwrap(), None);
    assert!(!std::path::Path::new(&missing).exists());
}

#[tokio::test]
async fn create_with_a_name_in_use_is_conflict() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let d = docker().await;
    d.create(&request(&name, &instance).build()).await.unwrap();
    let err = d
        .create(&request(&name, &instance).build())
        .await
        .unwrap_err();
    assert!(matches!(err, DockerError::Conflict(_)), "{err:?}");
    d.remove(&name).await.unwrap();
}

#[tokio::test]
async fn list_managed_returns_only_containers_of_its_instance() {
    let mut cleanup = Cleanup::default();
    let (mine, instance) = names(&mut cleanup);
    let (theirs, other_instance) = names(&mut cleanup);
    let (unlabelled, _) = names(&mut cleanup);
    let d = docker().await;
    let id = d.create(&request(&mine, &instance).build()).await.unwrap();
    d.create(&request(&theirs, &other_instance).build())
        .await
        .unwrap();
    let out = docker_cli(&[
        "run",
        "-d",
        "--name",
        &unlabelled,
        "--network",
        "none",
        "--entrypoint",
        "/bin/sleep",
        IMAGE,
        "60",
    ]);
    assert!(out.status.success(), "{out:?}");
    // Same instance label but not a session container.
    let (home_like, _) = names(&mut cleanup);
    let label = labels::instance_filter(&instance);
    let out = docker_cli(&[
        "create",
        "--name",
        &home_like,
        "--label",
        &label,
        "--label",
        "termgate.managed=other",
        IMAGE,
    ]);
    assert!(out.status.success(), "{out:?}");

    let list = d.list_managed(&instance).await.unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0].id, id);
    assert_eq!(list[0].name, mine);
    assert_eq!(list[0].state, ContainerState::Created);
    assert!(list[0].created > 0);
    assert_eq!(
        list[0].labels.get(labels::MANAGED).map(String::as_str),
        Some("session")
    );
    assert!(d
        .list_managed(&format!("test-{}", random_suffix()))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn remove_is_idempotent() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let d = docker().await;
    let id = d.create(&request(&name, &instance).build()).await.unwrap();
    d.start(&id).await.unwrap();
    d.remove(&id).await.unwrap();
    d.remove(&id).await.unwrap();
    d.remove(&name).await.unwrap();
    assert_eq!(d.inspect(&name).await.unwrap(), None);
}

#[tokio::test]
async fn hang_up_on_an_exited_created_or_missing_container_is_ok() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let d = docker().await;
    let mut req = request(&name, &instance);
    req.command = vec!["-c".into(), "exit 3".into()];
    let id = d.create(&req.build()).await.unwrap();
    d.hang_up(&id).await.unwrap(); // never started
    assert!(d.wait_exit(&id, Duration::ZERO).await.is_ok());
    d.start(&id).await.unwrap();
    wait_for_state(&d, &id, ContainerState::Exited).await;
    d.hang_up(&id).await.unwrap();
    assert!(d.wait_exit(&id, Duration::from_secs(1)).await.unwrap());
    d.remove(&id).await.unwrap();
    d.hang_up(&id).await.unwrap(); // gone
    assert!(d.wait_exit(&id, Duration::from_secs(1)).await.unwrap());
}

#[tokio::test]
async fn a_hang_up_ends_the_session_shell_that_ignores_sigterm() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let d = docker().await;
    let id = d.create(&request(&name, &instance).build()).await.unwrap();
    d.start(&id).await.unwrap();
    wait_for_state(&d, &id, ContainerState::Running).await;
    // An interactive shell ignores SIGTERM (what `docker stop` sends first) ...
    docker_cli(&["kill", "--signal", "TERM", &id]);
    assert!(
        !d.wait_exit(&id, Duration::from_millis(500)).await.unwrap(),
        "the shell ignores SIGTERM"
    );
    // ... and ends on the hang-up, which the container's init forwards to it.
    let hung_up = Instant::now();
    d.hang_up(&id).await.unwrap();
    assert!(
        d.wait_exit(&id, Duration::from_secs(5)).await.unwrap(),
        "the shell ends on SIGHUP"
    );
    let s = d.inspect(&id).await.unwrap().unwrap();
    assert_eq!(s.state, ContainerState::Exited);
    assert_eq!(s.exit_code, Some(128 + 1), "ended by SIGHUP");
    eprintln!("hang-up → exited: {:?}", hung_up.elapsed());
}

#[tokio::test]
async fn wait_exit_gives_up_at_its_bound_on_a_program_that_ignores_the_hang_up() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let d = docker().await;
    let mut req = request(&name, &instance);
    req.command = vec![
        "-c".into(),
        "trap '' HUP; echo trapped; while :; do sleep 1; done".into(),
    ];
    let id = d.create(&req.build()).await.unwrap();
    d.start(&id).await.unwrap();
    wait_for_state(&d, &id, ContainerState::Running).await;
    // Running is reported before the shell has read its first line: the hang-up must
    // not arrive before the trap is set.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&docker_cli(&["logs", &id]).stdout).contains("trapped") {
        assert!(Instant::now() < deadline, "the shell never set its trap");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    d.hang_up(&id).await.unwrap();
    let waited = Instant::now();
    assert!(!d.wait_exit(&id, Duration::from_millis(700)).await.unwrap());
    let took = waited.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(2),
        "wait_exit took {took:?} for a 700 ms bound"
    );
    d.remove(&id).await.unwrap();
    assert_eq!(d.inspect(&id).await.unwrap(), None, "removed by force");
}

#[tokio::test]
async fn ensure_home_volume_creates_accepts_and_refuses_foreign_volumes() {
    let mut cleanup = Cleanup::default();
    let instance = format!("test-{}", random_suffix());
    let ours = cleanup.volume(&format!("termgate-test-home-{}", random_suffix()));
    let foreign = cleanup.volume(&format!("termgate-test-home-{}", random_suffix()));
    let d = docker().await;
    let alice = sub("alice");

    d.ensure_home_volume(&ours, &alice, &instance)
        .await
        .unwrap();
    let out = docker_cli(&["volume", "inspect", &ours]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v[0]["Labels"],
        serde_json::json!({
            "termgate.managed": "home",
            "termgate.owner": "alice",
            "termgate.instance": instance,
        })
    );
    d.ensure_home_volume(&ours, &alice, &instance)
        .await
        .unwrap();
    for (owner, inst) in [
        (sub("bob"), instance.as_str()),
        (alice.clone(), "test-other"),
    ] {
        let err = d.ensure_home_volume(&ours, &owner, inst).await.unwrap_err();
        assert!(matches!(err, DockerError::Conflict(_)), "{err:?}");
    }

    let out = docker_cli(&["volume", "create", &foreign]);
    assert!(out.status.success(), "{out:?}");
    let err = d
        .ensure_home_volume(&foreign, &alice, &instance)
        .await
        .unwrap_err();
    assert!(matches!(err, DockerError::Conflict(_)), "{err:?}");
    let out = docker_cli(&[
        "volume",
        "inspect",
        "--format",
        "{{json .Labels}}",
        &foreign,
    ]);
    let labels = String::from_utf8_lossy(&out.stdout);
    assert!(
        !labels.contains("termgate"),
        "foreign volume was relabelled: {labels}"
    );
}

#[tokio::test]
async fn events_report_die_of_a_killed_container() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let (other, other_instance) = names(&mut cleanup);
    let d = docker().await;
    let mut events = Box::pin(d.events(&instance));
    let id = d.create(&request(&name, &instance).build()).await.unwrap();
    let other_id = d
        .create(&request(&other, &other_instance).build())
        .await
        .unwrap();
    d.start(&id).await.unwrap();
    d.start(&other_id).await.unwrap();
    wait_for_state(&d, &id, ContainerState::Running).await;
    // The stream is first polled after the kills: it still sees them, because it
    // asks for events since the moment `events` was called.
    assert!(docker_cli(&["kill", &other_id]).status.success());
    assert!(docker_cli(&["kill", &id]).status.success());
    let event = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("a die event within 5 s")
        .expect("stream open")
        .expect("event");
    assert_eq!(event.id, id);
    assert_eq!(event.action, EventAction::Die);
    assert_eq!(event.labels.get(labels::INSTANCE), Some(&instance));
    d.remove(&id).await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("a destroy event within 5 s")
        .expect("stream open")
        .expect("event");
    assert_eq!(
        (event.id.as_str(), event.action),
        (id.as_str(), EventAction::Destroy)
    );
}

#[tokio::test]
async fn resize_on_a_running_container_succeeds() {
    let mut cleanup = Cleanup::default();
    let (name, instance) = names(&mut cleanup);
    let d = docker().await;
    let id = d.create(&request(&name, &instance).build()).await.unwrap();
    d.start(&id).await.unwrap();
    wait_for_state(&d, &id, ContainerState::Running).await;
    d.resize(&id, 132, 43).await.unwrap();
    assert!(matches!(
        d.resize(&format!("termgate-test-{}", random_suffix()), 80, 24)
            .await,
        Err(DockerError::NotFound)
    ));
}

//! dockgate in front of the real Docker daemon, driven as a compromised control and a
//! compromised ttyd pool would drive it: raw requests on its sockets and the Docker
//! CLI. What each role does passes; everything else is refused with `403` naming the
//! rule, and the daemon shows that it never happened. (Every other suite runs its
//! sessions through dockgate too: see `e2e::dockgate`.)

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use e2e::dockgate::{DeclaredGate, Dockgate};
use e2e::pki::{self, Leaf, Pki};
use e2e::random_hex;
use e2e::raw::{exchange_unix, RawAnswer};
use e2e::stack::{docker, free_port, wait_for, ControlStack};
use e2e::term::Target;
use e2e::ttyd::{CountingProxy, SessionContainer};
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(10);

fn image() -> String {
    std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into())
}

fn with(mut body: Value, path: &[&str], value: Value) -> Value {
    let (last, parents) = path.split_last().expect("a path");
    let mut at = &mut body;
    for p in parents {
        at = &mut at[*p];
    }
    at[*last] = value;
    body
}

/// One raw request on `socket`; `body` goes with `Content-Length` and JSON's type.
fn send(socket: &Path, method: &str, target: &str, body: Option<&[u8]>) -> RawAnswer {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n");
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    exchange_unix(socket, &bytes, DEADLINE)
}

fn create(socket: &Path, name: &str, body: &Value) -> RawAnswer {
    let bytes = body.to_string().into_bytes();
    send(
        socket,
        "POST",
        &format!("/v1.41/containers/create?name={name}"),
        Some(&bytes),
    )
}

/// The JSON body of an answer.
fn json_of(a: &RawAnswer) -> Value {
    let body = a.text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let start = body.find('{').unwrap_or(0);
    let end = body.rfind('}').map_or(body.len(), |e| e + 1);
    serde_json::from_str(&body[start..end]).unwrap_or(Value::Null)
}

/// `403` naming `rule`, with the reason where the Docker CLI shows it.
fn assert_refused(a: &RawAnswer, rule: &str, what: &str) {
    assert_eq!(a.status, 403, "{what}: {}", a.text);
    assert_eq!(a.code().as_deref(), Some(rule), "{what}: {}", a.text);
    let message = json_of(a)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.starts_with("dockgate: "), "{what}: {}", a.text);
}

fn container_exists(name: &str) -> bool {
    !docker(&["ps", "-aq", "--filter", &format!("name=^{name}$")]).is_empty()
}

/// The Docker CLI against `host` (`unix://…`): status, stdout and stderr.
fn cli(host: &str, args: &[&str]) -> (bool, String) {
    let o = Command::new("docker")
        .args(args)
        .env("DOCKER_HOST", host)
        .output()
        .expect("docker CLI");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

/// Sends `request` on a fresh connection to `socket` and reads everything until the
/// other side closes (or 10 s pass): every answer the bytes produced, not the first.
fn read_to_end_unix(socket: &Path, request: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    s.write_all(request).expect("write");
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

/// A fresh session id.
fn session_id() -> String {
    let hex = random_hex(10);
    let mut random = [0u8; 10];
    for (i, b) in random.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).expect("hex");
    }
    policy::SessionId::from_random(random).to_string()
}

/// Removes a volume when the test ends, whatever happened.
struct VolumeCleanup(String);

impl Drop for VolumeCleanup {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &self.0])
            .output();
    }
}

/// Removes containers by name when the test ends, whatever happened.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for name in &self.0 {
            // `-v`: an ephemeral workspace's anonymous volume goes with it.
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v", name])
                .output();
        }
    }
}

#[test]
fn a_compromised_control_gets_only_what_control_does() {
    let instance = format!("dg{}", random_hex(4));
    let declared = DeclaredGate::start(&instance, "");
    let gate = &declared.gate;
    let socket = gate.socket("control");
    let mut names = Cleanup(Vec::new());
    let mut fresh = || {
        let n = session_id();
        names.0.push(format!("termgate-{n}"));
        n
    };
    let (home, home_body) = declared.home_body("alice");
    let _home = VolumeCleanup(home.clone());

    // What control does passes: the owner's home volume, the create the configuration
    // declares, start, inspect, kill, remove.
    let made = send(
        &socket,
        "POST",
        "/volumes/create",
        Some(home_body.to_string().as_bytes()),
    );
    assert_eq!(
        made.status, 201,
        "control's home volume passes: {}",
        made.text
    );
    let session = fresh();
    let (name, body) = declared.session_body("default", &session, "alice");
    let made = create(&socket, &name, &body);
    assert_eq!(made.status, 201, "control's create passes: {}", made.text);
    let id = json_of(&made)["Id"].as_str().expect("an id").to_owned();
    let started = send(&socket, "POST", &format!("/containers/{id}/start"), None);
    assert_eq!(started.status, 204, "{}", started.text);
    let seen = send(
        &socket,
        "GET",
        &format!("/v1.41/containers/{name}/json"),
        None,
    );
    assert_eq!(seen.status, 200, "{}", seen.text);
    let hung_up = send(
        &socket,
        "POST",
        &format!("/containers/{id}/kill?signal=SIGHUP"),
        None,
    );
    assert_eq!(hung_up.status, 204, "{}", hung_up.text);

    // Every red line in a create body is refused by its rule; Docker never saw it.
    // Bodies for a session that is never made: each one below differs from its
    // declared body in one place.
    let probe = fresh();
    let b = || declared.session_body("default", &probe, "alice").1;
    let probe_name = format!("termgate-{probe}");
    let hc = |k: &str, v: Value| with(b(), &["HostConfig", k], v);
    let bind =
        |src: &str| json!([{"Type": "bind", "Source": src, "Target": "/x", "ReadOnly": true}]);
    let red_lines = [
        (
            "privileged",
            hc("Privileged", json!(true)),
            "not_privileged",
        ),
        (
            "a capability added",
            hc("CapAdd", json!(["SYS_ADMIN"])),
            "cap_drop_all",
        ),
        (
            "the daemon socket",
            hc("Mounts", bind("/var/run/docker.sock")),
            "no_daemon_socket",
        ),
        (
            "the host's root",
            hc("Mounts", bind("/")),
            "no_daemon_socket",
        ),
        (
            "legacy Binds",
            hc("Binds", json!(["/:/host"])),
            "no_daemon_socket",
        ),
        (
            "host network",
            hc("NetworkMode", json!("host")),
            "no_host_namespaces",
        ),
        (
            "host PID namespace",
            hc("PidMode", json!("host")),
            "no_host_namespaces",
        ),
        (
            "seccomp unconfined",
            hc(
                "SecurityOpt",
                json!(["no-new-privileges:true", "seccomp=unconfined"]),
            ),
            "no_unconfined_profiles",
        ),
        (
            "a device",
            hc(
                "Devices",
                json!([{"PathOnHost": "/dev/sda", "PathInContainer": "/dev/sda", "CgroupPermissions": "rwm"}]),
            ),
            "no_devices",
        ),
        (
            "a writable root",
            hc("ReadonlyRootfs", json!(false)),
            "readonly_rootfs",
        ),
        ("uid 0", with(b(), &["User"], json!("0")), "non_root_user"),
        (
            "another deployment's labels",
            with(b(), &["Labels", "termgate.instance"], json!("someone-else")),
            "not_declared",
        ),
        (
            "no cgroup namespace of its own",
            hc("CgroupnsMode", json!("")),
            "no_host_namespaces",
        ),
    ];
    for (what, body, rule) in red_lines {
        assert_refused(&create(&socket, &probe_name, &body), rule, what);
        assert!(!container_exists(&probe_name), "{what}: Docker made it");
    }

    // What passes every red line but is not what the configuration declares: the
    // review's bodies. Each is refused naming the field, and Docker never saw it.
    let docker_gid = std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|g| {
            g.lines()
                .find(|l| l.starts_with("docker:"))
                .and_then(|l| l.split(':').nth(2).map(str::to_owned))
        })
        .unwrap_or_else(|| "998".into());
    let bridge_prefix: String = docker(&["network", "inspect", "-f", "{{.Id}}", "bridge"])
        .chars()
        .take(12)
        .collect();
    let mut proc_root = b();
    proc_root["HostConfig"]["Mounts"]
        .as_array_mut()
        .expect("the home mount")
        .push(json!({"Type": "bind", "Source": "/proc/self/root", "Target": "/hostroot", "ReadOnly": true}));
    let undeclared = [
        (
            "/proc/self/root bound read-only",
            proc_root,
            "HostConfig.Mounts[1]",
        ),
        (
            "the docker group",
            with(b(), &["User"], json!(format!("1000:{docker_gid}"))),
            "User",
        ),
        (
            "the disk group",
            with(b(), &["User"], json!("1000:6")),
            "User",
        ),
        (
            "an allow-all seccomp profile",
            hc(
                "SecurityOpt",
                json!([
                    "no-new-privileges:true",
                    "seccomp={\"defaultAction\":\"SCMP_ACT_ALLOW\"}"
                ]),
            ),
            "HostConfig.SecurityOpt[1]",
        ),
        (
            "an SELinux type",
            hc(
                "SecurityOpt",
                json!(["no-new-privileges:true", "label=type:spc_t"]),
            ),
            "HostConfig.SecurityOpt[1]",
        ),
        (
            "the bridge by an id prefix",
            hc("NetworkMode", json!(bridge_prefix)),
            "HostConfig.NetworkMode",
        ),
        // The default profile lets the user choose the workspace: the body is declared
        // for bob as well, and alice's home is not one of bob's volumes.
        (
            "another user's home",
            with(b(), &["Labels", "termgate.owner"], json!("bob")),
            "not the home volume, a workspace or a shared workspace of bob",
        ),
        (
            "a profile not in the configuration",
            with(b(), &["Labels", "termgate.profile"], json!("root")),
            "termgate.profile",
        ),
        (
            "another image",
            with(b(), &["Image"], json!("busybox:latest")),
            "Image",
        ),
        // The daemon's runtimes are its own: a profile names one, or none passes.
        (
            "another OCI runtime",
            hc("Runtime", json!("runsc")),
            "HostConfig.Runtime",
        ),
        (
            "the default runtime, spelled out",
            hc("Runtime", json!("runc")),
            "HostConfig.Runtime",
        ),
    ];
    for (what, body, field) in undeclared {
        let a = create(&socket, &probe_name, &body);
        assert_refused(&a, "not_declared", what);
        let message = json_of(&a)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(field), "{what}: names {field}: {message}");
        assert!(!container_exists(&probe_name), "{what}: Docker made it");
    }
    // Under another name than the session's.
    let a = create(&socket, "termgate-other", &b());
    assert_refused(&a, "not_declared", "another container name");

    // The privileged create sent chunked, and behind `Content-Length: 0`.
    let privileged = hc("Privileged", json!(true)).to_string();
    let name = probe_name.clone();
    let chunked = format!(
        "POST /containers/create?name={name} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{privileged}\r\n0\r\n\r\n",
        privileged.len()
    );
    let a = exchange_unix(&socket, chunked.as_bytes(), DEADLINE);
    assert_refused(&a, "body_chunked", "a chunked create");
    let smuggled = format!(
        "POST /containers/create?name={name} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n{privileged}"
    );
    let a = exchange_unix(&socket, smuggled.as_bytes(), DEADLINE);
    assert_refused(&a, "body_required", "a create with Content-Length: 0");
    // What followed is no request at all: everything the connection carries, read to
    // its end, is the refusal and at most a 400, never a second answer from Docker.
    let all = read_to_end_unix(&socket, smuggled.as_bytes());
    assert!(all.contains("403 Forbidden"), "{all}");
    assert!(
        !all.contains("201 Created") && !all.contains("\"Id\""),
        "a second answer: {all}"
    );
    assert!(!container_exists(&name), "a smuggled body made {name}");

    // No exec, image pull, build, swarm, bind-backed volume or system call.
    let refused = [
        (
            "POST",
            format!("/containers/{id}/exec"),
            "endpoint_not_allowed",
        ),
        (
            "POST",
            "/images/create?fromImage=alpine&tag=latest".to_owned(),
            "endpoint_not_allowed",
        ),
        ("POST", "/build?t=evil".to_owned(), "endpoint_not_allowed"),
        ("POST", "/swarm/init".to_owned(), "endpoint_not_allowed"),
        (
            "POST",
            "/containers/prune".to_owned(),
            "endpoint_not_allowed",
        ),
        (
            "GET",
            "/containers/json?all=1".to_owned(),
            "filter_required",
        ),
        (
            "POST",
            format!("/containers/{id}/stop"),
            "endpoint_not_allowed",
        ),
        (
            "GET",
            format!("/containers/{id}/archive?path=/etc"),
            "endpoint_not_allowed",
        ),
    ];
    for (method, target, rule) in &refused {
        let a = send(&socket, method, target, Some(b"{}"));
        let what = format!("{method} {target}");
        assert_eq!(a.status, 403, "{what}: {}", a.text);
        assert!(a.code().is_some(), "{what}: {}", a.text);
        let bare = send(&socket, method, target, None);
        assert_refused(&bare, rule, &what);
    }
    let volume = format!("termgate-dg-{}", random_hex(5));
    let bind_volume = json!({
        "Name": volume,
        "Driver": "local",
        "DriverOpts": {"type": "none", "o": "bind", "device": "/"},
        "Labels": {"termgate.managed": "home", "termgate.instance": instance}
    })
    .to_string();
    let a = send(
        &socket,
        "POST",
        "/volumes/create",
        Some(bind_volume.as_bytes()),
    );
    assert_refused(&a, "volume_driver", "a volume backed by a host path");
    let volumes = docker(&["volume", "ls", "-q", "--filter", &format!("name={volume}")]);
    assert!(volumes.is_empty(), "Docker made the volume: {volumes}");
    // A volume made outside termgate over a host path does not slip in by name.
    let host_path = format!("termgate-dg-{}", random_hex(5));
    docker(&[
        "volume",
        "create",
        "--driver",
        "local",
        "--opt",
        "type=none",
        "--opt",
        "o=bind",
        "--opt",
        "device=/",
        &host_path,
    ]);
    let mount =
        json!([{"Type": "volume", "Source": host_path, "Target": "/home/user", "ReadOnly": false}]);
    let a = create(&socket, &probe_name, &hc("Mounts", mount));
    let _ = Command::new("docker")
        .args(["volume", "rm", &host_path])
        .output();
    assert_refused(&a, "not_declared", "a bind-backed volume mounted by name");
    assert!(!container_exists(&probe_name), "Docker made it");
    // Even a plain volume that is not the owner's home is not declared.
    let plain = format!("termgate-dg-{}", random_hex(5));
    let mount =
        json!([{"Type": "volume", "Source": plain, "Target": "/home/user", "ReadOnly": false}]);
    let a = create(&socket, &probe_name, &hc("Mounts", mount));
    assert_refused(&a, "not_declared", "a plain volume that is not the home");
    // A home volume named for its owner but made outside termgate (no labels).
    let (bob_home, _) = declared.home_body("bob");
    let _bob = VolumeCleanup(bob_home.clone());
    docker(&["volume", "create", &bob_home]);
    let (bob_name, bob_body) = declared.session_body("default", &fresh(), "bob");
    let a = create(&socket, &bob_name, &bob_body);
    assert_refused(&a, "not_declared", "a home volume termgate did not make");
    assert!(!container_exists(&bob_name));
    // A volume create that is not the owner's home volume body.
    let other = json!({"Name": "team-data", "Labels": {"termgate.managed": "home", "termgate.instance": instance, "termgate.owner": "alice"}});
    let a = send(
        &socket,
        "POST",
        "/volumes/create",
        Some(other.to_string().as_bytes()),
    );
    assert_refused(&a, "not_declared", "a volume under another name");

    let swarm = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"]);
    assert_eq!(swarm, "inactive");

    // Another deployment's or an unlabelled container: not control's to touch.
    let stranger = SessionContainer::start();
    let a = send(
        &socket,
        "DELETE",
        &format!("/containers/{}?force=true", stranger.name),
        None,
    );
    assert_refused(&a, "labels_required", "removing an unlabelled container");
    assert!(stranger.is_running());

    // The Docker CLI, as code running in control would use it.
    let host = gate.docker_host("control");
    let (ok, out) = cli(&host, &["exec", &id, "id"]);
    assert!(!ok && out.contains("dockgate: "), "{out}");
    let (ok, out) = cli(&host, &["run", "--rm", "--privileged", &image(), "true"]);
    assert!(!ok && out.contains("dockgate: "), "{out}");

    // And ours ends as control ends it: Docker itself removes it.
    let ours = format!("termgate-{session}");
    assert!(
        container_exists(&ours),
        "control's container is there before"
    );
    let removed = send(
        &socket,
        "DELETE",
        &format!("/containers/{id}?v=true&force=true&link=false"),
        None,
    );
    assert_eq!(removed.status, 204, "{}", removed.text);
    assert!(!container_exists(&ours), "the DELETE reached Docker");

    // Every refusal is in the log, naming its rule.
    let log = gate.log_text();
    for rule in [
        "not_privileged",
        "cap_drop_all",
        "no_daemon_socket",
        "body_chunked",
        "endpoint_not_allowed",
        "not_declared",
    ] {
        assert!(
            log.contains(&format!("rule=\"{rule}\"")) || log.contains(&format!("rule={rule}")),
            "no audit line for {rule}:\n{log}"
        );
    }
}

#[test]
fn a_compromised_pool_gets_only_inspect_attach_resize_and_wait_on_sessions() {
    let instance = format!("dg{}", random_hex(4));
    let gate = Dockgate::start(&instance);
    let socket = gate.socket("attach");
    let ours = SessionContainer::start_labelled(Some(&instance));
    let theirs = SessionContainer::start_labelled(Some("another-deployment"));
    let unlabelled = SessionContainer::start();
    let id = ours.full_id();

    let seen = send(
        &socket,
        "GET",
        &format!("/v1.41/containers/{id}/json"),
        None,
    );
    assert_eq!(
        seen.status, 200,
        "the pool inspects its session: {}",
        seen.text
    );

    // Another deployment's or an unlabelled container, however the path is spelled.
    for other in [theirs.full_id(), unlabelled.full_id()] {
        for target in [
            format!("/containers/{other}/json"),
            format!("/v1.41/containers/{other}/json"),
        ] {
            assert_refused(
                &send(&socket, "GET", &target, None),
                "labels_required",
                &target,
            );
        }
        let attach = format!(
            "POST /v1.41/containers/{other}/attach?stream=1&stdin=1&stdout=1 HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
        );
        let a = exchange_unix(&socket, attach.as_bytes(), DEADLINE);
        assert_refused(&a, "labels_required", "attach to a stranger");
        for target in [
            format!("/v1.41/containers/x/../{other}/json"),
            format!("/containers/{id}/..%2F..%2Fcontainers%2F{other}/json"),
            format!("/containers%2F{other}/json"),
            format!("//containers/{other}/json"),
            format!("/v1.41//containers/{other}/json"),
            format!("/v1.99/containers/{other}/json"),
        ] {
            let a = send(&socket, "GET", &target, None);
            assert_eq!(a.status, 403, "{target}: {}", a.text);
            assert!(
                matches!(
                    a.code().as_deref(),
                    Some("bad_target" | "unsupported_version")
                ),
                "{target}: {}",
                a.text
            );
        }
    }

    // Never anything that changes a container, not even its own session's.
    for (method, target) in [
        ("POST", format!("/containers/{id}/stop")),
        ("POST", format!("/containers/{id}/kill")),
        ("DELETE", format!("/containers/{id}?force=true")),
        ("GET", format!("/containers/{id}/archive?path=/")),
        ("PUT", format!("/containers/{id}/archive?path=/tmp")),
        ("POST", format!("/containers/{id}/exec")),
        ("POST", "/containers/create".to_owned()),
        ("POST", "/images/create?fromImage=alpine".to_owned()),
        ("GET", "/containers/json".to_owned()),
    ] {
        let what = format!("{method} {target}");
        assert_refused(
            &send(&socket, method, &target, None),
            "endpoint_not_allowed",
            &what,
        );
    }
    assert!(
        ours.is_running(),
        "the session survived the pool's attempts"
    );

    // The Docker CLI as code running in ttyd would use it.
    let host = gate.docker_host("attach");
    let (ok, out) = cli(&host, &["exec", &id, "id"]);
    assert!(!ok && out.contains("dockgate: "), "{out}");
    let (ok, out) = cli(&host, &["run", "--rm", &image(), "true"]);
    assert!(!ok && out.contains("dockgate: "), "{out}");
    let (ok, out) = cli(&host, &["inspect", "--type", "container", &unlabelled.name]);
    assert!(!ok && out.contains("dockgate: "), "{out}");
    let (ok, out) = cli(
        &host,
        &["inspect", "--type", "container", "--format", "{{.Id}}", &id],
    );
    assert!(ok && out.trim() == id, "{out}");
}

#[test]
fn refusals_are_in_controls_audit_trail_naming_the_rule() {
    let control = ControlStack::start("");
    let gate = control
        .dockgate
        .as_ref()
        .expect("the harness puts dockgate in front");
    let socket = gate.socket("control");
    let a = send(&socket, "POST", "/swarm/init", None);
    assert_refused(&a, "endpoint_not_allowed", "swarm init");
    let root = control.token("root", true);
    let found = e2e::stack::wait_for("the refusal in control's trail", DEADLINE, || {
        let a = control.call("GET", "/v1/audit?limit=200", Some(&root), None);
        assert_eq!(a.status, 200, "{}", a.text);
        a.body["lines"].as_array().and_then(|lines| {
            lines
                .iter()
                .find(|l| {
                    l["message"] == "dockgate refused" && l["fields"]["target"] == "/swarm/init"
                })
                .cloned()
        })
    });
    assert_eq!(found["fields"]["rule"], "endpoint_not_allowed", "{found}");
    assert_eq!(found["fields"]["role"], "control", "{found}");
    assert_eq!(found["fields"]["gateway"], "dockgate-local", "{found}");
    assert_eq!(found["level"], "WARN", "{found}");
}

/// Creates `session`'s container through `gate`'s control socket with the body its
/// configuration declares for profile `profile`: the answer.
fn declared_create(declared: &DeclaredGate, profile: &str, session: &str) -> RawAnswer {
    let (name, body) = declared.session_body(profile, session, "alice");
    create(&declared.gate.socket("control"), &name, &body)
}

#[test]
fn a_profile_reaches_dockgate_when_the_configuration_changes_and_not_before() {
    let instance = format!("dg{}", random_hex(4));
    let declared = DeclaredGate::start(&instance, "");
    let mut names = Cleanup(Vec::new());
    let data = tempfile::tempdir().expect("a directory to bind");
    let later = format!(
        "[profiles.later]\nimage = \"{}\"\n[[profiles.later.mounts]]\nsource = \"{}\"\ntarget = \"/data\"\n",
        image(),
        data.path().display()
    );
    // The body control would send once the profile exists, sent before dockgate has it.
    let text = std::fs::read_to_string(declared.dir.config_path()).expect("config");
    let config_with_later = format!("{text}\n{later}");
    let early = {
        let gate = DeclaredGate {
            dir: e2e::ConfigDir::example(&later),
            gate: Dockgate::prepare_declared(Path::new("/nonexistent"), &[]),
            env: declared.env.clone(),
        };
        gate.session_body("later", &session_id(), "alice")
    };
    let a = create(&declared.gate.socket("control"), &early.0, &early.1);
    assert_refused(&a, "not_declared", "a profile dockgate has not loaded");
    assert!(json_of(&a)["message"]
        .as_str()
        .unwrap_or_default()
        .contains("termgate.profile"));
    assert!(!container_exists(&early.0));

    // The file changes: the next create sees the profile, bind and all.
    declared.dir.write_config(&config_with_later);
    let s = session_id();
    names.0.push(format!("termgate-{s}"));
    let a = declared_create(&declared, "later", &s);
    assert_eq!(a.status, 201, "the new profile passes: {}", a.text);
    let mounts = docker(&[
        "inspect",
        "-f",
        "{{range .Mounts}}{{.Type}} {{.Source}} {{.Destination}} {{.RW}};{{end}}",
        &format!("termgate-{s}"),
    ]);
    assert!(
        mounts.contains(&format!("bind {} /data false", data.path().display())),
        "{mounts}"
    );

    // A configuration that no longer loads keeps the one loaded before.
    let s = session_id();
    names.0.push(format!("termgate-{s}"));
    let (name, body) = declared.session_body("later", &s, "alice");
    declared.dir.write_config("this is not TOML [");
    let a = create(&declared.gate.socket("control"), &name, &body);
    assert_eq!(a.status, 201, "the loaded profiles still pass: {}", a.text);
    assert!(declared.gate.log_text().contains("does not load"));
    declared.dir.write_config(&config_with_later);

    // SIGHUP reads it again.
    let loads = |g: &Dockgate| g.log_text().matches("configuration loaded").count();
    let before = loads(&declared.gate);
    declared.gate.hang_up();
    let deadline = std::time::Instant::now() + DEADLINE;
    while loads(&declared.gate) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not reload:\n{}",
            declared.gate.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A declared bind that resolves somewhere else after the start is refused then.
    let link_dir = tempfile::tempdir().expect("dir");
    let link = link_dir.path().join("data");
    std::os::unix::fs::symlink(data.path(), &link).expect("symlink");
    let linked = format!(
        "{config_with_later}\n[profiles.linked]\nimage = \"{}\"\n[[profiles.linked.mounts]]\nsource = \"{}\"\ntarget = \"/data\"\n",
        image(),
        link.display()
    );
    declared.dir.write_config(&linked);
    let s = session_id();
    names.0.push(format!("termgate-{s}"));
    let a = declared_create(&declared, "linked", &s);
    assert_eq!(
        a.status, 201,
        "a symlink to a plain directory passes: {}",
        a.text
    );
    std::fs::remove_file(&link).expect("unlink");
    std::os::unix::fs::symlink("/proc/self/root", &link).expect("symlink");
    let s = session_id();
    let a = declared_create(&declared, "linked", &s);
    assert_refused(
        &a,
        "not_declared",
        "a bind now resolving to the host's root",
    );
    assert!(!container_exists(&format!("termgate-{s}")));

    // And a dockgate whose configuration declares such a bind does not start.
    let bad = e2e::ConfigDir::example(&format!(
        "[profiles.root]\nimage = \"{}\"\n[[profiles.root.mounts]]\nsource = \"{}\"\ntarget = \"/h\"\n",
        image(),
        link.display()
    ));
    let out = Command::new(e2e::binary("termgate-dockgate"))
        .args(["--host", "local", "--dir"])
        .arg(tempfile::tempdir().expect("dir").path())
        .arg("--config")
        .arg(bad.config_path())
        .env("TERMGATE__INSTANCE", &instance)
        .output()
        .expect("dockgate");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("profiles.root.mounts[0]") && said.contains("host's root"),
        "{said}"
    );
    drop(declared);
}

fn volume_exists(name: &str) -> bool {
    Command::new("docker")
        .args(["volume", "inspect", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Creates a volume through `socket` with `body`, as control does; removed when the
/// test ends.
fn made_volume(socket: &Path, name: &str, body: &Value) -> VolumeCleanup {
    let cleanup = VolumeCleanup(name.to_owned());
    let a = send(
        socket,
        "POST",
        "/volumes/create",
        Some(body.to_string().as_bytes()),
    );
    assert_eq!(a.status, 201, "control's volume {name} passes: {}", a.text);
    cleanup
}

/// A volume made beside termgate with the Docker CLI (`args` before its name);
/// removed when the test ends.
fn made_beside(name: &str, args: &[String]) -> VolumeCleanup {
    let cleanup = VolumeCleanup(name.to_owned());
    let mut all: Vec<&str> = vec!["volume", "create"];
    all.extend(args.iter().map(String::as_str));
    all.push(name);
    docker(&all);
    cleanup
}

/// `--label k=v` for each of `labels`.
fn label_args(labels: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    labels
        .iter()
        .flat_map(|(k, v)| ["--label".to_owned(), format!("{k}={v}")])
        .collect()
}

/// Removes a container through `socket` as control ends a session: `204`.
fn remove_container(socket: &Path, name: &str) {
    let a = send(
        socket,
        "DELETE",
        &format!("/containers/{name}?v=true&force=true&link=false"),
        None,
    );
    assert_eq!(a.status, 204, "removing {name}: {}", a.text);
    assert!(!container_exists(name), "{name} is still there");
}

#[test]
fn a_chosen_workspace_is_mounted_only_when_termgate_made_it_for_the_owner() {
    let instance = format!("dg{}", random_hex(4));
    let declared = DeclaredGate::start(&instance, "");
    let mode = declared.config().profiles["default"].workspace_mode();
    assert_eq!(
        mode,
        policy::declared::WorkspaceMode::Choose,
        "the example's default"
    );
    let socket = declared.gate.socket("control");
    // Dropped in reverse: the containers go before the volumes they mount.
    let mut volumes = Vec::new();
    let mut names = Cleanup(Vec::new());

    // Alice's and bob's workspaces, made as control makes them.
    let (alices, body) = declared.workspace_body("alice", &session_id());
    volumes.push(made_volume(&socket, &alices, &body));
    let (bobs, body) = declared.workspace_body("bob", &session_id());
    volumes.push(made_volume(&socket, &bobs, &body));
    // A plain volume made beside termgate, and a host's root behind a volume carrying
    // exactly the labels termgate gives alice's workspace, under the name they give it.
    let plain = format!("termgate-dg-{}", random_hex(5));
    volumes.push(made_beside(&plain, &[]));
    let id = session_id();
    let (bound, _) = declared.workspace_body("alice", &id);
    let labels = policy::declared::workspace_volume_labels(
        &instance,
        &policy::Sub::parse("alice").expect("a sub"),
        &policy::SessionId::parse(&id).expect("an id"),
    );
    let mut args: Vec<String> = ["--driver", "local", "--opt", "type=none", "--opt", "o=bind"]
        .map(str::to_owned)
        .into();
    args.extend(["--opt".to_owned(), "device=/".to_owned()]);
    args.extend(label_args(&labels));
    volumes.push(made_beside(&bound, &args));
    let device = docker(&["volume", "inspect", "-f", "{{.Options.device}}", &bound]);
    assert_eq!(device, "/", "the volume is backed by the host's root");

    let missing = format!("termgate-dg-{}", random_hex(5));
    for (what, volume, rule) in [
        ("bob's workspace", &bobs, "not_declared"),
        (
            "a plain volume termgate did not make",
            &plain,
            "not_declared",
        ),
        ("a volume that does not exist", &missing, "not_declared"),
        (
            "the host's root under alice's workspace labels",
            &bound,
            "volume_driver",
        ),
    ] {
        let s = session_id();
        let (name, body) = declared.session_body_in("default", &s, "alice", Some(volume));
        names.0.push(name.clone());
        let a = create(&socket, &name, &body);
        assert_refused(&a, rule, what);
        let message = json_of(&a)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let says = if rule == "volume_driver" {
            "o=bind"
        } else {
            volume.as_str()
        };
        assert!(message.contains(says), "{what}: {message}");
        assert!(!container_exists(&name), "{what}: Docker made {name}");
    }
    assert!(!volume_exists(&missing), "Docker made {missing}");

    // Alice's own workspace is mounted read-write at the profile's home.
    let (name, body) = declared.session_body_in("default", &session_id(), "alice", Some(&alices));
    names.0.push(name.clone());
    let a = create(&socket, &name, &body);
    assert_eq!(a.status, 201, "alice's workspace passes: {}", a.text);
    let mounts = docker(&[
        "inspect",
        "-f",
        "{{range .Mounts}}{{.Type}} {{.Name}} {{.Destination}} {{.RW}};{{end}}",
        &name,
    ]);
    assert!(
        mounts.contains(&format!("volume {alices} /home/user true")),
        "{mounts}"
    );
    remove_container(&socket, &name);
    // An ephemeral one: an anonymous volume, made with the container and gone with it.
    let (name, body) = declared.session_body_in("default", &session_id(), "alice", Some(""));
    names.0.push(name.clone());
    let a = create(&socket, &name, &body);
    assert_eq!(a.status, 201, "an ephemeral workspace passes: {}", a.text);
    let anonymous = docker(&[
        "inspect",
        "-f",
        "{{range .Mounts}}{{if eq .Destination \"/home/user\"}}{{.Name}}{{end}}{{end}}",
        &name,
    ]);
    assert!(
        !anonymous.is_empty() && volume_exists(&anonymous),
        "{anonymous}"
    );
    remove_container(&socket, &name);
    assert!(
        !volume_exists(&anonymous),
        "{anonymous} outlived its session"
    );
    // Never with options that make the anonymous volume a host path.
    let (name, mut body) = declared.session_body_in("default", &session_id(), "alice", Some(""));
    names.0.push(name.clone());
    let options = json!({
        "DriverConfig": {"Name": "local", "Options": {"type": "none", "o": "bind", "device": "/"}}
    });
    let mounts = body["HostConfig"]["Mounts"].as_array_mut().expect("mounts");
    let workspace = mounts
        .iter_mut()
        .find(|m| m["Target"] == "/home/user")
        .expect("the workspace mount");
    workspace["VolumeOptions"] = options;
    let a = create(&socket, &name, &body);
    assert_eq!(
        a.status, 403,
        "an anonymous volume over the host's root: {}",
        a.text
    );
    assert!(!container_exists(&name), "Docker made {name}");
}

#[test]
fn a_copy_fills_only_a_workspace_and_control_removes_only_unused_termgate_volumes() {
    let instance = format!("dg{}", random_hex(4));
    let declared = DeclaredGate::start(&instance, "");
    let socket = declared.gate.socket("control");
    // Dropped in reverse: the containers go before the volumes they mount.
    let mut volumes = Vec::new();
    let mut names = Cleanup(Vec::new());
    let (home, body) = declared.home_body("alice");
    volumes.push(made_volume(&socket, &home, &body));
    let (alices, body) = declared.workspace_body("alice", &session_id());
    volumes.push(made_volume(&socket, &alices, &body));

    // A copy into the owner's home volume: refused, and no job made.
    let (name, body) = declared.copy_body("default", "alice", &alices, &home);
    names.0.push(name.clone());
    let a = create(&socket, &name, &body);
    assert_refused(&a, "not_declared", "a copy into the home volume");
    let message = json_of(&a)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains(&home) && message.contains("a workspace"),
        "{message}"
    );
    assert!(!container_exists(&name), "Docker made {name}");
    // From the home volume into the workspace, as control copies: the job is made.
    let (name, body) = declared.copy_body("default", "alice", &home, &alices);
    names.0.push(name.clone());
    let a = create(&socket, &name, &body);
    assert_eq!(a.status, 201, "control's copy job passes: {}", a.text);
    remove_container(&socket, &name);

    // Removing volumes: only this deployment's home and workspace volumes, never by
    // force, and Docker still refuses one in use.
    let plain = format!("termgate-dg-{}", random_hex(5));
    volumes.push(made_beside(&plain, &[]));
    let a = send(&socket, "DELETE", &format!("/volumes/{plain}"), None);
    assert_refused(&a, "labels_required", "removing a plain volume");
    assert!(volume_exists(&plain), "{plain} was removed");
    let id = session_id();
    let (theirs, _) = declared.workspace_body("alice", &id);
    let other = policy::declared::workspace_volume_labels(
        "another-deployment",
        &policy::Sub::parse("alice").expect("a sub"),
        &policy::SessionId::parse(&id).expect("an id"),
    );
    volumes.push(made_beside(&theirs, &label_args(&other)));
    let a = send(&socket, "DELETE", &format!("/volumes/{theirs}"), None);
    assert_refused(
        &a,
        "labels_required",
        "removing another deployment's workspace",
    );
    assert!(volume_exists(&theirs), "{theirs} was removed");
    let a = send(
        &socket,
        "DELETE",
        &format!("/volumes/{alices}?force=true"),
        None,
    );
    assert_refused(&a, "query_not_allowed", "removing a workspace by force");
    assert!(volume_exists(&alices), "{alices} was removed by force");
    let (session, body) =
        declared.session_body_in("default", &session_id(), "alice", Some(&alices));
    names.0.push(session.clone());
    let a = create(&socket, &session, &body);
    assert_eq!(a.status, 201, "{}", a.text);
    let a = send(
        &socket,
        "DELETE",
        &format!("/volumes/{alices}?force=false"),
        None,
    );
    assert_eq!(a.status, 409, "Docker keeps a workspace in use: {}", a.text);
    assert!(volume_exists(&alices), "{alices} was removed in use");
    remove_container(&socket, &session);
    let a = send(&socket, "DELETE", &format!("/volumes/{alices}"), None);
    assert_eq!(a.status, 204, "control removes the workspace: {}", a.text);
    assert!(!volume_exists(&alices), "{alices} is still there");
    let a = send(&socket, "DELETE", &format!("/volumes/{alices}"), None);
    assert_eq!(a.status, 404, "{}", a.text);
}

#[test]
fn control_is_told_of_its_own_volumes_and_of_no_others() {
    let instance = format!("dg{}", random_hex(4));
    let declared = DeclaredGate::start(&instance, "");
    let socket = declared.gate.socket("control");
    let mut volumes = Vec::new();
    let (home, body) = declared.home_body("alice");
    volumes.push(made_volume(&socket, &home, &body));
    let (alices, body) = declared.workspace_body("alice", &session_id());
    volumes.push(made_volume(&socket, &alices, &body));
    let plain = format!("termgate-dg-{}", random_hex(5));
    volumes.push(made_beside(&plain, &[]));
    let id = session_id();
    let (theirs, _) = declared.workspace_body("alice", &id);
    let other = policy::declared::workspace_volume_labels(
        "another-deployment",
        &policy::Sub::parse("alice").expect("a sub"),
        &policy::SessionId::parse(&id).expect("an id"),
    );
    volumes.push(made_beside(&theirs, &label_args(&other)));
    let filters = |i: &str| {
        let f = json!({ "label": [format!("termgate.instance={i}")] }).to_string();
        f.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };

    // The listing: only with this deployment's filter, and only its volumes.
    let a = send(
        &socket,
        "GET",
        &format!("/volumes?filters={}", filters(&instance)),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.text);
    let mut listed: Vec<String> = json_of(&a)["Volumes"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v["Name"].as_str().unwrap_or_default().to_owned())
        .collect();
    listed.sort();
    let mut ours = vec![home.clone(), alices.clone()];
    ours.sort();
    assert_eq!(listed, ours);
    let a = send(&socket, "GET", "/volumes", None);
    assert_refused(&a, "filter_required", "listing every volume");
    let a = send(
        &socket,
        "GET",
        &format!("/volumes?filters={}", filters("another-deployment")),
        None,
    );
    assert_eq!(a.status, 403, "another deployment's listing: {}", a.text);
    assert!(!a.text.contains(&theirs), "{}", a.text);

    // Disk usage: this deployment's volumes with their figures, nothing else of the
    // daemon (other volumes, images, containers, caches).
    // Docker runs one disk usage at a time; another suite's may be running.
    let a = wait_for("the disk usage", Duration::from_secs(60), || {
        let a = send(&socket, "GET", "/system/df", None);
        (!a.text.contains("already running")).then_some(a)
    });
    assert_eq!(a.status, 200, "{}", a.text);
    let usage = json_of(&a);
    assert_eq!(usage.as_object().map(|o| o.len()), Some(1), "{usage}");
    let items = usage["VolumeUsage"]["Items"].as_array().expect("items");
    let mut told: Vec<String> = items
        .iter()
        .map(|v| v["Name"].as_str().unwrap_or_default().to_owned())
        .collect();
    told.sort();
    assert_eq!(told, ours, "{usage}");
    assert!(
        items.iter().all(|v| v["UsageData"]["Size"].is_i64()),
        "{usage}"
    );
    for never in [&plain, &theirs, &image()] {
        assert!(!a.text.contains(never.as_str()), "{never} told: {}", a.text);
    }
    for t in ["/system/df?type=image", "/system/df?type=container"] {
        assert_refused(&send(&socket, "GET", t, None), "query_not_allowed", t);
    }
    let pool = declared.gate.socket("attach");
    let a = send(&pool, "GET", "/system/df", None);
    assert_refused(&a, "endpoint_not_allowed", "the pool asking for disk usage");
}

/// The machine's daemon socket, as dockgate finds it without `--daemon`.
fn daemon_socket() -> PathBuf {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
}

/// A unix socket server of the test's own that echoes every connection's bytes back
/// (a ttyd pool's place), counting the connections it accepted.
struct Echo {
    dir: tempfile::TempDir,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Echo {
    fn start() -> Echo {
        let dir = e2e::ttyd::private_dir("tg-echo.");
        let listener = UnixListener::bind(dir.path().join("pool.sock")).expect("bind the pool");
        listener.set_nonblocking(true).expect("non-blocking");
        let (accepted, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (count, stopped) = (Arc::clone(&accepted), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        count.fetch_add(1, Ordering::SeqCst);
                        let _ = s.set_nonblocking(false);
                        std::thread::spawn(move || {
                            if let Ok(mut back) = s.try_clone() {
                                let _ = std::io::copy(&mut s, &mut back);
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Echo {
            dir,
            accepted,
            stop,
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("pool.sock")
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A declared dockgate whose Docker API and pool fronts listen on loopback over mutual
/// TLS (`--tls-listen`, `--pool-listen` to an [`Echo`], `--viewer-listen` to a socket
/// nobody serves), in front of the real daemon through a counting proxy.
struct TlsGate {
    declared: DeclaredGate,
    pki: Pki,
    /// Its own certificate (`--tls-cert`), for 127.0.0.1.
    server: Leaf,
    api: SocketAddr,
    pool: SocketAddr,
    viewer: SocketAddr,
    /// Every connection dockgate made to the daemon.
    daemon: CountingProxy,
    echo: Echo,
}

impl TlsGate {
    fn start() -> TlsGate {
        let instance = format!("dg{}", random_hex(4));
        let pki = Pki::init();
        let server = pki.issue("dockgate", "local", &["127.0.0.1"]);
        let daemon = CountingProxy::start(Target::Unix(daemon_socket()));
        let echo = Echo::start();
        let [api, pool, viewer] = [0; 3].map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())));
        let daemon_flag = format!("unix://{}", daemon.socket_path().display());
        let (api_flag, pool_flag, viewer_flag) =
            (api.to_string(), pool.to_string(), viewer.to_string());
        let path = |p: &Path| p.display().to_string();
        let (cert, key, ca) = (path(&server.cert), path(&server.key), path(&pki.ca()));
        let (pool_socket, viewer_socket) = (
            path(&echo.socket()),
            path(&echo.dir.path().join("nobody.sock")),
        );
        let declared = DeclaredGate::start_with(
            &instance,
            "",
            &[
                "--daemon",
                &daemon_flag,
                "--tls-listen",
                &api_flag,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-ca",
                &ca,
                "--pool-listen",
                &pool_flag,
                "--pool-socket",
                &pool_socket,
                "--viewer-listen",
                &viewer_flag,
                "--viewer-socket",
                &viewer_socket,
            ],
        );
        TlsGate {
            declared,
            pki,
            server,
            api,
            pool,
            viewer,
            daemon,
            echo,
        }
    }

    /// One request on a new connection presenting `leaf` (none: no certificate).
    fn call(&self, leaf: Option<&Leaf>, method: &str, target: &str, body: Option<&[u8]>) -> Call {
        let mut stream = pki::connect(self.api, self.pki.client(leaf)).expect("connect");
        let local = pki::local_addr(&stream);
        let mut req =
            format!("{method} {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n");
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body.unwrap_or_default());
        let answer = pki::request(&mut stream, &bytes, DEADLINE);
        Call { answer, local }
    }

    /// The create of `session`'s container as declared, with `Image` another one: what
    /// the configuration does not declare.
    fn undeclared_create(&self, leaf: &Leaf, session: &str) -> (String, Call) {
        let (name, body) = self.declared.session_body("default", session, "alice");
        let body = with(body, &["Image"], json!("busybox:latest"));
        let bytes = body.to_string().into_bytes();
        let target = format!("/v1.41/containers/create?name={name}");
        (name, self.call(Some(leaf), "POST", &target, Some(&bytes)))
    }

    /// The log line saying `says` about the connection from `peer`, once written.
    fn log_line(&self, peer: SocketAddr, says: &str) -> String {
        let peer = format!("peer={peer}");
        wait_for(&format!("{peer}: {says}"), DEADLINE, || {
            self.declared
                .gate
                .log_text()
                .lines()
                .find(|l| l.contains(&peer) && l.contains(says))
                .map(str::to_owned)
        })
    }
}

/// An answer, and the client's address the server saw.
struct Call {
    answer: RawAnswer,
    local: SocketAddr,
}

#[test]
fn over_mutual_tls_a_control_certificate_gets_the_control_policy_and_a_pool_certificate_the_attach_policy(
) {
    let g = TlsGate::start();
    let control = g.pki.issue("control", "control", &[]);
    let pool = g.pki.issue("pool", "pool-1", &[]);
    let _names = Cleanup(Vec::new());

    for (leaf, role) in [(&control, "control"), (&pool, "pool")] {
        let a = g.call(Some(leaf), "GET", "/version", None).answer;
        assert_eq!(a.status, 200, "{role}: /version passes: {}", a.text);
        assert!(json_of(&a)["ApiVersion"].is_string(), "{role}: {}", a.text);
    }
    // Control may read the daemon's info; a pool may not.
    let a = g.call(Some(&control), "GET", "/info", None).answer;
    assert_eq!(a.status, 200, "control reads /info: {}", a.text);
    let a = g.call(Some(&pool), "GET", "/info", None).answer;
    assert_refused(&a, "endpoint_not_allowed", "a pool's /info");

    // A create is compared with the configuration for control, and never passes for a
    // pool; Docker makes nothing either way.
    let session = session_id();
    let _cleanup = Cleanup(vec![format!("termgate-{session}")]);
    let (name, c) = g.undeclared_create(&control, &session);
    assert_refused(&c.answer, "not_declared", "control's undeclared create");
    assert!(
        json_of(&c.answer)["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Image"),
        "{}",
        c.answer.text
    );
    let (_, p) = g.undeclared_create(&pool, &session);
    assert_refused(&p.answer, "endpoint_not_allowed", "a pool's create");
    assert!(!container_exists(&name), "Docker made {name}");

    // A pool attaches to its deployment's session over TLS: the stream is copied both
    // ways on the TLS connection itself.
    let session = SessionContainer::start_labelled(Some(&g.declared.config().instance));
    let id = session.full_id();
    let mut s = pki::connect(g.api, g.pki.client(Some(&pool))).expect("connect");
    let head = format!(
        "POST /v1.41/containers/{id}/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
    );
    let a = pki::request(&mut s, head.as_bytes(), DEADLINE);
    assert_eq!(a.status, 101, "the pool attaches: {}", a.text);
    s.write_all(b"echo tls-$((20+22))\r").expect("type");
    s.flush().expect("flush");
    let mut seen = Vec::new();
    wait_for(
        "the session's answer through the TLS stream",
        DEADLINE,
        || {
            let mut buf = [0u8; 4096];
            if let Ok(n) = s.read(&mut buf) {
                seen.extend_from_slice(&buf[..n]);
            }
            String::from_utf8_lossy(&seen)
                .contains("tls-42")
                .then_some(())
        },
    );

    let log = g.declared.gate.log_text();
    assert!(
        log.contains("role=control") && log.contains("role=attach"),
        "each refusal names the role the certificate chose:\n{log}"
    );
}

#[test]
fn the_docker_api_over_tls_closes_on_no_certificate_another_ca_or_a_gateway_certificate_before_the_daemon(
) {
    let g = TlsGate::start();
    let other = Pki::init();
    let foreign = other.issue("control", "control", &[]);
    let gateway = g.pki.issue("gateway", "gw", &[]);
    let ping = |leaf: Option<&Leaf>| g.call(leaf, "GET", "/_ping", None);

    let none = ping(None);
    assert_eq!(
        none.answer.status, 0,
        "no certificate: {}",
        none.answer.text
    );
    let line = g.log_line(none.local, "TLS handshake failed");
    assert!(
        line.contains("WARN") && line.contains("peer sent no certificates"),
        "{line}"
    );

    let stranger = ping(Some(&foreign));
    assert_eq!(stranger.answer.status, 0, "{}", stranger.answer.text);
    let line = g.log_line(stranger.local, "TLS handshake failed");
    assert!(
        line.contains("WARN") && line.contains("invalid peer certificate"),
        "{line}"
    );

    let gw = ping(Some(&gateway));
    assert_eq!(gw.answer.status, 0, "a gateway: {}", gw.answer.text);
    let line = g.log_line(gw.local, "refused a peer");
    assert!(
        line.contains("WARN") && line.contains("gateway/gw") && line.contains("docker-api"),
        "{line}"
    );
    assert_eq!(g.daemon.connections(), 0, "nothing reached the daemon");

    // The same request with control's certificate does reach it.
    let control = g.pki.issue("control", "control", &[]);
    let ok = ping(Some(&control));
    assert_eq!(ok.answer.status, 200, "{}", ok.answer.text);
    assert_eq!(
        g.daemon.connections(),
        1,
        "control's ping reached the daemon"
    );
}

#[test]
fn a_pool_front_splices_only_gateway_certificates_to_the_pool_socket() {
    let g = TlsGate::start();
    let other = Pki::init();
    let gateway = g.pki.issue("gateway", "gw", &[]);
    let foreign = other.issue("gateway", "gw", &[]);
    let control = g.pki.issue("control", "control", &[]);

    // A gateway's bytes reach the pool and its answers come back, both ways at once.
    let mut s = pki::connect(g.pool, g.pki.client(Some(&gateway))).expect("connect");
    for word in ["hello pool\n", "again\n"] {
        s.write_all(word.as_bytes()).expect("write");
        s.flush().expect("flush");
        let echoed = wait_for("the pool's echo", DEADLINE, || {
            let mut buf = [0u8; 64];
            match s.read(&mut buf) {
                Ok(n) if n > 0 => Some(buf[..n].to_vec()),
                _ => None,
            }
        });
        assert_eq!(echoed, word.as_bytes());
    }
    let line = g.log_line(pki::local_addr(&s), "peer admitted");
    assert!(line.contains("gateway/gw"), "{line}");
    assert_eq!(g.echo.accepted(), 1);

    // No certificate, another CA's gateway, control's: closed before the pool.
    for (leaf, what, logged) in [
        (None, "no certificate", "TLS handshake failed"),
        (Some(&foreign), "another CA", "TLS handshake failed"),
        (Some(&control), "a control certificate", "refused a peer"),
    ] {
        let mut s = pki::connect(g.pool, g.pki.client(leaf)).expect("connect");
        let _ = s.write_all(b"GET /token HTTP/1.1\r\nHost: ttyd\r\n\r\n");
        let _ = s.flush();
        let (got, closed) = pki::read_until_closed(&mut s, DEADLINE);
        assert!(closed && got.is_empty(), "{what}: {got:?}");
        let line = g.log_line(pki::local_addr(&s), logged);
        assert!(line.contains("WARN"), "{what}: {line}");
    }
    assert!(g.declared.gate.log_text().contains("control/control"));
    assert_eq!(g.echo.accepted(), 1, "the pool saw only the gateway");

    // A pool that does not take the connection: closed, and said.
    let mut s = pki::connect(g.viewer, g.pki.client(Some(&gateway))).expect("connect");
    let (got, closed) = pki::read_until_closed(&mut s, DEADLINE);
    assert!(closed && got.is_empty(), "{got:?}");
    let line = g.log_line(pki::local_addr(&s), "did not take the connection");
    assert!(
        line.contains("WARN") && line.contains("nobody.sock"),
        "{line}"
    );
}

#[test]
fn a_renewed_dockgate_certificate_serves_new_connections_while_open_ones_stay() {
    let g = TlsGate::start();
    let control = g.pki.issue("control", "control", &[]);
    let first = g.server.der();
    let ping = b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n";
    let mut open = pki::connect(g.api, g.pki.client(Some(&control))).expect("connect");
    assert_eq!(pki::request(&mut open, ping, DEADLINE).status, 200);
    assert_eq!(pki::server_der(&open), first);

    let renewed = g.pki.issue("dockgate", "local", &["127.0.0.1"]).der();
    assert_ne!(renewed, first, "renewed");
    let renewals = |g: &TlsGate| {
        g.declared
            .gate
            .log_text()
            .matches("a renewed TLS certificate is in use for new connections")
            .count()
    };
    wait_for("the renewal picked up", DEADLINE, || {
        (renewals(&g) == 1).then_some(())
    });
    let a = pki::request(&mut open, ping, DEADLINE);
    assert_eq!(
        a.status, 200,
        "the open connection still answers: {}",
        a.text
    );
    let mut fresh = pki::connect(g.api, g.pki.client(Some(&control))).expect("connect");
    assert_eq!(
        pki::server_der(&fresh),
        renewed,
        "a new connection gets the renewal"
    );
    assert_eq!(pki::request(&mut fresh, ping, DEADLINE).status, 200);

    // A renewal that cannot be read leaves the one in use.
    std::fs::write(&g.server.cert, "not a certificate").expect("write");
    wait_for("the bad renewal logged", DEADLINE, || {
        g.declared
            .gate
            .log_text()
            .contains("the renewed TLS certificate cannot be used")
            .then_some(())
    });
    let mut after = pki::connect(g.api, g.pki.client(Some(&control))).expect("connect");
    assert_eq!(pki::server_der(&after), renewed);
    assert_eq!(pki::request(&mut after, ping, DEADLINE).status, 200);
    assert_eq!(renewals(&g), 1);
}

/// `body` with its secret `name`'s file given as `file`, in its label and its mount
/// alike: the create a compromised control would send.
fn secret_at(mut body: Value, name: &str, file: &str) -> Value {
    body["Labels"][format!("termgate.secret.{name}")] = json!(file);
    let target = format!("/run/secrets/{name}");
    for m in body["HostConfig"]["Mounts"]
        .as_array_mut()
        .expect("mounts")
        .iter_mut()
        .filter(|m| m["Target"] == target.as_str())
    {
        m["Source"] = json!(file);
    }
    body
}

/// `body` with the mount at `/run/secrets/{name}` given `field` = `value`.
fn secret_mount(mut body: Value, name: &str, field: &str, value: Value) -> Value {
    let target = format!("/run/secrets/{name}");
    let mounts = body["HostConfig"]["Mounts"].as_array_mut().expect("mounts");
    let m = mounts
        .iter_mut()
        .find(|m| m["Target"] == target.as_str())
        .expect("the secret's mount");
    m[field] = value;
    body
}

#[test]
fn a_registered_secret_is_bound_only_from_a_file_under_the_secrets_dir_read_only_at_its_name() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let instance = format!("dg{}", random_hex(4));
    let declared = DeclaredGate::start(&instance, "");
    let socket = declared.gate.socket("control");
    let mut names = Cleanup(Vec::new());
    let secrets = tempfile::tempdir().expect("a secrets directory");
    let outside = tempfile::tempdir().expect("a directory outside it");
    let dir = secrets.path();
    let file = |p: &Path| {
        std::fs::write(p, random_hex(8)).expect("a file");
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o444)).expect("mode");
        p.display().to_string()
    };
    let token = file(&dir.join("token"));
    std::fs::create_dir(dir.join("team")).expect("a directory below");
    let key = file(&dir.join("team").join("key"));
    let stolen = file(&outside.path().join("stolen"));
    symlink(&stolen, dir.join("link")).expect("a link to a file outside");
    symlink(outside.path(), dir.join("out")).expect("a link to a directory outside");
    let granted = std::collections::BTreeMap::from([
        ("token".to_owned(), token.clone()),
        ("key".to_owned(), key.clone()),
    ]);
    let body_for = |s: &str| declared.session_body_with("default", s, "alice", Some(""), &granted);

    // Without docker.secrets_dir no secret passes.
    let (name, body) = body_for(&session_id());
    names.0.push(name.clone());
    assert_refused(
        &create(&socket, &name, &body),
        "not_declared",
        "no secrets_dir",
    );
    assert!(!container_exists(&name));

    let text = std::fs::read_to_string(declared.dir.config_path()).expect("config");
    assert!(
        text.contains("\n[docker]\n"),
        "the example has a [docker] table"
    );
    declared.dir.write_config(&text.replacen(
        "\n[docker]\n",
        &format!("\n[docker]\nsecrets_dir = \"{}\"\n", dir.display()),
        1,
    ));

    // Registered files, one directly under the directory and one below it, pass.
    let (name, body) = body_for(&session_id());
    names.0.push(name.clone());
    let a = create(&socket, &name, &body);
    assert_eq!(a.status, 201, "registered secrets pass: {}", a.text);
    let mounts = docker(&[
        "inspect",
        "-f",
        "{{range .Mounts}}{{.Type}} {{.Source}} {{.Destination}} {{.RW}};{{end}}",
        &name,
    ]);
    for (source, target) in [(&token, "/run/secrets/token"), (&key, "/run/secrets/key")] {
        assert!(
            mounts.contains(&format!("bind {source} {target} false;")),
            "{mounts}"
        );
    }
    remove_container(&socket, &name);

    let dotted = format!(
        "{}/../{}/stolen",
        dir.display(),
        outside
            .path()
            .file_name()
            .expect("a name")
            .to_string_lossy()
    );
    let d = dir.display();
    // What each refusal says: how a compromised control's create differs.
    type Forge<'a> = Box<dyn Fn(Value) -> Value + 'a>;
    let cases: Vec<(&str, &str, Forge)> = vec![
        (
            "a file outside the directory",
            "not a clean path under docker.secrets_dir",
            Box::new(|b| secret_at(b, "token", &stolen)),
        ),
        (
            "a link inside the directory to a file outside",
            "symbolic link",
            Box::new(|b| secret_at(b, "token", &format!("{d}/link"))),
        ),
        (
            "a file through a link inside the directory to a directory outside",
            "outside docker.secrets_dir",
            Box::new(|b| secret_at(b, "token", &format!("{d}/out/stolen"))),
        ),
        // The sandbox's red line on mount paths refuses it before any comparison.
        (
            "a path with ..",
            "without ..",
            Box::new(|b| secret_at(b, "token", &dotted)),
        ),
        (
            "a file that does not exist",
            "No such file",
            Box::new(|b| secret_at(b, "token", &format!("{d}/missing"))),
        ),
        (
            "a writable secret",
            ".ReadOnly",
            Box::new(|b| secret_mount(b, "token", "ReadOnly", json!(false))),
        ),
        (
            "a secret mounted elsewhere",
            ".Target",
            Box::new(|b| secret_mount(b, "token", "Target", json!("/etc/token"))),
        ),
        (
            "a secret's file bound where its label does not say",
            ".Source",
            Box::new(|b| secret_mount(b, "token", "Source", json!(stolen))),
        ),
    ];
    for (what, says, forge) in cases {
        let (name, body) = body_for(&session_id());
        names.0.push(name.clone());
        let a = create(&socket, &name, &forge(body));
        let rule = if what.contains("..") {
            "mount_paths"
        } else {
            "not_declared"
        };
        assert_refused(&a, rule, what);
        let message = json_of(&a)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(says), "{what}: {message}");
        assert!(!container_exists(&name), "{what}: Docker made {name}");
    }
}

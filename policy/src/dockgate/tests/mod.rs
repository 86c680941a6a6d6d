//! dockgate's tests, by concern; each goes through [`normalize`] and [`decide`] as the
//! binary does.

mod control;
mod create;
mod objects;
mod pool;
mod target;

use serde_json::{json, Value};

use super::*;

const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn asked(method: &str, target: &str) -> Asked {
    normalize(method, target.as_bytes()).unwrap_or_else(|e| panic!("{target}: {e}"))
}

fn bad_target(method: &str, target: &[u8]) -> &'static str {
    match normalize(method, target) {
        Ok(a) => panic!(
            "{:?} was accepted as {a:?}",
            String::from_utf8_lossy(target)
        ),
        Err(e) => e.code(),
    }
}

fn verdict(role: Role, method: &str, target: &str) -> Verdict {
    decide(role, &asked(method, target), BodyInfo::none())
}

fn refused(v: Verdict) -> &'static str {
    match v {
        Verdict::Refuse(d) => d.code(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn labelled(kind: ObjectKind, id: &str) -> Verdict {
    Verdict::PassIfLabelled {
        kind,
        id: id.to_owned(),
    }
}

/// Form-encodes as serde_urlencoded does (what bollard sends).
fn form(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                (b as char).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Control's create body for a session, written by hand from
/// control/src/docker/body.rs as bollard serialises it (None fields skipped).
fn control_body() -> Value {
    json!({
        "Image": "termgate/session:dev",
        "User": "1000:1000",
        "Tty": true,
        "OpenStdin": true,
        "StdinOnce": false,
        "AttachStdin": false,
        "AttachStdout": false,
        "AttachStderr": false,
        "Env": ["SESSION_SHELL=sh"],
        "Cmd": ["-c", "true"],
        "Labels": {
            "termgate.managed": "session",
            "termgate.instance": "prod",
            "termgate.session": "abcdefghijk234mn",
            "termgate.owner": "alice",
            "termgate.profile": "shell",
            "termgate.name": "work",
            "termgate.created": "1700000000",
            "termgate.host": "local"
        },
        "HostConfig": {
            "Memory": 134_217_728,
            "NanoCpus": 500_000_000,
            "Init": true,
            "PidsLimit": 64,
            "MemorySwap": 134_217_728,
            "NetworkMode": "none",
            "AutoRemove": false,
            "Mounts": [
                {"Target": "/data", "Source": "/srv/data", "Type": "bind", "ReadOnly": true},
                {"Target": "/home/user", "Source": "termgate-home-alice", "Type": "volume", "ReadOnly": false}
            ],
            "CapAdd": [],
            "CapDrop": ["ALL"],
            "CgroupnsMode": "private",
            "IpcMode": "private",
            "PidMode": "private",
            "Privileged": false,
            "ReadonlyRootfs": true,
            "SecurityOpt": ["no-new-privileges:true"],
            "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=16m"},
            "UTSMode": "",
            "UsernsMode": ""
        }
    })
}

fn with(mut body: Value, path: &[&str], value: Value) -> Value {
    let (last, parents) = path.split_last().unwrap();
    let mut at = &mut body;
    for p in parents {
        at = &mut at[*p];
    }
    at[*last] = value;
    body
}

fn without(mut body: Value, path: &[&str]) -> Value {
    let (last, parents) = path.split_last().unwrap();
    let mut at = &mut body;
    for p in parents {
        at = &mut at[*p];
    }
    at.as_object_mut().unwrap().remove(*last);
    body
}

const CREATE: &str = "/containers/create?name=termgate-abcdefghijk234mn&platform=";

fn create_with(target: &str, bytes: &[u8]) -> Verdict {
    let a = asked("POST", target);
    let body = BodyInfo::length(bytes.len() as u64);
    // A request refused on its target is refused before its body is read.
    match decide(Role::Control, &a, body) {
        Verdict::ReadBody { max } => {
            assert_eq!(max, bytes.len(), "the declared length is read");
            decide(Role::Control, &a, body.with_bytes(bytes))
        }
        other => other,
    }
}

fn create(body: &Value) -> Verdict {
    create_with(CREATE, body.to_string().as_bytes())
}

fn create_refused(body: &Value) -> &'static str {
    refused(create(body))
}

fn session_create_passes() -> Verdict {
    Verdict::PassCreate {
        kind: ObjectKind::Container,
        instance: "prod".into(),
        volumes: vec!["termgate-home-alice".into()],
    }
}

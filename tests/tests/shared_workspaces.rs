//! Shared workspaces against a real Docker daemon through a real dockgate, with the
//! real control binary: granted to users and roles, read-only or read-write, never
//! touched by a session's end, and a borrowed volume never removed by any delete.

use e2e::stack::{docker, Answer, ControlStack};
use e2e::workspaces::{call, container_of, copied, end, exec as sh, start_copy, volume_exists};
use serde_json::{json, Value};

fn session_on(stack: &ControlStack, token: &str, workspace: &str) -> Answer {
    call(
        stack,
        token,
        "POST",
        "/v1/sessions",
        Some(json!({"profile": "default", "workspace": workspace})),
    )
}

fn grant(stack: &ControlStack, admin: &str, id: &str, grants: Value) {
    let a = call(
        stack,
        admin,
        "PATCH",
        &format!("/v1/shared-workspaces/{id}"),
        Some(json!({ "grants": grants })),
    );
    assert_eq!(a.status, 200, "{}", a.text);
}

#[test]
fn a_shared_workspace_is_read_write_or_read_only_as_granted_and_invisible_otherwise() {
    let stack = ControlStack::start("");
    let admin = stack.token("root", true);
    let alice = stack.token_with("alice", vec!["dev".into()], 3600);
    let carol = stack.token("carol", false);
    let bob = stack.token("bob", false);
    // Only an admin makes one.
    let a = call(
        &stack,
        &alice,
        "POST",
        "/v1/shared-workspaces",
        Some(json!({"name": "team"})),
    );
    assert_eq!(a.status, 403, "{}", a.text);
    let a = call(
        &stack,
        &admin,
        "POST",
        "/v1/shared-workspaces",
        Some(json!({"name": "team"})),
    );
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(a.body["origin"], "shared");
    let team = a.body["id"].as_str().unwrap().to_owned();
    grant(
        &stack,
        &admin,
        &team,
        json!([{"to": "role:dev", "access": "rw"}, {"to": "user:carol", "access": "ro"}]),
    );
    for bad in [
        json!([{"to": "group:x", "access": "rw"}]),
        json!([{"to": "user:carol", "access": "rwx"}]),
    ] {
        let a = call(
            &stack,
            &admin,
            "PATCH",
            &format!("/v1/shared-workspaces/{team}"),
            Some(json!({ "grants": bad })),
        );
        assert_eq!(a.status, 400, "{bad}: {}", a.text);
    }

    // alice (role dev) writes in it.
    let listed = call(&stack, &alice, "GET", "/v1/workspaces", None);
    let seen = listed.body["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == team.as_str())
        .cloned();
    assert_eq!(
        seen.as_ref().map(|w| w["access"].clone()),
        Some(json!("rw")),
        "{}",
        listed.text
    );
    let s = session_on(&stack, &alice, &team);
    assert_eq!(s.status, 201, "{}\n{}", s.text, stack.log_text());
    let s = s.body["id"].as_str().unwrap().to_owned();
    let (ok, out) = sh(
        &stack,
        &s,
        "echo from-alice > /home/user/shared-note && cat /home/user/shared-note",
    );
    assert!(ok, "{out}");
    end(&stack, &alice, &s);

    // carol reads it and cannot write.
    let s = session_on(&stack, &carol, &team);
    assert_eq!(s.status, 201, "{}", s.text);
    let s = s.body["id"].as_str().unwrap().to_owned();
    assert_eq!(
        sh(&stack, &s, "cat /home/user/shared-note"),
        (true, "from-alice\n".into())
    );
    let (ok, out) = sh(&stack, &s, "echo x > /home/user/other");
    assert!(!ok, "carol wrote in a read-only workspace: {out}");
    let label = docker(&[
        "inspect",
        "-f",
        "{{index .Config.Labels \"termgate.workspace.access\"}}",
        &container_of(&stack, &s),
    ]);
    assert_eq!(label, "ro");
    // She may not rename or delete it.
    let a = call(
        &stack,
        &carol,
        "DELETE",
        &format!("/v1/workspaces/{team}"),
        None,
    );
    assert_eq!(a.status, 403, "{}", a.text);
    // In use: the admin's delete is refused too, naming the session.
    let a = call(
        &stack,
        &admin,
        "DELETE",
        &format!("/v1/shared-workspaces/{team}"),
        None,
    );
    assert_eq!(a.status, 409, "{}", a.text);
    assert!(a.text.contains(&s), "{}", a.text);
    end(&stack, &carol, &s);

    // bob has no grant: the same 404 as an unknown id, and it is not listed.
    let theirs = session_on(&stack, &bob, &team);
    let unknown = session_on(&stack, &bob, "abcdefghijk234mn");
    assert_eq!(theirs.status, 404, "{}", theirs.text);
    assert_eq!(theirs.body, unknown.body);
    assert!(!call(&stack, &bob, "GET", "/v1/workspaces", None)
        .text
        .contains(&team));

    // Ending sessions left it; the admin's delete removes it and its volume.
    let volume = format!("termgate-shared-{}-{team}", stack.instance);
    assert!(volume_exists(&volume));
    let a = call(
        &stack,
        &admin,
        "DELETE",
        &format!("/v1/shared-workspaces/{team}"),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    assert!(!volume_exists(&volume));
    let log = stack.log_text();
    for line in [
        "shared workspace registered",
        "shared workspace granted",
        "shared workspace deleted",
    ] {
        assert!(log.contains(line), "audit has {line:?}");
    }
}

#[test]
fn a_borrowed_volume_is_mounted_where_granted_and_never_removed() {
    let mut stack = ControlStack::prepare("");
    let borrowed = format!("datasets-{}", stack.instance);
    let text = std::fs::read_to_string(stack.dir.config_path()).unwrap();
    let text = text.replacen(
        "[docker]\n",
        &format!("[docker]\nshared_volumes = [\"{borrowed}\"]\n"),
        1,
    );
    stack.dir.write_config(&text);
    stack.spawn(&[]);
    docker(&["volume", "create", &borrowed]);
    let _cleanup = RemoveVolume(borrowed.clone());
    // Written by whatever owns it: termgate only mounts it.
    docker(&[
        "run",
        "--rm",
        "-u",
        "0:0",
        "-v",
        &format!("{borrowed}:/d"),
        "--entrypoint",
        "sh",
        "termgate/session:dev",
        "-c",
        "echo kept > /d/data && chown -R 1000:1000 /d",
    ]);
    let admin = stack.token("root", true);
    let alice = stack.token("alice", false);

    // Only what the configuration lists may be registered.
    let a = call(
        &stack,
        &admin,
        "POST",
        "/v1/shared-workspaces",
        Some(json!({"name": "x", "volume": "some-other-volume"})),
    );
    assert_eq!(a.status, 400, "{}", a.text);
    let a = call(
        &stack,
        &admin,
        "POST",
        "/v1/shared-workspaces",
        Some(json!({"name": "datasets", "volume": borrowed})),
    );
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(a.body["origin"], "borrowed");
    let id = a.body["id"].as_str().unwrap().to_owned();
    grant(
        &stack,
        &admin,
        &id,
        json!([{"to": "user:alice", "access": "rw"}]),
    );

    let s = session_on(&stack, &alice, &id);
    assert_eq!(s.status, 201, "{}\n{}", s.text, stack.log_text());
    let s = s.body["id"].as_str().unwrap().to_owned();
    assert_eq!(
        sh(&stack, &s, "cat /home/user/data"),
        (true, "kept\n".into())
    );
    end(&stack, &alice, &s);
    assert!(volume_exists(&borrowed), "a session's end leaves it");
    // A copy of it is alice's own; deleting the copy leaves the borrowed volume.
    let copy = start_copy(&stack, &alice, &id, "mine");
    let done = copied(&stack, &alice, &copy);
    assert_eq!(done["state"], "ready", "{done}\n{}", stack.log_text());
    let a = call(
        &stack,
        &alice,
        "DELETE",
        &format!("/v1/workspaces/{copy}"),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    // The user's delete of the borrowed one is refused; the admin's drops the record only.
    let a = call(
        &stack,
        &alice,
        "DELETE",
        &format!("/v1/workspaces/{id}"),
        None,
    );
    assert_eq!(a.status, 403, "{}", a.text);
    let a = call(
        &stack,
        &admin,
        "DELETE",
        &format!("/v1/shared-workspaces/{id}"),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    assert!(
        volume_exists(&borrowed),
        "the borrowed volume outlived every delete"
    );
}

/// Removes the test's own volume however the test ends.
struct RemoveVolume(String);

impl Drop for RemoveVolume {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["volume", "rm", "-f", &self.0])
            .output();
    }
}

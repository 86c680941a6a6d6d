//! Secrets an admin registers by reference, against a real Docker daemon through a real
//! dockgate with the real control binary: granted to a role, read (read-only) in the
//! sessions of its users and absent from everyone else's, fixed when a session is
//! made, and the value in no answer, audit line, log or byte of the state directory.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use e2e::stack::ControlStack;
use e2e::workspaces::{call, end, exec};
use serde_json::{json, Value};

const SECRET: &str = "github-token";

/// A control stack whose `docker.secrets_dir` is `dir`.
fn stack_with_secrets_dir(dir: &Path) -> ControlStack {
    let mut stack = ControlStack::prepare("");
    stack.set_env(
        "TERMGATE__DOCKER__SECRETS_DIR",
        dir.to_str().expect("a UTF-8 path"),
    );
    stack.spawn(&[]);
    stack
}

/// A new session of the default profile as the holder of `token`: its id.
fn session(stack: &ControlStack, token: &str) -> String {
    let a = call(
        stack,
        token,
        "POST",
        "/v1/sessions",
        Some(json!({"profile": "default"})),
    );
    assert_eq!(a.status, 201, "create: {}\n{}", a.text, stack.log_text());
    a.body["id"].as_str().expect("an id").to_owned()
}

/// Runs `script` in a session, asserting it succeeds: its output.
fn sh(stack: &ControlStack, s: &str, script: &str) -> String {
    let (ok, out) = exec(stack, s, script);
    assert!(ok, "{script}: {out}");
    out
}

fn has_secret(stack: &ControlStack, s: &str) -> bool {
    sh(
        stack,
        s,
        &format!("test -e /run/secrets/{SECRET} && echo yes || echo no"),
    ) == "yes\n"
}

fn grant(stack: &ControlStack, admin: &str, grants: Value) -> Value {
    let a = call(
        stack,
        admin,
        "PATCH",
        &format!("/v1/secrets/{SECRET}"),
        Some(json!({ "grants": grants })),
    );
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

#[test]
fn a_registered_secret_is_read_only_in_granted_sessions_absent_elsewhere_and_its_value_goes_nowhere_else(
) {
    let secrets = tempfile::tempdir().expect("a secrets directory");
    let value = format!("s3cr3t-{}", e2e::random_hex(12));
    let file = secrets.path().join("token");
    std::fs::write(&file, &value).expect("the secret's file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).expect("mode");
    let stack = stack_with_secrets_dir(secrets.path());
    let admin = stack.token("root", true);
    let alice = stack.token_with("alice", vec!["dev".into()], 3600);
    let bob = stack.token("bob", false);
    let mut answers = String::new();

    // Only an admin registers or lists: the same refusal as every admin endpoint.
    let registration = json!({"name": SECRET, "path": "token"});
    for (method, path, body) in [
        ("POST", "/v1/secrets", Some(registration.clone())),
        ("GET", "/v1/secrets", None),
        ("GET", "/v1/users", None),
        ("GET", "/v1/shared-workspaces", None),
    ] {
        let a = call(&stack, &alice, method, path, body);
        assert_eq!(a.status, 403, "{method} {path}: {}", a.text);
        assert_eq!(a.body["error"]["code"], "admin_required", "{}", a.text);
    }
    // A file outside the directory, a path with `..`, a name that is no file name.
    let outside = tempfile::NamedTempFile::new().expect("a file elsewhere");
    for (body, code) in [
        (
            json!({"name": SECRET, "path": outside.path()}),
            "secret_outside_dir",
        ),
        (
            json!({"name": SECRET, "path": "/etc/passwd"}),
            "secret_outside_dir",
        ),
        (
            json!({"name": SECRET, "path": "../token"}),
            "invalid_secret_path",
        ),
        (
            json!({"name": SECRET, "path": format!("{}/../x/token", secrets.path().display())}),
            "invalid_secret_path",
        ),
        (json!({"name": "a/b", "path": "token"}), "invalid_secret"),
        (
            json!({"name": ".hidden", "path": "token"}),
            "invalid_secret",
        ),
        (
            json!({"name": SECRET, "path": "token", "grants": [{"to": "group:x"}]}),
            "invalid_secret",
        ),
    ] {
        let a = call(&stack, &admin, "POST", "/v1/secrets", Some(body.clone()));
        assert_eq!(a.status, 400, "{body}: {}", a.text);
        assert_eq!(a.body["error"]["code"], code, "{body}: {}", a.text);
    }

    // Registered by a path relative to the directory, then granted to role dev.
    let a = call(
        &stack,
        &admin,
        "POST",
        "/v1/secrets",
        Some(registration.clone()),
    );
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(a.body["path"], file.display().to_string());
    assert_eq!(a.body["target"], format!("/run/secrets/{SECRET}"));
    assert_eq!(a.body["registered_by"], "root");
    answers.push_str(&a.text);
    let a = call(&stack, &admin, "POST", "/v1/secrets", Some(registration));
    assert_eq!(a.status, 409, "{}", a.text);
    assert_eq!(a.body["error"]["code"], "secret_name_taken");
    let granted = grant(&stack, &admin, json!([{"to": "role:dev"}]));
    assert_eq!(granted["grants"], json!([{"to": "role:dev"}]));
    let a = call(
        &stack,
        &admin,
        "GET",
        &format!("/v1/secrets/{SECRET}"),
        None,
    );
    assert_eq!(a.body["grants"], json!([{"to": "role:dev"}]), "{}", a.text);
    answers.push_str(&a.text);

    // alice (role dev) reads it, and cannot write it; bob has no such file.
    let s = session(&stack, &alice);
    assert_eq!(sh(&stack, &s, &format!("cat /run/secrets/{SECRET}")), value);
    let (wrote, out) = exec(&stack, &s, &format!("echo x > /run/secrets/{SECRET}"));
    assert!(!wrote, "a secret was written: {out}");
    let theirs = session(&stack, &bob);
    assert!(!has_secret(&stack, &theirs), "bob has it");
    end(&stack, &bob, &theirs);

    // Revoked: alice's running session keeps it, her next one has none.
    grant(&stack, &admin, json!([]));
    assert!(has_secret(&stack, &s), "fixed when the session was made");
    let next = session(&stack, &alice);
    assert!(!has_secret(&stack, &next), "granted no more");
    for path in [
        "/v1/sessions".to_owned(),
        format!("/v1/sessions/{s}"),
        "/v1/profiles".to_owned(),
    ] {
        answers.push_str(&call(&stack, &alice, "GET", &path, None).text);
    }
    end(&stack, &alice, &next);
    end(&stack, &alice, &s);

    // Deleted: forgotten, the file left alone.
    let a = call(
        &stack,
        &admin,
        "DELETE",
        &format!("/v1/secrets/{SECRET}"),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    let a = call(
        &stack,
        &admin,
        "GET",
        &format!("/v1/secrets/{SECRET}"),
        None,
    );
    assert_eq!(a.status, 404, "{}", a.text);
    assert_eq!(a.body["error"]["code"], "secret_not_found");
    assert!(file.exists());

    // The audit trail has each step, and nothing holds the value.
    let audit = call(&stack, &admin, "GET", "/v1/audit", None).text;
    for said in [
        "secret registered",
        "secret granted",
        "secret grant revoked",
        "secret deleted",
    ] {
        assert!(audit.contains(said), "no {said:?} in the audit trail");
    }
    answers.push_str(&audit);
    answers.push_str(&call(&stack, &admin, "GET", "/v1/secrets", None).text);
    assert!(answers.contains(SECRET), "the answers were read");
    e2e::workspaces::assert_secret_goes_nowhere(&stack, &answers, &value);
}

#[test]
fn without_a_secrets_dir_nothing_is_registered() {
    let stack = ControlStack::start("");
    let admin = stack.token("root", true);
    let a = call(
        &stack,
        &admin,
        "POST",
        "/v1/secrets",
        Some(json!({"name": SECRET, "path": "/srv/secrets/token"})),
    );
    assert_eq!(a.status, 400, "{}", a.text);
    assert_eq!(a.body["error"]["code"], "secrets_dir_not_set", "{}", a.text);
    let a = call(&stack, &admin, "GET", "/v1/secrets", None);
    assert_eq!(a.body, json!({"secrets": []}), "{}", a.text);
}

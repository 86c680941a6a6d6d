//! What the workspace suites do to a control stack's sessions and volumes: find a
//! session's container, run a command in it, end it and wait for its container to go,
//! ask whether a volume exists.

use std::time::Duration;

use serde_json::Value;

use crate::stack::{docker, wait_for, Answer, ControlStack};

/// How long a session's container may take to go.
const GONE: Duration = Duration::from_secs(30);

/// `method path` on control's API as the holder of `token`.
pub fn call(
    stack: &ControlStack,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Answer {
    stack.call(method, path, Some(token), body)
}

/// The id of session `session`'s container (empty: none).
pub fn container_of(stack: &ControlStack, session: &str) -> String {
    docker(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("label=termgate.instance={}", stack.instance),
        "--filter",
        &format!("label=termgate.session={session}"),
    ])
}

/// Runs `script` in a session's container as its user: whether it succeeded, and its
/// output and errors.
pub fn exec(stack: &ControlStack, session: &str, script: &str) -> (bool, String) {
    let o = std::process::Command::new("docker")
        .args([
            "exec",
            &container_of(stack, session),
            "/bin/sh",
            "-c",
            script,
        ])
        .output()
        .expect("docker exec");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// Ends a session as the holder of `token` and waits until its container is gone.
pub fn end(stack: &ControlStack, token: &str, session: &str) {
    let a = stack.call(
        "DELETE",
        &format!("/v1/sessions/{session}"),
        Some(token),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    wait_for("the session's container to go", GONE, || {
        container_of(stack, session).is_empty().then_some(())
    });
}

/// Starts a copy of workspace `id` named `name` as the holder of `token`; the new
/// workspace's id (202 `copying` asserted).
pub fn start_copy(stack: &ControlStack, token: &str, id: &str, name: &str) -> String {
    let a = call(
        stack,
        token,
        "POST",
        &format!("/v1/workspaces/{id}/copy"),
        Some(serde_json::json!({ "name": name })),
    );
    assert_eq!(a.status, 202, "{}", a.text);
    assert_eq!(a.body["state"], "copying", "{}", a.text);
    a.body["id"].as_str().expect("the copy's id").to_owned()
}

/// Waits until copy `id` is no longer `copying`; its view.
pub fn copied(stack: &ControlStack, token: &str, id: &str) -> Value {
    wait_for("the copy to end", Duration::from_secs(120), || {
        let w = call(stack, token, "GET", &format!("/v1/workspaces/{id}"), None);
        (w.body["state"] != "copying").then_some(w.body)
    })
}

/// Whether Docker has volume `name`.
pub fn volume_exists(name: &str) -> bool {
    std::process::Command::new("docker")
        .args(["volume", "inspect", name])
        .output()
        .expect("docker volume inspect")
        .status
        .success()
}

/// Asserts that the secret `value` is in none of `answers` (the API answers a test
/// read), control's or dockgate's log, or any byte of the stack's state directory.
pub fn assert_secret_goes_nowhere(stack: &ControlStack, answers: &str, value: &str) {
    assert!(!answers.contains(value), "an API answer holds the secret");
    assert!(
        !stack.log_text().contains(value),
        "control's log holds the secret"
    );
    if let Some(g) = &stack.dockgate {
        assert!(
            !g.log_text().contains(value),
            "dockgate's log holds the secret"
        );
    }
    let mut stored = Vec::new();
    files_under(stack.dir.dir.path(), &mut stored);
    assert!(stored.len() > 3, "the state directory was read");
    for (path, bytes) in &stored {
        let hit = bytes.windows(value.len()).any(|w| w == value.as_bytes());
        assert!(!hit, "{} holds the secret", path.display());
    }
}

/// Every file under `dir` with its bytes.
fn files_under(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p, bytes));
        }
    }
}

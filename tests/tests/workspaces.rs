//! Workspaces against a real Docker daemon, through a real dockgate, with the real
//! control binary and its sled directory: what a session writes stays with its
//! workspace, ephemeral ones go with their session, others' are not found, and a copy
//! is made by a throwaway job from an idle workspace only.

use std::time::Duration;

use e2e::stack::{docker, wait_for, ControlStack};
use e2e::workspaces::{call, container_of, copied, end, exec, start_copy, volume_exists};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

fn new_workspace(stack: &ControlStack, token: &str, name: &str) -> String {
    let a = call(
        stack,
        token,
        "POST",
        "/v1/workspaces",
        Some(json!({ "name": name })),
    );
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(a.body["state"], "ready");
    assert_eq!(a.body["origin"], "created");
    a.body["id"].as_str().unwrap().to_owned()
}

/// A session on `workspace` (an id, `new` or `ephemeral`; `None`: the home one).
fn session_on(stack: &ControlStack, token: &str, workspace: Option<&str>) -> Value {
    let mut body = json!({ "profile": "default" });
    if let Some(w) = workspace {
        body["workspace"] = json!(w);
    }
    let a = call(stack, token, "POST", "/v1/sessions", Some(body));
    assert_eq!(a.status, 201, "create: {}\n{}", a.text, stack.log_text());
    a.body
}

fn workspace(stack: &ControlStack, token: &str, id: &str) -> Value {
    let a = call(stack, token, "GET", &format!("/v1/workspaces/{id}"), None);
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

fn volume_of(stack: &ControlStack, id: &str) -> String {
    format!("termgate-ws-{}-{id}", stack.instance)
}

/// Runs `script` in a session's container; its output, asserting success.
fn sh(stack: &ControlStack, session: &str, script: &str) -> String {
    let (ok, out) = exec(stack, session, script);
    assert!(ok, "{script}: {out}");
    out
}

/// Every file under the workspace with its mode, owner, size, number of links, time
/// (a directory's too; not a symbolic link's own) and checksum, sorted.
const LISTING: &str = "cd /home/user && find . -mindepth 1 | sort | while read -r f; do \
     if [ -f \"$f\" ] && [ ! -L \"$f\" ]; then s=$(sha256sum \"$f\" | cut -d' ' -f1); else s=-; fi; \
     if [ -L \"$f\" ]; then t=-; else t=$(stat -c %Y \"$f\"); fi; \
     echo \"$f $(stat -c '%a %u:%g %s %h' \"$f\") $t $s\"; done";

#[test]
fn a_file_stays_with_its_workspace_and_nowhere_else() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let w1 = new_workspace(&stack, &alice, "project");
    let s1 = session_on(&stack, &alice, Some(&w1));
    assert_eq!(s1["workspace"]["id"], w1.as_str());
    assert_eq!(s1["workspace"]["name"], "project");
    let s1 = s1["id"].as_str().unwrap().to_owned();
    sh(&stack, &s1, "echo kept-across-sessions > /home/user/marker");
    let listed = workspace(&stack, &alice, &w1);
    assert_eq!(listed["in_use_by"][0]["id"], s1.as_str());
    end(&stack, &alice, &s1);
    assert_eq!(workspace(&stack, &alice, &w1)["in_use_by"], json!([]));

    // The next session on the same workspace finds the file.
    let s2 = session_on(&stack, &alice, Some(&w1))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        sh(&stack, &s2, "cat /home/user/marker"),
        "kept-across-sessions\n"
    );
    end(&stack, &alice, &s2);
    // A session on a new workspace, on the home one and on an ephemeral one does not.
    let fresh = session_on(&stack, &alice, Some("new"));
    assert_eq!(fresh["workspace"]["name"], "default");
    let home = session_on(&stack, &alice, None);
    assert_eq!(home["workspace"]["name"], "home");
    let eph = session_on(&stack, &alice, Some("ephemeral"));
    assert_eq!(eph["workspace"], json!({"id": null, "name": "ephemeral"}));
    for s in [&fresh, &home, &eph] {
        let id = s["id"].as_str().unwrap();
        assert_eq!(
            sh(
                &stack,
                id,
                "test -e /home/user/marker && echo there || echo absent"
            ),
            "absent\n",
            "{s}"
        );
    }
    // The list has the home workspace, the one made for "new" and the project.
    let a = call(&stack, &alice, "GET", "/v1/workspaces", None);
    let names: Vec<&str> = a.body["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "home", "project"], "{}", a.text);
}

#[test]
fn an_ephemeral_workspace_goes_with_its_session() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let s = session_on(&stack, &alice, Some("ephemeral"))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    sh(&stack, &s, "echo scratch > /home/user/scratch");
    let c = container_of(&stack, &s);
    let mounts: Value =
        serde_json::from_str(&docker(&["inspect", "--format", "{{json .Mounts}}", &c])).unwrap();
    let volume = mounts
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Destination"] == "/home/user")
        .and_then(|m| m["Name"].as_str())
        .expect("an anonymous volume at the mount point")
        .to_owned();
    assert!(volume_exists(&volume));
    end(&stack, &alice, &s);
    wait_for("the ephemeral volume to go", T, || {
        (!volume_exists(&volume)).then_some(())
    });
}

#[test]
fn another_users_workspace_is_not_found_whatever_is_asked() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let bob = stack.token("bob", false);
    let w = new_workspace(&stack, &alice, "private");
    let unknown = "abcdefghijk234mn";
    let asks = |id: &str| {
        vec![
            ("GET", format!("/v1/workspaces/{id}"), None),
            (
                "PATCH",
                format!("/v1/workspaces/{id}"),
                Some(json!({"name": "mine"})),
            ),
            ("DELETE", format!("/v1/workspaces/{id}"), None),
            (
                "POST",
                format!("/v1/workspaces/{id}/copy"),
                Some(json!({"name": "stolen"})),
            ),
            (
                "POST",
                "/v1/sessions".to_owned(),
                Some(json!({"profile": "default", "workspace": id})),
            ),
        ]
    };
    for (theirs, never) in asks(&w).into_iter().zip(asks(unknown)) {
        let a = call(&stack, &bob, theirs.0, &theirs.1, theirs.2.clone());
        let b = call(&stack, &bob, never.0, &never.1, never.2.clone());
        assert_eq!(a.status, 404, "{} {}: {}", theirs.0, theirs.1, a.text);
        assert_eq!(
            a.body, b.body,
            "{} {}: the same answer as an unknown id",
            theirs.0, theirs.1
        );
        assert_eq!(a.body["error"]["code"], "workspace_not_found");
    }
    // Bob's listing does not show it; alice's workspace is untouched.
    let listed = call(&stack, &bob, "GET", "/v1/workspaces", None);
    assert!(!listed.text.contains(&w), "{}", listed.text);
    assert_eq!(workspace(&stack, &alice, &w)["name"], "private");
    assert!(
        stack.containers().is_empty(),
        "bob's create made no container"
    );
}

#[test]
fn a_workspace_in_use_is_neither_deleted_nor_copied() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let w = new_workspace(&stack, &alice, "busy");
    let s = session_on(&stack, &alice, Some(&w))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let del = call(
        &stack,
        &alice,
        "DELETE",
        &format!("/v1/workspaces/{w}"),
        None,
    );
    assert_eq!(del.status, 409, "{}", del.text);
    assert_eq!(del.body["error"]["code"], "workspace_in_use");
    assert!(
        del.text.contains(&s),
        "the refusal names the session: {}",
        del.text
    );
    let copy = call(
        &stack,
        &alice,
        "POST",
        &format!("/v1/workspaces/{w}/copy"),
        Some(json!({"name": "snap"})),
    );
    assert_eq!(copy.status, 409, "{}", copy.text);
    assert!(copy.text.contains(&s), "{}", copy.text);
    // The home workspace is kept whatever happens.
    let list = call(&stack, &alice, "GET", "/v1/workspaces", None);
    let home = list.body["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["origin"] == "home")
        .expect("a home workspace")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = call(
        &stack,
        &alice,
        "DELETE",
        &format!("/v1/workspaces/{home}"),
        None,
    );
    assert_eq!(a.status, 409, "{}", a.text);
    // Once the session ended it goes, its volume with it.
    let volume = volume_of(&stack, &w);
    assert!(volume_exists(&volume));
    end(&stack, &alice, &s);
    let a = call(
        &stack,
        &alice,
        "DELETE",
        &format!("/v1/workspaces/{w}"),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
    assert!(!volume_exists(&volume), "its volume was removed");
    let a = call(&stack, &alice, "GET", &format!("/v1/workspaces/{w}"), None);
    assert_eq!(a.status, 404);
    let audit = stack.log_text();
    for line in ["workspace created", "workspace deleted"] {
        assert!(audit.contains(line), "audit has {line:?}");
    }
}

#[test]
fn a_copy_equals_its_source_and_leaves_it_unchanged() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let src = new_workspace(&stack, &alice, "source");
    let s = session_on(&stack, &alice, Some(&src))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    sh(
        &stack,
        &s,
        "cd /home/user && mkdir -p a/b/c && echo one > a/one && echo two > a/b/c/two \
         && head -c 3000000 /dev/urandom > a/blob && chmod 600 a/one && chmod 750 a/b \
         && ln -s a/one link && touch -d '2020-01-01 00:00' a/b/c/two && ln a/one a/b/hard \
         && mkdir -p ro/in && echo three > ro/in/three && chmod 555 ro/in && chmod 500 ro \
         && touch -d '2021-02-03 04:05' a/b ro && rm -f .profile",
    );
    let before = sh(&stack, &s, LISTING);
    end(&stack, &alice, &s);

    let copy = start_copy(&stack, &alice, &src, "copy");
    let done = copied(&stack, &alice, &copy);
    assert_eq!(done["state"], "ready", "{done}\n{}", stack.log_text());
    assert_eq!(done["copied_from"], src.as_str());
    // The job is gone.
    let jobs = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=termgate.instance={}", stack.instance),
        "--filter",
        "label=termgate.managed=copy",
    ]);
    assert!(jobs.is_empty(), "the copy job was removed: {jobs}");

    let on_copy = session_on(&stack, &alice, Some(&copy))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        sh(&stack, &on_copy, LISTING),
        before,
        "the copy has the same tree"
    );
    assert!(
        sh(&stack, &on_copy, "stat -c %y /home/user/a/b/c/two").starts_with("2020-01-01"),
        "times are kept"
    );
    end(&stack, &alice, &on_copy);
    let on_src = session_on(&stack, &alice, Some(&src))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        sh(&stack, &on_src, LISTING),
        before,
        "the source is unchanged"
    );
    assert!(stack.log_text().contains("workspace copied"));
}

#[test]
fn a_copy_that_cannot_read_every_file_fails_and_leaves_no_volume() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    for (name, unreadable) in [
        ("a file", "echo secret > z && chmod 000 z"),
        ("a directory", "mkdir -p d && echo q > d/q && chmod 000 d"),
    ] {
        let src = new_workspace(&stack, &alice, name);
        let s = session_on(&stack, &alice, Some(&src))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        sh(
            &stack,
            &s,
            &format!("cd /home/user && echo a > a && {unreadable}"),
        );
        end(&stack, &alice, &s);
        let a = wait_for("the workspace to be idle", T, || {
            let a = call(
                &stack,
                &alice,
                "POST",
                &format!("/v1/workspaces/{src}/copy"),
                Some(json!({ "name": format!("{name}, copied") })),
            );
            // 409 while the session's record has not ended yet.
            (a.body["error"]["code"] != "workspace_in_use").then_some(a)
        });
        assert_eq!(a.status, 202, "{}", a.text);
        let copy = a.body["id"].as_str().unwrap().to_owned();
        let done = copied(&stack, &alice, &copy);
        assert_eq!(done["state"], "failed", "{name}: {done}");
        assert!(
            done["failure"]
                .as_str()
                .unwrap()
                .contains("the copy job exited with status"),
            "{name}: {done}"
        );
        assert!(
            !volume_exists(&volume_of(&stack, &copy)),
            "{name}: the half-made volume was removed"
        );
    }
}

#[test]
fn a_copy_cut_short_by_a_crash_is_never_ready() {
    let mut stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    let src = new_workspace(&stack, &alice, "source");
    let s = session_on(&stack, &alice, Some(&src))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    sh(&stack, &s, "head -c 20000000 /dev/urandom > /home/user/big");
    end(&stack, &alice, &s);
    stack.kill9();
    stack.spawn(&[("TERMGATE_FAILPOINT", "copy:after_start")]);
    let copy = start_copy(&stack, &alice, &src, "half");
    stack.wait_exit(T);
    assert!(stack
        .log_text()
        .contains("failpoint copy:after_start: aborting"));
    stack.spawn(&[]);
    let w = workspace(&stack, &alice, &copy);
    assert_eq!(w["state"], "failed", "{w}");
    assert!(
        w["failure"].as_str().unwrap().contains("control stopped"),
        "{w}"
    );
    assert!(
        !volume_exists(&volume_of(&stack, &copy)),
        "the half-made volume was removed"
    );
    let jobs = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=termgate.instance={}", stack.instance),
        "--filter",
        "label=termgate.managed=copy",
    ]);
    assert!(jobs.is_empty(), "the job was removed: {jobs}");
    // A failed copy is not offered to a session, and can be deleted.
    let a = call(
        &stack,
        &alice,
        "POST",
        "/v1/sessions",
        Some(json!({"profile": "default", "workspace": copy})),
    );
    assert_eq!(a.status, 409, "{}", a.text);
    let a = call(
        &stack,
        &alice,
        "DELETE",
        &format!("/v1/workspaces/{copy}"),
        None,
    );
    assert_eq!(a.status, 204, "{}", a.text);
}

#[test]
fn a_profile_without_a_choice_refuses_one() {
    let stack = ControlStack::start("[profiles.plain]\nimage = \"termgate/session:dev\"\nhome = \"/home/user\"\nworkspace = \"home\"\n");
    let alice = stack.token("alice", false);
    let w = new_workspace(&stack, &alice, "x");
    for choice in [w.as_str(), "new", "ephemeral"] {
        let a = call(
            &stack,
            &alice,
            "POST",
            "/v1/sessions",
            Some(json!({"profile": "plain", "workspace": choice})),
        );
        assert_eq!(a.status, 400, "{choice}: {}", a.text);
        assert_eq!(a.body["error"]["code"], "invalid_workspace");
    }
    let a = call(
        &stack,
        &alice,
        "POST",
        "/v1/sessions",
        Some(json!({"profile": "plain"})),
    );
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(a.body["workspace"]["name"], "home");
}

#[test]
fn a_secret_is_mounted_by_reference_and_its_value_goes_nowhere_else() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = tempfile::tempdir().expect("temp dir");
    let value = format!("s3cr3t-{}", e2e::random_hex(12));
    let file = secrets.path().join("token");
    std::fs::write(&file, &value).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
    let profile = format!(
        "[profiles.vault]\nimage = \"termgate/session:dev\"\nhome = \"/home/user\"\n\
         [profiles.vault.secrets]\ntoken = \"{}\"\n",
        file.display()
    );
    let mut stack = ControlStack::prepare("");
    let text = std::fs::read_to_string(stack.dir.config_path()).unwrap();
    let text = text.replacen(
        "[docker]\n",
        &format!("[docker]\nsecrets_dir = \"{}\"\n", secrets.path().display()),
        1,
    );
    stack.dir.write_config(&format!("{text}\n{profile}"));
    stack.spawn(&[]);
    let alice = stack.token("alice", false);
    let a = call(
        &stack,
        &alice,
        "POST",
        "/v1/sessions",
        Some(json!({"profile": "vault"})),
    );
    assert_eq!(a.status, 201, "{}\n{}", a.text, stack.log_text());
    let s = a.body["id"].as_str().unwrap().to_owned();
    assert_eq!(
        sh(&stack, &s, "cat /run/secrets/token"),
        value,
        "the session reads it"
    );
    assert_eq!(
        sh(
            &stack,
            &s,
            "(echo x > /run/secrets/token) 2>/dev/null && echo written || echo refused"
        ),
        "refused\n",
        "read-only"
    );
    // Nothing termgate answers, logs or stores holds the value.
    let mut answers = String::new();
    for path in [
        "/v1/profiles",
        "/v1/sessions",
        "/v1/workspaces",
        &format!("/v1/sessions/{s}"),
    ] {
        answers.push_str(&call(&stack, &alice, "GET", path, None).text);
    }
    let admin = stack.token("root", true);
    answers.push_str(&call(&stack, &admin, "GET", "/v1/audit", None).text);
    assert!(answers.contains("vault"), "the answers were read");
    end(&stack, &alice, &s);
    e2e::workspaces::assert_secret_goes_nowhere(&stack, &answers, &value);
}

#[test]
fn sizes_are_measured_and_volumes_at_odds_with_their_records_are_said_not_removed() {
    let stack = ControlStack::start("");
    let alice = stack.token("alice", false);
    // A session writes 3 MB; once it ends, the workspace's size says so.
    let w = new_workspace(&stack, &alice, "sized");
    let s = session_on(&stack, &alice, Some(&w))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    sh(&stack, &s, "head -c 3000000 /dev/urandom > /home/user/blob");
    end(&stack, &alice, &s);
    let size = wait_for("the workspace's size to be measured", T, || {
        workspace(&stack, &alice, &w)["size_bytes"]
            .as_u64()
            .filter(|n| *n >= 3_000_000)
    });
    assert!(size < 4_000_000, "{size}");
    let listed = call(&stack, &alice, "GET", "/v1/workspaces", None);
    let home = listed.body["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "home")
        .cloned()
        .unwrap();
    assert!(home["size_bytes"].is_null(), "never mounted: {home}");

    // A volume with this deployment's workspace labels that no record names, and a
    // record whose volume was removed behind control's back: both are said, neither
    // is removed or forgotten.
    let stray = format!("termgate-ws-{}-zzzzzzzzzzzzzzzz", stack.instance);
    docker(&[
        "volume",
        "create",
        "--label",
        "termgate.managed=workspace",
        "--label",
        &format!("termgate.instance={}", stack.instance),
        "--label",
        "termgate.owner=mallory",
        "--label",
        "termgate.workspace=zzzzzzzzzzzzzzzz",
        &stray,
    ]);
    let gone = new_workspace(&stack, &alice, "gone");
    let s = session_on(&stack, &alice, Some(&gone))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    end(&stack, &alice, &s);
    docker(&["volume", "rm", &volume_of(&stack, &gone)]);
    wait_for("both to be said in the audit trail", T, || {
        let log = stack.log_text();
        let said =
            |what: &str, volume: &str| log.lines().any(|l| l.contains(what) && l.contains(volume));
        (said("no workspace record names it", &stray)
            && said("workspace volume missing", &volume_of(&stack, &gone)))
        .then_some(())
    });
    assert!(volume_exists(&stray), "a volume without a record is kept");
    assert_eq!(workspace(&stack, &alice, &gone)["name"], "gone");
    // Said once, not on every pass.
    std::thread::sleep(Duration::from_secs(3));
    let times = stack
        .log_text()
        .lines()
        .filter(|l| l.contains("no workspace record names it") && l.contains(&stray))
        .count();
    assert_eq!(times, 1);
    docker(&["volume", "rm", &stray]);
}

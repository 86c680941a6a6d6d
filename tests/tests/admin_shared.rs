//! The admin console's shared workspaces and secrets, in a real browser (headless
//! chromium) in front of real control, gateway, ttyd and Docker: a shared workspace
//! made, granted, shown in use while a granted user's session runs on it, and deleted
//! once it is not; a secret registered by reference, granted and deleted.

use std::time::Duration;

use e2e::page::{check_js, launch, ok, sign_in_by_link_as};
use e2e::stack::{wait_for, GatewayStack};
use e2e::workspaces::{call, end, volume_exists};
use serde_json::json;

const T: Duration = Duration::from_secs(15);

/// The row of shared workspace `name` holds `test` (a JS expression over `r`, the row).
fn row_shows(name: &str, test: &str) -> String {
    format!(
        "(() => {{ const r = [...document.querySelectorAll('#shared-rows tr')] \
           .find((r) => r.cells[0].textContent === {}); return !!r && ({test}); }})()",
        json!(name)
    )
}

#[test]
fn the_console_makes_grants_and_deletes_a_shared_workspace() {
    let stack = GatewayStack::start("");
    let mut b = launch();
    sign_in_by_link_as(&mut b, &stack, "root", true);
    ok("open the console", b.navigate(&stack.url(0, "/admin")));
    ok(
        "the shared workspaces section",
        b.wait_js(
            "!document.getElementById('no-shared').hidden",
            T,
            "no shared workspace yet",
        ),
    );
    ok(
        "make one",
        b.eval(
            "document.getElementById('shared-name').value = 'team'; \
             document.getElementById('shared-form').requestSubmit(); true",
        ),
    );
    ok(
        "its row",
        b.wait_js(
            &row_shows("team", "r.cells[1].textContent === 'made by termgate'"),
            T,
            "the row of team",
        ),
    );
    // Granted to alice, read-write, from the row's field.
    ok(
        "grant it",
        b.eval(
            "(() => { const r = [...document.querySelectorAll('#shared-rows tr')].find((r) => r.cells[0].textContent === 'team'); \
               r.querySelector('input').value = 'user:alice=rw, role:ops=ro'; \
               [...r.querySelectorAll('button')].find((b) => b.textContent === 'Save').click(); return true; })()"
        ),
    );
    let admin = stack.control.token("root", true);
    let id = wait_for("the grants saved", T, || {
        let a = call(&stack.control, &admin, "GET", "/v1/shared-workspaces", None);
        let w = a.body["workspaces"].as_array()?.first()?.clone();
        (w["grants"]
            == json!([{"to": "user:alice", "access": "rw"}, {"to": "role:ops", "access": "ro"}]))
        .then(|| w["id"].as_str().unwrap().to_owned())
    });

    // alice's session on it: the console shows it in use, and Delete waits.
    let alice = stack.control.token("alice", false);
    let s = call(
        &stack.control,
        &alice,
        "POST",
        "/v1/sessions",
        Some(json!({"profile": "default", "workspace": id, "name": "on-team"})),
    );
    assert_eq!(s.status, 201, "{}", s.text);
    let session = s.body["id"].as_str().unwrap().to_owned();
    ok(
        "in use",
        b.wait_js(
            &row_shows(
                "team",
                "r.cells[4].textContent === 'on-team' && [...r.querySelectorAll('button')].find((b) => b.textContent === 'Delete').disabled",
            ),
            T,
            "team in use by on-team, Delete disabled",
        ),
    );
    end(&stack.control, &alice, &session);
    ok(
        "no longer in use",
        b.wait_js(
            &row_shows(
                "team",
                "r.cells[4].textContent === '—' && !r.querySelector('button:disabled')",
            ),
            T,
            "team idle",
        ),
    );
    let volume = format!("termgate-shared-{}-{id}", stack.control.instance);
    assert!(
        volume_exists(&volume),
        "its volume was made by alice's session"
    );
    ok(
        "delete it",
        b.eval(
            "(() => { const r = [...document.querySelectorAll('#shared-rows tr')].find((r) => r.cells[0].textContent === 'team'); \
               [...r.querySelectorAll('button')].find((b) => b.textContent === 'Delete').click(); return true; })()",
        ),
    );
    ok(
        "gone from the console",
        b.wait_js(
            "!document.getElementById('no-shared').hidden",
            T,
            "no shared workspace",
        ),
    );
    check_js(
        &mut b,
        "the console said so",
        "document.getElementById('status').textContent === 'Deleted shared workspace team.'",
    );
    assert!(
        !volume_exists(&volume),
        "termgate made it, so its volume went too"
    );
}

/// The row of secret `name` holds `test` (a JS expression over `r`, the row).
fn secret_row_shows(name: &str, test: &str) -> String {
    format!(
        "(() => {{ const r = [...document.querySelectorAll('#secret-rows tr')] \
           .find((r) => r.cells[0].textContent === {}); return !!r && ({test}); }})()",
        json!(name)
    )
}

#[test]
fn the_console_registers_grants_and_deletes_a_secret() {
    let secrets = tempfile::tempdir().expect("a secrets directory");
    std::fs::write(secrets.path().join("token"), "not read by termgate").expect("a file");
    let dir = secrets.path().display().to_string();
    let stack = GatewayStack::start_with_env("", &[("TERMGATE__DOCKER__SECRETS_DIR", &dir)]);
    let mut b = launch();
    sign_in_by_link_as(&mut b, &stack, "root", true);
    ok("open the console", b.navigate(&stack.url(0, "/admin")));
    ok(
        "the secrets section",
        b.wait_js(
            "!document.getElementById('no-secrets').hidden",
            T,
            "no secret yet",
        ),
    );
    let register = |name: &str, path: &str| {
        format!(
            "document.getElementById('secret-name').value = {}; \
             document.getElementById('secret-path').value = {}; \
             document.getElementById('secret-form').requestSubmit(); true",
            json!(name),
            json!(path)
        )
    };
    // A file outside the directory is refused, and the console says why.
    ok(
        "register outside",
        b.eval(&register("github-token", "/etc/passwd")),
    );
    ok(
        "the refusal",
        b.wait_js(
            "document.getElementById('status').textContent.includes('not a file under docker.secrets_dir')",
            T,
            "the refusal shown",
        ),
    );
    // Registered by a path relative to the directory.
    ok("register", b.eval(&register("github-token", "token")));
    ok(
        "its row",
        b.wait_js(
            &secret_row_shows(
                "github-token",
                &format!(
                    "r.cells[1].textContent === {} && r.cells[3].textContent.endsWith('by root')",
                    json!(format!("{dir}/token → /run/secrets/github-token"))
                ),
            ),
            T,
            "the row of github-token",
        ),
    );
    ok(
        "grant it",
        b.eval(
            "(() => { const r = [...document.querySelectorAll('#secret-rows tr')].find((r) => r.cells[0].textContent === 'github-token'); \
               r.querySelector('input').value = 'role:dev, user:carol'; \
               [...r.querySelectorAll('button')].find((b) => b.textContent === 'Save').click(); return true; })()",
        ),
    );
    let admin = stack.control.token("root", true);
    wait_for("the grants saved", T, || {
        let a = call(
            &stack.control,
            &admin,
            "GET",
            "/v1/secrets/github-token",
            None,
        );
        (a.body["grants"] == json!([{"to": "role:dev"}, {"to": "user:carol"}])).then_some(())
    });
    ok(
        "the grants shown",
        b.wait_js(
            &secret_row_shows(
                "github-token",
                "r.querySelector('input').value === 'role:dev, user:carol'",
            ),
            T,
            "the grants in the row",
        ),
    );
    ok(
        "delete it",
        b.eval(
            "(() => { const r = [...document.querySelectorAll('#secret-rows tr')].find((r) => r.cells[0].textContent === 'github-token'); \
               [...r.querySelectorAll('button')].find((b) => b.textContent === 'Delete').click(); return true; })()",
        ),
    );
    ok(
        "gone from the console",
        b.wait_js(
            "!document.getElementById('no-secrets').hidden",
            T,
            "no secret",
        ),
    );
    check_js(
        &mut b,
        "the console said so",
        "document.getElementById('status').textContent === 'Deleted secret github-token (its file is left alone).'",
    );
    let a = call(&stack.control, &admin, "GET", "/v1/secrets", None);
    assert_eq!(a.body, json!({"secrets": []}), "{}", a.text);
    assert!(
        secrets.path().join("token").exists(),
        "the file is left alone"
    );
}

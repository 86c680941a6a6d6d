//! The admin console's shared workspaces, in a real browser (headless chromium) in
//! front of real control, gateway, ttyd and Docker: made, granted, shown in use while a
//! granted user's session runs on it, and deleted once it is not.

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

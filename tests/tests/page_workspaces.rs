//! Workspaces on the sessions page, in a real browser (headless chromium) in front of
//! real control, gateway, ttyd and Docker: one made in the page, a session started on
//! it from the New session form, a file written in its terminal; the workspace shown in
//! use meanwhile and its Delete refused in words; copied once the session ended, the
//! copy followed until ready, and the file read back in a session on the copy; the
//! original deleted, and the copy renamed. A new workspace chosen in the form, its
//! size shown once its session ended, and an ephemeral one gone with its session.

use std::time::Duration;

use e2e::page::{
    artifact, browser_available, check_js, click_row_button, click_workspace_button,
    create_in_page_on, launch, ok, open_in_page_and_type, sign_in_by_link, submit_workspace_form,
    wait_workspace, workspace_row,
};
use e2e::stack::{docker, GatewayStack};
use e2e::workspaces::{call, container_of, volume_exists};
use serde_json::json;

const T: Duration = Duration::from_secs(15);
/// How long a session may take to end and leave its workspace.
const ENDED: Duration = Duration::from_secs(60);

/// The default profile lets the user choose a workspace; `plain` mounts none.
fn extra() -> String {
    let image =
        std::env::var("TERMGATE_SESSION_IMAGE").unwrap_or_else(|_| "termgate/session:dev".into());
    format!(
        r#"
[profiles.plain]
image = "{image}"
"#
    )
}

fn select_profile(b: &mut e2e::browser::Browser, name: &str) {
    check_js(
        b,
        &format!("choose profile {name}"),
        &format!(
            "(() => {{ const sel = document.getElementById('profile'); sel.value = {}; \
             sel.dispatchEvent(new Event('change')); return sel.value === {}; }})()",
            json!(name),
            json!(name)
        ),
    );
}

const CHOICES: &str = "[...document.getElementById('workspace').options].map((o) => o.textContent)";

#[test]
fn a_workspace_made_in_the_page_keeps_a_file_its_copy_has_too() {
    if !browser_available() {
        return;
    }
    let stack = GatewayStack::start(&extra());
    let alice = stack.control.token("alice", false);
    let mut b = launch();
    ok("a laptop viewport", b.set_viewport(1280, 900, false));
    sign_in_by_link(&mut b, &stack, "alice");

    // The home workspace is listed at once: the default, never deleted.
    wait_workspace(
        &mut b,
        "home",
        "r.cells[1].textContent === 'ready' && r.cells[2].textContent === '—' \
         && r.cells[3].textContent === '—' && r.cells[4].textContent === 'home (default)'",
        "the home workspace, ready, not in use",
    );
    check_js(
        &mut b,
        "home's Delete is disabled, saying why",
        &workspace_row(
            "home",
            "(() => { const d = [...r.querySelectorAll('button')].find((x) => x.textContent === 'Delete'); \
               return !!d && d.disabled && d.title === 'The home workspace is your default one and is kept.'; })()",
        ),
    );
    check_js(
        &mut b,
        "the list's heading",
        "!document.getElementById('workspaces').hidden \
         && document.getElementById('workspaces-title').textContent === 'Workspaces'",
    );

    // The New session form offers a choice for the default profile only.
    select_profile(&mut b, "default");
    assert_eq!(
        ok("the choices", b.eval(CHOICES)),
        json!([
            "home (default)",
            "New workspace",
            "Ephemeral (removed with the session)"
        ]),
    );
    select_profile(&mut b, "plain");
    check_js(
        &mut b,
        "no Workspace select for a profile that mounts none",
        "document.getElementById('workspace-choice').hidden",
    );
    select_profile(&mut b, "default");
    check_js(
        &mut b,
        "the select again, on the default",
        "!document.getElementById('workspace-choice').hidden \
         && document.getElementById('workspace').value === ''",
    );

    // A workspace made from the page's form.
    ok(
        "create proj",
        b.eval(
            "document.getElementById('workspace-name').value = 'proj'; \
             document.getElementById('workspace-form').requestSubmit(); true",
        ),
    );
    wait_workspace(
        &mut b,
        "proj",
        "r.cells[1].textContent === 'ready' && r.cells[3].textContent === '—' \
         && r.cells[4].textContent === 'created'",
        "proj, ready, not in use",
    );
    check_js(
        &mut b,
        "said so",
        "document.getElementById('status').textContent === 'Workspace proj created.' \
         && document.getElementById('workspace-name').value === ''",
    );
    let proj = ok(
        "proj's id",
        b.eval(
            "[...document.querySelectorAll('#workspace-rows tr')].find((r) => r.cells[0].textContent === 'proj').dataset.workspace",
        ),
    )
    .as_str()
    .expect("an id")
    .to_owned();

    // A session on it, chosen in the New session form.
    let first = create_in_page_on(&mut b, "on-proj", "proj");
    let seen = call(
        &stack.control,
        &alice,
        "GET",
        &format!("/v1/sessions/{first}"),
        None,
    );
    assert_eq!(
        seen.body["workspace"],
        json!({"id": proj, "name": "proj"}),
        "the page sent the workspace chosen: {}",
        seen.text
    );
    ok(
        "the session's row names its workspace",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{first}\"]'); \
                   return !!r && r.cells[9].textContent === 'proj'; }})()"
            ),
            T,
            "proj in the Workspace column",
        ),
    );
    wait_workspace(
        &mut b,
        "proj",
        "r.cells[3].textContent === 'in use by on-proj' \
         && (() => { const c = [...r.querySelectorAll('button')].find((x) => x.textContent === 'Copy'); \
              return c.disabled && c.title === 'In use by on-proj: end its session to copy it.'; })()",
        "proj in use by on-proj, Copy disabled saying why",
    );

    // Delete while in use: refused, in control's words, and the workspace stays.
    click_workspace_button(&mut b, "proj", "Delete");
    let refusal =
        format!("workspace \"proj\" is in use by session {first} (\"on-proj\"); end it first");
    ok(
        "the refusal shown",
        b.wait_js(
            &format!(
                "document.getElementById('status').textContent === {} \
                 && document.getElementById('status').className === 'error'",
                json!(refusal)
            ),
            T,
            "the in-use refusal in the status line",
        ),
    );
    wait_workspace(&mut b, "proj", "true", "proj still listed");

    // A file written in its terminal; the session ended from the terminal's bar.
    open_in_page_and_type(
        &mut b,
        &first,
        &["echo hello-ws > /home/user/marker && echo wrote-$((6*7))"],
        &["wrote-42"],
    );
    ok(
        "click End",
        b.eval("document.getElementById('end-terminal').click()"),
    );
    ok(
        "the session ended",
        b.wait_js(
            &format!(
                "!document.querySelector('#session-rows tr[data-session=\"{first}\"]') \
                 && !!document.querySelector('#ended-rows tr[data-session=\"{first}\"]')"
            ),
            ENDED,
            "on-proj gone from the active list, in the ended one",
        ),
    );
    wait_workspace(
        &mut b,
        "proj",
        "r.cells[3].textContent === '—' \
         && !([...r.querySelectorAll('button')].find((x) => x.textContent === 'Copy').disabled)",
        "proj no longer in use, Copy offered",
    );

    // Copied from the page: shown copying, followed until ready.
    check_js(
        &mut b,
        "watch the list for the copy's progress",
        "(() => { window.sawCopying = false; \
           new MutationObserver(() => { \
             if ([...document.querySelectorAll('#workspace-rows tr[data-workspace]')].some((r) => \
                   r.cells[0].textContent === 'proj-copy' && r.cells[1].textContent === 'copying…')) window.sawCopying = true; \
           }).observe(document.getElementById('workspace-rows'), { childList: true, subtree: true }); return true; })()",
    );
    click_workspace_button(&mut b, "proj", "Copy");
    check_js(
        &mut b,
        "the copy's name is asked under the row, no dialog",
        "document.getElementById('ws-edit-name') === document.activeElement \
         && document.querySelector('label[for=ws-edit-name]').textContent === 'Name of the copy of proj'",
    );
    submit_workspace_form(&mut b, "proj-copy");
    wait_workspace(
        &mut b,
        "proj-copy",
        "r.cells[1].textContent === 'ready' && r.cells[4].textContent === 'copy of proj'",
        "proj-copy ready, a copy of proj",
    );
    check_js(
        &mut b,
        "it was shown copying first",
        "window.sawCopying === true",
    );
    check_js(
        &mut b,
        "the page said it is ready, and the form is gone",
        "document.getElementById('status').textContent === 'Workspace proj-copy is ready.' \
         && !document.getElementById('ws-edit-name')",
    );
    assert!(
        b.dialogs().is_empty(),
        "no dialog was opened: {:?}",
        b.dialogs()
    );

    // A session on the copy finds the file.
    let second = create_in_page_on(&mut b, "on-copy", "proj-copy");
    open_in_page_and_type(&mut b, &second, &["cat /home/user/marker"], &["hello-ws"]);
    ok(
        "back to the list",
        b.eval("document.getElementById('close-terminal').click()"),
    );
    wait_workspace(
        &mut b,
        "proj-copy",
        "r.cells[3].textContent === 'in use by on-copy'",
        "proj-copy in use by on-copy",
    );
    wait_workspace(
        &mut b,
        "proj",
        "r.cells[3].textContent === '—'",
        "proj idle",
    );
    ok(
        "the list in view",
        b.eval("document.getElementById('workspaces').scrollIntoView(); true"),
    );
    ok("workspaces.png", b.screenshot(&artifact("workspaces.png")));

    // proj, whose session ended, is deleted and leaves the list (its volume too).
    let volume = format!("termgate-ws-{}-{proj}", stack.control.instance);
    assert!(
        volume_exists(&volume),
        "proj's volume was made by its session"
    );
    click_workspace_button(&mut b, "proj", "Delete");
    ok(
        "proj gone",
        b.wait_js(
            &format!(
                "!document.querySelector('#workspace-rows tr[data-workspace=\"{proj}\"]') \
                 && document.getElementById('status').textContent === 'Workspace proj deleted.'"
            ),
            T,
            "proj no longer listed",
        ),
    );
    let listed = call(&stack.control, &alice, "GET", "/v1/workspaces", None);
    let names: Vec<&str> = listed.body["workspaces"]
        .as_array()
        .expect("workspaces")
        .iter()
        .map(|w| w["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["home", "proj-copy"], "{}", listed.text);
    assert!(
        !volume_exists(&volume),
        "termgate made it, so its volume went too"
    );
    wait_workspace(
        &mut b,
        "proj-copy",
        "r.cells[4].textContent === 'copy'",
        "proj-copy, a copy of a workspace no longer listed",
    );

    // Renamed in place, while its session runs.
    click_workspace_button(&mut b, "proj-copy", "Rename");
    submit_workspace_form(&mut b, "kept");
    wait_workspace(
        &mut b,
        "kept",
        "r.cells[3].textContent === 'in use by on-copy'",
        "proj-copy renamed kept",
    );
    check_js(
        &mut b,
        "said so, and the Workspace select follows",
        &format!(
            "document.getElementById('status').textContent === 'Workspace proj-copy renamed kept.' \
             && JSON.stringify({CHOICES}) === JSON.stringify(['home (default)', 'kept', 'New workspace', 'Ephemeral (removed with the session)'])"
        ),
    );
    ok(
        "the session's row names it anew",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{second}\"]'); \
                   return !!r && r.cells[9].textContent === 'kept'; }})()"
            ),
            T,
            "kept in the Workspace column of on-copy",
        ),
    );
    check_js(
        &mut b,
        "focus back on the workspace's Rename",
        "document.activeElement.getAttribute('aria-label') === 'Rename workspace kept'",
    );
    click_row_button(&mut b, &second, "End");
    wait_workspace(
        &mut b,
        "kept",
        "r.cells[3].textContent === '—'",
        "kept idle once on-copy ended",
    );

    // On a phone the list, with a name form open, keeps to the screen.
    ok("a phone viewport", b.set_viewport(360, 740, true));
    click_workspace_button(&mut b, "kept", "Copy");
    ok(
        "the list in view",
        b.eval("document.getElementById('workspaces').scrollIntoView(); true"),
    );
    ok(
        "workspaces-phone.png",
        b.screenshot(&artifact("workspaces-phone.png")),
    );
    check_js(
        &mut b,
        "no sideways scrolling at 360 px",
        "document.documentElement.scrollWidth <= innerWidth",
    );
}

#[test]
fn a_new_workspace_keeps_its_size_and_an_ephemeral_one_goes_with_its_session() {
    if !browser_available() {
        return;
    }
    let stack = GatewayStack::start(&extra());
    let alice = stack.control.token("alice", false);
    let mut b = launch();
    ok("a laptop viewport", b.set_viewport(1280, 900, false));
    sign_in_by_link(&mut b, &stack, "alice");
    wait_workspace(&mut b, "home", "true", "the home workspace listed");
    select_profile(&mut b, "default");

    // "New workspace" in the form: one is made for the session, listed in use by it.
    let first = create_in_page_on(&mut b, "fresh", "New workspace");
    let seen = call(
        &stack.control,
        &alice,
        "GET",
        &format!("/v1/sessions/{first}"),
        None,
    );
    let made = seen.body["workspace"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("a workspace was made: {}", seen.text))
        .to_owned();
    assert!(seen.body["workspace"]["id"].is_string(), "{}", seen.text);
    wait_workspace(
        &mut b,
        &made,
        "r.cells[3].textContent === 'in use by fresh' && r.cells[4].textContent === 'created' \
         && r.cells[2].textContent === '—'",
        "the new workspace in use by fresh, its size not yet measured",
    );
    open_in_page_and_type(
        &mut b,
        &first,
        &["head -c 3145728 /dev/urandom > /home/user/blob && echo wrote-$((6*7))"],
        &["wrote-42"],
    );
    ok(
        "click End",
        b.eval("document.getElementById('end-terminal').click()"),
    );
    // Once the session ended its size is measured, and the list shows it unasked.
    wait_workspace(
        &mut b,
        &made,
        "r.cells[3].textContent === '—' && r.cells[2].textContent === '3.0 MiB'",
        "the new workspace idle, 3.0 MiB",
    );

    // "Ephemeral": nothing is listed for it, and its volume goes with the session.
    let rows = "document.querySelectorAll('#workspace-rows tr[data-workspace]').length";
    let before = ok("rows", b.eval(rows));
    let second = create_in_page_on(&mut b, "scratch", "Ephemeral (removed with the session)");
    ok(
        "the session's row says ephemeral",
        b.wait_js(
            &format!(
                "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{second}\"]'); \
                   return !!r && r.cells[9].textContent === 'ephemeral'; }})()"
            ),
            T,
            "ephemeral in the Workspace column",
        ),
    );
    assert_eq!(
        ok("rows", b.eval(rows)),
        before,
        "no workspace listed for it"
    );
    let container = container_of(&stack.control, &second);
    let mounts: serde_json::Value = serde_json::from_str(&docker(&[
        "inspect",
        "--format",
        "{{json .Mounts}}",
        &container,
    ]))
    .expect("mounts");
    let volume = mounts
        .as_array()
        .expect("a list")
        .iter()
        .find(|m| m["Destination"] == "/home/user")
        .and_then(|m| m["Name"].as_str())
        .expect("an anonymous volume at the mount point")
        .to_owned();
    open_in_page_and_type(
        &mut b,
        &second,
        &["echo scratch > /home/user/note && echo noted-$((6*7))"],
        &["noted-42"],
    );
    ok(
        "click End",
        b.eval("document.getElementById('end-terminal').click()"),
    );
    ok(
        "the session ended",
        b.wait_js(
            &format!("!!document.querySelector('#ended-rows tr[data-session=\"{second}\"]')"),
            ENDED,
            "scratch in the ended list",
        ),
    );
    e2e::stack::wait_for("the ephemeral volume to go", ENDED, || {
        (!volume_exists(&volume)).then_some(())
    });
    assert_eq!(
        ok("rows", b.eval(rows)),
        before,
        "still nothing listed for it"
    );
}

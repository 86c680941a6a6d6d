//! What the browser tests of the sessions page share: a headless browser, signing in
//! by link, creating and opening sessions from the page, reading its terminal.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::browser::Browser;
use crate::stack::GatewayStack;

const T: Duration = Duration::from_secs(15);

/// `artifacts/browser/<name>` under the checkout root (gitignored).
pub fn artifact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../artifacts/browser");
    std::fs::create_dir_all(&dir).expect("artifacts/browser");
    dir.join(name)
}

pub fn launch() -> Browser {
    Browser::launch().unwrap_or_else(|e| panic!("cannot start the browser: {e:#}"))
}

/// Unwraps a browser step, naming it.
pub fn ok<T>(step: &str, r: anyhow::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{step}: {e:#}"))
}

/// Opens a sign-in link for `sub` and waits for the sessions list to be shown and
/// loaded (rows, or the "No sessions yet." line).
pub fn sign_in_by_link(b: &mut Browser, stack: &GatewayStack, sub: &str) {
    sign_in_by_link_as(b, stack, sub, false);
}

/// [`sign_in_by_link`] with a token that is an admin's when `admin`.
pub fn sign_in_by_link_as(b: &mut Browser, stack: &GatewayStack, sub: &str, admin: bool) {
    let token = stack.control.token(sub, admin);
    ok(
        "open the sign-in link",
        b.navigate(&stack.url(0, &format!("/#token={token}"))),
    );
    ok(
        "the sessions list after sign-in",
        b.wait_js(
            &format!(
                "!document.getElementById('sessions').hidden \
                 && document.getElementById('profile').options.length > 0 \
                 && document.getElementById('who-name').textContent.split(' (')[0] === {} \
                 && (document.querySelectorAll('#session-rows tr').length > 0 \
                     || !document.getElementById('no-sessions').hidden)",
                json!(sub)
            ),
            T,
            "the sessions list",
        ),
    );
    assert_eq!(
        ok("the address bar", b.eval("location.hash")),
        json!(""),
        "the token must leave the address bar"
    );
}

/// Submits the create form, staying on the list (the page's "Open its terminal once it
/// runs" unticked), and returns the id of the new running row.
pub fn create_in_page(b: &mut Browser, name: &str) -> String {
    let before = ok(
        "rows before create",
        b.eval("[...document.querySelectorAll('#session-rows tr')].map((r) => r.dataset.session)"),
    );
    ok(
        "fill in the name, stay on the list",
        b.eval(&format!(
            "document.getElementById('name').value = {}; \
             document.getElementById('open-after-create').checked = false",
            json!(name)
        )),
    );
    ok(
        "click Create",
        b.eval("document.querySelector('#create-form button[type=submit]').click()"),
    );
    let id = ok(
        "a running row",
        b.wait_js(
            &format!(
                "(() => {{ const before = {before}; \
                 const r = [...document.querySelectorAll('#session-rows tr')].find((r) => \
                   !before.includes(r.dataset.session) && r.cells[2].textContent === 'running'); \
                 return r ? r.dataset.session : null; }})()"
            ),
            Duration::from_secs(60),
            "a new row whose state is running",
        ),
    );
    id.as_str().expect("session id").to_owned()
}

/// Clicks the button labelled `label` in the row of `id`.
pub fn click_row_button(b: &mut Browser, id: &str, label: &str) {
    let clicked = ok(
        &format!("click {label}"),
        b.eval(&format!(
            "(() => {{ const r = document.querySelector('#session-rows tr[data-session=\"{id}\"]'); \
             const btn = r && [...r.querySelectorAll('button')].find((x) => x.textContent === {}); \
             if (!btn) return false; btn.click(); return true; }})()",
            json!(label)
        )),
    );
    assert_eq!(clicked, json!(true), "no {label} button in the row of {id}");
}

/// Everything the terminal in the frame shows, one line per buffer row.
pub const TERMINAL_TEXT: &str = "(() => { \
    const t = document.getElementById('terminal-frame').contentWindow.term; \
    const b = t.buffer.active; const out = []; \
    for (let i = 0; i < b.length; i++) { const l = b.getLine(i); if (l) out.push(l.translateToString(true)); } \
    return out.join('\\n'); })()";

/// Runs `js` in the page and fails naming `step` unless it returns `true`.
pub fn check_js(b: &mut Browser, step: &str, js: &str) {
    assert_eq!(ok(step, b.eval(js)), json!(true), "{step}");
}

/// Opens the terminal of the session `id` from its row, types each of `lines` with
/// Enter, and waits until the terminal's buffer holds every one of `answers`.
pub fn open_in_page_and_type(b: &mut Browser, id: &str, lines: &[&str], answers: &[&str]) {
    click_row_button(b, id, "Open");
    wait_connected(b);
    ok(
        "focus the terminal",
        b.eval("document.getElementById('terminal-frame').contentWindow.term.focus()"),
    );
    for line in lines {
        ok("type", b.insert_text(line));
        ok("press Enter", b.press_enter());
    }
    let wanted = serde_json::to_string(answers).expect("answers as JSON");
    ok(
        "the shell's answers",
        b.wait_js(
            &format!(
                "(() => {{ const s = {TERMINAL_TEXT}; return {wanted}.every((a) => s.includes(a)) ? s : ''; }})()"
            ),
            T,
            &format!("{} in the terminal buffer", answers.join(" and ")),
        ),
    );
}

/// Waits until the terminal shown in the page's frame is connected (ttyd titles its
/// window once its websocket is open).
pub fn wait_connected(b: &mut Browser) {
    ok(
        "the terminal connection",
        b.wait_js(
            "!document.getElementById('terminal').hidden \
             && !!document.getElementById('terminal-frame').contentDocument \
             && document.getElementById('terminal-frame').contentDocument.title === 'termgate'",
            T,
            "ttyd's window title (its websocket is open)",
        ),
    );
}

/// Whether the headless browser can run here: when `chromium` is not on PATH the test
/// fails naming it, or with `TERMGATE_ALLOW_SKIP=1` says so and gets `false` (the
/// caller returns).
pub fn browser_available() -> bool {
    let found = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.join(crate::browser::CHROMIUM).is_file())
    });
    if !found {
        crate::skip_or_fail(&format!(
            "`{}` is not on PATH (as root: apt-get install -y chromium, or deploy/lib/prereqs.sh ensure_chromium)",
            crate::browser::CHROMIUM
        ));
    }
    found
}

/// Picks the option shown as `label` in the New session form's Workspace select, then
/// creates as [`create_in_page`] does; the new running row's id.
pub fn create_in_page_on(b: &mut Browser, name: &str, label: &str) -> String {
    ok(
        "the Workspace select offers it",
        b.wait_js(
            &format!(
                "!document.getElementById('workspace-choice').hidden \
                 && [...document.getElementById('workspace').options].some((o) => o.textContent === {})",
                json!(label)
            ),
            T,
            &format!("{label} in the Workspace select"),
        ),
    );
    check_js(
        b,
        &format!("select workspace {label}"),
        &format!(
            "(() => {{ const sel = document.getElementById('workspace'); \
             const o = [...sel.options].find((o) => o.textContent === {}); \
             sel.value = o.value; return sel.selectedOptions[0] === o; }})()",
            json!(label)
        ),
    );
    create_in_page(b, name)
}

/// JS: whether the workspaces list has a row named `name` for which `test` (over `r`,
/// the row) holds.
pub fn workspace_row(name: &str, test: &str) -> String {
    format!(
        "(() => {{ const r = [...document.querySelectorAll('#workspace-rows tr[data-workspace]')] \
           .find((r) => r.cells[0].textContent === {}); return !!r && ({test}); }})()",
        json!(name)
    )
}

/// Waits until the row of workspace `name` satisfies `test` (see [`workspace_row`]).
pub fn wait_workspace(b: &mut Browser, name: &str, test: &str, what: &str) {
    ok(
        what,
        b.wait_js(&workspace_row(name, test), Duration::from_secs(60), what),
    );
}

/// Clicks the button `label` (Rename, Copy, Delete) in the row of workspace `name`.
pub fn click_workspace_button(b: &mut Browser, name: &str, label: &str) {
    check_js(
        b,
        &format!("click {label} of workspace {name}"),
        &workspace_row(
            name,
            &format!(
                "(() => {{ const btn = [...r.querySelectorAll('button')].find((x) => x.textContent === {}); \
                 if (!btn || btn.disabled) return false; btn.click(); return true; }})()",
                json!(label)
            ),
        ),
    );
}

/// Types `value` in the name form opened under a workspace's row (by Rename or Copy)
/// and submits it.
pub fn submit_workspace_form(b: &mut Browser, value: &str) {
    check_js(
        b,
        "fill in and submit the workspace's name form",
        &format!(
            "(() => {{ const i = document.getElementById('ws-edit-name'); if (!i) return false; \
             i.value = {}; i.dispatchEvent(new Event('input')); \
             i.form.requestSubmit(); return true; }})()",
            json!(value)
        ),
    );
}

// termgate sessions page: workspaces, the user's volumes that outlive sessions. Listed
// with their state, size and the sessions on them; made, renamed, copied and deleted
// here; chosen in the New session form when the profile lets the user pick one. Loaded
// before app.js: nothing here runs until app.js calls it (`call`, `button`, `cell` and
// `profiles` are app.js's).
"use strict";

// The list as last read; null until read.
let workspaces = null;
// The form open under one row: { id, kind: "rename" | "copy", value }.
let wsEdit = null;
// Answers of an older read are dropped when a newer one was asked for.
let wsSeq = 0;
// A copy being made is read again every second until it is ready or failed.
let wsPoll = null;
// Copies started from this page, by id: said when they are done.
const wsStarted = new Set();
// Workspaces whose session just ended: control measures their size shortly after, so
// the list is read again every second, a few times, until their size moves.
const wsSizeWatch = new Map();
const WS_SIZE_TRIES = 10;

const WS_HOME_KEPT = "The home workspace is your default one and is kept.";

function wsById(id) {
  return (workspaces || []).find((w) => w.id === id) || null;
}

function wsOwn(w) {
  return w.origin === "home" || w.origin === "created";
}

// Where a workspace comes from: the home one is the default.
function wsKind(w) {
  if (w.origin === "home") return "home (default)";
  if (w.origin === "created") {
    if (!w.copied_from) return "created";
    const from = wsById(w.copied_from);
    return from ? "copy of " + from.name : "copy";
  }
  if (w.origin === "shared" || w.origin === "borrowed") {
    return "shared with you" + (w.access === "ro" ? " (read-only)" : "");
  }
  return w.origin;
}

function wsState(w) {
  if (w.state === "copying") return "copying…";
  if (w.state === "failed") return "failed: " + (w.failure || "no reason given");
  return w.state;
}

function wsSize(n) {
  if (n === null || n === undefined) return "—";
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let v = n, i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + " " + units[i];
}

function wsUsers(w) {
  const names = (w.in_use_by || []).map((s) => s.name);
  return names.length ? "in use by " + names.join(", ") : "—";
}

// Why Copy is not offered now, or null: a source must be ready and idle.
function wsCopyRefusal(w) {
  if (w.state === "copying") return "Being copied: it can be copied once it is ready.";
  if (w.state === "failed") return "Its copy failed: there is nothing to copy.";
  if ((w.in_use_by || []).length) {
    return "In use by " + w.in_use_by.map((s) => s.name).join(", ") + ": end its session to copy it.";
  }
  return null;
}

// A button of a workspace's row; `key` finds it again after the list is redrawn.
function wsButton(text, onClick, label, key) {
  const b = button(text, onClick, label);
  b.dataset.wsKey = key;
  return b;
}

function wsRow(w) {
  const tr = document.createElement("tr");
  tr.dataset.workspace = w.id;
  const state = cell(wsState(w));
  if (w.state === "failed") state.className = "ws-failed";
  const actions = document.createElement("td");
  if (wsOwn(w)) {
    actions.append(wsButton("Rename", () => openWsEdit(w, "rename"), "Rename workspace " + w.name, "rename-" + w.id));
  }
  const copy = wsButton("Copy", () => openWsEdit(w, "copy"), "Copy workspace " + w.name, "copy-" + w.id);
  const refusal = wsCopyRefusal(w);
  if (refusal) {
    copy.disabled = true;
    copy.title = refusal;
  }
  actions.append(copy);
  if (wsOwn(w)) {
    const del = wsButton("Delete", () => deleteWorkspace(w), "Delete workspace " + w.name, "delete-" + w.id);
    if (w.origin === "home") {
      del.disabled = true;
      del.title = WS_HOME_KEPT;
    }
    actions.append(del);
  }
  tr.append(cell(w.name), state, cell(wsSize(w.size_bytes)), cell(wsUsers(w)), cell(wsKind(w)), actions);
  return tr;
}

// The small form under a row that asks a name: the new name, or the copy's.
function wsEditRow(w) {
  const rename = wsEdit.kind === "rename";
  const tr = document.createElement("tr");
  tr.className = "ws-edit";
  tr.dataset.editOf = w.id;
  const td = document.createElement("td");
  td.colSpan = 6;
  const form = document.createElement("form");
  const label = document.createElement("label");
  label.htmlFor = "ws-edit-name";
  label.textContent = rename ? "New name of " + w.name : "Name of the copy of " + w.name;
  const input = document.createElement("input");
  input.id = "ws-edit-name";
  input.dataset.wsKey = "edit";
  input.maxLength = 64;
  input.required = true;
  input.autocomplete = "off";
  input.spellcheck = false;
  input.value = wsEdit.value;
  input.addEventListener("input", () => {
    if (wsEdit) wsEdit.value = input.value;
  });
  const submit = document.createElement("button");
  submit.type = "submit";
  submit.id = "ws-edit-submit";
  submit.textContent = rename ? "Save name" : "Make copy";
  const cancel = button("Cancel", () => closeWsEdit(true));
  cancel.id = "ws-edit-cancel";
  form.append(label, input, submit, " ", cancel);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (rename) renameWorkspace(w, input.value);
    else copyWorkspace(w, input.value);
  });
  form.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && !ev.altKey && !ev.ctrlKey && !ev.metaKey) {
      ev.preventDefault();
      closeWsEdit(true);
    }
  });
  td.append(form);
  tr.append(td);
  return tr;
}

function openWsEdit(w, kind) {
  wsEdit = { id: w.id, kind, value: kind === "rename" ? w.name : w.name + " copy" };
  renderWorkspaces();
  const input = $("ws-edit-name");
  if (input) {
    input.focus();
    input.select();
  }
}

// Closes the form; focus back on the button that opened it when `restoreFocus`.
function closeWsEdit(restoreFocus) {
  const was = wsEdit;
  wsEdit = null;
  renderWorkspaces();
  if (!restoreFocus || !was) return;
  const back = $("workspace-rows").querySelector('[data-ws-key="' + was.kind + "-" + was.id + '"]');
  if (back) back.focus();
}

function renderWorkspaces() {
  const list = workspaces || [];
  if (wsEdit && !list.some((w) => w.id === wsEdit.id)) wsEdit = null;
  // Whatever had focus in the list has it again once the list is redrawn.
  const active = document.activeElement;
  const key = active && $("workspace-rows").contains(active) ? active.dataset.wsKey : null;
  const range = key === "edit" ? [active.selectionStart, active.selectionEnd] : null;
  const rows = [];
  for (const w of list) {
    rows.push(wsRow(w));
    if (wsEdit && wsEdit.id === w.id) rows.push(wsEditRow(w));
  }
  $("workspace-rows").replaceChildren(...rows);
  $("no-workspaces").hidden = rows.length > 0;
  if (key) {
    const again = $("workspace-rows").querySelector('[data-ws-key="' + key + '"]');
    if (again && !again.disabled) {
      again.focus();
      if (range) again.setSelectionRange(range[0], range[1]);
    }
  }
  renderWorkspaceChoice();
}

// Reads the list again (and the choice of the New session form with it). A copy being
// made is read again every second until it is done.
async function refreshWorkspaces() {
  const seq = ++wsSeq;
  const data = await call("GET", "/api/workspaces");
  if (seq !== wsSeq) return;
  const before = workspaces || [];
  workspaces = data.workspaces || [];
  for (const w of workspaces) {
    if (!wsStarted.has(w.id) || w.state === "copying") continue;
    wsStarted.delete(w.id);
    const was = before.find((x) => x.id === w.id);
    if (was && was.state !== "copying") continue;
    if (w.state === "ready") say("Workspace " + w.name + " is ready.");
    else if (w.state === "failed") say("The copy " + w.name + " failed: " + (w.failure || "no reason given"), true);
  }
  for (const w of workspaces) {
    const was = before.find((x) => x.id === w.id);
    const watched = wsSizeWatch.get(w.id);
    if (was && (was.in_use_by || []).length && !(w.in_use_by || []).length) {
      wsSizeWatch.set(w.id, { size: w.size_bytes, tries: WS_SIZE_TRIES });
    } else if (watched && (w.size_bytes !== watched.size || --watched.tries <= 0)) {
      wsSizeWatch.delete(w.id);
    }
  }
  $("workspaces").hidden = !(profiles.some((p) => p.workspace && p.workspace !== "none") || workspaces.length > 0);
  renderWorkspaces();
  if (workspaces.some((w) => w.state === "copying") || wsSizeWatch.size) pollWorkspaces();
}

function pollWorkspaces() {
  if (wsPoll) return;
  wsPoll = setTimeout(() => {
    wsPoll = null;
    if (!$("sessions").hidden) refreshWorkspaces().catch(() => pollWorkspaces());
  }, 1000);
}

// Nothing of the previous user's is shown under a new sign-in.
function resetWorkspaces() {
  workspaces = null;
  wsEdit = null;
  wsSeq += 1;
  wsStarted.clear();
  wsSizeWatch.clear();
  $("workspace-rows").replaceChildren();
  $("no-workspaces").hidden = true;
  $("workspaces").hidden = true;
  renderWorkspaceChoice();
}

async function createWorkspace(ev) {
  ev.preventDefault();
  const name = $("workspace-name").value.trim();
  if (!name) return;
  try {
    const w = await call("POST", "/api/workspaces", { name });
    say("Workspace " + w.name + " created.");
    $("workspace-name").value = "";
  } catch (e) {
    say(e.message, true);
  }
  await refreshWorkspaces().catch((e) => say(e.message, true));
}

async function renameWorkspace(w, name) {
  name = name.trim();
  if (!name) return;
  try {
    const renamed = await call("PATCH", "/api/workspaces/" + w.id, { name });
    say("Workspace " + w.name + " renamed " + renamed.name + ".");
    wsEdit = null;
  } catch (e) {
    say(e.message, true);
  }
  await refreshWorkspaces().catch((e) => say(e.message, true));
  if (!wsEdit) {
    const back = $("workspace-rows").querySelector('[data-ws-key="rename-' + w.id + '"]');
    if (back) back.focus();
  }
  // The sessions on it are listed under its new name.
  refresh().catch(() => {});
}

async function copyWorkspace(w, name) {
  name = name.trim();
  if (!name) return;
  try {
    const copy = await call("POST", "/api/workspaces/" + w.id + "/copy", { name });
    wsEdit = null;
    wsStarted.add(copy.id);
    say("Copying " + w.name + " to " + copy.name + "…");
    // Shown at once as the answer has it (copying), then followed until done.
    workspaces = (workspaces || []).filter((x) => x.id !== copy.id).concat([copy]);
    renderWorkspaces();
  } catch (e) {
    say(e.message, true);
  }
  await refreshWorkspaces().catch((e) => say(e.message, true));
}

async function deleteWorkspace(w) {
  try {
    await call("DELETE", "/api/workspaces/" + w.id);
    say("Workspace " + w.name + " deleted.");
  } catch (e) {
    say(e.message, true);
  }
  await refreshWorkspaces().catch((e) => say(e.message, true));
}

// The New session form's Workspace select, shown when the chosen profile lets the
// user pick: the home workspace (the default, sent as nothing), each other ready one,
// a new one, or an ephemeral one removed with the session. The choice is kept across
// redraws while it is still offered.
function renderWorkspaceChoice() {
  const p = profiles.find((x) => x.name === $("profile").value);
  const choose = !!p && p.workspace === "choose";
  const box = $("workspace-choice");
  const sel = $("workspace");
  box.hidden = !choose;
  sel.disabled = !choose;
  const list = workspaces || [];
  const home = list.find((w) => w.origin === "home");
  const options = [["", home && home.name !== "home" ? home.name + " (home, default)" : "home (default)"]];
  for (const w of list) {
    if (w.origin === "home" || w.state !== "ready") continue;
    const notes = [];
    if (w.origin === "shared" || w.origin === "borrowed") notes.push(w.access === "ro" ? "shared, read-only" : "shared");
    options.push([w.id, w.name + (notes.length ? " (" + notes.join(", ") + ")" : "")]);
  }
  options.push(["new", "New workspace"], ["ephemeral", "Ephemeral (removed with the session)"]);
  const shown = [...sel.options].map((o) => [o.value, o.textContent]);
  if (JSON.stringify(shown) === JSON.stringify(options)) return;
  const kept = sel.value;
  sel.replaceChildren(...options.map(([value, text]) => new Option(text, value)));
  sel.value = options.some(([value]) => value === kept) ? kept : "";
}

// What the create sends as `workspace`: null for the home workspace (or a profile that
// offers no choice).
function workspaceChoice() {
  if ($("workspace-choice").hidden) return null;
  return $("workspace").value || null;
}

// A session's workspace, as its row names it.
function sessionWorkspace(s) {
  return s.workspace ? s.workspace.name : "—";
}

function startWorkspaces() {
  $("workspace-form").addEventListener("submit", createWorkspace);
}

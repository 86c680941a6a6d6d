// termgate admin console: every session, users' locks, shared workspaces, secrets,
// ended sessions, the audit trail. The API checks the admin role on every call; this page only shows it.
"use strict";

const call = request;

function when(ts) {
  return ts ? new Date(ts * 1000).toLocaleString() : "";
}

function age(ts) {
  if (!ts) return "";
  const s = Math.max(0, Math.floor(Date.now() / 1000 - ts));
  if (s < 120) return s + " s";
  if (s < 7200) return Math.floor(s / 60) + " min";
  if (s < 172800) return Math.floor(s / 3600) + " h";
  return Math.floor(s / 86400) + " d";
}

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  return td;
}

function button(label, onClick, aria) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  if (aria) b.setAttribute("aria-label", aria);
  b.addEventListener("click", onClick);
  return b;
}

async function loadActive() {
  const data = await call("GET", "/api/sessions?all=true");
  const rows = data.sessions.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.id = s.id;
    tr.append(
      cell(s.owner), cell(s.name), cell(s.host + (s.runtime ? " (" + runtimeName(s.runtime) + ")" : "")),
      cell(s.state), cell(age(s.created_at)),
      cell(s.last_input ? age(s.last_input) + " ago" : "—"),
      cell(s.terminals === undefined ? "—" : s.terminals),
      cell(s.viewers === undefined ? "—"
        : s.viewers + (s.viewer_subs && s.viewer_subs.length ? " (" + s.viewer_subs.join(", ") + ")" : "")),
      cell(s.ends_at ? when(s.ends_at) + (s.ends_because === "max_lifetime" ? " (maximum lifetime)" : " (idle)") : "—"),
      cell((s.peers || []).filter((p) => p.expires_at > Date.now() / 1000).map((p) => p.sub).join(", ") || "—"),
    );
    const actions = document.createElement("td");
    // A `stopping` session's end is decided already; its container goes in the background.
    if (s.state !== "stopping") actions.append(button("End", () => end(s), "End session " + s.name + " of " + s.owner));
    if (s.kind !== "external") actions.append(recordingsButton(s));
    tr.append(actions);
    return tr;
  });
  $("active-rows").replaceChildren(...rows);
  $("no-active").hidden = rows.length > 0;
  followStopping(data.sessions);
}

// A `stopping` row is looked at again shortly (its container goes within a fraction of
// a second, at most the profile's grace), not only at the next 5 s refresh.
let stoppingTimer = null;

function followStopping(sessions) {
  if (stoppingTimer || !sessions.some((s) => s.state === "stopping")) return;
  stoppingTimer = setTimeout(() => {
    stoppingTimer = null;
    refresh();
  }, 500);
}

// A session's recordings, listed (and played, when the player loaded) under the
// tables; the 5 s refresh leaves the list and a playing recording alone.
function recordingsButton(s) {
  const label = s.name + " of " + s.owner;
  return button("Recordings", () => showRecordings(s, call, label), "Recordings of " + label);
}

async function loadLocked() {
  const data = await call("GET", "/api/users");
  const items = data.locked.map((sub) => {
    const li = document.createElement("li");
    li.dataset.sub = sub;
    const name = document.createElement("span");
    name.textContent = sub + " ";
    li.append(name, button("Unlock", () => setLock(sub, false), "Unlock " + sub));
    return li;
  });
  $("locked-list").replaceChildren(...items);
  $("no-locked").hidden = items.length > 0;
}

async function loadEnded() {
  const data = await call("GET", "/api/history?all=true");
  $("ended-rows").replaceChildren(...data.sessions.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.id = s.id;
    const actions = document.createElement("td");
    if (s.kind !== "external") actions.append(recordingsButton(s));
    tr.append(cell(s.owner), cell(s.name), cell(s.state), cell(when(s.ended_at)), cell(s.ended_by), cell(s.end_reason), actions);
    return tr;
  }));
}

async function search(event) {
  if (event) event.preventDefault();
  const q = new URLSearchParams();
  const sub = $("audit-sub").value.trim();
  const session = $("audit-session").value.trim();
  if (sub) q.set("sub", sub);
  if (session) q.set("session", session);
  q.set("limit", "200");
  try {
    const data = await call("GET", "/api/audit?" + q.toString());
    $("audit-rows").replaceChildren(...data.lines.map((l) => {
      const tr = document.createElement("tr");
      const details = Object.entries(l.fields).map(([k, v]) => k + "=" + v).join(" ");
      tr.append(cell(new Date(l.at_ms).toLocaleString()), cell(l.level), cell(l.message), cell(details));
      return tr;
    }));
    $("no-audit").hidden = data.lines.length > 0;
  } catch (e) {
    say(e.message, true);
  }
}

async function end(s) {
  try {
    await call("DELETE", "/api/sessions/" + s.id);
    say("Ended " + s.name + " of " + s.owner + ".");
  } catch (e) {
    say(e.message, true);
  }
  await refresh();
}

async function setLock(sub, lock) {
  try {
    await call(lock ? "POST" : "DELETE", "/api/users/" + encodeURIComponent(sub) + "/lock");
    say((lock ? "Locked " : "Unlocked ") + sub + ".");
  } catch (e) {
    say(e.message, true);
  }
  await refresh();
}

// One user's sign-ins, each of which can be signed out, or all of them.
async function loadSignIns(event) {
  if (event) event.preventDefault();
  const sub = $("signins-sub").value.trim();
  if (!sub) return;
  try {
    const data = await call("GET", "/api/signins?sub=" + encodeURIComponent(sub));
    $("signin-rows").replaceChildren(...data.signins.map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.signin = s.id;
      const actions = document.createElement("td");
      actions.append(button("Sign out", () => signOut(sub, s), "Sign out " + sub + "'s sign-in of " + when(s.created_at)));
      tr.append(cell(when(s.created_at)), cell(s.method), cell(s.user_agent), cell(s.client), cell(s.gateway), cell(when(s.expires_at)), actions);
      return tr;
    }));
    $("no-signins").hidden = data.signins.length > 0;
  } catch (e) {
    say(e.message, true);
  }
}

async function signOut(sub, s) {
  try {
    await call("DELETE", "/api/signins/" + encodeURIComponent(s.id) + "?sub=" + encodeURIComponent(sub));
    say("Signed out " + sub + "'s sign-in of " + when(s.created_at) + ".");
  } catch (e) {
    say(e.message, true);
  }
  await loadSignIns();
}

async function signOutAll() {
  const sub = $("signins-sub").value.trim();
  if (!sub) return;
  try {
    const r = await call("DELETE", "/api/signins?sub=" + encodeURIComponent(sub));
    say("Signed " + sub + " out everywhere (" + r.signed_out + (r.signed_out === 1 ? " sign-in" : " sign-ins") +
      "), and revoked every sign-in link and token of " + sub + " issued until " + when(r.tokens_issued_before) + ".");
  } catch (e) {
    say(e.message, true);
  }
  await loadSignIns();
}

async function revoke(body, what) {
  try {
    await call("POST", "/api/revocations", body);
    say("Revoked " + what + ".");
  } catch (e) {
    say(e.message, true);
  }
}

function bytes(n) {
  if (n < 1024) return n + " bytes";
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
  if (n < 1024 * 1024 * 1024) return (n / 1024 / 1024).toFixed(1) + " MiB";
  return (n / 1024 / 1024 / 1024).toFixed(2) + " GiB";
}

// What the recordings hold and the rules that keep them (control's retention).
async function loadKept() {
  const k = await call("GET", "/api/retention");
  $("kept-summary").textContent = k.files + " recording" + (k.files === 1 ? "" : "s") + ", " + bytes(k.bytes)
    + (k.oldest_stored_at ? ", the oldest stored " + when(k.oldest_stored_at) : "") + ".";
  const rules = [];
  rules.push(k.keep_days ? "kept " + k.keep_days + " days" : "kept without an age limit");
  rules.push(k.max_user_bytes ? "at most " + bytes(k.max_user_bytes) + " a user" : "no cap per user");
  rules.push(k.max_total_bytes ? "at most " + bytes(k.max_total_bytes) + " in all" : "no cap in all");
  $("kept-rules").textContent = "Rules: " + rules.join(", ") + ".";
  $("kept-rows").replaceChildren(...k.users.map((u) => {
    const tr = document.createElement("tr");
    tr.append(cell(u.sub === "-" ? "(sessions no longer on record)" : u.sub), cell(String(u.files)), cell(bytes(u.bytes)));
    return tr;
  }));
}

// Shared workspaces: made here or registered from docker.shared_volumes, granted to
// users and roles read-only or read-write. A grants field reads
// "role:dev=rw, user:carol=ro".
function grantsText(grants) {
  return (grants || []).map((g) => g.to + "=" + g.access).join(", ");
}

function parseGrants(text) {
  return text.split(",").map((g) => g.trim()).filter((g) => g).map((g) => {
    const [to, access] = g.split("=").map((x) => x.trim());
    return { to, access: access || "rw" };
  });
}

async function loadShared() {
  const data = await call("GET", "/api/shared-workspaces");
  const rows = data.workspaces.map((w) => {
    const tr = document.createElement("tr");
    tr.dataset.id = w.id;
    const grants = document.createElement("td");
    const input = document.createElement("input");
    input.value = grantsText(w.grants);
    input.setAttribute("aria-label", "Grants of " + w.name);
    input.spellcheck = false;
    grants.append(input, button("Save", () => saveGrants(w, input.value), "Save the grants of " + w.name));
    const actions = document.createElement("td");
    const del = button("Delete", () => deleteShared(w), "Delete shared workspace " + w.name);
    if (w.in_use_by.length) {
      del.disabled = true;
      del.title = "In use: end its sessions first";
    }
    actions.append(del);
    tr.append(
      cell(w.name),
      cell(w.origin === "borrowed" ? "borrowed (never removed)" : "made by termgate"),
      cell(w.host ? w.volume + " on " + w.host : w.volume),
      grants,
      cell(w.in_use_by.map((s) => s.name).join(", ") || "—"),
      actions,
    );
    return tr;
  });
  // A grants field being edited is left alone by the refresh.
  if (document.activeElement && $("shared-rows").contains(document.activeElement)) return;
  $("shared-rows").replaceChildren(...rows);
  $("no-shared").hidden = rows.length > 0;
}

async function makeShared(event) {
  event.preventDefault();
  const name = $("shared-name").value.trim();
  const volume = $("shared-volume").value.trim();
  if (!name) return;
  try {
    await call("POST", "/api/shared-workspaces", volume ? { name, volume } : { name });
    say("Made shared workspace " + name + ".");
    $("shared-name").value = "";
    $("shared-volume").value = "";
  } catch (e) {
    say(e.message, true);
  }
  await loadShared().catch((e) => say(e.message, true));
}

async function saveGrants(w, text) {
  try {
    await call("PATCH", "/api/shared-workspaces/" + w.id, { grants: parseGrants(text) });
    say("Saved the grants of " + w.name + ".");
  } catch (e) {
    say(e.message, true);
  }
  if (document.activeElement) document.activeElement.blur();
  await loadShared().catch((e) => say(e.message, true));
}

async function deleteShared(w) {
  try {
    await call("DELETE", "/api/shared-workspaces/" + w.id);
    say("Deleted shared workspace " + w.name + (w.origin === "borrowed" ? " (its volume is kept)." : "."));
  } catch (e) {
    say(e.message, true);
  }
  await loadShared().catch((e) => say(e.message, true));
}

// Secrets by reference: a name and a file on the Docker hosts (never a value),
// granted to users and roles. A grants field reads "role:dev, user:carol".
async function loadSecrets() {
  const data = await call("GET", "/api/secrets");
  const rows = data.secrets.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.name = s.name;
    const grants = document.createElement("td");
    const input = document.createElement("input");
    input.value = s.grants.map((g) => g.to).join(", ");
    input.setAttribute("aria-label", "Grants of secret " + s.name);
    input.spellcheck = false;
    grants.append(input, button("Save", () => saveSecretGrants(s, input.value), "Save the grants of secret " + s.name));
    const actions = document.createElement("td");
    actions.append(button("Delete", () => deleteSecret(s), "Delete secret " + s.name));
    tr.append(
      cell(s.name),
      cell(s.path + " → " + s.target),
      grants,
      cell(when(s.registered_at) + " by " + s.registered_by),
      actions,
    );
    return tr;
  });
  // A grants field being edited is left alone by the refresh.
  if (document.activeElement && $("secret-rows").contains(document.activeElement)) return;
  $("secret-rows").replaceChildren(...rows);
  $("no-secrets").hidden = rows.length > 0;
}

async function registerSecret(event) {
  event.preventDefault();
  const name = $("secret-name").value.trim();
  const path = $("secret-path").value.trim();
  if (!name || !path) return;
  try {
    await call("POST", "/api/secrets", { name, path });
    say("Registered secret " + name + ".");
    $("secret-name").value = "";
    $("secret-path").value = "";
  } catch (e) {
    say(e.message, true);
  }
  await loadSecrets().catch((e) => say(e.message, true));
}

async function saveSecretGrants(s, text) {
  const grants = text.split(",").map((g) => g.trim()).filter((g) => g).map((to) => ({ to }));
  try {
    await call("PATCH", "/api/secrets/" + encodeURIComponent(s.name), { grants });
    say("Saved the grants of secret " + s.name + ".");
  } catch (e) {
    say(e.message, true);
  }
  if (document.activeElement) document.activeElement.blur();
  await loadSecrets().catch((e) => say(e.message, true));
}

async function deleteSecret(s) {
  try {
    await call("DELETE", "/api/secrets/" + encodeURIComponent(s.name));
    say("Deleted secret " + s.name + " (its file is left alone).");
  } catch (e) {
    say(e.message, true);
  }
  await loadSecrets().catch((e) => say(e.message, true));
}

async function refresh() {
  try {
    await Promise.all([loadActive(), loadLocked(), loadEnded(), loadShared(), loadSecrets()]);
  } catch (e) {
    say(e.message, true);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("lock-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const sub = $("lock-sub").value.trim();
    if (sub) setLock(sub, true);
  });
  $("unlock").addEventListener("click", () => {
    const sub = $("lock-sub").value.trim();
    if (sub) setLock(sub, false);
  });
  $("audit-form").addEventListener("submit", search);
  $("shared-form").addEventListener("submit", makeShared);
  $("secret-form").addEventListener("submit", registerSecret);
  $("signins-form").addEventListener("submit", loadSignIns);
  $("signins-all").addEventListener("click", signOutAll);
  $("revoke-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const jti = $("revoke-jti").value.trim();
    if (jti) revoke({ jti }, "token " + jti);
  });
  $("revoke-user").addEventListener("click", () => {
    const sub = $("signins-sub").value.trim();
    if (sub) revoke({ sub }, "every token of " + sub + " issued until now").then(() => loadSignIns());
  });
  refresh().then(() => search());
  setInterval(refresh, 5000);
  // Reading every recording's size is a walk of control's directory: once a minute.
  const kept = () => loadKept().catch((e) => say(e.message, true));
  kept();
  setInterval(kept, 60000);
});

// termgate sessions page. No framework: a few fetch calls and DOM updates.
"use strict";

const MESSAGES = {
  quota_exceeded: "You have reached your session limit. End a session to start another.",
  docker_unavailable: "Sessions cannot be started right now: the container engine is not answering.",
  store_unavailable: "Sessions cannot be started or ended right now: the control service cannot save changes. Open terminals keep working.",
  control_unavailable: "The control service is not answering. Open terminals keep working; try again shortly.",
  unauthenticated: "Your sign-in has expired or is not valid. Please sign in again.",
  user_locked: "Your account is locked by an administrator.",
  session_not_found: "That session does not exist (or is not yours).",
  too_many_failures: "Too many failed sign-ins from this address. Wait a minute and try again.",
  sign_out_failed: "The sign-out did not happen: the control service is not answering. You are still signed in; try again shortly.",
  sign_in_unavailable: "Signing in needs the control service, which is not answering. Try again shortly.",
};

// An API call; a refusal's message is the page's own words where it has them, and an
// expired sign-in shows the sign-in form.
async function call(method, path, body) {
  try {
    return await request(method, path, body);
  } catch (e) {
    if (MESSAGES[e.code]) e.message = MESSAGES[e.code];
    if (e.code === "unauthenticated") showSignIn();
    throw e;
  }
}

function when(ts) {
  return ts ? new Date(ts * 1000).toLocaleString() : "";
}

function showSignIn() {
  closeFrame();
  closePlayer(false);
  $("sign-in").hidden = false;
  $("sessions").hidden = true;
  $("terminal").hidden = true;
  $("who").hidden = true;
  showProvider();
}

// The identity provider, when the gateway has one: null, or {name, login}.
let provider = null;

// "Sign in with <provider>" next to the token form, when one is configured.
async function showProvider() {
  try {
    provider = (await request("GET", "/auth/providers")).oidc;
  } catch (e) {
    provider = null;
  }
  if (!provider) return;
  $("oidc-link").textContent = "Sign in with " + provider.name;
  $("oidc-link").href = provider.login;
  $("oidc-sign-in").hidden = false;
}

// Where to go back to once signed in: a front proxy's terminal check sends the browser
// here with `?next=/s/<id>/`; the gateway's "sign in" page for a share or recording link
// with `#next=/v/<token>` (a fragment: the link's secret reaches no server log); the
// command-line client's sign-in page with `#next=/cli-login`. Kept in this tab's
// storage across an identity provider's round trip. Only a terminal, share, recording
// or client sign-in page of this origin, nothing else (the gateway checks the same).
const RETURN_PATH = /^\/(s\/[A-Za-z0-9_-]{1,64}\/|[vr]\/[A-Za-z0-9_-]{1,256}\/?|cli-login)$/;

function keepReturnPath() {
  const m = location.hash.match(/^#next=(\/[A-Za-z0-9_\/-]*)$/);
  if (!m) return;
  history.replaceState(null, "", location.pathname + location.search);
  if (RETURN_PATH.test(m[1])) sessionStorage.setItem("termgate-next", m[1]);
}

function returnPath() {
  const next = new URLSearchParams(location.search).get("next");
  if (next && /^\/s\/[A-Za-z0-9_-]{1,64}\/$/.test(next)) return next;
  const kept = sessionStorage.getItem("termgate-next");
  sessionStorage.removeItem("termgate-next");
  return kept && RETURN_PATH.test(kept) ? kept : null;
}

async function signIn(token) {
  const me = await call("POST", "/auth/session", { token: token.trim() });
  say("");
  const back = returnPath();
  if (back) {
    location.assign(back);
    return;
  }
  await showSessions(me);
}

// The `sub` a token names, read without verifying it (the gateway verifies on sign-in);
// only used to ask the right question. null when it cannot be read.
function tokenSub(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const sub = JSON.parse(atob(part)).sub;
    return typeof sub === "string" ? sub : null;
  } catch (e) {
    return null;
  }
}

// A sign-in link never replaces a signed-in user silently: a link made for someone
// else (an attacker's own account, whose terminal they watch) must be confirmed.
async function signInByLink(token) {
  let current = null;
  try {
    current = await call("GET", "/auth/session");
  } catch (e) {
    current = null;
  }
  const next = tokenSub(token);
  if (!current || (next !== null && next === current.sub)) {
    await signIn(token);
    return;
  }
  await showSessions(current);
  $("switch-text").textContent = "You are signed in as " + current.sub + ". This link signs you in as "
    + (next === null ? "another user" : next) + ". Sign in as " + (next === null ? "that user" : next)
    + " instead of " + current.sub + "?";
  $("switch-yes").textContent = "Sign in as " + (next === null ? "the other user" : next);
  $("switch-no").textContent = "Stay signed in as " + current.sub;
  $("switch").hidden = false;
  $("switch-no").focus();
  const choice = await new Promise((resolve) => {
    $("switch-yes").onclick = () => resolve(true);
    $("switch-no").onclick = () => resolve(false);
  });
  $("switch").hidden = true;
  if (choice) {
    await signIn(token);
  } else {
    say("Still signed in as " + current.sub + ".");
  }
}

// The signed-in user's name: a peer leaves a session under it.
let mySub = null;

async function showSessions(me) {
  mySub = me.sub;
  closeFrame();
  // Never show the previous user's rows under the new name while the lists load.
  $("session-rows").replaceChildren();
  $("ended-rows").replaceChildren();
  $("no-sessions").hidden = true;
  resetWorkspaces();
  $("who-name").textContent = me.sub + (me.admin ? " (admin)" : "");
  $("admin-link").hidden = !me.admin;
  $("who").hidden = false;
  $("sign-in").hidden = true;
  $("terminal").hidden = true;
  $("sessions").hidden = false;
  await Promise.all([loadProfiles(), refresh()]);
}

let profiles = [];

async function loadProfiles() {
  const data = await call("GET", "/api/profiles");
  profiles = data.profiles;
  const sel = $("profile");
  sel.replaceChildren(...profiles.map((p) => {
    const o = document.createElement("option");
    o.value = p.name;
    o.textContent = (p.description ? p.name + " — " + p.description : p.name)
      + (p.runtime ? " (runs under " + runtimeName(p.runtime) + ")" : "");
    return o;
  }));
  renderOptions();
}

function renderOptions() {
  const p = profiles.find((x) => x.name === $("profile").value);
  const box = $("options");
  box.replaceChildren();
  if (!p) {
    renderWorkspaceChoice();
    return;
  }
  for (const [name, o] of Object.entries(p.options || {})) {
    const label = document.createElement("label");
    label.htmlFor = "opt-" + name;
    label.textContent = o.description || name;
    const sel = document.createElement("select");
    sel.id = "opt-" + name;
    sel.dataset.option = name;
    for (const v of o.values) {
      const opt = document.createElement("option");
      opt.value = v;
      opt.textContent = v;
      opt.selected = v === o.default;
      sel.append(opt);
    }
    box.append(label, sel);
  }
  renderWorkspaceChoice();
}

function button(text, onClick, label) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  if (label) b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;
  return td;
}

// Where this user is signed in: every browser (or program) holding a sign-in, this one
// marked; each can be signed out, or all at once.
async function refreshSignIns() {
  const data = await call("GET", "/api/signins");
  $("signin-rows").replaceChildren(...data.signins.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.signin = s.id;
    const actions = document.createElement("td");
    if (s.current) {
      const me = document.createElement("strong");
      me.textContent = "This browser";
      actions.append(me);
    } else {
      actions.append(button("Sign out", () => signOutOne(s), "Sign out the sign-in of " + when(s.created_at)));
    }
    tr.append(cell(when(s.created_at)), cell(s.method === "oidc" ? "identity provider" : "token"),
      cell(s.user_agent), cell(s.client), cell(when(s.expires_at)), actions);
    return tr;
  }));
}

async function signOutOne(s) {
  try {
    await call("DELETE", "/api/signins/" + encodeURIComponent(s.id));
    say("Signed out the sign-in of " + when(s.created_at) + ".");
  } catch (e) {
    say(e.message, true);
  }
  await refreshSignIns().catch(() => {});
}

async function signOutEverywhere() {
  try {
    const r = await call("DELETE", "/api/signins");
    say("Signed out everywhere (" + r.signed_out + (r.signed_out === 1 ? " sign-in" : " sign-ins") +
      "). Every sign-in link and token of yours issued until now no longer works: ask for a new link to sign in again.");
    showSignIn();
  } catch (e) {
    say(e.message, true);
  }
}

async function refresh() {
  refreshSignIns().catch(() => {});
  refreshWorkspaces().catch(() => {});
  const [active, ended] = await Promise.all([call("GET", "/api/sessions"), call("GET", "/api/history")]);
  const rows = active.sessions.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.session = s.id;
    const actions = document.createElement("td");
    if (s.state === "running") actions.append(button("Open", () => openTerminal(s), "Open terminal of " + s.name));
    if (s.role === "peer") {
      // Another user's session this user was invited to co-drive: open it, or leave it.
      actions.append(button("Leave", () => leavePeer(s), "Leave session " + s.name + " of " + s.owner));
      const state = cell(s.state + " (peer of " + s.owner + ", until " + when(s.peer_until) + ")");
      tr.append(cell(s.name), cell(s.profile), state, cell(when(s.created_at)), ...glance(s), cell(sessionWorkspace(s)), actions);
      return tr;
    }
    // Only what the session's profile allows: no button that can only be refused.
    const allows = s.allows || {};
    if (s.state === "running" && allows.share) actions.append(button("Share", () => openShare(s), "Share " + s.name + " read-only"));
    if (s.state === "running" && allows.peers) actions.append(button("Peers", () => openPeers(s), "Peers of " + s.name));
    // A target is a ttyd that runs elsewhere: it can be opened, not ended, from here. A
    // `stopping` session's end is decided already.
    if (s.kind !== "external" && s.state !== "stopping") actions.append(button("End", () => endSession(s), "End session " + s.name));
    if (s.kind !== "external") actions.append(button("Recordings", () => showRecordings(s, call), "Recordings of " + s.name));
    const state = cell(s.state);
    const warning = endingSoon(s);
    if (warning) {
      const w = document.createElement("strong");
      w.className = "ending";
      w.textContent = " " + warning;
      state.append(w);
    }
    const profile = s.profile + (s.runtime ? " (" + runtimeName(s.runtime) + ")" : "");
    tr.append(cell(s.name), cell(profile), state, cell(when(s.created_at)), ...glance(s), cell(sessionWorkspace(s)), actions);
    return tr;
  });
  $("session-rows").replaceChildren(...rows);
  refreshForWarnings(active.sessions);
  followStopping(active.sessions);
  $("no-sessions").hidden = rows.length > 0;
  $("ended-rows").replaceChildren(...ended.sessions.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.session = s.id;
    const actions = document.createElement("td");
    actions.append(button("Recordings", () => showRecordings(s, call), "Recordings of " + s.name));
    tr.append(cell(s.name), cell(s.state), cell(when(s.ended_at)), cell(s.end_reason || ""), actions);
    return tr;
  }));
}

// An end answers once it is decided and its container goes in the background (a
// fraction of a second, at most the profile's grace): a `stopping` row is looked at
// again shortly, so it moves to the ended list without a reload.
let stoppingTimer = null;

function followStopping(sessions) {
  if (stoppingTimer || !sessions.some((s) => s.state === "stopping")) return;
  stoppingTimer = setTimeout(() => {
    stoppingTimer = null;
    if (!$("sessions").hidden) refresh().catch((e) => say(e.message, true));
  }, 500);
}

async function create(ev) {
  ev.preventDefault();
  const options = {};
  for (const sel of $("options").querySelectorAll("select")) options[sel.dataset.option] = sel.value;
  const body = { profile: $("profile").value, options };
  const name = $("name").value.trim();
  if (name) body.name = name;
  const workspace = workspaceChoice();
  if (workspace) body.workspace = workspace;
  say("Starting a session…");
  try {
    const s = await call("POST", "/api/sessions", body);
    say("Session " + s.name + " is " + s.state + ".");
    $("name").value = "";
    // Where the user was going: its terminal (unless they chose to stay on the list).
    if (s.state === "running" && $("open-after-create").checked) {
      openTerminal(s);
      return;
    }
    await refresh();
  } catch (e) {
    say(e.message, true);
  }
}

// Read-only share links of one running session: create (the link is shown once),
// copy, see who watches, revoke.
let sharing = null;

function openShare(s) {
  sharing = s;
  $("share-title").textContent = "Share " + s.name + " read-only";
  $("share-new").hidden = true;
  $("sessions").hidden = true;
  $("share").hidden = false;
  refreshShares().catch((e) => say(e.message, true));
}

function closeShare() {
  sharing = null;
  $("share").hidden = true;
  $("sessions").hidden = false;
}

async function refreshShares() {
  if (!sharing) return;
  const s = sharing;
  const data = await call("GET", "/api/sessions/" + s.id + "/shares");
  if (sharing !== s) return;
  $("share-rows").replaceChildren(...data.shares.map((l) => {
    const tr = document.createElement("tr");
    const who = l.viewers + (l.subs.length ? " (" + l.subs.join(", ") + ")" : "");
    const actions = document.createElement("td");
    actions.append(button("Revoke", () => revokeShare(s, l.id), "Revoke link " + l.id));
    tr.append(cell(l.id), cell(when(l.expires_at)), cell(who), actions);
    return tr;
  }));
}

async function createShare(ev) {
  ev.preventDefault();
  if (!sharing) return;
  const body = { ttl_seconds: Number($("share-ttl").value) };
  const max = $("share-max").value.trim();
  if (max) body.max_viewers = Number(max);
  try {
    const link = await call("POST", "/api/sessions/" + sharing.id + "/shares", body);
    $("share-url").value = location.origin + link.url;
    $("share-new").hidden = false;
    say("Link created; it is shown only now.");
  } catch (e) {
    say(e.message, true);
  }
  await refreshShares().catch((e) => say(e.message, true));
}

async function revokeShare(s, id) {
  try {
    await call("DELETE", "/api/sessions/" + s.id + "/shares/" + id);
    say("Link " + id + " revoked; its viewers were closed.");
  } catch (e) {
    say(e.message, true);
  }
  await refreshShares().catch((e) => say(e.message, true));
}

async function copyShare() {
  try {
    await navigator.clipboard.writeText($("share-url").value);
    say("Link copied.");
  } catch (e) {
    $("share-url").select();
    say("Select the link and copy it.");
  }
}

// Peers of one running session: users invited to type in it, for a while.
let peering = null;

function openPeers(s) {
  peering = s;
  $("peers-title").textContent = "Peers of " + s.name;
  $("sessions").hidden = true;
  $("peers").hidden = false;
  refreshPeers().catch((e) => say(e.message, true));
}

function closePeers() {
  peering = null;
  $("peers").hidden = true;
  $("sessions").hidden = false;
}

async function refreshPeers() {
  if (!peering) return;
  const s = peering;
  const data = await call("GET", "/api/sessions/" + s.id + "/peers");
  if (peering !== s) return;
  $("no-peers").hidden = data.peers.length > 0;
  $("peer-rows").replaceChildren(...data.peers.map((p) => {
    const tr = document.createElement("tr");
    const actions = document.createElement("td");
    actions.append(button("Revoke", () => revokePeer(s, p.sub), "Revoke " + p.sub + "'s access"));
    tr.append(cell(p.sub), cell(when(p.expires_at)), actions);
    return tr;
  }));
}

async function invitePeer(ev) {
  ev.preventDefault();
  if (!peering) return;
  const body = { sub: $("peer-sub").value.trim(), ttl_seconds: Number($("peer-ttl").value) };
  try {
    await call("POST", "/api/sessions/" + peering.id + "/peers", body);
    say(body.sub + " may now type in " + peering.name + ".");
    $("peer-sub").value = "";
  } catch (e) {
    say(e.message, true);
  }
  await refreshPeers().catch((e) => say(e.message, true));
}

async function revokePeer(s, sub) {
  try {
    await call("DELETE", "/api/sessions/" + s.id + "/peers/" + encodeURIComponent(sub));
    say(sub + "'s access was removed; their terminals were closed.");
  } catch (e) {
    say(e.message, true);
  }
  await refreshPeers().catch((e) => say(e.message, true));
}

async function leavePeer(s) {
  try {
    await call("DELETE", "/api/sessions/" + s.id + "/peers/" + encodeURIComponent(mySub));
    say("You left " + s.name + ".");
  } catch (e) {
    say(e.message, true);
  }
  await refresh().catch((e) => say(e.message, true));
}

async function endSession(s) {
  say("Ending " + s.name + "…");
  try {
    await call("DELETE", "/api/sessions/" + s.id);
    say("Session " + s.name + " ended.");
  } catch (e) {
    say(e.message, true);
  }
  await refresh().catch((e) => say(e.message, true));
}

// What is going on in a session, at a glance: its open terminals and share-link viewers
// over every gateway (— when no gateway has reported lately), when it was last typed
// into, and when and why it ends by itself. Targets have none of these.
function glance(s) {
  if (s.kind === "external") return ["", "", "", "", ""].map(cell);
  const known = (n) => (n === undefined ? "—" : String(n));
  const viewers = s.viewers === undefined ? "—"
    : s.viewers + (s.viewer_subs && s.viewer_subs.length ? " (" + s.viewer_subs.join(", ") + ")" : "");
  const last = s.last_input ? ago(s.last_input) : "—";
  const ends = s.ends_at
    ? when(s.ends_at) + (s.ends_because === "max_lifetime" ? " (maximum lifetime)" : " (idle)")
    : "—";
  return [known(s.terminals), viewers, last, ends, peersOf(s)].map(cell);
}

// Who the owner invited to co-drive, while their invitations last ("—": nobody).
function peersOf(s) {
  const now = Date.now() / 1000;
  const live = (s.peers || []).filter((p) => p.expires_at > now);
  return live.length ? live.map((p) => p.sub + " (until " + when(p.expires_at) + ")").join(", ") : "—";
}

function ago(ts) {
  const s = Math.max(0, Math.floor(Date.now() / 1000 - ts));
  if (s < 120) return s + " s ago";
  if (s < 7200) return Math.floor(s / 60) + " min ago";
  if (s < 172800) return Math.floor(s / 3600) + " h ago";
  return Math.floor(s / 86400) + " d ago";
}

// A session whose profile ends it by itself (no input for its idle timeout, or its
// maximum lifetime) has `ends_at`; within a minute of it the page warns.
const WARN_SECONDS = 60;

function endingSoon(s) {
  if (!s.ends_at) return null;
  const left = Math.max(0, Math.round(s.ends_at - Date.now() / 1000));
  if (left > WARN_SECONDS) return null;
  return s.ends_because === "max_lifetime"
    ? "Ends in " + left + " s: it reaches its maximum lifetime."
    : "Ends in " + left + " s without input: type in its terminal to keep it.";
}

// The list is loaded again when a session enters its warning minute, and once it is due.
let warningTimer = null;

function refreshForWarnings(sessions) {
  if (warningTimer) clearTimeout(warningTimer);
  warningTimer = null;
  const now = Date.now() / 1000;
  const times = sessions.filter((s) => s.ends_at)
    .flatMap((s) => [s.ends_at - WARN_SECONDS, s.ends_at + 2])
    .filter((t) => t > now && t - now < 3600);
  if (times.length === 0) return;
  warningTimer = setTimeout(() => {
    warningTimer = null;
    if (!$("sessions").hidden) refresh().catch((e) => say(e.message, true));
  }, (Math.min(...times) - now) * 1000);
}

// While a terminal is shown, its session is checked every two seconds, and at once
// when the gateway closes the terminal: when it ends (or access to it does), the page
// says so in words instead of leaving ttyd's page to its reconnect prompt.
let watching = null;
let watched = null;

function stopWatching() {
  if (watching) clearInterval(watching);
  watching = null;
  watched = null;
  $("ending").hidden = true;
}

function watchTerminal(s) {
  stopWatching();
  watched = s;
  watching = setInterval(() => checkWatched(s), 2000);
}

async function checkWatched(s) {
  if (watched !== s) return;
  if ($("terminal").hidden) { stopWatching(); return; }
  let ended = null;
  try {
    const now = await call("GET", "/api/sessions/" + s.id);
    // `stopping` is an end already decided (with who and why); its container goes in
    // the background. `unreachable` has not ended: its host may answer again and the
    // terminal with it.
    if (!["running", "unreachable"].includes(now.state)) {
      ended = "This session was ended" + (now.end_reason ? " (" + now.end_reason + ")" : "") + ".";
    }
    const warning = endingSoon(now);
    $("ending").textContent = warning || "";
    $("ending").hidden = !warning;
  } catch (e) {
    // A peer sees the session only while invited: its end and the invitation's are
    // one answer to them.
    if (e.code === "session_not_found") {
      ended = s.role === "peer" ? "This session was ended, or your invitation to it was." : "This session was ended.";
    }
    else if (e.code === "user_locked") ended = "This session was ended (" + MESSAGES.user_locked + ")";
    // Anything else (control down, the network): the terminal may well still work.
  }
  if (!ended || watched !== s) return;
  stopWatching();
  await closeTerminal();
  say(ended, true);
}

// The connection's state in the terminal's bar, in words.
function terminalState(text, kind) {
  const el = $("terminal-state");
  el.textContent = text;
  el.className = kind || "";
}

let shown = null;

function openTerminal(s) {
  const url = "/s/" + s.id + "/";
  shown = s;
  $("terminal-title").textContent = s.name;
  terminalState("Connecting…", "warn");
  $("terminal-link").href = url;
  loadFrame(s, $("terminal-frame"));
  $("sessions").hidden = true;
  $("terminal").hidden = false;
  $("terminal-frame").focus();
  watchTerminal(s);
}

function terminalLoaded(s, frame) {
  // A refusal (the session ended meanwhile, the sign-in expired) is the gateway's error
  // page, not ttyd's: say so in words and go back to the list.
  let doc = null;
  try { doc = frame.contentDocument; } catch (e) { doc = null; }
  const errorMeta = doc && doc.querySelector ? doc.querySelector('meta[name="termgate-error"]') : null;
  if (doc && (doc.contentType === "application/json" || errorMeta)) {
    let code = "", message = "";
    if (errorMeta) {
      code = errorMeta.content;
    } else {
      try {
        const data = JSON.parse(doc.body.textContent);
        code = data.error.code;
        message = data.error.message;
      } catch (e) { /* not an error body we know */ }
    }
    say(MESSAGES[code] || message || "The terminal could not be opened.", true);
    closeTerminal();
    return;
  }
  followConnection(frame);
  // A reattach replays nothing; nudge the program to repaint once the terminal is up
  // (unless it was closed meanwhile: a closed frame has no size to send).
  setTimeout(() => { if (frame.isConnected) redraw(s, frame); }, 800);
}

function loadFrame(s, frame) {
  frame.addEventListener("load", () => terminalLoaded(s, frame), { once: true });
  frame.src = "/s/" + s.id + "/";
}

// After a drop, the terminal is loaded again once the session answers as running:
// ttyd's page retries once by itself and, if the gateway was not back yet, waits for
// Enter. The new page attaches to the same shell. An ended session is the watcher's.
let reconnecting = null;

function stopReconnecting() {
  if (reconnecting) clearTimeout(reconnecting);
  reconnecting = null;
}

function reconnect(s, delay) {
  stopReconnecting();
  reconnecting = setTimeout(async () => {
    reconnecting = null;
    if ($("terminal").hidden || shown !== s) return;
    let running = false;
    try {
      running = (await call("GET", "/api/sessions/" + s.id)).state === "running";
    } catch (e) { running = false; }
    if (!running) { reconnect(s, Math.min(delay * 2, 5000)); return; }
    const old = $("terminal-frame");
    const fresh = document.createElement("iframe");
    fresh.id = old.id;
    fresh.title = old.title;
    old.replaceWith(fresh);
    terminalState("Reconnecting…", "warn");
    loadFrame(s, fresh);
  }, delay);
}

// ttyd's page says on its console when its websocket opens and closes; the bar
// follows it. Its window title is set once the first connection is open.
function followConnection(frame) {
  const s = shown;
  let win = null;
  try { win = frame.contentWindow; } catch (e) { win = null; }
  if (!win || !win.console) return;
  const log = win.console.log.bind(win.console);
  win.console.log = (...args) => {
    const line = String(args[0]);
    if (line.startsWith("[ttyd] websocket connection opened")) {
      stopReconnecting();
      terminalState("Connected");
    } else if (line.startsWith("[ttyd] websocket connection closed") && frame.isConnected) {
      const code = Number((line.match(/code: (\d+)/) || [])[1]);
      if (code === 1000) {
        terminalState("Disconnected: press Enter in the terminal to reconnect", "error");
        // The gateway closes with 1000 when access ends (the session ended, a lock, a
        // sign-out): ask now rather than at the next check.
        checkWatched(s);
      } else {
        terminalState("Connection lost: reconnecting…", "warn");
        if (!reconnecting) reconnect(s, 1000);
      }
    }
    log(...args);
  };
  // The first open may come before this hook: ttyd then has retitled its window, or
  // the shell has written something.
  let before = "";
  try { before = frame.contentDocument.title; } catch (e) { before = ""; }
  const opened = () => {
    if (!frame.isConnected || !["Connecting…", "Reconnecting…"].includes($("terminal-state").textContent)) return;
    let title = before, written = false;
    try {
      title = frame.contentDocument.title;
      const b = win.term && win.term.buffer.active;
      written = !!b && b.getLine(0) && b.getLine(0).translateToString(true) !== "";
    } catch (e) { /* not up yet */ }
    if (title !== before || written) terminalState("Connected");
    else setTimeout(opened, 200);
  };
  opened();
}

// Navigating the frame away from ttyd's page makes ttyd ask "Leave site?" (its
// beforeunload guard), although the session keeps running. Replacing the frame
// disconnects the terminal without that prompt.
function closeFrame() {
  stopWatching();
  stopReconnecting();
  const old = $("terminal-frame");
  if (!old.getAttribute("src")) return;
  const fresh = document.createElement("iframe");
  fresh.id = old.id;
  fresh.title = old.title;
  old.replaceWith(fresh);
}

async function closeTerminal() {
  closeFrame();
  $("terminal").hidden = true;
  $("sessions").hidden = false;
  await refresh().catch((e) => say(e.message, true));
}

async function redraw(s, frame) {
  let cols = 80, rows = 24;
  try {
    const term = frame.contentWindow.term;
    if (term && term.cols) { cols = term.cols; rows = term.rows; }
  } catch (e) { /* size estimate below */ }
  if (cols === 80 && rows === 24) {
    cols = Math.max(20, Math.floor(frame.clientWidth / 9));
    rows = Math.max(5, Math.floor(frame.clientHeight / 17));
  }
  try {
    await call("POST", "/api/sessions/" + s.id + "/redraw", { cols, rows });
  } catch (e) { /* the terminal works without the nudge */ }
}

// A sign-in link carries the token in the fragment, which never reaches a server log.
// Returns it (and clears it from the address bar), or null.
function linkToken() {
  const m = location.hash.match(/^#token=([A-Za-z0-9._-]+)$/);
  if (!m) return null;
  history.replaceState(null, "", location.pathname + location.search);
  return m[1];
}

async function start() {
  $("sign-in-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await signIn($("token").value);
      $("token").value = "";
    } catch (e) {
      say(e.message, true);
    }
  });
  $("sign-out").addEventListener("click", async () => {
    if (provider === null) {
      provider = await request("GET", "/auth/providers").then((p) => p.oidc, () => null);
    }
    if (provider) {
      // Signs out here (a POST: no link or other page can sign anyone out), then the
      // browser goes on to end the session at the provider too.
      let out;
      try {
        out = await call("POST", "/auth/logout");
      } catch (e) {
        say(e.message, true);
        return;
      }
      location.href = out.location;
      return;
    }
    try {
      await call("DELETE", "/auth/session");
    } catch (e) {
      // Never a sign-out that only looks done: the page says it did not happen.
      say(e.message, true);
      return;
    }
    say("Signed out.");
    showSignIn();
  });
  $("sign-out-everywhere").addEventListener("click", signOutEverywhere);
  startWorkspaces();
  $("create-form").addEventListener("submit", create);
  $("profile").addEventListener("change", renderOptions);
  $("share-form").addEventListener("submit", createShare);
  $("share-close").addEventListener("click", closeShare);
  $("share-copy").addEventListener("click", copyShare);
  $("peer-form").addEventListener("submit", invitePeer);
  $("peers-close").addEventListener("click", closePeers);
  // Whether a new session's terminal opens at once: this browser's choice, kept.
  const openAfter = $("open-after-create");
  openAfter.checked = localStorage.getItem("termgate-open-after-create") !== "no";
  openAfter.addEventListener("change", () => {
    localStorage.setItem("termgate-open-after-create", openAfter.checked ? "yes" : "no");
  });
  // Who watches changes by itself: the list follows every few seconds while shown.
  setInterval(() => { if (sharing) refreshShares().catch(() => {}); }, 3000);
  // The list's terminals, viewers and last input move: read again every 10 s while it
  // is shown and the tab is visible.
  setInterval(() => {
    if (!$("sessions").hidden && !document.hidden) refresh().catch(() => {});
  }, 10000);
  $("close-terminal").addEventListener("click", () => {
    say("");
    closeTerminal();
  });
  $("end-terminal").addEventListener("click", async () => {
    const s = shown;
    if (!s) return;
    closeFrame();
    $("terminal").hidden = true;
    $("sessions").hidden = false;
    await endSession(s);
  });

  // A sign-in link opened in a tab that already shows this page changes only the
  // fragment: no reload, so it is picked up here.
  window.addEventListener("hashchange", async () => {
    const token = linkToken();
    if (!token) return;
    try {
      await signInByLink(token);
    } catch (e) {
      say(e.message, true);
    }
  });
  keepReturnPath();
  const token = linkToken();
  if (token) {
    try {
      await signInByLink(token);
      return;
    } catch (e) {
      say(e.message, true);
    }
  }
  try {
    const me = await call("GET", "/auth/session");
    const back = returnPath();
    if (back) {
      location.assign(back);
      return;
    }
    await showSessions(me);
  } catch (e) {
    if (e.code !== "unauthenticated") say(e.message, true);
    showSignIn();
  }
}

start();

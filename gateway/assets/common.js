// Shared by the sessions page and the admin console: element lookup, the status
// line, and JSON calls to the gateway's API with the browser's sign-in cookie.
"use strict";

// What a session's OCI runtime is called on the page: gVisor's `runsc` by its name.
function runtimeName(runtime) {
  return runtime === "runsc" ? "gVisor" : runtime;
}

const $ = (id) => document.getElementById(id);

function say(text, isError) {
  const s = $("status");
  s.textContent = text || "";
  s.className = isError ? "error" : "";
}

// The answer's JSON body; a refusal is thrown as { code, message, status } with the
// gateway's or control's own code and message.
async function request(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, opts);
  } catch (e) {
    throw { code: "network", message: "The gateway is not reachable." };
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    const code = data && data.error ? data.error.code : "http_" + resp.status;
    const message = data && data.error ? data.error.message : "Request failed (" + resp.status + ").";
    throw { code, message, status: resp.status };
  }
  return data;
}

// A session's recordings (profiles with `record`), shared by the sessions page and the
// admin console: each a download link of its asciicast file (it plays in `asciinema
// play` as it is) and, when the player loaded (`/assets/player.js`, served when the
// gateway has `gateway.player_dir`), a Play button that plays it here. `get` is the
// page's API call; `label` names the session in the heading.
async function showRecordings(s, get, label) {
  closePlayer(false);
  closeRecordingShare(false);
  try {
    const list = await get("GET", "/api/sessions/" + s.id + "/recordings");
    $("recordings-title").textContent = "Recordings of " + (label || s.name);
    const rows = list.recordings.map((r) => {
      const tr = document.createElement("tr");
      tr.dataset.recording = r.name;
      const started = r.started ? new Date(r.started * 1000).toLocaleString() : "";
      const src = "/api/sessions/" + s.id + "/recordings/" + encodeURIComponent(r.name);
      const action = document.createElement("td");
      if (window.AsciinemaPlayer) {
        const play = document.createElement("button");
        play.type = "button";
        play.textContent = "Play";
        play.setAttribute("aria-label", "Play the recording of " + started);
        const title = "Recording of " + (label || s.name) + (started ? ", " + started : "");
        play.addEventListener("click", () => openPlayer(src, title, r.name));
        action.append(play);
      }
      const share = document.createElement("button");
      share.type = "button";
      share.textContent = "Share";
      share.setAttribute("aria-label", "Share a link to the recording of " + started);
      share.addEventListener("click", () => openRecordingShare(s, r, get,
        "Share the recording of " + (label || s.name) + (started ? ", " + started : "")));
      // A session listed with what its profile allows: no link its profile refuses.
      if (!s.allows || s.allows.recording_links) action.append(share);
      const link = document.createElement("a");
      link.href = src;
      link.download = r.name + ".cast";
      link.textContent = "Download";
      action.append(link);
      const cells = [started, r.duration.toFixed(1) + " s", r.size + " bytes"].map((text) => {
        const td = document.createElement("td");
        td.textContent = text;
        return td;
      });
      tr.append(...cells, action);
      return tr;
    });
    $("recording-rows").replaceChildren(...rows);
    $("no-recordings").hidden = rows.length > 0;
    $("recordings").hidden = false;
    $("recordings").scrollIntoView({ block: "nearest" });
  } catch (e) {
    say(e.message, true);
  }
}

// The recording playing in the page: { src, title, name, speed, playing, player }.
// `window.termgatePlayer` is its player (asciinema-player's handle), null when closed.
let playback = null;
const PLAYER_SPEEDS = ["0.5", "1", "2", "4"];

// The player's region under the recordings list, made once: a heading naming the
// recording, a speed select, Close, and the player. Escape closes it; `<` and `>`
// step the speed. Play, pause and seek are the player's own controls and keys (space,
// arrows, 0–9).
function playerRegion() {
  let region = $("player");
  if (region) return region;
  region = document.createElement("section");
  region.id = "player";
  region.hidden = true;
  region.tabIndex = -1;
  region.setAttribute("aria-labelledby", "player-title");
  const bar = document.createElement("div");
  bar.id = "player-bar";
  const heading = document.createElement("h3");
  heading.id = "player-title";
  const label = document.createElement("label");
  label.htmlFor = "player-speed";
  label.textContent = "Speed";
  const speed = document.createElement("select");
  speed.id = "player-speed";
  for (const v of PLAYER_SPEEDS) speed.append(new Option(v + "×", v, v === "1", v === "1"));
  speed.addEventListener("change", () => changeSpeed(Number(speed.value)));
  const close = document.createElement("button");
  close.type = "button";
  close.id = "player-close";
  close.textContent = "Close";
  close.addEventListener("click", () => closePlayer(true));
  bar.append(heading, label, speed, close);
  const view = document.createElement("div");
  view.id = "player-view";
  region.append(bar, view);
  region.addEventListener("keydown", (ev) => {
    if (ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === "Escape") {
      ev.preventDefault();
      closePlayer(true);
    } else if ((ev.key === "<" || ev.key === ">") && ev.target !== speed) {
      const i = PLAYER_SPEEDS.indexOf(speed.value) + (ev.key === ">" ? 1 : -1);
      if (i < 0 || i >= PLAYER_SPEEDS.length) return;
      ev.preventDefault();
      speed.value = PLAYER_SPEEDS[i];
      changeSpeed(Number(speed.value));
    }
  });
  $("recordings").append(region);
  return region;
}

function openPlayer(src, title, name) {
  closePlayer(false);
  const region = playerRegion();
  $("player-title").textContent = title;
  $("player-speed").value = "1";
  region.hidden = false;
  playback = { src, title, name, speed: 1, playing: false, player: null };
  startPlayer(0, false);
  const wrapper = $("player-view").querySelector(".ap-wrapper");
  (wrapper || region).focus();
  region.scrollIntoView({ block: "nearest" });
}

// Creates the player at `speed` of `playback`, `at` seconds in, playing if `autoPlay`.
function startPlayer(at, autoPlay) {
  const pb = playback;
  const opts = { idleTimeLimit: 2, speed: pb.speed, fit: "width", controls: true };
  if (at > 0) opts.startAt = at;
  // Paused part-way, the poster is that moment's screen (the player loads the recording
  // for it), whatever becomes of the seek below on a slow machine.
  if (at > 0 && !autoPlay) opts.poster = "npt:" + at;
  if (autoPlay) opts.autoPlay = true;
  const p = AsciinemaPlayer.create(pb.src, $("player-view"), opts);
  const playing = (on) => () => { if (playback === pb && pb.player === p) pb.playing = on; };
  p.addEventListener("play", playing(true));
  p.addEventListener("playing", playing(true));
  p.addEventListener("pause", playing(false));
  p.addEventListener("ended", playing(false));
  pb.player = p;
  window.termgatePlayer = p;
  // Paused part-way: show that moment's screen rather than an empty one.
  if (at > 0 && !autoPlay) p.seek(at).catch(() => {});
  const wrapper = $("player-view").querySelector(".ap-wrapper");
  if (wrapper) {
    wrapper.setAttribute("role", "group");
    wrapper.setAttribute("aria-labelledby", "player-title");
  }
}

// Recreates the player at `speed`, at the moment it had reached, playing if it was.
async function changeSpeed(speed) {
  const pb = playback;
  if (!pb || !pb.player) return;
  let at = 0;
  try {
    at = (await pb.player.getCurrentTime()) || 0;
  } catch (e) {
    at = 0;
  }
  if (playback !== pb) return;
  const wasPlaying = pb.playing;
  disposePlayer(pb);
  pb.speed = speed;
  pb.playing = false;
  startPlayer(at, wasPlaying);
}

function disposePlayer(pb) {
  if (pb.player) {
    try { pb.player.dispose(); } catch (e) { /* already gone */ }
    pb.player = null;
  }
  const view = $("player-view");
  if (view) view.replaceChildren();
}

// Closes the player region, disposing the player; focus back on the recording's Play
// button (of the list as it is now) when `restoreFocus`.
function closePlayer(restoreFocus) {
  const pb = playback;
  playback = null;
  window.termgatePlayer = null;
  if (pb) disposePlayer(pb);
  const region = $("player");
  if (region) region.hidden = true;
  if (!restoreFocus || !pb) return;
  const row = [...$("recording-rows").rows].find((tr) => tr.dataset.recording === pb.name);
  const play = row && [...row.querySelectorAll("button")].find((b) => b.textContent === "Play");
  if (play) play.focus();
}

// Links to one recording (/r/<token>): made with a mode no wider than the profile
// allows and a lifetime, shown once with a Copy button; the live links listed with
// Revoke. `recShare` is { s, r, get } of the recording whose links are shown.
let recShare = null;
const LINK_MODES = { "signed-in": "Signed-in users with the link", anyone: "Anyone with the link" };
const LINK_LIFETIMES = [["3600", "1 hour"], ["86400", "1 day"], ["604800", "7 days"], ["2592000", "30 days"]];

function recordingShareRegion() {
  let region = $("recording-share");
  if (region) return region;
  region = document.createElement("section");
  region.id = "recording-share";
  region.hidden = true;
  region.tabIndex = -1;
  region.setAttribute("aria-labelledby", "recording-share-title");
  const el = (tag, props) => Object.assign(document.createElement(tag), props || {});
  const heading = el("h3", { id: "recording-share-title" });
  const off = el("p", { id: "recording-share-off", hidden: true,
    textContent: "This session's profile does not allow links to its recordings." });
  const form = el("form", { id: "recording-share-form" });
  const modeLabel = el("label", { htmlFor: "recording-share-mode", textContent: "Who may watch" });
  const mode = el("select", { id: "recording-share-mode" });
  const ttlLabel = el("label", { htmlFor: "recording-share-ttl", textContent: "Link valid for" });
  const ttl = el("select", { id: "recording-share-ttl" });
  for (const [v, t] of LINK_LIFETIMES) ttl.append(new Option(t, v, v === "604800", v === "604800"));
  const create = el("button", { type: "submit", id: "recording-share-create", textContent: "Create link" });
  const close = el("button", { type: "button", id: "recording-share-close", textContent: "Close" });
  close.addEventListener("click", () => closeRecordingShare(true));
  form.append(modeLabel, mode, ttlLabel, ttl, el("br"), create, " ", close);
  form.addEventListener("submit", createRecordingLink);
  const fresh = el("div", { id: "recording-share-new", hidden: true });
  const urlLabel = el("label", { htmlFor: "recording-share-url", textContent: "New link (shown once)" });
  const url = el("input", { id: "recording-share-url", readOnly: true });
  const copy = el("button", { type: "button", id: "recording-share-copy", textContent: "Copy link" });
  copy.addEventListener("click", copyRecordingLink);
  fresh.append(urlLabel, url, copy);
  const table = el("table", { id: "recording-share-table" });
  table.setAttribute("aria-labelledby", "recording-share-title");
  const head = el("thead");
  const hr = el("tr");
  for (const t of ["Link", "Who may watch", "Expires"]) hr.append(el("th", { scope: "col", textContent: t }));
  const actions = el("th", { scope: "col" });
  actions.append(el("span", { className: "visually-hidden", textContent: "Actions" }));
  hr.append(actions);
  head.append(hr);
  table.append(head, el("tbody", { id: "recording-link-rows" }));
  const none = el("p", { id: "no-recording-links", textContent: "No active links." });
  region.append(heading, off, form, fresh, table, none);
  region.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && !ev.altKey && !ev.ctrlKey && !ev.metaKey) {
      ev.preventDefault();
      closeRecordingShare(true);
    }
  });
  $("recordings").append(region);
  return region;
}

function openRecordingShare(s, r, get, title) {
  closePlayer(false);
  const region = recordingShareRegion();
  recShare = { s, r, get };
  $("recording-share-title").textContent = title;
  $("recording-share-new").hidden = true;
  $("recording-share-url").value = "";
  region.hidden = false;
  region.scrollIntoView({ block: "nearest" });
  refreshRecordingLinks().then(() => {
    const first = $("recording-share-form").hidden ? region : $("recording-share-mode");
    first.focus();
  }).catch((e) => say(e.message, true));
}

function closeRecordingShare(restoreFocus) {
  const shared = recShare;
  recShare = null;
  const region = $("recording-share");
  if (region) region.hidden = true;
  if (!restoreFocus || !shared) return;
  const row = [...$("recording-rows").rows].find((tr) => tr.dataset.recording === shared.r.name);
  const btn = row && [...row.querySelectorAll("button")].find((b) => b.textContent === "Share");
  if (btn) btn.focus();
}

function linksPath(sh) {
  return "/api/sessions/" + sh.s.id + "/recordings/" + encodeURIComponent(sh.r.name) + "/links";
}

async function refreshRecordingLinks() {
  const sh = recShare;
  if (!sh) return;
  const data = await sh.get("GET", linksPath(sh));
  if (recShare !== sh) return;
  const mode = $("recording-share-mode");
  const kept = mode.value;
  mode.replaceChildren(...data.modes.map((m) => new Option(LINK_MODES[m] || m, m)));
  if (data.modes.includes(kept)) mode.value = kept;
  $("recording-share-form").hidden = data.modes.length === 0;
  $("recording-share-off").hidden = data.modes.length > 0;
  const rows = data.links.map((l) => {
    const tr = document.createElement("tr");
    tr.dataset.link = l.id;
    const td = (t) => Object.assign(document.createElement("td"), { textContent: t });
    const actions = document.createElement("td");
    const revoke = document.createElement("button");
    revoke.type = "button";
    revoke.textContent = "Revoke";
    revoke.setAttribute("aria-label", "Revoke link " + l.id);
    revoke.addEventListener("click", () => revokeRecordingLink(sh, l.id));
    actions.append(revoke);
    tr.append(td(l.id), td(LINK_MODES[l.mode] || l.mode),
      td(new Date(l.expires_at * 1000).toLocaleString()), actions);
    return tr;
  });
  $("recording-link-rows").replaceChildren(...rows);
  $("no-recording-links").hidden = rows.length > 0;
}

async function createRecordingLink(ev) {
  ev.preventDefault();
  const sh = recShare;
  if (!sh) return;
  const body = { mode: $("recording-share-mode").value, ttl_seconds: Number($("recording-share-ttl").value) };
  try {
    const link = await sh.get("POST", linksPath(sh), body);
    $("recording-share-url").value = location.origin + link.url;
    $("recording-share-new").hidden = false;
    $("recording-share-url").select();
    say("Link created; it is shown only now.");
  } catch (e) {
    say(e.message, true);
  }
  await refreshRecordingLinks().catch((e) => say(e.message, true));
}

async function revokeRecordingLink(sh, id) {
  try {
    await sh.get("DELETE", linksPath(sh) + "/" + id);
    say("Link " + id + " revoked.");
  } catch (e) {
    say(e.message, true);
  }
  await refreshRecordingLinks().catch((e) => say(e.message, true));
  const first = $("recording-link-rows").querySelector("button") || $("recording-share-create");
  if (first) first.focus();
}

async function copyRecordingLink() {
  try {
    await navigator.clipboard.writeText($("recording-share-url").value);
    say("Link copied.");
  } catch (e) {
    $("recording-share-url").select();
    say("Select the link and copy it.");
  }
}

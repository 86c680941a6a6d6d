// Shared by the sessions page and the admin console: element lookup, the status
// line, and JSON calls to the gateway's API with the browser's sign-in cookie.
"use strict";

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

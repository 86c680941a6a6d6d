// A share link's viewer page: the terminal full-window under a bar that says it is a
// read-only view. The link's path is /v/<session id>-<secret>; the read-only terminal
// is ttyd's page under it (/v/<token>/), served from a pool that drops all input.
"use strict";

(function () {
  const token = location.pathname.replace(/^\/v\//, "").replace(/\/+$/, "");
  const session = token.split("-")[0];
  const title = document.getElementById("terminal-title");
  const state = document.getElementById("terminal-state");
  const frame = document.getElementById("terminal-frame");
  title.textContent = "Read-only view of " + session;
  document.title = "termgate: read-only view of " + session;
  state.textContent = "Connecting…";
  state.className = "warn";
  frame.addEventListener("load", () => {
    let doc = null;
    try { doc = frame.contentDocument; } catch (e) { doc = null; }
    const refused = doc && (doc.contentType === "application/json" ||
      (doc.querySelector && doc.querySelector('meta[name="termgate-error"]')));
    if (refused) {
      state.textContent = "This link no longer shows the terminal.";
      state.className = "error";
      return;
    }
    state.textContent = "Watching (you cannot type here)";
    state.className = "";
  });
  frame.src = "/v/" + token + "/";
})();

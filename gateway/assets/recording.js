// A recording link's page (/r/<token>): the gateway served it because control said the
// link plays for this browser; the recording itself is /r/<token>/cast, played here by
// asciinema-player (/assets/player.js, when the gateway has gateway.player_dir) and
// offered as a download either way. `window.termgatePlayer` is the player's handle.
"use strict";

(function () {
  const token = location.pathname.replace(/^\/r\//, "").replace(/\/+$/, "");
  const src = "/r/" + token + "/cast";
  const status = document.getElementById("status");
  const view = document.getElementById("player-view");
  document.getElementById("recording-download").href = src;
  if (!window.AsciinemaPlayer) {
    status.textContent = "The player is not available here: download the recording and play it with asciinema.";
    return;
  }
  const p = AsciinemaPlayer.create(src, view, { fit: "width", controls: true, idleTimeLimit: 2 });
  window.termgatePlayer = p;
  const wrapper = view.querySelector(".ap-wrapper");
  if (wrapper) {
    wrapper.setAttribute("role", "group");
    wrapper.setAttribute("aria-labelledby", "player-title");
  }
  status.textContent = "Press play (or the space bar) to watch; you cannot type here.";
})();

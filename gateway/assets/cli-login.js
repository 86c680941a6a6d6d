// The command-line client's sign-in through the browser. `termgate login URL` opened
// this page with its loopback port, a state and its verifier's challenge in the
// fragment, which no server log sees. Signed in here, the user allows or denies; on
// Allow the gateway mints a code bound to the challenge, and the browser takes it to
// the client at http://127.0.0.1:<port>/callback, which alone holds the verifier the
// code is exchanged with. Signed out, the parameters wait in this tab's storage while
// the sessions page signs in and sends the browser back here.
"use strict";

(function () {
  const KEPT = "termgate-cli-login";

  // The client's parameters, strictly spelled: nothing else reaches the address the
  // browser is sent to, and only this computer's loopback is ever that address.
  function parse(fragment) {
    const p = new URLSearchParams(fragment.replace(/^#/, ""));
    const port = p.get("port") || "";
    const state = p.get("state") || "";
    const challenge = p.get("challenge") || "";
    if (!/^[0-9]{1,5}$/.test(port) || +port < 1 || +port > 65535) return null;
    if (!/^[A-Za-z0-9_-]{16,128}$/.test(state)) return null;
    if (!/^[A-Za-z0-9_-]{43}$/.test(challenge)) return null;
    return { port: +port, state, challenge, fragment: "#" + p.toString() };
  }

  // Sends the browser to the client with `query` and the client's state.
  function handBack(params, query) {
    location.replace("http://127.0.0.1:" + params.port + "/callback?" + query +
      "&state=" + encodeURIComponent(params.state));
  }

  function answer(params, allowed) {
    $("allow").disabled = true;
    $("deny").disabled = true;
    if (!allowed) {
      say("Denied: termgate was not signed in.");
      handBack(params, "error=access_denied");
      return;
    }
    request("POST", "/auth/cli/code", { challenge: params.challenge }).then((minted) => {
      say("Allowed: handing the sign-in to termgate…");
      handBack(params, "code=" + encodeURIComponent(minted.code));
    }, (e) => {
      say(e.message, true);
      // The client stops waiting and says why.
      handBack(params, "error=" + encodeURIComponent(e.code) +
        "&error_description=" + encodeURIComponent(e.message));
    });
  }

  async function start() {
    let params = parse(location.hash);
    if (!params) {
      params = parse(sessionStorage.getItem(KEPT) || "");
    }
    sessionStorage.removeItem(KEPT);
    if (!params) {
      say("This page is opened by termgate login, with what it needs in its address. Run termgate login again.", true);
      return;
    }
    let me;
    try {
      me = await request("GET", "/auth/session");
    } catch (e) {
      if (e.code === "unauthenticated") {
        sessionStorage.setItem(KEPT, params.fragment);
        location.assign("/#next=/cli-login");
        return;
      }
      say(e.message, true);
      return;
    }
    $("ask-sub").textContent = me.sub;
    document.title = "Sign in termgate as " + me.sub + " · termgate";
    $("allow").addEventListener("click", () => answer(params, true));
    $("deny").addEventListener("click", () => answer(params, false));
    $("ask").hidden = false;
    $("allow").focus();
  }

  start();
})();

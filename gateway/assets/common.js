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

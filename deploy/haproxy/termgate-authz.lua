-- termgate's check for HAProxy: asks control's GET /v1/authz about every terminal
-- request and leaves control's answer in transaction variables, from which
-- deploy/haproxy/haproxy.cfg refuses the request or rewrites it for ttyd
-- (docs/front-proxies.md "Behind a front proxy"). Needs HAProxy 2.5 or later
-- (core.httpclient) with Lua; load it in the global section and run it as an action:
--
--   global
--       lua-load /etc/haproxy/termgate-authz.lua
--   frontend ...
--       http-request lua.termgate_authz http://127.0.0.1:7680   # control.listen
--
-- The action sends control exactly what it judges: the client's Authorization,
-- Cookie and Origin, what tells a browser's page navigation from a script's request
-- (Accept, Sec-Fetch-Mode, Upgrade, X-Requested-With), and the original request as
-- X-Original-URI and X-Original-Method. Nothing else of the client's reaches control.
--
-- Variables it sets (transaction scope):
--   txn.termgate_status    "200", "302", "400", "401", "403", "404", "405" as control
--                          answered, or "502" for anything else: control not answering,
--                          not in time, or with an answer this file does not know.
--                          It is "502" from the start, so that an error in this file
--                          refuses the request; the configuration refuses an unset
--                          status as well (the action did not run).
--   on 200: txn.termgate_upstream, _uri, _path, _kind, _arg, _handle, _user, _reason
--           (control's X-Termgate-* headers)
--   on 302: txn.termgate_location
--   on 4xx: txn.termgate_body (control's JSON body), txn.termgate_www_authenticate
--   on 502: txn.termgate_body (control's own 502 body, when it answered one, else
--           the configuration's terminal_unavailable)

-- How long control may take to answer one attempt of a check. HAProxy's client tries
-- a connection that does not answer four times (its retries), so a stalled control
-- is a 502 after about 10 s; a closed port is one at once.
local CHECK_TIMEOUT_MS = 2500

-- A refusal's body is short JSON; a longer one is not control's.
local MAX_BODY = 4096

-- The client's request headers passed on to control, by lower-case name.
local PASSED = {
    "authorization",
    "cookie",
    "origin",
    "accept",
    "sec-fetch-mode",
    "upgrade",
    "x-requested-with",
}

-- control's 200 headers, each into the variable of the same name.
local ANSWERED = {
    upstream = "x-termgate-upstream",
    uri = "x-termgate-uri",
    path = "x-termgate-path",
    kind = "x-termgate-kind",
    arg = "x-termgate-arg",
    handle = "x-termgate-handle",
    user = "x-termgate-user",
    reason = "x-termgate-reason",
}

-- The refusals whose status and body pass to the client as control answered them.
local KEPT = { [400] = true, [401] = true, [403] = true, [404] = true, [405] = true }

-- The values of a header table as HAProxy gives them (indexed from 0 by
-- req_get_headers, from 1 by the HTTP client), in order.
local function values(list)
    local out = {}
    if type(list) ~= "table" then
        return out
    end
    local i = list[0] ~= nil and 0 or 1
    while list[i] ~= nil do
        out[#out + 1] = tostring(list[i])
        i = i + 1
    end
    return out
end

-- The first value of header `name` (lower case) in a header table, or nil.
local function first(headers, name)
    if type(headers) ~= "table" then
        return nil
    end
    for k, v in pairs(headers) do
        if type(k) == "string" and k:lower() == name then
            return values(v)[1]
        end
    end
    return nil
end

local function set(txn, name, value)
    txn:set_var("txn.termgate_" .. name, value or "")
end

local function check(txn, control)
    -- Fail closed: until control's answer is read, the request is refused.
    set(txn, "status", "502")
    set(txn, "body", "")
    for name in pairs(ANSWERED) do
        set(txn, name, "")
    end
    if control == nil or control == "" then
        txn:Alert("termgate_authz: no control address given to the action")
        return
    end

    local asked = txn.http:req_get_headers()
    local headers = {}
    for _, name in ipairs(PASSED) do
        local v = values(asked[name])
        if #v > 0 then
            headers[name] = v
        end
    end
    headers["x-original-uri"] = { txn.sf:pathq() }
    headers["x-original-method"] = { txn.sf:method() }

    local client = core.httpclient()
    local ok, res = pcall(client.get, client, {
        url = control:gsub("/+$", "") .. "/v1/authz",
        headers = headers,
        timeout = CHECK_TIMEOUT_MS,
    })
    if not ok then
        txn:Warning("termgate_authz: control's check failed: " .. tostring(res))
        return
    end
    local status = type(res) == "table" and tonumber(res.status) or nil
    if status == nil or status == 0 then
        txn:Warning("termgate_authz: control did not answer at " .. control)
        return
    end
    -- HAProxy's client answers 503 (no connection) and 504 (no answer in time) itself.
    local answer = res.headers or {}
    local body = type(res.body) == "string" and res.body or ""

    if status == 200 then
        for name, header in pairs(ANSWERED) do
            set(txn, name, first(answer, header))
        end
        -- ttyd's target is control's, whole: never forward without one.
        local uri = first(answer, "x-termgate-uri") or ""
        local upstream = first(answer, "x-termgate-upstream") or ""
        if uri:sub(1, 1) ~= "/" or upstream == "" then
            txn:Warning("termgate_authz: control's 200 names no target")
            return
        end
        set(txn, "status", "200")
    elseif status == 302 then
        local location = first(answer, "location")
        if location == nil or location == "" then
            return
        end
        set(txn, "location", location)
        set(txn, "status", "302")
    elseif KEPT[status] and #body <= MAX_BODY then
        set(txn, "body", body)
        set(txn, "www_authenticate", first(answer, "www-authenticate") or "Bearer")
        set(txn, "status", tostring(status))
    elseif status == 502 and #body <= MAX_BODY and body:find('"error"', 1, true) then
        -- The terminal's host or target, as control names it.
        set(txn, "body", body)
    else
        txn:Warning("termgate_authz: no answer from control at " .. control
            .. " (" .. tostring(status) .. ")")
    end
end

core.register_action("termgate_authz", { "http-req" }, check, 1)

-- Tollgate forward-auth for HAProxy 2.6 (Lua httpclient). Loaded by
-- haproxy.cfg; see docs/gateways.md.
--
-- http-request lua.tollgate <url of /v1/forward-auth>
--
-- asks Tollgate about the request and sets these transaction variables:
--   txn.tollgate_status       Tollgate's status (200, 429, ...); absent
--                             when Tollgate could not be reached
--   txn.tollgate_down         1 when Tollgate could not be reached or
--                             answered neither 2xx nor 429
--   txn.tollgate_policy, txn.tollgate_ratelimit, txn.tollgate_retry_after
--                             its RateLimit-Policy, RateLimit and
--                             Retry-After fields
--   txn.tollgate_body         the body of a refusal (the problem)
-- haproxy.cfg decides what to do with them.

local function first(headers, name)
  local v = headers[name]
  if v == nil then
    return nil
  end
  if type(v) == "table" then
    return v[0] or v[1]
  end
  return v
end

core.register_action("tollgate", { "http-req" }, function(txn, url)
  -- The original request as HAProxy received it; the client address is
  -- the connection's, never a header the client sent.
  local headers = {
    ["x-forwarded-method"] = { txn.sf:method() },
    ["x-forwarded-uri"] = { txn.sf:url() },
    ["x-forwarded-host"] = { txn.sf:req_fhdr("host") or "" },
    ["x-forwarded-for"] = { txn.sf:src() },
  }
  local hc = core.httpclient()
  local ok, res = pcall(function()
    return hc:get{ url = url, headers = headers, timeout = 2000 }
  end)
  if not ok or res == nil or res.status == nil or res.status == 0 then
    txn:set_var("txn.tollgate_down", 1)
    return
  end
  txn:set_var("txn.tollgate_status", res.status)
  local h = res.headers or {}
  for var, name in pairs({ tollgate_policy = "ratelimit-policy", tollgate_ratelimit = "ratelimit", tollgate_retry_after = "retry-after" }) do
    local v = first(h, name)
    if v ~= nil then
      txn:set_var("txn." .. var, v)
    end
  end
  if res.status == 429 then
    txn:set_var("txn.tollgate_body", res.body or "")
  elseif res.status < 200 or res.status > 299 then
    txn:set_var("txn.tollgate_down", 1)
  end
end, 1)

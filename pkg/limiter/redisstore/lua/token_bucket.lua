-- token_bucket: one decision, atomic; prelude.lua comes first (scripts.go).
local function before(as, ans, bs, bns) return as < bs or (as == bs and ans < bns) end
local function plus(as, ans, bs, bns)
  local s, ns = as + bs, ans + bns
  if ns >= 1e9 then return s + 1, ns - 1e9 end
  return s, ns
end
local tat_s, tat_ns = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local s, ns = string.match(v, '^(-?%d+):(%d+)')
  tat_s, tat_ns = tonumber(s), tonumber(ns)
end
if cost > 0 then
  local base_s, base_ns = tat_s, tat_ns
  if before(tat_s, tat_ns, now_s, now_ns) then base_s, base_ns = now_s, now_ns end
  local next_s, next_ns = plus(base_s, base_ns, tonumber(ARGV[6]), tonumber(ARGV[7]))
  local last_s, last_ns = plus(now_s, now_ns, tonumber(ARGV[8]), tonumber(ARGV[9]))
  if not before(last_s, last_ns, next_s, next_ns) then
    -- now, after the tat: when it was set, for the units a reset returns
    redis.call('SET', KEYS[1], int(next_s) .. ':' .. int(next_ns) .. ':' .. int(now_s) .. ':' .. int(now_ns), 'PX', window_s * 1000)
  end
end
return {now_s, now_ns, tat_s, tat_ns}

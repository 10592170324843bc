-- sliding_window: one decision, atomic; prelude.lua comes first (scripts.go).
local BASE = 16777216 -- 2^24: limb products stay below 2^48
local function big(x) -- x: an integer in [0, 2^53)
  local r = {}
  repeat
    local l = x % BASE
    r[#r + 1] = l
    x = (x - l) / BASE
  until x == 0
  return r
end
local function big_mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry = 0
    for j = 1, #b do
      local t = r[i + j - 1] + a[i] * b[j] + carry
      r[i + j - 1] = t % BASE
      carry = (t - r[i + j - 1]) / BASE
    end
    r[i + #b] = carry
  end
  return r
end
local function big_add(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) + 1 do
    local t = (a[i] or 0) + (b[i] or 0) + carry
    r[i] = t % BASE
    carry = (t - r[i]) / BASE
  end
  return r
end
local function big_cmp(a, b)
  for i = math.max(#a, #b), 1, -1 do
    local x, y = a[i] or 0, b[i] or 0
    if x ~= y then return x < y and -1 or 1 end
  end
  return 0
end
local NS = big(1e9)
-- fits: prev*(w-e) <= room*w in nanoseconds, w = window_s s, e = es s + ens ns
-- (limiter.SlidingWindowDecide's prev*(w-e) + (cur+want)*w <= limit*w).
local function fits(prev, room, es, ens)
  if room < 0 then return false end
  if prev == 0 then return true end
  local ds, dns = window_s - es, 0
  if ens > 0 then ds, dns = ds - 1, 1e9 - ens end
  local rest = big_add(big_mul(big(ds), NS), big(dns))
  local w = big_mul(big(window_s), NS)
  return big_cmp(big_mul(big(prev), rest), big_mul(big(room), w)) <= 0
end
local prev_f, cur_f = int(start - window_s), int(start)
local got = redis.call('HMGET', KEYS[1], prev_f, cur_f)
local prev, cur = tonumber(got[1] or 0), tonumber(got[2] or 0)
if cost > 0 and fits(prev, limit - cur - cost, now_s - start, now_ns) then
  add(KEYS[1], cur_f)
end
return {now_s, now_ns, prev, cur}

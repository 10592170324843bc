-- sliding_log: one decision, atomic; prelude.lua comes first (scripts.go).
local mode = ARGV[6]
local function event(m)
  local s, ns, c = string.match(m, '^(-?%d+)%.(%d+):(%d+)$')
  return tonumber(s), tonumber(ns), tonumber(c)
end
local since_s = now_s - window_s -- since = now - window: same nanoseconds
local since_us = since_s * 1e6 + math.floor(now_ns / 1000)
local kept_us = since_us - window_s * 1e6 -- now - 2 windows
local counted, units, newest_s, newest_ns = {}, 0, 0, 0
local allowed = true
local retry_s, retry_ns, freed = 0, 0, 0
if mode ~= 'record' then
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], int(since_us), '+inf')) do
    local s, ns, c = event(m)
    if s > since_s or (s == since_s and ns > now_ns) then
      counted[#counted + 1] = {s, ns, c}
      units, newest_s, newest_ns = units + c, s, ns
    end
  end
  local want = math.max(cost, 1)
  allowed = units + want <= limit
  if not allowed then
    local need = units + want - limit
    for _, e in ipairs(counted) do
      freed = freed + e[3]
      if freed >= need then
        retry_s, retry_ns = e[1], e[2]
        break
      end
    end
  end
end
if allowed and cost > 0 and mode ~= 'check' then
  local score = now_s * 1e6 + math.floor(now_ns / 1000)
  local total = cost
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], int(score), int(score))) do
    local s, ns, c = event(m)
    if s == now_s and ns == now_ns then
      total = total + c
      redis.call('ZREM', KEYS[1], m)
    end
  end
  redis.call('ZADD', KEYS[1], int(score), int(now_s) .. '.' .. string.format('%09d', now_ns) .. ':' .. int(total))
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. int(kept_us))
  redis.call('PEXPIRE', KEYS[1], window_s * 1000)
end
return {now_s, now_ns, units, newest_s, newest_ns, retry_s, retry_ns, freed}

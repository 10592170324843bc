package redisstore

import "github.com/redis/go-redis/v9"

// Each decision is one Lua script, run with EVALSHA (EVAL when the server
// answers NOSCRIPT, e.g. after SCRIPT FLUSH or a restart): one round trip,
// atomic on the server. The scripts decide and write; they return the state
// they read and the time they used, and the Go side rebuilds the Decision
// with the root package's arithmetic from exactly those values, so the two
// cannot drift apart in anything but the allow/deny that the script writes,
// which the tests compare against that arithmetic.
//
// Numbers. Lua numbers are doubles, exact only up to 2^53, and Unix
// nanoseconds (~1.8e18) are not. Times therefore travel as two integers,
// Unix seconds (floored) and nanoseconds in [0, 1e9), in client-time mode
// exactly as time.Time holds them; in server-time mode from TIME (seconds,
// microseconds × 1000). Windows are whole seconds (limiter.Policy.Validate),
// so window starts are whole seconds and fit a double. Every value a script
// adds or compares stays below 2^53: seconds, nanoseconds below 1e9, counts
// up to 2^31 plus costs, microsecond scores (~1.8e15). The one comparison
// that does not fit, sliding_window's prev×(w−elapsed) ≤ room×w in
// nanoseconds (up to 2^31 × 3.2e16 ≈ 2^86), is done exactly on base-2^24
// limbs (big_* below), the same comparison as limiter.SlidingWindowDecide's
// 128-bit one. We chose exact in-script arithmetic over "decide in Go, then
// compare-and-set" because the latter needs a read round trip before the
// write, cannot read the server's TIME first in server-time mode, and retries
// under contention, where rate limiting is hottest.
//
// Arguments of every decision script: KEYS[1] is the key's state;
// ARGV[1] Unix seconds ('' = read TIME), ARGV[2] nanoseconds, ARGV[3] window
// in seconds, ARGV[4] limit, ARGV[5] cost (0 = peek: nothing is written).
// Every script returns {now_s, now_ns, ...state read before the attempt}.

// prelude reads the common arguments; int formats an integral number
// without the exponent Lua's tostring would use above 1e14.
const prelude = `
local now_s, now_ns
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_s, now_ns = tonumber(t[1]), tonumber(t[2]) * 1000
else
  now_s, now_ns = tonumber(ARGV[1]), tonumber(ARGV[2])
end
local window_s, limit, cost = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local function int(x) return string.format('%.0f', x) end
`

// windowHelpers serve the two window algorithms, whose state is one hash of
// window start (Unix seconds) -> count. add keeps the current window, the
// previous one (sliding_window's prev) and the one before, so that a client
// clock stepping back by up to one window still finds its prev; trim drops
// the older fields, which only a longer step back could reach. The whole hash
// also expires two windows after its last write.
const windowHelpers = `
local start = now_s - now_s % window_s
local function trim(key, oldest)
  if redis.call('HLEN', key) > 3 then
    for _, f in ipairs(redis.call('HKEYS', key)) do
      if tonumber(f) < oldest then redis.call('HDEL', key, f) end
    end
  end
end
local function add(key, field)
  redis.call('HINCRBY', key, field, cost)
  trim(key, start - 2 * window_s)
  redis.call('PEXPIRE', key, window_s * 2000)
end
`

// fixedWindowScript counts every attempt, refused ones too, in the current
// window's field. Returns {now_s, now_ns, count before the attempt}.
var fixedWindowScript = redis.NewScript(prelude + windowHelpers + `
local field = int(start)
local count = tonumber(redis.call('HGET', KEYS[1], field) or 0)
if cost > 0 then add(KEYS[1], field) end
return {now_s, now_ns, count}
`)

// slidingWindowScript adds an allowed attempt's cost to the current window.
// Returns {now_s, now_ns, previous window's count, current window's count},
// both before the attempt.
var slidingWindowScript = redis.NewScript(prelude + windowHelpers + `
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
`)

// slidingLogScript keeps one sorted-set member per instant with admitted
// units, "<seconds>.<9-digit nanoseconds>:<units>", scored by Unix
// microseconds (exact in a double; members of one microsecond sort by their
// nanoseconds). ARGV[6] is the mode: "allow" decides and records an allowed
// attempt atomically; "check" only decides; "record" only records (the
// unsafe algorithm's second round trip). Counted are the events after
// now − window, future ones included (a clock stepping back hands out no
// fresh budget). Recording drops the events more than two windows old:
// a client clock stepping back by up to one window may still count those
// after now − window. Returns {now_s, now_ns, counted units, newest counted event
// (s, ns), and when refused the event whose departure frees enough units
// (s, ns) with the units counted up to and including it}.
var slidingLogScript = redis.NewScript(prelude + `
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
`)

// tokenBucketScript keeps the GCRA theoretical arrival time as
// "<seconds>:<nanoseconds>" (absent = 0, the Unix epoch, as
// limiter.TokenBucketDecide takes a new key). ARGV[6..7] is cost × emission
// interval and ARGV[8..9] the burst (limit × interval), each as (s, ns).
// Returns {now_s, now_ns, tat_s, tat_ns} with the tat read before the attempt.
var tokenBucketScript = redis.NewScript(prelude + `
local function before(as, ans, bs, bns) return as < bs or (as == bs and ans < bns) end
local function plus(as, ans, bs, bns)
  local s, ns = as + bs, ans + bns
  if ns >= 1e9 then return s + 1, ns - 1e9 end
  return s, ns
end
local tat_s, tat_ns = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local s, ns = string.match(v, '^(-?%d+):(%d+)$')
  tat_s, tat_ns = tonumber(s), tonumber(ns)
end
if cost > 0 then
  local base_s, base_ns = tat_s, tat_ns
  if before(tat_s, tat_ns, now_s, now_ns) then base_s, base_ns = now_s, now_ns end
  local next_s, next_ns = plus(base_s, base_ns, tonumber(ARGV[6]), tonumber(ARGV[7]))
  local last_s, last_ns = plus(now_s, now_ns, tonumber(ARGV[8]), tonumber(ARGV[9]))
  if not before(last_s, last_ns, next_s, next_ns) then
    redis.call('SET', KEYS[1], int(next_s) .. ':' .. int(next_ns), 'PX', window_s * 1000)
  end
end
return {now_s, now_ns, tat_s, tat_ns}
`)

// resetScript deletes KEYS and returns how many records they held: window
// fields, log instants, bucket states.
var resetScript = redis.NewScript(`
local n = 0
for _, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key).ok
  if kind == 'hash' then n = n + redis.call('HLEN', key)
  elseif kind == 'zset' then n = n + redis.call('ZCARD', key)
  elseif kind == 'string' then n = n + 1 end
  redis.call('DEL', key)
end
return n
`)

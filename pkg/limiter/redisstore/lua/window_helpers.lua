-- window_helpers: the hash of window start -> count of fixed_window and sliding_window.
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

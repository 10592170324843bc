-- window_helpers: the hash of window start -> count of fixed_window and sliding_window.
local start = now_s - now_s % window_s
local function trim(key, oldest)
  if redis.call('HLEN', key) > 3 then
    for _, f in ipairs(redis.call('HKEYS', key)) do
      if tonumber(f) < oldest then redis.call('HDEL', key, f) end
    end
  end
end
-- add counts cost in field and returns the count before it. Only a field's
-- first units can grow the hash or need a later expiry: the expiry set then,
-- 2 windows from a moment in the field's window, outlives its use as the
-- previous window of the next one.
local function add(key, field)
  local before = redis.call('HINCRBY', key, field, cost) - cost
  if before == 0 then
    trim(key, start - 2 * window_s)
    redis.call('PEXPIRE', key, window_s * 2000)
  end
  return before
end

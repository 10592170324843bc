-- reset: deletes KEYS; returns the units of their window counts and event
-- costs, followed by the values of their buckets (store.go counts those).
local r = {0}
for _, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key).ok
  if kind == 'hash' then
    for _, c in ipairs(redis.call('HVALS', key)) do r[1] = r[1] + tonumber(c) end
  elseif kind == 'zset' then
    for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
      r[1] = r[1] + tonumber(string.match(m, ':(%d+)$'))
    end
  elseif kind == 'string' then
    r[#r + 1] = redis.call('GET', key)
  end
  redis.call('DEL', key)
end
return r

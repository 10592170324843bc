-- reset: deletes KEYS, returns how many records they held.
local n = 0
for _, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key).ok
  if kind == 'hash' then n = n + redis.call('HLEN', key)
  elseif kind == 'zset' then n = n + redis.call('ZCARD', key)
  elseif kind == 'string' then n = n + 1 end
  redis.call('DEL', key)
end
return n

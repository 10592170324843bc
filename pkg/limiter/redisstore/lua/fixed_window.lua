-- fixed_window: one decision, atomic; prelude.lua comes first (scripts.go).
local field = int(start)
local count
if cost > 0 then
  count = add(KEYS[1], field)
else
  count = tonumber(redis.call('HGET', KEYS[1], field) or 0)
end
return {now_s, now_ns, count}

-- fixed_window: one decision, atomic; prelude.lua comes first (scripts.go).
local field = int(start)
local count = tonumber(redis.call('HGET', KEYS[1], field) or 0)
if cost > 0 then add(KEYS[1], field) end
return {now_s, now_ns, count}

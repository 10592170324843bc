-- prelude: reads the arguments every decision script shares (scripts.go).
local now_s, now_ns
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_s, now_ns = tonumber(t[1]), tonumber(t[2]) * 1000
else
  now_s, now_ns = tonumber(ARGV[1]), tonumber(ARGV[2])
end
local window_s, limit, cost = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local function int(x) return string.format('%.0f', x) end

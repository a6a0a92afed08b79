-- fixed_window: the Lua form of algorithms.FixedWindow (fixedwindow.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string of 3 little-endian doubles (struct '<ddd'):
--            expires (when the state's TTL passes, on the clock that wrote
--            it; after it the state counts as missing), the window's start
--            in µs, and the count admitted in it
--   ARGV     now, cost, peek, server_clock, slack, limit, period
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay}
-- Hot path: no closures but idiv, and binary state, since every
-- allocation costs server time on each decision.

local MAX = 9007199254740992 -- algorithms.MaxExact
local floor, max, tonumber = math.floor, math.max, tonumber
local function idiv(a, b) -- floor(a/b), exact for integers below 2^53
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local now = tonumber(ARGV[1])
if ARGV[4] == '1' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local peek = ARGV[3] == '1'
local slack = tonumber(ARGV[5])
local limit, period = tonumber(ARGV[6]), tonumber(ARGV[7])

local start, count = 0, 0
local fresh = true
local raw = redis.call('GET', KEYS[1])
if raw then
  if #raw ~= 24 then
    return redis.error_reply('CORRUPT fixed_window state of ' .. #raw .. ' bytes')
  end
  local x, s, c = struct.unpack('<ddd', raw)
  if not (x >= 0 and x <= MAX and s >= 0 and s <= MAX
      and c >= 0 and c <= MAX) then
    return redis.error_reply('CORRUPT fixed_window state')
  end
  if now < x then
    start, count = s, c
    fresh = now >= start + period
  end
end
if fresh then
  start, count = idiv(now, period) * period, 0
end
local finish = start + period
local reset = finish - now
if count == 0 then reset = 0 end
if count + cost > limit then
  return {0, limit, max(limit - count, 0), finish - now, reset, 0}
end
if peek then
  return {1, limit, max(limit - count, 0), 0, reset, 0}
end
count = count + cost
redis.call('SET', KEYS[1], struct.pack('<ddd', finish, start, count),
  'PX', max(idiv(finish - now + 999, 1000), 1) + slack)
return {1, limit, limit - count, 0, finish - now, 0}

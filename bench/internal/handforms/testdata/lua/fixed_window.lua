-- fixed_window: the Lua form of algorithms.FixedWindow (fixedwindow.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string of 3 little-endian doubles (struct '<ddd'):
--            expires (when the state's TTL passes, on the clock that wrote
--            it; after it the state counts as missing), the window's start
--            in µs, and the count admitted in it
--   ARGV     now, cost, peek, server_clock, slack, packed(limit, period)
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay}
-- Hot path: no closures (creating one costs the server on every call) and
-- binary state. Each floor division of integers a and b is written out as
--   q = floor(a / b), then q - 1 if q*b > a, or q + 1 if (q+1)*b <= a,
-- which is exact for integers below 2^53.

local MAX = 9007199254740992 -- algorithms.MaxExact
local floor, max, tonumber = math.floor, math.max, tonumber

local now = tonumber(ARGV[1])
if ARGV[4] == '1' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local peek = ARGV[3] == '1'
local slack = tonumber(ARGV[5])
local limit, period = struct.unpack('<dd', ARGV[6])

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
  local w = floor(now / period)
  if w * period > now then w = w - 1 elseif (w + 1) * period <= now then w = w + 1 end
  start, count = w * period, 0
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
local r999 = finish - now + 999
local px = floor(r999 / 1000)
if px * 1000 > r999 then px = px - 1 elseif (px + 1) * 1000 <= r999 then px = px + 1 end
redis.call('SET', KEYS[1], struct.pack('<ddd', finish, start, count), 'PX', max(px, 1) + slack)
return {1, limit, limit - count, 0, finish - now, 0}

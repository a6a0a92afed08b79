-- fixed_window: the Lua form of algorithms.FixedWindow (fixedwindow.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string "expires:start:count"; expires is when its TTL
--            passes, on the clock that wrote it, after which it counts as missing
--   ARGV     now, cost, peek, server_clock, slack, limit, period
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay, now}

local MAX = 9007199254740992 -- algorithms.MaxExact
local floor, max, min, format, match, tonumber = math.floor, math.max, math.min, string.format, string.match, tonumber
local function fmt(x) return format('%.0f', x) end
local function idiv(a, b) -- floor(a/b), exact for integers below 2^53
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local slack = tonumber(ARGV[5])
local function ms(us) -- PX from a TTL in µs: ceil(us/1000), at least 1, plus the slack
  return max(idiv(us + 999, 1000), 1) + slack
end

local now = tonumber(ARGV[1])
if ARGV[4] == '1' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local peek = ARGV[3] == '1'
local limit, period = tonumber(ARGV[6]), tonumber(ARGV[7])

local start, count = 0, 0
local fresh = true
local raw = redis.call('GET', KEYS[1])
if raw then
  local x, s, c = match(raw, '^(%d+):(%d+):(%d+)$')
  if not x then
    return redis.error_reply('CORRUPT fixed_window state ' .. raw)
  end
  x, s, c = tonumber(x), tonumber(s), tonumber(c)
  if x > MAX or s > MAX or c > MAX then
    return redis.error_reply('CORRUPT fixed_window state ' .. raw)
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
local allowed = count + cost <= limit
if not allowed then
  return {0, limit, max(limit - count, 0), finish - now, reset, 0, now}
end
if peek then
  return {1, limit, max(limit - count, 0), 0, reset, 0, now}
end
count = count + cost
redis.call('SET', KEYS[1], format('%.0f:%.0f:%.0f', finish, start, count), 'PX', ms(finish - now))
return {1, limit, limit - count, 0, finish - now, 0, now}

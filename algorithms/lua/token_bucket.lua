-- token_bucket: the Lua form of algorithms.TokenBucket (rate.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string "expires:deficit:last:unit"; expires is when its
--            TTL passes, on the clock that wrote it, after which it counts as
--            missing
--   ARGV     now, cost, peek, server_clock, slack, unit, drip, capacity, fill, burst
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay, now}

local MAX = 9007199254740992 -- algorithms.MaxExact
local floor, max, min, format, match, tonumber = math.floor, math.max, math.min, string.format, string.match, tonumber
local function fmt(x) return format('%.0f', x) end
local function idiv(a, b) -- floor(a/b), exact for integers below 2^53
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ceildiv(a, b) return idiv(a + b - 1, b) end
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
local unit, drip, capacity, fill, burst =
  tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])

-- rate.rescale: the same doubles as the Go form, level ÷ from × unit, floored.
local function rescale(level, from)
  if from == unit then return min(level, capacity) end
  return min(floor(level / from * unit), capacity)
end
-- rate.drain
local function drain(level, elapsed)
  if elapsed <= 0 then return level end
  if elapsed >= fill then return 0 end
  return max(level - elapsed * drip, 0)
end

local deficit, last = 0, now
local raw = redis.call('GET', KEYS[1])
if raw then
  local x, d, l, u = match(raw, '^(%d+):(%d+):(%d+):(%d+)$')
  if not x then
    return redis.error_reply('CORRUPT token_bucket state ' .. raw)
  end
  x, d, l, u = tonumber(x), tonumber(d), tonumber(l), tonumber(u)
  if x > MAX or d > MAX or l > MAX or u > MAX then
    return redis.error_reply('CORRUPT token_bucket state ' .. raw)
  end
  if u <= 0 then
    return redis.error_reply('CORRUPT token_bucket unit ' .. fmt(u))
  end
  if now < x then
    deficit = rescale(d, u)
    last = max(l, now)
    deficit = drain(deficit, now - l)
  end
end
local need = cost * unit
local allowed = deficit + need <= capacity
if allowed and not peek then deficit = deficit + need end
local remaining = idiv(capacity - deficit, unit)
local reset = ceildiv(deficit, drip)
if not allowed then
  return {0, burst, remaining, ceildiv(deficit + need - capacity, drip), reset, 0, now}
end
if peek then
  return {1, burst, remaining, 0, reset, 0, now}
end
redis.call('SET', KEYS[1], format('%.0f:%.0f:%.0f:%.0f', now + reset, deficit, last, unit), 'PX', ms(reset))
return {1, burst, remaining, 0, reset, 0, now}

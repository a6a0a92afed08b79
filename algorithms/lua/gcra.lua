-- gcra: the Lua form of algorithms.GCRA (rate.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string "expires:tat:fraction:drip" (when its TTL
--            passes, on the clock that wrote it, after which it counts as
--            missing; the theoretical arrival time in microseconds; its
--            fraction in 1/drip of a microsecond)
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

local ahead = 0 -- units by which the TAT lies ahead of now
local raw = redis.call('GET', KEYS[1])
if raw then
  local x, t, f, d = match(raw, '^(%d+):(%d+):(%d+):(%d+)$')
  local tat, frac, sdrip
  if not x then
    return redis.error_reply('CORRUPT gcra state ' .. raw)
  end
  x, tat, frac, sdrip = tonumber(x), tonumber(t), tonumber(f), tonumber(d)
  if x > MAX or tat > MAX or frac > MAX or sdrip > MAX then
    return redis.error_reply('CORRUPT gcra state ' .. raw)
  end
  if sdrip <= 0 or frac < 0 or frac >= sdrip then
    return redis.error_reply('CORRUPT gcra fraction ' .. f .. '/' .. d)
  end
  if now < x and tat >= now then
    -- A TAT further ahead than the capacity (a clock behind the one that
    -- stored it, or a smaller burst than before) is capped.
    local us = min(tat - now, fill)
    if sdrip ~= drip then
      -- The same doubles as the Go form: frac ÷ stored drip × drip, floored.
      frac = floor(frac / sdrip * drip)
    end
    ahead = min(us * drip + frac, capacity)
  end
end
local need = cost * unit
local allowed = ahead + need <= capacity
if allowed and not peek then ahead = ahead + need end
local remaining = idiv(max(capacity - ahead, 0), unit)
local reset = ceildiv(ahead, drip)
if not allowed then
  return {0, burst, remaining, ceildiv(ahead + need - capacity, drip), reset, 0, now}
end
if peek then
  return {1, burst, remaining, 0, reset, 0, now}
end
local whole = idiv(ahead, drip)
redis.call('SET', KEYS[1], format('%.0f:%.0f:%.0f:%.0f', now + reset, now + whole, ahead - whole * drip, drip), 'PX', ms(reset))
return {1, burst, remaining, 0, reset, 0, now}

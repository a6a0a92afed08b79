-- token_bucket: the Lua form of algorithms.TokenBucket (rate.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string of 4 little-endian doubles (struct '<dddd'):
--            expires (when the state's TTL passes, on the clock that wrote
--            it; after it the state counts as missing), the deficit (missing
--            units), the last update in µs, and the unit it is measured in
--   ARGV     now, cost, peek, server_clock, slack, unit, drip, capacity, fill, burst
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay}
-- Hot path: no closures but idiv, and binary state, since every
-- allocation costs server time on each decision.

local MAX = 9007199254740992 -- algorithms.MaxExact
local floor, max, min, tonumber = math.floor, math.max, math.min, tonumber
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
local unit, drip, capacity, fill, burst =
  tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])

local deficit, last = 0, now
local raw = redis.call('GET', KEYS[1])
if raw then
  if #raw ~= 32 then
    return redis.error_reply('CORRUPT token_bucket state of ' .. #raw .. ' bytes')
  end
  local x, d, l, u = struct.unpack('<dddd', raw)
  if not (x >= 0 and x <= MAX and d >= 0 and d <= MAX
      and l >= 0 and l <= MAX and u <= MAX) then
    return redis.error_reply('CORRUPT token_bucket state')
  end
  if not (u > 0) then
    return redis.error_reply('CORRUPT token_bucket unit ' .. u)
  end
  if now < x then
    -- rate.rescale: the same doubles as the Go form, level ÷ from × unit,
    -- floored, capped at the capacity.
    if u == unit then
      deficit = min(d, capacity)
    else
      deficit = min(floor(d / u * unit), capacity)
    end
    last = max(l, now)
    -- rate.drain
    local elapsed = now - l
    if elapsed >= fill then
      deficit = 0
    elseif elapsed > 0 then
      deficit = max(deficit - elapsed * drip, 0)
    end
  end
end
local need = cost * unit
local allowed = deficit + need <= capacity
if allowed and not peek then deficit = deficit + need end
local remaining = idiv(capacity - deficit, unit)
local reset = idiv(deficit + drip - 1, drip)
if not allowed then
  return {0, burst, remaining, idiv(deficit + need - capacity + drip - 1, drip), reset, 0}
end
if peek then
  return {1, burst, remaining, 0, reset, 0}
end
redis.call('SET', KEYS[1], struct.pack('<dddd', now + reset, deficit, last, unit),
  'PX', max(idiv(reset + 999, 1000), 1) + slack)
return {1, burst, remaining, 0, reset, 0}

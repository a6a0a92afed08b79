-- token_bucket: the Lua form of algorithms.TokenBucket (rate.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string of 4 little-endian doubles (struct '<dddd'):
--            expires (when the state's TTL passes, on the clock that wrote
--            it; after it the state counts as missing), the deficit (missing
--            units), the last update in µs, and the unit it is measured in
--   ARGV     now, cost, peek, server_clock, slack, packed(unit, drip, capacity, fill, burst)
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay}
-- Hot path: no closures (creating one costs the server on every call) and
-- binary state. Each floor division of integers a and b is written out as
--   q = floor(a / b), then q - 1 if q*b > a, or q + 1 if (q+1)*b <= a,
-- which is exact for integers below 2^53; a ceiling is a floor plus one when
-- the division leaves a remainder.

local MAX = 9007199254740992 -- algorithms.MaxExact
local floor, max, min, tonumber = math.floor, math.max, math.min, tonumber

local now = tonumber(ARGV[1])
if ARGV[4] == '1' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local peek = ARGV[3] == '1'
local slack = tonumber(ARGV[5])
local unit, drip, capacity, fill, burst = struct.unpack('<ddddd', ARGV[6])

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
local left = capacity - deficit
local remaining = floor(left / unit)
if remaining * unit > left then remaining = remaining - 1 elseif (remaining + 1) * unit <= left then remaining = remaining + 1 end
local reset = floor(deficit / drip)
if reset * drip > deficit then reset = reset - 1 elseif (reset + 1) * drip <= deficit then reset = reset + 1 end
if reset * drip < deficit then reset = reset + 1 end
if not allowed then
  local over = deficit + need - capacity
  local retry = floor(over / drip)
  if retry * drip > over then retry = retry - 1 elseif (retry + 1) * drip <= over then retry = retry + 1 end
  if retry * drip < over then retry = retry + 1 end
  return {0, burst, remaining, retry, reset, 0}
end
if peek then
  return {1, burst, remaining, 0, reset, 0}
end
local r999 = reset + 999
local px = floor(r999 / 1000)
if px * 1000 > r999 then px = px - 1 elseif (px + 1) * 1000 <= r999 then px = px + 1 end
redis.call('SET', KEYS[1], struct.pack('<dddd', now + reset, deficit, last, unit),
  'PX', max(px, 1) + slack)
return {1, burst, remaining, 0, reset, 0}

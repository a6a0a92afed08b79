-- gcra: the Lua form of algorithms.GCRA (rate.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string of 4 little-endian doubles (struct '<dddd'):
--            expires (when the state's TTL passes, on the clock that wrote
--            it; after it the state counts as missing), the theoretical
--            arrival time in µs, its fraction in 1/drip of a µs, and drip
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

local ahead = 0 -- units by which the TAT lies ahead of now
local raw = redis.call('GET', KEYS[1])
if raw then
  if #raw ~= 32 then
    return redis.error_reply('CORRUPT gcra state of ' .. #raw .. ' bytes')
  end
  local x, tat, frac, sdrip = struct.unpack('<dddd', raw)
  if not (x >= 0 and x <= MAX and tat >= 0 and tat <= MAX
      and frac >= 0 and frac <= MAX and sdrip <= MAX) then
    return redis.error_reply('CORRUPT gcra state')
  end
  if not (sdrip > 0 and frac < sdrip) then
    return redis.error_reply('CORRUPT gcra fraction ' .. frac .. '/' .. sdrip)
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
local left = max(capacity - ahead, 0)
local remaining = floor(left / unit)
if remaining * unit > left then remaining = remaining - 1 elseif (remaining + 1) * unit <= left then remaining = remaining + 1 end
-- whole = floor(ahead / drip); reset = ceil(ahead / drip)
local whole = floor(ahead / drip)
if whole * drip > ahead then whole = whole - 1 elseif (whole + 1) * drip <= ahead then whole = whole + 1 end
local reset = whole
if whole * drip < ahead then reset = whole + 1 end
if not allowed then
  local over = ahead + need - capacity
  local retry_q = floor(over / drip)
  if retry_q * drip > over then retry_q = retry_q - 1 elseif (retry_q + 1) * drip <= over then retry_q = retry_q + 1 end
  local retry = retry_q
  if retry_q * drip < over then retry = retry_q + 1 end
  return {0, burst, remaining, retry, reset, 0}
end
if peek then
  return {1, burst, remaining, 0, reset, 0}
end
local px = floor((reset + 999) / 1000)
if px * 1000 > reset + 999 then px = px - 1 elseif (px + 1) * 1000 <= reset + 999 then px = px + 1 end
redis.call('SET', KEYS[1], struct.pack('<dddd', now + reset, now + whole, ahead - whole * drip, drip),
  'PX', max(px, 1) + slack)
return {1, burst, remaining, 0, reset, 0}

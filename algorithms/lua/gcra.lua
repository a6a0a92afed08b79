-- gcra: the Lua form of algorithms.GCRA (rate.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string of 4 little-endian doubles (struct '<dddd'):
--            expires (when the state's TTL passes, on the clock that wrote
--            it; after it the state counts as missing), the theoretical
--            arrival time in µs, its fraction in 1/drip of a µs, and drip
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
local remaining = idiv(max(capacity - ahead, 0), unit)
local reset = idiv(ahead + drip - 1, drip)
if not allowed then
  return {0, burst, remaining, idiv(ahead + need - capacity + drip - 1, drip), reset, 0}
end
if peek then
  return {1, burst, remaining, 0, reset, 0}
end
local whole = idiv(ahead, drip)
redis.call('SET', KEYS[1], struct.pack('<dddd', now + reset, now + whole, ahead - whole * drip, drip),
  'PX', max(idiv(reset + 999, 1000), 1) + slack)
return {1, burst, remaining, 0, reset, 0}

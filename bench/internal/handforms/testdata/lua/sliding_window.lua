-- sliding_window: the Lua form of algorithms.SlidingWindow (slidingwindow.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string of 4 little-endian doubles (struct '<dddd'):
--            expires (when the state's TTL passes, on the clock that wrote
--            it; after it the state counts as missing), the current
--            window's start in µs, its count, and the previous window's count
--   ARGV     now, cost, peek, server_clock, slack, packed(limit, period)
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay}
-- Hot path: binary state, and closures only for the retry search (creating
-- one costs the server on every call). Each floor division of integers a
-- and b is written out as
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

local w0 = floor(now / period)
if w0 * period > now then w0 = w0 - 1 elseif (w0 + 1) * period <= now then w0 = w0 + 1 end
local start, curr, prev = w0 * period, 0, 0
local raw = redis.call('GET', KEYS[1])
if raw then
  if #raw ~= 32 then
    return redis.error_reply('CORRUPT sliding_window state of ' .. #raw .. ' bytes')
  end
  local x, s, c, p = struct.unpack('<dddd', raw)
  if not (x >= 0 and x <= MAX and s >= 0 and s <= MAX
      and c >= 0 and c <= MAX and p >= 0 and p <= MAX) then
    return redis.error_reply('CORRUPT sliding_window state')
  end
  if now >= x then
    -- expired: as if there were no state
  elseif now < s + period then -- current (or ahead of our clock)
    start, curr, prev = s, c, p
  elseif now - s < 2 * period then -- the stored window is the previous one
    start, curr, prev = s + period, 0, c
  end
end
local elapsed = max(now - start, 0)
-- The previous window's weight after elapsed of the current one: the same
-- doubles as the Go form, prev × (period − elapsed), then ÷ period, floored.
local w = floor(prev * (period - elapsed) / period)
local allowed = w + curr + cost <= limit
if allowed and not peek then curr = curr + cost end
local remaining = max(limit - w - curr, 0)
local reset = 0
if curr > 0 then
  reset = start + 2 * period - now
elseif prev > 0 then
  reset = start + period - now
end
if not allowed then
  -- The previous window's weight after elapsed of the current one: the same
  -- doubles as the Go form, prev × (period − elapsed), then ÷ period, floored.
  local function weighted(prev, elapsed)
    return floor(prev * (period - elapsed) / period)
  end

  -- The smallest e ≥ from within a window with weighted(prev, e) ≤ room, or
  -- period when there is none.
  local function wait(prev, room, from)
    if room < 0 then return period end
    local e = from
    if prev > 0 then
      local est = period - floor((room + 1) * period / prev)
      e = max(from, est)
    end
    while e > from and weighted(prev, e - 1) <= room do e = e - 1 end
    while e < period and weighted(prev, e) > room do e = e + 1 end
    return e
  end
  -- First try later in this window, as prev decays; failing that, in the
  -- next window, where this window's count becomes prev.
  local retry
  local e = wait(prev, limit - curr - cost, elapsed)
  if e < period then
    retry = e - elapsed
  else
    retry = period - elapsed + wait(curr, limit - cost, 0)
  end
  return {0, limit, remaining, retry, reset, 0}
end
if peek then
  return {1, limit, remaining, 0, reset, 0}
end
local ttl = start + 2 * period - now
local r999 = ttl + 999
local px = floor(r999 / 1000)
if px * 1000 > r999 then px = px - 1 elseif (px + 1) * 1000 <= r999 then px = px + 1 end
redis.call('SET', KEYS[1], struct.pack('<dddd', now + ttl, start, curr, prev), 'PX', max(px, 1) + slack)
return {1, limit, remaining, 0, reset, 0}

-- sliding_window: the Lua form of algorithms.SlidingWindow (slidingwindow.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string "start:current:previous"
--   ARGV     now, cost, peek, server_clock, limit, period
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay, now}

local function fmt(x) return string.format('%.0f', x) end
local function idiv(a, b) -- floor(a/b), exact for integers below 2^53
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ms(us) -- PX from a TTL in microseconds: ceil(us/1000), at least 1
  return math.max(idiv(us + 999, 1000), 1)
end

local now = tonumber(ARGV[1])
if ARGV[4] == '1' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local peek = ARGV[3] == '1'
local limit, period = tonumber(ARGV[5]), tonumber(ARGV[6])

-- The previous window's weight after elapsed of the current one: the same
-- doubles as the Go form, prev × (period − elapsed), then ÷ period, floored.
local function weighted(prev, elapsed)
  return math.floor(prev * (period - elapsed) / period)
end

-- The smallest e ≥ from within a window with weighted(prev, e) ≤ room, or
-- period when there is none.
local function wait(prev, room, from)
  if room < 0 then return period end
  local e = from
  if prev > 0 then
    local est = period - math.floor((room + 1) * period / prev)
    e = math.max(from, est)
  end
  while e > from and weighted(prev, e - 1) <= room do e = e - 1 end
  while e < period and weighted(prev, e) > room do e = e + 1 end
  return e
end

local start, curr, prev = idiv(now, period) * period, 0, 0
local raw = redis.call('GET', KEYS[1])
if raw then
  local s, c, p = string.match(raw, '^(%-?%d+):(%-?%d+):(%-?%d+)$')
  if not s then
    return redis.error_reply('CORRUPT sliding_window state ' .. raw)
  end
  s, c, p = tonumber(s), tonumber(c), tonumber(p)
  if now < s + period then -- current (or ahead of our clock)
    start, curr, prev = s, c, p
  elseif now - s < 2 * period then -- the stored window is the previous one
    start, curr, prev = s + period, 0, c
  end
end
local elapsed = math.max(now - start, 0)
local w = weighted(prev, elapsed)
local allowed = w + curr + cost <= limit
if allowed and not peek then curr = curr + cost end
local remaining = math.max(limit - w - curr, 0)
local reset = 0
if curr > 0 then
  reset = start + 2 * period - now
elseif prev > 0 then
  reset = start + period - now
end
if not allowed then
  -- First try later in this window, as prev decays; failing that, in the
  -- next window, where this window's count becomes prev.
  local retry
  local e = wait(prev, limit - curr - cost, elapsed)
  if e < period then
    retry = e - elapsed
  else
    retry = period - elapsed + wait(curr, limit - cost, 0)
  end
  return {0, limit, remaining, retry, reset, 0, now}
end
if peek then
  return {1, limit, remaining, 0, reset, 0, now}
end
redis.call('SET', KEYS[1], fmt(start) .. ':' .. fmt(curr) .. ':' .. fmt(prev), 'PX', fmt(ms(start + 2 * period - now)))
return {1, limit, remaining, 0, reset, 0, now}

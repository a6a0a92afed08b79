-- token_bucket: the Lua form of algorithms.TokenBucket (rate.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a string "deficit:last:unit"
--   ARGV     now, cost, peek, server_clock, unit, drip, capacity, fill, burst
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay, now}

local function fmt(x) return string.format('%.0f', x) end
local function idiv(a, b) -- floor(a/b), exact for integers below 2^53
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ceildiv(a, b) return idiv(a + b - 1, b) end
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
local unit, drip, capacity, fill, burst =
  tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

-- rate.rescale: the same doubles as the Go form, level ÷ from × unit, floored.
local function rescale(level, from)
  if from == unit then return math.min(level, capacity) end
  return math.min(math.floor(level / from * unit), capacity)
end
-- rate.drain
local function drain(level, elapsed)
  if elapsed <= 0 then return level end
  if elapsed >= fill then return 0 end
  return math.max(level - elapsed * drip, 0)
end

local deficit, last = 0, now
local raw = redis.call('GET', KEYS[1])
if raw then
  local d, l, u = string.match(raw, '^(%-?%d+):(%-?%d+):(%-?%d+)$')
  if not d then
    return redis.error_reply('CORRUPT token_bucket state ' .. raw)
  end
  d, l, u = tonumber(d), tonumber(l), tonumber(u)
  if u <= 0 then
    return redis.error_reply('CORRUPT token_bucket unit ' .. fmt(u))
  end
  deficit = rescale(d, u)
  last = math.max(l, now)
  deficit = drain(deficit, now - l)
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
redis.call('SET', KEYS[1], fmt(deficit) .. ':' .. fmt(last) .. ':' .. fmt(unit), 'PX', fmt(ms(reset)))
return {1, burst, remaining, 0, reset, 0, now}

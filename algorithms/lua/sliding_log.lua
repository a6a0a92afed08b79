-- sliding_log: the Lua form of algorithms.SlidingLog (slidinglog.go).
-- Calling convention: see algorithms/lua.go.
--   KEYS[1]  state: a sorted set with one member per admitted request,
--            scored by its time in microseconds; the member is "seq:cost",
--            where seq is one more than the largest seq among the live
--            members, so two requests in the same microsecond (or at times
--            that go backwards) are always two members. One more member,
--            "x:expires" scored -inf, says when the log's TTL passes on the
--            clock that wrote it, after which the log counts as missing.
--   ARGV     now, cost, peek, server_clock, slack, packed(limit, period)
--   reply    {allowed, limit, remaining, retry_after, reset_after, delay}

local MAX = 9007199254740992 -- algorithms.MaxExact
local floor, max, format, match, tonumber = math.floor, math.max, string.format, string.match, tonumber
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
local limit, period = struct.unpack('<dd', ARGV[6])

-- An entry counts while now < at + period, that is at > now - period.
local cutoff = now - period
local live = {}
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local stale = false
if #head > 0 then
  local x = match(head[1], '^x:(%d+)$')
  if not x or head[2] ~= '-inf' then
    return redis.error_reply('CORRUPT sliding_log without its expiry member')
  end
  if now < tonumber(x) then
    live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. format('%.0f', cutoff), '+inf', 'WITHSCORES')
  else
    stale = true
  end
end
local n = #live / 2
local ats, costs = {}, {}
local used, newest, seq = 0, -1, 0
for i = 1, n do
  local s, c = match(live[2 * i - 1], '^(%d+):(%-?%d+)$')
  if not s then
    return redis.error_reply('CORRUPT sliding_log member ' .. live[2 * i - 1])
  end
  local at, ec = tonumber(live[2 * i]), tonumber(c)
  if ec <= 0 or ec > MAX or at > MAX or used > MAX then
    return redis.error_reply('CORRUPT sliding_log entry ' .. live[2 * i - 1] .. ' at ' .. live[2 * i])
  end
  ats[i], costs[i] = at, ec
  used = used + ec
  newest = at -- the set is ordered by time, so the last live entry is the newest
  seq = max(seq, tonumber(s))
end

local reset = 0
if newest >= 0 then reset = newest + period - now end
if used + cost > limit then
  -- Wait until enough of the oldest entries have left the window.
  local excess = used + cost - limit
  local retry = 0
  for i = 1, n do
    excess = excess - costs[i]
    if excess <= 0 then
      retry = ats[i] + period - now
      break
    end
  end
  return {0, limit, max(limit - used, 0), retry, reset, 0}
end
if peek then
  return {1, limit, max(limit - used, 0), 0, reset, 0}
end
newest = max(newest, now)
reset = newest + period - now
if stale then
  redis.call('DEL', KEYS[1])
else
  -- Drop the expired entries, and the expiry member with them.
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', format('%.0f', cutoff))
end
redis.call('ZADD', KEYS[1], format('%.0f', now), format('%.0f', seq + 1) .. ':' .. format('%.0f', cost), '-inf', 'x:' .. format('%.0f', now + reset))
redis.call('PEXPIRE', KEYS[1], max(idiv(reset + 999, 1000), 1) + slack)
return {1, limit, max(limit - used - cost, 0), 0, reset, 0}

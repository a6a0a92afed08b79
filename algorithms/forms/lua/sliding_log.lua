-- sliding_log: the Lua form of algorithms.SlidingLog (slidinglog.go).
-- Calling convention: see algorithms/forms/lua.go.
--   KEYS[1]  state: a sorted set with one member per admitted request,
--            scored by its time in microseconds; the member is "seq:cost",
--            where seq is one more than the largest seq among the live
--            members, so two requests in the same microsecond (or at times
--            that go backwards) are always two members. Two more members,
--            both scored -inf so that they come first: "x:expires" says when
--            the log's TTL passes on the clock that wrote it, after which
--            the log counts as missing; "y:total:seq:newest" holds the total
--            cost of the entries, the largest seq given out and the newest
--            entry's time, so that a decision reads only the entries that
--            leave the window (and, for a denial, the oldest live ones until
--            its retry time is known), not the whole log. A log without "y:"
--            (written before it existed, or by such a version, which drops
--            it as it drops expired entries) is read in full once and
--            written with it.
--   ARGV     now, cost, peek, server_clock, slack, packed(limit, period),
--            max_delay, refund, act (the log serves only now and gives
--            nothing back: a refund is answered as a peek)
--   reply    allowed, limit, remaining, retry_after, reset_after, delay,
--            packed into one string of little-endian doubles ('<dddddd')

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
local peek = ARGV[3] == '1' or ARGV[8] == '1'
local slack = tonumber(ARGV[5])
local limit, period = struct.unpack('<dd', ARGV[6])

-- An entry counts while now < at + period, that is at > now - period.
local cutoff = now - period
local K = 4 -- entries read with the header: enough for most decisions
local head = redis.call('ZRANGE', KEYS[1], 0, K + 1, 'WITHSCORES')
local stale = false
local used, seq, newest = 0, 0, -1
-- The oldest live entry is list[i] (member) and list[i + 1] (score) when
-- i <= #list; more says whether live entries may follow those in list.
local list, i, more = {}, 1, false
local function entry(m, score)
  local s, c = match(m, '^(%d+):(%-?%d+)$')
  if not s then
    return redis.error_reply('CORRUPT sliding_log member ' .. m)
  end
  local at, ec = tonumber(score), tonumber(c)
  if ec <= 0 or ec > MAX or not at or at < 0 or at > MAX then
    return redis.error_reply('CORRUPT sliding_log entry ' .. m .. ' at ' .. score)
  end
  return at, ec, tonumber(s)
end
if #head > 0 then
  local x = match(head[1], '^x:(%d+)$')
  if not x or head[2] ~= '-inf' then
    return redis.error_reply('CORRUPT sliding_log without its expiry member')
  end
  if now >= tonumber(x) then
    stale = true
  elseif head[4] == '-inf' then
    local u, q, w = match(head[3], '^y:(%d+):(%d+):(%d+)$')
    if not u then
      return redis.error_reply('CORRUPT sliding_log member ' .. head[3])
    end
    used, seq, newest = tonumber(u), tonumber(q), tonumber(w)
    if used > MAX or newest > MAX then
      return redis.error_reply('CORRUPT sliding_log total ' .. u .. ' newest ' .. w)
    end
    if newest <= cutoff then
      -- Every entry has left the window.
      stale, used, newest = true, 0, -1
    else
      -- Drop the expired entries: they are the oldest, at the front.
      list, i, more = head, 5, #head == 2 * (K + 2)
      while true do
        if i > #list then
          if list ~= head or not more then break end
          -- Every entry read with the header has expired: read the
          -- other expired ones.
          list, i = redis.call('ZRANGEBYSCORE', KEYS[1], '(-inf', format('%.0f', cutoff), 'WITHSCORES', 'LIMIT', K, -1), 1
        else
          local at, ec = entry(list[i], list[i + 1])
          if not ec then return at end
          if at > cutoff then break end
          used = used - ec
          i = i + 2
        end
      end
      if used < 1 then
        return redis.error_reply('CORRUPT sliding_log total ' .. u .. ' below its entries\' costs')
      end
    end
  else
    -- A log without its total: read it in full once.
    list = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. format('%.0f', cutoff), '+inf', 'WITHSCORES')
    for j = 1, #list, 2 do
      local at, ec, s = entry(list[j], list[j + 1])
      if not ec then return at end
      used = used + ec
      if used > MAX then
        return redis.error_reply('CORRUPT sliding_log total above ' .. MAX)
      end
      newest = at -- the set is ordered by time, so the last live entry is the newest
      seq = max(seq, s)
    end
  end
end

local reset = 0
if newest >= 0 then reset = newest + period - now end
if used + cost > limit then
  -- Wait until enough of the oldest entries have left the window.
  local excess = used + cost - limit
  local walked = 0
  while true do
    if i > #list then
      if not more then break end
      -- Live entries not read yet: each costs at least 1, so the next
      -- excess of them are enough.
      more = false
      list, i = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. format('%.0f', cutoff), '+inf', 'WITHSCORES', 'LIMIT', walked, excess), 1
    else
      local at, ec = entry(list[i], list[i + 1])
      if not ec then return at end
      excess = excess - ec
      if excess <= 0 then
        return struct.pack('<dddddd', 0, limit, max(limit - used, 0), at + period - now, reset, 0)
      end
      walked, i = walked + 1, i + 2
    end
  end
  if cost <= limit then
    return redis.error_reply('CORRUPT sliding_log total ' .. format('%.0f', used) .. ' above its entries\' costs')
  end
  return struct.pack('<dddddd', 0, limit, max(limit - used, 0), 0, reset, 0)
end
if peek then
  return struct.pack('<dddddd', 1, limit, max(limit - used, 0), 0, reset, 0)
end
newest = max(newest, now)
reset = newest + period - now
if stale then
  redis.call('DEL', KEYS[1])
  seq = 0
else
  -- Drop the expired entries, and the header members with them.
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', format('%.0f', cutoff))
end
seq = seq + 1
-- A reading older than the newest entry is logged at the newest entry's
-- time (slidingLog.Decide).
redis.call('ZADD', KEYS[1], format('%.0f', newest), format('%.0f', seq) .. ':' .. format('%.0f', cost),
  '-inf', 'x:' .. format('%.0f', now + reset),
  '-inf', 'y:' .. format('%.0f', used + cost) .. ':' .. format('%.0f', seq) .. ':' .. format('%.0f', newest))
redis.call('PEXPIRE', KEYS[1], max(idiv(reset + 999, 1000), 1) + slack)
return struct.pack('<dddddd', 1, limit, max(limit - used - cost, 0), 0, reset, 0)

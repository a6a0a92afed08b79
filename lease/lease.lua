-- The lease's transition (lease.Step) as a Redis/Valkey script: one round
-- trip, atomic on the server. It reads and writes the value format of the
-- stores' Update (an 8-byte little-endian expiry in microseconds, then the
-- record), so both paths see one record. lease's differential test
-- (conformance group LeaseDifferential) holds it equal to the Go form.
--
-- It is kept cheap for the server: one argument, unpacked by one
-- struct.unpack; no closures; a short reply when it writes.
--
-- KEYS[1]  the record's key (the key Update writes)
-- ARGV[1]  the request, packed '<i8BBi8i8i8c16' (50 bytes):
--          now (µs), use the server's TIME (1/0), op, expiry slack (ms),
--          fence, ttl (µs), owner (16 bytes)
-- reply    when it wrote the record: {now, fence, found}; otherwise
--          {code, now, fence, expires, owner ('' for the caller's), released, found}
local MAX = 9007199254740992 -- algorithms.MaxExact: a fence stays below it, exact in a double
local key = KEYS[1]
local now, clk, op, slack, reqFence, ttl, owner = struct.unpack('<i8BBi8i8i8c16', ARGV[1])
if clk == 1 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

local found, released, fence, expires, holder = false, false, 0, 0, ''
local raw = redis.call('GET', key)
if raw then
  local n = #raw
  if n < 8 then
    return redis.error_reply('CORRUPT stored value of ' .. n .. ' bytes')
  end
  local keptUntil, version, flags, f, e, h
  if n == 42 then
    keptUntil, version, flags, f, e, h = struct.unpack('<i8BB>i8>i8c16', raw)
  else
    keptUntil = struct.unpack('<i8', raw)
  end
  if now < keptUntil then
    if n ~= 42 or version ~= 1 or (flags ~= 0 and flags ~= 1) then
      return redis.error_reply('CORRUPT lease record of ' .. (n - 8) .. ' bytes')
    end
    if f < 1 or f >= MAX or e < 0 then
      return redis.error_reply('CORRUPT lease record with fence ' .. f)
    end
    found, released, fence, expires, holder = true, flags == 1, f, e, h
  end
end

-- The transition: code for a reply without a write, or the record to
-- write (wf: its fence, we: its expiry, wflags: 1 when released).
local live = found and not released and expires > now
local mine = found and holder == owner
local code, wf, we, wflags = 1
if op == 1 then
  if live and not mine then
    code = 2 -- held
  else
    wf, we, wflags = now, now + ttl, 0
    if live then
      wf = fence -- the same owner again: the same lease
    elseif found and fence >= now then
      if fence + 1 >= MAX then
        return redis.error_reply('CORRUPT lease fence ' .. fence .. ' would reach 2^53')
      end
      wf = fence + 1
    end
    if wf < 1 then wf = 1 end
  end
elseif op == 2 then
  if live and mine and fence == reqFence then
    wf, we, wflags = fence, now + ttl, 0
  else
    code = 3 -- lost
  end
elseif op == 3 then
  if not mine or fence ~= reqFence then
    code = 3
  elseif not released then -- released already: a retried release, OK
    if live then
      wf, we, wflags = fence, 0, 1
    else
      code = 3 -- it ran out before the release
    end
  end
elseif op ~= 4 then
  return redis.error_reply('unknown lease op ' .. op)
end

if wf then
  -- Kept max(ttl, fence - now + 1) µs, in whole ms rounded up, plus slack.
  local keep = wf - now + 1
  if keep < ttl then keep = ttl end
  local ms = 1
  if keep > 1000 then
    ms = keep + 999
    ms = (ms - ms % 1000) / 1000
  end
  redis.call('SET', key, struct.pack('<i8BB>i8>i8c16', now + keep, 1, wflags, wf, we, owner), 'PX', ms + slack)
  return {now, wf, found and 1 or 0}
end
if released then expires = 0 end
if holder == owner then holder = '' end
return {code, now, fence, expires, holder, released and 1 or 0, found and 1 or 0}

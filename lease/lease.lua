-- The lease's transition (lease.Step) as a Redis/Valkey script: one round
-- trip, atomic on the server. It reads and writes the value format of the
-- stores' Update (an 8-byte little-endian expiry in microseconds, then the
-- record), so both paths see one record. lease's differential test
-- (conformance group LeaseDifferential) holds it equal to the Go form.
--
-- KEYS[1]  the record's key (the key Update writes)
-- ARGV     now (µs), use the server's TIME ('1'/'0'), expiry slack (ms),
--          op, owner (16 bytes), fence, ttl (µs)
-- reply    {code, now, fence, expires, owner ('' for the caller's), released, found}
local key = KEYS[1]
local now = tonumber(ARGV[1])
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local slack = tonumber(ARGV[3])
local op = tonumber(ARGV[4])
local owner = ARGV[5]
local reqFence = tonumber(ARGV[6])
local ttl = tonumber(ARGV[7])
local OK, HELD, LOST = 1, 2, 3

local found, released, fence, expires, holder = false, false, 0, 0, ''
local raw = redis.call('GET', key)
if raw then
  if #raw < 8 then
    return redis.error_reply('CORRUPT stored value of ' .. #raw .. ' bytes')
  end
  local keptUntil, version, flags, f, e
  if #raw == 42 then
    keptUntil, version, flags, f, e = struct.unpack('<i8BB>i8>i8', raw)
  else
    keptUntil = struct.unpack('<i8', raw)
  end
  if now < keptUntil then
    if #raw ~= 42 or version ~= 1 or (flags ~= 0 and flags ~= 1) then
      return redis.error_reply('CORRUPT lease record of ' .. (#raw - 8) .. ' bytes')
    end
    found, released, fence, expires = true, flags == 1, f, e
    holder = string.sub(raw, 27, 42)
    if fence < 1 or expires < 0 then
      return redis.error_reply('CORRUPT lease record with fence ' .. fence)
    end
  end
end

-- The reply's owner is '' when it is the caller's, which the caller knows.
local function reply(code)
  local e = expires
  if released then e = 0 end
  local h = holder
  if h == owner then h = '' end
  return {code, now, fence, e, h, released and 1 or 0, found and 1 or 0}
end

-- write stores the record, kept max(ttl, fence - now + 1) µs.
local function write(flags, f, e)
  local keep = math.max(ttl, f - now + 1, 1)
  local ms = 1
  if keep > 1000 then ms = math.floor((keep + 999) / 1000) end
  redis.call('SET', key, struct.pack('<i8BB>i8>i8', now + keep, 1, flags, f, e) .. owner, 'PX', ms + slack)
  return {OK, now, f, e, '', flags, found and 1 or 0}
end

local live = found and not released and expires > now
local mine = found and holder == owner
if op == 4 then
  return reply(OK)
elseif op == 1 then
  if live and not mine then return reply(HELD) end
  local f = now
  if live then
    f = fence
  elseif found and fence >= f then
    f = fence + 1
  end
  if f < 1 then f = 1 end
  return write(0, f, now + ttl)
elseif op == 2 then
  if not live or not mine or fence ~= reqFence then return reply(LOST) end
  return write(0, fence, now + ttl)
elseif op == 3 then
  if not mine or fence ~= reqFence then return reply(LOST) end
  if released then return reply(OK) end
  if not live then return reply(LOST) end
  local r = write(1, fence, 0)
  r[4] = 0
  return r
end
return redis.error_reply('unknown lease op ' .. op)

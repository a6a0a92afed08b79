-- The sliding log as a part of the composite Lua form (lua/all.lua), written
-- by hand beside its Go form (slidinglog.go), which formgen copies into
-- lua/all.lua as it writes the generated forms' functions there. Its state
-- is the Go form's own, as the composite keeps every part's (as doubles):
-- the header (-1, total cost), then the entries (time µs, cost), sorted by
-- time; a log without the header (written before it existed) is summed
-- once and written with it. The composite reads and writes the whole log,
-- so a decision costs time in the number of entries (at most the limit),
-- where the single form's sorted set reads only the entries that leave
-- the window.
--
-- decide_sliding_log(now, cost, peek, live, sv_, av_, max_delay, refund, act)
-- follows slidingLog.Decide
-- line by line; valid_sliding_log(sv_) refuses a state Decide could
-- misread, so that decide meets none of Decide's corrupt-state errors.

-- slidingLog.Decide (slidinglog.go), by hand
local function decide_sliding_log(now, cost, peek, live, sv_, av_, max_delay, refund, act)
  -- The log gives nothing back: a refund is answered as a peek.
  if refund then peek = true end
  local limit, period = av_[1], av_[2]
  local nf = 0
  if live then nf = #sv_ end
  -- Entry i, counting from 0, is sv_[b + 2i + 1] (time), sv_[b + 2i + 2] (cost).
  local b, used = 0, 0
  if nf > 0 and sv_[1] == -1 then
    b, used = 2, sv_[2]
  else
    -- A log without its header: sum it once.
    for j = 2, nf, 2 do used = used + sv_[j] end
  end
  local n = (nf - b) / 2
  -- Drop the expired entries: they are the oldest, at the front.
  local first = 0
  while first < n do
    if now < sv_[b + 2 * first + 1] + period then break end
    used = used - sv_[b + 2 * first + 2]
    first = first + 1
  end
  local newest = -1
  if first < n then newest = sv_[b + 2 * n - 1] end
  local reset = 0
  if newest >= 0 then reset = newest + period - now end
  if used + cost > limit then
    -- Wait until enough of the oldest entries have left the window.
    local excess, retry, i = used + cost - limit, 0, first
    while i < n and excess > 0 do
      excess = excess - sv_[b + 2 * i + 2]
      if excess <= 0 then retry = sv_[b + 2 * i + 1] + period - now end
      i = i + 1
    end
    return false, limit, max(limit - used, 0), retry, reset, 0, 0, nil
  end
  if peek then
    return true, limit, max(limit - used, 0), 0, reset, 0, 0, nil
  end
  local remaining = max(limit - used - cost, 0)
  used = used + cost
  -- The request's time: now, or the newest entry's time when now lies
  -- behind it. Its place: behind every entry timed at or before that.
  newest = max(newest, now)
  local pos = n
  while pos > first and sv_[b + 2 * pos - 1] > newest do pos = pos - 1 end
  local nxt, k = {-1, used}, 2
  for j = b + 2 * first + 1, b + 2 * pos do k = k + 1; nxt[k] = sv_[j] end
  nxt[k + 1], nxt[k + 2], k = newest, cost, k + 2
  for j = b + 2 * pos + 1, nf do k = k + 1; nxt[k] = sv_[j] end
  reset = newest + period - now
  return true, limit, remaining, 0, reset, 0, reset, nxt
end

-- valid_sliding_log reports whether sv_ is a log slidingLog.Decide reads
-- without a corrupt-state error: pairs, every entry's time in 0..MAX and
-- cost in 1..MAX, and the header's total the sum of the costs (at most
-- MAX).
local function valid_sliding_log(sv_)
  local nf, b, sum = #sv_, 0, 0
  if nf % 2 ~= 0 then return false end
  if nf > 0 and sv_[1] == -1 then b = 2 end
  for j = b + 1, nf, 2 do
    local at, c = sv_[j], sv_[j + 1]
    if not (at >= 0 and at <= MAX and c >= 1 and c <= MAX and at == floor(at) and c == floor(c)) then
      return false
    end
    sum = sum + c
  end
  return sum <= MAX and (b == 0 or sv_[2] == sum)
end


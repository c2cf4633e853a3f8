-- Settling a reservation (sluice.Reserver.Settle), after prelude.lua: one
-- key and its reservation's record, in one call.
-- KEYS[1]: the key; KEYS[2]: the record's key (written by reserve.lua);
-- the override key follows when the decision reads one.
-- ARGV[1]: a decision's record as batch.lua reads it, with cost the actual
-- amount; ARGV[2]: '<i8B', the largest debt in units beyond the limit, and
-- the algorithm (1 fixed window, 2 token bucket, 3 GCRA).
-- Reply: '<Bi8i8i8i8i8i8': status (0 no record, 1 settled now, 2 settled
-- before, 3 calendar clock skew), remaining, retry_after_us (for one unit),
-- reset_after_us, debt (units beyond the limit, rounded up), the excess
-- charged, the estimate.
-- The difference is given back exactly when the actual is less (a bucket
-- never above full; a window's count only while its window lasts), and
-- the excess charged when more, the state going at most maxDebt units
-- beyond the limit. Mirrors settle in memstore/settle.go.

-- icdiv is ceil(a / b) for integers a >= 0 and b > 0, exact.
local function icdiv(a, b) return idiv(a + b - 1, b) end

local function settleBucket(key, now, cap, iv, diff, maxDebt, apply)
  local st = readPacked(key, '<i8i8')
  local full = cap * iv
  local base, from = full, now
  if st then base, from = st[1], st[2] end
  local credit = math.min(full, base + math.max(0, now - from))
  local charged = 0
  if apply then
    if diff > 0 then
      credit = math.min(full, credit + diff * iv)
    elseif diff < 0 then
      local room = credit + maxDebt * iv
      if room > 0 then charged = math.min(-diff, idiv(room, iv)) end
      credit = credit - charged * iv
    end
    if diff ~= 0 then
      if credit >= full then
        redis.call('DEL', key)
      else
        redis.call('SET', key, struct.pack('<i8i8', credit, now), 'PX', math.ceil((full - credit) / 1000) + TTL_MARGIN_MS)
      end
    end
  end
  local retry, debt = 0, 0
  if credit < iv then retry = iv - credit end
  if credit < 0 then debt = icdiv(-credit, iv) end
  return idiv(math.max(0, credit), iv), retry, full - credit, debt, charged
end

local function settleGCRA(key, now, burst, iv, diff, maxDebt, apply)
  local v = redis.call('GET', key)
  v = v and tonumber(v) or false
  local tat = now
  if v and v > now then tat = v end
  local tau = burst * iv
  local charged = 0
  if apply then
    if diff > 0 then
      tat = math.max(now, tat - diff * iv)
    elseif diff < 0 then
      local room = now + tau + maxDebt * iv - tat
      if room > 0 then charged = math.min(-diff, idiv(room, iv)) end
      tat = tat + charged * iv
    end
    if diff ~= 0 then
      if tat <= now then
        redis.call('DEL', key)
      else
        redis.call('SET', key, tat, 'PX', math.ceil((tat - now) / 1000) + TTL_MARGIN_MS)
      end
    end
  end
  local debt = 0
  if tat - now > tau then debt = icdiv(tat - now - tau, iv) end
  return idiv(math.max(0, now - tat + tau), iv), math.max(0, tat + iv - tau - now), tat - now, debt, charged
end

-- settleWindow settles in the current window [start, stop) named idx, of a
-- reservation taken at receipt.
local function settleWindow(key, now, idx, start, stop, limit, diff, maxDebt, receipt, apply)
  local st = readPacked(key, '<i8i8')
  local c = 0
  if st and st[1] == idx then c = st[2] end
  local charged, write = 0, false
  if apply then
    if diff > 0 then
      if c > 0 and start <= receipt and receipt < stop then
        c = math.max(0, c - diff)
        write = true
      end
    elseif diff < 0 then
      charged = math.max(0, math.min(-diff, limit + maxDebt - c))
      c = c + charged
      write = charged > 0
    end
    if write then
      if c == 0 then
        redis.call('DEL', key)
      else
        redis.call('SET', key, struct.pack('<i8i8', idx, c), 'PX', math.ceil((stop - now) / 1000) + TTL_MARGIN_MS)
      end
    end
  end
  local retry, reset = 0, 0
  if c + 1 > limit then retry = stop - now end
  if c > 0 then reset = stop - now end
  return math.max(0, limit - c), retry, reset, math.max(0, c - limit), charged
end

local now, limit, param, actual, _, _, cal, ovr, _, pos = struct.unpack('<i8i8i8i8i8BBBB', ARGV[1])
local maxDebt, alg = struct.unpack('<i8B', ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local bounds
if cal == 1 then
  local b1, b2, b3, b4
  b1, b2, b3, b4, pos = struct.unpack('<i8i8i8i8', ARGV[1], pos)
  bounds = { b1, b2, b3, b4 }
end
if ovr == 1 then
  local oi, m1, m2, m3, m4
  oi, m1, m2, m3, m4, pos = struct.unpack('<i8i8i8i8i8', ARGV[1], pos)
  limit, param = override(KEYS[oi], now, limit, param, m1, m2, m3, m4)
end

local status, estimate, receipt = 0, 0, 0
local r = redis.call('GET', KEYS[2])
if r then
  local settled
  estimate, receipt, settled = struct.unpack('<i8i8B', r)
  if settled == 0 then status = 1 else status = 2 end
end
local apply = status == 1
local diff = estimate - actual
local remaining, retry, reset, debt, charged
if alg == 2 then
  remaining, retry, reset, debt, charged = settleBucket(KEYS[1], now, limit, param, diff, maxDebt, apply)
elseif alg == 3 then
  remaining, retry, reset, debt, charged = settleGCRA(KEYS[1], now, limit, param, diff, maxDebt, apply)
elseif cal == 1 then
  local found = false
  for i = 1, 3 do
    if bounds[i] <= now and now < bounds[i + 1] then
      remaining, retry, reset, debt, charged = settleWindow(KEYS[1], now, bounds[i], bounds[i], bounds[i + 1], limit, diff, maxDebt, receipt, apply)
      found = true
      break
    end
  end
  if not found then return struct.pack('<Bi8i8i8i8i8i8', 3, 0, 0, 0, 0, 0, 0) end
else
  local idx = math.floor(now / param)
  remaining, retry, reset, debt, charged = settleWindow(KEYS[1], now, idx, idx * param, (idx + 1) * param, limit, diff, maxDebt, receipt, apply)
end
if apply then
  redis.call('SET', KEYS[2], struct.pack('<i8i8B', estimate, receipt, 1), 'KEEPTTL')
end
return struct.pack('<Bi8i8i8i8i8i8', status, remaining, retry, reset, debt, charged, estimate)

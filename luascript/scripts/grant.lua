-- Grants (driver.Granter), after prelude.lua: one call of one holder to a
-- key's central grant state. Mirrors memstore/grant.go step for step.
-- KEYS[1]: the grant state, a hash (driver.GrantKey): "v" the format
--   version (1), "l" the level (a bucket's credit in microseconds, a
--   window's count in units), "t" its time (a window's first instant), and
--   "h:<holder>" per holder: "<units> <end> <seen>" (microseconds).
-- KEYS[2], when given: the plain key of the same identity, only looked for.
-- ARGV: now (microseconds; 0 = the server's TIME), kind (1 bucket, 2
--   window, 3 calendar window), limit, param (the bucket's interval or the
--   window, in microseconds), holder (16 hex digits), unspent, want, need,
--   flags (1 give back, 2 reset), life (microseconds), then for a calendar
--   window the first instants of four periods around now.
-- Reply: granted, held, left (microseconds), holders, more (microseconds),
--   level (units available), mixed (1 when KEYS[2] exists).
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local kind, limit, param = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local me = 'h:' .. ARGV[5]
local unspent, want, need = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local flags, life = tonumber(ARGV[9]), tonumber(ARGV[10])
local giveBack, reset = flags % 2 == 1, math.floor(flags / 2) % 2 == 1

local start, stop
if kind == 2 then
  start = math.floor(now / param) * param
  stop = start + param
elseif kind == 3 then
  for i = 11, 13 do
    local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if a <= now and now < b then start, stop = a, b end
  end
  if not start then return redis.error_reply('ERR grant: calendar clock skew') end
end

-- Read the state: level, its time, the holders.
local raw = redis.call('HGETALL', KEYS[1])
local level, at, fresh = nil, nil, #raw == 0
local holders = {}
for i = 1, #raw, 2 do
  local f, v = raw[i], raw[i + 1]
  if f == 'l' then level = tonumber(v)
  elseif f == 't' then at = tonumber(v)
  elseif string.sub(f, 1, 2) == 'h:' then
    local g, e, s = string.match(v, '^(%d+) (%-?%d+) (%-?%d+)$')
    holders[f] = { tonumber(g), tonumber(e), tonumber(s) }
  end
end
if fresh or not level or not at then
  fresh = true
  holders = {}
  if kind == 1 then level, at = limit * param, now else level, at = 0, start end
end
local gone = {}
if kind ~= 1 and at ~= start then
  level, at = 0, start
  for _, h in pairs(holders) do h[1] = 0 end
end

-- Refill a bucket first, piecewise: up to each ended grant's end under
-- the cap of every G_h counted until then, so that a report or a reap
-- raises the cap from its own time on, never for the time before (the
-- level would jump by time it never earned).
if kind == 1 and now > at then
  local tau, held, ends = limit * param, 0, {}
  for _, h in pairs(holders) do
    held = held + h[1]
    if h[1] > 0 and h[2] < now then ends[#ends + 1] = h end
  end
  table.sort(ends, function(a, b) return a[2] < b[2] end)
  for _, h in ipairs(ends) do
    if h[2] > at then
      level = math.min(tau - held * param, level + (h[2] - at))
      at = h[2]
    end
    held = held - h[1]
  end
  level = math.min(tau - held * param, level + (now - at))
  at = now
end

-- Reap: drop the units of ended grants, the records unseen and empty; take
-- the caller's report.
local sum, n, g = 0, 1, 0
for f, h in pairs(holders) do
  if h[2] <= now then h[1] = 0 end
  if h[3] <= now and h[1] == 0 then
    holders[f] = nil
    gone[#gone + 1] = f
  else
    if f == me then
      h[1] = math.min(unspent, h[1])
      g = h[1]
    else
      n = n + 1
    end
    sum = sum + h[1]
  end
end

local x, more, stopAt
local fair = math.max(1, math.floor(limit / (2 * n)))
if kind == 1 then
  local tau = limit * param
  if giveBack then
    local back = math.min(unspent, g)
    g, sum, level = g - back, sum - back, level + back * param
  end
  if reset then level = tau - sum * param end
  local lim = math.max(0, math.min(want, math.max(fair - g, need)))
  x = math.min(lim, idiv(level, param))
  level = level - x * param
  g = g + x
  more = 0
  if x < lim then
    -- Until the level holds the rest of what it would have granted (the
    -- holder waits for its share, not for a unit), or half its room below
    -- the cap, whichever comes first: the level must not sit at the cap
    -- while holders wait, or its refill is lost.
    local room = tau - (sum + x) * param - level
    more = math.max(1, math.min((lim - x) * param - level, math.floor(room / 2)))
  end
  stopAt = now + life
else
  if giveBack then
    local back = math.min(unspent, g)
    g, level = g - back, math.max(0, level - back)
  end
  if reset then level = sum end
  local lim = math.max(0, math.min(want, math.max(fair - g, need)))
  x = math.min(lim, limit - level)
  level = level + x
  g = g + x
  if x < lim then more = stop - now else more = 0 end
  stopAt = math.min(stop, now + life)
end

-- Write the caller's record.
if giveBack and g == 0 then
  if holders[me] then gone[#gone + 1] = me end
  holders[me] = nil
  stopAt = now
else
  holders[me] = { g, stopAt, now + life }
end
local left = 0
if g > 0 then left = stopAt - now end

local last, any = 0, false
for _, h in pairs(holders) do
  any = true
  last = math.max(last, h[2], h[3])
end
local ttl
if kind == 1 then
  local tau = limit * param
  if not any and level >= tau then ttl = 0 else ttl = math.max(0, last - now) + (tau - level) end
else
  if not any and level == 0 then ttl = 0 else ttl = math.max(stop, last) - now end
end
if ttl <= 0 then
  redis.call('DEL', KEYS[1])
else
  if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
  local args = { 'v', 1, 'l', level, 't', at }
  for f, h in pairs(holders) do
    args[#args + 1] = f
    args[#args + 1] = string.format('%d %d %d', h[1], h[2], h[3])
  end
  redis.call('HSET', KEYS[1], unpack(args))
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + TTL_MARGIN_MS)
end

local mixed = 0
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then mixed = 1 end
local avail = limit - level
if kind == 1 then avail = idiv(level, param) end
return { x, g, left, n, more, avail, mixed }

-- Shared by every script: keys live until their state is no longer needed,
-- plus this margin (sluice.KeyTTLMargin), which keeps state across small
-- differences between the deciding clock and the expiring one.
local TTL_MARGIN_MS = 1000

-- The fixed window, sliding window and token bucket keep their integers
-- in one string per key, packed little-endian with struct (fmt '<i8i8' or
-- '<i8i8i8', named in luascript.StateFields): one GET to read them, one
-- SET with its PX to write them, where a hash took HMGET, HSET and PEXPIRE.

-- readPacked returns the integers packed (fmt) in the string at key, in a
-- table (whose last entry is struct.unpack's next position, which nothing
-- reads), or false when the key does not exist.
local function readPacked(key, fmt)
  local v = redis.call('GET', key)
  if not v then return false end
  return { struct.unpack(fmt, v) }
end

-- flushPacked writes what an algorithm kept per key during the call:
-- states[key] holds the integers, written packed with fmt, pending[key] the
-- PX to set, or 0 to delete the key.
local function flushPacked(fmt, states, pending)
  for key, px in pairs(pending) do
    if px == 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, struct.pack(fmt, unpack(states[key])), 'PX', px)
    end
  end
end

-- idiv is floor(a / b) for integers a >= 0 and b > 0, exact where a / b in
-- doubles would round up to the next integer.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- isint reports whether v is a whole number.
local function isint(v) return v ~= nil and v == math.floor(v) end

-- override returns the limit and parameter a decision takes under the
-- override stored in the hash at key (fields limit, param in microseconds
-- with 0 keeping the rule's, and until in microseconds), and its status:
-- 0 when there is none or it lapsed (until <= now), 1 when it applies
-- (then until too), 2 when it is malformed (ignored: the decision takes limit and param). It
-- must keep bounds maxLimit, minParam, maxParam, maxProduct
-- (sluice.Rule.OverrideBounds): 1 <= limit <= maxLimit, param 0 or within
-- [minParam, maxParam], limit * param <= maxProduct unless that is 0.
-- Mirrors sluice.Rule.Overridden, which memstore uses.
local function override(key, now, limit, param, maxLimit, minParam, maxParam, maxProduct)
  local ok, h = pcall(redis.call, 'HMGET', key, 'limit', 'param', 'until')
  if not ok then return limit, param, 2 end -- not a hash
  if not h[1] and not h[2] and not h[3] then return limit, param, 0 end
  local l, p, u = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
  if not isint(u) then return limit, param, 2 end
  if u <= now then return limit, param, 0 end
  if not isint(l) or l < 1 or l > maxLimit or not isint(p) or p < 0 then
    return limit, param, 2
  end
  if p == 0 then
    p = param
  elseif p < minParam or p > maxParam then
    return limit, param, 2
  end
  if maxProduct > 0 and l * p > maxProduct then return limit, param, 2 end
  return l, p, 1, u
end

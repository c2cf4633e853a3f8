-- Shared by every script: keys live until their state is no longer needed,
-- plus this margin (sluice.KeyTTLMargin), which keeps state across small
-- differences between the deciding clock and the expiring one.
local TTL_MARGIN_MS = 1000

-- flushHashes writes what an algorithm kept in a hash per key during the
-- call: states[key] holds the values of fields, pending[key] the PEXPIRE to
-- set, or 0 to delete the key.
local function flushHashes(fields, states, pending)
  for key, px in pairs(pending) do
    if px == 0 then
      redis.call('DEL', key)
    else
      local args, st = {}, states[key]
      for i, f in ipairs(fields) do
        args[2 * i - 1], args[2 * i] = f, st[i]
      end
      redis.call('HSET', key, unpack(args))
      redis.call('PEXPIRE', key, px)
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

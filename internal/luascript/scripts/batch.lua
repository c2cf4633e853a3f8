-- The driver of every script: one call decides any number of keys.
-- KEYS[i]: the key of decision i, for i up to the number of decisions
--   (#ARGV / 8); the override keys of the decisions that read one follow.
-- ARGV, 8 per key: now (microseconds; 0 = the server's TIME, read once per
--   call), limit, the algorithm's parameter (a number, or for calendar
--   periods a string of bounds, see calendar.lua), cost, flag, receipt (for a
--   negative cost, the receipt of the take it refunds; else 0), the index
--   in KEYS of the decision's override key (0: none), and the bounds an
--   override must keep (see override in prelude.lua; "0" for none).
-- Reply: one string, a record of 42 bytes per key, in the keys' order
--   (struct.pack '<BBi8i8i8i8i8', integers little-endian): allowed (1/0;
--   2 for a calendar decision whose clock is outside its periods), the
--   override's status (0 none, 1 applied, 2 malformed and ignored),
--   remaining, retry_after_us, reset_after_us, receipt (what a refund of
--   this decision passes back) and the override's limit (0 when none
--   applied). One string, not seven integers per key, is what the client
--   reads fastest (luascript.DecodeCall reads it).
-- Each algorithm defines decide(key, now, limit, parameter, cost, flag,
-- receipt) and flush(), which writes what decide kept to write once at the
-- end. decideAll(keys, argv, base) decides the keys of a call from argv
-- after its first base values; one.lua passes KEYS and ARGV, cross.lua the
-- keys it read from ARGV.
local function decideAll(KEYS, ARGV, base)
local out, snow = {}, nil
for i = 1, (#ARGV - base) / 8 do
  local b = base + (i - 1) * 8
  local now = tonumber(ARGV[b + 1])
  if now == 0 then
    if not snow then
      local t = redis.call('TIME')
      snow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = snow
  end
  local limit, param = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]) or ARGV[b + 3]
  local ov, ovLimit, untl = 0, 0, 0
  local oi = tonumber(ARGV[b + 7])
  if oi > 0 then
    limit, param, ov, untl = override(KEYS[oi], now, limit, param, ARGV[b + 8])
    if ov == 1 then ovLimit = limit end
  end
  local cost = tonumber(ARGV[b + 4])
  local allowed, remaining, retry, reset, receipt
  if ov == 1 and cost > limit then
    -- More than the override allows: refused, taking nothing, until the
    -- override lapses (the plan's limit admits the cost).
    allowed, remaining, retry, reset, receipt = decide(KEYS[i], now, limit, param, 0, ARGV[b + 5], 0)
    allowed, retry = 0, untl - now
  else
    allowed, remaining, retry, reset, receipt = decide(KEYS[i], now,
      limit, param, cost, ARGV[b + 5], tonumber(ARGV[b + 6]))
  end
  out[i] = struct.pack('<BBi8i8i8i8i8', allowed, ov, remaining, retry, reset, receipt or now, ovLimit)
end
flush() -- the state the algorithm kept for the end of the call
return table.concat(out)
end

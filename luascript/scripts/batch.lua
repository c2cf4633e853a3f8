-- The driver of every script: one call decides any number of keys.
-- KEYS[i]: the key of decision i; the override keys of the decisions that
--   read one follow the decisions' keys.
-- ARGV[1]: the decisions' arguments, one record each, in order, packed
--   (struct, integers little-endian: luascript.AppendArgs writes them).
--   Numbers are read from binary, not parsed from text, which is where a
--   script spent most of its time per key.
--   '<i8i8i8i8i8BBB': now (microseconds; 0 = the server's TIME, read once
--   per call), limit, the algorithm's parameter (0 for calendar periods),
--   cost, receipt (for a negative cost, the receipt of the take it
--   refunds; else 0), flag (1: CountRejected; for in-flight, 1: renew),
--   part (1: four calendar bounds follow, see calendar.lua; 2: a lease id
--   follows, see inflight.lua), override (1: its key and bounds follow),
--   penalty (1: its key and numbers follow);
--   then for calendar periods '<i8i8i8i8', the first instants of four
--   periods, or for in-flight 'c16', the lease id (passed to decide as
--   its receipt); then for an override '<i8i8i8i8i8', the index in KEYS of the
--   override key and the bounds it must keep (see override in
--   prelude.lua); then for a penalty '<i8i8i8i8i8i8', the index in KEYS of
--   the penalty key, after, within, block, the longest block and forgive
--   (microseconds; see penalty.lua).
-- Reply: one string, a record of 59 bytes per decision, in order
--   (struct.pack '<BBBi8i8i8i8i8i8i8'): allowed (1/0; 2 for a calendar decision
--   whose clock is outside its periods), the override's status (0 none,
--   1 applied, 2 malformed and ignored), the penalty's (0 none, 1 blocked,
--   2 blocked by this refusal), remaining, retry_after_us,
--   reset_after_us, receipt (what a refund of this decision passes back)
--   the override's limit and parameter (0 and 0 when none applied; the
--   parameter is the one the decision took, 0 for calendar periods), and
--   the leases the decision reaped as ended by expiry (in-flight; 0 for
--   the others, whose decide returns no sixth value). One
--   string, not ten integers per key, is what the client reads fastest
--   (luascript.DecodeCall reads it).
-- The assembly (luascript.go) binds, before this file, the locals decide,
-- flush and readsFirst to the algorithm's: decide(key, now, limit,
-- parameter, cost, flag, receipt) decides one key, flush() writes what
-- decide kept to write once at the end. decideAll(keys, args) decides the
-- keys of a call from the records in args and returns their reply records,
-- in a table, without flushing: the ending (one.lua, cross.lua) calls
-- flush and concatenates the records. one.lua passes KEYS and ARGV[1],
-- cross.lua the keys it read from ARGV and the records that follow them.
local function decideAll(KEYS, args)
  local out, snow, pos, i = {}, nil, 1, 0
  while pos <= #args do
    i = i + 1
    local now, limit, param, cost, receipt, flag, cal, ovr, pen
    now, limit, param, cost, receipt, flag, cal, ovr, pen, pos = struct.unpack('<i8i8i8i8i8BBBB', args, pos)
    if now == 0 then
      if not snow then
        local t = redis.call('TIME')
        snow = tonumber(t[1]) * 1000000 + tonumber(t[2])
      end
      now = snow
    end
    if cal == 1 then
      local b1, b2, b3, b4
      b1, b2, b3, b4, pos = struct.unpack('<i8i8i8i8', args, pos)
      param = { b1, b2, b3, b4 }
    elseif cal == 2 then
      -- An in-flight decision: its lease id takes the receipt's place.
      receipt, pos = struct.unpack('c16', args, pos)
    end
    local ov, ovLimit, ovParam, untl = 0, 0, 0, 0
    if ovr == 1 then
      local oi, m1, m2, m3, m4
      oi, m1, m2, m3, m4, pos = struct.unpack('<i8i8i8i8i8', args, pos)
      limit, param, ov, untl = override(KEYS[oi], now, limit, param, m1, m2, m3, m4)
      if ov == 1 then
        ovLimit = limit
        if cal ~= 1 then ovParam = param end
      end
    end
    local pk, after, within, block, longest, forgive
    if pen == 1 then
      pk, after, within, block, longest, forgive, pos = struct.unpack('<i8i8i8i8i8i8', args, pos)
      pk = KEYS[pk]
    end
    local allowed, remaining, retry, reset, expired
    local blocked, bend = 0, 0
    if pen == 1 and cost >= 0 then bend = penaltyUntil(pk, now) end
    if bend > 0 then
      -- Blocked: refused, the algorithm neither read nor written.
      allowed, remaining, retry, reset, receipt, blocked = 0, 0, bend - now, bend - now, now, 1
    elseif ov == 1 and cost > limit then
      -- More than the override allows: refused, taking nothing, until the
      -- override lapses (the plan's limit admits the cost).
      allowed, remaining, retry, reset, receipt, expired = decide(KEYS[i], now, limit, param, 0, flag, 0)
      allowed, retry = 0, untl - now
    else
      allowed, remaining, retry, reset, receipt, expired = decide(KEYS[i], now, limit, param, cost, flag, receipt)
    end
    if pen == 1 and allowed == 0 and blocked == 0 and cost > 0 then
      local d = penaltyRefused(pk, now, after, within, block, longest, forgive)
      if d > 0 then remaining, retry, reset, blocked = 0, d, d, 2 end
    end
    out[i] = struct.pack('<BBBi8i8i8i8i8i8i8', allowed, ov, blocked, remaining, retry, reset, receipt or now, ovLimit, ovParam, expired or 0)
  end
  return out
end

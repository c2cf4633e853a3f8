-- The ending of a reservation's script (sluice.Reserver.Reserve): one key
-- decided as one.lua decides it (the take of the estimate), and when
-- allowed, in the same call, the reservation's record written.
-- KEYS: the key, its override key when the record reads one, the record's
-- key (in the key's slot). ARGV[1]: the decision's record (batch.lua).
-- ARGV[2]: '<i8i8i8', the index in KEYS of the record's key, the record's
-- life in milliseconds and the estimate.
-- The record: '<i8i8B', the estimate, the take's receipt (its time, or
-- GCRA's TAT) and settled (0; settle.lua sets 1), under PX life.
-- Reply: the decision's record, as one.lua's.
local out = decideAll(KEYS, ARGV[1])
flush()
local ri, life, estimate = struct.unpack('<i8i8i8', ARGV[2])
local rec = out[1]
if string.byte(rec, 1) == 1 then
  local receipt = struct.unpack('<i8', rec, 28)
  redis.call('SET', KEYS[ri], struct.pack('<i8i8B', estimate, receipt, 0), 'PX', life)
end
return rec

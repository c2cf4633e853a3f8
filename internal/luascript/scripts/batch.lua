-- The driver of every script: one call decides any number of keys.
-- KEYS[i]: the key of decision i.
-- ARGV, 6 per key: now (microseconds; 0 = the server's TIME, read once per
--   call), limit, the algorithm's parameter (a number, or for calendar
--   periods a string of bounds, see calendar.lua), cost, flag, receipt (for a
--   negative cost, the receipt of the take it refunds; else 0).
-- Reply, 5 integers per key: allowed (1/0), remaining, retry_after_us,
--   reset_after_us, receipt (what a refund of this decision passes back).
-- Each algorithm defines decide(key, now, limit, parameter, cost, flag,
-- receipt) and flush(), which writes what decide kept to write once at the
-- end.
local out, snow = {}, nil
for i = 1, #KEYS do
  local b = (i - 1) * 6
  local now = tonumber(ARGV[b + 1])
  if now == 0 then
    if not snow then
      local t = redis.call('TIME')
      snow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = snow
  end
  local allowed, remaining, retry, reset, receipt = decide(KEYS[i], now,
    tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]) or ARGV[b + 3], tonumber(ARGV[b + 4]), ARGV[b + 5],
    tonumber(ARGV[b + 6]))
  out[#out + 1] = allowed
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = reset
  out[#out + 1] = receipt or now
end
flush() -- the state the algorithm kept for the end of the call
return out

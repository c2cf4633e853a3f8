-- GCRA: the theoretical arrival time (TAT) of the next request.
-- KEYS[i]: the key of decision i (a string: TAT in microseconds).
-- ARGV, 5 per key: now (microseconds; 0 = server TIME), burst, interval
--   (microseconds between requests), cost (0 peeks, negative refunds), unused.
-- Reply, 4 per key: allowed (1/0), remaining, retry_after_us, reset_after_us.
-- Mirrors gcra in memstore/algo.go.
-- Keys live until their state is no longer needed, plus a margin (as in
-- memstore/algo.go) that keeps state across small clock differences.
local TTL_MARGIN_MS = 1000
local out, snow = {}, nil
for i = 1, #KEYS do
  local key, b = KEYS[i], (i - 1) * 5
  local now = tonumber(ARGV[b + 1])
  if now == 0 then
    if not snow then
      local t = redis.call('TIME')
      snow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = snow
  end
  local burst, interval, cost = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])

  local tat = now
  local v = redis.call('GET', key)
  if v then
    v = tonumber(v)
    if v > now then tat = v end
  end
  local tau = interval * burst
  local allowed, retry, write = 0, 0, false
  if cost < 0 then
    tat = math.max(now, tat + cost * interval)
    allowed = 1
    write = true
  else
    local newTat = tat + math.max(cost, 1) * interval
    local diff = now - (newTat - tau)
    if diff >= 0 then
      allowed = 1
      if cost > 0 then
        tat = newTat
        write = true
      end
    else
      retry = -diff
    end
  end
  local reset = tat - now
  if write then
    if reset <= 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, tat, 'PX', math.ceil(reset / 1000) + TTL_MARGIN_MS)
    end
  end
  out[#out + 1] = allowed
  out[#out + 1] = math.max(0, math.floor((now - tat + tau) / interval))
  out[#out + 1] = retry
  out[#out + 1] = reset
end
return out

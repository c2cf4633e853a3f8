-- Fixed window: a counter per aligned window.
-- KEYS[i]: the key of decision i (a hash {w = window number, c = count}).
-- ARGV, 5 per key: now (microseconds; 0 = server TIME), limit, window
--   (microseconds), cost (0 peeks, negative refunds), unused.
-- Reply, 4 per key: allowed (1/0), remaining, retry_after_us, reset_after_us.
-- Mirrors fixedWindow in memstore/algo.go.
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
  local limit, window, cost = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])

  local idx = math.floor(now / window)
  local st = redis.call('HMGET', key, 'w', 'c')
  local c = 0
  if st[1] and tonumber(st[1]) == idx then c = tonumber(st[2]) end
  local reset = (idx + 1) * window - now
  local allowed, retry, write = 0, 0, false
  if cost < 0 then
    c = math.max(0, c + cost)
    allowed = 1
    if c > 0 then write = true else redis.call('DEL', key) end
  elseif c + math.max(cost, 1) <= limit then
    allowed = 1
    if cost > 0 then
      c = c + cost
      write = true
    end
  else
    retry = reset
  end
  if write then
    redis.call('HSET', key, 'w', idx, 'c', c)
    redis.call('PEXPIRE', key, math.ceil(reset / 1000) + TTL_MARGIN_MS)
  end
  if c == 0 then reset = 0 end
  out[#out + 1] = allowed
  out[#out + 1] = limit - c
  out[#out + 1] = retry
  out[#out + 1] = reset
end
return out

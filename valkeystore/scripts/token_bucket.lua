-- Token bucket: up to capacity tokens, earned continuously at rate.
-- KEYS[i]: the key of decision i (a hash {t = tokens, ts = time of t}).
-- ARGV, 5 per key: now (microseconds; 0 = server TIME), capacity, rate
--   (tokens per microsecond, a float as "%.17g"), cost (0 peeks, negative
--   refunds), unused.
-- Reply, 4 per key: allowed (1/0), remaining, retry_after_us, reset_after_us.
-- Mirrors tokenBucket in memstore/algo.go, operation for operation.
local LOOPS = 64
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
  local cap, rate, cost = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])

  local st = redis.call('HMGET', key, 't', 'ts')
  local tokens, stored, from = cap, cap, now
  if st[1] then
    stored, from = tonumber(st[1]), tonumber(st[2])
    tokens = math.min(cap, stored + math.max(0, now - from) * rate)
  end
  local allowed, retry, write = 0, 0, false
  if cost < 0 then
    tokens = math.min(cap, tokens - cost)
    allowed = 1
    write = true
  else
    local need = math.max(cost, 1)
    if tokens >= need then
      allowed = 1
      if cost > 0 then
        tokens = tokens - cost
        write = true
      end
    else
      -- The next call recomputes from the stored state: check there.
      local t = math.ceil((need - tokens) / rate)
      local j = 0
      while j < LOOPS and math.min(cap, stored + math.max(0, now + t - from) * rate) < need do
        t = t + 1
        j = j + 1
      end
      retry = t
    end
  end
  local reset = math.ceil((cap - tokens) / rate)
  if write then
    if reset <= 0 then
      redis.call('DEL', key)
    else
      redis.call('HSET', key, 't', tokens, 'ts', now)
      redis.call('PEXPIRE', key, math.ceil(reset / 1000) + TTL_MARGIN_MS)
    end
  end
  out[#out + 1] = allowed
  out[#out + 1] = math.floor(tokens)
  out[#out + 1] = retry
  out[#out + 1] = reset
end
return out

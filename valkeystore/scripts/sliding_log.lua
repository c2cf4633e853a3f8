-- Sliding log: the time of every unit taken in the last window.
-- KEYS[i]: the key of decision i (a sorted set; score = time in
--   microseconds, member = "<time>-<seq>", unique).
-- ARGV, 5 per key: now (microseconds; 0 = server TIME), limit, window
--   (microseconds), cost (0 peeks, negative refunds), count_rejected (1/0).
-- Reply, 4 per key: allowed (1/0), remaining, retry_after_us, reset_after_us.
-- Mirrors slidingLog in memstore/algo.go.
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
  local countRejected = ARGV[b + 5] == '1'

  local write = redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window) > 0
  local count = redis.call('ZCARD', key)
  local allowed, retry = 0, 0
  if cost < 0 then
    allowed = 1
    local n = math.min(count, -cost)
    if n > 0 then
      redis.call('ZPOPMAX', key, n)
      count = count - n
      write = true
    end
  else
    local need = math.max(cost, 1)
    if count + need <= limit then allowed = 1 end
    if cost > 0 and (allowed == 1 or countRejected) then
      -- Members at one score are numbered from the highest one present.
      local seq = 0
      local top = redis.call('ZRANGE', key, now, now, 'BYSCORE', 'REV', 'LIMIT', 0, 1)
      if top[1] then seq = tonumber(string.match(top[1], '-(%d+)$')) end
      local args, n = {}, 0
      for j = 1, cost do
        args[n + 1] = now
        args[n + 2] = string.format('%d-%07d', now, seq + j)
        n = n + 2
        if n >= 1000 or j == cost then
          redis.call('ZADD', key, unpack(args, 1, n))
          n = 0
        end
      end
      count = count + cost
      if count > limit then
        redis.call('ZREMRANGEBYRANK', key, 0, count - limit - 1)
        count = limit
      end
      write = true
    end
    if allowed == 0 then
      local k = count + need - limit
      local e = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
      retry = tonumber(e[2]) + window - now
    end
  end
  local reset = 0
  if count > 0 then
    local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = tonumber(e[2]) + window - now
    if write then redis.call('PEXPIRE', key, math.ceil(reset / 1000) + TTL_MARGIN_MS) end
  end
  out[#out + 1] = allowed
  out[#out + 1] = math.max(0, limit - count)
  out[#out + 1] = retry
  out[#out + 1] = reset
end
return out

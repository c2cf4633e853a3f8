-- Sliding log: the time of every unit taken in the last window.
-- State under key: a sorted set; score = time in microseconds, member =
-- "<time>-<seq>", unique.
-- decide(key, now, limit, window, cost, flag): window in microseconds; flag
-- 1 logs refused requests too (count_rejected).
-- now is in microseconds; cost 0 peeks, a negative cost refunds: it removes
-- up to -cost entries of the take's time (receipt), still in the log. decide
-- returns allowed (1/0), remaining, retry_after_us and reset_after_us; the
-- driver (batch.lua) runs it for every key of a call, after prelude.lua.
-- Mirrors slidingLog in memstore/algo.go.
-- decide writes as it goes (not readsFirst), so cross.lua reads every key
-- before the first.
local function decide(key, now, limit, window, cost, flag, receipt)
  local countRejected = flag == 1

  local write = redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window) > 0
  local count = redis.call('ZCARD', key)
  local allowed, retry = 0, 0
  if cost < 0 then
    -- Remove entries of the take's time (its receipt), no others.
    allowed = 1
    local taken = redis.call('ZRANGE', key, receipt, receipt, 'BYSCORE', 'LIMIT', 0, -cost)
    if #taken > 0 then
      redis.call('ZREM', key, unpack(taken))
      count = count - #taken
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
      -- The entry whose leaving makes room. A cost over the limit in force
      -- (an override lowered it) waits for the whole log, or a window.
      local k = math.min(count + need - limit, count)
      if k > 0 then
        local e = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
        retry = tonumber(e[2]) + window - now
      else
        retry = window
      end
    end
  end
  local reset = 0
  if count > 0 then
    local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = tonumber(e[2]) + window - now
    if write then redis.call('PEXPIRE', key, math.ceil(reset / 1000) + TTL_MARGIN_MS) end
  end
  return allowed, math.max(0, limit - count), retry, reset
end

local function flush() end -- every decision wrote its own state

return { decide = decide, flush = flush, readsFirst = false }

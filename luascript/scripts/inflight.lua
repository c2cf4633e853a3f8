-- In-flight: at most limit leases of a key at once.
-- State under key: a sorted set; member = a lease id (16 bytes), score =
-- when the lease ends, in microseconds. It holds at most limit entries
-- (an acquire adds one only below limit), and expires with its latest
-- lease (plus the margin); a set emptied by releases or reaping is gone.
-- decide(key, now, limit, lease, cost, renew, id): lease in microseconds;
-- id the lease's 16 bytes (batch.lua reads them from the record's lease
-- part). Every decision first reaps the leases that ended (score <= now),
-- by the deciding clock. Then cost 1 acquires: allowed and the lease added
-- when fewer than limit remain; cost 0 peeks (renew 0) or renews (renew 1:
-- allowed and the lease ends lease after now when it had not ended); cost
-- -1 releases (allowed when it removed a lease that had not ended).
-- decide returns allowed (1/0), remaining (free slots), retry_after_us (a
-- refusal: until the lease whose end frees a slot ends), reset_after_us
-- (until the latest lease ends), the receipt, when the lease acquired or
-- renewed ends (else now), and how many leases it reaped: ended by expiry
-- (a released lease is removed by its release, a reset key is gone, so
-- neither is reaped; a reaped lease leaves the set, so it is counted
-- once). Mirrors inFlight in memstore/inflight.go.
-- decide writes as it goes (not readsFirst), so cross.lua reads every key
-- before the first.
local function decide(key, now, limit, lease, cost, renew, id)
  local expired = redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local count = redis.call('ZCARD', key)
  local allowed, retry, ends, write = 0, 0, now, false
  if renew == 1 then
    if redis.call('ZSCORE', key, id) then
      ends = now + lease
      redis.call('ZADD', key, 'XX', ends, id)
      allowed, write = 1, true
    end
  elseif cost < 0 then
    if redis.call('ZREM', key, id) == 1 then
      allowed, write, count = 1, true, count - 1
    end
  elseif count < limit then
    allowed = 1
    if cost > 0 then
      ends = now + lease
      count = count + redis.call('ZADD', key, ends, id)
      write = true
    end
  else
    -- The lease whose end leaves fewer than limit (the earliest, unless
    -- a lower limit than the one that admitted them now applies).
    local e = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
    retry = tonumber(e[2]) - now
  end
  local reset = 0
  if count > 0 then
    local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = tonumber(e[2]) - now
    if write then redis.call('PEXPIRE', key, math.ceil(reset / 1000) + TTL_MARGIN_MS) end
  end
  return allowed, math.max(0, limit - count), retry, reset, ends, expired
end

local function flush() end -- every decision wrote its own state

return { decide = decide, flush = flush, readsFirst = false }

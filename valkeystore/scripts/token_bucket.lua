-- Token bucket: up to capacity tokens, earned continuously at rate.
-- State under key: a hash {t = tokens, ts = time of t}.
-- decide(key, now, capacity, rate, cost): rate in tokens per microsecond.
-- now is in microseconds; cost 0 peeks, a negative cost refunds. decide
-- returns allowed (1/0), remaining, retry_after_us and reset_after_us; the
-- driver (batch.lua) runs it for every key of a call, after prelude.lua.
-- Mirrors tokenBucket in memstore/algo.go, operation for operation.
local LOOPS = 64 -- bound of the search for the first allowed microsecond
-- A key decided several times in one call (a hot key's queued requests) is
-- read once and written once, by flush: states[key] is {tokens, ts}, or
-- false for none; pending[key] the PEXPIRE to write, or 0 to delete.
local states, pending = {}, {}
local function decide(key, now, cap, rate, cost, _)
  local st = states[key]
  if st == nil then
    local h = redis.call('HMGET', key, 't', 'ts')
    st = h[1] and { tonumber(h[1]), tonumber(h[2]) } or false
    states[key] = st
  end
  local tokens, stored, from = cap, cap, now
  if st then
    stored, from = st[1], st[2]
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
      states[key], pending[key] = false, 0
    else
      states[key], pending[key] = { tokens, now }, math.ceil(reset / 1000) + TTL_MARGIN_MS
    end
  end
  return allowed, math.floor(tokens), retry, reset
end

local function flush() flushHashes({ 't', 'ts' }, states, pending) end

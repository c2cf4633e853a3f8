-- GCRA: the theoretical arrival time (TAT) of the next request.
-- State under key: a string, the TAT in microseconds.
-- decide(key, now, burst, interval, cost): interval in microseconds between
-- requests.
-- now is in microseconds; cost 0 peeks, a negative cost refunds the take
-- whose receipt (the TAT it wrote) is still the TAT. decide
-- returns allowed (1/0), remaining, retry_after_us and reset_after_us; the
-- driver (batch.lua) runs it for every key of a call, after prelude.lua.
-- Mirrors gcra in memstore/algo.go.
-- A key decided several times in one call (a hot key's queued requests) is
-- read once and written once, by flush: tats[key] is the TAT, or false for
-- none; pending[key] the PX to write, or 0 to delete.
-- decide only reads; every write waits for flush (readsFirst: cross.lua
-- relies on it).
local tats, pending = {}, {}
local function decide(key, now, burst, interval, cost, _, receipt)
  local tat = now
  local v = tats[key]
  if v == nil then
    v = redis.call('GET', key)
    v = v and tonumber(v) or false
    tats[key] = v
  end
  if v and v > now then tat = v end
  local tau = interval * burst
  local allowed, retry, write = 0, 0, false
  if cost < 0 then
    -- Undo the take whose receipt (the TAT it wrote) is still the TAT, as
    -- if it had not happened; after any later take, nothing.
    allowed = 1
    if v and v == receipt then
      tat = math.max(now, tat + cost * interval)
      write = true
    end
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
      tats[key], pending[key] = false, 0
    else
      tats[key], pending[key] = tat, math.ceil(reset / 1000) + TTL_MARGIN_MS
    end
  end
  return allowed, math.max(0, idiv(math.max(0, now - tat + tau), interval)), retry, reset, tat
end

local function flush()
  for key, px in pairs(pending) do
    if px == 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, tats[key], 'PX', px)
    end
  end
end

return { decide = decide, flush = flush, readsFirst = true }

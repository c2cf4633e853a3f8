-- Fixed window: a counter per aligned window.
-- State under key: a hash {w = window number, c = count in window w}.
-- decide(key, now, limit, window, cost): window in microseconds.
-- now is in microseconds; cost 0 peeks, a negative cost refunds. decide
-- returns allowed (1/0), remaining, retry_after_us and reset_after_us; the
-- driver (batch.lua) runs it for every key of a call, after prelude.lua.
-- Mirrors fixedWindow in memstore/algo.go.
local function decide(key, now, limit, window, cost, _)
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
  return allowed, limit - c, retry, reset
end

local function flush() end -- every decision wrote its own state

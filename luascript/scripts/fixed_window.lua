-- Fixed window: a counter per aligned window.
-- State under key: w = window number and c = count in window w, packed
-- '<i8i8' (readPacked in prelude.lua).
-- decide(key, now, limit, window, cost, flag): window in microseconds.
-- now is in microseconds; cost 0 peeks, a negative cost refunds what the
-- take with that receipt (its time) took, if that was in this window, else
-- nothing: never a newer window's units. flag 1
-- counts refused requests too (CountRejected): the count then grows by
-- every positive cost and may pass limit; remaining never goes below 0. decide
-- returns allowed (1/0), remaining, retry_after_us and reset_after_us; the
-- driver (batch.lua) runs it for every key of a call, after prelude.lua.
-- Mirrors fixedWindow in memstore/algo.go.
-- A key decided several times in one call (a hot key's queued requests) is
-- read once and written once, by flush: states[key] is {w, c}, or false for
-- none; pending[key] the PX to write, or 0 to delete.
-- decide only reads; every write waits for flush (readsFirst: cross.lua
-- relies on it).
local states, pending = {}, {}
-- decideSpan decides in the window [start, stop) named idx.
local function decideSpan(key, now, idx, start, stop, limit, cost, flag, receipt)
  local st = states[key]
  if st == nil then
    st = readPacked(key, '<i8i8')
    states[key] = st
  end
  local c = 0
  if st and st[1] == idx then c = st[2] end
  local reset = stop - now
  local allowed, retry, write = 0, 0, false
  if cost < 0 then
    allowed = 1
    if c > 0 and start <= receipt and receipt < stop then
      c = math.max(0, c + cost)
      if c > 0 then write = true else states[key], pending[key] = false, 0 end
    end
  elseif c + math.max(cost, 1) <= limit then
    allowed = 1
    if cost > 0 then
      c = c + cost
      write = true
    end
  else
    retry = reset
    if flag == 1 and cost > 0 then
      c = c + cost
      write = true
    end
  end
  if write then
    states[key], pending[key] = { idx, c }, math.ceil(reset / 1000) + TTL_MARGIN_MS
  end
  if c == 0 then reset = 0 end
  return allowed, math.max(0, limit - c), retry, reset
end

local function decide(key, now, limit, window, cost, flag, receipt)
  local idx = math.floor(now / window)
  return decideSpan(key, now, idx, idx * window, (idx + 1) * window, limit, cost, flag, receipt)
end

local function flush() flushPacked('<i8i8', states, pending) end

-- decideSpan is for calendar.lua too.
return { decide = decide, flush = flush, readsFirst = true, decideSpan = decideSpan }

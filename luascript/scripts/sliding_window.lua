-- Sliding window counter: the current and the previous aligned window's
-- counts, the previous one weighted by its overlap with the sliding window.
-- State under key: w = window number of c, c = count in window w and
-- p = count in window w-1, packed '<i8i8i8' (readPacked in prelude.lua).
-- decide(key, now, limit, window, cost): window in microseconds.
-- now is in microseconds; cost 0 peeks, a negative cost refunds the window
-- its take (receipt: the take's time) counted in, if it still counts. decide
-- returns allowed (1/0), remaining, retry_after_us and reset_after_us; the
-- driver (batch.lua) runs it for every key of a call, after prelude.lua.
-- Mirrors slidingWindow and swRetry in memstore/algo.go, operation for
-- operation, so that both compute the same doubles.
-- decide only reads; every write waits for flush (readsFirst: cross.lua
-- relies on it).
local LOOPS = 64 -- bound of the search for the first allowed microsecond
-- A key decided several times in one call (a hot key's queued requests) is
-- read once and written once, by flush: states[key] is {w, c, p}, or false
-- for none; pending[key] the PX to write, or 0 to delete.
local states, pending = {}, {}
local window -- of the decision being made, for estimate
local function estimate(p, c, e)
  return p * ((window - e) / window) + c
end
local function decide(key, now, limit, win, cost, _, receipt)
  window = win
  local idx = math.floor(now / window)
  local elapsed = now - idx * window
  local cur, prev = 0, 0
  local st = states[key]
  if st == nil then
    st = readPacked(key, '<i8i8i8')
    states[key] = st
  end
  if st then
    local w = st[1]
    if w >= idx then -- w > idx only when a client clock went back
      cur, prev = st[2], st[3]
    elseif w == idx - 1 then
      prev = st[2]
    end
  end
  local allowed, retry, write = 0, 0, false
  if cost < 0 then
    -- Back to the window the take counted in (receipt is its time), never
    -- a newer one.
    allowed = 1
    local from = math.floor(receipt / window)
    if from == idx and cur > 0 then
      cur = math.max(0, cur + cost)
      write = true
    elseif from == idx - 1 and prev > 0 then
      prev = math.max(0, prev + cost)
      write = true
    end
  else
    local need = math.max(cost, 1)
    if estimate(prev, cur, elapsed) + need <= limit then
      allowed = 1
      if cost > 0 then
        cur = cur + cost
        write = true
      end
    else
      local left = window - elapsed
      if cur + need <= limit then
        local t = math.max(math.ceil(left - (limit - cur - need) * window / prev), 0)
        local j = 0
        while j < LOOPS and t < left and estimate(prev, cur, elapsed + t) + need > limit do
          t = t + 1
          j = j + 1
        end
        if t < left and estimate(prev, cur, elapsed + t) + need <= limit then
          retry = t
        else
          retry = left
        end
      else
        local t = math.max(math.ceil(window - (limit - need) * window / cur), 0)
        local j = 0
        while j < LOOPS and t < window and estimate(cur, 0, t) + need > limit do
          t = t + 1
          j = j + 1
        end
        if t < window and estimate(cur, 0, t) + need <= limit then
          retry = left + t
        else
          retry = left + window
        end
      end
    end
  end
  local remaining = math.max(0, math.floor(limit - estimate(prev, cur, elapsed)))
  local reset = 0
  if cur > 0 then
    reset = 2 * window - elapsed
  elseif prev > 0 then
    reset = window - elapsed
  end
  if write then
    if reset == 0 then
      states[key], pending[key] = false, 0
    else
      states[key], pending[key] = { idx, cur, prev }, math.ceil(reset / 1000) + TTL_MARGIN_MS
    end
  end
  return allowed, remaining, retry, reset
end

local function flush() flushPacked('<i8i8i8', states, pending) end

return { decide = decide, flush = flush, readsFirst = true }

-- Token bucket: up to capacity tokens, one earned every interval
-- microseconds, in whole microseconds of credit: exact integer arithmetic.
-- State under key: u = credit in microseconds (interval per token, at most
-- capacity × interval) and ts = time of u, packed '<i8i8' (readPacked in
-- prelude.lua). A full bucket has no key.
-- decide(key, now, capacity, interval, cost): interval in microseconds.
-- now is in microseconds; cost 0 peeks, a negative cost refunds the take
-- with that receipt (its time) if no later decision wrote the key. decide
-- returns allowed (1/0), remaining, retry_after_us and reset_after_us; the
-- driver (batch.lua) runs it for every key of a call, after prelude.lua.
-- Mirrors tokenBucket in memstore/algo.go.
-- A key decided several times in one call (a hot key's queued requests) is
-- read once and written once, by flush: states[key] is {u, ts}, or false for
-- none; pending[key] the PX to write, or 0 to delete.
-- decide only reads; every write waits for flush (readsFirst: cross.lua
-- relies on it).
local states, pending = {}, {}
local function decide(key, now, cap, interval, cost, _, receipt)
  local st = states[key]
  if st == nil then
    st = readPacked(key, '<i8i8')
    states[key] = st
  end
  local full = cap * interval
  local base, from = full, now -- credit base at time from
  if st then base, from = st[1], st[2] end
  local credit = math.min(full, base + math.max(0, now - from))
  local allowed, retry, write = 0, 0, false
  if cost < 0 then
    -- Undo the take whose receipt (its time) is still the time of the
    -- state, as if it had not happened; after any later write, nothing.
    allowed = 1
    if st and from == receipt then
      base = math.min(full, base - cost * interval)
      credit = math.min(full, base + math.max(0, now - from))
      states[key] = { base, from }
      if credit >= full then
        states[key], pending[key] = false, 0
      else
        pending[key] = math.ceil((from + full - base - now) / 1000) + TTL_MARGIN_MS
      end
    end
  else
    local need = math.max(cost, 1) * interval
    if credit >= need then
      allowed = 1
      if cost > 0 then
        credit = credit - cost * interval
        write = true
      end
    else
      retry = from + need - base - now
    end
  end
  if write then base, from = credit, now end
  local reset = math.max(0, from + full - base - now)
  if write then
    if reset == 0 then
      states[key], pending[key] = false, 0
    else
      states[key], pending[key] = { credit, now }, math.ceil(reset / 1000) + TTL_MARGIN_MS
    end
  end
  return allowed, idiv(math.max(0, credit), interval), retry, reset -- none while in debt (settle.lua)
end

local function flush() flushPacked('<i8i8', states, pending) end

return { decide = decide, flush = flush, readsFirst = true }

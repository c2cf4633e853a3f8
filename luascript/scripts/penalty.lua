-- Penalties (driver.Penalty): refusals of a key counted in a window, and
-- blocks that grow while remembered. Mirrors penalty.go in memstore.
-- State under a penalty key (driver.PenaltyKey, in the decision key's
-- slot): '<i8i8i8i8', the refusal window's start and its count of
-- refusals (0 and 0 when none is open), the end of the last block
-- (microseconds, 0 for none) and the level, the number of blocks in a row.
-- Read once per call, written once by penaltyFlush after every decision
-- of the call (decide may only read: see readsFirst in cross.lua).
local penStates, penPending = {}, {}

local function penaltyState(key)
  local st = penStates[key]
  if st == nil then
    st = readPacked(key, '<i8i8i8i8') or { 0, 0, 0, 0 }
    penStates[key] = st
  end
  return st
end

-- penaltyUntil returns the end of key's block, when it is later than now;
-- else 0.
local function penaltyUntil(key, now)
  local u = penaltyState(key)[3]
  if u > now then return u end
  return 0
end

-- penaltyRefused counts a refusal at now of a request of positive cost,
-- and returns the length of the block it starts, or 0. longest is the
-- longest block (MaxBlock, or Block), forgive the memory (0 without
-- growth).
local function penaltyRefused(key, now, after, within, block, longest, forgive)
  local st = penaltyState(key)
  local ws, c, u, lv = st[1], st[2], st[3], st[4]
  if c == 0 or now - ws >= within then ws, c = now, 0 end
  c = c + 1
  local d = 0
  if c >= after then
    if now - u >= forgive then lv = 0 end -- forgiven (or never blocked)
    lv = lv + 1
    d = block
    for _ = 2, lv do
      if d >= longest then break end
      d = math.min(2 * d, longest)
    end
    u, ws, c = now + d, 0, 0
  end
  penStates[key] = { ws, c, u, lv }
  -- Kept while its window is open, its block in force or its level
  -- remembered, whichever ends last.
  local keep = u + forgive
  if c > 0 then keep = math.max(keep, ws + within) end
  penPending[key] = math.ceil((keep - now) / 1000) + TTL_MARGIN_MS
  return d
end

local function penaltyFlush() flushPacked('<i8i8i8i8', penStates, penPending) end

-- Fixed window over calendar periods: given the fixed window's algorithm
-- (fixed_window.lua's table, in ...), whose decideSpan it uses and whose
-- flush writes what that kept. The parameter is not a window but the first
-- instants of four consecutive periods, in microseconds, in a table
-- (sluice.Rule.CalendarBounds): the client computes them in the period's
-- time zone around its own clock, and the script picks the period that
-- holds now (the server's TIME by default). The window is named by its
-- first instant; keys expire at the period's end plus the margin. When now
-- is outside the four, decide returns allowed = 2 (clock skew), which the
-- client reports as an error. Mirrors calendarWindow in memstore/algo.go.
-- Like fixed_window.lua's, decide only reads (readsFirst).
local fixedWindow = ...
local decideSpan = fixedWindow.decideSpan
local function decide(key, now, limit, b, cost, flag, receipt)
  for i = 1, #b - 1 do
    if b[i] <= now and now < b[i + 1] then
      return decideSpan(key, now, b[i], b[i], b[i + 1], limit, cost, flag, receipt)
    end
  end
  return 2, 0, 0, 0
end

return { decide = decide, flush = fixedWindow.flush, readsFirst = fixedWindow.readsFirst }

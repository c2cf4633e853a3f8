-- Fixed window over calendar periods: loaded after fixed_window.lua, whose
-- decideSpan it uses, and replaces its decide. The parameter is not a
-- window but the first instants of four consecutive periods, in
-- microseconds, separated by spaces (sluice.Rule.CalendarBounds): the
-- client computes them in the period's time zone around its own clock, and
-- the script picks the period that holds now (the server's TIME by
-- default). The window is named by its first instant; keys expire at the
-- period's end plus the margin. When now is outside the four, decide
-- returns allowed = 2 (clock skew), which the client reports as an error.
-- Mirrors calendarWindow in memstore/algo.go. Like fixed_window.lua's,
-- decide only reads (readsFirst).
local function decide(key, now, limit, bounds, cost, flag, receipt)
  local b, n = {}, 0
  for v in string.gmatch(bounds, '%-?%d+') do
    n = n + 1
    b[n] = tonumber(v)
  end
  for i = 1, n - 1 do
    if b[i] <= now and now < b[i + 1] then
      return decideSpan(key, now, b[i], b[i], b[i + 1], limit, cost, flag, receipt)
    end
  end
  return 2, 0, 0, 0
end
